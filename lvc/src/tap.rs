//! The Espresso tap inspector's logic (filter, sampling, per-prefix rates), kept free of sockets so it is tested
//! directly; `tickbox tap` owns the socket and the clock. The tap's framing and its drop modes are described in
//! [`tickbox_wire::tap`].

use std::collections::BTreeMap;

use tickbox_wire::tap::TapFrame;
use tickbox_wire::{Flags, Kind, MessageRef, Payload};

/// Which decoded messages the inspector shows: kinds (empty: all) and 1-in-`sample` of what passes.
/// Topic prefixes are applied by the SUB socket's subscriptions, before any byte reaches us.
#[derive(Debug, Clone)]
pub struct TapFilter {
    kinds: Vec<Kind>,
    sample: u64,
    seen: u64,
}

impl TapFilter {
    /// `sample` of 0 or 1 shows everything.
    pub fn new(kinds: Vec<Kind>, sample: u64) -> Self {
        Self {
            kinds,
            sample: sample.max(1),
            seen: 0,
        }
    }

    /// Whether to show a message that has no tickbox kind (a Guide envelope): never when kinds are selected,
    /// else sampled like the rest.
    pub fn admit_other(&mut self) -> bool {
        if !self.kinds.is_empty() {
            return false;
        }
        self.seen += 1;
        (self.seen - 1).is_multiple_of(self.sample)
    }

    /// Whether to show this message. Sampling counts only messages of the selected kinds, so `--sample 10`
    /// shows every tenth trade, not every tenth message that happens to be a trade.
    pub fn admit(&mut self, msg: &MessageRef<'_>) -> bool {
        if !self.kinds.is_empty() && !self.kinds.contains(&msg.kind()) {
            return false;
        }
        self.seen += 1;
        (self.seen - 1).is_multiple_of(self.sample)
    }
}

/// How the proxy frames what it emits on the tap (`[lvc] tap_framing`, `tickbox lvc --tap-framing`).
///
/// With [`Guide`](Framing::Guide) every tapped message is the Guide's two-frame capture, `[topic][value]`,
/// so a plain ZeroMQ SUB reads the tap as it would read a Guide publisher, and its prefix subscriptions filter on
/// the topic frame alone:
///
/// - a tickbox frame: the topic frame is its topic (the bytes before its first NUL); the value frame is the
///   whole tickbox frame, unchanged (topic, header, payload: nothing is lost, and the value alone is exactly
///   what the tickbox framing would have sent);
/// - a subscription event: the topic frame is the single byte `0x00` (the event marker), the value frame the
///   event frame of the tickbox framing (`0x00 0x01 prefix` / `0x00 0x00 prefix`), so subscribing to `"\0"`
///   still selects only events and a data prefix never matches them;
/// - a multipart message from a plain ZeroMQ publisher already is `[topic][value…]` and passes as it came;
/// - a lone frame that is not a tickbox frame (forwarded only under `malformed = "forward"`): topic frame as for
///   a tickbox frame (the bytes before its first NUL, the whole frame if it has none), value the frame itself.
///
/// Cost: one extra small frame per message (a topic of up to 33 bytes is copied into libzmq's message, no
/// allocation); the value frame shares the received buffer as in the tickbox framing.
///
/// `[lvc] tap_framing` is a [`Framing`]: `tickbox` (the default) or `guide`; `auto` is refused (a reader's choice).
pub use tickbox_wire::Framing;

/// The topic frame [`Framing::Guide`] puts before a tickbox tap frame: the event marker alone for an event,
/// else the bytes before the first NUL (a tickbox frame's topic), or the whole frame when it has no NUL.
pub fn guide_topic(frame: &[u8]) -> &[u8] {
    match frame.first() {
        Some(&tickbox_wire::tap::EVENT_MARKER) => &frame[..1],
        _ => match frame.iter().position(|&b| b == 0) {
            Some(end) => &frame[..end],
            None => frame,
        },
    }
}

/// The tickbox tap frame inside a `[topic][value]` capture written by [`Framing::Guide`], when it is one: the
/// value is a tap event under the topic `0x00`, or a tickbox frame whose own topic is the topic frame. `None` for
/// anything else (a plain publisher's envelope, whose value is opaque).
pub fn unwrap_guide<'a>(topic: &[u8], value: &'a [u8]) -> Option<&'a [u8]> {
    match TapFrame::classify(value) {
        Ok(TapFrame::Subscribe(_) | TapFrame::Unsubscribe(_))
            if topic == [tickbox_wire::tap::EVENT_MARKER] =>
        {
            Some(value)
        }
        Ok(TapFrame::Message(m)) if m.topic().as_bytes() == topic => Some(value),
        _ => None,
    }
}

