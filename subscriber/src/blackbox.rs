//! Shard threads, the worker-side snail hook, and the subscriber that owns both.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use serde::Serialize;
use tickbox_wire::{
    now_ns, Flags, Header, Kind, MessageRef, PublisherLedger, SequenceEvent, SequenceTotals,
    SequenceTracker,
};
use tickbox_workers::{
    worker_for_topic, Delivery, DequeueHook, Dispatch, Inbox, Worker, WorkerOutcome, WorkerPool,
    WorkerPoolConfig,
};

use crate::clock::{delay_ns, ClockOffset, ClockTable};
use crate::nic::check_nic;
use crate::snail::{lateness_ns, SharedThreshold, SnailVerdict};
use crate::{GapPolicy, SnailMode, SubscriberConfig, SubscriberError, SubscriberShardConfig};
use tickbox_units::format_duration;

/// Where a late message was caught.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Stage {
    /// On receipt by a shard's SUB socket.
    Shard,
    /// On dequeue by a worker: includes time queued behind a slow worker.
    Worker,
}

/// The message that made the snail fire.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SnailEvent {
    pub stage: Stage,
    /// Shard or worker index, per `stage`.
    pub index: usize,
    pub publisher: u32,
    pub topic: String,
    pub sequence: u64,
    pub lateness_ns: u64,
    pub threshold_ns: u64,
    pub send_time_ns: u64,
    pub received_ns: u64,
}

/// A gap that tripped the subscriber under `gap_policy = "die"`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct GapFatal {
    pub shard: usize,
    pub publisher: u32,
    pub topic: String,
    pub first_missing: u64,
    pub last_missing: u64,
}

/// Why a subscriber stopped itself.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "reason", rename_all = "snake_case")]
pub enum Fatal {
    Snail(SnailEvent),
    Gap(GapFatal),
}

impl Fatal {
    /// One line of JSON for machines (`SNAIL {…}` on stderr).
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).unwrap_or_else(|err| format!("{{\"error\":\"{err}\"}}"))
    }
}

/// A histogram for lateness in nanoseconds: 1 ns to one hour at 3 significant digits.
pub fn lateness_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 3_600_000_000_000, 3).expect("static histogram bounds are valid")
}

/// What one shard did.
#[derive(Debug, Clone)]
pub struct SubscriberShardReport {
    pub index: usize,
    pub endpoints: Vec<String>,
    /// Frames received, malformed ones included.
    pub received: u64,
    /// Decoded messages handed to the workers.
    pub forwarded: u64,
    pub malformed: u64,
    /// LVC cached values (exempt from the snail and gap checks).
    pub cached: u64,
    /// Gap notices (`Kind::Gap`: sequences a replayed journal lacks). Accounted for by the sequence tracker, exempt
    /// from the snail, and not forwarded to workers.
    pub gap_notices: u64,
    /// Messages past the snail threshold.
    pub late: u64,
    /// Gap events (this hop's own losses) and sequences missing in them.
    pub gaps: u64,
    pub missing: u64,
    pub restarts: u64,
    pub publishers: usize,
    /// The sequence tracker's totals (all zero when a topic filter makes gaps expected and tracking is off).
    pub sequence: SequenceTotals,
    /// Per-publisher accounts, in order of first appearance.
    pub ledgers: Vec<PublisherLedger>,
    /// Messages forwarded to each worker's queue (`by_topic`); with `round_robin` all go to the one shared queue
    /// (index 0) and the workers' `processed` counts say who took them.
    pub forwarded_per_worker: Vec<u64>,
    /// Receive lateness, ns.
    pub lateness: Histogram<u64>,
}

/// What one worker thread did, with its worker handed back for inspection.
#[derive(Debug)]
pub struct WorkerReport<W> {
    pub index: usize,
    pub worker: W,
    pub processed: u64,
    pub discarded: u64,
    pub malformed: u64,
    pub late: u64,
    /// Dequeue lateness, ns.
    pub lateness: Histogram<u64>,
}

