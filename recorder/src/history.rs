//! The history service a recorder offers late joiners (`record --serve`), sans-IO: the messages an asker and the
//! service exchange, and the service's decisions (who may ask, whom to serve next, who is abandoned, what the end
//! marker says). The socket loop owns the ROUTER, the clock and one journal reader per asker.
//!
//! The conversation, every message one frame (after the ROUTER's identity frame):
//!
//! ```text
//!  asker                                   service
//!  REQUEST prefixes, start point, credit ─►
//!                                       ◄─ BATCH (a wire batch frame of journal records)   one per credit
//!  CREDIT n                              ─►
//!                                       ◄─ BATCH …
//!                                       ◄─ END (per publisher session: the last sequence sent)
//!                                       ◄─ REFUSED reason   (instead of any of the above)
//!  CANCEL                                ─►  (the asker gives up; the service forgets it)
//! ```
//!
//! An asker's credit is the number of batches it has room for, so neither side queues without bound: the service
//! sends only against credit, and an asker that stops granting credit while it still has records to receive is
//! abandoned after the idle timeout and counted. The number of askers, the credit one may grant and the prefixes
//! one may name are bounded; anything beyond is refused and counted, and a message that does not decode is counted
//! and answered with a refusal, never a panic.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::time::{Duration, Instant};

use serde::Serialize;

/// The first bytes of every history message: the protocol and its version.
pub const HISTORY_MAGIC: [u8; 4] = *b"TBH1";
/// At most this many topic prefixes in one request.
pub const MAX_PREFIXES: usize = 64;
/// At most this many bytes in one prefix (libzmq's subscription trie recurses per byte: see the libzmq traps).
pub const MAX_PREFIX_BYTES: usize = 256;
/// At most this many sessions in one end marker.
pub const MAX_END_SESSIONS: usize = 4096;
/// At most this many bytes of a ROUTER identity kept per asker.
pub const MAX_IDENTITY_BYTES: usize = 256;

const REQUEST: u8 = 1;
const CREDIT: u8 = 2;
const CANCEL: u8 = 3;
const BATCH: u8 = 16;
const END: u8 = 17;
const REFUSED: u8 = 18;

/// Where a history starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum StartPoint {
    /// The journal's oldest record.
    Start,
    /// The first record whose origin time is at or after this (ns since the Unix epoch).
    Time(u64),
}

/// What an asker wants.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HistoryRequest {
    /// Topic prefixes, as a SUB subscribes (empty prefix: everything). At most [`MAX_PREFIXES`].
    pub prefixes: Vec<Vec<u8>>,
    /// Where to start.
    pub start: StartPoint,
    /// Batches the asker has room for now.
    pub credit: u32,
}

/// One publisher session's last sequence in an end marker.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub struct SessionEnd {
    /// The publisher id.
    pub publisher: u32,
    /// Its session.
    pub session: u64,
    /// The last sequence of this session the service sent.
    pub last_sequence: u64,
}

/// Why the service refused an asker.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Refusal {
    /// The service already serves its maximum of askers.
    Busy,
    /// The request did not decode or broke a bound.
    Malformed,
    /// A second request while the first is being served.
    AlreadyAsking,
    /// Credit or a cancel from an asker the service does not know (abandoned, or never asked).
    Unknown,
}

/// A message from an asker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AskerMessage {
    /// Start a history.
    Request(HistoryRequest),
    /// Room for this many more batches.
    Credit(u32),
    /// Stop sending; the asker is gone.
    Cancel,
}

/// Journal records as a `BATCH` message carries them: each record's capture time (when the recorder took it off
/// the wire, so a late joiner's snail judges history as `replay --local` does) and a wire batch frame of the
/// records exactly as recorded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HistoryBatch<'a> {
    captures: &'a [u8],
    frame: &'a [u8],
}

