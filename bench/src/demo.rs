//! `tickbox demo`: feed, Black Box subscriber and workers in one process, beside a raw libzmq PUB->SUB loop
//! measured in the same run with the same frame, transport and high-water marks. [`run_demo`] runs it;
//! [`DemoOutcome::summary`] is the table the command prints.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use tickbox_feed::{Feed, FeedConfig, FeedError, FeedReport, PacingMode, Rate};
use tickbox_subscriber::{
    standard_worker, Report, StandardWorker, Subscriber, SubscriberConfig, SubscriberError,
    SubscriberShardConfig,
};
use tickbox_wire::{encode_to_vec, make_topic, now_ns, Header, Kind, Quote};
use tickbox_workers::{WorkerError, WorkerPoolConfig};
use tickbox_zmqx::BackPressure;

use crate::{raw_throughput, BenchError, RawPattern, ThroughputConfig, Transport};

/// How long each raw baseline warms up before it is measured.
const BASELINE_WARMUP: Duration = Duration::from_millis(200);
/// After the feed ends, the pipes settle until nothing moved for this long...
const SETTLE_QUIET: Duration = Duration::from_millis(200);
/// ...or this long at most.
const SETTLE_MAX: Duration = Duration::from_secs(5);

/// What the demo runs.
#[derive(Debug, Clone)]
pub struct DemoOptions {
    /// Publisher shards, and as many subscriber shards.
    pub shards: usize,
    /// Worker threads.
    pub workers: usize,
    /// Symbols of the synthetic market.
    pub symbols: usize,
    /// The feed's rate.
    pub rate: Rate,
    /// How long the feed runs.
    pub duration: Duration,
    /// `inproc` or `tcp`.
    pub transport: Transport,
    /// A lossy PUB feed instead of XPUB_NODROP.
    pub lossy: bool,
    /// How long each raw baseline mode runs; `None` runs none.
    pub baseline: Option<Duration>,
    /// The subscriber's settings (its shards and topics are the demo's own).
    pub subscriber: SubscriberConfig,
    /// The worker pool's settings (its count is [`DemoOptions::workers`]).
    pub pool: WorkerPoolConfig,
}