/// Everything a subscriber did, returned by [`Subscriber::shutdown`].
#[derive(Debug)]
pub struct Report<W> {
    pub shards: Vec<SubscriberShardReport>,
    pub workers: Vec<WorkerReport<W>>,
    pub fatal: Option<Fatal>,
    /// Forwarded by shards but never taken by a worker (only non-zero after an abort or a drain timeout).
    pub unprocessed: u64,
    pub elapsed: Duration,
    pub dispatch: Dispatch,
    pub snail_mode: SnailMode,
    /// Estimated clock offset per publisher (minimum observed one-way delay), by publisher id.
    pub clock_offsets: Vec<ClockOffset>,
    /// Messages from publishers beyond the clock table's bound (judged strictly).
    pub clock_untracked: u64,
}

impl<W> Report<W> {
    pub fn received(&self) -> u64 {
        self.shards.iter().map(|s| s.received).sum()
    }
    pub fn forwarded(&self) -> u64 {
        self.shards.iter().map(|s| s.forwarded).sum()
    }
    pub fn processed(&self) -> u64 {
        self.workers.iter().map(|w| w.processed).sum()
    }
    pub fn malformed(&self) -> u64 {
        self.shards.iter().map(|s| s.malformed).sum::<u64>()
            + self.workers.iter().map(|w| w.malformed).sum::<u64>()
    }
    pub fn gaps(&self) -> u64 {
        self.shards.iter().map(|s| s.gaps).sum()
    }
    pub fn missing(&self) -> u64 {
        self.shards.iter().map(|s| s.missing).sum()
    }
    pub fn late(&self) -> u64 {
        self.shards.iter().map(|s| s.late).sum::<u64>()
            + self.workers.iter().map(|w| w.late).sum::<u64>()
    }
    /// Sequence totals over all shards.
    pub fn sequence_totals(&self) -> SequenceTotals {
        let mut t = SequenceTotals::default();
        for s in &self.shards {
            let q = &s.sequence;
            t.publishers += q.publishers;
            t.received += q.received;
            t.missing += q.missing;
            t.recorded_missing += q.recorded_missing;
            t.duplicates += q.duplicates;
            t.reordered += q.reordered;
            t.restarts += q.restarts;
            t.anomalies += q.anomalies;
            t.gap_events += q.gap_events;
            t.recorded_gap_events += q.recorded_gap_events;
            t.untracked += q.untracked;
            t.cached += q.cached;
        }
        t
    }
    /// Gap notices received over all shards.
    pub fn gap_notices(&self) -> u64 {
        self.shards.iter().map(|s| s.gap_notices).sum()
    }
    /// Per-publisher accounts over all shards (a publisher seen by two shards is summed), by publisher id.
    pub fn ledgers(&self) -> Vec<PublisherLedger> {
        let mut out: Vec<PublisherLedger> = Vec::new();
        for l in self.shards.iter().flat_map(|s| &s.ledgers) {
            match out.iter_mut().find(|m| m.publisher == l.publisher) {
                None => out.push(*l),
                Some(m) => {
                    m.last_sequence = m.last_sequence.max(l.last_sequence);
                    m.received += l.received;
                    m.missing += l.missing;
                    m.recorded_missing += l.recorded_missing;
                    m.duplicates += l.duplicates;
                    m.reordered += l.reordered;
                    m.restarts += l.restarts;
                    m.anomalies += l.anomalies;
                    m.gap_events += l.gap_events;
                    m.recorded_gap_events += l.recorded_gap_events;
                }
            }
        }
        out.sort_by_key(|l| l.publisher);
        out
    }
    /// Receive lateness over all shards.
    pub fn receive_lateness(&self) -> Histogram<u64> {
        let mut h = lateness_histogram();
        for s in &self.shards {
            let _ = h.add(&s.lateness);
        }
        h
    }
    /// Dequeue lateness over all workers.
    pub fn dequeue_lateness(&self) -> Histogram<u64> {
        let mut h = lateness_histogram();
        for w in &self.workers {
            let _ = h.add(&w.lateness);
        }
        h
    }
}

/// One shard's live counters, written only by that shard (a relaxed store of its own running total) and read by
/// the owner for status. One cache line per shard so shards never share a line.
#[repr(align(64))]
#[derive(Default)]
struct LiveShard {
    received: AtomicU64,
    forwarded: AtomicU64,
    gaps: AtomicU64,
    late: AtomicU64,
}

