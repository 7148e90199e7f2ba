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
use std::time::{Duration, Instant};

use anyhow::Context;
use tickbox_fleet::replay_control::{ReplayControlService, ReplayShared};
use tickbox_journal::Reader;
use tickbox_recorder::{
    Identity, Position, ReplayController, ReplayOptions, ReplayStats, Replayer, RunSpec, Speed,
};
use tickbox_wire::SystemClock;

use super::journal::{first_capture_ns, parse_time};
use crate::config::TickboxConfig;
use crate::status::StatusBoard;
use tickbox_units::format_rfc3339 as fmt_time;

#[derive(Debug, clap::Args)]
#[command(
    after_help = "Records go out under their original publisher id, session and sequence (send time re-stamped, REPLAY flag set, origin time kept); gap notices are re-published so a subscriber counts the journal's holes as recorded gaps, apart from its own loss; LVC cached values consume no sequence. Recorded heartbeats are dropped: the replay sends its own per original publisher while idle and once at the end.\n\
    Exit codes: 0 done; 1 error, including: no subscriber within --wait-timeout, or a run that published messages while no subscriber was subscribed on any shard (`delivered to no subscriber`)."
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
    /// With --local: worker threads (default `[workers] count`).
    #[arg(long, value_name = "N", requires = "local")]
    workers: Option<usize>,
    /// 1 = original pacing, N = N times faster (0.5 = half speed), max = as fast as subscribers take it.
    #[arg(long, default_value = "1", value_parser = parse_speed)]
    speed: Speed,
    /// Start at this capture time: ns since the epoch, RFC 3339, or +DURATION after the first record.
    #[arg(long, conflicts_with = "from_seq")]
    from: Option<String>,
    /// Start at this journal sequence.
    #[arg(long)]
    from_seq: Option<u64>,
    /// Stop before this capture time (same forms as --from).
    #[arg(long, conflicts_with = "to_seq")]
    to: Option<String>,
    /// Stop before this journal sequence.
    #[arg(long)]
    to_seq: Option<u64>,
    /// Most records per batch frame (one ZeroMQ message carrying several records), used on a shard only while
    /// every subscriber of it reads batches (subscribed to "" and to "#B"; see docs/WIRE.md); 0 or 1 sends one
    /// record per message. Default from config (`replay_batch_records`, 64).
    #[arg(long, value_name = "N")]
    batch: Option<u16>,
    /// Before starting, wait until every shard has N subscriptions (counted on XPUB; 0 = start at once). Default
    /// from config (1).
    #[arg(long)]
    wait_subscribers: Option<u64>,
    /// Give up waiting for subscribers after this long: exit 1 saying so (default from config, 60s).
    #[arg(long, value_parser = tickbox_units::parse_duration)]
    wait_timeout: Option<Duration>,
    /// At the end of the journal keep tailing it (replay a recording in progress).
    #[arg(long)]
    follow: bool,
    /// Drop messages for slow subscribers like a live PUB, instead of waiting for them.
    #[arg(long)]
    allow_drop: bool,
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
    /// Majordomo broker to register `tickbox.replay.status`, `tickbox.replay.start` and `tickbox.replay.stop` with.
    #[arg(long, value_name = "EP")]
    broker: Option<String>,
    /// Bind the shards, then wait idle for `tickbox.replay.start` (and again after each replay ends) until Ctrl-C.
    #[arg(long, requires = "broker")]
    await_start: bool,
}

fn parse_speed(s: &str) -> Result<Speed, String> {
    s.parse()
}

