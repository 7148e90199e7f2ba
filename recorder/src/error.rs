use tickbox_journal::JournalError;

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
        source: Box<crate::selection::SelectionError>,
    },
    /// A replay's selection cannot be planned (a time that does not parse in its zone, a window backwards).
    #[error(transparent)]
    Selection(Box<crate::selection::SelectionError>),
    /// A replay's selection cannot match any record of the journal: the line says what was asked and what the
    /// journal holds.
    #[error("{0}")]
    EmptySelection(String),
    /// A history directory could not be opened, created or rolled.
    #[error(transparent)]
    History(#[from] crate::history_dir::HistoryError),
    /// Not enough room on the journal's file system for what the recorder will reserve at the start: nothing was
    /// created.
    #[error("{0}")]
    NoRoom(String),
    /// `[security]` could not be applied to a socket.
    #[error(transparent)]
    Auth(#[from] tickbox_auth::AuthError),
}
