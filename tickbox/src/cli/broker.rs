//! `tickbox broker`: its command-line arguments (what it parses; `cmd::broker` wires them).

#[derive(Debug, clap::Args)]
#[command(after_help = format!(
    "{}\nAsk one with `tickbox call --broker EP SERVICE`; `mmi.service` with a service name as body answers 200 \
     when a worker serves it and 404 when none does.",
    super::call::STATUS_SERVICES
))]
pub(crate) struct Args {
    /// Endpoint the broker ROUTER binds; clients and workers connect here. Loopback unless told otherwise
    /// (`tcp://*:5555` for every interface); `tcp://127.0.0.1:*` picks a port (the bound endpoint is printed on
    /// stdout).
    #[arg(long, default_value = "tcp://127.0.0.1:5555", value_name = "EP")]
    pub(crate) bind: String,
    /// Run as the primary of a Binary Star pair (needs --peer).
    #[arg(long, conflicts_with = "backup", requires = "peer")]
    pub(crate) primary: bool,
    /// Run as the backup of a Binary Star pair (needs --peer).
    #[arg(long, requires = "peer")]
    pub(crate) backup: bool,
    /// The peer's state endpoint (its --state-bind), e.g. `tcp://host:5004`.
    #[arg(long, value_name = "EP")]
    pub(crate) peer: Option<String>,
    /// Where this broker publishes its Binary Star state [default: primary tcp://127.0.0.1:5003, backup
    /// tcp://127.0.0.1:5004; a pair on two hosts binds `tcp://*:5003`].
    #[arg(long, value_name = "EP")]
    pub(crate) state_bind: Option<String>,
    /// Binary Star state heartbeat (e.g. `1s`); the peer is presumed dead after two silent heartbeats.
    #[arg(long, default_value = "1s", value_name = "DURATION")]
    pub(crate) bstar_heartbeat: tickbox_units::HumanDuration,
    /// Worker heartbeat interval, e.g. `2500ms` (overrides `[broker] heartbeat_interval`; must match the workers).
    #[arg(long, value_name = "DURATION")]
    pub(crate) heartbeat: Option<tickbox_units::HumanDuration>,
    #[command(flatten)]
    pub(crate) metrics: crate::metrics::MetricsArgs,
    /// Print the final counters (and, with `[security]`, the auth counts) as one JSON object on stdout instead of
    /// the text lines.
    #[arg(long)]
    pub(crate) json: bool,
}
