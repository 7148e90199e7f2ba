//! The pool of pinned PULL threads.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tickbox_units::HumanDuration;
use tickbox_wire::now_ns;

use crate::desk::{Desk, Desked, Woken};
use crate::idle_spin::{IdleSpin, Look};
use crate::parcel::{Item, Parcel, Recycler};
use crate::record::{Meta, Record};
use crate::{Delivery, Worker};

/// `idle_spin`'s default: sleep at once. Chosen by `bench latency --handoff ring` on a 2-core machine, quiet and
/// with `--background-load 1`, beside 200 µs of looking (the book's performance chapter has the figures): a worker
/// that looks holds the core that libzmq's I/O thread and the shard need until the scheduler takes it off, which
/// put the ring's p99 at 1.5-3.5 times raw where sleeping kept it near 1, and cost two ring workers 10-40 % of
/// their throughput. Since the shard runs a sleeping worker's last records of a burst itself
/// (`shard_runs_asleep`), sleeping no longer costs those records a wake-up.
const DEFAULT_IDLE_SPIN: Duration = Duration::ZERO;
/// The longest `idle_spin` honoured: past it a sleeping worker's wake-up is no longer the cost that matters.
const MAX_IDLE_SPIN: Duration = Duration::from_millis(10);

/// The `[workers]` section of the deployment config.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct WorkerPoolConfig {
    /// Worker threads; every shard feeds them (which messages each gets: `dispatch` in `[subscriber]`). Unset: one
    /// per shard ([`WorkerPoolConfig::count_for`]), which lets a subscriber run each worker on its shard's thread
    /// (the inline hand-off) where the dispatch allows it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub count: Option<usize>,
    /// OS CPU ids for the worker threads in order; threads beyond the list run unpinned.
    pub cores: Vec<usize>,
    /// Messages handled before `Worker::flush` is forced even if more are queued.
    pub batch: usize,
    /// Receive high-water mark of each worker's PULL socket, in messages (pools fed through endpoints; the Black Box
    /// hands over through in-process queues sized by `[subscriber] handoff_hwm`).
    pub hwm: i32,
    /// How often an idle worker checks for shutdown (clamped to 1 ms ..= 1 s).
    pub poll_interval: HumanDuration,
    /// How long a worker fed through a ring (`[subscriber] handoff = "ring"`) keeps looking for the next parcel
    /// before it sleeps until woken (at most 10 ms; `0s`, the default, sleeps at once). While records arrive
    /// closer together than this, and the worker has a core to itself, it never sleeps, so a record does not wait
    /// for a sleeping thread to be woken; a worker taken off its core while it looks sleeps at once for the next
    /// 20 ms. Worth setting only where every worker has a core no other busy thread wants.
    pub idle_spin: HumanDuration,
    /// Whether a shard that ends a burst runs its last records on their worker itself when that worker sleeps
    /// with nothing queued (ring hand-off), instead of waking it: no wake-up, and so no free core, stands
    /// between receipt and the worker for them ([`Desk`]). The shard stops doing so for a while after two runs in
    /// a row that took longer than a wake-up costs on a busy machine (2 ms), so a slow worker does not hold it
    /// back from its socket. `false`: every record runs on its worker's own thread, which is woken for it.
    pub shard_runs_asleep: bool,
    /// `[context.sockets.workers]`, copied here by the binary; applied to each worker's PULL socket (pools fed
    /// through endpoints) before it connects, `hwm` above winning over the profile's `rcvhwm` only when the
    /// profile leaves it unset (see `tickbox_zmqx::profile`).
    #[serde(skip)]
    pub socket_profile: tickbox_zmqx::profile::SocketProfile,
}

impl Default for WorkerPoolConfig {
    fn default() -> Self {
        Self {
            count: None,
            cores: Vec::new(),
            batch: 256,
            hwm: 1_000,
            poll_interval: HumanDuration(Duration::from_millis(50)),
            idle_spin: HumanDuration(DEFAULT_IDLE_SPIN),
            shard_runs_asleep: true,
            socket_profile: tickbox_zmqx::profile::SocketProfile::default(),
        }
    }
}

impl WorkerPoolConfig {
    /// The worker threads for `shards` sources: `count` where set, else one per shard (at least one).
    pub fn count_for(&self, shards: usize) -> usize {
        self.count.unwrap_or(shards.max(1))
    }
}

