//! Whole benchmark sessions as the CLI runs them: every configuration beside its raw baseline, report files,
//! plot and JSON-lines results, with progress on the log.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

use crate::env::{drift_warning, Environment, Warning};
use crate::latency::{
    latency_summaries, latency_warnings, rate_label, LatencyConfig, LatencyRun, Shape,
};
use crate::pipeline::{
    frame_size, tickbox_latency, tickbox_throughput, tickbox_throughput_batched, BATCHED,
};
use crate::plot::{write_percentile_plot, write_repeat_plot, RepeatColumn, RepeatGroup, Series};
use crate::process::{raw_processes_latency, tickbox_processes_latency};
use crate::raw::{
    raw_pubsub_latency, raw_throughput, raw_throughput_batched, RawPattern, ThroughputConfig,
};
use crate::report::{BenchRecord, LatencyResult, RunDocument, ThroughputResult};
use crate::stats::{order_label, summary_table, tickbox_first, FigureSummary};
use crate::transport::Transport;
use crate::BenchError;

/// A latency session: every (transport, rate) pair, tickbox and the raw PUB/SUB baseline, each `repeats` times.
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
    /// Runs of each system per configuration, alternating with the baseline (at least 1).
    pub repeats: usize,
    /// The `tickbox` binary whose `feed`, `subscribe` and `bench raw-pub|raw-sub` the processes shape starts
    /// (required for [`Shape::Processes`], unused otherwise).
    pub executable: Option<PathBuf>,
}

/// What a session wrote.
#[derive(Debug, Clone)]
pub struct LatencyOutcome {
    /// One result per run that finished (every repeat), in run order.
    pub results: Vec<LatencyResult>,
    /// The result document (JSON): environment, every repeat, summary, warnings.
    pub json: PathBuf,
    /// The percentile plot (SVG; a PNG of the same name sits beside it).
    pub plot: PathBuf,
    /// The document's contents.
    pub document: RunDocument,
}

impl LatencyOutcome {
    /// The sweep as `tickbox bench latency` prints it after its runs: the machine, how latency was measured and
    /// under what load and hand-off, the table and where the files are. `asked` is the hand-off the user asked
    /// for (`None`: the default); `choice` what it resolved to.
    pub fn report(
        &self,
        sweep: &LatencySweep,
        asked: Option<tickbox_subscriber::Handoff>,
        choice: &tickbox_subscriber::HandoffChoice,
        out: &Path,
        stamp: &str,
    ) -> String {
        use std::fmt::Write as _;
        let base = &sweep.base;
        let mut text = format!("{}\n", self.document.environment.summary_line());
        let _ = writeln!(
            text,
            "one-way latency, open loop; corrected = from intended send time (coordinated omission), unc = from \
             actual send stamp; HWM {} {}; warm-up {} excluded",
            base.hwm,
            if base.back_pressure.blocks() {
                "(--back-pressure block: publishers block)"
            } else {
                "(PUB drops at HWM: see lost)"
            },
            tickbox_units::format_duration(base.warmup)
        );
        let _ = writeln!(
            text,
            "tickbox subscriber hand-off: {} ({}){}",
            choice.handoff,
            choice.reason,
            if asked.is_none_or(|h| h == tickbox_subscriber::Handoff::Auto) {
                " as a plain `subscribe` chooses it (one worker per shard); with more workers than shards \
                 subscribe runs ring: measure it with --handoff ring"
            } else {
                ""
            }
        );
        if base.background.threads > 0 {
            let _ = writeln!(
                text,
                "background load: {} for the whole sweep, beside both systems",
                base.background.describe()
            );
        }
        if base.shape == Shape::Processes {
            let _ = writeln!(
                text,
                "shape: processes over tcp; tickbox = a `tickbox feed` process (one shard, paced, its synthetic \
                 market's quotes and trades) -> a `tickbox subscribe` process (one worker; receive = worker \
                 dequeue), raw = a PUB process -> a SUB process sending --size frames; corrected figures charge \
                 each message from the intended send time its publisher's paced schedule gave it (the publisher \
                 reports the schedule's start)"
            );
        }
        text.push_str(&crate::latency::latency_table(&self.results));
        let _ = writeln!(
            text,
            "files: {} (results), {} and .png (plot), {}/{stamp}-*-r<repeat>.hlog|.hgrm",
            self.json.display(),
            self.plot.display(),
            out.display()
        );
        text
    }
}