/// A shard's counters while the subscriber runs (see [`Subscriber::live_shards`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct LiveShardCounters {
    pub index: usize,
    pub received: u64,
    pub forwarded: u64,
    pub gaps: u64,
    pub late: u64,
}

/// State shared by the shard threads, the worker hooks and the owner.
struct Shared {
    /// Shards may start receiving (set once the workers are connected).
    go: AtomicBool,
    stop: AtomicBool,
    /// Shards may close their sockets (set once the workers are done with them).
    release: AtomicBool,
    tripped: AtomicBool,
    fatal: Mutex<Option<Fatal>>,
    live: Vec<LiveShard>,
    shards_done: AtomicUsize,
}

impl Shared {
    /// Records the first fatal event and logs it once; later ones (other threads racing) are dropped.
    fn trip(&self, fatal: Fatal) {
        let mut slot = self.fatal.lock().unwrap_or_else(|p| p.into_inner());
        if slot.is_none() {
            match &fatal {
                Fatal::Snail(e) => tracing::error!(
                    "Suicidal Snail: {stage} {index} got publisher {publisher} topic {topic} sequence {seq} \
                     {late} late (threshold {threshold}); subscriber exits",
                    stage = match e.stage {
                        Stage::Shard => "shard",
                        Stage::Worker => "worker",
                    },
                    index = e.index,
                    publisher = e.publisher,
                    topic = e.topic,
                    seq = e.sequence,
                    late = format_duration(Duration::from_nanos(e.lateness_ns)),
                    threshold = format_duration(Duration::from_nanos(e.threshold_ns)),
                ),
                Fatal::Gap(g) => tracing::error!(
                    "sequence gap with gap_policy=die: shard {} publisher {} missed {}..={} (at topic {}); \
                     subscriber exits",
                    g.shard,
                    g.publisher,
                    g.first_missing,
                    g.last_missing,
                    g.topic
                ),
            }
            *slot = Some(fatal);
        }
        self.tripped.store(true, Ordering::Release);
    }
}

/// The worker-side snail: checks dequeue lateness and records it.
pub struct SnailHook {
    threshold: SharedThreshold,
    mode: SnailMode,
    clocks: Arc<ClockTable>,
    shared: Arc<Shared>,
    late: u64,
    lateness: Histogram<u64>,
}

impl std::fmt::Debug for SnailHook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SnailHook")
            .field("threshold", &self.threshold.get())
            .field("late", &self.late)
            .finish()
    }
}

impl DequeueHook for SnailHook {
    #[inline]
    fn on_dequeue(&mut self, msg: &MessageRef<'_>, delivery: &Delivery) -> bool {
        if self.shared.tripped.load(Ordering::Relaxed) {
            return false;
        }
        let header = msg.header();
        if header.flags.contains(Flags::CACHED) || header.kind == Kind::Gap {
            return true;
        }
        let snail = self.threshold.snail();
        let min_delay = match self.mode {
            SnailMode::Strict => None,
            SnailMode::SkewTolerant => self.clocks.min_delay(header.publisher_id),
        };
        let lateness = lateness_ns(
            self.mode,
            delivery.dequeued_ns,
            header.send_time_ns,
            min_delay,
        );
        match snail.judge(lateness) {
            SnailVerdict::OnTime { lateness_ns } => {
                self.lateness.saturating_record(lateness_ns.max(1));
                true
            }
            SnailVerdict::Exempt => true,
            SnailVerdict::Late { lateness_ns } => {
                self.late += 1;
                self.lateness.saturating_record(lateness_ns);
                self.shared.trip(Fatal::Snail(SnailEvent {
                    stage: Stage::Worker,
                    index: delivery.worker,
                    publisher: header.publisher_id,
                    topic: msg.topic().to_owned(),
                    sequence: header.sequence,
                    lateness_ns,
                    threshold_ns: snail.threshold_ns(),
                    send_time_ns: header.send_time_ns,
                    received_ns: delivery.dequeued_ns,
                }));
                false
            }
        }
    }
}

/// The NIC endpoint rewrite, with its error in this crate's terms.
fn endpoint_via_nic(endpoint: &str, nic: &str) -> Result<String, SubscriberError> {
    tickbox_zmqx::endpoint_via_nic(endpoint, nic)
        .map_err(|e| SubscriberError::Config(e.to_string()))
}

