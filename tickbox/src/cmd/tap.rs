//! `tickbox tap`: live inspector of an Espresso tap (or any tickbox PUB/XPUB endpoint): subscription events and
//! decoded messages, filtered and sampled, or a once-a-second table of rates per topic prefix (`--top`, redrawn
//! in place on a terminal).

use std::io::{IsTerminal, Write};
use std::process::ExitCode;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use tickbox_lvc::tap::{self, RateTable, TapFilter};
use tickbox_wire::tap::TapFrame;
use tickbox_wire::{SequenceEvent, SequenceTracker};

use crate::config::TickboxConfig;

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// The tap (or publisher) endpoint to connect to.
    #[arg(long, value_name = "EP")]
    connect: String,
    /// Topic prefixes to subscribe to (e.g. `Q.XNAS,T.`); default everything. Without a filter the inspector
    /// checks every publisher's sequence and prints `GAP` lines for what it lost; with one, gaps are expected
    /// and not checked.
    #[arg(long, value_delimiter = ',', value_name = "P[,P…]")]
    topics: Vec<String>,
    /// Show only these kinds: quote, trade, heartbeat, book_level.
    #[arg(long, value_delimiter = ',', value_name = "K[,K…]")]
    kinds: Vec<String>,
    /// Show one message in N (of those passing the filters).
    #[arg(long, default_value_t = 1)]
    sample: u64,
    /// Instead of messages, print a table of rates per topic prefix once a second: redrawn in place on a
    /// terminal, appended as plain tables otherwise.
    #[arg(long)]
    top: bool,
    /// Topic parts that make a prefix in `--top` (2: `Q.XNAS`).
    #[arg(long, default_value_t = 2)]
    depth: usize,
    /// Do not show subscription events.
    #[arg(long)]
    no_events: bool,
    /// How messages are framed: `tickbox` frames, the Guide's `guide` envelope ([topic][body…], as plain
    /// ZeroMQ publishers send through the LVC), or `auto`: a multipart message not led by a tickbox frame is
    /// a Guide envelope. A two-frame envelope whose value is a tickbox frame under its own topic (or a tap event
    /// under the topic `\0`), as `tickbox lvc --tap-framing guide` emits, is shown as that frame.
    #[arg(long, value_name = "tickbox|guide|auto", default_value = "auto")]
    framing: tap::Framing,
    /// Stop after this long (`10s`, `500ms`); default: until Ctrl-C.
    #[arg(long, value_parser = tickbox_units::parse_duration)]
    duration: Option<Duration>,
}

