//! Pirate patterns: the Lazy Pirate client (poll with timeout, close/reopen, resend, give up after N tries) and
//! the Paranoid Pirate queue and worker (6/PPP: READY/HEARTBEAT, liveness, exponential reconnect back-off).
//!
//! The timing rules live in two small sans-IO pieces shared with Majordomo: [`Backoff`] and [`Liveness`].
//! [`PppQueue`] and [`PppWorkerEngine`] are sans-IO engines; [`run_ppp_queue`], [`PppWorker`] and
//! [`LazyPirate`] are the socket layers.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

/// One multipart message, one `Vec<u8>` per frame.
pub type Frames = Vec<Vec<u8>>;

/// 6/PPP READY: exactly one frame holding this one byte.
pub const PPP_READY: u8 = 0x01;
/// 6/PPP HEARTBEAT: exactly one frame holding this one byte.
pub const PPP_HEARTBEAT: u8 = 0x02;

#[derive(Debug, thiserror::Error)]
pub enum PirateError {
    #[error("zmq: {0}")]
    Zmq(#[from] zmq::Error),
    #[error("no reply after {0} attempt(s); giving up")]
    Exhausted(u32),
    #[error("a request needs at least one frame")]
    EmptyRequest,
    #[error("interrupted by the stop flag")]
    Interrupted,
}

fn ms(v: u64) -> Duration {
    Duration::from_millis(v)
}

/// Exponential back-off: `initial`, doubling on every use up to `max`, back to `initial` after `reset`.
#[derive(Clone, Debug)]
pub struct Backoff {
    initial: Duration,
    max: Duration,
    current: Duration,
}

impl Backoff {
    pub fn new(initial: Duration, max: Duration) -> Self {
        Self {
            initial,
            max: max.max(initial),
            current: initial,
        }
    }

    /// The delay to wait now; the next one is twice as long (capped).
    pub fn next_delay(&mut self) -> Duration {
        let d = self.current;
        self.current = (self.current * 2).min(self.max);
        d
    }

    pub fn reset(&mut self) {
        self.current = self.initial;
    }
}

/// What [`Liveness::poll`] says is due.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LivenessEvent {
    Idle,
    SendHeartbeat,
    /// The peer has been silent for `liveness` intervals: drop the connection and reconnect after the delay.
    PeerDead {
        reconnect_after: Duration,
    },
}

/// Heartbeat bookkeeping for one conversation: when to send the next heartbeat and when the peer is presumed
/// dead. Sending real traffic postpones our heartbeat; hearing anything from the peer proves it alive.
#[derive(Clone, Debug)]
pub struct Liveness {
    interval: Duration,
    liveness: u32,
    expiry: Instant,
    next_heartbeat: Instant,
    backoff: Backoff,
}

impl Liveness {
    pub fn new(
        interval: Duration,
        liveness: u32,
        reconnect: Duration,
        reconnect_max: Duration,
        now: Instant,
    ) -> Self {
        let interval = interval.max(Duration::from_millis(1));
        Self {
            interval,
            liveness: liveness.max(1),
            expiry: now + interval * liveness.max(1),
            next_heartbeat: now + interval,
            backoff: Backoff::new(reconnect, reconnect_max),
        }
    }

    /// A new conversation starts: the peer gets a full `liveness` allowance again (back-off is kept).
    pub fn restart(&mut self, now: Instant) {
        self.expiry = now + self.interval * self.liveness;
        self.next_heartbeat = now + self.interval;
    }

    /// Anything arrived from the peer.
    pub fn heard(&mut self, now: Instant) {
        self.expiry = now + self.interval * self.liveness;
        self.backoff.reset();
    }

    /// We sent something that the peer will take as proof of life.
    pub fn sent(&mut self, now: Instant) {
        self.next_heartbeat = now + self.interval;
    }

