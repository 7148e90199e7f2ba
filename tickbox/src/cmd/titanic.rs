//! `tickbox titanic`: the durable request-reply service (9/TSP) on a Majordomo broker, storing requests and
//! replies in a tickbox journal directory.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use tickbox_majordomo::titanic::{FsyncPolicy, Redispatch, Titanic};

use crate::config::TickboxConfig;
use crate::out::outln;

#[derive(Debug, Clone, Copy, clap::ValueEnum)]
enum Fsync {
    PerRequest,
    Periodic,
    None,
}

#[derive(Debug, Clone, Copy, clap::ValueEnum)]
enum RedispatchArg {
    /// At most once: a request that reached a worker and got no reply within the job timeout is marked failed
    /// (`titanic.reply` answers 400 "outcome unknown"); one the broker reports undelivered is sent again.
    Never,
    /// Re-send with the same request id after each job timeout (exactly once if the service dedupes).
    AfterTimeout,
}

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// Majordomo broker endpoint to register with.
    #[arg(long, value_name = "EP")]
    broker: String,
    /// Journal directory (created if missing; an existing one is recovered).
    #[arg(long, value_name = "DIR")]
    dir: PathBuf,
    /// When to force the journal to disk (overrides `[titanic] fsync`).
    #[arg(long, value_enum)]
    fsync: Option<Fsync>,
    /// Worker heartbeat interval, e.g. `2500ms` (must match the broker).
    #[arg(long, value_name = "DURATION")]
    heartbeat: Option<tickbox_units::HumanDuration>,
    /// Dispatcher rescan interval, e.g. `1s`.
    #[arg(long, value_name = "DURATION")]
    scan: Option<tickbox_units::HumanDuration>,
    /// After this long without a reply a dispatched request is logged as slow (never re-sent for it).
    #[arg(long, value_name = "DURATION")]
    dispatch_timeout: Option<tickbox_units::HumanDuration>,
    /// How long one attempt may run before it counts as lost (overrides `[titanic] job_timeout`).
    #[arg(long, value_name = "DURATION")]
    job_timeout: Option<tickbox_units::HumanDuration>,
    /// What a lost attempt leads to (overrides `[titanic] redispatch`).
    #[arg(long, value_enum)]
    redispatch: Option<RedispatchArg>,
    /// Sends per request in all under `--redispatch after-timeout`.
    #[arg(long, value_name = "N")]
    max_attempts: Option<u32>,
    #[command(flatten)]
    metrics: crate::metrics::MetricsArgs,
    /// Print the final counters (and, with `[security]`, the auth counts) as one JSON object on stdout instead of
    /// the text lines.
    #[arg(long)]
    json: bool,
}

pub(crate) fn run(args: Args, config: &TickboxConfig) -> anyhow::Result<ExitCode> {
    crate::flags::check_connect("--broker", &args.broker)?;
    let mut cfg = config.titanic.clone();
    if let Some(f) = args.fsync {
        cfg.fsync = match f {
            Fsync::PerRequest => FsyncPolicy::PerRequest,
            Fsync::Periodic => FsyncPolicy::Periodic,
            Fsync::None => FsyncPolicy::None,
        };
    }
    if let Some(d) = args.heartbeat {
        cfg.worker.heartbeat_interval = d;
    }
    if let Some(d) = args.scan {
        cfg.scan = d;
    }
    if let Some(d) = args.dispatch_timeout {
        cfg.dispatch_timeout = d;
    }
    if let Some(d) = args.job_timeout {
        cfg.job_timeout = d;
    }
    if let Some(r) = args.redispatch {
        cfg.redispatch = match r {
            RedispatchArg::Never => Redispatch::Never,
            RedispatchArg::AfterTimeout => Redispatch::AfterTimeout,
        };
    }
    if let Some(n) = args.max_attempts {
        cfg.max_attempts = n;
    }
    let stop = crate::shutdown::flag();
    let ctx = zmq::Context::new();
    let titanic = Titanic::start(&ctx, &args.broker, &args.dir, cfg).context("starting titanic")?;
    let rec = titanic.recovery();
    let ready = format!(
        "titanic ready: {} open requests ({} awaiting a reply) recovered from {}; {} of them were dispatched before the restart",
        rec.open_requests,
        rec.pending_requests,
        args.dir.display(),
        rec.dispatched_requests
    );
    // With --json, stdout carries only the summary object.
    if args.json {
        eprintln!("{ready}");
    } else {
        outln!("{ready}");
    }
    let counters = std::sync::Arc::clone(&titanic.counters);
    let _metrics = args.metrics.start(
        config,
        "titanic",
        vec![std::sync::Arc::new(
            tickbox_majordomo::metrics::TitanicMetrics(std::sync::Arc::clone(&counters)),
        )],
    )?;
    titanic.wait(&stop).context("titanic")?;
    if args.json {
        let mut summary = serde_json::to_value(counters.totals())?;
        crate::auth_report::add_to_json(&mut summary, &config.auth);
        crate::out::json(&summary)?;
        return Ok(ExitCode::SUCCESS);
    }
    outln!("{}", counters.summary_line());
    Ok(ExitCode::SUCCESS)
}
