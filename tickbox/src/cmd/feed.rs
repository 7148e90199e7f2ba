//! `tickbox feed`: sharded publishers fed by the synthetic market (or the pathological LVC test pattern).

use std::io::Write;
use std::process::ExitCode;
use std::sync::atomic::Ordering;
use std::time::Duration;

use anyhow::{bail, Context};
use tickbox_feed::{Feed, FeedConfig, PacingMode, Pattern, PublisherShardConfig, Rate};

use crate::config::TickboxConfig;
use crate::live::{fmt_rate, LiveArgs, LiveView, Rate as LiveRate};
use crate::out::outln;
use crate::status::StatusBoard;

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
    #[arg(long, value_name = "RATE")]
    rate: Option<Rate>,
    /// Pacing: evenly spaced, Poisson bursts, or as fast as possible.
    #[arg(long, value_name = "paced|bursty|flat-out")]
    mode: Option<PacingMode>,
    /// Mean burst size in bursty mode.
    #[arg(long, value_name = "N")]
    burst_size: Option<f64>,
    /// Number of symbols in the generated universe (at most 1000000).
    #[arg(long, value_parser = crate::bounds::symbols, value_name = "N")]
    symbols: Option<usize>,
    /// Venue code used in topics.
    #[arg(long, value_name = "NAME")]
    venue: Option<String>,
    /// Stop after this long (`10s`, `500ms`, `2m`); default: run until Ctrl-C.
    #[arg(long, value_parser = tickbox_units::parse_duration, value_name = "DURATION")]
    duration: Option<Duration>,
    /// Stop each shard after this many data messages.
    #[arg(long, value_name = "N")]
    max_messages: Option<u64>,
    /// Pin shard i's thread to the i-th core (one core per shard).
    #[arg(long, value_delimiter = ',', value_name = "CPU[,CPU…]")]
    cores: Vec<usize>,
    /// `synthetic` market or the Guide's `pathological` publisher (for testing an LVC): every topic once, then one
    /// update a second. Pathological waits for its first subscriber (no deadline) and never drops its burst.
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
    #[arg(long, value_name = "SPEED", default_value = "1x", requires = "source")]
    speed: tickbox_units::Speed,
    /// What a slow subscriber does to the feed: `block` (XPUB with ZMQ_XPUB_NODROP: it back-pressures the feed
    /// instead of losing messages) or `drop` (the default, or `[feed] back_pressure`).
    #[arg(long, value_name = "drop|block")]
    back_pressure: Option<tickbox_zmqx::BackPressure>,
    /// Deprecated spelling of `--back-pressure block`.
    #[arg(long, hide = true, conflicts_with = "back_pressure")]
    no_drop: bool,
    /// `auto`: pack up to 64 messages per ZeroMQ message (a `#B` batch frame, docs/book/src/wire.md) while every
    /// subscriber of a shard reads batches (subscribed to "" and "#B") and none holds another prefix; each
    /// pacer step's batch goes out at its end. `off` (the default, or `[feed] batch`): one message each.
    #[arg(long, value_name = "off|auto")]
    batch: Option<tickbox_feed::BatchMode>,
    /// Send-side high-water mark per subscriber (`[feed] send_hwm`).
    #[arg(long, value_name = "N")]
    send_hwm: Option<i32>,
    /// Deprecated spelling of `--send-hwm`.
    #[arg(long, hide = true, conflicts_with = "send_hwm", value_name = "N")]
    sndhwm: Option<i32>,
    /// Heartbeat after this long idle, e.g. `100ms` (`0s` disables).
    #[arg(long, value_name = "DURATION")]
    heartbeat: Option<tickbox_units::HumanDuration>,
    /// `--no-drop` only: a run that ends by `--duration`, `--max-messages` or the end of `--source` waits up to
    /// this long for its subscribers to leave (having read everything), then as long again for what is still
    /// queued to reach the network ([feed] drain_timeout, default 5s; `0s` closes at once). Subscribers still
    /// connected are reported; messages still queued then are dropped, counted as `undelivered`, and the feed
    /// exits 1 saying so. Ctrl-C skips it (what is queued gets 300 ms).
    #[arg(long, value_name = "DURATION")]
    drain_timeout: Option<tickbox_units::HumanDuration>,
    /// Random seed (equal seeds give equal streams).
    #[arg(long, value_name = "N")]
    seed: Option<u64>,
    /// Wait for this many subscriptions on each shard before sending data (at most 5 s; at most 100000).
    #[arg(long, value_parser = crate::bounds::wait_for_subscribers, value_name = "N")]
    wait_for_subscribers: Option<usize>,
    /// Majordomo broker to register `tickbox.feed.status` with.
    #[arg(long, value_name = "EP")]
    broker: Option<String>,
    /// Print the summary as one JSON object on stdout (the shard endpoint lines then go to stderr).
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    live: LiveArgs,
    #[command(flatten)]
    metrics: crate::metrics::MetricsArgs,
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
    let metrics = args.metrics.clone();
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
    let connects: Vec<bool> = feed_config.shards.iter().map(|s| s.connect).collect();
    let stop = crate::shutdown::flag();
    // Built (and its I/O threads placed) before any of our threads is pinned, so they never inherit a shard's core.
    let ctx = tickbox_zmqx::context::build(&config.context)?;
    // Before any socket binds: the shards' sockets come from the gate, whose ZAP handler applies `[security]`.
    let gate = config.auth.gate(&ctx)?;
    let feed = Feed::start(&gate, feed_config).context("starting the feed")?;
    let _metrics = metrics.start(config, "feed", vec![std::sync::Arc::new(feed.metrics())])?;
    let status = StatusBoard::start(&ctx, broker.as_deref(), "feed", config.auth.clone())?;
    let mut view = LiveView::new("feed", &live_args, None);
    let mut view_rate = LiveRate::default();
    let mut last_status = std::time::Instant::now() - Duration::from_secs(1);
    let started = std::time::Instant::now();
    let mut silence_said = false;
    {
        // Endpoints go to stdout (and are flushed) so scripts and tests can connect to `tcp://…:*` shards; with
        // `--json` stdout carries only the summary object, so they go to stderr.
        let mut out: Box<dyn Write> = if json {
            Box::new(std::io::stderr().lock())
        } else {
            Box::new(crate::out::stdout())
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
            status.publish(serde_json::to_value(tickbox_feed::FeedStatus::of(&feed))?);
        }
        if !silence_said && started.elapsed() >= tickbox_subscriber::SILENCE_WARNING {
            silence_said = true;
            say_unsubscribed(&feed, &connects);
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
        let mut summary = serde_json::to_value(tickbox_feed::FeedSummary::new(&report))?;
        crate::auth_report::add_to_json(&mut summary, &config.auth);
        crate::out::json(&summary)?;
    } else {
        outln!("{report}");
        if let Some(line) = crate::auth_report::line(&config.auth) {
            outln!("{line}");
        }
    }
    drop(status);
    let code = close_counting_undelivered(ctx, report.total_undelivered(), drain_timeout, &stop);
    if let Some(sent) = report.delivered_to_nobody() {
        eprintln!(
            "error: feed: delivered to no subscriber: {sent} message(s) went nowhere (no subscription on any \
             shard during the run; is anything bound at the --connect endpoint?)"
        );
        return Ok(ExitCode::from(crate::exit_code::ERROR));
    }
    Ok(code)
}

