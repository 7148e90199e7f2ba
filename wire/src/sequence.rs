//! Per-publisher sequence accounting as a sans-IO engine, shared by every hop that must account for what it
//! received: the Black Box subscriber, the recorder, the tap inspector.
//!
//! Rules (the same at every hop, so their figures agree):
//! - Data messages carry a gap-free sequence per publisher *session*; a heartbeat repeats the last data sequence
//!   sent, so a lost trailing message is noticed while the feed is quiet.
//! - A change of [`Header::session`] is a restart, whatever the new sequence: counting starts again from it.
//!   Version 1 frames carry no session (0); for them a sequence that goes backwards is taken as a restart.
//! - Within a session, a sequence at or below the last one is a duplicate, unless it fills the most recent gap,
//!   when it is a late (reordered) arrival and no longer counts as missing.
//! - A [`Kind::Gap`] notice (written by a recorder, re-published by a replay) names sequences the journal lacks:
//!   they are *recorded* gaps, counted apart from this hop's own losses.
//! - LVC cached values are out of sequence by design and never consume or move a sequence.
//! - A jump beyond [`SequenceTracker::max_plausible_jump`] (a forged or corrupt header) is an anomaly: counted,
//!   not believed, and the tracked sequence does not move.
//! - The publisher table is bounded ([`SequenceTracker::with_bounds`]); messages from publishers beyond it are
//!   counted as untracked. Lookup is O(1) whatever the table holds, so a flood of forged publisher ids costs a
//!   hash probe per message, not a scan of the table.
#![deny(clippy::disallowed_methods, clippy::disallowed_types)]

use std::collections::hash_map::RandomState;
use std::collections::HashMap;
use std::hash::{BuildHasher, Hasher};

use serde::Serialize;

use crate::frame::MessageRef;
use crate::header::{Flags, Header};
use crate::kind::Kind;
use crate::payload::Payload;

/// Default bound on a believable jump: about three hours of a 100k msg/s publisher lost at once.
pub const DEFAULT_MAX_PLAUSIBLE_JUMP: u64 = 1 << 30;
/// Default bound on tracked publishers (a deployment has a handful; the bound only stops a flood of forged ids).
pub const DEFAULT_MAX_PUBLISHERS: usize = 4096;

/// What one message says about its publisher's sequence.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum SequenceEvent {
    /// The next expected sequence (or a heartbeat confirming nothing was missed).
    InOrder,
    /// First message from this publisher: nothing to compare with (we may have joined late).
    First {
        /// The publisher id from the header.
        publisher: u32,
        /// Its session (0 for version 1 frames).
        session: u64,
        /// The sequence it arrived with; accounting continues from here.
        sequence: u64,
    },
    /// Sequences `first_missing..=last_missing` never reached this hop.
    Gap {
        /// The publisher id from the header.
        publisher: u32,
        /// The session the gap is in.
        session: u64,
        /// First lost sequence (inclusive).
        first_missing: u64,
        /// Last lost sequence (inclusive).
        last_missing: u64,
    },
    /// A gap notice: the journal this stream was replayed from lacks `first_missing..=last_missing`.
    RecordedGap {
        /// The publisher id from the header.
        publisher: u32,
        /// The session the gap is in.
        session: u64,
        /// First sequence the journal lacks that this hop had not already accounted for (inclusive).
        first_missing: u64,
        /// Last sequence the journal lacks (inclusive): the notice's header sequence.
        last_missing: u64,
    },
    /// The publisher restarted (new session, or a version 1 sequence going backwards). Counting starts again.
    Restart {
        /// The publisher id from the header.
        publisher: u32,
        /// The session that ended.
        previous_session: u64,
        /// The last sequence accounted for in that session.
        previous: u64,
        /// The new session.
        session: u64,
        /// The sequence the new session arrived with.
        sequence: u64,
    },
    /// A sequence already received (or already accounted for) in this session.
    Duplicate {
        /// The publisher id from the header.
        publisher: u32,
        /// The repeated sequence.
        sequence: u64,
    },
    /// A late arrival inside the most recent gap: it is received after all, so it no longer counts as missing.
    Reordered {
        /// The publisher id from the header.
        publisher: u32,
        /// The late sequence, which was counted missing until now.
        sequence: u64,
    },
    /// An implausible jump (forged or corrupt header): counted, not believed; the sequence does not move.
    Anomaly {
        /// The publisher id from the header.
        publisher: u32,
        /// The last sequence accounted for, which stays as it was.
        last: u64,
        /// The implausible sequence received.
        sequence: u64,
    },
    /// An LVC cached value: out of sequence by design, ignored.
    Exempt,
    /// The publisher table is full; this publisher is not tracked.
    Untracked {
        /// The publisher id from the header.
        publisher: u32,
    },
}

