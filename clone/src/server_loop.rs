//! The Clone server's socket loop: one thread owning the ROUTER (snapshot, P), PUB (updates, P+1), SUB
//! (collector, P+2), and in a Binary Star pair the state sockets plus a SUB/DEALER towards the peer.
//!
//! **How the sockets close.** libzmq 4.3.4 aborts the process
//! (`Resource temporarily unavailable (session_base.cpp:260)`) when a session whose TCP engine is part-way
//! through a multipart message (its peer stalled, TCP window full) has given up its pipe without delay (linger
//! 0, or a positive linger running out) and the connection then fails before the socket has acknowledged:
//! `clean_pipes` cannot read the rest of the message and asserts. CHP is multipart by specification, so the two
//! sockets that send it to peers, the snapshot ROUTER and the update PUB, are set up by
//! [`tickbox_zmqx::prepare_multipart_sender`]: `ZMQ_TCP_MAXRT` = [`ServerConfig::stalled_peer_timeout`] (the
//! kernel gives up a peer that stops acknowledging) and a linger of twice that plus 1 s, so a stalled peer's
//! engine fails while its pipe is still readable and the abort cannot happen; the stop still ends within the
//! linger (measured 0 aborts in 1,400 closes with the peer hanging up 0 to 1.7 s after the close). Both are
//! bound, so they never hold a message for a peer that is not connected. The SUBs send only single-frame subscriptions and the
//! passive's DEALER a small request to a peer that may be down, so they keep the short
//! [`ServerConfig::close_linger`] (never 0). `disconnect`/`unbind` would make the abort certain and are never
//! used. The full account and the measurements are in `docs/book/src/libzmq-traps.md`. Snapshots are sent with `DONTWAIT` on
//! the identity frame of a `ZMQ_ROUTER_MANDATORY` ROUTER, so a message is never abandoned half-written either.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use tickbox_bstar::{
    BstarConfig, BstarEndpoints, BstarError, BstarNode, BstarNodeError, Role, State, Transition,
    Vote,
};

use crate::engine::server::{KvsetOutcome, ServerConfig, ServerEngine};
use crate::io::send_icanhaz;
use crate::msg::{decode_icanhaz, KvMsg, KTHXBAI};
use crate::msg::{HUGZ, NOPE};
use crate::store::Store;
use crate::CloneError;
use tickbox_zmqx::socket::{last_endpoint, poll_ms_until, PassBudget, WarnGate};

/// The three server endpoints. For a server these are bind addresses, for a client connect addresses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerEndpoints {
    /// Port P: the ROUTER that answers ICANHAZ with a snapshot (also the Binary Star voter socket).
    pub snapshot: String,
    /// Port P+1: the PUB that carries every published update and HUGZ.
    pub publisher: String,
    /// Port P+2: the SUB where clients' KVSETs arrive.
    pub collector: String,
}

impl ServerEndpoints {
    /// `tcp://HOST:P` → P, P+1, P+2 as CHP prescribes.
    pub fn from_base(base: &str) -> Result<Self, CloneError> {
        let bad = || CloneError::BadEndpoint(base.to_owned());
        let rest = base.strip_prefix("tcp://").ok_or_else(bad)?;
        let (host, port) = rest.rsplit_once(':').ok_or_else(bad)?;
        let port: u16 = port.parse().map_err(|_| bad())?;
        if host.is_empty() || port == 0 {
            return Err(bad());
        }
        check_base_port(port)?;
        Ok(Self::from_host_port(host, port))
    }

    /// The triple `tcp://host:port`, `port + 1`, `port + 2`; `port` must be at most [`MAX_BASE_PORT`] (checked
    /// by [`check_base_port`]); a larger one saturates rather than wrapping round to a low port.
    pub fn from_host_port(host: &str, port: u16) -> Self {
        ServerEndpoints {
            snapshot: format!("tcp://{host}:{port}"),
            publisher: format!("tcp://{host}:{}", port.saturating_add(1)),
            collector: format!("tcp://{host}:{}", port.saturating_add(2)),
        }
    }

    /// Parses a comma-separated list of `tcp://HOST:P` bases.
    pub fn parse_list(list: &str) -> Result<Vec<Self>, CloneError> {
        list.split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(Self::from_base)
            .collect()
    }
}

/// The highest base port: the server also uses P+1 and P+2, which must be valid ports too.
pub const MAX_BASE_PORT: u16 = u16::MAX - 2;

/// Fails with a clear [`CloneError::BadEndpoint`] when `port + 2` would not be a port (it would wrap round to a
/// low port, or overflow).
pub fn check_base_port(port: u16) -> Result<(), CloneError> {
    if port > MAX_BASE_PORT {
        return Err(CloneError::BadEndpoint(format!(
            "base port {port}: the server uses P, P+1 and P+2, so P must be at most {MAX_BASE_PORT}"
        )));
    }
    Ok(())
}

/// How the server binds its three sockets.
#[derive(Debug, Clone)]
pub enum ServerBind {
    /// Base port P on an interface address (`*` = all); port 0 picks a free consecutive triple.
    Base {
        /// Address to bind on; `*` or empty binds all interfaces.
        interface: String,
        /// The base port P, or 0 for the first free P..P+2 triple.
        port: u16,
    },
    /// Three arbitrary endpoints (any transport), bound as given.
    Explicit(ServerEndpoints),
}

