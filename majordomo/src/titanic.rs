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
//! Journal events (one record each; integers little-endian): `kind u8` (1 REQUEST, 2 REPLY, 3 CLOSE,
//! 4 DISPATCH, 5 FAILED, 6 UNDELIVERED), `uuid` (32 ASCII hex, uppercase), then for REQUEST `[service][body…]`
//! and for REPLY `[body…]` as `count u32` + (`len u32` + bytes) per frame; for DISPATCH `attempt u32` +
//! `at_ns u64` (wall clock); for FAILED the reason as UTF-8; for UNDELIVERED `attempt u32`.
//!
//! # Delivery guarantee
//!
//! Each request moves through a write-ahead life cycle in the journal: *queued* (REQUEST) → *dispatched*
//! (DISPATCH, attempt *n*, journaled **before** the request is sent) → *replied* (REPLY) or *failed*
//! (FAILED). From this:
//!
//! * **Acknowledged means durable.** `titanic.request` answers `200` only after the REQUEST is appended
//!   (under [`TitanicConfig::fsync`]); the request survives crashes of Titanic, broker and workers.
//! * **No duplicate while an attempt may be running.** Once sent, an attempt is waited for until its reply or
//!   [`TitanicConfig::job_timeout`] (default 60 s), however long that is. [`TitanicConfig::dispatch_timeout`]
//!   only logs a slow service; it never causes a re-send. Each attempt is sent from its own socket whose
//!   routing identity is the request id (`TSP:<uuid>:<attempt>`), so replies are matched exactly.
//! * **Across a Titanic crash** a request found *dispatched* is never sent again blindly: the restarted
//!   Titanic listens again under the same identity until that attempt's `job_timeout` (counted from the
//!   journaled send time), so a service still working on it delivers its reply to the new process.
//! * **Never delivered means sent again.** The broker never hands a request to a worker it holds for dead
//!   (heartbeat expiry is checked at dispatch), and puts a REQUEST whose worker's connection is gone back at
//!   the head of its queue for the next worker. A request it drops without any worker having had it (refused
//!   by a queue bound, or expired in its queue) is reported to the dispatcher with an `mmi.undelivered` notice
//!   (`crate::proto::UNDELIVERED`); Titanic journals UNDELIVERED for that attempt and sends the
//!   request again at its next scan under every policy, since it cannot have run. Such attempts do not count
//!   towards `max_attempts`.
//! * **At most once** ([`Redispatch::Never`], the default): a request that reached a worker is sent at most
//!   once. If no reply comes within `job_timeout` (the worker crashed or hung while holding it, or the reply
//!   arrived while Titanic was down) its outcome is unknown: the request is marked failed and `titanic.reply`
//!   answers `[400]["outcome unknown: …"]`, a final status (exactly the three digits, then the reason), instead
//!   of `300` for ever or a `500` that TSP clients retry for ever. The service may or may not have executed
//!   it; nothing runs it again. A client that gets it decides: ask the service, or submit a new request if the
//!   service is idempotent; either way `titanic.close` it.
//! * **Exactly once with a deduping service** ([`Redispatch::AfterTimeout`]): after each `job_timeout`
//!   without a reply the request is sent again with the *same* request id and the next attempt number, at most
//!   [`TitanicConfig::max_attempts`] delivered sends, then marked failed (`400`, as above). The service must treat the request id
//!   (`Request::titanic_id`, the UUID in the client address frame) as an idempotency key: run once, answer
//!   duplicates with the stored reply. [`MdpWorker::dedupe`] does this for a single worker process; a service
//!   with several workers, or whose workers restart, needs a shared durable store keyed by the id. A service
//!   that does not dedupe gets at-least-once under this policy.
//! * A reply that arrives after the request was marked failed still replaces the failure (the real outcome is
//!   better than a guess), so a client polling past a `400` may yet see `200`.

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
    dispatch_identity, normalize_uuid, request_id_of, DispatchPolicy, Event, Redispatch, Step,
    TitanicState, ERROR, OK, PENDING, UNKNOWN,
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
    /// A dispatched request without a reply after this long is logged as slow. It is **not** re-sent: the
    /// attempt keeps waiting up to `job_timeout` (see the module docs).
    pub dispatch_timeout: HumanDuration,
    /// How long one attempt may run before it counts as lost (default 60 s); then `redispatch` decides.
    /// Counted from the journaled send time, so it spans Titanic restarts.
    pub job_timeout: HumanDuration,
    /// What happens after an attempt timed out: `"never"` (default: at most once, the request is marked
    /// failed) or `"after_timeout"` (re-sent with the same request id, up to `max_attempts`).
    pub redispatch: Redispatch,
    /// Sends per request in all under `redispatch = "after_timeout"` (default 3, at least 1).
    pub max_attempts: u32,
    /// Requests stored and not yet closed (default 100 000); a `titanic.request` beyond it is answered
    /// `500 too many open requests` and counted ([`TitanicStore::refused`]). Clients bound it by closing.
    pub max_open_requests: usize,
    /// Requests waiting for a reply at once, all services together (default 64, at least 1); each holds one
    /// socket.
    pub max_in_flight: usize,
    /// Requests waiting for a reply at once per service (default 1, at least 1). `job_timeout` runs from the
    /// send, time queued in the broker included, so raise this only up to the number of workers the service
    /// has.
    pub max_in_flight_per_service: usize,
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
            job_timeout: HumanDuration(Duration::from_secs(60)),
            redispatch: Redispatch::Never,
            max_attempts: 3,
            max_open_requests: 100_000,
            max_in_flight: 64,
            max_in_flight_per_service: 1,
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
    /// Of the pending, requests already sent before the restart (listened for again, never blindly re-sent).
    pub dispatched_requests: usize,
    /// Bytes of a torn tail the journal dropped on opening (a crash mid-append).
    pub discarded_bytes: u64,
}

