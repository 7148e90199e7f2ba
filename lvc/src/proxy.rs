//! The thin loop that owns the proxy's sockets and the clock, and does what [`LvcEngine`] decides.

use std::os::raw::c_int;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::cache::{CachedValue, Parts};
use super::engine::{mark_cached, DownstreamEvent, Forwarding, LvcEngine, LvcStats};
use super::raw::RawMsg;
use super::snapshot::{
    ReplyItem, RequestParser, SendOutcome, ServerLimits, SnapshotServer, REQUEST_HEAD_LEN,
};
use super::{BackPressure, LateJoiners, LvcConfig, LvcError, TapDrop};
use tickbox_auth::handshake::HandshakeWatch;
use tickbox_wire::tap;
use tickbox_zmqx::publisher::{Linger, PublisherSocket, PublisherSocketError, Subscriptions};

const DONTWAIT: c_int = zmq_sys::ZMQ_DONTWAIT as c_int;
const SNDMORE: c_int = zmq_sys::ZMQ_SNDMORE as c_int;
/// The stop flag is checked at least this often.
const POLL_MS: i64 = 100;
/// How often the in-process stats snapshot is refreshed.
const PUBLISH_EVERY: Duration = Duration::from_millis(50);

/// The endpoints the proxy actually bound (wildcards resolved).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LvcEndpoints {
    /// For publishers to connect to (from `upstream_bind`).
    pub upstream: Vec<String>,
    /// For subscribers.
    pub downstream: String,
    /// For tap consumers.
    pub tap: Option<String>,
    /// For snapshot requests (late joiners).
    pub snapshot: Option<String>,
}

/// A running proxy. Dropping it stops the proxy and waits for its thread.
pub struct LvcHandle {
    endpoints: LvcEndpoints,
    stop: Arc<AtomicBool>,
    shared: Arc<Mutex<LvcStats>>,
    accounts: Arc<crate::sequences::SharedAccounts>,
    thread: Option<JoinHandle<Result<LvcStats, LvcError>>>,
}

impl LvcHandle {
    /// Where the proxy is bound, wildcards resolved.
    pub fn endpoints(&self) -> &LvcEndpoints {
        &self.endpoints
    }

