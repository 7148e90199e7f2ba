//! The subscriber that owns the shard threads and the worker pool: start-up, live status, shutdown.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use tickbox_workers::{
    Dispatch, InlineWorker, Meta, Worker, WorkerOutcome, WorkerPool, WorkerPoolConfig,
    PARCEL_RECORDS,
};

use crate::catch_up_phase::{CatchUpHandle, CatchUpPlan};
use crate::clock::{ClockOffset, ClockTable};
use crate::handoff::{choose_handoff, handoff_plan, HandoffChoice, HandoffPlan, InlineSink};
use crate::hook::SnailHook;
use crate::nic::{check_nic, endpoint_via_nic};
use crate::report::{lateness_histogram, Fatal, Report, SubscriberShardReport, WorkerReport};
use crate::settings::ShardSettings;
use crate::shard::{run_shard, LvcSnapshot};
use crate::shared::{LiveShardCounters, Shared};
use crate::snail::SharedThreshold;
use crate::{Handoff, SnailMode, SubscriberConfig, SubscriberError};
use tickbox_units::format_duration;
use tickbox_wire::history::StartPoint;

/// A running Black Box subscriber.
pub struct Subscriber<W: Worker> {
    shared: Arc<Shared>,
    shards: Vec<JoinHandle<SubscriberShardReport>>,
    pool: Option<WorkerPool<W, SnailHook>>,
    threshold: SharedThreshold,
    clocks: Arc<ClockTable>,
    dispatch: Dispatch,
    /// The hand-off this run uses, and why (`handoff = "auto"` resolved).
    handoff: HandoffChoice,
    snail_mode: SnailMode,
    drain_timeout: Duration,
    started: Instant,
    /// Set by the pool when a worker panics; shards watch it so none stays blocked on a dead worker's queue.
    workers_failed: Arc<AtomicBool>,
    /// The LVC snapshot the first shard fetches (`lvc_snapshot`).
    snapshot: Option<LvcSnapshot>,
    /// The catch-up (`catch_up`): the first shard fetches the history, every shard holds its live records.
    catch_up: Option<CatchUpHandle>,
    /// `handoff = "inline"`: where each shard leaves its own worker's outcome (no pool then).
    inline: Vec<Arc<Mutex<InlineOutcome<W>>>>,
}

/// How a shard's own worker ended (`handoff = "inline"`).
enum InlineOutcome<W> {
    /// Still running, or its shard never started.
    Running,
    Done(WorkerOutcome<W, SnailHook>),
    Panicked,
}

/// A shard's own worker and where its outcome goes once the shard is done with it. A panic in the worker is
/// caught here, so it costs that worker's results, not the shard thread: the shard sees `failed` and stops, as
/// it does when a pool thread panics.
struct InlineSlot<W: Worker> {
    index: usize,
    worker: Option<InlineWorker<W, SnailHook>>,
    outcome: Arc<Mutex<InlineOutcome<W>>>,
    failed: Arc<AtomicBool>,
}

impl<W: Worker> InlineSlot<W> {
    #[inline]
    fn guarded(&mut self, f: impl FnOnce(&mut InlineWorker<W, SnailHook>)) {
        let Some(worker) = self.worker.as_mut() else {
            return;
        };
        let run = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(worker)));
        if run.is_err() {
            tracing::error!(worker = self.index, "inline worker panicked");
            self.worker = None;
            *self.outcome.lock().unwrap_or_else(|p| p.into_inner()) = InlineOutcome::Panicked;
            self.failed.store(true, Ordering::Release);
        }
    }
}

impl<W: Worker> InlineSink for InlineSlot<W> {
    #[inline]
    fn deliver(&mut self, frame: &[u8], meta: Meta, now: u64) {
        self.guarded(|w| w.deliver(frame, meta, now));
    }

    #[inline]
    fn deliver_guide(&mut self, topic: &[u8], body: &[u8], now: u64) {
        self.guarded(|w| w.deliver_guide(topic, body, now));
    }

