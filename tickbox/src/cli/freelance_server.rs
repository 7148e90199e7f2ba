//! `tickbox freelance-server`: its command-line arguments (what it parses; `cmd::freelance_server` wires them).

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// Endpoint to bind, e.g. `tcp://*:5555` or `ipc:///tmp/fl.sock`.
    #[arg(long, value_name = "EP")]
    pub(crate) bind: String,
    /// The exact endpoint string clients connect to; it becomes the server identity [default: --bind].
    #[arg(long, value_name = "EP")]
    pub(crate) endpoint: Option<String>,
    /// Echo the request body instead of answering `OK` (the Guide's flserver3 answers `OK`).
    #[arg(long)]
    pub(crate) echo: bool,
    /// Largest request or reply, all frames together, e.g. 1MiB; also the socket's ZMQ_MAXMSGSIZE (per frame:
    /// libzmq disconnects a peer sending a bigger frame) [default: 1MiB].
    #[arg(long = "max-message-bytes", alias = "max-message-size", value_parser = tickbox_units::parse_size, value_name = "BYTES")]
    pub(crate) max_message_size: Option<u64>,
    /// Replies queued for one peer that does not read them, at most [default: 1000].
    #[arg(long, value_name = "N")]
    pub(crate) max_queued_replies: Option<u32>,
    /// Bytes of replies queued for one peer, at most, e.g. 16MiB: lowers the queue length to
    /// max-queued-bytes / max-message-size when that is smaller [default: 16MiB].
    #[arg(long, value_parser = tickbox_units::parse_size, value_name = "BYTES")]
    pub(crate) max_queued_bytes: Option<u64>,
    /// Print the final counters as one JSON object instead of a text line.
    #[arg(long)]
    pub(crate) json: bool,
    #[command(flatten)]
    pub(crate) metrics: crate::metrics::MetricsArgs,
}
