//! Titanic (9/TSP): durable request-reply on top of Majordomo.
//!
//! Toward clients Titanic is three MDP services — `titanic.request`, `titanic.reply`, `titanic.close` — and
//! toward real services it is an MDP client that forwards each stored request until it has a reply.
//!
//! * [`TitanicState`] is the sans-IO core: the in-memory index and every TSP rule (status codes, idempotence),
//!   producing journal events; [`TitanicState::apply`] replays them at start-up.
//! * [`TitanicStore`] couples the state to the project journal (`tickbox-journal`, archive layout in a
//!   directory): a `titanic.request` is answered `200` only after its REQUEST event is appended under the
//!   configured durability, so an acknowledged request survives a crash of Titanic, broker or worker.
//! * [`Titanic::start`] runs the three workers and the dispatcher as threads.
//!
//! Journal events (one record each; integers little-endian): `kind u8` (1 REQUEST, 2 REPLY, 3 CLOSE),
//! `uuid` (32 ASCII hex, uppercase), then for REQUEST `[service][body…]` and for REPLY `[body…]` as
//! `count u32` + (`len u32` + bytes) per frame.

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};
use tickbox_journal::{Durability, Reader, Writer, WriterOptions};
use tickbox_units::HumanDuration;

use crate::{Client, ClientConfig, Frames, MdpError, MdpWorker, MdpWorkerConfig};

pub use crate::engine::titanic::{
    normalize_uuid, Event, TitanicState, ERROR, OK, PENDING, UNKNOWN,
};

/// Why Titanic could not start or stopped.
#[derive(Debug, thiserror::Error)]
pub enum TitanicError {
    /// The journal directory could not be opened, read or appended to.
    #[error("journal: {0}")]
    Journal(#[from] tickbox_journal::JournalError),
    /// A worker or the dispatcher lost its broker conversation for good.
    #[error("majordomo: {0}")]
    Mdp(#[from] MdpError),
    /// A journal record that does not decode as a Titanic event.
    #[error("corrupt titanic event at journal seq {seq}: {reason}")]
    BadEvent {
        /// Journal sequence number of the record.
        seq: u64,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// A thread could not be spawned, panicked, or found the store lock poisoned.
    #[error("titanic thread failed: {0}")]
    Thread(String),
}

/// When the journal is forced to disk.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FsyncPolicy {
    /// msync before every acknowledgement (slowest, survives power loss).
    PerRequest,
    /// A background msync every `fsync_interval` (acknowledged requests survive a process crash at once,
    /// power loss after at most one interval).
    Periodic,
    /// Leave it to the kernel (survives a process crash, not power loss).
    None,
}

/// Titanic settings.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TitanicConfig {
    /// When an acknowledged request is forced to disk (default: before every acknowledgement).
    pub fsync: FsyncPolicy,
    /// Period of the background msync under [`FsyncPolicy::Periodic`] (at least 1 ms); unused otherwise.
    pub fsync_interval: HumanDuration,
    /// Journal segment size in bytes (requests and replies must each fit in half of it).
    pub segment_bytes: u64,
    /// How often the dispatcher rescans pending requests (reference: 1s; at least 1 ms is used).
    pub scan: HumanDuration,
    /// How long the dispatcher waits for a service's reply before trying again later.
    pub dispatch_timeout: HumanDuration,
    /// Worker heartbeat settings toward the broker.
    pub worker: MdpWorkerConfig,
}

impl Default for TitanicConfig {
    fn default() -> Self {
        Self {
            fsync: FsyncPolicy::PerRequest,
            fsync_interval: HumanDuration(Duration::from_millis(10)),
            segment_bytes: 64 << 20,
            scan: HumanDuration(Duration::from_millis(1000)),
            dispatch_timeout: HumanDuration(Duration::from_millis(5000)),
            worker: MdpWorkerConfig::default(),
        }
    }
}

// ---- durable store ------------------------------------------------------------------------------------------

/// What start-up recovery found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StoreRecovery {
    /// Journal records replayed.
    pub events: u64,
    /// Records skipped because they did not decode (logged, never fatal).
    pub bad_events: u64,
    /// Requests known after replay (answered or not, not closed).
    pub open_requests: usize,
    /// Of those, requests still waiting for a reply; the dispatcher resumes them.
    pub pending_requests: usize,
    /// Bytes of a torn tail the journal dropped on opening (a crash mid-append).
    pub discarded_bytes: u64,
}

/// The state plus its journal. Every state change is appended first and applied after the append returned.
pub struct TitanicStore {
    writer: Writer,
    state: TitanicState,
    recovery: StoreRecovery,
}

fn now_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

