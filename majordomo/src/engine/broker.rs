//! The Majordomo broker: one ROUTER for clients and workers, one queue per service, LRU worker dispatch,
//! heartbeating of idle workers, MMI answered in-house, request expiry for services nobody serves.
//!
//! [`Broker`] is a sans-IO state machine: feed it received messages ([`Broker::handle_input`]) and the time
//! ([`Broker::handle_timeout`]), drain the messages it wants sent ([`Broker::poll_output`]) and sleep until
//! [`Broker::poll_timeout`]. `crate::broker::run_broker` is the thin socket loop around it.
//!
//! Everything a peer can make the broker hold is bounded: queued requests per service
//! ([`BrokerConfig::max_queued_per_service`]), bytes queued across all services
//! ([`BrokerConfig::max_queued_bytes`], frame and bookkeeping overhead included), and registered workers
//! ([`BrokerConfig::max_workers`]). MDP has no "busy" answer for clients, so a request beyond a bound is
//! dropped and counted in [`BrokerStats::requests_refused`]; the client's own timeout and retry are the
//! back-pressure, exactly as for a request that expires. Refusals and expiries are logged at a limited rate
//! with their running totals. A client that can take it (a Titanic dispatcher, see [`UNDELIVERED`]) is told
//! instead of being left to time out.
//!
//! A request is never handed to a worker the broker already holds for dead: dispatch checks each idle worker's
//! heartbeat expiry first (the purge on [`Broker::handle_timeout`] only frees memory), and a REQUEST the socket could
//! not route because the worker's connection is gone comes back through [`Broker::handle_undeliverable`] and goes to
//! the head of its queue, for the next live worker.
#![deny(clippy::disallowed_methods, clippy::disallowed_types)]

use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::proto::{
    classify, client_reply, worker_msg, Frames, Inbound, Version, WorkerCmd, MMI_PREFIX,
};
use tickbox_reliable::PeerClock;
use tickbox_units::{ByteSize, HumanDuration};

/// Broker settings. Heartbeat interval and liveness must match the workers' (the RFC's known weakness).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct BrokerConfig {
    /// Heartbeat interval towards idle workers (reference 2500 ms); at least 1 ms is used.
    pub heartbeat_interval: HumanDuration,
    /// Missed intervals after which a silent idle worker is forgotten (reference 3).
    pub heartbeat_liveness: u32,
    /// A request queued for a service with no free worker is dropped after this long (the RFC's
    /// "SHOULD expire"); the client's own retry then decides what to do.
    pub request_expiry: HumanDuration,
    /// A worker busy for longer than this is presumed dead: it cannot heartbeat while it works, so this
    /// bounds how long a crashed busy worker keeps counting as "present" for MMI.
    pub busy_timeout: HumanDuration,
    /// Requests queued per service waiting for a worker (default 1 000 000, a backstop: the byte bound is the
    /// real limit); more are refused (dropped, counted). The default lets the Guide's asynchronous client
    /// pipeline its 100 000 requests at one worker.
    pub max_queued_per_service: usize,
    /// Bytes of queued requests across all services (default 64 MiB), counting every body frame plus a
    /// fixed per-request and per-frame overhead (a small request costs about 200 bytes, so the default holds
    /// some 300 000 of them); a request that would cross it is refused.
    pub max_queued_bytes: ByteSize,
    /// Registered workers (default 10 000); a READY beyond it is answered with DISCONNECT.
    pub max_workers: usize,
    /// `ZMQ_MAXMSGSIZE` of the broker ROUTER (default 16 MiB; 0 = unlimited): a peer sending a bigger
    /// message is disconnected by the socket library before the message is buffered.
    pub max_message_size: ByteSize,
    /// `ZMQ_RCVHWM` of the broker ROUTER, in messages per peer (default 1000; 0 = unlimited): a flooding
    /// peer is throttled by TCP back-pressure instead of growing the socket library's receive pipe. The pipe is
    /// bounded in messages, not bytes: besides `max_queued_bytes` the broker can hold up to this many of each fast
    /// peer's messages (at most `max_message_size` each).
    pub receive_hwm: i32,
    /// The peer-facing ROUTER sends multipart messages; it closes with a linger of twice this plus 1 s and
    /// `ZMQ_TCP_MAXRT` set to this (the teardown rule in the book's chapter on known traps), so a stop can never hit the ZeroMQ library's `clean_pipes`
    /// abort (a peer stalled mid-message hanging up as the socket closes). The price: a peer that acknowledges no
    /// TCP data for this long is disconnected, and a stop with a stalled peer waits up to about this long.
    /// At least 1 ms is used.
    pub stalled_peer_timeout: HumanDuration,
    /// `[security]`, shared by the binary: the ROUTER's CURVE/ZAP set-up (role `broker`) and the per-key service
    /// grants every client request is checked against (docs/book/src/protocols.md §2.5). The default grants everything.
    #[serde(skip)]
    pub security: tickbox_auth::Security,
    /// Where the broker's loop leaves a copy of its counters for `broker --metrics` (none: nowhere).
    #[serde(skip)]
    pub live: crate::metrics::LiveBrokerStats,
}

impl Default for BrokerConfig {
    fn default() -> Self {
        Self {
            heartbeat_interval: HumanDuration(Duration::from_millis(2500)),
            heartbeat_liveness: 3,
            request_expiry: HumanDuration(Duration::from_millis(30_000)),
            busy_timeout: HumanDuration(Duration::from_millis(60_000)),
            max_queued_per_service: 1_000_000,
            max_queued_bytes: ByteSize(64 << 20),
            max_workers: 10_000,
            max_message_size: ByteSize(16 << 20),
            receive_hwm: 1000,
            stalled_peer_timeout: HumanDuration(Duration::from_secs(3)),
            security: tickbox_auth::Security::default(),
            live: Default::default(),
        }
    }
}

/// What a queued request is charged beyond its body bytes: the `Queued` record and the client identity
/// (per request), the `Vec` header (per frame). Without it a flood of empty frames would be "free".
const REQUEST_OVERHEAD: usize = 128;
const FRAME_OVERHEAD: usize = 32;

fn queued_cost(client: &[u8], service: &[u8], body: &Frames) -> usize {
    REQUEST_OVERHEAD
        + client.len()
        + service.len()
        + body.iter().map(|f| f.len() + FRAME_OVERHEAD).sum::<usize>()
}

impl BrokerConfig {
    fn interval(&self) -> Duration {
        self.heartbeat_interval.0.max(Duration::from_millis(1))
    }
}

