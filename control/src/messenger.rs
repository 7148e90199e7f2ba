//! A callback messenger: `send(destination, message, on_reply)` and `listen(endpoint, handler)`.
//!
//! One I/O thread owns every socket; callers only enqueue commands (a channel plus a one-byte wake-up on an
//! `inproc` PUSH). Every message carries a message id, the receiver-side callback id and the sender-side callback
//! id. A message is retried until the receiver acknowledges it with an explicit ACK message (never "it was
//! sent"); receivers drop duplicates with [`SeenSet`] (highest id seen + the set of unseen ids below it), which
//! needs constant memory while delivery is mostly in order. Replies are messages too, retried and deduplicated
//! the same way, so under loss and duplication every handler and every reply callback runs exactly once.
//!
//! Wire (our own, `"TBM1"` header; ids are u64 big-endian):
//! * MSG `["TBM1"][0x01][sender-uuid 16][msg-id][to-callback][from-callback][body…]`
//! * ACK `["TBM1"][0x02][msg-id]`
//!
//! `to-callback` 0 addresses the handler of the listener the message arrives on; `from-callback` 0 means "no
//! reply wanted". Senders connect a DEALER whose identity is `'M' + sender-uuid`, so the receiver's ROUTER (with
//! `ROUTER_HANDOVER`) can keep routing replies to it across reconnects.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};

pub type Frames = Vec<Vec<u8>>;

const HEADER: &[u8] = b"TBM1";
const MSG: u8 = 0x01;
const ACK: u8 = 0x02;

#[derive(Debug, thiserror::Error)]
pub enum MessengerError {
    #[error("zmq: {0}")]
    Zmq(#[from] zmq::Error),
    #[error("the messenger I/O thread is gone")]
    Gone,
    #[error("listen on {endpoint}: {source}")]
    Listen {
        endpoint: String,
        source: zmq::Error,
    },
}

// ---- duplicate detection ------------------------------------------------------------------------------------

/// Set of message ids seen from one sender, for ids ≥ 1. Keeps the highest id seen and the ids below it that
/// have not been seen yet, so memory is constant while ids arrive mostly in order. At most `cap` unseen ids are
/// remembered: when a jump exceeds that, the oldest unseen ids are given up (treated as seen), so a message
/// delayed by more than `cap` newer ones would be dropped as a duplicate.
#[derive(Clone, Debug)]
pub struct SeenSet {
    max: u64,
    floor: u64,
    unseen: BTreeSet<u64>,
    cap: usize,
}

impl SeenSet {
    pub fn new(cap: usize) -> Self {
        Self {
            max: 0,
            floor: 0,
            unseen: BTreeSet::new(),
            cap: cap.max(1),
        }
    }

    /// Record `id`; `true` if it had not been seen before.
    pub fn insert(&mut self, id: u64) -> bool {
        if id <= self.floor {
            return false;
        }
        if id > self.max {
            let lowest_kept = (self.max + 1).max(id.saturating_sub(self.cap as u64));
            if lowest_kept > self.max + 1 {
                self.floor = self.floor.max(lowest_kept - 1);
                let floor = self.floor;
                self.unseen.retain(|&x| x > floor);
            }
            self.unseen.extend(lowest_kept..id);
            self.max = id;
            while self.unseen.len() > self.cap {
                let lowest = self.unseen.pop_first().expect("non-empty");
                self.floor = self.floor.max(lowest);
            }
            return true;
        }
        self.unseen.remove(&id)
    }

    /// Ids currently remembered as unseen (the memory in use beyond two integers).
    pub fn unseen_len(&self) -> usize {
        self.unseen.len()
    }

    pub fn max_seen(&self) -> u64 {
        self.max
    }
}

// ---- sans-IO engine -----------------------------------------------------------------------------------------

/// Where a message goes or came from.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Route {
    /// Our DEALER connected to this endpoint.
    Dest(String),
    /// A peer on our listener number `listener`, addressed by its routing identity.
    Peer { listener: usize, identity: Vec<u8> },
}

/// What the engine wants done.
#[derive(Debug, PartialEq, Eq)]
pub enum MsgAction {
    Transmit {
        route: Route,
        frames: Frames,
    },
    /// Run callback `callback` (0: the handler of `route`'s listener) with `body`; if `reply_callback` is not 0
    /// the handler's answer goes back to `route` addressed to that callback.
    Deliver {
        route: Route,
        callback: u64,
        reply_callback: u64,
        body: Frames,
    },
    /// A message was retried `attempts` times without ACK and dropped (only with a finite attempt limit).
    GaveUp {
        msg_id: u64,
        callback: u64,
    },
}

