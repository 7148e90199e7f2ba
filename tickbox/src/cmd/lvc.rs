//! `tickbox lvc`: the Last Value Cache proxy (XSUB toward publishers, verbose XPUB toward subscribers) with the
//! Espresso tap. See `tickbox_lvc` for the rules it follows.

use std::io::Write;
use std::process::ExitCode;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use anyhow::Context;
use tickbox_lvc::LvcConfig;

use tickbox_lvc::report::{self, LvcStatus};
use tickbox_units::HumanDuration;

use crate::cli::lvc::Args;
use crate::config::TickboxConfig;
use crate::live::{LiveView, Rate};
use crate::out::{errln, out};
use crate::status::StatusBoard;

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
    {
        // Flushed, so scripts and tests can use `tcp://…:*`: on stdout, or on stderr with `--json` (stdout then
        // carries only the summary object).
        let mut out: Box<dyn Write> = if json {
            Box::new(std::io::stderr().lock())
        } else {
            Box::new(crate::out::stdout())
        };
        for line in lvc.endpoints().lines() {
            writeln!(out, "{line}")?;
        }
        out.flush()?;
    }
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
            let line = report::live_line(&lvc.stats(), &mut rate_in, &mut rate_out, &security);
            view.show(&line, None);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    // The status line goes before the final counters, never under them.
    view.finish();
    let publishers = lvc.publishers_handle();
    let stats = lvc.join().context("LVC proxy")?;
    let accounts = publishers.publishers();
    if json {
        crate::out::json(&report::summary_json(&stats, &accounts, &security))?;
    } else {
        out!(
            "{}",
            report::summary_text(&stats, &accounts, lvc_config.tap_drop, &security)
        );
    }
    if let Some(line) = stats.never_received_warning() {
        errln!("{line}");
    }
    Ok(ExitCode::from(crate::exit_code::OK))
}

fn apply(args: Args, config: LvcConfig) -> LvcConfig {
    if args.slow_subscriber.is_some() {
        tracing::warn!("--slow-subscriber is deprecated: write --back-pressure");
    }
    tickbox_lvc::LvcOverrides {
        upstream: args.upstream,
        upstream_bind: args.upstream_bind,
        bind: args.bind,
        tap: args.tap,
        snapshot: args.snapshot,
        late_joiners: args.late_joiners,
        cache_prefixes: args.cache_prefixes,
        max_connections: args.max_connections,
        max_topics: args.max_topics,
        max_bytes: args.max_bytes,
        overflow: args.overflow,
        back_pressure: args.back_pressure.or(args.slow_subscriber),
        downstream_hwm: args.downstream_hwm,
        upstream_hwm: args.upstream_hwm,
        tap_hwm: args.tap_hwm,
        tap_drop: args.tap_drop,
        tap_framing: args.tap_framing,
        max_subscription_bytes: args.max_subscription_bytes,
        max_message_bytes: args.max_message_bytes,
        max_downstream_prefixes: args.max_downstream_prefixes,
        cached_per_second: args.cached_per_second,
        stats_interval: args.stats_interval,
        core: args.core,
    }
    .apply(config)
}