/// Errors starting or running a pool.
#[derive(Debug, thiserror::Error)]
pub enum WorkerError {
    /// A worker thread's socket set-up failed.
    #[error("worker {worker}: {what}: {source}")]
    Zmq {
        /// Index of the worker thread.
        worker: usize,
        /// The step that failed (creating the socket, setting an option, ...).
        what: &'static str,
        /// libzmq's error.
        #[source]
        source: zmq::Error,
    },
    /// A worker's PULL socket could not connect to one of its endpoints.
    #[error("worker {worker}: cannot connect to {endpoint}: {source}")]
    Connect {
        /// Index of the worker thread.
        worker: usize,
        /// The endpoint refused.
        endpoint: String,
        /// libzmq's error.
        #[source]
        source: zmq::Error,
    },
    /// The OS refused to create a worker thread.
    #[error("cannot spawn worker thread: {0}")]
    Spawn(#[source] std::io::Error),
    /// A worker thread neither reported ready nor failed within the 10 s start-up wait. The number is the pool's
    /// thread count, not the stalled thread's index, which is not known.
    #[error("worker {0} did not start")]
    NotStarted(usize),
    /// Worker thread `n` panicked; its outcome (and its worker's state) is lost.
    #[error("worker thread {0} panicked")]
    Panicked(usize),
    /// `count` was 0.
    #[error("a pool needs at least one worker")]
    NoWorkers,
    /// The number of inboxes (or endpoint lists) given differs from `count`.
    #[error("{workers} workers but {lists} endpoint lists")]
    Sources {
        /// `count` from the config.
        workers: usize,
        /// Inboxes or endpoint lists given.
        lists: usize,
    },
}

/// Runs on the worker thread before the worker sees a message: the subscriber's Suicidal Snail check at dequeue
/// time, which is the only place that can see how long a message waited behind a slow worker.
pub trait DequeueHook: Send + 'static {
    /// Returns `false` to stop processing: the thread then only discards (and counts) until told to stop.
    fn on_dequeue(&mut self, rec: &Record<'_>, delivery: &Delivery) -> bool;

    /// The same for a Guide message ([`Worker::on_guide`]), which has no header to judge: `false` stops
    /// processing as above. Admits everything by default.
    #[inline]
    fn on_dequeue_guide(&mut self, _delivery: &Delivery) -> bool {
        true
    }
}

/// A hook that admits everything.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoHook;

impl DequeueHook for NoHook {
    #[inline]
    fn on_dequeue(&mut self, _rec: &Record<'_>, _delivery: &Delivery) -> bool {
        true
    }
}

/// What a worker thread hands back when it exits.
#[derive(Debug)]
pub struct WorkerOutcome<W, H> {
    /// Index of the thread in its pool (the [`Delivery::worker`] it stamped).
    pub index: usize,
    /// The worker, with whatever state it built (a book, statistics).
    pub worker: W,
    /// The dequeue hook, with whatever it counted.
    pub hook: H,
    /// Messages taken off the socket.
    pub taken: u64,
    /// Messages given to the worker.
    pub processed: u64,
    /// Messages dropped unprocessed after an abort or a hook refusal.
    pub discarded: u64,
    /// Records refused here: frames off a socket that did not decode, and records whose topic is not UTF-8 where
    /// the worker needed it as a string (shards dispatch by bytes and leave that check to where it is needed).
    pub malformed: u64,
}

/// One thread's running totals, stored by that thread (relaxed stores of its own counts, once per frame or
/// parcel) and read by the owner; one cache line per thread so worker threads do not false-share.
#[repr(align(64))]
#[derive(Default)]
struct Padded {
    taken: AtomicU64,
    processed: AtomicU64,
    discarded: AtomicU64,
    malformed: AtomicU64,
}

impl Padded {
    #[inline]
    fn publish(&self, c: &Counts) {
        self.processed.store(c.processed, Ordering::Relaxed);
        self.discarded.store(c.discarded, Ordering::Relaxed);
        self.malformed.store(c.malformed, Ordering::Relaxed);
        // Last, with release: an owner that sees this `taken` sees the counts that go with it.
        self.taken.store(c.taken, Ordering::Release);
    }
}

/// One worker thread's counts so far (see [`PoolCounters`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WorkerLiveCounts {
    /// The thread's index.
    pub index: usize,
    /// Messages taken off its queue.
    pub taken: u64,
    /// Messages given to its worker.
    pub processed: u64,
    /// Messages dropped unprocessed (after an abort or a hook refusal).
    pub discarded: u64,
    /// Records refused as malformed.
    pub malformed: u64,
}

/// A handle on a pool's live counts that outlives borrowing the pool (a metrics endpoint keeps one).
#[derive(Clone)]
pub struct PoolCounters(Arc<Shared>);

impl std::fmt::Debug for PoolCounters {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PoolCounters")
            .field("workers", &self.0.taken.len())
            .finish()
    }
}

impl PoolCounters {
    /// Every thread's counts now.
    pub fn read(&self) -> Vec<WorkerLiveCounts> {
        self.0
            .taken
            .iter()
            .enumerate()
            .map(|(index, c)| {
                let taken = c.taken.load(Ordering::Acquire);
                WorkerLiveCounts {
                    index,
                    taken,
                    processed: c.processed.load(Ordering::Relaxed),
                    discarded: c.discarded.load(Ordering::Relaxed),
                    malformed: c.malformed.load(Ordering::Relaxed),
                }
            })
            .collect()
    }
}

struct Shared {
    stop: AtomicBool,
    abort: AtomicBool,
    taken: Vec<Padded>,
    /// Per thread: it panicked (set while unwinding, before its inbox is dropped).
    panicked: Vec<AtomicBool>,
    /// Any thread panicked; shared with producers so one blocked on a hand-off can give up.
    failed: Arc<AtomicBool>,
}

/// Marks its thread as panicked when dropped during unwinding. Declared after the thread's inbox, so it drops
/// first: a producer that sees the inbox disconnect already finds the flag set.
struct PanicMark<'a> {
    index: usize,
    shared: &'a Shared,
}

impl Drop for PanicMark<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            tracing::error!(worker = self.index, "worker thread panicked");
            self.shared.panicked[self.index].store(true, Ordering::Release);
            self.shared.failed.store(true, Ordering::Release);
        }
    }
}

/// A running pool. Dropping it without [`join`](WorkerPool::join) aborts the threads and waits for them.
pub struct WorkerPool<W, H> {
    shared: Arc<Shared>,
    handles: Vec<Option<JoinHandle<WorkerOutcome<W, H>>>>,
}

impl<W: Worker, H: DequeueHook> WorkerPool<W, H> {
    /// Starts one thread per entry of `inboxes` (which must have `config.count` entries where that is set): thread `i`
    /// takes its messages from `inboxes[i]`, and `make(i)` builds its worker and hook. Producers in the same process
    /// hand over [`Parcel`]s of decoded records (no socket, no copy of a received frame, no second decode), others send
    /// to endpoints the threads connect to ([`Inbox::everyone`]). `failed` is set as soon as any thread panics:
    /// producers that started before the pool (and may be blocked handing over to a dead worker) watch it to give up.
    /// Returns once every thread is connected, or with the first start-up error.
    pub fn spawn(
        ctx: &zmq::Context,
        inboxes: Vec<Inbox>,
        config: &WorkerPoolConfig,
        failed: Arc<AtomicBool>,
        mut make: impl FnMut(usize) -> (W, H),
    ) -> Result<Self, WorkerError> {
        let count = inboxes.len();
        if count == 0 || config.count == Some(0) {
            return Err(WorkerError::NoWorkers);
        }
        if let Some(workers) = config.count.filter(|&workers| workers != count) {
            return Err(WorkerError::Sources {
                workers,
                lists: count,
            });
        }
        let shared = Arc::new(Shared {
            stop: AtomicBool::new(false),
            abort: AtomicBool::new(false),
            taken: (0..count).map(|_| Padded::default()).collect(),
            panicked: (0..count).map(|_| AtomicBool::new(false)).collect(),
            failed,
        });
        let mut pool = WorkerPool {
            shared: Arc::clone(&shared),
            handles: Vec::with_capacity(count),
        };
        let (ready_tx, ready_rx) = mpsc::channel();
        for (index, sources) in inboxes.into_iter().enumerate() {
            let (worker, hook) = make(index);
            let ctx = ctx.clone();
            let shared = Arc::clone(&shared);
            let ready = ready_tx.clone();
            let settings = ThreadSettings {
                index,
                core: config.cores.get(index).copied(),
                batch: config.batch.max(1),
                hwm: config.hwm,
                poll_ms: config.poll_interval.0.as_millis().clamp(1, 1_000) as i64,
                idle_spin: config.idle_spin.0.min(MAX_IDLE_SPIN),
                profile: config.socket_profile.clone(),
            };
            let handle = std::thread::Builder::new()
                .name(format!("tickbox-worker-{index}"))
                .spawn(move || run_thread(ctx, sources, settings, shared, worker, hook, ready))
                .map_err(WorkerError::Spawn)?;
            pool.handles.push(Some(handle));
        }
        drop(ready_tx);
        for _ in 0..count {
            match ready_rx.recv_timeout(Duration::from_secs(10)) {
                Ok(Ok(())) => {}
                Ok(Err(err)) => return Err(err),
                Err(_) => return Err(WorkerError::NotStarted(pool.handles.len())),
            }
        }
        Ok(pool)
    }