/// Binary Star settings of one server of the pair.
#[derive(Debug, Clone)]
pub struct HaOptions {
    /// Primary or backup; only the primary may become active before it has heard its peer.
    pub role: Role,
    /// Where our Binary Star state PUB binds and where the peer's is.
    pub state: BstarEndpoints,
    /// The peer server's endpoints (connect side): its snapshot ROUTER and update PUB.
    pub peer: ServerEndpoints,
    /// Heartbeat timing of the pair; must match the peer's.
    pub bstar: BstarConfig,
}

/// Everything [`CloneServer::start`] needs.
#[derive(Debug, Clone)]
pub struct ServerOptions {
    /// Where the three sockets bind.
    pub bind: ServerBind,
    /// Binary Star settings, or `None` for a stand-alone server that serves at once.
    pub ha: Option<HaOptions>,
    /// Limits and timers of the engine.
    pub config: ServerConfig,
    /// Persist the map (snapshot + append-only update log) here.
    pub data_dir: Option<PathBuf>,
}

/// Counters shared with the handle (read from any thread).
#[derive(Debug, Default)]
pub struct SharedStats {
    pub(crate) state: AtomicU8,
    /// The server's current sequence number.
    pub sequence: AtomicU64,
    /// Keys in the map now.
    pub keys: AtomicU64,
    /// Updates published so far (see [`ServerStats::published`](crate::engine::server::ServerStats)).
    pub published: AtomicU64,
    /// Client updates dropped so far, all reasons together, including pending-list overflow.
    pub dropped: AtomicU64,
    /// Undecodable messages dropped so far, from clients and from the peer.
    pub malformed: AtomicU64,
    /// Client requests the Binary Star voter rejected (we were not active) and left unanswered.
    pub rejected_votes: AtomicU64,
    /// Snapshots (KTHXBAI-terminated replies to ICANHAZ) sent so far.
    pub snapshots_served: AtomicU64,
    /// ICANHAZ refused because too many snapshots were in flight (overall or for that requester).
    pub snapshots_refused: AtomicU64,
    /// Snapshots abandoned before KTHXBAI: the requester vanished, stalled past `snapshot_stall`, or the server
    /// stopped serving.
    pub snapshots_truncated: AtomicU64,
    /// Snapshots being streamed now.
    pub snapshots_in_flight: AtomicU64,
    /// `NOPE` refusal notices published.
    pub refusal_notices: AtomicU64,
    /// Refusals not answered because of `refusal_notices_per_sec`.
    pub refusal_notices_suppressed: AtomicU64,
    /// Warning lines not logged because of rate limiting (all kinds together).
    pub log_suppressed: AtomicU64,
    /// Bytes charged to the general budget now (see [`ServerConfig::max_bytes`]).
    pub bytes: AtomicU64,
    /// Keys under the reserved prefixes now.
    pub reserved_keys: AtomicU64,
    /// Bytes charged to the reserved-prefix budget now.
    pub reserved_bytes: AtomicU64,
    /// Client updates held on the pending list now.
    pub pending: AtomicU64,
}

impl SharedStats {
    /// The counters now, for `clone-server --json` (names as the fields'; integers).
    pub fn totals(&self) -> std::collections::BTreeMap<&'static str, u64> {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        std::collections::BTreeMap::from([
            ("sequence", get(&self.sequence)),
            ("keys", get(&self.keys)),
            ("published", get(&self.published)),
            ("dropped", get(&self.dropped)),
            ("malformed", get(&self.malformed)),
            ("rejected_votes", get(&self.rejected_votes)),
            ("snapshots_served", get(&self.snapshots_served)),
            ("snapshots_refused", get(&self.snapshots_refused)),
            ("snapshots_truncated", get(&self.snapshots_truncated)),
            ("refusal_notices", get(&self.refusal_notices)),
            (
                "refusal_notices_suppressed",
                get(&self.refusal_notices_suppressed),
            ),
            ("bytes", get(&self.bytes)),
            ("reserved_keys", get(&self.reserved_keys)),
            ("reserved_bytes", get(&self.reserved_bytes)),
            ("pending", get(&self.pending)),
        ])
    }
}

/// A running Clone server (one thread). Dropping it stops the thread.
pub struct CloneServer {
    thread: Option<JoinHandle<Result<(), CloneError>>>,
    stop: Arc<AtomicBool>,
    endpoints: ServerEndpoints,
    base_port: Option<u16>,
    stats: Arc<SharedStats>,
}

impl CloneServer {
    /// Binds the sockets on a new thread and returns once they are bound (or binding failed). The bound sockets
    /// come from `gate`, whose context's ZAP handler applies `[security]`.
    pub fn start(gate: &tickbox_auth::Gate, options: ServerOptions) -> Result<Self, CloneError> {
        gate.check_serves(&options.config.security)?;
        let gate = gate.clone();
        let stop = Arc::new(AtomicBool::new(false));
        let stats = Arc::new(SharedStats::default());
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let thread = {
            let stop = stop.clone();
            let stats = stats.clone();
            std::thread::Builder::new()
                .name("clone-server".into())
                .spawn(move || run(&gate, options, &stop, &stats, ready_tx))
                .map_err(CloneError::Io)?
        };
        match ready_rx.recv() {
            Ok(Ok((endpoints, base_port))) => Ok(CloneServer {
                thread: Some(thread),
                stop,
                endpoints,
                base_port,
                stats,
            }),
            Ok(Err(err)) => {
                let _ = thread.join();
                Err(err)
            }
            Err(_) => match thread.join() {
                Ok(Err(err)) => Err(err),
                _ => Err(CloneError::AgentGone),
            },
        }
    }

