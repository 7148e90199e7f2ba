//! `tickbox replay`: publish a journal onto publisher shards at original pacing, a multiple of it, or flat out.
//!
//! Every record goes out under its original publisher id, session and sequence (send time re-stamped, REPLAY
//! flag set), gap notices included, so a subscriber tells what the journal lacks from what it lost itself;
//! `--restamp` gives each shard its own publisher identity instead. The replay waits for one subscriber per shard
//! by default (`--wait-subscribers`, bounded by `--wait-timeout`), and a replay that published to no subscriber at
//! all says so and exits 1.
//!
//! With `--broker EP` the replay is remote-controlled over Majordomo: `tickbox.replay.status` reports progress,
//! `tickbox.replay.start` (re)starts it with optional `speed=`, `from=`, `to=` body frames and
//! `tickbox.replay.stop` interrupts it. The MDP workers live on their own thread and talk to the replay loop only
//! through `tickbox_recorder::ReplayController` (behind a mutex, touched per command, never per message), an atomic stop flag and a
//! channel of accepted runs, so a slow or absent broker never stalls publishing.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::Duration;

use anyhow::Context;
use tickbox_fleet::replay_control::{ReplayControlService, ReplayShared};
use tickbox_journal::Reader;
use tickbox_recorder::{
    empty_selection, format_in_zone, parse_zone, Identity, JournalOverview, Position, ReplayAsk,
    ReplayController, ReplayOptions, ReplayPlan, ReplayProgress, ReplayStats, Replayer, RunSpec,
    SelectionError, Speed, TimeZone, When,
};
use tickbox_wire::SystemClock;

use crate::config::TickboxConfig;
use crate::live::{fmt_rate, LiveArgs, LiveView, Rate};
use crate::outcome::first_capture_ns;
use crate::status::StatusBoard;