/// A running Black Box subscriber.
pub struct Subscriber<W: Worker> {
    shared: Arc<Shared>,
    shards: Vec<JoinHandle<SubscriberShardReport>>,
    pool: Option<WorkerPool<W, SnailHook>>,
    threshold: SharedThreshold,
    clocks: Arc<ClockTable>,
    dispatch: Dispatch,
    snail_mode: SnailMode,
    drain_timeout: Duration,
    started: Instant,
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
        if workers.count == 0 {
            return Err(SubscriberError::Workers(
                tickbox_workers::WorkerError::NoWorkers,
            ));
        }
        let threshold = SharedThreshold::new(config.max_lateness.0);
        let clocks = Arc::new(ClockTable::new(
            u64::try_from(config.clock_skew_warn.0.as_nanos()).unwrap_or(u64::MAX),
        ));
        let shared = Arc::new(Shared {
            go: AtomicBool::new(false),
            stop: AtomicBool::new(false),
            release: AtomicBool::new(false),
            tripped: AtomicBool::new(false),
            fatal: Mutex::new(None),
            live: (0..config.shards.len())
                .map(|_| LiveShard::default())
                .collect(),
            shards_done: AtomicUsize::new(0),
        });
        // The hand-off: both ends are in this process, so a bounded channel moves the received `zmq::Message`
        // itself (measured 2-2.8x the messages/s of an inproc PUSH per worker: benches/handoff.rs). by_topic: one
        // FIFO per worker that every shard feeds; round_robin: one queue all workers take from.
        let hwm = usize::try_from(config.handoff_hwm).unwrap_or(0).max(1);
        let (senders, inboxes) = match config.dispatch {
            Dispatch::ByTopic => {
                let (tx, rx): (Vec<_>, Vec<_>) = (0..workers.count)
                    .map(|_| crossbeam_channel::bounded::<zmq::Message>(hwm))
                    .unzip();
                (tx, rx.into_iter().map(Inbox::Channel).collect::<Vec<_>>())
            }
            Dispatch::RoundRobin => {
                let (tx, rx) = crossbeam_channel::bounded::<zmq::Message>(hwm * workers.count);
                (
                    vec![tx],
                    (0..workers.count)
                        .map(|_| Inbox::Channel(rx.clone()))
                        .collect(),
                )
            }
        };
        let everything = config.topics.is_empty() || config.topics.iter().any(|t| t.is_empty());
        let mut subscriber = Subscriber {
            shared: Arc::clone(&shared),
            shards: Vec::with_capacity(config.shards.len()),
            pool: None,
            threshold: threshold.clone(),
            clocks: Arc::clone(&clocks),
            dispatch: config.dispatch,
            snail_mode: config.snail_mode,
            drain_timeout: config.drain_timeout.0,
            started: Instant::now(),
        };
        let (ready_tx, ready_rx) = mpsc::channel();
        for (index, shard) in config.shards.iter().enumerate() {
            let settings = ShardSettings {
                index,
                shard: shard.clone(),
                handoff: senders.clone(),
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
                workers: workers.count,
                rcv_hwm: config.rcv_hwm,
                poll_ms: config.poll_ms.clamp(1, 1_000) as i64,
            };
            let ctx = ctx.clone();
            let shared = Arc::clone(&shared);
            let ready = ready_tx.clone();
            let handle = std::thread::Builder::new()
                .name(format!("tickbox-shard-{index}"))
                .spawn(move || run_shard(ctx, settings, shared, ready))
                .map_err(SubscriberError::Spawn)?;
            subscriber.shards.push(handle);
        }
        drop(ready_tx);
        // Only the shards hold senders from now on: when they are all gone, the workers see the end.
        drop(senders);
        for _ in 0..config.shards.len() {
            match ready_rx.recv_timeout(Duration::from_secs(10)) {
                Ok(Ok(_index)) => {}
                Ok(Err(err)) => return Err(err),
                Err(_) => return Err(SubscriberError::NotStarted(subscriber.shards.len())),
            }
        }
        let pool = WorkerPool::spawn_with_inboxes(ctx, inboxes, workers, |i| {
            let hook = SnailHook {
                threshold: threshold.clone(),
                mode: config.snail_mode,
                clocks: Arc::clone(&clocks),
                shared: Arc::clone(&shared),
                late: 0,
                lateness: lateness_histogram(),
            };
            (make(i), hook)
        })?;
        subscriber.pool = Some(pool);
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

