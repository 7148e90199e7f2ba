//! `tickbox replay` (onto sockets) as a library: [`ReplayRequest`] (what was asked) settled against `[recorder]`,
//! the selection planned against the journal, the shards bound, then [`ReplaySession::run`]: the wait for
//! subscribers, every run (one, or one per `tickbox.replay.start` with `--await-start`), the close and its
//! accounting, and the exit it comes to. The binary parses flags, wires the control plane (the Majordomo control
//! service, a start barrier, the status board) and prints what the session hands its [`ReplayObserver`].

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use serde_json::Value;
use tickbox_wire::SystemClock;
use tickbox_zmqx::BackPressure;

use crate::config::RecorderConfig;
use crate::control::{ReplayController, ReplayShared, RunSpec};
use crate::error::RecorderError;
use crate::error::SelectionError;
use crate::input::Position;
use crate::progress::{stop_seq_of, ReplayProgress};
use crate::replay::{Identity, ReplayOptions, ReplayStats, Replayer};
use crate::selection::{empty_selection, ReplayAsk, ReplayPlan, TimeZone, When};
use tickbox_units::Speed;

/// What `tickbox replay` was asked, flag by flag (`None`: not given, the `[recorder]` default applies).
#[derive(Debug, Clone)]
pub struct ReplayRequest {
    /// The journals or histories: one is replayed as it is, several are merged by capture time.
    pub journals: Vec<PathBuf>,
    /// Shard endpoints to bind.
    pub bind: Vec<String>,
    /// Pace.
    pub speed: Speed,
    /// First origin time.
    pub from: Option<When>,
    /// First journal sequence.
    pub from_seq: Option<u64>,
    /// Origin time to stop before.
    pub to: Option<When>,
    /// Journal sequence to stop before.
    pub to_seq: Option<u64>,
    /// Most records per batch frame.
    pub batch: Option<u16>,
    /// Topic prefixes.
    pub topics: Vec<String>,
    /// Zone of local times.
    pub tz: TimeZone,
    /// Subscriptions per shard to wait for.
    pub wait_subscribers: Option<u64>,
    /// Subscribers in a start barrier (what to wait for when `wait_subscribers` is not given).
    pub parties: Option<u32>,
    /// The end-of-run wait for subscribers to leave.
    pub drain_timeout: Duration,
    /// The longest wait for subscribers.
    pub wait_timeout: Option<Duration>,
    /// Tail the journal at its end.
    pub follow: bool,
    /// What a slow subscriber does to the replay.
    pub back_pressure: Option<BackPressure>,
    /// The deprecated `--allow-drop`.
    pub allow_drop: bool,
    /// End at the first corrupt record instead of skipping damage.
    pub stop_on_corruption: bool,
    /// Per-shard identities instead of the original publishers'.
    pub restamp: bool,
    /// With `restamp`, shard 0's publisher id.
    pub publisher_id: Option<u32>,
    /// A control service (Majordomo) may start and stop runs: progress is reported more often.
    pub remote: bool,
    /// Wait idle for a start request (and again after each run) instead of starting at once.
    pub await_start: bool,
    /// The caller wants progress at least this often (a live view).
    pub progress_every: Option<Duration>,
}

impl Default for ReplayRequest {
    fn default() -> Self {
        ReplayRequest {
            journals: Vec::new(),
            bind: Vec::new(),
            speed: Speed::Times(1.0),
            from: None,
            from_seq: None,
            to: None,
            to_seq: None,
            batch: None,
            topics: Vec::new(),
            tz: TimeZone::UTC,
            wait_subscribers: None,
            parties: None,
            drain_timeout: Duration::from_secs(5),
            wait_timeout: None,
            follow: false,
            back_pressure: None,
            allow_drop: false,
            stop_on_corruption: false,
            restamp: false,
            publisher_id: None,
            remote: false,
            await_start: false,
            progress_every: None,
        }
    }
}

/// How a replay ends, for the exit code (the binary's table maps each to its number).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReplayExit {
    /// Done.
    Ok,
    /// An error the session reported on stderr: published to nobody, or records dropped at the close.
    Error,
    /// Damaged records were skipped.
    Corrupt,
    /// The selection matched no record.
    EmptySelection,
}

/// One run's summary, printed when it ends (`--await-start`) or once the close knows what it left undelivered.
#[derive(Debug, Clone)]
pub struct RunSummary {
    /// The run's counters.
    pub stats: ReplayStats,
    /// Its pace.
    pub speed: Speed,
    /// `preserve` or `restamp`.
    pub identity: &'static str,
    /// Stopped (Ctrl-C, a stop request) rather than reaching its end.
    pub interrupted: bool,
}