/// Messenger settings.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct MessengerConfig {
    /// Resend an unacknowledged message after this long, ms.
    pub retry_ms: u64,
    /// Give up after this many sends (0 = retry forever).
    pub max_attempts: u32,
    /// Unseen ids remembered per sender (see [`SeenSet`]).
    pub dedup_window: usize,
    /// Fault injection for tests and drills: probability of dropping / duplicating each outgoing message.
    pub drop_probability: f64,
    pub duplicate_probability: f64,
    pub fault_seed: u64,
}

impl Default for MessengerConfig {
    fn default() -> Self {
        Self {
            retry_ms: 250,
            max_attempts: 0,
            dedup_window: 65_536,
            drop_probability: 0.0,
            duplicate_probability: 0.0,
            fault_seed: 0,
        }
    }
}

struct PendingMsg {
    route: Route,
    frames: Frames,
    next_retry: Instant,
    attempts: u32,
    from_cb: u64,
}

/// Counters.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MessengerStats {
    pub sent: u64,
    pub retries: u64,
    pub acked: u64,
    pub delivered: u64,
    pub duplicates: u64,
    pub malformed: u64,
    pub gave_up: u64,
}

/// Sans-IO messenger: message ids, retries until ACK, duplicate suppression.
pub struct MessengerEngine {
    me: [u8; 16],
    cfg: MessengerConfig,
    next_id: u64,
    pending: BTreeMap<u64, PendingMsg>,
    seen: HashMap<[u8; 16], SeenSet>,
    out: VecDeque<MsgAction>,
    pub stats: MessengerStats,
}

fn u64_frame(v: u64) -> Vec<u8> {
    v.to_be_bytes().to_vec()
}

fn frame_u64(f: &[u8]) -> Option<u64> {
    Some(u64::from_be_bytes(f.try_into().ok()?))
}

impl MessengerEngine {
    pub fn new(me: [u8; 16], cfg: MessengerConfig) -> Self {
        Self {
            me,
            cfg,
            next_id: 1,
            pending: BTreeMap::new(),
            seen: HashMap::new(),
            out: VecDeque::new(),
            stats: MessengerStats::default(),
        }
    }

    pub fn id(&self) -> [u8; 16] {
        self.me
    }

    /// Messages not yet acknowledged.
    pub fn pending(&self) -> usize {
        self.pending.len()
    }

