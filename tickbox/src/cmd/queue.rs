//! `tickbox queue`: the Paranoid Pirate queue (6/PPP) between Lazy Pirate clients (front-end ROUTER) and
//! Paranoid Pirate workers (back-end ROUTER): LRU worker queue, heartbeats both ways, expiry of silent workers,
//! bounded backlog and worker table. Runs until Ctrl-C/SIGTERM, then prints what it routed.

use std::process::ExitCode;
use std::sync::mpsc;

use anyhow::Context;
use tickbox_pirates::flags::QueueFlags;
use tickbox_pirates::summary::PppQueueSummary;
use tickbox_pirates::{run_ppp_queue, PppConfig};

use crate::cli::queue::Args;
use crate::config::TickboxConfig;
use crate::out::{errln, out, outln};

pub(crate) fn run(args: Args, config: &TickboxConfig) -> anyhow::Result<ExitCode> {
    crate::flags::check_bind("--frontend", &args.frontend)?;
    crate::flags::check_bind("--backend", &args.backend)?;
    let flags = QueueFlags {
        heartbeat: args.heartbeat,
        liveness: args.liveness,
        max_queued: args.max_queued,
        max_workers: args.max_workers,
        max_message_bytes: args.max_message_size,
    };
    let cfg = flags
        .config(config.auth.clone())
        .map_err(anyhow::Error::msg)?;
    let (live, metrics) = tickbox_pirates::metrics::queue_metrics();
    let cfg = PppConfig { live, ..cfg };
    let _metrics = args
        .metrics
        .start(config, "queue", vec![std::sync::Arc::new(metrics)])?;
    let stop = crate::shutdown::flag();
    let ctx = zmq::Context::new();
    // Before any bind, and kept until the sockets are closed: without it libzmq lets every CURVE client in.
    let gate = config.auth.gate(&ctx).context("starting the ZAP handler")?;
    let (bound_tx, bound_rx) = mpsc::channel();
    let (frontend, backend) = (args.frontend.clone(), args.backend.clone());
    // The queue loop runs on its own thread so the resolved endpoints can be printed as soon as they are bound.
    let queue = std::thread::Builder::new()
        .name("ppp-queue".into())
        .spawn({
            let gate = gate.clone();
            let stop = stop.clone();
            move || run_ppp_queue(&gate, &frontend, &backend, cfg, &stop, Some(bound_tx))
        })
        .context("starting the queue thread")?;
    if let Ok((fe, be)) = bound_rx.recv() {
        let line = format!(
            "queue frontend {fe} backend {be} heartbeat {} liveness {}",
            args.heartbeat, args.liveness
        );
        if args.json {
            errln!("{line}");
        } else {
            outln!("{line}");
        }
    }
    let stats = match queue.join() {
        Ok(result) => result.with_context(|| {
            format!(
                "Paranoid Pirate queue on {} / {}",
                args.frontend, args.backend
            )
        })?,
        Err(_) => anyhow::bail!("the queue thread panicked"),
    };
    let summary = PppQueueSummary::new(&stats, config.auth.summary());
    if args.json {
        crate::out::json(&summary)?;
    } else {
        out!("{}", summary.text());
    }
    Ok(ExitCode::from(crate::exit_code::OK))
}
