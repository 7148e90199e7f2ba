//! The Majordomo worker engine (sans-IO): the protocol rules (READY first, heartbeat cadence, broker liveness,
//! reconnect with back-off, DISCONNECT handling). `crate::worker::MdpWorker` is the thin socket layer a service
//! author uses.
#![deny(clippy::disallowed_methods, clippy::disallowed_types)]

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::proto::{classify, worker_msg, Frames, Inbound, Version, WorkerCmd};
use tickbox_reliable::{Liveness, LivenessEvent};
use tickbox_units::HumanDuration;

/// Worker settings; heartbeat interval and liveness must match the broker's.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct MdpWorkerConfig {
    /// How often the worker heartbeats the broker when idle (reference 2500 ms); at least 1 ms is used.
    pub heartbeat_interval: HumanDuration,
    /// Missed heartbeat intervals after which the broker is presumed dead (reference 3).
    pub heartbeat_liveness: u32,
    /// First reconnect delay after the broker is presumed dead; doubles up to `reconnect_max`.
    pub reconnect: HumanDuration,
    /// Ceiling of the doubling reconnect delay (never below `reconnect`).
    pub reconnect_max: HumanDuration,
    /// Speak 18/MDP 0.2 instead of 7/MDP 0.1.
    pub v02: bool,
    /// `[security]`, shared by the binary: the worker's DEALER connects as a client of role `broker`.
    #[serde(skip)]
    pub security: tickbox_auth::Security,
}

impl Default for MdpWorkerConfig {
    fn default() -> Self {
        Self {
            heartbeat_interval: HumanDuration(Duration::from_millis(2500)),
            heartbeat_liveness: 3,
            reconnect: HumanDuration(Duration::from_millis(2500)),
            reconnect_max: HumanDuration(Duration::from_millis(32_000)),
            v02: false,
            security: tickbox_auth::Security::default(),
        }
    }
}

/// Floor of every configured interval: a zero would make the engine spin.
const MIN_INTERVAL: Duration = Duration::from_millis(1);

impl MdpWorkerConfig {
    fn version(&self) -> Version {
        if self.v02 {
            Version::V02
        } else {
            Version::V01
        }
    }
}

/// A request handed to the application: reply with [`MdpWorker::reply`](crate::worker::MdpWorker::reply).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Request {
    /// The client address frame, echoed unchanged in the reply.
    pub client: Vec<u8>,
    /// The request body as the client sent it (at least one frame).
    pub body: Frames,
}

impl Request {
    /// The Titanic request id if this request was forwarded by Titanic's dispatcher: the same on every
    /// attempt of one Titanic request, so a service can recognise a re-sent request (see
    /// `crate::titanic` for when Titanic re-sends).
    pub fn titanic_id(&self) -> Option<&[u8]> {
        crate::engine::titanic::request_id_of(&self.client)
    }
}

/// Replies remembered by Titanic request id, so a re-sent request is answered without running again.
/// Bounded in entries and bytes; the oldest entries go first. One cache serves one worker: services with
/// several workers need a store they share, keyed by [`Request::titanic_id`].
pub struct DedupeCache {
    map: std::collections::HashMap<Vec<u8>, Frames>,
    order: VecDeque<Vec<u8>>,
    bytes: usize,
    max_entries: usize,
    max_bytes: usize,
    /// Requests answered from the cache instead of running the handler.
    pub hits: u64,
    /// Entries dropped to stay within the bounds (a duplicate of one of these would run again).
    pub evicted: u64,
}

fn reply_bytes(id: &[u8], body: &Frames) -> usize {
    id.len() + body.iter().map(|f| f.len() + 32).sum::<usize>()
}

impl DedupeCache {
    /// An empty cache holding at most `max_entries` replies and `max_bytes` bytes of them.
    pub fn new(max_entries: usize, max_bytes: usize) -> Self {
        Self {
            map: std::collections::HashMap::new(),
            order: VecDeque::new(),
            bytes: 0,
            max_entries,
            max_bytes,
            hits: 0,
            evicted: 0,
        }
    }