/// One inspector line for a Guide envelope: the topic (text, or hex if it is not printable), the body's frame
/// count and size, and the start of the body (text if printable, else hex).
pub fn describe_guide(parts: &[Vec<u8>]) -> String {
    const PREVIEW: usize = 48;
    fn show(bytes: &[u8], limit: usize) -> String {
        let cut = &bytes[..bytes.len().min(limit)];
        let more = if bytes.len() > limit { "…" } else { "" };
        match std::str::from_utf8(cut) {
            Ok(text) if !text.chars().any(char::is_control) => format!("{text}{more}"),
            _ => {
                let hex: String = cut.iter().map(|b| format!("{b:02x}")).collect();
                format!("0x{hex}{more}")
            }
        }
    }
    let topic = parts.first().map_or(String::new(), |t| show(t, 64));
    let body = parts.get(1..).unwrap_or(&[]);
    let bytes: usize = body.iter().map(Vec::len).sum();
    let preview: Vec<String> = body.iter().map(|f| show(f, PREVIEW)).collect();
    format!(
        "{topic:<20} {:<10} {} frame(s) {bytes} bytes | {}",
        "guide",
        body.len(),
        preview.join(" | ")
    )
}

/// Parses a kind name as `--kinds` takes it (`quote`, `trade`, `heartbeat`, `book_level`; also `book`, and the
/// topic letters `Q`, `T`, `H`, `B`).
pub fn parse_kind(name: &str) -> Option<Kind> {
    let name = name.trim();
    Kind::ALL.into_iter().find(|k| {
        k.name().eq_ignore_ascii_case(name)
            || (name.len() == 1 && name.starts_with(k.topic_letter()))
            || (*k == Kind::BookLevel && name.eq_ignore_ascii_case("book"))
    })
}

/// One row of the `--top` table.
#[derive(Debug, Clone, PartialEq)]
pub struct RateRow {
    /// The topic prefix (first `depth` parts), or `<sub>`, `<unsub>`, `<malformed>`.
    pub prefix: String,
    /// Messages in the last complete window.
    pub messages: u64,
    /// Bytes in the last complete window.
    pub bytes: u64,
    /// `messages` divided by the window length in seconds.
    pub per_second: f64,
    /// Messages since the table was created.
    pub total: u64,
}

/// Per-prefix message rates over fixed windows, for `tickbox tap --top`.
///
/// The prefix of a topic is its first `depth` dot-separated parts (`Q.XNAS` at depth 2). Subscription events
/// count under `<sub>` / `<unsub>`, undecodable frames under `<malformed>`.
#[derive(Debug)]
pub struct RateTable {
    depth: usize,
    window_ns: u64,
    window_start_ns: u64,
    rows: BTreeMap<String, (u64, u64, u64)>,
}

impl RateTable {
    /// A table grouping by the first `depth` topic parts over windows of `window_ns`, starting at `now_ns`.
    pub fn new(depth: usize, window_ns: u64, now_ns: u64) -> Self {
        Self {
            depth: depth.max(1),
            window_ns: window_ns.max(1),
            window_start_ns: now_ns,
            rows: BTreeMap::new(),
        }
    }

    /// Counts one tap frame.
    pub fn record(&mut self, frame: &[u8]) {
        let key = match TapFrame::classify(frame) {
            Ok(TapFrame::Subscribe(_)) => "<sub>",
            Ok(TapFrame::Unsubscribe(_)) => "<unsub>",
            Ok(TapFrame::Message(msg)) => {
                let topic = msg.topic();
                let end = topic
                    .match_indices('.')
                    .nth(self.depth - 1)
                    .map_or(topic.len(), |(i, _)| i);
                &topic[..end]
            }
            Err(_) => "<malformed>",
        };
        // Allocates only the first time a prefix is seen.
        let row = match self.rows.get_mut(key) {
            Some(row) => row,
            None => self.rows.entry(key.to_owned()).or_default(),
        };
        row.0 += 1;
        row.1 += frame.len() as u64;
        row.2 += 1;
    }

    /// Counts one Guide envelope under its topic frame's prefix (all its frames' bytes).
    pub fn record_guide(&mut self, parts: &[Vec<u8>]) {
        let topic = parts
            .first()
            .and_then(|t| std::str::from_utf8(t).ok())
            .unwrap_or("<binary>");
        let end = topic
            .match_indices('.')
            .nth(self.depth - 1)
            .map_or(topic.len(), |(i, _)| i);
        let key = &topic[..end];
        let row = match self.rows.get_mut(key) {
            Some(row) => row,
            None => self.rows.entry(key.to_owned()).or_default(),
        };
        row.0 += 1;
        row.1 += parts.iter().map(|p| p.len() as u64).sum::<u64>();
        row.2 += 1;
    }

