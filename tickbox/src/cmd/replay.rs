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
//! through [`Control`] (behind a mutex, touched per command, never per message), an atomic stop flag and a
//! channel of accepted runs, so a slow or absent broker never stalls publishing.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::Context;
use tickbox_journal::Reader;
use tickbox_majordomo::worker::{Worker, WorkerConfig};
use tickbox_recorder::{Identity, Position, ReplayOptions, ReplayStats, Replayer, Speed};
use tickbox_wire::SystemClock;

use super::journal::{first_capture_ns, fmt_bytes, fmt_time, parse_duration, parse_time};
use crate::config::TickboxConfig;
use crate::status::StatusBoard;

#[derive(Debug, clap::Args)]
#[command(
    after_help = "Records go out under their original publisher id, session and sequence (send time re-stamped, REPLAY flag set, origin time kept); gap notices are re-published so a subscriber counts the journal's holes as recorded gaps, apart from its own loss; LVC cached values consume no sequence. Recorded heartbeats are dropped: the replay sends its own per original publisher while idle and once at the end.\n\
    Exit codes: 0 done; 1 error, including: no subscriber within --wait-timeout, or a run that published messages while no subscriber was subscribed on any shard (`delivered to no subscriber`)."
)]
pub struct Args {
    /// Journal to replay (ring file or archive directory).
    #[arg(long)]
    journal: PathBuf,
    /// Publisher shard endpoints to bind, comma-separated. Each original publisher is carried whole by shard
    /// `publisher_id % N` (with --restamp, symbols are spread over them by stable hash).
    #[arg(long, value_delimiter = ',', required = true)]
    bind: Vec<String>,
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
    /// Before starting, wait until every shard has N subscriptions (counted on XPUB; 0 = start at once). Default
    /// from config (1).
    #[arg(long)]
    wait_subscribers: Option<u64>,
    /// Give up waiting for subscribers after this long: exit 1 saying so (default from config, 60s).
    #[arg(long, value_parser = parse_duration_arg)]
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
    /// No progress line on stderr.
    #[arg(long)]
    quiet: bool,
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

fn parse_duration_arg(s: &str) -> Result<Duration, String> {
    parse_duration(s).map_err(|e| format!("{e:#}"))
}

/// What one replay run covers; a start request's unset fields take the command line's values.
#[derive(Debug, Clone, Copy, PartialEq)]
struct RunSpec {
    speed: Speed,
    from: Option<Position>,
    to: Option<Position>,
}

impl std::fmt::Display for RunSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "speed {} from {} to {}",
            self.speed,
            fmt_position(self.from, "start"),
            fmt_position(self.to, "end")
        )
    }
}

fn fmt_position(p: Option<Position>, none: &str) -> String {
    match p {
        None => none.to_string(),
        Some(Position::Seq(s)) => format!("seq:{s}"),
        Some(Position::Time(t)) => fmt_time(t),
    }
}

/// `seq:N`, or a time as the CLI flags take it (ns, RFC 3339, `+DURATION`).
fn parse_position(
    value: &str,
    first: impl FnOnce() -> anyhow::Result<u64>,
) -> Result<Position, String> {
    if let Some(seq) = value.strip_prefix("seq:") {
        return seq
            .trim()
            .parse()
            .map(Position::Seq)
            .map_err(|_| format!("`seq:{seq}` needs a journal sequence number"));
    }
    parse_time(value, first)
        .map(Position::Time)
        .map_err(|e| format!("{e:#}"))
}