pub(crate) fn run(args: Args, config: &TickboxConfig) -> anyhow::Result<ExitCode> {
    let mut kinds = Vec::new();
    for name in &args.kinds {
        match tap::parse_kind(name) {
            Some(kind) => kinds.push(kind),
            None => bail!("--kinds: unknown kind `{name}` (quote, trade, heartbeat, book_level)"),
        }
    }
    crate::flags::check_connect("--connect", &args.connect)?;
    let mut filter = TapFilter::new(kinds, args.sample);
    let stop = crate::shutdown::flag();
    let ctx = zmq::Context::new();
    let sub = ctx.socket(zmq::SUB).context("creating SUB")?;
    sub.set_linger(0)?;
    sub.set_rcvhwm(100_000)?;
    config.auth.client(&sub, "tap")?;
    sub.connect(&args.connect)
        .with_context(|| format!("connecting to {}", args.connect))?;
    if args.topics.is_empty() {
        sub.set_subscribe(b"")?;
    } else {
        for topic in &args.topics {
            sub.set_subscribe(topic.as_bytes())?;
        }
        if !args.no_events {
            // Events start with NUL, so a data-prefix subscription never matches them.
            sub.set_subscribe(&[tickbox_wire::tap::EVENT_MARKER])?;
        }
    }

    // With the default `tap_drop = per_consumer` the proxy cannot see what this consumer loses, so the
    // inspector checks the per-publisher sequences itself. Only when it receives everything: a topic filter
    // makes gaps by design.
    let mut gaps = args.topics.is_empty().then(SequenceTracker::new);
    let mut missed = 0u64;
    let started = Instant::now();
    // On a terminal the table is redrawn in place; a pipe or a file gets every table, plain.
    let top_output = if std::io::stdout().is_terminal() {
        tap::TopOutput::InPlace
    } else {
        tap::TopOutput::Append
    };
    let mut table = RateTable::new(args.depth, 1_000_000_000, tickbox_wire::now_ns());
    let mut out = std::io::stdout().lock();
    let (mut frames, mut shown, mut malformed) = (0u64, 0u64, 0u64);
    let mut msg = zmq::Message::new();
    let mut inspector = Inspector {
        filter: &mut filter,
        gaps: gaps.as_mut(),
        missed: &mut missed,
        table: &mut table,
        shown: &mut shown,
        malformed: &mut malformed,
        top: args.top,
        no_events: args.no_events,
    };
    while !stop.load(Ordering::SeqCst) && args.duration.is_none_or(|d| started.elapsed() < d) {
        // Ctrl-C or SIGTERM interrupting the poll is a wake-up to check `stop`, not a failure.
        let ready = match sub.poll(zmq::POLLIN, 100) {
            Err(zmq::Error::EINTR) => 0,
            other => other?,
        };
        if ready > 0 {
            while sub.recv(&mut msg, zmq::DONTWAIT).is_ok() {
                frames += 1;
                if args.framing.reads_as_guide(&msg, msg.get_more()) {
                    // The rest of a multipart message is already here: libzmq delivers it whole.
                    let mut parts = vec![msg.to_vec()];
                    while msg.get_more() {
                        sub.recv(&mut msg, 0)?;
                        parts.push(msg.to_vec());
                    }
                    // An LVC tapping with `tap_framing = "guide"` wraps each tickbox frame and event as
                    // [topic][frame]: shown, checked and counted as the frame it carries.
                    if let [topic, value] = parts.as_slice() {
                        if let Some(inner) = tap::unwrap_guide(topic, value) {
                            inspector.frame(&mut out, inner)?;
                            continue;
                        }
                    }
                    if inspector.top {
                        inspector.table.record_guide(&parts);
                    } else if inspector.filter.admit_other() {
                        *inspector.shown += 1;
                        writeln!(out, "{}", tap::describe_guide(&parts))?;
                    }
                    continue;
                }
                inspector.frame(&mut out, &msg)?;
            }
            out.flush()?;
        }
        if let Some(rows) = inspector.table.tick(tickbox_wire::now_ns()) {
            if args.top {
                let missed = inspector.gaps.is_some().then_some(*inspector.missed);
                write!(out, "{}", tap::render_top(&rows, missed, top_output))?;
                out.flush()?;
            }
        }
    }
    tracing::info!(frames, shown, malformed, missed, "tap inspector done");
    Ok(ExitCode::from(crate::exit_code::OK))
}

/// What the inspector does with one tickbox tap frame (a message or an event), however it was framed.
struct Inspector<'a> {
    filter: &'a mut TapFilter,
    gaps: Option<&'a mut SequenceTracker>,
    missed: &'a mut u64,
    table: &'a mut RateTable,
    shown: &'a mut u64,
    malformed: &'a mut u64,
    top: bool,
    no_events: bool,
}

impl Inspector<'_> {
    fn frame(&mut self, out: &mut impl Write, frame: &[u8]) -> std::io::Result<()> {
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
                *self.missed += event.missing();
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
                    *self.shown += 1;
                    writeln!(out, "{}", tap::describe(&m))?;
                }
            }
            Err(err) => {
                *self.malformed += 1;
                if self.malformed.is_power_of_two() {
                    tracing::warn!(
                        total = *self.malformed,
                        "undecodable frame ({} bytes): {err}",
                        frame.len()
                    );
                }
            }
        }
        Ok(())
    }
}