    /// The remembered reply for request id `id`, counting a hit.
    pub fn get(&mut self, id: &[u8]) -> Option<Frames> {
        let r = self.map.get(id).cloned();
        if r.is_some() {
            self.hits += 1;
        }
        r
    }

    /// Remember `reply` for `id` (a reply bigger than the whole cache is not kept).
    pub fn insert(&mut self, id: &[u8], reply: &Frames) {
        let cost = reply_bytes(id, reply);
        if cost > self.max_bytes || self.max_entries == 0 || self.map.contains_key(id) {
            return;
        }
        while self.map.len() >= self.max_entries || self.bytes + cost > self.max_bytes {
            let Some(old) = self.order.pop_front() else {
                break;
            };
            if let Some(body) = self.map.remove(&old) {
                self.bytes -= reply_bytes(&old, &body);
                self.evicted += 1;
            }
        }
        self.bytes += cost;
        self.order.push_back(id.to_vec());
        self.map.insert(id.to_vec(), reply.clone());
    }

    /// Replies remembered.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Whether nothing is remembered.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }
}

/// What the engine wants the socket layer to do.
#[derive(Debug, PartialEq, Eq)]
pub enum WorkerAction {
    /// Send these frames to the broker on the current socket.
    Send(Frames),
    /// Close the socket now, open a new one after `after`, then call [`WorkerEngine::connected`].
    Reconnect {
        /// Back-off before the new socket: zero after a DISCONNECT, growing after a silent broker.
        after: Duration,
    },
    /// Hand this request to the application.
    Deliver(Request),
}

/// Sans-IO Majordomo worker.
pub struct WorkerEngine {
    version: Version,
    service: Vec<u8>,
    live: Liveness,
    connected: bool,
    out: VecDeque<WorkerAction>,
    /// Broker messages dropped because they were malformed, of the other revision, or not for a worker.
    pub malformed: u64,
    /// Reconnections asked for so far (broker silent or DISCONNECT).
    pub reconnects: u64,
}

impl WorkerEngine {
    /// The MDP version this worker speaks.
    pub fn version(&self) -> Version {
        self.version
    }

    /// A worker for `service`, not yet connected: the socket layer opens a socket and calls
    /// [`WorkerEngine::connected`].
    pub fn new(cfg: &MdpWorkerConfig, service: &[u8], now: Instant) -> Self {
        Self {
            version: cfg.version(),
            service: service.to_vec(),
            live: Liveness::new(
                cfg.heartbeat_interval.0.max(MIN_INTERVAL),
                cfg.heartbeat_liveness.max(1),
                cfg.reconnect.0.max(MIN_INTERVAL),
                cfg.reconnect_max.0.max(cfg.reconnect.0).max(MIN_INTERVAL),
                now,
            ),
            connected: false,
            out: VecDeque::new(),
            malformed: 0,
            reconnects: 0,
        }
    }

    /// A fresh socket is connected: announce the service. READY is the first and only READY on a socket.
    pub fn connected(&mut self, now: Instant) {
        self.connected = true;
        self.live.restart(now);
        self.live.sent(now);
        self.out.push_back(WorkerAction::Send(worker_msg(
            self.version,
            WorkerCmd::Ready,
            vec![self.service.clone()],
        )));
    }

    fn reconnect(&mut self, after: Duration) {
        self.connected = false;
        self.reconnects += 1;
        self.out.push_back(WorkerAction::Reconnect { after });
    }