    /// The counters as of at most ~50 ms ago.
    pub fn stats(&self) -> LvcStats {
        *self.shared.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The metrics of this proxy (`lvc --metrics`): the counters [`LvcHandle::stats`] reads, at each scrape.
    pub fn metrics(&self) -> LvcMetrics {
        LvcMetrics {
            shared: Arc::clone(&self.shared),
            accounts: Arc::clone(&self.accounts),
        }
    }

    /// Every publisher's sequence totals, as plain counters (refreshed with [`Self::stats`]).
    pub fn sequence_counters(&self) -> Arc<crate::sequences::SequenceCounters> {
        self.accounts.counters()
    }

    /// Every publisher's account, as of at most ~50 ms ago.
    pub fn publishers(&self) -> Vec<crate::sequences::PublisherAccount> {
        self.accounts.publishers()
    }

    /// What the proxy publishes of its accounts, readable after [`Self::join`] (then final).
    pub fn publishers_handle(&self) -> Arc<crate::sequences::SharedAccounts> {
        Arc::clone(&self.accounts)
    }

    /// Asks the proxy to stop (it notices within 100 ms).
    pub fn stop(&self) {
        self.stop.store(true, Ordering::SeqCst);
    }

    /// True once the proxy thread has ended (stopped, or failed).
    pub fn is_finished(&self) -> bool {
        self.thread.as_ref().is_none_or(|t| t.is_finished())
    }

    /// Stops the proxy and returns its final counters.
    pub fn join(mut self) -> Result<LvcStats, LvcError> {
        self.stop();
        match self.thread.take() {
            Some(thread) => thread.join().map_err(|_| LvcError::Panicked)?,
            None => Ok(self.stats()),
        }
    }
}

impl Drop for LvcHandle {
    fn drop(&mut self) {
        self.stop();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Starts the proxy on its own thread; returns once its sockets are bound and connected.
/// Its bound sockets come from `gate`, whose context's ZAP handler applies `[security]`.
pub fn spawn(gate: &tickbox_auth::Gate, config: LvcConfig) -> Result<LvcHandle, LvcError> {
    gate.check_serves(&config.security)?;
    if config.bind.is_empty() {
        return Err(LvcError::Config(
            "`bind` (the subscriber endpoint) is required".into(),
        ));
    }
    config
        .tap_framing
        .for_writer()
        .map_err(|e| LvcError::Config(format!("tap_framing: {e}")))?;
    if config.upstream.is_empty() && config.upstream_bind.is_empty() {
        return Err(LvcError::Config(
            "give at least one upstream endpoint to connect to or to bind".into(),
        ));
    }
    let gate = gate.clone();
    let stop = Arc::new(AtomicBool::new(false));
    let shared = Arc::new(Mutex::new(LvcStats::default()));
    let accounts = Arc::new(crate::sequences::SharedAccounts::default());
    let (ready_tx, ready_rx) = mpsc::channel();
    let thread = {
        let stop = Arc::clone(&stop);
        let shared = Arc::clone(&shared);
        let accounts = Arc::clone(&accounts);
        std::thread::Builder::new()
            .name("lvc-proxy".into())
            .spawn(move || {
                tickbox_zmqx::pin_if_configured(config.core, "lvc proxy");
                let mut proxy = match Proxy::open(&gate, config) {
                    Ok((proxy, endpoints)) => {
                        let _ = ready_tx.send(Ok(endpoints));
                        proxy
                    }
                    Err(err) => {
                        let _ = ready_tx.send(Err(err));
                        return Err(LvcError::StartFailed);
                    }
                };
                let result = proxy.run(&stop, &shared, &accounts);
                let stats = proxy.stats();
                *shared.lock().unwrap_or_else(|e| e.into_inner()) = stats;
                accounts.publish(proxy.engine.sequences());
                tracing::info!("lvc final: {stats}");
                result.map(|()| stats)
            })
            .map_err(|_| LvcError::StartFailed)?
    };
    match ready_rx.recv() {
        Ok(Ok(endpoints)) => Ok(LvcHandle {
            endpoints,
            stop,
            shared,
            accounts,
            thread: Some(thread),
        }),
        Ok(Err(err)) => {
            let _ = thread.join();
            Err(err)
        }
        Err(_) => {
            let _ = thread.join();
            Err(LvcError::StartFailed)
        }
    }
}

struct Proxy {
    xsub: zmq::Socket,
    xpub: zmq::Socket,
    tap: Option<zmq::Socket>,
    engine: LvcEngine,
    msg: RawMsg,
    tap_msg: RawMsg,
    /// One record of a batch that goes out record by record.
    record_msg: RawMsg,
    /// Who of the tap's consumers reads batch frames.
    tap_readers: crate::engine::BatchReaders,
    scratch: Vec<u8>,
    slow: BackPressure,
    block_timeout: Duration,
    tap_cached: bool,
    /// `[lvc] tap_framing = "guide"`: every tap copy goes out as `[topic][value]`.
    tap_guide: bool,
    batch: usize,
    stats_interval: Option<Duration>,
    /// Whether a subscription on the XPUB triggers a cached burst there (`late_joiners`).
    broadcast: bool,
    snapshot: Option<SnapshotSide>,
    /// `[security.publishers]` bindings, checked on every upstream message when any key is bound.
    publishers: Option<PublisherCheck>,
    /// The parts of a multipart message held for the forgery check, forwarded from here in order.
    held: std::collections::VecDeque<RawMsg>,
    /// Says when a key has left an allow directory; the bound sockets then close their live sessions.
    revocations: tickbox_auth::Revocations,
    /// The endpoints the sockets are bound to, to bind again after such a reset.
    bound: LvcEndpoints,
    /// The upstream XSUB's handshakes, when it connects to publishers: a publisher that refuses one is counted
    /// and connected to again (libzmq never would).
    upstream_watch: Option<HandshakeWatch>,
    /// Upstream handshakes refused so far.
    handshakes_refused: u64,
}

/// Most parts of one upstream multipart message the forgery check holds; a longer message from a publisher key
/// is refused as unverifiable. tickbox's own publishers send one or two.
const MAX_CHECKED_PARTS: usize = 64;

/// What the forgery check needs on the proxy thread.
struct PublisherCheck {
    grants: tickbox_auth::Grants,
    /// The sender of messages on connections the proxy made: the server key it verified (libzmq attaches a
    /// `User-Id` only on the accepting side).
    connected_as: Option<String>,
    stats: tickbox_auth::AuthStats,
}

/// The snapshot ROUTER and the replies in progress.
struct SnapshotSide {
    router: zmq::Socket,
    parser: RequestParser,
    server: SnapshotServer,
    /// The routing id of the request being read; `in_message` while its parts are still coming.
    peer: Vec<u8>,
    in_message: bool,
    part: zmq::Message,
    scratch: Vec<u8>,
    slice: usize,
    /// Whether the last slice sent anything (then the loop polls without waiting, to send the next one).
    progress: bool,
}

impl Proxy {
    fn open(
        gate: &tickbox_auth::Gate,
        config: LvcConfig,
    ) -> Result<(Self, LvcEndpoints), LvcError> {
        let ctx = gate.context();
        let security = &config.security;
        if !config.upstream_bind.is_empty() && security.is_curve() && !config.upstream.is_empty() {
            // One socket is either a CURVE server or a CURVE client.
            return Err(LvcError::Config(
                "with CURVE the upstream either binds (`upstream_bind`) or connects (`upstream`), not both"
                    .into(),
            ));
        }
        // Publishers connect to a bound upstream (and are authenticated by ZAP), or the proxy connects to
        // publishers (and authenticates them by server key).
        let xsub = if config.upstream_bind.is_empty() {
            let xsub = ctx
                .socket(zmq::XSUB)
                .map_err(LvcError::zmq("creating XSUB"))?;
            security.client(&xsub, "lvc.upstream")?;
            xsub
        } else {
            gate.socket(zmq::XSUB, "lvc.upstream")?
        };
        xsub.set_linger(0).map_err(LvcError::zmq("XSUB linger"))?;
        xsub.set_rcvhwm(config.upstream_hwm)
            .map_err(LvcError::zmq("XSUB rcvhwm"))?;
        xsub.set_maxmsgsize(clamp_i64(config.max_message_bytes))
            .map_err(LvcError::zmq("XSUB maxmsgsize"))?;
        tickbox_zmqx::profile::apply(&xsub, &config.socket_profile)
            .map_err(LvcError::zmq("XSUB profile"))?;
        let mut upstream = Vec::new();
        for ep in &config.upstream_bind {
            let bound = tickbox_zmqx::bind_resolved(&xsub, ep).map_err(|e| match e {
                tickbox_zmqx::ZmqxError::Zmq(source) => LvcError::Zmq {
                    what: format!("binding upstream {ep}"),
                    source,
                },
                other => LvcError::Config(format!("binding upstream {ep}: {other}")),
            })?;
            upstream.push(bound);
        }
        // Before connecting, so no handshake is missed.
        let upstream_watch = if config.upstream.is_empty() {
            None
        } else {
            Some(
                HandshakeWatch::start(ctx, &xsub, security.public_key(), "LVC upstream")
                    .map_err(LvcError::zmq("upstream handshake monitor"))?,
            )
        };
        for ep in &config.upstream {
            xsub.connect(ep)
                .map_err(LvcError::zmq(format!("connecting upstream {ep}")))?;
        }

        // The XPUB, the tap and the snapshot ROUTER forward multipart messages (Guide values, replies) to peers
        // that may stall; ZMQ_TCP_MAXRT and a linger longer than it mean closing them cannot hit libzmq's
        // clean_pipes abort, and a stalled peer holds the context's termination for at most the bound
        // (`tickbox_zmqx::teardown`, docs/book/src/libzmq-traps.md).
        let linger =
            Linger::StalledPeer(config.stalled_peer_timeout.0.max(Duration::from_millis(1)));
        // libzmq stores a subscription in the XPUB's trie before we see it, so the app-level refusal cannot
        // bound that memory; this does, and disconnects a peer sending anything much longer.
        let max_inbound = subscription_frame_limit(config.max_subscription_bytes);
        let block = config.back_pressure == BackPressure::Block;
        let (xpub, downstream) = open_xpub(
            gate,
            "lvc.downstream",
            &PublisherSocket {
                subscriptions: Subscriptions::Verbose,
                send_hwm: config.downstream_hwm,
                linger,
                send_timeout_ms: block.then_some(POLL_MS as i32),
                max_inbound_bytes: max_inbound,
                back_pressure: config.back_pressure,
                profile: &config.socket_profile,
            },
            &config.bind,
            "subscriber endpoint",
        )?;

        let (tap, tap_endpoint) = match &config.tap {
            Some(ep) => {
                // Verbose so every consumer's subscription is seen, not only the first per prefix: a recorder
                // and an inspector both on `""` count as two attachments in `tap_subscriptions`. Every tap send
                // is DONTWAIT, so the proxy never waits on the tap in either mode. Without NODROP libzmq drops
                // per consumer pipe, so consumers are isolated from each other but the drops are silent. With
                // NODROP a full pipe turns the whole send into EAGAIN, which we count, but then every matching
                // consumer misses that copy.
                let (tap, bound) = open_xpub(
                    gate,
                    "lvc.tap",
                    &PublisherSocket {
                        subscriptions: Subscriptions::Verbose,
                        send_hwm: config.tap_hwm,
                        linger,
                        send_timeout_ms: None,
                        max_inbound_bytes: max_inbound,
                        back_pressure: if config.tap_drop == TapDrop::Counted {
                            BackPressure::Block
                        } else {
                            BackPressure::Drop
                        },
                        profile: &config.socket_profile,
                    },
                    ep,
                    "tap endpoint",
                )?;
                (Some(tap), Some(bound))
            }
            None => (None, None),
        };

        if config.late_joiners == LateJoiners::Snapshot && config.snapshot.is_none() {
            return Err(LvcError::Config(
                "late_joiners = \"snapshot\" needs a snapshot endpoint (`snapshot`, --snapshot)"
                    .into(),
            ));
        }
        let (snapshot, snapshot_endpoint) = match &config.snapshot {
            Some(ep) => {
                let mut router = gate.socket(zmq::ROUTER, "lvc.snapshot")?;
                tickbox_zmqx::prepare_multipart_sender(
                    &mut router,
                    config.stalled_peer_timeout.0.max(Duration::from_millis(1)),
                )
                .map_err(LvcError::zmq("snapshot teardown options"))?;
                // EAGAIN for a full client and EHOSTUNREACH for a gone one, instead of a silent drop: a reply is
                // then paused or abandoned, and counted, never cut without the client's count showing it.
                router
                    .set_router_mandatory(true)
                    .map_err(LvcError::zmq("snapshot router_mandatory"))?;
                // 0 would be libzmq's "no limit": at least one message, so a client that does not read is bounded.
                router
                    .set_sndhwm(config.snapshot_hwm.max(1))
                    .map_err(LvcError::zmq("snapshot sndhwm"))?;
                // Requests are small and answered in turn; a flood waits in a short queue (and in TCP) rather
                // than in the proxy's memory.
                router
                    .set_rcvhwm(1000)
                    .map_err(LvcError::zmq("snapshot rcvhwm"))?;
                let max_part = config.max_subscription_bytes.max(REQUEST_HEAD_LEN);
                router
                    .set_maxmsgsize(clamp_i64(max_part.saturating_add(64)))
                    .map_err(LvcError::zmq("snapshot maxmsgsize"))?;
                tickbox_zmqx::profile::apply(&router, &config.socket_profile)
                    .map_err(LvcError::zmq("snapshot profile"))?;
                let bound = resolve(&router, ep, "snapshot endpoint")?;
                let side = SnapshotSide {
                    router,
                    parser: RequestParser::new(
                        config.snapshot_max_prefixes,
                        config.max_subscription_bytes,
                    ),
                    server: SnapshotServer::new(ServerLimits {
                        max_clients: config.snapshot_max_clients.max(1),
                        max_values: config.snapshot_max_values,
                        stall_timeout: config.snapshot_stall_timeout.0,
                    }),
                    peer: Vec::new(),
                    in_message: false,
                    part: zmq::Message::new(),
                    scratch: Vec::with_capacity(256),
                    slice: config.snapshot_slice.max(1),
                    progress: false,
                };
                (Some(side), Some(bound))
            }
            None => (None, None),
        };

        let engine = LvcEngine::new(&config);
        for prefix in engine.own_subscriptions() {
            let mut frame = Vec::with_capacity(prefix.len() + 1);
            frame.push(1);
            frame.extend_from_slice(prefix);
            xsub.send(frame, 0)
                .map_err(LvcError::zmq("subscribing upstream"))?;
        }
        if engine.reads_upstream_batches() {
            // The opt-in beside "": publishers whose every reader did the same send batch frames, which the
            // proxy caches record by record and forwards whole or unpacked (`forward_batch_frame`).
            let mut frame = vec![1u8];
            frame.extend_from_slice(tickbox_wire::BATCH_TOPIC.as_bytes());
            xsub.send(frame, 0)
                .map_err(LvcError::zmq("subscribing upstream"))?;
        }
        tracing::info!(
            downstream = %downstream,
            tap = ?tap_endpoint,
            snapshot = ?snapshot_endpoint,
            broadcast_cached = config.broadcasts_cached(),
            tap_drop = ?config.tap_drop,
            upstream_connect = ?config.upstream,
            upstream_bind = ?upstream,
            "lvc proxy running"
        );
        let endpoints = LvcEndpoints {
            upstream,
            downstream,
            tap: tap_endpoint,
            snapshot: snapshot_endpoint,
        };
        Ok((
            Proxy {
                xsub,
                xpub,
                tap,
                engine,
                msg: RawMsg::new(),
                tap_msg: RawMsg::new(),
                record_msg: RawMsg::new(),
                tap_readers: crate::engine::BatchReaders::new(config.max_downstream_prefixes),
                scratch: Vec::with_capacity(256),
                slow: config.back_pressure,
                block_timeout: config.block_timeout.0,
                tap_cached: config.tap_cached,
                tap_guide: config.tap_framing == crate::tap::Framing::Guide,
                batch: config.batch.max(1),
                stats_interval: (!config.stats_interval.0.is_zero())
                    .then_some(config.stats_interval.0),
                broadcast: config.broadcasts_cached(),
                snapshot,
                held: std::collections::VecDeque::new(),
                revocations: config.security.revocations(),
                bound: endpoints.clone(),
                upstream_watch,
                handshakes_refused: 0,
                publishers: config
                    .security
                    .grants()
                    .binds_publishers()
                    .then(|| PublisherCheck {
                        grants: config.security.grants().clone(),
                        connected_as: config.security.server_key_z85("lvc.upstream"),
                        stats: config.security.stats(),
                    }),
            },
            endpoints,
        ))
    }

    /// The engine's counters with the snapshot channel's.
    fn stats(&self) -> LvcStats {
        let mut stats = self.engine.stats();
        if let Some(side) = &self.snapshot {
            stats.merge_snapshot(&side.server.counters());
        }
        stats.handshakes_refused = self.handshakes_refused;
        stats
    }

    /// Counts refused upstream handshakes and connects again where a redial is due.
    fn look_upstream(&mut self, now: Instant) {
        if let Some(watch) = &mut self.upstream_watch {
            self.handshakes_refused += watch.look(&self.xsub, now).refused;
        }
    }

    fn run(
        &mut self,
        stop: &AtomicBool,
        shared: &Mutex<LvcStats>,
        accounts: &crate::sequences::SharedAccounts,
    ) -> Result<(), LvcError> {
        let mut last_publish = Instant::now();
        let mut last_log = Instant::now();
        let mut next_look = Instant::now();
        while !stop.load(Ordering::Relaxed) {
            if self.revocations.due() {
                self.reset_sessions()?;
            }
            // A reply that made progress sends its next slice right after this wake-up's live traffic; one whose
            // client is full is retried every 10 ms until it drains or is abandoned.
            let wait = match &self.snapshot {
                Some(side) if side.server.is_busy() => {
                    if side.progress {
                        0
                    } else {
                        10
                    }
                }
                _ => POLL_MS,
            };
            let (up, down, tap_in, snap_in) = {
                let mut items = [
                    self.xsub.as_poll_item(zmq::POLLIN),
                    self.xpub.as_poll_item(zmq::POLLIN),
                    match &self.tap {
                        Some(tap) => tap.as_poll_item(zmq::POLLIN),
                        // Polling the XSUB twice is harmless and keeps the array fixed-size.
                        None => self.xsub.as_poll_item(zmq::POLLIN),
                    },
                    match &self.snapshot {
                        Some(side) => side.router.as_poll_item(zmq::POLLIN),
                        None => self.xsub.as_poll_item(zmq::POLLIN),
                    },
                ];
                // A signal interrupting the poll is a wake-up to check `stop`, not a failure.
                match zmq::poll(&mut items, wait) {
                    Ok(_) | Err(zmq::Error::EINTR) => {}
                    Err(err) => return Err(LvcError::zmq("poll")(err)),
                }
                (
                    items[0].is_readable(),
                    items[1].is_readable(),
                    self.tap.is_some() && items[2].is_readable(),
                    self.snapshot.is_some() && items[3].is_readable(),
                )
            };
            // Subscriptions first, so a late joiner's cached values go out before more live traffic.
            if down {
                self.drain_downstream()?;
            }
            if up {
                self.forward_batch(stop)?;
            }
            if tap_in {
                self.drain_tap_subscriptions();
            }
            // Requests after live traffic, and at most one slice of replies per wake-up: a snapshot never holds
            // live forwarding for more than `snapshot_slice` sends.
            if snap_in {
                self.drain_snapshot_requests();
            }
            self.serve_snapshots();
            let now = Instant::now();
            // The loop wakes at least every `POLL_MS`, so a refusal is seen and a redial made within that of it.
            if now >= next_look {
                next_look = now + Duration::from_millis(POLL_MS as u64);
                self.look_upstream(now);
            }
            if now.duration_since(last_publish) >= PUBLISH_EVERY {
                *shared.lock().unwrap_or_else(|e| e.into_inner()) = self.stats();
                accounts.publish(self.engine.sequences());
                last_publish = now;
            }
            if let Some(every) = self.stats_interval {
                if now.duration_since(last_log) >= every {
                    tracing::info!("lvc stats: {}", self.stats());
                    last_log = now;
                }
            }
        }
        Ok(())
    }

    /// A key left an allow directory: every bound socket closes its live sessions, so every peer handshakes
    /// again and the revoked key is refused (a connecting upstream is a client: its server's gate does this).
    fn reset_sessions(&mut self) -> Result<(), LvcError> {
        let r = &self.revocations;
        if !self.bound.upstream.is_empty() {
            r.reset_sessions(&self.xsub, "lvc.upstream", &self.bound.upstream)?;
        }
        r.reset_sessions(
            &self.xpub,
            "lvc.downstream",
            std::slice::from_ref(&self.bound.downstream),
        )?;
        if let (Some(tap), Some(ep)) = (&self.tap, &self.bound.tap) {
            r.reset_sessions(tap, "lvc.tap", std::slice::from_ref(ep))?;
        }
        if let (Some(side), Some(ep)) = (&self.snapshot, &self.bound.snapshot) {
            r.reset_sessions(&side.router, "lvc.snapshot", std::slice::from_ref(ep))?;
        }
        Ok(())
    }

    /// Up to `batch` upstream messages: cache, tap copy, forward.
    fn forward_batch(&mut self, stop: &AtomicBool) -> Result<(), LvcError> {
        for _ in 0..self.batch {
            match self.msg.recv(&mut self.xsub, DONTWAIT) {
                Ok(()) => {}
                Err(zmq::Error::EAGAIN) => return Ok(()),
                Err(zmq::Error::EINTR) => return Ok(()),
                Err(err) => {
                    return Err(LvcError::Zmq {
                        what: "receiving upstream".into(),
                        source: err,
                    })
                }
            }
            if self.publishers.is_some() && !self.sender_may_send() {
                self.refuse_forged();
                continue;
            }
            if self.msg.more() {
                self.forward_multipart(stop)?;
                continue;
            }
            if tickbox_wire::is_batch(self.msg.bytes()) {
                self.forward_batch_frame(stop)?;
                continue;
            }
            if self.engine.handle_upstream(self.msg.bytes()) == Forwarding::Drop {
                continue;
            }
            if let Some(tap) = self.tap.as_mut() {
                // Shares the buffer (reference count) rather than copying it. Copied before a Guide topic frame
                // goes out, so a failed copy never leaves a topic frame waiting for its value.
                let sent = self.tap_msg.copy_from(&mut self.msg).is_ok()
                    && (!self.tap_guide
                        || tap
                            .send(
                                crate::tap::guide_topic(self.msg.bytes()),
                                zmq::SNDMORE | zmq::DONTWAIT,
                            )
                            .is_ok())
                    && self.tap_msg.send(tap, DONTWAIT).is_ok();
                let stats = self.engine.stats_mut();
                if sent {
                    stats.tap_sent += 1;
                } else {
                    stats.tap_dropped += 1;
                }
            }
            self.send_live(stop, 0)?;
        }
        Ok(())
    }

    /// A batch frame in `self.msg`: cached record by record, then sent whole to each side (subscribers, tap) whose
    /// every reader opted in to batches, and record by record to a side where someone did not: a hop never
    /// sends a batch to a reader that did not ask for one.
    fn forward_batch_frame(&mut self, stop: &AtomicBool) -> Result<(), LvcError> {
        let verdict = self.engine.handle_upstream_batch(self.msg.bytes());
        let records = match tickbox_wire::batch_records(self.msg.bytes()) {
            Ok(records) => u64::from(records.declared_count()),
            Err(_) => 1,
        };
        // Whole: intact and every reader opted in, or broken and `malformed = "forward"` says pass it on as is.
        let forward_whole = verdict.forwarding == Forwarding::Forward;
        let down_whole =
            forward_whole && (!verdict.intact || self.engine.downstream_reads_batches());
        let tap_whole = forward_whole
            && !self.tap_guide
            && (!verdict.intact || self.tap_readers.all_read_batches());
        if let Some(tap) = self.tap.as_mut() {
            if tap_whole {
                let sent = self.tap_msg.copy_from(&mut self.msg).is_ok()
                    && self.tap_msg.send(tap, DONTWAIT).is_ok();
                let stats = self.engine.stats_mut();
                if sent {
                    stats.tap_sent += records;
                    stats.tap_batches += 1;
                } else {
                    stats.tap_dropped += records;
                }
            } else {
                let (mut sent, mut dropped) = (0, 0);
                for record in valid_records(self.msg.bytes()) {
                    if send_tap_frame(tap, self.tap_guide, record) {
                        sent += 1;
                    } else {
                        dropped += 1;
                    }
                }
                let stats = self.engine.stats_mut();
                stats.tap_sent += sent;
                stats.tap_dropped += dropped;
            }
        }
        if down_whole {
            let sent = send_downstream(
                &mut self.xpub,
                &mut self.msg,
                0,
                self.slow,
                self.block_timeout,
                stop,
            )?;
            let stats = self.engine.stats_mut();
            if sent {
                stats.messages_out += records;
                stats.batches_out += 1;
            } else {
                stats.downstream_dropped += records;
            }
            return Ok(());
        }
        // Record by record: each into a message of its own (a copy, as any single frame the proxy builds).
        let (mut sent, mut dropped) = (0, 0);
        for record in valid_records(self.msg.bytes()) {
            if self.record_msg.set_bytes(record).is_err() {
                dropped += 1;
                continue;
            }
            if send_downstream(
                &mut self.xpub,
                &mut self.record_msg,
                0,
                self.slow,
                self.block_timeout,
                stop,
            )? {
                sent += 1;
            } else {
                dropped += 1;
            }
        }
        let stats = self.engine.stats_mut();
        stats.messages_out += sent;
        stats.downstream_dropped += dropped;
        Ok(())
    }

    /// The forgery check of the message in `self.msg` (`[security.publishers]`): may its sender publish every
    /// publisher id it claims? A multipart message is held whole first (its parts are already queued: libzmq
    /// delivers a message atomically) and every part is checked, single frame or batch, since a tickbox frame
    /// carried as any part of a plain message (the Guide's `[topic][frame]`) reaches readers all the same. A
    /// message of more parts than can be held is refused.
    fn sender_may_send(&mut self) -> bool {
        let Some(check) = &self.publishers else {
            return true;
        };
        let sender = self.msg.user_id().or(check.connected_as.as_deref());
        if !crate::forgery::may_send(&check.grants, sender, self.msg.bytes()) {
            return false;
        }
        if !self.msg.more() {
            return true;
        }
        // Hold the rest; `forward_multipart` takes its parts from here before the socket.
        let mut last_more = true;
        while last_more {
            if self.held.len() == MAX_CHECKED_PARTS {
                return false;
            }
            let mut part = RawMsg::new();
            if part.recv(&mut self.xsub, DONTWAIT).is_err() {
                // Cannot happen for a queued message; refuse rather than forward half of one.
                return false;
            }
            last_more = part.more();
            let allowed = crate::forgery::may_send(&check.grants, sender, part.bytes());
            self.held.push_back(part);
            if !allowed {
                return false;
            }
        }
        true
    }

    /// The next part of the multipart message being forwarded: a held one (checked by `sender_may_send`), else
    /// the socket's.
    fn next_part(&mut self) -> Result<(), LvcError> {
        match self.held.pop_front() {
            Some(mut part) => {
                std::mem::swap(&mut self.msg, &mut part);
                Ok(())
            }
            None => self
                .msg
                .recv(&mut self.xsub, 0)
                .map_err(LvcError::zmq("receiving upstream part")),
        }
    }

    /// Counts and logs (rate-limited by powers of two) a message refused by the forgery check, and discards the
    /// rest of it if it is multipart.
    fn refuse_forged(&mut self) {
        let stats = self.engine.stats_mut();
        stats.messages_in += 1;
        stats.forged_refused += 1;
        let total = stats.forged_refused;
        if total.is_power_of_two() {
            let sender = self
                .msg
                .user_id()
                .unwrap_or("(unauthenticated)")
                .to_string();
            tracing::warn!(
                sender,
                total,
                "refused an upstream message whose publisher id is not bound to its sender's key"
            );
        }
        if let Some(check) = &self.publishers {
            check.stats.record_forged(1);
        }
        let mut more = self.held.back().map_or(self.msg.more(), RawMsg::more);
        self.held.clear();
        while more {
            if self.msg.recv(&mut self.xsub, DONTWAIT).is_err() {
                break;
            }
            more = self.msg.more();
        }
    }

    /// Sends `self.msg` downstream under the slow-subscriber policy and counts it.
    fn send_live(&mut self, stop: &AtomicBool, flags: c_int) -> Result<(), LvcError> {
        let sent = send_downstream(
            &mut self.xpub,
            &mut self.msg,
            flags,
            self.slow,
            self.block_timeout,
            stop,
        )?;
        let stats = self.engine.stats_mut();
        if sent {
            stats.messages_out += 1;
        } else {
            stats.downstream_dropped += 1;
        }
        Ok(())
    }

    /// A multipart message, its first part in `self.msg`: streamed part by part (the rest is already queued:
    /// libzmq delivers a message atomically) to the engine, the tap and subscribers, so a message of any size
    /// or part count costs the proxy one part at a time plus at most `max_entry_bytes` for the cache.
    ///
    /// Whether a message goes out is decided on its first part (libzmq applies the high-water mark to a
    /// message's first part and then takes the rest), so a refused first part means the rest is skipped for
    /// that socket, never sent as a message of its own.
    fn forward_multipart(&mut self, stop: &AtomicBool) -> Result<(), LvcError> {
        let forward = self.engine.begin_multipart(self.msg.bytes()) == Forwarding::Forward;
        let plain = forward && self.engine.multipart_is_plain();
        let mut down = forward;
        let mut to_tap = forward && self.tap.is_some();
        let mut first = true;
        loop {
            let more = self.msg.more();
            if !first {
                self.engine.multipart_part(self.msg.bytes());
            }
            let flags = if more { SNDMORE } else { 0 };
            if to_tap {
                let tap = self.tap.as_mut().expect("to_tap implies a tap");
                let sent = self.tap_msg.copy_from(&mut self.msg).is_ok()
                    && self.tap_msg.send(tap, flags | DONTWAIT).is_ok();
                if !sent {
                    to_tap = false;
                    self.engine.stats_mut().tap_dropped += 1;
                } else if !more {
                    self.engine.stats_mut().tap_sent += 1;
                }
            }
            if down {
                let sent = send_downstream(
                    &mut self.xpub,
                    &mut self.msg,
                    flags,
                    self.slow,
                    self.block_timeout,
                    stop,
                )?;
                let stats = self.engine.stats_mut();
                if !sent {
                    down = false;
                    stats.downstream_dropped += 1;
                } else if !more {
                    stats.messages_out += 1;
                    if plain {
                        stats.multipart_forwarded += 1;
                    }
                }
            }
            first = false;
            if !more {
                break;
            }
            self.next_part()?;
        }
        self.engine.end_multipart();
        Ok(())
    }

    /// Up to `batch` subscription events, so a subscription flood cannot starve live traffic (the XPUB stays
    /// readable and the rest is taken on the next wake-up).
    fn drain_downstream(&mut self) -> Result<(), LvcError> {
        let mut event = zmq::Message::new();
        for _ in 0..self.batch {
            match self.xpub.recv(&mut event, zmq::DONTWAIT) {
                Ok(()) => {}
                Err(zmq::Error::EAGAIN) | Err(zmq::Error::EINTR) => return Ok(()),
                Err(err) => {
                    return Err(LvcError::Zmq {
                        what: "receiving subscriptions".into(),
                        source: err,
                    })
                }
            }
            self.handle_downstream(&event)?;
        }
        Ok(())
    }

    fn handle_downstream(&mut self, frame: &[u8]) -> Result<(), LvcError> {
        let Proxy {
            engine,
            xsub,
            xpub,
            tap,
            scratch,
            tap_cached,
            tap_guide,
            broadcast,
            ..
        } = self;
        let (prefix, forward, subscribe) = match engine.handle_downstream(frame) {
            DownstreamEvent::Subscribe {
                prefix,
                forward_upstream,
            } => (prefix, forward_upstream, true),
            DownstreamEvent::Unsubscribe {
                prefix,
                forward_upstream,
            } => (prefix, forward_upstream, false),
            // Already counted and logged (rate-limited) by the engine; nothing reaches upstream or the tap.
            DownstreamEvent::Other | DownstreamEvent::Refused { .. } => return Ok(()),
        };
        let events = engine.stats().subscribes;
        if subscribe && events <= ATTACH_LOG_LIMIT {
            // Operators (and tests) wait for "subscriber attached" to know a consumer is in place; past the
            // limit a flood of subscriptions costs no log volume.
            tracing::info!(
                prefix = %String::from_utf8_lossy(prefix),
                forward,
                "subscriber attached"
            );
        } else {
            tracing::debug!(
                prefix = %String::from_utf8_lossy(prefix),
                subscribe,
                forward,
                "subscription event"
            );
        }
        if forward {
            // XSUB takes the same `\x01prefix` / `\x00prefix` frame as XPUB produced.
            xsub.send(frame, 0)
                .map_err(LvcError::zmq("forwarding subscription upstream"))?;
        }
        let mut tap_sent = 0;
        let mut tap_dropped = 0;
        if let Some(tap) = tap.as_mut() {
            scratch.clear();
            tap::encode_event(scratch, frame);
            if send_tap_frame(tap, *tap_guide, scratch) {
                tap_sent += 1;
            } else {
                tap_dropped += 1;
            }
        }
        let mut cached_sent = 0;
        let mut cached_dropped = 0;
        // Under `late_joiners = "snapshot"` late joiners ask the snapshot socket: nothing cached goes on the XPUB,
        // so bystanders get no copies at all.
        if subscribe && *broadcast {
            let allowance = engine.begin_burst(Instant::now());
            let mut matching = engine.cached_values(prefix);
            for cached in matching.by_ref().take(allowance) {
                match cached {
                    CachedValue::Frame(cached) => {
                        scratch.clear();
                        scratch.extend_from_slice(cached);
                        if mark_cached(scratch).is_err() {
                            // Only valid frames are cached as frames, so this cannot happen; skip rather than
                            // send garbage.
                            continue;
                        }
                        // The cached burst is never worth blocking live traffic for: in `block` mode the XPUB
                        // has NODROP, and a full subscriber queue just misses cached values (a plain SUB
                        // reconnect gets them again).
                        if xpub.send(scratch.as_slice(), zmq::DONTWAIT).is_ok() {
                            cached_sent += 1;
                        } else {
                            cached_dropped += 1;
                        }
                        if *tap_cached {
                            if let Some(tap) = tap.as_mut() {
                                if send_tap_frame(tap, *tap_guide, scratch) {
                                    tap_sent += 1;
                                } else {
                                    tap_dropped += 1;
                                }
                            }
                        }
                    }
                    // A plain publisher's message is sent again exactly as received: its format has no room for a
                    // CACHED mark, so to its subscribers a cached value looks like a repeated live one (as with
                    // the Guide's LVC).
                    CachedValue::Multipart(parts) => {
                        if send_parts(xpub, parts) {
                            cached_sent += 1;
                        } else {
                            cached_dropped += 1;
                        }
                        if *tap_cached {
                            if let Some(tap) = tap.as_mut() {
                                if send_parts(tap, parts) {
                                    tap_sent += 1;
                                } else {
                                    tap_dropped += 1;
                                }
                            }
                        }
                    }
                }
            }
            let cut_short = matching.next().is_some();
            drop(matching);
            // Refused sends are charged too: the budget bounds the proxy's work, not only what got through.
            engine.end_burst((cached_sent + cached_dropped) as usize, cut_short);
        }
        let stats = engine.stats_mut();
        stats.cached_sent += cached_sent;
        stats.cached_dropped += cached_dropped;
        stats.tap_sent += tap_sent;
        stats.tap_dropped += tap_dropped;
        Ok(())
    }

    /// Up to `batch` parts of snapshot requests (a request's parts may span wake-ups: the parser keeps its place
    /// and keeps only the bounded prefixes). Each complete request starts a reply or is answered at once (busy,
    /// malformed).
    fn drain_snapshot_requests(&mut self) {
        let Some(side) = self.snapshot.as_mut() else {
            return;
        };
        for _ in 0..self.batch {
            if side.router.recv(&mut side.part, zmq::DONTWAIT).is_err() {
                return;
            }
            let more = side.part.get_more();
            if !side.in_message {
                // The routing frame libzmq adds; the request's own parts follow.
                side.peer.clear();
                side.peer.extend_from_slice(&side.part);
                side.in_message = more;
                continue;
            }
            let Some(parsed) = side.parser.part(&side.part, more) else {
                continue;
            };
            side.in_message = false;
            let answer = match parsed {
                Ok(request) => side.server.admit(&side.peer, request),
                Err(err) => Some(side.server.malformed(
                    side.parser.request_id(),
                    side.parser.version(),
                    err,
                )),
            };
            if let Some(end) = answer {
                // Best effort: a client that does not read misses its refusal, which is counted anyway.
                let _ = send_reply(
                    &side.router,
                    &mut side.scratch,
                    &side.peer,
                    ReplyItem::End(end),
                );
            }
        }
    }

    /// One slice of the snapshot replies in progress.
    fn serve_snapshots(&mut self) {
        let Some(side) = self.snapshot.as_mut() else {
            return;
        };
        if !side.server.is_busy() {
            side.progress = false;
            return;
        }
        let SnapshotSide {
            router,
            server,
            scratch,
            slice,
            ..
        } = side;
        let loss = self.engine.known_loss();
        let sent = server.serve(
            self.engine.cache(),
            loss,
            Instant::now(),
            *slice,
            |peer, item| send_reply(router, scratch, peer, item),
        );
        side.progress = sent > 0;
    }

    /// Tap consumers' subscriptions: read so they do not pile up; the tap XPUB filters by them itself.
    fn drain_tap_subscriptions(&mut self) {
        let Some(tap) = self.tap.as_ref() else { return };
        for _ in 0..self.batch {
            let Ok(frame) = tap.recv_bytes(zmq::DONTWAIT) else {
                return;
            };
            self.tap_readers.on_message(&frame);
            if let Some((&kind, prefix)) = frame.split_first() {
                if kind == 1 {
                    self.engine.stats_mut().tap_subscriptions += 1;
                }
                if kind == 1 && self.engine.stats().tap_subscriptions <= ATTACH_LOG_LIMIT {
                    tracing::info!(
                        prefix = %String::from_utf8_lossy(prefix),
                        "tap consumer attached"
                    );
                } else {
                    tracing::debug!(
                        subscribe = kind == 1,
                        prefix = %String::from_utf8_lossy(prefix),
                        "tap consumer subscription"
                    );
                }
            }
        }
    }
}

/// The records of a batch frame that are valid frames, in order, up to the first that is not (the engine has
/// counted that one as malformed).
fn valid_records(frame: &[u8]) -> impl Iterator<Item = &[u8]> {
    tickbox_wire::batch_records(frame)
        .into_iter()
        .flatten()
        .map_while(Result::ok)
        .filter(|record| tickbox_wire::MessageRef::decode(record).is_ok())
}

/// Sends one tickbox tap frame (an event, a cached value) without waiting, in the tap's framing: alone, or under
/// its Guide topic frame. Only the first frame can be refused, so a refused topic frame means nothing went out.
fn send_tap_frame(tap: &zmq::Socket, guide: bool, frame: &[u8]) -> bool {
    if guide
        && tap
            .send(crate::tap::guide_topic(frame), zmq::SNDMORE | zmq::DONTWAIT)
            .is_err()
    {
        return false;
    }
    tap.send(frame, zmq::DONTWAIT).is_ok()
}

/// Sends one reply message to `peer` on the snapshot ROUTER without waiting. A tickbox frame goes out marked
/// CACHED, exactly as in the XPUB's burst; a multipart value as it was published.
fn send_reply(
    router: &zmq::Socket,
    scratch: &mut Vec<u8>,
    peer: &[u8],
    item: ReplyItem<'_>,
) -> SendOutcome {
    let end: super::snapshot::EndFrame;
    let single: Option<&[u8]> = match item {
        ReplyItem::End(e) => {
            end = e.encode();
            Some(&*end)
        }
        ReplyItem::Value(CachedValue::Frame(frame)) => {
            scratch.clear();
            scratch.extend_from_slice(frame);
            // Only valid frames are cached as frames, so marking cannot fail.
            let _ = mark_cached(scratch);
            Some(scratch.as_slice())
        }
        ReplyItem::Value(CachedValue::Multipart(_)) => None,
    };
    // The routing frame decides: libzmq checks the client's queue (EAGAIN) and presence (EHOSTUNREACH) on it,
    // and then takes the rest of the message.
    match router.send(peer, zmq::SNDMORE | zmq::DONTWAIT) {
        Ok(()) => {}
        Err(zmq::Error::EHOSTUNREACH) => return SendOutcome::Gone,
        Err(_) => return SendOutcome::Full,
    }
    let ok = match (single, item) {
        (Some(frame), _) => router.send(frame, zmq::DONTWAIT).is_ok(),
        (None, ReplyItem::Value(CachedValue::Multipart(parts))) => {
            let last = parts.len().saturating_sub(1);
            parts.iter().enumerate().all(|(i, part)| {
                let flags = if i < last { zmq::SNDMORE } else { 0 };
                router.send(part, flags | zmq::DONTWAIT).is_ok()
            })
        }
        (None, _) => false,
    };
    if ok {
        SendOutcome::Sent
    } else {
        // After the routing frame libzmq does not refuse the rest; if it ever did, the reply is broken: end it.
        SendOutcome::Gone
    }
}

/// Sends a cached multipart value without waiting; returns whether it went out. Only the first part can be
/// refused (libzmq applies the high-water mark per message, on its first part), and then nothing is sent.
fn send_parts(socket: &zmq::Socket, parts: Parts<'_>) -> bool {
    let last = parts.len().saturating_sub(1);
    for (i, part) in parts.iter().enumerate() {
        let flags = if i < last { zmq::SNDMORE } else { 0 };
        if socket.send(part, flags | zmq::DONTWAIT).is_err() {
            debug_assert_eq!(i, 0, "a later part of a message cannot be refused");
            return false;
        }
    }
    true
}

/// The XPUB's and tap's `ZMQ_MAXMSGSIZE`: twice the app-level bound plus room for the ZMTP 3.1 `SUBSCRIBE`
/// command name, so a subscription slightly too long reaches the proxy and is counted as refused, while a
/// hostile megabyte is cut off by libzmq before it is buffered or stored.
fn subscription_frame_limit(max_subscription_bytes: usize) -> i64 {
    clamp_i64(max_subscription_bytes.saturating_mul(2).saturating_add(64))
}

fn clamp_i64(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// Attach events logged at info level before they drop to debug (a subscription flood must not flood the log).
const ATTACH_LOG_LIMIT: u64 = 64;

/// Returns whether the message went out. In `drop` mode the lossy XPUB never refuses. In `block` mode the send
/// blocks in libzmq (woken as soon as the slowest matching subscriber has room, which a sleep-and-retry loop
/// measurably is not) for at most `SNDTIMEO` = the poll period at a time, so the stop flag and the overall
/// `block_timeout` are still checked.
fn send_downstream(
    xpub: &mut zmq::Socket,
    msg: &mut RawMsg,
    flags: c_int,
    slow: BackPressure,
    timeout: Duration,
    stop: &AtomicBool,
) -> Result<bool, LvcError> {
    let flags = match slow {
        BackPressure::Drop => flags | DONTWAIT,
        BackPressure::Block => flags,
    };
    let mut deadline = None;
    loop {
        match msg.send(xpub, flags) {
            Ok(()) => return Ok(true),
            Err(zmq::Error::EAGAIN) if slow == BackPressure::Block => {
                let now = Instant::now();
                let deadline = *deadline.get_or_insert(now + timeout);
                if now >= deadline || stop.load(Ordering::Relaxed) {
                    return Ok(false);
                }
            }
            Err(zmq::Error::EAGAIN) => return Ok(false),
            Err(zmq::Error::EINTR) => continue,
            Err(err) => {
                return Err(LvcError::Zmq {
                    what: "sending downstream".into(),
                    source: err,
                });
            }
        }
    }
}

/// One of the proxy's XPUBs (downstream, tap), bound for `role` by the one publisher recipe.
fn open_xpub(
    gate: &tickbox_auth::Gate,
    role: &str,
    recipe: &PublisherSocket<'_>,
    endpoint: &str,
    what: &str,
) -> Result<(zmq::Socket, String), LvcError> {
    let socket = gate.socket(recipe.kind(), role)?;
    recipe.open(socket, endpoint, false).map_err(|e| {
        let (what, source) = match e {
            PublisherSocketError::Option { option, source } => (format!("{role} {option}"), source),
            PublisherSocketError::Attach { source, .. } => {
                (format!("binding {what} {endpoint}"), source)
            }
        };
        match source {
            tickbox_zmqx::ZmqxError::Zmq(source) => LvcError::Zmq { what, source },
            other => LvcError::Config(format!("{what}: {other}")),
        }
    })
}

fn resolve(socket: &zmq::Socket, endpoint: &str, what: &str) -> Result<String, LvcError> {
    tickbox_zmqx::bind_resolved(socket, endpoint).map_err(|e| match e {
        tickbox_zmqx::ZmqxError::Zmq(source) => LvcError::Zmq {
            what: format!("binding {what} {endpoint}"),
            source,
        },
        other => LvcError::Config(format!("binding {what} {endpoint}: {other}")),
    })
}

/// The [`tickbox_metrics::Source`] of a running proxy: its counters (a snapshot the proxy thread refreshes every
/// 50 ms, never per message) as `tickbox_FIELD_total`, and what it holds now as gauges; every publisher's sequence
/// account under the names the subscriber uses (`tickbox_publisher_missing{publisher}`, ...), and their sums.
#[derive(Debug)]
pub struct LvcMetrics {
    shared: Arc<Mutex<LvcStats>>,
    accounts: Arc<crate::sequences::SharedAccounts>,
}

impl tickbox_metrics::Source for LvcMetrics {
    fn collect(&self, out: &mut tickbox_metrics::Scrape) {
        let stats = *self.shared.lock().unwrap_or_else(|e| e.into_inner());
        if let Ok(value) = serde_json::to_value(stats) {
            out.fields(
                &value,
                &["topics_cached", "cache_bytes", "downstream_prefixes"],
                "the LVC's counters (the final table of `tickbox lvc`)",
                &[],
            );
        }
        let t = self.accounts.counters().load();
        out.gauge(
            "tickbox_publishers",
            "Publishers whose sequence the LVC accounts.",
            &[],
            i64::try_from(t.publishers).unwrap_or(i64::MAX),
        );
        out.counters(
            &[],
            &[
                (
                    "tickbox_missing",
                    "Publisher sequences lost before the LVC (gaps).",
                    t.missing,
                ),
                (
                    "tickbox_gaps",
                    "Gaps in publishers' sequences seen by the LVC.",
                    t.gap_events,
                ),
                (
                    "tickbox_missed_before_join",
                    "Messages publishers sent before the LVC first heard their session.",
                    t.missed_before_join,
                ),
                (
                    "tickbox_duplicates",
                    "Publisher sequences the LVC received twice.",
                    t.duplicates,
                ),
                (
                    "tickbox_restarts",
                    "Publisher restarts (new sessions) the LVC saw.",
                    t.restarts,
                ),
                (
                    "tickbox_anomalies",
                    "Implausible sequence jumps: counted, not believed.",
                    t.anomalies,
                ),
            ],
        );
        for a in self.accounts.publishers() {
            let labels = [(tickbox_metrics::label::PUBLISHER, a.publisher.to_string())];
            out.counters(
                &labels,
                &[
                    (
                        "tickbox_publisher_received",
                        "Data records from this publisher.",
                        a.received,
                    ),
                    (
                        "tickbox_publisher_missing",
                        "Sequences of this publisher this hop lost.",
                        a.missing,
                    ),
                    (
                        "tickbox_publisher_gaps",
                        "Gap events of this publisher.",
                        a.gap_events,
                    ),
                    (
                        "tickbox_publisher_missed_before_join",
                        "Messages this publisher sent before the LVC first heard its session.",
                        a.missed_before_join,
                    ),
                ],
            );
        }
    }
}
