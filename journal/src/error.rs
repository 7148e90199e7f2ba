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
    /// The file system has no room for the journal to grow: it is full (`ENOSPC`), a disk quota is reached
    /// (`EDQUOT`), or the file would pass the process's file size limit (`EFBIG`, `RLIMIT_FSIZE`; such a process
    /// must ignore `SIGXFSZ`, whose default action kills it before the error is returned). The writer reserves
    /// space ahead of its records, so this comes from `append` (or from `Writer::open`) before any record is
    /// stored where there is no room: every record appended before it is published and kept, the writer stays
    /// usable, and closing it leaves a journal that verifies. An append after it tries again.
    #[error("{path}: no space left for the journal ({source})")]
    DiskFull {
        /// The file that could not grow.
        path: PathBuf,
        /// The OS error (`ENOSPC`, `EDQUOT` or `EFBIG`).
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
        "{path}: unsupported journal format version {found} (this build reads versions 1 to {supported})"
    )]
    UnsupportedVersion {
        /// The file concerned.
        path: PathBuf,
        /// The version in the file's header.
        found: u32,
        /// The newest version this build reads, [`FORMAT_VERSION`](crate::FORMAT_VERSION).
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
    /// The journal (a ring, or an archive's last segment) is compressed: readers read it like any journal, but a
    /// writer cannot append to it. Record into a new journal.
    #[error("{path}: journal is compressed (read-only): a writer cannot append to it")]
    Compressed {
        /// The compressed file.
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

    /// The file system has no room for the journal ([`JournalError::DiskFull`]).
    pub fn is_disk_full(&self) -> bool {
        matches!(self, JournalError::DiskFull { .. })
    }

    /// An I/O error on `path`: [`JournalError::DiskFull`] for the errors that mean no room, else
    /// [`JournalError::Io`].
    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        let path = path.into();
        match source.raw_os_error() {
            Some(libc::ENOSPC | libc::EDQUOT | libc::EFBIG) => {
                JournalError::DiskFull { path, source }
            }
            _ => JournalError::Io { path, source },
        }
    }
}

/// Shorthand used throughout the crate.
pub type Result<T, E = JournalError> = std::result::Result<T, E>;
