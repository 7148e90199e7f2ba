//! The live inspector of an Espresso tap (`tickbox tap`): subscription events and decoded messages, filtered and
//! sampled, or a once-a-second table of rates per topic prefix. [`Inspector`] judges and renders frames without
//! a socket; [`run`] is the thin loop that owns the SUB socket.

use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use tickbox_auth::{AuthError, Security};
use tickbox_wire::tap::TapFrame;
use tickbox_wire::{Kind, SequenceEvent, SequenceTracker};

use crate::tap::{self, Framing, RateTable, TapFilter, TopOutput};

/// Why the inspector stopped early.
#[derive(Debug, thiserror::Error)]
pub enum InspectError {
    /// A socket step failed.
    #[error("{what}: {source}")]
    Zmq {
        /// The step (`creating SUB`, `connecting to EP`, ...).
        what: String,
        /// libzmq's error.
        source: zmq::Error,
    },
    /// `[security]` could not be applied to the SUB socket.
    #[error(transparent)]
    Auth(#[from] AuthError),
    /// Writing the output failed.
    #[error(transparent)]
    Io(#[from] std::io::Error),
}

/// What the inspector saw.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct InspectStats {
    /// Frames received (a multipart message counts its first frame).
    pub frames: u64,
    /// Messages and Guide captures written out.
    pub shown: u64,
    /// Frames that are neither a tickbox frame nor a tap event.
    pub malformed: u64,
    /// Publisher sequences missing (only counted when subscribed to everything).
    pub missed: u64,
}

/// A run that has received nothing says so this long after it started.
pub const SILENCE_WARNING: std::time::Duration = std::time::Duration::from_secs(3);

/// How to inspect.
#[derive(Debug, Clone)]
pub struct InspectOptions {
    /// The tap (or any tickbox PUB endpoint) to connect to.
    pub connect: String,
    /// Topic prefixes to subscribe to (all when empty).
    pub topics: Vec<String>,
    /// Kinds to show (all when empty).
    pub kinds: Vec<Kind>,
    /// Show one message in this many (1: all).
    pub sample: u64,
    /// The rates table instead of messages.
    pub top: bool,
    /// Topic depth of the rates table's prefixes.
    pub depth: usize,
    /// Leave out subscription events.
    pub no_events: bool,
    /// How messages are read.
    pub framing: Framing,
    /// Stop after this long.
    pub duration: Option<Duration>,
    /// How the rates table is drawn.
    pub top_output: TopOutput,
}

/// Judges and renders frames: events, messages (filtered, sampled), gaps, the rates table.
#[derive(Debug)]
pub struct Inspector {
    filter: TapFilter,
    /// `Some` when subscribed to everything: a topic filter makes gaps by design.
    gaps: Option<SequenceTracker>,
    table: RateTable,
    top: bool,
    no_events: bool,
    stats: InspectStats,
}

impl Inspector {
    /// An inspector showing `kinds` (all when empty) sampled one in `sample`, or the rates table at `depth` when
    /// `top`; it checks publisher sequences when `check_gaps`.
    pub fn new(
        kinds: Vec<Kind>,
        sample: u64,
        top: bool,
        depth: usize,
        no_events: bool,
        check_gaps: bool,
        now_ns: u64,
    ) -> Self {
        Inspector {
            filter: TapFilter::new(kinds, sample),
            gaps: check_gaps.then(SequenceTracker::new),
            table: RateTable::new(depth, 1_000_000_000, now_ns),
            top,
            no_events,
            stats: InspectStats::default(),
        }
    }

    /// What it saw so far.
    pub fn stats(&self) -> InspectStats {
        self.stats
    }

    /// Counts one frame received off the socket.
    pub fn received(&mut self) {
        self.stats.frames += 1;
    }

    /// A whole Guide message (`[topic][body]` or other parts). An LVC tapping with `tap_framing = "guide"` wraps
    /// each tickbox frame and event as `[topic][frame]`: shown, checked and counted as the frame it carries.
    pub fn guide(&mut self, out: &mut impl Write, parts: &[Vec<u8>]) -> std::io::Result<()> {
        if let [topic, value] = parts {
            if let Some(inner) = tap::unwrap_guide(topic, value) {
                return self.frame(out, inner);
            }
        }
        if self.top {
            self.table.record_guide(parts);
        } else if self.filter.admit_other() {
            self.stats.shown += 1;
            writeln!(out, "{}", tap::describe_guide(parts))?;
        }
        Ok(())
    }

