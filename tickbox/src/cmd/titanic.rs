//! `tickbox titanic`: the durable request-reply service (9/TSP) on a Majordomo broker, storing requests and
//! replies in a tickbox journal directory.

use std::process::ExitCode;

use anyhow::Context;
use tickbox_majordomo::overrides::TitanicOverrides;
use tickbox_majordomo::titanic::Titanic;

use crate::cli::titanic::Args;
use crate::config::TickboxConfig;
use crate::out::{errln, outln};

pub(crate) fn run(args: Args, config: &TickboxConfig) -> anyhow::Result<ExitCode> {
    crate::flags::check_connect("--broker", &args.broker)?;
    let cfg = TitanicOverrides {
        fsync: args.fsync.map(Into::into),
        heartbeat: args.heartbeat,
        scan: args.scan,
        dispatch_timeout: args.dispatch_timeout,
        job_timeout: args.job_timeout,
        redispatch: args.redispatch.map(Into::into),
        max_attempts: args.max_attempts,
    }
    .apply(config.titanic.clone());
    let stop = crate::shutdown::flag();
    let ctx = zmq::Context::new();
    let titanic = Titanic::start(&ctx, &args.broker, &args.dir, cfg).context("starting titanic")?;
    let within = std::time::Duration::from_secs(5);
    if !titanic
        .await_registered(within)
        .context("asking the broker for titanic's services")?
    {
        errln!(
            "warning: the broker at {} has not confirmed titanic's services within {within:?}; callers get MMI 404 \
             until it does",
            args.broker
        );
    }
    let ready = titanic.recovery().ready_line(&args.dir);
    // With --json, stdout carries only the summary object.
    if args.json {
        errln!("{ready}");
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
