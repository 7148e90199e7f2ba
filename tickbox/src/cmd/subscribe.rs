//! `tickbox subscribe`: the Black Box subscriber (SUB shards -> PUSH/PULL workers) with the Suicidal Snail.

use std::fmt::Write as _;
use std::process::ExitCode;
use std::sync::atomic::Ordering;
use std::time::Duration;

use anyhow::Context as _;
use tickbox_subscriber::{
    format_duration, Fatal, GapPolicy, Histogram, HumanDuration, Report, ShardConfig, Subscriber,
    SubscriberConfig,
};
use tickbox_wire::Kind;
use tickbox_workers::{Delay, LastValueBook, Stats, StatsReport, WorkersConfig};

use crate::config::TickboxConfig;
use crate::exit_code;

#[derive(Debug, clap::Args)]
#[command(
    after_help = "One shard (SUB socket + thread) per --connect endpoint. Every worker pulls from every shard.\n\
    The Suicidal Snail checks lateness (receive time - publisher send time) at each shard and again when a worker \
    dequeues, so a backlog behind slow workers also counts. Past --max-lateness the subscriber logs one ERROR \
    line, prints `SNAIL {json}` on stderr and exits with code 3. LVC cached values are exempt.\n\
    Sequence gaps are checked per publisher only when subscribed to everything (no --topics)."
)]
pub struct Args {
    /// Publisher endpoints, one shard each (e.g. tcp://10.0.0.1:5556,tcp://10.0.1.1:5556). Overrides
    /// `[[subscriber.shards]]` from the config.
    #[arg(long, value_delimiter = ',', value_name = "EP")]
    pub connect: Vec<String>,
    /// Network interface per shard (one name applies to all shards); connects as tcp://IFACE:0;HOST:PORT.
    #[arg(long, value_delimiter = ',', value_name = "IFACE")]
    pub nic: Vec<String>,
    /// Worker threads (each pulls from every shard).
    #[arg(long, value_name = "N")]
    pub workers: Option<usize>,
    /// Stop after this long (250ms, 10s, 5m); runs until Ctrl-C otherwise.
    #[arg(long, value_name = "D")]
    pub duration: Option<HumanDuration>,
    /// Suicidal Snail threshold (250us, 5ms, 1s); 0 disables. Default 1s.
    #[arg(long, value_name = "D")]
    pub max_lateness: Option<HumanDuration>,
    /// Topic prefixes to subscribe to (Q.XNAS.,T.); heartbeats (H.) are always added. Default: everything.
    #[arg(long, value_delimiter = ',', value_name = "P")]
    pub topics: Vec<String>,
    /// CPU ids: the first one per shard pins the shards, the rest pin the workers in order.
    #[arg(long, value_delimiter = ',', value_name = "C")]
    pub cores: Vec<usize>,
    /// What a sequence gap does: warn (log and count) or die (exit like the snail).
    #[arg(long, value_name = "warn|die")]
    pub gap_policy: Option<GapPolicy>,
    /// Testing aid: every worker sleeps this long per message, to show that a slow consumer trips the snail.
    #[arg(long, value_name = "D", hide = true)]
    pub debug_worker_delay: Option<HumanDuration>,
}

/// The worker every CLI subscriber runs: statistics, the last-value book, and an optional artificial delay.
pub(crate) type CliWorker = (Stats, (LastValueBook, Option<Delay>));

pub(crate) fn make_worker(delay: Option<Duration>) -> CliWorker {
    (
        Stats::new(),
        (
            LastValueBook::new(),
            delay.filter(|d| !d.is_zero()).map(Delay),
        ),
    )
}

