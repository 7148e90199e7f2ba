//! `tickbox titanic`: the durable request-reply service (9/TSP) on a Majordomo broker, storing requests and
//! replies in a tickbox journal directory.

use std::process::ExitCode;

use anyhow::Context;
use tickbox_majordomo::titanic::{FsyncPolicy, Redispatch, Titanic};

use crate::cli::titanic::{Args, Fsync, RedispatchArg};
use crate::config::TickboxConfig;
use crate::out::outln;

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
    let within = std::time::Duration::from_secs(5);
    if !titanic
        .await_registered(within)
        .context("asking the broker for titanic's services")?
    {
        eprintln!(
            "warning: the broker at {} has not confirmed titanic's services within {within:?}; callers get MMI 404 \
             until it does",
            args.broker
        );
    }
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
