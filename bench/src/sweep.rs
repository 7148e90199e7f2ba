//! Whole benchmark sessions as the CLI runs them: every configuration beside its raw baseline, report files,
//! plot and JSON-lines results, with progress on the log.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

use crate::latency::{rate_label, LatencyConfig, LatencyRun};
use crate::pipeline::{frame_size, tickbox_latency, tickbox_throughput};
use crate::plot::{write_percentile_plot, Series};
use crate::raw::{raw_pubsub_latency, raw_throughput, RawPattern, ThroughputConfig};
use crate::report::{append_jsonl, BenchRecord, LatencyResult, ThroughputResult};
use crate::transport::Transport;
use crate::BenchError;

/// A latency session: every (transport, rate) pair, tickbox and the raw PUB/SUB baseline.
#[derive(Debug, Clone)]
pub struct LatencySweep {
    /// Offered rates to run, msg/s, in order.
    pub rates: Vec<u64>,
    /// Transports to run each rate over.
    pub transports: Vec<Transport>,
    /// Everything else (rate and transport are overwritten per configuration).
    pub base: LatencyConfig,
    /// Also run the raw-libzmq baseline (on by default; off only to save time when iterating).
    pub raw_baseline: bool,
}

/// What a session wrote.
#[derive(Debug, Clone)]
pub struct LatencyOutcome {
    /// One result per configuration that finished, in run order.
    pub results: Vec<LatencyResult>,
    /// The JSON-lines results file.
    pub json: PathBuf,
    /// The percentile plot (SVG).
    pub plot: PathBuf,
}

/// Runs the sweep, writes `<out>/<stamp>-*.{hlog,hgrm}`, `<out>/<stamp>-latency.svg` and one JSON line per
/// configuration to `<out>/<stamp>-latency.json`. Stops between configurations when `stop` is set.
pub fn run_latency_sweep(
    ctx: &zmq::Context,
    sweep: &LatencySweep,
    out: &Path,
    stamp: &str,
    stop: &AtomicBool,
) -> Result<LatencyOutcome, BenchError> {
    std::fs::create_dir_all(out).map_err(|e| BenchError::io(out, e))?;
    let prefix = format!("{stamp}-");
    let mut runs: Vec<LatencyRun> = Vec::new();
    'outer: for &transport in &sweep.transports {
        for &rate in &sweep.rates {
            let config = LatencyConfig {
                rate,
                transport,
                // Same bytes on the wire for both systems.
                size: frame_size(sweep.base.size),
                ..sweep.base.clone()
            };
            let secs = (config.warmup + config.duration).as_secs_f64();
            let mut systems: Vec<&str> = Vec::new();
            if sweep.raw_baseline {
                systems.push("raw");
            }
            systems.push("tickbox");
            for system in systems {
                if stop.load(Ordering::Relaxed) {
                    tracing::warn!("interrupted: reporting the configurations finished so far");
                    break 'outer;
                }
                tracing::info!(
                    "latency: {system} over {transport} at {} msg/s, {} B, {:.1} s{}",
                    rate_label(rate),
                    config.size,
                    secs,
                    if config.via_lvc && system == "tickbox" {
                        " via LVC"
                    } else {
                        ""
                    }
                );
                let run = if system == "raw" {
                    raw_pubsub_latency(ctx, &config)?
                } else {
                    tickbox_latency(ctx, &config)?
                };
                run.write_files(out, &prefix)?;
                runs.push(run);
            }
        }
    }
    if runs.is_empty() {
        return Err(BenchError::NoSamples("latency sweep"));
    }
    let results: Vec<LatencyResult> = runs.iter().map(|r| r.result_with_files(&prefix)).collect();
    let json = out.join(format!("{stamp}-latency.json"));
    let records: Vec<BenchRecord> = results.iter().cloned().map(BenchRecord::Latency).collect();
    append_jsonl(&json, &records)?;
    let plot = out.join(format!("{stamp}-latency.svg"));
    let series: Vec<Series<'_>> = runs
        .iter()
        .map(|r| Series {
            label: r.label(),
            histogram: &r.samples.corrected,
        })
        .collect();
    let title = format!(
        "one-way latency, corrected for coordinated omission ({} B frames)",
        runs[0].size
    );
    write_percentile_plot(&plot, &title, &series)?;
    // A PNG beside the SVG for viewers that do not render SVG.
    write_percentile_plot(&plot.with_extension("png"), &title, &series)?;
    Ok(LatencyOutcome {
        results,
        json,
        plot,
    })
}