/// Merges the config file's sections with the command line (the command line wins).
fn resolve(
    args: &Args,
    config: &TickboxConfig,
) -> anyhow::Result<(SubscriberConfig, WorkersConfig)> {
    let mut sub = config.subscriber.clone();
    let mut workers = config.workers.clone();
    if !args.connect.is_empty() {
        sub.shards = args
            .connect
            .iter()
            .map(|endpoint| ShardConfig {
                connect: vec![endpoint.clone()],
                ..ShardConfig::default()
            })
            .collect();
    }
    if !args.nic.is_empty() {
        let n = sub.shards.len();
        if args.nic.len() != 1 && args.nic.len() != n {
            anyhow::bail!(
                "--nic has {} names for {n} shards: give one, or one per shard",
                args.nic.len()
            );
        }
        for (i, shard) in sub.shards.iter_mut().enumerate() {
            shard.nic = Some(args.nic[if args.nic.len() == 1 { 0 } else { i }].clone());
        }
    }
    if !args.cores.is_empty() {
        let n = sub.shards.len();
        for (shard, core) in sub.shards.iter_mut().zip(&args.cores) {
            shard.core = Some(*core);
        }
        workers.cores = args.cores.iter().skip(n).copied().collect();
    }
    if let Some(n) = args.workers {
        workers.count = n;
    }
    if let Some(d) = args.max_lateness {
        sub.max_lateness = d;
    }
    if !args.topics.is_empty() {
        sub.topics = args.topics.clone();
    }
    if let Some(policy) = args.gap_policy {
        sub.gap_policy = policy;
    }
    if sub.shards.is_empty() {
        anyhow::bail!("nothing to subscribe to: give --connect EP[,EP...] or [[subscriber.shards]] in the config");
    }
    Ok((sub, workers))
}

pub fn run(args: Args, config: &TickboxConfig) -> anyhow::Result<ExitCode> {
    let (sub_config, workers_config) = resolve(&args, config)?;
    let stop = crate::shutdown::flag();
    let ctx = zmq::Context::new();
    let delay = args.debug_worker_delay.map(|d| d.0);
    let subscriber = Subscriber::start(&ctx, &sub_config, &workers_config, |_| make_worker(delay))
        .context("starting the subscriber")?;
    tracing::info!(
        shards = sub_config.shards.len(),
        workers = workers_config.count,
        max_lateness = %sub_config.max_lateness,
        "subscriber running"
    );
    let report = subscriber.run(&stop, args.duration.map(|d| d.0))?;
    let stopped_by = stopped_by(&report, stop.load(Ordering::Relaxed));
    print!("{}", summary(&report, None, stopped_by));
    Ok(finish(&report))
}

pub(crate) fn stopped_by<W>(report: &Report<W>, signalled: bool) -> &'static str {
    match (&report.fatal, signalled) {
        (Some(Fatal::Snail(_)), _) => "Suicidal Snail",
        (Some(Fatal::Gap(_)), _) => "sequence gap (gap_policy=die)",
        (None, true) => "signal",
        (None, false) => "end of run",
    }
}

/// Maps the outcome to the exit code, printing the machine-readable line for a fatal event.
pub(crate) fn finish<W>(report: &Report<W>) -> ExitCode {
    match &report.fatal {
        Some(fatal) => {
            eprintln!("SNAIL {}", fatal.to_json());
            ExitCode::from(exit_code::SNAIL)
        }
        None => ExitCode::from(exit_code::OK),
    }
}

/// Worker statistics merged over the pool.
pub(crate) fn merged_stats(report: &Report<CliWorker>) -> StatsReport {
    let mut stats = StatsReport::default();
    for w in &report.workers {
        stats.merge(&w.worker.0.report());
    }
    stats
}

fn lat(h: &Histogram<u64>) -> [String; 3] {
    if h.is_empty() {
        return ["-".into(), "-".into(), "-".into()];
    }
    let f = |ns: u64| format_duration(Duration::from_nanos(ns));
    [
        f(h.value_at_quantile(0.5)),
        f(h.value_at_quantile(0.99)),
        f(h.max()),
    ]
}

