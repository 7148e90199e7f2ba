//! `tickbox ctl`: command-line client of the Clone key-value store (one server or a Binary Star pair).
//!
//! `get` and `ls` only need a snapshot; `set`/`del` wait until the server has published the update (acknowledged);
//! `watch` prints changes until Ctrl-C, `--count` changes or `--for` elapses. When no server answers within
//! `--timeout` the exit code is 4 (`exit_code::TIMEOUT`); when the server refuses a `set`/`del` (its `NOPE` notice:
//! key or value too long, key or byte budget full, reserved key) the reason is printed and the exit code is 7
//! (`exit_code::REFUSED`).

use std::io::Write;
use std::process::ExitCode;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use anyhow::Context;
use tickbox_clone::request::{one_shot_config, parent_subtree, print_changes};
use tickbox_clone::{CloneClient, CloneError, ServerEndpoints};

use crate::config::TickboxConfig;
use crate::exit_code;

use crate::cli::ctl::{Args, Op};
use crate::exit_code::REFUSED;
use crate::out::errln;

fn timeout_exit(err: CloneError, what: &str) -> anyhow::Result<ExitCode> {
    match err {
        CloneError::Timeout => {
            errln!("error: {what}: no server answered in time");
            Ok(ExitCode::from(exit_code::TIMEOUT))
        }
        CloneError::Refused(reason) => {
            errln!("error: {what}: refused by the server: {reason}");
            Ok(ExitCode::from(REFUSED))
        }
        other => Err(other).context(what.to_owned()),
    }
}

pub(crate) fn run(args: Args, config: &TickboxConfig) -> anyhow::Result<ExitCode> {
    for server in args.server.split(',').filter(|s| !s.trim().is_empty()) {
        crate::flags::check_connect("--connect", server)?;
    }
    let servers = ServerEndpoints::parse_list(&args.server)?;
    anyhow::ensure!(!servers.is_empty(), "--connect needs at least one endpoint");
    let (subtree, snapshot_only) = match &args.op {
        Op::Get { key } => (parent_subtree(key), true),
        Op::Set { key, .. } | Op::Del { key } => (parent_subtree(key), false),
        Op::Ls { prefix } => (parent_subtree(prefix), true),
        Op::Watch { prefix, .. } => (parent_subtree(prefix), false),
    };
    let client_config = one_shot_config(
        config.clone.client.clone(),
        servers.len(),
        args.timeout,
        snapshot_only,
    );
    let ctx = zmq::Context::new();
    let mut client = CloneClient::connect(&ctx, &servers, &subtree, client_config)?;
    client.set_timeout(args.timeout);
    let started = Instant::now();
    if let Err(err) = client.wait_synced(args.timeout) {
        return timeout_exit(err, "connecting");
    }
    let remaining = args
        .timeout
        .saturating_sub(started.elapsed())
        .max(Duration::from_millis(100));
    let mut out = crate::out::stdout();
    match args.op {
        Op::Get { key } => match client.get(&key)? {
            Some(v) => {
                out.write_all(&v)?;
                writeln!(out)?;
            }
            None => {
                errln!("{key}: not found");
                return Ok(ExitCode::from(exit_code::ERROR));
            }
        },
        Op::Set { key, value, ttl } => {
            anyhow::ensure!(!value.is_empty(), "an empty value deletes; use `ctl del`");
            match client.set_with_timeout(&key, value.as_bytes(), ttl, remaining) {
                Ok(seq) => writeln!(out, "{seq}")?,
                Err(err) => return timeout_exit(err, "set"),
            }
        }
        Op::Del { key } => match client.set_with_timeout(&key, b"", None, remaining) {
            Ok(seq) => writeln!(out, "{seq}")?,
            Err(err) => return timeout_exit(err, "del"),
        },
        Op::Ls { prefix } => {
            for (k, v) in client.list(&prefix)? {
                writeln!(out, "{k}\t{}", String::from_utf8_lossy(&v))?;
            }
        }
        Op::Watch {
            prefix,
            count,
            duration,
            existing,
        } => {
            let rx = client.watch(&prefix, existing)?;
            // Synced and subscribed: every change from now on is printed. Said on stderr, so a script (or a test)
            // can wait for it instead of guessing how long a start takes.
            errln!("watching {prefix:?}");
            let stop = crate::shutdown::flag();
            let until = duration.map(|d| Instant::now() + d);
            let next = |t| rx.recv_timeout(t).ok();
            print_changes(next, &mut out, count, until, || {
                !stop.load(Ordering::Relaxed)
            })?;
        }
    }
    out.flush()?;
    Ok(ExitCode::from(exit_code::OK))
}
