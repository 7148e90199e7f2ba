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

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::Context as _;
use tickbox_bench::env::Warning;
use tickbox_bench::process::{raw_pub_process, raw_sub_process, RAW_PUB_ENDPOINT_LINE};
use tickbox_bench::record::{record_runs_table, record_table, run_record_bench, RecordBenchConfig};
use tickbox_bench::replay::{replay_table, run_replay_bench, ReplayBenchConfig};
use tickbox_bench::report::{compare, compare_verdict, read_results, unix_seconds, RunDocument};
use tickbox_bench::sweep::{
    run_latency_sweep, run_throughput_sweep, throughput_table, LatencySweep, ThroughputSweep,
};
use tickbox_bench::{
    latency_table, parse_duration, parse_rate, LatencyConfig, Shape, Stall, ThroughputConfig,
    Transport,
};

use crate::config::TickboxConfig;
use crate::exit_code;
use crate::out::{out, outln};

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    #[command(subcommand)]
    command: BenchCommand,
}

#[derive(Debug, clap::Subcommand)]
enum BenchCommand {
    /// One-way latency (worker receive − publisher send) at fixed offered rates, tickbox beside raw PUB/SUB.
    Latency(LatencyArgs),
    /// Flat-out messages/s and MB/s per message size and shard count, tickbox (batched as `feed --batch auto`, and
    /// single frames) beside raw PUSH/PULL and PUB/SUB.
    Throughput(ThroughputArgs),
    /// Records/s of a journal replayed at --speed max into a Black Box, beside raw XPUB_NODROP → SUB.
    Replay(ReplayArgs),
    /// Records/s of a batched lossless feed written by the recorder, beside the Black Box (one worker) on the same
    /// feed and a raw SUB copying the same messages into an mmap'd file.
    Record(RecordArgs),
    /// What `journal compress` gains and costs: the compression ratio, the read rate (records/s) of the plain and
    /// the compressed copy, alternating, and a seek to the last tenth of the capture times, on the synthetic feed's
    /// records and on each --journal.
    Compress(CompressArgs),
    /// Print the changes between two result files (written by `latency`, `throughput`, `replay` or `record`).
    Compare(CompareArgs),
    /// The raw publisher process of `latency --shape processes` (started by the bench, not by hand).
    #[command(hide = true)]
    RawPub(RawProcessArgs),
    /// The raw subscriber process of `latency --shape processes` (started by the bench, not by hand).
    #[command(hide = true)]
    RawSub(RawProcessArgs),
}

/// Where `bench latency` runs the systems it measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum ShapeArg {
    /// Threads of the bench process (any transport).
    InProcess,
    /// Separate processes over tcp: `tickbox feed` → `tickbox subscribe` beside a raw PUB process → SUB process.
    Processes,
}

/// The schedule and sockets of a raw child of `latency --shape processes`, as the parent passes them.
#[derive(Debug, clap::Args)]
struct RawProcessArgs {
    #[arg(long, value_name = "RATE")]
    rate: String,
    #[arg(long, value_name = "DURATION")]
    warmup: String,
    #[arg(long, value_name = "DURATION")]
    duration: String,
    #[arg(long, value_name = "BYTES")]
    size: usize,
    #[arg(long, value_name = "N")]
    hwm: i32,
    #[arg(long)]
    no_drop: bool,
    /// Publisher: how long the socket stays open for the tail. Subscriber: how long without a frame ends it.
    #[arg(long, value_name = "DURATION")]
    drain: String,
    /// Subscriber only: the publisher's endpoint.
    #[arg(long, value_name = "EP")]
    connect: Option<String>,
    /// Subscriber only: samples to make room for.
    #[arg(long, default_value_t = 0)]
    capacity: usize,
    /// Subscriber only: the sample file to write.
    #[arg(long, value_name = "PATH")]
    out: Option<PathBuf>,
}

