//! `tickbox clone-server`: a Clone (12/CHP) key-value server, stand-alone or as one half of a Binary Star pair.
//!
//! Sockets: ROUTER snapshots on P, PUB updates on P+1, SUB collector on P+2. In a pair the state PUB binds
//! `--state-bind` (Guide: primary 5003, backup 5004) and the state SUB connects to `--state-peer`.
//! Prints one line `clone-server port=P ...` on stdout once bound (with `--port 0` a free triple is chosen).

use std::process::ExitCode;

use anyhow::Context;
use tickbox_bstar::Role;
use tickbox_clone::pair::state_endpoints;
use tickbox_clone::server_loop::run_blocking_with;
use tickbox_clone::{HaOptions, ServerBind, ServerEndpoints, ServerOptions};

use crate::config::TickboxConfig;
use crate::out::outln;

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// Base port P: snapshots on P, updates on P+1, collector on P+2, so P is at most 65533. 0 picks a free
    /// triple.
    #[arg(long, default_value_t = 5556, value_parser = parse_base_port, value_name = "N")]
    port: u16,
    /// Address to bind on: loopback unless told otherwise; `*` = all interfaces.
    #[arg(long, default_value = "127.0.0.1", value_name = "IFACE")]
    interface: String,
    /// Run as the primary of a Binary Star pair (needs --peer).
    #[arg(long, conflicts_with = "backup", requires = "peer")]
    primary: bool,
    /// Run as the backup of a Binary Star pair (needs --peer).
    #[arg(long, requires = "peer")]
    backup: bool,
    /// The peer server's base endpoint, tcp://HOST:P.
    #[arg(long, value_name = "EP")]
    peer: Option<String>,
    /// Where our Binary Star state PUB binds (default loopback: tcp://127.0.0.1:5003 for the primary, :5004 for
    /// the backup; a pair on two hosts binds e.g. tcp://*:5003).
    #[arg(long, value_name = "EP")]
    state_bind: Option<String>,
    /// The peer's state PUB (default: the --peer host on 5004 for the primary, 5003 for the backup).
    #[arg(long, value_name = "EP")]
    state_peer: Option<String>,
    /// Persist the map here (snapshot + append-only log) and reload it at start.
    #[arg(long, value_name = "DIR")]
    data_dir: Option<std::path::PathBuf>,
    /// HUGZ interval, e.g. `1s` (overrides `[clone.server] hugz`).
    #[arg(long, value_name = "DURATION")]
    hugz: Option<tickbox_units::HumanDuration>,
    /// Binary Star heartbeat, e.g. `1s` (overrides `[clone.bstar] heartbeat`).
    #[arg(long, value_name = "DURATION")]
    heartbeat: Option<tickbox_units::HumanDuration>,
    /// Most concurrent connections on each of the server's sockets; a handshake past it is refused and counted
    /// (overrides [clone.server] max_connections; 0: no cap; at most 1000000).
    #[arg(long, value_name = "N", value_parser = crate::bounds::max_connections)]
    max_connections: Option<u64>,
    /// Most keys held (overrides [clone.server] max_keys).
    #[arg(long, value_name = "N")]
    max_keys: Option<usize>,
    /// Largest value in bytes (overrides [clone.server] max_value_len).
    #[arg(long, value_name = "BYTES")]
    max_value: Option<usize>,
    /// Most bytes held outside the reserved prefixes, e.g. 256MiB (overrides [clone.server] max_bytes).
    #[arg(long, value_parser = tickbox_units::parse_size, value_name = "BYTES")]
    max_bytes: Option<u64>,
    #[command(flatten)]
    metrics: crate::metrics::MetricsArgs,
    /// Print the final counters (and, with `[security]`, the auth counts) as one JSON object on stdout instead of
    /// the text lines.
    #[arg(long)]
    json: bool,
}