    pub fn is_tripped(&self) -> bool {
        self.shared.tripped.load(Ordering::Acquire)
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
                forwarded: c.forwarded.load(Ordering::Relaxed),
                gaps: c.gaps.load(Ordering::Relaxed),
                late: c.late.load(Ordering::Relaxed),
            })
            .collect()
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
            && deadline.is_none_or(|d| Instant::now() < d)
        {
            std::thread::sleep(Duration::from_millis(5));
        }
        self.shutdown()
    }

    /// Stops the shards, lets the workers finish what was forwarded (bounded by `drain_timeout`; at once after a
    /// trip), joins every thread and reports.
    pub fn shutdown(mut self) -> Result<Report<W>, SubscriberError> {
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
            if Instant::now() > shards_deadline {
                if let Some(pool) = &pool {
                    pool.abort();
                }
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        let forwarded: u64 = self.forwarded();
        let mut outcomes = Vec::new();
        if let Some(pool) = pool {
            let deadline = Instant::now() + self.drain_timeout;
            while pool.taken() < forwarded && !tripped() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(1));
            }
            if tripped() {
                pool.abort();
            }
            pool.stop();
            let taken = pool.taken();
            if taken < forwarded && !tripped() {
                tracing::warn!(
                    "workers did not drain within {}: {} forwarded messages left unprocessed",
                    format_duration(self.drain_timeout),
                    forwarded - taken
                );
            }
            outcomes = pool.join()?;
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
        let taken: u64 = outcomes.iter().map(|o| o.taken).sum();
        let workers = outcomes.into_iter().map(worker_report).collect();
        Ok(Report {
            shards,
            workers,
            fatal: self.fatal(),
            unprocessed: forwarded.saturating_sub(taken),
            elapsed: self.started.elapsed(),
            dispatch: self.dispatch,
            snail_mode: self.snail_mode,
            clock_offsets: self.clocks.offsets(),
            clock_untracked: self.clocks.untracked(),
        })
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
    Ok(())
}

struct ShardSettings {
    index: usize,
    shard: SubscriberShardConfig,
    /// One sender per worker (by_topic) or one shared queue (round_robin).
    handoff: Vec<crossbeam_channel::Sender<zmq::Message>>,
    topics: Vec<String>,
    gaps: bool,
    gap_policy: GapPolicy,
    threshold: SharedThreshold,
    snail_mode: SnailMode,
    clocks: Arc<ClockTable>,
    dispatch: Dispatch,
    workers: usize,
    rcv_hwm: i32,
    poll_ms: i64,
}

type Ready = mpsc::Sender<Result<usize, SubscriberError>>;

fn open_shard_socket(
    ctx: &zmq::Context,
    s: &ShardSettings,
) -> Result<zmq::Socket, SubscriberError> {
    let shard = s.index;
    let zerr = |what| {
        move |source| SubscriberError::Zmq {
            shard,
            what,
            source,
        }
    };
    let sub = ctx.socket(zmq::SUB).map_err(zerr("create SUB"))?;
    sub.set_linger(0).map_err(zerr("set linger"))?;
    sub.set_rcvhwm(s.rcv_hwm).map_err(zerr("set rcvhwm"))?;
    if s.topics.is_empty() {
        sub.set_subscribe(b"").map_err(zerr("subscribe"))?;
    } else {
        for topic in &s.topics {
            sub.set_subscribe(topic.as_bytes())
                .map_err(zerr("subscribe"))?;
        }
        // Heartbeats tell silence from death, whatever the data filter.
        if !s.topics.iter().any(|t| "H.".starts_with(t.as_str())) {
            sub.set_subscribe(b"H.").map_err(zerr("subscribe"))?;
        }
    }
    for endpoint in &s.shard.connect {
        let target = match &s.shard.nic {
            Some(nic) => endpoint_via_nic(endpoint, nic)?,
            None => endpoint.clone(),
        };
        sub.connect(&target)
            .map_err(|source| SubscriberError::Connect {
                shard,
                endpoint: target.clone(),
                source,
            })?;
    }
    Ok(sub)
}