    /// When a window has ended by `now_ns`, returns its rows (busiest first) and starts the next window.
    pub fn tick(&mut self, now_ns: u64) -> Option<Vec<RateRow>> {
        let elapsed = now_ns.saturating_sub(self.window_start_ns);
        if elapsed < self.window_ns {
            return None;
        }
        let seconds = elapsed as f64 / 1e9;
        let mut rows: Vec<RateRow> = self
            .rows
            .iter_mut()
            .map(|(prefix, (messages, bytes, total))| {
                let row = RateRow {
                    prefix: prefix.clone(),
                    messages: *messages,
                    bytes: *bytes,
                    per_second: *messages as f64 / seconds,
                    total: *total,
                };
                *messages = 0;
                *bytes = 0;
                row
            })
            .collect();
        rows.sort_by(|a, b| {
            b.messages
                .cmp(&a.messages)
                .then_with(|| a.prefix.cmp(&b.prefix))
        });
        self.window_start_ns = now_ns;
        Some(rows)
    }
}

/// Renders `--top` rows as a fixed-width table.
pub fn render_rates(rows: &[RateRow]) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<24} {:>12} {:>14} {:>14}",
        "prefix", "msg/s", "bytes/s", "total"
    );
    for row in rows {
        let bytes_per_second = if row.messages == 0 {
            0.0
        } else {
            row.per_second * row.bytes as f64 / row.messages as f64
        };
        let _ = writeln!(
            out,
            "{:<24} {:>12.0} {:>14.0} {:>14}",
            row.prefix, row.per_second, bytes_per_second, row.total
        );
    }
    out
}

/// How `--top` tables follow each other.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TopOutput {
    /// One table after another, plain text (a pipe or a file keeps every one).
    Append,
    /// Each table replaces the previous one on a terminal.
    InPlace,
}

/// Cursor to the top-left corner of the terminal.
const CURSOR_HOME: &str = "\x1b[H";
/// Erase from the cursor to the end of its line.
const ERASE_LINE: &str = "\x1b[K";
/// Erase from the cursor to the end of the screen.
const ERASE_BELOW: &str = "\x1b[J";

/// One `--top` frame: the rate table and, when sequences are checked, the gap count. In place, the cursor goes
/// home first and every line erases what the previous frame left to its right, and the screen below the table is
/// erased last: the table is overwritten, never cleared first, so it does not flicker.
pub fn render_top(rows: &[RateRow], missed: Option<u64>, output: TopOutput) -> String {
    use std::fmt::Write;
    let mut text = render_rates(rows);
    if let Some(missed) = missed {
        let _ = writeln!(text, "missed {missed} (per-publisher sequence gaps)");
    }
    match output {
        TopOutput::Append => {
            text.push('\n');
            text
        }
        TopOutput::InPlace => {
            let mut out = String::with_capacity(text.len() + 64);
            out.push_str(CURSOR_HOME);
            for line in text.lines() {
                out.push_str(line);
                out.push_str(ERASE_LINE);
                out.push('\n');
            }
            out.push_str(ERASE_BELOW);
            out
        }
    }
}

/// One inspector line per message: topic, kind, who/when, flags (`CACHED`, `REPLAY`), then the payload's fields.
pub fn describe(m: &MessageRef<'_>) -> String {
    let h = m.header();
    let mut flags = String::new();
    if h.flags.contains(Flags::CACHED) {
        flags.push_str(" CACHED");
    }
    if h.flags.contains(Flags::REPLAY) {
        flags.push_str(" REPLAY");
    }
    let payload = match m.payload() {
        Ok(Payload::Quote(q)) => format!(
            "bid {}x{} ask {}x{}",
            format_price(q.bid_px),
            q.bid_size,
            format_price(q.ask_px),
            q.ask_size
        ),
        Ok(Payload::Trade(t)) => format!(
            "{} @ {} {:?} id {}",
            t.size,
            format_price(t.price),
            t.aggressor,
            t.trade_id
        ),
        Ok(Payload::Heartbeat(hb)) => {
            format!("interval {} ns, sent {}", hb.interval_ns, hb.messages_sent)
        }
        Ok(Payload::BookLevel(b)) => {
            format!(
                "{:?} L{} {}x{} ({} orders)",
                b.side,
                b.level,
                format_price(b.price),
                b.size,
                b.order_count
            )
        }
        Ok(Payload::Gap(g)) => format!(
            "missing {}..={} ({} messages)",
            g.first_missing,
            g.last_missing,
            g.missing()
        ),
        Err(err) => format!("<{err}>"),
    };
    format!(
        "{:<20} {:<10} pub {} seq {} sent {}{} | {}",
        m.topic(),
        m.kind().name(),
        h.publisher_id,
        h.sequence,
        h.send_time_ns,
        flags,
        payload
    )
}