impl TitanicStore {
    /// Open (or create) the journal directory `dir` and rebuild the index from it.
    pub fn open(dir: &Path, cfg: &TitanicConfig) -> Result<Self, TitanicError> {
        let durability = match cfg.fsync {
            FsyncPolicy::PerRequest => Durability::PerBatch,
            FsyncPolicy::Periodic => {
                Durability::Periodic(cfg.fsync_interval.0.max(Duration::from_millis(1)))
            }
            FsyncPolicy::None => Durability::None,
        };
        let opts = WriterOptions::archive(cfg.segment_bytes)
            .durability(durability)
            .description("tickbox titanic");
        let writer = Writer::open(dir, &opts)?;
        let mut recovery = StoreRecovery {
            discarded_bytes: writer.recovery().discarded_bytes,
            ..Default::default()
        };
        let mut state = TitanicState::default();
        if writer.next_seq() > 1 {
            let mut reader = Reader::open(dir)?;
            while let Some(rec) = reader.next()? {
                recovery.events += 1;
                match Event::decode(rec.payload) {
                    Ok(ev) => state.apply(ev),
                    Err(reason) => {
                        recovery.bad_events += 1;
                        tracing::warn!(seq = rec.seq, reason, "skipping corrupt titanic event");
                    }
                }
            }
        }
        recovery.open_requests = state.len();
        recovery.pending_requests = state.pending_len();
        tracing::info!(?recovery, dir = %dir.display(), "titanic store recovered");
        Ok(Self {
            writer,
            state,
            recovery,
        })
    }

    /// What opening the store found.
    pub fn recovery(&self) -> &StoreRecovery {
        &self.recovery
    }

    /// The index as of the last committed event.
    pub fn state(&self) -> &TitanicState {
        &self.state
    }

    /// Append `ev` under the durability policy, then apply it.
    pub fn commit(&mut self, ev: Event) -> Result<(), TitanicError> {
        self.writer.append(now_ns(), &ev.encode())?;
        self.state.apply(ev);
        Ok(())
    }

    /// Handle a `titanic.request`: journal it and return `[200][uuid]`, or the error status.
    pub fn request(&mut self, body: Frames) -> Frames {
        match self.state.request_event(body) {
            Ok(ev) => {
                let Event::Request { uuid, .. } = &ev else {
                    unreachable!("request_event returns requests")
                };
                let uuid = uuid.clone().into_bytes();
                match self.commit(ev) {
                    Ok(()) => vec![OK.to_vec(), uuid],
                    Err(e) => {
                        tracing::error!("titanic: cannot store request: {e}");
                        vec![ERROR.to_vec()]
                    }
                }
            }
            Err(code) => vec![code.to_vec()],
        }
    }

    /// Handle a `titanic.reply` (`[uuid]`): `[200][reply…]`, `[300]` while pending, `[400]` if unknown.
    pub fn reply(&self, body: &[Vec<u8>]) -> Frames {
        self.state.reply_status(body)
    }

    /// Handle a `titanic.close` (`[uuid]`): journal the close of a known request; `[200]` either way, `[500]`
    /// if the journal refused the append.
    pub fn close(&mut self, body: &[Vec<u8>]) -> Frames {
        if let Some(ev) = self.state.close_event(body) {
            if let Err(e) = self.commit(ev) {
                tracing::error!("titanic: cannot store close: {e}");
                return vec![ERROR.to_vec()];
            }
        }
        vec![OK.to_vec()]
    }

    /// Store the reply the dispatcher got for `uuid` (ignored if the request was closed meanwhile).
    pub fn store_reply(&mut self, uuid: &str, body: Frames) -> Result<(), TitanicError> {
        if !self.state.is_pending(uuid) {
            return Ok(());
        }
        self.commit(Event::Reply {
            uuid: uuid.to_string(),
            body,
        })
    }
}

// ---- threads ------------------------------------------------------------------------------------------------

/// Counters of a running Titanic.
#[derive(Debug, Default)]
pub struct TitanicCounters {
    /// Requests forwarded to their (present) service, retries included.
    pub dispatched: AtomicU64,
    /// Service replies journaled.
    pub replies_stored: AtomicU64,
}

/// A running Titanic: three worker threads and a dispatcher sharing one store.
pub struct Titanic {
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<Result<(), TitanicError>>>,
    store: Arc<Mutex<TitanicStore>>,
    /// Live counters; clone the `Arc` to read them after [`Titanic::wait`] consumed the handle.
    pub counters: Arc<TitanicCounters>,
}