/// Counters a user can read to see what the broker did and what it refused.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct BrokerStats {
    /// Client requests received, MMI queries included.
    pub requests: u64,
    /// Final replies forwarded to clients.
    pub replies: u64,
    /// Partial replies received from 0.2 workers (forwarded only to 0.2 clients; 0.1 clients get the final).
    pub partials: u64,
    /// `mmi.*` queries answered by the broker itself.
    pub mmi: u64,
    /// Messages dropped as malformed (see [`crate::proto::Malformed`]).
    pub malformed: u64,
    /// DISCONNECTs sent: protocol violations, `mmi.*` READYs, workers presumed dead while busy.
    pub disconnects_sent: u64,
    /// Workers that sent READY.
    pub workers_registered: u64,
    /// Workers forgotten: silent while idle, busy for longer than `busy_timeout`, or their connection gone.
    pub workers_expired: u64,
    /// Of `workers_expired`, idle workers found expired when a request was about to go to them (before the
    /// purge on the heartbeat timer); the request went to the next live worker.
    pub workers_expired_at_dispatch: u64,
    /// REQUESTs the socket could not route because the worker's connection was gone: put back at the head of
    /// their queue for the next worker (never lost, never executed by the gone worker).
    pub requests_requeued: u64,
    /// Other messages for a peer whose connection was gone (a reply to a client that left, a heartbeat to a
    /// dead worker): dropped.
    pub unroutable: u64,
    /// Undelivered notices sent to clients that take them ([`UNDELIVERED`]): refused or expired requests.
    pub undelivered_notices: u64,
    /// Queued requests dropped after `request_expiry` without a worker.
    pub requests_expired: u64,
    /// Client requests dropped because a queue bound (`max_queued_per_service`, `max_queued_bytes`) was reached.
    pub requests_refused: u64,
    /// READYs answered with DISCONNECT because `max_workers` workers were registered.
    pub workers_refused: u64,
    /// Bytes currently charged to queued requests (see [`BrokerConfig::max_queued_bytes`]).
    pub queued_bytes: u64,
    /// Highest value `queued_bytes` reached.
    pub queued_bytes_peak: u64,
    /// Client requests refused by the `[security]` service grants, each answered `403 unauthorised: SERVICE`;
    /// requests from keys no longer listed in the allow directory included.
    pub requests_unauthorised: u64,
    /// READYs answered with DISCONNECT because no `[security.services]` `serve` grant names the worker's key
    /// for the service (a caller's key posing as a worker), and worker messages from keys no longer listed.
    pub workers_unauthorised: u64,
    /// Per service (its name, or [`OTHER_SERVICES`] past [`MAX_SERVICE_COUNTS`] names): requests by how they
    /// ended, so `403`s and refusals can be told apart per service.
    pub by_service: std::collections::BTreeMap<String, ServiceCounts>,
}

/// How one service's requests ended (`broker --metrics` labels them `status`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct ServiceCounts {
    /// Requests received for the service.
    pub requests: u64,
    /// Final replies a worker sent back (`status="200"`).
    pub replied: u64,
    /// Answered `403 unauthorised` (grants, or a revoked key).
    pub unauthorised: u64,
    /// Refused at a queue bound (`refused`).
    pub refused: u64,
    /// Expired in the queue without a worker (`expired`).
    pub expired: u64,
    /// `mmi.*` queries answered `404` (no worker for the service asked about).
    pub not_found: u64,
}

/// Most distinct service names counted apart: requests name services freely, and every name would otherwise
/// grow the table; past it, counts go to [`OTHER_SERVICES`].
pub const MAX_SERVICE_COUNTS: usize = 256;

/// Where the services past [`MAX_SERVICE_COUNTS`] are counted.
pub const OTHER_SERVICES: &str = "(other)";

impl BrokerStats {
    /// The counts of `service`, created while there is room.
    fn service(&mut self, service: &[u8]) -> &mut ServiceCounts {
        let name = String::from_utf8_lossy(service);
        let key = if self.by_service.contains_key(name.as_ref())
            || self.by_service.len() < MAX_SERVICE_COUNTS
        {
            name.into_owned()
        } else {
            OTHER_SERVICES.to_string()
        };
        self.by_service.entry(key).or_default()
    }
}

struct WorkerState {
    service: Vec<u8>,
    version: Version,
    clock: PeerClock,
    busy: Option<Busy>,
}

struct Busy {
    client: Vec<u8>,
    client_version: Version,
    since: Instant,
}

struct Queued {
    client: Vec<u8>,
    version: Version,
    body: Frames,
    expires: Instant,
    cost: usize,
}

#[derive(Default)]
struct Service {
    requests: VecDeque<Queued>,
    /// Idle workers, least recently used first.
    waiting: VecDeque<Vec<u8>>,
    workers: usize,
}

/// Sans-IO Majordomo broker engine.
pub struct Broker {
    cfg: BrokerConfig,
    services: HashMap<Vec<u8>, Service>,
    workers: HashMap<Vec<u8>, WorkerState>,
    out: VecDeque<Frames>,
    next_tick: Instant,
    stats: BrokerStats,
    queued_bytes: usize,
    /// Refusals not yet logged; the warning is rate-limited because any client can trigger it at will.
    refused_unlogged: u64,
    next_refusal_log: Instant,
    /// Expiries not yet logged, rate-limited the same way.
    expired_unlogged: u64,
    next_expiry_log: Instant,
    /// Unauthorised requests not yet logged (rate-limited like the queue refusals).
    unauthorised_unlogged: u64,
    next_unauthorised_log: Instant,
}

pub use crate::proto::UNDELIVERED;

/// Routing-identity prefix of the clients that take [`UNDELIVERED`] notices: Titanic's dispatch identities
/// (`TSP:<uuid>:<attempt>`, see `crate::titanic`).
pub const NOTICE_PREFIX: &[u8] = crate::engine::titanic::REQUEST_ID_PREFIX;

/// How often the refusal and expiry warnings may be logged (each with the count since the last line and the
/// running total).
const LOG_EVERY: Duration = Duration::from_secs(1);

/// A routing identity for a log line: as text when it is printable ASCII, else `0x` and hex (the identities the
/// socket library generates are five binary bytes).
pub fn show_identity(id: &[u8]) -> String {
    if !id.is_empty() && id.iter().all(|b| b.is_ascii_graphic()) {
        String::from_utf8_lossy(id).into_owned()
    } else {
        let mut out = String::with_capacity(2 + 2 * id.len());
        out.push_str("0x");
        for b in id {
            out.push_str(&format!("{b:02x}"));
        }
        out
    }
}

/// The one-frame body of the reply to a refused request: `403 unauthorised: SERVICE` (docs/book/src/protocols.md §2.5).
pub fn unauthorised_reply(service: &str) -> String {
    format!("403 unauthorised: {service}")
}

fn with_identity(identity: Vec<u8>, mut frames: Frames) -> Frames {
    frames.insert(0, identity);
    frames
}

impl Broker {
    /// An empty broker (no services, no workers); the first heartbeat tick is one interval after `now`.
    pub fn new(cfg: BrokerConfig, now: Instant) -> Self {
        let next_tick = now + cfg.interval();
        Self {
            cfg,
            services: HashMap::new(),
            workers: HashMap::new(),
            out: VecDeque::new(),
            next_tick,
            stats: BrokerStats::default(),
            queued_bytes: 0,
            refused_unlogged: 0,
            next_refusal_log: now,
            expired_unlogged: 0,
            next_expiry_log: now,
            unauthorised_unlogged: 0,
            next_unauthorised_log: now,
        }
    }

    /// What the broker has done so far.
    pub fn stats(&self) -> &BrokerStats {
        &self.stats
    }

    /// The settings the broker was created with.
    pub fn config(&self) -> &BrokerConfig {
        &self.cfg
    }

    /// Number of workers (idle or busy) currently registered for `service`.
    pub fn workers_for(&self, service: &[u8]) -> usize {
        self.services.get(service).map_or(0, |s| s.workers)
    }

    /// Requests waiting for a worker of `service`.
    pub fn queued_for(&self, service: &[u8]) -> usize {
        self.services.get(service).map_or(0, |s| s.requests.len())
    }

    /// Next message to send on the ROUTER; frame 0 is the destination identity.
    pub fn poll_output(&mut self) -> Option<Frames> {
        self.out.pop_front()
    }