impl SequenceEvent {
    /// Messages this hop lost, for a [`SequenceEvent::Gap`]; 0 otherwise.
    pub fn missing(&self) -> u64 {
        match *self {
            SequenceEvent::Gap {
                first_missing,
                last_missing,
                ..
            } => span(first_missing, last_missing),
            _ => 0,
        }
    }

    /// True for the events a `gap_policy = "die"` owner must act on: this hop's own losses.
    pub fn is_loss(&self) -> bool {
        matches!(self, SequenceEvent::Gap { .. })
    }
}

fn span(first: u64, last: u64) -> u64 {
    last.saturating_sub(first).saturating_add(1)
}

/// One publisher's account at this hop.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct PublisherLedger {
    /// The publisher id this account is for.
    pub publisher: u32,
    /// The current session (0: unknown, version 1 frames).
    pub session: u64,
    /// First data sequence seen in the current session (0 before any data).
    pub first_sequence: u64,
    /// Last sequence accounted for in the current session.
    pub last_sequence: u64,
    /// Data messages received (every session).
    pub received: u64,
    /// Sequences this hop lost (gaps it detected, less late arrivals).
    pub missing: u64,
    /// Sequences named by gap notices: lost before the journal this stream came from.
    pub recorded_missing: u64,
    /// Data messages received again (or behind what was already accounted for), in every session.
    pub duplicates: u64,
    /// Late arrivals that filled the most recent gap; each one was subtracted from `missing`.
    pub reordered: u64,
    /// Session changes (and version 1 sequences going backwards) seen after the first message.
    pub restarts: u64,
    /// Implausible jumps and malformed gap notices: counted, not believed.
    pub anomalies: u64,
    /// Gaps this hop detected ([`SequenceEvent::Gap`] events), however many sequences each spanned.
    pub gap_events: u64,
    /// Gap notices that counted toward `recorded_missing`.
    pub recorded_gap_events: u64,
}

/// Totals over every publisher, plus what could not be attributed to one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct SequenceTotals {
    /// Publishers tracked (at most the tracker's bound).
    pub publishers: u64,
    /// Sum of [`PublisherLedger::received`].
    pub received: u64,
    /// Sum of [`PublisherLedger::missing`]: sequences this hop lost.
    pub missing: u64,
    /// Sum of [`PublisherLedger::recorded_missing`]: sequences lost before the journal replayed here.
    pub recorded_missing: u64,
    /// Sum of [`PublisherLedger::duplicates`].
    pub duplicates: u64,
    /// Sum of [`PublisherLedger::reordered`].
    pub reordered: u64,
    /// Sum of [`PublisherLedger::restarts`].
    pub restarts: u64,
    /// Sum of [`PublisherLedger::anomalies`].
    pub anomalies: u64,
    /// Sum of [`PublisherLedger::gap_events`].
    pub gap_events: u64,
    /// Sum of [`PublisherLedger::recorded_gap_events`].
    pub recorded_gap_events: u64,
    /// Messages from publishers beyond the table's bound.
    pub untracked: u64,
    /// LVC cached values seen (exempt from accounting).
    pub cached: u64,
}

#[derive(Debug, Clone, Copy)]
struct State {
    ledger: PublisherLedger,
    /// The most recent gap this hop detected (first, last), so a late arrival can be recognised.
    last_gap: Option<(u64, u64)>,
}

/// Hashes publisher ids for the slot index. Ids come off the network, so the hash is keyed per tracker: a
/// sender who cannot learn the keys cannot pick ids that collide, which keeps every probe short. A folded
/// 64×64→128 multiply mixes both halves, so the bucket bits and the tag bits of the table are both well spread,
/// at a fraction of SipHash's cost.
#[derive(Debug, Clone, Copy)]
struct KeyedIds {
    k0: u64,
    k1: u64,
}

