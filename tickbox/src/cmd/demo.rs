//! `tickbox demo`: feed, Black Box subscriber and workers in one process, beside a raw libzmq PUB->SUB loop
//! measured in the same run with the same frame, transport and high-water marks.

use std::process::ExitCode;
use std::sync::atomic::Ordering;

use tickbox_bench::demo::{run_demo, DemoOptions};
use tickbox_feed::Rate;
use tickbox_subscriber::{Dispatch, HumanDuration, SnailMode};

use crate::config::TickboxConfig;
use crate::out::out;
use crate::outcome::finish;

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Transport {
    Inproc,
    Tcp,
}

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// How long the feed publishes.
    #[arg(long, default_value = "10s", value_name = "DURATION")]
    pub duration: HumanDuration,
    /// Feed rate over all shards (100k, 1.5m) or `max` for flat out.
    #[arg(long, default_value = "100k", value_name = "RATE")]
    pub rate: Rate,
    /// Feed shards, and as many subscriber shards; at most 64.
    #[arg(long, default_value_t = 2, value_name = "N", value_parser = crate::bounds::shards)]
    pub shards: usize,
    /// Worker threads; at most 256.
    #[arg(long, default_value_t = 2, value_name = "N", value_parser = crate::bounds::workers)]
    pub workers: usize,
    #[arg(long, value_enum, default_value = "inproc")]
    pub transport: Transport,
    /// Publish on a plain (lossy) PUB: a full subscriber pipe drops messages (reported as gaps). Default is
    /// XPUB with ZMQ_XPUB_NODROP, which back-pressures the feed instead.
    #[arg(long)]
    pub lossy: bool,
    /// Synthetic universe size (at most 1000000).
    #[arg(long, default_value_t = 1_000, value_name = "N", value_parser = crate::bounds::symbols)]
    pub symbols: usize,
    /// Suicidal Snail threshold (default from the config, 1s).
    #[arg(long, value_name = "DURATION")]
    pub max_lateness: Option<HumanDuration>,
    /// How shards hand messages to workers: by_topic (one worker per symbol, in order) or round_robin. Default
    /// from the config (by_topic).
    #[arg(long, value_name = "by_topic|round_robin")]
    pub dispatch: Option<Dispatch>,
    /// How the snail measures lateness: strict or skew_tolerant. Default from the config (strict).
    #[arg(long, value_name = "strict|skew_tolerant")]
    pub snail_mode: Option<SnailMode>,
    /// Skip the raw libzmq baseline loop.
    #[arg(long)]
    pub no_baseline: bool,
    /// How long each raw baseline mode runs.
    #[arg(long, default_value = "2s", value_name = "DURATION")]
    pub baseline_duration: HumanDuration,
    /// Print the summary as one JSON object on stdout instead of the tables.
    #[arg(long)]
    pub json: bool,
}

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
        eprintln!("error: {err}: the run is incomplete");
        return Ok(ExitCode::from(crate::exit_code::WORKER_FAILED));
    }
    Ok(finish(&outcome.report))
}
