//! `tickbox feed`: sharded publishers fed by the synthetic market (or the pathological LVC test pattern).

use std::io::Write;
use std::process::ExitCode;
use std::sync::atomic::Ordering;
use std::time::Duration;

use anyhow::Context;
use tickbox_feed::{Feed, FeedConfig};

use crate::cli::feed::Args;
use crate::config::TickboxConfig;
use crate::live::{fmt_rate, LiveView, Rate as LiveRate};
use crate::out::outln;
use crate::status::StatusBoard;

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
    let view = LiveView::new("feed", &live_args, None);
    let Some(path) = source else {
        feed_config.validate()?;
        let connects: Vec<bool> = feed_config.shards.iter().map(|s| s.connect).collect();
        let stop = crate::shutdown::flag();
        // Built (and its I/O threads placed) before any of our threads is pinned, so they never inherit a shard's
        // core.
        let ctx = tickbox_zmqx::context::build(&config.context)?;
        // Before any socket binds: the shards' sockets come from the gate, whose ZAP handler applies `[security]`.
        let gate = config.auth.gate(&ctx)?;
        let feed = Feed::start(&gate, feed_config).context("starting the feed")?;
        let _metrics = metrics.start(config, "feed", vec![std::sync::Arc::new(feed.metrics())])?;
        let status = StatusBoard::start(&ctx, broker.as_deref(), "feed", config.auth.clone())?;
        let feed = Synthetic {
            feed,
            connects,
            started: std::time::Instant::now(),
            silence_said: false,
        };
        return watch(feed, ctx, status, view, json, config, drain_timeout, &stop);
    };
    let recording = tickbox_dbn::ReplaySource::open(&path)
        .with_context(|| format!("opening --source {}", path.display()))?;
    let form = match recording.form() {
        tickbox_dbn::ReplayForm::Dbn => "dbn",
        tickbox_dbn::ReplayForm::Journal => "journal",
    };
    let stop = crate::shutdown::flag();
    let ctx = tickbox_zmqx::context::build(&config.context)?;
    // Before any socket binds: the shards' sockets come from the gate, whose ZAP handler applies `[security]`.
    let gate = config.auth.gate(&ctx)?;
    let feed = tickbox_feed::SourceFeed::start(&gate, feed_config, Box::new(recording), speed)
        .context("starting the feed")?;
    let status = StatusBoard::start(&ctx, broker.as_deref(), "feed", config.auth.clone())?;
    let feed = Recording {
        feed,
        path: path.display().to_string(),
        form,
    };
    watch(feed, ctx, status, view, json, config, drain_timeout, &stop)
}

/// A running feed as the one loop of [`watch`] sees it: the synthetic market ([`Synthetic`]) or a recording
/// (`--source`, [`Recording`]).
trait Running {
    fn shards(&self) -> &[tickbox_feed::ShardInfo];
    /// What a shard's start line says it publishes (`symbols N`, `source dbn`).
    fn publishes(&self, shard: &tickbox_feed::ShardInfo) -> String;
    fn is_finished(&self) -> bool;
    fn stop(&self);
    /// The object published as `tickbox.feed.status`.
    fn status(&self) -> anyhow::Result<serde_json::Value>;
    /// The live status line; `rate` turns a running count into a rate.
    fn live_line(&self, rate: &mut LiveRate) -> String;
    /// Each turn of the loop: warnings that come from how long the feed has run.
    fn tick(&mut self) {}
    /// Waits for the shards, prints the summary (`json` or text) and returns what [`watch`] checks at the close.
    fn summarise(self, json: bool, config: &TickboxConfig) -> anyhow::Result<Ending>;
}

/// What a finished feed leaves for its close.
struct Ending {
    /// Messages the shards still held when they closed (dropped and counted).
    undelivered: u64,
    /// Messages sent while no shard had a subscription all run long, if that is an error for this feed.
    delivered_to_nobody: Option<u64>,
}