    /// What is due at `now`. Reports `PeerDead` once per silent period (the caller restarts the conversation).
    pub fn poll(&mut self, now: Instant) -> LivenessEvent {
        if now >= self.expiry {
            // Park the timers until the caller calls `restart`.
            self.expiry = now + Duration::from_secs(86_400 * 365);
            self.next_heartbeat = self.expiry;
            return LivenessEvent::PeerDead {
                reconnect_after: self.backoff.next_delay(),
            };
        }
        if now >= self.next_heartbeat {
            self.next_heartbeat = now + self.interval;
            return LivenessEvent::SendHeartbeat;
        }
        LivenessEvent::Idle
    }

    pub fn next_deadline(&self) -> Instant {
        self.expiry.min(self.next_heartbeat)
    }
}

// ------------------------------------------------------------------------------------------------------------
// Lazy Pirate client

/// Lazy Pirate settings (reference: 2500 ms, 3 attempts).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LazyPirateConfig {
    pub timeout_ms: u64,
    pub attempts: u32,
}

impl Default for LazyPirateConfig {
    fn default() -> Self {
        Self {
            timeout_ms: 2500,
            attempts: 3,
        }
    }
}

/// A REQ client that survives a dead or restarted server: on timeout it closes the socket (linger 0, so the
/// stale request is discarded), opens a new one and resends, up to `attempts` times.
pub struct LazyPirate {
    ctx: zmq::Context,
    endpoint: String,
    cfg: LazyPirateConfig,
    socket: Option<zmq::Socket>,
    /// Number of times the socket was recreated after a timeout.
    pub resends: u64,
}

impl LazyPirate {
    pub fn new(ctx: &zmq::Context, endpoint: &str, cfg: LazyPirateConfig) -> Self {
        Self {
            ctx: ctx.clone(),
            endpoint: endpoint.to_string(),
            cfg,
            socket: None,
            resends: 0,
        }
    }

    fn socket(&mut self) -> Result<&zmq::Socket, PirateError> {
        if self.socket.is_none() {
            let s = self.ctx.socket(zmq::REQ)?;
            s.set_linger(0)?;
            s.connect(&self.endpoint)?;
            self.socket = Some(s);
        }
        Ok(self.socket.as_ref().expect("socket just created"))
    }

    /// Send `request` and wait for its reply, retrying as configured.
    pub fn request(&mut self, request: &[Vec<u8>]) -> Result<Frames, PirateError> {
        self.request_until(request, None)
    }

    /// Like [`LazyPirate::request`], abandoning early (with `Interrupted`) when `stop` is set.
    pub fn request_until(
        &mut self,
        request: &[Vec<u8>],
        stop: Option<&AtomicBool>,
    ) -> Result<Frames, PirateError> {
        if request.is_empty() {
            return Err(PirateError::EmptyRequest);
        }
        let attempts = self.cfg.attempts.max(1);
        for attempt in 1..=attempts {
            let timeout = ms(self.cfg.timeout_ms);
            let s = self.socket()?;
            s.send_multipart(request.iter(), 0)?;
            let end = Instant::now() + timeout;
            loop {
                let left = end.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    break;
                }
                let s = self.socket.as_ref().expect("socket open");
                if s.poll(zmq::POLLIN, left.min(ms(100)).as_millis() as i64)? > 0 {
                    return Ok(s.recv_multipart(0)?);
                }
                if stop.is_some_and(|f| f.load(Ordering::Relaxed)) {
                    self.socket = None;
                    return Err(PirateError::Interrupted);
                }
            }
            // REQ is now stuck in "expecting reply": the only way out is a new socket.
            self.socket = None;
            if attempt < attempts {
                self.resends += 1;
                tracing::debug!(attempt, endpoint = %self.endpoint, "no reply, reconnecting and resending");
            }
        }
        Err(PirateError::Exhausted(attempts))
    }
}

// ------------------------------------------------------------------------------------------------------------
// Paranoid Pirate (6/PPP)

/// 6/PPP timing (reference: 1000 ms interval, liveness 3, back-off 1000 → 32000 ms).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PppConfig {
    pub heartbeat_interval_ms: u64,
    pub heartbeat_liveness: u32,
    pub reconnect_ms: u64,
    pub reconnect_max_ms: u64,
    /// Client requests held while no worker is free; beyond this they are dropped (clients retry).
    pub max_queued: usize,
}