    /// Queue `body` for `route`, addressed to callback `to_cb` there, asking for replies to `from_cb` here.
    pub fn send(
        &mut self,
        now: Instant,
        route: Route,
        to_cb: u64,
        from_cb: u64,
        body: Frames,
    ) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        let mut frames = Vec::with_capacity(body.len() + 6);
        frames.push(HEADER.to_vec());
        frames.push(vec![MSG]);
        frames.push(self.me.to_vec());
        frames.push(u64_frame(id));
        frames.push(u64_frame(to_cb));
        frames.push(u64_frame(from_cb));
        frames.extend(body);
        self.stats.sent += 1;
        self.out.push_back(MsgAction::Transmit {
            route: route.clone(),
            frames: frames.clone(),
        });
        let next_retry = now + Duration::from_millis(self.cfg.retry_ms.max(1));
        self.pending.insert(
            id,
            PendingMsg {
                route,
                frames,
                next_retry,
                attempts: 1,
                from_cb,
            },
        );
        id
    }

    /// A message arrived from `route` (the way back to its sender).
    pub fn on_message(&mut self, route: Route, mut frames: Frames) {
        if frames.len() < 2 || frames[0] != HEADER || frames[1].len() != 1 {
            self.stats.malformed += 1;
            return;
        }
        match frames[1][0] {
            ACK if frames.len() == 3 => match frame_u64(&frames[2]) {
                Some(id) => {
                    if self.pending.remove(&id).is_some() {
                        self.stats.acked += 1;
                    }
                }
                None => self.stats.malformed += 1,
            },
            MSG if frames.len() >= 6 => {
                let sender: Option<[u8; 16]> = frames[2].as_slice().try_into().ok();
                let (Some(sender), Some(id), Some(to_cb), Some(from_cb)) = (
                    sender,
                    frame_u64(&frames[3]),
                    frame_u64(&frames[4]),
                    frame_u64(&frames[5]),
                ) else {
                    self.stats.malformed += 1;
                    return;
                };
                // Acknowledge every copy: the first ACK may have been the one that was lost.
                self.out.push_back(MsgAction::Transmit {
                    route: route.clone(),
                    frames: vec![HEADER.to_vec(), vec![ACK], u64_frame(id)],
                });
                let window = self.cfg.dedup_window;
                if !self
                    .seen
                    .entry(sender)
                    .or_insert_with(|| SeenSet::new(window))
                    .insert(id)
                {
                    self.stats.duplicates += 1;
                    return;
                }
                self.stats.delivered += 1;
                let body = frames.split_off(6);
                self.out.push_back(MsgAction::Deliver {
                    route,
                    callback: to_cb,
                    reply_callback: from_cb,
                    body,
                });
            }
            _ => self.stats.malformed += 1,
        }
    }

    /// Resend what is due.
    pub fn tick(&mut self, now: Instant) {
        let retry = Duration::from_millis(self.cfg.retry_ms.max(1));
        let mut gave_up = Vec::new();
        for (&id, p) in &mut self.pending {
            if p.next_retry > now {
                continue;
            }
            if self.cfg.max_attempts > 0 && p.attempts >= self.cfg.max_attempts {
                gave_up.push(id);
                continue;
            }
            p.attempts += 1;
            p.next_retry = now + retry;
            self.stats.retries += 1;
            self.out.push_back(MsgAction::Transmit {
                route: p.route.clone(),
                frames: p.frames.clone(),
            });
        }
        for id in gave_up {
            if let Some(p) = self.pending.remove(&id) {
                self.stats.gave_up += 1;
                self.out.push_back(MsgAction::GaveUp {
                    msg_id: id,
                    callback: p.from_cb,
                });
            }
        }
    }

    pub fn next_deadline(&self) -> Option<Instant> {
        self.pending.values().map(|p| p.next_retry).min()
    }

    pub fn poll_action(&mut self) -> Option<MsgAction> {
        self.out.pop_front()
    }
}

// ---- the threaded messenger ---------------------------------------------------------------------------------

type ReplyFn = Box<dyn FnOnce(Frames) + Send>;
type HandlerFn = Box<dyn FnMut(&Frames) -> Option<Frames> + Send>;

enum Command {
    Send {
        dest: String,
        body: Frames,
        on_reply: Option<ReplyFn>,
    },
    Listen {
        endpoint: String,
        handler: HandlerFn,
        bound: std::sync::mpsc::Sender<Result<String, MessengerError>>,
    },
    Stop,
}

#[derive(Default)]
struct SharedStats {
    pending: AtomicU64,
    handled: AtomicU64,
    duplicates: AtomicU64,
    retries: AtomicU64,
}

struct Inner {
    tx: crossbeam_channel::Sender<Command>,
    wake: Mutex<zmq::Socket>,
    thread: Mutex<Option<JoinHandle<Result<(), MessengerError>>>>,
    stats: Arc<SharedStats>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        let _ = self.tx.send(Command::Stop);
        if let Ok(w) = self.wake.lock() {
            let _ = w.send(&[][..], zmq::DONTWAIT);
        }
        if let Some(t) = self.thread.lock().ok().and_then(|mut t| t.take()) {
            let _ = t.join();
        }
    }
}

/// Handle to a messenger; cheap to clone and share between threads. Dropping the last clone stops the I/O
/// thread (unacknowledged messages are then abandoned).
#[derive(Clone)]
pub struct Messenger {
    inner: Arc<Inner>,
}

impl Messenger {
    pub fn new(ctx: &zmq::Context, cfg: MessengerConfig) -> Result<Self, MessengerError> {
        let me = *uuid::Uuid::new_v4().as_bytes();
        let addr = format!("inproc://messenger-{}", uuid::Uuid::from_bytes(me).simple());
        let pull = ctx.socket(zmq::PULL)?;
        pull.set_linger(0)?;
        pull.bind(&addr)?;
        let wake = ctx.socket(zmq::PUSH)?;
        wake.set_linger(0)?;
        wake.connect(&addr)?;
        let (tx, rx) = crossbeam_channel::unbounded();
        let stats = Arc::new(SharedStats::default());
        let (c, s) = (ctx.clone(), Arc::clone(&stats));
        let thread = std::thread::Builder::new()
            .name("messenger".into())
            .spawn(move || io_thread(c, pull, rx, me, cfg, s))
            .map_err(|_| MessengerError::Gone)?;
        Ok(Self {
            inner: Arc::new(Inner {
                tx,
                wake: Mutex::new(wake),
                thread: Mutex::new(Some(thread)),
                stats,
            }),
        })
    }

