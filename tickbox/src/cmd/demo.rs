//! `tickbox demo`: feed, Black Box subscriber and workers in one process, beside a raw libzmq PUB->SUB loop
//! measured in the same run with the same frame, transport and high-water marks.

use std::process::ExitCode;
use std::sync::atomic::Ordering;

use tickbox_bench::demo::{run_demo, DemoOptions};

use crate::cli::demo::{Args, Transport};
use crate::config::TickboxConfig;
use crate::out::{errln, out};
use crate::outcome::finish;

pub(crate) fn run(args: Args, config: &TickboxConfig) -> anyhow::Result<ExitCode> {
    if args.shards == 0 || args.workers == 0 {
        anyhow::bail!("--shards and --workers must be at least 1");
    }
    let rate = args.rate;
    let stop = crate::shutdown::flag();
    // Built (and its I/O threads placed) before any of our threads is pinned, so they never inherit a shard's core.
    let ctx = tickbox_zmqx::context::build(&config.context)?;
    let mut subscriber = config.subscriber.clone();
    if let Some(d) = args.max_lateness {
        subscriber.max_lateness = d;
    }
    if let Some(dispatch) = args.dispatch {
        subscriber.dispatch = dispatch;
    }
    if let Some(mode) = args.snail_mode {
        subscriber.snail_mode = mode;
    }
    let opts = DemoOptions {
        shards: args.shards,
        workers: args.workers,
        symbols: args.symbols,
        rate,
        duration: args.duration.0,
        transport: match args.transport {
            Transport::Inproc => tickbox_bench::Transport::Inproc,
            Transport::Tcp => tickbox_bench::Transport::Tcp,
        },
        lossy: args.lossy,
        baseline: (!args.no_baseline).then_some(args.baseline_duration.0),
        subscriber,
        pool: config.workers.clone(),
    };
    let outcome = run_demo(&config.auth.gate(&ctx)?, &opts, &stop)?;
    let stopped = outcome.report.stopped_by(stop.load(Ordering::Relaxed));
    if args.json {
        crate::out::json(&outcome.summary_json(stopped))?;
    } else {
        out!("{}", outcome.summary(stopped));
    }
    if let Some(err) = outcome.worker_failure {
        // After the summary, so what the surviving workers did is still shown.
        errln!("error: {err}: the run is incomplete");
        return Ok(ExitCode::from(crate::exit_code::WORKER_FAILED));
    }
    Ok(finish(&outcome.report))
}
