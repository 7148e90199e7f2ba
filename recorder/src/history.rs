//! The history service a recorder offers late joiners (`record --serve`), sans-IO: who may ask, whom to serve
//! next, who is abandoned, what the end marker says. The messages are [`tickbox_wire::history`]'s; the socket
//! loop ([`crate::HistoryServer`]) owns the ROUTER, the clock and one journal reader per asker.
//!
//! An asker's credit is the number of batches it has room for, so neither side queues without bound: the service
//! sends only against credit, and an asker that stops granting credit while it still has records to receive is
//! abandoned after the idle timeout and counted. The number of askers, the credit one may grant and the prefixes
//! one may name are bounded; anything beyond is refused and counted, and a message that does not decode is counted
//! and answered with a refusal, never a panic.

#![deny(clippy::disallowed_methods, clippy::disallowed_types)]

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::time::{Duration, Instant};

use serde::Serialize;
use tickbox_wire::history::{
    AskerMessage, HistoryRequest, Refusal, ServiceMessage, SessionEnd, MAX_END_SESSIONS,
    MAX_IDENTITY_BYTES,
};

/// The service's bounds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HistoryServiceConfig {
    /// Askers served at once; one more is refused as [`Refusal::Busy`].
    pub max_askers: usize,
    /// The most credit one asker may hold (a larger grant is capped, so a forged grant cannot make the service
    /// run ahead of a reader).
    pub max_credit: u32,
    /// An asker with records still to receive and no credit for this long is abandoned.
    pub idle_timeout: Duration,
}

impl Default for HistoryServiceConfig {
    fn default() -> Self {
        HistoryServiceConfig {
            max_askers: 16,
            max_credit: 64,
            idle_timeout: Duration::from_secs(5),
        }
    }
}

/// What the service did, for the recorder's summary and its `--json`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct HistoryServiceReport {
    /// Requests accepted.
    pub askers_accepted: u64,
    /// Askers sent the whole history and an end marker.
    pub askers_completed: u64,
    /// Askers that cancelled.
    pub askers_cancelled: u64,
    /// Askers abandoned for holding no credit past the idle timeout.
    pub askers_abandoned: u64,
    /// Requests refused because the service was full.
    pub refused_busy: u64,
    /// Messages that did not decode or broke a bound.
    pub refused_malformed: u64,
    /// Second requests from an asker being served.
    pub refused_already_asking: u64,
    /// Credit or cancels from unknown askers.
    pub refused_unknown: u64,
    /// Batches sent.
    pub batches_sent: u64,
    /// Records sent inside them.
    pub records_sent: u64,
}

/// What the socket loop must do after an input.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HistoryAction {
    /// Open a journal reader for this asker and start serving its request.
    Start {
        /// The asker's ROUTER identity.
        asker: Vec<u8>,
        /// What it asked for.
        request: HistoryRequest,
    },
    /// Send this refusal to the asker.
    Refuse {
        /// The asker's ROUTER identity.
        asker: Vec<u8>,
        /// Why.
        refusal: Refusal,
    },
    /// Close this asker's reader: it cancelled or was abandoned.
    Forget {
        /// The asker's ROUTER identity.
        asker: Vec<u8>,
    },
}

#[derive(Debug)]
struct Asker {
    credit: u32,
    /// When the asker last had credit or was sent something: the idle clock for abandonment.
    last_progress: Instant,
    last_sent: BTreeMap<(u32, u64), u64>,
}

/// The history service's decisions (see the module docs).
#[derive(Debug)]
pub struct HistoryService {
    config: HistoryServiceConfig,
    askers: HashMap<Vec<u8>, Asker>,
    /// Round-robin order of the askers, so one fast reader cannot starve the others.
    turn: VecDeque<Vec<u8>>,
    report: HistoryServiceReport,
}

impl HistoryService {
    /// A service with these bounds.
    pub fn new(config: HistoryServiceConfig) -> Self {
        HistoryService {
            config,
            askers: HashMap::new(),
            turn: VecDeque::new(),
            report: HistoryServiceReport::default(),
        }
    }

