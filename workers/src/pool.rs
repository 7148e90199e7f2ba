//! The pool of pinned PULL threads.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tickbox_wire::{now_ns, MessageRef};

use crate::{Delivery, Worker};

/// The `[workers]` section of the deployment config.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct WorkersConfig {
    /// Worker threads; each pulls from every shard.
    pub count: usize,
    /// OS CPU ids for the worker threads in order; threads beyond the list run unpinned.
    pub cores: Vec<usize>,
    /// Messages handled before `Worker::flush` is forced even if more are queued.
    pub batch: usize,
    /// Receive high-water mark of each worker's PULL socket, in messages.
    pub hwm: i32,
    /// How often an idle worker checks for shutdown, in milliseconds.
    pub poll_ms: u64,
}

impl Default for WorkersConfig {
    fn default() -> Self {
        Self {
            count: 2,
            cores: Vec::new(),
            batch: 256,
            hwm: 1_000,
            poll_ms: 50,
        }
    }
}

/// Errors starting or running a pool.
#[derive(Debug, thiserror::Error)]
pub enum WorkerError {
    #[error("worker {worker}: {what}: {source}")]
    Zmq {
        worker: usize,
        what: &'static str,
        #[source]
        source: zmq::Error,
    },
    #[error("worker {worker}: cannot connect to {endpoint}: {source}")]
    Connect {
        worker: usize,
        endpoint: String,
        #[source]
        source: zmq::Error,
    },
    #[error("cannot spawn worker thread: {0}")]
    Spawn(#[source] std::io::Error),
    #[error("worker {0} did not start")]
    NotStarted(usize),
    #[error("worker thread {0} panicked")]
    Panicked(usize),
    #[error("a pool needs at least one worker")]
    NoWorkers,
}

/// Runs on the worker thread before the worker sees a message: the subscriber's Suicidal Snail check at dequeue
/// time, which is the only place that can see how long a message waited behind a slow worker.
pub trait DequeueHook: Send + 'static {
    /// Returns `false` to stop processing: the thread then only discards (and counts) until told to stop.
    fn on_dequeue(&mut self, msg: &MessageRef<'_>, delivery: &Delivery) -> bool;
}

/// A hook that admits everything.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoHook;

impl DequeueHook for NoHook {
    #[inline]
    fn on_dequeue(&mut self, _msg: &MessageRef<'_>, _delivery: &Delivery) -> bool {
        true
    }
}

/// What a worker thread hands back when it exits.
#[derive(Debug)]
pub struct WorkerOutcome<W, H> {
    pub index: usize,
    pub worker: W,
    pub hook: H,
    /// Messages taken off the socket.
    pub taken: u64,
    /// Messages given to the worker.
    pub processed: u64,
    /// Messages dropped unprocessed after an abort or a hook refusal.
    pub discarded: u64,
    /// Frames that did not decode (shards forward only decoded frames, so this stays 0 unless something else
    /// connects to a shard's endpoint).
    pub malformed: u64,
}

/// One counter per cache line so worker threads do not false-share.
#[repr(align(64))]
#[derive(Default)]
struct Padded(AtomicU64);

struct Shared {
    stop: AtomicBool,
    abort: AtomicBool,
    taken: Vec<Padded>,
}

/// A running pool. Dropping it without [`join`](WorkerPool::join) aborts the threads and waits for them.
pub struct WorkerPool<W, H> {
    shared: Arc<Shared>,
    handles: Vec<Option<JoinHandle<WorkerOutcome<W, H>>>>,
}

impl<W: Worker, H: DequeueHook> WorkerPool<W, H> {
    /// Starts `config.count` threads; each connects a PULL socket to every endpoint in `sources`. `make` builds
    /// thread `i`'s worker and hook. Returns once every thread is connected, or with the first start-up error.
    pub fn spawn(
        ctx: &zmq::Context,
        sources: &[String],
        config: &WorkersConfig,
        mut make: impl FnMut(usize) -> (W, H),
    ) -> Result<Self, WorkerError> {
        if config.count == 0 {
            return Err(WorkerError::NoWorkers);
        }
        let shared = Arc::new(Shared {
            stop: AtomicBool::new(false),
            abort: AtomicBool::new(false),
            taken: (0..config.count).map(|_| Padded::default()).collect(),
        });
        let mut pool = WorkerPool {
            shared: Arc::clone(&shared),
            handles: Vec::with_capacity(config.count),
        };
        let (ready_tx, ready_rx) = mpsc::channel();
        for index in 0..config.count {
            let (worker, hook) = make(index);
            let ctx = ctx.clone();
            let sources = sources.to_vec();
            let shared = Arc::clone(&shared);
            let ready = ready_tx.clone();
            let settings = ThreadSettings {
                index,
                core: config.cores.get(index).copied(),
                batch: config.batch.max(1),
                hwm: config.hwm,
                poll_ms: config.poll_ms.clamp(1, 1_000) as i64,
            };
            let handle = std::thread::Builder::new()
                .name(format!("tickbox-worker-{index}"))
                .spawn(move || run_thread(ctx, sources, settings, shared, worker, hook, ready))
                .map_err(WorkerError::Spawn)?;
            pool.handles.push(Some(handle));
        }
        drop(ready_tx);
        for _ in 0..config.count {
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
            .map(|c| c.0.load(Ordering::Acquire))
            .sum()
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
}

fn run_thread<W: Worker, H: DequeueHook>(
    ctx: zmq::Context,
    sources: Vec<String>,
    settings: ThreadSettings,
    shared: Arc<Shared>,
    mut worker: W,
    mut hook: H,
    ready: mpsc::Sender<Result<(), WorkerError>>,
) -> WorkerOutcome<W, H> {
    let index = settings.index;
    tickbox_zmqx::pin_if_configured(settings.core, &format!("worker {index}"));
    let mut outcome_counts = Counts::default();
    let pull = match open_pull(&ctx, &sources, &settings) {
        Ok(pull) => {
            let _ = ready.send(Ok(()));
            pull
        }
        Err(err) => {
            let _ = ready.send(Err(err));
            return finish(index, worker, hook, outcome_counts);
        }
    };
    drop(ready);
    let taken_counter = &shared.taken[index].0;
    let mut msg = zmq::Message::new();
    let mut discarding = false;
    let mut in_batch = 0usize;
    loop {
        match pull.recv(&mut msg, zmq::DONTWAIT) {
            Ok(()) => {
                outcome_counts.taken += 1;
                taken_counter.store(outcome_counts.taken, Ordering::Release);
                if discarding || shared.abort.load(Ordering::Relaxed) {
                    outcome_counts.discarded += 1;
                    continue;
                }
                let Ok(view) = MessageRef::decode(&msg) else {
                    outcome_counts.malformed += 1;
                    continue;
                };
                let delivery = Delivery {
                    worker: index,
                    dequeued_ns: now_ns(),
                };
                if !hook.on_dequeue(&view, &delivery) {
                    discarding = true;
                    outcome_counts.discarded += 1;
                    continue;
                }
                worker.on_message(&view, &delivery);
                outcome_counts.processed += 1;
                in_batch += 1;
                if in_batch >= settings.batch {
                    worker.flush();
                    in_batch = 0;
                }
            }
            Err(zmq::Error::EAGAIN) => {
                if in_batch > 0 {
                    worker.flush();
                    in_batch = 0;
                }
                if shared.stop.load(Ordering::Acquire) || shared.abort.load(Ordering::Acquire) {
                    break;
                }
                // A failed poll (EINTR on a signal) just means "look again".
                let _ = pull.poll(zmq::POLLIN, settings.poll_ms);
            }
            Err(zmq::Error::EINTR) => {}
            Err(err) => {
                tracing::error!(worker = index, "receive failed, worker stops: {err}");
                break;
            }
        }
    }
    worker.flush();
    drop(pull);
    finish(index, worker, hook, outcome_counts)
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
    use tickbox_wire::{encode_to_vec, Header, Kind, Quote};

    #[test]
    fn every_message_reaches_exactly_one_worker_and_drains_on_stop() {
        let ctx = zmq::Context::new();
        let push = ctx.socket(zmq::PUSH).unwrap();
        push.set_linger(0).unwrap();
        push.bind("inproc://workers-test").unwrap();
        let config = WorkersConfig {
            count: 3,
            ..WorkersConfig::default()
        };
        let pool = WorkerPool::spawn(&ctx, &["inproc://workers-test".to_owned()], &config, |_| {
            (Stats::new(), NoHook)
        })
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
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while pool.taken() < N + 1 && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(1));
        }
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

    #[test]
    fn zero_workers_is_an_error() {
        let ctx = zmq::Context::new();
        let config = WorkersConfig {
            count: 0,
            ..WorkersConfig::default()
        };
        assert!(matches!(
            WorkerPool::spawn(&ctx, &[], &config, |_| (Stats::new(), NoHook)),
            Err(WorkerError::NoWorkers)
        ));
    }
}