impl Default for PppConfig {
    fn default() -> Self {
        Self {
            heartbeat_interval_ms: 1000,
            heartbeat_liveness: 3,
            reconnect_ms: 1000,
            reconnect_max_ms: 32_000,
            max_queued: 10_000,
        }
    }
}

/// Where a queue output goes.
#[derive(Debug, PartialEq, Eq)]
pub enum QueueOut {
    Frontend(Frames),
    Backend(Frames),
}

struct PppWorkerState {
    expiry: Instant,
    next_heartbeat: Instant,
    busy: bool,
}

/// Counters of the Paranoid Pirate queue.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PppQueueStats {
    pub requests: u64,
    pub replies: u64,
    pub malformed: u64,
    pub dropped: u64,
    pub workers_expired: u64,
}

/// Sans-IO Paranoid Pirate queue. Unlike the Guide's queue, a HEARTBEAT from a busy worker only proves it
/// alive; it does not make the worker eligible for a second request.
pub struct PppQueue {
    cfg: PppConfig,
    workers: HashMap<Vec<u8>, PppWorkerState>,
    idle: VecDeque<Vec<u8>>,
    requests: VecDeque<Frames>,
    out: VecDeque<QueueOut>,
    next_tick: Instant,
    stats: PppQueueStats,
}

impl PppQueue {
    pub fn new(cfg: PppConfig, now: Instant) -> Self {
        let next_tick = now + ms(cfg.heartbeat_interval_ms.max(1));
        Self {
            cfg,
            workers: HashMap::new(),
            idle: VecDeque::new(),
            requests: VecDeque::new(),
            out: VecDeque::new(),
            next_tick,
            stats: PppQueueStats::default(),
        }
    }

    fn interval(&self) -> Duration {
        ms(self.cfg.heartbeat_interval_ms.max(1))
    }

    pub fn stats(&self) -> &PppQueueStats {
        &self.stats
    }

    pub fn idle_workers(&self) -> usize {
        self.idle.len()
    }

    pub fn poll_transmit(&mut self) -> Option<QueueOut> {
        self.out.pop_front()
    }

    pub fn next_deadline(&self) -> Instant {
        self.next_tick
    }

    /// A client message from the front-end ROUTER: `[client-id]…[""][body…]`, forwarded whole to a worker.
    pub fn on_frontend(&mut self, now: Instant, frames: Frames) {
        if frames.len() < 2 {
            self.stats.malformed += 1;
            return;
        }
        self.stats.requests += 1;
        if self.requests.len() >= self.cfg.max_queued {
            self.stats.dropped += 1;
            return;
        }
        self.requests.push_back(frames);
        self.dispatch(now);
    }

    /// A worker message from the back-end ROUTER: `[worker-id][0x01]`, `[worker-id][0x02]` or a reply.
    pub fn on_backend(&mut self, now: Instant, mut frames: Frames) {
        if frames.len() < 2 {
            self.stats.malformed += 1;
            return;
        }
        let id = frames.remove(0);
        let expiry = now + self.interval() * self.cfg.heartbeat_liveness.max(1);
        if frames.len() == 1 {
            match frames[0].as_slice() {
                [PPP_READY] => {
                    // A READY always starts a fresh conversation for that identity.
                    self.idle.retain(|x| *x != id);
                    let next_heartbeat = now + self.interval();
                    self.workers.insert(
                        id.clone(),
                        PppWorkerState {
                            expiry,
                            next_heartbeat,
                            busy: false,
                        },
                    );
                    self.idle.push_back(id);
                    self.dispatch(now);
                }
                [PPP_HEARTBEAT] => {
                    if let Some(w) = self.workers.get_mut(&id) {
                        w.expiry = expiry;
                    }
                }
                _ => self.stats.malformed += 1,
            }
            return;
        }
        let interval = self.interval();
        let Some(w) = self.workers.get_mut(&id) else {
            // A reply from a worker we expired: still deliver it, the client may be waiting for exactly this.
            self.stats.replies += 1;
            self.out.push_back(QueueOut::Frontend(frames));
            return;
        };
        w.expiry = expiry;
        self.stats.replies += 1;
        self.out.push_back(QueueOut::Frontend(frames));
        if w.busy {
            w.busy = false;
            w.next_heartbeat = now + interval;
            self.idle.push_back(id);
            self.dispatch(now);
        }
    }

