//! `tickbox feed`: sharded publishers fed by the synthetic market (or the pathological LVC test pattern).

use std::io::Write;
use std::process::ExitCode;
use std::sync::atomic::Ordering;
use std::time::Duration;

use anyhow::{bail, Context};
use tickbox_feed::{Feed, FeedConfig, PacingMode, Pattern, PublisherShardConfig, Rate};

use crate::config::TickboxConfig;
use crate::live::{fmt_rate, LiveArgs, LiveView, Rate as LiveRate};
use crate::status::StatusBoard;

fn feed_status(feed: &tickbox_feed::FeedHandle) -> serde_json::Value {
    let shards: Vec<serde_json::Value> = feed
        .shards()
        .iter()
        .zip(feed.stats())
        .map(|(info, stats)| {
            serde_json::json!({
                "shard": info.shard,
                "publisher_id": info.publisher_id,
                "endpoint": info.endpoint,
                "symbols": info.symbols,
                "quotes": stats.counts.quotes,
                "trades": stats.counts.trades,
                "heartbeats": stats.counts.heartbeats,
                "last_sequence": stats.last_sequence,
                "finished": stats.finished,
            })
        })
        .collect();
    serde_json::json!({ "component": "feed", "state": "running", "shards": shards })
}

/// Command-line overrides of the `[feed]` config section.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// Endpoints to bind, one publisher shard per endpoint (e.g. `tcp://*:5556,tcp://*:5557`).
    /// Default: the config's shards, else one shard on `tcp://127.0.0.1:*`.
    #[arg(
        long,
        value_delimiter = ',',
        value_name = "EP[,EP…]",
        conflicts_with = "connect"
    )]
    bind: Vec<String>,
    /// Endpoints to connect to instead (e.g. an LVC proxy's frontend), one shard per endpoint.
    #[arg(long, value_delimiter = ',', value_name = "EP[,EP…]")]
    connect: Vec<String>,
    /// Data rate over all shards: `50000`, `100k`, `1.5m` or `max` (flat out).
    #[arg(long)]
    rate: Option<Rate>,
    /// Pacing: evenly spaced, Poisson bursts, or as fast as possible.
    #[arg(long, value_name = "paced|bursty|flat-out")]
    mode: Option<PacingMode>,
    /// Mean burst size in bursty mode.
    #[arg(long)]
    burst_size: Option<f64>,
    /// Number of symbols in the generated universe (at most 1000000).
    #[arg(long, value_parser = crate::bounds::symbols)]
    symbols: Option<usize>,
    /// Venue code used in topics.
    #[arg(long)]
    venue: Option<String>,
    /// Stop after this long (`10s`, `500ms`, `2m`); default: run until Ctrl-C.
    #[arg(long, value_parser = tickbox_units::parse_duration)]
    duration: Option<Duration>,
    /// Stop each shard after this many data messages.
    #[arg(long)]
    max_messages: Option<u64>,
    /// Pin shard i's thread to the i-th core (one core per shard).
    #[arg(long, value_delimiter = ',', value_name = "C[,C…]")]
    cores: Vec<usize>,
    /// `synthetic` market or the Guide's `pathological` publisher (for testing an LVC).
    #[arg(long, value_name = "synthetic|pathological")]
    pattern: Option<Pattern>,
    /// With `--pattern pathological`: `guide` sends each message as the Guide's two frames, [topic][body] (the
    /// body is the tickbox frame), as the Guide's pathological publisher does for its LVC.
    #[arg(long, value_name = "tickbox|guide")]
    framing: Option<tickbox_feed::Framing>,
    /// Publish a recording instead of the synthetic market: a DBN file (plain or zstd) or a tickbox journal.
    /// Records go out in file order under this feed's publisher ids and sequences, their event time kept in
    /// the header's origin time; records with no tickbox equivalent are skipped and counted.
    // The generator's flags mean nothing for a recording; refusing them beats ignoring them.
    #[arg(
        long,
        value_name = "PATH",
        conflicts_with_all = [
            "pattern", "framing", "rate", "mode", "burst_size", "symbols", "venue", "seed", "max_messages",
            "cores",
        ]
    )]
    source: Option<std::path::PathBuf>,
    /// Pacing of `--source`: `1x` (as recorded), `10x`, `0.5x` or `max` (as fast as the sockets take it).
    #[arg(
        long,
        value_name = "1x|Nx|max",
        default_value = "1x",
        requires = "source"
    )]
    speed: tickbox_feed::SourceSpeed,
    /// XPUB with ZMQ_XPUB_NODROP: slow subscribers back-pressure the feed instead of losing messages.
    #[arg(long)]
    no_drop: bool,
    /// `auto`: pack up to 64 messages per ZeroMQ message (a `#B` batch frame, docs/book/src/wire.md) while every
    /// subscriber of a shard reads batches (subscribed to "" and "#B") and none holds another prefix; each
    /// pacer step's batch goes out at its end. `off` (the default, or `[feed] batch`): one message each.
    #[arg(long, value_name = "off|auto")]
    batch: Option<tickbox_feed::BatchMode>,
    /// Send-side high-water mark per subscriber.
    #[arg(long)]
    sndhwm: Option<i32>,
    /// Heartbeat after this long idle, e.g. `100ms` (`0s` disables).
    #[arg(long)]
    heartbeat: Option<tickbox_units::HumanDuration>,
    /// `--no-drop` only: a run that ends by `--duration`, `--max-messages` or the end of `--source` waits up to
    /// this long for its subscribers to leave (having read everything), then as long again for what is still
    /// queued to reach the network ([feed] drain_timeout, default 5s; `0s` closes at once). Subscribers still
    /// connected are reported; messages still queued then are dropped, counted as `undelivered`, and the feed
    /// exits 1 saying so. Ctrl-C skips it (what is queued gets 300 ms).
    #[arg(long)]
    drain_timeout: Option<tickbox_units::HumanDuration>,
    /// Random seed (equal seeds give equal streams).
    #[arg(long)]
    seed: Option<u64>,
    /// Wait for this many subscriptions on each shard before sending data (at most 5 s; at most 100000).
    #[arg(long, value_parser = crate::bounds::wait_for_subscribers)]
    wait_for_subscribers: Option<usize>,
    /// Majordomo broker to register `tickbox.feed.status` with.
    #[arg(long, value_name = "EP")]
    broker: Option<String>,
    /// Print the summary as one JSON object on stdout (the shard endpoint lines then go to stderr).
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    live: LiveArgs,
}