    /// When [`Broker::handle_timeout`] must next run.
    pub fn poll_timeout(&self) -> Option<Instant> {
        Some(self.next_tick)
    }

    /// Handle one message received on the ROUTER (frame 0 is the sender identity). Malformed input is counted
    /// and dropped; nothing here can panic on bad bytes. The sender is unauthenticated: see
    /// [`Broker::handle_input_from`].
    pub fn handle_input(&mut self, now: Instant, frames: Frames) {
        self.handle_input_from(now, frames, None);
    }

    /// [`Broker::handle_input`] for a message whose sender the socket layer authenticated: `user` is its ZAP user id
    /// (the client's Z85 public key under CURVE; `None` under NULL). A client request for a service the
    /// `[security]` grants do not give `user` is answered `403 unauthorised: SERVICE` and counted, never queued.
    pub fn handle_input_from(&mut self, now: Instant, mut frames: Frames, user: Option<&str>) {
        if frames.len() < 2 {
            self.stats.malformed += 1;
            return;
        }
        let identity = frames.remove(0);
        match classify(frames) {
            Ok(Inbound::ClientRequest {
                version,
                service,
                body,
            }) => {
                if self.authorised(now, &identity, version, &service, user) {
                    self.client_request(now, identity, version, service, body)
                }
            }
            Ok(Inbound::Worker { version, cmd, rest }) => {
                self.worker_command(now, identity, version, cmd, rest, user)
            }
            Err(why) => {
                self.stats.malformed += 1;
                tracing::debug!(%why, "dropping malformed message");
                // A registered worker that talks garbage is no longer trusted (RFC: "considered invalid").
                if self.workers.contains_key(&identity) {
                    self.delete_worker(&identity, false);
                }
            }
        }
    }

    /// A message whose sender's key has left the allow directory since its handshake (the socket loop checks
    /// each message's `User-Id` against the allow set as last read): a client request is answered
    /// `403 unauthorised` at once, a registered worker is disconnected and forgotten, anything else dropped.
    /// Counted in both the broker's and the process's auth summary.
    pub fn handle_revoked(&mut self, now: Instant, mut frames: Frames, user: Option<&str>) {
        if frames.len() < 2 {
            self.stats.malformed += 1;
            return;
        }
        self.cfg.security.stats().record_revoked();
        let identity = frames.remove(0);
        match classify(frames) {
            Ok(Inbound::ClientRequest {
                version, service, ..
            }) => {
                self.stats.requests += 1;
                self.stats.requests_unauthorised += 1;
                let counts = self.stats.service(&service);
                counts.requests += 1;
                counts.unauthorised += 1;
                self.log_unauthorised(now, &String::from_utf8_lossy(&service), "revoked", user);
                let body =
                    vec![unauthorised_reply(&String::from_utf8_lossy(&service)).into_bytes()];
                let reply = client_reply(version, false, service, body);
                self.out.push_back(with_identity(identity, reply));
            }
            Ok(Inbound::Worker { version, .. }) => {
                self.stats.workers_unauthorised += 1;
                if self.workers.contains_key(&identity) {
                    self.delete_worker(&identity, true);
                } else {
                    self.send_disconnect(identity, version);
                }
            }
            Err(_) => self.stats.malformed += 1,
        }
    }

    /// Logs refused requests and workers at most every 5 s, with how many were refused since the last line (a
    /// listed key can send them as fast as it likes).
    fn log_unauthorised(&mut self, now: Instant, service: &str, rule: &str, user: Option<&str>) {
        self.unauthorised_unlogged += 1;
        if now >= self.next_unauthorised_log {
            tracing::warn!(
                refused = self.unauthorised_unlogged,
                service,
                rule,
                user = user.unwrap_or("(unauthenticated)"),
                "refused unauthorised requests or workers (last: {rule} on {service})"
            );
            self.unauthorised_unlogged = 0;
            self.next_unauthorised_log = now + Duration::from_secs(5);
        }
    }

    /// Checks the service grants; a refusal is answered at once (an error reply the client can read, in its own
    /// MDP revision) and counted here and in the process's auth summary.
    fn authorised(
        &mut self,
        now: Instant,
        client: &[u8],
        version: Version,
        service: &[u8],
        user: Option<&str>,
    ) -> bool {
        let name = String::from_utf8_lossy(service);
        let tickbox_auth::Access::Refused { rule } =
            self.cfg.security.grants().may_call(user, &name)
        else {
            return true;
        };
        self.stats.requests += 1;
        self.stats.requests_unauthorised += 1;
        let counts = self.stats.service(service);
        counts.requests += 1;
        counts.unauthorised += 1;
        self.cfg.security.stats().record_unauthorised();
        self.log_unauthorised(now, &name, &rule, user);
        let body = vec![unauthorised_reply(&name).into_bytes()];
        let reply = client_reply(version, false, service.to_vec(), body);
        self.out.push_back(with_identity(client.to_vec(), reply));
        false
    }

    fn client_request(
        &mut self,
        now: Instant,
        client: Vec<u8>,
        version: Version,
        service: Vec<u8>,
        body: Frames,
    ) {
        self.stats.requests += 1;
        self.stats.service(&service).requests += 1;
        if service.starts_with(MMI_PREFIX) {
            self.stats.mmi += 1;
            let code: &[u8] = if service.as_slice() == b"mmi.service" {
                let target = body.first().map(Vec::as_slice).unwrap_or_default();
                if self.workers_for(target) > 0 {
                    b"200"
                } else {
                    self.stats.service(&service).not_found += 1;
                    b"404"
                }
            } else {
                b"501"
            };
            let reply = client_reply(version, false, service, vec![code.to_vec()]);
            self.out.push_back(with_identity(client, reply));
            return;
        }
        let cost = queued_cost(&client, &service, &body);
        let queued = self.services.get(&service).map_or(0, |s| s.requests.len());
        // A request that can go straight to an idle worker is never refused: the bounds are about waiting.
        let idle = self
            .services
            .get(&service)
            .is_some_and(|s| !s.waiting.is_empty());
        if !idle
            && (queued >= self.cfg.max_queued_per_service
                || (self.queued_bytes + cost) as u64 > self.cfg.max_queued_bytes.0)
        {
            self.refuse(now, client, version, service);
            return;
        }
        let expires = now + self.cfg.request_expiry.0;
        self.queued_bytes += cost;
        self.stats.queued_bytes = self.queued_bytes as u64;
        self.stats.queued_bytes_peak = self.stats.queued_bytes_peak.max(self.stats.queued_bytes);
        self.services
            .entry(service.clone())
            .or_default()
            .requests
            .push_back(Queued {
                client,
                version,
                body,
                expires,
                cost,
            });
        self.dispatch(now, &service);
    }

    fn refuse(&mut self, now: Instant, client: Vec<u8>, version: Version, service: Vec<u8>) {
        self.stats.requests_refused += 1;
        self.stats.service(&service).refused += 1;
        self.refused_unlogged += 1;
        self.log_drops(now);
        self.notify_undelivered(client, version, service, b"refused");
    }