    fn dispatch(&mut self, now: Instant) {
        while !self.requests.is_empty() {
            let Some(id) = self.idle.pop_front() else {
                break;
            };
            let interval = self.interval();
            let Some(w) = self.workers.get_mut(&id) else {
                continue;
            };
            let Some(mut req) = self.requests.pop_front() else {
                break;
            };
            w.busy = true;
            w.next_heartbeat = now + interval;
            req.insert(0, id);
            self.out.push_back(QueueOut::Backend(req));
        }
    }

    /// Heartbeat idle workers; forget idle workers that went silent.
    pub fn tick(&mut self, now: Instant) {
        if now < self.next_tick {
            return;
        }
        let interval = self.interval();
        self.next_tick = now + interval;
        let mut dead = Vec::new();
        for id in &self.idle {
            let Some(w) = self.workers.get_mut(id) else {
                continue;
            };
            if w.expiry <= now {
                dead.push(id.clone());
            } else if w.next_heartbeat <= now {
                w.next_heartbeat = now + interval;
                self.out
                    .push_back(QueueOut::Backend(vec![id.clone(), vec![PPP_HEARTBEAT]]));
            }
        }
        for id in dead {
            self.stats.workers_expired += 1;
            self.workers.remove(&id);
            self.idle.retain(|x| *x != id);
        }
    }
}

/// Run a Paranoid Pirate queue: front-end ROUTER for clients, back-end ROUTER for workers, until `stop`.
/// `bound` receives the resolved `(frontend, backend)` endpoints.
pub fn run_ppp_queue(
    ctx: &zmq::Context,
    frontend: &str,
    backend: &str,
    cfg: PppConfig,
    stop: &AtomicBool,
    bound: Option<std::sync::mpsc::Sender<(String, String)>>,
) -> Result<PppQueueStats, PirateError> {
    let fe = ctx.socket(zmq::ROUTER)?;
    let be = ctx.socket(zmq::ROUTER)?;
    for s in [&fe, &be] {
        s.set_linger(100)?;
    }
    fe.bind(frontend)?;
    be.bind(backend)?;
    if let Some(tx) = bound {
        let f = fe.get_last_endpoint()?.unwrap_or_default();
        let b = be.get_last_endpoint()?.unwrap_or_default();
        let _ = tx.send((f, b));
    }
    let mut q = PppQueue::new(cfg, Instant::now());
    while !stop.load(Ordering::Relaxed) {
        let now = Instant::now();
        let timeout = q
            .next_deadline()
            .saturating_duration_since(now)
            .min(ms(100))
            .as_millis() as i64;
        let mut items = [fe.as_poll_item(zmq::POLLIN), be.as_poll_item(zmq::POLLIN)];
        zmq::poll(&mut items, timeout)?;
        let (fe_ready, be_ready) = (items[0].is_readable(), items[1].is_readable());
        if be_ready {
            while let Ok(frames) = be.recv_multipart(zmq::DONTWAIT) {
                q.on_backend(Instant::now(), frames);
            }
        }
        if fe_ready {
            while let Ok(frames) = fe.recv_multipart(zmq::DONTWAIT) {
                q.on_frontend(Instant::now(), frames);
            }
        }
        q.tick(Instant::now());
        while let Some(out) = q.poll_transmit() {
            match out {
                QueueOut::Frontend(f) => fe.send_multipart(f, 0)?,
                QueueOut::Backend(f) => be.send_multipart(f, 0)?,
            }
        }
    }
    Ok(q.stats().clone())
}

