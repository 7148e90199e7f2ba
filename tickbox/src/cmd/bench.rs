//! `tickbox bench`: latency and throughput of the real pipeline, always beside raw libzmq measured in the same run.
//!
//! * `latency`: open-loop load at fixed offered rates; HdrHistogram corrected for coordinated omission (each
//!   message is charged from its intended send time) and uncorrected (from its actual send stamp); per
//!   configuration an `.hlog` interval log and `.hgrm` percentile files; one SVG percentile plot; a table.
//! * `throughput`: flat-out, back-pressured (no silent drops) messages/s and MB/s per size and shard count,
//!   tickbox with batch frames (the headline, as `feed --batch auto` sends them) and with single frames, beside
//!   raw PUSH/PULL and PUB/SUB pairs.
//! * `replay`: a generated journal replayed at `--speed max` into a Black Box, beside raw XPUB → SUB.
//! * `record`: a batched lossless feed recorded into a journal, beside the Black Box (`subscribe --workers 1`) on
//!   the same feed and a raw SUB copying the same messages into an mmap'd file.
//! * `compress`: what `journal compress` gains on disk and costs a reader, on the synthetic feed and on journals
//!   given (`--journal`, e.g. DBN files imported with `tickbox import`).
//! * `compare`: deltas between two result files (medians of their repeats).
//!
//! Every figure is measured `--repeats` times (default 3), tickbox and raw alternating, and printed as the median
//! with the min–max of the repeats; the result file stores every repeat, the machine's environment and the
//! warnings (also printed to stderr; they never change the exit code).

use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};

use anyhow::Context as _;
use tickbox_bench::env::Warning;
use tickbox_bench::process::{raw_pub_process, raw_sub_process, RAW_PUB_ENDPOINT_LINE};
use tickbox_bench::record::{run_record_bench, RecordBenchConfig};
use tickbox_bench::replay::{run_replay_bench, ReplayBenchConfig};
use tickbox_bench::report::{compare, compare_verdict, read_results, unix_seconds};
use tickbox_bench::request::{
    compress_heading, compress_request, raw_process_config, LatencyRequest,
};
use tickbox_bench::sweep::{
    run_latency_sweep, run_throughput_sweep, throughput_table, LatencySweep, ThroughputSweep,
};
use tickbox_bench::{latency_table, parse_duration, LatencyConfig, Shape, ThroughputConfig};

use crate::cli::bench::{
    Args, BenchCommand, BenchSecurity, CompressArgs, LatencyArgs, RawProcessArgs, RecordArgs,
    ReplayArgs, ShapeArg, ThroughputArgs,
};
use crate::config::TickboxConfig;
use crate::exit_code;
use crate::out::{errln, out, outln};

impl RawProcessArgs {
    fn config(&self) -> anyhow::Result<LatencyConfig> {
        let (rate, warmup, duration, drain) =
            (&self.rate, &self.warmup, &self.duration, &self.drain);
        Ok(raw_process_config(
            rate,
            warmup,
            duration,
            self.size,
            self.hwm,
            self.no_drop,
            drain,
        )?)
    }
}

pub(crate) fn run(args: Args, config: &TickboxConfig) -> anyhow::Result<ExitCode> {
    match args.command {
        BenchCommand::Latency(a) => latency(a),
        BenchCommand::Throughput(a) => throughput(a),
        BenchCommand::Replay(a) => replay(a),
        BenchCommand::Record(a) => record(a, config),
        BenchCommand::Compress(a) => compress(a),
        BenchCommand::Compare(a) => {
            let before = read_results(&a.before)?;
            let after = read_results(&a.after)?;
            out!("{}", compare(&before, &after));
            let Some(ratio) = a.fail_above else {
                return Ok(ExitCode::from(exit_code::OK));
            };
            let Some(failure) = compare_verdict(&before, &after, ratio).failure(ratio) else {
                return Ok(ExitCode::from(exit_code::OK));
            };
            for line in failure {
                errln!("{line}");
            }
            Ok(ExitCode::from(exit_code::REGRESSION))
        }
        BenchCommand::RawPub(a) => raw_pub(a),
        BenchCommand::RawSub(a) => raw_sub(a),
    }
}

fn raw_pub(a: RawProcessArgs) -> anyhow::Result<ExitCode> {
    let stop = crate::shutdown::flag();
    let summary = raw_pub_process(&a.config()?, &stop, |endpoint| {
        // The parent reads this line for the endpoint; stdout carries only the summary.
        errln!("{RAW_PUB_ENDPOINT_LINE}{endpoint}");
    })?;
    crate::out::json(&summary)?;
    Ok(ExitCode::from(exit_code::OK))
}

