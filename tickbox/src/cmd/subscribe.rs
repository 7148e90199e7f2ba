//! `tickbox subscribe`: the Black Box subscriber (SUB shards -> PUSH/PULL workers) with the Suicidal Snail.

use std::fmt::Write as _;
use std::process::ExitCode;
use std::sync::atomic::Ordering;
use std::time::Duration;

use anyhow::Context as _;
use tickbox_control::clone::recipes::{ConfigEvent, ConfigWatch, Membership};
use tickbox_control::clone::{CloneClient, ServerEndpoints};
use tickbox_subscriber::{
    format_duration, parse_duration, DurationError, Fatal, GapPolicy, Histogram, HumanDuration,
    Report, ShardConfig, SharedThreshold, Subscriber, SubscriberConfig,
};
use tickbox_wire::Kind;
use tickbox_workers::{Delay, LastValueBook, Stats, StatsReport, WorkersConfig};

use crate::config::TickboxConfig;
use crate::exit_code;
use crate::status::StatusBoard;

#[derive(Debug, clap::Args)]
#[command(
    after_help = "One shard (SUB socket + thread) per --connect endpoint. Every worker pulls from every shard.\n\
    The Suicidal Snail checks lateness (receive time - publisher send time) at each shard and again when a worker \
    dequeues, so a backlog behind slow workers also counts. Past --max-lateness the subscriber logs one ERROR \
    line, prints `SNAIL {json}` on stderr and exits with code 3. LVC cached values are exempt.\n\
    Sequence gaps are checked per publisher only when subscribed to everything (no --topics).\n\
    With --clone: /config/subscriber/max_lateness overrides the threshold while running (deleting it reverts to \
    the command line/config value; an invalid value is logged and ignored), the subscriber registers under \
    /members/subscribers/ID with a TTL, and a fatal event is also written to /alerts/subscribers/ID."
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
    /// Clone key-value servers (tcp://HOST:PORT, or two for a Binary Star pair) for live configuration,
    /// membership and alerts. Overrides `[subscriber] clone`.
    #[arg(long, value_delimiter = ',', value_name = "EP[,EP]")]
    pub clone: Vec<String>,
    /// Identity under /members/subscribers/ and /alerts/subscribers/. Default: HOSTNAME-PID.
    #[arg(long, value_name = "ID")]
    pub member_id: Option<String>,
    /// Membership lease: the entry disappears this long after the subscriber dies. Default 3s.
    #[arg(long, value_name = "D")]
    pub member_ttl: Option<HumanDuration>,
    /// Majordomo broker to register `tickbox.subscribe.status` with.
    #[arg(long, value_name = "EP")]
    pub broker: Option<String>,
}

/// Group under `/members/` and `/alerts/`.
const GROUP: &str = "subscribers";
/// Prefix (under `/config/`) of the live settings.
const LIVE_PREFIX: &str = "subscriber/";
/// How often the control loop refreshes the status snapshot.
const STATUS_EVERY: Duration = Duration::from_millis(500);
/// How long a fatal alert may delay the exit.
const ALERT_TIMEOUT: Duration = Duration::from_secs(1);

fn default_member_id() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .or_else(|_| std::fs::read_to_string("/etc/hostname"))
        .ok()
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_else(|| "host".to_owned());
    format!("{host}-{}", std::process::id())
}

fn check_member_id(id: &str) -> anyhow::Result<()> {
    anyhow::ensure!(
        !id.is_empty() && !id.contains(['/', ' ', '\t', '\n']),
        "--member-id {id:?}: must be non-empty without '/' or whitespace"
    );
    Ok(())
}

/// Live settings under `/config/subscriber/`: every one is a duration today.
fn parse_live_value(raw: &[u8]) -> Result<Duration, DurationError> {
    parse_duration(String::from_utf8_lossy(raw).trim())
}

/// Applies one live-configuration change to the threshold; `base` is the command-line/config value a delete
/// reverts to.
fn apply_live(event: ConfigEvent<Duration>, threshold: &SharedThreshold, base: Duration) {
    match event {
        ConfigEvent::Set { key, value } if key == "max_lateness" => {
            if threshold.get() != value {
                tracing::info!(
                    max_lateness = %format_duration(value),
                    "live config: snail threshold changed"
                );
            }
            threshold.set(value);
        }
        ConfigEvent::Deleted { key } if key == "max_lateness" => {
            tracing::info!(
                max_lateness = %format_duration(base),
                "live config: max_lateness deleted, back to the configured threshold"
            );
            threshold.set(base);
        }
        ConfigEvent::Invalid { key, error } if key == "max_lateness" => {
            tracing::warn!(
                current = %format_duration(threshold.get()),
                "live config: invalid max_lateness ignored ({error}); keeping the current threshold"
            );
        }
        ConfigEvent::Set { key, .. }
        | ConfigEvent::Deleted { key }
        | ConfigEvent::Invalid { key, .. } => {
            tracing::debug!(
                key,
                "live config: not a live setting of the subscriber, ignored"
            );
        }
    }
}

