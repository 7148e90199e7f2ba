//! `tickbox lvc`: the Last Value Cache proxy (XSUB toward publishers, verbose XPUB toward subscribers) with the
//! Espresso tap. See `tickbox_lvc` for the rules it follows.

use std::io::Write;
use std::process::ExitCode;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use anyhow::Context;
use tickbox_lvc::{BackPressure, LateJoiners, LvcConfig, Overflow, TapDrop};

use tickbox_lvc::report::LvcStatus;
use tickbox_units::HumanDuration;

use crate::config::TickboxConfig;
use crate::live::{fmt_rate, LiveView, Rate};
use crate::out::{out, outln};
use crate::status::StatusBoard;

/// Command-line overrides of the `[lvc]` config section.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// Publisher endpoints to connect to (one per shard).
    #[arg(long, value_delimiter = ',', value_name = "EP[,EP…]")]
    upstream: Vec<String>,
    /// Endpoints to bind for publishers that connect (`tickbox feed --connect`).
    #[arg(long, value_delimiter = ',', value_name = "EP[,EP…]")]
    upstream_bind: Vec<String>,
    /// Where subscribers connect. Default: the config's, else `tcp://127.0.0.1:5558` (loopback; `tcp://*:5558`
    /// for every interface).
    #[arg(long, value_name = "EP")]
    bind: Option<String>,
    /// Bind the Espresso tap here.
    #[arg(long, value_name = "EP")]
    tap: Option<String>,
    /// Bind the snapshot ROUTER here: a late joiner (`tickbox subscribe --lvc-snapshot`) asks it for the cached
    /// values of its prefixes and gets them alone, followed by an end marker with their count.
    #[arg(long, value_name = "EP")]
    snapshot: Option<String>,
    /// How late joiners get cached values: `broadcast` (a burst on the subscriber socket, which every matching
    /// subscriber receives; for plain SUB clients), `snapshot` (no burst; clients ask --snapshot), or `auto`
    /// (default: snapshot when --snapshot is given, else broadcast).
    #[arg(long, value_name = "auto|broadcast|snapshot", value_parser = parse_late_joiners)]
    late_joiners: Option<LateJoiners>,
    /// Prefixes to cache (subscribed upstream for the proxy's life); default everything.
    #[arg(long, value_delimiter = ',', value_name = "PREFIX[,PREFIX…]")]
    cache_prefixes: Option<Vec<String>>,
    /// At most this many cached topics.
    #[arg(long, value_name = "N")]
    max_topics: Option<usize>,
    /// At most this many cached bytes.
    #[arg(long, value_name = "BYTES")]
    max_bytes: Option<usize>,
    /// When the cache is full: evict the least recently updated topic, or refuse new topics.
    #[arg(long, value_name = "evict-lru|reject-new", value_parser = parse_overflow)]
    overflow: Option<Overflow>,
    /// When a subscriber is slow: `drop` for that subscriber alone (default), or `block` (back-pressure the
    /// publishers).
    #[arg(long, value_name = "drop|block", value_parser = parse_back_pressure)]
    back_pressure: Option<BackPressure>,
    /// Deprecated spelling of `--back-pressure`.
    #[arg(long, hide = true, value_parser = parse_back_pressure, conflicts_with = "back_pressure")]
    slow_subscriber: Option<BackPressure>,
    /// Send high-water mark per subscriber.
    #[arg(long, value_name = "N")]
    downstream_hwm: Option<i32>,
    /// Receive high-water mark per publisher.
    #[arg(long, value_name = "N")]
    upstream_hwm: Option<i32>,
    /// Send high-water mark per tap consumer (beyond it that consumer's copies are dropped).
    #[arg(long, value_name = "N")]
    tap_hwm: Option<i32>,
    /// A slow tap consumer loses copies alone, silently (`per-consumer`, default: a stalled inspector never costs
    /// the recorder), or with every other tap consumer, counted by the proxy (`counted`).
    #[arg(long, value_name = "per-consumer|counted", value_parser = parse_tap_drop)]
    tap_drop: Option<TapDrop>,
    /// How the tap frames what it emits: `tickbox` (default) or `guide`, the Guide's two-frame capture
    /// `[topic][value]` (value: the whole tickbox frame; events under the topic `\0`) for plain ZeroMQ SUBs.
    #[arg(long, value_name = "tickbox|guide")]
    tap_framing: Option<tickbox_lvc::tap::Framing>,
    /// Longest subscription prefix (bytes) acted on; longer ones are refused and counted, and much longer ones
    /// make libzmq drop the subscriber's connection.
    #[arg(long, value_name = "BYTES")]
    max_subscription_bytes: Option<usize>,
    /// Largest frame accepted from a publisher; a publisher sending a larger one is disconnected.
    #[arg(long, value_name = "BYTES")]
    max_message_bytes: Option<usize>,
    /// At most this many distinct subscriber prefixes forwarded upstream at once.
    #[arg(long, value_name = "N")]
    max_downstream_prefixes: Option<usize>,
    /// At most this many cached values sent per second for subscriptions, over all subscribers.
    #[arg(long, value_name = "N")]
    cached_per_second: Option<usize>,
    /// Print a stats line this often on stderr (`10s`, `500ms`; `0s` disables; default from config, 10s): redrawn
    /// in place on a terminal, plain lines otherwise.
    #[arg(long, value_parser = tickbox_units::parse_duration, value_name = "DURATION")]
    stats_interval: Option<Duration>,
    /// Stop after this long (`10s`, `500ms`, `2m`); default: until Ctrl-C.
    #[arg(long, value_parser = tickbox_units::parse_duration, value_name = "DURATION")]
    duration: Option<Duration>,
    /// Pin the proxy thread to this core.
    #[arg(long, value_name = "CPU")]
    core: Option<usize>,
    /// Most concurrent connections on each socket the proxy binds; a handshake past it is refused and counted
    /// (overrides [lvc] max_connections; 0: no cap; at most 1000000).
    #[arg(long, value_name = "N", value_parser = crate::bounds::max_connections)]
    max_connections: Option<u64>,
    /// Majordomo broker to register `tickbox.lvc.status` with.
    #[arg(long, value_name = "EP")]
    broker: Option<String>,
    #[command(flatten)]
    metrics: crate::metrics::MetricsArgs,
    /// Print the final counters and every publisher's account as one JSON object on stdout instead of the tables
    /// (the endpoint lines then go to stderr).
    #[arg(long)]
    json: bool,
}