/// Logs at most once a second, counting what it held back.
struct RateLimited {
    next_ns: u64,
    suppressed: u64,
}

impl RateLimited {
    fn new() -> Self {
        RateLimited {
            next_ns: 0,
            suppressed: 0,
        }
    }
    /// `Some(suppressed since last time)` when a line may be written now.
    fn allow(&mut self, now_ns: u64) -> Option<u64> {
        if now_ns >= self.next_ns {
            self.next_ns = now_ns + 1_000_000_000;
            Some(std::mem::take(&mut self.suppressed))
        } else {
            self.suppressed += 1;
            None
        }
    }
}

fn run_shard(
    ctx: zmq::Context,
    s: ShardSettings,
    shared: Arc<Shared>,
    ready: Ready,
) -> SubscriberShardReport {
    let index = s.index;
    tickbox_zmqx::pin_if_configured(s.shard.core, &format!("shard {index}"));
    let mut report = SubscriberShardReport {
        index,
        endpoints: s.shard.connect.clone(),
        received: 0,
        forwarded: 0,
        malformed: 0,
        cached: 0,
        gap_notices: 0,
        late: 0,
        gaps: 0,
        missing: 0,
        restarts: 0,
        publishers: 0,
        sequence: SequenceTotals::default(),
        ledgers: Vec::new(),
        forwarded_per_worker: vec![0; s.workers.max(1)],
        lateness: lateness_histogram(),
    };
    let sub = match open_shard_socket(&ctx, &s) {
        Ok(sub) => {
            let _ = ready.send(Ok(index));
            sub
        }
        Err(err) => {
            let _ = ready.send(Err(err));
            shared.shards_done.fetch_add(1, Ordering::AcqRel);
            return report;
        }
    };
    drop(ready);
    while !shared.go.load(Ordering::Acquire) && !shared.stop.load(Ordering::Acquire) {
        std::thread::sleep(Duration::from_millis(1));
    }
    receive_loop(&s, &shared, &sub, &mut report);
    shared.shards_done.fetch_add(1, Ordering::AcqRel);
    // Closing the PUSH with linger 0 would drop what the workers have not taken yet: wait for the release.
    while !shared.release.load(Ordering::Acquire) {
        std::thread::sleep(Duration::from_millis(1));
    }
    drop(sub);
    report
}

/// Rate-limited logs of the sequence events that are counted, not fatal.
struct SequenceLogs {
    gap: RateLimited,
    recorded: RateLimited,
    restart: RateLimited,
    duplicate: RateLimited,
    reordered: RateLimited,
    anomaly: RateLimited,
    untracked: RateLimited,
}

impl SequenceLogs {
    fn new() -> Self {
        SequenceLogs {
            gap: RateLimited::new(),
            recorded: RateLimited::new(),
            restart: RateLimited::new(),
            duplicate: RateLimited::new(),
            reordered: RateLimited::new(),
            anomaly: RateLimited::new(),
            untracked: RateLimited::new(),
        }
    }
}

