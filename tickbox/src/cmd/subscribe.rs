//! `tickbox subscribe`: the Black Box subscriber (SUB shards -> PUSH/PULL workers) with the Suicidal Snail.

use std::fmt::Write as _;
use std::process::ExitCode;
use std::sync::atomic::Ordering;
use std::time::Duration;

use anyhow::Context as _;
use tickbox_fleet::{check_member_id, default_member_id, SubscriberLive};
use tickbox_subscriber::{
    check_nic, format_duration, Dispatch, Fatal, GapPolicy, Histogram, HumanDuration, Report,
    SharedThreshold, SnailMode, Subscriber, SubscriberConfig, SubscriberShardConfig,
};
use tickbox_wire::Kind;
use tickbox_workers::{Delay, LastValueBook, Stats, StatsReport, WorkerPoolConfig};

use crate::config::TickboxConfig;
use crate::exit_code;
use crate::status::StatusBoard;

#[derive(Debug, clap::Args)]
#[command(
    after_help = "One shard (SUB socket + thread) per --connect endpoint. With --dispatch by_topic (the default) each \
    shard sends every message of a symbol (Q.V.S and T.V.S alike) to one worker, chosen by a stable hash, so a \
    worker sees each symbol's updates in order; round_robin spreads messages evenly with no order per symbol.\n\
    The Suicidal Snail checks lateness (receive time - publisher send time) at each shard and again when a worker \
    dequeues, so a backlog behind slow workers also counts. Past --max-lateness the subscriber logs one ERROR \
    line, prints `SNAIL {json}` on stderr and exits with code 3. LVC cached values and gap notices are exempt. \
    Each publisher's clock offset is estimated as its minimum observed delay and reported; --snail-mode \
    skew_tolerant judges lateness relative to it instead of the publisher's clock.\n\
    Sequences are checked per publisher only when subscribed to everything (no --topics): only this hop's own \
    losses count as gaps (and trip --gap-policy die); restarts, duplicates, reordered arrivals, recorded gaps \
    (gap notices from a replayed journal) and implausible jumps (anomalies) are counted apart.\n\
    Exits 1 when it received nothing at all, or when a --nic does not exist or has no IPv4 address.\n\
    With --clone: /config/subscriber/max_lateness overrides the threshold while running (deleting it reverts to \
    the command line/config value; an invalid value is logged and ignored), the subscriber registers under \
    /members/subscribers/ID with a TTL, and a fatal event is also written to /alerts/subscribers/ID."
)]
pub struct Args {
    /// Publisher endpoints, one shard each (e.g. tcp://10.0.0.1:5556,tcp://10.0.1.1:5556). Overrides
    /// `[[subscriber.shards]]` from the config.
    #[arg(long, value_delimiter = ',', value_name = "EP")]
    pub connect: Vec<String>,
    /// Network interface per shard (one name applies to all shards); connects as tcp://IFACE:0;HOST:PORT. An
    /// interface that does not exist or has no IPv4 address is an error at start.
    #[arg(long, value_delimiter = ',', value_name = "IFACE")]
    pub nic: Vec<String>,
    /// Worker threads (each pulls from every shard).
    #[arg(long, value_name = "N")]
    pub workers: Option<usize>,
    /// Stop after this long (250ms, 10s, 5m); runs until Ctrl-C otherwise.
    #[arg(long, value_name = "D")]
    pub duration: Option<HumanDuration>,
    /// Stop once frames have stopped arriving for this long (after the first one): subscribe to a replay until it
    /// ends. A publisher's heartbeats count as arriving, so point it at a stream that goes quiet when done.
    #[arg(long, value_name = "D")]
    pub idle_exit: Option<HumanDuration>,
    /// Suicidal Snail threshold (250us, 5ms, 1s); 0 disables. Default 1s.
    #[arg(long, value_name = "D")]
    pub max_lateness: Option<HumanDuration>,
    /// Topic prefixes to subscribe to (Q.XNAS.,T.); heartbeats (H.) are always added. Default: everything.
    #[arg(long, value_delimiter = ',', value_name = "P")]
    pub topics: Vec<String>,
    /// CPU ids: the first one per shard pins the shards, the rest pin the workers in order.
    #[arg(long, value_delimiter = ',', value_name = "C")]
    pub cores: Vec<usize>,
    /// What a sequence gap (this hop's own loss) does: warn (log and count) or die (exit like the snail).
    #[arg(long, value_name = "warn|die")]
    pub gap_policy: Option<GapPolicy>,
    /// How shards hand messages to workers: by_topic (one worker per symbol, in order; default) or round_robin.
    #[arg(long, value_name = "by_topic|round_robin")]
    pub dispatch: Option<Dispatch>,
    /// How the snail measures lateness: strict (against the publisher's clock; default) or skew_tolerant
    /// (relative to the publisher's best observed delay).
    #[arg(long, value_name = "strict|skew_tolerant")]
    pub snail_mode: Option<SnailMode>,
    /// Warn when a publisher's estimated clock offset exceeds this either way (0 never). Default 100ms.
    #[arg(long, value_name = "D")]
    pub clock_skew_warn: Option<HumanDuration>,
    /// Print the summary as one JSON object on stdout instead of the table.
    #[arg(long)]
    pub json: bool,
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

/// How often the control loop refreshes the status snapshot.
const STATUS_EVERY: Duration = Duration::from_millis(500);

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
) -> anyhow::Result<(SubscriberConfig, WorkerPoolConfig)> {
    let mut sub = config.subscriber.clone();
    let mut workers = config.workers.clone();
    if !args.connect.is_empty() {
        sub.shards = args
            .connect
            .iter()
            .map(|endpoint| SubscriberShardConfig {
                connect: vec![endpoint.clone()],
                ..SubscriberShardConfig::default()
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
    if let Some(dispatch) = args.dispatch {
        sub.dispatch = dispatch;
    }
    if let Some(mode) = args.snail_mode {
        sub.snail_mode = mode;
    }
    if let Some(d) = args.clock_skew_warn {
        sub.clock_skew_warn = d;
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
    // Before any socket (Clone, status, data): a missing interface would otherwise receive nothing, silently.
    for nic in sub.shards.iter().filter_map(|s| s.nic.as_deref()) {
        check_nic(nic).map_err(|err| anyhow::anyhow!("--nic: {err}"))?;
    }
    Ok((sub, workers))
}

pub fn run(args: Args, config: &TickboxConfig) -> anyhow::Result<ExitCode> {
    let (mut sub_config, workers_config) = resolve(&args, config)?;
    let stop = crate::shutdown::flag();
    // Built (and its I/O threads placed) before any of our threads is pinned, so they never inherit a shard's core.
    let ctx = tickbox_zmqx::context::build(&config.context)?;
    let delay = args.debug_worker_delay.map(|d| d.0);
    let base = sub_config.max_lateness.0;
    let id = sub_config
        .member_id
        .clone()
        .unwrap_or_else(default_member_id);
    check_member_id(&id).context("--member-id")?;
    let live = if sub_config.clone.is_empty() {
        None
    } else {
        Some(
            SubscriberLive::connect(
                &ctx,
                &sub_config.clone,
                id.clone(),
                config.clone.client.clone(),
            )
            .context("--clone / [subscriber] clone")?,
        )
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
                live.join(info.to_string().as_bytes(), sub_config.member_ttl.0)
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
    // (frames received so far, when that count last changed): the idle clock starts at the first frame.
    let mut idle = (0u64, std::time::Instant::now());
    loop {
        let tripped = subscriber.is_tripped();
        let now = std::time::Instant::now();
        if let Some(limit) = args.idle_exit {
            let received: u64 = subscriber.live_shards().iter().map(|s| s.received).sum();
            if received != idle.0 {
                idle = (received, now);
            } else if received > 0 && now.duration_since(idle.1) >= limit.0 {
                tracing::info!(idle = %limit, "no frame for the idle limit: stopping");
                break;
            }
        }
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
    if args.json {
        println!("{}", summary_json(&report, &sub_config, stopped_by));
    } else {
        print!("{}", summary(&report, None, stopped_by));
    }
    drop(membership);
    if report.fatal.is_none() && report.received() == 0 {
        let endpoints: Vec<String> = sub_config
            .shards
            .iter()
            .flat_map(|s| s.connect.iter().cloned())
            .collect();
        tracing::error!(
            "received nothing at all from {} in {:.1} s: check the endpoints, --nic and --topics, and that the \
             publishers are running",
            endpoints.join(","),
            report.elapsed.as_secs_f64()
        );
        return Ok(ExitCode::from(exit_code::ERROR));
    }
    Ok(finish(&report))
}

fn lateness_json(h: &Histogram<u64>) -> serde_json::Value {
    if h.is_empty() {
        return serde_json::Value::Null;
    }
    serde_json::json!({
        "p50": h.value_at_quantile(0.5),
        "p99": h.value_at_quantile(0.99),
        "max": h.max(),
    })
}

/// The end-of-run summary as one JSON object (`--json`). Every count is an integer.
pub(crate) fn summary_json(
    report: &Report<CliWorker>,
    config: &SubscriberConfig,
    stopped_by: &str,
) -> serde_json::Value {
    let totals = report.sequence_totals();
    let offsets = &report.clock_offsets;
    let offset_of = |p: u32| {
        offsets
            .iter()
            .find(|o| o.publisher == p)
            .map(|o| o.offset_ns)
    };
    let mut publishers: Vec<serde_json::Value> = report
        .ledgers()
        .iter()
        .map(|l| {
            serde_json::json!({
                "publisher": l.publisher,
                "session": l.session,
                "first_sequence": l.first_sequence,
                "last_sequence": l.last_sequence,
                "received": l.received,
                "missing": l.missing,
                "recorded_gaps": l.recorded_missing,
                "duplicates": l.duplicates,
                "reordered": l.reordered,
                "restarts": l.restarts,
                "anomalies": l.anomalies,
                "clock_offset_ns": offset_of(l.publisher),
            })
        })
        .collect();
    // Publishers timed but not sequence-tracked (a topic filter is on): still show their clocks.
    for o in offsets {
        if !report.ledgers().iter().any(|l| l.publisher == o.publisher) {
            publishers.push(serde_json::json!({
                "publisher": o.publisher,
                "clock_offset_ns": o.offset_ns,
            }));
        }
    }
    let per_worker_forwarded = |w: usize| -> u64 {
        report
            .shards
            .iter()
            .filter_map(|s| s.forwarded_per_worker.get(w))
            .sum()
    };
    let workers: Vec<serde_json::Value> = report
        .workers
        .iter()
        .map(|w| {
            let mut v = serde_json::json!({
                "index": w.index,
                "processed": w.processed,
                "discarded": w.discarded,
                "late": w.late,
                "lateness_ns": lateness_json(&w.lateness),
            });
            if report.dispatch == Dispatch::ByTopic {
                v["forwarded"] = per_worker_forwarded(w.index).into();
            }
            v
        })
        .collect();
    let shards: Vec<serde_json::Value> = report
        .shards
        .iter()
        .map(|s| {
            serde_json::json!({
                "index": s.index,
                "endpoints": s.endpoints,
                "received": s.received,
                "forwarded": s.forwarded,
                "malformed": s.malformed,
                "cached": s.cached,
                "gap_notices": s.gap_notices,
                "late": s.late,
                "gaps": s.gaps,
                "missing": s.missing,
                "lateness_ns": lateness_json(&s.lateness),
            })
        })
        .collect();
    let stats = merged_stats(report);
    serde_json::json!({
        "component": "subscribe",
        "stopped_by": stopped_by,
        "fatal": report.fatal,
        "elapsed_ms": u64::try_from(report.elapsed.as_millis()).unwrap_or(u64::MAX),
        "received": report.received(),
        "forwarded": report.forwarded(),
        "processed": report.processed(),
        "unprocessed": report.unprocessed,
        "malformed": report.malformed(),
        "cached": report.shards.iter().map(|s| s.cached).sum::<u64>(),
        "gap_notices": report.gap_notices(),
        "late": report.late(),
        "sequence_tracking": config.topics.is_empty() || config.topics.iter().any(|t| t.is_empty()),
        "data_received": totals.received,
        "missing": totals.missing,
        "gaps": totals.gap_events,
        "recorded_gaps": totals.recorded_missing,
        "recorded_gap_events": totals.recorded_gap_events,
        "duplicates": totals.duplicates,
        "reordered": totals.reordered,
        "restarts": totals.restarts,
        "anomalies": totals.anomalies,
        "untracked": totals.untracked,
        "quotes": stats.count(Kind::Quote),
        "trades": stats.count(Kind::Trade),
        "heartbeats": stats.count(Kind::Heartbeat),
        "distinct_topics": stats.distinct_topics(),
        "dispatch": report.dispatch.as_str(),
        "snail_mode": report.snail_mode.as_str(),
        "max_lateness_ns": u64::try_from(config.max_lateness.0.as_nanos()).unwrap_or(u64::MAX),
        "clock_skew_warn_ns": u64::try_from(config.clock_skew_warn.0.as_nanos()).unwrap_or(u64::MAX),
        "clock_offsets": offsets,
        "clock_untracked": report.clock_untracked,
        "publishers": publishers,
        "workers": workers,
        "shards": shards,
        "lateness_ns": {
            "receive": lateness_json(&report.receive_lateness()),
            "dequeue": lateness_json(&report.dequeue_lateness()),
        },
    })
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
        "dispatch": subscriber.dispatch().as_str(),
        "snail_mode": subscriber.snail_mode().as_str(),
        "clock_offsets": subscriber.clock_offsets(),
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
    let t = report.sequence_totals();
    let _ = writeln!(
        out,
        "sequences: publishers {}  data received {}  missing {}  recorded gaps {}  duplicates {}  reordered {}  \
         restarts {}  anomalies {}  gap notices {}",
        t.publishers,
        t.received,
        t.missing,
        t.recorded_missing,
        t.duplicates,
        t.reordered,
        t.restarts,
        t.anomalies,
        report.gap_notices()
    );
    let per_worker: Vec<String> = report
        .workers
        .iter()
        .map(|w| format!("{} {}", w.index, w.processed))
        .collect();
    let _ = writeln!(
        out,
        "dispatch: {}   snail mode: {}   processed per worker: {}",
        report.dispatch,
        report.snail_mode.as_str(),
        per_worker.join(", ")
    );
    if !report.clock_offsets.is_empty() {
        let shown: Vec<String> = report
            .clock_offsets
            .iter()
            .take(16)
            .map(|o| {
                let d = format_duration(Duration::from_nanos(o.offset_ns.unsigned_abs()));
                format!(
                    "publisher {} {}{d}",
                    o.publisher,
                    if o.offset_ns < 0 { "-" } else { "+" }
                )
            })
            .collect();
        let _ = writeln!(
            out,
            "clock offsets (min delay; + publisher behind, - ahead): {}{}",
            shown.join(", "),
            if report.clock_offsets.len() > 16 {
                format!(" and {} more", report.clock_offsets.len() - 16)
            } else {
                String::new()
            }
        );
    }
    out
}