    /// The bound endpoints (as reported by the sockets).
    pub fn endpoints(&self) -> &ServerEndpoints {
        &self.endpoints
    }

    /// The base port P when bound with [`ServerBind::Base`].
    pub fn base_port(&self) -> Option<u16> {
        self.base_port
    }

    /// Binary Star state (`Active` for a stand-alone server).
    pub fn state(&self) -> State {
        match self.stats.state.load(Ordering::Relaxed) {
            1 => State::Primary,
            2 => State::Backup,
            4 => State::Passive,
            _ => State::Active,
        }
    }

    /// Live counters, updated by the server thread on every loop turn.
    pub fn stats(&self) -> &SharedStats {
        &self.stats
    }

    /// True while the server thread runs.
    pub fn is_running(&self) -> bool {
        self.thread.as_ref().is_some_and(|t| !t.is_finished())
    }

    /// Stops the thread (nothing new is sent; what the ROUTER and PUB already queued is written to each peer
    /// that still reads, a stalled peer given up after [`ServerConfig::stalled_peer_timeout`], once the
    /// context is terminated) and returns the loop's result, e.g.
    /// [`BstarError::DualActive`].
    pub fn stop(mut self) -> Result<(), CloneError> {
        self.shutdown()
    }

    fn shutdown(&mut self) -> Result<(), CloneError> {
        self.stop.store(true, Ordering::SeqCst);
        match self.thread.take() {
            Some(t) => t.join().map_err(|_| CloneError::AgentGone)?,
            None => Ok(()),
        }
    }
}

impl Drop for CloneServer {
    fn drop(&mut self) {
        let _ = self.shutdown();
    }
}

/// Runs the server on the calling thread until `stop` is set (the CLI uses this).
pub fn run_blocking(
    gate: &tickbox_auth::Gate,
    options: ServerOptions,
    stop: &AtomicBool,
    on_ready: impl FnOnce(&ServerEndpoints, Option<u16>) + Send,
) -> Result<(), CloneError> {
    run_blocking_with(gate, options, stop, &SharedStats::default(), on_ready)
}

/// [`run_blocking`], keeping its live counters in `stats` (which a metrics endpoint reads).
pub fn run_blocking_with(
    gate: &tickbox_auth::Gate,
    options: ServerOptions,
    stop: &AtomicBool,
    stats: &SharedStats,
    on_ready: impl FnOnce(&ServerEndpoints, Option<u16>) + Send,
) -> Result<(), CloneError> {
    gate.check_serves(&options.config.security)?;
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::scope(|scope| {
        let waiter = scope.spawn(move || {
            if let Ok(Ok((eps, port))) = rx.recv() {
                on_ready(&eps, port);
            }
        });
        let result = run(gate, options, stop, stats, tx);
        let _ = waiter.join();
        result
    })
}

/// A receiving or requesting socket: closes with the short `close_linger`, never 0 (module docs).
fn socket(
    ctx: &zmq::Context,
    kind: zmq::SocketType,
    config: &ServerConfig,
) -> Result<zmq::Socket, CloneError> {
    let s = ctx.socket(kind)?;
    let linger = i32::try_from(config.close_linger().as_millis()).unwrap_or(i32::MAX);
    s.set_linger(linger)?;
    Ok(s)
}

/// A bound socket of `role` (made by the gate) that sends CHP's multipart messages to its peers:
/// `ZMQ_TCP_MAXRT` = `stalled_peer_timeout` and a linger longer than it (module docs), set before the bind so
/// every accepted connection carries the bound.
fn sender_socket(
    gate: &tickbox_auth::Gate,
    kind: zmq::SocketType,
    role: &str,
    config: &ServerConfig,
) -> Result<zmq::Socket, CloneError> {
    let mut s = gate.socket(kind, role)?;
    tickbox_zmqx::prepare_multipart_sender(&mut s, config.stalled_peer_timeout())?;
    Ok(s)
}

struct Bound {
    router: zmq::Socket,
    publisher: zmq::Socket,
    collector: zmq::Socket,
    endpoints: ServerEndpoints,
    port: Option<u16>,
}