/// Logs one non-fatal sequence event (at most one line per kind of event per second).
fn log_sequence_event(shard: usize, event: &SequenceEvent, logs: &mut SequenceLogs, now: u64) {
    match *event {
        SequenceEvent::InOrder | SequenceEvent::Exempt => {}
        SequenceEvent::First {
            publisher,
            session,
            sequence,
        } => tracing::debug!(
            shard,
            publisher,
            session,
            sequence,
            "first message from publisher"
        ),
        SequenceEvent::Gap {
            publisher,
            first_missing,
            last_missing,
            ..
        } => {
            if let Some(suppressed) = logs.gap.allow(now) {
                tracing::warn!(
                    shard,
                    publisher,
                    first_missing,
                    last_missing,
                    suppressed,
                    "sequence gap: messages lost before this subscriber"
                );
            }
        }
        SequenceEvent::RecordedGap {
            publisher,
            first_missing,
            last_missing,
            ..
        } => {
            if let Some(suppressed) = logs.recorded.allow(now) {
                tracing::info!(
                    shard,
                    publisher,
                    first_missing,
                    last_missing,
                    suppressed,
                    "recorded gap: the journal this stream is replayed from lacks these sequences"
                );
            }
        }
        SequenceEvent::Restart {
            publisher,
            previous_session,
            previous,
            session,
            sequence,
        } => {
            if let Some(suppressed) = logs.restart.allow(now) {
                tracing::info!(
                    shard,
                    publisher,
                    previous_session,
                    previous,
                    session,
                    sequence,
                    suppressed,
                    "publisher restarted; counting starts again"
                );
            }
        }
        SequenceEvent::Duplicate {
            publisher,
            sequence,
        } => {
            if let Some(suppressed) = logs.duplicate.allow(now) {
                tracing::warn!(shard, publisher, sequence, suppressed, "duplicate sequence");
            }
        }
        SequenceEvent::Reordered {
            publisher,
            sequence,
        } => {
            if let Some(suppressed) = logs.reordered.allow(now) {
                tracing::info!(
                    shard,
                    publisher,
                    sequence,
                    suppressed,
                    "late arrival inside an earlier gap: no longer missing"
                );
            }
        }
        SequenceEvent::Anomaly {
            publisher,
            last,
            sequence,
        } => {
            if let Some(suppressed) = logs.anomaly.allow(now) {
                tracing::warn!(
                    shard,
                    publisher,
                    last,
                    sequence,
                    suppressed,
                    "implausible sequence jump (forged or corrupt header): counted as an anomaly, ignored"
                );
            }
        }
        SequenceEvent::Untracked { publisher } => {
            if let Some(suppressed) = logs.untracked.allow(now) {
                tracing::warn!(
                    shard,
                    publisher,
                    suppressed,
                    "too many publishers: this one's sequences are not tracked"
                );
            }
        }
    }
}