/// The end-of-run table. `sent` is what the feed published per publisher shard, when known (demo).
pub(crate) fn summary(
    report: &Report<CliWorker>,
    sent: Option<&[(u32, u64)]>,
    stopped_by: &str,
) -> String {
    let mut out = String::new();
    let stats = merged_stats(report);
    let mut book = LastValueBook::new();
    for w in &report.workers {
        book.merge(&w.worker.1 .0);
    }
    // Rates are over the span from the first to the last message a worker saw, so waiting for a feed to
    // start (or for Ctrl-C after it ended) does not dilute them.
    let span = stats.span();
    let secs = if span.is_zero() { report.elapsed } else { span }
        .as_secs_f64()
        .max(1e-9);
    let _ = writeln!(
        out,
        "subscriber: {} shards, {} workers, ran {:.2} s, messages over {:.2} s, stopped by {stopped_by}",
        report.shards.len(),
        report.workers.len(),
        report.elapsed.as_secs_f64(),
        secs
    );
    if let Some(sent) = sent {
        let total: u64 = sent.iter().map(|(_, n)| n).sum();
        let per: Vec<String> = sent
            .iter()
            .map(|(p, n)| format!("publisher {p}: {n}"))
            .collect();
        let _ = writeln!(out, "sent: {total} messages ({})", per.join(", "));
    }
    let _ = writeln!(
        out,
        "{:>5} {:>12} {:>12} {:>9} {:>6} {:>5} {:>8} {:>5} {:>9} {:>9} {:>9}  endpoints",
        "shard",
        "received",
        "msg/s",
        "malformed",
        "cached",
        "gaps",
        "missing",
        "late",
        "lat p50",
        "lat p99",
        "lat max"
    );
    for s in &report.shards {
        let [p50, p99, max] = lat(&s.lateness);
        let _ = writeln!(
            out,
            "{:>5} {:>12} {:>12.0} {:>9} {:>6} {:>5} {:>8} {:>5} {:>9} {:>9} {:>9}  {}",
            s.index,
            s.received,
            s.received as f64 / secs,
            s.malformed,
            s.cached,
            s.gaps,
            s.missing,
            s.late,
            p50,
            p99,
            max,
            s.endpoints.join(",")
        );
    }
    let [p50, p99, max] = lat(&report.receive_lateness());
    let _ = writeln!(
        out,
        "{:>5} {:>12} {:>12.0} {:>9} {:>6} {:>5} {:>8} {:>5} {:>9} {:>9} {:>9}",
        "all",
        report.received(),
        report.received() as f64 / secs,
        report.malformed(),
        report.shards.iter().map(|s| s.cached).sum::<u64>(),
        report.gaps(),
        report.missing(),
        report.shards.iter().map(|s| s.late).sum::<u64>(),
        p50,
        p99,
        max
    );
    let _ = writeln!(
        out,
        "{:>6} {:>12} {:>10} {:>5} {:>9} {:>9} {:>9}   (lateness at dequeue: includes hand-off queueing)",
        "worker", "processed", "discarded", "late", "lat p50", "lat p99", "lat max"
    );
    for w in &report.workers {
        let [p50, p99, max] = lat(&w.lateness);
        let _ = writeln!(
            out,
            "{:>6} {:>12} {:>10} {:>5} {:>9} {:>9} {:>9}",
            w.index, w.processed, w.discarded, w.late, p50, p99, max
        );
    }
    let _ = writeln!(
        out,
        "distinct topics: {}   instruments in book: {}   quotes {}  trades {}  book levels {}  heartbeats {}   \
         unprocessed: {}",
        stats.distinct_topics(),
        book.len(),
        stats.count(Kind::Quote),
        stats.count(Kind::Trade),
        stats.count(Kind::BookLevel),
        stats.count(Kind::Heartbeat),
        report.unprocessed
    );
    let prefixes = stats.per_prefix(2);
    if !prefixes.is_empty() {
        let shown: Vec<String> = prefixes
            .iter()
            .take(8)
            .map(|(p, n)| format!("{p} {n} ({:.0}/s)", stats.rate(*n)))
            .collect();
        let _ = writeln!(out, "per prefix: {}", shown.join(", "));
    }
    out
}