fn bind(
    gate: &tickbox_auth::Gate,
    bind: &ServerBind,
    config: &ServerConfig,
) -> Result<Bound, CloneError> {
    // CURVE and ZAP per socket when `[security]` asks: the gate makes all three.
    let make = || -> Result<(zmq::Socket, zmq::Socket, zmq::Socket), CloneError> {
        let router = sender_socket(gate, zmq::ROUTER, "clone.snapshot", config)?;
        // A bounded queue per requester, and EAGAIN/EHOSTUNREACH instead of silent drops: a snapshot to a
        // slow reader pauses (see SnapshotJob) rather than queueing the whole map in memory.
        router.set_sndhwm(config.snapshot_hwm.max(1))?;
        router.set_router_mandatory(true)?;
        router.set_maxmsgsize(config.router_max_frame())?;
        let publisher = sender_socket(gate, zmq::PUB, "clone.publisher", config)?;
        publisher.set_sndhwm(config.pub_hwm)?;
        publisher.set_maxmsgsize(config.publisher_max_frame())?;
        let collector = gate.socket(zmq::SUB, "clone.collector")?;
        collector
            .set_linger(i32::try_from(config.close_linger().as_millis()).unwrap_or(i32::MAX))?;
        collector.set_rcvhwm(config.collector_hwm.max(1))?;
        collector.set_maxmsgsize(config.collector_max_frame())?;
        collector.set_subscribe(b"")?;
        Ok((router, publisher, collector))
    };
    match bind {
        ServerBind::Explicit(eps) => {
            let (router, publisher, collector) = make()?;
            router.bind(&eps.snapshot)?;
            publisher.bind(&eps.publisher)?;
            collector.bind(&eps.collector)?;
            let endpoints = ServerEndpoints {
                snapshot: last_endpoint(&router)?,
                publisher: last_endpoint(&publisher)?,
                collector: last_endpoint(&collector)?,
            };
            Ok(Bound {
                router,
                publisher,
                collector,
                endpoints,
                port: None,
            })
        }
        ServerBind::Base { interface, port } => {
            let iface = if interface.is_empty() {
                "*"
            } else {
                interface.as_str()
            };
            check_base_port(*port)?;
            for _attempt in 0..64 {
                let (router, publisher, collector) = make()?;
                let p = if *port == 0 {
                    router.bind(&format!("tcp://{iface}:*"))?;
                    let ep = last_endpoint(&router)?;
                    match ep.rsplit_once(':').and_then(|(_, p)| p.parse::<u16>().ok()) {
                        Some(p) if p <= MAX_BASE_PORT => p,
                        _ => continue,
                    }
                } else {
                    router.bind(&format!("tcp://{iface}:{port}"))?;
                    *port
                };
                let up = publisher.bind(&format!("tcp://{iface}:{}", p + 1));
                let col = up.and_then(|_| collector.bind(&format!("tcp://{iface}:{}", p + 2)));
                match col {
                    Ok(()) => {
                        let endpoints = ServerEndpoints {
                            snapshot: last_endpoint(&router)?,
                            publisher: last_endpoint(&publisher)?,
                            collector: last_endpoint(&collector)?,
                        };
                        return Ok(Bound {
                            router,
                            publisher,
                            collector,
                            endpoints,
                            port: Some(p),
                        });
                    }
                    Err(err) if *port != 0 => return Err(err.into()),
                    Err(_) => continue,
                }
            }
            Err(CloneError::BadEndpoint(
                "no free consecutive port triple found".into(),
            ))
        }
    }
}

/// The rate-limited warnings of the loop, and their common suppressed count.
#[derive(Debug)]
struct Logs {
    malformed_request: WarnGate,
    malformed_kvset: WarnGate,
    malformed_peer: WarnGate,
    snapshot: WarnGate,
    refused: WarnGate,
    suppressed: u64,
}

impl Logs {
    fn new() -> Self {
        Logs {
            malformed_request: WarnGate::new(),
            malformed_kvset: WarnGate::new(),
            malformed_peer: WarnGate::new(),
            snapshot: WarnGate::new(),
            refused: WarnGate::new(),
            suppressed: 0,
        }
    }
}

macro_rules! warn_limited {
    ($logs:expr, $which:ident, $now:expr, $($arg:tt)+) => {{
        let logs: &mut Logs = $logs;
        match logs.$which.allow($now) {
            Some(skipped) => tracing::warn!(suppressed_since_last = skipped, $($arg)+),
            None => logs.suppressed += 1,
        }
    }};
}

/// One snapshot being streamed to one requester, a slice per loop turn, so a slow reader only ever holds its
/// bounded ROUTER queue. KTHXBAI carries the sequence at the *start*: every update after it is on the stream the
/// client buffered before asking, and applying those over the later-read entries converges to the same map.
#[derive(Debug)]
struct SnapshotJob {
    identity: Vec<u8>,
    subtree: String,
    /// Last key sent; the next slice starts after it.
    after: Option<String>,
    seq: u64,
    last_progress: Instant,
}

/// Messages per job per loop turn: keeps HUGZ, Binary Star and the collector going during a huge snapshot.
const SNAPSHOT_SLICE: usize = 1024;

enum JobStep {
    /// Sent a slice; more to come.
    Progress,
    /// The requester's queue is full: try again next turn.
    Blocked,
    /// KTHXBAI sent.
    Done,
    /// The requester is gone (or sending failed): abandon.
    Gone,
}

fn step_snapshot(
    router: &zmq::Socket,
    engine: &ServerEngine,
    job: &mut SnapshotJob,
    now: Instant,
) -> JobStep {
    let slice: Vec<KvMsg> = engine
        .snapshot_after(&job.subtree, job.after.as_deref())
        .take(SNAPSHOT_SLICE)
        .cloned()
        .collect();
    let complete = slice.len() < SNAPSHOT_SLICE;
    let mut sent_any = false;
    for m in slice {
        match m.send_with(router, Some(&job.identity), zmq::DONTWAIT) {
            Ok(()) => {
                sent_any = true;
                job.last_progress = now;
                job.after = Some(m.key);
            }
            Err(zmq::Error::EAGAIN) => {
                return if sent_any {
                    JobStep::Progress
                } else {
                    JobStep::Blocked
                }
            }
            Err(_) => return JobStep::Gone,
        }
    }
    if !complete {
        return JobStep::Progress;
    }
    let kthxbai = KvMsg::new(KTHXBAI, job.seq, job.subtree.as_bytes().to_vec());
    match kthxbai.send_with(router, Some(&job.identity), zmq::DONTWAIT) {
        Ok(()) => JobStep::Done,
        Err(zmq::Error::EAGAIN) if sent_any => JobStep::Progress,
        Err(zmq::Error::EAGAIN) => JobStep::Blocked,
        Err(_) => JobStep::Gone,
    }
}