impl Titanic {
    /// Recover the store in `dir` and start serving through the broker at `broker`.
    pub fn start(
        ctx: &zmq::Context,
        broker: &str,
        dir: &Path,
        cfg: TitanicConfig,
    ) -> Result<Self, TitanicError> {
        let store = Arc::new(Mutex::new(TitanicStore::open(dir, &cfg)?));
        let stop = Arc::new(AtomicBool::new(false));
        let counters = Arc::new(TitanicCounters::default());
        let mut threads = Vec::new();
        for service in ["titanic.request", "titanic.reply", "titanic.close"] {
            let (ctx, broker, store, stop, wcfg) = (
                ctx.clone(),
                broker.to_string(),
                Arc::clone(&store),
                Arc::clone(&stop),
                cfg.worker.clone(),
            );
            threads.push(
                std::thread::Builder::new()
                    .name(service.into())
                    .spawn(move || {
                        let mut w = MdpWorker::connect(&ctx, &broker, service, wcfg)?;
                        w.serve(&stop, |body| {
                            let Ok(mut s) = store.lock() else {
                                return vec![ERROR.to_vec()];
                            };
                            match service {
                                "titanic.request" => s.request(body.clone()),
                                "titanic.reply" => s.reply(body),
                                _ => s.close(body),
                            }
                        })?;
                        Ok(())
                    })
                    .map_err(|e| TitanicError::Thread(e.to_string()))?,
            );
        }
        let (c, b, st, sp, cn) = (
            ctx.clone(),
            broker.to_string(),
            Arc::clone(&store),
            Arc::clone(&stop),
            Arc::clone(&counters),
        );
        threads.push(
            std::thread::Builder::new()
                .name("titanic-dispatch".into())
                .spawn(move || dispatcher(&c, &b, &st, &sp, &cfg, &cn))
                .map_err(|e| TitanicError::Thread(e.to_string()))?,
        );
        Ok(Self {
            stop,
            threads,
            store,
            counters,
        })
    }

    /// Number of requests stored and not yet closed, and of those still waiting for a reply.
    pub fn sizes(&self) -> (usize, usize) {
        self.store
            .lock()
            .map_or((0, 0), |s| (s.state().len(), s.state().pending_len()))
    }

    /// What start-up recovery found.
    pub fn recovery(&self) -> StoreRecovery {
        self.store
            .lock()
            .map(|s| s.recovery().clone())
            .unwrap_or_default()
    }

    /// Stop all threads and close the journal.
    pub fn stop(mut self) -> Result<(), TitanicError> {
        self.shutdown()
    }

    fn shutdown(&mut self) -> Result<(), TitanicError> {
        self.stop.store(true, Ordering::Relaxed);
        let mut first_err = None;
        for t in self.threads.drain(..) {
            let r = t
                .join()
                .unwrap_or_else(|_| Err(TitanicError::Thread("panicked".into())));
            if let Err(e) = r {
                first_err.get_or_insert(e);
            }
        }
        first_err.map_or(Ok(()), Err)
    }

    /// Run until `stop` is set (for the CLI).
    pub fn wait(mut self, stop: &AtomicBool) -> Result<(), TitanicError> {
        while !stop.load(Ordering::Relaxed) && self.threads.iter().all(|t| !t.is_finished()) {
            std::thread::sleep(Duration::from_millis(100));
        }
        self.shutdown()
    }
}

impl Drop for Titanic {
    fn drop(&mut self) {
        let _ = self.shutdown();
    }
}

fn dispatcher(
    ctx: &zmq::Context,
    broker: &str,
    store: &Mutex<TitanicStore>,
    stop: &AtomicBool,
    cfg: &TitanicConfig,
    counters: &TitanicCounters,
) -> Result<(), TitanicError> {
    let mut mmi = Client::new(
        ctx,
        broker,
        ClientConfig {
            timeout: HumanDuration(Duration::from_millis(1000)),
            attempts: 1,
        },
    );
    let mut client = Client::new(
        ctx,
        broker,
        ClientConfig {
            timeout: cfg.dispatch_timeout,
            attempts: 1,
        },
    );
    let scan = cfg.scan.0.max(Duration::from_millis(1));
    let mut next_scan = Instant::now();
    while !stop.load(Ordering::Relaxed) {
        let now = Instant::now();
        if now < next_scan {
            std::thread::sleep((next_scan - now).min(Duration::from_millis(50)));
            continue;
        }
        next_scan = now + scan;
        let pending = store
            .lock()
            .map_err(|_| TitanicError::Thread("store poisoned".into()))?
            .state()
            .pending();
        let mut absent: Vec<Vec<u8>> = Vec::new();
        for (uuid, service, body) in pending {
            if stop.load(Ordering::Relaxed) {
                break;
            }
            if absent.contains(&service) {
                continue;
            }
            // Ask the broker first so a request for an absent service does not sit in the broker queue.
            let present = match std::str::from_utf8(&service) {
                Ok(name) => match mmi.request("mmi.service", &[name.as_bytes().to_vec()]) {
                    Ok(r) => r.first().map(Vec::as_slice) == Some(OK),
                    Err(_) => false,
                },
                Err(_) => false,
            };
            if !present {
                absent.push(service);
                continue;
            }
            counters.dispatched.fetch_add(1, Ordering::Relaxed);
            let name = String::from_utf8_lossy(&service).into_owned();
            match client.request(&name, &body) {
                Ok(reply) => {
                    store
                        .lock()
                        .map_err(|_| TitanicError::Thread("store poisoned".into()))?
                        .store_reply(&uuid, reply)?;
                    counters.replies_stored.fetch_add(1, Ordering::Relaxed);
                    // More may be waiting: come back at once rather than after a full scan interval.
                    next_scan = Instant::now();
                }
                Err(e) => tracing::debug!(%uuid, "dispatch failed, retrying later: {e}"),
            }
        }
    }
    Ok(())
}