impl KeyedIds {
    fn random() -> Self {
        let state = RandomState::new();
        let mut a = state.build_hasher();
        a.write_u8(0);
        let mut b = state.build_hasher();
        b.write_u8(1);
        KeyedIds {
            k0: a.finish(),
            k1: b.finish() | 1,
        }
    }
}

impl BuildHasher for KeyedIds {
    type Hasher = IdHasher;
    #[inline]
    fn build_hasher(&self) -> IdHasher {
        IdHasher { keys: *self, h: 0 }
    }
}

#[derive(Debug, Clone, Copy)]
struct IdHasher {
    keys: KeyedIds,
    h: u64,
}

impl Hasher for IdHasher {
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        // Only `u32` keys are hashed; this keeps the hasher correct for anything else.
        for &b in bytes {
            self.write_u64(u64::from(b));
        }
    }
    #[inline]
    fn write_u32(&mut self, x: u32) {
        self.write_u64(u64::from(x));
    }
    #[inline]
    fn write_u64(&mut self, x: u64) {
        let m = u128::from(x ^ self.h ^ self.keys.k0) * u128::from(self.keys.k1);
        self.h = (m as u64) ^ ((m >> 64) as u64);
    }
    #[inline]
    fn finish(&self) -> u64 {
        self.h
    }
}

/// Publishers whose ids [`SequenceTracker`] compares directly, before its hash index: a sharded feed's handful.
const FEW: usize = 8;

/// Last sequence per publisher and session, with the counts above. Ledgers live in a vector in order of first
/// appearance; a keyed hash index maps a publisher id to its slot, behind a remembered last hit (the usual case is
/// a run of messages from one publisher) and a scan of the first few publishers' ids (a handful of publishers
/// whose messages alternate one by one, as one SUB on several feed shards receives them, never reach the hash).
/// After a publisher's first message nothing allocates.
#[derive(Debug, Clone)]
pub struct SequenceTracker {
    publishers: Vec<State>,
    index: HashMap<u32, u32, KeyedIds>,
    last_hit: usize,
    /// The ids of the first [`FEW`] publishers, by slot: compared in one pass before the hash is asked.
    few: [u32; FEW],
    max_publishers: usize,
    max_plausible_jump: u64,
    untracked: u64,
    cached: u64,
}

impl Default for SequenceTracker {
    fn default() -> Self {
        Self::new()
    }
}

impl SequenceTracker {
    /// A tracker with [`DEFAULT_MAX_PUBLISHERS`] and [`DEFAULT_MAX_PLAUSIBLE_JUMP`].
    pub fn new() -> Self {
        Self::with_bounds(DEFAULT_MAX_PUBLISHERS, DEFAULT_MAX_PLAUSIBLE_JUMP)
    }

    /// A tracker of at most `max_publishers` publishers (at least 1, at most `u32::MAX`) that believes jumps of
    /// at most `max_plausible_jump`.
    pub fn with_bounds(max_publishers: usize, max_plausible_jump: u64) -> Self {
        SequenceTracker {
            publishers: Vec::new(),
            index: HashMap::with_hasher(KeyedIds::random()),
            last_hit: 0,
            few: [0; FEW],
            max_publishers: max_publishers.clamp(1, u32::MAX as usize),
            max_plausible_jump: max_plausible_jump.max(1),
            untracked: 0,
            cached: 0,
        }
    }

    /// The largest forward jump believed; a bigger one is a [`SequenceEvent::Anomaly`].
    pub fn max_plausible_jump(&self) -> u64 {
        self.max_plausible_jump
    }

    /// The most publishers tracked; messages from others are [`SequenceEvent::Untracked`].
    pub fn max_publishers(&self) -> usize {
        self.max_publishers
    }

    /// Publishers tracked so far.
    pub fn publisher_count(&self) -> usize {
        self.publishers.len()
    }

