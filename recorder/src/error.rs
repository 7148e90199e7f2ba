use tickbox_journal::JournalError;

/// Errors from recording or replaying.
#[derive(Debug, thiserror::Error)]
pub enum RecorderError {
    #[error("journal: {0}")]
    Journal(#[from] JournalError),
    #[error("zmq: {0}")]
    Zmq(#[from] zmq::Error),
    #[error("zmq socket option: {0}")]
    Zmqx(#[from] tickbox_zmqx::ZmqxError),
    #[error("{endpoint}: {source}")]
    Endpoint {
        endpoint: String,
        #[source]
        source: zmq::Error,
    },
    #[error("invalid option: {0}")]
    InvalidOption(String),
}
