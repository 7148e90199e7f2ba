//! `tickbox bench`: its command-line arguments (what it parses; `cmd::bench` wires them).

use std::path::PathBuf;
use std::time::Duration;

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    #[command(subcommand)]
    pub(crate) command: BenchCommand,
}

#[derive(Debug, clap::Subcommand)]
pub(crate) enum BenchCommand {
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
pub(crate) enum ShapeArg {
    /// Threads of the bench process (any transport).
    InProcess,
    /// Separate processes over tcp: `tickbox feed` → `tickbox subscribe` beside a raw PUB process → SUB process.
    Processes,
}

/// The schedule and sockets of a raw child of `latency --shape processes`, as the parent passes them.
#[derive(Debug, clap::Args)]
pub(crate) struct RawProcessArgs {
    #[arg(long, value_name = "RATE")]
    pub(crate) rate: String,
    #[arg(long, value_name = "DURATION")]
    pub(crate) warmup: String,
    #[arg(long, value_name = "DURATION")]
    pub(crate) duration: String,
    #[arg(long, value_name = "BYTES")]
    pub(crate) size: usize,
    #[arg(long, value_name = "N")]
    pub(crate) hwm: i32,
    #[arg(long)]
    pub(crate) no_drop: bool,
    /// Publisher: how long the socket stays open for the tail. Subscriber: how long without a frame ends it.
    #[arg(long, value_name = "DURATION")]
    pub(crate) drain: String,
    /// Subscriber only: the publisher's endpoint.
    #[arg(long, value_name = "EP")]
    pub(crate) connect: Option<String>,
    /// Subscriber only: samples to make room for.
    #[arg(long, default_value_t = 0)]
    pub(crate) capacity: usize,
    /// Subscriber only: the sample file to write.
    #[arg(long, value_name = "PATH")]
    pub(crate) out: Option<PathBuf>,
}

/// Parses `--repeats`: a whole number, at least 1.
#[derive(Debug, clap::Args)]
pub(crate) struct LatencyArgs {
    /// Offered rate in msg/s (e.g. 100k). Default 100k.
    #[arg(long, conflicts_with = "rates", value_name = "RATE")]
    pub(crate) rate: Option<String>,
    /// Comma-separated rates to sweep, e.g. 10k,100k,500k,1m.
    #[arg(long, value_delimiter = ',', value_name = "RATE[,RATE…]")]
    pub(crate) rates: Vec<String>,
    /// Transports, comma-separated: tcp (loopback), ipc, inproc.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "tcp",
        value_name = "tcp|ipc|inproc[,…]"
    )]
    pub(crate) transport: Vec<String>,
    /// Measured time per configuration (e.g. 5s, 500ms).
    #[arg(long, default_value = "5s", value_name = "DURATION")]
    pub(crate) duration: String,
    /// Unrecorded traffic before the measured window.
    #[arg(long, default_value = "1s", value_name = "DURATION")]
    pub(crate) warmup: String,
    /// Frame size in bytes (tickbox trades with a padded topic; at least 69). The raw baseline sends the same.
    #[arg(long, default_value_t = 100, value_parser = crate::bounds::frame_bytes, value_name = "BYTES")]
    pub(crate) size: usize,
    /// Send and receive high-water mark of every socket on the path, in messages.
    #[arg(long, default_value_t = 100_000, value_name = "N")]
    pub(crate) hwm: i32,
    /// At the HWM publishers `drop` (the default: lost messages are counted) or `block` (XPUB_NODROP).
    #[arg(long, value_name = "drop|block")]
    pub(crate) back_pressure: Option<tickbox_zmqx::BackPressure>,
    /// Deprecated spelling of `--back-pressure block`.
    #[arg(long, hide = true, conflicts_with = "back_pressure")]
    pub(crate) no_drop: bool,
    /// Route the tickbox path through the LVC proxy.
    #[arg(long)]
    pub(crate) via_lvc: bool,
    /// How the tickbox subscriber's shard hands records to its one worker: auto (default: what a plain `tickbox
    /// subscribe` runs, one shard and its one worker, which is inline), ring (parcels to a worker thread, what
    /// subscribe runs when workers share a shard), zmq, or inline (the worker runs on the shard's thread). The output
    /// says which was measured and why.
    #[arg(long, value_name = "auto|ring|zmq|inline")]
    pub(crate) handoff: Option<tickbox_subscriber::Handoff>,
    /// With `--handoff ring`: how long the worker keeps looking for its next parcel before it sleeps until woken
    /// (`[workers] idle_spin`; default its default, `0s` sleeps at once), so the choice of that default
    /// reproduces.
    #[arg(long, value_name = "DURATION", value_parser = tickbox_units::parse_duration)]
    pub(crate) idle_spin: Option<Duration>,
    /// With `--handoff ring`: whether the shard runs the last records of a burst on its worker when the worker
    /// sleeps with nothing queued (`[workers] shard_runs_asleep`; default its default), so that choice reproduces.
    #[arg(long, value_name = "true|false")]
    pub(crate) shard_runs_asleep: Option<bool>,
    /// Inject a consumer stall every N messages (see --stall); shows what a slow worker does to the tail.
    #[arg(long, requires = "stall", value_name = "N")]
    pub(crate) stall_every: Option<u64>,
    /// Length of each injected stall (e.g. 1ms).
    #[arg(long, requires = "stall_every", value_name = "DURATION")]
    pub(crate) stall: Option<String>,
    /// Length of each interval in the .hlog files.
    #[arg(long, default_value = "1s", value_name = "DURATION")]
    pub(crate) log_interval: String,
    /// Skip the raw-libzmq baseline (figures then have nothing to be compared with; for quick iteration only).
    #[arg(long)]
    pub(crate) no_raw: bool,
    /// Runs of each system per configuration, tickbox and raw alternating; figures are medians (min–max).
    #[arg(long = "repeats", alias = "repeat", default_value = "3", value_parser = crate::bounds::repeat, value_name = "N")]
    pub(crate) repeat: usize,
    /// `in-process`: publisher and receivers are threads of this process. `processes` (tcp only): a real
    /// `tickbox feed` process and a real `tickbox subscribe` process, beside a raw PUB process and SUB process.
    #[arg(long, value_enum, default_value_t = ShapeArg::InProcess)]
    pub(crate) shape: ShapeArg,
    /// Directory for .hlog, .hgrm, .svg and .json files.
    #[arg(long, default_value = "bench-results", value_name = "PATH")]
    pub(crate) out: PathBuf,
    /// What metrics cost: run the sweep twice, first as it is, then with the subscriber serving its metrics and
    /// scraped every D (`100ms`: ten times a busy Prometheus), and print both (in-process shape).
    #[arg(long, value_name = "DURATION", value_parser = tickbox_units::parse_duration)]
    pub(crate) metrics_scrape: Option<Duration>,
    /// `curve`: every socket of both systems runs CurveZMQ (one fresh key pair, no allow-list), so the ratios
    /// compare tickbox under CURVE with raw libzmq under CURVE (in-process shape, tcp or ipc).
    #[arg(long, value_enum, default_value_t = BenchSecurity::Null)]
    pub(crate) security: BenchSecurity,
    /// Run N busy threads for the whole sweep (both systems alike), so a figure under load reproduces: the other
    /// work of a shared machine, on purpose. 0 (default) adds none.
    #[arg(long, default_value_t = 0, value_name = "N", value_parser = clap::value_parser!(u32).range(0..=256))]
    pub(crate) background_load: u32,
    /// Share of every 10 ms each --background-load thread is busy, in percent (1–100; it sleeps the rest).
    #[arg(long, default_value_t = 100, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=100))]
    pub(crate) background_duty: u32,
}

