//! `tickbox tune`: its command-line arguments (what it parses; `cmd::tune` wires them).

use std::path::PathBuf;

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    #[command(subcommand)]
    pub(crate) command: TuneCommand,
}

#[derive(Debug, clap::Subcommand)]
pub(crate) enum TuneCommand {
    /// CPUs, cores, SMT, NUMA nodes, caches, isolation, governors, THP, NICs with their queues and IRQs, sysctls.
    Show(ShowArgs),
    /// Host findings with a severity and the command that fixes each; checks the cores pinned in --config.
    #[command(
        after_help = "Exit codes: 0 no warning (or warnings without --strict); 1 a warning stands under --strict, or an error."
    )]
    Check(CheckArgs),
    /// Place shards, libzmq I/O threads and workers per NIC; writes a config that --config takes.
    Plan(PlanArgs),
    /// Run the bench pipeline over a grid with repeats, rank by an objective of throughput and p99 lateness (medians),
    /// write the winning config. Only performance settings are swept unless asked.
    // Boxed: its many grid flags make it far larger than the other variants.
    Sweep(Box<SweepArgs>),
}

#[derive(Debug, clap::Args)]
pub(crate) struct RootArg {
    /// Read sysfs and procfs under this directory instead of `/` (a fixture tree, or a copy from another host).
    #[arg(long, default_value = "/", value_name = "PATH")]
    pub(crate) root: PathBuf,
}

#[derive(Debug, clap::Args)]
pub(crate) struct ShowArgs {
    #[command(flatten)]
    pub(crate) root: RootArg,
    /// Print the topology as one JSON object instead of tables.
    #[arg(long)]
    pub(crate) json: bool,
}

#[derive(Debug, clap::Args)]
pub(crate) struct CheckArgs {
    #[command(flatten)]
    pub(crate) root: RootArg,
    /// Exit 1 when any warning stands.
    #[arg(long)]
    pub(crate) strict: bool,
    /// Receive buffer (SO_RCVBUF) the deployment asks for, in bytes; checked against net.core.rmem_max.
    /// Default: the largest `rcvbuf` of `[context.sockets.*]` in --config.
    #[arg(long, value_name = "BYTES")]
    pub(crate) rcvbuf: Option<u64>,
    /// Send buffer (SO_SNDBUF) the deployment asks for, in bytes; checked against net.core.wmem_max.
    /// Default: the largest `sndbuf` of `[context.sockets.*]` in --config.
    #[arg(long, value_name = "BYTES")]
    pub(crate) sndbuf: Option<u64>,
    /// Print the findings as a JSON array.
    #[arg(long)]
    pub(crate) json: bool,
}

#[derive(Debug, clap::Args)]
pub(crate) struct PlanArgs {
    #[command(flatten)]
    pub(crate) root: RootArg,
    /// NICs, one subscriber shard group each, e.g. eth1,eth2.
    #[arg(
        long = "nic",
        alias = "nics",
        value_delimiter = ',',
        required = true,
        value_name = "IFACE[,IFACE…]"
    )]
    pub(crate) nics: Vec<String>,
    /// Subscriber shards per NIC.
    #[arg(long, default_value_t = 1, value_name = "N")]
    pub(crate) shards_per_nic: usize,
    /// Worker threads per NIC, placed on that NIC's node; at most 256.
    #[arg(long, default_value_t = 2, value_parser = crate::bounds::workers, value_name = "N")]
    pub(crate) workers: usize,
    /// Publisher endpoint of each shard, NIC by NIC (one per shard); omitted leaves `connect = []` to fill in.
    #[arg(long, value_delimiter = ',', value_name = "EP[,EP…]")]
    pub(crate) connect: Vec<String>,
    /// Write the config here instead of stdout.
    #[arg(long, value_name = "PATH")]
    pub(crate) out: Option<PathBuf>,
    /// Print the plan (placements, reasons, compromises) as JSON on stdout; the config still goes to --out.
    #[arg(long)]
    pub(crate) json: bool,
}