/// What the Paranoid Pirate worker engine wants done.
#[derive(Debug, PartialEq, Eq)]
pub enum PppWorkerAction {
    Send(Frames),
    Reconnect {
        after: Duration,
    },
    /// A request: reply with exactly this envelope (everything up to and including the empty frame) followed
    /// by the reply body.
    Deliver {
        envelope: Frames,
        body: Frames,
    },
}

/// Sans-IO Paranoid Pirate worker: READY on every new connection, heartbeats, queue liveness, back-off.
pub struct PppWorkerEngine {
    live: Liveness,
    connected: bool,
    out: VecDeque<PppWorkerAction>,
    pub malformed: u64,
    pub reconnects: u64,
}

impl PppWorkerEngine {
    pub fn new(cfg: &PppConfig, now: Instant) -> Self {
        Self {
            live: Liveness::new(
                ms(cfg.heartbeat_interval_ms),
                cfg.heartbeat_liveness,
                ms(cfg.reconnect_ms.max(1)),
                ms(cfg.reconnect_max_ms.max(1)),
                now,
            ),
            connected: false,
            out: VecDeque::new(),
            malformed: 0,
            reconnects: 0,
        }
    }

    pub fn connected(&mut self, now: Instant) {
        self.connected = true;
        self.live.restart(now);
        self.live.sent(now);
        self.out
            .push_back(PppWorkerAction::Send(vec![vec![PPP_READY]]));
    }

    pub fn on_message(&mut self, now: Instant, mut frames: Frames) {
        if !self.connected {
            return;
        }
        if frames.len() == 1 {
            if frames[0].as_slice() == [PPP_HEARTBEAT] {
                self.live.heard(now);
            } else {
                self.malformed += 1;
            }
            return;
        }
        let Some(delim) = frames.iter().position(Vec::is_empty) else {
            self.malformed += 1;
            return;
        };
        if delim + 1 >= frames.len() {
            self.malformed += 1;
            return;
        }
        self.live.heard(now);
        let body = frames.split_off(delim + 1);
        self.out.push_back(PppWorkerAction::Deliver {
            envelope: frames,
            body,
        });
    }

    /// Frames of the reply to a request with `envelope`.
    pub fn reply(&mut self, now: Instant, mut envelope: Frames, body: Frames) -> Frames {
        self.live.sent(now);
        envelope.extend(body);
        envelope
    }

    pub fn tick(&mut self, now: Instant) {
        if !self.connected {
            return;
        }
        match self.live.poll(now) {
            LivenessEvent::Idle => {}
            LivenessEvent::SendHeartbeat => self
                .out
                .push_back(PppWorkerAction::Send(vec![vec![PPP_HEARTBEAT]])),
            LivenessEvent::PeerDead { reconnect_after } => {
                self.connected = false;
                self.reconnects += 1;
                self.out.push_back(PppWorkerAction::Reconnect {
                    after: reconnect_after,
                });
            }
        }
    }

    pub fn next_deadline(&self) -> Instant {
        self.live.next_deadline()
    }

    pub fn poll_action(&mut self) -> Option<PppWorkerAction> {
        self.out.pop_front()
    }
}

/// A Paranoid Pirate worker over a DEALER; a new socket (new identity) on every reconnect.
pub struct PppWorker {
    ctx: zmq::Context,
    endpoint: String,
    socket: Option<zmq::Socket>,
    engine: PppWorkerEngine,
    reconnect_at: Option<Instant>,
}

impl PppWorker {
    pub fn connect(
        ctx: &zmq::Context,
        endpoint: &str,
        cfg: PppConfig,
    ) -> Result<Self, PirateError> {
        let now = Instant::now();
        let mut w = Self {
            ctx: ctx.clone(),
            endpoint: endpoint.to_string(),
            socket: None,
            engine: PppWorkerEngine::new(&cfg, now),
            reconnect_at: Some(now),
        };
        w.step(now, None)?;
        Ok(w)
    }