impl RawProcessArgs {
    fn config(&self) -> anyhow::Result<LatencyConfig> {
        Ok(LatencyConfig {
            rate: parse_rate(&self.rate)?,
            warmup: parse_duration(&self.warmup)?,
            duration: parse_duration(&self.duration)?,
            size: self.size,
            hwm: self.hwm,
            back_pressure: tickbox_zmqx::BackPressure::from_blocks(self.no_drop),
            drain: parse_duration(&self.drain)?,
            ..LatencyConfig::default()
        })
    }
}

/// Parses `--repeats`: a whole number, at least 1.
#[derive(Debug, clap::Args)]
struct LatencyArgs {
    /// Offered rate in msg/s (e.g. 100k). Default 100k.
    #[arg(long, conflicts_with = "rates", value_name = "RATE")]
    rate: Option<String>,
    /// Comma-separated rates to sweep, e.g. 10k,100k,500k,1m.
    #[arg(long, value_delimiter = ',', value_name = "RATE[,RATE…]")]
    rates: Vec<String>,
    /// Transports, comma-separated: tcp (loopback), ipc, inproc.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "tcp",
        value_name = "tcp|ipc|inproc[,…]"
    )]
    transport: Vec<String>,
    /// Measured time per configuration (e.g. 5s, 500ms).
    #[arg(long, default_value = "5s", value_name = "DURATION")]
    duration: String,
    /// Unrecorded traffic before the measured window.
    #[arg(long, default_value = "1s", value_name = "DURATION")]
    warmup: String,
    /// Frame size in bytes (tickbox trades with a padded topic; at least 69). The raw baseline sends the same.
    #[arg(long, default_value_t = 100, value_parser = crate::bounds::frame_bytes, value_name = "BYTES")]
    size: usize,
    /// Send and receive high-water mark of every socket on the path, in messages.
    #[arg(long, default_value_t = 100_000, value_name = "N")]
    hwm: i32,
    /// At the HWM publishers `drop` (the default: lost messages are counted) or `block` (XPUB_NODROP).
    #[arg(long, value_name = "drop|block")]
    back_pressure: Option<tickbox_zmqx::BackPressure>,
    /// Deprecated spelling of `--back-pressure block`.
    #[arg(long, hide = true, conflicts_with = "back_pressure")]
    no_drop: bool,
    /// Route the tickbox path through the LVC proxy.
    #[arg(long)]
    via_lvc: bool,
    /// How the tickbox subscriber's shard hands records to its one worker: auto (default: what `tickbox subscribe`
    /// chooses for one shard and one worker, which is inline), ring (parcels to a worker thread, what subscribe
    /// runs when workers share a shard), zmq, or inline (the worker runs on the shard's thread). The output says
    /// which was measured and why.
    #[arg(long, value_name = "auto|ring|zmq|inline")]
    handoff: Option<tickbox_subscriber::Handoff>,
    /// Inject a consumer stall every N messages (see --stall); shows what a slow worker does to the tail.
    #[arg(long, requires = "stall", value_name = "N")]
    stall_every: Option<u64>,
    /// Length of each injected stall (e.g. 1ms).
    #[arg(long, requires = "stall_every", value_name = "DURATION")]
    stall: Option<String>,
    /// Length of each interval in the .hlog files.
    #[arg(long, default_value = "1s", value_name = "DURATION")]
    log_interval: String,
    /// Skip the raw-libzmq baseline (figures then have nothing to be compared with; for quick iteration only).
    #[arg(long)]
    no_raw: bool,
    /// Runs of each system per configuration, tickbox and raw alternating; figures are medians (min–max).
    #[arg(long = "repeats", alias = "repeat", default_value = "3", value_parser = crate::bounds::repeat, value_name = "N")]
    repeat: usize,
    /// `in-process`: publisher and receivers are threads of this process. `processes` (tcp only): a real
    /// `tickbox feed` process and a real `tickbox subscribe` process, beside a raw PUB process and SUB process.
    #[arg(long, value_enum, default_value_t = ShapeArg::InProcess)]
    shape: ShapeArg,
    /// Directory for .hlog, .hgrm, .svg and .json files.
    #[arg(long, default_value = "bench-results", value_name = "PATH")]
    out: PathBuf,
    /// What metrics cost: run the sweep twice, first as it is, then with the subscriber serving its metrics and
    /// scraped every D (`100ms`: ten times a busy Prometheus), and print both (in-process shape).
    #[arg(long, value_name = "DURATION", value_parser = tickbox_units::parse_duration)]
    metrics_scrape: Option<Duration>,
    /// `curve`: every socket of both systems runs CurveZMQ (one fresh key pair, no allow-list), so the ratios
    /// compare tickbox under CURVE with raw libzmq under CURVE (in-process shape, tcp or ipc).
    #[arg(long, value_enum, default_value_t = BenchSecurity::Null)]
    security: BenchSecurity,
    /// Run N busy threads for the whole sweep (both systems alike), so a figure under load reproduces: the other
    /// work of a shared machine, on purpose. 0 (default) adds none.
    #[arg(long, default_value_t = 0, value_name = "N", value_parser = clap::value_parser!(u32).range(0..=256))]
    background_load: u32,
    /// Share of every 10 ms each --background-load thread is busy, in percent (1–100; it sleeps the rest).
    #[arg(long, default_value_t = 100, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=100))]
    background_duty: u32,
}