/// A throughput session: for each size and each shard count 1..=max, tickbox, raw PUSH/PULL and raw PUB/SUB.
#[derive(Debug, Clone)]
pub struct ThroughputSweep {
    /// Message sizes to run, bytes (raised to the tickbox frame size where smaller).
    pub sizes: Vec<usize>,
    /// Shard counts 1..=this are run for each size.
    pub max_shards: usize,
    /// Size and shards are overwritten per configuration.
    pub base: ThroughputConfig,
}

/// What a throughput session wrote.
pub struct ThroughputOutcome {
    /// One result per configuration that finished, in run order.
    pub results: Vec<ThroughputResult>,
    /// The JSON-lines results file.
    pub json: PathBuf,
}

/// Runs the throughput sweep, appending one JSON line per configuration to `<out>/<stamp>-throughput.json`.
/// Stops between configurations when `stop` is set and returns what finished.
pub fn run_throughput_sweep(
    ctx: &zmq::Context,
    sweep: &ThroughputSweep,
    out: &Path,
    stamp: &str,
    stop: &AtomicBool,
) -> Result<ThroughputOutcome, BenchError> {
    std::fs::create_dir_all(out).map_err(|e| BenchError::io(out, e))?;
    let mut results = Vec::new();
    'outer: for &size in &sweep.sizes {
        for shards in 1..=sweep.max_shards.max(1) {
            let config = ThroughputConfig {
                size: frame_size(size),
                shards,
                ..sweep.base.clone()
            };
            for system in ["tickbox", "raw-pushpull", "raw-pubsub"] {
                if stop.load(Ordering::Relaxed) {
                    tracing::warn!("interrupted: reporting the configurations finished so far");
                    break 'outer;
                }
                tracing::info!(
                    "throughput: {system} over {}, {} B, {shards} shard(s), {:.1} s",
                    config.transport,
                    config.size,
                    (config.warmup + config.duration).as_secs_f64()
                );
                results.push(match system {
                    "tickbox" => tickbox_throughput(ctx, &config)?,
                    "raw-pushpull" => raw_throughput(ctx, RawPattern::PushPull, &config)?,
                    _ => raw_throughput(ctx, RawPattern::PubSub, &config)?,
                });
            }
        }
    }
    if results.is_empty() {
        return Err(BenchError::NoSamples("throughput sweep"));
    }
    let json = out.join(format!("{stamp}-throughput.json"));
    let records: Vec<BenchRecord> = results
        .iter()
        .cloned()
        .map(BenchRecord::Throughput)
        .collect();
    append_jsonl(&json, &records)?;
    Ok(ThroughputOutcome { results, json })
}

/// The stdout table of a throughput session: one row per (size, shards) with the ratio of tickbox to each raw
/// baseline measured in the same run.
pub fn throughput_table(results: &[ThroughputResult]) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:>6} {:>6} | {:>12} {:>9} | {:>14} {:>14} | {:>9} {:>9}",
        "size",
        "shards",
        "tickbox/s",
        "MB/s",
        "raw push/pull",
        "raw pub/sub",
        "×pushpull",
        "×pubsub"
    );
    let find = |system: &str, size: usize, shards: usize| {
        results
            .iter()
            .find(|r| r.system == system && r.size == size && r.shards == shards)
    };
    for r in results.iter().filter(|r| r.system == "tickbox") {
        let pp = find("raw-pushpull", r.size, r.shards);
        let ps = find("raw-pubsub", r.size, r.shards);
        let rate = |x: Option<&ThroughputResult>| {
            x.map_or("-".to_string(), |x| format!("{:.0}", x.msgs_per_s))
        };
        let ratio = |x: Option<&ThroughputResult>| match x {
            Some(x) if x.msgs_per_s > 0.0 => format!("{:.2}", r.msgs_per_s / x.msgs_per_s),
            _ => "-".to_string(),
        };
        let _ = writeln!(
            out,
            "{:>6} {:>6} | {:>12.0} {:>9.1} | {:>14} {:>14} | {:>9} {:>9}",
            r.size,
            r.shards,
            r.msgs_per_s,
            r.mb_per_s,
            rate(pp),
            rate(ps),
            ratio(pp),
            ratio(ps)
        );
    }
    out
}

/// What every measurement of a `tickbox tune sweep` point runs besides the point itself.
#[derive(Debug, Clone, Copy)]
pub struct PointRun {
    /// How the pipeline's stages are connected.
    pub transport: Transport,
    /// Frame size in bytes.
    pub size: usize,
    /// Unmeasured time before each run.
    pub warmup: std::time::Duration,
    /// Measured time of the throughput run and of the latency run.
    pub duration: std::time::Duration,
    /// Offered rate of the latency run, msg/s.
    pub rate: u64,
    /// Run the latency run too (p99 lateness); `false` measures throughput only.
    pub latency: bool,
}