impl<'a> HistoryBatch<'a> {
    /// Pairs capture times (little-endian u64s, one per record) with a batch frame holding as many records.
    pub fn new(
        captures: &'a [u8],
        frame: &'a [u8],
    ) -> Result<HistoryBatch<'a>, HistoryDecodeError> {
        let records = tickbox_wire::batch_records(frame)
            .map_err(|_| HistoryDecodeError::Bound("not a batch frame"))?
            .declared_count();
        if captures.len() != usize::from(records) * 8 {
            return Err(HistoryDecodeError::Bound(
                "capture times and records disagree",
            ));
        }
        Ok(HistoryBatch { captures, frame })
    }

    /// The wire batch frame.
    pub fn frame(&self) -> &'a [u8] {
        self.frame
    }

    /// Records in the batch.
    pub fn len(&self) -> usize {
        self.captures.len() / 8
    }

    /// True when the batch holds no record.
    pub fn is_empty(&self) -> bool {
        self.captures.is_empty()
    }

    /// The capture time of record `i` (ns since the Unix epoch).
    pub fn capture_ns(&self, i: usize) -> Option<u64> {
        let bytes = self.captures.get(i * 8..i * 8 + 8)?;
        Some(u64::from_le_bytes(bytes.try_into().ok()?))
    }
}

/// A message from the service.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ServiceMessage<'a> {
    /// Journal records with their capture times.
    Batch(HistoryBatch<'a>),
    /// The history is complete up to the journal's head when it was reached.
    End(Vec<SessionEnd>),
    /// The asker will get nothing (more).
    Refused(Refusal),
}

/// Why a history message did not decode.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HistoryDecodeError {
    /// Not a history message, or a version this build does not speak.
    #[error("not a history message (bad magic)")]
    Magic,
    /// The message ends before its fields do.
    #[error("truncated history message")]
    Truncated,
    /// Bytes left over after the last field.
    #[error("{0} trailing bytes after a history message")]
    Trailing(usize),
    /// A command byte this build does not know.
    #[error("unknown history command {0}")]
    Command(u8),
    /// A bound was broken.
    #[error("history message breaks a bound: {0}")]
    Bound(&'static str),
}

struct Bytes<'a>(&'a [u8]);

impl<'a> Bytes<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], HistoryDecodeError> {
        if self.0.len() < n {
            return Err(HistoryDecodeError::Truncated);
        }
        let (head, tail) = self.0.split_at(n);
        self.0 = tail;
        Ok(head)
    }
    fn u8(&mut self) -> Result<u8, HistoryDecodeError> {
        Ok(self.take(1)?[0])
    }
    fn u16(&mut self) -> Result<u16, HistoryDecodeError> {
        Ok(u16::from_le_bytes(
            self.take(2)?.try_into().expect("2 bytes"),
        ))
    }
    fn u32(&mut self) -> Result<u32, HistoryDecodeError> {
        Ok(u32::from_le_bytes(
            self.take(4)?.try_into().expect("4 bytes"),
        ))
    }
    fn u64(&mut self) -> Result<u64, HistoryDecodeError> {
        Ok(u64::from_le_bytes(
            self.take(8)?.try_into().expect("8 bytes"),
        ))
    }
    fn done(self) -> Result<(), HistoryDecodeError> {
        match self.0.len() {
            0 => Ok(()),
            n => Err(HistoryDecodeError::Trailing(n)),
        }
    }
}

fn command(frame: &[u8]) -> Result<(u8, Bytes<'_>), HistoryDecodeError> {
    let mut bytes = Bytes(frame);
    if bytes.take(4).map_err(|_| HistoryDecodeError::Magic)? != HISTORY_MAGIC {
        return Err(HistoryDecodeError::Magic);
    }
    let command = bytes.u8()?;
    Ok((command, bytes))
}

impl AskerMessage {
    /// The message as one frame.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = HISTORY_MAGIC.to_vec();
        match self {
            AskerMessage::Request(request) => {
                out.push(REQUEST);
                match request.start {
                    StartPoint::Start => {
                        out.push(0);
                        out.extend_from_slice(&0u64.to_le_bytes());
                    }
                    StartPoint::Time(ns) => {
                        out.push(1);
                        out.extend_from_slice(&ns.to_le_bytes());
                    }
                }
                out.extend_from_slice(&request.credit.to_le_bytes());
                out.extend_from_slice(&(request.prefixes.len() as u16).to_le_bytes());
                for prefix in &request.prefixes {
                    out.extend_from_slice(&(prefix.len() as u16).to_le_bytes());
                    out.extend_from_slice(prefix);
                }
            }
            AskerMessage::Credit(n) => {
                out.push(CREDIT);
                out.extend_from_slice(&n.to_le_bytes());
            }
            AskerMessage::Cancel => out.push(CANCEL),
        }
        out
    }

    /// Reads one frame from an asker; bounds are checked before anything is kept.
    pub fn decode(frame: &[u8]) -> Result<AskerMessage, HistoryDecodeError> {
        let (command, mut bytes) = command(frame)?;
        let message = match command {
            REQUEST => {
                let start = match (bytes.u8()?, bytes.u64()?) {
                    (0, _) => StartPoint::Start,
                    (1, ns) => StartPoint::Time(ns),
                    _ => return Err(HistoryDecodeError::Bound("start point kind")),
                };
                let credit = bytes.u32()?;
                let count = usize::from(bytes.u16()?);
                if count > MAX_PREFIXES {
                    return Err(HistoryDecodeError::Bound("too many prefixes"));
                }
                let mut prefixes = Vec::with_capacity(count);
                for _ in 0..count {
                    let len = usize::from(bytes.u16()?);
                    if len > MAX_PREFIX_BYTES {
                        return Err(HistoryDecodeError::Bound("prefix too long"));
                    }
                    prefixes.push(bytes.take(len)?.to_vec());
                }
                AskerMessage::Request(HistoryRequest {
                    prefixes,
                    start,
                    credit,
                })
            }
            CREDIT => AskerMessage::Credit(bytes.u32()?),
            CANCEL => AskerMessage::Cancel,
            other => return Err(HistoryDecodeError::Command(other)),
        };
        bytes.done()?;
        Ok(message)
    }
}

