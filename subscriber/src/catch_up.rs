//! The seam between history and live for a late joiner (`subscribe --catch-up`), sans-IO.
//!
//! A late joiner subscribes live first and holds what arrives, then asks a recorder's history service for the
//! records it missed and delivers them, then releases the held live records, dropping those the history already
//! delivered. This engine makes the decisions; the shard loop owns the sockets, the clock and the records.
//!
//! Rules:
//! - A publisher *session* (publisher id and session, as [`tickbox_wire::SequenceTracker`] keys them) is the unit
//!   of order: sequences are gap-free within one.
//! - While catching up, live records are held in arrival order against a byte budget. Running past the budget is
//!   an error that names the budget; nothing held is delivered after it, so nothing reaches a worker out of order.
//! - A history record at or below the last one the history delivered for its session is an overlap (a repeated
//!   request): dropped and counted.
//! - On going live, a held record whose session the history covered up to or beyond its sequence is a duplicate
//!   at the seam: dropped and counted. Every other held record is delivered, in arrival order.
//! - Before going live the owner asks [`CatchUp::holes`]: a session whose history ends before its first held live
//!   record leaves a hole the history service can still fill (it was behind the live stream when it answered).
//!   Whatever hole remains when the owner goes live is reported with the seam, never hidden: the sequence
//!   accounting downstream sees it as a gap.
//! - The table of sessions is bounded; sessions beyond it are passed through unjudged and counted.

#![deny(clippy::disallowed_methods, clippy::disallowed_types)]

use std::collections::{HashMap, VecDeque};

use serde::Serialize;

/// One publisher run: sequences are gap-free within it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct PublisherSession {
    /// The publisher id from the header.
    pub publisher: u32,
    /// Its session (0 for version 1 frames).
    pub session: u64,
}

/// What to do with one live message (a single record, or a batch of one session's records).
#[derive(Debug, PartialEq, Eq)]
pub enum CatchUpVerdict<R> {
    /// Hand it to the workers now.
    Deliver(R),
    /// Hand over only its records with a sequence above this one: the history delivered the others.
    DeliverAfter(R, u64),
    /// Held until the history is done.
    Held,
    /// Already delivered by the other side of the seam: dropped (counted).
    Duplicate,
}

/// Sequences a session's history has not covered before its first held live record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct SeamHole {
    /// The session.
    pub session: PublisherSession,
    /// First sequence neither side has (inclusive).
    pub first_missing: u64,
    /// Last sequence neither side has (inclusive): one before the first held live record.
    pub last_missing: u64,
}

/// Where one session went from history to live.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct SeamPosition {
    /// The session.
    pub session: PublisherSession,
    /// The last sequence the history delivered (`None`: the history had nothing of this session).
    pub last_history: Option<u64>,
    /// The first live sequence delivered after the seam (`None`: nothing live arrived while catching up).
    pub first_live: Option<u64>,
}

/// What the catch-up did, for the summary and its `--json`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct CatchUpReport {
    /// History records delivered.
    pub history_records: u64,
    /// History records dropped because an earlier answer had delivered them.
    pub history_overlaps: u64,
    /// Live records delivered (held ones released at the seam, and everything after it).
    pub live_records: u64,
    /// Held live records dropped because the history had delivered them.
    pub duplicates_at_seam: u64,
    /// The most bytes held at once while catching up.
    pub peak_held_bytes: u64,
    /// Live records of sessions beyond the session table, passed through unjudged.
    pub untracked_records: u64,
    /// Per session, where history ended and live began (sorted).
    pub seam: Vec<SeamPosition>,
    /// Holes left between a session's history and its live records when the subscriber went live.
    pub holes: Vec<SeamHole>,
}

/// Why catching up failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CatchUpError {
    /// The live stream outran the byte budget before the history was done.
    #[error(
        "the live buffer's budget of {budget_bytes} bytes (catch_up_budget) ran out while catching up: \
         {held_records} live records were held when one of {record_bytes} more bytes arrived; \
         raise the budget or start the catch-up closer to now"
    )]
    BudgetExceeded {
        /// The configured budget.
        budget_bytes: u64,
        /// Records held when it ran out.
        held_records: u64,
        /// The size of the record that did not fit.
        record_bytes: u64,
    },
}