impl RunSummary {
    /// The summary as one JSON object, with `undelivered` when known.
    pub fn to_json(&self, undelivered: Option<u64>) -> Value {
        let mut summary = self
            .stats
            .summary_json(self.speed, self.identity, self.interrupted);
        if let Some(n) = undelivered {
            summary["undelivered"] = n.into();
        }
        summary
    }

    /// The summary table (newline-terminated lines), with `undelivered` when known.
    pub fn table(&self, undelivered: Option<u64>) -> String {
        let mut out = self.stats.summary_table(self.speed, self.interrupted);
        if let Some(n) = undelivered {
            out.push_str(&format!("undelivered   {n}\n"));
        }
        out
    }
}

/// Told about a replay as it goes. `notice` lines are for the operator (the binary writes them to stderr);
/// `status` snapshots are for `tickbox.replay.status`.
pub trait ReplayObserver {
    /// A line for the operator.
    fn notice(&mut self, line: &str);
    /// A status snapshot.
    fn status(&mut self, snapshot: Value);
    /// A run begins.
    fn run_started(&mut self) {}
    /// About every `progress_every` during a run: counters, the send rate now, and where the run is.
    fn progress(&mut self, _stats: &ReplayStats, _rate: f64, _progress: &ReplayProgress) {}
    /// A run ended (before its summary).
    fn run_ended(&mut self) {}
    /// A run's summary is due, with what the close left undelivered when known.
    fn summary(&mut self, summary: &RunSummary, undelivered: Option<u64>);
}

/// What the replay came to.
#[derive(Debug, Clone)]
pub struct ReplayOutcome {
    /// How it ends.
    pub exit: ReplayExit,
    /// Runs started.
    pub runs: u64,
    /// Why records were dropped at the close (one line), to say once every socket is closed.
    pub close_loss: Option<String>,
}

/// A replay planned and bound: its shards are up, nothing sent yet.
pub struct ReplaySession {
    request: ReplayRequest,
    replayer: Replayer,
    reader: Box<dyn crate::input::ReplayInput>,
    plan: ReplayPlan,
    defaults: RunSpec,
    wait_n: u64,
    wait_timeout: Duration,
    shared: Arc<ReplayShared>,
    runs_tx: Option<mpsc::Sender<RunSpec>>,
    runs_rx: mpsc::Receiver<RunSpec>,
}

/// A per-second rate from a counter sampled at each report.
struct Rate {
    last: (Instant, u64),
}

impl Rate {
    fn new() -> Self {
        Rate {
            last: (Instant::now(), 0),
        }
    }

    fn per_sec(&mut self, count: u64) -> f64 {
        let now = Instant::now();
        let (t, c) = self.last;
        self.last = (now, count);
        count.saturating_sub(c) as f64 / now.duration_since(t).as_secs_f64().max(1e-9)
    }
}

impl ReplayRequest {
    /// The journals as status snapshots and errors name them (`a,b` for several).
    pub fn journal_name(&self) -> PathBuf {
        let names: Vec<String> = self
            .journals
            .iter()
            .map(|p| p.display().to_string())
            .collect();
        PathBuf::from(names.join(","))
    }

    /// The selection asked for.
    fn ask(&self) -> ReplayAsk {
        ReplayAsk {
            topics: self.topics.clone(),
            from: self.from.clone(),
            to: self.to.clone(),
            from_seq: self.from_seq,
            to_seq: self.to_seq,
        }
    }

    /// Plans the selection against the journal (bounded work: its start and end). A window wholly outside the
    /// journal is [`RecorderError::EmptySelection`], known before anything binds or waits.
    pub fn plan(&self) -> Result<ReplayPlan, RecorderError> {
        let read_error = |e| match e {
            SelectionError::Journal(_) => RecorderError::Read {
                path: self.journal_name(),
                source: Box::new(e),
            },
            e => RecorderError::Selection(Box::new(e)),
        };
        let mut plan =
            ReplayPlan::for_journals(&self.journals, &self.ask(), &self.tz).map_err(read_error)?;
        if plan.outside_journal(&self.tz).is_some() {
            // Said with the topics the journal holds, which planning did not read.
            plan.sample_topics(&self.journals).map_err(read_error)?;
            if let Some(line) = plan.outside_journal(&self.tz) {
                return Err(RecorderError::EmptySelection(line));
            }
        }
        Ok(plan)
    }

