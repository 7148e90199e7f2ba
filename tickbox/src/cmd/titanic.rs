//! `tickbox titanic`: the durable request-reply service (9/TSP) on a Majordomo broker, storing requests and
//! replies in a tickbox journal directory.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use tickbox_majordomo::titanic::{FsyncPolicy, Titanic};

use crate::config::TickboxConfig;

#[derive(Debug, Clone, Copy, clap::ValueEnum)]
enum Fsync {
    PerRequest,
    Periodic,
    None,
}

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// Majordomo broker endpoint to register with.
    #[arg(long)]
    broker: String,
    /// Journal directory (created if missing; an existing one is recovered).
    #[arg(long)]
    dir: PathBuf,
    /// When to force the journal to disk (overrides `[titanic] fsync`).
    #[arg(long, value_enum)]
    fsync: Option<Fsync>,
    /// Worker heartbeat interval in ms (must match the broker).
    #[arg(long)]
    heartbeat_ms: Option<u64>,
    /// Dispatcher rescan interval in ms.
    #[arg(long)]
    scan_ms: Option<u64>,
}

pub(crate) fn run(args: Args, config: &TickboxConfig) -> anyhow::Result<ExitCode> {
    let mut cfg = config.titanic.clone();
    if let Some(f) = args.fsync {
        cfg.fsync = match f {
            Fsync::PerRequest => FsyncPolicy::PerRequest,
            Fsync::Periodic => FsyncPolicy::Periodic,
            Fsync::None => FsyncPolicy::None,
        };
    }
    if let Some(ms) = args.heartbeat_ms {
        cfg.worker.heartbeat_interval = Duration::from_millis(ms).into();
    }
    if let Some(ms) = args.scan_ms {
        cfg.scan = Duration::from_millis(ms).into();
    }
    let stop = crate::shutdown::flag();
    let ctx = zmq::Context::new();
    let titanic = Titanic::start(&ctx, &args.broker, &args.dir, cfg).context("starting titanic")?;
    let rec = titanic.recovery();
    println!(
        "titanic ready: {} open requests ({} awaiting a reply) recovered from {}",
        rec.open_requests,
        rec.pending_requests,
        args.dir.display()
    );
    let counters = std::sync::Arc::clone(&titanic.counters);
    titanic.wait(&stop).context("titanic")?;
    println!(
        "dispatched {}  replies stored {}",
        counters
            .dispatched
            .load(std::sync::atomic::Ordering::Relaxed),
        counters
            .replies_stored
            .load(std::sync::atomic::Ordering::Relaxed)
    );
    Ok(ExitCode::SUCCESS)
}