    /// Every tracked publisher's account, in order of first appearance.
    pub fn ledgers(&self) -> impl Iterator<Item = &PublisherLedger> + '_ {
        self.publishers.iter().map(|s| &s.ledger)
    }

    /// One publisher's account.
    pub fn ledger(&self, publisher: u32) -> Option<&PublisherLedger> {
        self.index
            .get(&publisher)
            .map(|&i| &self.publishers[i as usize].ledger)
    }

    /// The last sequence accounted for from `publisher`.
    pub fn last_sequence(&self, publisher: u32) -> Option<u64> {
        self.ledger(publisher).map(|l| l.last_sequence)
    }

    /// Every ledger summed, plus the untracked and cached counts that belong to no ledger.
    pub fn totals(&self) -> SequenceTotals {
        let mut t = SequenceTotals {
            publishers: self.publishers.len() as u64,
            untracked: self.untracked,
            cached: self.cached,
            ..SequenceTotals::default()
        };
        for l in self.ledgers() {
            t.received += l.received;
            t.missing += l.missing;
            t.recorded_missing += l.recorded_missing;
            t.duplicates += l.duplicates;
            t.reordered += l.reordered;
            t.restarts += l.restarts;
            t.anomalies += l.anomalies;
            t.gap_events += l.gap_events;
            t.recorded_gap_events += l.recorded_gap_events;
        }
        t
    }

    /// Accounts for one decoded message. Gap notices are read from their payload; a notice whose payload does not
    /// decode is an anomaly.
    #[inline]
    pub fn on_message(&mut self, msg: &MessageRef<'_>) -> SequenceEvent {
        let notice_first = if msg.kind() == Kind::Gap {
            match msg.payload() {
                Ok(Payload::Gap(notice)) => Some(notice.first_missing),
                _ => Some(u64::MAX),
            }
        } else {
            None
        };
        self.on_header(msg.header(), notice_first)
    }

    /// Accounts for one message given its header; `notice_first` is a gap notice's `first_missing` (its header's
    /// sequence is the notice's `last_missing`), `None` for every other kind.
    #[inline]
    pub fn on_header(&mut self, header: &Header, notice_first: Option<u64>) -> SequenceEvent {
        if header.flags.contains(Flags::CACHED) {
            self.cached += 1;
            return SequenceEvent::Exempt;
        }
        let publisher = header.publisher_id;
        let seq = header.sequence;
        let data = !matches!(header.kind, Kind::Heartbeat | Kind::Gap);
        let slot = match self.publishers.get(self.last_hit) {
            Some(s) if s.ledger.publisher == publisher => self.last_hit,
            _ => {
                let few = self.publishers.len().min(FEW);
                match self.few[..few].iter().position(|&p| p == publisher) {
                    Some(i) => i,
                    None => match self.index.get(&publisher) {
                        Some(&i) => i as usize,
                        None => return self.first(header, notice_first, data),
                    },
                }
            }
        };
        self.last_hit = slot;
        let max_jump = self.max_plausible_jump;
        let state = &mut self.publishers[slot];
        let l = &mut state.ledger;

        if header.session != l.session || (header.session == 0 && data && seq <= l.last_sequence) {
            // A v1 publisher (no session) whose sequence goes backwards has restarted; so has any publisher whose
            // session changed. A duplicated v1 message of the current run looks the same; v2 frames tell them apart.
            let event = SequenceEvent::Restart {
                publisher,
                previous_session: l.session,
                previous: l.last_sequence,
                session: header.session,
                sequence: seq,
            };
            l.session = header.session;
            l.restarts += 1;
            l.first_sequence = if data { seq } else { 0 };
            l.last_sequence = seq;
            state.last_gap = None;
            if data {
                l.received += 1;
            }
            if let Some(first) = notice_first {
                l.recorded_missing += span(first, seq);
                l.recorded_gap_events += 1;
            }
            return event;
        }

        let last = l.last_sequence;
        if let Some(first_missing) = notice_first {
            // A gap notice: `first_missing..=seq` are missing from the journal.
            if first_missing > seq || seq - first_missing >= max_jump {
                l.anomalies += 1;
                return SequenceEvent::Anomaly {
                    publisher,
                    last,
                    sequence: seq,
                };
            }
            if seq <= last {
                l.duplicates += 1;
                return SequenceEvent::Duplicate {
                    publisher,
                    sequence: seq,
                };
            }
            let expected = last.saturating_add(1);
            let recorded_from = first_missing.max(expected);
            l.recorded_missing += span(recorded_from, seq);
            l.recorded_gap_events += 1;
            l.last_sequence = seq;
            if first_missing > expected {
                // We also lost what came before the notice: that is our own loss.
                let lost_last = first_missing - 1;
                l.missing += span(expected, lost_last);
                l.gap_events += 1;
                state.last_gap = Some((expected, lost_last));
                return SequenceEvent::Gap {
                    publisher,
                    session: l.session,
                    first_missing: expected,
                    last_missing: lost_last,
                };
            }
            return SequenceEvent::RecordedGap {
                publisher,
                session: l.session,
                first_missing: recorded_from,
                last_missing: seq,
            };
        }

        // A heartbeat names the last data sequence sent; data names its own.
        let expected_last = if data { last.saturating_add(1) } else { last };
        if seq == expected_last {
            l.last_sequence = seq;
            if data {
                l.received += 1;
                if l.first_sequence == 0 {
                    l.first_sequence = seq;
                }
            }
            return SequenceEvent::InOrder;
        }
        if seq > expected_last {
            if seq - last > max_jump {
                l.anomalies += 1;
                return SequenceEvent::Anomaly {
                    publisher,
                    last,
                    sequence: seq,
                };
            }
            let first_missing = last + 1;
            let last_missing = if data { seq - 1 } else { seq };
            l.missing += span(first_missing, last_missing);
            l.gap_events += 1;
            l.last_sequence = seq;
            if data {
                l.received += 1;
                if l.first_sequence == 0 {
                    l.first_sequence = seq;
                }
            }
            state.last_gap = Some((first_missing, last_missing));
            return SequenceEvent::Gap {
                publisher,
                session: l.session,
                first_missing,
                last_missing,
            };
        }
        // Behind what we have accounted for: a late arrival filling the last gap, or a duplicate.
        if let Some((gap_first, gap_last)) = state.last_gap {
            if data && (gap_first..=gap_last).contains(&seq) {
                l.reordered += 1;
                l.received += 1;
                l.missing = l.missing.saturating_sub(1);
                // Split the remembered gap so the same late sequence is not accepted twice.
                state.last_gap = if seq == gap_last {
                    (gap_first < gap_last).then(|| (gap_first, gap_last - 1))
                } else {
                    Some((seq + 1, gap_last))
                };
                return SequenceEvent::Reordered {
                    publisher,
                    sequence: seq,
                };
            }
        }
        if data {
            l.duplicates += 1;
            SequenceEvent::Duplicate {
                publisher,
                sequence: seq,
            }
        } else {
            // A heartbeat overtaken by data is stale, not news.
            SequenceEvent::InOrder
        }
    }

    fn first(&mut self, header: &Header, notice_first: Option<u64>, data: bool) -> SequenceEvent {
        let publisher = header.publisher_id;
        if self.publishers.len() >= self.max_publishers {
            self.untracked += 1;
            return SequenceEvent::Untracked { publisher };
        }
        let mut ledger = PublisherLedger {
            publisher,
            session: header.session,
            first_sequence: if data { header.sequence } else { 0 },
            last_sequence: header.sequence,
            ..PublisherLedger::default()
        };
        if data {
            ledger.received = 1;
        }
        if let Some(first) = notice_first {
            if first <= header.sequence && header.sequence - first < self.max_plausible_jump {
                ledger.recorded_missing = span(first, header.sequence);
                ledger.recorded_gap_events = 1;
            } else {
                ledger.anomalies = 1;
            }
        }
        self.last_hit = self.publishers.len();
        if let Some(id) = self.few.get_mut(self.last_hit) {
            *id = publisher;
        }
        self.index.insert(publisher, self.last_hit as u32);
        self.publishers.push(State {
            ledger,
            last_gap: None,
        });
        SequenceEvent::First {
            publisher,
            session: header.session,
            sequence: header.sequence,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S1: u64 = 1_000;
    const S2: u64 = 2_000;

    fn data(publisher: u32, seq: u64) -> Header {
        Header::live(Kind::Quote, publisher, seq, 1).with_session(S1)
    }
    fn heartbeat(publisher: u32, seq: u64) -> Header {
        Header::live(Kind::Heartbeat, publisher, seq, 1).with_session(S1)
    }
    fn notice(publisher: u32, first: u64, last: u64) -> (Header, Option<u64>) {
        (
            Header::live(Kind::Gap, publisher, last, 1).with_session(S1),
            Some(first),
        )
    }

    #[test]
    fn in_order_then_gap_then_in_order_again() {
        let mut t = SequenceTracker::new();
        assert!(matches!(
            t.on_header(&data(1, 5), None),
            SequenceEvent::First { sequence: 5, .. }
        ));
        assert_eq!(t.on_header(&data(1, 6), None), SequenceEvent::InOrder);
        let gap = t.on_header(&data(1, 9), None);
        assert_eq!(
            gap,
            SequenceEvent::Gap {
                publisher: 1,
                session: S1,
                first_missing: 7,
                last_missing: 8
            }
        );
        assert_eq!(gap.missing(), 2);
        assert_eq!(t.on_header(&data(1, 10), None), SequenceEvent::InOrder);
        let l = t.ledger(1).unwrap();
        assert_eq!((l.received, l.missing, l.first_sequence), (4, 2, 5));
        // Ledger identity: received + missing = the span of sequences seen.
        assert_eq!(
            l.received + l.missing,
            l.last_sequence - l.first_sequence + 1
        );
    }

    #[test]
    fn publishers_alternating_one_by_one_keep_their_own_ledgers_past_the_few_compared_directly() {
        // Twelve publishers, every message from another one than the last: the first eight are found by the
        // direct comparison, the other four by the hash index.
        let mut t = SequenceTracker::new();
        let publishers: Vec<u32> = (0..12).map(|i| 100 + i * 7).collect();
        for seq in 1..=20u64 {
            for &p in &publishers {
                // Publisher 100 (compared directly) and 177 (hashed) each lose sequence 10.
                if seq == 10 && (p == 100 || p == 177) {
                    continue;
                }
                let event = t.on_header(&data(p, seq), None);
                match seq {
                    1 => assert!(
                        matches!(event, SequenceEvent::First { .. }),
                        "{p}: {event:?}"
                    ),
                    11 if p == 100 || p == 177 => assert_eq!(
                        event,
                        SequenceEvent::Gap {
                            publisher: p,
                            session: S1,
                            first_missing: 10,
                            last_missing: 10
                        }
                    ),
                    _ => assert_eq!(event, SequenceEvent::InOrder, "{p} at {seq}"),
                }
            }
        }
        for &p in &publishers {
            let l = t.ledger(p).unwrap();
            let lost = u64::from(p == 100 || p == 177);
            assert_eq!(
                (l.received, l.missing, l.last_sequence),
                (20 - lost, lost, 20),
                "{p}"
            );
        }
        assert_eq!(t.publisher_count(), 12);
    }

    #[test]
    fn heartbeat_reveals_a_lost_trailing_message() {
        let mut t = SequenceTracker::new();
        t.on_header(&data(1, 1), None);
        t.on_header(&data(1, 2), None);
        assert_eq!(t.on_header(&heartbeat(1, 2), None), SequenceEvent::InOrder);
        let gap = t.on_header(&heartbeat(1, 3), None);
        assert_eq!(gap.missing(), 1);
        assert_eq!(t.on_header(&data(1, 4), None), SequenceEvent::InOrder);
        assert_eq!(t.totals().missing, 1);
    }

    #[test]
    fn duplicate_is_a_duplicate_not_a_restart_and_no_false_gap_follows() {
        let mut t = SequenceTracker::new();
        t.on_header(&data(1, 1), None);
        t.on_header(&data(1, 2), None);
        assert_eq!(
            t.on_header(&data(1, 2), None),
            SequenceEvent::Duplicate {
                publisher: 1,
                sequence: 2
            }
        );
        assert_eq!(t.on_header(&data(1, 3), None), SequenceEvent::InOrder);
        let totals = t.totals();
        assert_eq!(
            (
                totals.duplicates,
                totals.restarts,
                totals.missing,
                totals.received
            ),
            (1, 0, 0, 3)
        );
    }

    #[test]
    fn late_arrival_inside_the_last_gap_is_reordered_and_not_missing() {
        let mut t = SequenceTracker::new();
        t.on_header(&data(1, 1), None);
        t.on_header(&data(1, 4), None);
        assert_eq!(t.totals().missing, 2);
        assert!(matches!(
            t.on_header(&data(1, 2), None),
            SequenceEvent::Reordered { sequence: 2, .. }
        ));
        assert!(matches!(
            t.on_header(&data(1, 2), None),
            SequenceEvent::Duplicate { .. }
        ));
        let totals = t.totals();
        assert_eq!(
            (totals.missing, totals.reordered, totals.received),
            (1, 1, 3)
        );
    }

    #[test]
    fn restart_with_a_higher_sequence_is_a_restart_not_a_gap() {
        let mut t = SequenceTracker::new();
        t.on_header(&data(1, 41), None);
        t.on_header(&data(1, 42), None);
        let restarted = Header::live(Kind::Quote, 1, 500, 1).with_session(S2);
        assert!(matches!(
            t.on_header(&restarted, None),
            SequenceEvent::Restart {
                previous: 42,
                sequence: 500,
                session: S2,
                ..
            }
        ));
        let next = Header::live(Kind::Quote, 1, 501, 1).with_session(S2);
        assert_eq!(t.on_header(&next, None), SequenceEvent::InOrder);
        let totals = t.totals();
        assert_eq!(
            (totals.restarts, totals.missing, totals.gap_events),
            (1, 0, 0)
        );
    }

    #[test]
    fn version_1_publisher_going_backwards_is_a_restart() {
        let mut t = SequenceTracker::new();
        t.on_header(&Header::live(Kind::Quote, 1, 42, 1), None);
        assert!(matches!(
            t.on_header(&Header::live(Kind::Quote, 1, 1, 1), None),
            SequenceEvent::Restart { .. }
        ));
        assert_eq!(
            t.on_header(&Header::live(Kind::Quote, 1, 2, 1), None),
            SequenceEvent::InOrder
        );
    }

    #[test]
    fn forged_heartbeat_is_an_anomaly_not_missing_messages() {
        let mut t = SequenceTracker::new();
        t.on_header(&data(1, 1), None);
        assert!(matches!(
            t.on_header(&heartbeat(1, u64::MAX - 1), None),
            SequenceEvent::Anomaly { .. }
        ));
        assert_eq!(t.on_header(&data(1, 2), None), SequenceEvent::InOrder);
        let totals = t.totals();
        assert_eq!((totals.anomalies, totals.missing), (1, 0));
    }

    #[test]
    fn gap_notice_is_a_recorded_gap_apart_from_transport_loss() {
        let mut t = SequenceTracker::new();
        t.on_header(&data(1, 1), None);
        let (h, first) = notice(1, 2, 5);
        assert!(matches!(
            t.on_header(&h, first),
            SequenceEvent::RecordedGap {
                first_missing: 2,
                last_missing: 5,
                ..
            }
        ));
        assert_eq!(t.on_header(&data(1, 6), None), SequenceEvent::InOrder);
        // Transport loss of 7 and the notice's 8..=9 arrive together.
        let (h, first) = notice(1, 8, 9);
        assert!(matches!(
            t.on_header(&h, first),
            SequenceEvent::Gap {
                first_missing: 7,
                last_missing: 7,
                ..
            }
        ));
        assert_eq!(t.on_header(&data(1, 10), None), SequenceEvent::InOrder);
        let totals = t.totals();
        assert_eq!(
            (totals.missing, totals.recorded_missing, totals.received),
            (1, 6, 3)
        );
    }

    #[test]
    fn cached_values_never_count_or_move_the_sequence() {
        let mut t = SequenceTracker::new();
        t.on_header(&data(1, 10), None);
        let mut cached = data(1, 3);
        cached.flags = Flags::CACHED;
        assert_eq!(t.on_header(&cached, None), SequenceEvent::Exempt);
        cached.sequence = 500;
        assert_eq!(t.on_header(&cached, None), SequenceEvent::Exempt);
        assert_eq!(t.on_header(&data(1, 11), None), SequenceEvent::InOrder);
        assert_eq!(t.totals().cached, 2);
    }

    #[test]
    fn the_publisher_table_is_bounded() {
        let mut t = SequenceTracker::with_bounds(2, DEFAULT_MAX_PLAUSIBLE_JUMP);
        t.on_header(&data(1, 1), None);
        t.on_header(&data(2, 1), None);
        assert_eq!(
            t.on_header(&data(3, 1), None),
            SequenceEvent::Untracked { publisher: 3 }
        );
        assert_eq!(t.publisher_count(), 2);
        assert_eq!(t.totals().untracked, 1);
    }
}