#[derive(Debug, clap::Args)]
struct ThroughputArgs {
    /// Message sizes in bytes, comma-separated (tickbox frames are at least 69 bytes; smaller sizes are raised).
    #[arg(long, value_delimiter = ',', default_value = "64,100,256,1024", value_parser = crate::bounds::frame_bytes, value_name = "BYTES[,BYTES…]")]
    sizes: Vec<usize>,
    /// Shard counts 1..=N are measured; at most 64.
    #[arg(long, default_value_t = 1, value_parser = crate::bounds::shards, value_name = "N")]
    shards: usize,
    /// Measured time per configuration.
    #[arg(long, default_value = "3s", value_name = "DURATION")]
    duration: String,
    #[arg(long, default_value = "500ms", value_name = "DURATION")]
    warmup: String,
    #[arg(long, default_value = "tcp", value_name = "tcp|ipc|inproc")]
    transport: String,
    /// Send and receive high-water mark of every socket, in messages.
    #[arg(long, default_value_t = 10_000, value_name = "N")]
    hwm: i32,
    /// Runs of each system per configuration, tickbox and raw alternating; figures are medians (min–max).
    #[arg(long = "repeats", alias = "repeat", default_value = "3", value_parser = crate::bounds::repeat, value_name = "N")]
    repeat: usize,
    #[arg(long, default_value = "bench-results", value_name = "PATH")]
    out: PathBuf,
    /// `curve`: run the sweep without and then with CURVE on every socket (both systems, one fresh key pair,
    /// ZAP running) and print what CURVE costs, as a ratio from the same run.
    #[arg(long, value_enum, default_value_t = BenchSecurity::Null)]
    security: BenchSecurity,
    /// What metrics cost: run the sweep twice, first as it is, then with the subscriber serving its metrics and
    /// scraped every D, and print both.
    #[arg(long, value_name = "DURATION", value_parser = tickbox_units::parse_duration)]
    metrics_scrape: Option<Duration>,
}

/// The mechanism `bench throughput` measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum BenchSecurity {
    /// No security (as deployed without `[security]`).
    Null,
    /// NULL and CURVE, back to back, with the ratio.
    Curve,
}

