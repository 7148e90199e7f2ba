//! The proxy's per-publisher sequence accounting: the same [`SequenceTracker`] every other hop keeps (subscriber,
//! recorder, tap), so a message lost between a publisher and the proxy is counted here, where the cache learns
//! that it lacks a value, not only downstream.
//!
//! Besides the tracker's gaps the proxy counts what it missed **before** it first heard a publisher's session: a
//! publisher numbers its data from 1 in every session and a heartbeat repeats the last data sequence, so a first
//! message with sequence `n` says that `n - 1` data messages (or `n` for a heartbeat) went out before the proxy
//! subscribed. The Guide's pathological publisher, started before the proxy, is exactly that case: its one burst
//! of every topic is gone, and the cache holds only what came after.
//!
//! What the cache knows it lacks ([`KnownLoss`]) is those two counts plus the values the cache itself let go
//! (evicted, refused, too large); a snapshot reply carries it in its end marker (protocol version 2,
//! `docs/book/src/lvc-snapshot.md`), so a late joiner is told that its snapshot, although every cached value was
//! sent, is not the whole picture.
//!
//! Sans-IO; the engine calls [`Sequences::on_message`] for every valid upstream frame it decodes (CACHED frames
//! from an LVC upstream are exempt, as at every hop). The totals are published as plain atomic counters
//! ([`SequenceCounters`]) that any reader (the binary's summary, a metrics exporter) loads without a lock.
#![deny(clippy::disallowed_methods, clippy::disallowed_types)]

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use serde::Serialize;
use tickbox_wire::{Kind, MessageRef, SequenceEvent, SequenceTracker};

/// One publisher's account at the proxy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct PublisherAccount {
    /// The publisher id.
    pub publisher: u32,
    /// Its current session (0 for version 1 frames).
    pub session: u64,
    /// The last sequence accounted for in that session.
    pub last_sequence: u64,
    /// Data messages received (every session).
    pub received: u64,
    /// Sequences lost between the publisher and the proxy (gaps the proxy detected, less late arrivals).
    pub missing: u64,
    /// Gaps detected, however many sequences each spanned.
    pub gap_events: u64,
    /// Data messages the publisher sent in a session before the proxy first heard that session (it subscribed
    /// late, or the publisher's first messages were lost before the connection was up).
    pub missed_before_join: u64,
    /// Messages received again.
    pub duplicates: u64,
    /// Session changes seen after the first message.
    pub restarts: u64,
    /// Implausible jumps (forged or corrupt headers): counted, not believed.
    pub anomalies: u64,
}

/// Totals over every publisher, as plain counters another thread reads without a lock (relaxed loads: each is
/// exact on its own; they are published together every few tens of milliseconds by the proxy thread).
#[derive(Debug, Default)]
pub struct SequenceCounters {
    /// Publishers tracked.
    pub publishers: AtomicU64,
    /// Data messages received from them.
    pub received: AtomicU64,
    /// Sequences lost between publishers and the proxy.
    pub missing: AtomicU64,
    /// Gaps detected.
    pub gap_events: AtomicU64,
    /// Data messages sent before the proxy first heard their session.
    pub missed_before_join: AtomicU64,
    /// Duplicates.
    pub duplicates: AtomicU64,
    /// Publisher restarts.
    pub restarts: AtomicU64,
    /// Implausible jumps.
    pub anomalies: AtomicU64,
    /// Messages from publishers beyond the tracker's bound (not accounted).
    pub untracked: AtomicU64,
}

/// The totals at one moment (a copy of [`SequenceCounters`], or the engine's own).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct SequenceTotals {
    /// Publishers tracked.
    pub publishers: u64,
    /// Data messages received from them.
    pub received: u64,
    /// Sequences lost between publishers and the proxy.
    pub missing: u64,
    /// Gaps detected.
    pub gap_events: u64,
    /// Data messages sent before the proxy first heard their session.
    pub missed_before_join: u64,
    /// Duplicates.
    pub duplicates: u64,
    /// Publisher restarts.
    pub restarts: u64,
    /// Implausible jumps.
    pub anomalies: u64,
    /// Messages from publishers beyond the tracker's bound.
    pub untracked: u64,
}

impl SequenceCounters {
    /// Stores `totals` (called by the proxy thread when it publishes its counters).
    pub fn store(&self, t: &SequenceTotals) {
        let set = |c: &AtomicU64, v: u64| c.store(v, Ordering::Relaxed);
        set(&self.publishers, t.publishers);
        set(&self.received, t.received);
        set(&self.missing, t.missing);
        set(&self.gap_events, t.gap_events);
        set(&self.missed_before_join, t.missed_before_join);
        set(&self.duplicates, t.duplicates);
        set(&self.restarts, t.restarts);
        set(&self.anomalies, t.anomalies);
        set(&self.untracked, t.untracked);
    }