    /// The rate-limited refusal and expiry warnings: at most one line of each per [`LOG_EVERY`], with the count
    /// since the previous line and the running total, so a burst's tail is logged on a later tick.
    fn log_drops(&mut self, now: Instant) {
        if self.refused_unlogged > 0 && now >= self.next_refusal_log {
            tracing::warn!(
                refused = self.refused_unlogged,
                refused_total = self.stats.requests_refused,
                queued_bytes = self.queued_bytes,
                max_queued_bytes = self.cfg.max_queued_bytes.0,
                "request queue full: client requests refused (dropped; MDP/0.1 clients are not told and time out)"
            );
            self.refused_unlogged = 0;
            self.next_refusal_log = now + LOG_EVERY;
        }
        if self.expired_unlogged > 0 && now >= self.next_expiry_log {
            tracing::warn!(
                expired = self.expired_unlogged,
                expired_total = self.stats.requests_expired,
                request_expiry = %self.cfg.request_expiry,
                "queued requests expired without a worker (dropped)"
            );
            self.expired_unlogged = 0;
            self.next_expiry_log = now + LOG_EVERY;
        }
    }

    fn notify_undelivered(
        &mut self,
        client: Vec<u8>,
        version: Version,
        service: Vec<u8>,
        reason: &[u8],
    ) {
        if !client.starts_with(NOTICE_PREFIX) {
            return;
        }
        self.stats.undelivered_notices += 1;
        let notice = client_reply(
            version,
            false,
            UNDELIVERED.to_vec(),
            vec![service, reason.to_vec()],
        );
        self.out.push_back(with_identity(client, notice));
    }

    /// The socket could not route `frames` (frame 0 the identity, as [`Broker::poll_output`] gave it): the
    /// peer's connection is gone (a ROUTER with `ZMQ_ROUTER_MANDATORY` says so at once, before anything is
    /// sent). A worker is forgotten; the REQUEST it was sent goes back to the head of its service's queue and
    /// on to the next live worker. Anything else is counted in [`BrokerStats::unroutable`] and dropped.
    pub fn handle_undeliverable(&mut self, now: Instant, mut frames: Frames) {
        if frames.is_empty() {
            return;
        }
        let id = frames.remove(0);
        let Some(w) = self.workers.get(&id) else {
            self.stats.unroutable += 1;
            return;
        };
        let (version, service) = (w.version, w.service.clone());
        let client_version = w.busy.as_ref().map_or(Version::V01, |b| b.client_version);
        // 0.1: ["" "MDPW01" cmd client "" body…]; 0.2: ["MDPW02" cmd client "" body…].
        let cmd_at = if version == Version::V01 { 2 } else { 1 };
        let is_request = frames.get(cmd_at).map(Vec::as_slice)
            == Some(&[WorkerCmd::Request.byte(version)][..])
            && frames.len() > cmd_at + 3;
        self.stats.workers_expired += 1;
        tracing::info!(
            worker = %show_identity(&id),
            "worker connection gone: forgotten"
        );
        self.delete_worker(&id, false);
        if !is_request {
            self.stats.unroutable += 1;
            return;
        }
        let mut rest = frames.split_off(cmd_at + 1);
        let body = rest.split_off(2);
        let client = rest.swap_remove(0);
        let cost = queued_cost(&client, &service, &body);
        self.queued_bytes += cost;
        self.stats.queued_bytes = self.queued_bytes as u64;
        self.stats.queued_bytes_peak = self.stats.queued_bytes_peak.max(self.stats.queued_bytes);
        self.stats.requests_requeued += 1;
        self.services
            .entry(service.clone())
            .or_default()
            .requests
            .push_front(Queued {
                client,
                version: client_version,
                body,
                expires: now + self.cfg.request_expiry.0,
                cost,
            });
        self.dispatch(now, &service);
    }

    fn worker_command(
        &mut self,
        now: Instant,
        id: Vec<u8>,
        version: Version,
        cmd: WorkerCmd,
        mut rest: Frames,
        user: Option<&str>,
    ) {
        let known = self.workers.get(&id).map(|w| w.version);
        if let Some(v) = known {
            if v != version {
                // Switching protocol revision mid-conversation is a protocol violation.
                self.delete_worker(&id, true);
                return;
            }
        }
        match (cmd, known.is_some()) {
            (WorkerCmd::Ready, false) => {
                let service = rest.pop().unwrap_or_default();
                if service.starts_with(MMI_PREFIX) {
                    self.send_disconnect(id, version);
                    return;
                }
                if self.workers.len() >= self.cfg.max_workers {
                    self.stats.workers_refused += 1;
                    self.send_disconnect(id, version);
                    return;
                }
                // Who may serve is a grant of its own: a key allowed to call a service (or any listed key) must
                // not register as its worker and read its requests.
                let name = String::from_utf8_lossy(&service);
                if let tickbox_auth::Access::Refused { rule } =
                    self.cfg.security.grants().may_serve(user, &name)
                {
                    self.stats.workers_unauthorised += 1;
                    self.cfg.security.stats().record_worker_refused();
                    let name = name.into_owned();
                    self.log_unauthorised(now, &name, &rule, user);
                    self.send_disconnect(id, version);
                    return;
                }
                self.stats.workers_registered += 1;
                self.workers.insert(
                    id.clone(),
                    WorkerState {
                        service: service.clone(),
                        version,
                        clock: PeerClock::new(
                            self.cfg.interval(),
                            self.cfg.heartbeat_liveness,
                            now,
                        ),
                        busy: None,
                    },
                );
                let svc = self.services.entry(service.clone()).or_default();
                svc.workers += 1;
                svc.waiting.push_back(id);
                self.dispatch(now, &service);
            }
            (WorkerCmd::Disconnect, true) => self.delete_worker(&id, false),
            (WorkerCmd::Disconnect, false) => {}
            (WorkerCmd::Heartbeat, true) => {
                if let Some(w) = self.workers.get_mut(&id) {
                    w.clock.heard(now);
                }
            }
            (WorkerCmd::Final | WorkerCmd::Partial, true) => {
                let Some(w) = self.workers.get_mut(&id) else {
                    return;
                };
                w.clock.heard(now);
                let service = w.service.clone();
                let client = std::mem::take(&mut rest[0]);
                let client_version = match &w.busy {
                    Some(b) if b.client == client => b.client_version,
                    _ => Version::V01,
                };
                let body: Frames = rest.into_iter().skip(2).collect();
                let partial = cmd == WorkerCmd::Partial;
                if partial {
                    self.stats.partials += 1;
                    // 0.1 clients have no way to receive partial replies; they only get the final one.
                    if client_version == Version::V02 {
                        self.out.push_back(with_identity(
                            client,
                            client_reply(client_version, true, service, body),
                        ));
                    }
                    return;
                }
                self.stats.replies += 1;
                self.stats.service(&service).replied += 1;
                self.out.push_back(with_identity(
                    client,
                    client_reply(client_version, false, service.clone(), body),
                ));
                if w.busy.take().is_some() {
                    w.clock.sent(now);
                    self.services
                        .entry(service.clone())
                        .or_default()
                        .waiting
                        .push_back(id);
                    self.dispatch(now, &service);
                }
            }
            // Valid but unexpected: a second READY, HEARTBEAT or REPLY before READY, REQUEST from a worker.
            (_, registered) => {
                if registered {
                    self.delete_worker(&id, true);
                } else {
                    self.send_disconnect(id, version);
                }
            }
        }
    }

    fn send_disconnect(&mut self, id: Vec<u8>, version: Version) {
        self.stats.disconnects_sent += 1;
        self.out.push_back(with_identity(
            id,
            worker_msg(version, WorkerCmd::Disconnect, vec![]),
        ));
    }

