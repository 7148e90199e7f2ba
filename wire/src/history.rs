//! The history service's messages (a recorder's `record --serve`, a late joiner's `subscribe --catch-up`): what
//! an asker and the service exchange, every message one frame after the ROUTER's identity frame. The service's
//! decisions live with the recorder (`tickbox_recorder::HistoryService`); the asker's loop with the subscriber.
//!
//! ```text
//!  asker                                   service
//!  REQUEST prefixes, start point, credit ─►
//!                                       ◄─ BATCH (capture times + a wire batch frame of journal records)  per credit
//!  CREDIT n                              ─►
//!                                       ◄─ BATCH …
//!                                       ◄─ END (per publisher session: the last sequence sent)
//!                                       ◄─ REFUSED reason   (instead of any of the above)
//!  CANCEL                                ─►  (the asker gives up; the service forgets it)
//! ```
//!
//! Every count and length is checked against its bound before anything is kept; a message that does not decode
//! is a typed error, never a panic.

#![deny(clippy::disallowed_methods, clippy::disallowed_types)]

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

/// Bytes of a `BATCH` message before its capture times: magic, command, record count.
const BATCH_HEAD_FIXED: usize = HISTORY_MAGIC.len() + 1 + 2;

/// Bytes of a `BATCH` message before its batch frame when it carries `records` records (see
/// [`ServiceMessage::write_batch_head`]).
pub const fn batch_head_len(records: usize) -> usize {
    BATCH_HEAD_FIXED + 8 * records
}

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
        let records = crate::batch::batch_records(frame)
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
                    // One spelling per message: "start" carries no time.
                    (0, 0) => StartPoint::Start,
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
        out.resize(batch_head_len(captures.len()), 0);
        ServiceMessage::write_batch_head(captures, out);
        out.extend_from_slice(frame);
    }

    /// Writes everything of a `BATCH` message before its batch frame (magic, command, count, these capture
    /// times) into `out`, which must be exactly [`batch_head_len`]`(captures.len())` bytes: a sender that builds
    /// the batch frame in its send buffer first, leaving room before it, writes the head just in front of it and
    /// sends the two as one message with no copy. False, writing nothing, when `out` has another length or there
    /// are more captures than a batch holds.
    pub fn write_batch_head(captures: &[u64], out: &mut [u8]) -> bool {
        let Ok(count) = u16::try_from(captures.len()) else {
            return false;
        };
        if out.len() != batch_head_len(captures.len()) {
            return false;
        }
        let (fixed, times) = out.split_at_mut(BATCH_HEAD_FIXED);
        fixed[..4].copy_from_slice(&HISTORY_MAGIC);
        fixed[4] = BATCH;
        fixed[5..7].copy_from_slice(&count.to_le_bytes());
        for (slot, capture) in times.chunks_exact_mut(8).zip(captures) {
            slot.copy_from_slice(&capture.to_le_bytes());
        }
        true
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
        let mut builder = crate::BatchBuilder::new(4096, 8);
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
        // Built in place: the frame first, the head written in front of it afterwards.
        let frame = builder.frame().to_vec();
        let mut in_place = vec![0u8; batch_head_len(2) + frame.len()];
        in_place[batch_head_len(2)..].copy_from_slice(&frame);
        assert!(ServiceMessage::write_batch_head(
            &[11, 22],
            &mut in_place[..batch_head_len(2)]
        ));
        assert_eq!(in_place, encoded);
        assert!(!ServiceMessage::write_batch_head(
            &[11],
            &mut in_place[..batch_head_len(2)]
        ));
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
}