type ParseLive = fn(&[u8]) -> Result<Duration, DurationError>;

/// The Clone side of a subscriber: the client, the live-config watch and the member id.
struct Live {
    client: CloneClient,
    watch: ConfigWatch<Duration, ParseLive>,
    id: String,
}

impl Live {
    fn connect(
        ctx: &zmq::Context,
        servers: &[String],
        id: String,
        config: &TickboxConfig,
    ) -> anyhow::Result<Self> {
        let servers = servers
            .iter()
            .map(|s| ServerEndpoints::from_base(s.trim()))
            .collect::<Result<Vec<_>, _>>()
            .context("--clone / [subscriber] clone")?;
        anyhow::ensure!(!servers.is_empty(), "--clone needs at least one endpoint");
        let client = CloneClient::connect(ctx, &servers, "", config.clone.client.clone())
            .context("connecting to the Clone servers")?;
        if let Err(err) = client.wait_synced(Duration::from_secs(5)) {
            // The data plane does not wait for the control plane: the agent keeps trying in the background.
            tracing::warn!("Clone servers not reachable yet ({err}); running on configured values");
        }
        let parse: ParseLive = parse_live_value;
        let watch = ConfigWatch::new(&client, LIVE_PREFIX, parse)
            .context("watching /config/subscriber/")?;
        Ok(Live { client, watch, id })
    }

    fn drain(&self, threshold: &SharedThreshold, base: Duration) {
        while let Some(event) = self.watch.try_recv() {
            apply_live(event, threshold, base);
        }
    }

    /// Best effort: a pager should learn why the subscriber died, but a dead control plane must not keep it alive.
    fn alert(&self, fatal: &Fatal) {
        let key = format!("/alerts/{GROUP}/{}", self.id);
        match self
            .client
            .set_with_timeout(&key, fatal.to_json().as_bytes(), None, ALERT_TIMEOUT)
        {
            Ok(_) => tracing::info!(key, "alert written"),
            Err(err) => tracing::warn!(key, "alert not written: {err}"),
        }
    }
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
    if !args.clone.is_empty() {
        sub.clone = args.clone.clone();
    }
    if args.member_id.is_some() {
        sub.member_id = args.member_id.clone();
    }
    if let Some(ttl) = args.member_ttl {
        sub.member_ttl = ttl;
    }
    if !sub.clone.is_empty() && sub.member_ttl.0.is_zero() {
        anyhow::bail!("--member-ttl must be more than 0");
    }
    if sub.shards.is_empty() {
        anyhow::bail!("nothing to subscribe to: give --connect EP[,EP...] or [[subscriber.shards]] in the config");
    }
    Ok((sub, workers))
}