/// A `tickbox.replay.start` body: frames of `key=value` words (`speed=20`, `from=+5s`, `to=seq:1000`); several
/// words may share a frame, empty frames are ignored. Errors are the text of the 400 reply.
fn parse_start(
    body: &[Vec<u8>],
    defaults: RunSpec,
    first: impl Fn() -> anyhow::Result<u64>,
) -> Result<RunSpec, String> {
    let mut spec = defaults;
    for frame in body {
        let text =
            std::str::from_utf8(frame).map_err(|_| "body frames must be UTF-8 text".to_string())?;
        for word in text.split_whitespace() {
            let (key, value) = word
                .split_once('=')
                .ok_or_else(|| format!("`{word}` is not key=value (keys: speed, from, to)"))?;
            match key {
                "speed" => spec.speed = value.parse()?,
                "from" => spec.from = Some(parse_position(value, &first)?),
                "to" => spec.to = Some(parse_position(value, &first)?),
                _ => return Err(format!("unknown key `{key}` (keys: speed, from, to)")),
            }
        }
    }
    match (spec.from, spec.to) {
        (Some(Position::Seq(a)), Some(Position::Seq(b)))
        | (Some(Position::Time(a)), Some(Position::Time(b)))
            if a >= b =>
        {
            Err(format!(
                "empty range: from {} is not before to {}",
                fmt_position(spec.from, ""),
                fmt_position(spec.to, "")
            ))
        }
        _ => Ok(spec),
    }
}

/// Where a controlled replay is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum RunState {
    /// Bound, never started.
    Idle,
    Running,
    /// Asked to stop, the loop has not noticed yet.
    Stopping,
    /// A run ended (to the end, the range's end, or stopped); startable again.
    Done,
}

impl RunState {
    fn name(self) -> &'static str {
        match self {
            RunState::Idle => "idle",
            RunState::Running => "running",
            RunState::Stopping => "stopping",
            RunState::Done => "done",
        }
    }
}

/// The command logic, free of sockets and threads: requests in, reply text and effects out.
#[derive(Debug)]
struct Control {
    state: RunState,
    /// Runs accepted so far.
    runs: u64,
    current: Option<RunSpec>,
    /// The last run ended because of a stop request.
    stopped: bool,
}

/// What the caller must do after a command.
#[derive(Debug, PartialEq)]
enum Effect {
    None,
    /// Clear the stop flag and hand this run to the replay loop.
    Run(RunSpec),
    /// Raise the stop flag.
    Stop,
}

impl Control {
    fn new() -> Self {
        Control {
            state: RunState::Idle,
            runs: 0,
            current: None,
            stopped: false,
        }
    }

    fn on_start(&mut self, request: Result<RunSpec, String>) -> (String, Effect) {
        let spec = match request {
            Ok(spec) => spec,
            Err(reason) => return (format!("400 {reason}"), Effect::None),
        };
        match self.state {
            RunState::Running | RunState::Stopping => ("409 already running".into(), Effect::None),
            RunState::Idle | RunState::Done => {
                self.state = RunState::Running;
                self.runs += 1;
                self.current = Some(spec);
                self.stopped = false;
                (format!("200 started {spec}"), Effect::Run(spec))
            }
        }
    }

    fn on_stop(&mut self) -> (String, Effect) {
        match self.state {
            RunState::Running => {
                self.state = RunState::Stopping;
                self.stopped = true;
                ("200 stopped".into(), Effect::Stop)
            }
            // Already on its way down; a repeated stop is not an error.
            RunState::Stopping => ("200 stopped".into(), Effect::None),
            RunState::Idle | RunState::Done => ("409 not running".into(), Effect::None),
        }
    }

    fn on_finished(&mut self) {
        self.state = RunState::Done;
    }
}