    /// One message from `asker` (its ROUTER identity) at `now`.
    pub fn handle_input(
        &mut self,
        now: Instant,
        asker: &[u8],
        frame: &[u8],
    ) -> Option<HistoryAction> {
        let refuse = |asker: &[u8], refusal| {
            Some(HistoryAction::Refuse {
                asker: asker.to_vec(),
                refusal,
            })
        };
        if asker.len() > MAX_IDENTITY_BYTES {
            self.report.refused_malformed += 1;
            return refuse(asker, Refusal::Malformed);
        }
        let message = match AskerMessage::decode(frame) {
            Ok(message) => message,
            Err(_) => {
                self.report.refused_malformed += 1;
                return refuse(asker, Refusal::Malformed);
            }
        };
        match message {
            AskerMessage::Request(request) => {
                if self.askers.contains_key(asker) {
                    self.report.refused_already_asking += 1;
                    return refuse(asker, Refusal::AlreadyAsking);
                }
                if self.askers.len() >= self.config.max_askers {
                    self.report.refused_busy += 1;
                    return refuse(asker, Refusal::Busy);
                }
                self.report.askers_accepted += 1;
                self.askers.insert(
                    asker.to_vec(),
                    Asker {
                        credit: request.credit.min(self.config.max_credit),
                        last_progress: now,
                        last_sent: BTreeMap::new(),
                    },
                );
                self.turn.push_back(asker.to_vec());
                Some(HistoryAction::Start {
                    asker: asker.to_vec(),
                    request,
                })
            }
            AskerMessage::Credit(n) => match self.askers.get_mut(asker) {
                Some(state) => {
                    state.credit = state.credit.saturating_add(n).min(self.config.max_credit);
                    // A grant of nothing is not progress: it must not keep a reader that never reads alive.
                    if n > 0 {
                        state.last_progress = now;
                    }
                    None
                }
                None => {
                    self.report.refused_unknown += 1;
                    refuse(asker, Refusal::Unknown)
                }
            },
            AskerMessage::Cancel => {
                if self.remove(asker) {
                    self.report.askers_cancelled += 1;
                    Some(HistoryAction::Forget {
                        asker: asker.to_vec(),
                    })
                } else {
                    // A cancel racing the end marker or an abandonment: nothing to answer.
                    self.report.refused_unknown += 1;
                    None
                }
            }
        }
    }

    fn remove(&mut self, asker: &[u8]) -> bool {
        if self.askers.remove(asker).is_none() {
            return false;
        }
        self.turn.retain(|a| a != asker);
        true
    }

    /// The next asker to send one batch to: the next in turn that holds credit. The loop reads a batch from
    /// that asker's journal reader, sends it and reports it with [`HistoryService::batch_sent`], or, at the
    /// journal's head, ends it with [`HistoryService::finish`].
    pub fn poll_asker(&mut self) -> Option<Vec<u8>> {
        for _ in 0..self.turn.len() {
            let asker = self.turn.pop_front()?;
            let has_credit = self.askers.get(&asker).is_some_and(|a| a.credit > 0);
            self.turn.push_back(asker.clone());
            if has_credit {
                return Some(asker);
            }
        }
        None
    }

    /// A batch of `records` records went to `asker`; `sequences` are (publisher, session, sequence) of its
    /// records in order, or only the last of each run of one session's records (all the end marker needs: a
    /// batch's sessions are noted once per run, not once per record).
    pub fn batch_sent(
        &mut self,
        now: Instant,
        asker: &[u8],
        records: u64,
        sequences: impl IntoIterator<Item = (u32, u64, u64)>,
    ) {
        let Some(state) = self.askers.get_mut(asker) else {
            return;
        };
        state.credit = state.credit.saturating_sub(1);
        state.last_progress = now;
        self.report.batches_sent += 1;
        self.report.records_sent += records;
        for (publisher, session, sequence) in sequences {
            // Bounded like every table fed from the network: the journal's publishers came from it.
            if state.last_sent.len() < MAX_END_SESSIONS
                || state.last_sent.contains_key(&(publisher, session))
            {
                state.last_sent.insert((publisher, session), sequence);
            }
        }
    }