#[derive(Debug)]
struct Held<R> {
    session: PublisherSession,
    first: u64,
    last: u64,
    record: R,
}

#[derive(Debug, Default, Clone, Copy)]
struct SessionState {
    last_history: Option<u64>,
    first_held: Option<u64>,
    first_live_delivered: Option<u64>,
}

/// The state of `session`, created when the table has room (`None`: the table is full).
fn session_state(
    sessions: &mut HashMap<PublisherSession, SessionState>,
    max_sessions: usize,
    session: PublisherSession,
) -> Option<&mut SessionState> {
    use std::collections::hash_map::Entry;
    let room = sessions.len() < max_sessions;
    match sessions.entry(session) {
        Entry::Occupied(entry) => Some(entry.into_mut()),
        Entry::Vacant(entry) if room => Some(entry.insert(SessionState::default())),
        Entry::Vacant(_) => None,
    }
}

/// The seam's rule for one live message of `session`'s records `first..=last` once the history is known.
fn judge<R>(
    state: &mut SessionState,
    first: u64,
    last: u64,
    record: R,
    report: &mut CatchUpReport,
) -> CatchUpVerdict<R> {
    match state.last_history {
        Some(end) if last <= end => {
            report.duplicates_at_seam += last - first + 1;
            CatchUpVerdict::Duplicate
        }
        Some(end) if first <= end => {
            report.duplicates_at_seam += end - first + 1;
            report.live_records += last - end;
            state.first_live_delivered.get_or_insert(end + 1);
            CatchUpVerdict::DeliverAfter(record, end)
        }
        _ => {
            report.live_records += last - first + 1;
            state.first_live_delivered.get_or_insert(first);
            CatchUpVerdict::Deliver(record)
        }
    }
}

/// The catch-up seam for one stream of records (see the module docs).
#[derive(Debug)]
pub struct CatchUp<R> {
    live: bool,
    budget_bytes: u64,
    held_bytes: u64,
    held: VecDeque<Held<R>>,
    sessions: HashMap<PublisherSession, SessionState>,
    max_sessions: usize,
    report: CatchUpReport,
}

impl<R> CatchUp<R> {
    /// A seam that holds at most `budget_bytes` of live records and judges at most `max_sessions` sessions.
    pub fn new(budget_bytes: u64, max_sessions: usize) -> Self {
        CatchUp {
            live: false,
            budget_bytes,
            held_bytes: 0,
            held: VecDeque::new(),
            sessions: HashMap::new(),
            max_sessions,
            report: CatchUpReport::default(),
        }
    }

    /// Whether the seam has been crossed.
    pub fn is_live(&self) -> bool {
        self.live
    }

    /// A record from the history service.
    pub fn handle_history(
        &mut self,
        session: PublisherSession,
        sequence: u64,
    ) -> CatchUpVerdict<()> {
        let Some(state) = session_state(&mut self.sessions, self.max_sessions, session) else {
            self.report.history_records += 1;
            return CatchUpVerdict::Deliver(());
        };
        if state.last_history.is_some_and(|last| sequence <= last) {
            self.report.history_overlaps += 1;
            return CatchUpVerdict::Duplicate;
        }
        state.last_history = Some(sequence);
        self.report.history_records += 1;
        CatchUpVerdict::Deliver(())
    }

    /// The last sequence of `session` the history delivered so far.
    pub fn last_history(&self, session: PublisherSession) -> Option<u64> {
        self.sessions
            .get(&session)
            .and_then(|state| state.last_history)
    }

    /// A run of `count` history records of `session` ending at `last`, already checked against
    /// [`CatchUp::last_history`] (the per-record [`CatchUp::handle_history`] for a batch of one session's records,
    /// with one table lookup instead of one per record).
    pub fn handle_history_run(&mut self, session: PublisherSession, last: u64, count: u64) {
        self.report.history_records += count;
        if let Some(state) = session_state(&mut self.sessions, self.max_sessions, session) {
            state.last_history = Some(state.last_history.map_or(last, |mine| mine.max(last)));
        }
    }

