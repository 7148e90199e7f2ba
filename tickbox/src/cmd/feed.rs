//! `tickbox feed`: sharded publishers fed by the synthetic market (or the pathological LVC test pattern).

use std::io::Write;
use std::process::ExitCode;
use std::sync::atomic::Ordering;
use std::time::Duration;

use anyhow::Context;
use tickbox_feed::{Feed, FeedConfig, RunningFeed};

use crate::cli::feed::Args;
use crate::config::TickboxConfig;
use crate::live::{LiveView, Rate as LiveRate};
use crate::out::{errln, out};
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
    let drain_timeout = tickbox_feed::close_wait(&feed_config);
    let view = LiveView::new("feed", &live_args, None);
    let stop = crate::shutdown::flag();
    let Some(path) = source else {
        feed_config.validate()?;
        let connects: Vec<bool> = feed_config.shards.iter().map(|s| s.connect).collect();
        // Built (and its I/O threads placed) before any of our threads is pinned, so they never inherit a shard's
        // core.
        let ctx = tickbox_zmqx::context::build(&config.context)?;
        // Before any socket binds: the shards' sockets come from the gate, whose ZAP handler applies `[security]`.
        let gate = config.auth.gate(&ctx)?;
        let feed = Feed::start(&gate, feed_config).context("starting the feed")?;
        let _metrics = metrics.start(config, "feed", vec![std::sync::Arc::new(feed.metrics())])?;
        let status = StatusBoard::start(&ctx, broker.as_deref(), "feed", config.auth.clone())?;
        let feed = RunningFeed::synthetic(feed, connects, tickbox_subscriber::SILENCE_WARNING);
        return watch(feed, ctx, status, view, json, config, drain_timeout, &stop);
    };
    let recording = tickbox_dbn::ReplaySource::open(&path)
        .with_context(|| format!("opening --source {}", path.display()))?;
    let form = match recording.form() {
        tickbox_dbn::ReplayForm::Dbn => "dbn",
        tickbox_dbn::ReplayForm::Journal => "journal",
    };
    let ctx = tickbox_zmqx::context::build(&config.context)?;
    // Before any socket binds: the shards' sockets come from the gate, whose ZAP handler applies `[security]`.
    let gate = config.auth.gate(&ctx)?;
    let feed = tickbox_feed::SourceFeed::start(&gate, feed_config, Box::new(recording), speed)
        .context("starting the feed")?;
    let status = StatusBoard::start(&ctx, broker.as_deref(), "feed", config.auth.clone())?;
    let path = path.display().to_string();
    let feed = RunningFeed::Recording { feed, path, form };
    watch(feed, ctx, status, view, json, config, drain_timeout, &stop)
}

/// Prints each shard's endpoint (for scripts and tests), then runs `feed` to its end or Ctrl-C with the status
/// service and the live line, prints its summary and closes the context.
#[allow(clippy::too_many_arguments)] // the pieces `run` set up, handed over once
fn watch(
    mut feed: RunningFeed,
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
        for line in feed.start_lines() {
            writeln!(out, "{line}")?;
        }
        out.flush()?;
    }
    let mut view_rate = LiveRate::default();
    let mut last_status = std::time::Instant::now() - Duration::from_secs(1);
    while !feed.is_finished() {
        if last_status.elapsed() >= Duration::from_millis(500) {
            last_status = std::time::Instant::now();
            status.publish(serde_json::to_value(feed.status())?);
        }
        for line in feed.warnings(std::time::Instant::now()) {
            errln!("{line}");
        }
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
    let context = feed.failure_context();
    let ending = feed.finish().context(context)?;
    if json {
        let summary = ending.summary_json(config.auth.summary());
        crate::out::json(&summary.context("the feed's report lacks its source totals")?)?;
    } else {
        out!("{}", ending.summary_text(config.auth.summary_line()));
    }
    drop(status);
    // The shards have closed their sockets (linger 0 where they left messages queued); what they still held was
    // dropped there and counted in the summary above: said on stderr, exit 1.
    drop(ctx);
    let loss = ending.close_loss(stop.load(Ordering::Relaxed), drain_timeout);
    if let Some(line) = &loss {
        errln!("{line}");
    }
    if let Some(sent) = ending.delivered_to_nobody {
        errln!(
            "error: feed: delivered to no subscriber: {sent} message(s) went nowhere (no subscription on any \
             shard during the run; is anything bound at the --connect endpoint?)"
        );
        return Ok(ExitCode::from(crate::exit_code::ERROR));
    }
    Ok(ExitCode::from(if loss.is_some() {
        crate::exit_code::ERROR
    } else {
        crate::exit_code::OK
    }))
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