fn raw_sub(a: RawProcessArgs) -> anyhow::Result<ExitCode> {
    let stop = crate::shutdown::flag();
    let config = a.config()?;
    let endpoint = a.connect.context("raw-sub needs --connect")?;
    let out = a.out.context("raw-sub needs --out")?;
    let summary = raw_sub_process(&endpoint, &config, a.capacity, config.drain, &out, &stop)?;
    crate::out::json(&summary)?;
    Ok(ExitCode::from(exit_code::OK))
}

fn latency(a: LatencyArgs) -> anyhow::Result<ExitCode> {
    if a.no_drop {
        tracing::warn!("--no-drop is deprecated: write --back-pressure block");
    }
    let back_pressure = if a.no_drop {
        tickbox_zmqx::BackPressure::Block
    } else {
        a.back_pressure.unwrap_or(tickbox_zmqx::BackPressure::Drop)
    };
    // Resolved here as `subscribe` resolves it for the bench's one shard and one worker, so the figures and the
    // line below name the hand-off that ran.
    let handoff_choice = tickbox_bench::pipeline::latency_handoff(a.handoff.unwrap_or_default());
    let handoff = handoff_choice.handoff;
    let shape = match a.shape {
        ShapeArg::InProcess => Shape::InProcess,
        ShapeArg::Processes => Shape::Processes,
    };
    let executable = match shape {
        Shape::InProcess => None,
        Shape::Processes => Some(
            std::env::current_exe().context("--shape processes: finding the tickbox executable")?,
        ),
    };
    let request = LatencyRequest {
        rate: a.rate.clone(),
        rates: a.rates.clone(),
        transports: a.transport.clone(),
        duration: a.duration.clone(),
        warmup: a.warmup.clone(),
        size: a.size,
        hwm: a.hwm,
        back_pressure,
        via_lvc: a.via_lvc,
        handoff,
        idle_spin: a.idle_spin,
        shard_runs_asleep: a.shard_runs_asleep,
        stall_every: a.stall_every,
        stall: a.stall.clone(),
        log_interval: a.log_interval.clone(),
        raw_baseline: !a.no_raw,
        repeats: a.repeat,
        shape,
        executable,
        background: tickbox_bench::load::LoadSpec {
            threads: a.background_load,
            duty_percent: a.background_duty,
        },
    };
    let sweep = request.sweep()?;
    let stop = crate::shutdown::flag();
    let ctx = zmq::Context::new();
    let (gate, sweep) = match a.security {
        BenchSecurity::Null => (tickbox_auth::Gate::open(&ctx), sweep),
        BenchSecurity::Curve => sweep.under_curve(&ctx)?,
    };
    if a.security == BenchSecurity::Curve {
        outln!("under CURVE: every socket of tickbox and of raw libzmq encrypts and authenticates");
    }
    let stamp = unix_seconds().to_string();
    if let Some(every) = a.metrics_scrape {
        out!(
            "{}",
            metrics_off_table(&gate, &sweep, &a.out, &stamp, &stop)?
        );
        outln!(
            "metrics on (served, scraped every {}):",
            tickbox_units::format_duration(every)
        );
        tickbox_bench::scrape::set_metrics_scrape(Some(every));
    }
    let outcome = run_latency_sweep(&gate, &sweep, &a.out, &stamp, &stop)
        .context("latency benchmark failed")?;
    out!(
        "{}",
        outcome.report(&sweep, a.handoff, &handoff_choice, &a.out, &stamp)
    );
    Ok(finish(&outcome.document.warnings, &stop))
}

/// `bench latency --metrics-scrape`: the sweep with metrics off, as its table.
fn metrics_off_table(
    gate: &tickbox_auth::Gate,
    sweep: &LatencySweep,
    out: &std::path::Path,
    stamp: &str,
    stop: &AtomicBool,
) -> anyhow::Result<String> {
    let off = run_latency_sweep(gate, sweep, out, &format!("{stamp}-metrics-off"), stop)
        .context("latency benchmark (metrics off) failed")?;
    Ok(format!("metrics off:\n{}", latency_table(&off.results)))
}