impl<'a> ServiceMessage<'a> {
    /// The message as one frame.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = HISTORY_MAGIC.to_vec();
        match self {
            ServiceMessage::Batch(batch) => {
                out.push(BATCH);
                out.extend_from_slice(&(batch.len() as u16).to_le_bytes());
                out.extend_from_slice(batch.captures);
                out.extend_from_slice(batch.frame);
            }
            ServiceMessage::End(sessions) => {
                out.push(END);
                out.extend_from_slice(&(sessions.len() as u32).to_le_bytes());
                for end in sessions {
                    out.extend_from_slice(&end.publisher.to_le_bytes());
                    out.extend_from_slice(&end.session.to_le_bytes());
                    out.extend_from_slice(&end.last_sequence.to_le_bytes());
                }
            }
            ServiceMessage::Refused(refusal) => {
                out.push(REFUSED);
                out.push(match refusal {
                    Refusal::Busy => 1,
                    Refusal::Malformed => 2,
                    Refusal::AlreadyAsking => 3,
                    Refusal::Unknown => 4,
                });
            }
        }
        out
    }

    /// Writes a `BATCH` message of these capture times (one per record) and batch frame into `out`, reusing its
    /// allocation.
    pub fn encode_batch(captures: &[u64], frame: &[u8], out: &mut Vec<u8>) {
        out.clear();
        out.extend_from_slice(&HISTORY_MAGIC);
        out.push(BATCH);
        out.extend_from_slice(&(captures.len() as u16).to_le_bytes());
        for capture in captures {
            out.extend_from_slice(&capture.to_le_bytes());
        }
        out.extend_from_slice(frame);
    }

    /// Reads one frame from the service (a batch borrows the frame).
    pub fn decode(frame: &'a [u8]) -> Result<ServiceMessage<'a>, HistoryDecodeError> {
        let (command, mut bytes) = command(frame)?;
        let message = match command {
            BATCH => {
                let count = usize::from(bytes.u16()?);
                let captures = bytes.take(count * 8)?;
                return Ok(ServiceMessage::Batch(HistoryBatch::new(captures, bytes.0)?));
            }
            END => {
                let count = bytes.u32()? as usize;
                if count > MAX_END_SESSIONS {
                    return Err(HistoryDecodeError::Bound(
                        "too many sessions in an end marker",
                    ));
                }
                let mut sessions = Vec::with_capacity(count);
                for _ in 0..count {
                    sessions.push(SessionEnd {
                        publisher: bytes.u32()?,
                        session: bytes.u64()?,
                        last_sequence: bytes.u64()?,
                    });
                }
                ServiceMessage::End(sessions)
            }
            REFUSED => ServiceMessage::Refused(match bytes.u8()? {
                1 => Refusal::Busy,
                2 => Refusal::Malformed,
                3 => Refusal::AlreadyAsking,
                4 => Refusal::Unknown,
                _ => return Err(HistoryDecodeError::Bound("refusal reason")),
            }),
            other => return Err(HistoryDecodeError::Command(other)),
        };
        bytes.done()?;
        Ok(message)
    }
}

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

    /// A batch went to `asker` holding these records (publisher, session, sequence) in order.
    pub fn batch_sent(
        &mut self,
        now: Instant,
        asker: &[u8],
        records: impl IntoIterator<Item = (u32, u64, u64)>,
    ) {
        let Some(state) = self.askers.get_mut(asker) else {
            return;
        };
        state.credit = state.credit.saturating_sub(1);
        state.last_progress = now;
        self.report.batches_sent += 1;
        for (publisher, session, sequence) in records {
            self.report.records_sent += 1;
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
mod tests {
    use super::*;

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
    fn messages_round_trip() {
        let messages = [
            AskerMessage::Request(HistoryRequest {
                prefixes: vec![b"T.AAPL".to_vec()],
                start: StartPoint::Start,
                credit: 4,
            }),
            AskerMessage::Credit(7),
            AskerMessage::Cancel,
        ];
        for message in messages {
            assert_eq!(AskerMessage::decode(&message.encode()).unwrap(), message);
        }
        let end = ServiceMessage::End(vec![SessionEnd {
            publisher: 3,
            session: 9,
            last_sequence: 1234,
        }]);
        assert_eq!(ServiceMessage::decode(&end.encode()).unwrap(), end);
        let mut builder = tickbox_wire::BatchBuilder::new(4096, 8);
        assert!(builder.try_push(b"Q.A\0not decoded here"));
        assert!(builder.try_push(b"Q.B\0nor this"));
        let mut encoded = Vec::new();
        ServiceMessage::encode_batch(&[11, 22], builder.frame(), &mut encoded);
        let ServiceMessage::Batch(batch) = ServiceMessage::decode(&encoded).unwrap() else {
            panic!("not a batch");
        };
        assert_eq!(
            (batch.len(), batch.capture_ns(0), batch.capture_ns(1)),
            (2, Some(11), Some(22))
        );
        assert_eq!(batch.frame(), builder.frame());
        assert_eq!(ServiceMessage::Batch(batch).encode(), encoded);
        let mut wrong = Vec::new();
        ServiceMessage::encode_batch(&[11], builder.frame(), &mut wrong);
        assert_eq!(
            ServiceMessage::decode(&wrong),
            Err(HistoryDecodeError::Bound(
                "capture times and records disagree"
            ))
        );
        let refused = ServiceMessage::Refused(Refusal::Busy);
        assert_eq!(ServiceMessage::decode(&refused.encode()).unwrap(), refused);
    }

    /// Every prefix of a valid message, and every one-byte corruption of it, decodes to a typed error or a
    /// message: never a panic.
    #[test]
    fn damaged_messages_are_errors() {
        let frame = request(3);
        for len in 0..frame.len() {
            assert!(
                AskerMessage::decode(&frame[..len]).is_err(),
                "prefix of {len} bytes"
            );
        }
        for i in 0..frame.len() {
            for bit in 0..8 {
                let mut damaged = frame.clone();
                damaged[i] ^= 1 << bit;
                let _ = AskerMessage::decode(&damaged);
            }
        }
        let mut trailing = frame.clone();
        trailing.push(0);
        assert_eq!(
            AskerMessage::decode(&trailing),
            Err(HistoryDecodeError::Trailing(1))
        );
    }

    #[test]
    fn bounds_are_checked_before_anything_is_kept() {
        let too_many = AskerMessage::Request(HistoryRequest {
            prefixes: vec![Vec::new(); MAX_PREFIXES + 1],
            start: StartPoint::Start,
            credit: 1,
        });
        assert_eq!(
            AskerMessage::decode(&too_many.encode()),
            Err(HistoryDecodeError::Bound("too many prefixes"))
        );
        let too_long = AskerMessage::Request(HistoryRequest {
            prefixes: vec![vec![b'x'; MAX_PREFIX_BYTES + 1]],
            start: StartPoint::Start,
            credit: 1,
        });
        assert_eq!(
            AskerMessage::decode(&too_long.encode()),
            Err(HistoryDecodeError::Bound("prefix too long"))
        );
        let mut huge_end = HISTORY_MAGIC.to_vec();
        huge_end.push(END);
        huge_end.extend_from_slice(&u32::MAX.to_le_bytes());
        assert!(ServiceMessage::decode(&huge_end).is_err());
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
            service.batch_sent(now, &asker, [(1, 1, sent.len() as u64)]);
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
        service.batch_sent(now, b"a", [(1, 10, 1), (2, 20, 1), (1, 10, 2)]);
        service.batch_sent(now, b"a", [(1, 11, 1), (2, 20, 2)]);
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
                service.batch_sent(now, &asker, [(1, 1, second)]);
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
