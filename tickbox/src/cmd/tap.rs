//! `tickbox tap`: live inspector of an Espresso tap (or any tickbox PUB/XPUB endpoint): subscription events and
//! decoded messages, filtered and sampled, or a once-a-second table of rates per topic prefix (`--top`, redrawn
//! in place on a terminal).

use std::io::IsTerminal;
use std::process::ExitCode;

use anyhow::bail;
use tickbox_lvc::inspect::{self, InspectOptions};
use tickbox_lvc::tap;

use crate::cli::tap::Args;
use crate::config::TickboxConfig;
use crate::out::errln;

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
        errln!(
            "tap: {} frames, {} shown, {} malformed, {} publisher sequences missed",
            s.frames,
            s.shown,
            s.malformed,
            s.missed
        );
    }
    if s.frames == 0 {
        errln!(
            "error: tap received nothing from {connect}: check the endpoint (an LVC's --tap, or a publisher) and \
             --topics"
        );
        return Ok(ExitCode::from(crate::exit_code::ERROR));
    }
    Ok(ExitCode::from(crate::exit_code::OK))
}