/// The summary as one JSON object: every count an integer; `target_rate` is null when none was asked (`max`).
fn report_json(report: &tickbox_feed::FeedReport) -> serde_json::Value {
    let shards: Vec<serde_json::Value> = report
        .shards
        .iter()
        .map(|s| {
            serde_json::json!({
                "shard": s.shard,
                "publisher_id": s.publisher_id,
                "endpoint": s.endpoint,
                "symbols": s.symbols,
                "sent": s.counts.data(),
                "quotes": s.counts.quotes,
                "trades": s.counts.trades,
                "book_levels": s.counts.book_levels,
                "heartbeats": s.counts.heartbeats,
                "would_block": s.counts.would_block,
                "frames_sent": s.counts.frames,
                "batches_sent": s.counts.batches,
                "batch_buffers_allocated": s.counts.batch_buffers_allocated,
                "last_sequence": s.last_sequence,
                "duration_ns": u64::try_from(s.duration.as_nanos()).unwrap_or(u64::MAX),
                "skipped_ns": u64::try_from(s.skipped.as_nanos()).unwrap_or(u64::MAX),
                "schedule_start_ns": s.schedule_start_ns,
                "unsent": s.unsent,
                "subscribers_at_close": s.subscribers_at_close,
                "undelivered": s.undelivered,
                "achieved_rate": s.rate().round() as u64,
            })
        })
        .collect();
    serde_json::json!({
        "sent": report.total_data(),
        "target_rate": report.target_rate,
        "achieved_rate": report.total_rate().round() as u64,
        "rate_shortfall": report.rate_shortfall().is_some(),
        "heartbeats": report.shards.iter().map(|s| s.counts.heartbeats).sum::<u64>(),
        "would_block": report.shards.iter().map(|s| s.counts.would_block).sum::<u64>(),
        "frames_sent": report.shards.iter().map(|s| s.counts.frames).sum::<u64>(),
        "batches_sent": report.shards.iter().map(|s| s.counts.batches).sum::<u64>(),
        "batch_buffers_allocated": report.shards.iter().map(|s| s.counts.batch_buffers_allocated).sum::<u64>(),
        "unsent": report.total_unsent(),
        "subscribers_at_close": report.total_subscribers_at_close(),
        "undelivered": report.total_undelivered(),
        "shards": shards,
    })
}