pub fn run(args: Args, config: &TickboxConfig) -> anyhow::Result<ExitCode> {
    let (mut sub_config, workers_config) = resolve(&args, config)?;
    let stop = crate::shutdown::flag();
    let ctx = zmq::Context::new();
    let delay = args.debug_worker_delay.map(|d| d.0);
    let base = sub_config.max_lateness.0;
    let id = sub_config
        .member_id
        .clone()
        .unwrap_or_else(default_member_id);
    check_member_id(&id)?;
    let live = if sub_config.clone.is_empty() {
        None
    } else {
        Some(Live::connect(&ctx, &sub_config.clone, id.clone(), config)?)
    };
    // Apply the stored live values before the first message, not just after.
    if let Some(live) = &live {
        let initial = SharedThreshold::new(base);
        live.drain(&initial, base);
        sub_config.max_lateness = HumanDuration(initial.get());
    }
    let status = StatusBoard::start(&ctx, args.broker.as_deref(), "subscribe")?;
    let subscriber = Subscriber::start(&ctx, &sub_config, &workers_config, |_| make_worker(delay))
        .context("starting the subscriber")?;
    let threshold = subscriber.threshold();
    let membership = match &live {
        Some(live) => {
            let info = serde_json::json!({
                "pid": std::process::id(),
                "shards": sub_config.shards.iter().map(|s| s.connect.join(",")).collect::<Vec<_>>(),
                "workers": workers_config.count,
                "max_lateness": sub_config.max_lateness.to_string(),
            });
            Some(
                Membership::join(
                    &live.client,
                    GROUP,
                    &id,
                    info.to_string().as_bytes(),
                    sub_config.member_ttl.0,
                )
                .context("registering under /members/subscribers/")?,
            )
        }
        None => None,
    };
    tracing::info!(
        shards = sub_config.shards.len(),
        workers = workers_config.count,
        max_lateness = %sub_config.max_lateness,
        member = membership.as_ref().map(|m| m.key()),
        "subscriber running"
    );
    let deadline = args.duration.map(|d| std::time::Instant::now() + d.0);
    let mut next_status = std::time::Instant::now();
    loop {
        let tripped = subscriber.is_tripped();
        let now = std::time::Instant::now();
        if now >= next_status || tripped {
            next_status = now + STATUS_EVERY;
            status.publish(status_json(&subscriber, &threshold, &id, tripped));
        }
        if tripped
            || stop.load(Ordering::Relaxed)
            || deadline.is_some_and(|d| std::time::Instant::now() >= d)
        {
            break;
        }
        if let Some(live) = &live {
            live.drain(&threshold, base);
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    if let (Some(live), Some(fatal)) = (&live, subscriber.fatal()) {
        live.alert(&fatal);
    }
    let report = subscriber.shutdown()?;
    let stopped_by = stopped_by(&report, stop.load(Ordering::Relaxed));
    print!("{}", summary(&report, None, stopped_by));
    drop(membership);
    Ok(finish(&report))
}

fn status_json<W: tickbox_workers::Worker>(
    subscriber: &Subscriber<W>,
    threshold: &SharedThreshold,
    id: &str,
    tripped: bool,
) -> serde_json::Value {
    let state = match subscriber.fatal() {
        Some(Fatal::Snail(_)) => "snail",
        Some(Fatal::Gap(_)) => "gap",
        None if tripped => "tripped",
        None => "running",
    };
    let current = threshold.get();
    serde_json::json!({
        "component": "subscribe",
        "id": id,
        "state": state,
        "max_lateness": format_duration(current),
        "max_lateness_ns": u64::try_from(current.as_nanos()).unwrap_or(u64::MAX),
        "shards": subscriber.live_shards(),
    })
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

#[cfg(test)]
mod tests {
    use super::*;

    fn set(value: Duration) -> ConfigEvent<Duration> {
        ConfigEvent::Set {
            key: "max_lateness".into(),
            value,
        }
    }

    #[test]
    fn live_max_lateness_sets_ignores_garbage_and_reverts_on_delete() {
        let base = Duration::from_secs(1);
        let threshold = SharedThreshold::new(base);
        apply_live(set(Duration::from_micros(250)), &threshold, base);
        assert_eq!(threshold.get(), Duration::from_micros(250));
        apply_live(
            ConfigEvent::Invalid {
                key: "max_lateness".into(),
                error: "bad".into(),
            },
            &threshold,
            base,
        );
        assert_eq!(threshold.get(), Duration::from_micros(250), "invalid keeps");
        apply_live(set(Duration::from_millis(7)), &threshold, base);
        // Other keys under the prefix are not the threshold.
        apply_live(
            ConfigEvent::Set {
                key: "other".into(),
                value: Duration::from_nanos(1),
            },
            &threshold,
            base,
        );
        assert_eq!(threshold.get(), Duration::from_millis(7));
        apply_live(
            ConfigEvent::Deleted {
                key: "max_lateness".into(),
            },
            &threshold,
            base,
        );
        assert_eq!(
            threshold.get(),
            base,
            "delete reverts to the configured value"
        );
    }

    #[test]
    fn live_values_parse_with_the_subscriber_duration_syntax() {
        assert_eq!(
            parse_live_value(b" 250us\n").unwrap(),
            Duration::from_micros(250)
        );
        assert_eq!(parse_live_value(b"5ms").unwrap(), Duration::from_millis(5));
        assert!(parse_live_value(b"soon").is_err());
        assert!(check_member_id("host-12").is_ok());
        assert!(check_member_id("a/b").is_err());
        assert!(check_member_id("").is_err());
    }
}