    /// Messages taken off the sockets so far, over all threads.
    pub fn taken(&self) -> u64 {
        self.shared
            .taken
            .iter()
            .map(|c| c.taken.load(Ordering::Acquire))
            .sum()
    }

    /// A handle on every thread's live counts, for a reader on another thread.
    pub fn counters(&self) -> PoolCounters {
        PoolCounters(Arc::clone(&self.shared))
    }

    /// Indices of the threads that have panicked so far (their messages and state are lost).
    pub fn panicked(&self) -> Vec<usize> {
        self.shared
            .panicked
            .iter()
            .enumerate()
            .filter(|(_, p)| p.load(Ordering::Acquire))
            .map(|(i, _)| i)
            .collect()
    }

    /// Whether any thread has panicked.
    pub fn failed(&self) -> bool {
        self.shared.failed.load(Ordering::Acquire)
    }

    /// Asks the threads to exit once their sockets are empty. Call it after the producers have stopped and
    /// [`taken`](Self::taken) has reached what they sent, or the rest is left unprocessed (and counted).
    pub fn stop(&self) {
        self.shared.stop.store(true, Ordering::Release);
    }

    /// Makes the threads discard (and count) everything from now on and exit when their sockets are empty, so
    /// producers blocked on a full hand-off get unstuck quickly.
    pub fn abort(&self) {
        self.shared.abort.store(true, Ordering::Release);
    }

    /// Waits for every thread; call [`stop`](Self::stop) or [`abort`](Self::abort) first.
    pub fn join(mut self) -> Result<Vec<WorkerOutcome<W, H>>, WorkerError> {
        let mut out = Vec::with_capacity(self.handles.len());
        let mut panicked = None;
        for (index, handle) in self.handles.iter_mut().enumerate() {
            if let Some(handle) = handle.take() {
                match handle.join() {
                    Ok(outcome) => out.push(outcome),
                    Err(_) => panicked = panicked.or(Some(index)),
                }
            }
        }
        match panicked {
            Some(index) => Err(WorkerError::Panicked(index)),
            None => Ok(out),
        }
    }

    /// Like [`join`](Self::join), but a panicked thread does not cost the others' outcomes: returns the outcomes
    /// of the threads that ended normally and the indices of those that panicked.
    pub fn join_partial(mut self) -> (Vec<WorkerOutcome<W, H>>, Vec<usize>) {
        let mut out = Vec::with_capacity(self.handles.len());
        let mut panicked = Vec::new();
        for (index, handle) in self.handles.iter_mut().enumerate() {
            if let Some(handle) = handle.take() {
                match handle.join() {
                    Ok(outcome) => out.push(outcome),
                    Err(_) => panicked.push(index),
                }
            }
        }
        (out, panicked)
    }
}

impl<W, H> Drop for WorkerPool<W, H> {
    fn drop(&mut self) {
        self.shared.abort.store(true, Ordering::Release);
        self.shared.stop.store(true, Ordering::Release);
        for handle in self.handles.iter_mut().filter_map(Option::take) {
            let _ = handle.join();
        }
    }
}

struct ThreadSettings {
    index: usize,
    core: Option<usize>,
    batch: usize,
    hwm: i32,
    poll_ms: i64,
    idle_spin: Duration,
    profile: tickbox_zmqx::profile::SocketProfile,
}

/// Where a worker thread takes its messages from.
#[derive(Debug)]
pub enum Inbox {
    /// A PULL socket connected to each endpoint (libzmq fair-queues between them); each frame is decoded here.
    Endpoints(Vec<String>),
    /// Parcels from producers in this process, records already decoded ([`Parcel`]); each producer's records stay
    /// in its sending order. Emptied parcels go back through `recycler`.
    Parcels {
        /// Where parcels arrive.
        rx: crossbeam_channel::Receiver<Parcel>,
        /// Where emptied parcels go.
        recycler: Recycler,
        /// Where the worker sleeps, its producers then running the last records of a burst on it instead of
        /// waking it ([`Desk`]): with a queue of its own (`by_topic`) or one the workers share (`round_robin`,
        /// where any sleeping worker of the queue may take the parcel). `None`: it sleeps on the queue.
        desk: Option<Arc<Desk>>,
    },
}

impl Inbox {
    /// For `workers` threads that each connect a PULL socket to every endpoint in `sources` (libzmq then
    /// round-robins each PUSH over the workers).
    pub fn everyone(sources: &[String], workers: usize) -> Vec<Inbox> {
        (0..workers)
            .map(|_| Inbox::Endpoints(sources.to_vec()))
            .collect()
    }
}

enum Source {
    Pull(zmq::Socket),
    Parcels {
        rx: crossbeam_channel::Receiver<Parcel>,
        recycler: Recycler,
        desk: Option<Arc<Desk>>,
    },
}

/// What one look at the source found.
enum Next {
    Frame,
    Parcel(Parcel),
    Empty,
    /// Every producer is gone and nothing is left.
    Closed,
    Failed(String),
}