    /// A message arrived from the broker.
    pub fn handle_input(&mut self, now: Instant, frames: Frames) {
        if !self.connected {
            return;
        }
        match classify(frames) {
            Ok(Inbound::Worker {
                version,
                cmd,
                mut rest,
            }) if version == self.version => match cmd {
                WorkerCmd::Request => {
                    self.live.heard(now);
                    let client = std::mem::take(&mut rest[0]);
                    let body = rest.split_off(2);
                    self.out
                        .push_back(WorkerAction::Deliver(Request { client, body }));
                }
                WorkerCmd::Heartbeat => self.live.heard(now),
                WorkerCmd::Disconnect => {
                    // The broker forgot us (restart, violation): start a new conversation right away.
                    self.reconnect(Duration::ZERO);
                }
                _ => self.malformed += 1,
            },
            _ => self.malformed += 1,
        }
    }

    /// Frames of a reply (or a 0.2 partial reply) to `req`.
    pub fn reply(&mut self, now: Instant, client: Vec<u8>, body: Frames, partial: bool) -> Frames {
        self.live.sent(now);
        // The broker does not heartbeat a busy worker, so silence while the job ran says nothing about the
        // broker: restart the liveness window, or a job longer than liveness x interval would make the next
        // tick drop the socket (linger 0) with this reply still queued in it.
        self.live.heard(now);
        let mut rest = Vec::with_capacity(body.len() + 2);
        rest.push(client);
        rest.push(Vec::new());
        rest.extend(body);
        let cmd = if partial && self.version == Version::V02 {
            WorkerCmd::Partial
        } else {
            WorkerCmd::Final
        };
        worker_msg(self.version, cmd, rest)
    }

    /// Frames of a DISCONNECT, for a polite exit.
    pub fn disconnect(&mut self) -> Frames {
        self.connected = false;
        worker_msg(self.version, WorkerCmd::Disconnect, vec![])
    }

    /// Time passes: heartbeat when due, declare the broker dead after `liveness` silent intervals.
    pub fn handle_timeout(&mut self, now: Instant) {
        if !self.connected {
            return;
        }
        match self.live.handle_timeout(now) {
            LivenessEvent::Idle => {}
            LivenessEvent::SendHeartbeat => self.out.push_back(WorkerAction::Send(worker_msg(
                self.version,
                WorkerCmd::Heartbeat,
                vec![],
            ))),
            LivenessEvent::PeerDead { reconnect_after } => {
                tracing::warn!(service = %String::from_utf8_lossy(&self.service), "broker silent, reconnecting");
                self.reconnect(reconnect_after)
            }
        }
    }

    /// When [`WorkerEngine::handle_timeout`] must next run (heartbeat or liveness deadline).
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.live.poll_timeout()
    }

    /// Next thing the socket layer must do, oldest first; `None` when there is nothing left.
    pub fn poll_output(&mut self) -> Option<WorkerAction> {
        self.out.pop_front()
    }
}

#[cfg(test)]
// A test reads the clock once for an origin and moves simulated time on from there; the engine never reads it.
#[allow(clippy::disallowed_methods)]
mod tests {
    use super::*;
    use tickbox_reliable::ms;

    fn cfg() -> MdpWorkerConfig {
        MdpWorkerConfig {
            heartbeat_interval: HumanDuration(Duration::from_millis(100)),
            heartbeat_liveness: 3,
            reconnect: HumanDuration(Duration::from_millis(50)),
            reconnect_max: HumanDuration(Duration::from_millis(400)),
            v02: false,
            ..Default::default()
        }
    }

    fn f(parts: &[&[u8]]) -> Frames {
        parts.iter().map(|p| p.to_vec()).collect()
    }

    fn drain(e: &mut WorkerEngine) -> Vec<WorkerAction> {
        std::iter::from_fn(|| e.poll_output()).collect()
    }