    pub fn reconnects(&self) -> u64 {
        self.engine.reconnects
    }

    fn step(
        &mut self,
        now: Instant,
        deliver: Option<&mut VecDeque<(Frames, Frames)>>,
    ) -> Result<(), PirateError> {
        if self.reconnect_at.is_some_and(|at| at <= now) {
            self.reconnect_at = None;
            let s = self.ctx.socket(zmq::DEALER)?;
            s.set_linger(0)?;
            s.connect(&self.endpoint)?;
            self.socket = Some(s);
            self.engine.connected(now);
        }
        let mut sink = deliver;
        while let Some(a) = self.engine.poll_action() {
            match a {
                PppWorkerAction::Send(f) => {
                    if let Some(s) = &self.socket {
                        s.send_multipart(f, 0)?;
                    }
                }
                PppWorkerAction::Reconnect { after } => {
                    self.socket = None;
                    self.reconnect_at = Some(now + after);
                }
                PppWorkerAction::Deliver { envelope, body } => {
                    if let Some(q) = sink.as_deref_mut() {
                        q.push_back((envelope, body));
                    }
                }
            }
        }
        Ok(())
    }

    /// Serve until `stop`: `handler` maps a request body to a reply body.
    pub fn serve(
        &mut self,
        stop: &AtomicBool,
        mut handler: impl FnMut(&Frames) -> Frames,
    ) -> Result<(), PirateError> {
        let mut inbox = VecDeque::new();
        while !stop.load(Ordering::Relaxed) {
            while let Some((envelope, body)) = inbox.pop_front() {
                let reply = handler(&body);
                let frames = self.engine.reply(Instant::now(), envelope, reply);
                if let Some(s) = &self.socket {
                    s.send_multipart(frames, 0)?;
                }
            }
            let now = Instant::now();
            let mut wake = self.engine.next_deadline().min(now + ms(100));
            if let Some(at) = self.reconnect_at {
                wake = wake.min(at);
            }
            let wait = wake.saturating_duration_since(now);
            match &self.socket {
                Some(s) => {
                    if s.poll(zmq::POLLIN, wait.as_millis() as i64)? > 0 {
                        while let Ok(f) = s.recv_multipart(zmq::DONTWAIT) {
                            self.engine.on_message(Instant::now(), f);
                        }
                    }
                }
                None => std::thread::sleep(wait),
            }
            let now = Instant::now();
            self.engine.tick(now);
            self.step(now, Some(&mut inbox))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg() -> PppConfig {
        PppConfig {
            heartbeat_interval_ms: 100,
            heartbeat_liveness: 3,
            reconnect_ms: 100,
            reconnect_max_ms: 800,
            max_queued: 2,
        }
    }

    fn f(parts: &[&[u8]]) -> Frames {
        parts.iter().map(|p| p.to_vec()).collect()
    }

    fn drain(q: &mut PppQueue) -> Vec<QueueOut> {
        std::iter::from_fn(|| q.poll_transmit()).collect()
    }

    #[test]
    fn backoff_doubles_to_cap_and_resets() {
        let mut b = Backoff::new(ms(1000), ms(32_000));
        let seq: Vec<_> = (0..8).map(|_| b.next_delay().as_millis()).collect();
        assert_eq!(
            seq,
            vec![1000, 2000, 4000, 8000, 16000, 32000, 32000, 32000]
        );
        b.reset();
        assert_eq!(b.next_delay(), ms(1000));
    }

    #[test]
    fn queue_routes_lru_and_never_forwards_control_frames() {
        let t0 = Instant::now();
        let mut q = PppQueue::new(cfg(), t0);
        q.on_backend(t0, f(&[b"w1", &[1]]));
        q.on_backend(t0, f(&[b"w2", &[1]]));
        q.on_backend(t0, f(&[b"w1", &[2]]));
        assert!(
            drain(&mut q).is_empty(),
            "READY/HEARTBEAT never reach clients"
        );
        q.on_frontend(t0, f(&[b"c1", b"", b"hello"]));
        assert_eq!(
            drain(&mut q),
            vec![QueueOut::Backend(f(&[b"w1", b"c1", b"", b"hello"]))]
        );
        // A heartbeat from busy w1 must not make it eligible again.
        q.on_backend(t0, f(&[b"w1", &[2]]));
        q.on_frontend(t0, f(&[b"c2", b"", b"x"]));
        assert_eq!(
            drain(&mut q),
            vec![QueueOut::Backend(f(&[b"w2", b"c2", b"", b"x"]))]
        );
        q.on_frontend(t0, f(&[b"c3", b"", b"y"]));
        assert!(drain(&mut q).is_empty(), "held until a worker frees up");
        q.on_backend(t0, f(&[b"w1", b"c1", b"", b"HELLO"]));
        assert_eq!(
            drain(&mut q),
            vec![
                QueueOut::Frontend(f(&[b"c1", b"", b"HELLO"])),
                QueueOut::Backend(f(&[b"w1", b"c3", b"", b"y"]))
            ]
        );
        q.on_backend(t0, f(&[b"w9", &[7]]));
        q.on_backend(t0, f(&[b"w9"]));
        assert_eq!(q.stats().malformed, 2);
    }

    #[test]
    fn queue_heartbeats_idle_workers_and_expires_silent_ones() {
        let t0 = Instant::now();
        let mut q = PppQueue::new(cfg(), t0);
        q.on_backend(t0, f(&[b"w1", &[1]]));
        q.on_backend(t0, f(&[b"w2", &[1]]));
        q.tick(t0 + ms(100));
        assert_eq!(drain(&mut q).len(), 2);
        q.on_backend(t0 + ms(250), f(&[b"w2", &[2]]));
        q.tick(t0 + ms(300));
        let out = drain(&mut q);
        assert_eq!(
            out,
            vec![QueueOut::Backend(f(&[b"w2", &[2]]))],
            "w1 expired after 3 silent intervals"
        );
        assert_eq!(q.idle_workers(), 1);
        assert_eq!(q.stats().workers_expired, 1);
    }

    #[test]
    fn queue_bounds_its_backlog() {
        let t0 = Instant::now();
        let mut q = PppQueue::new(cfg(), t0);
        for c in [b"c1", b"c2", b"c3"] {
            q.on_frontend(t0, f(&[c, b"", b"x"]));
        }
        assert_eq!(q.stats().dropped, 1);
    }

    #[test]
    fn worker_ready_heartbeat_echo_and_reconnect() {
        let t0 = Instant::now();
        let mut w = PppWorkerEngine::new(&cfg(), t0);
        w.connected(t0);
        assert_eq!(w.poll_action(), Some(PppWorkerAction::Send(f(&[&[1]]))));
        w.tick(t0 + ms(100));
        assert_eq!(w.poll_action(), Some(PppWorkerAction::Send(f(&[&[2]]))));
        w.on_message(t0 + ms(150), f(&[b"c1", b"", b"a", b"b"]));
        let Some(PppWorkerAction::Deliver { envelope, body }) = w.poll_action() else {
            panic!("no request")
        };
        assert_eq!(body, f(&[b"a", b"b"]));
        assert_eq!(w.reply(t0, envelope, f(&[b"r"])), f(&[b"c1", b"", b"r"]));
        w.on_message(t0, f(&[b"c1", b"x"]));
        assert_eq!(w.malformed, 1);
        let mut delays = Vec::new();
        let mut t = t0 + ms(150);
        for _ in 0..4 {
            loop {
                t += ms(10);
                w.tick(t);
                if let Some(PppWorkerAction::Reconnect { after }) =
                    std::iter::from_fn(|| w.poll_action())
                        .find(|a| matches!(a, PppWorkerAction::Reconnect { .. }))
                {
                    delays.push(after);
                    break;
                }
            }
            t += delays[delays.len() - 1];
            w.connected(t);
        }
        assert_eq!(delays, vec![ms(100), ms(200), ms(400), ms(800)]);
    }
}
