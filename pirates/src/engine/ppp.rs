//! The 6/PPP engines (sans-IO): the Paranoid Pirate queue ([`PppQueue`]) and worker ([`PppWorkerEngine`]).
//! They take received frames and "now is t" and hand back frames to send and the next deadline; the socket
//! layers are in `crate::ppp`. The worker's heartbeat and back-off rules are `tickbox_reliable`'s
//! [`Liveness`], shared with the Majordomo worker.
#![deny(clippy::disallowed_methods, clippy::disallowed_types)]

use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use tickbox_reliable::{ms, Liveness, LivenessEvent, PeerClock};
use tickbox_units::HumanDuration;

pub use tickbox_reliable::Frames;

/// 6/PPP READY: exactly one frame holding this one byte.
pub const PPP_READY: u8 = 0x01;
/// 6/PPP HEARTBEAT: exactly one frame holding this one byte.
pub const PPP_HEARTBEAT: u8 = 0x02;

/// 6/PPP timing (reference: 1 s interval, liveness 3, back-off 1 s → 32 s).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PppConfig {
    /// Interval between heartbeats in both directions (anything under 1 ms counts as 1 ms); queue and worker
    /// must agree on it.
    pub heartbeat_interval: HumanDuration,
    /// A peer silent for this many heartbeat intervals is presumed dead (at least 1).
    pub heartbeat_liveness: u32,
    /// The worker's first reconnect delay after the queue is presumed dead; doubles on each further death.
    pub reconnect: HumanDuration,
    /// The longest reconnect delay the doubling reaches.
    pub reconnect_max: HumanDuration,
    /// Client requests held while no worker is free; beyond this they are dropped (clients retry).
    pub max_queued: usize,
    /// Workers the queue keeps track of; a READY from one more identity is refused (counted, not answered), so
    /// a flood of fresh identities cannot grow the queue without bound.
    pub max_workers: usize,
    /// Largest frame the queue's sockets accept (their maximum message size option): a peer sending a bigger one
    /// is disconnected, so one client cannot make the queue hold an arbitrarily large request.
    pub max_message_bytes: u64,
    /// The queue's ROUTERs (frontend and backend) send multipart messages; they close with a linger of twice this plus 1 s and
    /// `ZMQ_TCP_MAXRT` set to this (the teardown rule in the book's chapter on known traps), so a stop can never hit the ZeroMQ library's `clean_pipes`
    /// abort (a peer stalled mid-message hanging up as the socket closes). The price: a peer that acknowledges no
    /// TCP data for this long is disconnected, and a stop with a stalled peer waits up to about this long.
    /// At least 1 ms is used.
    pub stalled_peer_timeout: HumanDuration,
    /// `[security]`, shared by the binary: the queue's ROUTERs are CURVE servers (roles `queue.frontend`,
    /// `queue.backend`); a worker connects as role `queue.backend`.
    #[serde(skip)]
    pub security: tickbox_auth::Security,
    /// Where the queue's loop leaves a copy of its counters for `queue --metrics` (default: nowhere).
    #[serde(skip)]
    pub live: tickbox_metrics::Published<PppQueueStats>,
}

impl Default for PppConfig {
    fn default() -> Self {
        Self {
            heartbeat_interval: HumanDuration(Duration::from_millis(1000)),
            heartbeat_liveness: 3,
            reconnect: HumanDuration(Duration::from_millis(1000)),
            reconnect_max: HumanDuration(Duration::from_millis(32_000)),
            max_queued: 10_000,
            max_workers: 10_000,
            max_message_bytes: 1 << 20,
            stalled_peer_timeout: HumanDuration(Duration::from_secs(3)),
            security: tickbox_auth::Security::default(),
            live: Default::default(),
        }
    }
}

/// Where a queue output goes.
#[derive(Debug, PartialEq, Eq)]
pub enum QueueOut {
    /// Send on the front-end ROUTER: frame 0 is the client's routing id (a reply).
    Frontend(Frames),
    /// Send on the back-end ROUTER: frame 0 is the worker's routing id (a request or a HEARTBEAT).
    Backend(Frames),
}