    fn delete_worker(&mut self, id: &[u8], disconnect: bool) {
        let Some(w) = self.workers.remove(id) else {
            return;
        };
        if disconnect {
            self.send_disconnect(id.to_vec(), w.version);
        }
        if let Some(svc) = self.services.get_mut(&w.service) {
            svc.workers = svc.workers.saturating_sub(1);
            svc.waiting.retain(|x| x.as_slice() != id);
        }
    }

    fn dispatch(&mut self, now: Instant, service: &[u8]) {
        let Some(svc) = self.services.get_mut(service) else {
            return;
        };
        while !svc.requests.is_empty() {
            let Some(wid) = svc.waiting.pop_front() else {
                break;
            };
            let Some(w) = self.workers.get_mut(&wid) else {
                continue;
            };
            // The RFC's "SHOULD stop sending to that worker": a worker silent past its liveness is dead now, not
            // at the next purge tick.
            if w.clock.is_expired(now) {
                self.workers.remove(&wid);
                svc.workers = svc.workers.saturating_sub(1);
                self.stats.workers_expired += 1;
                self.stats.workers_expired_at_dispatch += 1;
                tracing::info!(
                    worker = %show_identity(&wid),
                    "worker expired (found at dispatch; the request goes to the next worker)"
                );
                continue;
            }
            let Some(req) = svc.requests.pop_front() else {
                break;
            };
            self.queued_bytes = self.queued_bytes.saturating_sub(req.cost);
            self.stats.queued_bytes = self.queued_bytes as u64;
            let mut rest = Vec::with_capacity(req.body.len() + 2);
            rest.push(req.client.clone());
            rest.push(Vec::new());
            rest.extend(req.body);
            w.busy = Some(Busy {
                client: req.client,
                client_version: req.version,
                since: now,
            });
            w.clock.sent(now);
            self.out.push_back(with_identity(
                wid,
                worker_msg(w.version, WorkerCmd::Request, rest),
            ));
        }
    }

    /// Time-driven work: heartbeat idle workers, forget silent ones, give up on stuck busy ones, expire
    /// requests nobody served. Cheap to call early; it only acts on what is due.
    pub fn handle_timeout(&mut self, now: Instant) {
        if now < self.next_tick {
            return;
        }
        self.next_tick = now + self.cfg.interval();
        let busy_timeout = self.cfg.busy_timeout.0;
        let mut dead = Vec::new();
        let mut stuck = Vec::new();
        for (id, w) in &mut self.workers {
            match &w.busy {
                None if w.clock.is_expired(now) => dead.push(id.clone()),
                None if w.clock.heartbeat_due(now) => {
                    w.clock.sent(now);
                    self.out.push_back(with_identity(
                        id.clone(),
                        worker_msg(w.version, WorkerCmd::Heartbeat, vec![]),
                    ));
                }
                Some(b) if b.since + busy_timeout <= now => stuck.push(id.clone()),
                _ => {}
            }
        }
        for id in dead {
            self.stats.workers_expired += 1;
            tracing::info!(worker = %show_identity(&id), "worker expired");
            self.delete_worker(&id, false);
        }
        for id in stuck {
            self.stats.workers_expired += 1;
            self.delete_worker(&id, true);
        }
        let mut expired = 0;
        let mut freed = 0;
        let mut notices = Vec::new();
        let mut expired_by_service = Vec::new();
        self.services.retain(|name, svc| {
            let before = svc.requests.len();
            svc.requests.retain(|r| {
                let keep = r.expires > now;
                if !keep {
                    freed += r.cost;
                    if r.client.starts_with(NOTICE_PREFIX) {
                        notices.push((r.client.clone(), r.version, name.clone()));
                    }
                }
                keep
            });
            let gone = (before - svc.requests.len()) as u64;
            if gone > 0 {
                expired_by_service.push((name.clone(), gone));
            }
            expired += gone;
            // `retain` keeps the ring's capacity: after a flood the empty slots would pin memory for good.
            if svc.requests.capacity() > 64 && svc.requests.len() < svc.requests.capacity() / 4 {
                svc.requests.shrink_to(svc.requests.len() * 2);
            }
            svc.workers > 0 || !svc.requests.is_empty()
        });
        self.queued_bytes = self.queued_bytes.saturating_sub(freed);
        self.stats.queued_bytes = self.queued_bytes as u64;
        self.stats.requests_expired += expired;
        for (service, n) in expired_by_service {
            self.stats.service(&service).expired += n;
        }
        self.expired_unlogged += expired;
        for (client, version, service) in notices {
            self.notify_undelivered(client, version, service, b"expired");
        }
        self.log_drops(now);
    }
}

/// Receives client requests before the broker sees them; returning `false` silently drops the request.
/// Binary Star uses this to let only the active broker serve.
pub trait RequestGate {
    /// Whether the client request arriving at `now` may be served; `false` drops it (the client retries).
    fn allow(&mut self, now: Instant) -> bool;
    /// Called every loop turn (at least once per poll timeout) to drive the gate's own sockets/timers.
    /// Returns `false` when the broker must stop (for instance a fatal split-brain).
    fn service(&mut self, _now: Instant) -> bool {
        true
    }
    /// The longest the loop may sleep before calling [`RequestGate::service`] again.
    fn poll_timeout(&self) -> Option<Instant> {
        None
    }
}

/// The gate of a stand-alone broker: every request is served.
pub struct OpenGate;
impl RequestGate for OpenGate {
    fn allow(&mut self, _now: Instant) -> bool {
        true
    }
}

#[cfg(test)]
// A test reads the clock once for an origin and moves simulated time on from there; the engine never reads it.
#[allow(clippy::disallowed_methods)]
mod tests {
    use super::*;
    use tickbox_reliable::ms;

    fn f(parts: &[&[u8]]) -> Frames {
        parts.iter().map(|p| p.to_vec()).collect()
    }

    fn cfg() -> BrokerConfig {
        BrokerConfig {
            heartbeat_interval: HumanDuration(Duration::from_millis(100)),
            heartbeat_liveness: 3,
            request_expiry: HumanDuration(Duration::from_millis(250)),
            busy_timeout: HumanDuration(Duration::from_millis(1000)),
            ..Default::default()
        }
    }

    fn drain(b: &mut Broker) -> Vec<Frames> {
        std::iter::from_fn(|| b.poll_output()).collect()
    }

    const DISC01: &[&[u8]] = &[b"", b"MDPW01", &[5]];

    fn with_id(id: &[u8], rest: &[&[u8]]) -> Frames {
        let mut v = vec![id.to_vec()];
        v.extend(rest.iter().map(|p| p.to_vec()));
        v
    }

    #[test]
    fn queues_until_worker_then_routes_reply_with_service_name() {
        let t = Instant::now();
        let mut b = Broker::new(cfg(), t);
        b.handle_input(t, f(&[b"C", b"", b"MDPC01", b"echo", b"a", b"b"]));
        assert!(drain(&mut b).is_empty());
        assert_eq!(b.queued_for(b"echo"), 1);
        b.handle_input(t, f(&[b"W", b"", b"MDPW01", &[1], b"echo"]));
        assert_eq!(
            drain(&mut b),
            vec![f(&[b"W", b"", b"MDPW01", &[2], b"C", b"", b"a", b"b"])]
        );
        b.handle_input(t, f(&[b"W", b"", b"MDPW01", &[3], b"C", b"", b"A", b"B"]));
        assert_eq!(
            drain(&mut b),
            vec![f(&[b"C", b"", b"MDPC01", b"echo", b"A", b"B"])]
        );
        assert_eq!(b.stats().replies, 1);
    }