/// Says on stderr which connecting shards (`connects`, by index) have no subscriber a few seconds in: what they
/// send goes nowhere.
fn say_unsubscribed(feed: &tickbox_feed::FeedHandle, connects: &[bool]) {
    let stats = feed.stats();
    for shard in feed.shards() {
        let connects = connects.get(shard.shard).copied().unwrap_or(false);
        let subscriptions = stats.get(shard.shard).map_or(0, |s| s.subscriptions);
        if connects && subscriptions == 0 {
            eprintln!(
                "warning: feed shard {} is connected to {} but nothing has subscribed in {}: is anything bound \
                 there (an LVC's --upstream-bind)? What it sends meanwhile goes nowhere",
                shard.shard,
                shard.endpoint,
                tickbox_units::HumanDuration(tickbox_subscriber::SILENCE_WARNING)
            );
        }
    }
}

/// How long the shards' close may wait (their drain at the end of a no-drop run; nothing otherwise).
fn drain_timeout(config: &FeedConfig) -> Duration {
    if config.back_pressure.blocks() {
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
    let interrupted = stop.load(Ordering::Relaxed);
    match tickbox_feed::CloseLoss::after_close(
        undelivered,
        interrupted,
        drain_timeout,
        tickbox_feed::INTERRUPT_GRACE,
    ) {
        None => ExitCode::from(crate::exit_code::OK),
        Some(loss) => {
            let hint = "--back-pressure block with --drain-timeout waits for it";
            eprintln!("{}", loss.message("feed", undelivered, "message", hint));
            ExitCode::from(crate::exit_code::ERROR)
        }
    }
}

/// `feed --source`: the recording on the feed's shards, then its summary.
fn run_source(
    path: &std::path::Path,
    speed: tickbox_units::Speed,
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
    // Before any socket binds: the shards' sockets come from the gate, whose ZAP handler applies `[security]`.
    let gate = config.auth.gate(&ctx)?;
    let feed =
        tickbox_recorder::SourceReplay::start(&gate, feed_config, Box::new(recording), speed)
            .context("starting the feed")?;
    let status = StatusBoard::start(&ctx, broker, "feed", config.auth.clone())?;
    {
        let mut out: Box<dyn Write> = if json {
            Box::new(std::io::stderr().lock())
        } else {
            Box::new(crate::out::stdout())
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
            let source = path.display().to_string();
            status.publish(serde_json::to_value(tickbox_feed::SourceStatus::of(
                feed.stats(),
                &source,
            ))?);
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
        let summary = tickbox_feed::SourceSummary::new(&report, &path.display().to_string(), form)
            .context("the feed's report lacks its source totals")?;
        crate::out::json(&summary)?;
    } else {
        outln!("{report}");
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
        tracing::warn!("--no-drop is deprecated: write --back-pressure block");
        config.back_pressure = tickbox_zmqx::BackPressure::Block;
    }
    if let Some(back_pressure) = args.back_pressure {
        if !back_pressure.blocks() && config.pattern == Pattern::Pathological {
            bail!(
                "--back-pressure drop: the pathological pattern never drops (its one burst of every topic is the \
                 point; it waits for a subscriber and blocks); leave --back-pressure out"
            );
        }
        config.back_pressure = back_pressure;
    }
    if let Some(d) = args.drain_timeout {
        config.drain_timeout = d;
    }
    if let Some(batch) = args.batch {
        config.batch = batch;
    }
    if args.sndhwm.is_some() {
        tracing::warn!("--sndhwm is deprecated: write --send-hwm");
    }
    if let Some(sndhwm) = args.send_hwm.or(args.sndhwm) {
        config.send_hwm = sndhwm;
        config.socket_profile.send_hwm = None; // the flag wins over [context.sockets.feed]
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
