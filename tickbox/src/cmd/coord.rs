//! `tickbox coord`: look at (and take part in) the ZooKeeper recipes of a tickbox fleet.
//!
//! `ls`, `get`, `watch` are plain ZooKeeper views; `state` recognises the recipes under a path (locks and their
//! holders and tokens, elections and their leaders, double barriers, queues, groups, transactions); `lock` and
//! `elect` take part (a lock held until Ctrl-C or loss, a candidacy that prints its leadership changes), which is
//! also how the kill -9 tests hold a lock or a leadership in another process.
//!
//! Output lines meant for scripts: `HELD <token>`, `LEADER <token>`, `SUSPENDED`, `RESUMED`, `LOST <reason>`.

use std::io::Write;
use std::process::ExitCode;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use anyhow::Context;
use tickbox_coord::follow::{self, WatchEnd};
use tickbox_coord::listing::recipe_at;
use tickbox_coord::{Coord, CoordOptions, Election, Lock, RecipeState};

use crate::cli::coord::{Args, Op};
use crate::config::TickboxConfig;
use crate::exit_code;
use crate::out::errln;

pub(crate) fn run(args: Args, config: &TickboxConfig) -> anyhow::Result<ExitCode> {
    let opts = CoordOptions {
        session_timeout: args
            .session_timeout
            .unwrap_or(config.coord.session_timeout.0),
        connect_timeout: args
            .connect_timeout
            .unwrap_or(config.coord.connect_timeout.0),
    };
    let zk = crate::zk::ensemble(args.zk.as_deref(), config, "coord")
        .unwrap_or_else(|_| "127.0.0.1:2181".to_owned());
    let coord = match Coord::connect_with(&zk, &opts) {
        Ok(c) => c,
        // Whichever gives up first (our --connect-timeout, or the client's own session timeout), no session means
        // no answer in time: exit 4, as the help says.
        Err(e) => {
            let why = match e {
                tickbox_coord::CoordError::Timeout(t) => {
                    format!("none within {}", tickbox_units::format_duration(t))
                }
                other => other.to_string(),
            };
            errln!("error: no ZooKeeper session with {zk}: {why} (is the ensemble up? --zk)");
            return Ok(ExitCode::from(exit_code::TIMEOUT));
        }
    };
    match args.op {
        Op::Ls { path } => ls(&coord, &path),
        Op::Get { path, stat } => get(&coord, &path, stat),
        Op::Watch {
            path,
            count,
            duration,
        } => watch(&coord, &path, count, duration),
        Op::State { path, json } => state(&coord, &path, json),
        Op::Lock {
            path,
            hold,
            timeout,
        } => lock(&coord, &path, hold, timeout),
        Op::Elect { path, id } => elect(&coord, &path, id),
    }
}

/// `coord ls`: the children of `path`, each recipe with its state.
fn ls(coord: &Coord, path: &str) -> anyhow::Result<ExitCode> {
    let mut out = crate::out::stdout();
    let children = coord
        .children(path)
        .with_context(|| format!("listing {path}"))?;
    if let Some(s) = recipe_at(coord, path)? {
        writeln!(out, ".\t{}", s.details())?;
    }
    for c in children {
        if path == "/" && c == "zookeeper" {
            writeln!(out, "{c}")?;
            continue;
        }
        match recipe_at(coord, &tickbox_coord::logic::join(path, &c))? {
            Some(s) => writeln!(out, "{c}\t{}", s.details())?,
            None => writeln!(out, "{c}")?,
        }
    }
    Ok(ExitCode::from(exit_code::OK))
}

/// `coord get`: the data of `path` (exit 1 when absent), its metadata on stderr with `stat`.
fn get(coord: &Coord, path: &str, stat: bool) -> anyhow::Result<ExitCode> {
    let mut out = crate::out::stdout();
    match coord.get(path)? {
        None => {
            errln!("error: {path}: no such node");
            return Ok(ExitCode::from(exit_code::ERROR));
        }
        Some((data, st)) => {
            out.write_all(&data)?;
            if !data.ends_with(b"\n") && !data.is_empty() {
                writeln!(out)?;
            }
            if stat {
                errln!("{}", st.summary_line());
            }
        }
    }
    Ok(ExitCode::from(exit_code::OK))
}

