//! What an export can fail with.

use tickbox_journal::JournalError;

/// An export's error. Whatever it is, nothing partial is left at the destination (see `dest`).
#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    /// Refused before anything was read or written: a bad option, a destination that exists, a format the
    /// journal cannot give.
    #[error("{0}")]
    Refused(String),
    /// The journal could not be opened or read (other than a damaged range, which is skipped and reported).
    #[error("reading {path}: {source}")]
    Journal {
        /// The journal or history.
        path: String,
        /// Why.
        #[source]
        source: JournalError,
    },
    /// A local file could not be written.
    #[error("writing {path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The Parquet or Arrow library refused a batch (a bug if it happens: the schema is ours).
    #[error("parquet: {0}")]
    Parquet(String),
    /// The object store could not be reached, refused the credentials, or failed a request. One line, with the
    /// store's URL (never a credential: they come from the environment and no message repeats them).
    #[error("object store {url}: {reason}")]
    Store {
        /// The destination or source URL, as given (it never holds credentials: URLs with them are refused).
        url: String,
        /// The store's answer, on one line.
        reason: String,
    },
    /// DBN output failed.
    #[error("DBN: {0}")]
    Dbn(String),
}

impl ExportError {
    /// Whether the error is the object store's (unreachable, unauthorised, a failed request).
    pub fn is_store(&self) -> bool {
        matches!(self, ExportError::Store { .. })
    }

    /// Whether the output's reader went away (`| head`): nothing went wrong.
    pub fn is_broken_pipe(&self) -> bool {
        matches!(self, ExportError::Io { source, .. } if source.kind() == std::io::ErrorKind::BrokenPipe)
    }

    pub(crate) fn io(path: impl std::fmt::Display, source: std::io::Error) -> ExportError {
        ExportError::Io {
            path: path.to_string(),
            source,
        }
    }

    pub(crate) fn store(url: &str, e: impl std::fmt::Display) -> ExportError {
        ExportError::Store {
            url: url.to_owned(),
            reason: one_line(&e.to_string()),
        }
    }
}

impl From<parquet::errors::ParquetError> for ExportError {
    fn from(e: parquet::errors::ParquetError) -> Self {
        ExportError::Parquet(e.to_string())
    }
}

impl From<arrow_schema::ArrowError> for ExportError {
    fn from(e: arrow_schema::ArrowError) -> Self {
        ExportError::Parquet(e.to_string())
    }
}

/// A message on one line: newlines and runs of spaces become one space.
pub(crate) fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}