    /// The counters as they are now.
    pub fn load(&self) -> SequenceTotals {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        SequenceTotals {
            publishers: get(&self.publishers),
            received: get(&self.received),
            missing: get(&self.missing),
            gap_events: get(&self.gap_events),
            missed_before_join: get(&self.missed_before_join),
            duplicates: get(&self.duplicates),
            restarts: get(&self.restarts),
            anomalies: get(&self.anomalies),
            untracked: get(&self.untracked),
        }
    }
}

/// What the proxy thread publishes of its accounts for other threads: the totals as atomics, and every
/// publisher's account (a copy, refreshed with the proxy's other counters, never per message).
#[derive(Debug, Default)]
pub struct SharedAccounts {
    counters: Arc<SequenceCounters>,
    publishers: Mutex<Vec<PublisherAccount>>,
}

impl SharedAccounts {
    /// Publishes `sequences` (from the proxy thread).
    pub fn publish(&self, sequences: &Sequences) {
        self.counters.store(&sequences.totals());
        let mut held = self.publishers.lock().unwrap_or_else(|e| e.into_inner());
        held.clear();
        held.extend(sequences.accounts());
    }

    /// The totals, as counters a reader loads at will.
    pub fn counters(&self) -> Arc<SequenceCounters> {
        Arc::clone(&self.counters)
    }

    /// Every publisher's account as last published.
    pub fn publishers(&self) -> Vec<PublisherAccount> {
        self.publishers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}

/// What the cache knows it lacks, as a snapshot's end marker (version 2) reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct KnownLoss {
    /// Publisher messages the proxy never received: gaps plus what was sent before it first heard a session.
    /// Their topics may lack their last value, or hold an older one.
    pub missed: u64,
    /// Values the cache let go: keys evicted or refused by its bounds, values too large to cache.
    pub dropped: u64,
}

impl KnownLoss {
    /// Whether the cache knows of nothing it lacks.
    pub fn is_none(&self) -> bool {
        self.missed == 0 && self.dropped == 0
    }
}

/// The tracker and the "missed before join" counts beside it.
#[derive(Debug)]
pub struct Sequences {
    tracker: SequenceTracker,
    /// Per publisher: data messages sent before the proxy first heard each of its sessions. Holds only publishers
    /// the tracker tracks (so it is bounded as the tracker is).
    before_join: HashMap<u32, u64>,
    before_join_total: u64,
    /// Warnings logged so far (at the 1st, 2nd, 4th, 8th... loss).
    losses: u64,
}

impl Default for Sequences {
    fn default() -> Self {
        Self::new()
    }
}

impl Sequences {
    /// Nothing accounted yet; the tracker's default bounds.
    pub fn new() -> Self {
        Sequences {
            tracker: SequenceTracker::new(),
            before_join: HashMap::new(),
            before_join_total: 0,
            losses: 0,
        }
    }

    /// Accounts one valid upstream frame.
    #[inline]
    pub fn on_message(&mut self, msg: &MessageRef<'_>) {
        let event = self.tracker.on_message(msg);
        let (publisher, sequence) = match event {
            SequenceEvent::InOrder | SequenceEvent::Exempt | SequenceEvent::Duplicate { .. } => {
                return
            }
            SequenceEvent::First {
                publisher,
                sequence,
                ..
            }
            | SequenceEvent::Restart {
                publisher,
                sequence,
                ..
            } => (publisher, sequence),
            SequenceEvent::Gap { .. } => {
                self.log_loss(&event);
                return;
            }
            _ => return,
        };
        // Data is numbered from 1 in every session; a heartbeat repeats the last data sequence sent. A first
        // sequence beyond a believable jump (a forged header) is not believed either.
        let before = match msg.header().kind {
            Kind::Heartbeat => sequence,
            Kind::Gap => 0,
            _ => sequence.saturating_sub(1),
        };
        if before == 0 || before >= self.tracker.max_plausible_jump() {
            return;
        }
        *self.before_join.entry(publisher).or_default() += before;
        self.before_join_total += before;
        self.log_loss(&event);
    }

    fn log_loss(&mut self, event: &SequenceEvent) {
        self.losses += 1;
        if !self.losses.is_power_of_two() {
            return;
        }
        match *event {
            SequenceEvent::Gap {
                publisher,
                first_missing,
                last_missing,
                ..
            } => tracing::warn!(
                publisher,
                first_missing,
                last_missing,
                total = self.losses,
                "lvc: a gap in a publisher's sequence: those values never reached the cache"
            ),
            SequenceEvent::First {
                publisher,
                sequence,
                ..
            }
            | SequenceEvent::Restart {
                publisher,
                sequence,
                ..
            } => tracing::warn!(
                publisher,
                sequence,
                total = self.losses,
                "lvc: first heard this publisher's session at sequence {sequence}: what it sent before never \
                 reached the cache (the publisher started first; `feed --wait-for-subscribers` holds it back)"
            ),
            _ => {}
        }
    }