/// Runs the sweep, writes `<out>/<stamp>-*-r<N>.{hlog,hgrm}` per repeat, `<out>/<stamp>-latency.{svg,png}` and
/// the result document `<out>/<stamp>-latency.json`. Stops between runs when `stop` is set and reports what
/// finished.
pub fn run_latency_sweep(
    gate: &tickbox_auth::Gate,
    sweep: &LatencySweep,
    out: &Path,
    stamp: &str,
    stop: &AtomicBool,
) -> Result<LatencyOutcome, BenchError> {
    let executable = match (sweep.base.shape, &sweep.executable) {
        (Shape::InProcess, _) => None,
        (Shape::Processes, Some(exe)) => {
            // Refused before anything runs, not after the first configurations.
            for &transport in &sweep.transports {
                crate::process::check_config(&LatencyConfig {
                    transport,
                    ..sweep.base.clone()
                })?;
            }
            Some(exe.as_path())
        }
        (Shape::Processes, None) => {
            return Err(BenchError::InvalidArgument(
                "the processes shape needs the tickbox executable".into(),
            ))
        }
    };
    std::fs::create_dir_all(out).map_err(|e| BenchError::io(out, e))?;
    let mut environment = Environment::capture();
    // For the whole sweep, so tickbox and raw alternate under the same load.
    let load = crate::load::BackgroundLoad::start(sweep.base.background)?;
    let repeats = sweep.repeats.max(1);
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
            for repeat in 0..repeats {
                let mut systems: Vec<&str> = vec!["tickbox"];
                if sweep.raw_baseline {
                    if tickbox_first(repeat) {
                        systems.push("raw");
                    } else {
                        systems.insert(0, "raw");
                    }
                }
                for system in systems {
                    if stop.load(Ordering::Relaxed) {
                        tracing::warn!("interrupted: reporting the runs finished so far");
                        break 'outer;
                    }
                    tracing::info!(
                        "latency: {system} over {transport} at {} msg/s, {} B, {:.1} s, {}{}, repeat {}/{repeats}",
                        rate_label(rate),
                        config.size,
                        secs,
                        config.shape,
                        if config.via_lvc && system == "tickbox" {
                            " via LVC"
                        } else {
                            ""
                        },
                        repeat + 1
                    );
                    let run = match (executable, system == "raw") {
                        (None, true) => raw_pubsub_latency(gate, &config),
                        (None, false) => tickbox_latency(gate, &config),
                        (Some(exe), true) => raw_processes_latency(exe, &config, stop),
                        (Some(exe), false) => tickbox_processes_latency(exe, &config, stop),
                    };
                    let mut run = match run {
                        Ok(run) => run,
                        // Ctrl-C reached the children too and cut this run short: keep the finished ones.
                        Err(e) if stop.load(Ordering::Relaxed) => {
                            tracing::warn!("interrupted ({e}): reporting the runs finished so far");
                            break 'outer;
                        }
                        Err(e) => return Err(e),
                    };
                    run.repeat = repeat as u32 + 1;
                    run.write_files(out, &prefix)?;
                    runs.push(run);
                }
            }
        }
    }
    // The end's load average is read with the load still on: it ran through the whole sweep.
    environment.finish();
    drop(load);
    if runs.is_empty() {
        return Err(BenchError::NoSamples("latency sweep"));
    }
    let results: Vec<LatencyResult> = runs.iter().map(|r| r.result_with_files(&prefix)).collect();
    let mut warnings = latency_warnings(&results);
    warnings.extend(environment.warnings());
    let document = RunDocument {
        bench: "latency".into(),
        environment,
        repeats,
        order: order_label(repeats),
        records: results.iter().cloned().map(BenchRecord::Latency).collect(),
        summary: latency_summaries(&results),
        warnings,
    };
    let json = out.join(format!("{stamp}-latency.json"));
    document.write(&json)?;
    let plot = out.join(format!("{stamp}-latency.svg"));
    let series = latency_series(&runs);
    let title = format!(
        "one-way latency, corrected for coordinated omission ({} B frames; of {} repeat(s) each curve is the one \
         with the median p99, rN/M in the legend)",
        runs[0].size, repeats
    );
    write_percentile_plot(&plot, &title, &series)?;
    // A PNG beside the SVG for viewers that do not render SVG.
    write_percentile_plot(&plot.with_extension("png"), &title, &series)?;
    Ok(LatencyOutcome {
        results,
        json,
        plot,
        document,
    })
}