#[derive(Debug, clap::Args)]
pub(crate) struct ThroughputArgs {
    /// Message sizes in bytes, comma-separated (tickbox frames are at least 69 bytes; smaller sizes are raised).
    #[arg(long, value_delimiter = ',', default_value = "64,100,256,1024", value_parser = crate::bounds::frame_bytes, value_name = "BYTES[,BYTES…]")]
    pub(crate) sizes: Vec<usize>,
    /// Shard counts 1..=N are measured; at most 64.
    #[arg(long, default_value_t = 1, value_parser = crate::bounds::shards, value_name = "N")]
    pub(crate) shards: usize,
    /// Measured time per configuration.
    #[arg(long, default_value = "3s", value_name = "DURATION")]
    pub(crate) duration: String,
    #[arg(long, default_value = "500ms", value_name = "DURATION")]
    pub(crate) warmup: String,
    #[arg(long, default_value = "tcp", value_name = "tcp|ipc|inproc")]
    pub(crate) transport: String,
    /// Send and receive high-water mark of every socket, in messages.
    #[arg(long, default_value_t = 10_000, value_name = "N")]
    pub(crate) hwm: i32,
    /// Runs of each system per configuration, tickbox and raw alternating; figures are medians (min–max).
    #[arg(long = "repeats", alias = "repeat", default_value = "3", value_parser = crate::bounds::repeat, value_name = "N")]
    pub(crate) repeat: usize,
    #[arg(long, default_value = "bench-results", value_name = "PATH")]
    pub(crate) out: PathBuf,
    /// `curve`: run the sweep without and then with CURVE on every socket (both systems, one fresh key pair,
    /// ZAP running) and print what CURVE costs, as a ratio from the same run.
    #[arg(long, value_enum, default_value_t = BenchSecurity::Null)]
    pub(crate) security: BenchSecurity,
    /// What metrics cost: run the sweep twice, first as it is, then with the subscriber serving its metrics and
    /// scraped every D, and print both.
    #[arg(long, value_name = "DURATION", value_parser = tickbox_units::parse_duration)]
    pub(crate) metrics_scrape: Option<Duration>,
}

/// The mechanism `bench throughput` measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum BenchSecurity {
    /// No security (as deployed without `[security]`).
    Null,
    /// NULL and CURVE, back to back, with the ratio.
    Curve,
}