pub(crate) fn run(args: Args, config: &TickboxConfig) -> anyhow::Result<ExitCode> {
    crate::flags::check_connect_all("--upstream", &args.upstream)?;
    crate::flags::check_bind_all("--upstream-bind", &args.upstream_bind)?;
    if let Some(bind) = &args.bind {
        crate::flags::check_bind("--bind", bind)?;
    }
    if let Some(tap) = &args.tap {
        crate::flags::check_bind("--tap", tap)?;
    }
    if let Some(snapshot) = &args.snapshot {
        crate::flags::check_bind("--snapshot", snapshot)?;
    }
    if let Some(broker) = &args.broker {
        crate::flags::check_connect("--broker", broker)?;
    }
    let duration = args.duration;
    let broker = args.broker.clone();
    let metrics = args.metrics.clone();
    let json = args.json;
    let mut lvc_config = apply(args, config.lvc.clone());
    // Every socket the proxy binds is capped (docs/book/src/bounds.md); the handle also runs the ZAP handler that refuses.
    let security = config
        .auth
        .cap_connections(&["lvc"], lvc_config.max_connections);
    lvc_config.security = security.clone();
    let stop = crate::shutdown::flag();
    // Built (and its I/O threads placed) before any of our threads is pinned, so they never inherit a shard's core.
    let ctx = tickbox_zmqx::context::build(&config.context)?;
    // Before any socket binds: the proxy's bound sockets come from the gate, whose ZAP handler applies
    // `[security]`.
    let gate = security.gate(&ctx)?;
    // The live view below reports every stats_interval (redrawn in place on a terminal), so the proxy thread's
    // own stats log line is turned off rather than printed twice.
    let proxy_config = LvcConfig {
        stats_interval: HumanDuration(Duration::ZERO),
        ..lvc_config.clone()
    };
    let lvc = tickbox_lvc::spawn(&gate, proxy_config).context("starting the LVC proxy")?;
    let _metrics = metrics.start(config, "lvc", vec![std::sync::Arc::new(lvc.metrics())])?;
    let status = StatusBoard::start(&ctx, broker.as_deref(), "lvc", config.auth.clone())?;
    print_endpoints(lvc.endpoints(), json)?;
    let started = Instant::now();
    let mut last_status: Option<Instant> = None;
    let mut view = LiveView::with_interval("lvc", Some(lvc_config.stats_interval.0), None);
    let (mut rate_in, mut rate_out) = (Rate::default(), Rate::default());
    while !stop.load(Ordering::SeqCst)
        && !lvc.is_finished()
        && duration.is_none_or(|d| started.elapsed() < d)
    {
        // From this control loop, never per message: the proxy thread only refreshes a snapshot every 50 ms.
        if last_status.is_none_or(|t| t.elapsed() >= Duration::from_millis(500)) {
            last_status = Some(Instant::now());
            status.publish(LvcStatus::new(
                lvc.endpoints(),
                &lvc_config,
                &lvc.stats(),
                &security,
            ));
        }
        if view.due() {
            let line = live_line(&lvc.stats(), &mut rate_in, &mut rate_out, &security);
            view.show(&line, None);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    // The status line goes before the final counters, never under them.
    view.finish();
    let publishers = lvc.publishers_handle();
    let stats = lvc.join().context("LVC proxy")?;
    summarise(
        &stats,
        &publishers.publishers(),
        &lvc_config,
        &security,
        json,
    )?;
    Ok(ExitCode::from(crate::exit_code::OK))
}

/// The resolved endpoints, flushed, so scripts and tests can use `tcp://…:*`: on stdout, or on stderr with
/// `--json` (stdout then carries only the summary object).
fn print_endpoints(endpoints: &tickbox_lvc::LvcEndpoints, json: bool) -> anyhow::Result<()> {
    let mut out: Box<dyn Write> = if json {
        Box::new(std::io::stderr().lock())
    } else {
        Box::new(crate::out::stdout())
    };
    writeln!(out, "lvc subscribers {}", endpoints.downstream)?;
    for ep in &endpoints.upstream {
        writeln!(out, "lvc publishers {ep}")?;
    }
    if let Some(tap) = &endpoints.tap {
        writeln!(out, "lvc tap {tap}")?;
    }
    if let Some(snapshot) = &endpoints.snapshot {
        writeln!(out, "lvc snapshot {snapshot}")?;
    }
    out.flush()?;
    Ok(())
}

/// The live status line of the proxy's counters `s`.
fn live_line(
    s: &tickbox_lvc::LvcStats,
    rate_in: &mut Rate,
    rate_out: &mut Rate,
    security: &tickbox_auth::Security,
) -> String {
    format!(
        "in {} ({}), out {} ({}), cache {} topics / {}, cached values sent {}, drops {}, malformed {}, \
         publishers {}, missing {}, missed before join {}{}",
        s.messages_in,
        fmt_rate(rate_in.per_sec(s.messages_in)),
        s.messages_out,
        fmt_rate(rate_out.per_sec(s.messages_out)),
        s.topics_cached,
        tickbox_units::format_size_approx(s.cache_bytes),
        s.cached_sent,
        s.drops(),
        s.malformed,
        s.sequences.publishers,
        s.sequences.missing,
        s.sequences.missed_before_join,
        security.live_suffix(),
    )
}

/// The summary (`--json` or tables), then a warning on stderr when the cache never heard some publisher messages.
fn summarise(
    stats: &tickbox_lvc::LvcStats,
    accounts: &[tickbox_lvc::sequences::PublisherAccount],
    lvc_config: &LvcConfig,
    security: &tickbox_auth::Security,
    json: bool,
) -> anyhow::Result<()> {
    if json {
        let mut summary = serde_json::json!({
            "component": "lvc",
            "stats": stats,
            "drops": stats.drops(),
            "publishers": accounts,
            "connections": security.connections(),
        });
        crate::auth_report::add_to_json(&mut summary, security);
        crate::out::json(&summary)?;
    } else {
        out!("{}", stats.table(lvc_config.tap_drop));
        out!("{}", tickbox_lvc::report::publishers_table(accounts));
        for line in security
            .summary_line()
            .into_iter()
            .chain(security.connections_line())
        {
            outln!("{line}");
        }
    }
    if let Some(line) = stats.never_received_warning() {
        eprintln!("{line}");
    }
    Ok(())
}

fn apply(args: Args, mut config: LvcConfig) -> LvcConfig {
    if !args.upstream.is_empty() {
        config.upstream = args.upstream;
    }
    if !args.upstream_bind.is_empty() {
        config.upstream_bind = args.upstream_bind;
    }
    if let Some(bind) = args.bind {
        config.bind = bind;
    }
    if args.tap.is_some() {
        config.tap = args.tap;
    }
    if args.snapshot.is_some() {
        config.snapshot = args.snapshot;
    }
    if let Some(late_joiners) = args.late_joiners {
        config.late_joiners = late_joiners;
    }
    if let Some(prefixes) = args.cache_prefixes {
        config.cache_prefixes = prefixes;
    }
    if let Some(max) = args.max_connections {
        config.max_connections = max;
    }
    if let Some(back_pressure) = args.slow_subscriber {
        tracing::warn!("--slow-subscriber is deprecated: write --back-pressure");
        config.back_pressure = back_pressure;
    }
    // A flag wins over [context.sockets.lvc] for the option it sets (see tickbox_zmqx::profile).
    let p = &mut config.socket_profile;
    p.receive_hwm = p.receive_hwm.filter(|_| args.upstream_hwm.is_none());
    p.send_hwm = p
        .send_hwm
        .filter(|_| args.downstream_hwm.is_none() && args.tap_hwm.is_none());
    p.maxmsgsize = p
        .maxmsgsize
        .filter(|_| args.max_subscription_bytes.is_none() && args.max_message_bytes.is_none());
    macro_rules! set {
        ($($field:ident),*) => { $(if let Some(v) = args.$field { config.$field = v; })* };
    }
    set!(
        max_topics,
        max_bytes,
        overflow,
        back_pressure,
        downstream_hwm,
        upstream_hwm,
        tap_hwm,
        tap_drop,
        tap_framing,
        max_subscription_bytes,
        max_message_bytes,
        max_downstream_prefixes,
        cached_per_second
    );
    if let Some(every) = args.stats_interval {
        config.stats_interval = HumanDuration(every);
    }
    if args.core.is_some() {
        config.core = args.core;
    }
    config
}

fn parse_overflow(text: &str) -> Result<Overflow, String> {
    match text {
        "evict-lru" | "evict_lru" | "lru" => Ok(Overflow::EvictLru),
        "reject-new" | "reject_new" | "reject" => Ok(Overflow::RejectNew),
        other => Err(format!("`{other}`: expected evict-lru or reject-new")),
    }
}

fn parse_tap_drop(text: &str) -> Result<TapDrop, String> {
    match text {
        "per-consumer" | "per_consumer" => Ok(TapDrop::PerConsumer),
        "counted" => Ok(TapDrop::Counted),
        other => Err(format!("`{other}`: expected per-consumer or counted")),
    }
}

fn parse_late_joiners(text: &str) -> Result<LateJoiners, String> {
    match text {
        "auto" => Ok(LateJoiners::Auto),
        "broadcast" => Ok(LateJoiners::Broadcast),
        "snapshot" => Ok(LateJoiners::Snapshot),
        other => Err(format!("`{other}`: expected auto, broadcast or snapshot")),
    }
}

fn parse_back_pressure(text: &str) -> Result<BackPressure, String> {
    match text {
        "drop" => Ok(BackPressure::Drop),
        "block" => Ok(BackPressure::Block),
        other => Err(format!("`{other}`: expected drop or block")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_section_parses_and_rejects_typos() {
        let c: TickboxConfig = toml::from_str(
            "[lvc]\nupstream = [\"tcp://a:1\"]\nmax_topics = 5\noverflow = \"reject_new\"\nslow_subscriber = \"block\"\n",
        )
        .unwrap();
        assert_eq!(c.lvc.max_topics, 5);
        assert_eq!(c.lvc.overflow, Overflow::RejectNew);
        assert_eq!(c.lvc.back_pressure, BackPressure::Block);
        assert_eq!(c.lvc.tap_drop, TapDrop::PerConsumer);
        let c: TickboxConfig = toml::from_str("[lvc]\ntap_drop = \"counted\"\n").unwrap();
        assert_eq!(c.lvc.tap_drop, TapDrop::Counted);
        assert!(toml::from_str::<TickboxConfig>("[lvc]\ntap_drop = \"sometimes\"\n").is_err());
        assert_eq!(parse_tap_drop("per-consumer"), Ok(TapDrop::PerConsumer));
        assert!(parse_tap_drop("all").is_err());
        assert!(toml::from_str::<TickboxConfig>("[lvc]\nmax_topic = 5\n").is_err());
    }
}