    /// One tickbox frame or tap event.
    pub fn frame(&mut self, out: &mut impl Write, frame: &[u8]) -> std::io::Result<()> {
        if let (Some(gaps), Ok(TapFrame::Message(m))) =
            (self.gaps.as_mut(), TapFrame::classify(frame))
        {
            if let event @ SequenceEvent::Gap {
                publisher,
                first_missing,
                last_missing,
                ..
            } = gaps.on_message(&m)
            {
                self.stats.missed += event.missing();
                if !self.top {
                    writeln!(
                        out,
                        "GAP   pub {publisher} seq {first_missing}..={last_missing} ({} missed)",
                        event.missing()
                    )?;
                }
            }
        }
        if self.top {
            self.table.record(frame);
            return Ok(());
        }
        match TapFrame::classify(frame) {
            Ok(TapFrame::Subscribe(prefix)) if !self.no_events => {
                writeln!(out, "SUB   {:?}", String::from_utf8_lossy(prefix))?;
            }
            Ok(TapFrame::Unsubscribe(prefix)) if !self.no_events => {
                writeln!(out, "UNSUB {:?}", String::from_utf8_lossy(prefix))?;
            }
            Ok(TapFrame::Subscribe(_) | TapFrame::Unsubscribe(_)) => {}
            Ok(TapFrame::Message(m)) => {
                if self.filter.admit(&m) {
                    self.stats.shown += 1;
                    writeln!(out, "{}", tap::describe(&m))?;
                }
            }
            Err(err) => {
                self.stats.malformed += 1;
                if self.stats.malformed.is_power_of_two() {
                    tracing::warn!(
                        total = self.stats.malformed,
                        "undecodable frame ({} bytes): {err}",
                        frame.len()
                    );
                }
            }
        }
        Ok(())
    }

    /// The time is `now_ns`: with `top`, draws the rates table when a window closed.
    pub fn tick(
        &mut self,
        out: &mut impl Write,
        now_ns: u64,
        output: TopOutput,
    ) -> std::io::Result<()> {
        if let Some(rows) = self.table.tick(now_ns) {
            if self.top {
                let missed = self.gaps.is_some().then_some(self.stats.missed);
                write!(out, "{}", tap::render_top(&rows, missed, output))?;
                out.flush()?;
            }
        }
        Ok(())
    }
}

/// Subscribes to `opts.connect` under `security` and inspects until `stop` or `opts.duration`.
pub fn run(
    ctx: &zmq::Context,
    security: &Security,
    opts: &InspectOptions,
    out: &mut impl Write,
    stop: &AtomicBool,
) -> Result<InspectStats, InspectError> {
    let zmq_err = |what: &str| {
        let what = what.to_owned();
        move |source| InspectError::Zmq { what, source }
    };
    let sub = ctx.socket(zmq::SUB).map_err(zmq_err("creating SUB"))?;
    sub.set_linger(0).map_err(zmq_err("set linger"))?;
    sub.set_rcvhwm(100_000).map_err(zmq_err("set rcvhwm"))?;
    security.client(&sub, "tap")?;
    sub.connect(&opts.connect)
        .map_err(zmq_err(&format!("connecting to {}", opts.connect)))?;
    if opts.topics.is_empty() {
        sub.set_subscribe(b"").map_err(zmq_err("subscribe"))?;
    } else {
        for topic in &opts.topics {
            sub.set_subscribe(topic.as_bytes())
                .map_err(zmq_err("subscribe"))?;
        }
        if !opts.no_events {
            // Events start with NUL, so a data-prefix subscription never matches them.
            sub.set_subscribe(&[tickbox_wire::tap::EVENT_MARKER])
                .map_err(zmq_err("subscribe"))?;
        }
    }
    // With the default `tap_drop = per_consumer` the proxy cannot see what this consumer loses, so the
    // inspector checks the per-publisher sequences itself. Only when it receives everything: a topic filter
    // makes gaps by design.
    let mut inspector = Inspector::new(
        opts.kinds.clone(),
        opts.sample,
        opts.top,
        opts.depth,
        opts.no_events,
        opts.topics.is_empty(),
        tickbox_wire::now_ns(),
    );
    let started = Instant::now();
    let mut msg = zmq::Message::new();
    let mut silence_said = false;
    while !stop.load(Ordering::SeqCst) && opts.duration.is_none_or(|d| started.elapsed() < d) {
        if !silence_said && started.elapsed() >= SILENCE_WARNING {
            silence_said = true;
            if inspector.stats().frames == 0 {
                tracing::warn!(
                    "nothing received from {} in {:?}: is the endpoint right (an LVC's --tap, or a publisher), and \
                     is anything passing through it?",
                    opts.connect,
                    SILENCE_WARNING
                );
            }
        }
        // Ctrl-C or SIGTERM interrupting the poll is a wake-up to check `stop`, not a failure.
        let ready = match sub.poll(zmq::POLLIN, 100) {
            Err(zmq::Error::EINTR) => 0,
            other => other.map_err(zmq_err("poll"))?,
        };
        if ready > 0 {
            while sub.recv(&mut msg, zmq::DONTWAIT).is_ok() {
                inspector.received();
                if opts.framing.reads_as_guide(&msg, msg.get_more()) {
                    // The rest of a multipart message is already here: libzmq delivers it whole.
                    let mut parts = vec![msg.to_vec()];
                    while msg.get_more() {
                        sub.recv(&mut msg, 0).map_err(zmq_err("recv"))?;
                        parts.push(msg.to_vec());
                    }
                    inspector.guide(out, &parts)?;
                    continue;
                }
                inspector.frame(out, &msg)?;
            }
            out.flush()?;
        }
        inspector.tick(out, tickbox_wire::now_ns(), opts.top_output)?;
    }
    Ok(inspector.stats())
}

#[cfg(test)]
mod tests {
    use super::*;
    use tickbox_wire::tap::encode_event;
    use tickbox_wire::{encode_to_vec, Header, Payload, Quote};