/// One plot series per (configuration, system): its median repeat by corrected p99 (the lower middle one of an
/// even count), with that repeat's losses, so the curve's p99 is the table's median p99 (merging the repeats'
/// histograms made a tail no repeat had); the label says which repeat of how many. A configuration's tickbox and
/// raw series share a colour (`group`), raw dashed.
pub fn latency_series(runs: &[LatencyRun]) -> Vec<Series> {
    let mut by_label: Vec<(String, Vec<&LatencyRun>)> = Vec::new();
    for run in runs {
        let label = run.label();
        match by_label.iter_mut().find(|(l, _)| *l == label) {
            Some((_, v)) => v.push(run),
            None => by_label.push((label, vec![run])),
        }
    }
    let median_runs: Vec<(String, usize, &LatencyRun)> = by_label
        .into_iter()
        .map(|(label, mut v)| {
            v.sort_by_key(|r| r.samples.corrected.value_at_quantile(0.99));
            let n = v.len();
            (label, n, v[(n - 1) / 2])
        })
        .collect();
    let mut series = merged_series(median_runs.iter().map(|(_, _, r)| *r));
    for (s, (_, n, run)) in series.iter_mut().zip(&median_runs) {
        if *n > 1 {
            s.label = format!("{} r{}/{n}", s.label, run.repeat);
        }
    }
    series
}

/// One series per label of `runs`, histograms merged (callers pass one run per label).
fn merged_series<'a>(runs: impl Iterator<Item = &'a LatencyRun>) -> Vec<Series> {
    let mut series: Vec<Series> = Vec::new();
    let mut groups: Vec<String> = Vec::new();
    for run in runs {
        let config = format!(
            "{}-{}{}{}",
            run.config.transport,
            if run.config.shape == Shape::Processes {
                "proc-"
            } else {
                ""
            },
            if run.config.via_lvc { "lvc-" } else { "" },
            rate_label(run.config.rate)
        );
        let group = match groups.iter().position(|g| *g == config) {
            Some(i) => i,
            None => {
                groups.push(config);
                groups.len() - 1
            }
        };
        let label = run.label();
        let r = run.result();
        match series.iter_mut().find(|s| s.label == label) {
            Some(s) => {
                let _ = s.histogram.add(&run.samples.corrected);
                s.lost += r.lost;
                s.scheduled += r.scheduled;
            }
            None => series.push(Series {
                label,
                histogram: run.samples.corrected.clone(),
                group,
                baseline: run.system != "tickbox",
                lost: r.lost,
                scheduled: r.scheduled,
            }),
        }
    }
    series
}

/// A throughput session: for each size and each shard count 1..=max, tickbox, raw PUSH/PULL and raw PUB/SUB, each
/// `repeats` times.
#[derive(Debug, Clone)]
pub struct ThroughputSweep {
    /// Message sizes to run, bytes (raised to the tickbox frame size where smaller).
    pub sizes: Vec<usize>,
    /// Shard counts 1..=this are run for each size.
    pub max_shards: usize,
    /// Size and shards are overwritten per configuration.
    pub base: ThroughputConfig,
    /// Runs of each system per configuration, alternating with the baselines (at least 1).
    pub repeats: usize,
}