    /// `asker`'s reader reached the journal's head: the end marker to send, and the asker is done.
    pub fn finish(&mut self, asker: &[u8]) -> Option<Vec<u8>> {
        let state = self.askers.get(asker)?;
        let sessions = state
            .last_sent
            .iter()
            .map(|(&(publisher, session), &last_sequence)| SessionEnd {
                publisher,
                session,
                last_sequence,
            })
            .collect();
        self.remove(asker);
        self.report.askers_completed += 1;
        Some(ServiceMessage::End(sessions).encode())
    }

    /// Abandons askers idle past the timeout with no credit; returns what to forget.
    pub fn handle_timeout(&mut self, now: Instant) -> Vec<HistoryAction> {
        let idle = self.config.idle_timeout;
        let abandoned: Vec<Vec<u8>> = self
            .askers
            .iter()
            .filter(|(_, a)| {
                a.credit == 0 && now.saturating_duration_since(a.last_progress) >= idle
            })
            .map(|(asker, _)| asker.clone())
            .collect();
        abandoned
            .into_iter()
            .map(|asker| {
                self.remove(&asker);
                self.report.askers_abandoned += 1;
                HistoryAction::Forget { asker }
            })
            .collect()
    }

    /// When [`HistoryService::handle_timeout`] next has something to do.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.askers
            .values()
            .filter(|a| a.credit == 0)
            .map(|a| a.last_progress + self.config.idle_timeout)
            .min()
    }

    /// Askers being served now.
    pub fn askers(&self) -> usize {
        self.askers.len()
    }

    /// What the service did so far.
    pub fn report(&self) -> HistoryServiceReport {
        self.report
    }
}

#[cfg(test)]
// A test reads the clock once for an origin and moves time on from there; the engine never reads it.
#[allow(clippy::disallowed_methods)]
mod tests {
    use super::*;
    use tickbox_wire::history::StartPoint;

    fn request(credit: u32) -> Vec<u8> {
        AskerMessage::Request(HistoryRequest {
            prefixes: vec![b"Q.".to_vec(), Vec::new()],
            start: StartPoint::Time(1_700_000_000_000_000_000),
            credit,
        })
        .encode()
    }

    fn service(max_askers: usize) -> HistoryService {
        HistoryService::new(HistoryServiceConfig {
            max_askers,
            max_credit: 8,
            idle_timeout: Duration::from_secs(2),
        })
    }

    #[test]
    fn askers_past_the_bound_and_strangers_are_refused_and_counted() {
        let now = Instant::now();
        let mut service = service(1);
        assert!(matches!(
            service.handle_input(now, b"a", &request(2)),
            Some(HistoryAction::Start { .. })
        ));
        assert_eq!(
            service.handle_input(now, b"b", &request(2)),
            Some(HistoryAction::Refuse {
                asker: b"b".to_vec(),
                refusal: Refusal::Busy
            })
        );
        assert_eq!(
            service.handle_input(now, b"a", &request(2)),
            Some(HistoryAction::Refuse {
                asker: b"a".to_vec(),
                refusal: Refusal::AlreadyAsking
            })
        );
        assert_eq!(
            service.handle_input(now, b"c", &AskerMessage::Credit(1).encode()),
            Some(HistoryAction::Refuse {
                asker: b"c".to_vec(),
                refusal: Refusal::Unknown
            })
        );
        assert_eq!(
            service.handle_input(now, b"d", b"garbage"),
            Some(HistoryAction::Refuse {
                asker: b"d".to_vec(),
                refusal: Refusal::Malformed
            })
        );
        let report = service.report();
        assert_eq!(
            (
                report.askers_accepted,
                report.refused_busy,
                report.refused_already_asking,
                report.refused_unknown,
                report.refused_malformed
            ),
            (1, 1, 1, 1, 1)
        );
    }