pub(crate) fn run(args: Args, config: &TickboxConfig) -> anyhow::Result<ExitCode> {
    if args.local {
        return super::replay_local::run(&args.journal, args.json, args.workers, config);
    }
    crate::flags::check_bind_all("--bind", &args.bind)?;
    if let Some(broker) = &args.broker {
        crate::flags::check_connect("--broker", broker)?;
    }
    let cfg = &config.recorder;
    let journal = args.journal.clone();
    let first = || first_capture_ns(&journal);
    let from = match (&args.from, args.from_seq) {
        (Some(t), _) => Some(Position::Time(parse_time(t, first)?)),
        (None, Some(s)) => Some(Position::Seq(s)),
        _ => None,
    };
    let to = match (&args.to, args.to_seq) {
        (Some(t), _) => Some(Position::Time(parse_time(t, || {
            first_capture_ns(&journal)
        })?)),
        (None, Some(s)) => Some(Position::Seq(s)),
        _ => None,
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
        lossless: cfg.lossless && !args.allow_drop,
        window: cfg.pacing_window.0,
        heartbeat_interval: cfg.heartbeat_interval.0,
        follow: args.follow,
        batch_max_records: args.batch.unwrap_or(cfg.replay_batch_records),
        batch_max_bytes: usize::try_from(cfg.replay_batch_bytes.0).unwrap_or(usize::MAX),
        max_subscription_bytes: cfg.max_subscription_bytes,
        socket_profile: config.context.sockets.replay.clone(),
        // Remote status wants fresher numbers than the terminal does.
        progress_every: if args.broker.is_some() {
            Duration::from_millis(250)
        } else {
            Duration::from_secs(1)
        },
    };
    let stop = crate::shutdown::flag();
    let ctx = tickbox_zmqx::context::build(&config.context)?;
    let mut replayer = Replayer::bind(&ctx, opts)?;
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
    let status = StatusBoard::start(&ctx, args.broker.as_deref(), "replay")?;
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
                ReplayControlService::spawn(
                    &ctx,
                    broker,
                    Arc::clone(&shared),
                    runs_tx,
                    defaults,
                    Box::new(move || first_capture_ns(&journal).map_err(|e| format!("{e:#}"))),
                    Arc::clone(&stop),
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
    let wait_n = args.wait_subscribers.unwrap_or(cfg.wait_subscribers);
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
    let quiet = crate::quiet();
    let mut exit = ExitCode::SUCCESS;
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
        let mut last = (0u64, Instant::now());
        let stats = replayer.run(&mut reader, &SystemClock, run_stop, |s: &ReplayStats| {
            if stop.load(Ordering::Relaxed) {
                // Backstop should the control thread be gone.
                shared.run_stop.store(true, Ordering::Relaxed);
            }
            let dt = last.1.elapsed().as_secs_f64().max(1e-9);
            let rate = (s.sent - last.0) as f64 / dt;
            last = (s.sent, Instant::now());
            status.publish(replay_status(&shared.lock(), Some(s), rate));
            if quiet {
                return;
            }
            let pos = s.last_seq.unwrap_or(0);
            let begin = s.first_seq.or(start_seq).unwrap_or(1);
            let end = s.end_seq.max(pos + 1);
            let done = (pos + 1).saturating_sub(begin) as f64 / (end - begin).max(1) as f64;
            let eta = if rate > 0.0 {
                format!("{:.1}s", end.saturating_sub(pos + 1) as f64 / rate)
            } else {
                "-".into()
            };
            eprint!(
                "\rreplay: seq {pos} of {} ({:.1}%), at {}, {:.0} msg/s, ETA {eta}      ",
                end - 1,
                done * 100.0,
                s.last_capture_ns.map(fmt_time).unwrap_or_default(),
                rate
            );
        })?;
        let interrupted = {
            let mut control = shared.lock();
            control.on_finished();
            status.publish(replay_status(&control, Some(&stats), stats.rate()));
            control.stopped() || stop.load(Ordering::Relaxed)
        };
        if !quiet {
            eprintln!();
        }
        let identity = if args.restamp { "restamp" } else { "preserve" };
        if args.json {
            println!("{}", stats.summary_json(spec.speed, identity, interrupted));
        } else {
            print!("{}", stats.summary_table(spec.speed, interrupted));
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
        if !args.await_start || stop.load(Ordering::Relaxed) {
            break;
        }
        eprintln!("replay: done, waiting for tickbox.replay.start");
    }
    if args.await_start {
        // Stopped while idle there is no run summary; say that it ended, and after how many runs.
        eprintln!("replay: stopped after {runs} run(s)");
    }
    Ok(exit)
}