#[derive(Debug, clap::Args)]
struct ReplayArgs {
    /// Records of generated market data (quotes and trades, ~90 B frames) written to a temporary journal.
    #[arg(long, default_value_t = 1_000_000, value_name = "N")]
    records: u64,
    /// Black Box workers that decode every record; at most 256.
    #[arg(long, default_value_t = 1, value_parser = crate::bounds::workers, value_name = "N")]
    workers: usize,
    /// Runs of each system, tickbox and raw alternating; figures are medians (min–max).
    #[arg(long = "repeats", alias = "repeat", default_value = "3", value_parser = crate::bounds::repeat, value_name = "N")]
    repeat: usize,
    /// After the sender finishes, how long the receiver may take for the rest before it counts as lost.
    #[arg(long, default_value = "10s", value_name = "DURATION")]
    drain: String,
    /// Most records per replayed batch frame, as `replay --batch` (0 or 1: one record per message). Default from
    /// the `[recorder]` config (`replay_batch_records`).
    #[arg(long, value_name = "N")]
    batch: Option<u16>,
    /// Directory for the .json result document and the .png/.svg plot.
    #[arg(long, default_value = "bench-results", value_name = "PATH")]
    out: PathBuf,
    /// `curve`: run the bench without and then with CURVE on every socket of both systems and print what CURVE
    /// costs, as a ratio from the same run.
    #[arg(long, value_enum, default_value_t = BenchSecurity::Null)]
    security: BenchSecurity,
}

#[derive(Debug, clap::Args)]
struct RecordArgs {
    /// Data records the feed sends per run, over all shards (rounded up to a multiple of --shards).
    #[arg(long, default_value_t = 500_000, value_name = "N")]
    records: u64,
    /// Feed shards; the recorder reads each on its own thread, the Black Box on its own SUB shard.
    #[arg(long, default_value_t = 1, value_parser = crate::bounds::shards, value_name = "N")]
    shards: usize,
    /// Runs of each system, in alternating order; figures are medians (min–max).
    #[arg(long = "repeats", alias = "repeat", default_value = "3", value_parser = crate::bounds::repeat, value_name = "N")]
    repeat: usize,
    /// Journal segment size, and raw file size (default from config: `[recorder] segment_size`).
    #[arg(long, value_parser = tickbox_units::parse_size, value_name = "SIZE")]
    segment_size: Option<u64>,
    /// Leave out the Black Box (`subscribe --workers 1`) runs.
    #[arg(long)]
    no_subscribe: bool,
    /// How long a system may go without a new record before the rest counts as lost.
    #[arg(long, default_value = "10s", value_name = "DURATION")]
    drain: String,
    /// Directory for the .json result document and the .png/.svg plot.
    #[arg(long, default_value = "bench-results", value_name = "PATH")]
    out: PathBuf,
}

