//! `tickbox clone-server`: its command-line arguments (what it parses; `cmd::clone_server` wires them).

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// Base port P: snapshots on P, updates on P+1, collector on P+2, so P is at most 65533. 0 picks a free
    /// triple.
    #[arg(long, default_value_t = 5556, value_parser = parse_base_port, value_name = "N")]
    pub(crate) port: u16,
    /// Address to bind on: loopback unless told otherwise; `*` = all interfaces.
    #[arg(long, default_value = "127.0.0.1", value_name = "IFACE")]
    pub(crate) interface: String,
    /// Run as the primary of a Binary Star pair (needs --peer).
    #[arg(long, conflicts_with = "backup", requires = "peer")]
    pub(crate) primary: bool,
    /// Run as the backup of a Binary Star pair (needs --peer).
    #[arg(long, requires = "peer")]
    pub(crate) backup: bool,
    /// The peer server's base endpoint, tcp://HOST:P.
    #[arg(long, value_name = "EP")]
    pub(crate) peer: Option<String>,
    /// Where our Binary Star state PUB binds (default loopback: tcp://127.0.0.1:5003 for the primary, :5004 for
    /// the backup; a pair on two hosts binds e.g. tcp://*:5003).
    #[arg(long, value_name = "EP")]
    pub(crate) state_bind: Option<String>,
    /// The peer's state PUB (default: the --peer host on 5004 for the primary, 5003 for the backup).
    #[arg(long, value_name = "EP")]
    pub(crate) state_peer: Option<String>,
    /// Persist the map here (snapshot + append-only log) and reload it at start.
    #[arg(long, value_name = "DIR")]
    pub(crate) data_dir: Option<std::path::PathBuf>,
    /// HUGZ interval, e.g. `1s` (overrides `[clone.server] hugz`).
    #[arg(long, value_name = "DURATION")]
    pub(crate) hugz: Option<tickbox_units::HumanDuration>,
    /// Binary Star heartbeat, e.g. `1s` (overrides `[clone.bstar] heartbeat`).
    #[arg(long, value_name = "DURATION")]
    pub(crate) heartbeat: Option<tickbox_units::HumanDuration>,
    /// Most concurrent connections on each of the server's sockets; a handshake past it is refused and counted
    /// (overrides [clone.server] max_connections; 0: no cap; at most 1000000).
    #[arg(long, value_name = "N", value_parser = crate::bounds::max_connections)]
    pub(crate) max_connections: Option<u64>,
    /// Most keys held (overrides [clone.server] max_keys).
    #[arg(long, value_name = "N")]
    pub(crate) max_keys: Option<usize>,
    /// Largest value in bytes (overrides [clone.server] max_value_len).
    #[arg(long, value_name = "BYTES")]
    pub(crate) max_value: Option<usize>,
    /// Most bytes held outside the reserved prefixes, e.g. 256MiB (overrides [clone.server] max_bytes).
    #[arg(long, value_parser = tickbox_units::parse_size, value_name = "BYTES")]
    pub(crate) max_bytes: Option<u64>,
    #[command(flatten)]
    pub(crate) metrics: crate::metrics::MetricsArgs,
    /// Print the final counters (and, with `[security]`, the auth counts) as one JSON object on stdout instead of
    /// the text lines.
    #[arg(long)]
    pub(crate) json: bool,
}

pub(crate) fn parse_base_port(s: &str) -> Result<u16, String> {
    let port: u16 = s
        .parse()
        .map_err(|_| format!("{s:?} is not a port number (0-65533)"))?;
    tickbox_clone::server_loop::check_base_port(port).map_err(|e| e.to_string())?;
    Ok(port)
}
