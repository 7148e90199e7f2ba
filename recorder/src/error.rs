use std::path::PathBuf;

use tickbox_journal::JournalError;

use crate::catalog::HISTORY_FILE;

impl RecorderError {
    /// The journal's file system has no room (or a file size limit was reached): the recording stops cleanly.
    pub fn is_disk_full(&self) -> bool {
        match self {
            RecorderError::Journal(e) | RecorderError::Open { source: e, .. } => e.is_disk_full(),
            _ => false,
        }
    }
}

/// Errors from recording or replaying.
#[derive(Debug, thiserror::Error)]
pub enum RecorderError {
    /// Opening, reading, appending to or committing the journal failed.
    #[error("journal: {0}")]
    Journal(#[from] JournalError),
    /// A socket call failed (create, set an option, poll, receive, send).
    #[error("zmq: {0}")]
    Zmq(#[from] zmq::Error),
    /// A socket option this crate sets through `tickbox-zmqx` (XPUB_NODROP, the bound endpoint) failed.
    #[error("zmq socket option: {0}")]
    Zmqx(#[from] tickbox_zmqx::ZmqxError),
    /// The recorder could not connect to, or the replayer could not bind, an endpoint.
    #[error("{endpoint}: {source}")]
    Endpoint {
        /// The endpoint as given.
        endpoint: String,
        /// libzmq's error (a malformed address, an address in use, an unknown transport).
        #[source]
        source: zmq::Error,
    },
    /// The options cannot work (no endpoint to connect to or bind), or a frame could not be re-encoded (a gap
    /// notice, a re-stamp, a heartbeat); the text says which.
    #[error("invalid option: {0}")]
    InvalidOption(String),
    /// A shard publisher (the feed's, which a replay publishes through) failed: a socket call, a send.
    #[error("{0}")]
    Feed(#[from] tickbox_feed::FeedError),
    /// The OS refused a new thread, or the replay's thread panicked (the text says which).
    #[error("replay thread: {0}")]
    Thread(String),
    /// A setting cannot work, or a session could not start a part of itself; the text says which, naming the
    /// flag.
    #[error("{0}")]
    Settings(String),
    /// The journal could not be opened (or created, or recovered).
    #[error("opening {}", path.display())]
    Open {
        /// The journal as given.
        path: std::path::PathBuf,
        /// Why.
        #[source]
        source: JournalError,
    },
    /// The journal could not be closed cleanly at the end of a recording.
    #[error("closing journal")]
    Close {
        /// Why.
        #[source]
        source: JournalError,
    },
    /// The journal could not be read to plan a replay's selection.
    #[error("reading {}", path.display())]
    Read {
        /// The journal as given.
        path: std::path::PathBuf,
        /// Why.
        #[source]
        source: Box<SelectionError>,
    },
    /// A replay's selection cannot be planned (a time that does not parse in its zone, a window backwards).
    #[error(transparent)]
    Selection(Box<SelectionError>),
    /// A replay's selection cannot match any record of the journal: the line says what was asked and what the
    /// journal holds.
    #[error("{0}")]
    EmptySelection(String),
    /// A history directory could not be opened, created or rolled.
    #[error(transparent)]
    History(#[from] HistoryError),
    /// Not enough room on the journal's file system for what the recorder will reserve at the start: nothing was
    /// created.
    #[error("{0}")]
    NoRoom(String),
    /// `[security]` could not be applied to a socket.
    #[error(transparent)]
    Auth(#[from] tickbox_auth::AuthError),
}

/// What can go wrong with a history directory.
#[derive(Debug, thiserror::Error)]
pub enum HistoryError {
    /// A file of the history could not be read or written.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The directory is no history (no `tickbox-history.json`).
    #[error("{} is not a history (no {HISTORY_FILE}): record into it with --roll to make one", path.display())]
    NotAHistory {
        /// The directory.
        path: PathBuf,
    },
    /// The path holds a journal of its own: a history is a directory of journals.
    #[error("{} is a journal, not a history: --roll records into a new directory (or an existing history)", path.display())]
    IsAJournal {
        /// The path.
        path: PathBuf,
    },
    /// `tickbox-history.json` does not say how the history rolls.
    #[error("{}: {reason}", path.display())]
    BadHistoryFile {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// A new history needs a roll.
    #[error("{} does not exist yet: say how it rolls (--roll daily, hourly or a size)", path.display())]
    NoRoll {
        /// The directory.
        path: PathBuf,
    },
    /// The roll does not parse.
    #[error(transparent)]
    Roll(#[from] crate::roll::RollError),
    /// A journal of the history could not be opened.
    #[error("{}: {source}", path.display())]
    Journal {
        /// The journal.
        path: PathBuf,
        /// Why.
        source: JournalError,
    },
}

/// What the time and selection flags can get wrong.
#[derive(Debug, thiserror::Error)]
pub enum SelectionError {
    /// A time or a zone that does not parse or resolve (the message names the input and lists the forms).
    #[error(transparent)]
    Units(#[from] tickbox_units::UnitsError),
    /// `from` is not before `to`.
    #[error("empty range: --from {from} is not before --to {to}")]
    EmptyRange {
        /// `from`, in the chosen zone.
        from: String,
        /// `to`, in the chosen zone.
        to: String,
    },
    /// An empty string among the topic prefixes (it would select everything, which is what leaving
    /// `--topics` out does).
    #[error("an empty topic prefix in --topics selects everything; leave --topics out for that")]
    EmptyPrefix,
    /// Reading the journal for its first day or its overview failed.
    #[error("journal: {0}")]
    Journal(#[from] JournalError),
    /// A time flag (`--from`, `--to`) that does not resolve against the journal.
    #[error("{flag}: {source}")]
    Flag {
        /// The flag.
        flag: &'static str,
        /// Why.
        source: Box<SelectionError>,
    },
}