struct PppWorkerState {
    clock: PeerClock,
    busy: bool,
}

/// Counters of the Paranoid Pirate queue.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PppQueueStats {
    /// Well-formed client requests received (including those then dropped).
    pub requests: u64,
    /// Worker replies forwarded to clients (also those from workers already expired).
    pub replies: u64,
    /// Messages from either side too short or with an unknown one-frame command, dropped.
    pub malformed: u64,
    /// Client requests dropped because [`PppConfig::max_queued`] were already waiting.
    pub dropped: u64,
    /// Workers removed after `heartbeat_liveness` silent intervals (idle or busy).
    pub workers_expired: u64,
    /// READY messages accepted: workers (identities) seen, counting a reconnected worker again.
    pub workers_seen: u64,
    /// READY messages refused because [`PppConfig::max_workers`] workers were already known.
    pub workers_refused: u64,
    /// Requests handed to a worker.
    pub routed: u64,
    /// Requests lost with a busy worker that expired before replying (the client's retry is its recovery).
    pub lost_with_worker: u64,
}

/// Sans-IO Paranoid Pirate queue: an LRU queue of ready workers. Unlike the Guide's queue, a HEARTBEAT from a busy
/// worker only proves it alive; it does not make the worker eligible for a second request. Heartbeats go to every
/// worker, busy or idle, and a worker of either state silent for `heartbeat_liveness` intervals is forgotten: a
/// worker killed mid-request would otherwise stay "busy" forever.
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
    /// An empty queue (no workers); its first heartbeat round is one interval after `now`.
    pub fn new(cfg: PppConfig, now: Instant) -> Self {
        let next_tick = now + cfg.heartbeat_interval.0.max(ms(1));
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
        self.cfg.heartbeat_interval.0.max(ms(1))
    }

    /// Counters since the queue was created.
    pub fn stats(&self) -> &PppQueueStats {
        &self.stats
    }

    /// Workers ready for a request now.
    pub fn idle_workers(&self) -> usize {
        self.idle.len()
    }

    /// The next message to send, in order; call until `None` after every input.
    pub fn poll_output(&mut self) -> Option<QueueOut> {
        self.out.pop_front()
    }

    /// When [`PppQueue::handle_timeout`] is next due (the next heartbeat round).
    pub fn poll_timeout(&self) -> Option<Instant> {
        Some(self.next_tick)
    }

    /// A client message from the front-end ROUTER: `[client-id]…[""][body…]`, forwarded whole to a worker.
    pub fn handle_frontend(&mut self, now: Instant, frames: Frames) {
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
    pub fn handle_backend(&mut self, now: Instant, mut frames: Frames) {
        if frames.len() < 2 {
            self.stats.malformed += 1;
            return;
        }
        let id = frames.remove(0);
        if frames.len() == 1 {
            match frames[0].as_slice() {
                [PPP_READY] => {
                    if !self.workers.contains_key(&id) && self.workers.len() >= self.cfg.max_workers
                    {
                        self.stats.workers_refused += 1;
                        return;
                    }
                    self.stats.workers_seen += 1;
                    // A READY always starts a fresh conversation for that identity.
                    self.idle.retain(|x| *x != id);
                    let clock = PeerClock::new(self.interval(), self.cfg.heartbeat_liveness, now);
                    self.workers
                        .insert(id.clone(), PppWorkerState { clock, busy: false });
                    self.idle.push_back(id);
                    self.dispatch(now);
                }
                [PPP_HEARTBEAT] => {
                    if let Some(w) = self.workers.get_mut(&id) {
                        w.clock.heard(now);
                    }
                }
                _ => self.stats.malformed += 1,
            }
            return;
        }
        let Some(w) = self.workers.get_mut(&id) else {
            // A reply from a worker we expired: still deliver it, the client may be waiting for exactly this.
            self.stats.replies += 1;
            self.out.push_back(QueueOut::Frontend(frames));
            return;
        };
        w.clock.heard(now);
        self.stats.replies += 1;
        self.out.push_back(QueueOut::Frontend(frames));
        if w.busy {
            w.busy = false;
            w.clock.sent(now);
            self.idle.push_back(id);
            self.dispatch(now);
        }
    }

    fn dispatch(&mut self, now: Instant) {
        while !self.requests.is_empty() {
            let Some(id) = self.idle.pop_front() else {
                break;
            };
            let Some(w) = self.workers.get_mut(&id) else {
                continue;
            };
            let Some(mut req) = self.requests.pop_front() else {
                break;
            };
            w.busy = true;
            w.clock.sent(now);
            self.stats.routed += 1;
            req.insert(0, id);
            self.out.push_back(QueueOut::Backend(req));
        }
    }

    /// Workers known (idle or busy).
    pub fn workers(&self) -> usize {
        self.workers.len()
    }

    /// Requests waiting for a free worker.
    pub fn queued(&self) -> usize {
        self.requests.len()
    }

    /// Heartbeat every worker; forget workers that went silent, idle or busy.
    pub fn handle_timeout(&mut self, now: Instant) {
        if now < self.next_tick {
            return;
        }
        let interval = self.interval();
        self.next_tick = now + interval;
        let mut dead = Vec::new();
        // Idle workers in LRU order first, so heartbeats go out in a stable order; busy ones after.
        let busy = self
            .workers
            .iter()
            .filter(|(_, w)| w.busy)
            .map(|(id, _)| id.clone());
        let order: Vec<Vec<u8>> = self.idle.iter().cloned().chain(busy).collect();
        for id in order {
            let Some(w) = self.workers.get_mut(&id) else {
                continue;
            };
            if w.clock.is_expired(now) {
                if w.busy {
                    self.stats.lost_with_worker += 1;
                }
                dead.push(id);
            } else if w.clock.heartbeat_due(now) {
                w.clock.sent(now);
                self.out
                    .push_back(QueueOut::Backend(vec![id, vec![PPP_HEARTBEAT]]));
            }
        }
        for id in dead {
            self.stats.workers_expired += 1;
            self.workers.remove(&id);
            self.idle.retain(|x| *x != id);
        }
    }
}