    fn enqueue(&self, cmd: Command) -> Result<(), MessengerError> {
        self.inner.tx.send(cmd).map_err(|_| MessengerError::Gone)?;
        let w = self.inner.wake.lock().map_err(|_| MessengerError::Gone)?;
        // A full wake-up pipe already guarantees a wake-up, so EAGAIN is fine.
        match w.send(&[][..], zmq::DONTWAIT) {
            Ok(()) | Err(zmq::Error::EAGAIN) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    /// Send `body` to the listener at `dest`; `on_reply` runs (on the I/O thread) with the handler's answer.
    pub fn send(
        &self,
        dest: &str,
        body: Frames,
        on_reply: impl FnOnce(Frames) + Send + 'static,
    ) -> Result<(), MessengerError> {
        self.enqueue(Command::Send {
            dest: dest.to_string(),
            body,
            on_reply: Some(Box::new(on_reply)),
        })
    }

    /// Send without asking for a reply (still acknowledged and retried).
    pub fn send_oneway(&self, dest: &str, body: Frames) -> Result<(), MessengerError> {
        self.enqueue(Command::Send {
            dest: dest.to_string(),
            body,
            on_reply: None,
        })
    }

    /// Listen on `endpoint`; `handler` runs on the I/O thread once per distinct message and may answer.
    /// Returns the bound endpoint (resolved when `endpoint` has a wildcard port).
    pub fn listen(
        &self,
        endpoint: &str,
        handler: impl FnMut(&Frames) -> Option<Frames> + Send + 'static,
    ) -> Result<String, MessengerError> {
        let (bound, rx) = std::sync::mpsc::channel();
        self.enqueue(Command::Listen {
            endpoint: endpoint.to_string(),
            handler: Box::new(handler),
            bound,
        })?;
        rx.recv_timeout(Duration::from_secs(10))
            .map_err(|_| MessengerError::Gone)?
    }

    /// Messages sent but not yet acknowledged.
    pub fn pending(&self) -> u64 {
        self.inner.stats.pending.load(Ordering::Relaxed)
    }

    /// Handler invocations, duplicates dropped, and retries so far.
    pub fn counters(&self) -> (u64, u64, u64) {
        let s = &self.inner.stats;
        (
            s.handled.load(Ordering::Relaxed),
            s.duplicates.load(Ordering::Relaxed),
            s.retries.load(Ordering::Relaxed),
        )
    }
}

fn io_thread(
    ctx: zmq::Context,
    wake: zmq::Socket,
    rx: crossbeam_channel::Receiver<Command>,
    me: [u8; 16],
    cfg: MessengerConfig,
    shared: Arc<SharedStats>,
) -> Result<(), MessengerError> {
    let mut rng = rand::rngs::SmallRng::seed_from_u64(cfg.fault_seed);
    let (drop_p, dup_p) = (cfg.drop_probability, cfg.duplicate_probability);
    let mut engine = MessengerEngine::new(me, cfg);
    let mut identity = vec![b'M'];
    identity.extend_from_slice(&me);
    let mut listeners: Vec<(zmq::Socket, HandlerFn)> = Vec::new();
    let mut dealers: Vec<(String, zmq::Socket)> = Vec::new();
    let mut callbacks: HashMap<u64, ReplyFn> = HashMap::new();
    let mut next_cb: u64 = 1;
    loop {
        // Commands first, so a send enqueued before a stop still goes out.
        let now = Instant::now();
        while let Ok(cmd) = rx.try_recv() {
            match cmd {
                Command::Stop => return Ok(()),
                Command::Send {
                    dest,
                    body,
                    on_reply,
                } => {
                    let from_cb = match on_reply {
                        Some(f) => {
                            let id = next_cb;
                            next_cb += 1;
                            callbacks.insert(id, f);
                            id
                        }
                        None => 0,
                    };
                    if !dealers.iter().any(|(ep, _)| *ep == dest) {
                        let s = ctx.socket(zmq::DEALER)?;
                        s.set_linger(0)?;
                        s.set_identity(&identity)?;
                        s.connect(&dest)?;
                        dealers.push((dest.clone(), s));
                    }
                    engine.send(now, Route::Dest(dest), 0, from_cb, body);
                }
                Command::Listen {
                    endpoint,
                    handler,
                    bound,
                } => {
                    let r = (|| {
                        let s = ctx.socket(zmq::ROUTER)?;
                        s.set_linger(0)?;
                        s.set_router_handover(true)?;
                        s.bind(&endpoint)?;
                        let ep = s.get_last_endpoint()?.unwrap_or_else(|_| endpoint.clone());
                        Ok::<_, zmq::Error>((s, ep))
                    })();
                    match r {
                        Ok((s, ep)) => {
                            listeners.push((s, handler));
                            let _ = bound.send(Ok(ep));
                        }
                        Err(source) => {
                            let _ = bound.send(Err(MessengerError::Listen { endpoint, source }));
                        }
                    }
                }
            }
        }
        engine.tick(Instant::now());
        // Run actions until quiet: deliveries can produce replies, which produce transmits.
        while let Some(a) = engine.poll_action() {
            match a {
                MsgAction::Transmit { route, frames } => {
                    if drop_p > 0.0 && rng.gen_bool(drop_p.min(1.0)) {
                        continue;
                    }
                    let copies = if dup_p > 0.0 && rng.gen_bool(dup_p.min(1.0)) {
                        2
                    } else {
                        1
                    };
                    for _ in 0..copies {
                        match &route {
                            Route::Dest(ep) => {
                                if let Some((_, s)) = dealers.iter().find(|(e, _)| e == ep) {
                                    // A full pipe to a dead peer must not block the one I/O thread: retry later.
                                    let _ = s.send_multipart(frames.iter(), zmq::DONTWAIT);
                                }
                            }
                            Route::Peer { listener, identity } => {
                                if let Some((s, _)) = listeners.get(*listener) {
                                    let _ = s.send_multipart(
                                        std::iter::once(identity.as_slice())
                                            .chain(frames.iter().map(Vec::as_slice)),
                                        zmq::DONTWAIT,
                                    );
                                }
                            }
                        }
                    }
                }
                MsgAction::Deliver {
                    route,
                    callback,
                    reply_callback,
                    body,
                } => {
                    shared.handled.fetch_add(1, Ordering::Relaxed);
                    if callback == 0 {
                        let Route::Peer { listener, .. } = &route else {
                            continue;
                        };
                        let Some((_, handler)) = listeners.get_mut(*listener) else {
                            continue;
                        };
                        if let Some(reply) = handler(&body) {
                            if reply_callback != 0 {
                                engine.send(Instant::now(), route, reply_callback, 0, reply);
                            }
                        }
                    } else if let Some(cb) = callbacks.remove(&callback) {
                        cb(body);
                    }
                }
                MsgAction::GaveUp { callback, .. } => {
                    callbacks.remove(&callback);
                }
            }
        }
        shared
            .pending
            .store(engine.pending() as u64, Ordering::Relaxed);
        shared
            .duplicates
            .store(engine.stats.duplicates, Ordering::Relaxed);
        shared
            .retries
            .store(engine.stats.retries, Ordering::Relaxed);

        let now = Instant::now();
        let timeout = engine
            .next_deadline()
            .map_or(Duration::from_millis(100), |d| {
                d.saturating_duration_since(now)
            })
            .min(Duration::from_millis(100));
        let mut items = Vec::with_capacity(1 + listeners.len() + dealers.len());
        items.push(wake.as_poll_item(zmq::POLLIN));
        items.extend(listeners.iter().map(|(s, _)| s.as_poll_item(zmq::POLLIN)));
        items.extend(dealers.iter().map(|(_, s)| s.as_poll_item(zmq::POLLIN)));
        zmq::poll(&mut items, timeout.as_millis() as i64)?;
        let ready: Vec<bool> = items.iter().map(|i| i.is_readable()).collect();
        drop(items);
        if ready[0] {
            while wake.recv_bytes(zmq::DONTWAIT).is_ok() {}
        }
        for (i, (s, _)) in listeners.iter().enumerate() {
            if !ready[1 + i] {
                continue;
            }
            while let Ok(mut frames) = s.recv_multipart(zmq::DONTWAIT) {
                if frames.is_empty() {
                    continue;
                }
                let identity = frames.remove(0);
                engine.on_message(
                    Route::Peer {
                        listener: i,
                        identity,
                    },
                    frames,
                );
            }
        }
        for (i, (ep, s)) in dealers.iter().enumerate() {
            if !ready[1 + listeners.len() + i] {
                continue;
            }
            while let Ok(frames) = s.recv_multipart(zmq::DONTWAIT) {
                engine.on_message(Route::Dest(ep.clone()), frames);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seen_set_in_order_uses_constant_memory() {
        let mut s = SeenSet::new(1024);
        for id in 1..100_000 {
            assert!(s.insert(id));
            assert!(!s.insert(id));
        }
        assert_eq!(s.unseen_len(), 0);
        assert!(!s.insert(0));
    }

    #[test]
    fn seen_set_gaps_and_late_arrivals() {
        let mut s = SeenSet::new(1024);
        assert!(s.insert(5));
        assert_eq!(s.unseen_len(), 4);
        assert!(s.insert(2));
        assert!(!s.insert(2));
        assert!(!s.insert(5));
        for id in [1, 3, 4] {
            assert!(s.insert(id));
        }
        assert_eq!(s.unseen_len(), 0);
    }

    #[test]
    fn seen_set_caps_memory_on_huge_jumps() {
        let mut s = SeenSet::new(10);
        assert!(s.insert(u64::MAX / 2));
        assert!(s.unseen_len() <= 10);
        assert!(!s.insert(1), "ids beyond the window are given up");
        assert!(s.insert(u64::MAX / 2 - 3));
    }

    fn f(parts: &[&[u8]]) -> Frames {
        parts.iter().map(|p| p.to_vec()).collect()
    }

    #[test]
    fn engine_acks_every_copy_delivers_once_and_retries_until_acked() {
        let t = Instant::now();
        let cfg = MessengerConfig {
            retry_ms: 100,
            ..Default::default()
        };
        let mut a = MessengerEngine::new([1; 16], cfg.clone());
        let mut b = MessengerEngine::new([2; 16], cfg);
        let id = a.send(t, Route::Dest("b".into()), 0, 7, f(&[b"hi"]));
        let Some(MsgAction::Transmit { frames, .. }) = a.poll_action() else {
            panic!()
        };
        assert_eq!(frames[0], b"TBM1");
        assert_eq!(frames[3], id.to_be_bytes());
        assert_eq!(frames[5], 7u64.to_be_bytes());
        let back = Route::Peer {
            listener: 0,
            identity: b"Ma".to_vec(),
        };
        b.on_message(back.clone(), frames.clone());
        b.on_message(back.clone(), frames.clone());
        let acts: Vec<_> = std::iter::from_fn(|| b.poll_action()).collect();
        let delivers = acts
            .iter()
            .filter(|x| matches!(x, MsgAction::Deliver { .. }))
            .count();
        let acks: Vec<_> = acts
            .iter()
            .filter_map(|x| match x {
                MsgAction::Transmit { frames, .. } => Some(frames.clone()),
                _ => None,
            })
            .collect();
        assert_eq!(delivers, 1);
        assert_eq!(acks.len(), 2, "every copy is acknowledged");
        assert_eq!(b.stats.duplicates, 1);
        // No ACK yet at A: retried after retry_ms, not before.
        a.tick(t + Duration::from_millis(99));
        assert!(a.poll_action().is_none());
        a.tick(t + Duration::from_millis(100));
        assert!(matches!(a.poll_action(), Some(MsgAction::Transmit { .. })));
        a.on_message(Route::Dest("b".into()), acks[0].clone());
        assert_eq!(a.pending(), 0);
        a.tick(t + Duration::from_secs(10));
        assert!(
            a.poll_action().is_none(),
            "acknowledged messages are never resent"
        );
        a.on_message(Route::Dest("b".into()), f(&[b"TBM1", &[9]]));
        a.on_message(
            Route::Dest("b".into()),
            f(&[b"TBM1", &[1], b"short", b"x", b"y", b"z"]),
        );
        assert_eq!(a.stats.malformed, 2);
    }
}