pub(crate) fn run(args: Args, config: &TickboxConfig) -> anyhow::Result<ExitCode> {
    crate::flags::check_bind_all("--bind", &args.bind)?;
    crate::flags::check_connect_all("--connect", &args.connect)?;
    if let Some(broker) = &args.broker {
        crate::flags::check_connect("--broker", broker)?;
    }
    let broker = args.broker.clone();
    let json = args.json;
    let live_args = args.live.clone();
    let source = args.source.clone();
    let speed = args.speed;
    let feed_config = apply(args, config.feed.clone())?;
    let drain_timeout = drain_timeout(&feed_config);
    if let Some(path) = source {
        let view = LiveView::new("feed", &live_args, None);
        return run_source(
            &path,
            speed,
            feed_config,
            config,
            broker.as_deref(),
            json,
            view,
        );
    }
    feed_config.validate()?;
    let stop = crate::shutdown::flag();
    // Built (and its I/O threads placed) before any of our threads is pinned, so they never inherit a shard's core.
    let ctx = tickbox_zmqx::context::build(&config.context)?;
    // Before any socket binds: without a ZAP handler libzmq would let every CURVE client in.
    let _zap = config.auth.start_zap(&ctx)?;
    let feed = Feed::start(&ctx, feed_config).context("starting the feed")?;
    let status = StatusBoard::start(&ctx, broker.as_deref(), "feed", config.auth.clone())?;
    let mut view = LiveView::new("feed", &live_args, None);
    let mut view_rate = LiveRate::default();
    let mut last_status = std::time::Instant::now() - Duration::from_secs(1);
    {
        // Endpoints go to stdout (and are flushed) so scripts and tests can connect to `tcp://…:*` shards; with
        // `--json` stdout carries only the summary object, so they go to stderr.
        let mut out: Box<dyn Write> = if json {
            Box::new(std::io::stderr().lock())
        } else {
            Box::new(std::io::stdout().lock())
        };
        for shard in feed.shards() {
            writeln!(
                out,
                "feed shard {} publisher {} symbols {} endpoint {}",
                shard.shard, shard.publisher_id, shard.symbols, shard.endpoint
            )?;
        }
        out.flush()?;
    }
    while !feed.is_finished() {
        if last_status.elapsed() >= Duration::from_millis(500) {
            last_status = std::time::Instant::now();
            status.publish(feed_status(&feed));
        }
        if view.due() {
            // The shards' published counters, summed here, never on their threads.
            let stats = feed.stats();
            let (quotes, trades, heartbeats) = stats.iter().fold((0, 0, 0), |(q, t, h), s| {
                (
                    q + s.counts.quotes,
                    t + s.counts.trades,
                    h + s.counts.heartbeats,
                )
            });
            let sent = quotes + trades;
            view.show(
                &format!(
                    "sent {sent} ({}), quotes {quotes}, trades {trades}, heartbeats {heartbeats}, {} shard(s)",
                    fmt_rate(view_rate.per_sec(sent)),
                    stats.len()
                ),
                None,
            );
        }
        if stop.load(Ordering::Relaxed) {
            tracing::info!("stopping the feed");
            feed.stop();
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    // The status line goes before the summary, never under it.
    view.finish();
    let report = feed.join().context("feed shard failed")?;
    if let Some((target, achieved)) = report.rate_shortfall() {
        tracing::warn!(
            target_rate = target,
            achieved_rate = achieved.round() as u64,
            "the feed achieved {:.0} % of the rate asked",
            100.0 * achieved / target.max(1) as f64
        );
    }
    if json {
        let mut summary = report_json(&report);
        crate::auth_report::add_to_json(&mut summary, &config.auth);
        println!("{summary}");
    } else {
        println!("{report}");
        if let Some(line) = crate::auth_report::line(&config.auth) {
            println!("{line}");
        }
    }
    drop(status);
    Ok(close_counting_undelivered(
        ctx,
        report.total_undelivered(),
        drain_timeout,
        &stop,
    ))
}

/// How long the shards' close may wait (their drain at the end of a no-drop run; nothing otherwise).
fn drain_timeout(config: &FeedConfig) -> Duration {
    if config.no_drop {
        config.drain_timeout.0
    } else {
        Duration::ZERO
    }
}

/// Terminates the context (the shards have closed their sockets, with linger 0 where they left messages
/// queued). Messages a shard still held at its close were dropped there and counted (`undelivered`, in the
/// summary printed before): said on stderr, exit 1.
fn close_counting_undelivered(
    ctx: zmq::Context,
    undelivered: u64,
    drain_timeout: Duration,
    stop: &std::sync::atomic::AtomicBool,
) -> ExitCode {
    drop(ctx);
    if undelivered == 0 {
        return ExitCode::from(crate::exit_code::OK);
    }
    if stop.load(Ordering::Relaxed) {
        eprintln!(
            "feed: interrupted: {undelivered} message(s) still queued for a subscriber were not delivered \
             (dropped at close, {:?} after the interrupt); the summary's sent count includes them",
            tickbox_feed::INTERRUPT_GRACE
        );
    } else if drain_timeout.is_zero() {
        eprintln!(
            "feed: {undelivered} message(s) were still queued for a subscriber when the shards closed and were \
             dropped (a subscriber fell behind; --no-drop with --drain-timeout waits for it); the summary's sent \
             count includes them"
        );
    } else {
        eprintln!(
            "feed: {undelivered} message(s) were still queued for a subscriber after --drain-timeout \
             {drain_timeout:?} and were dropped at the close (a subscriber stopped reading); the summary's sent \
             count includes them"
        );
    }
    ExitCode::from(crate::exit_code::ERROR)
}

/// `RecordSource` over a DBN file or journal: the dbn crate reads, the feed publishes.
struct Recording(tickbox_dbn::ReplaySource);

impl tickbox_feed::RecordSource for Recording {
    fn next_item(&mut self) -> Result<Option<tickbox_feed::SourceItem>, tickbox_feed::SourceError> {
        use tickbox_dbn::ReplayItem;
        use tickbox_feed::{SourceItem, SourceRecord};
        Ok(self.0.next_item()?.map(|item| match item {
            ReplayItem::Record {
                time_ns,
                origin_time_ns,
                topic,
                payload,
            } => SourceItem::Record(SourceRecord {
                time_ns,
                origin_time_ns,
                topic,
                payload,
            }),
            ReplayItem::Skipped(reason) => SourceItem::Skipped(reason),
        }))
    }
}

/// `feed --source`: the recording on the feed's shards, then its summary.
fn run_source(
    path: &std::path::Path,
    speed: tickbox_feed::SourceSpeed,
    feed_config: FeedConfig,
    config: &TickboxConfig,
    broker: Option<&str>,
    json: bool,
    mut view: LiveView,
) -> anyhow::Result<ExitCode> {
    let recording = tickbox_dbn::ReplaySource::open(path)
        .with_context(|| format!("opening --source {}", path.display()))?;
    let form = match recording.form() {
        tickbox_dbn::ReplayForm::Dbn => "dbn",
        tickbox_dbn::ReplayForm::Journal => "journal",
    };
    let drain_timeout = drain_timeout(&feed_config);
    let stop = crate::shutdown::flag();
    let ctx = tickbox_zmqx::context::build(&config.context)?;
    // Before any socket binds: without a ZAP handler libzmq would let every CURVE client in.
    let _zap = config.auth.start_zap(&ctx)?;
    let feed =
        tickbox_feed::SourceFeed::start(&ctx, feed_config, Box::new(Recording(recording)), speed)
            .context("starting the feed")?;
    let status = StatusBoard::start(&ctx, broker, "feed", config.auth.clone())?;
    {
        let mut out: Box<dyn Write> = if json {
            Box::new(std::io::stderr().lock())
        } else {
            Box::new(std::io::stdout().lock())
        };
        for shard in feed.shards() {
            writeln!(
                out,
                "feed shard {} publisher {} source {form} endpoint {}",
                shard.shard, shard.publisher_id, shard.endpoint
            )?;
        }
        out.flush()?;
    }
    let mut last_status = std::time::Instant::now() - Duration::from_secs(1);
    let mut view_rate = LiveRate::default();
    while !feed.is_finished() {
        if last_status.elapsed() >= Duration::from_millis(500) {
            last_status = std::time::Instant::now();
            let s = feed.stats();
            status.publish(serde_json::json!({
                "component": "feed", "state": "running", "source": path.display().to_string(),
                "read": s.read, "published": s.published, "skipped": s.skipped,
            }));
        }
        if view.due() {
            let s = feed.stats();
            view.show(
                &format!(
                    "read {}, published {} ({}), skipped {}",
                    s.read,
                    s.published,
                    fmt_rate(view_rate.per_sec(s.published)),
                    s.skipped
                ),
                None,
            );
        }
        if stop.load(Ordering::Relaxed) {
            tracing::info!("stopping the feed");
            feed.stop();
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    // The status line goes before the summary, never under it.
    view.finish();
    let report = feed
        .join()
        .with_context(|| format!("feed --source {}", path.display()))?;
    if json {
        let shards: Vec<serde_json::Value> = report
            .shards
            .iter()
            .map(|s| {
                serde_json::json!({
                    "shard": s.shard,
                    "publisher_id": s.publisher_id,
                    "endpoint": s.endpoint,
                    "sent": s.counts.data(),
                    "quotes": s.counts.quotes,
                    "trades": s.counts.trades,
                    "book_levels": s.counts.book_levels,
                    "heartbeats": s.counts.heartbeats,
                    "would_block": s.counts.would_block,
                    "last_sequence": s.last_sequence,
                    "subscribers_at_close": s.subscribers_at_close,
                    "undelivered": s.undelivered,
                })
            })
            .collect();
        println!(
            "{}",
            serde_json::json!({
                "source": path.display().to_string(),
                "form": form,
                "speed": report.speed.to_string(),
                "read": report.read,
                "published": report.published,
                "skipped": report.total_skipped(),
                "skipped_by_reason": report.skipped,
                "complete": report.complete,
                "elapsed_ns": u64::try_from(report.elapsed.as_nanos()).unwrap_or(u64::MAX),
                "achieved_rate": report.rate().round() as u64,
                "subscribers_at_close": report.total_subscribers_at_close(),
                "undelivered": report.total_undelivered(),
                "shards": shards,
            })
        );
    } else {
        println!("{report}");
    }
    drop(status);
    Ok(close_counting_undelivered(
        ctx,
        report.total_undelivered(),
        drain_timeout,
        &stop,
    ))
}

/// CLI flags override the config file's `[feed]` section.
fn apply(args: Args, mut config: FeedConfig) -> anyhow::Result<FeedConfig> {
    let (endpoints, connect) = if !args.connect.is_empty() {
        (args.connect, true)
    } else {
        (args.bind, false)
    };
    if !endpoints.is_empty() {
        config.shards = endpoints
            .into_iter()
            .map(|endpoint| PublisherShardConfig {
                endpoint: endpoint.trim().to_string(),
                connect,
                core: None,
            })
            .collect();
    }
    if !args.cores.is_empty() {
        if args.cores.len() != config.shards.len() {
            bail!(
                "--cores lists {} cores for {} shards; give one core per shard",
                args.cores.len(),
                config.shards.len()
            );
        }
        for (shard, core) in config.shards.iter_mut().zip(args.cores) {
            shard.core = Some(core);
        }
    }
    if let Some(rate) = args.rate {
        config.rate = rate;
        if rate == Rate::Max && args.mode.is_none() {
            config.mode = PacingMode::FlatOut;
        }
    }
    if let Some(mode) = args.mode {
        config.mode = mode;
    }
    if let Some(burst_size) = args.burst_size {
        config.burst_size = burst_size;
    }
    if let Some(symbols) = args.symbols {
        config.symbols = symbols;
        config.symbol_names.clear();
    }
    if let Some(venue) = args.venue {
        config.venue = venue;
    }
    if let Some(duration) = args.duration {
        config.duration = Some(duration.into());
    }
    if let Some(max) = args.max_messages {
        config.max_messages_per_shard = Some(max);
    }
    if let Some(pattern) = args.pattern {
        config.pattern = pattern;
    }
    if let Some(framing) = args.framing {
        config.framing = framing;
    }
    if args.no_drop {
        config.no_drop = true;
    }
    if let Some(d) = args.drain_timeout {
        config.drain_timeout = d;
    }
    if let Some(batch) = args.batch {
        config.batch = batch;
    }
    if let Some(sndhwm) = args.sndhwm {
        config.sndhwm = sndhwm;
        config.socket_profile.sndhwm = None; // the flag wins over [context.sockets.feed]
    }
    if let Some(d) = args.heartbeat {
        config.heartbeat_interval = d;
    }
    if let Some(seed) = args.seed {
        config.seed = seed;
    }
    if let Some(n) = args.wait_for_subscribers {
        config.wait_for_subscribers = n;
    }
    Ok(config)
}