/// What the Paranoid Pirate worker engine wants done.
#[derive(Debug, PartialEq, Eq)]
pub enum PppWorkerAction {
    /// Send these frames on the DEALER (READY, HEARTBEAT).
    Send(Frames),
    /// The queue is presumed dead: close the socket, wait `after`, open a new one and call
    /// [`PppWorkerEngine::connected`].
    Reconnect {
        /// The back-off delay, doubling on each consecutive death up to [`PppConfig::reconnect_max`].
        after: Duration,
    },
    /// A request: reply with exactly this envelope (everything up to and including the empty frame) followed
    /// by the reply body.
    Deliver {
        /// The routing envelope, to be passed back to [`PppWorkerEngine::reply`].
        envelope: Frames,
        /// The request body (at least one frame).
        body: Frames,
    },
}

/// Sans-IO Paranoid Pirate worker: READY on every new connection, heartbeats, queue liveness, back-off.
pub struct PppWorkerEngine {
    live: Liveness,
    connected: bool,
    out: VecDeque<PppWorkerAction>,
    /// Messages from the queue that were neither HEARTBEAT nor an enveloped request, dropped.
    pub malformed: u64,
    /// Times the queue was presumed dead and a reconnect asked for.
    pub reconnects: u64,
}

impl PppWorkerEngine {
    /// A worker not yet connected; call [`PppWorkerEngine::connected`] once the socket is.
    pub fn new(cfg: &PppConfig, now: Instant) -> Self {
        Self {
            live: Liveness::new(
                cfg.heartbeat_interval.0,
                cfg.heartbeat_liveness,
                cfg.reconnect.0.max(ms(1)),
                cfg.reconnect_max.0.max(ms(1)),
                now,
            ),
            connected: false,
            out: VecDeque::new(),
            malformed: 0,
            reconnects: 0,
        }
    }