impl Source {
    #[inline]
    fn try_next(&self, msg: &mut zmq::Message) -> Next {
        match self {
            Source::Pull(pull) => match pull.recv(msg, zmq::DONTWAIT) {
                Ok(()) => Next::Frame,
                // EINTR (a signal) just means "look again".
                Err(zmq::Error::EAGAIN | zmq::Error::EINTR) => Next::Empty,
                Err(err) => Next::Failed(err.to_string()),
            },
            Source::Parcels { rx, .. } => match rx.try_recv() {
                Ok(p) => Next::Parcel(p),
                Err(crossbeam_channel::TryRecvError::Empty) => Next::Empty,
                Err(crossbeam_channel::TryRecvError::Disconnected) => Next::Closed,
            },
        }
    }

    /// Looks for a parcel while `spin` allows before the caller goes to sleep (a ring only: a socket is waited on
    /// in `poll`).
    fn spin(&self, spin: &mut IdleSpin) -> Next {
        let Source::Parcels { rx, .. } = self else {
            return Next::Empty;
        };
        spin.spin(|| match rx.try_recv() {
            Ok(p) => Look::Found(Next::Parcel(p)),
            Err(crossbeam_channel::TryRecvError::Disconnected) => Look::Found(Next::Closed),
            Err(crossbeam_channel::TryRecvError::Empty) => Look::Nothing,
        })
        .unwrap_or(Next::Empty)
    }

    /// Waits up to `poll_ms` for something: at the worker's desk, leaving `seat` there for its producers (see
    /// [`Desk`]), else on the socket (which only waits) or the channel (which hands the parcel over at once).
    /// Gives the seat back with what the wait found.
    fn wait<W: Worker, H: DequeueHook>(
        &self,
        seat: Box<Seat<W, H>>,
        poll_ms: i64,
    ) -> (Box<Seat<W, H>>, Next) {
        let timeout = Duration::from_millis(poll_ms.max(1) as u64);
        let next = match self {
            Source::Pull(pull) => {
                // A failed poll (EINTR on a signal) just means "look again".
                let _ = pull.poll(zmq::POLLIN, poll_ms);
                Next::Empty
            }
            Source::Parcels {
                rx,
                desk: Some(desk),
                ..
            } => {
                let index = seat.index;
                return match desk.sleep(seat, rx, timeout) {
                    Woken::Back(seat) => (seat, Next::Empty),
                    Woken::Lost => {
                        panic!("worker {index} panicked on a record its shard ran on it while it slept")
                    }
                };
            }
            Source::Parcels { rx, .. } => match rx.recv_timeout(timeout) {
                Ok(p) => Next::Parcel(p),
                Err(crossbeam_channel::RecvTimeoutError::Timeout) => Next::Empty,
                Err(crossbeam_channel::RecvTimeoutError::Disconnected) => Next::Closed,
            },
        };
        (seat, next)
    }
}

/// The per-record half of a worker thread: the hook, the worker, the counts and the flush rhythm. Shared by the
/// socket and parcel paths so they cannot treat a record differently.
struct Deliverer<W, H> {
    worker: W,
    hook: H,
    counts: Counts,
    discarding: bool,
    in_batch: usize,
    batch: usize,
}

impl<W: Worker, H: DequeueHook> Deliverer<W, H> {
    /// Nothing delivered yet; the worker flushes every `batch` records (at least one).
    fn new(worker: W, hook: H, batch: usize) -> Self {
        Deliverer {
            worker,
            hook,
            counts: Counts::default(),
            discarding: false,
            in_batch: 0,
            batch: batch.max(1),
        }
    }

    #[inline]
    fn deliver(&mut self, rec: &Record<'_>, delivery: &Delivery, abort: bool) {
        if self.discarding || abort {
            self.counts.discarded += 1;
            return;
        }
        if !self.hook.on_dequeue(rec, delivery) {
            self.discarding = true;
            self.counts.discarded += 1;
            return;
        }
        if self.worker.on_record(rec, delivery).is_err() {
            // Structurally sound but refused by the worker (a topic that is not UTF-8): counted, never fatal.
            self.counts.malformed += 1;
            return;
        }
        self.counts.processed += 1;
        self.in_batch += 1;
        if self.in_batch >= self.batch {
            self.worker.flush();
            self.in_batch = 0;
        }
    }

    /// [`deliver`](Self::deliver) for a Guide message.
    #[inline]
    fn deliver_guide(&mut self, topic: &[u8], body: &[u8], delivery: &Delivery, abort: bool) {
        if self.discarding || abort {
            self.counts.discarded += 1;
            return;
        }
        if !self.hook.on_dequeue_guide(delivery) {
            self.discarding = true;
            self.counts.discarded += 1;
            return;
        }
        self.worker.on_guide(topic, body, delivery);
        self.counts.processed += 1;
        self.in_batch += 1;
        if self.in_batch >= self.batch {
            self.worker.flush();
            self.in_batch = 0;
        }
    }

    #[inline]
    fn idle(&mut self) {
        if self.in_batch > 0 {
            self.worker.flush();
            self.in_batch = 0;
        }
    }
}

/// A worker run on its producer's own thread (`handoff = "inline"`): the producer calls it with each record it
/// admits, so no queue, no parcel and no wake-up of another thread stand between receipt and the worker. The
/// same `Deliverer` as a pool thread runs it (hook first, the worker, the flush rhythm, the counts), so an
/// inline worker cannot treat a record differently; every record it is given counts as taken at once.
pub struct InlineWorker<W, H> {
    index: usize,
    d: Deliverer<W, H>,
}

impl<W: Worker, H: DequeueHook> InlineWorker<W, H> {
    /// Worker `index` (the [`Delivery::worker`] it stamps), flushed every `batch` records and whenever its
    /// producer runs dry ([`idle`](Self::idle)).
    pub fn new(index: usize, worker: W, hook: H, batch: usize) -> Self {
        InlineWorker {
            index,
            d: Deliverer::new(worker, hook, batch),
        }
    }

    /// One record: `frame` with its header already decoded as `meta`, reaching the worker at `now_ns`.
    #[inline]
    pub fn deliver(&mut self, frame: &[u8], meta: Meta, now_ns: u64) {
        self.d.counts.taken += 1;
        let delivery = Delivery {
            worker: self.index,
            dequeued_ns: now_ns,
        };
        self.d
            .deliver(&Record::from_parts(frame, meta), &delivery, false);
    }