#[derive(Debug, clap::Args)]
#[command(
    after_help = "Records go out under their original publisher id, session and sequence (send time re-stamped, REPLAY flag set, origin time kept); gap notices are re-published so a subscriber counts the journal's holes as recorded gaps, apart from its own loss; LVC cached values consume no sequence. Recorded heartbeats are dropped: the replay sends its own per original publisher while idle and once at the end.\n\
    Exit codes: 0 done; 1 error, including: no subscriber within --wait-timeout, or a run that published messages while no subscriber was subscribed on any shard (`delivered to no subscriber`); 9 --topics/--from/--to (or --from-seq/--to-seq) selected no record (the error line says what the journal holds)."
)]
pub(crate) struct Args {
    /// Journal to replay (ring file or archive directory).
    #[arg(long)]
    journal: PathBuf,
    /// Publisher shard endpoints to bind, comma-separated. Each original publisher is carried whole by shard
    /// `publisher_id % N` (with --restamp, symbols are spread over them by stable hash).
    #[arg(long, value_delimiter = ',', required_unless_present = "local")]
    bind: Vec<String>,
    /// Backtest: feed the journal straight into the Black Box (shard logic and workers of `[subscriber]` and
    /// `[workers]`: snail, gap detection, per-symbol dispatch) in this process, no sockets, as fast as the workers
    /// go, and print `subscribe`'s summary with records/s and the multiple of real time achieved. The whole
    /// journal is replayed; the receive time of each record is its capture time.
    #[arg(long, conflicts_with_all = ["bind", "broker", "await_start"])]
    local: bool,
    /// With --local: worker threads (default `[workers] count`); at most 256.
    #[arg(long, value_name = "N", requires = "local", value_parser = crate::bounds::workers)]
    workers: Option<usize>,
    /// 1 = original pacing, N = N times faster (0.5 = half speed), max = as fast as subscribers take it.
    #[arg(long, default_value = "1", value_parser = parse_speed)]
    speed: Speed,
    /// Replay the records whose origin time is at or after this: RFC 3339 (2026-11-24T14:30:00Z,
    /// 2026-11-24T09:30:00-05:00), a local date-time (2026-11-24 09:30:00) or a time of day (09:30, 09:30:00.5)
    /// in --tz (a time of day falls on the journal's first day there), ns since the epoch, or +DURATION after
    /// the first record.
    #[arg(long, conflicts_with = "from_seq", value_parser = parse_when)]
    from: Option<When>,
    /// Start at this journal sequence.
    #[arg(long)]
    from_seq: Option<u64>,
    /// Replay the records whose origin time is before this (same forms as --from).
    #[arg(long, conflicts_with = "to_seq", value_parser = parse_when)]
    to: Option<When>,
    /// Stop before this journal sequence.
    #[arg(long)]
    to_seq: Option<u64>,
    /// Most records per batch frame (one ZeroMQ message carrying several records), used on a shard only while
    /// every subscriber of it reads batches (subscribed to "" and to "#B"; see docs/book/src/wire.md); 0 or 1 sends one
    /// record per message. Default from config (`replay_batch_records`, 64).
    #[arg(long, value_name = "N")]
    batch: Option<u16>,
    /// Replay only records whose topic starts with one of these prefixes, comma-separated (`Q.XNAS.,T.`). Gap
    /// notices go out only if a prefix selects them (`G.`); recorded heartbeats never do (the replay sends its
    /// own). A topic subset has holes in each publisher's sequence: subscribe with the same --topics, or --restamp.
    #[arg(long, value_delimiter = ',', value_name = "PREFIX,...")]
    topics: Vec<String>,
    /// Time zone of local --from/--to times and of the times in messages: an IANA name (America/New_York).
    #[arg(long, default_value = "UTC", value_parser = parse_tz, value_name = "ZONE")]
    tz: TimeZone,
    /// Before starting, wait until every shard has N subscriptions (counted on XPUB; 0 = start at once). Default
    /// from config (1).
    #[arg(long)]
    wait_subscribers: Option<u64>,
    /// At the end, wait up to this long for subscribers to leave (having read everything), then as long again
    /// for what is still queued to reach the network. Subscribers still connected are named in a warning; a
    /// queue that did not drain means records were dropped, and the replay exits 1 saying so. Ctrl-C skips it.
    #[arg(long, default_value = "5s", value_parser = tickbox_units::parse_duration)]
    drain_timeout: Duration,
    /// Give up waiting for subscribers after this long: exit 1 saying so (default from config, 60s).
    #[arg(long, value_parser = tickbox_units::parse_duration)]
    wait_timeout: Option<Duration>,
    /// At the end of the journal keep tailing it (replay a recording in progress).
    #[arg(long)]
    follow: bool,
    /// What a slow subscriber does to the replay: `block` (wait for it; the default, or `[recorder]
    /// back_pressure`) or `drop` (drop its messages like a live PUB).
    #[arg(long, value_name = "block|drop")]
    back_pressure: Option<tickbox_zmqx::BackPressure>,
    /// Deprecated spelling of `--back-pressure drop`.
    #[arg(long, hide = true, conflicts_with = "back_pressure")]
    allow_drop: bool,
    /// End the replay (exit 1) at the first corrupt record or damaged segment header. By default the replay
    /// skips to the next record that verifies, counts what it skipped (`corrupt` in the summary), sends gap
    /// notices for the skipped sequences, and exits 5 at the end.
    #[arg(long)]
    stop_on_corruption: bool,
    /// Re-publish under per-shard identities (shard i is --publisher-id + i, fresh gap-free sequences, symbols
    /// spread over shards by hash) instead of the original publishers'. Gap notices are not re-published then.
    #[arg(long)]
    restamp: bool,
    /// With --restamp: publisher id of shard 0. Default from config (9000).
    #[arg(long, requires = "restamp")]
    publisher_id: Option<u32>,
    /// Print each run's summary as one JSON object on stdout (integer counts) instead of the table.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    live: LiveArgs,
    #[command(flatten)]
    metrics: crate::metrics::MetricsArgs,
    /// Majordomo broker to register `tickbox.replay.status`, `tickbox.replay.start` and `tickbox.replay.stop` with.
    #[arg(long, value_name = "EP")]
    broker: Option<String>,
    /// Bind the shards, then wait idle for `tickbox.replay.start` (and again after each replay ends) until Ctrl-C.
    #[arg(long, requires = "broker")]
    await_start: bool,
    /// ZooKeeper ensemble for --start-barrier: HOST:PORT[,HOST:PORT…]. Default: `[coord] zk` from the config.
    #[arg(long, value_name = "HOSTS")]
    zk: Option<String>,
    /// Double barrier (ZooKeeper path) shared with --parties subscribers started with the same
    /// `--start-barrier PATH --parties N`: the replay sends nothing until all have entered and every shard has N
    /// subscriptions (`--wait-subscribers` overrides N), and exits only once all have left.
    #[arg(
        long,
        value_name = "PATH",
        requires = "parties",
        conflicts_with = "await_start"
    )]
    start_barrier: Option<String>,
    /// Subscribers in --start-barrier (the replay is one more party).
    #[arg(long, value_name = "N", requires = "start_barrier", value_parser = clap::value_parser!(u32).range(1..))]
    parties: Option<u32>,
}

