//! `tickbox subscribe`: the Black Box subscriber (SUB shards -> PUSH/PULL workers) with the Suicidal Snail.

use std::process::ExitCode;
use std::sync::atomic::Ordering;
use std::time::Duration;

use anyhow::Context as _;
use tickbox_bench::process::{split_probes, LatencyProbe, SampleLog};
use tickbox_fleet::group::{run_group, GroupOptions};
use tickbox_fleet::start_barrier::{Side, StartMeeting};
use tickbox_fleet::{check_member_id, default_member_id, SubscriberLive};
use tickbox_subscriber::{
    live_line, tape_lines, CatchUpHandle, HumanDuration, LvcSnapshot, RunEnd, RunExtras, RunLook,
    RunVerdict, RunWatch, SilenceWatch, Subscriber, SubscriberConfig,
};
use tickbox_subscriber::{standard_worker_with_tape, StandardWorker};
use tickbox_workers::{TapeSink, WorkerPoolConfig};

use crate::cli::subscribe::Args;
use crate::config::TickboxConfig;
use crate::exit_code;
use crate::live::{LiveView, Rate};
use crate::out::{errln, out};
use crate::status::StatusBoard;

/// How often the control loop refreshes the status snapshot.
const STATUS_EVERY: Duration = Duration::from_millis(500);

/// Merges the config file's sections with the command line (the command line wins).
fn resolve(
    args: &Args,
    config: &TickboxConfig,
) -> anyhow::Result<(SubscriberConfig, WorkerPoolConfig)> {
    let overrides = tickbox_subscriber::SubscriberOverrides {
        connect: args.connect.clone(),
        nic: args.nic.clone(),
        cores: args.cores.clone(),
        workers: args.workers,
        max_lateness: args.max_lateness,
        topics: args.topics.clone(),
        gap_policy: args.gap_policy,
        handoff: args.handoff,
        dispatch: args.dispatch,
        framing: args.framing,
        snail_mode: args.snail_mode,
        clock_skew_warn: args.clock_skew_warn,
        clone: args.clone.clone(),
        lvc_snapshot: args.lvc_snapshot.clone(),
        lvc_snapshot_timeout: args.lvc_snapshot_timeout,
        catch_up: args.catch_up.clone(),
        catch_up_from: args.catch_up_from.clone(),
        catch_up_budget: args.catch_up_budget,
        member_id: args.member_id.clone(),
        member_ttl: args.member_ttl,
    };
    let (mut sub_config, workers) =
        overrides.apply(config.subscriber.clone(), config.workers.clone())?;
    // `--catch-up zk:ELECTION`: the history endpoint of the recorder that election elected.
    if let Some(election) = tickbox_fleet::catch_up_election(&sub_config).map(str::to_owned) {
        let coord = crate::zk::connect(args.zk.as_deref(), config, "--catch-up zk:")?;
        tickbox_fleet::resolve_elected_catch_up(&coord, &mut sub_config)
            .with_context(|| format!("--catch-up zk:{election}"))?;
    }
    Ok((sub_config, workers))
}