fn throughput(a: ThroughputArgs) -> anyhow::Result<ExitCode> {
    anyhow::ensure!(!a.sizes.is_empty(), "--sizes needs at least one size");
    anyhow::ensure!(
        a.sizes.iter().all(|&s| s > 0 && s <= 16 << 20),
        "sizes must be 1 B to 16 MiB"
    );
    anyhow::ensure!((1..=64).contains(&a.shards), "--shards must be 1 to 64");
    let duration = parse_duration(&a.duration)?;
    anyhow::ensure!(!duration.is_zero(), "--duration must be positive");
    let sweep = ThroughputSweep {
        sizes: a.sizes.clone(),
        max_shards: a.shards,
        base: ThroughputConfig {
            transport: a.transport.parse()?,
            size: 0,
            shards: 1,
            warmup: parse_duration(&a.warmup)?,
            duration,
            hwm: a.hwm,
            security: Default::default(),
        },
        repeats: a.repeat,
    };
    let stop = crate::shutdown::flag();
    let ctx = zmq::Context::new();
    let stamp = unix_seconds().to_string();
    let open_gate = tickbox_auth::Gate::open(&ctx);
    if let Some(every) = a.metrics_scrape {
        let off = run_throughput_sweep(
            &open_gate,
            &sweep,
            &a.out,
            &format!("{stamp}-metrics-off"),
            &stop,
        )
        .context("throughput benchmark (metrics off) failed")?;
        outln!("metrics off:");
        out!("{}", throughput_table(&off.results));
        outln!(
            "metrics on (served, scraped every {}):",
            tickbox_units::format_duration(every)
        );
        tickbox_bench::scrape::set_metrics_scrape(Some(every));
    }
    let outcome = run_throughput_sweep(&open_gate, &sweep, &a.out, &stamp, &stop)
        .context("throughput benchmark failed")?;
    if a.security == BenchSecurity::Curve {
        let (gate, curve_sweep) = sweep.under_curve(&ctx)?;
        let curve = run_throughput_sweep(
            &gate,
            &curve_sweep,
            &a.out,
            &format!("{stamp}-curve"),
            &stop,
        )
        .context("throughput benchmark under CURVE failed")?;
        outln!("without CURVE:");
        out!("{}", throughput_table(&outcome.results));
        outln!("with CURVE:");
        out!("{}", throughput_table(&curve.results));
        out!(
            "{}",
            tickbox_bench::sweep::curve_cost_table(&outcome.results, &curve.results)
        );
    }
    out!("{}", outcome.report(&sweep));
    Ok(finish(&outcome.document.warnings, &stop))
}

fn replay(a: ReplayArgs) -> anyhow::Result<ExitCode> {
    anyhow::ensure!(a.records > 0, "--records must be positive");
    anyhow::ensure!((1..=64).contains(&a.workers), "--workers must be 1 to 64");
    let config = ReplayBenchConfig {
        records: a.records,
        workers: a.workers,
        repeats: a.repeat,
        drain: parse_duration(&a.drain)?,
        batch: a.batch.and_then(tickbox_feed::Batching::max_records),
        ..ReplayBenchConfig::default()
    };
    let stop = crate::shutdown::flag();
    let ctx = zmq::Context::new();
    let stamp = unix_seconds().to_string();
    let outcome = run_replay_bench(
        &tickbox_auth::Gate::open(&ctx),
        &config,
        &a.out,
        &stamp,
        &stop,
    )
    .context("replay benchmark failed")?;
    if a.security == BenchSecurity::Curve {
        let (gate, curve_config) = config.under_curve(&ctx)?;
        let curve = run_replay_bench(
            &gate,
            &curve_config,
            &a.out,
            &format!("{stamp}-curve"),
            &stop,
        )
        .context("replay benchmark under CURVE failed")?;
        out!(
            "{}",
            tickbox_bench::sweep::replay_curve_cost_table(&outcome.results, &curve.results)
        );
    }
    out!("{}", outcome.report());
    Ok(finish(&outcome.document.warnings, &stop))
}

fn compress(a: CompressArgs) -> anyhow::Result<ExitCode> {
    use tickbox_bench::compress::{compress_table, run_compress_bench};
    let config = compress_request(a.records, &a.journals, a.repeat, a.level);
    let results = run_compress_bench(&config).context("compress benchmark failed")?;
    if a.json {
        crate::out::json(&results)?;
    } else {
        outln!("{}", compress_heading(a.level));
        crate::out::out!("{}", compress_table(&results));
    }
    Ok(ExitCode::from(exit_code::OK))
}

fn record(a: RecordArgs, config: &TickboxConfig) -> anyhow::Result<ExitCode> {
    anyhow::ensure!(a.records > 0, "--records must be positive");
    let bench = RecordBenchConfig {
        records: a.records,
        shards: a.shards,
        repeats: a.repeat,
        segment_size: a.segment_size.unwrap_or(config.recorder.segment_size.0),
        subscribe: !a.no_subscribe,
        drain: parse_duration(&a.drain)?,
        ..RecordBenchConfig::default()
    };
    let stop = crate::shutdown::flag();
    let gate = tickbox_auth::Gate::open(&zmq::Context::new());
    let stamp = unix_seconds().to_string();
    let outcome = run_record_bench(&gate, &bench, &a.out, &stamp, &stop)
        .context("record benchmark failed")?;
    out!("{}", outcome.report());
    Ok(finish(&outcome.document.warnings, &stop))
}

/// Prints the warnings to stderr (they are in the result file too) and gives the exit code: warnings never change
/// it, an interrupted run does.
fn finish(warnings: &[Warning], stop: &AtomicBool) -> ExitCode {
    for w in warnings {
        errln!("warning: {w}");
    }
    if stop.load(Ordering::Relaxed) {
        ExitCode::from(exit_code::ERROR)
    } else {
        ExitCode::from(exit_code::OK)
    }
}