    /// The replayer's options: the flags, else `[recorder]`.
    pub fn options(
        &self,
        cfg: &RecorderConfig,
        plan: &ReplayPlan,
        profile: tickbox_zmqx::profile::SocketProfile,
        security: tickbox_auth::Security,
    ) -> ReplayOptions {
        // Remote status wants fresher numbers than the terminal does; the live view may want them sooner still.
        let base = if self.remote {
            Duration::from_millis(250)
        } else {
            Duration::from_secs(1)
        };
        ReplayOptions {
            bind: self.bind.clone(),
            speed: self.speed,
            from: plan.from,
            to: plan.to,
            identity: if self.restamp {
                Identity::Restamp
            } else {
                Identity::Preserve
            },
            publisher_id_base: self.publisher_id.unwrap_or(cfg.publisher_id_base),
            send_hwm: cfg.send_hwm,
            back_pressure: match self.back_pressure {
                Some(back_pressure) => back_pressure,
                None if self.allow_drop => BackPressure::Drop,
                None => cfg.back_pressure,
            },
            window: cfg.pacing_window.0,
            heartbeat_interval: cfg.heartbeat_interval.0,
            follow: self.follow,
            batch_max_records: self.batch.unwrap_or(cfg.replay_batch_records),
            batch_max_bytes: usize::try_from(cfg.replay_batch_bytes.0).unwrap_or(usize::MAX),
            selection: (!plan.selection.is_all()).then(|| plan.selection.clone()),
            max_subscription_bytes: cfg.max_subscription_bytes,
            socket_profile: profile,
            security,
            stop_on_corruption: self.stop_on_corruption,
            progress_every: self.progress_every.map_or(base, |every| every.min(base)),
            ..ReplayOptions::default()
        }
    }

    /// Subscriptions per shard to wait for: the flag, else the barrier's parties, else `[recorder]`.
    pub fn wait_n(&self, cfg: &RecorderConfig) -> u64 {
        self.wait_subscribers
            .or(self.parties.map(u64::from))
            .unwrap_or(cfg.wait_subscribers)
    }
}

impl ReplaySession {
    /// Plans the selection, opens the journal and binds the shards (made by `gate`, whose section must be
    /// `security`).
    pub fn bind(
        gate: &tickbox_auth::Gate,
        request: ReplayRequest,
        cfg: &RecorderConfig,
        profile: tickbox_zmqx::profile::SocketProfile,
        security: tickbox_auth::Security,
    ) -> Result<Self, RecorderError> {
        let plan = request.plan()?;
        let reader = crate::merge::open_input(&request.journals)?;
        let opts = request.options(cfg, &plan, profile, security);
        let defaults = RunSpec {
            speed: request.speed,
            from: plan.from,
            to: plan.to,
        };
        let mut replayer = Replayer::bind(gate, opts)?;
        // Damage before a publisher's first intact record is announced from the ledger's first sequence (of a
        // single journal: merged inputs each begin where their own recording did).
        if let [journal] = request.journals.as_slice() {
            replayer.expect_from_ledger(journal);
        }
        replayer.set_drain_timeout(request.drain_timeout)?;
        let shared = Arc::new(ReplayShared::new());
        let (runs_tx, runs_rx) = mpsc::channel();
        if !request.await_start {
            let reply = shared.command(&runs_tx, |c| c.on_start(Ok(defaults)));
            tracing::debug!(%reply, "starting at once");
        }
        Ok(ReplaySession {
            wait_n: request.wait_n(cfg),
            wait_timeout: request.wait_timeout.unwrap_or(cfg.wait_timeout.0),
            request,
            replayer,
            reader,
            plan,
            defaults,
            shared,
            runs_tx: Some(runs_tx),
            runs_rx,
        })
    }

    /// The shards' endpoints (a `*` port resolved).
    pub fn endpoints(&self) -> &[String] {
        self.replayer.endpoints()
    }

    /// What a remote control drives: the state shared with the loop, the channel runs go through, and the
    /// defaults a start request's unset fields take. Without this call nothing but the first run (and Ctrl-C)
    /// ever reaches the loop.
    pub fn remote_control(
        &mut self,
    ) -> Option<(Arc<ReplayShared>, mpsc::Sender<RunSpec>, RunSpec)> {
        let runs = self.runs_tx.take()?;
        Some((Arc::clone(&self.shared), runs, self.defaults))
    }

    /// Subscriptions per shard the session waits for.
    pub fn wait_subscribers(&self) -> u64 {
        self.wait_n
    }

    fn status(&self, control: &ReplayController, stats: Option<&ReplayStats>, rate: f64) -> Value {
        stats.cloned().unwrap_or_default().status_json(
            &self.request.journal_name(),
            self.replayer.endpoints(),
            control,
            rate,
        )
    }

