//! The one error type of the journal. Every failure a caller can meet (bad file, torn or corrupt data, a lapped
//! reader, a locked journal) is a variant here; nothing in this crate panics on file contents.

use std::path::PathBuf;

/// Errors from opening, writing, reading or verifying a journal.
#[derive(Debug, thiserror::Error)]
pub enum JournalError {
    /// An operating-system call on a journal file failed.
    #[error("{path}: {source}")]
    Io {
        /// The file concerned.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// The file does not start with the journal magic: it is not a tickbox journal.
    #[error("{path}: not a tickbox journal (magic {found:02x?}, expected {expected:02x?})")]
    BadMagic {
        /// The file concerned.
        path: PathBuf,
        /// The file's first 8 bytes.
        found: [u8; 8],
        /// [`MAGIC`](crate::MAGIC).
        expected: [u8; 8],
    },
    /// The file is a tickbox journal written in a format version this build cannot read.
    #[error(
        "{path}: unsupported journal format version {found} (this build reads version {supported})"
    )]
    UnsupportedVersion {
        /// The file concerned.
        path: PathBuf,
        /// The version in the file's header.
        found: u32,
        /// [`FORMAT_VERSION`](crate::FORMAT_VERSION).
        supported: u32,
    },
    /// The file is shorter than its header says it must be.
    #[error("{path}: truncated journal: {actual} bytes, expected {expected}")]
    Truncated {
        /// The file concerned.
        path: PathBuf,
        /// The file's length in bytes.
        actual: u64,
        /// The length its header implies: header size plus capacity.
        expected: u64,
    },
    /// The header fails its checksum or holds impossible values; also a `.tbj` file (the journal's own extension)
    /// whose magic is gone, such as a zeroed header: damage to a journal, not a file of another kind.
    #[error("{path}: corrupt journal header at offset {offset}: {reason}")]
    CorruptHeader {
        /// The file concerned.
        path: PathBuf,
        /// Byte offset in that file of the header part that fails (0: the static header, which one checksum
        /// covers; the writer-maintained pointers start at 512).
        offset: u64,
        /// Which check failed, with the values found.
        reason: String,
    },
    /// A published record fails its checksum, has an impossible length or breaks the sequence.
    #[error("{path}: corrupt record at file offset {offset}: {reason}")]
    CorruptRecord {
        /// The file concerned.
        path: PathBuf,
        /// Byte offset of the record's frame in that file.
        offset: u64,
        /// Which check failed, with the values found.
        reason: String,
    },
    /// A ring reader fell more than one capacity behind the writer: the records it wanted were overwritten.
    /// The reader has already moved to the oldest record still in the ring; the next `next()` call resumes there.
    #[error("reader lapped by the writer: record seq {wanted_seq} was overwritten; resuming at the oldest record")]
    Lapped {
        /// The sequence the reader expected next (0 if it had not read anything yet).
        wanted_seq: u64,
    },
    /// A payload larger than this journal accepts (half the ring capacity or segment size).
    #[error("record payload of {len} bytes exceeds this journal's maximum of {max}")]
    RecordTooLarge {
        /// The payload's length in bytes.
        len: usize,
        /// The largest payload this journal takes, in bytes.
        max: usize,
    },
    /// Another process (or another `Writer` in this one) holds the journal's writer lock.
    #[error("{path}: journal is locked by another writer")]
    Locked {
        /// The ring file, or the archive directory.
        path: PathBuf,
    },
    /// Options that cannot describe a journal (capacity too small, mode mismatch, ...).
    #[error("invalid journal options: {0}")]
    InvalidOptions(String),
    /// A journal path that exists but is neither a ring file nor an archive directory, or does not exist.
    #[error("{path}: {reason}")]
    NotAJournal {
        /// The path given.
        path: PathBuf,
        /// What was found there instead.
        reason: String,
    },
}

impl JournalError {
    /// A header that cannot be trusted (damaged, or from an unknown version, or cut short): for an archive segment,
    /// the whole segment is damage that readers pass over and report, as they do a corrupt record.
    pub fn is_damaged_header(&self) -> bool {
        matches!(
            self,
            JournalError::BadMagic { .. }
                | JournalError::UnsupportedVersion { .. }
                | JournalError::CorruptHeader { .. }
                | JournalError::Truncated { .. }
        )
    }

    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        JournalError::Io {
            path: path.into(),
            source,
        }
    }
}

/// Shorthand used throughout the crate.
pub type Result<T, E = JournalError> = std::result::Result<T, E>;