    /// One Guide message (`[topic][body]`).
    #[inline]
    pub fn deliver_guide(&mut self, topic: &[u8], body: &[u8], now_ns: u64) {
        self.d.counts.taken += 1;
        let delivery = Delivery {
            worker: self.index,
            dequeued_ns: now_ns,
        };
        self.d.deliver_guide(topic, body, &delivery, false);
    }

    /// The producer has nothing more for now: the worker flushes what it batched.
    #[inline]
    pub fn idle(&mut self) {
        self.d.idle();
    }

    /// The final flush, and what the worker did (as a pool thread reports it).
    pub fn finish(mut self) -> WorkerOutcome<W, H> {
        self.d.worker.flush();
        finish(self.index, self.d.worker, self.d.hook, self.d.counts)
    }
}

fn run_thread<W: Worker, H: DequeueHook>(
    ctx: zmq::Context,
    sources: Inbox,
    settings: ThreadSettings,
    shared: Arc<Shared>,
    worker: W,
    hook: H,
    ready: mpsc::Sender<Result<(), WorkerError>>,
) -> WorkerOutcome<W, H> {
    let index = settings.index;
    tickbox_zmqx::pin_if_configured(settings.core, &format!("worker {index}"));
    let opened = match sources {
        Inbox::Endpoints(endpoints) => open_pull(&ctx, &endpoints, &settings).map(Source::Pull),
        Inbox::Parcels { rx, recycler, desk } => Ok(Source::Parcels { rx, recycler, desk }),
    };
    let source = match opened {
        Ok(source) => {
            let _ = ready.send(Ok(()));
            source
        }
        Err(err) => {
            let _ = ready.send(Err(err));
            return finish(index, worker, hook, Counts::default());
        }
    };
    drop(ready);
    let _mark = PanicMark {
        index,
        shared: &shared,
    };
    let taken_counter = &shared.taken[index];
    // Boxed so that sleeping at a desk moves a pointer, not the worker.
    let mut seat = Box::new(Seat {
        d: Deliverer::new(worker, hook, settings.batch),
        index,
        shared: Arc::clone(&shared),
    });
    let mut idle_spin = IdleSpin::new(settings.idle_spin);
    let mut msg = zmq::Message::new();
    // The other parts of a multipart message (a Guide message off a PULL socket).
    let (mut body, mut spare) = (zmq::Message::new(), zmq::Message::new());
    loop {
        let next = match source.try_next(&mut msg) {
            Next::Empty => {
                seat.d.idle();
                if shared.stop.load(Ordering::Acquire) || shared.abort.load(Ordering::Acquire) {
                    break;
                }
                match source.spin(&mut idle_spin) {
                    Next::Empty => {
                        let (back, next) = source.wait(seat, settings.poll_ms);
                        seat = back;
                        next
                    }
                    other => other,
                }
            }
            other => other,
        };
        let d = &mut seat.d;
        match next {
            Next::Frame => {
                d.counts.taken += 1;
                let abort = shared.abort.load(Ordering::Relaxed);
                if msg.get_more() {
                    // A Guide message, sent by a shard as `[topic][body]` (`subscribe --framing guide`); its
                    // parts are all here once the first is. Anything but two parts is counted, never delivered.
                    if let Source::Pull(pull) = &source {
                        let parts = recv_rest(pull, &mut body, &mut spare);
                        let delivery = Delivery {
                            worker: index,
                            dequeued_ns: now_ns(),
                        };
                        match parts {
                            Some(2) => d.deliver_guide(&msg, &body, &delivery, abort),
                            _ if abort || d.discarding => d.counts.discarded += 1,
                            _ => d.counts.malformed += 1,
                        }
                    }
                    taken_counter.publish(&d.counts);
                    continue;
                }
                match Record::decode(&msg) {
                    Ok(rec) => {
                        let delivery = Delivery {
                            worker: index,
                            dequeued_ns: now_ns(),
                        };
                        d.deliver(&rec, &delivery, abort);
                    }
                    Err(_) if abort || d.discarding => d.counts.discarded += 1,
                    Err(_) => d.counts.malformed += 1,
                }
                taken_counter.publish(&d.counts);
            }
            Next::Parcel(parcel) => {
                seat.deliver_parcel(&parcel);
                if let Source::Parcels { recycler, .. } = &source {
                    recycler.give(parcel);
                }
            }
            Next::Empty => continue,
            Next::Closed => break,
            Next::Failed(err) => {
                tracing::error!(worker = index, "receive failed, worker stops: {err}");
                break;
            }
        }
    }
    let Seat { mut d, .. } = *seat;
    d.worker.flush();
    taken_counter.publish(&d.counts);
    drop(source);
    finish(index, d.worker, d.hook, d.counts)
}

/// A pool thread's worker with what it needs to take a parcel: on its own thread, or on a shard's while it sleeps
/// at its [`Desk`].
struct Seat<W, H> {
    d: Deliverer<W, H>,
    index: usize,
    shared: Arc<Shared>,
}

impl<W: Worker, H: DequeueHook> Seat<W, H> {
    /// Every item of `parcel`, counted taken. One clock read and one counter store per parcel: every record in it
    /// reached the worker at the same moment, and the owner only needs the count to be exact once the parcel is
    /// done.
    #[inline]
    fn deliver_parcel(&mut self, parcel: &Parcel) {
        let abort = self.shared.abort.load(Ordering::Relaxed);
        let delivery = Delivery {
            worker: self.index,
            dequeued_ns: now_ns(),
        };
        let d = &mut self.d;
        for item in parcel.items() {
            match item {
                Item::Record(rec) => d.deliver(&rec, &delivery, abort),
                Item::Guide { topic, body } => d.deliver_guide(topic, body, &delivery, abort),
            }
        }
        d.counts.taken += parcel.len() as u64;
        self.shared.taken[self.index].publish(&d.counts);
    }
}

impl<W: Worker, H: DequeueHook> Desked for Seat<W, H> {
    fn take_parcel(&mut self, parcel: &Parcel) {
        self.deliver_parcel(parcel);
        // The shard runs a parcel at the end of a burst: the worker is idle again, as its own loop would find.
        self.d.idle();
    }
}