/// State shared by the replay loop and the control thread.
struct Shared {
    control: Mutex<Control>,
    /// The running replay's stop flag: a stop request or Ctrl-C.
    run_stop: AtomicBool,
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, Control> {
        // A panic elsewhere cannot leave Control half-updated (every method is a few plain assignments).
        self.control.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Applies a command under the lock, so a start and a stop can never interleave with the effects.
    fn command(
        &self,
        runs: &mpsc::Sender<RunSpec>,
        f: impl FnOnce(&mut Control) -> (String, Effect),
    ) -> String {
        let mut control = self.lock();
        let (reply, effect) = f(&mut control);
        match effect {
            Effect::None => {}
            Effect::Stop => self.run_stop.store(true, Ordering::Relaxed),
            Effect::Run(spec) => {
                self.run_stop.store(false, Ordering::Relaxed);
                if runs.send(spec).is_err() {
                    control.on_finished();
                    return "503 the replay loop has exited".into();
                }
            }
        }
        reply
    }
}

/// The MDP workers for `tickbox.replay.start` and `tickbox.replay.stop`; stops (sending DISCONNECT) when dropped.
struct ControlThread {
    quit: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Drop for ControlThread {
    fn drop(&mut self) {
        self.quit.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn spawn_control(
    ctx: &zmq::Context,
    broker: &str,
    shared: Arc<Shared>,
    runs: mpsc::Sender<RunSpec>,
    defaults: RunSpec,
    journal: PathBuf,
    shutdown: Arc<AtomicBool>,
) -> anyhow::Result<ControlThread> {
    let quit = Arc::new(AtomicBool::new(false));
    let (ctx, broker, flag) = (ctx.clone(), broker.to_string(), Arc::clone(&quit));
    let thread = std::thread::Builder::new()
        .name("replay-control".into())
        .spawn(move || {
            if let Err(e) = serve_control(
                &ctx, &broker, &shared, &runs, defaults, &journal, &shutdown, &flag,
            ) {
                tracing::error!("replay control services failed: {e}");
            }
        })
        .context("spawning the replay control thread")?;
    Ok(ControlThread {
        quit,
        thread: Some(thread),
    })
}

#[allow(clippy::too_many_arguments)]
fn serve_control(
    ctx: &zmq::Context,
    broker: &str,
    shared: &Shared,
    runs: &mpsc::Sender<RunSpec>,
    defaults: RunSpec,
    journal: &Path,
    shutdown: &AtomicBool,
    quit: &AtomicBool,
) -> anyhow::Result<()> {
    let mut start = Worker::connect(ctx, broker, "tickbox.replay.start", WorkerConfig::default())?;
    let mut stop = Worker::connect(ctx, broker, "tickbox.replay.stop", WorkerConfig::default())?;
    tracing::info!(
        broker,
        "registered tickbox.replay.start and tickbox.replay.stop"
    );
    while !quit.load(Ordering::Relaxed) {
        if shutdown.load(Ordering::Relaxed) {
            shared.run_stop.store(true, Ordering::Relaxed);
        }
        // Two workers on one thread: short alternating waits keep both answering within ~25 ms.
        if let Some(req) = start.recv(Duration::from_millis(25))? {
            let request = parse_start(&req.body, defaults, || first_capture_ns(journal));
            let reply = shared.command(runs, |c| c.on_start(request));
            tracing::info!(%reply, "tickbox.replay.start");
            start.reply(req, vec![reply.into_bytes()])?;
        }
        if let Some(req) = stop.recv(Duration::from_millis(25))? {
            let reply = shared.command(runs, Control::on_stop);
            tracing::info!(%reply, "tickbox.replay.stop");
            stop.reply(req, vec![reply.into_bytes()])?;
        }
    }
    Ok(())
}

/// Everything the status snapshot shows besides the live counters.
struct StatusContext<'a> {
    journal: &'a Path,
    endpoints: &'a [String],
}

fn replay_status(
    cx: &StatusContext<'_>,
    control: &Control,
    stats: Option<&ReplayStats>,
    rate: f64,
) -> serde_json::Value {
    let spec = control.current;
    let s = stats.cloned().unwrap_or_default();
    serde_json::json!({
        "component": "replay",
        "state": control.state.name(),
        "journal": cx.journal.display().to_string(),
        "endpoints": cx.endpoints,
        "runs": control.runs,
        "stopped": control.stopped,
        "speed": spec.map(|s| s.speed.to_string()),
        "from": spec.map(|s| fmt_position(s.from, "start")),
        "to": spec.map(|s| fmt_position(s.to, "end")),
        "sent": s.sent,
        "bytes": s.bytes,
        "position_seq": s.last_seq,
        "position_time": s.last_capture_ns.map(fmt_time),
        "end_seq": s.end_seq,
        "rate": rate.round(),
        "elapsed_s": s.elapsed.as_secs_f64(),
        "heartbeats_sent": s.heartbeats_sent,
        "skipped_invalid": s.skipped_invalid,
        "lapped": s.lapped,
        "gap_notices": s.gap_notices,
        "cached": s.cached,
        "subscribers": s.subscribers,
    })
}

pub fn run(args: Args, config: &TickboxConfig) -> anyhow::Result<ExitCode> {
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
        window: Duration::from_micros(cfg.pacing_window_us),
        heartbeat_interval: Duration::from_millis(cfg.heartbeat_interval_ms),
        follow: args.follow,
        // Remote status wants fresher numbers than the terminal does.
        progress_every: if args.broker.is_some() {
            Duration::from_millis(250)
        } else {
            Duration::from_secs(1)
        },
    };
    let stop = crate::shutdown::flag();
    let ctx = zmq::Context::new();
    let mut replayer = Replayer::bind(&ctx, opts)?;
    for (i, ep) in replayer.endpoints().iter().enumerate() {
        eprintln!("replay: shard {i} publishing on {ep}");
    }
    let endpoints = replayer.endpoints().to_vec();
    let status_cx = StatusContext {
        journal: &args.journal,
        endpoints: &endpoints,
    };
    let status = StatusBoard::start(&ctx, args.broker.as_deref(), "replay")?;
    let shared = Arc::new(Shared {
        control: Mutex::new(Control::new()),
        run_stop: AtomicBool::new(false),
    });
    let (runs_tx, runs_rx) = mpsc::channel();
    if !args.await_start {
        let reply = shared.command(&runs_tx, |c| c.on_start(Ok(defaults)));
        tracing::debug!(%reply, "starting at once");
    }
    let _control = match &args.broker {
        Some(broker) => Some(spawn_control(
            &ctx,
            broker,
            Arc::clone(&shared),
            runs_tx,
            defaults,
            args.journal.clone(),
            Arc::clone(&stop),
        )?),
        None => {
            drop(runs_tx);
            None
        }
    };
    status.publish(replay_status(&status_cx, &shared.lock(), None, 0.0));
    let wait_n = args.wait_subscribers.unwrap_or(cfg.wait_subscribers);
    let wait_timeout = args
        .wait_timeout
        .unwrap_or(Duration::from_millis(cfg.wait_timeout_ms));
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
    let quiet = args.quiet;
    let mut exit = ExitCode::SUCCESS;
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
        replayer.set_run(spec.speed, spec.from, spec.to);
        status.publish(replay_status(&status_cx, &shared.lock(), None, 0.0));
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
            status.publish(replay_status(&status_cx, &shared.lock(), Some(s), rate));
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
            status.publish(replay_status(
                &status_cx,
                &control,
                Some(&stats),
                stats.rate(),
            ));
            control.stopped || stop.load(Ordering::Relaxed)
        };
        if !quiet {
            eprintln!();
        }
        let identity = if args.restamp { "restamp" } else { "preserve" };
        if args.json {
            println!(
                "{}",
                summary_json(&stats, spec.speed, identity, interrupted)
            );
        } else {
            print_summary(&stats, spec.speed, interrupted);
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
    Ok(exit)
}

/// `replay --json`: one object per run, every count an integer.
fn summary_json(
    s: &ReplayStats,
    speed: Speed,
    identity: &str,
    interrupted: bool,
) -> serde_json::Value {
    serde_json::json!({
        "sent": s.sent,
        "subscribers": s.subscribers,
        "delivered": s.subscribers > 0 || s.sent == 0,
        "rate": s.rate().round() as u64,
        "gap_notices": s.gap_notices,
        "cached": s.cached,
        "duration_ns": s.elapsed.as_nanos() as u64,
        "speed": speed.to_string(),
        "identity": identity,
        "publishers": s.publishers,
        "bytes": s.bytes,
        "per_shard": s.per_shard,
        "subscriptions": s.subscriptions,
        "heartbeats_sent": s.heartbeats_sent,
        "skipped_heartbeats": s.skipped_heartbeats,
        "skipped_gap_notices": s.skipped_gap_notices,
        "skipped_invalid": s.skipped_invalid,
        "lapped": s.lapped,
        "first_seq": s.first_seq,
        "last_seq": s.last_seq,
        "first_capture_ns": s.first_capture_ns,
        "last_capture_ns": s.last_capture_ns,
        "max_late_ns": s.max_late_ns,
        "interrupted": interrupted,
    })
}

fn print_summary(s: &ReplayStats, speed: Speed, interrupted: bool) {
    println!("speed         {speed}");
    println!(
        "sent          {} (gap notices {}, cached values {}) for {} publisher(s)",
        s.sent, s.gap_notices, s.cached, s.publishers
    );
    println!("bytes         {}", fmt_bytes(s.bytes));
    println!("per shard     {:?}", s.per_shard);
    println!(
        "duration      {:.3} s{}",
        s.elapsed.as_secs_f64(),
        if interrupted { " (interrupted)" } else { "" }
    );
    println!("rate          {:.0} msg/s", s.rate());
    if let (Some(a), Some(b)) = (s.first_seq, s.last_seq) {
        println!("journal seqs  {a} ..= {b}");
    }
    if let (Some(a), Some(b)) = (s.first_capture_ns, s.last_capture_ns) {
        println!(
            "captured      {} .. {} ({:.3} s)",
            fmt_time(a),
            fmt_time(b),
            b.saturating_sub(a) as f64 / 1e9
        );
    }
    println!("max late      {:.3} ms", s.max_late_ns as f64 / 1e6);
    println!(
        "heartbeats    {} sent, {} recorded ones skipped",
        s.heartbeats_sent, s.skipped_heartbeats
    );
    println!("invalid       {}", s.skipped_invalid);
    if s.lapped > 0 {
        println!(
            "lapped        {} (the recorder overwrote records before they were replayed)",
            s.lapped
        );
    }
    println!(
        "subscribers   {} at most (subscriptions per shard at the end {:?})",
        s.subscribers, s.subscriptions
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    const T0: u64 = 1_767_364_200_000_000_000;

    fn defaults() -> RunSpec {
        RunSpec {
            speed: Speed::Times(1.0),
            from: None,
            to: None,
        }
    }

    fn body(frames: &[&str]) -> Vec<Vec<u8>> {
        frames.iter().map(|f| f.as_bytes().to_vec()).collect()
    }

    fn parse(frames: &[&str]) -> Result<RunSpec, String> {
        parse_start(&body(frames), defaults(), || Ok(T0))
    }

    #[test]
    fn start_bodies_parse_like_the_cli_flags() {
        // `tickbox call` sends one empty frame when given no body: the command line's settings.
        assert_eq!(parse(&[""]), Ok(defaults()));
        assert_eq!(parse(&[]), Ok(defaults()));
        let spec = parse(&["speed=max", "from=seq:10", "to=seq:20"]).unwrap();
        assert_eq!(spec.speed, Speed::Max);
        assert_eq!(spec.from, Some(Position::Seq(10)));
        assert_eq!(spec.to, Some(Position::Seq(20)));
        let spec = parse(&["speed=20 from=+1s to=+1500ms"]).unwrap();
        assert_eq!(spec.speed, Speed::Times(20.0));
        assert_eq!(spec.from, Some(Position::Time(T0 + 1_000_000_000)));
        assert_eq!(spec.to, Some(Position::Time(T0 + 1_500_000_000)));
        let spec = parse(&["from=2026-01-02T14:30:00Z"]).unwrap();
        assert_eq!(spec.from, Some(Position::Time(T0)));
        assert_eq!(
            parse(&["to=42"]).unwrap().to,
            Some(Position::Time(42)),
            "bare digits are ns since the epoch"
        );
    }

    #[test]
    fn bad_start_bodies_say_why() {
        for (frames, needle) in [
            (&["speed=fast"][..], "speed"),
            (&["speed=0"][..], "speed"),
            (&["velocity=2"][..], "unknown key `velocity`"),
            (&["max"][..], "not key=value"),
            (&["from=seq:x"][..], "seq:x"),
            (&["from=yesterday"][..], "yesterday"),
            (&["from=seq:20", "to=seq:10"][..], "empty range"),
            (&["from=+2s", "to=+1s"][..], "empty range"),
        ] {
            let err = parse(frames).unwrap_err();
            assert!(err.contains(needle), "{frames:?}: {err}");
        }
        let err = parse_start(&[vec![0xff, 0xfe]], defaults(), || Ok(T0)).unwrap_err();
        assert!(err.contains("UTF-8"), "{err}");
        // +DURATION on an empty journal: the reason comes through.
        let err = parse_start(&body(&["from=+1s"]), defaults(), || {
            anyhow::bail!("j.tbj is empty")
        })
        .unwrap_err();
        assert!(err.contains("empty"), "{err}");
    }

    #[test]
    fn control_runs_idle_running_stopping_done_and_again() {
        let mut c = Control::new();
        assert_eq!(c.state, RunState::Idle);
        assert_eq!(c.on_stop(), ("409 not running".into(), Effect::None));
        let (reply, effect) = c.on_start(Err("bad speed".into()));
        assert_eq!(reply, "400 bad speed");
        assert_eq!(effect, Effect::None);
        assert_eq!(c.state, RunState::Idle, "a rejected start changes nothing");

        let (reply, effect) = c.on_start(Ok(defaults()));
        assert!(reply.starts_with("200 started speed 1x"), "{reply}");
        assert_eq!(effect, Effect::Run(defaults()));
        assert_eq!((c.state, c.runs), (RunState::Running, 1));
        assert_eq!(
            c.on_start(Ok(defaults())),
            ("409 already running".into(), Effect::None)
        );
        assert_eq!(c.on_stop(), ("200 stopped".into(), Effect::Stop));
        assert_eq!(c.state, RunState::Stopping);
        assert_eq!(c.on_stop(), ("200 stopped".into(), Effect::None));
        assert_eq!(
            c.on_start(Ok(defaults())).0,
            "409 already running",
            "not before the loop has wound down"
        );
        c.on_finished();
        assert_eq!(c.state, RunState::Done);
        assert!(c.stopped);
        assert_eq!(c.on_stop().0, "409 not running");

        let fast = RunSpec {
            speed: Speed::Max,
            ..defaults()
        };
        assert_eq!(c.on_start(Ok(fast)).1, Effect::Run(fast));
        assert!(!c.stopped);
        c.on_finished();
        assert_eq!((c.state, c.runs, c.stopped), (RunState::Done, 2, false));
    }

    #[test]
    fn shared_commands_drive_the_stop_flag_and_the_run_channel() {
        let shared = Shared {
            control: Mutex::new(Control::new()),
            run_stop: AtomicBool::new(true),
        };
        let (tx, rx) = mpsc::channel();
        let reply = shared.command(&tx, |c| c.on_start(Ok(defaults())));
        assert!(reply.starts_with("200"), "{reply}");
        assert!(
            !shared.run_stop.load(Ordering::Relaxed),
            "a new run starts unstopped"
        );
        assert_eq!(rx.try_recv(), Ok(defaults()));
        assert_eq!(shared.command(&tx, Control::on_stop), "200 stopped");
        assert!(shared.run_stop.load(Ordering::Relaxed));
        shared.lock().on_finished();
        drop(rx);
        // The loop is gone: a start must not claim to be running.
        let reply = shared.command(&tx, |c| c.on_start(Ok(defaults())));
        assert!(reply.starts_with("503"), "{reply}");
        assert_eq!(shared.lock().state, RunState::Done);
    }
}
