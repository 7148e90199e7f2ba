use std::path::PathBuf;

use tickbox_wire::EncodeError;

/// Why the feed could not start or stopped early.
#[derive(Debug, thiserror::Error)]
pub enum FeedError {
    /// A command-line override contradicts the config or another override; the message names the flag.
    #[error("{0}")]
    Override(String),
    /// A config value is out of range or inconsistent; the message names the field.
    #[error("invalid feed config: {field}: {reason}")]
    InvalidConfig {
        /// The `FeedConfig` field at fault, as spelled in TOML.
        field: &'static str,
        /// What is wrong and what would be accepted.
        reason: String,
    },
    /// A shard's socket could not be created or configured.
    #[error("shard {shard}: cannot create or configure its socket: {source}")]
    Socket {
        /// Index of the shard in `FeedConfig::shards`.
        shard: usize,
        /// The libzmq error.
        #[source]
        source: zmq::Error,
    },
    /// A shard's socket option (high-water mark, no-drop, …) was refused.
    #[error("shard {shard}: cannot set a socket option: {source}")]
    SocketOption {
        /// Index of the shard in `FeedConfig::shards`.
        shard: usize,
        /// The underlying error.
        #[source]
        source: tickbox_zmqx::ZmqxError,
    },
    /// A shard could not bind or connect its endpoint (in use, malformed, unknown interface).
    #[error("shard {shard}: cannot {verb} {endpoint}: {source}")]
    Endpoint {
        /// Index of the shard in `FeedConfig::shards`.
        shard: usize,
        /// `"bind"` or `"connect"`.
        verb: &'static str,
        /// The endpoint as configured.
        endpoint: String,
        /// The underlying error.
        #[source]
        source: tickbox_zmqx::ZmqxError,
    },
    /// A shard's send failed for a reason other than back-pressure; the shard stops.
    #[error("shard {shard}: send failed: {source}")]
    Send {
        /// Index of the shard in `FeedConfig::shards`.
        shard: usize,
        /// The libzmq error.
        #[source]
        source: zmq::Error,
    },
    /// A shard's zero-copy send (a batch frame, or a single frame from its recycled buffers) failed for a reason
    /// other than back-pressure; the shard stops.
    #[error("shard {shard}: send failed: {source}")]
    BatchSend {
        /// Index of the shard in `FeedConfig::shards`.
        shard: usize,
        /// The zero-copy sender's error (libzmq's, or a send out of order).
        #[source]
        source: tickbox_zmqx::ZmqxError,
    },
    /// A generated message could not be encoded (a bug: generated values are always in range).
    #[error("encoding a message: {0}")]
    Encode(#[from] EncodeError),
    /// The thread of this shard (its index) panicked; the other shards' reports are lost with it.
    #[error("shard {0} thread panicked")]
    ShardPanicked(usize),
    /// The OS refused a new thread.
    #[error("cannot spawn shard thread: {0}")]
    Spawn(#[source] std::io::Error),
    /// The recording given to `feed --source` could not be read on (damaged or truncated): the feed stops.
    #[error("reading the source: {0}")]
    Source(#[source] SourceError),
    /// `[security]` could not be applied to a shard's socket.
    #[error(transparent)]
    Auth(#[from] tickbox_auth::AuthError),
}

/// Why a source could not be read on: the feed stops with this error.
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    /// The recording cannot be read where it lies (the file or the disk failed).
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The error.
        #[source]
        source: std::io::Error,
    },
    /// The recording is damaged or truncated, or holds what its reader cannot take: the reader's own error,
    /// which names the file and the record.
    #[error(transparent)]
    Reader(Box<dyn std::error::Error + Send + Sync>),
}

impl SourceError {
    /// A reader's own error (see [`SourceError::Reader`]).
    pub fn reader(error: impl std::error::Error + Send + Sync + 'static) -> Self {
        SourceError::Reader(Box::new(error))
    }
}