/// Allows at most `per_sec` refusal notices in each one-second window.
#[derive(Debug)]
struct NoticeBudget {
    window: Instant,
    used: u32,
}

impl NoticeBudget {
    fn take(&mut self, now: Instant, per_sec: u32) -> bool {
        if now >= self.window + Duration::from_secs(1) {
            self.window = now;
            self.used = 0;
        }
        if self.used < per_sec {
            self.used += 1;
            true
        } else {
            false
        }
    }
}

/// Hands `f` each message `socket` holds, up to one pass's share ([`PassBudget`]): values go up to
/// `max_value_len` (1 MiB by default), so a pass of 4,096 of them would hold up to 4 GiB before any is published.
fn drain<F: FnMut(Vec<Vec<u8>>)>(socket: &zmq::Socket, mut f: F) -> Result<(), CloneError> {
    let mut budget = PassBudget::per_socket();
    while budget.has_room() {
        match socket.recv_multipart(zmq::DONTWAIT) {
            Ok(parts) => {
                budget.take_frames(&parts);
                f(parts);
            }
            Err(zmq::Error::EAGAIN) => return Ok(()),
            Err(err) => return Err(err.into()),
        }
    }
    Ok(())
}

/// [`drain`] for the collector: each update with its writer's ZAP user id (the `User-Id` property, the Z85
/// public key under CURVE), which the engine checks against the `/config/` writers.
fn drain_from<F: FnMut(Vec<Vec<u8>>, Option<&str>)>(
    socket: &zmq::Socket,
    mut f: F,
) -> Result<(), CloneError> {
    let mut budget = PassBudget::per_socket();
    let mut msg = zmq::Message::new();
    while budget.has_room() {
        let mut parts = Vec::new();
        let mut user: Option<String> = None;
        loop {
            let flags = if parts.is_empty() { zmq::DONTWAIT } else { 0 };
            match socket.recv(&mut msg, flags) {
                Ok(()) => {}
                Err(zmq::Error::EAGAIN) if parts.is_empty() => return Ok(()),
                Err(err) => return Err(err.into()),
            }
            if user.is_none() {
                user = tickbox_auth::user_id(&mut msg).map(str::to_owned);
            }
            parts.push(msg.to_vec());
            if !msg.get_more() {
                break;
            }
        }
        budget.take_frames(&parts);
        f(parts, user.as_deref());
    }
    Ok(())
}

struct PeerSync {
    dealer: Option<zmq::Socket>,
    /// When we decided we need the peer's snapshot.
    since: Instant,
    /// `None` until ICANHAZ is sent on `dealer`; then when the snapshot last moved (the request sent, or a message
    /// of the snapshot received).
    moved: Option<Instant>,
}

impl PeerSync {
    /// Whether the snapshot asked for has stopped moving for `retry_after`. Counted from its last message, not from
    /// the request: a store's snapshot can take longer than that to arrive whole (256 MiB, the default
    /// `max_bytes`, over a 100 Mbit/s link takes about 21 s), and a mirror that restarted it on a clock from the
    /// request would restart it for ever.
    fn stalled(&self, now: Instant, retry_after: Duration) -> bool {
        self.moved.is_some_and(|t| now >= t + retry_after)
    }

    /// Notes that the snapshot moved at `now` (nothing while none has been asked for).
    fn moving(&mut self, now: Instant) {
        if self.moved.is_some() {
            self.moved = Some(now);
        }
    }
}

fn publish(
    publisher: &zmq::Socket,
    store: &mut Option<Store>,
    msg: &KvMsg,
) -> Result<(), CloneError> {
    if let Some(store) = store {
        if msg.key != HUGZ && msg.key != NOPE {
            store.append(msg)?;
        }
    }
    match msg.send(publisher, None) {
        Ok(()) | Err(zmq::Error::EAGAIN) => Ok(()),
        Err(err) => Err(err.into()),
    }
}

/// A server that mirrored its peer holds state its own log never saw: write it out as a snapshot.
fn compact_after_takeover(store: &mut Option<Store>, engine: &ServerEngine) {
    if let Some(s) = store {
        if let Err(err) = s.compact(engine.entries(), engine.sequence()) {
            tracing::error!("clone store compaction after takeover failed: {err}");
        }
    }
}

type Ready = std::sync::mpsc::Sender<Result<(ServerEndpoints, Option<u16>), CloneError>>;