/// Receives the parts after the first of a multipart message into `body` (the second) and `spare` (any further
/// one, overwritten each time, so nothing is kept or allocated for them). Returns the number of parts, the first
/// included; `None` if the socket failed part-way.
fn recv_rest(
    pull: &zmq::Socket,
    body: &mut zmq::Message,
    spare: &mut zmq::Message,
) -> Option<usize> {
    // The parts of a multipart message are delivered together: these never wait.
    pull.recv(body, 0).ok()?;
    let mut parts = 2;
    let mut more = body.get_more();
    while more {
        pull.recv(spare, 0).ok()?;
        parts += 1;
        more = spare.get_more();
    }
    Some(parts)
}

#[derive(Default)]
struct Counts {
    taken: u64,
    processed: u64,
    discarded: u64,
    malformed: u64,
}

fn finish<W, H>(index: usize, worker: W, hook: H, c: Counts) -> WorkerOutcome<W, H> {
    WorkerOutcome {
        index,
        worker,
        hook,
        taken: c.taken,
        processed: c.processed,
        discarded: c.discarded,
        malformed: c.malformed,
    }
}

fn open_pull(
    ctx: &zmq::Context,
    sources: &[String],
    settings: &ThreadSettings,
) -> Result<zmq::Socket, WorkerError> {
    let worker = settings.index;
    let zmq_err = |what| {
        move |source| WorkerError::Zmq {
            worker,
            what,
            source,
        }
    };
    let pull = ctx.socket(zmq::PULL).map_err(zmq_err("create PULL"))?;
    pull.set_linger(0).map_err(zmq_err("set linger"))?;
    pull.set_rcvhwm(settings.hwm)
        .map_err(zmq_err("set rcvhwm"))?;
    tickbox_zmqx::profile::apply(&pull, &settings.profile)
        .map_err(zmq_err("apply socket profile"))?;
    for endpoint in sources {
        pull.connect(endpoint)
            .map_err(|source| WorkerError::Connect {
                worker,
                endpoint: endpoint.clone(),
                source,
            })?;
    }
    Ok(pull)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Stats;
    use tickbox_testkit::wait_for;
    use tickbox_wire::{encode_to_vec, Header, Kind, MessageRef, Quote};

    #[test]
    fn every_message_reaches_exactly_one_worker_and_drains_on_stop() {
        let ctx = zmq::Context::new();
        let push = ctx.socket(zmq::PUSH).unwrap();
        push.set_linger(0).unwrap();
        push.bind("inproc://workers-test").unwrap();
        let config = WorkerPoolConfig {
            count: Some(3),
            ..WorkerPoolConfig::default()
        };
        let pool = WorkerPool::spawn(
            &ctx,
            Inbox::everyone(&["inproc://workers-test".to_owned()], 3),
            &config,
            Arc::default(),
            |_| (Stats::new(), NoHook),
        )
        .unwrap();
        const N: u64 = 3_000;
        for seq in 1..=N {
            let frame = encode_to_vec(
                &format!("Q.XNAS.S{}", seq % 17),
                &Header::live(Kind::Quote, 1, seq, 1),
                &Quote::default().into(),
            )
            .unwrap();
            push.send(frame, 0).unwrap();
        }
        push.send(&b"garbage"[..], 0).unwrap();
        // Bounded; what was taken is checked below.
        tickbox_testkit::wait_until(Duration::from_secs(5), || pool.taken() > N);
        pool.stop();
        let outcomes = pool.join().unwrap();
        assert_eq!(outcomes.len(), 3);
        let processed: u64 = outcomes.iter().map(|o| o.processed).sum();
        let malformed: u64 = outcomes.iter().map(|o| o.malformed).sum();
        assert_eq!((processed, malformed), (N, 1));
        let mut merged = Stats::new().report();
        for o in &outcomes {
            merged.merge(&o.worker.report());
        }
        assert_eq!(merged.count(Kind::Quote), N);
        assert_eq!(merged.distinct_topics(), 17);
    }

    /// Guide messages reach `Worker::on_guide` through both inboxes: moved in parcels beside records, and as
    /// two-part messages off a PULL socket, where a message of any other number of parts is counted malformed and
    /// the stream goes on.
    #[test]
    fn guide_messages_reach_on_guide_through_parcels_and_pull_sockets() {
        let ctx = zmq::Context::new();
        // Parcels: records and Guide messages interleaved, in one parcel.
        let (tx, rx) = crossbeam_channel::bounded::<Parcel>(4);
        let recycler = Recycler::new(4);
        let config = WorkerPoolConfig {
            count: Some(1),
            ..WorkerPoolConfig::default()
        };
        let pool = WorkerPool::spawn(
            &ctx,
            parcel_inboxes(vec![rx], &recycler),
            &config,
            Arc::default(),
            |_| (Stats::new(), NoHook),
        )
        .unwrap();
        let mut p = recycler.take();
        for seq in 1..=10u64 {
            let frame = quote_frame(seq);
            p.push_message(
                zmq::Message::from(&frame[..]),
                *Record::decode(&frame).unwrap().meta(),
            );
            let topic = if seq % 2 == 0 { "even" } else { "odd" };
            p.push_guide(zmq::Message::from(topic), zmq::Message::from(&b"body"[..]));
        }
        tx.send(p).unwrap();
        drop(tx);
        let outcome = pool.join().unwrap().remove(0);
        assert_eq!((outcome.processed, outcome.malformed), (20, 0));
        let stats = outcome.worker.report();
        assert_eq!(stats.count(Kind::Quote), 10);
        assert_eq!(stats.guide.messages(), 10);
        assert_eq!(stats.guide.body_bytes(), 40);
        assert_eq!(
            stats.guide.sorted(),
            vec![(&b"even"[..], 5), (&b"odd"[..], 5)]
        );

        // A PULL socket: two-part messages, then a malformed three-part one, then more two-part ones.
        let push = ctx.socket(zmq::PUSH).unwrap();
        push.set_linger(0).unwrap();
        push.bind("inproc://workers-guide-test").unwrap();
        let pool = WorkerPool::spawn(
            &ctx,
            Inbox::everyone(&["inproc://workers-guide-test".to_owned()], 1),
            &config,
            Arc::default(),
            |_| (Stats::new(), NoHook),
        )
        .unwrap();
        for i in 0..6u64 {
            if i == 3 {
                push.send_multipart([&b"t"[..], b"a", b"b"], 0).unwrap();
            }
            push.send_multipart([&b"t"[..], &i.to_le_bytes()[..]], 0)
                .unwrap();
        }
        // Bounded; what was taken is checked below.
        tickbox_testkit::wait_until(Duration::from_secs(5), || pool.taken() >= 7);
        pool.stop();
        let outcome = pool.join().unwrap().remove(0);
        assert_eq!(
            (outcome.taken, outcome.processed, outcome.malformed),
            (7, 6, 1)
        );
        assert_eq!(outcome.worker.report().guide.get(b"t"), Some(6));
    }

    #[test]
    fn channel_inboxes_keep_each_producers_order_and_end_when_producers_are_gone() {
        let ctx = zmq::Context::new();
        let config = WorkerPoolConfig {
            count: Some(2),
            ..WorkerPoolConfig::default()
        };
        let (txs, rxs): (Vec<_>, Vec<_>) = (0..2)
            .map(|_| crossbeam_channel::bounded::<Parcel>(16))
            .unzip();
        let recycler = Recycler::new(8);
        let pool = WorkerPool::spawn(
            &ctx,
            parcel_inboxes(rxs, &recycler),
            &config,
            Arc::default(),
            |_| (Order::default(), NoHook),
        )
        .unwrap();
        const N: u64 = 1_000;
        let mut parcels = [recycler.take(), recycler.take()];
        for seq in 1..=N {
            let frame = quote_frame(seq);
            let w = (seq % 2) as usize;
            parcels[w].push_message(
                zmq::Message::from(&frame[..]),
                *Record::decode(&frame).unwrap().meta(),
            );
            // Parcels of varying size, some full, some not.
            if parcels[w].is_full() || seq % 7 == 0 {
                let full = std::mem::replace(&mut parcels[w], recycler.take());
                txs[w].send(full).unwrap();
            }
        }
        for (w, p) in parcels.into_iter().enumerate() {
            txs[w].send(p).unwrap();
        }
        // No stop: the workers finish because every producer is gone and the queues are empty.
        drop(txs);
        let outcomes = pool.join().unwrap();
        assert_eq!(outcomes.iter().map(|o| o.processed).sum::<u64>(), N);
        for o in &outcomes {
            assert!(o.worker.0.windows(2).all(|w| w[0] < w[1]), "out of order");
            assert_eq!(o.worker.0.len() as u64, N / 2);
        }
    }

    /// Panics on its first message.
    struct Doomed;

    impl Worker for Doomed {
        fn on_message(&mut self, _msg: &MessageRef<'_>, _d: &Delivery) {
            panic!("doomed worker");
        }
    }

    #[test]
    fn a_panicked_thread_is_flagged_before_its_inbox_closes_and_join_partial_keeps_the_rest() {
        let ctx = zmq::Context::new();
        let config = WorkerPoolConfig {
            count: Some(2),
            ..WorkerPoolConfig::default()
        };
        let (txs, rxs): (Vec<_>, Vec<_>) = (0..2)
            .map(|_| crossbeam_channel::bounded::<Parcel>(4))
            .unzip();
        let recycler = Recycler::new(8);
        let failed = Arc::new(AtomicBool::new(false));
        let pool = WorkerPool::spawn(
            &ctx,
            parcel_inboxes(rxs, &recycler),
            &config,
            Arc::clone(&failed),
            |i| (if i == 1 { Some(Doomed) } else { None }, NoHook),
        )
        .unwrap();
        let frame = quote_frame(1);
        let parcel = || {
            let mut p = Parcel::new();
            p.push_copy(&frame, Record::decode(&frame).unwrap().meta());
            p
        };
        txs[1].send(parcel()).unwrap();
        // The dead worker's inbox disconnects; a producer then finds the flag already set.
        wait_for(
            "the dead worker's inbox to close",
            Duration::from_secs(5),
            || txs[1].send(parcel()).is_err(),
        );
        assert!(failed.load(Ordering::Acquire));
        assert!(pool.failed());
        assert_eq!(pool.panicked(), vec![1]);
        pool.stop();
        drop(txs);
        let (outcomes, panicked) = pool.join_partial();
        assert_eq!(panicked, vec![1]);
        assert_eq!(outcomes.len(), 1);
        assert_eq!(outcomes[0].index, 0);
    }

    fn quote_frame(seq: u64) -> Vec<u8> {
        encode_to_vec(
            "Q.XNAS.S",
            &Header::live(Kind::Quote, 1, seq, 1),
            &Quote::default().into(),
        )
        .unwrap()
    }

    fn parcel_inboxes(
        rxs: Vec<crossbeam_channel::Receiver<Parcel>>,
        recycler: &Recycler,
    ) -> Vec<Inbox> {
        rxs.into_iter()
            .map(|rx| Inbox::Parcels {
                rx,
                recycler: recycler.clone(),
                desk: None,
            })
            .collect()
    }

    #[derive(Default)]
    struct Order(Vec<u64>);

    impl Worker for Order {
        fn on_message(&mut self, msg: &MessageRef<'_>, _d: &Delivery) {
            self.0.push(msg.header().sequence);
        }
    }

    #[test]
    fn zero_workers_is_an_error() {
        let ctx = zmq::Context::new();
        let config = WorkerPoolConfig {
            count: Some(0),
            ..WorkerPoolConfig::default()
        };
        assert!(matches!(
            WorkerPool::spawn(&ctx, Vec::new(), &config, Arc::default(), |_| (
                Stats::new(),
                NoHook
            )),
            Err(WorkerError::NoWorkers)
        ));
    }

    /// Which thread took each record, by sequence.
    #[derive(Default)]
    struct Threads(Vec<(u64, Option<String>)>);

    impl Worker for Threads {
        fn on_message(&mut self, msg: &MessageRef<'_>, _d: &Delivery) {
            let seq = msg.header().sequence;
            assert_ne!(seq, 13, "record 13 is poison");
            self.0
                .push((seq, std::thread::current().name().map(str::to_owned)));
        }
    }

    fn parcel_of(recycler: &Recycler, seqs: std::ops::RangeInclusive<u64>) -> Parcel {
        let mut p = recycler.take();
        for seq in seqs {
            let frame = quote_frame(seq);
            let meta = *Record::decode(&frame).unwrap().meta();
            p.push_message(zmq::Message::from(&frame[..]), meta);
        }
        p
    }

    /// One worker at a desk, sleeping at once when its queue runs dry, waking only when rung (a 10 s poll);
    /// returned once it sleeps there.
    fn desk_pool() -> (
        Arc<Desk>,
        WorkerPool<Threads, NoHook>,
        crossbeam_channel::Sender<Parcel>,
        Recycler,
    ) {
        desk_pool_looking(Duration::ZERO)
    }

    /// [`desk_pool`] whose worker looks for its next parcel for `idle_spin` before it sleeps.
    fn desk_pool_looking(
        idle_spin: Duration,
    ) -> (
        Arc<Desk>,
        WorkerPool<Threads, NoHook>,
        crossbeam_channel::Sender<Parcel>,
        Recycler,
    ) {
        let desk = Arc::new(Desk::new());
        let (tx, rx) = crossbeam_channel::bounded::<Parcel>(4);
        let recycler = Recycler::new(8);
        let config = WorkerPoolConfig {
            count: Some(1),
            idle_spin: HumanDuration(idle_spin),
            poll_interval: HumanDuration(Duration::from_secs(10)),
            ..WorkerPoolConfig::default()
        };
        let inbox = Inbox::Parcels {
            rx,
            recycler: recycler.clone(),
            desk: Some(Arc::clone(&desk)),
        };
        let pool = WorkerPool::spawn(
            &zmq::Context::new(),
            vec![inbox],
            &config,
            Arc::default(),
            |_| (Threads::default(), NoHook),
        )
        .unwrap();
        wait_for("the worker to sleep", Duration::from_secs(5), || {
            desk.is_asleep()
        });
        (desk, pool, tx, recycler)
    }

    /// The desk's promise: a producer runs a sleeping worker's parcel on its own thread, counted at once; it
    /// refuses while anything is queued (which would then be overtaken) and the worker's own thread takes that;
    /// every record arrives once, in order.
    #[test]
    fn a_producer_runs_a_sleeping_workers_parcel_itself_but_never_ahead_of_a_queued_one() {
        let (desk, pool, tx, recycler) = desk_pool();
        let here = parcel_of(&recycler, 1..=3);
        assert!(
            desk.try_run(&here, &tx),
            "a sleeping worker with nothing queued is run here"
        );
        assert_eq!(pool.taken(), 3, "what ran here is counted taken at once");

        // Queued without ringing: the worker sleeps on, and the producer must not overtake the queued parcel.
        tx.try_send(parcel_of(&recycler, 4..=6)).unwrap();
        let behind = parcel_of(&recycler, 7..=9);
        assert!(desk.is_asleep());
        assert!(
            !desk.try_run(&behind, &tx),
            "a parcel is queued: it goes first"
        );
        tx.send(behind).unwrap();
        desk.ring();
        wait_for(
            "the worker to take both queued parcels",
            Duration::from_secs(5),
            || pool.taken() == 9,
        );

        wait_for("the worker to sleep again", Duration::from_secs(5), || {
            desk.is_asleep()
        });
        assert!(desk.try_run(&parcel_of(&recycler, 10..=12), &tx));
        drop(tx);
        desk.ring();
        let outcome = pool.join().unwrap().remove(0);
        assert_eq!((outcome.taken, outcome.processed), (12, 12));
        let seqs: Vec<u64> = outcome.worker.0.iter().map(|(s, _)| *s).collect();
        assert_eq!(seqs, (1..=12).collect::<Vec<_>>());
        let worker_thread = Some("tickbox-worker-0".to_owned());
        for (seq, thread) in &outcome.worker.0 {
            let on_worker = (4..=9).contains(seq);
            assert_eq!(
                *thread == worker_thread,
                on_worker,
                "record {seq} ran on {thread:?}"
            );
        }
    }

    /// With `idle_spin` set (it is off by default), a worker looks for its next parcel before it sleeps: it takes
    /// every record once and in order, on its own thread, whether a parcel came while it looked or after, still
    /// goes to sleep once nothing comes for the window, and ends when its producer is gone.
    #[test]
    fn a_worker_that_looks_before_it_sleeps_takes_every_record_once_in_order_then_sleeps() {
        let (desk, pool, tx, recycler) = desk_pool_looking(MAX_IDLE_SPIN);
        // Past record 13, which `Threads` takes for poison.
        let first = 100;
        let mut next = first;
        let mut send = |tx: &crossbeam_channel::Sender<Parcel>| {
            tx.send(parcel_of(&recycler, next..=next + 2)).unwrap();
            next += 3;
            // As a shard does after a hand-off: a worker that is looking takes the parcel anyway, a sleeping one
            // is woken for it.
            desk.ring();
            next - 1
        };
        let mut sent = 0;
        for _ in 0..20 {
            sent = send(&tx);
        }
        wait_for(
            "the worker to take every parcel",
            Duration::from_secs(5),
            || pool.taken() == sent - first + 1,
        );
        wait_for(
            "the worker to sleep once its look finds nothing",
            Duration::from_secs(5),
            || desk.is_asleep(),
        );
        sent = send(&tx);
        drop(tx);
        desk.ring();
        let outcome = pool.join().unwrap().remove(0);
        let records = sent - first + 1;
        assert_eq!((outcome.taken, outcome.processed), (records, records));
        let seqs: Vec<u64> = outcome.worker.0.iter().map(|(s, _)| *s).collect();
        assert_eq!(seqs, (first..=sent).collect::<Vec<_>>());
        let worker_thread = Some("tickbox-worker-0".to_owned());
        assert!(outcome.worker.0.iter().all(|(_, t)| *t == worker_thread));
    }

    /// A worker that panics on a record its producer ran fails as it would on its own thread: the producer goes
    /// on, the pool's failure flag is set and the thread is reported panicked.
    #[test]
    fn a_worker_that_panics_on_a_record_run_by_its_producer_fails_its_own_thread() {
        let (desk, pool, tx, recycler) = desk_pool();
        assert!(desk.try_run(&parcel_of(&recycler, 12..=13), &tx));
        wait_for("the pool to fail", Duration::from_secs(5), || {
            pool.shared.failed.load(Ordering::Acquire)
        });
        assert!(
            !desk.try_run(&parcel_of(&recycler, 14..=14), &tx),
            "nothing is left to run"
        );
        drop(tx);
        assert!(matches!(pool.join(), Err(WorkerError::Panicked(0))));
    }
}
