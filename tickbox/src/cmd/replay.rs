//! `tickbox replay`: publish a journal onto publisher shards at original pacing, a multiple of it, or flat out.
//!
//! Every record goes out under its original publisher id, session and sequence (send time re-stamped, REPLAY
//! flag set), gap notices included, so a subscriber tells what the journal lacks from what it lost itself;
//! `--restamp` gives each shard its own publisher identity instead. The replay waits for one subscriber per shard
//! by default (`--wait-for-subscribers`, bounded by `--wait-timeout`), and a replay that published to no subscriber at
//! all says so and exits 1.
//!
//! With `--broker EP` the replay is remote-controlled over Majordomo: `tickbox.replay.status` reports progress,
//! `tickbox.replay.start` (re)starts it with optional `speed=`, `from=`, `to=` body frames and
//! `tickbox.replay.stop` interrupts it. The MDP workers live on their own thread and talk to the replay loop only
//! through `tickbox_recorder::ReplayController` (behind a mutex, touched per command, never per message), an atomic stop flag and a
//! channel of accepted runs, so a slow or absent broker never stalls publishing.

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use tickbox_fleet::replay_control::{first_capture_of, ReplayControlService};
use tickbox_fleet::start_barrier::{Side, StartMeeting};
use tickbox_recorder::{
    replay_line, RecorderError, ReplayExit, ReplayObserver, ReplayProgress, ReplayRequest,
    ReplaySession, ReplayStats, RunSummary, TimeZone,
};

use crate::cli::replay::Args;
use crate::config::TickboxConfig;
use crate::live::{LiveArgs, LiveView};
use crate::out::{errln, out, outln};
use crate::status::StatusBoard;

impl Args {
    /// The request the recorder library plans and settles against `[recorder]`.
    fn request(&self, progress_every: Option<Duration>) -> ReplayRequest {
        ReplayRequest {
            journals: self.journal.clone(),
            bind: self.bind.clone(),
            speed: self.speed,
            from: self.from.clone(),
            from_seq: self.from_seq,
            to: self.to.clone(),
            to_seq: self.to_seq,
            batch: self.batch.and_then(tickbox_feed::Batching::max_records),
            topics: self.topics.clone(),
            tz: self.tz.clone(),
            wait_subscribers: self.wait_subscribers,
            parties: self.parties,
            drain_timeout: self.drain_timeout,
            wait_timeout: self.wait_timeout,
            follow: self.follow,
            back_pressure: self.back_pressure,
            allow_drop: self.allow_drop,
            stop_on_corruption: self.stop_on_corruption,
            restamp: self.restamp,
            publisher_id: self.publisher_id,
            remote: self.broker.is_some(),
            await_start: self.await_start,
            progress_every,
        }
    }
}

/// What the replay session reports, shown: notices on stderr, status on the board, the live bar, summaries.
struct Shown<'a> {
    /// Copies of journals in an object store: what they fetched goes into the summary.
    store: &'a [tickbox_export::Mirror],
    status: &'a StatusBoard,
    /// What `/metrics` reads (with `--metrics`).
    metrics: &'a tickbox_recorder::ReplayMetrics,
    live_args: &'a LiveArgs,
    live: Option<LiveView>,
    tz: &'a TimeZone,
    json: bool,
    config: &'a TickboxConfig,
}

impl ReplayObserver for Shown<'_> {
    fn notice(&mut self, line: &str) {
        errln!("{line}");
    }

    fn status(&mut self, snapshot: serde_json::Value) {
        self.status.publish(snapshot);
    }

    fn run_started(&mut self) {
        self.metrics.set_running(true);
        self.live = Some(LiveView::new("replay", self.live_args, Some(0)));
    }

    fn progress(&mut self, s: &ReplayStats, rate: f64, p: &ReplayProgress) {
        self.metrics.update(s);
        let Some(live) = self.live.as_mut() else {
            return;
        };
        if !live.due() {
            return;
        }
        live.show(&replay_line(s, rate, p, self.tz), Some((p.done, p.total)));
    }

    fn run_ended(&mut self) {
        self.metrics.set_running(false);
        if let Some(live) = self.live.as_mut() {
            live.finish();
        }
    }

    fn summary(&mut self, summary: &RunSummary, undelivered: Option<u64>) {
        if self.json {
            let mut v = summary.to_json(undelivered);
            crate::auth_report::add_to_json(&mut v, &self.config.auth);
            if !self.store.is_empty() {
                v["fetched"] = self.store.iter().map(|m| m.fetched_json()).collect();
            }
            if let Err(e) = crate::out::json(&v) {
                errln!("error: {e:#}");
            }
        } else {
            out!("{}", summary.table(undelivered));
            if let Some(line) = crate::auth_report::line(&self.config.auth) {
                outln!("{line}");
            }
            for m in self.store {
                outln!("source {}: {}", m.url(), m.fetched());
            }
        }
    }
}

