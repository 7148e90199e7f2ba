use crate::kind::Kind;

/// Why a frame could not be decoded. Frames come from the network or disk, so every variant is an expected,
/// countable event, not a bug.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// No NUL byte ends the topic, so the frame has no header at all (not a tickbox frame, or cut inside the topic).
    #[error("frame has no topic terminator (no NUL byte)")]
    MissingTopicTerminator,
    /// The frame starts with NUL: a zero-length topic, which no encoder writes (tap events look like this).
    #[error("topic is empty")]
    EmptyTopic,
    /// The topic bytes before the NUL are not UTF-8.
    #[error("topic is not valid UTF-8")]
    TopicNotUtf8,
    /// Fewer bytes follow the topic than the header of its wire version needs.
    #[error("frame truncated: header needs {needed} bytes after the topic, got {got}")]
    TruncatedHeader {
        /// Header length of the frame's wire version, in bytes ([`crate::HEADER_LEN`] or
        /// [`crate::HEADER_LEN_V1`]).
        needed: usize,
        /// Bytes actually present after the topic terminator.
        got: usize,
    },
    /// The header's version byte is neither 1 nor [`crate::WIRE_VERSION`]: a newer (or corrupt) publisher.
    #[error("unknown wire version {0} (this build speaks {ver})", ver = crate::WIRE_VERSION)]
    UnknownVersion(u8),
    /// The header's kind byte names no [`Kind`] this build knows.
    #[error("unknown message kind {0}")]
    UnknownKind(u8),
    /// The payload is not exactly the fixed size of its kind (truncated, padded, or mislabelled).
    #[error("{kind:?} payload must be {expected} bytes, got {got}")]
    PayloadLength {
        /// The kind named by the header.
        kind: Kind,
        /// [`crate::Payload::encoded_len`] of that kind, in bytes.
        expected: usize,
        /// Payload bytes actually present after the header.
        got: usize,
    },
    /// A payload enum byte (a [`crate::Side`] or [`crate::GapCause`]) holds no known variant.
    #[error("invalid {field} value {value} in {kind:?} payload")]
    InvalidField {
        /// The kind of the payload that failed.
        kind: Kind,
        /// Which field: `"side"`, `"cause"`, or `"payload"` when bincode failed some other way.
        field: &'static str,
        /// The offending raw value (0 for `"payload"`).
        value: u64,
    },
    /// The frame does not start with the batch topic `#B` and its NUL (see [`crate::batch_records`]).
    #[error("not a batch frame (does not start with \"#B\\0\")")]
    NotABatch,
    /// A batch frame shorter than its 7-byte header.
    #[error("batch truncated: header needs 7 bytes, got {got}")]
    TruncatedBatchHeader {
        /// Bytes present.
        got: usize,
    },
    /// The batch version byte is not [`crate::BATCH_VERSION`]: the record layout is unknown.
    #[error("unknown batch version {0} (this build speaks {ver})", ver = crate::BATCH_VERSION)]
    UnknownBatchVersion(u8),
    /// A batch's record (its length prefix, or the bytes the prefix promises) runs past the end of the frame:
    /// the header's count says more records than the bytes hold, or a length is corrupt.
    #[error("batch record {index} truncated: needs {needed} bytes, got {got}")]
    TruncatedBatchRecord {
        /// Zero-based position of the record in the batch.
        index: u16,
        /// Bytes the record (or its 2-byte length prefix) needs.
        needed: usize,
        /// Bytes left in the frame.
        got: usize,
    },
    /// A batch record of length 0, which no writer produces.
    #[error("batch record {index} is empty")]
    EmptyBatchRecord {
        /// Zero-based position of the record in the batch.
        index: u16,
    },
    /// Bytes follow the last record the batch header counts.
    #[error("batch of {count} records has {extra} trailing bytes")]
    BatchTrailingBytes {
        /// The header's record count.
        count: u16,
        /// Bytes after the last counted record.
        extra: usize,
    },
}

/// Why a message could not be encoded: these are caller mistakes (bad topic, short buffer).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EncodeError {
    /// The topic is empty, contains NUL (which would make the frame's topic terminator ambiguous), or starts
    /// with `#`, which is reserved for frames that are not data (`#B`, a batch), so prefix subscriptions never
    /// match them.
    #[error("topic must be non-empty, must not contain NUL and must not start with '#'")]
    InvalidTopic,
    /// The output buffer is shorter than [`crate::encoded_len`] for this topic and kind.
    #[error("buffer too small: need {needed} bytes, have {have}")]
    BufferTooSmall {
        /// Bytes the frame needs.
        needed: usize,
        /// Bytes the buffer holds.
        have: usize,
    },
    /// The header says one kind and the payload is another; the frame would not decode.
    #[error("payload kind {payload:?} does not match header kind {header:?}")]
    KindMismatch {
        /// The kind in the [`crate::Header`].
        header: Kind,
        /// The kind of the [`crate::Payload`] given.
        payload: Kind,
    },
}

impl TryFrom<u8> for Kind {
    type Error = DecodeError;

    /// The kind whose wire byte is `value`; [`DecodeError::UnknownKind`] for any other byte.
    fn try_from(value: u8) -> Result<Self, DecodeError> {
        // A match, not a search of `Kind::ALL`: every frame's header is read through here.
        match value {
            1 => Ok(Kind::Quote),
            2 => Ok(Kind::Trade),
            3 => Ok(Kind::Heartbeat),
            4 => Ok(Kind::BookLevel),
            5 => Ok(Kind::Gap),
            other => Err(DecodeError::UnknownKind(other)),
        }
    }
}
