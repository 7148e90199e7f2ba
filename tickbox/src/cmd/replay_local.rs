//! `tickbox replay --local`: a backtest. The journal is fed straight into the Black Box's shard logic and worker
//! pool (`tickbox_subscriber::replay_local`), with no socket, as fast as the workers take it; the summary is
//! `subscribe`'s plus records/s and the multiple of real time achieved.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::Ordering;

use anyhow::Context as _;
use tickbox_recorder::{LocalFeed, LocalFeedReport};
use tickbox_subscriber::{replay_local, standard_worker};

use crate::config::TickboxConfig;
use crate::exit_code;
use crate::out::{out, outln};

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
        pool.count = n;
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
    let (lapped, read_error) = (read.lapped, read.read_error.clone());
    let report = &out.report;
    let stopped_by = if report.fatal.is_some() {
        "fatal"
    } else if stop.load(Ordering::Relaxed) {
        "signal"
    } else {
        "end of journal"
    };
    let rate = out.records_per_sec();
    let multiple = out.real_time_multiple();
    if json {
        let mut v = report.summary_json(&sub, stopped_by);
        v["component"] = "replay-local".into();
        v["records_per_sec"] = (rate.round() as u64).into();
        v["real_time_multiple"] = multiple.map(|m| (m * 100.0).round() / 100.0).into();
        v["origin_first_ns"] = out.origin_span_ns.map(|s| s.0).into();
        v["origin_last_ns"] = out.origin_span_ns.map(|s| s.1).into();
        v["skipped_heartbeats"] = out.skipped_heartbeats.into();
        v["lapped"] = lapped.into();
        v["read_error"] = read_error.clone().into();
        v["damaged_ranges"] = read.damaged_ranges.into();
        v["corrupt_records"] = read.corrupt_records.into();
        v["corrupt_bytes"] = read.corrupt_bytes.into();
        v["damage_gap_notices"] = read.damage_gap_notices.into();
        crate::out::json(&v)?;
    } else {
        out!("{}", report.summary_table(None, stopped_by));
        outln!(
            "local replay: {} records in {:.3} s = {:.0} records/s, {} of market time ({}), {} recorded heartbeats skipped",
            report.received(),
            report.elapsed.as_secs_f64(),
            rate,
            out.origin_span_ns
                .map(|(lo, hi)| format!("{:.3} s", (hi - lo) as f64 / 1e9))
                .unwrap_or_else(|| "-".into()),
            multiple
                .map(|m| format!("{m:.1}x real time"))
                .unwrap_or_else(|| "multiple unknown".into()),
            out.skipped_heartbeats
        );
    }
    if read.damaged_ranges > 0 {
        eprintln!(
            "replay: the journal is damaged: {} record(s) ({} bytes) in {} damaged range(s) were skipped, {} gap \
             notice(s) given the Black Box for them; every intact record was processed (tickbox journal verify \
             lists the ranges)",
            read.corrupt_records, read.corrupt_bytes, read.damaged_ranges, read.damage_gap_notices
        );
    }
    if !out.panicked.is_empty() {
        eprintln!(
            "error: worker thread(s) {:?} panicked: the run is incomplete",
            out.panicked
        );
        return Ok(ExitCode::from(exit_code::WORKER_FAILED));
    }
    let code = crate::outcome::finish(report);
    if report.fatal.is_none() && read_error.is_some() {
        return Ok(ExitCode::from(exit_code::ERROR));
    }
    // Damage skipped: exit 5 at the end, as the socket replay does.
    if read.damaged_ranges > 0 && report.fatal.is_none() {
        return Ok(ExitCode::from(exit_code::CORRUPT));
    }
    Ok(code)
}
