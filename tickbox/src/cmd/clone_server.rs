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

use crate::cli::clone_server::Args;
use crate::config::TickboxConfig;
use crate::out::outln;

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
