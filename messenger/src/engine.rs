//! The messenger engine (sans-IO): message ids, retries until an explicit ACK, duplicate suppression with
//! [`SeenSet`]. It takes received frames and "now is t" and hands back [`MsgAction`]s (frames to transmit,
//! bodies to deliver, give-ups); `crate::io` owns the sockets and runs it.
#![deny(clippy::disallowed_methods, clippy::disallowed_types)]

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use tickbox_units::{ByteSize, HumanDuration};

pub use tickbox_reliable::Frames;

const HEADER: &[u8] = b"TBM1";
const MSG: u8 = 0x01;
const ACK: u8 = 0x02;

// ---- duplicate detection ------------------------------------------------------------------------------------

/// What [`SeenSet::check`] found out about an id.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Seen {
    /// Not seen before: deliver it.
    New,
    /// Inside the window and already seen: a duplicate.
    Duplicate,
    /// At or below the low-water mark (or 0): treated as seen, whether it is a duplicate or a first copy delayed
    /// past the window; the two cannot be told apart once the window has moved on.
    Stale,
}

/// The message ids seen from one sender (ids ≥ 1), in fixed memory: a bitmap of the last `window` ids up to the
/// highest one seen, above a low-water mark.
///
/// Guarantee: an id is reported [`Seen::New`] at most once. Every id above `max_seen() - window` is answered
/// exactly (new the first time, duplicate after); every id at or below that low-water mark is [`Seen::Stale`],
/// so a first copy delayed behind more than `window` newer ids is never delivered. A huge id (a forged header, or
/// a sender that sent many messages elsewhere) slides the window up to it instead of filling memory: the memory
/// is `window` bits whatever ids arrive.
#[derive(Clone, Debug)]
pub struct SeenSet {
    /// Highest id seen (0 before any).
    max: u64,
    /// Ids at or below this are stale: `max - window`, never lower than 0.
    floor: u64,
    /// Unseen ids in `floor + 1..=max`.
    unseen: u64,
    /// Bit `id % bits` is set when `id` (in `floor + 1..=max`) was seen.
    bits: Box<[u64]>,
    window: u64,
}

impl SeenSet {
    /// An empty set with a window of `window` ids (at least 1); it holds `window` bits rounded up to 64.
    pub fn new(window: usize) -> Self {
        let window = window.max(1) as u64;
        let words = window.div_ceil(64) as usize;
        Self {
            max: 0,
            floor: 0,
            unseen: 0,
            bits: vec![0u64; words].into_boxed_slice(),
            window,
        }
    }

    fn slot(&self, id: u64) -> (usize, u64) {
        let bit = id % (self.bits.len() as u64 * 64);
        ((bit / 64) as usize, 1u64 << (bit % 64))
    }

    fn get(&self, id: u64) -> bool {
        let (w, m) = self.slot(id);
        self.bits[w] & m != 0
    }

    fn put(&mut self, id: u64, on: bool) {
        let (w, m) = self.slot(id);
        if on {
            self.bits[w] |= m;
        } else {
            self.bits[w] &= !m;
        }
    }

    /// Applies `op` to the bits of ids `lo..=hi` (at most one ring length), a word at a time: a forged id just
    /// inside the window costs `window / 64` word operations, not `window` bit operations.
    fn range_words(&mut self, lo: u64, hi: u64, mut op: impl FnMut(&mut u64, u64)) {
        let ring = self.bits.len() as u64 * 64;
        let mut pos = lo % ring;
        let mut left = hi - lo + 1;
        while left > 0 {
            let bit = pos % 64;
            let take = (64 - bit).min(left);
            let mask = if take == 64 {
                u64::MAX
            } else {
                ((1u64 << take) - 1) << bit
            };
            op(&mut self.bits[(pos / 64) as usize], mask);
            pos = (pos + take) % ring;
            left -= take;
        }
    }

    /// Record `id` and say whether it was new.
    pub fn check(&mut self, id: u64) -> Seen {
        if id <= self.floor {
            return Seen::Stale;
        }
        if id <= self.max {
            if self.get(id) {
                return Seen::Duplicate;
            }
            self.put(id, true);
            self.unseen -= 1;
            return Seen::New;
        }
        let new_floor = id.saturating_sub(self.window);
        if new_floor >= self.max {
            // Everything remembered falls below the new low-water mark.
            self.bits.fill(0);
            self.unseen = id - 1 - new_floor;
        } else {
            // Ids leaving the window (all ≤ max) stop counting as unseen; then the slots of the ids skipped
            // between the old max and `id` are cleared (they may hold bits of ids one ring-length lower).
            if new_floor > self.floor {
                let mut seen_gone = 0u64;
                self.range_words(self.floor + 1, new_floor, |w, m| {
                    seen_gone += u64::from((*w & m).count_ones())
                });
                self.unseen -= (new_floor - self.floor) - seen_gone;
            }
            if id > self.max + 1 {
                self.range_words(self.max + 1, id - 1, |w, m| *w &= !m);
            }
            self.unseen += id - 1 - self.max;
        }
        self.put(id, true);
        self.floor = self.floor.max(new_floor);
        self.max = id;
        Seen::New
    }