    #[test]
    fn ready_is_exactly_four_frames_then_heartbeats_on_cadence() {
        let t0 = Instant::now();
        let mut e = WorkerEngine::new(&cfg(), b"echo", t0);
        e.connected(t0);
        assert_eq!(
            drain(&mut e),
            vec![WorkerAction::Send(f(&[b"", b"MDPW01", &[1], b"echo"]))]
        );
        e.handle_timeout(t0 + ms(99));
        assert!(drain(&mut e).is_empty());
        e.handle_input(t0 + ms(90), f(&[b"", b"MDPW01", &[4]]));
        e.handle_timeout(t0 + ms(100));
        assert_eq!(
            drain(&mut e),
            vec![WorkerAction::Send(f(&[b"", b"MDPW01", &[4]]))]
        );
    }

    #[test]
    fn silent_broker_triggers_reconnect_with_growing_backoff() {
        let t0 = Instant::now();
        let mut e = WorkerEngine::new(&cfg(), b"echo", t0);
        e.connected(t0);
        drain(&mut e);
        let mut t = t0;
        let mut delays = Vec::new();
        for _ in 0..5 {
            let mut reconnect = None;
            for _ in 0..10 {
                t += ms(50);
                e.handle_timeout(t);
                for a in drain(&mut e) {
                    if let WorkerAction::Reconnect { after } = a {
                        reconnect = Some(after);
                    }
                }
                if reconnect.is_some() {
                    break;
                }
            }
            let after = reconnect.expect("broker declared dead within liveness x interval");
            delays.push(after);
            t += after;
            e.connected(t);
            drain(&mut e);
        }
        assert_eq!(delays, vec![ms(50), ms(100), ms(200), ms(400), ms(400)]);
        // Any traffic from the broker resets the back-off.
        e.handle_input(t, f(&[b"", b"MDPW01", &[4]]));
        t += ms(299);
        e.handle_timeout(t);
        assert!(!drain(&mut e)
            .iter()
            .any(|a| matches!(a, WorkerAction::Reconnect { .. })));
        t += ms(1);
        e.handle_timeout(t);
        assert!(drain(&mut e).contains(&WorkerAction::Reconnect { after: ms(50) }));
    }

    #[test]
    fn request_delivered_and_reply_echoes_address() {
        let t0 = Instant::now();
        let mut e = WorkerEngine::new(&cfg(), b"echo", t0);
        e.connected(t0);
        drain(&mut e);
        e.handle_input(t0, f(&[b"", b"MDPW01", &[2], b"\x00abcd", b"", b"a", b"b"]));
        let req = Request {
            client: b"\x00abcd".to_vec(),
            body: f(&[b"a", b"b"]),
        };
        assert_eq!(drain(&mut e), vec![WorkerAction::Deliver(req.clone())]);
        assert_eq!(
            e.reply(t0, req.client, f(&[b"r"]), false),
            f(&[b"", b"MDPW01", &[3], b"\x00abcd", b"", b"r"])
        );
        e.handle_input(t0, f(&[b"", b"MDPW01", &[5]]));
        assert_eq!(
            drain(&mut e),
            vec![WorkerAction::Reconnect {
                after: Duration::ZERO
            }]
        );
        e.handle_input(t0, f(&[b"junk"]));
        assert_eq!(e.malformed, 0, "ignored while disconnected");
    }

    #[test]
    fn v02_layouts() {
        let t0 = Instant::now();
        let mut c = cfg();
        c.v02 = true;
        let mut e = WorkerEngine::new(&c, b"echo", t0);
        e.connected(t0);
        assert_eq!(
            drain(&mut e),
            vec![WorkerAction::Send(f(&[b"MDPW02", &[1], b"echo"]))]
        );
        assert_eq!(
            e.reply(t0, b"c".to_vec(), f(&[b"p"]), true),
            f(&[b"MDPW02", &[3], b"c", b"", b"p"])
        );
        assert_eq!(
            e.reply(t0, b"c".to_vec(), f(&[b"r"]), false),
            f(&[b"MDPW02", &[4], b"c", b"", b"r"])
        );
        e.handle_input(t0, f(&[b"", b"MDPW01", &[4]]));
        assert_eq!(
            e.malformed, 1,
            "0.1 traffic on a 0.2 conversation is refused"
        );
    }
}