    /// The totals.
    pub fn totals(&self) -> SequenceTotals {
        let t = self.tracker.totals();
        SequenceTotals {
            publishers: t.publishers,
            received: t.received,
            missing: t.missing,
            gap_events: t.gap_events,
            missed_before_join: self.before_join_total,
            duplicates: t.duplicates,
            restarts: t.restarts,
            anomalies: t.anomalies,
            untracked: t.untracked,
        }
    }

    /// Sequences the proxy never received: gaps plus what was sent before it first heard a session.
    pub fn missed(&self) -> u64 {
        self.tracker
            .totals()
            .missing
            .saturating_add(self.before_join_total)
    }

    /// Every publisher's account, in order of first appearance.
    pub fn publishers(&self) -> Vec<PublisherAccount> {
        self.accounts().collect()
    }

    fn accounts(&self) -> impl Iterator<Item = PublisherAccount> + '_ {
        self.tracker.ledgers().map(|l| PublisherAccount {
            publisher: l.publisher,
            session: l.session,
            last_sequence: l.last_sequence,
            received: l.received,
            missing: l.missing,
            gap_events: l.gap_events,
            missed_before_join: self.before_join.get(&l.publisher).copied().unwrap_or(0),
            duplicates: l.duplicates,
            restarts: l.restarts,
            anomalies: l.anomalies,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tickbox_wire::{encode_to_vec, Flags, Header, Quote};

    fn frame(kind: Kind, publisher: u32, session: u64, sequence: u64) -> Vec<u8> {
        let mut header = Header::live(kind, publisher, sequence, 1);
        header.session = session;
        let payload = match kind {
            Kind::Heartbeat => tickbox_wire::Heartbeat::default().into(),
            _ => Quote::default().into(),
        };
        encode_to_vec("Q.XNAS.AAPL", &header, &payload).unwrap()
    }

    fn feed(s: &mut Sequences, f: &[u8]) {
        s.on_message(&MessageRef::decode(f).unwrap());
    }

    #[test]
    fn a_publisher_heard_from_its_first_message_owes_nothing() {
        let mut s = Sequences::new();
        for seq in 1..=5 {
            feed(&mut s, &frame(Kind::Quote, 1, 7, seq));
        }
        assert_eq!(s.missed(), 0);
        let t = s.totals();
        assert_eq!((t.publishers, t.received, t.missing), (1, 5, 0));
    }

    #[test]
    fn gaps_and_a_late_join_are_what_the_cache_lacks() {
        let mut s = Sequences::new();
        // Joined after 2,000 messages of publisher 1 (its burst), then lost 3 of them.
        feed(&mut s, &frame(Kind::Quote, 1, 7, 2001));
        feed(&mut s, &frame(Kind::Quote, 1, 7, 2005));
        // Publisher 2 first heard through a heartbeat after 10 data messages.
        feed(&mut s, &frame(Kind::Heartbeat, 2, 9, 10));
        feed(&mut s, &frame(Kind::Quote, 2, 9, 11));
        let t = s.totals();
        assert_eq!(t.missing, 3);
        assert_eq!(t.gap_events, 1);
        assert_eq!(t.missed_before_join, 2010);
        assert_eq!(s.missed(), 2013);
        let p = s.publishers();
        assert_eq!(p.len(), 2);
        assert_eq!(
            (p[0].publisher, p[0].missing, p[0].missed_before_join),
            (1, 3, 2000)
        );
        assert_eq!(
            (p[1].publisher, p[1].missing, p[1].missed_before_join),
            (2, 0, 10)
        );
    }

    #[test]
    fn a_restart_from_one_owes_nothing_and_cached_values_are_exempt() {
        let mut s = Sequences::new();
        feed(&mut s, &frame(Kind::Quote, 1, 7, 1));
        feed(&mut s, &frame(Kind::Quote, 1, 8, 1));
        let mut cached = frame(Kind::Quote, 3, 1, 500);
        crate::mark_cached(&mut cached).unwrap();
        assert!(MessageRef::decode(&cached)
            .unwrap()
            .header()
            .flags
            .contains(Flags::CACHED));
        feed(&mut s, &cached);
        assert_eq!(s.missed(), 0);
        assert_eq!(s.totals().restarts, 1);
        assert_eq!(s.totals().publishers, 1, "a cached value opens no account");
        // A restart that begins past 1 lost its first messages.
        feed(&mut s, &frame(Kind::Quote, 1, 9, 4));
        assert_eq!(s.missed(), 3);
    }

    #[test]
    fn the_shared_counters_carry_the_totals() {
        let mut s = Sequences::new();
        feed(&mut s, &frame(Kind::Quote, 1, 7, 3));
        let shared = SequenceCounters::default();
        shared.store(&s.totals());
        assert_eq!(shared.load(), s.totals());
        assert_eq!(shared.missed_before_join.load(Ordering::Relaxed), 2);
    }
}
