use tickbox_wire::EncodeError;

/// Why the feed could not start or stopped early.
#[derive(Debug, thiserror::Error)]
pub enum FeedError {
    /// A config value is out of range or inconsistent; the message names the field.
    #[error("invalid feed config: {field}: {reason}")]
    InvalidConfig { field: &'static str, reason: String },
    #[error("shard {shard}: cannot create or configure its socket: {source}")]
    Socket {
        shard: usize,
        #[source]
        source: zmq::Error,
    },
    #[error("shard {shard}: cannot set a socket option: {source}")]
    SocketOption {
        shard: usize,
        #[source]
        source: tickbox_zmqx::ZmqxError,
    },
    #[error("shard {shard}: cannot {verb} {endpoint}: {source}")]
    Endpoint {
        shard: usize,
        verb: &'static str,
        endpoint: String,
        #[source]
        source: tickbox_zmqx::ZmqxError,
    },
    #[error("shard {shard}: send failed: {source}")]
    Send {
        shard: usize,
        #[source]
        source: zmq::Error,
    },
    #[error("encoding a message: {0}")]
    Encode(#[from] EncodeError),
    #[error("shard {0} thread panicked")]
    ShardPanicked(usize),
    #[error("cannot spawn shard thread: {0}")]
    Spawn(#[source] std::io::Error),
}