#[derive(Debug, clap::Args)]
struct CompressArgs {
    /// Records of the synthetic feed's market data to generate and measure (0: none).
    #[arg(long, default_value_t = 1_000_000, value_name = "N")]
    records: u64,
    /// Journals to measure too (comma-separated or repeated): recordings, or DBN files imported with `tickbox
    /// import`.
    #[arg(long = "journal", value_delimiter = ',', value_name = "PATH[,PATH…]")]
    journals: Vec<PathBuf>,
    /// Rounds of reading, the plain and the compressed copy alternating; figures are medians (min–max).
    #[arg(long = "repeats", alias = "repeat", default_value = "3", value_parser = crate::bounds::repeat, value_name = "N")]
    repeat: usize,
    /// zstd level, as `journal compress --level`.
    #[arg(long, default_value_t = 3, value_name = "N")]
    level: i32,
    /// Print the results as one JSON object on stdout (`items`: one per journal) instead of the table.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, clap::Args)]
struct CompareArgs {
    /// The earlier result file.
    #[arg(value_name = "PATH")]
    before: PathBuf,
    /// The later result file.
    #[arg(value_name = "PATH")]
    after: PathBuf,
    /// Exit 10 when a figure got worse by more than this ratio (`1.1`: a p50 or p99 latency over 1.1 times the
    /// earlier one, a rate under the earlier one divided by 1.1), medians of the repeats; and when the two files
    /// have no configuration in common, since then nothing was checked.
    #[arg(long, value_name = "RATIO", value_parser = ratio_above_one)]
    fail_above: Option<f64>,
}

fn ratio_above_one(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(r) if r.is_finite() && r >= 1.0 => Ok(r),
        _ => Err(format!(
            "`{text}`: a ratio of at least 1 (1.1 allows 10 % worse)"
        )),
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
            let verdict = compare_verdict(&before, &after, ratio);
            if verdict.comparable == 0 {
                eprintln!(
                    "error: --fail-above {ratio}: the two files have no configuration in common: nothing was checked"
                );
                return Ok(ExitCode::from(exit_code::REGRESSION));
            }
            if !verdict.regressions.is_empty() {
                for line in &verdict.regressions {
                    eprintln!("regression: {line}");
                }
                eprintln!(
                    "error: --fail-above {ratio}: {} figure(s) of {} configuration(s) got worse by more than the ratio",
                    verdict.regressions.len(),
                    verdict.comparable
                );
                return Ok(ExitCode::from(exit_code::REGRESSION));
            }
            Ok(ExitCode::from(exit_code::OK))
        }
        BenchCommand::RawPub(a) => raw_pub(a),
        BenchCommand::RawSub(a) => raw_sub(a),
    }
}