fn parse_speed(s: &str) -> Result<Speed, String> {
    s.parse()
        .map_err(|e: tickbox_units::UnitsError| e.to_string())
}

fn parse_when(s: &str) -> Result<When, String> {
    When::parse(s).map_err(|e| e.to_string())
}

fn parse_tz(s: &str) -> Result<TimeZone, String> {
    parse_zone(s).map_err(|e| e.to_string())
}

/// One run's summary, printed when it ends (`--await-start`) or once the close knows what it left undelivered.
struct RunSummary {
    stats: ReplayStats,
    speed: Speed,
    identity: &'static str,
    interrupted: bool,
}

impl RunSummary {
    /// Prints the summary (text or one JSON object), with `undelivered` when known.
    fn print(&self, json: bool, undelivered: Option<u64>, config: &TickboxConfig) {
        if json {
            let mut summary = self
                .stats
                .summary_json(self.speed, self.identity, self.interrupted);
            if let Some(n) = undelivered {
                summary["undelivered"] = n.into();
            }
            crate::auth_report::add_to_json(&mut summary, &config.auth);
            println!("{summary}");
        } else {
            print!("{}", self.stats.summary_table(self.speed, self.interrupted));
            if let Some(n) = undelivered {
                println!("undelivered   {n}");
            }
            if let Some(line) = crate::auth_report::line(&config.auth) {
                println!("{line}");
            }
        }
    }
}

// The grace an interrupted replay gives queued records, as an interrupted feed does: one rule for both.
use tickbox_feed::INTERRUPT_GRACE;