    /// Record `id`; `true` if it had not been seen before (see [`SeenSet::check`]).
    pub fn insert(&mut self, id: u64) -> bool {
        self.check(id) == Seen::New
    }

    /// Ids inside the window, below the highest one, not seen yet.
    pub fn unseen_len(&self) -> usize {
        self.unseen as usize
    }

    /// The highest id recorded so far (0 before any).
    pub fn max_seen(&self) -> u64 {
        self.max
    }

    /// Heap bytes this set holds (constant: the bitmap).
    pub fn heap_bytes(&self) -> usize {
        self.bits.len() * 8
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
    /// Duplicate-suppression window per sender, in ids (see [`SeenSet`]): `dedup_window / 8` bytes per sender.
    /// A message delayed behind more than this many newer ids from its sender is acknowledged but not delivered
    /// (counted as `stale`).
    pub dedup_window: usize,
    /// Senders remembered for duplicate suppression. A new sender beyond this evicts the least recently heard
    /// one, if that one has been silent for `sender_idle`; otherwise the newcomer's messages are refused
    /// unacknowledged (counted), so it retries later and nothing is delivered twice.
    pub max_senders: usize,
    /// How long a sender must have been silent before its duplicate-suppression state may be evicted. Keep it well
    /// above the longest time a sender keeps retrying one message: a sender evicted while it still retries would
    /// have that message delivered again.
    pub sender_idle: HumanDuration,
    /// Unacknowledged messages kept for retry; a send beyond it is refused (reported as a give-up).
    pub max_pending: usize,
    /// Bytes (frames, header included) of unacknowledged messages kept for retry; a send beyond it is refused.
    pub max_pending_bytes: ByteSize,
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
            max_senders: 1024,
            sender_idle: HumanDuration(Duration::from_secs(60)),
            max_pending: 65_536,
            max_pending_bytes: ByteSize(64 << 20),
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
    bytes: usize,
}

struct Sender {
    seen: SeenSet,
    /// `None`: heard only before the engine was given any time.
    last_heard: Option<Instant>,
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
    /// Copies at or below their sender's window (see [`SeenSet`]): acknowledged, not delivered. Either duplicates
    /// or first copies delayed past the window; only the sender's give-ups could tell.
    pub stale: u64,
    /// Messages from a new sender refused (not acknowledged, not delivered) because the sender table was full of
    /// senders heard within `sender_idle`.
    pub senders_refused: u64,
    /// Senders whose duplicate-suppression state was evicted to make room for a new one.
    pub senders_evicted: u64,
    /// Sends refused because `max_pending` or `max_pending_bytes` was reached (each also reported as a give-up).
    pub pending_refused: u64,
}

/// Sans-IO messenger: message ids, retries until ACK, duplicate suppression.
pub struct MessengerEngine {
    me: [u8; 16],
    cfg: MessengerConfig,
    next_id: u64,
    pending: BTreeMap<u64, PendingMsg>,
    pending_bytes: usize,
    seen: HashMap<[u8; 16], Sender>,
    /// The latest time given to `send` or `handle_timeout`: how recently a sender was heard is measured against it,
    /// so the engine never reads a clock itself.
    now: Option<Instant>,
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
            pending_bytes: 0,
            seen: HashMap::new(),
            now: None,
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

    /// Bytes of the messages not yet acknowledged.
    pub fn pending_bytes(&self) -> usize {
        self.pending_bytes
    }

    /// Senders whose duplicate-suppression state is kept (at most `max_senders`).
    pub fn senders(&self) -> usize {
        self.seen.len()
    }

    /// Heap bytes of the duplicate-suppression state (at most `max_senders` windows).
    pub fn dedup_bytes(&self) -> usize {
        self.seen
            .values()
            .map(|s| s.seen.heap_bytes())
            .sum::<usize>()
            + self.seen.capacity() * std::mem::size_of::<([u8; 16], Sender)>()
    }

    fn advance(&mut self, now: Instant) {
        self.now = Some(self.now.map_or(now, |t| t.max(now)));
    }

    /// Queue `body` for `route`, addressed to callback `to_cb` there, asking for replies to `from_cb` here.
    /// Returns the message id. When `max_pending` or `max_pending_bytes` would be exceeded the message is not
    /// sent: a [`MsgAction::GaveUp`] for it follows at once.
    pub fn send(
        &mut self,
        now: Instant,
        route: Route,
        to_cb: u64,
        from_cb: u64,
        body: Frames,
    ) -> u64 {
        self.advance(now);
        let id = self.next_id;
        self.next_id += 1;
        let bytes = HEADER.len() + 1 + 16 + 3 * 8 + body.iter().map(Vec::len).sum::<usize>();
        if self.pending.len() >= self.cfg.max_pending
            || self.pending_bytes.saturating_add(bytes) as u64 > self.cfg.max_pending_bytes.0
        {
            self.stats.pending_refused += 1;
            self.out.push_back(MsgAction::GaveUp {
                msg_id: id,
                callback: from_cb,
            });
            return id;
        }
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
        self.pending_bytes += bytes;
        self.pending.insert(
            id,
            PendingMsg {
                route,
                frames,
                next_retry,
                attempts: 1,
                from_cb,
                bytes,
            },
        );
        id
    }