fn parse_base_port(s: &str) -> Result<u16, String> {
    let port: u16 = s
        .parse()
        .map_err(|_| format!("{s:?} is not a port number (0-65533)"))?;
    tickbox_clone::server_loop::check_base_port(port).map_err(|e| e.to_string())?;
    Ok(port)
}

pub(crate) fn run(args: Args, config: &TickboxConfig) -> anyhow::Result<ExitCode> {
    let mut server_config = config.clone.server.clone();
    if let Some(d) = args.hugz {
        server_config.hugz = d;
    }
    if let Some(v) = args.max_keys {
        server_config.max_keys = v;
    }
    if let Some(v) = args.max_connections {
        server_config.max_connections = v;
    }
    // The server's sockets are capped (docs/book/src/bounds.md); the handle also runs the ZAP handler that refuses.
    let security = server_config
        .security
        .cap_connections(&["clone"], server_config.max_connections);
    server_config.security = security.clone();
    if let Some(v) = args.max_value {
        server_config.max_value_len = v;
    }
    if let Some(v) = args.max_bytes {
        server_config.max_bytes = tickbox_units::ByteSize(v);
    }
    let mut bstar = config.clone.bstar.clone();
    if let Some(d) = args.heartbeat {
        bstar.heartbeat = d;
    }
    let ha = if args.primary || args.backup {
        let role = if args.primary {
            Role::Primary
        } else {
            Role::Backup
        };
        let peer_base = args
            .peer
            .as_deref()
            .context("--peer is required with --primary/--backup")?;
        let peer = ServerEndpoints::from_base(peer_base)?;
        let state = state_endpoints(role, peer_base, args.state_bind, args.state_peer)
            .context("bad --peer")?;
        Some(HaOptions {
            role,
            state,
            peer,
            bstar,
        })
    } else {
        None
    };
    let options = ServerOptions {
        bind: ServerBind::Base {
            interface: args.interface,
            port: args.port,
        },
        ha,
        config: server_config,
        data_dir: args.data_dir,
    };
    let ctx = zmq::Context::new();
    // Before any bind, and kept until the sockets are closed: without it libzmq lets every CURVE client in.
    let gate = security.gate(&ctx).context("starting the ZAP handler")?;
    let stop = crate::shutdown::flag();
    let role = options
        .ha
        .as_ref()
        .map(|h| format!("{:?}", h.role).to_lowercase());
    let stats = std::sync::Arc::new(tickbox_clone::server_loop::SharedStats::default());
    let _metrics = args.metrics.start(
        config,
        "clone-server",
        vec![std::sync::Arc::new(tickbox_clone::metrics::CloneMetrics(
            std::sync::Arc::clone(&stats),
        ))],
    )?;
    let json = args.json;
    run_blocking_with(&gate, options, &stop, &stats, |eps, port| {
        use std::io::Write;
        let line = format!(
            "clone-server port={} snapshot={} publisher={} collector={} role={}",
            port.unwrap_or(0),
            eps.snapshot,
            eps.publisher,
            eps.collector,
            role.as_deref().unwrap_or("standalone")
        );
        // With --json, stdout carries only the summary object.
        if json {
            eprintln!("{line}");
        } else {
            let mut out = crate::out::stdout();
            let _ = writeln!(out, "{line}");
            let _ = out.flush();
        }
    })?;
    if args.json {
        let mut summary = serde_json::to_value(stats.totals())?;
        crate::auth_report::add_to_json(&mut summary, &security);
        if let (Some(caps), Some(o)) = (security.connections(), summary.as_object_mut()) {
            o.insert("connections".into(), serde_json::to_value(caps)?);
        }
        crate::out::json(&summary)?;
        return Ok(ExitCode::from(crate::exit_code::OK));
    }
    // Like every server command: what the gate decided, with `[security]` (nothing without it).
    for line in security
        .summary_line()
        .into_iter()
        .chain(security.connections_line())
    {
        outln!("{line}");
    }
    Ok(ExitCode::from(crate::exit_code::OK))
}