pub(crate) fn run(mut args: Args, config: &TickboxConfig) -> anyhow::Result<ExitCode> {
    // A journal or history in an object store (s3://…) is replayed from a local copy, kept for the run, that
    // fetches by range what the replay reads: its window's frames up front, anything else as it is read.
    let ask = tickbox_recorder::ReplayAsk {
        topics: args.topics.clone(),
        from: args.from.clone(),
        to: args.to.clone(),
        from_seq: args.from_seq,
        to_seq: args.to_seq,
    };
    let mirrors = match tickbox_export::replay_copies(&mut args.journal, &ask, &args.tz) {
        Ok(mirrors) => mirrors,
        Err(e @ tickbox_export::ExportError::Store { .. }) => {
            errln!("error: {e}");
            return Ok(ExitCode::from(crate::exit_code::STORE));
        }
        Err(e) => return Err(e.into()),
    };
    if args.local {
        let exit = super::replay_local::run(&args.journal, args.json, args.workers, config)?;
        for m in &mirrors {
            errln!("source {}: {}", m.url(), m.fetched());
        }
        return Ok(store_exit(&mirrors).unwrap_or(exit));
    }
    crate::flags::check_bind_all("--bind", &args.bind)?;
    if args.allow_drop {
        tracing::warn!("--allow-drop is deprecated: write --back-pressure drop");
    }
    if let Some(broker) = &args.broker {
        crate::flags::check_connect("--broker", broker)?;
    }
    let request = args.request(LiveView::new("replay", &args.live, None).every());
    let stop = crate::shutdown::flag();
    let ctx = tickbox_zmqx::context::build(&config.context)?;
    // Before any socket binds: the shards' sockets come from the gate, whose ZAP handler applies `[security]`.
    let gate = config.auth.gate(&ctx)?;
    let mut session = match ReplaySession::bind(
        &gate,
        request,
        &config.recorder,
        config.context.sockets.replay.clone(),
        config.auth.clone(),
    ) {
        Ok(session) => session,
        // A window wholly outside the journal is known before binding or waiting for subscribers.
        Err(RecorderError::EmptySelection(line)) => {
            errln!("{line}");
            return Ok(ExitCode::from(crate::exit_code::EMPTY_SELECTION));
        }
        Err(e) => return Err(e.into()),
    };
    for (i, ep) in session.endpoints().iter().enumerate() {
        errln!("replay: shard {i} publishing on {ep}");
    }
    let endpoints = session.endpoints().to_vec();
    let status = StatusBoard::start(&ctx, args.broker.as_deref(), "replay", config.auth.clone())?;
    let control = match &args.broker {
        Some(broker) => Some(spawn_control(
            &ctx,
            broker,
            &mut session,
            args.journal.clone(),
            &stop,
            config,
        )?),
        None => None,
    };
    let meeting = StartMeeting::asked(args.start_barrier.as_deref(), args.parties, Side::Producer);
    let barrier = match &meeting {
        None => None,
        Some(m) => {
            let coord = crate::zk::connect(args.zk.as_deref(), config, "--start-barrier")?;
            let id = format!("replay pid {} {}", std::process::id(), endpoints.join(","));
            errln!("replay: {}", m.waiting_line());
            let Some(entered) = m.enter(&coord, &id, config.coord.barrier_timeout.0, &stop)? else {
                errln!("replay: interrupted at the start barrier; nothing sent");
                return Ok(ExitCode::SUCCESS);
            };
            Some((m, entered))
        }
    };
    let metrics = std::sync::Arc::new(tickbox_recorder::ReplayMetrics::new(args.speed));
    let metrics_sources: Vec<std::sync::Arc<dyn tickbox_metrics::Source>> = vec![metrics.clone()];
    let _endpoint = args.metrics.start(config, "replay", metrics_sources)?;
    let mut shown = Shown {
        store: &mirrors,
        status: &status,
        metrics: &metrics,
        live_args: &args.live,
        live: None,
        tz: &args.tz,
        json: args.json,
        config,
    };
    let outcome = session.run(&stop, &mut shown)?;
    drop(shown);
    drop(control);
    drop(status);
    drop(ctx);
    if let Some(line) = &outcome.close_loss {
        errln!("{line}");
    }
    let exit = match outcome.exit {
        ReplayExit::Ok => ExitCode::SUCCESS,
        ReplayExit::Error => ExitCode::from(crate::exit_code::ERROR),
        ReplayExit::Corrupt => ExitCode::from(crate::exit_code::CORRUPT),
        ReplayExit::EmptySelection => ExitCode::from(crate::exit_code::EMPTY_SELECTION),
    };
    let exit = store_exit(&mirrors).unwrap_or(exit);
    if let Some((m, entered)) = barrier {
        if m.leave(entered, config.coord.barrier_timeout.0, &stop)? {
            errln!("replay: every party left the start barrier");
        }
    }
    Ok(exit)
}

/// Exit 13 when a copy could not fetch what the replay read (the store went away during the run), said on
/// stderr: what it could not read was counted as damage.
fn store_exit(mirrors: &[tickbox_export::Mirror]) -> Option<ExitCode> {
    let failed = tickbox_export::Mirror::failures(mirrors);
    for why in &failed {
        errln!("error: {why} (the records it held were not replayed)");
    }
    (!failed.is_empty()).then(|| ExitCode::from(crate::exit_code::STORE))
}

/// The replay's remote control (`tickbox.replay.control` on `broker`): pause, resume, seek, speed. Its `first`
/// answer is the earliest capture time of the `journals`.
fn spawn_control(
    ctx: &zmq::Context,
    broker: &str,
    session: &mut ReplaySession,
    journals: Vec<std::path::PathBuf>,
    stop: &Arc<std::sync::atomic::AtomicBool>,
    config: &TickboxConfig,
) -> anyhow::Result<ReplayControlService> {
    let (shared, runs, defaults) = session
        .remote_control()
        .context("the replay's remote control was already taken")?;
    ReplayControlService::spawn_secured(
        ctx,
        broker,
        shared,
        runs,
        defaults,
        first_capture_of(journals),
        Arc::clone(stop),
        config.auth.clone(),
    )
    .context("spawning the replay control thread")
}