/// What a throughput session wrote.
pub struct ThroughputOutcome {
    /// One result per run that finished (every repeat), in run order.
    pub results: Vec<ThroughputResult>,
    /// The result document (JSON).
    pub json: PathBuf,
    /// The per-repeat plot (PNG; an SVG of the same name sits beside it).
    pub plot: PathBuf,
    /// The document's contents.
    pub document: RunDocument,
}

impl ThroughputOutcome {
    /// The sweep as `tickbox bench throughput` prints it: the machine, what was measured, the table and where the
    /// files are.
    pub fn report(&self, sweep: &ThroughputSweep) -> String {
        let base = &sweep.base;
        format!(
            "{}\nflat-out throughput over {}, {} measured per row; HWM {} send and receive on every socket; no \
             drops: tickbox feed and raw PUB/SUB use XPUB_NODROP, PUSH/PULL blocks; tickbox = feed shards → Black \
             Box shards → as many workers, `batched` rows (the headline) with batch frames as `feed --batch auto` \
             sends them, plain rows one frame per message; raw = one sender/receiver thread pair per shard, \
             `batched` rows against raw sending as many messages per ZeroMQ message as the feed packs (like with \
             like), plain rows against raw one message per ZeroMQ message\n{}files: {} (results), {} and .svg \
             (plot)\n",
            self.document.environment.summary_line(),
            base.transport,
            tickbox_units::format_duration(base.duration),
            base.hwm,
            throughput_table(&self.results),
            self.json.display(),
            self.plot.display()
        )
    }
}

/// Runs the throughput sweep; writes the result document `<out>/<stamp>-throughput.json` and the plot
/// `<out>/<stamp>-throughput.{png,svg}`. Stops between runs when `stop` is set and returns what finished.
pub fn run_throughput_sweep(
    gate: &tickbox_auth::Gate,
    sweep: &ThroughputSweep,
    out: &Path,
    stamp: &str,
    stop: &AtomicBool,
) -> Result<ThroughputOutcome, BenchError> {
    std::fs::create_dir_all(out).map_err(|e| BenchError::io(out, e))?;
    let mut environment = Environment::capture();
    let repeats = sweep.repeats.max(1);
    let mut results = Vec::new();
    'outer: for &size in &sweep.sizes {
        for shards in 1..=sweep.max_shards.max(1) {
            let config = ThroughputConfig {
                size: frame_size(size),
                shards,
                ..sweep.base.clone()
            };
            for repeat in 0..repeats {
                let systems: &[&str] = if tickbox_first(repeat) {
                    &[
                        BATCHED,
                        "tickbox",
                        "raw-pushpull",
                        "raw-pubsub",
                        RAW_PUSHPULL_BATCHED,
                        RAW_PUBSUB_BATCHED,
                    ]
                } else {
                    &[
                        RAW_PUSHPULL_BATCHED,
                        RAW_PUBSUB_BATCHED,
                        "raw-pushpull",
                        "raw-pubsub",
                        "tickbox",
                        BATCHED,
                    ]
                };
                for &system in systems {
                    if stop.load(Ordering::Relaxed) {
                        tracing::warn!("interrupted: reporting the runs finished so far");
                        break 'outer;
                    }
                    tracing::info!(
                        "throughput: {system} over {}, {} B, {shards} shard(s), {:.1} s, repeat {}/{repeats}",
                        config.transport,
                        config.size,
                        (config.warmup + config.duration).as_secs_f64(),
                        repeat + 1
                    );
                    let mut result = match system {
                        "tickbox" => tickbox_throughput(gate, &config)?,
                        BATCHED => tickbox_throughput_batched(gate, &config)?,
                        "raw-pushpull" => raw_throughput(gate, RawPattern::PushPull, &config)?,
                        RAW_PUSHPULL_BATCHED => {
                            raw_throughput_batched(gate, RawPattern::PushPull, &config)?
                        }
                        RAW_PUBSUB_BATCHED => {
                            raw_throughput_batched(gate, RawPattern::PubSub, &config)?
                        }
                        _ => raw_throughput(gate, RawPattern::PubSub, &config)?,
                    };
                    result.repeat = repeat as u32 + 1;
                    results.push(result);
                }
            }
        }
    }
    if results.is_empty() {
        return Err(BenchError::NoSamples("throughput sweep"));
    }
    environment.finish();
    let mut warnings = throughput_warnings(&results);
    warnings.extend(environment.warnings());
    let document = RunDocument {
        bench: "throughput".into(),
        environment,
        repeats,
        order: order_label(repeats),
        records: results
            .iter()
            .cloned()
            .map(BenchRecord::Throughput)
            .collect(),
        summary: throughput_summaries(&results),
        warnings,
    };
    let json = out.join(format!("{stamp}-throughput.json"));
    document.write(&json)?;
    let plot = out.join(format!("{stamp}-throughput.png"));
    let groups = throughput_groups_for_plot(&results);
    let title = format!(
        "flat-out throughput over {}, {} repeat(s): tickbox beside raw libzmq",
        sweep.base.transport, repeats
    );
    write_repeat_plot(&plot, &title, "throughput (msg/s)", &groups)?;
    write_repeat_plot(
        &plot.with_extension("svg"),
        &title,
        "throughput (msg/s)",
        &groups,
    )?;
    Ok(ThroughputOutcome {
        results,
        json,
        plot,
        document,
    })
}