#[derive(Debug, clap::Args)]
pub(crate) struct ReplayArgs {
    /// Records of generated market data (quotes and trades, ~90 B frames) written to a temporary journal.
    #[arg(long, default_value_t = 1_000_000, value_name = "N")]
    pub(crate) records: u64,
    /// Black Box workers that decode every record; at most 256.
    #[arg(long, default_value_t = 1, value_parser = crate::bounds::workers, value_name = "N")]
    pub(crate) workers: usize,
    /// Runs of each system, tickbox and raw alternating; figures are medians (min–max).
    #[arg(long = "repeats", alias = "repeat", default_value = "3", value_parser = crate::bounds::repeat, value_name = "N")]
    pub(crate) repeat: usize,
    /// After the sender finishes, how long the receiver may take for the rest before it counts as lost.
    #[arg(long, default_value = "10s", value_name = "DURATION")]
    pub(crate) drain: String,
    /// Most records per replayed batch frame, as `replay --batch` (`off|auto|N`; `off`, 0 or 1: one record per
    /// message). Default (`auto`) from the `[recorder]` config (`replay_batch_records`).
    #[arg(long, value_name = "off|auto|N")]
    pub(crate) batch: Option<tickbox_feed::Batching>,
    /// Directory for the .json result document and the .png/.svg plot.
    #[arg(long, default_value = "bench-results", value_name = "PATH")]
    pub(crate) out: PathBuf,
    /// `curve`: run the bench without and then with CURVE on every socket of both systems and print what CURVE
    /// costs, as a ratio from the same run.
    #[arg(long, value_enum, default_value_t = BenchSecurity::Null)]
    pub(crate) security: BenchSecurity,
}

#[derive(Debug, clap::Args)]
pub(crate) struct RecordArgs {
    /// Data records the feed sends per run, over all shards (rounded up to a multiple of --shards).
    #[arg(long, default_value_t = 500_000, value_name = "N")]
    pub(crate) records: u64,
    /// Feed shards; the recorder reads each on its own thread, the Black Box on its own SUB shard.
    #[arg(long, default_value_t = 1, value_parser = crate::bounds::shards, value_name = "N")]
    pub(crate) shards: usize,
    /// Runs of each system, in alternating order; figures are medians (min–max).
    #[arg(long = "repeats", alias = "repeat", default_value = "3", value_parser = crate::bounds::repeat, value_name = "N")]
    pub(crate) repeat: usize,
    /// Journal segment size, and raw file size (default from config: `[recorder] segment_size`).
    #[arg(long, value_parser = tickbox_units::parse_size, value_name = "SIZE")]
    pub(crate) segment_size: Option<u64>,
    /// Leave out the Black Box (`subscribe --workers 1`) runs.
    #[arg(long)]
    pub(crate) no_subscribe: bool,
    /// How long a system may go without a new record before the rest counts as lost.
    #[arg(long, default_value = "10s", value_name = "DURATION")]
    pub(crate) drain: String,
    /// Directory for the .json result document and the .png/.svg plot.
    #[arg(long, default_value = "bench-results", value_name = "PATH")]
    pub(crate) out: PathBuf,
}

#[derive(Debug, clap::Args)]
pub(crate) struct CompressArgs {
    /// Records of the synthetic feed's market data to generate and measure (0: none).
    #[arg(long, default_value_t = 1_000_000, value_name = "N")]
    pub(crate) records: u64,
    /// Journals to measure too (comma-separated or repeated): recordings, or DBN files imported with `tickbox
    /// import`.
    #[arg(long = "journal", value_delimiter = ',', value_name = "PATH[,PATH…]")]
    pub(crate) journals: Vec<PathBuf>,
    /// Rounds of reading, the plain and the compressed copy alternating; figures are medians (min–max).
    #[arg(long = "repeats", alias = "repeat", default_value = "3", value_parser = crate::bounds::repeat, value_name = "N")]
    pub(crate) repeat: usize,
    /// zstd level, as `journal compress --level`.
    #[arg(long, default_value_t = 3, value_name = "N")]
    pub(crate) level: i32,
    /// Print the results as one JSON object on stdout (`items`: one per journal) instead of the table.
    #[arg(long)]
    pub(crate) json: bool,
}

#[derive(Debug, clap::Args)]
pub(crate) struct CompareArgs {
    /// The earlier result file.
    #[arg(value_name = "PATH")]
    pub(crate) before: PathBuf,
    /// The later result file.
    #[arg(value_name = "PATH")]
    pub(crate) after: PathBuf,
    /// Exit 10 when a figure got worse by more than this ratio (`1.1`: a p50 or p99 latency over 1.1 times the
    /// earlier one, a rate under the earlier one divided by 1.1), medians of the repeats; and when the two files
    /// have no configuration in common, since then nothing was checked.
    #[arg(long, value_name = "RATIO", value_parser = ratio_above_one)]
    pub(crate) fail_above: Option<f64>,
}

pub(crate) fn ratio_above_one(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(r) if r.is_finite() && r >= 1.0 => Ok(r),
        _ => Err(format!(
            "`{text}`: a ratio of at least 1 (1.1 allows 10 % worse)"
        )),
    }
}
