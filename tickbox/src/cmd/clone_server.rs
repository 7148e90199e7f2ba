//! `tickbox clone-server`: a Clone (12/CHP) key-value server, stand-alone or as one half of a Binary Star pair.
//!
//! Sockets: ROUTER snapshots on P, PUB updates on P+1, SUB collector on P+2. In a pair the state PUB binds
//! `--state-bind` (Guide: primary 5003, backup 5004) and the state SUB connects to `--state-peer`.
//! Prints one line `clone-server port=P ...` on stdout once bound (with `--port 0` a free triple is chosen).

use std::process::ExitCode;

use anyhow::Context;
use tickbox_bstar::Role;
use tickbox_clone::overrides::ServerOverrides;
use tickbox_clone::server_loop::run_blocking_with;

use crate::cli::clone_server::Args;
use crate::config::TickboxConfig;
use crate::out::{errln, outln};

pub(crate) fn run(args: Args, config: &TickboxConfig) -> anyhow::Result<ExitCode> {
    let overrides = ServerOverrides {
        interface: args.interface,
        port: args.port,
        role: (args.primary || args.backup).then_some(if args.primary {
            Role::Primary
        } else {
            Role::Backup
        }),
        peer: args.peer,
        state_bind: args.state_bind,
        state_peer: args.state_peer,
        data_dir: args.data_dir,
        hugz: args.hugz,
        heartbeat: args.heartbeat,
        max_connections: args.max_connections,
        max_keys: args.max_keys,
        max_value_len: args.max_value,
        max_bytes: args.max_bytes,
    };
    let options = overrides.options(&config.clone)?;
    // The server's sockets are capped (docs/book/src/bounds.md); the handle also runs the ZAP handler that refuses.
    let security = options.config.security.clone();
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
            errln!("{line}");
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