/// `coord watch`: every change under `path` until Ctrl-C, `count` events or `duration`.
fn watch(
    coord: &Coord,
    path: &str,
    count: Option<u64>,
    duration: Option<Duration>,
) -> anyhow::Result<ExitCode> {
    let stop = crate::shutdown::flag();
    let until = duration.map(|d| Instant::now() + d);
    let mut watch = coord
        .watch_tree(path)
        .with_context(|| format!("watching {path}"))?;
    let go_on = || !stop.load(Ordering::SeqCst) && !crate::out::closed();
    let out = &mut crate::out::stdout();
    match follow::print_tree_events(|t| watch.next(t), out, count, until, go_on)? {
        WatchEnd::SessionGone => Ok(ExitCode::from(exit_code::ERROR)),
        WatchEnd::Stopped(seen) => {
            // On stderr: stdout carries only the events, for scripts.
            errln!("coord watch {path}: {seen} event(s)");
            Ok(ExitCode::from(exit_code::OK))
        }
    }
}

/// `coord state`: the recipes under `path`, as lines or one JSON object.
fn state(coord: &Coord, path: &str, json: bool) -> anyhow::Result<ExitCode> {
    let mut out = crate::out::stdout();
    let states = tickbox_coord::inspect(coord, path)?;
    if json {
        let arr: Vec<serde_json::Value> = states.iter().map(RecipeState::to_json).collect();
        crate::out::json(&serde_json::json!({ "recipes": arr }))?;
    } else {
        for s in &states {
            writeln!(out, "{}", s.line())?;
        }
    }
    Ok(ExitCode::from(exit_code::OK))
}

/// `coord lock`: takes the lock at `path`, prints `HELD <token>`, holds it until Ctrl-C or its loss with `hold`.
fn lock(
    coord: &Coord,
    path: &str,
    hold: bool,
    timeout: Option<Duration>,
) -> anyhow::Result<ExitCode> {
    let mut out = crate::out::stdout();
    let lock = Lock::new(coord, path)?;
    let g = match lock.acquire(timeout) {
        Ok(g) => g,
        Err(tickbox_coord::CoordError::Timeout(t)) => {
            errln!(
                "error: {path}: not acquired within {}",
                tickbox_units::format_duration(t)
            );
            return Ok(ExitCode::from(exit_code::TIMEOUT));
        }
        Err(e) => return Err(e.into()),
    };
    writeln!(out, "HELD {}", g.token())?;
    out.flush()?;
    if hold {
        let stop = crate::shutdown::flag();
        let mut state = g.state();
        let next = || {
            let now = g.wait_change(state, follow::POLL);
            (now != state).then(|| {
                state = now;
                now.script_line()
            })
        };
        if !follow::print_script_lines(next, &mut out, || !stop.load(Ordering::SeqCst))? {
            return Ok(ExitCode::from(exit_code::ERROR));
        }
    }
    let token = g.token();
    g.release()?;
    if hold {
        errln!("coord lock {path}: released (token {token})");
    }
    Ok(ExitCode::from(exit_code::OK))
}

/// `coord elect`: stands in the election at `path` and prints its leadership changes until Ctrl-C or loss.
fn elect(coord: &Coord, path: &str, id: Option<String>) -> anyhow::Result<ExitCode> {
    let mut out = crate::out::stdout();
    let id = id.unwrap_or_else(|| format!("pid-{}", std::process::id()));
    let cand = Election::new(coord, path)?.campaign(id.as_bytes())?;
    let stop = crate::shutdown::flag();
    let next = || Some(cand.events().recv_timeout(follow::POLL).ok()?.script_line());
    if !follow::print_script_lines(next, &mut out, || !stop.load(Ordering::SeqCst))? {
        return Ok(ExitCode::from(exit_code::ERROR));
    }
    cand.resign()?;
    errln!("coord elect {path}: resigned");
    Ok(ExitCode::from(exit_code::OK))
}