    /// A message arrived from `route` (the way back to its sender).
    pub fn handle_input(&mut self, route: Route, mut frames: Frames) {
        if frames.len() < 2 || frames[0] != HEADER || frames[1].len() != 1 {
            self.stats.malformed += 1;
            return;
        }
        match frames[1][0] {
            ACK if frames.len() == 3 => match frame_u64(&frames[2]) {
                Some(id) => {
                    if let Some(p) = self.pending.remove(&id) {
                        self.pending_bytes -= p.bytes;
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
                let Some(seen) = self.sender(sender) else {
                    // No room to remember this sender: without an ACK it retries, and is heard once room frees.
                    self.stats.senders_refused += 1;
                    return;
                };
                let outcome = seen.check(id);
                // Acknowledge every copy: the first ACK may have been the one that was lost.
                self.out.push_back(MsgAction::Transmit {
                    route: route.clone(),
                    frames: vec![HEADER.to_vec(), vec![ACK], u64_frame(id)],
                });
                match outcome {
                    Seen::New => {}
                    Seen::Duplicate => {
                        self.stats.duplicates += 1;
                        return;
                    }
                    Seen::Stale => {
                        self.stats.stale += 1;
                        return;
                    }
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

    /// The duplicate-suppression state of `sender`, made room for if new; `None` when the table is full of
    /// senders heard within `sender_idle`.
    fn sender(&mut self, sender: [u8; 16]) -> Option<&mut SeenSet> {
        let now = self.now;
        if !self.seen.contains_key(&sender) {
            if self.seen.len() >= self.cfg.max_senders.max(1) {
                // Only a new sender pays for this scan, and only while the table is full.
                let (&oldest, s) = self.seen.iter().min_by_key(|(_, s)| s.last_heard)?;
                let idle = match (now, s.last_heard) {
                    (Some(n), Some(l)) => n.saturating_duration_since(l),
                    // Before any `send` or `handle_timeout` no one can be shown to be idle.
                    (None, _) => Duration::ZERO,
                    (Some(_), None) => Duration::MAX,
                };
                if idle < self.cfg.sender_idle.0 {
                    return None;
                }
                self.seen.remove(&oldest);
                self.stats.senders_evicted += 1;
            }
            self.seen.insert(
                sender,
                Sender {
                    seen: SeenSet::new(self.cfg.dedup_window),
                    last_heard: now,
                },
            );
        }
        let s = self.seen.get_mut(&sender)?;
        if now.is_some() {
            s.last_heard = s.last_heard.max(now);
        }
        Some(&mut s.seen)
    }

    /// Resend what is due.
    pub fn handle_timeout(&mut self, now: Instant) {
        self.advance(now);
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
                self.pending_bytes -= p.bytes;
                self.stats.gave_up += 1;
                self.out.push_back(MsgAction::GaveUp {
                    msg_id: id,
                    callback: p.from_cb,
                });
            }
        }
    }

    /// The earliest resend due, or `None` when nothing awaits an ACK.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.pending.values().map(|p| p.next_retry).min()
    }

    /// The next action, in order; call until `None` after every input.
    pub fn poll_output(&mut self) -> Option<MsgAction> {
        self.out.pop_front()
    }
}

#[cfg(test)]
// A test reads the clock once for an origin and moves simulated time on from there; the engine never reads it.
#[allow(clippy::disallowed_methods)]
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
        let Some(MsgAction::Transmit { frames, .. }) = a.poll_output() else {
            panic!()
        };
        assert_eq!(frames[0], b"TBM1");
        assert_eq!(frames[3], id.to_be_bytes());
        assert_eq!(frames[5], 7u64.to_be_bytes());
        let back = Route::Peer {
            listener: 0,
            identity: b"Ma".to_vec(),
        };
        b.handle_input(back.clone(), frames.clone());
        b.handle_input(back.clone(), frames.clone());
        let acts: Vec<_> = std::iter::from_fn(|| b.poll_output()).collect();
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
        a.handle_timeout(t + Duration::from_millis(99));
        assert!(a.poll_output().is_none());
        a.handle_timeout(t + Duration::from_millis(100));
        assert!(matches!(a.poll_output(), Some(MsgAction::Transmit { .. })));
        a.handle_input(Route::Dest("b".into()), acks[0].clone());
        assert_eq!(a.pending(), 0);
        a.handle_timeout(t + Duration::from_secs(10));
        assert!(
            a.poll_output().is_none(),
            "acknowledged messages are never resent"
        );
        a.handle_input(Route::Dest("b".into()), f(&[b"TBM1", &[9]]));
        a.handle_input(
            Route::Dest("b".into()),
            f(&[b"TBM1", &[1], b"short", b"x", b"y", b"z"]),
        );
        assert_eq!(a.stats.malformed, 2);
    }
}