    /// History records dropped by the caller because an earlier answer had delivered them.
    pub fn count_history_overlaps(&mut self, n: u64) {
        self.report.history_overlaps += n;
    }

    /// A live message `bytes` long holding `session`'s records `first..=last` (one record: `first == last`).
    pub fn handle_live(
        &mut self,
        session: PublisherSession,
        first: u64,
        last: u64,
        bytes: u64,
        record: R,
    ) -> Result<CatchUpVerdict<R>, CatchUpError> {
        let live = self.live;
        let over_budget = self.held_bytes.saturating_add(bytes) > self.budget_bytes;
        let held_records = self.held.len() as u64;
        let Some(state) = session_state(&mut self.sessions, self.max_sessions, session) else {
            self.report.untracked_records += 1;
            self.report.live_records += 1;
            return Ok(CatchUpVerdict::Deliver(record));
        };
        if live {
            let verdict = judge(state, first, last, record, &mut self.report);
            return Ok(verdict);
        }
        if over_budget {
            return Err(CatchUpError::BudgetExceeded {
                budget_bytes: self.budget_bytes,
                held_records,
                record_bytes: bytes,
            });
        }
        state.first_held.get_or_insert(first);
        self.held_bytes += bytes;
        self.report.peak_held_bytes = self.report.peak_held_bytes.max(self.held_bytes);
        self.held.push_back(Held {
            session,
            first,
            last,
            record,
        });
        Ok(CatchUpVerdict::Held)
    }

    /// Takes the end marker of a history another path delivered (a subscriber's other shards learn the seam from
    /// the shard that fetched the history): each session's history is taken to end at its last sequence.
    pub fn apply_history_end(
        &mut self,
        sessions: impl IntoIterator<Item = (PublisherSession, u64)>,
    ) {
        for (session, last) in sessions {
            if let Some(state) = session_state(&mut self.sessions, self.max_sessions, session) {
                state.last_history = Some(state.last_history.map_or(last, |mine| mine.max(last)));
            }
        }
    }

    /// Sessions whose history stops short of their first held live record, in session order: what to ask the
    /// history service for again before going live.
    pub fn holes(&self) -> Vec<SeamHole> {
        let mut holes: Vec<SeamHole> = self
            .sessions
            .iter()
            .filter_map(|(session, state)| {
                let first_held = state.first_held?;
                let next = state.last_history.map_or(first_held, |last| last + 1);
                // A session the history never saw started after the history's start point as far as we know:
                // the live stream begins it, and the sequence accounting judges its first record.
                (state.last_history.is_some() && next < first_held).then_some(SeamHole {
                    session: *session,
                    first_missing: next,
                    last_missing: first_held - 1,
                })
            })
            .collect();
        holes.sort_by_key(|hole| hole.session);
        holes
    }

    /// Crosses the seam: returns the held live messages to deliver, in arrival order, each whole or with only
    /// its records after a sequence ([`CatchUpVerdict::DeliverAfter`]); those the history already delivered are
    /// dropped and counted. From now on [`CatchUp::handle_live`] judges each message as it comes.
    pub fn go_live(&mut self) -> Vec<CatchUpVerdict<R>> {
        self.report.holes = self.holes();
        self.live = true;
        self.held_bytes = 0;
        let mut release = Vec::with_capacity(self.held.len());
        for held in std::mem::take(&mut self.held) {
            let state = self.sessions.entry(held.session).or_default();
            match judge(state, held.first, held.last, held.record, &mut self.report) {
                CatchUpVerdict::Duplicate => {}
                verdict => release.push(verdict),
            }
        }
        release
    }