    #[test]
    fn lru_dispatch_across_workers() {
        let t = Instant::now();
        let mut b = Broker::new(cfg(), t);
        for w in [b"W1", b"W2"] {
            b.handle_input(t, f(&[w, b"", b"MDPW01", &[1], b"s"]));
        }
        b.handle_input(t, f(&[b"C1", b"", b"MDPC01", b"s", b"x"]));
        b.handle_input(t, f(&[b"C2", b"", b"MDPC01", b"s", b"y"]));
        b.handle_input(t, f(&[b"C3", b"", b"MDPC01", b"s", b"z"]));
        let out = drain(&mut b);
        assert_eq!(out.len(), 2);
        assert_eq!(out[0][0], b"W1");
        assert_eq!(out[1][0], b"W2");
        b.handle_input(t, f(&[b"W2", b"", b"MDPW01", &[3], b"C2", b"", b"Y"]));
        let out = drain(&mut b);
        assert_eq!(
            out[1],
            f(&[b"W2", b"", b"MDPW01", &[2], b"C3", b"", b"z"]),
            "freed worker takes the next request"
        );
    }

    #[test]
    fn service_counts_are_bounded_by_name() {
        let mut stats = BrokerStats::default();
        for i in 0..MAX_SERVICE_COUNTS + 10 {
            stats.service(format!("svc{i}").as_bytes()).requests += 1;
        }
        assert_eq!(stats.by_service.len(), MAX_SERVICE_COUNTS + 1);
        assert_eq!(stats.by_service[OTHER_SERVICES].requests, 10);
        stats.service(b"svc0").requests += 1;
        assert_eq!(
            stats.by_service["svc0"].requests, 2,
            "a counted name stays counted"
        );
    }

    #[test]
    fn a_refused_request_is_answered_403_in_the_clients_revision_and_never_queued() {
        // Grants name keys, so they come with CURVE (keys are Z85 literals; no socket is involved here).
        const OPS: &str = "rq:rM>}U?@Lns47E1%kR.o@n%FcmmsL/@{H8]yf7";
        let security = tickbox_auth::Security::from_config(&tickbox_auth::SecurityConfig {
            mechanism: Some(tickbox_auth::MechanismName::Curve),
            services: [(
                "tickbox.replay.*".to_string(),
                tickbox_auth::ServiceGrant {
                    call: vec![OPS.to_string()],
                    serve: vec![],
                },
            )]
            .into_iter()
            .collect(),
            ..Default::default()
        })
        .unwrap();
        let t = Instant::now();
        let mut b = Broker::new(
            BrokerConfig {
                security: security.clone(),
                ..cfg()
            },
            t,
        );
        b.handle_input_from(
            t,
            f(&[b"C", b"", b"MDPC01", b"tickbox.replay.stop", b"x"]),
            Some("someone-else"),
        );
        assert_eq!(
            drain(&mut b),
            vec![f(&[
                b"C",
                b"",
                b"MDPC01",
                b"tickbox.replay.stop",
                b"403 unauthorised: tickbox.replay.stop"
            ])]
        );
        b.handle_input(
            t,
            f(&[b"D", b"MDPC02", &[1], b"tickbox.replay.start", b"x"]),
        );
        assert_eq!(
            drain(&mut b),
            vec![f(&[
                b"D",
                b"MDPC02",
                &[3],
                b"tickbox.replay.start",
                b"403 unauthorised: tickbox.replay.start"
            ])]
        );
        assert_eq!(b.queued_for(b"tickbox.replay.stop"), 0);
        // The granted key, and any service no rule names, are queued as before.
        b.handle_input_from(
            t,
            f(&[b"C", b"", b"MDPC01", b"tickbox.replay.stop", b"x"]),
            Some(OPS),
        );
        b.handle_input(t, f(&[b"C", b"", b"MDPC01", b"echo", b"x"]));
        assert!(drain(&mut b).is_empty());
        assert_eq!(b.queued_for(b"tickbox.replay.stop"), 1);
        assert_eq!(b.queued_for(b"echo"), 1);
        assert_eq!(b.stats().requests_unauthorised, 2);
        // Counted per service too, as 403s.
        let by = &b.stats().by_service;
        assert_eq!(by["tickbox.replay.stop"].unauthorised, 1);
        assert_eq!(by["tickbox.replay.start"].unauthorised, 1);
        assert_eq!(security.summary().unwrap().unauthorised_refused, 2);
    }

    #[test]
    fn mmi_service_and_unknown_mmi() {
        let t = Instant::now();
        let mut b = Broker::new(cfg(), t);
        b.handle_input(t, f(&[b"C", b"", b"MDPC01", b"mmi.service", b"echo"]));
        assert_eq!(
            drain(&mut b),
            vec![f(&[b"C", b"", b"MDPC01", b"mmi.service", b"404"])]
        );
        b.handle_input(t, f(&[b"W", b"", b"MDPW01", &[1], b"echo"]));
        b.handle_input(t, f(&[b"C", b"", b"MDPC01", b"mmi.service", b"echo"]));
        assert_eq!(
            drain(&mut b),
            vec![f(&[b"C", b"", b"MDPC01", b"mmi.service", b"200"])]
        );
        b.handle_input(t, f(&[b"C", b"", b"MDPC01", b"mmi.foo", b"x"]));
        assert_eq!(
            drain(&mut b),
            vec![f(&[b"C", b"", b"MDPC01", b"mmi.foo", b"501"])]
        );
        // A service that was merely requested is not "present" (ref-C semantics, not ref-Py's).
        b.handle_input(t, f(&[b"C", b"", b"MDPC01", b"ghost", b"x"]));
        b.handle_input(t, f(&[b"C", b"", b"MDPC01", b"mmi.service", b"ghost"]));
        assert_eq!(
            drain(&mut b),
            vec![f(&[b"C", b"", b"MDPC01", b"mmi.service", b"404"])]
        );
        b.handle_input(t, f(&[b"C", b"MDPC02", &[1], b"mmi.service", b"echo"]));
        assert_eq!(
            drain(&mut b),
            vec![f(&[b"C", b"MDPC02", &[3], b"mmi.service", b"200"])]
        );
    }

    #[test]
    fn protocol_violations_get_disconnect() {
        let t = Instant::now();
        let mut b = Broker::new(cfg(), t);
        b.handle_input(t, f(&[b"W", b"", b"MDPW01", &[4]]));
        assert_eq!(
            drain(&mut b),
            vec![with_id(b"W", DISC01)],
            "HEARTBEAT before READY"
        );
        b.handle_input(t, f(&[b"W", b"", b"MDPW01", &[3], b"C", b"", b"r"]));
        assert_eq!(
            drain(&mut b),
            vec![with_id(b"W", DISC01)],
            "REPLY from unknown worker"
        );
        b.handle_input(t, f(&[b"M", b"", b"MDPW01", &[1], b"mmi.service"]));
        assert_eq!(
            drain(&mut b),
            vec![with_id(b"M", DISC01)],
            "READY for mmi.*"
        );
        assert_eq!(b.workers_for(b"mmi.service"), 0);
        b.handle_input(t, f(&[b"W", b"", b"MDPW01", &[1], b"echo"]));
        b.handle_input(t, f(&[b"W", b"", b"MDPW01", &[1], b"echo"]));
        assert_eq!(drain(&mut b), vec![with_id(b"W", DISC01)], "second READY");
        assert_eq!(b.workers_for(b"echo"), 0, "and the worker is forgotten");
        b.handle_input(t, f(&[b"X", b"MDPW02", &[5]]));
        assert_eq!(
            drain(&mut b),
            vec![f(&[b"X", b"MDPW02", &[6]])],
            "0.2 violation answered in 0.2"
        );
        // Nothing is ever sent to a worker after it DISCONNECTs.
        b.handle_input(t, f(&[b"Y", b"", b"MDPW01", &[1], b"echo"]));
        b.handle_input(t, f(&[b"Y", b"", b"MDPW01", &[5]]));
        b.handle_input(t, f(&[b"C", b"", b"MDPC01", b"echo", b"x"]));
        b.handle_timeout(t + ms(100));
        assert!(drain(&mut b).is_empty());
        assert_eq!(b.stats().disconnects_sent, 5);
    }