    #[test]
    fn batches_go_only_against_credit_taking_turns() {
        let now = Instant::now();
        let mut service = service(4);
        service.handle_input(now, b"a", &request(2));
        service.handle_input(now, b"b", &request(1000));
        let mut sent = Vec::new();
        while let Some(asker) = service.poll_asker() {
            service.batch_sent(now, &asker, 1, [(1, 1, sent.len() as u64)]);
            sent.push(asker);
        }
        // b's grant is capped at 8; the two take turns while both hold credit.
        assert_eq!(
            &sent[..4],
            &[b"a".to_vec(), b"b".to_vec(), b"a".to_vec(), b"b".to_vec()]
        );
        assert_eq!(sent.iter().filter(|a| a.as_slice() == b"a").count(), 2);
        assert_eq!(sent.iter().filter(|a| a.as_slice() == b"b").count(), 8);
        service.handle_input(now, b"a", &AskerMessage::Credit(1).encode());
        assert_eq!(service.poll_asker(), Some(b"a".to_vec()));
    }

    #[test]
    fn the_end_marker_names_each_sessions_last_sequence() {
        let now = Instant::now();
        let mut service = service(4);
        service.handle_input(now, b"a", &request(8));
        service.batch_sent(now, b"a", 3, [(1, 10, 1), (2, 20, 1), (1, 10, 2)]);
        service.batch_sent(now, b"a", 2, [(1, 11, 1), (2, 20, 2)]);
        let end = service.finish(b"a").unwrap();
        assert_eq!(
            ServiceMessage::decode(&end).unwrap(),
            ServiceMessage::End(vec![
                SessionEnd {
                    publisher: 1,
                    session: 10,
                    last_sequence: 2
                },
                SessionEnd {
                    publisher: 1,
                    session: 11,
                    last_sequence: 1
                },
                SessionEnd {
                    publisher: 2,
                    session: 20,
                    last_sequence: 2
                },
            ])
        );
        assert_eq!(service.askers(), 0);
        let report = service.report();
        assert_eq!(
            (
                report.askers_completed,
                report.batches_sent,
                report.records_sent
            ),
            (1, 2, 5)
        );
    }

    /// Two askers and one that stops granting credit: the silent one is abandoned and counted after the idle
    /// timeout, the reading one is never abandoned however long it takes.
    #[test]
    fn an_asker_that_stops_reading_is_abandoned_the_others_are_not() {
        let start = Instant::now();
        let mut service = service(4);
        service.handle_input(start, b"reader", &request(1));
        service.handle_input(start, b"silent", &request(1));
        for second in 0..10u64 {
            let now = start + Duration::from_millis(500 * second);
            while let Some(asker) = service.poll_asker() {
                service.batch_sent(now, &asker, 1, [(1, 1, second)]);
            }
            // Only the reader grants more.
            service.handle_input(now, b"reader", &AskerMessage::Credit(1).encode());
            let forgotten = service.handle_timeout(now);
            // The silent asker's last batch went at 0 s; the idle timeout is 2 s.
            let expected = if second == 4 {
                vec![HistoryAction::Forget {
                    asker: b"silent".to_vec(),
                }]
            } else {
                Vec::new()
            };
            assert_eq!(forgotten, expected, "at {} ms", 500 * second);
        }
        assert_eq!(service.askers(), 1);
        assert_eq!(service.report().askers_abandoned, 1);
        assert!(service.finish(b"reader").is_some());
        assert!(service.finish(b"silent").is_none());
        assert_eq!(service.poll_timeout(), None);
    }

    #[test]
    fn a_cancel_forgets_the_asker() {
        let now = Instant::now();
        let mut service = service(4);
        service.handle_input(now, b"a", &request(1));
        assert_eq!(
            service.handle_input(now, b"a", &AskerMessage::Cancel.encode()),
            Some(HistoryAction::Forget {
                asker: b"a".to_vec()
            })
        );
        assert_eq!(service.poll_asker(), None);
        assert_eq!(service.report().askers_cancelled, 1);
    }
}