fn run(
    gate: &tickbox_auth::Gate,
    options: ServerOptions,
    stop: &AtomicBool,
    stats: &SharedStats,
    ready: Ready,
) -> Result<(), CloneError> {
    let ctx = gate.context();
    let setup = || -> Result<_, CloneError> {
        let bound = bind(gate, &options.bind, &options.config)?;
        let now = Instant::now();
        let mut engine = ServerEngine::new(options.config.clone(), options.ha.is_none(), now);
        let store = match &options.data_dir {
            Some(dir) => {
                let (store, entries, seq) = Store::open(dir)?;
                engine.restore(entries, seq, now);
                tracing::info!(dir = %dir.display(), keys = engine.len(), seq, "clone store loaded");
                Some(store)
            }
            None => None,
        };
        let ha = match &options.ha {
            Some(ha) => {
                let security = &options.config.security;
                let node = BstarNode::new(gate, ha.role, &ha.state, &ha.bstar, now)?;
                let peer_sub = socket(ctx, zmq::SUB, &options.config)?;
                peer_sub.set_rcvhwm(options.config.pub_hwm)?;
                peer_sub.set_subscribe(b"")?;
                security.client(&peer_sub, "clone.peer")?;
                peer_sub.connect(&ha.peer.publisher)?;
                Some((node, peer_sub, ha.peer.snapshot.clone()))
            }
            None => None,
        };
        Ok((bound, engine, store, ha))
    };
    let (bound, mut engine, mut store, mut ha) = match setup() {
        Ok(v) => v,
        Err(err) => {
            let _ = ready.send(Err(CloneError::Setup(err.to_string())));
            return Err(err);
        }
    };
    let _ = ready.send(Ok((bound.endpoints.clone(), bound.port)));
    tracing::info!(
        snapshot = %bound.endpoints.snapshot,
        publisher = %bound.endpoints.publisher,
        collector = %bound.endpoints.collector,
        ha = ?options.ha.as_ref().map(|h| h.role),
        "clone server listening"
    );

    let Bound {
        router,
        publisher,
        collector,
        ..
    } = bound;
    let hugz = options.config.hugz();
    let mut out: Vec<KvMsg> = Vec::new();
    let mut peer_sync: Option<PeerSync> = None;
    let mut peer_seen = false;
    let config = &options.config;
    let mut malformed = 0u64;
    let mut snapshots = 0u64;
    let mut rejected = 0u64;
    let mut snapshots_refused = 0u64;
    let mut snapshots_truncated = 0u64;
    let mut notices = 0u64;
    let mut notices_suppressed = 0u64;
    let mut notice_budget = NoticeBudget {
        window: Instant::now(),
        used: 0,
    };
    let mut logs = Logs::new();
    let mut jobs: Vec<SnapshotJob> = Vec::new();
    // Whether the last pass over the snapshot jobs sent anything: if so, poll without sleeping.
    let mut jobs_moving = false;

    let result = loop {
        if stop.load(Ordering::Relaxed) {
            break Ok(());
        }
        let now = Instant::now();
        let mut deadline = now + Duration::from_millis(100);
        let node_deadline = ha
            .as_ref()
            .and_then(|(node, _, _)| node.engine().poll_timeout());
        for d in [engine.poll_timeout(), node_deadline].into_iter().flatten() {
            deadline = deadline.min(d);
        }
        if !jobs.is_empty() {
            // Blocked jobs wait for their requesters to read; a short poll retries them without spinning.
            let retry = if jobs_moving {
                Duration::ZERO
            } else {
                Duration::from_millis(5)
            };
            deadline = deadline.min(now + retry);
        }
        let timeout = poll_ms_until(deadline, now);

        let (r_router, r_collector, r_bstar, r_peer, r_dealer) = {
            let mut items = vec![
                router.as_poll_item(zmq::POLLIN),
                collector.as_poll_item(zmq::POLLIN),
            ];
            if let Some((node, peer_sub, _)) = &ha {
                items.push(node.socket().as_poll_item(zmq::POLLIN));
                items.push(peer_sub.as_poll_item(zmq::POLLIN));
            }
            let dealer = peer_sync.as_ref().and_then(|p| p.dealer.as_ref());
            if let Some(d) = dealer {
                items.push(d.as_poll_item(zmq::POLLIN));
            }
            // A signal (Ctrl-C, SIGTERM) interrupting the poll is a wake-up to check `stop`, not a failure.
            match zmq::poll(&mut items, timeout) {
                Ok(_) | Err(zmq::Error::EINTR) => {}
                Err(err) => break Err(err.into()),
            }
            let r = |i: usize| items.get(i).is_some_and(|it| it.is_readable());
            let has_ha = ha.is_some();
            (
                r(0),
                r(1),
                has_ha && r(2),
                has_ha && r(3),
                dealer.is_some() && r(if has_ha { 4 } else { 2 }),
            )
        };
        let now = Instant::now();

        // Binary Star state messages first: a transition decides how the rest is handled.
        if r_bstar {
            if let Some((node, _, _)) = &mut ha {
                match node.on_readable(now) {
                    Ok(Transition::BecameActive) => {
                        peer_sync = None;
                        engine.become_active(now);
                        out.extend(std::iter::from_fn(|| engine.poll_output()));
                        compact_after_takeover(&mut store, &engine);
                    }
                    Ok(Transition::BecamePassive) => {
                        engine.become_passive();
                        snapshots_truncated += jobs.len() as u64;
                        jobs.clear();
                        peer_sync = Some(PeerSync {
                            dealer: None,
                            since: now,
                            moved: None,
                        });
                    }
                    Ok(Transition::None) => {}
                    Err(
                        err @ BstarNodeError::Protocol(
                            BstarError::DualActive | BstarError::DualPassive,
                        ),
                    ) => {
                        tracing::error!("{err}; stopping this server as the Guide's bstar does");
                        break Err(CloneError::Bstar(err));
                    }
                    Err(err) => break Err(CloneError::Bstar(err)),
                }
            }
        }

        if r_router {
            let mut requests = Vec::new();
            if let Err(err) = drain(&router, |parts| requests.push(parts)) {
                break Err(err);
            }
            for parts in requests {
                let Some((identity, rest)) = parts.split_first() else {
                    continue;
                };
                let subtree = match decode_icanhaz(rest) {
                    Ok(s) => s,
                    Err(err) => {
                        malformed += 1;
                        warn_limited!(
                            &mut logs,
                            malformed_request,
                            now,
                            "dropped malformed snapshot request: {err}"
                        );
                        continue;
                    }
                };
                if let Some((node, _, _)) = &mut ha {
                    let (vote, transition) = node.vote(now);
                    if transition == Transition::BecameActive {
                        peer_sync = None;
                        engine.become_active(now);
                        out.extend(std::iter::from_fn(|| engine.poll_output()));
                        compact_after_takeover(&mut store, &engine);
                    }
                    if vote == Vote::Reject {
                        rejected += 1;
                        tracing::debug!(state = ?node.state(), "rejected client request (not active)");
                        continue;
                    }
                }
                // A requester that has read nothing for a while yields its slot to a newcomer, so readers that
                // never read cannot lock everybody else out of snapshots.
                if jobs.len() >= config.max_snapshots_in_flight.max(1) {
                    let grace = config.snapshot_stall.0.min(Duration::from_secs(1));
                    let stalled = jobs
                        .iter()
                        .enumerate()
                        .filter(|(_, j)| now.saturating_duration_since(j.last_progress) >= grace)
                        .min_by_key(|(_, j)| j.last_progress)
                        .map(|(i, _)| i);
                    if let Some(i) = stalled {
                        jobs.swap_remove(i);
                        snapshots_truncated += 1;
                    }
                }
                let mine = jobs
                    .iter()
                    .filter(|j| j.identity == identity.as_slice())
                    .count();
                if jobs.len() >= config.max_snapshots_in_flight.max(1)
                    || mine >= config.max_snapshots_per_peer.max(1)
                {
                    snapshots_refused += 1;
                    warn_limited!(
                        &mut logs,
                        snapshot,
                        now,
                        in_flight = jobs.len(),
                        for_this_peer = mine,
                        "refused snapshot request: too many snapshots in flight"
                    );
                    continue;
                }
                // Publish anything the takeover produced before the snapshot starts, so KTHXBAI covers it.
                for m in out.drain(..) {
                    if let Err(err) = publish(&publisher, &mut store, &m) {
                        tracing::error!("publish failed: {err}");
                    }
                }
                jobs.push(SnapshotJob {
                    identity: identity.clone(),
                    subtree,
                    after: None,
                    seq: engine.sequence(),
                    last_progress: now,
                });
            }
        }

        jobs_moving = false;
        if !jobs.is_empty() {
            let stall = config.snapshot_stall.0;
            let mut i = 0;
            while i < jobs.len() {
                let step = step_snapshot(&router, &engine, &mut jobs[i], now);
                let finished = match step {
                    JobStep::Progress => {
                        jobs_moving = true;
                        false
                    }
                    JobStep::Blocked => {
                        if now.saturating_duration_since(jobs[i].last_progress) >= stall {
                            snapshots_truncated += 1;
                            warn_limited!(
                                &mut logs,
                                snapshot,
                                now,
                                "abandoned a snapshot: requester stopped reading"
                            );
                            true
                        } else {
                            false
                        }
                    }
                    JobStep::Done => {
                        snapshots += 1;
                        true
                    }
                    JobStep::Gone => {
                        snapshots_truncated += 1;
                        true
                    }
                };
                if finished {
                    jobs.swap_remove(i);
                } else {
                    i += 1;
                }
            }
        }

        if r_collector {
            let res = drain_from(&collector, |parts, user| {
                // A writer whose key has left the allow directory since its handshake is refused from its next
                // update on (the allow set as the ZAP loop last read it, at most a second old).
                if !config.security.is_listed("clone.collector", user) {
                    config.security.stats().record_revoked();
                    warn_limited!(
                        &mut logs,
                        refused,
                        now,
                        "refused an update from a key no longer in the allow directory"
                    );
                    return;
                }
                match KvMsg::decode(&parts) {
                    Ok(msg) => {
                        let uuid = msg.uuid;
                        match engine.handle_kvset_from(now, msg, user) {
                            KvsetOutcome::Published(m) => out.push(m),
                            KvsetOutcome::Dropped(reason) => {
                                warn_limited!(
                                    &mut logs,
                                    refused,
                                    now,
                                    reason = reason.code(),
                                    "refused client update"
                                );
                                if engine.is_serving() {
                                    if let Some(notice) = engine.refusal(uuid, reason) {
                                        if notice_budget.take(now, config.refusal_notices_per_sec) {
                                            notices += 1;
                                            out.push(notice);
                                        } else {
                                            notices_suppressed += 1;
                                        }
                                    }
                                }
                            }
                            KvsetOutcome::Pending | KvsetOutcome::Duplicate => {}
                        }
                    }
                    Err(err) => {
                        malformed += 1;
                        warn_limited!(
                            &mut logs,
                            malformed_kvset,
                            now,
                            "dropped malformed KVSET: {err}"
                        );
                    }
                }
            });
            if let Err(err) = res {
                break Err(err);
            }
        }

        if r_peer {
            if let Some((_, peer_sub, _)) = &ha {
                peer_seen = true;
                let res = drain(peer_sub, |parts| match KvMsg::decode(&parts) {
                    Ok(msg) => engine.handle_peer_kvpub(now, msg),
                    Err(err) => {
                        malformed += 1;
                        warn_limited!(
                            &mut logs,
                            malformed_peer,
                            now,
                            "dropped malformed peer update: {err}"
                        );
                    }
                });
                if let Err(err) = res {
                    break Err(err);
                }
            }
        }

        if r_dealer {
            let mut done = false;
            let mut received = false;
            if let Some(PeerSync {
                dealer: Some(dealer),
                ..
            }) = &peer_sync
            {
                let res = drain(dealer, |parts| match KvMsg::decode(&parts) {
                    Ok(msg) => {
                        received = true;
                        done |= msg.key == KTHXBAI;
                        engine.handle_peer_snapshot(now, msg);
                    }
                    Err(err) => {
                        malformed += 1;
                        warn_limited!(
                            &mut logs,
                            malformed_peer,
                            now,
                            "dropped malformed peer snapshot message: {err}"
                        );
                    }
                });
                if let Err(err) = res {
                    break Err(err);
                }
            }
            if received {
                if let Some(sync) = &mut peer_sync {
                    sync.moving(now);
                }
            }
            if done && !engine.is_mirror_syncing() {
                peer_sync = None;
            }
        }

        // Passive mirror: ask the active peer for its snapshot once our SUB to it is known to be live.
        if let (Some(sync), Some((_, _, peer_snapshot))) = (&mut peer_sync, &ha) {
            let retry_after = (hugz * 5).max(Duration::from_secs(2));
            if sync.stalled(now, retry_after) {
                tracing::warn!("peer snapshot stalled for {retry_after:?}; retrying");
                engine.restart_mirror_sync();
                sync.dealer = None;
                sync.moved = None;
                sync.since = now;
            }
            if sync.moved.is_none() && (peer_seen || now >= sync.since + hugz) {
                let dealer = match socket(ctx, zmq::DEALER, config).and_then(|d| {
                    d.set_rcvhwm(0)?;
                    config.security.client(&d, "clone.peer")?;
                    d.connect(peer_snapshot)?;
                    if !send_icanhaz(&d, "")? {
                        tracing::debug!(
                            "peer snapshot request not sent yet: no connection to the peer"
                        );
                    }
                    Ok(d)
                }) {
                    Ok(d) => d,
                    Err(err) => break Err(err),
                };
                sync.dealer = Some(dealer);
                sync.moved = Some(now);
            }
        }

        engine.handle_timeout(now);
        out.extend(std::iter::from_fn(|| engine.poll_output()));
        let mut failed = None;
        for m in out.drain(..) {
            if let Err(err) = publish(&publisher, &mut store, &m) {
                failed = Some(err);
                break;
            }
        }
        if let Some(err) = failed {
            break Err(err);
        }
        if let Some(s) = &mut store {
            if let Err(err) = s.maybe_compact(engine.entries(), engine.len(), engine.sequence()) {
                tracing::error!("clone store compaction failed: {err}");
            }
        }
        if let Some((node, _, _)) = &mut ha {
            if let Err(err) = node.handle_timeout(now) {
                break Err(CloneError::Bstar(err));
            }
            stats.state.store(node.state() as u8, Ordering::Relaxed);
        } else {
            stats.state.store(State::Active as u8, Ordering::Relaxed);
        }
        let s = engine.stats();
        stats.sequence.store(engine.sequence(), Ordering::Relaxed);
        stats.keys.store(engine.len() as u64, Ordering::Relaxed);
        stats.published.store(s.published, Ordering::Relaxed);
        stats
            .dropped
            .store(engine.dropped_total(), Ordering::Relaxed);
        stats
            .snapshots_refused
            .store(snapshots_refused, Ordering::Relaxed);
        stats
            .snapshots_truncated
            .store(snapshots_truncated, Ordering::Relaxed);
        stats
            .snapshots_in_flight
            .store(jobs.len() as u64, Ordering::Relaxed);
        stats.refusal_notices.store(notices, Ordering::Relaxed);
        stats
            .refusal_notices_suppressed
            .store(notices_suppressed, Ordering::Relaxed);
        stats
            .log_suppressed
            .store(logs.suppressed, Ordering::Relaxed);
        stats.bytes.store(engine.usage().bytes, Ordering::Relaxed);
        let r = engine.reserved_usage();
        stats.reserved_keys.store(r.keys, Ordering::Relaxed);
        stats.reserved_bytes.store(r.bytes, Ordering::Relaxed);
        stats.malformed.store(malformed, Ordering::Relaxed);
        stats.rejected_votes.store(rejected, Ordering::Relaxed);
        stats.snapshots_served.store(snapshots, Ordering::Relaxed);
        stats
            .pending
            .store(engine.pending_len() as u64, Ordering::Relaxed);
    };
    if let Some(s) = &mut store {
        let _ = s.sync();
    }
    tracing::info!(
        seq = engine.sequence(),
        keys = engine.len(),
        snapshots_truncated = snapshots_truncated + jobs.len() as u64,
        log_suppressed = logs.suppressed,
        "clone server stopped"
    );
    result
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use super::PeerSync;

    #[test]
    fn a_peer_snapshot_is_retried_only_once_it_stops_moving() {
        let retry_after = Duration::from_secs(2);
        let t0 = Instant::now();
        let mut sync = PeerSync {
            dealer: None,
            since: t0,
            moved: None,
        };
        assert!(
            !sync.stalled(t0 + retry_after * 10, retry_after),
            "nothing asked for yet"
        );
        sync.moving(t0 + retry_after);
        assert_eq!(sync.moved, None, "no snapshot moves before it is asked for");
        sync.moved = Some(t0);
        // A large snapshot arriving a message a second for ten times the retry time is never given up on.
        for s in 1..=20 {
            let now = t0 + Duration::from_secs(s);
            assert!(!sync.stalled(now, retry_after), "moving at {s} s");
            sync.moving(now);
        }
        let last = t0 + Duration::from_secs(20);
        assert!(!sync.stalled(last + retry_after - Duration::from_millis(1), retry_after));
        assert!(
            sync.stalled(last + retry_after, retry_after),
            "silent since its last message"
        );
    }
}