    #[test]
    fn malformed_is_counted_never_fatal() {
        let t = Instant::now();
        let mut b = Broker::new(cfg(), t);
        b.handle_input(t, f(&[b"W", b"", b"MDPW01", &[1], b"echo"]));
        let junk: Vec<Frames> = vec![
            vec![],
            f(&[b"X"]),
            f(&[b"X", b""]),
            f(&[b"X", b"", b"MDPC01"]),
            f(&[b"X", b"", b"MDPC01", b"svc"]),
            f(&[b"X", b"", b"NOPE", b"svc", b"x"]),
            f(&[b"X", b"", b"MDPW01"]),
            f(&[b"X", b"", b"MDPW01", &[]]),
            f(&[b"X", b"", b"MDPW01", &[0x42]]),
            f(&[b"X", b"MDPC02", &[9], b"svc", b"x"]),
            f(&[b"W", b"", b"MDPW01", &[3], b"C", b"notempty", b"r"]),
        ];
        let n = junk.len() as u64;
        for j in junk {
            b.handle_input(t, j);
        }
        assert_eq!(b.stats().malformed, n);
        assert_eq!(
            b.workers_for(b"echo"),
            0,
            "a worker sending garbage is dropped"
        );
    }

    #[test]
    fn heartbeats_idle_workers_and_expires_silent_ones() {
        let t = Instant::now();
        let mut b = Broker::new(cfg(), t);
        b.handle_input(t, f(&[b"A", b"", b"MDPW01", &[1], b"s"]));
        b.handle_input(t, f(&[b"B", b"", b"MDPW01", &[1], b"s"]));
        b.handle_timeout(t + ms(100));
        let mut out = drain(&mut b);
        out.sort();
        assert_eq!(
            out,
            vec![
                f(&[b"A", b"", b"MDPW01", &[4]]),
                f(&[b"B", b"", b"MDPW01", &[4]])
            ]
        );
        b.handle_input(t + ms(250), f(&[b"B", b"", b"MDPW01", &[4]]));
        b.handle_timeout(t + ms(300));
        drain(&mut b);
        assert_eq!(
            b.workers_for(b"s"),
            1,
            "A expired after liveness x interval, B alive"
        );
        assert_eq!(b.stats().workers_expired, 1);
        b.handle_input(t + ms(300), f(&[b"C", b"", b"MDPC01", b"s", b"x"]));
        assert_eq!(drain(&mut b)[0][0], b"B");
    }

    #[test]
    fn busy_workers_are_not_heartbeated_but_bounded() {
        let t = Instant::now();
        let mut b = Broker::new(cfg(), t);
        b.handle_input(t, f(&[b"A", b"", b"MDPW01", &[1], b"s"]));
        b.handle_input(t, f(&[b"C", b"", b"MDPC01", b"s", b"x"]));
        drain(&mut b);
        for i in 1..10 {
            b.handle_timeout(t + ms(100 * i));
        }
        assert!(drain(&mut b).is_empty());
        assert_eq!(b.workers_for(b"s"), 1);
        b.handle_timeout(t + ms(1000));
        assert_eq!(drain(&mut b), vec![with_id(b"A", DISC01)]);
        assert_eq!(b.workers_for(b"s"), 0);
    }

    #[test]
    fn requests_for_absent_services_expire() {
        let t = Instant::now();
        let mut b = Broker::new(cfg(), t);
        b.handle_input(t, f(&[b"C", b"", b"MDPC01", b"nobody", b"x"]));
        b.handle_timeout(t + ms(200));
        assert_eq!(b.queued_for(b"nobody"), 1);
        b.handle_timeout(t + ms(300));
        assert_eq!(b.queued_for(b"nobody"), 0);
        assert_eq!(b.stats().requests_expired, 1);
        b.handle_input(t + ms(300), f(&[b"W", b"", b"MDPW01", &[1], b"nobody"]));
        assert!(
            drain(&mut b).is_empty(),
            "expired request is never delivered"
        );
    }

    #[test]
    fn v02_partials_and_version_mixing() {
        let t = Instant::now();
        let mut b = Broker::new(cfg(), t);
        b.handle_input(t, f(&[b"W2", b"MDPW02", &[1], b"s"]));
        b.handle_input(t, f(&[b"C2", b"MDPC02", &[1], b"s", b"q"]));
        assert_eq!(
            drain(&mut b),
            vec![f(&[b"W2", b"MDPW02", &[2], b"C2", b"", b"q"])]
        );
        b.handle_input(t, f(&[b"W2", b"MDPW02", &[3], b"C2", b"", b"p1"]));
        b.handle_input(t, f(&[b"W2", b"MDPW02", &[4], b"C2", b"", b"fin"]));
        assert_eq!(
            drain(&mut b),
            vec![
                f(&[b"C2", b"MDPC02", &[2], b"s", b"p1"]),
                f(&[b"C2", b"MDPC02", &[3], b"s", b"fin"])
            ]
        );
        // A 0.1 client served by a 0.2 worker sees only the final reply, as a 0.1 REPLY.
        b.handle_input(t, f(&[b"C1", b"", b"MDPC01", b"s", b"q"]));
        assert_eq!(
            drain(&mut b),
            vec![f(&[b"W2", b"MDPW02", &[2], b"C1", b"", b"q"])]
        );
        b.handle_input(t, f(&[b"W2", b"MDPW02", &[3], b"C1", b"", b"p1"]));
        b.handle_input(t, f(&[b"W2", b"MDPW02", &[4], b"C1", b"", b"fin"]));
        assert_eq!(
            drain(&mut b),
            vec![f(&[b"C1", b"", b"MDPC01", b"s", b"fin"])]
        );
        // A 0.2 client served by a 0.1 worker gets a FINAL.
        b.handle_input(t, f(&[b"W1", b"", b"MDPW01", &[1], b"t"]));
        b.handle_input(t, f(&[b"C2", b"MDPC02", &[1], b"t", b"q"]));
        drain(&mut b);
        b.handle_input(t, f(&[b"W1", b"", b"MDPW01", &[3], b"C2", b"", b"r"]));
        assert_eq!(
            drain(&mut b),
            vec![f(&[b"C2", b"MDPC02", &[3], b"t", b"r"])]
        );
        // Switching revision mid-conversation is a violation.
        b.handle_input(t, f(&[b"W1", b"MDPW02", &[5]]));
        assert_eq!(drain(&mut b), vec![with_id(b"W1", DISC01)]);
    }