    /// What the catch-up did so far, with the seam per session.
    pub fn report(&self) -> CatchUpReport {
        let mut report = self.report.clone();
        report.seam = self
            .sessions
            .iter()
            .map(|(session, state)| SeamPosition {
                session: *session,
                last_history: state.last_history,
                first_live: state.first_live_delivered,
            })
            .collect();
        report.seam.sort_by_key(|position| position.session);
        report
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: PublisherSession = PublisherSession {
        publisher: 1,
        session: 100,
    };
    const B: PublisherSession = PublisherSession {
        publisher: 2,
        session: 200,
    };

    /// The records a release hands over whole (single records are never split).
    fn whole<R: std::fmt::Debug>(release: Vec<CatchUpVerdict<R>>) -> Vec<R> {
        release
            .into_iter()
            .map(|verdict| match verdict {
                CatchUpVerdict::Deliver(record) => record,
                other => panic!("a single record released as {other:?}"),
            })
            .collect()
    }

    /// Runs the seam the way a subscriber does and returns, per session, the sequences the workers received.
    fn delivered(
        events: &[(bool, PublisherSession, u64)],
        seam_after: usize,
    ) -> Vec<(PublisherSession, u64)> {
        let mut seam = CatchUp::new(1 << 20, 16);
        let mut out = Vec::new();
        for (i, &(history, session, sequence)) in events.iter().enumerate() {
            if i == seam_after {
                out.extend(whole(seam.go_live()));
            }
            if history {
                if let CatchUpVerdict::Deliver(()) = seam.handle_history(session, sequence) {
                    out.push((session, sequence));
                }
            } else if let CatchUpVerdict::Deliver(record) = seam
                .handle_live(session, sequence, sequence, 64, (session, sequence))
                .unwrap()
            {
                out.push(record);
            }
        }
        out
    }

    #[test]
    fn every_sequence_once_and_in_order_across_the_seam() {
        let mut seam = CatchUp::new(1 << 20, 16);
        let mut got = Vec::new();
        // Live records 80..=150 arrive while the history (1..=100) is being delivered, interleaved.
        let mut live = 80..=150u64;
        for sequence in 1..=100 {
            assert_eq!(
                seam.handle_history(A, sequence),
                CatchUpVerdict::Deliver(())
            );
            got.push(sequence);
            if sequence % 2 == 0 {
                let next = live.next().unwrap();
                assert_eq!(
                    seam.handle_live(A, next, next, 64, next).unwrap(),
                    CatchUpVerdict::Held
                );
            }
        }
        assert!(seam.holes().is_empty());
        got.extend(whole(seam.go_live()));
        for sequence in live {
            if let CatchUpVerdict::Deliver(s) = seam
                .handle_live(A, sequence, sequence, 64, sequence)
                .unwrap()
            {
                got.push(s);
            }
        }
        assert_eq!(got, (1..=150).collect::<Vec<_>>());
        let report = seam.report();
        assert_eq!(report.history_records, 100);
        assert_eq!(report.live_records, 50);
        assert_eq!(
            report.duplicates_at_seam, 21,
            "80..=100 were held and dropped"
        );
        assert_eq!(
            report.seam,
            vec![SeamPosition {
                session: A,
                last_history: Some(100),
                first_live: Some(101)
            }]
        );
        assert_eq!(report.peak_held_bytes, 50 * 64);
    }

    #[test]
    fn a_run_of_history_counts_as_its_records_do() {
        let mut by_record = CatchUp::<()>::new(1 << 20, 16);
        let mut by_run = CatchUp::<()>::new(1 << 20, 16);
        for sequence in 1..=10 {
            by_record.handle_history(A, sequence);
        }
        assert_eq!(by_run.last_history(A), None);
        by_run.handle_history_run(A, 10, 10);
        assert_eq!(by_run.last_history(A), Some(10));
        by_run.count_history_overlaps(0);
        assert_eq!(by_record.report(), by_run.report());
    }

    #[test]
    fn a_late_live_copy_after_the_seam_is_a_duplicate() {
        let mut seam = CatchUp::new(1 << 20, 16);
        for sequence in 1..=10 {
            seam.handle_history(A, sequence);
        }
        assert!(whole(seam.go_live()).is_empty());
        assert_eq!(
            seam.handle_live(A, 9, 9, 8, ()).unwrap(),
            CatchUpVerdict::Duplicate
        );
        assert_eq!(
            seam.handle_live(A, 11, 11, 8, ()).unwrap(),
            CatchUpVerdict::Deliver(())
        );
        assert_eq!(seam.report().duplicates_at_seam, 1);
    }

    /// Batches of one session's records: one wholly before the seam is dropped, one across it is handed over from
    /// the first sequence the history lacks, one after it whole; the same rule holds after going live.
    #[test]
    fn a_batch_across_the_seam_is_delivered_from_the_first_sequence_the_history_lacks() {
        let mut seam = CatchUp::new(1 << 20, 16);
        for sequence in 1..=25 {
            seam.handle_history(A, sequence);
        }
        assert_eq!(
            seam.handle_live(A, 11, 20, 640, "11-20").unwrap(),
            CatchUpVerdict::Held
        );
        assert_eq!(
            seam.handle_live(A, 21, 30, 640, "21-30").unwrap(),
            CatchUpVerdict::Held
        );
        assert_eq!(
            seam.handle_live(A, 31, 40, 640, "31-40").unwrap(),
            CatchUpVerdict::Held
        );
        assert_eq!(
            seam.go_live(),
            vec![
                CatchUpVerdict::DeliverAfter("21-30", 25),
                CatchUpVerdict::Deliver("31-40")
            ]
        );
        let report = seam.report();
        assert_eq!((report.duplicates_at_seam, report.live_records), (15, 15));
        assert_eq!(report.seam[0].first_live, Some(26));
        // A late copy after the seam, partly new: the same rule.
        let mut seam = CatchUp::new(1 << 20, 16);
        seam.handle_history(A, 1);
        seam.handle_history(A, 2);
        seam.go_live();
        assert_eq!(
            seam.handle_live(A, 1, 4, 8, ()).unwrap(),
            CatchUpVerdict::DeliverAfter((), 2)
        );
    }

    #[test]
    fn the_other_shards_take_the_seam_from_the_end_marker() {
        let mut seam = CatchUp::new(1 << 20, 16);
        for sequence in 5..=9 {
            seam.handle_live(A, sequence, sequence, 8, sequence)
                .unwrap();
        }
        seam.apply_history_end([(A, 6), (B, 100)]);
        assert!(seam.holes().is_empty());
        assert_eq!(whole(seam.go_live()), vec![7, 8, 9]);
        assert_eq!(
            seam.handle_live(B, 100, 100, 8, 100).unwrap(),
            CatchUpVerdict::Duplicate
        );
        assert_eq!(
            seam.handle_live(B, 101, 101, 8, 101).unwrap(),
            CatchUpVerdict::Deliver(101)
        );
    }

    #[test]
    fn running_past_the_budget_names_it_and_releases_nothing() {
        let mut seam = CatchUp::new(1000, 16);
        for sequence in 1..=10 {
            assert_eq!(
                seam.handle_live(A, sequence, sequence, 100, sequence)
                    .unwrap(),
                CatchUpVerdict::Held
            );
        }
        let error = seam.handle_live(A, 11, 11, 100, 11).unwrap_err();
        assert_eq!(
            error,
            CatchUpError::BudgetExceeded {
                budget_bytes: 1000,
                held_records: 10,
                record_bytes: 100
            }
        );
        assert!(
            error.to_string().contains("budget of 1000 bytes"),
            "{error}"
        );
        assert_eq!(seam.report().live_records, 0);
    }

    #[test]
    fn a_history_behind_the_live_stream_leaves_a_hole_until_asked_again() {
        let mut seam = CatchUp::new(1 << 20, 16);
        for sequence in 1..=90 {
            seam.handle_history(A, sequence);
        }
        for sequence in 95..=99 {
            seam.handle_live(A, sequence, sequence, 8, sequence)
                .unwrap();
        }
        assert_eq!(
            seam.holes(),
            vec![SeamHole {
                session: A,
                first_missing: 91,
                last_missing: 94
            }]
        );
        // The second answer starts before the first one ended: the overlap is dropped.
        let fresh: Vec<u64> = (85..=96)
            .filter(|&s| seam.handle_history(A, s) == CatchUpVerdict::Deliver(()))
            .collect();
        assert_eq!(fresh, (91..=96).collect::<Vec<_>>());
        assert!(seam.holes().is_empty());
        assert_eq!(whole(seam.go_live()), vec![97, 98, 99]);
        let report = seam.report();
        assert_eq!(report.history_overlaps, 6);
        assert_eq!(report.duplicates_at_seam, 2);
        assert!(report.holes.is_empty());
    }

    #[test]
    fn a_hole_left_at_the_seam_is_reported() {
        let mut seam = CatchUp::new(1 << 20, 16);
        seam.handle_history(A, 1);
        seam.handle_live(A, 5, 5, 8, 5).unwrap();
        assert_eq!(whole(seam.go_live()), vec![5]);
        assert_eq!(
            seam.report().holes,
            vec![SeamHole {
                session: A,
                first_missing: 2,
                last_missing: 4
            }]
        );
    }

    #[test]
    fn sessions_are_judged_apart_and_a_restart_is_not_a_duplicate() {
        let restarted = PublisherSession {
            publisher: A.publisher,
            session: A.session + 1,
        };
        let events = [
            (true, A, 1),
            (true, A, 2),
            (true, A, 3),
            (false, restarted, 1),
            (false, B, 7),
            (true, restarted, 1),
            (false, restarted, 2),
            (true, restarted, 2),
            (false, B, 8),
            (false, restarted, 3),
            (false, restarted, 4),
        ];
        let got = delivered(&events, 9);
        assert_eq!(
            got,
            vec![
                (A, 1),
                (A, 2),
                (A, 3),
                (restarted, 1),
                (restarted, 2),
                (B, 7),
                (B, 8),
                (restarted, 3),
                (restarted, 4)
            ]
        );
    }

    #[test]
    fn sessions_beyond_the_table_pass_through_and_are_counted() {
        let mut seam = CatchUp::new(1 << 20, 1);
        seam.handle_history(A, 1);
        assert_eq!(
            seam.handle_live(B, 1, 1, 8, 1).unwrap(),
            CatchUpVerdict::Deliver(1)
        );
        assert_eq!(seam.report().untracked_records, 1);
    }

    /// Interleavings of three sessions with histories and live starts at every relation to each other: the
    /// workers receive each session's 1..=N exactly once and in order.
    #[test]
    fn any_interleaving_delivers_each_session_exactly_once_in_order() {
        let sessions = [
            A,
            B,
            PublisherSession {
                publisher: 3,
                session: 300,
            },
        ];
        let n = 40u64;
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        for _ in 0..300 {
            // Per session: the history ends at h (0..=n), the live stream starts at l in 1..=h+1.
            let plan: Vec<(u64, u64)> = sessions
                .iter()
                .map(|_| {
                    let h = next() % (n + 1);
                    (h, 1 + next() % (h + 1))
                })
                .collect();
            let mut history: Vec<VecDeque<u64>> =
                plan.iter().map(|&(h, _)| (1..=h).collect()).collect();
            let mut live: Vec<VecDeque<u64>> =
                plan.iter().map(|&(_, l)| (l..=n).collect()).collect();
            let mut seam = CatchUp::<(usize, u64)>::new(1 << 20, 16);
            let mut got: Vec<Vec<u64>> = vec![Vec::new(); sessions.len()];
            while history.iter().any(|h| !h.is_empty()) || live.iter().any(|l| !l.is_empty()) {
                let i = (next() % sessions.len() as u64) as usize;
                let history_done = history.iter().all(|h| h.is_empty());
                if history_done && !seam.is_live() {
                    assert!(seam.holes().is_empty());
                    for (index, sequence) in whole(seam.go_live()) {
                        got[index].push(sequence);
                    }
                }
                if next() % 2 == 0 {
                    if let Some(sequence) = history[i].pop_front() {
                        if seam.handle_history(sessions[i], sequence) == CatchUpVerdict::Deliver(())
                        {
                            got[i].push(sequence);
                        }
                    }
                } else if let Some(sequence) = live[i].pop_front() {
                    if let CatchUpVerdict::Deliver((index, s)) = seam
                        .handle_live(sessions[i], sequence, sequence, 8, (i, sequence))
                        .unwrap()
                    {
                        got[index].push(s);
                    }
                }
            }
            if !seam.is_live() {
                for (index, sequence) in whole(seam.go_live()) {
                    got[index].push(sequence);
                }
            }
            for (i, sequences) in got.iter().enumerate() {
                assert_eq!(
                    sequences,
                    &(1..=n).collect::<Vec<_>>(),
                    "session {i}, plan {plan:?}"
                );
            }
        }
    }
}