    fn idle(&mut self) {
        self.guarded(|w| w.idle());
    }

    fn finish(mut self: Box<Self>) {
        let Some(worker) = self.worker.take() else {
            return;
        };
        let done = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| worker.finish()));
        let outcome = match done {
            Ok(outcome) => InlineOutcome::Done(outcome),
            Err(_) => {
                tracing::error!(
                    worker = self.index,
                    "inline worker panicked in its final flush"
                );
                InlineOutcome::Panicked
            }
        };
        *self.outcome.lock().unwrap_or_else(|p| p.into_inner()) = outcome;
    }
}

impl<W: Worker> Subscriber<W> {
    /// Starts the shards (one per `config.shards` entry) and the worker pool; returns once every socket is
    /// connected. `make` builds worker `i`.
    pub fn start(
        ctx: &zmq::Context,
        config: &SubscriberConfig,
        workers: &WorkerPoolConfig,
        mut make: impl FnMut(usize) -> W,
    ) -> Result<Self, SubscriberError> {
        validate(config)?;
        let count = workers.count_for(config.shards.len());
        if count == 0 {
            return Err(SubscriberError::Workers(
                tickbox_workers::WorkerError::NoWorkers,
            ));
        }
        let threshold = SharedThreshold::new(config.max_lateness.0);
        let clocks = Arc::new(ClockTable::new(
            u64::try_from(config.clock_skew_warn.0.as_nanos()).unwrap_or(u64::MAX),
        ));
        let shared = Arc::new(Shared::new(config.shards.len(), false));
        let handoff = choose_handoff(config, workers);
        tracing::info!(handoff = %handoff.handoff, reason = %handoff.reason, "hand-off");
        let inline = handoff.handoff == Handoff::Inline;
        if inline && count != config.shards.len() {
            return Err(SubscriberError::Config(format!(
                "handoff = \"inline\" runs worker i on shard i: give as many workers as shards ({} shard(s), {} \
                 worker(s))",
                config.shards.len(),
                count
            )));
        }
        if inline && !workers.cores.is_empty() {
            tracing::info!(
                "handoff = \"inline\": each worker runs on its shard's thread and core; [workers] cores is not used"
            );
        }
        let (mut plans, inboxes) = handoff_plan(
            config,
            handoff.handoff,
            count,
            workers.shard_runs_asleep,
            PARCEL_RECORDS,
        );
        let everything = config.topics.is_empty() || config.topics.iter().any(|t| t.is_empty());
        let mut subscriber = Subscriber {
            shared: Arc::clone(&shared),
            shards: Vec::with_capacity(config.shards.len()),
            pool: None,
            threshold: threshold.clone(),
            clocks: Arc::clone(&clocks),
            dispatch: config.dispatch,
            handoff,
            snail_mode: config.snail_mode,
            drain_timeout: config.drain_timeout.0,
            started: Instant::now(),
            workers_failed: Arc::new(AtomicBool::new(false)),
            snapshot: config.lvc_snapshot.clone().map(|ep| {
                LvcSnapshot::new(ep, config.lvc_snapshot_timeout.0, config.security.clone())
            }),
            catch_up: catch_up_plan(config)?
                .map(|plan| CatchUpHandle::new(plan, config.shards.len())),
            inline: Vec::new(),
        };
        if inline {
            for index in 0..config.shards.len() {
                let outcome = Arc::new(Mutex::new(InlineOutcome::Running));
                let worker = InlineWorker::new(
                    index,
                    make(index),
                    snail_hook(&threshold, config.snail_mode, &clocks, &shared),
                    workers.batch,
                );
                plans.push(HandoffPlan::Inline(Box::new(InlineSlot {
                    index,
                    worker: Some(worker),
                    outcome: Arc::clone(&outcome),
                    failed: Arc::clone(&subscriber.workers_failed),
                })));
                subscriber.inline.push(outcome);
            }
        }
        let (ready_tx, ready_rx) = mpsc::channel();
        for ((index, shard), plan) in config.shards.iter().enumerate().zip(plans) {
            let settings = ShardSettings {
                index,
                shard: shard.clone(),
                topics: if everything {
                    Vec::new()
                } else {
                    config.topics.clone()
                },
                gaps: everything,
                gap_policy: config.gap_policy,
                threshold: threshold.clone(),
                snail_mode: config.snail_mode,
                clocks: Arc::clone(&clocks),
                dispatch: config.dispatch,
                framing: config.framing,
                workers: count,
                receive_hwm: config.receive_hwm,
                profile: tickbox_zmqx::profile::with_io_thread(
                    &config.socket_profile,
                    shard.io_thread,
                ),
                security: config.security.clone(),
                poll_ms: config.poll_interval.0.as_millis().clamp(1, 1_000) as i64,
                workers_failed: Arc::clone(&subscriber.workers_failed),
            };
            // The first shard fetches the LVC snapshot (one request for the whole subscriber).
            let snapshot = if index == 0 {
                subscriber.snapshot.clone()
            } else {
                None
            };
            let catch_up = subscriber.catch_up.clone();
            let ctx = ctx.clone();
            let shared = Arc::clone(&shared);
            let ready = ready_tx.clone();
            let handle = std::thread::Builder::new()
                .name(format!("tickbox-shard-{index}"))
                .spawn(move || run_shard(ctx, settings, plan, shared, ready, snapshot, catch_up))
                .map_err(SubscriberError::Spawn)?;
            subscriber.shards.push(handle);
        }
        drop(ready_tx);
        for _ in 0..config.shards.len() {
            match ready_rx.recv_timeout(Duration::from_secs(10)) {
                Ok(Ok(_index)) => {}
                Ok(Err(err)) => return Err(err),
                Err(_) => return Err(SubscriberError::NotStarted(subscriber.shards.len())),
            }
        }
        if !inline {
            let failed = Arc::clone(&subscriber.workers_failed);
            let pool = WorkerPool::spawn(ctx, inboxes, workers, failed, |i| {
                let hook = snail_hook(&threshold, config.snail_mode, &clocks, &shared);
                (make(i), hook)
            })?;
            subscriber.pool = Some(pool);
        }
        subscriber.started = Instant::now();
        shared.go.store(true, Ordering::Release);
        Ok(subscriber)
    }