    #[test]
    fn queues_are_bounded_in_count_and_bytes_and_expiry_frees_them() {
        let t = Instant::now();
        let mut b = Broker::new(
            BrokerConfig {
                max_queued_per_service: 3,
                max_queued_bytes: ByteSize(4096),
                ..cfg()
            },
            t,
        );
        for _ in 0..5 {
            b.handle_input(t, f(&[b"C", b"", b"MDPC01", b"a", b"x"]));
        }
        assert_eq!(b.queued_for(b"a"), 3, "count bound per service");
        assert_eq!(b.stats().requests_refused, 2);
        let big = vec![7u8; 3000];
        b.handle_input(t, f(&[b"C", b"", b"MDPC01", b"b", &big]));
        assert_eq!(b.queued_for(b"b"), 1);
        b.handle_input(t, f(&[b"C", b"", b"MDPC01", b"c", &big]));
        assert_eq!(b.queued_for(b"c"), 0, "byte bound across services");
        assert_eq!(b.stats().requests_refused, 3);
        assert!(b.stats().queued_bytes <= 4096);
        assert_eq!(b.stats().queued_bytes, b.stats().queued_bytes_peak);
        // An idle worker takes a request even when the queues are full: bounds only limit waiting.
        b.handle_input(t, f(&[b"W", b"", b"MDPW01", &[1], b"d"]));
        b.handle_input(t, f(&[b"C", b"", b"MDPC01", b"d", &big]));
        assert_eq!(drain(&mut b).len(), 1);
        assert_eq!(b.stats().requests_refused, 3);
        b.handle_timeout(t + ms(300));
        assert_eq!(b.stats().requests_expired, 4);
        assert_eq!(b.stats().queued_bytes, 0, "expiry releases the charge");
        b.handle_input(t + ms(300), f(&[b"C", b"", b"MDPC01", b"c", &big]));
        assert_eq!(b.queued_for(b"c"), 1, "room again after expiry");
    }

    #[test]
    fn dispatch_releases_the_charge_and_worker_count_is_bounded() {
        let t = Instant::now();
        let mut b = Broker::new(
            BrokerConfig {
                max_workers: 1,
                ..cfg()
            },
            t,
        );
        b.handle_input(t, f(&[b"C", b"", b"MDPC01", b"s", b"x"]));
        assert!(b.stats().queued_bytes > 0);
        b.handle_input(t, f(&[b"W", b"", b"MDPW01", &[1], b"s"]));
        assert_eq!(b.stats().queued_bytes, 0);
        b.handle_input(t, f(&[b"V", b"", b"MDPW01", &[1], b"s"]));
        let out = drain(&mut b);
        assert_eq!(out.last().unwrap(), &with_id(b"V", DISC01));
        assert_eq!(b.stats().workers_refused, 1);
        assert_eq!(b.workers_for(b"s"), 1);
    }

    #[test]
    fn dispatch_skips_a_worker_expired_before_the_purge_tick() {
        let t = Instant::now();
        let mut b = Broker::new(cfg(), t);
        // A is first in LRU order, then goes silent; B keeps heartbeating.
        b.handle_input(t, f(&[b"A", b"", b"MDPW01", &[1], b"s"]));
        b.handle_input(t, f(&[b"B", b"", b"MDPW01", &[1], b"s"]));
        b.handle_input(t + ms(250), f(&[b"B", b"", b"MDPW01", &[4]]));
        // A expires at t+300 (3 x 100 ms); no purge tick runs before this request.
        b.handle_input(t + ms(310), f(&[b"C", b"", b"MDPC01", b"s", b"x"]));
        assert_eq!(
            drain(&mut b),
            vec![f(&[b"B", b"", b"MDPW01", &[2], b"C", b"", b"x"])],
            "the request goes to the live worker, never to the expired one"
        );
        assert_eq!(b.stats().workers_expired, 1);
        assert_eq!(b.stats().workers_expired_at_dispatch, 1);
        assert_eq!(b.workers_for(b"s"), 1);
    }

    #[test]
    fn a_request_the_socket_could_not_route_goes_to_the_next_worker() {
        let t = Instant::now();
        let mut b = Broker::new(cfg(), t);
        b.handle_input(t, f(&[b"A", b"", b"MDPW01", &[1], b"s"]));
        b.handle_input(t, f(&[b"B", b"MDPW02", &[1], b"s"]));
        b.handle_input(t, f(&[b"C", b"MDPC02", &[1], b"s", b"x", b"y"]));
        let out = drain(&mut b);
        assert_eq!(
            out,
            vec![f(&[b"A", b"", b"MDPW01", &[2], b"C", b"", b"x", b"y"])]
        );
        // A's connection is gone: the ROUTER refuses the message before sending any of it.
        b.handle_undeliverable(t, out.into_iter().next().unwrap());
        assert_eq!(
            drain(&mut b),
            vec![f(&[b"B", b"MDPW02", &[2], b"C", b"", b"x", b"y"])],
            "same request, next worker"
        );
        assert_eq!(b.stats().requests_requeued, 1);
        assert_eq!(b.workers_for(b"s"), 1);
        assert_eq!(b.stats().queued_bytes, 0);
        // B's reply still reaches the 0.2 client as a FINAL.
        b.handle_input(t, f(&[b"B", b"MDPW02", &[4], b"C", b"", b"r"]));
        assert_eq!(drain(&mut b), vec![f(&[b"C", b"MDPC02", &[3], b"s", b"r"])]);
        // A reply for a client that left is counted and dropped.
        b.handle_undeliverable(t, f(&[b"C", b"MDPC02", &[3], b"s", b"r"]));
        assert_eq!(b.stats().unroutable, 1);
        assert!(drain(&mut b).is_empty());
    }

    #[test]
    fn titanic_identities_are_told_of_refused_and_expired_requests() {
        let t = Instant::now();
        let mut b = Broker::new(
            BrokerConfig {
                max_queued_per_service: 1,
                ..cfg()
            },
            t,
        );
        let tsp1: &[u8] = b"TSP:0123456789ABCDEF0123456789ABCDEF:1";
        let tsp2: &[u8] = b"TSP:0123456789ABCDEF0123456789ABCDEF:2";
        b.handle_input(t, f(&[tsp1, b"", b"MDPC01", b"s", b"x"]));
        b.handle_input(t, f(&[tsp2, b"", b"MDPC01", b"s", b"x"]));
        b.handle_input(t, f(&[b"plain", b"", b"MDPC01", b"s", b"x"]));
        assert_eq!(
            drain(&mut b),
            vec![f(&[tsp2, b"", b"MDPC01", UNDELIVERED, b"s", b"refused"])],
            "only the opted-in client is told; a plain MDP client times out as the RFC says"
        );
        assert_eq!(b.stats().requests_refused, 2);
        b.handle_timeout(t + ms(300));
        assert_eq!(
            drain(&mut b),
            vec![f(&[tsp1, b"", b"MDPC01", UNDELIVERED, b"s", b"expired"])]
        );
        assert_eq!(b.stats().undelivered_notices, 2);
        assert_eq!(b.stats().requests_expired, 1);
    }

    #[test]
    fn identities_print_as_text_or_hex() {
        assert_eq!(show_identity(b"worker-1"), "worker-1");
        assert_eq!(show_identity(&[0, 0x6b, 0x8b, 0x45, 0x68]), "0x006b8b4568");
        assert_eq!(show_identity(b""), "0x");
    }
}