/// The state plus its journal. Every state change is appended first and applied after the append returned.
pub struct TitanicStore {
    writer: Writer,
    state: TitanicState,
    recovery: StoreRecovery,
    max_open: usize,
    refused: u64,
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
        recovery.dispatched_requests = state.dispatched_len();
        tracing::info!(?recovery, dir = %dir.display(), "titanic store recovered");
        Ok(Self {
            writer,
            state,
            recovery,
            max_open: cfg.max_open_requests,
            refused: 0,
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

    /// `titanic.request`s refused because `max_open_requests` were open.
    pub fn refused(&self) -> u64 {
        self.refused
    }

    /// Handle a `titanic.request`: journal it and return `[200][uuid]`, or the error status.
    pub fn request(&mut self, body: Frames) -> Frames {
        if self.state.len() >= self.max_open {
            self.refused += 1;
            // Rate-limited: any client can trigger this at will.
            if self.refused.is_power_of_two() {
                tracing::warn!(refused = self.refused, "titanic full, refusing requests");
            }
            return vec![b"500 too many open requests".to_vec()];
        }
        match self
            .state
            .request_event(body, *uuid::Uuid::new_v4().as_bytes())
        {
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

    /// Journal that attempt `attempt` of `uuid` is about to be sent (write-ahead: before the send).
    pub fn dispatch(&mut self, uuid: &str, attempt: u32) -> Result<(), TitanicError> {
        self.commit(Event::Dispatch {
            uuid: uuid.to_string(),
            attempt,
            at_ns: now_ns(),
        })
    }

    /// Journal that attempt `attempt` of `uuid` reached no worker (the broker said so): it is sent again.
    pub fn undelivered(&mut self, uuid: &str, attempt: u32) -> Result<(), TitanicError> {
        if !self.state.is_pending(uuid) {
            return Ok(());
        }
        self.commit(Event::Undelivered {
            uuid: uuid.to_string(),
            attempt,
        })
    }

    /// Give up on `uuid`: `titanic.reply` answers `[400][<reason>]` from then on.
    pub fn fail(&mut self, uuid: &str, reason: String) -> Result<(), TitanicError> {
        if !self.state.is_pending(uuid) || self.state.is_failed(uuid) {
            return Ok(());
        }
        self.commit(Event::Failed {
            uuid: uuid.to_string(),
            reason,
        })
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
    /// Requests forwarded to their (present) service, re-sends included.
    pub dispatched: AtomicU64,
    /// Of those, re-sends (attempt 2 and later, `redispatch = "after_timeout"`).
    pub redispatched: AtomicU64,
    /// Attempts found in flight at start-up and listened for again.
    pub resumed: AtomicU64,
    /// Requests marked failed (no reply within `job_timeout`, attempts exhausted).
    pub failed: AtomicU64,
    /// Attempts the broker reported undelivered (`mmi.undelivered`): journaled and sent again.
    pub undelivered: AtomicU64,
    /// Service replies journaled.
    pub replies_stored: AtomicU64,
    /// Replies discarded because they did not parse as MDP or named another service.
    pub malformed_replies: AtomicU64,
    /// `titanic.request`s refused because `max_open_requests` were open.
    pub requests_refused: AtomicU64,
}

/// A running Titanic: three worker threads and a dispatcher sharing one store.
pub struct Titanic {
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<Result<(), TitanicError>>>,
    store: Arc<Mutex<TitanicStore>>,
    /// Live counters; clone the `Arc` to read them after [`Titanic::wait`] consumed the handle.
    pub counters: Arc<TitanicCounters>,
    registration: Registration,
}

/// Where Titanic's workers register, kept to ask the broker whether it has seen them.
struct Registration {
    ctx: zmq::Context,
    broker: String,
    security: tickbox_auth::Security,
}

impl Titanic {
    /// The services Titanic registers with its broker.
    pub const SERVICES: [&'static str; 3] = ["titanic.request", "titanic.reply", "titanic.close"];

    /// Recover the store in `dir` and start serving through the broker at `broker`.
    pub fn start(
        ctx: &zmq::Context,
        broker: &str,
        dir: &Path,
        cfg: TitanicConfig,
    ) -> Result<Self, TitanicError> {
        let store = Arc::new(Mutex::new(TitanicStore::open(dir, &cfg)?));
        let registration = Registration {
            ctx: ctx.clone(),
            broker: broker.to_string(),
            security: cfg.worker.security.clone(),
        };
        let stop = Arc::new(AtomicBool::new(false));
        let counters = Arc::new(TitanicCounters::default());
        let mut threads = Vec::new();
        for service in Self::SERVICES {
            let (ctx, broker, store, stop, wcfg, cn) = (
                ctx.clone(),
                broker.to_string(),
                Arc::clone(&store),
                Arc::clone(&stop),
                cfg.worker.clone(),
                Arc::clone(&counters),
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
                                "titanic.request" => {
                                    let before = s.refused();
                                    let r = s.request(body.clone());
                                    if s.refused() > before {
                                        cn.requests_refused.fetch_add(1, Ordering::Relaxed);
                                    }
                                    r
                                }
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
            registration,
        })
    }

    /// Waits, at most `within`, until the broker serves all of [`Self::SERVICES`]; false when it does not yet.
    /// Announce readiness only after this, or the first callers may be told the services do not exist.
    pub fn await_registered(&self, within: Duration) -> Result<bool, TitanicError> {
        let r = &self.registration;
        Ok(crate::client::await_served(
            &r.ctx,
            &r.broker,
            &r.security,
            &Self::SERVICES,
            within,
        )?)
    }

    /// Number of requests stored and not yet closed, and of those still waiting for a reply.
    pub fn sizes(&self) -> (usize, usize) {
        self.store
            .lock()
            .map_or((0, 0), |s| (s.state().len(), s.state().pending_len()))
    }

    /// `titanic.request`s refused so far because `max_open_requests` were open.
    pub fn refused(&self) -> u64 {
        self.store.lock().map_or(0, |s| s.refused())
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

/// One attempt this process is waiting for, on its own socket.
struct InFlight {
    uuid: String,
    attempt: u32,
    service: Vec<u8>,
    socket: zmq::Socket,
    deadline: Instant,
    slow_at: Instant,
}

fn open_attempt(
    ctx: &zmq::Context,
    broker: &str,
    uuid: &str,
    attempt: u32,
    security: &tickbox_auth::Security,
) -> Result<zmq::Socket, MdpError> {
    let s = ctx.socket(zmq::DEALER)?;
    s.set_linger(0)?;
    s.set_identity(&dispatch_identity(uuid, attempt))?;
    // Titanic calls services with its own key (role `broker`, as its workers): the grants see Titanic, so
    // limit `titanic.*` to the keys that may reach the services behind it (docs/book/src/protocols.md §2.4).
    security.client(&s, "broker")?;
    s.connect(broker)?;
    Ok(s)
}

fn lock(
    store: &Mutex<TitanicStore>,
) -> Result<std::sync::MutexGuard<'_, TitanicStore>, TitanicError> {
    store
        .lock()
        .map_err(|_| TitanicError::Thread("store poisoned".into()))
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
    )
    .with_security(cfg.worker.security.clone());
    let policy = DispatchPolicy {
        redispatch: cfg.redispatch,
        job_timeout_ns: u64::try_from(cfg.job_timeout.0.as_nanos()).unwrap_or(u64::MAX),
        max_attempts: cfg.max_attempts.max(1),
    };
    let max_in_flight = cfg.max_in_flight.max(1);
    let per_service = cfg.max_in_flight_per_service.max(1);
    let scan = cfg.scan.0.max(Duration::from_millis(1));
    let mut next_scan = Instant::now();
    let mut in_flight: Vec<InFlight> = Vec::new();
    while !stop.load(Ordering::Relaxed) {
        let now = Instant::now();
        if now >= next_scan && in_flight.len() < max_in_flight {
            next_scan = now + scan;
            let wall = now_ns();
            let steps = lock(store)?
                .state()
                .plan(wall, &policy, |u| in_flight.iter().any(|f| f.uuid == u));
            let mut absent: Vec<Vec<u8>> = Vec::new();
            let mut present_now: Vec<Vec<u8>> = Vec::new();
            for step in steps {
                if stop.load(Ordering::Relaxed) || in_flight.len() >= max_in_flight {
                    break;
                }
                match step {
                    Step::Fail { uuid, reason } => {
                        tracing::warn!(%uuid, %reason, "titanic request failed");
                        lock(store)?.fail(&uuid, reason)?;
                        counters.failed.fetch_add(1, Ordering::Relaxed);
                    }
                    Step::Resume {
                        uuid,
                        service,
                        attempt,
                        deadline_ns,
                    } => {
                        let left = Duration::from_nanos(deadline_ns.saturating_sub(wall));
                        tracing::info!(%uuid, attempt, ?left, "listening again for a request sent before the restart");
                        let socket =
                            open_attempt(ctx, broker, &uuid, attempt, &cfg.worker.security)?;
                        let now = Instant::now();
                        in_flight.push(InFlight {
                            uuid,
                            attempt,
                            service,
                            socket,
                            deadline: now + left,
                            slow_at: now + left,
                        });
                        counters.resumed.fetch_add(1, Ordering::Relaxed);
                    }
                    Step::Send {
                        uuid,
                        service,
                        body,
                        attempt,
                    } => {
                        let busy = in_flight.iter().filter(|f| f.service == service).count();
                        if absent.contains(&service) || busy >= per_service {
                            continue;
                        }
                        // Ask the broker first so a request for an absent service does not sit in the
                        // broker queue, where it would expire unexecuted yet count as an attempt.
                        let present = present_now.contains(&service)
                            || match std::str::from_utf8(&service) {
                                Ok(name) => {
                                    match mmi.request("mmi.service", &[name.as_bytes().to_vec()]) {
                                        Ok(r) => r.first().map(Vec::as_slice) == Some(OK),
                                        Err(_) => false,
                                    }
                                }
                                Err(_) => false,
                            };
                        if !present {
                            absent.push(service);
                            continue;
                        }
                        if !present_now.contains(&service) {
                            present_now.push(service.clone());
                        }
                        let socket =
                            open_attempt(ctx, broker, &uuid, attempt, &cfg.worker.security)?;
                        // Write-ahead: once this is durable a restart knows the service may be running it.
                        lock(store)?.dispatch(&uuid, attempt)?;
                        let head: [&[u8]; 3] = [b"", crate::proto::MDPC01, &service];
                        socket
                            .send_multipart(
                                head.into_iter().chain(body.iter().map(Vec::as_slice)),
                                0,
                            )
                            .map_err(MdpError::from)?;
                        counters.dispatched.fetch_add(1, Ordering::Relaxed);
                        if attempt > 1 {
                            counters.redispatched.fetch_add(1, Ordering::Relaxed);
                        }
                        let now = Instant::now();
                        in_flight.push(InFlight {
                            uuid,
                            attempt,
                            service,
                            socket,
                            deadline: now + cfg.job_timeout.0,
                            slow_at: now + cfg.dispatch_timeout.0,
                        });
                    }
                }
            }
        }
        // Wait for replies on every attempt in flight, at most until the next scan or 50 ms (the stop flag).
        let now = Instant::now();
        let wake = next_scan.max(now).min(now + Duration::from_millis(50));
        if in_flight.is_empty() {
            std::thread::sleep(wake - now);
            continue;
        }
        let ready: Vec<bool> = {
            let mut items: Vec<zmq::PollItem<'_>> = in_flight
                .iter()
                .map(|f| f.socket.as_poll_item(zmq::POLLIN))
                .collect();
            zmq::poll(&mut items, tickbox_zmqx::socket::poll_ms_until(wake, now))
                .map_err(MdpError::from)?;
            items.iter().map(zmq::PollItem::is_readable).collect()
        };
        let now = Instant::now();
        // Backwards, so `swap_remove` only ever moves an entry already handled.
        for i in (0..in_flight.len()).rev() {
            let f = &mut in_flight[i];
            if ready.get(i).copied().unwrap_or(false) {
                if let Ok(mut reply) = f.socket.recv_multipart(zmq::DONTWAIT) {
                    let ok = reply.len() >= 4
                        && reply[0].is_empty()
                        && reply[1] == crate::proto::MDPC01
                        && reply[2] == f.service;
                    if ok {
                        let body = reply.split_off(3);
                        lock(store)?.store_reply(&f.uuid, body)?;
                        counters.replies_stored.fetch_add(1, Ordering::Relaxed);
                        in_flight.swap_remove(i);
                        // Capacity freed and more may be waiting: scan at once.
                        next_scan = now;
                        continue;
                    }
                    // The broker's notice that this attempt reached no worker: journal it; the next scan
                    // (not at once: a full broker is not hammered) sends the request again.
                    let undelivered = reply.len() == 5
                        && reply[0].is_empty()
                        && reply[1] == crate::proto::MDPC01
                        && reply[2] == crate::proto::UNDELIVERED
                        && reply[3] == f.service;
                    if undelivered {
                        tracing::info!(
                            uuid = %f.uuid,
                            attempt = f.attempt,
                            reason = %String::from_utf8_lossy(&reply[4]),
                            "the broker did not deliver the request; it will be sent again"
                        );
                        lock(store)?.undelivered(&f.uuid, f.attempt)?;
                        counters.undelivered.fetch_add(1, Ordering::Relaxed);
                        in_flight.swap_remove(i);
                        continue;
                    }
                    counters.malformed_replies.fetch_add(1, Ordering::Relaxed);
                }
            }
            if now >= f.deadline {
                // The plan decides what a lost attempt means (fail, or re-send under the same id).
                tracing::debug!(uuid = %f.uuid, "attempt reached job_timeout");
                in_flight.swap_remove(i);
                next_scan = now;
            } else if now >= f.slow_at {
                tracing::info!(uuid = %f.uuid, "service slower than dispatch_timeout; still waiting, not re-sending");
                f.slow_at = f.deadline;
            }
        }
    }
    Ok(())
}
