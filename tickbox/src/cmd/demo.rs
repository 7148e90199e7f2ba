//! `tickbox demo`: feed, Black Box subscriber and workers in one process, beside a raw libzmq PUB->SUB loop
//! measured in the same run with the same frame, transport and high-water marks.

use std::fmt::Write as _;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use tickbox_feed::{Feed, FeedConfig, PacingMode, Rate};
use tickbox_subscriber::{HumanDuration, ShardConfig, Subscriber};
use tickbox_wire::{encode_to_vec, make_topic, now_ns, Header, Kind, Quote};

use super::subscribe::{finish, make_worker, merged_stats, stopped_by, summary};
use crate::config::TickboxConfig;

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Transport {
    Inproc,
    Tcp,
}

#[derive(Debug, clap::Args)]
pub struct Args {
    /// How long the feed publishes.
    #[arg(long, default_value = "10s", value_name = "D")]
    pub duration: HumanDuration,
    /// Feed rate over all shards (100k, 1.5m) or `max` for flat out.
    #[arg(long, default_value = "100k", value_name = "R|max")]
    pub rate: String,
    /// Feed shards, and as many subscriber shards.
    #[arg(long, default_value_t = 2, value_name = "N")]
    pub shards: usize,
    /// Worker threads.
    #[arg(long, default_value_t = 2, value_name = "N")]
    pub workers: usize,
    #[arg(long, value_enum, default_value = "inproc")]
    pub transport: Transport,
    /// Publish on a plain (lossy) PUB: a full subscriber pipe drops messages (reported as gaps). Default is
    /// XPUB with ZMQ_XPUB_NODROP, which back-pressures the feed instead.
    #[arg(long)]
    pub lossy: bool,
    /// Synthetic universe size.
    #[arg(long, default_value_t = 1_000, value_name = "N")]
    pub symbols: usize,
    /// Suicidal Snail threshold (default from the config, 1s).
    #[arg(long, value_name = "D")]
    pub max_lateness: Option<HumanDuration>,
    /// Skip the raw libzmq baseline loop.
    #[arg(long)]
    pub no_baseline: bool,
    /// How long each raw baseline mode runs.
    #[arg(long, default_value = "2s", value_name = "D")]
    pub baseline_duration: HumanDuration,
}

