use tickbox_journal::JournalError;

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
    /// `[security]` could not be applied to a socket.
    #[error(transparent)]
    Auth(#[from] tickbox_auth::AuthError),
}