/// The configurations (size, shards) of a throughput session in run order.
fn throughput_configs(results: &[ThroughputResult]) -> Vec<(usize, usize)> {
    let mut configs: Vec<(usize, usize)> = Vec::new();
    for r in results {
        if !configs.contains(&(r.size, r.shards)) {
            configs.push((r.size, r.shards));
        }
    }
    configs
}

/// `system`'s values of `figure` for one configuration, in repeat order.
fn throughput_values(
    results: &[ThroughputResult],
    system: &str,
    config: (usize, usize),
    figure: fn(&ThroughputResult) -> f64,
) -> Vec<f64> {
    let mut rows: Vec<&ThroughputResult> = results
        .iter()
        .filter(|r| r.system == system && (r.size, r.shards) == config)
        .collect();
    rows.sort_by_key(|r| r.repeat);
    rows.into_iter().map(figure).collect()
}

/// The raw baselines with tickbox's batching (as many messages per ZeroMQ message as `feed --batch auto` packs).
const RAW_PUSHPULL_BATCHED: &str = "raw-pushpull-batched";
const RAW_PUBSUB_BATCHED: &str = "raw-pubsub-batched";

const BASELINES: [(&str, &str); 2] = [("raw-pushpull", "×pushpull"), ("raw-pubsub", "×pubsub")];
const BATCHED_BASELINES: [(&str, &str); 2] = [
    (RAW_PUSHPULL_BATCHED, "×pushpull batched"),
    (RAW_PUBSUB_BATCHED, "×pubsub batched"),
];

/// The tickbox configurations of a throughput session, headline first: batch frames (what `feed --batch auto`
/// delivers) against raw libzmq sending the same number of messages per ZeroMQ message, then single frames
/// against raw single messages: like with like. (Files from before the batched baselines compare what they have.)
type Baselines = [(&'static str, &'static str); 2];
const TICKBOX_SYSTEMS: [(&str, &str, Baselines); 2] = [
    (BATCHED, "batched ", BATCHED_BASELINES),
    ("tickbox", "", BASELINES),
];