pub fn run(args: Args, config: &TickboxConfig) -> anyhow::Result<ExitCode> {
    if args.shards == 0 || args.workers == 0 {
        anyhow::bail!("--shards and --workers must be at least 1");
    }
    let rate: Rate = args.rate.parse().context("--rate")?;
    let transport = match args.transport {
        Transport::Inproc => "inproc",
        Transport::Tcp => "tcp",
    };
    let stop = crate::shutdown::flag();
    let ctx = zmq::Context::new();
    let feed_sndhwm = FeedConfig::default().sndhwm;
    let mut sub_config = config.subscriber.clone();
    if let Some(d) = args.max_lateness {
        sub_config.max_lateness = d;
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
            let params = LoopParams {
                pairs: args.shards,
                transport: args.transport,
                no_drop,
                sndhwm: feed_sndhwm,
                rcvhwm: sub_config.rcv_hwm,
                duration: args.baseline_duration.0,
            };
            let rate = raw_loop(&ctx, &params, &frame, &stop).context("raw baseline loop")?;
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
            .map(|i| tickbox_feed::ShardConfig {
                endpoint: match args.transport {
                    Transport::Inproc => format!("inproc://tickbox-demo-{instance}-{i}"),
                    Transport::Tcp => "tcp://127.0.0.1:*".into(),
                },
                ..tickbox_feed::ShardConfig::default()
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
        wait_for_subscribers: 1,
        duration_ms: Some(args.duration.0.as_millis() as u64),
        ..FeedConfig::default()
    };
    let feed = Feed::start(&ctx, feed_config).context("starting the feed")?;
    sub_config.shards = feed
        .endpoints()
        .into_iter()
        .map(|endpoint| ShardConfig {
            connect: vec![endpoint],
            ..ShardConfig::default()
        })
        .collect();
    sub_config.topics.clear();
    let mut workers_config = config.workers.clone();
    workers_config.count = args.workers;
    let subscriber = Subscriber::start(&ctx, &sub_config, &workers_config, |_| make_worker(None))
        .context("starting the subscriber")?;
    tracing::info!(
        shards = args.shards,
        workers = args.workers,
        rate = %rate,
        duration = %args.duration,
        "demo running"
    );
    while !feed.is_finished() && !stop.load(Ordering::Relaxed) && !subscriber.is_tripped() {
        std::thread::sleep(Duration::from_millis(10));
    }
    feed.stop();
    let sent = feed.join().context("feed")?;
    // Let the last messages through the pipes before stopping: until nothing moved for 200 ms (bounded).
    let settle_deadline = Instant::now() + Duration::from_secs(5);
    let mut last = (subscriber.forwarded(), Instant::now());
    // Also after Ctrl-C: the feed has stopped, so what is in flight is bounded and a clean stop accounts for it.
    while Instant::now() < settle_deadline && !subscriber.is_tripped() {
        std::thread::sleep(Duration::from_millis(20));
        let now = subscriber.forwarded();
        if now != last.0 {
            last = (now, Instant::now());
        } else if last.1.elapsed() > Duration::from_millis(200) {
            break;
        }
    }
    let report = subscriber.shutdown()?;
    let stopped = stopped_by(&report, stop.load(Ordering::Relaxed));
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
    out.push_str(&summary(&report, Some(&per_publisher), stopped));
    let stats = merged_stats(&report);
    let pipeline_rate = stats.rate(report.processed());
    let _ = writeln!(
        out,
        "\npipeline: feed ({} shards) -> subscriber ({} shards) -> {} workers over {}, {}, frame {} bytes, \
         feed sndhwm {feed_sndhwm}, sub rcvhwm {}, hand-off hwm {} / worker hwm {}",
        args.shards,
        args.shards,
        args.workers,
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
            "raw libzmq baseline ({} PUB->SUB pairs over {}, same frame, sndhwm {feed_sndhwm}, rcvhwm {}, {} each):",
            args.shards, transport, sub_config.rcv_hwm, args.baseline_duration
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

struct LoopParams {
    pairs: usize,
    transport: Transport,
    no_drop: bool,
    sndhwm: i32,
    rcvhwm: i32,
    duration: Duration,
}

/// `pairs` PUB->SUB pairs sending `frame` flat out for `duration`; returns messages received per second over
/// all pairs (each SUB's count over its first-to-last receive span, summed).
fn raw_loop(
    ctx: &zmq::Context,
    p: &LoopParams,
    frame: &[u8],
    stop: &Arc<AtomicBool>,
) -> anyhow::Result<f64> {
    static RUN: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let run = RUN.fetch_add(1, Ordering::Relaxed);
    let mut threads = Vec::new();
    for pair in 0..p.pairs {
        let (ep_tx, ep_rx) = std::sync::mpsc::channel::<anyhow::Result<String>>();
        let pub_ctx = ctx.clone();
        let frame = frame.to_vec();
        let (transport, no_drop, sndhwm, duration) = (p.transport, p.no_drop, p.sndhwm, p.duration);
        let stop_pub = Arc::clone(stop);
        let publisher = std::thread::spawn(move || -> anyhow::Result<()> {
            let mut socket = pub_ctx.socket(zmq::XPUB)?;
            socket.set_linger(0)?;
            socket.set_sndhwm(sndhwm)?;
            socket.set_sndtimeo(100)?;
            tickbox_zmqx::set_xpub_nodrop(&mut socket, no_drop)?;
            let endpoint = match transport {
                Transport::Inproc => format!(
                    "inproc://tickbox-baseline-{}-{run}-{pair}",
                    std::process::id()
                ),
                Transport::Tcp => "tcp://127.0.0.1:*".into(),
            };
            let endpoint = tickbox_zmqx::bind_resolved(&socket, &endpoint)?;
            let _ = ep_tx.send(Ok(endpoint));
            // XPUB only to see the subscription arrive (no slow-joiner loss); without NODROP it drops like a PUB.
            socket.set_rcvtimeo(5_000)?;
            socket.recv_bytes(0).context("no subscriber within 5 s")?;
            let end = Instant::now() + duration;
            let mut n = 0u64;
            while !stop_pub.load(Ordering::Relaxed) {
                match socket.send(&frame[..], 0) {
                    Ok(()) | Err(zmq::Error::EAGAIN) => {}
                    Err(err) => return Err(err.into()),
                }
                n += 1;
                if n & 1023 == 0 && Instant::now() >= end {
                    break;
                }
            }
            Ok(())
        });
        let endpoint = ep_rx
            .recv_timeout(Duration::from_secs(5))
            .context("baseline publisher did not start")??;
        let sub_ctx = ctx.clone();
        let rcvhwm = p.rcvhwm;
        let subscriber = std::thread::spawn(move || -> anyhow::Result<(u64, Duration)> {
            let socket = sub_ctx.socket(zmq::SUB)?;
            socket.set_linger(0)?;
            socket.set_rcvhwm(rcvhwm)?;
            socket.set_rcvtimeo(300)?;
            socket.connect(&endpoint)?;
            socket.set_subscribe(b"")?;
            let mut msg = zmq::Message::new();
            let mut count = 0u64;
            let mut first = None;
            let mut last = Instant::now();
            loop {
                match socket.recv(&mut msg, 0) {
                    Ok(()) => {
                        count += 1;
                        if first.is_none() {
                            first = Some(Instant::now());
                            // A timed-out receive ends the run, so allow time for the start.
                            socket.set_rcvtimeo(300)?;
                        }
                        if count & 1023 == 0 {
                            last = Instant::now();
                        }
                    }
                    Err(zmq::Error::EAGAIN) if first.is_none() && count == 0 => {
                        if last.elapsed() > Duration::from_secs(5) {
                            break;
                        }
                    }
                    Err(zmq::Error::EAGAIN) => break,
                    Err(err) => return Err(err.into()),
                }
            }
            let span = first
                .map(|f| last.saturating_duration_since(f))
                .unwrap_or_default();
            Ok((count, span))
        });
        threads.push((publisher, subscriber));
    }
    let mut total = 0.0;
    for (publisher, subscriber) in threads {
        publisher
            .join()
            .map_err(|_| anyhow::anyhow!("baseline publisher panicked"))??;
        let (count, span) = subscriber
            .join()
            .map_err(|_| anyhow::anyhow!("baseline subscriber panicked"))??;
        if !span.is_zero() {
            total += count as f64 / span.as_secs_f64();
        }
    }
    Ok(total)
}
