use std::path::PathBuf;

/// Why a vendor frame could not be decoded. Frames come from disks and networks: every variant is an expected
/// event, never a panic.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    /// The frame is not a tickbox frame at all (no topic, bad header).
    #[error("not a tickbox frame: {0}")]
    NotAFrame(&'static str),
    /// A well-formed header whose kind is not [`crate::VENDOR_KIND`].
    #[error("kind {0} is not a vendor record")]
    OtherKind(u8),
    /// The vendor payload is shorter than its 8-byte prefix.
    #[error("vendor payload of {0} bytes is shorter than its 8-byte prefix")]
    Short(usize),
    /// A vendor this build does not know (only 1, Databento DBN).
    #[error("unknown vendor {0}")]
    UnknownVendor(u8),
    /// The record's own length (its first byte times 4) disagrees with the bytes present.
    #[error("DBN record says {said} bytes, payload holds {got}")]
    RecordLength {
        /// Length the record header states.
        said: usize,
        /// Bytes actually present after the prefix.
        got: usize,
    },
    /// The prefix's rtype differs from the record header's.
    #[error("prefix rtype {prefix:#04x} differs from the record's {record:#04x}")]
    RtypeMismatch {
        /// Rtype in the 8-byte prefix.
        prefix: u8,
        /// Rtype in the DBN record header.
        record: u8,
    },
}

/// Why an import or export failed.
#[derive(Debug, thiserror::Error)]
pub enum DbnError {
    /// A file the importer refuses, naming it and why.
    #[error("{path}: {why}")]
    Refused {
        /// The file.
        path: PathBuf,
        /// Why it cannot be imported.
        why: String,
    },
    /// The `dbn` crate failed while reading or writing a file.
    #[error("{path}: {source}")]
    Dbn {
        /// The file.
        path: PathBuf,
        /// The `dbn` crate's error.
        source: dbn::Error,
    },
    /// The journal failed.
    #[error(transparent)]
    Journal(#[from] tickbox_journal::JournalError),
    /// An I/O error on a named file.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// The journal holds something export cannot use (no import manifest, a damaged vendor frame, several sources).
    #[error("{0}")]
    Invalid(String),
    /// Writing the output failed (a closed pipe among others).
    #[error("writing output: {0}")]
    Output(#[source] std::io::Error),
}

impl DbnError {
    pub(crate) fn refused(path: &std::path::Path, why: impl Into<String>) -> Self {
        DbnError::Refused {
            path: path.to_path_buf(),
            why: why.into(),
        }
    }
    pub(crate) fn dbn(path: &std::path::Path, source: dbn::Error) -> Self {
        DbnError::Dbn {
            path: path.to_path_buf(),
            source,
        }
    }
    pub(crate) fn io(path: &std::path::Path, source: std::io::Error) -> Self {
        DbnError::Io {
            path: path.to_path_buf(),
            source,
        }
    }
    /// True when the error is a closed output pipe (the reader went away: not a failure to report).
    pub fn is_broken_pipe(&self) -> bool {
        matches!(self, DbnError::Output(e) if e.kind() == std::io::ErrorKind::BrokenPipe)
    }
}