#[derive(Debug, clap::Args)]
#[command(
    after_help = "The grid is every combination of --shards, --workers, --hwm, --batch, --dispatch, --io-threads and \
    --pin; the defaults' point is always added. A grid over --max-points is refused before anything runs. The bench \
    stream is one topic, so by_topic dispatch hands it all to one worker whatever --workers says.\n\
    A sweep never changes what the pipeline guarantees unless asked: dispatch stays by_topic (each symbol's updates \
    in order) unless --dispatch names round_robin, and then those points and a winner among them are marked as \
    changing semantics; the loss policy and [security] are never swept. The table says what it ranked by and the \
    winner's trade-off against the defaults: its throughput and its p99 lateness, each as a multiple of theirs."
)]
pub(crate) struct SweepArgs {
    /// Shard counts (publisher shards = SUB shards in the bench pipeline).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "1",
        value_name = "N[,N…]"
    )]
    pub(crate) shards: Vec<usize>,
    /// Worker counts behind the shards.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "1,2",
        value_name = "N[,N…]"
    )]
    pub(crate) workers: Vec<usize>,
    /// High-water marks (every socket of the pipeline).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "1000",
        value_name = "N[,N…]"
    )]
    pub(crate) hwm: Vec<i32>,
    /// Worker batch sizes (`[workers] batch`: messages handled before a flush is forced).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "256",
        value_name = "N[,N…]"
    )]
    pub(crate) batch: Vec<usize>,
    /// Dispatch modes: by_topic (the default: each symbol's updates in order) and, only when named,
    /// round_robin, which gives up that order (its points are marked as changing semantics).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "by_topic",
        value_name = "by_topic|round_robin[,…]"
    )]
    pub(crate) dispatch: Vec<String>,
    /// What ranks the points: `balanced` (throughput ratio over p99 ratio, against the defaults: ×2 throughput at
    /// ×2 p99 scores as the defaults do), `throughput` (p99 breaks near-ties), or `latency` (throughput breaks
    /// near-ties). Without latency runs (--no-latency) the ranking is by throughput.
    #[arg(
        long,
        default_value = "balanced",
        value_name = "balanced|throughput|latency"
    )]
    pub(crate) objective: String,
    /// libzmq I/O thread counts.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "1,2",
        value_name = "N[,N…]"
    )]
    pub(crate) io_threads: Vec<usize>,
    /// Pinning to try: no; io (I/O threads only, from the highest CPU down, away from CPU 0); plan (the pinning
    /// plan for --nic: shards, workers and I/O thread where `tune plan` puts them).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "no,plan",
        value_name = "no|io|plan[,…]"
    )]
    pub(crate) pin: Vec<String>,
    /// NIC the plan points are planned for (default: the first physical NIC, else the first non-loopback one).
    #[arg(long, value_name = "IFACE[,IFACE…]")]
    pub(crate) nic: Option<String>,
    /// Refuse a grid with more points than this (each costs repeats x runs x (warmup + duration)).
    #[arg(long, default_value_t = 32, value_name = "N")]
    pub(crate) max_points: usize,
    /// Rounds over the grid; each point is ranked by its median over the rounds.
    #[arg(long, default_value_t = 3, value_name = "N")]
    pub(crate) repeats: usize,
    /// Measured time of each throughput and each latency run.
    #[arg(long, default_value = "300ms", value_name = "DURATION")]
    pub(crate) duration: String,
    /// Unmeasured time before each run.
    #[arg(long, default_value = "100ms", value_name = "DURATION")]
    pub(crate) warmup: String,
    /// Offered rate of the latency runs (p99 lateness is measured at this rate).
    #[arg(long, default_value = "20k", value_name = "RATE")]
    pub(crate) rate: String,
    /// Skip the latency runs (rank by throughput only, whatever --objective says; halves the time).
    #[arg(long)]
    pub(crate) no_latency: bool,
    /// Transport: tcp (loopback), ipc, inproc.
    #[arg(long, default_value = "tcp", value_name = "tcp|ipc|inproc")]
    pub(crate) transport: String,
    /// Frame size in bytes.
    #[arg(long, default_value_t = 100, value_name = "BYTES")]
    pub(crate) size: usize,
    /// Write the winning config here.
    #[arg(long, value_name = "PATH", default_value = "tickbox-tuned.toml")]
    pub(crate) out: PathBuf,
    /// Print the ranked results as JSON on stdout instead of a table.
    #[arg(long)]
    pub(crate) json: bool,
}
