//! `tickbox demo`: feed, Black Box subscriber and workers in one process, beside a raw libzmq PUB->SUB loop
//! measured in the same run with the same frame, transport and high-water marks.

use std::fmt::Write as _;
use std::process::ExitCode;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use tickbox_feed::{Feed, FeedConfig, PacingMode, Rate};
use tickbox_subscriber::{Dispatch, HumanDuration, SnailMode, Subscriber, SubscriberShardConfig};
use tickbox_wire::{encode_to_vec, make_topic, now_ns, Header, Kind, Quote};

use super::subscribe::finish;
use crate::config::TickboxConfig;
use tickbox_subscriber::standard_worker;

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Transport {
    Inproc,
    Tcp,
}

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// How long the feed publishes.
    #[arg(long, default_value = "10s", value_name = "D")]
    pub duration: HumanDuration,
    /// Feed rate over all shards (100k, 1.5m) or `max` for flat out.
    #[arg(long, default_value = "100k", value_name = "R|max")]
    pub rate: String,
    /// Feed shards, and as many subscriber shards; at most 64.
    #[arg(long, default_value_t = 2, value_name = "N", value_parser = crate::bounds::shards)]
    pub shards: usize,
    /// Worker threads; at most 256.
    #[arg(long, default_value_t = 2, value_name = "N", value_parser = crate::bounds::workers)]
    pub workers: usize,
    #[arg(long, value_enum, default_value = "inproc")]
    pub transport: Transport,
    /// Publish on a plain (lossy) PUB: a full subscriber pipe drops messages (reported as gaps). Default is
    /// XPUB with ZMQ_XPUB_NODROP, which back-pressures the feed instead.
    #[arg(long)]
    pub lossy: bool,
    /// Synthetic universe size (at most 1000000).
    #[arg(long, default_value_t = 1_000, value_name = "N", value_parser = crate::bounds::symbols)]
    pub symbols: usize,
    /// Suicidal Snail threshold (default from the config, 1s).
    #[arg(long, value_name = "D")]
    pub max_lateness: Option<HumanDuration>,
    /// How shards hand messages to workers: by_topic (one worker per symbol, in order) or round_robin. Default
    /// from the config (by_topic).
    #[arg(long, value_name = "by_topic|round_robin")]
    pub dispatch: Option<Dispatch>,
    /// How the snail measures lateness: strict or skew_tolerant. Default from the config (strict).
    #[arg(long, value_name = "strict|skew_tolerant")]
    pub snail_mode: Option<SnailMode>,
    /// Skip the raw libzmq baseline loop.
    #[arg(long)]
    pub no_baseline: bool,
    /// How long each raw baseline mode runs.
    #[arg(long, default_value = "2s", value_name = "D")]
    pub baseline_duration: HumanDuration,
}