/// Why the demo could not run.
#[derive(Debug, thiserror::Error)]
pub enum DemoError {
    /// The raw baseline failed.
    #[error("raw baseline: {0}")]
    Baseline(#[source] BenchError),
    /// The feed could not start.
    #[error("starting the feed: {0}")]
    FeedStart(#[source] FeedError),
    /// The feed failed.
    #[error("feed: {0}")]
    Feed(#[source] FeedError),
    /// The subscriber could not start.
    #[error("starting the subscriber: {0}")]
    SubscriberStart(#[source] SubscriberError),
    /// The subscriber could not stop.
    #[error(transparent)]
    Subscriber(#[from] SubscriberError),
}

/// What the demo did.
#[derive(Debug)]
pub struct DemoOutcome {
    /// What the feed sent.
    pub sent: FeedReport,
    /// What the subscriber and its workers did.
    pub report: Report<StandardWorker>,
    /// The first worker that failed, if any.
    pub worker_failure: Option<WorkerError>,
    /// Raw PUB->SUB msg/s: (back-pressure, rate), lossy (`Drop`) first.
    pub baseline: Vec<(BackPressure, f64)>,
    /// The settings it ran with, for the summary.
    options: DemoOptions,
    /// The frame size of the baseline.
    frame_len: usize,
    /// The feed's send HWM (the baseline's too).
    feed_send_hwm: i32,
}

/// A quote frame of the size the feed sends, for the raw baseline.
fn sample_frame() -> Vec<u8> {
    let header = Header::live(Kind::Quote, 1, 1, now_ns());
    encode_to_vec(
        &make_topic(Kind::Quote, "XNAS", "ABCD"),
        &header,
        &Quote::default().into(),
    )
    .unwrap_or_default()
}

/// The feed the demo runs: `shards` shards on `transport`, `instance` keeping inproc names apart.
fn feed_config(opts: &DemoOptions, instance: u32) -> FeedConfig {
    FeedConfig {
        shards: (0..opts.shards)
            .map(|i| tickbox_feed::PublisherShardConfig {
                endpoint: match opts.transport {
                    Transport::Inproc => format!("inproc://tickbox-demo-{instance}-{i}"),
                    _ => "tcp://127.0.0.1:*".into(),
                },
                ..tickbox_feed::PublisherShardConfig::default()
            })
            .collect(),
        symbols: opts.symbols,
        rate: opts.rate,
        mode: if opts.rate == Rate::Max {
            PacingMode::FlatOut
        } else {
            PacingMode::Paced
        },
        back_pressure: BackPressure::from_blocks(!opts.lossy),
        // The demo drains in-process itself (it lets the pipes settle before stopping its subscriber), and its
        // subscriber leaves only after the feed has ended: a drain wait would only run out.
        drain_timeout: Duration::ZERO.into(),
        wait_for_subscribers: 1,
        duration: Some(opts.duration.into()),
        ..FeedConfig::default()
    }
}

/// Runs the raw baselines (unless `opts.baseline` is `None`), then the pipeline until the feed ends, `stop`, a
/// tripped snail or a failed worker; then lets what is in flight through before stopping the subscriber.
pub fn run_demo(
    gate: &tickbox_auth::Gate,
    opts: &DemoOptions,
    stop: &AtomicBool,
) -> Result<DemoOutcome, DemoError> {
    let feed_send_hwm = FeedConfig::default().send_hwm;
    let frame = sample_frame();
    let mut baseline = Vec::new();
    if let Some(duration) = opts.baseline {
        for back_pressure in [BackPressure::Drop, BackPressure::Block] {
            if stop.load(Ordering::Relaxed) {
                break;
            }
            // The one raw baseline, shared with `tickbox bench`: same frame size, same shard count, same HWM.
            let baseline_config = ThroughputConfig {
                transport: opts.transport,
                size: frame.len(),
                shards: opts.shards,
                warmup: BASELINE_WARMUP,
                duration,
                hwm: feed_send_hwm,
                security: Default::default(),
            };
            let pattern = match back_pressure {
                BackPressure::Block => RawPattern::PubSub,
                BackPressure::Drop => RawPattern::LossyPubSub,
            };
            let rate = raw_throughput(gate, pattern, &baseline_config)
                .map_err(DemoError::Baseline)?
                .msgs_per_s;
            tracing::info!(
                no_drop = back_pressure.blocks(),
                rate = format!("{rate:.0}"),
                "raw PUB->SUB baseline"
            );
            baseline.push((back_pressure, rate));
        }
    }
    let feed =
        Feed::start(gate, feed_config(opts, std::process::id())).map_err(DemoError::FeedStart)?;
    let mut sub_config = opts.subscriber.clone();
    sub_config.shards = feed
        .endpoints()
        .into_iter()
        .map(|endpoint| SubscriberShardConfig {
            connect: vec![endpoint],
            ..SubscriberShardConfig::default()
        })
        .collect();
    sub_config.topics.clear();
    let mut pool = opts.pool.clone();
    pool.count = Some(opts.workers);
    let subscriber = Subscriber::start(gate.context(), &sub_config, &pool, |_| {
        standard_worker(None)
    })
    .map_err(DemoError::SubscriberStart)?;
    tracing::info!(
        shards = opts.shards,
        workers = opts.workers,
        rate = %opts.rate,
        duration = %tickbox_units::format_duration(opts.duration),
        "demo running"
    );
    while !feed.is_finished()
        && !stop.load(Ordering::Relaxed)
        && !subscriber.is_tripped()
        && !subscriber.workers_failed()
    {
        std::thread::sleep(Duration::from_millis(10));
    }
    feed.stop();
    let sent = feed.join().map_err(DemoError::Feed)?;
    // Let the last messages through the pipes before stopping: until nothing moved for a while (bounded). Also
    // after Ctrl-C: the feed has stopped, so what is in flight is bounded and a clean stop accounts for it.
    let settle_deadline = Instant::now() + SETTLE_MAX;
    let mut last = (subscriber.forwarded(), Instant::now());
    while Instant::now() < settle_deadline
        && !subscriber.is_tripped()
        && !subscriber.workers_failed()
    {
        std::thread::sleep(Duration::from_millis(20));
        let now = subscriber.forwarded();
        if now != last.0 {
            last = (now, Instant::now());
        } else if last.1.elapsed() > SETTLE_QUIET {
            break;
        }
    }
    let (report, worker_failure) = subscriber.shutdown_partial()?;
    let mut options = opts.clone();
    options.subscriber = sub_config;
    options.pool = pool;
    Ok(DemoOutcome {
        sent,
        report,
        worker_failure,
        baseline,
        options,
        frame_len: frame.len(),
        feed_send_hwm,
    })
}

impl DemoOutcome {
    /// The summary table: the feed, the subscriber, the pipeline's rate, and the raw baseline beside it.
    pub fn summary(&self, stopped_by: &str) -> String {
        let (opts, report, sent) = (&self.options, &self.report, &self.sent);
        let transport = opts.transport;
        let feed_send_hwm = self.feed_send_hwm;
        let per_publisher: Vec<(u32, u64)> = sent
            .shards
            .iter()
            .map(|s| (s.publisher_id, s.counts.data() + s.counts.heartbeats))
            .collect();
        let mode = if opts.lossy {
            "lossy PUB"
        } else {
            "XPUB_NODROP"
        };
        let mut out = String::new();
        let _ = writeln!(out, "feed ({mode}):\n{sent}");
        out.push_str(&report.summary_table(Some(&per_publisher), stopped_by));
        let stats = report.merged_stats();
        let pipeline_rate = stats.rate(report.processed());
        let _ = writeln!(
            out,
            "\npipeline: feed ({} shards) -> subscriber ({} shards) -> {} workers ({} dispatch) over {}, {}, frame {} \
             bytes, feed sndhwm {feed_send_hwm}, sub rcvhwm {}, hand-off hwm {} / worker hwm {}",
            opts.shards,
            opts.shards,
            opts.workers,
            opts.subscriber.dispatch,
            transport,
            mode,
            self.frame_len,
            opts.subscriber.receive_hwm,
            opts.subscriber.handoff_hwm,
            opts.pool.hwm,
        );
        let _ = writeln!(
            out,
            "pipeline received {:.0} msg/s ({} messages; per shard: {})",
            pipeline_rate,
            report.processed(),
            report
                .shards
                .iter()
                .map(|s| format!(
                    "{:.0}",
                    s.received as f64 / stats.span().as_secs_f64().max(1e-9)
                ))
                .collect::<Vec<_>>()
                .join(", ")
        );
        if let (false, Some(each)) = (self.baseline.is_empty(), opts.baseline) {
            let rate = opts.rate;
            if rate != Rate::Max {
                let _ = writeln!(
                    out,
                    "(the feed was paced at {rate} msg/s: use --rate max to compare throughput)"
                );
            }
            let _ = writeln!(
                out,
                "raw libzmq baseline ({} PUB->SUB pairs over {}, same frame size, hwm {feed_send_hwm}, {} each):",
                opts.shards,
                transport,
                tickbox_units::format_duration(each)
            );
            out.push_str(&baseline_lines(
                &self.baseline,
                opts.lossy,
                rate == Rate::Max,
                pipeline_rate,
            ));
        }
        out
    }
}

impl DemoOutcome {
    /// The run as one JSON object (`tickbox demo --json`): the feed's summary, the subscriber's (as `subscribe
    /// --json` gives it), the pipeline's rate and settings, and each raw baseline mode's rate.
    pub fn summary_json(&self, stopped_by: &str) -> serde_json::Value {
        let (opts, report) = (&self.options, &self.report);
        let stats = report.merged_stats();
        serde_json::json!({
            "component": "demo",
            "feed": tickbox_feed::FeedSummary::new(&self.sent),
            "subscriber": report.summary_json(&opts.subscriber, stopped_by),
            "pipeline": {
                "msgs_per_s": stats.rate(report.processed()).round(),
                "processed": report.processed(),
                "shards": opts.shards,
                "workers": opts.workers,
                "dispatch": opts.subscriber.dispatch.as_str(),
                "transport": opts.transport.to_string(),
                "mode": if opts.lossy { "lossy_pub" } else { "xpub_nodrop" },
                "frame_bytes": self.frame_len,
                "feed_send_hwm": self.feed_send_hwm,
            },
            "baseline": self.baseline.iter().map(|(back_pressure, rate)| serde_json::json!({
                "mode": if back_pressure.blocks() { "xpub_nodrop" } else { "lossy_pub" },
                "msgs_per_s": rate.round(),
            })).collect::<Vec<_>>(),
            "worker_failure": self.worker_failure.as_ref().map(|e| e.to_string()),
        })
    }
}

/// One line per raw baseline mode; the pipeline's share of the same mode's rate when the feed ran flat out.
fn baseline_lines(
    baseline: &[(BackPressure, f64)],
    lossy: bool,
    flat_out: bool,
    pipeline: f64,
) -> String {
    let mut out = String::new();
    for (back_pressure, rate) in baseline {
        let same_mode = back_pressure.blocks() != lossy;
        let _ = writeln!(
            out,
            "  {:<12} {:>12.0} msg/s{}",
            if back_pressure.blocks() {
                "XPUB_NODROP"
            } else {
                "lossy PUB"
            },
            rate,
            if same_mode && *rate > 0.0 && flat_out {
                format!("   pipeline = {:.0} % of this", 100.0 * pipeline / rate)
            } else {
                String::new()
            }
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pipeline_is_compared_with_the_same_mode_only_when_flat_out() {
        let baseline = [
            (BackPressure::Drop, 2_000_000.0),
            (BackPressure::Block, 1_000_000.0),
        ];
        let lines = baseline_lines(&baseline, false, true, 500_000.0);
        let lines: Vec<&str> = lines.lines().collect();
        assert_eq!(
            lines[0],
            format!("  {:<12} {:>12.0} msg/s", "lossy PUB", 2_000_000.0)
        );
        assert_eq!(
            lines[1],
            format!(
                "  {:<12} {:>12.0} msg/s   pipeline = 50 % of this",
                "XPUB_NODROP", 1_000_000.0
            )
        );
        let paced = baseline_lines(&baseline, false, false, 500_000.0);
        assert!(!paced.contains("pipeline ="));
        let lossy = baseline_lines(&baseline, true, true, 500_000.0);
        assert!(lossy
            .lines()
            .next()
            .unwrap()
            .contains("pipeline = 25 % of this"));
    }

    #[test]
    fn the_feed_is_paced_unless_flat_out_and_named_per_transport() {
        let opts = DemoOptions {
            shards: 2,
            workers: 1,
            symbols: 10,
            rate: Rate::Max,
            duration: Duration::from_secs(1),
            transport: Transport::Inproc,
            lossy: true,
            baseline: None,
            subscriber: SubscriberConfig::default(),
            pool: WorkerPoolConfig::default(),
        };
        let feed = feed_config(&opts, 42);
        assert_eq!(feed.mode, PacingMode::FlatOut);
        assert!(!feed.back_pressure.blocks());
        assert_eq!(feed.shards[1].endpoint, "inproc://tickbox-demo-42-1");
        let tcp = feed_config(
            &DemoOptions {
                transport: Transport::Tcp,
                rate: "1000".parse().unwrap(),
                ..opts
            },
            42,
        );
        assert_eq!(tcp.mode, PacingMode::Paced);
        assert_eq!(tcp.shards[0].endpoint, "tcp://127.0.0.1:*");
    }
}