/// Every figure of a throughput session over its repeats: tickbox msg/s and MB/s against each raw baseline, the
/// batched configuration first (the headline), then single frames (`msg/s ×…` as before).
pub fn throughput_summaries(results: &[ThroughputResult]) -> Vec<FigureSummary> {
    let mut out = Vec::new();
    let repeats = results.iter().map(|r| r.repeat).max().unwrap_or(1) as usize;
    for config in throughput_configs(results) {
        let name = format!(
            "{} B, {} shard(s), {}, {repeats} repeat(s), order {}",
            config.0,
            config.1,
            results[0].transport,
            order_label(repeats)
        );
        type Get = fn(&ThroughputResult) -> f64;
        let figures: [(&str, Get); 2] = [("msg/s", |r| r.msgs_per_s), ("MB/s", |r| r.mb_per_s)];
        for (system, prefix, baselines) in TICKBOX_SYSTEMS {
            for (figure, get) in figures {
                let t = throughput_values(results, system, config, get);
                if t.is_empty() {
                    // Result files from before the batched configuration have single frames only.
                    continue;
                }
                for (baseline, tag) in baselines {
                    let r = throughput_values(results, baseline, config, get);
                    if r.is_empty() {
                        // Files from before the batched baselines: no like-for-like figure to state.
                        continue;
                    }
                    out.push(FigureSummary::new(
                        &name,
                        &format!("{prefix}{figure} {tag}"),
                        &t,
                        baseline,
                        &r,
                        true,
                    ));
                }
            }
        }
    }
    out
}

/// The warnings of a throughput session: a raw baseline that moved more than 20 % between repeats.
pub fn throughput_warnings(results: &[ThroughputResult]) -> Vec<Warning> {
    let mut out = Vec::new();
    for config in throughput_configs(results) {
        for (baseline, _) in BASELINES.into_iter().chain(BATCHED_BASELINES) {
            let values = throughput_values(results, baseline, config, |r| r.msgs_per_s);
            out.extend(drift_warning(
                &format!("{} B, {} shard(s): {baseline} msg/s", config.0, config.1),
                &values,
            ));
        }
    }
    out
}

/// The plot groups of a throughput session: per configuration, tickbox and each baseline's per-repeat msg/s.
pub fn throughput_groups_for_plot(results: &[ThroughputResult]) -> Vec<RepeatGroup> {
    throughput_configs(results)
        .into_iter()
        .map(|config| RepeatGroup {
            label: format!("{} B ×{}", config.0, config.1),
            columns: [
                (BATCHED, "tickbox batched", false),
                (RAW_PUSHPULL_BATCHED, "push/pull batched", true),
                (RAW_PUBSUB_BATCHED, "pub/sub batched", true),
                ("tickbox", "tickbox", false),
                ("raw-pushpull", "push/pull", true),
                ("raw-pubsub", "pub/sub", true),
            ]
            .into_iter()
            .map(|(system, label, raw)| RepeatColumn {
                label: label.to_string(),
                baseline: raw,
                raw,
                values: throughput_values(results, system, config, |r| r.msgs_per_s),
                // Back-pressured (no-drop) runs count what arrived; nothing is dropped to count as lost.
                lost: 0,
                sent: 0,
            })
            .collect(),
        })
        .collect()
}