pub(crate) fn run(args: Args, config: &TickboxConfig) -> anyhow::Result<ExitCode> {
    if args.shards == 0 || args.workers == 0 {
        anyhow::bail!("--shards and --workers must be at least 1");
    }
    let rate: Rate = args.rate.parse().context("--rate")?;
    let transport = match args.transport {
        Transport::Inproc => "inproc",
        Transport::Tcp => "tcp",
    };
    let stop = crate::shutdown::flag();
    // Built (and its I/O threads placed) before any of our threads is pinned, so they never inherit a shard's core.
    let ctx = tickbox_zmqx::context::build(&config.context)?;
    // Before any socket binds: without a ZAP handler libzmq would let every CURVE client in.
    let _zap = config.auth.start_zap(&ctx)?;
    let feed_sndhwm = FeedConfig::default().sndhwm;
    let mut sub_config = config.subscriber.clone();
    if let Some(d) = args.max_lateness {
        sub_config.max_lateness = d;
    }
    if let Some(dispatch) = args.dispatch {
        sub_config.dispatch = dispatch;
    }
    if let Some(mode) = args.snail_mode {
        sub_config.snail_mode = mode;
    }
    let frame = sample_frame();
    let baseline = if args.no_baseline {
        Vec::new()
    } else {
        let mut results = Vec::new();
        for no_drop in [false, true] {
            if stop.load(Ordering::Relaxed) {
                break;
            }
            // The one raw baseline, shared with `tickbox bench`: same frame size, same shard count, same HWM.
            let baseline_config = tickbox_bench::ThroughputConfig {
                transport: match args.transport {
                    Transport::Inproc => tickbox_bench::Transport::Inproc,
                    Transport::Tcp => tickbox_bench::Transport::Tcp,
                },
                size: frame.len(),
                shards: args.shards,
                warmup: BASELINE_WARMUP,
                duration: args.baseline_duration.0,
                hwm: feed_sndhwm,
                security: Default::default(),
            };
            let pattern = if no_drop {
                tickbox_bench::RawPattern::PubSub
            } else {
                tickbox_bench::RawPattern::LossyPubSub
            };
            let rate = tickbox_bench::raw_throughput(&ctx, pattern, &baseline_config)
                .context("raw baseline")?
                .msgs_per_s;
            tracing::info!(
                no_drop,
                rate = format!("{rate:.0}"),
                "raw PUB->SUB baseline"
            );
            results.push((no_drop, rate));
        }
        results
    };

    let instance = std::process::id();
    let feed_config = FeedConfig {
        shards: (0..args.shards)
            .map(|i| tickbox_feed::PublisherShardConfig {
                endpoint: match args.transport {
                    Transport::Inproc => format!("inproc://tickbox-demo-{instance}-{i}"),
                    Transport::Tcp => "tcp://127.0.0.1:*".into(),
                },
                ..tickbox_feed::PublisherShardConfig::default()
            })
            .collect(),
        symbols: args.symbols,
        rate,
        mode: if rate == Rate::Max {
            PacingMode::FlatOut
        } else {
            PacingMode::Paced
        },
        no_drop: !args.lossy,
        // The demo drains in-process itself (it lets the pipes settle before stopping its subscriber), and its
        // subscriber leaves only after the feed has ended: a drain wait would only run out.
        drain_timeout: Duration::ZERO.into(),
        wait_for_subscribers: 1,
        duration: Some(args.duration),
        ..FeedConfig::default()
    };
    let feed = Feed::start(&ctx, feed_config).context("starting the feed")?;
    sub_config.shards = feed
        .endpoints()
        .into_iter()
        .map(|endpoint| SubscriberShardConfig {
            connect: vec![endpoint],
            ..SubscriberShardConfig::default()
        })
        .collect();
    sub_config.topics.clear();
    let mut workers_config = config.workers.clone();
    workers_config.count = args.workers;
    let subscriber = Subscriber::start(&ctx, &sub_config, &workers_config, |_| {
        standard_worker(None)
    })
    .context("starting the subscriber")?;
    tracing::info!(
        shards = args.shards,
        workers = args.workers,
        rate = %rate,
        duration = %args.duration,
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
    let sent = feed.join().context("feed")?;
    // Let the last messages through the pipes before stopping: until nothing moved for 200 ms (bounded).
    let settle_deadline = Instant::now() + Duration::from_secs(5);
    let mut last = (subscriber.forwarded(), Instant::now());
    // Also after Ctrl-C: the feed has stopped, so what is in flight is bounded and a clean stop accounts for it.
    while Instant::now() < settle_deadline
        && !subscriber.is_tripped()
        && !subscriber.workers_failed()
    {
        std::thread::sleep(Duration::from_millis(20));
        let now = subscriber.forwarded();
        if now != last.0 {
            last = (now, Instant::now());
        } else if last.1.elapsed() > Duration::from_millis(200) {
            break;
        }
    }
    let (report, worker_failure) = subscriber.shutdown_partial()?;
    let stopped = report.stopped_by(stop.load(Ordering::Relaxed));
    let per_publisher: Vec<(u32, u64)> = sent
        .shards
        .iter()
        .map(|s| (s.publisher_id, s.counts.data() + s.counts.heartbeats))
        .collect();
    let mut out = String::new();
    let _ = writeln!(
        out,
        "feed ({}):\n{sent}",
        if args.lossy {
            "lossy PUB"
        } else {
            "XPUB_NODROP"
        }
    );
    out.push_str(&report.summary_table(Some(&per_publisher), stopped));
    let stats = report.merged_stats();
    let pipeline_rate = stats.rate(report.processed());
    let _ = writeln!(
        out,
        "\npipeline: feed ({} shards) -> subscriber ({} shards) -> {} workers ({} dispatch) over {}, {}, frame {} \
         bytes, feed sndhwm {feed_sndhwm}, sub rcvhwm {}, hand-off hwm {} / worker hwm {}",
        args.shards,
        args.shards,
        args.workers,
        sub_config.dispatch,
        transport,
        if args.lossy { "lossy PUB" } else { "XPUB_NODROP" },
        frame.len(),
        sub_config.rcv_hwm,
        sub_config.handoff_hwm,
        workers_config.hwm,
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
    if !baseline.is_empty() {
        if rate != Rate::Max {
            let _ = writeln!(
                out,
                "(the feed was paced at {rate} msg/s: use --rate max to compare throughput)"
            );
        }
        let _ = writeln!(
            out,
            "raw libzmq baseline ({} PUB->SUB pairs over {}, same frame size, hwm {feed_sndhwm}, {} each):",
            args.shards, transport, args.baseline_duration
        );
        let flat_out = rate == Rate::Max;
        for (no_drop, rate) in &baseline {
            let same_mode = *no_drop != args.lossy;
            let _ = writeln!(
                out,
                "  {:<12} {:>12.0} msg/s{}",
                if *no_drop { "XPUB_NODROP" } else { "lossy PUB" },
                rate,
                if same_mode && *rate > 0.0 && flat_out {
                    format!(
                        "   pipeline = {:.0} % of this",
                        100.0 * pipeline_rate / rate
                    )
                } else {
                    String::new()
                }
            );
        }
    }
    print!("{out}");
    if let Some(err) = worker_failure {
        // After the summary, so what the surviving workers did is still shown.
        eprintln!("error: {err}: the run is incomplete");
        return Ok(ExitCode::from(crate::exit_code::WORKER_FAILED));
    }
    Ok(finish(&report))
}

/// A frame of the size the feed publishes (a quote on a four-letter symbol).
fn sample_frame() -> Vec<u8> {
    let header = Header::live(Kind::Quote, 1, 1, now_ns());
    encode_to_vec(
        &make_topic(Kind::Quote, "XNAS", "ABCD"),
        &header,
        &Quote::default().into(),
    )
    .expect("static frame encodes")
}

/// Warm-up before each raw baseline is measured (connections up, caches warm).
const BASELINE_WARMUP: Duration = Duration::from_millis(200);
