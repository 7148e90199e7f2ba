//! `tickbox replay --local`: a backtest. The journal is fed straight into the Black Box's shard logic and worker
//! pool (`tickbox_subscriber::replay_local`), with no socket, as fast as the workers take it; the summary is
//! `subscribe`'s plus records/s and the multiple of real time achieved.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::Ordering;

use anyhow::Context as _;
use tickbox_recorder::{LocalFeed, LocalFeedReport};
use tickbox_subscriber::{replay_local, standard_worker, LocalVerdict};

use crate::config::TickboxConfig;
use crate::exit_code;
use crate::out::{errln, out};

/// Runs the whole journal through `[subscriber]` (snail, gap policy, dispatch) and `[workers]` (`workers`
/// overrides the count) and prints the summary (`json`: one object).
pub(crate) fn run(
    journals: &[PathBuf],
    json: bool,
    workers: Option<usize>,
    config: &TickboxConfig,
) -> anyhow::Result<ExitCode> {
    let mut feed = LocalFeed::open_all(journals)?;
    let sub = config.subscriber.clone();
    let mut pool = config.workers.clone();
    if let Some(n) = workers {
        pool.count = Some(n);
    }
    let stop = crate::shutdown::flag();
    // Workers take parcels from channels; the context is only what the pool's API asks for.
    let ctx = zmq::Context::new();
    let mut read = LocalFeedReport::default();
    let out = replay_local(
        &ctx,
        &sub,
        &pool,
        |_| standard_worker(None),
        &stop,
        |sink| read = feed.feed(|frame, capture_ns| sink.push(frame, capture_ns)),
    )
    .context("local replay")?;
    let stopped_by = out.stopped_by_local(stop.load(Ordering::Relaxed));
    if json {
        let mut v = out.local_summary_json(&sub, stopped_by);
        read.add_to_json(&mut v);
        crate::out::json(&v)?;
    } else {
        out!("{}", out.local_summary_text(stopped_by));
    }
    if let Some(line) = read.damage_line() {
        errln!("{line}");
    }
    Ok(
        match out.local_verdict(read.read_error.is_some(), read.damaged_ranges > 0) {
            LocalVerdict::WorkersPanicked(panicked) => {
                errln!("error: worker thread(s) {panicked:?} panicked: the run is incomplete");
                ExitCode::from(exit_code::WORKER_FAILED)
            }
            LocalVerdict::Outcome => crate::outcome::finish(&out.report),
            LocalVerdict::ReadError => ExitCode::from(exit_code::ERROR),
            // Damage skipped: exit 5 at the end, as the socket replay does.
            LocalVerdict::Damaged => ExitCode::from(exit_code::CORRUPT),
        },
    )
}
