//! The messenger engine (sans-IO): message ids, retries until an explicit ACK, duplicate suppression with
//! [`SeenSet`]. It takes received frames and "now is t" and hands back [`MsgAction`]s (frames to transmit,
//! bodies to deliver, give-ups); `crate::io` owns the sockets and runs it.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use tickbox_units::HumanDuration;

pub use tickbox_reliable::Frames;

const HEADER: &[u8] = b"TBM1";
const MSG: u8 = 0x01;
const ACK: u8 = 0x02;

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
    /// An empty set remembering at most `cap` (at least 1) unseen ids.
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

    /// The highest id recorded so far (0 before any).
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
    Peer {
        /// Index of the listener, in the order they were opened.
        listener: usize,
        /// The peer's ROUTER routing identity (`'M'` + its sender UUID for another messenger).
        identity: Vec<u8>,
    },
}

/// What the engine wants done.
#[derive(Debug, PartialEq, Eq)]
pub enum MsgAction {
    /// Send `frames` (a MSG or an ACK) along `route`.
    Transmit {
        /// Where to send.
        route: Route,
        /// The complete message, header included.
        frames: Frames,
    },
    /// Run callback `callback` (0: the handler of `route`'s listener) with `body`; if `reply_callback` is not 0
    /// the handler's answer goes back to `route` addressed to that callback.
    Deliver {
        /// The way back to the sender, for the reply.
        route: Route,
        /// The local callback id (0: the listener's handler).
        callback: u64,
        /// The sender's callback id for a reply, or 0 when none is wanted.
        reply_callback: u64,
        /// The message body.
        body: Frames,
    },
    /// A message was retried `attempts` times without ACK and dropped (only with a finite attempt limit).
    GaveUp {
        /// The id of the abandoned message.
        msg_id: u64,
        /// The local callback that was waiting for its reply (0 if none), so it can be dropped.
        callback: u64,
    },
}

/// Messenger settings.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct MessengerConfig {
    /// Resend an unacknowledged message after this long without its ACK (anything under 1 ms counts as 1 ms).
    pub retry: HumanDuration,
    /// Give up after this many sends (0 = retry forever).
    pub max_attempts: u32,
    /// Unseen ids remembered per sender (see [`SeenSet`]).
    pub dedup_window: usize,
    /// Fault injection for tests and drills: probability (0..=1) that the I/O thread silently drops each
    /// outgoing message or ACK. Keep 0 in production.
    pub drop_probability: f64,
    /// Fault injection: probability (0..=1) that an outgoing message or ACK is sent twice.
    pub duplicate_probability: f64,
    /// Seed of the fault-injection random generator, so a faulty run can be replayed.
    pub fault_seed: u64,
}

impl Default for MessengerConfig {
    fn default() -> Self {
        Self {
            retry: HumanDuration(Duration::from_millis(250)),
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

/// Counters, all monotonic.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MessengerStats {
    /// Messages sent for the first time (each gets a new id).
    pub sent: u64,
    /// Resends of unacknowledged messages.
    pub retries: u64,
    /// Messages whose ACK arrived (later ACKs for the same id are not counted).
    pub acked: u64,
    /// Messages handed to a handler or reply callback, each id once.
    pub delivered: u64,
    /// Copies received again (already delivered); acknowledged but not delivered.
    pub duplicates: u64,
    /// Received messages without our header or with bad id frames, dropped.
    pub malformed: u64,
    /// Messages abandoned after `max_attempts` sends without ACK.
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
    /// Counters since the engine was created.
    pub stats: MessengerStats,
}

fn u64_frame(v: u64) -> Vec<u8> {
    v.to_be_bytes().to_vec()
}

fn frame_u64(f: &[u8]) -> Option<u64> {
    Some(u64::from_be_bytes(f.try_into().ok()?))
}

impl MessengerEngine {
    /// An engine for sender `me` (a UUID, unique per messenger: receivers de-duplicate per sender).
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

    /// This sender's UUID, as carried in every MSG.
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
        let next_retry = now + self.cfg.retry.0.max(Duration::from_millis(1));
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
        let retry = self.cfg.retry.0.max(Duration::from_millis(1));
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

    /// The earliest resend due, or `None` when nothing awaits an ACK.
    pub fn next_deadline(&self) -> Option<Instant> {
        self.pending.values().map(|p| p.next_retry).min()
    }

    /// The next action, in order; call until `None` after every input.
    pub fn poll_action(&mut self) -> Option<MsgAction> {
        self.out.pop_front()
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
            retry: Duration::from_millis(100).into(),
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
        // No ACK yet at A: retried after `retry`, not before.
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
