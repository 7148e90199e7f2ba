//! `tickbox tap`: live inspector of an Espresso tap (or any tickbox PUB/XPUB endpoint): subscription events and
//! decoded messages, filtered and sampled, or a once-a-second table of rates per topic prefix (`--top`, redrawn
//! in place on a terminal).

use std::io::IsTerminal;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::bail;
use tickbox_lvc::inspect::{self, InspectOptions};
use tickbox_lvc::tap;

use crate::config::TickboxConfig;

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// The tap (or publisher) endpoint to connect to.
    #[arg(long, value_name = "EP")]
    connect: String,
    /// Topic prefixes to subscribe to (e.g. `Q.XNAS,T.`); default everything. Without a filter the inspector
    /// checks every publisher's sequence and prints `GAP` lines for what it lost; with one, gaps are expected
    /// and not checked.
    #[arg(long, value_delimiter = ',', value_name = "PREFIX[,PREFIX…]")]
    topics: Vec<String>,
    /// Show only these kinds: quote, trade, heartbeat, book_level.
    #[arg(long, value_delimiter = ',', value_name = "KIND[,KIND…]")]
    kinds: Vec<String>,
    /// Show one message in N (of those passing the filters).
    #[arg(long, default_value_t = 1, value_name = "N")]
    sample: u64,
    /// Instead of messages, print a table of rates per topic prefix once a second: redrawn in place on a
    /// terminal, appended as plain tables otherwise.
    #[arg(long)]
    top: bool,
    /// Topic parts that make a prefix in `--top` (2: `Q.XNAS`).
    #[arg(long, default_value_t = 2, value_name = "N")]
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
    #[arg(long, value_name = "DURATION", value_parser = tickbox_units::parse_duration)]
    duration: Option<Duration>,
    /// Print the closing summary (frames, shown, malformed, missed) as one JSON object on stdout, after the
    /// messages; without it the summary is one line on stderr.
    #[arg(long)]
    json: bool,
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
    let stop = crate::shutdown::flag();
    let ctx = zmq::Context::new();
    // On a terminal the table is redrawn in place; a pipe or a file gets every table, plain.
    let top_output = if std::io::stdout().is_terminal() {
        tap::TopOutput::InPlace
    } else {
        tap::TopOutput::Append
    };
    let opts = InspectOptions {
        connect: args.connect,
        topics: args.topics,
        kinds,
        sample: args.sample,
        top: args.top,
        depth: args.depth,
        no_events: args.no_events,
        framing: args.framing,
        duration: args.duration,
        top_output,
    };
    let connect = opts.connect.clone();
    let s = {
        let mut out = std::io::stdout().lock();
        match inspect::run(&ctx, &config.auth, &opts, &mut out, &stop) {
            // The reader of our output went away (`| head`): nothing more to show, and nothing went wrong.
            Err(inspect::InspectError::Io(e)) if e.kind() == std::io::ErrorKind::BrokenPipe => {
                return Ok(ExitCode::from(crate::exit_code::OK))
            }
            other => other?,
        }
    };
    if args.json {
        crate::out::json(
            &serde_json::json!({ "component": "tap", "connect": connect, "stats": s }),
        )?;
    } else {
        eprintln!(
            "tap: {} frames, {} shown, {} malformed, {} publisher sequences missed",
            s.frames, s.shown, s.malformed, s.missed
        );
    }
    if s.frames == 0 {
        eprintln!(
            "error: tap received nothing from {connect}: check the endpoint (an LVC's --tap, or a publisher) and \
             --topics"
        );
        return Ok(ExitCode::from(crate::exit_code::ERROR));
    }
    Ok(ExitCode::from(crate::exit_code::OK))
}