fn receive_loop(
    s: &ShardSettings,
    shared: &Shared,
    sub: &zmq::Socket,
    report: &mut SubscriberShardReport,
) {
    let pushes = &s.handoff;
    let index = s.index;
    let live = &shared.live[index];
    let mut tracker = SequenceTracker::new();
    let mut malformed_log = RateLimited::new();
    let mut logs = SequenceLogs::new();
    let by_topic = s.dispatch == Dispatch::ByTopic && pushes.len() > 1;
    let skew_tolerant = s.snail_mode == SnailMode::SkewTolerant;
    let mut msg = zmq::Message::new();
    loop {
        if shared.stop.load(Ordering::Relaxed) || shared.tripped.load(Ordering::Relaxed) {
            break;
        }
        match sub.recv(&mut msg, zmq::DONTWAIT) {
            Ok(()) => {}
            Err(zmq::Error::EAGAIN) => {
                let _ = sub.poll(zmq::POLLIN, s.poll_ms);
                continue;
            }
            Err(zmq::Error::EINTR) => continue,
            Err(err) => {
                tracing::error!(shard = index, "receive failed, shard stops: {err}");
                break;
            }
        }
        report.received += 1;
        live.received.store(report.received, Ordering::Relaxed);
        let now = now_ns();
        let view = match MessageRef::decode(&msg) {
            Ok(view) => view,
            Err(err) => {
                report.malformed += 1;
                if let Some(suppressed) = malformed_log.allow(now) {
                    tracing::warn!(
                        shard = index,
                        malformed_total = report.malformed,
                        suppressed,
                        len = msg.len(),
                        "malformed frame dropped: {err}"
                    );
                }
                continue;
            }
        };
        let header: Header = *view.header();
        let notice = header.kind == Kind::Gap;
        // Cached values are old by design; a gap notice's send time says when a journal was replayed, not how
        // late market data is. Neither is timed, nor teaches the clock table anything.
        if header.flags.contains(Flags::CACHED) {
            report.cached += 1;
        } else if notice {
            report.gap_notices += 1;
        } else {
            let (min_delay, warning) = s
                .clocks
                .observe(header.publisher_id, delay_ns(now, header.send_time_ns));
            if let Some(w) = warning {
                tracing::warn!(
                    shard = index,
                    publisher = w.publisher,
                    offset = %format_signed(w.offset_ns),
                    "publisher clock offset beyond clock_skew_warn (minimum observed delay; positive: its clock \
                     is behind ours){}",
                    if skew_tolerant { "" } else { "; snail_mode = \"skew_tolerant\" judges lateness relative to it" }
                );
            }
            let lateness = lateness_ns(
                s.snail_mode,
                now,
                header.send_time_ns,
                if skew_tolerant { min_delay } else { None },
            );
            let snail = s.threshold.snail();
            match snail.judge(lateness) {
                SnailVerdict::OnTime { lateness_ns } => {
                    report.lateness.saturating_record(lateness_ns.max(1));
                }
                SnailVerdict::Exempt => {}
                SnailVerdict::Late { lateness_ns } => {
                    report.late += 1;
                    live.late.store(report.late, Ordering::Relaxed);
                    report.lateness.saturating_record(lateness_ns);
                    shared.trip(Fatal::Snail(SnailEvent {
                        stage: Stage::Shard,
                        index,
                        publisher: header.publisher_id,
                        topic: view.topic().to_owned(),
                        sequence: header.sequence,
                        lateness_ns,
                        threshold_ns: snail.threshold_ns(),
                        send_time_ns: header.send_time_ns,
                        received_ns: now,
                    }));
                    break;
                }
            }
        }
        if s.gaps {
            let event = tracker.on_message(&view);
            if let SequenceEvent::Gap {
                publisher,
                first_missing,
                last_missing,
                ..
            } = event
            {
                report.gaps += 1;
                live.gaps.store(report.gaps, Ordering::Relaxed);
                if s.gap_policy == GapPolicy::Die {
                    shared.trip(Fatal::Gap(GapFatal {
                        shard: index,
                        publisher,
                        topic: view.topic().to_owned(),
                        first_missing,
                        last_missing,
                    }));
                    break;
                }
            }
            log_sequence_event(index, &event, &mut logs, now);
        }
        if notice {
            // Accounted for above; workers get market data only (see `tickbox_workers::Worker`).
            continue;
        }
        let target = if by_topic {
            worker_for_topic(view.topic().as_bytes(), pushes.len())
        } else {
            0
        };
        // Hand the received message itself to a worker: no copy. A full queue blocks (back-pressure); workers
        // that are gone (an abort) end the shard.
        let out = std::mem::replace(&mut msg, zmq::Message::new());
        if pushes[target].send(out).is_err() {
            tracing::error!(shard = index, "workers are gone, shard stops");
            break;
        }
        report.forwarded += 1;
        report.forwarded_per_worker[target] += 1;
        live.forwarded.store(report.forwarded, Ordering::Release);
    }
    report.sequence = tracker.totals();
    report.ledgers = tracker.ledgers().copied().collect();
    report.missing = report.sequence.missing;
    report.restarts = report.sequence.restarts;
    report.publishers = tracker.publisher_count();
}

/// A signed duration for logs: `+1.5s` (publisher behind) or `-10s` (ahead).
fn format_signed(ns: i64) -> String {
    let d = format_duration(Duration::from_nanos(ns.unsigned_abs()));
    if ns < 0 {
        format!("-{d}")
    } else {
        format!("+{d}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rate_limited_log_counts_what_it_suppresses() {
        let mut log = RateLimited::new();
        assert_eq!(log.allow(5), Some(0));
        assert_eq!(log.allow(6), None);
        assert_eq!(log.allow(7), None);
        assert_eq!(log.allow(1_000_000_005), Some(2));
    }

    #[test]
    fn snail_json_names_everything_a_pager_needs() {
        let fatal = Fatal::Snail(SnailEvent {
            stage: Stage::Worker,
            index: 2,
            publisher: 7,
            topic: "Q.XNAS.AAPL".into(),
            sequence: 42,
            lateness_ns: 6_000_000,
            threshold_ns: 5_000_000,
            send_time_ns: 1,
            received_ns: 6_000_001,
        });
        let v: serde_json::Value = serde_json::from_str(&fatal.to_json()).unwrap();
        assert_eq!(v["reason"], "snail");
        assert_eq!(v["stage"], "worker");
        assert_eq!(v["topic"], "Q.XNAS.AAPL");
        assert_eq!(v["lateness_ns"], 6_000_000);
    }
}