    /// A new connection to the queue is up: queues READY and gives the queue a full liveness allowance.
    pub fn connected(&mut self, now: Instant) {
        self.connected = true;
        self.live.restart(now);
        self.live.sent(now);
        self.out
            .push_back(PppWorkerAction::Send(vec![vec![PPP_READY]]));
    }

    /// A message from the queue: a HEARTBEAT or `[envelope…][""][body…]`. Ignored while disconnected.
    pub fn handle_input(&mut self, now: Instant, mut frames: Frames) {
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

    /// Heartbeats and queue liveness; may queue a HEARTBEAT or a [`PppWorkerAction::Reconnect`].
    pub fn handle_timeout(&mut self, now: Instant) {
        if !self.connected {
            return;
        }
        match self.live.handle_timeout(now) {
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

    /// When [`PppWorkerEngine::handle_timeout`] is next due.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.live.poll_timeout()
    }

    /// The next action, in order; call until `None` after every input.
    pub fn poll_output(&mut self) -> Option<PppWorkerAction> {
        self.out.pop_front()
    }
}

#[cfg(test)]
// A test reads the clock once for an origin and moves simulated time on from there; the engine never reads it.
#[allow(clippy::disallowed_methods)]
mod tests {
    use super::*;
    use tickbox_reliable::ms;

    fn cfg() -> PppConfig {
        PppConfig {
            heartbeat_interval: ms(100).into(),
            heartbeat_liveness: 3,
            reconnect: ms(100).into(),
            reconnect_max: ms(800).into(),
            max_queued: 2,
            max_workers: 3,
            max_message_bytes: 1 << 20,
            stalled_peer_timeout: ms(1000).into(),
            ..PppConfig::default()
        }
    }

    fn f(parts: &[&[u8]]) -> Frames {
        parts.iter().map(|p| p.to_vec()).collect()
    }

    fn drain(q: &mut PppQueue) -> Vec<QueueOut> {
        std::iter::from_fn(|| q.poll_output()).collect()
    }

    #[test]
    fn queue_routes_lru_and_never_forwards_control_frames() {
        let t0 = Instant::now();
        let mut q = PppQueue::new(cfg(), t0);
        q.handle_backend(t0, f(&[b"w1", &[1]]));
        q.handle_backend(t0, f(&[b"w2", &[1]]));
        q.handle_backend(t0, f(&[b"w1", &[2]]));
        assert!(
            drain(&mut q).is_empty(),
            "READY/HEARTBEAT never reach clients"
        );
        q.handle_frontend(t0, f(&[b"c1", b"", b"hello"]));
        assert_eq!(
            drain(&mut q),
            vec![QueueOut::Backend(f(&[b"w1", b"c1", b"", b"hello"]))]
        );
        // A heartbeat from busy w1 must not make it eligible again.
        q.handle_backend(t0, f(&[b"w1", &[2]]));
        q.handle_frontend(t0, f(&[b"c2", b"", b"x"]));
        assert_eq!(
            drain(&mut q),
            vec![QueueOut::Backend(f(&[b"w2", b"c2", b"", b"x"]))]
        );
        q.handle_frontend(t0, f(&[b"c3", b"", b"y"]));
        assert!(drain(&mut q).is_empty(), "held until a worker frees up");
        q.handle_backend(t0, f(&[b"w1", b"c1", b"", b"HELLO"]));
        assert_eq!(
            drain(&mut q),
            vec![
                QueueOut::Frontend(f(&[b"c1", b"", b"HELLO"])),
                QueueOut::Backend(f(&[b"w1", b"c3", b"", b"y"]))
            ]
        );
        q.handle_backend(t0, f(&[b"w9", &[7]]));
        q.handle_backend(t0, f(&[b"w9"]));
        assert_eq!(q.stats().malformed, 2);
    }

    #[test]
    fn queue_heartbeats_idle_workers_and_expires_silent_ones() {
        let t0 = Instant::now();
        let mut q = PppQueue::new(cfg(), t0);
        q.handle_backend(t0, f(&[b"w1", &[1]]));
        q.handle_backend(t0, f(&[b"w2", &[1]]));
        q.handle_timeout(t0 + ms(100));
        assert_eq!(drain(&mut q).len(), 2);
        q.handle_backend(t0 + ms(250), f(&[b"w2", &[2]]));
        q.handle_timeout(t0 + ms(300));
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
    fn a_busy_worker_that_goes_silent_expires_and_its_request_is_counted_lost() {
        let t0 = Instant::now();
        let mut q = PppQueue::new(cfg(), t0);
        q.handle_backend(t0, f(&[b"w1", &[1]]));
        q.handle_backend(t0, f(&[b"w2", &[1]]));
        q.handle_frontend(t0, f(&[b"c1", b"", b"x"]));
        assert_eq!(
            drain(&mut q),
            vec![QueueOut::Backend(f(&[b"w1", b"c1", b"", b"x"]))]
        );
        // w1 dies holding the request; w2 keeps heartbeating.
        for k in 1..=3u64 {
            q.handle_backend(t0 + ms(100 * k - 50), f(&[b"w2", &[2]]));
            q.handle_timeout(t0 + ms(100 * k));
        }
        assert_eq!(q.stats().workers_expired, 1);
        assert_eq!(q.stats().lost_with_worker, 1);
        assert_eq!((q.workers(), q.idle_workers()), (1, 1));
        // The client's retry goes to the survivor.
        drain(&mut q);
        q.handle_frontend(t0 + ms(310), f(&[b"c1", b"", b"x"]));
        assert_eq!(
            drain(&mut q),
            vec![QueueOut::Backend(f(&[b"w2", b"c1", b"", b"x"]))]
        );
        assert_eq!((q.stats().routed, q.stats().workers_seen), (2, 2));
    }

    #[test]
    fn queue_bounds_its_workers() {
        let t0 = Instant::now();
        let mut q = PppQueue::new(cfg(), t0);
        for w in [b"w1", b"w2", b"w3", b"w4"] {
            q.handle_backend(t0, f(&[w, &[1]]));
        }
        // A known identity saying READY again is not a new worker.
        q.handle_backend(t0, f(&[b"w1", &[1]]));
        assert_eq!(q.workers(), 3);
        assert_eq!(q.stats().workers_refused, 1);
        assert_eq!(q.stats().workers_seen, 4);
    }

    #[test]
    fn queue_bounds_its_backlog() {
        let t0 = Instant::now();
        let mut q = PppQueue::new(cfg(), t0);
        for c in [b"c1", b"c2", b"c3"] {
            q.handle_frontend(t0, f(&[c, b"", b"x"]));
        }
        assert_eq!(q.stats().dropped, 1);
    }

    #[test]
    fn worker_ready_heartbeat_echo_and_reconnect() {
        let t0 = Instant::now();
        let mut w = PppWorkerEngine::new(&cfg(), t0);
        w.connected(t0);
        assert_eq!(w.poll_output(), Some(PppWorkerAction::Send(f(&[&[1]]))));
        w.handle_timeout(t0 + ms(100));
        assert_eq!(w.poll_output(), Some(PppWorkerAction::Send(f(&[&[2]]))));
        w.handle_input(t0 + ms(150), f(&[b"c1", b"", b"a", b"b"]));
        let Some(PppWorkerAction::Deliver { envelope, body }) = w.poll_output() else {
            panic!("no request")
        };
        assert_eq!(body, f(&[b"a", b"b"]));
        assert_eq!(w.reply(t0, envelope, f(&[b"r"])), f(&[b"c1", b"", b"r"]));
        w.handle_input(t0, f(&[b"c1", b"x"]));
        assert_eq!(w.malformed, 1);
        let mut delays = Vec::new();
        let mut t = t0 + ms(150);
        for _ in 0..4 {
            loop {
                t += ms(10);
                w.handle_timeout(t);
                if let Some(PppWorkerAction::Reconnect { after }) =
                    std::iter::from_fn(|| w.poll_output())
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
