//! `tickbox queue`: its command-line arguments (what it parses; `cmd::queue` wires them).

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// Endpoint clients connect to (front-end ROUTER): loopback unless told otherwise (`tcp://*:5555` for every
    /// interface); `tcp://127.0.0.1:*` picks a port.
    #[arg(long, default_value = "tcp://127.0.0.1:5555", value_name = "EP")]
    pub(crate) frontend: String,
    /// Endpoint workers connect to (back-end ROUTER): loopback unless told otherwise (`tcp://*:5556`).
    #[arg(long, default_value = "tcp://127.0.0.1:5556", value_name = "EP")]
    pub(crate) backend: String,
    /// Heartbeat interval, both ways; workers must use the same (6/PPP reference: 1 s).
    #[arg(long, default_value = "1s", value_name = "DURATION")]
    pub(crate) heartbeat: tickbox_units::HumanDuration,
    /// A worker silent for this many heartbeat intervals is expired, idle or busy.
    #[arg(long, default_value_t = 3, value_name = "N")]
    pub(crate) liveness: u32,
    /// Client requests held while no worker is free; more are dropped (the client's retry recovers).
    #[arg(long, default_value_t = 10_000, value_name = "N")]
    pub(crate) max_queued: usize,
    /// Workers tracked at once; a READY from one more is refused.
    #[arg(long, default_value_t = 10_000, value_name = "N")]
    pub(crate) max_workers: usize,
    /// Largest frame accepted from a client or worker (a bigger one disconnects the peer), e.g. `1MiB`.
    #[arg(long = "max-message-bytes", alias = "max-message-size", default_value = "1MiB", value_parser = tickbox_units::parse_size, value_name = "BYTES")]
    pub(crate) max_message_size: u64,
    /// Print the summary as one JSON object.
    #[arg(long)]
    pub(crate) json: bool,
    #[command(flatten)]
    pub(crate) metrics: crate::metrics::MetricsArgs,
}