/// A wire fixed-point price ([`tickbox_wire::PRICE_SCALE`] per unit) in currency units with four decimals
/// (enough to read prices; the wire keeps nine), truncated.
pub fn format_price(fixed: i64) -> String {
    let scale = tickbox_wire::PRICE_SCALE;
    let sign = if fixed < 0 { "-" } else { "" };
    let abs = fixed.unsigned_abs();
    let whole = abs / scale as u64;
    let frac = abs % scale as u64;
    format!("{sign}{whole}.{:04}", frac / 100_000)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tickbox_wire::tap::encode_event;
    use tickbox_wire::{encode_to_vec, Header, Payload, Quote};

    fn frame(topic: &str, kind: Kind) -> Vec<u8> {
        let payload = match kind {
            Kind::Quote => Payload::Quote(Quote::default()),
            Kind::Trade => Payload::Trade(Default::default()),
            Kind::Heartbeat => Payload::Heartbeat(Default::default()),
            Kind::BookLevel => Payload::BookLevel(Default::default()),
            Kind::Gap => Payload::Gap(Default::default()),
        };
        encode_to_vec(topic, &Header::live(kind, 1, 1, 1), &payload).unwrap()
    }

    #[test]
    fn filter_by_kind_then_sample() {
        let q = frame("Q.X.A", Kind::Quote);
        let t = frame("T.X.A", Kind::Trade);
        let (q, t) = (
            MessageRef::decode(&q).unwrap(),
            MessageRef::decode(&t).unwrap(),
        );
        let mut f = TapFilter::new(vec![Kind::Trade], 3);
        let shown: Vec<bool> = (0..7)
            .map(|i| f.admit(if i % 2 == 0 { &q } else { &t }))
            .collect();
        // Trades at i = 1, 3, 5: the 1st and 4th trade are shown; quotes never.
        assert_eq!(shown, [false, true, false, false, false, false, false]);
        let mut all = TapFilter::new(vec![], 0);
        assert!(all.admit(&q) && all.admit(&t));
    }

    #[test]
    fn framing_per_message() {
        let q = frame("Q.X.A", Kind::Quote);
        let mut ev = Vec::new();
        encode_event(&mut ev, b"\x01Q.");
        // Auto: only a multipart message led by something other than a tickbox frame is a Guide envelope.
        assert!(Framing::Auto.reads_as_guide(b"A", true));
        assert!(!Framing::Auto.reads_as_guide(b"A", false));
        assert!(!Framing::Auto.reads_as_guide(&q, true));
        assert!(!Framing::Auto.reads_as_guide(&q, false));
        // Guide: everything but the tap's own events; Tickbox: nothing.
        assert!(Framing::Guide.reads_as_guide(b"A", false));
        assert!(Framing::Guide.reads_as_guide(&q, true));
        assert!(!Framing::Guide.reads_as_guide(&ev, false));
        assert!(!Framing::Tickbox.reads_as_guide(b"A", true));
        assert_eq!("GUIDE".parse::<Framing>(), Ok(Framing::Guide));
        assert!("espresso".parse::<Framing>().is_err());
        let line = describe_guide(&[b"A.7".to_vec(), b"price=101".to_vec(), vec![0, 1, 255]]);
        assert!(line.starts_with("A.7 "), "{line}");
        assert!(
            line.contains("2 frame(s) 12 bytes | price=101 | 0x0001ff"),
            "{line}"
        );
        let mut table = RateTable::new(1, 1, 0);
        table.record_guide(&[b"A.7".to_vec(), b"xy".to_vec()]);
        let rows = table.tick(10).unwrap();
        assert_eq!((rows[0].prefix.as_str(), rows[0].bytes), ("A", 5));
        let mut f = TapFilter::new(vec![Kind::Trade], 1);
        assert!(!f.admit_other());
        let mut f = TapFilter::new(vec![], 2);
        assert_eq!(
            [f.admit_other(), f.admit_other(), f.admit_other()],
            [true, false, true]
        );
    }

    #[test]
    fn guide_capture_round_trips_frames_and_events() {
        let q = frame("Q.X.A", Kind::Quote);
        assert_eq!(guide_topic(&q), b"Q.X.A");
        assert_eq!(unwrap_guide(b"Q.X.A", &q), Some(q.as_slice()));
        // A topic frame that is not the frame's own topic is a plain envelope, not a capture.
        assert_eq!(unwrap_guide(b"Q.X", &q), None);
        let mut ev = Vec::new();
        encode_event(&mut ev, b"\x01Q.");
        assert_eq!(guide_topic(&ev), b"\0");
        assert_eq!(unwrap_guide(b"\0", &ev), Some(ev.as_slice()));
        assert_eq!(unwrap_guide(b"", &ev), None);
        assert_eq!(unwrap_guide(b"A.7", b"price=101"), None);
        assert_eq!(guide_topic(b"no-nul"), b"no-nul");
        assert_eq!("Guide".parse::<Framing>(), Ok(Framing::Guide));
        // The tap writes: `auto` (a reader's choice) is refused for it.
        assert!("auto".parse::<Framing>().unwrap().for_writer().is_err());
    }

    #[test]
    fn kind_names() {
        assert_eq!(parse_kind("quote"), Some(Kind::Quote));
        assert_eq!(parse_kind("T"), Some(Kind::Trade));
        assert_eq!(parse_kind("book"), Some(Kind::BookLevel));
        assert_eq!(parse_kind("book_level"), Some(Kind::BookLevel));
        assert_eq!(parse_kind("nope"), None);
    }

    #[test]
    fn rates_per_prefix_per_window() {
        let mut table = RateTable::new(2, 1_000_000_000, 0);
        for _ in 0..30 {
            table.record(&frame("Q.XNAS.AAPL", Kind::Quote));
        }
        for _ in 0..10 {
            table.record(&frame("T.XNYS.IBM", Kind::Trade));
        }
        let mut ev = Vec::new();
        encode_event(&mut ev, b"\x01Q.");
        table.record(&ev);
        table.record(b"junk");
        assert_eq!(table.tick(999_999_999), None);
        let rows = table.tick(2_000_000_000).unwrap();
        let names: Vec<&str> = rows.iter().map(|r| r.prefix.as_str()).collect();
        assert_eq!(names, ["Q.XNAS", "T.XNYS", "<malformed>", "<sub>"]);
        assert_eq!(rows[0].messages, 30);
        assert!((rows[0].per_second - 15.0).abs() < 1e-9);
        let text = render_rates(&rows);
        assert!(text.contains("Q.XNAS") && text.lines().count() == 5);
        // The next window starts empty but keeps totals.
        let rows = table.tick(3_000_000_000).unwrap();
        assert!(rows.iter().all(|r| r.messages == 0));
        assert_eq!(
            rows.iter().find(|r| r.prefix == "Q.XNAS").unwrap().total,
            30
        );
    }

    #[test]
    fn top_frames_append_plainly_or_overwrite_in_place() {
        let rows = vec![RateRow {
            prefix: "Q.XNAS".into(),
            messages: 10,
            bytes: 1000,
            per_second: 10.0,
            total: 10,
        }];
        let plain = render_top(&rows, Some(2), TopOutput::Append);
        assert!(!plain.contains('\x1b'), "{plain:?}");
        assert!(
            plain.ends_with("missed 2 (per-publisher sequence gaps)\n\n"),
            "{plain:?}"
        );
        let framed = render_top(&rows, None, TopOutput::InPlace);
        assert!(framed.starts_with("\x1b[Hprefix "), "{framed:?}");
        assert!(framed.ends_with("\x1b[K\n\x1b[J"), "{framed:?}");
        assert_eq!(
            framed.matches("\x1b[K\n").count(),
            2,
            "every line erases its tail"
        );
        assert!(!framed.contains("missed"));
    }

    #[test]
    fn prices_render_in_currency_units() {
        assert_eq!(format_price(101_250_000_000), "101.2500");
        assert_eq!(format_price(-1_500_000_000), "-1.5000");
        assert_eq!(format_price(0), "0.0000");
    }

    #[test]
    fn describe_shows_topic_kind_identity_and_fields() {
        let q = Quote {
            bid_px: 101_250_000_000,
            bid_size: 3,
            ask_px: 101_500_000_000,
            ask_size: 4,
            ..Quote::default()
        };
        let bytes = encode_to_vec(
            "Q.X.A",
            &Header::live(Kind::Quote, 7, 42, 1_000),
            &Payload::Quote(q),
        )
        .unwrap();
        let line = describe(&MessageRef::decode(&bytes).unwrap());
        assert!(line.starts_with("Q.X.A"), "{line}");
        assert!(line.contains("pub 7 seq 42"), "{line}");
        assert!(line.ends_with("| bid 101.2500x3 ask 101.5000x4"), "{line}");
    }
}