    /// Waits for subscribers (unless idle for a start request), replays every run that comes, then closes the
    /// shards with the drain rule and accounts for what they left. `stop` is Ctrl-C.
    pub fn run(
        mut self,
        stop: &AtomicBool,
        observer: &mut dyn ReplayObserver,
    ) -> Result<ReplayOutcome, RecorderError> {
        // Without a remote control the loop gets the first run only; the channel's end tells it so.
        let remote = self.runs_tx.is_none();
        self.runs_tx = None;
        observer.status(self.status(&self.shared.lock(), None, 0.0));
        let (wait_n, wait_timeout) = (self.wait_n, self.wait_timeout);
        let await_start = self.request.await_start;
        if wait_n > 0 && !await_start {
            observer.notice(&format!(
                "replay: waiting for {wait_n} subscriber(s) per shard (up to {:?}; --wait-for-subscribers 0 starts at once)",
                wait_timeout
            ));
            if !self
                .replayer
                .wait_subscribers(wait_n, Some(wait_timeout), stop)?
            {
                if stop.load(Ordering::Relaxed) {
                    observer
                        .notice("replay: interrupted while waiting for subscribers; nothing sent");
                    return Ok(ReplayOutcome {
                        exit: ReplayExit::Ok,
                        runs: 0,
                        close_loss: None,
                    });
                }
                return Err(RecorderError::Settings(format!(
                    "no subscriber within {:?}: waited for {wait_n} subscription(s) on every shard ({}), have {:?}; \
                     start the subscriber first, or raise --wait-timeout",
                    wait_timeout,
                    self.replayer.endpoints().join(", "),
                    self.replayer.poll_subscriptions()?
                )));
            }
        }
        if await_start {
            observer.notice("replay: idle, waiting for tickbox.replay.start");
        }
        // Without a remote control nothing but Ctrl-C stops a run; with one, the control thread folds Ctrl-C into
        // the run's own stop flag.
        let shared = Arc::clone(&self.shared);
        let run_stop: &AtomicBool = if remote { &shared.run_stop } else { stop };
        let mut exit = ReplayExit::Ok;
        // The last run's summary, printed once the close knows what was left undelivered (without --await-start).
        let mut last_summary: Option<RunSummary> = None;
        // A run skipped damaged records: exit 5 at the end, whatever else went right.
        let mut corrupt = false;
        let mut runs = 0u64;
        loop {
            let spec = match self.runs_rx.recv_timeout(Duration::from_millis(100)) {
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
            self.replayer.set_run(spec.speed, spec.from, spec.to);
            observer.status(self.status(&shared.lock(), None, 0.0));
            if await_start
                && wait_n > 0
                && !self
                    .replayer
                    .wait_subscribers(wait_n, Some(wait_timeout), run_stop)?
            {
                // A remote-controlled replay stays up: this run is refused, the next start may find subscribers.
                shared.lock().on_finished();
                tracing::error!(
                    "no subscriber within {wait_timeout:?} ({wait_n} subscription(s) per shard wanted, have {:?}); run not started",
                    self.replayer.poll_subscriptions()?
                );
                if stop.load(Ordering::Relaxed) {
                    break;
                }
                continue;
            }
            let stats = self.one_run(spec, stop, run_stop, observer)?;
            let interrupted = {
                let control = &mut shared.lock();
                control.on_finished();
                observer.status(self.status(control, Some(&stats), stats.rate()));
                control.stopped() || stop.load(Ordering::Relaxed)
            };
            // The bar goes before the summary, never under it.
            observer.run_ended();
            let summary = RunSummary {
                stats: stats.clone(),
                speed: spec.speed,
                identity: if self.request.restamp {
                    "restamp"
                } else {
                    "preserve"
                },
                interrupted,
            };
            if await_start {
                // A remote-controlled replay stays up between runs: each run's summary now, what its close left
                // undelivered at the end.
                observer.summary(&summary, None);
            } else {
                let held = self.replayer.undelivered();
                if held > 0 && !interrupted {
                    observer.notice(&format!(
                        "replay: run ended with {held} record(s) still queued for subscribers; waiting up to \
                         --drain-timeout {:?} for them (Ctrl-C stops the wait)",
                        self.request.drain_timeout
                    ));
                }
                last_summary = Some(summary);
            }
            let nobody = stats.sent > 0 && stats.subscribers == 0;
            if nobody {
                observer.notice(&format!(
                    "replay: delivered to no subscriber: {} message(s) went nowhere (no subscription on any shard during the run)",
                    stats.sent
                ));
            }
            // The exit reflects the last run (the only one without --await-start).
            exit = if nobody {
                ReplayExit::Error
            } else {
                ReplayExit::Ok
            };
            if stats.damaged_ranges > 0 {
                observer.notice(&format!(
                    "replay: the journal is damaged: {} record(s) ({} bytes) in {} damaged range(s) were skipped, {} gap \
                     notice(s) sent for them (tickbox journal verify lists the ranges)",
                    stats.corrupt_records, stats.corrupt_bytes, stats.damaged_ranges, stats.damage_gap_notices
                ));
                corrupt = true;
            }
            if !self.plan.asked.is_empty() && stats.sent == 0 && !interrupted && !await_start {
                let o = self
                    .plan
                    .overview_with_topics(&self.request.journals)
                    .map_err(|e| RecorderError::Selection(Box::new(e)))?;
                observer.notice(&empty_selection(&self.plan.asked, &o, &self.request.tz));
                exit = ReplayExit::EmptySelection;
            }
            if !await_start || stop.load(Ordering::Relaxed) {
                break;
            }
            observer.notice("replay: done, waiting for tickbox.replay.start");
        }
        if await_start {
            // Stopped while idle there is no run summary; say that it ended, and after how many runs.
            observer.notice(&format!("replay: stopped after {runs} run(s)"));
        }
        // Ctrl-C or SIGTERM, before or during the wait for subscribers to leave: the operator asked to stop now,
        // so the drain wait is skipped and what is queued gets only a short grace to reach the subscribers.
        // Whatever libzmq still holds when the wait (or the grace) ends is not delivered: counted exactly
        // (records, see Replayer::undelivered), dropped at the close, reported in the summary, exit 1.
        let drain = self.request.drain_timeout;
        let closing = self.replayer.close_wait(drain, Duration::ZERO, stop)?;
        let undelivered = closing.undelivered();
        if closing.subscribers_stayed && undelivered > 0 {
            observer.notice(&format!(
                "replay: {} subscription(s) still open after --drain-timeout {:?}; closing now: a subscriber that had \
                 not read everything by then loses its unread tail (raise --drain-timeout, or let subscribers exit \
                 when the stream ends, e.g. subscribe --idle-exit)",
                self.replayer.subscriptions_now(),
                drain
            ));
        }
        if let Some(summary) = last_summary {
            observer.summary(&summary, Some(undelivered));
        }
        let close_loss = tickbox_feed::CloseLoss::after_close(
            undelivered,
            closing.interrupted,
            drain,
            tickbox_feed::INTERRUPT_GRACE,
        )
        .map(|loss| {
            loss.message(
                "replay",
                undelivered,
                "record",
                "--drain-timeout waits for it",
            )
        });
        if close_loss.is_some() {
            exit = ReplayExit::Error;
        }
        if corrupt {
            exit = ReplayExit::Corrupt;
        }
        Ok(ReplayOutcome {
            exit,
            runs,
            close_loss,
        })
    }

    /// One run of `spec`, its progress reported to `observer`.
    fn one_run(
        &mut self,
        spec: RunSpec,
        stop: &AtomicBool,
        run_stop: &AtomicBool,
        observer: &mut dyn ReplayObserver,
    ) -> Result<ReplayStats, RecorderError> {
        let start_seq = self.reader.position_seq();
        // A time selection's bar ends at `--to` itself, not at the clock slack read past it.
        let bar_to = match self.plan.selection.window().1 {
            Some(t) if spec.to == self.plan.to => Some(Position::Time(t)),
            _ => spec.to,
        };
        let stop_seq = match self.request.journals.as_slice() {
            [one] => stop_seq_of(one, bar_to),
            _ => None,
        };
        observer.run_started();
        let mut send_rate = Rate::new();
        let shared = Arc::clone(&self.shared);
        let (journal, endpoints) = (
            self.request.journal_name(),
            self.replayer.endpoints().to_vec(),
        );
        self.replayer.run(
            &mut *self.reader,
            &SystemClock,
            run_stop,
            |s: &ReplayStats| {
                if stop.load(Ordering::Relaxed) {
                    // Backstop should the control thread be gone.
                    shared.run_stop.store(true, Ordering::Relaxed);
                }
                let rate = send_rate.per_sec(s.sent);
                observer.status(s.status_json(&journal, &endpoints, &shared.lock(), rate));
                observer.progress(s, rate, &ReplayProgress::of(s, rate, start_seq, stop_seq));
            },
        )
    }
}
