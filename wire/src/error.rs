use crate::header::Kind;

/// Why a frame could not be decoded. Frames come from the network or disk, so every variant is an expected,
/// countable event, not a bug.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    #[error("frame has no topic terminator (no NUL byte)")]
    MissingTopicTerminator,
    #[error("topic is empty")]
    EmptyTopic,
    #[error("topic is not valid UTF-8")]
    TopicNotUtf8,
    #[error("frame truncated: header needs {needed} bytes after the topic, got {got}")]
    TruncatedHeader { needed: usize, got: usize },
    #[error("unknown wire version {0} (this build speaks {ver})", ver = crate::WIRE_VERSION)]
    UnknownVersion(u8),
    #[error("unknown message kind {0}")]
    UnknownKind(u8),
    #[error("{kind:?} payload must be {expected} bytes, got {got}")]
    PayloadLength {
        kind: Kind,
        expected: usize,
        got: usize,
    },
    #[error("invalid {field} value {value} in {kind:?} payload")]
    InvalidField {
        kind: Kind,
        field: &'static str,
        value: u64,
    },
}

/// Why a message could not be encoded: these are caller mistakes (bad topic, short buffer).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EncodeError {
    #[error("topic must be non-empty and must not contain NUL")]
    InvalidTopic,
    #[error("buffer too small: need {needed} bytes, have {have}")]
    BufferTooSmall { needed: usize, have: usize },
    #[error("payload kind {payload:?} does not match header kind {header:?}")]
    KindMismatch { header: Kind, payload: Kind },
}