/// Why one sweep point could not be measured (the underlying error, unchanged).
#[derive(Debug, thiserror::Error)]
pub enum PointError {
    /// The point's libzmq context could not be built (e.g. an I/O-thread CPU not allowed).
    #[error(transparent)]
    Context(#[from] tickbox_zmqx::context::ContextError),
    /// A bench run failed.
    #[error(transparent)]
    Bench(#[from] BenchError),
}

/// The pipeline's default configuration as a sweep point (one shard, one worker, the worker pool's HWM and
/// batch, the subscriber's dispatch, libzmq's default I/O threads, unpinned), so a sweep always states its
/// winner against it.
pub fn pipeline_defaults() -> tickbox_tuning::SweepPoint {
    let pool = tickbox_workers::WorkerPoolConfig::default();
    tickbox_tuning::SweepPoint {
        shards: 1,
        workers: 1,
        hwm: pool.hwm,
        batch: pool.batch,
        dispatch: match tickbox_subscriber::SubscriberConfig::default().dispatch {
            tickbox_workers::Dispatch::ByTopic => tickbox_tuning::DispatchMode::ByTopic,
            tickbox_workers::Dispatch::RoundRobin => tickbox_tuning::DispatchMode::RoundRobin,
        },
        io_threads: tickbox_zmqx::context::ContextConfig::default().io_threads,
        pinning: tickbox_tuning::Pinning::No,
        io_cpus: Vec::new(),
        shard_cores: Vec::new(),
        worker_cores: Vec::new(),
        shard_io_thread: None,
    }
}

/// Puts `point`'s worker count, batch, dispatch and pinning into the pipeline's subscriber and worker pool.
fn tune_for(
    point: &tickbox_tuning::SweepPoint,
    sub: &mut tickbox_subscriber::SubscriberConfig,
    pool: &mut tickbox_workers::WorkerPoolConfig,
) {
    pool.count = point.workers.max(1);
    pool.batch = point.batch.max(1);
    pool.cores.clone_from(&point.worker_cores);
    sub.dispatch = match point.dispatch {
        tickbox_tuning::DispatchMode::ByTopic => tickbox_workers::Dispatch::ByTopic,
        tickbox_tuning::DispatchMode::RoundRobin => tickbox_workers::Dispatch::RoundRobin,
    };
    for (i, shard) in sub.shards.iter_mut().enumerate() {
        shard.core = point.shard_cores.get(i).copied();
        shard.io_thread = point.shard_io_thread;
    }
}

/// Measures one sweep point once: the bench pipeline's flat-out throughput and, with `run.latency`, its p99
/// lateness (µs, corrected for coordinated omission) at `run.rate`, on a libzmq context built for the point and
/// with the point's shards, workers, batch, dispatch and pinning. The latency run has one publisher and one SUB
/// shard whatever the point's shard count (an open-loop schedule is one stream); everything else applies.
pub fn measure_point(
    point: &tickbox_tuning::SweepPoint,
    run: &PointRun,
) -> Result<tickbox_tuning::Sample, PointError> {
    let ctx_config = tickbox_zmqx::context::ContextConfig {
        io_threads: point.io_threads,
        io_thread_cpus: point.io_cpus.clone(),
        ..tickbox_zmqx::context::ContextConfig::default()
    };
    let ctx = tickbox_zmqx::context::build(&ctx_config)?;
    let tune = |sub: &mut tickbox_subscriber::SubscriberConfig,
                pool: &mut tickbox_workers::WorkerPoolConfig| {
        tune_for(point, sub, pool)
    };
    let throughput = crate::pipeline::tickbox_throughput_with(
        &ctx,
        &ThroughputConfig {
            transport: run.transport,
            size: run.size,
            shards: point.shards,
            warmup: run.warmup,
            duration: run.duration,
            hwm: point.hwm,
        },
        &tune,
    )?;
    let p99_us = if run.latency {
        let latency = crate::pipeline::tickbox_latency_with(
            &ctx,
            &LatencyConfig {
                rate: run.rate,
                transport: run.transport,
                warmup: run.warmup,
                duration: run.duration,
                size: run.size,
                hwm: point.hwm,
                drain: std::time::Duration::from_millis(100),
                ..LatencyConfig::default()
            },
            &tune,
        )?;
        Some(latency.result().corrected.p99 as f64 / 1_000.0)
    } else {
        None
    };
    Ok(tickbox_tuning::Sample {
        msgs_per_s: throughput.msgs_per_s,
        p99_us,
    })
}
