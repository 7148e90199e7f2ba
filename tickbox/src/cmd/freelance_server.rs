//! `tickbox freelance-server`: a Freelance (10/FLP) server. Its routing identity is its public endpoint.

use std::process::ExitCode;

use anyhow::Context;
use tickbox_pirates::flags::FreelanceFlags;
use tickbox_pirates::freelance::run_freelance_server_with;
use tickbox_pirates::summary::FreelanceSummary;

use crate::cli::freelance_server::Args;
use crate::config::TickboxConfig;
use crate::out::{out, outln};

pub(crate) fn run(args: Args, config: &TickboxConfig) -> anyhow::Result<ExitCode> {
    crate::flags::check_bind("--bind", &args.bind)?;
    let public = args.endpoint.clone().unwrap_or_else(|| args.bind.clone());
    let flags = FreelanceFlags {
        max_message_bytes: args.max_message_size,
        max_queued_replies: args.max_queued_replies,
        max_queued_bytes: args.max_queued_bytes,
    };
    let mut limits = flags
        .config(config.auth.clone())
        .map_err(anyhow::Error::msg)?;
    let (live, metrics) = tickbox_pirates::metrics::freelance_metrics();
    limits.live = live;
    let _metrics = args.metrics.start(
        config,
        "freelance-server",
        vec![std::sync::Arc::new(metrics)],
    )?;
    let stop = crate::shutdown::flag();
    let ctx = zmq::Context::new();
    // Before any bind, and kept until the sockets are closed: without it libzmq lets every CURVE client in.
    let gate = config.auth.gate(&ctx).context("starting the ZAP handler")?;
    outln!(
        "freelance server {public} listening on {} (at most {} replies of at most {} queued per peer)",
        args.bind,
        limits.queued_replies(),
        limits.max_message_size
    );
    let echo = args.echo;
    let stats = run_freelance_server_with(&gate, &args.bind, &public, &stop, &limits, |body| {
        if echo {
            body.to_vec()
        } else {
            vec![b"OK".to_vec()]
        }
    })
    .context("freelance server")?;
    let summary = FreelanceSummary {
        stats,
        auth: config.auth.summary(),
    };
    if args.json {
        crate::out::json(&summary)?;
    } else {
        out!("{}", summary.text());
    }
    Ok(ExitCode::SUCCESS)
}