/// The stdout table of a throughput session: per configuration, tickbox's msg/s and MB/s as the median (min–max)
/// of its repeats beside each raw baseline's, and the ratio of the medians (per-repeat ratio range).
pub fn throughput_table(results: &[ThroughputResult]) -> String {
    summary_table(&throughput_summaries(results), |figure, v| {
        if figure.starts_with("MB/s") {
            format!("{v:.1}")
        } else {
            crate::stats::fmt_sig(v)
        }
    })
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
    pool.count = Some(point.workers.max(1));
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
    let gate = tickbox_auth::Gate::open(&tickbox_zmqx::context::build(&ctx_config)?);
    let tune =
        |sub: &mut tickbox_subscriber::SubscriberConfig,
         pool: &mut tickbox_workers::WorkerPoolConfig| { tune_for(point, sub, pool) };
    let throughput = crate::pipeline::tickbox_throughput_with(
        &gate,
        &ThroughputConfig {
            transport: run.transport,
            size: run.size,
            shards: point.shards,
            warmup: run.warmup,
            duration: run.duration,
            hwm: point.hwm,
            security: Default::default(),
        },
        &tune,
    )?;
    let p99_us = if run.latency {
        let latency = crate::pipeline::tickbox_latency_with(
            &gate,
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

/// CURVE's cost for one group of runs, from `(repeat, rate)` pairs of each side: the ratio of the medians, and
/// the range of the per-repeat ratios (repeat i with CURVE over repeat i without).
struct CurveCost {
    null: f64,
    curve: f64,
    ratio: f64,
    lo: f64,
    hi: f64,
}

impl CurveCost {
    fn of(null: &[(u32, f64)], curve: &[(u32, f64)]) -> Option<CurveCost> {
        let median = |v: &[(u32, f64)]| {
            let mut x: Vec<f64> = v.iter().map(|(_, m)| *m).collect();
            x.sort_by(f64::total_cmp);
            x.get(x.len() / 2).copied()
        };
        let (n, c) = (median(null)?, median(curve)?);
        let ratios: Vec<f64> = null
            .iter()
            .filter_map(|(rep, nv)| {
                let cv = curve.iter().find(|(r, _)| r == rep)?.1;
                (*nv > 0.0).then_some(cv / nv)
            })
            .collect();
        Some(CurveCost {
            null: n,
            curve: c,
            ratio: if n > 0.0 { c / n } else { 0.0 },
            lo: ratios.iter().copied().fold(f64::INFINITY, f64::min),
            hi: ratios.iter().copied().fold(0.0, f64::max),
        })
    }
}

/// What CURVE costs a replay (`bench replay --security curve`): per system, records/s with CURVE over without,
/// same run, as [`curve_cost_table`] does for throughput.
pub fn replay_curve_cost_table(
    null: &[crate::report::ReplayResult],
    curve: &[crate::report::ReplayResult],
) -> String {
    let mut out = String::from(
        "CURVE cost: records/s with CURVE / without, same run (median; per-repeat min-max)\n\
         system       null records/s  curve records/s   ratio  spread\n",
    );
    for system in ["tickbox", "raw"] {
        let rates = |rows: &[crate::report::ReplayResult]| -> Vec<(u32, f64)> {
            rows.iter()
                .filter(|r| r.system.starts_with(system))
                .map(|r| (r.repeat, r.records_per_s))
                .collect()
        };
        if let Some(c) = CurveCost::of(&rates(null), &rates(curve)) {
            out.push_str(&format!(
                "{:<12} {:>15} {:>16} {:>7.2}  {:.2}-{:.2}\n",
                system,
                crate::stats::fmt_sig(c.null),
                crate::stats::fmt_sig(c.curve),
                c.ratio,
                c.lo,
                c.hi
            ));
        }
    }
    out
}

/// What CURVE costs (`bench throughput --security curve`): per system, size and shard count, CURVE's median
/// msgs/s over NULL's from the same run, and the spread of the per-repeat ratios (repeat i of one against
/// repeat i of the other).
pub fn curve_cost_table(null: &[ThroughputResult], curve: &[ThroughputResult]) -> String {
    use std::collections::BTreeMap;
    type Key = (String, usize, usize);
    let group = |rows: &[ThroughputResult]| {
        let mut by: BTreeMap<Key, Vec<(u32, f64)>> = BTreeMap::new();
        for r in rows {
            by.entry((r.system.clone(), r.size, r.shards))
                .or_default()
                .push((r.repeat, r.msgs_per_s));
        }
        by
    };
    let (null, curve) = (group(null), group(curve));
    let mut out = String::from(
        "CURVE cost: msgs/s with CURVE / without, same run (median; per-repeat min-max)\n\
         system          size  shards   null msgs/s  curve msgs/s   ratio  spread\n",
    );
    for (key, n) in &null {
        let Some(cost) = curve.get(key).and_then(|c| CurveCost::of(n, c)) else {
            continue;
        };
        out.push_str(&format!(
            "{:<14} {:>5} {:>7} {:>13} {:>13} {:>7.2}  {:.2}-{:.2}\n",
            key.0,
            key.1,
            key.2,
            crate::stats::fmt_sig(cost.null),
            crate::stats::fmt_sig(cost.curve),
            cost.ratio,
            cost.lo,
            cost.hi
        ));
    }
    out
}

#[cfg(test)]
mod curve_cost_tests {
    use super::CurveCost;

    #[test]
    fn ratios_pair_repeats_by_number_and_medians_by_rank() {
        // Repeat 2 is missing under CURVE: it takes no part in the spread.
        let null = [(1, 100.0), (2, 300.0), (3, 200.0)];
        let curve = [(3, 50.0), (1, 40.0)];
        let c = CurveCost::of(&null, &curve).unwrap();
        assert_eq!((c.null, c.curve), (200.0, 50.0));
        assert_eq!(c.ratio, 0.25);
        assert_eq!((c.lo, c.hi), (0.25, 0.4));
        assert!(CurveCost::of(&null, &[]).is_none());
    }
}

/// A whole `tickbox tune sweep`: every point of `grid` (and the pipeline's defaults, always measured so the winner
/// can be stated against them), `repeats` rounds of each, ranked by `objective`.
#[derive(Debug, Clone)]
pub struct GridSweep {
    /// The dimensions to cross.
    pub grid: tickbox_tuning::sweep::Grid,
    /// What every measurement runs besides the point itself.
    pub run: PointRun,
    /// Rounds over every point (at least 1).
    pub repeats: usize,
    /// What "best" means.
    pub objective: tickbox_tuning::sweep::Objective,
    /// The most points the grid may have; a bigger grid is refused before anything runs.
    pub max_points: usize,
}

/// What a [`GridSweep`] found.
#[derive(Debug, Clone)]
pub struct GridSweepOutcome {
    /// Every point's figures, best first.
    pub results: Vec<tickbox_tuning::sweep::PointResult>,
    /// The pipeline's defaults, as measured among the points.
    pub defaults: tickbox_tuning::SweepPoint,
}

/// Why a [`GridSweep`] did not finish.
#[derive(Debug, thiserror::Error)]
pub enum GridSweepError {
    /// The grid is over its bound.
    #[error("the grid has {points} points, over --max-points {max}: narrow a dimension or raise the bound")]
    TooBig {
        /// Points the grid crosses to.
        points: usize,
        /// The bound.
        max: usize,
    },
    /// A point could not be measured.
    #[error(transparent)]
    Point(#[from] PointError),
}

impl GridSweep {
    /// Measures every point, in rounds, logging each measurement and the grid's pinning problems (as warnings,
    /// also on stderr: a plan that cannot be followed changes what the figures mean).
    pub fn run(&self) -> Result<GridSweepOutcome, GridSweepError> {
        if self.grid.size() > self.max_points {
            return Err(GridSweepError::TooBig {
                points: self.grid.size(),
                max: self.max_points,
            });
        }
        for problem in self.grid.plan_problems() {
            tracing::warn!("sweep: {problem}");
            eprintln!("sweep: {problem}");
        }
        let mut points = self.grid.points();
        let defaults = pipeline_defaults();
        if !points.contains(&defaults) {
            points.push(defaults.clone());
        }
        let per_run = self.run.warmup + self.run.duration;
        let runs = points.len() * self.repeats * if self.run.latency { 2 } else { 1 };
        tracing::info!(
            "sweep: {} points x {} repeats, about {:.0} s",
            points.len(),
            self.repeats,
            runs as f64 * (per_run.as_secs_f64() + 0.25)
        );
        let results = tickbox_tuning::sweep::run(
            &points,
            self.repeats,
            self.objective,
            &defaults,
            |point, round| {
                let sample = measure_point(point, &self.run)?;
                tracing::info!(
                    "round {}/{}: {} -> {:.0} msg/s{}",
                    round + 1,
                    self.repeats,
                    point.label(),
                    sample.msgs_per_s,
                    sample
                        .p99_us
                        .map_or(String::new(), |p| format!(", p99 {p:.1} us"))
                );
                Ok::<_, GridSweepError>(sample)
            },
        )?;
        Ok(GridSweepOutcome { results, defaults })
    }
}