/// Prints each shard's endpoint (for scripts and tests), then runs `feed` to its end or Ctrl-C with the status
/// service and the live line, prints its summary and closes the context.
#[allow(clippy::too_many_arguments)] // the pieces `run` set up, handed over once
fn watch<F: Running>(
    mut feed: F,
    ctx: zmq::Context,
    status: StatusBoard,
    mut view: LiveView,
    json: bool,
    config: &TickboxConfig,
    drain_timeout: Duration,
    stop: &std::sync::atomic::AtomicBool,
) -> anyhow::Result<ExitCode> {
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
                "feed shard {} publisher {} {} endpoint {}",
                shard.shard,
                shard.publisher_id,
                feed.publishes(shard),
                shard.endpoint
            )?;
        }
        out.flush()?;
    }
    let mut view_rate = LiveRate::default();
    let mut last_status = std::time::Instant::now() - Duration::from_secs(1);
    while !feed.is_finished() {
        if last_status.elapsed() >= Duration::from_millis(500) {
            last_status = std::time::Instant::now();
            status.publish(feed.status()?);
        }
        feed.tick();
        if view.due() {
            view.show(&feed.live_line(&mut view_rate), None);
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
    let ending = feed.summarise(json, config)?;
    drop(status);
    let code = close_counting_undelivered(ctx, ending.undelivered, drain_timeout, stop);
    if let Some(sent) = ending.delivered_to_nobody {
        eprintln!(
            "error: feed: delivered to no subscriber: {sent} message(s) went nowhere (no subscription on any \
             shard during the run; is anything bound at the --connect endpoint?)"
        );
        return Ok(ExitCode::from(crate::exit_code::ERROR));
    }
    Ok(code)
}

/// The synthetic market (or the pathological pattern).
struct Synthetic {
    feed: tickbox_feed::FeedHandle,
    /// Whether each shard (by index) connects rather than binds.
    connects: Vec<bool>,
    started: std::time::Instant,
    silence_said: bool,
}

impl Running for Synthetic {
    fn shards(&self) -> &[tickbox_feed::ShardInfo] {
        self.feed.shards()
    }

    fn publishes(&self, shard: &tickbox_feed::ShardInfo) -> String {
        format!("symbols {}", shard.symbols)
    }

    fn is_finished(&self) -> bool {
        self.feed.is_finished()
    }

    fn stop(&self) {
        self.feed.stop();
    }

    fn status(&self) -> anyhow::Result<serde_json::Value> {
        Ok(serde_json::to_value(tickbox_feed::FeedStatus::of(
            &self.feed,
        ))?)
    }

    fn live_line(&self, rate: &mut LiveRate) -> String {
        // The shards' published counters, summed here, never on their threads.
        let stats = self.feed.stats();
        let (quotes, trades, heartbeats) = stats.iter().fold((0, 0, 0), |(q, t, h), s| {
            (
                q + s.counts.quotes,
                t + s.counts.trades,
                h + s.counts.heartbeats,
            )
        });
        let sent = quotes + trades;
        format!(
            "sent {sent} ({}), quotes {quotes}, trades {trades}, heartbeats {heartbeats}, {} shard(s)",
            fmt_rate(rate.per_sec(sent)),
            stats.len()
        )
    }

    fn tick(&mut self) {
        if !self.silence_said && self.started.elapsed() >= tickbox_subscriber::SILENCE_WARNING {
            self.silence_said = true;
            say_unsubscribed(&self.feed, &self.connects);
        }
    }

    fn summarise(self, json: bool, config: &TickboxConfig) -> anyhow::Result<Ending> {
        let report = self.feed.join().context("feed shard failed")?;
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
        Ok(Ending {
            undelivered: report.total_undelivered(),
            delivered_to_nobody: report.delivered_to_nobody(),
        })
    }
}

/// `feed --source`: a recording (DBN or journal) on the feed's shards.
struct Recording {
    feed: tickbox_feed::SourceFeedHandle,
    /// The `--source` path as given, for the status and the summary.
    path: String,
    /// `dbn` or `journal`.
    form: &'static str,
}

impl Running for Recording {
    fn shards(&self) -> &[tickbox_feed::ShardInfo] {
        self.feed.shards()
    }

    fn publishes(&self, _shard: &tickbox_feed::ShardInfo) -> String {
        format!("source {}", self.form)
    }

    fn is_finished(&self) -> bool {
        self.feed.is_finished()
    }

    fn stop(&self) {
        self.feed.stop();
    }

    fn status(&self) -> anyhow::Result<serde_json::Value> {
        Ok(serde_json::to_value(tickbox_feed::SourceStatus::of(
            self.feed.stats(),
            &self.path,
        ))?)
    }

    fn live_line(&self, rate: &mut LiveRate) -> String {
        let s = self.feed.stats();
        format!(
            "read {}, published {} ({}), skipped {}",
            s.read,
            s.published,
            fmt_rate(rate.per_sec(s.published)),
            s.skipped
        )
    }

    fn summarise(self, json: bool, _config: &TickboxConfig) -> anyhow::Result<Ending> {
        let report = self
            .feed
            .join()
            .with_context(|| format!("feed --source {}", self.path))?;
        if json {
            let summary = tickbox_feed::SourceSummary::new(&report, &self.path, self.form)
                .context("the feed's report lacks its source totals")?;
            crate::out::json(&summary)?;
        } else {
            outln!("{report}");
        }
        Ok(Ending {
            undelivered: report.total_undelivered(),
            delivered_to_nobody: None,
        })
    }
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

/// CLI flags override the config file's `[feed]` section ([`tickbox_feed::FeedOverrides`]); the deprecated
/// spellings say so.
fn apply(args: Args, config: FeedConfig) -> anyhow::Result<FeedConfig> {
    if args.no_drop {
        tracing::warn!("--no-drop is deprecated: write --back-pressure block");
    }
    if args.sndhwm.is_some() {
        tracing::warn!("--sndhwm is deprecated: write --send-hwm");
    }
    let block = args.no_drop.then_some(tickbox_zmqx::BackPressure::Block);
    let overrides = tickbox_feed::FeedOverrides {
        bind: args.bind,
        connect: args.connect,
        cores: args.cores,
        rate: args.rate,
        mode: args.mode,
        burst_size: args.burst_size,
        symbols: args.symbols,
        venue: args.venue,
        duration: args.duration,
        max_messages: args.max_messages,
        pattern: args.pattern,
        framing: args.framing,
        back_pressure: args.back_pressure.or(block),
        drain_timeout: args.drain_timeout,
        batch: args.batch,
        send_hwm: args.send_hwm.or(args.sndhwm),
        heartbeat: args.heartbeat,
        seed: args.seed,
        wait_for_subscribers: args.wait_for_subscribers,
    };
    Ok(overrides.apply(config)?)
}