    /// The fatal event, once the snail (or a gap under `die`) has fired.
    pub fn fatal(&self) -> Option<Fatal> {
        self.shared
            .fatal
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Whether the snail (or a gap under `die`) has fired; shards and workers are stopping and the owner should
    /// shut down. Cheaper than [`Subscriber::fatal`] for polling.
    pub fn is_tripped(&self) -> bool {
        self.shared.tripped.load(Ordering::Acquire)
    }

    /// Whether a worker thread has panicked: the run is incomplete and the owner should shut down (the shards
    /// already stop). [`Subscriber::shutdown_partial`] reports which.
    pub fn workers_failed(&self) -> bool {
        self.workers_failed.load(Ordering::Acquire)
    }

    /// The LVC snapshot (`lvc_snapshot`), if one is configured: a handle whose report stays readable after
    /// shutdown.
    pub fn lvc_snapshot(&self) -> Option<LvcSnapshot> {
        self.snapshot.clone()
    }

    /// The catch-up (`catch_up`), if one is configured: a handle whose summary stays readable after shutdown.
    pub fn catch_up(&self) -> Option<CatchUpHandle> {
        self.catch_up.clone()
    }

    /// Messages forwarded to workers so far.
    pub fn forwarded(&self) -> u64 {
        self.shared
            .live
            .iter()
            .map(|c| c.forwarded.load(Ordering::Acquire))
            .sum()
    }

    /// The live snail threshold: shards and workers read it per message, so [`SharedThreshold::set`] on this
    /// handle (e.g. from a configuration watch) changes the verdict from the next message on.
    pub fn threshold(&self) -> SharedThreshold {
        self.threshold.clone()
    }

    /// How shards hand messages to workers.
    pub fn dispatch(&self) -> Dispatch {
        self.dispatch
    }

    /// The hand-off this run uses, and why.
    pub fn handoff(&self) -> &HandoffChoice {
        &self.handoff
    }

    /// How lateness is measured in this run.
    pub fn snail_mode(&self) -> SnailMode {
        self.snail_mode
    }

    /// Estimated clock offsets so far, by publisher.
    pub fn clock_offsets(&self) -> Vec<ClockOffset> {
        self.clocks.offsets()
    }

    /// Per-shard counters so far, for status reporting while running.
    pub fn live_shards(&self) -> Vec<LiveShardCounters> {
        self.shared
            .live
            .iter()
            .enumerate()
            .map(|(index, c)| LiveShardCounters {
                index,
                received: c.received.load(Ordering::Relaxed),
                handshakes: c.handshakes.load(Ordering::Relaxed),
                forwarded: c.forwarded.load(Ordering::Relaxed),
                gaps: c.gaps.load(Ordering::Relaxed),
                late: c.late.load(Ordering::Relaxed),
                lateness_p50_ns: c.lateness_p50_ns.load(Ordering::Relaxed),
                lateness_p99_ns: c.lateness_p99_ns.load(Ordering::Relaxed),
                lateness_max_ns: c.lateness_max_ns.load(Ordering::Relaxed),
            })
            .collect()
    }

    /// The metrics of this subscriber, read at each scrape (`subscribe --metrics`); `shards` is the config's.
    pub fn metrics(&self, shards: &[crate::SubscriberShardConfig]) -> crate::SubscriberMetrics {
        crate::SubscriberMetrics {
            shared: Arc::clone(&self.shared),
            shards: shards.to_vec(),
            pool: self.pool.as_ref().map(|p| p.counters()),
            threshold: self.threshold.clone(),
            clocks: Arc::clone(&self.clocks),
            catch_up: self.catch_up.clone(),
        }
    }

    /// Asks every shard for fresh lateness percentiles in [`Subscriber::live_shards`]; each answers at its next
    /// burst boundary, so a periodic reporter calls this after each read and sees the answer next time.
    pub fn request_lateness(&self) {
        for c in self.shared.live.iter() {
            c.lateness_wanted.store(true, Ordering::Relaxed);
        }
    }

    /// Runs until `stop` is set, `duration` has passed or the subscriber trips, then shuts down.
    pub fn run(
        self,
        stop: &AtomicBool,
        duration: Option<Duration>,
    ) -> Result<Report<W>, SubscriberError> {
        let deadline = duration.map(|d| Instant::now() + d);
        while !stop.load(Ordering::Relaxed)
            && !self.is_tripped()
            && !self.workers_failed()
            && deadline.is_none_or(|d| Instant::now() < d)
        {
            std::thread::sleep(Duration::from_millis(5));
        }
        self.shutdown()
    }

    /// Stops the shards, lets the workers finish what was forwarded (bounded by `drain_timeout`; at once after a
    /// trip), joins every thread and reports. A panicked worker is an error
    /// ([`WorkerError::Panicked`](tickbox_workers::WorkerError::Panicked)) and the report is lost: use
    /// [`shutdown_partial`](Self::shutdown_partial) to keep it.
    pub fn shutdown(self) -> Result<Report<W>, SubscriberError> {
        match self.shutdown_partial()? {
            (_, Some(err)) => Err(SubscriberError::Workers(err)),
            (report, None) => Ok(report),
        }
    }

    /// [`shutdown`](Self::shutdown) that keeps the report when workers panicked: it then covers the shards and
    /// the surviving workers, and the error names the first worker that panicked (the others are logged).
    /// Returns within `drain_timeout` plus a few seconds however the workers ended.
    pub fn shutdown_partial(
        mut self,
    ) -> Result<(Report<W>, Option<tickbox_workers::WorkerError>), SubscriberError> {
        let shared = Arc::clone(&self.shared);
        shared.stop.store(true, Ordering::Release);
        let pool = self.pool.take();
        let tripped = || shared.tripped.load(Ordering::Acquire);
        if let Some(pool) = &pool {
            if tripped() {
                pool.abort();
            }
        }
        // Shards blocked on a full hand-off need the workers to keep consuming, so wait for the shards first.
        let n = self.shards.len();
        let shards_deadline = Instant::now() + self.drain_timeout + Duration::from_secs(5);
        while shared.shards_done.load(Ordering::Acquire) < n {
            // No abort for a panicked worker: a shard hands off with a timeout and gives up once `workers_failed`
            // is set, so the survivors can still process what they were given.
            if Instant::now() > shards_deadline {
                if let Some(pool) = &pool {
                    pool.abort();
                }
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        let forwarded: u64 = self.forwarded();
        let mut outcomes = Vec::new();
        let mut panicked = Vec::new();
        if let Some(pool) = pool {
            let deadline = Instant::now() + self.drain_timeout;
            // A panicked worker never takes the rest of its queue: waiting for it would only run out the clock.
            while pool.taken() < forwarded
                && !tripped()
                && !pool.failed()
                && Instant::now() < deadline
            {
                std::thread::sleep(Duration::from_millis(1));
            }
            if tripped() {
                pool.abort();
            }
            pool.stop();
            let taken = pool.taken();
            if taken < forwarded && !tripped() && !pool.failed() {
                tracing::warn!(
                    "workers did not drain within {}: {} forwarded messages left unprocessed",
                    format_duration(self.drain_timeout),
                    forwarded - taken
                );
            }
            let (joined, dead) = pool.join_partial();
            outcomes = joined;
            panicked = dead;
        }
        shared.release.store(true, Ordering::Release);
        let mut shards = Vec::with_capacity(n);
        for (index, handle) in self.shards.drain(..).enumerate() {
            shards.push(
                handle
                    .join()
                    .map_err(|_| SubscriberError::ShardPanicked(index))?,
            );
        }
        // Inline workers: their shards are done, so every outcome is in.
        for (index, slot) in self.inline.iter().enumerate() {
            let outcome = std::mem::replace(
                &mut *slot.lock().unwrap_or_else(|p| p.into_inner()),
                InlineOutcome::Running,
            );
            match outcome {
                InlineOutcome::Done(outcome) => outcomes.push(outcome),
                InlineOutcome::Panicked => panicked.push(index),
                InlineOutcome::Running => {}
            }
        }
        let taken: u64 = outcomes.iter().map(|o| o.taken).sum();
        let workers = outcomes.into_iter().map(worker_report).collect();
        if !panicked.is_empty() {
            tracing::error!(
                ?panicked,
                "worker thread(s) panicked: their messages and results are missing from the report"
            );
        }
        let failure = panicked
            .first()
            .map(|&i| tickbox_workers::WorkerError::Panicked(i));
        let report = Report {
            shards,
            workers,
            fatal: self.fatal(),
            unprocessed: forwarded.saturating_sub(taken),
            elapsed: self.started.elapsed(),
            dispatch: self.dispatch,
            handoff: self.handoff.clone(),
            snail_mode: self.snail_mode,
            clock_offsets: self.clocks.offsets(),
            clock_untracked: self.clocks.untracked(),
        };
        Ok((report, failure))
    }
}

impl<W: Worker> Drop for Subscriber<W> {
    fn drop(&mut self) {
        // Only reached with threads still running when start failed half-way or shutdown was skipped.
        self.shared.stop.store(true, Ordering::Release);
        if let Some(pool) = self.pool.take() {
            pool.abort();
            pool.stop();
            let _ = pool.join();
        }
        self.shared.release.store(true, Ordering::Release);
        for handle in self.shards.drain(..) {
            let _ = handle.join();
        }
    }
}

/// A worker's dequeue-side snail.
fn snail_hook(
    threshold: &SharedThreshold,
    mode: SnailMode,
    clocks: &Arc<ClockTable>,
    shared: &Arc<Shared>,
) -> SnailHook {
    SnailHook {
        threshold: threshold.clone(),
        mode,
        clocks: Arc::clone(clocks),
        shared: Arc::clone(shared),
        late: 0,
        lateness: lateness_histogram(),
    }
}

fn worker_report<W>(o: WorkerOutcome<W, SnailHook>) -> WorkerReport<W> {
    WorkerReport {
        index: o.index,
        worker: o.worker,
        processed: o.processed,
        discarded: o.discarded,
        malformed: o.malformed,
        late: o.hook.late,
        lateness: o.hook.lateness,
    }
}

/// The catch-up a config asks for, checked against what it cannot be combined with.
fn catch_up_plan(config: &SubscriberConfig) -> Result<Option<CatchUpPlan>, SubscriberError> {
    let Some(endpoint) = &config.catch_up else {
        return Ok(None);
    };
    let refuse = |why: &str| Err(SubscriberError::Config(format!("catch_up: {why}")));
    if config.lvc_snapshot.is_some() {
        return refuse("not with lvc_snapshot (the history holds every value the snapshot would)");
    }
    if config.handoff == Handoff::Inline && config.shards.len() > 1 {
        return refuse(
            "handoff = \"inline\" with several shards cannot take the history through the first shard to every \
             worker; use the ring hand-off",
        );
    }
    if config.framing != crate::Framing::Tickbox {
        return refuse("needs framing = \"tickbox\" (the seam follows publisher sequences)");
    }
    let from = config.catch_up_from.trim();
    let start = if from.eq_ignore_ascii_case("start") {
        StartPoint::Start
    } else {
        let ns = tickbox_units::parse_time(from, || {
            Err(tickbox_units::UnitsError::Time {
                input: from.to_owned(),
                reason: "a time relative to the journal's first record cannot be resolved from here; give an \
                         RFC 3339 time, ns since the epoch, or start"
                    .to_owned(),
            })
        })
        .map_err(|e| SubscriberError::Config(format!("catch_up_from: {e}")))?;
        StartPoint::Time(ns)
    };
    Ok(Some(CatchUpPlan {
        endpoint: endpoint.clone(),
        start,
        budget_bytes: config.catch_up_budget.0,
        timeout: config.catch_up_timeout.0,
        security: config.security.clone(),
    }))
}

fn validate(config: &SubscriberConfig) -> Result<(), SubscriberError> {
    if config.shards.is_empty() {
        return Err(SubscriberError::Config(
            "no shards: give at least one endpoint to connect to".into(),
        ));
    }
    for (i, shard) in config.shards.iter().enumerate() {
        if shard.connect.is_empty() {
            return Err(SubscriberError::Config(format!(
                "shard {i} has no endpoint"
            )));
        }
        if let Some(nic) = &shard.nic {
            for ep in &shard.connect {
                endpoint_via_nic(ep, nic)?;
            }
            // Before any socket exists: a missing NIC would otherwise connect to nothing, silently.
            check_nic(nic)?;
        }
    }
    // Publishers drop a subscriber whose prefix is longer than this (libzmq's tries recurse per byte), so a
    // longer local filter would only ever receive nothing: refuse it up front, saying why.
    if let Some(long) = config
        .topics
        .iter()
        .find(|t| t.len() > tickbox_zmqx::DEFAULT_MAX_SUBSCRIPTION_BYTES)
    {
        return Err(SubscriberError::Config(format!(
            "topic filter of {} bytes (starting {:?}) is longer than the {} bytes publishers accept",
            long.len(),
            long.chars().take(16).collect::<String>(),
            tickbox_zmqx::DEFAULT_MAX_SUBSCRIPTION_BYTES
        )));
    }
    Ok(())
}