pub(crate) fn run(args: Args, config: &TickboxConfig) -> anyhow::Result<ExitCode> {
    if args.local {
        return super::replay_local::run(&args.journal, args.json, args.workers, config);
    }
    crate::flags::check_bind_all("--bind", &args.bind)?;
    if args.allow_drop {
        tracing::warn!("--allow-drop is deprecated: write --back-pressure drop");
    }
    if let Some(broker) = &args.broker {
        crate::flags::check_connect("--broker", broker)?;
    }
    let cfg = &config.recorder;
    let tz = args.tz.clone();
    // A selection by topic or origin time reads the journal's start and end (bounded work).
    let ask = ReplayAsk {
        topics: args.topics.clone(),
        from: args.from.clone(),
        to: args.to.clone(),
        from_seq: args.from_seq,
        to_seq: args.to_seq,
    };
    let ReplayPlan {
        selection,
        overview,
        from,
        to,
        asked,
    } = {
        let plan = ReplayPlan::for_journal(&args.journal, &ask, &tz).map_err(|e| match e {
            SelectionError::Journal(_) => {
                anyhow::Error::new(e).context(format!("reading {}", args.journal.display()))
            }
            e => e.into(),
        })?;
        // A window wholly outside the journal is known before binding or waiting for subscribers.
        if let Some(line) = plan.outside_journal(&tz) {
            eprintln!("{line}");
            return Ok(ExitCode::from(crate::exit_code::EMPTY_SELECTION));
        }
        plan
    };
    let mut reader = Reader::open(&args.journal)
        .with_context(|| format!("opening {}", args.journal.display()))?;
    let defaults = RunSpec {
        speed: args.speed,
        from,
        to,
    };
    let opts = ReplayOptions {
        bind: args.bind.clone(),
        speed: args.speed,
        from,
        to,
        identity: if args.restamp {
            Identity::Restamp
        } else {
            Identity::Preserve
        },
        publisher_id_base: args.publisher_id.unwrap_or(cfg.publisher_id_base),
        sndhwm: cfg.sndhwm,
        lossless: match args.back_pressure {
            Some(back_pressure) => back_pressure.blocks(),
            None => cfg.lossless && !args.allow_drop,
        },
        window: cfg.pacing_window.0,
        heartbeat_interval: cfg.heartbeat_interval.0,
        follow: args.follow,
        batch_max_records: args.batch.unwrap_or(cfg.replay_batch_records),
        batch_max_bytes: usize::try_from(cfg.replay_batch_bytes.0).unwrap_or(usize::MAX),
        selection: (!selection.is_all()).then(|| selection.clone()),
        max_subscription_bytes: cfg.max_subscription_bytes,
        socket_profile: config.context.sockets.replay.clone(),
        security: config.auth.clone(),
        stop_on_corruption: args.stop_on_corruption,
        // Remote status wants fresher numbers than the terminal does; the live view may want them sooner still.
        progress_every: {
            let base = if args.broker.is_some() {
                Duration::from_millis(250)
            } else {
                Duration::from_secs(1)
            };
            LiveView::new("replay", &args.live, None)
                .every()
                .map_or(base, |every| every.min(base))
        },
        ..ReplayOptions::default()
    };
    let stop = crate::shutdown::flag();
    let ctx = tickbox_zmqx::context::build(&config.context)?;
    // Before any socket binds: without a ZAP handler libzmq would let every CURVE client in.
    let _zap = config.auth.start_zap(&ctx)?;
    let mut replayer = Replayer::bind(&ctx, opts)?;
    replayer.set_drain_timeout(args.drain_timeout)?;
    for (i, ep) in replayer.endpoints().iter().enumerate() {
        eprintln!("replay: shard {i} publishing on {ep}");
    }
    let endpoints = replayer.endpoints().to_vec();
    let replay_status = |control: &ReplayController, stats: Option<&ReplayStats>, rate: f64| {
        stats
            .cloned()
            .unwrap_or_default()
            .status_json(&args.journal, &endpoints, control, rate)
    };
    let status = StatusBoard::start(&ctx, args.broker.as_deref(), "replay", config.auth.clone())?;
    let metrics = Arc::new(tickbox_recorder::ReplayMetrics::new(args.speed));
    let metrics_sources: Vec<Arc<dyn tickbox_metrics::Source>> = vec![metrics.clone()];
    let _endpoint = args.metrics.start(config, "replay", metrics_sources)?;
    let shared = Arc::new(ReplayShared::new());
    let (runs_tx, runs_rx) = mpsc::channel();
    if !args.await_start {
        let reply = shared.command(&runs_tx, |c| c.on_start(Ok(defaults)));
        tracing::debug!(%reply, "starting at once");
    }
    let _control = match &args.broker {
        Some(broker) => {
            let journal = args.journal.clone();
            Some(
                ReplayControlService::spawn_secured(
                    &ctx,
                    broker,
                    Arc::clone(&shared),
                    runs_tx,
                    defaults,
                    Box::new(move || first_capture_ns(&journal).map_err(|e| format!("{e:#}"))),
                    Arc::clone(&stop),
                    config.auth.clone(),
                )
                .context("spawning the replay control thread")?,
            )
        }
        None => {
            drop(runs_tx);
            None
        }
    };
    status.publish(replay_status(&shared.lock(), None, 0.0));
    let barrier = match (&args.start_barrier, args.parties) {
        (Some(path), Some(parties)) => {
            let coord = crate::zk::connect(args.zk.as_deref(), config, "--start-barrier")?;
            let id = format!("replay pid {} {}", std::process::id(), endpoints.join(","));
            eprintln!("replay: waiting at start barrier {path} for {parties} subscriber(s)");
            match tickbox_coord::StartBarrier::enter(
                &coord,
                path,
                parties,
                &id,
                config.coord.barrier_timeout.0,
                &stop,
            ) {
                Ok(entered) => Some(entered),
                Err(tickbox_coord::CoordError::Interrupted) => {
                    eprintln!("replay: interrupted at the start barrier; nothing sent");
                    return Ok(ExitCode::SUCCESS);
                }
                Err(e) => return Err(e).with_context(|| format!("--start-barrier {path}")),
            }
        }
        _ => None,
    };
    let wait_n = args
        .wait_subscribers
        .or(args.parties.map(u64::from))
        .unwrap_or(cfg.wait_subscribers);
    let wait_timeout = args.wait_timeout.unwrap_or(cfg.wait_timeout.0);
    if wait_n > 0 && !args.await_start {
        eprintln!(
            "replay: waiting for {wait_n} subscriber(s) per shard (up to {:?}; --wait-subscribers 0 starts at once)",
            wait_timeout
        );
        if !replayer.wait_subscribers(wait_n, Some(wait_timeout), &stop)? {
            if stop.load(Ordering::Relaxed) {
                eprintln!("replay: interrupted while waiting for subscribers; nothing sent");
                return Ok(ExitCode::SUCCESS);
            }
            anyhow::bail!(
                "no subscriber within {:?}: waited for {wait_n} subscription(s) on every shard ({}), have {:?}; \
                 start the subscriber first, or raise --wait-timeout",
                wait_timeout,
                endpoints.join(", "),
                replayer.poll_subscriptions()?
            );
        }
    }
    if args.await_start {
        eprintln!("replay: idle, waiting for tickbox.replay.start");
    }
    // Without a broker nothing but Ctrl-C stops a run; with one, the control thread folds Ctrl-C into run_stop.
    let run_stop: &AtomicBool = if args.broker.is_some() {
        &shared.run_stop
    } else {
        &stop
    };
    let mut exit = ExitCode::SUCCESS;
    // The last run's summary, printed once the close knows what was left undelivered (without --await-start).
    let mut last_summary: Option<RunSummary> = None;
    // A run skipped damaged records: exit 5 at the end, whatever else went right.
    let mut corrupt = false;
    let mut runs = 0u64;
    loop {
        let spec = match runs_rx.recv_timeout(Duration::from_millis(100)) {
            Ok(spec) => spec,
            Err(mpsc::RecvTimeoutError::Timeout) => {
                if stop.load(Ordering::Relaxed) {
                    break;
                }
                continue;
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
        };
        runs += 1;
        replayer.set_run(spec.speed, spec.from, spec.to);
        status.publish(replay_status(&shared.lock(), None, 0.0));
        if args.await_start
            && wait_n > 0
            && !replayer.wait_subscribers(wait_n, Some(wait_timeout), run_stop)?
        {
            // A remote-controlled replay stays up: this run is refused, the next start may find subscribers.
            shared.lock().on_finished();
            tracing::error!(
                "no subscriber within {wait_timeout:?} ({wait_n} subscription(s) per shard wanted, have {:?}); run not started",
                replayer.poll_subscriptions()?
            );
            if stop.load(Ordering::Relaxed) {
                break;
            }
            continue;
        }
        let start_seq = reader.position_seq();
        // A time selection's bar ends at `--to` itself, not at the clock slack read past it.
        let bar_to = match selection.window().1 {
            Some(t) if spec.to == to => Some(Position::Time(t)),
            _ => spec.to,
        };
        let stop_seq = tickbox_recorder::stop_seq_of(&args.journal, bar_to);
        let mut live = LiveView::new("replay", &args.live, Some(0));
        let mut send_rate = Rate::default();
        metrics.set_running(true);
        let stats = replayer.run(&mut reader, &SystemClock, run_stop, |s: &ReplayStats| {
            metrics.update(s);
            if stop.load(Ordering::Relaxed) {
                // Backstop should the control thread be gone.
                shared.run_stop.store(true, Ordering::Relaxed);
            }
            let rate = send_rate.per_sec(s.sent);
            status.publish(replay_status(&shared.lock(), Some(s), rate));
            if !live.due() {
                return;
            }
            let p = ReplayProgress::of(s, rate, start_seq, stop_seq);
            let eta = p
                .eta
                .map_or_else(|| "-".into(), |eta| format!("{:.1}s", eta.as_secs_f64()));
            let line = format!(
                "{}, {:.1}x real time, sent {}, not selected {}, max late {:.1}ms, at {}, ETA {eta}",
                fmt_rate(rate),
                p.multiple,
                s.sent,
                s.not_selected,
                s.max_late_ns as f64 / 1e6,
                s.last_capture_ns
                    .map(|t| format_in_zone(t, &tz))
                    .unwrap_or_else(|| "-".into()),
            );
            live.show(&line, Some((p.done, p.total)));
        })?;
        metrics.update(&stats);
        metrics.set_running(false);
        let interrupted = {
            let mut control = shared.lock();
            control.on_finished();
            status.publish(replay_status(&control, Some(&stats), stats.rate()));
            control.stopped() || stop.load(Ordering::Relaxed)
        };
        // The bar goes before the summary, never under it.
        live.finish();
        let identity = if args.restamp { "restamp" } else { "preserve" };
        let summary = RunSummary {
            stats: stats.clone(),
            speed: spec.speed,
            identity,
            interrupted,
        };
        if args.await_start {
            // A remote-controlled replay stays up between runs: each run's summary now, what its close left
            // undelivered at the end.
            summary.print(args.json, None, config);
        } else {
            let held = replayer.undelivered();
            if held > 0 && !interrupted {
                eprintln!(
                    "replay: run ended with {held} record(s) still queued for subscribers; waiting up to \
                     --drain-timeout {:?} for them (Ctrl-C stops the wait)",
                    args.drain_timeout
                );
            }
            last_summary = Some(summary);
        }
        let nobody = stats.sent > 0 && stats.subscribers == 0;
        if nobody {
            eprintln!(
                "replay: delivered to no subscriber: {} message(s) went nowhere (no subscription on any shard during the run)",
                stats.sent
            );
        }
        // The exit code reflects the last run (the only one without --await-start).
        exit = if nobody {
            ExitCode::from(crate::exit_code::ERROR)
        } else {
            ExitCode::SUCCESS
        };
        if stats.damaged_ranges > 0 {
            eprintln!(
                "replay: the journal is damaged: {} record(s) ({} bytes) in {} damaged range(s) were skipped, {} gap \
                 notice(s) sent for them (tickbox journal verify lists the ranges)",
                stats.corrupt_records, stats.corrupt_bytes, stats.damaged_ranges, stats.damage_gap_notices
            );
            corrupt = true;
        }
        if !asked.is_empty() && stats.sent == 0 && !interrupted && !args.await_start {
            let o = match &overview {
                Some(o) => o.clone(),
                None => JournalOverview::scan(&args.journal)?,
            };
            eprintln!("{}", empty_selection(&asked, &o, &tz));
            exit = ExitCode::from(crate::exit_code::EMPTY_SELECTION);
        }
        if !args.await_start || stop.load(Ordering::Relaxed) {
            break;
        }
        eprintln!("replay: done, waiting for tickbox.replay.start");
    }
    if args.await_start {
        // Stopped while idle there is no run summary; say that it ended, and after how many runs.
        eprintln!("replay: stopped after {runs} run(s)");
    }
    // Ctrl-C or SIGTERM, before or during the wait for subscribers to leave: the operator asked to stop now, so
    // the drain wait is skipped and what is queued gets only a short grace to reach the subscribers. Whatever
    // libzmq still holds when the wait (or the grace) ends is not delivered: counted exactly (records, see
    // Replayer::undelivered), dropped at the close, reported in the summary, exit 1.
    let closing = replayer.close_wait(args.drain_timeout, Duration::ZERO, &stop)?;
    let undelivered = closing.undelivered();
    if closing.subscribers_stayed && undelivered > 0 {
        eprintln!(
            "replay: {} subscription(s) still open after --drain-timeout {:?}; closing now: a subscriber that had \
             not read everything by then loses its unread tail (raise --drain-timeout, or let subscribers exit \
             when the stream ends, e.g. subscribe --idle-exit)",
            replayer.subscriptions_now(),
            args.drain_timeout
        );
    }
    let interrupted = closing.interrupted;
    if let Some(summary) = last_summary {
        summary.print(args.json, Some(undelivered), config);
    }
    drop(_control);
    drop(status);
    drop(replayer);
    drop(ctx);
    if let Some(loss) = tickbox_feed::CloseLoss::after_close(
        undelivered,
        interrupted,
        args.drain_timeout,
        INTERRUPT_GRACE,
    ) {
        let hint = "--drain-timeout waits for it";
        eprintln!("{}", loss.message("replay", undelivered, "record", hint));
        exit = ExitCode::from(crate::exit_code::ERROR);
    }
    if corrupt {
        exit = ExitCode::from(crate::exit_code::CORRUPT);
    }
    if let Some(entered) = barrier {
        let all_left = entered
            .leave(config.coord.barrier_timeout.0, &stop)
            .context(
            "leaving --start-barrier (a subscriber did not leave in time: [coord] barrier_timeout)",
        )?;
        if all_left {
            eprintln!("replay: every party left the start barrier");
        }
    }
    Ok(exit)
}