fn raw_pub(a: RawProcessArgs) -> anyhow::Result<ExitCode> {
    let stop = crate::shutdown::flag();
    let summary = raw_pub_process(&a.config()?, &stop, |endpoint| {
        // The parent reads this line for the endpoint; stdout carries only the summary.
        eprintln!("{RAW_PUB_ENDPOINT_LINE}{endpoint}");
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
    let rates = match (&a.rate, a.rates.is_empty()) {
        (Some(r), _) => vec![parse_rate(r)?],
        (None, false) => a
            .rates
            .iter()
            .map(|r| parse_rate(r))
            .collect::<Result<_, _>>()?,
        (None, true) => vec![100_000],
    };
    let transports = a
        .transport
        .iter()
        .map(|t| t.parse::<Transport>())
        .collect::<Result<Vec<_>, _>>()?;
    let stall = match (a.stall_every, &a.stall) {
        (Some(every), Some(pause)) if every > 0 => Some(Stall {
            every,
            pause: parse_duration(pause)?,
        }),
        (Some(0), _) => anyhow::bail!("--stall-every must be positive"),
        _ => None,
    };
    let duration = parse_duration(&a.duration)?;
    anyhow::ensure!(!duration.is_zero(), "--duration must be positive");
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
    let sweep = LatencySweep {
        rates,
        transports,
        executable,
        base: LatencyConfig {
            shape,
            warmup: parse_duration(&a.warmup)?,
            duration,
            size: a.size,
            hwm: a.hwm,
            back_pressure,
            stall,
            log_interval: parse_duration(&a.log_interval)?.max(Duration::from_millis(1)),
            via_lvc: a.via_lvc,
            handoff,
            background: tickbox_bench::load::LoadSpec {
                threads: a.background_load,
                duty_percent: a.background_duty,
            },
            ..LatencyConfig::default()
        },
        raw_baseline: !a.no_raw,
        repeats: a.repeat,
    };
    let stop = crate::shutdown::flag();
    let ctx = zmq::Context::new();
    let (gate, sweep) = match a.security {
        BenchSecurity::Null => (tickbox_auth::Gate::open(&ctx), sweep),
        BenchSecurity::Curve => {
            anyhow::ensure!(
                shape == Shape::InProcess,
                "--security curve runs the in-process shape (--shape in-process)"
            );
            anyhow::ensure!(
                !sweep.transports.contains(&Transport::Inproc),
                "--security curve needs tcp or ipc: libzmq applies no mechanism to inproc"
            );
            let security = tickbox_auth::Security::ephemeral_curve()?;
            let gate = security.gate(&ctx)?;
            let sweep = LatencySweep {
                base: LatencyConfig {
                    security,
                    ..sweep.base
                },
                ..sweep
            };
            (gate, sweep)
        }
    };
    if a.security == BenchSecurity::Curve {
        outln!("under CURVE: every socket of tickbox and of raw libzmq encrypts and authenticates");
    }
    let stamp = unix_seconds().to_string();
    if let Some(every) = a.metrics_scrape {
        print!(
            "{}",
            metrics_off_table(&gate, &sweep, &a.out, &stamp, &stop)?
        );
        println!(
            "metrics on (served, scraped every {}):",
            tickbox_units::format_duration(every)
        );
        tickbox_bench::scrape::set_metrics_scrape(Some(every));
    }
    let outcome = run_latency_sweep(&gate, &sweep, &a.out, &stamp, &stop)
        .context("latency benchmark failed")?;
    print_environment(&outcome.document);
    outln!(
        "one-way latency, open loop; corrected = from intended send time (coordinated omission), unc = from actual \
         send stamp; HWM {} {}; warm-up {} excluded",
        a.hwm,
        if back_pressure.blocks() { "(--back-pressure block: publishers block)" } else { "(PUB drops at HWM: see lost)" },
        a.warmup
    );
    outln!(
        "tickbox subscriber hand-off: {handoff} ({}){}",
        handoff_choice.reason,
        if a.handoff
            .is_none_or(|h| h == tickbox_subscriber::Handoff::Auto)
        {
            " as `subscribe --workers 1` chooses it; with more workers than shards subscribe runs ring: \
             measure it with --handoff ring"
        } else {
            ""
        }
    );
    if a.background_load > 0 {
        outln!(
            "background load: {} for the whole sweep, beside both systems",
            sweep.base.background.describe()
        );
    }
    if shape == Shape::Processes {
        outln!(
            "shape: processes over tcp; tickbox = a `tickbox feed` process (one shard, paced, its synthetic market's \
             quotes and trades) -> a `tickbox subscribe` process (one worker; receive = worker dequeue), raw = a \
             PUB process -> a SUB process sending --size frames; corrected figures charge each message from the \
             intended send time its publisher's paced schedule gave it (the publisher reports the schedule's start)"
        );
    }
    out!("{}", latency_table(&outcome.results));
    outln!(
        "files: {} (results), {} and .png (plot), {}/{stamp}-*-r<repeat>.hlog|.hgrm",
        outcome.json.display(),
        outcome.plot.display(),
        a.out.display()
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
        println!("metrics off:");
        print!("{}", throughput_table(&off.results));
        println!(
            "metrics on (served, scraped every {}):",
            tickbox_units::format_duration(every)
        );
        tickbox_bench::scrape::set_metrics_scrape(Some(every));
    }
    let outcome = run_throughput_sweep(&open_gate, &sweep, &a.out, &stamp, &stop)
        .context("throughput benchmark failed")?;
    if a.security == BenchSecurity::Curve {
        let security = tickbox_auth::Security::ephemeral_curve()?;
        let gate = security.gate(&ctx)?;
        let curve_sweep = ThroughputSweep {
            base: ThroughputConfig {
                security,
                ..sweep.base.clone()
            },
            ..sweep.clone()
        };
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
    print_environment(&outcome.document);
    outln!(
        "flat-out throughput over {}, {} measured per row; HWM {} send and receive on every socket; no drops: \
         tickbox feed and raw PUB/SUB use XPUB_NODROP, PUSH/PULL blocks; tickbox = feed shards → Black Box shards \
         → as many workers, `batched` rows (the headline) with batch frames as `feed --batch auto` sends them, \
         plain rows one frame per message; raw = one sender/receiver thread pair per shard, `batched` rows against \
         raw sending as many messages per ZeroMQ message as the feed packs (like with like), plain rows against raw \
         one message per ZeroMQ message",
        a.transport, a.duration, a.hwm
    );
    out!("{}", throughput_table(&outcome.results));
    outln!(
        "files: {} (results), {} and .svg (plot)",
        outcome.json.display(),
        outcome.plot.display()
    );
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
        batch: a.batch,
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
        let security = tickbox_auth::Security::ephemeral_curve()?;
        let gate = security.gate(&ctx)?;
        let curve_config = ReplayBenchConfig {
            security,
            ..config.clone()
        };
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
    print_environment(&outcome.document);
    outln!(
        "journal replayed flat out (--speed max, lossless XPUB_NODROP) over tcp loopback; tickbox = Replayer (batch \
         frames as configured) → Black Box (gap accounting, workers decode every record), raw = the same frames one \
         per message, XPUB_NODROP → SUB; lost is counted by the receiver (tickbox: the subscriber's accounting); lateness = receive − replay \
         send stamp"
    );
    out!("{}", replay_table(&outcome.document.summary));
    outln!(
        "files: {} (results), {} and .svg (plot)",
        outcome.json.display(),
        outcome.plot.display()
    );
    Ok(finish(&outcome.document.warnings, &stop))
}

fn compress(a: CompressArgs) -> anyhow::Result<ExitCode> {
    use tickbox_bench::compress::{compress_table, run_compress_bench, CompressBenchConfig};
    let config = CompressBenchConfig {
        records: a.records,
        journals: a
            .journals
            .iter()
            .map(|p| {
                (
                    p.file_name().map_or_else(
                        || p.display().to_string(),
                        |n| n.to_string_lossy().into_owned(),
                    ),
                    p.clone(),
                )
            })
            .collect(),
        repeat: a.repeat,
        options: tickbox_journal::CompressOptions {
            level: a.level,
            ..Default::default()
        },
        ..CompressBenchConfig::default()
    };
    let results = run_compress_bench(&config).context("compress benchmark failed")?;
    if a.json {
        crate::out::json(&results)?;
    } else {
        crate::out::outln!(
            "each journal copied plain and compressed (zstd level {}, 1 MiB frames); ratio = record bytes ÷ compressed \
             du; reads through the journal Reader with checksums, plain and compressed alternating; seek = seek_time \
             to the last tenth of the capture times and read the record there",
            a.level
        );
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
    print_environment(&outcome.document);
    outln!(
        "a batched lossless feed (feed --batch auto --rate max --back-pressure block) read flat out over tcp loopback; \
         tickbox-record = the recorder into an archive journal (the [recorder] defaults), tickbox-subscribe = a \
         Black Box with one worker decoding every record, raw-mmap = one SUB appending each message to an mmap'd \
         file with memcpy; records/s from the feed's first send to the last data record's arrival; lost = \
         records not delivered, or what the system's own accounting (the recorder's ledger) says missing"
    );
    out!("{}", record_table(&outcome.document.summary));
    out!("{}", record_runs_table(&outcome.results));
    outln!(
        "files: {} (results), {} and .svg (plot)",
        outcome.json.display(),
        outcome.plot.display()
    );
    Ok(finish(&outcome.document.warnings, &stop))
}

fn print_environment(document: &RunDocument) {
    outln!("{}", document.environment.summary_line());
}

/// Prints the warnings to stderr (they are in the result file too) and gives the exit code: warnings never change
/// it, an interrupted run does.
fn finish(warnings: &[Warning], stop: &AtomicBool) -> ExitCode {
    for w in warnings {
        eprintln!("warning: {w}");
    }
    if stop.load(Ordering::Relaxed) {
        ExitCode::from(exit_code::ERROR)
    } else {
        ExitCode::from(exit_code::OK)
    }
}