    fn quote(topic: &str, sequence: u64) -> Vec<u8> {
        encode_to_vec(
            topic,
            &Header::live(Kind::Quote, 7, sequence, 1),
            &Payload::Quote(Quote::default()),
        )
        .unwrap()
    }

    fn event(subscribe: bool, prefix: &[u8]) -> Vec<u8> {
        let mut xpub = vec![u8::from(subscribe)];
        xpub.extend_from_slice(prefix);
        let mut out = Vec::new();
        encode_event(&mut out, &xpub);
        out
    }

    fn lines(out: &[u8]) -> Vec<String> {
        String::from_utf8_lossy(out)
            .lines()
            .map(str::to_owned)
            .collect()
    }

    #[test]
    fn messages_events_gaps_and_malformed_frames_are_each_shown_or_counted() {
        let mut ins = Inspector::new(vec![], 1, false, 2, false, true, 0);
        let mut out = Vec::new();
        ins.frame(&mut out, &event(true, b"Q.")).unwrap();
        ins.frame(&mut out, &quote("Q.X.A", 1)).unwrap();
        ins.frame(&mut out, &quote("Q.X.A", 4)).unwrap();
        ins.frame(&mut out, b"junk").unwrap();
        ins.frame(&mut out, &event(false, b"Q.")).unwrap();
        let lines = lines(&out);
        assert_eq!(lines[0], "SUB   \"Q.\"");
        assert_eq!(lines[2], "GAP   pub 7 seq 2..=3 (2 missed)");
        assert_eq!(lines.last().unwrap(), "UNSUB \"Q.\"");
        assert_eq!(lines.len(), 5);
        let stats = ins.stats();
        assert_eq!((stats.shown, stats.malformed, stats.missed), (2, 1, 2));
    }

    #[test]
    fn without_gap_checks_or_events_only_messages_show() {
        let mut ins = Inspector::new(vec![Kind::Trade], 1, false, 2, true, false, 0);
        let mut out = Vec::new();
        ins.frame(&mut out, &event(true, b"Q.")).unwrap();
        ins.frame(&mut out, &quote("Q.X.A", 1)).unwrap();
        ins.frame(&mut out, &quote("Q.X.A", 9)).unwrap();
        assert!(out.is_empty());
        assert_eq!(ins.stats(), InspectStats::default());
    }

    #[test]
    fn a_guide_capture_is_shown_as_the_frame_it_carries() {
        let mut ins = Inspector::new(vec![], 1, false, 2, false, true, 0);
        let frame = quote("Q.X.A", 1);
        let mut direct = Vec::new();
        ins.frame(&mut direct, &frame).unwrap();
        let mut ins = Inspector::new(vec![], 1, false, 2, false, true, 0);
        let mut wrapped = Vec::new();
        let parts = vec![tap::guide_topic(&frame).to_vec(), frame.clone()];
        ins.guide(&mut wrapped, &parts).unwrap();
        assert_eq!(wrapped, direct);
        ins.guide(
            &mut wrapped,
            &[b"weather".to_vec(), b"10001 20 30".to_vec()],
        )
        .unwrap();
        assert_eq!(ins.stats().shown, 2);
    }

    #[test]
    fn the_rates_table_is_drawn_once_a_window_closes() {
        let mut ins = Inspector::new(vec![], 1, true, 2, false, true, 0);
        let mut out = Vec::new();
        ins.frame(&mut out, &quote("Q.X.A", 1)).unwrap();
        assert!(out.is_empty(), "top mode shows no messages");
        ins.tick(&mut out, 10, TopOutput::Append).unwrap();
        assert!(out.is_empty());
        ins.tick(&mut out, 1_500_000_000, TopOutput::Append)
            .unwrap();
        assert!(String::from_utf8_lossy(&out).contains("Q.X"));
    }
}