pub(crate) fn run(args: Args, config: &TickboxConfig) -> anyhow::Result<ExitCode> {
    crate::flags::check_connect_all("--connect", &args.connect)?;
    crate::flags::check_connect_all("--clone", &args.clone)?;
    if let Some(ep) = &args.lvc_snapshot {
        crate::flags::check_connect("--lvc-snapshot", ep)?;
    }
    if let Some(ep) = args.catch_up.as_ref().filter(|ep| !ep.starts_with("zk:")) {
        crate::flags::check_connect("--catch-up", ep)?;
    }
    if let Some(broker) = &args.broker {
        crate::flags::check_connect("--broker", broker)?;
    }
    let (mut sub_config, workers_config) = resolve(&args, config)?;
    if let Some(group) = &args.group {
        return subscribe_group(&args, config, group, &sub_config, &workers_config);
    }
    let stop = crate::shutdown::flag();
    // Built (and its I/O threads placed) before any of our threads is pinned, so they never inherit a shard's core.
    let ctx = tickbox_zmqx::context::build(&config.context)?;
    let base = sub_config.max_lateness.0;
    let id = sub_config
        .member_id
        .clone()
        .unwrap_or_else(default_member_id);
    check_member_id(&id).context("--member-id")?;
    let live = SubscriberLive::for_run(&ctx, &mut sub_config, &id, config.clone.client.clone())
        .context("--clone / [subscriber] clone")?;
    let status = StatusBoard::start(
        &ctx,
        args.broker.as_deref(),
        "subscribe",
        config.auth.clone(),
    )?;
    let tape = (args.tape.as_ref())
        .map(|path| TapeSink::create(path).with_context(|| format!("--tape {}", path.display())))
        .transpose()?;
    let subscriber = start(&ctx, &args, &sub_config, &workers_config, tape.as_ref())?;
    let metrics = subscriber.metrics(&sub_config.shards);
    let _metrics = (args.metrics).start(config, "subscribe", vec![std::sync::Arc::new(metrics)])?;
    let threshold = subscriber.threshold();
    let lvc_snapshot = subscriber.lvc_snapshot();
    let catch_up = subscriber.catch_up();
    let membership = tickbox_fleet::join_members(
        live.as_ref(),
        &sub_config,
        workers_config.count_for(sub_config.shards.len()),
    )
    .context("registering under /members/subscribers/")?;
    let barrier = enter_barrier(&args, config, &id, &stop)?;
    let mut next_status = std::time::Instant::now();
    let mut view = LiveView::new("subscribe", &args.live_view, None);
    let mut view_rate = Rate::default();
    // Answered by the shards at their next burst, so the first report already has percentiles.
    subscriber.request_lateness();
    let mut watch = RunWatch::new(
        args.idle_exit.map(|d| d.0),
        args.duration.map(|d| d.0),
        std::time::Instant::now(),
    );
    let mut silence = SilenceWatch::new(std::time::Instant::now());
    loop {
        let tripped = subscriber.is_tripped();
        let now = std::time::Instant::now();
        let shards = subscriber.live_shards();
        let end = watch.check(
            RunLook {
                tripped,
                workers_failed: subscriber.workers_failed(),
                stop: stop.load(Ordering::Relaxed),
                received: shards.iter().map(|s| s.received).sum(),
                catching_up: subscriber.catch_up().is_some_and(|c| !c.is_live()),
            },
            now,
        );
        let counts: Vec<(u64, u64)> = shards.iter().map(|s| (s.received, s.handshakes)).collect();
        if let Some(why) = silence.check(&counts, now) {
            errln!("{}", why.warning(&sub_config, args.idle_exit));
        }
        if end == Some(RunEnd::Idle) {
            let limit = watch.idle_limit().unwrap_or_default();
            tracing::info!(idle = %HumanDuration(limit), "no frame for the idle limit: stopping");
        }
        if now >= next_status || tripped {
            next_status = now + STATUS_EVERY;
            status.publish(subscriber.status_json(&threshold, &id, tripped));
        }
        if view.due() {
            let line = live_line(&subscriber.live_shards(), threshold.get(), &mut view_rate);
            view.show(&line, None);
            subscriber.request_lateness();
        }
        if end.is_some() {
            break;
        }
        if let Some(live) = &live {
            live.drain(&threshold, base);
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    if let (Some(live), Some(fatal)) = (&live, subscriber.fatal()) {
        live.alert(&fatal);
    }
    // The status line goes before the summary, never under it.
    view.finish();
    let (report, worker_failure) = shut_down(subscriber, args.latency_out.as_deref())?;
    let stopped_by = report.stopped_by(stop.load(Ordering::Relaxed));
    let extras = (lvc_snapshot, catch_up);
    let tape_failed = summarise(
        &report,
        &sub_config,
        stopped_by,
        extras,
        args.json,
        tape.as_ref(),
    )?;
    drop(membership);
    if let Some((m, entered)) = barrier {
        m.leave(entered, config.coord.barrier_timeout.0, &stop)?;
    }
    Ok(exit(&report, &sub_config, worker_failure, tape_failed))
}

/// Starts the subscriber: the standard worker (with `--tape`'s sink, `--debug-worker-delay`) beside a latency
/// probe when `--latency-out` asks for its samples.
fn start(
    ctx: &zmq::Context,
    args: &Args,
    sub_config: &SubscriberConfig,
    workers_config: &WorkerPoolConfig,
    tape: Option<&std::sync::Arc<TapeSink>>,
) -> anyhow::Result<Subscriber<(StandardWorker, Option<LatencyProbe>)>> {
    let delay = args.debug_worker_delay.map(|d| d.0);
    let probe_capacity = args.latency_out.as_ref().map(|_| args.latency_capacity);
    Subscriber::start(ctx, sub_config, workers_config, |_| {
        (
            standard_worker_with_tape(delay, tape),
            probe_capacity.map(LatencyProbe::new),
        )
    })
    .context("starting the subscriber")
}

/// Stops the subscriber and takes its report (with the error of a worker that failed), writing the latency
/// probes' samples to `latency_out` when asked.
fn shut_down(
    subscriber: Subscriber<(StandardWorker, Option<LatencyProbe>)>,
    latency_out: Option<&std::path::Path>,
) -> anyhow::Result<(
    tickbox_subscriber::Report<StandardWorker>,
    Option<tickbox_workers::WorkerError>,
)> {
    let (report, worker_failure) = subscriber.shutdown_partial()?;
    let (mut report, probes) = split_probes(report);
    if let Some(path) = latency_out {
        SampleLog::merge(probes.into_iter().map(LatencyProbe::into_log))
            .write(path)
            .with_context(|| format!("--latency-out {}", path.display()))?;
    }
    report.finish_tapes();
    Ok((report, worker_failure))
}

/// Enters `--start-barrier` when asked; `None` without one, or when Ctrl-C came while waiting (the run then shuts
/// down like any stop, with an empty summary).
fn enter_barrier(
    args: &Args,
    config: &TickboxConfig,
    id: &str,
    stop: &std::sync::atomic::AtomicBool,
) -> anyhow::Result<Option<(StartMeeting, tickbox_coord::StartBarrier)>> {
    let Some(m) = StartMeeting::asked(args.start_barrier.as_deref(), args.parties, Side::Consumer)
    else {
        return Ok(None);
    };
    let coord = crate::zk::connect(args.zk.as_deref(), config, "--start-barrier")?;
    tracing::info!(barrier = %m.path, parties = m.parties, "connected and subscribed; entering the start barrier");
    let entered = m.enter(&coord, id, config.coord.barrier_timeout.0, stop)?;
    Ok(entered.map(|e| (m, e)))
}

/// `--group PATH`: this process joins the sharded group at PATH and consumes only the shards whose lock it holds
/// (`tickbox_fleet::group`); one summary per shard it owned.
fn subscribe_group(
    args: &Args,
    config: &TickboxConfig,
    path: &str,
    sub_config: &SubscriberConfig,
    workers: &WorkerPoolConfig,
) -> anyhow::Result<ExitCode> {
    let id = sub_config
        .member_id
        .clone()
        .unwrap_or_else(default_member_id);
    check_member_id(&id).context("--member-id")?;
    let coord = crate::zk::connect(args.zk.as_deref(), config, "--group")?;
    let stop = crate::shutdown::flag();
    let ctx = tickbox_zmqx::context::build(&config.context)?;
    let opts = GroupOptions {
        path: path.to_owned(),
        id,
        idle_exit: args.idle_exit.map(|d| d.0),
        duration: args.duration.map(|d| d.0),
        worker_delay: args.debug_worker_delay.map(|d| d.0),
    };
    let outcome = run_group(&coord, &ctx, sub_config, workers, &opts, &stop)?;
    let signalled = stop.load(Ordering::Relaxed);
    let mut exit = ExitCode::from(exit_code::OK);
    for one in &outcome.shards {
        if args.json {
            crate::out::json(&one.summary_json(one.report.stopped_by(signalled)))?;
        } else {
            out!("{}", one.summary_text(signalled));
        }
        if one.report.fatal.is_some() {
            exit = crate::outcome::finish(&one.report);
        }
    }
    if let Some(err) = outcome.worker_failure {
        errln!("error: {err}");
        return Ok(ExitCode::from(exit_code::WORKER_FAILED));
    }
    Ok(exit)
}

/// The summary on stdout (one JSON object with `json`), then what `--tape` holds on stderr; true when the tape
/// lost records.
fn summarise(
    report: &tickbox_subscriber::Report<StandardWorker>,
    sub_config: &SubscriberConfig,
    stopped_by: &str,
    (lvc_snapshot, catch_up): (Option<LvcSnapshot>, Option<CatchUpHandle>),
    json: bool,
    tape: Option<&std::sync::Arc<TapeSink>>,
) -> anyhow::Result<bool> {
    let extras = &RunExtras {
        lvc_snapshot: lvc_snapshot.map(|s| s.report()),
        catch_up: catch_up.map(|c| c.summary()),
    };
    if json {
        crate::out::json(&report.run_summary_json(sub_config, stopped_by, extras)?)?;
    } else {
        out!("{}", report.run_summary_text(stopped_by, extras));
    }
    Ok(tape.is_some_and(|sink| {
        let (written, lost) = tape_lines(sink);
        errln!("{written}");
        lost.inspect(|line| errln!("{line}")).is_some()
    }))
}

/// The exit code after the summary, from the run's verdict (the run's own outcome: [`crate::outcome::finish`]).
fn exit<W>(
    report: &tickbox_subscriber::Report<W>,
    sub_config: &SubscriberConfig,
    worker_failure: Option<tickbox_workers::WorkerError>,
    tape_failed: bool,
) -> ExitCode {
    match report.verdict(sub_config, worker_failure, tape_failed) {
        RunVerdict::WorkerFailed(err) => {
            // After the summary, so what the surviving workers did is still reported.
            tracing::error!("{err}: the run is incomplete");
            errln!("error: {err}");
            ExitCode::from(exit_code::WORKER_FAILED)
        }
        RunVerdict::TapeIncomplete => ExitCode::from(exit_code::ERROR),
        RunVerdict::ReceivedNothing(line) => {
            tracing::error!("{line}");
            ExitCode::from(exit_code::ERROR)
        }
        RunVerdict::NothingUsable(line) => {
            errln!("error: {line}");
            ExitCode::from(exit_code::ERROR)
        }
        RunVerdict::Outcome => crate::outcome::finish(report),
    }
}
