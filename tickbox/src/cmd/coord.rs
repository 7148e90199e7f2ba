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
use tickbox_coord::{
    Coord, CoordOptions, Election, ElectionEvent, HoldState, Lock, RecipeState, SessionStatus,
};

use crate::config::TickboxConfig;
use crate::exit_code;

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// ZooKeeper ensemble: HOST:PORT[,HOST:PORT…]. Default: `[coord] zk` from the config, else 127.0.0.1:2181.
    #[arg(long, value_name = "HOSTS")]
    zk: Option<String>,
    /// Session timeout asked of the server: a lock or leadership of a dead process moves after this long.
    /// Default: `[coord] session_timeout` (6s).
    #[arg(long, value_parser = tickbox_units::parse_duration)]
    session_timeout: Option<Duration>,
    /// Give up connecting after this long (exit 4). Default: `[coord] connect_timeout` (10s).
    #[arg(long, value_parser = tickbox_units::parse_duration)]
    connect_timeout: Option<Duration>,
    #[command(subcommand)]
    op: Op,
}

#[derive(Debug, clap::Subcommand)]
enum Op {
    /// List the children of PATH, each recipe among them with its state after a tab (group members, shard
    /// owners, leader and token, barrier parties and flag, lock holder); a first line `.` describes PATH itself
    /// when it is a recipe.
    Ls { path: String },
    /// Print the data of PATH (exit 1 when absent); `--stat` adds its metadata on stderr.
    Get {
        path: String,
        #[arg(long)]
        stat: bool,
    },
    /// Print every change under PATH (`KIND<TAB>PATH`), until Ctrl-C, `--count` events or `--for` elapses.
    Watch {
        path: String,
        #[arg(long)]
        count: Option<u64>,
        #[arg(long = "for", value_parser = tickbox_units::parse_duration)]
        duration: Option<Duration>,
    },
    /// Show the recipes under PATH: lock holders and tokens, leaders, barriers, queues, groups, transactions.
    State {
        #[arg(default_value = "/")]
        path: String,
        /// One JSON array instead of lines.
        #[arg(long)]
        json: bool,
    },
    /// Take the exclusive lock at PATH and print `HELD <token>`; with `--hold` keep it until Ctrl-C (or its loss:
    /// `LOST <reason>`, exit 1), else release at once.
    Lock {
        path: String,
        #[arg(long)]
        hold: bool,
        /// Give up waiting after this long (exit 4).
        #[arg(long, value_parser = tickbox_units::parse_duration)]
        timeout: Option<Duration>,
    },
    /// Stand in the election at PATH and print leadership changes until Ctrl-C or the candidacy is lost.
    Elect {
        path: String,
        /// Stored in the candidate's node (default: host name and pid).
        #[arg(long)]
        id: Option<String>,
    },
}

/// The ensemble a coordinating flag of another command uses: `--zk`, else `[coord] zk`.
pub(crate) fn ensemble(
    flag: Option<&str>,
    config: &TickboxConfig,
    wanted_by: &str,
) -> anyhow::Result<String> {
    match flag {
        Some(zk) if !zk.is_empty() => Ok(zk.to_owned()),
        _ if !config.coord.zk.is_empty() => Ok(config.coord.zk.clone()),
        _ => anyhow::bail!("{wanted_by} needs ZooKeeper: give --zk HOST:PORT[,HOST:PORT...] or [coord] zk in the config"),
    }
}

/// A session for a coordinating flag of another command (`--start-barrier`, `--elect`, `--group`), with the
/// `[coord]` timings.
pub(crate) fn connect(
    flag: Option<&str>,
    config: &TickboxConfig,
    wanted_by: &str,
) -> anyhow::Result<Coord> {
    let zk = ensemble(flag, config, wanted_by)?;
    let opts = CoordOptions {
        session_timeout: config.coord.session_timeout.0,
        connect_timeout: config.coord.connect_timeout.0,
    };
    Coord::connect_with(&zk, &opts)
        .with_context(|| format!("{wanted_by}: connecting to ZooKeeper at {zk}"))
}

/// The state of the recipe at `path` itself, if it is one (not of the recipes below it).
fn recipe_at(coord: &Coord, path: &str) -> anyhow::Result<Option<RecipeState>> {
    Ok(tickbox_coord::inspect(coord, path)?
        .into_iter()
        .find(|s| s.to_json()["path"] == path))
}

pub(crate) fn run(args: Args, config: &TickboxConfig) -> anyhow::Result<ExitCode> {
    let opts = CoordOptions {
        session_timeout: args
            .session_timeout
            .unwrap_or(config.coord.session_timeout.0),
        connect_timeout: args
            .connect_timeout
            .unwrap_or(config.coord.connect_timeout.0),
    };
    let zk = ensemble(args.zk.as_deref(), config, "coord")
        .unwrap_or_else(|_| "127.0.0.1:2181".to_owned());
    let coord = match Coord::connect_with(&zk, &opts) {
        Ok(c) => c,
        Err(tickbox_coord::CoordError::Timeout(t)) => {
            tracing::error!(
                "no ZooKeeper session with {zk} within {t:?} (is the ensemble up? --zk)"
            );
            return Ok(ExitCode::from(exit_code::TIMEOUT));
        }
        Err(e) => return Err(e).with_context(|| format!("connecting to ZooKeeper at {zk}")),
    };
    let mut out = std::io::stdout().lock();
    match args.op {
        Op::Ls { path } => {
            let children = coord
                .children(&path)
                .with_context(|| format!("listing {path}"))?;
            if let Some(s) = recipe_at(&coord, &path)? {
                writeln!(out, ".\t{}", recipe_details(&s))?;
            }
            for c in children {
                if path == "/" && c == "zookeeper" {
                    writeln!(out, "{c}")?;
                    continue;
                }
                match recipe_at(&coord, &tickbox_coord::logic::join(&path, &c))? {
                    Some(s) => writeln!(out, "{c}\t{}", recipe_details(&s))?,
                    None => writeln!(out, "{c}")?,
                }
            }
        }
        Op::Get { path, stat } => match coord.get(&path)? {
            None => {
                tracing::error!("{path}: no such node");
                return Ok(ExitCode::from(exit_code::ERROR));
            }
            Some((data, st)) => {
                out.write_all(&data)?;
                if !data.ends_with(b"\n") && !data.is_empty() {
                    writeln!(out)?;
                }
                if stat {
                    eprintln!("{}", st.summary_line());
                }
            }
        },
        Op::Watch {
            path,
            count,
            duration,
        } => {
            let stop = crate::shutdown::flag();
            let until = duration.map(|d| Instant::now() + d);
            let mut seen = 0u64;
            let mut watch = coord
                .watch_tree(&path)
                .with_context(|| format!("watching {path}"))?;
            while count.is_none_or(|c| seen < c)
                && until.is_none_or(|u| Instant::now() < u)
                && !stop.load(Ordering::SeqCst)
            {
                // Wake at least every 200 ms to honour Ctrl-C and --for; the watch keeps events meanwhile.
                if let Some(ev) = watch.next(Duration::from_millis(200)) {
                    if ev.kind == "Session" {
                        tracing::warn!("session event: {:?}", ev.session);
                        if matches!(ev.session, SessionStatus::Expired | SessionStatus::Closed) {
                            return Ok(ExitCode::from(exit_code::ERROR));
                        }
                        continue;
                    }
                    writeln!(out, "{}\t{}", ev.kind, ev.path)?;
                    out.flush()?;
                    seen += 1;
                }
            }
            // On stderr: stdout carries only the events, for scripts.
            eprintln!("coord watch {path}: {seen} event(s)");
        }
        Op::State { path, json } => {
            let states = tickbox_coord::inspect(&coord, &path)?;
            if json {
                let arr: Vec<serde_json::Value> = states.iter().map(RecipeState::to_json).collect();
                writeln!(out, "{}", serde_json::Value::Array(arr))?;
            } else {
                for s in &states {
                    writeln!(out, "{}", s.line())?;
                }
            }
        }
        Op::Lock {
            path,
            hold,
            timeout,
        } => {
            let lock = Lock::new(&coord, &path)?;
            let g = match lock.acquire(timeout) {
                Ok(g) => g,
                Err(tickbox_coord::CoordError::Timeout(t)) => {
                    tracing::error!("{path}: not acquired within {t:?}");
                    return Ok(ExitCode::from(exit_code::TIMEOUT));
                }
                Err(e) => return Err(e.into()),
            };
            writeln!(out, "HELD {}", g.token())?;
            out.flush()?;
            if hold {
                let stop = crate::shutdown::flag();
                let mut state = g.state();
                while !stop.load(Ordering::SeqCst) {
                    let now = g.wait_change(state, Duration::from_millis(200));
                    if now != state {
                        match now {
                            HoldState::Suspended => writeln!(out, "SUSPENDED")?,
                            HoldState::Held => writeln!(out, "RESUMED")?,
                            HoldState::RevokeRequested => writeln!(out, "REVOKE_REQUESTED")?,
                            HoldState::Lost(r) => {
                                writeln!(out, "LOST {r:?}")?;
                                return Ok(ExitCode::from(exit_code::ERROR));
                            }
                        }
                        out.flush()?;
                        state = now;
                    }
                }
            }
            let token = g.token();
            g.release()?;
            if hold {
                eprintln!("coord lock {path}: released (token {token})");
            }
        }
        Op::Elect { path, id } => {
            let id = id.unwrap_or_else(|| format!("pid-{}", std::process::id()));
            let cand = Election::new(&coord, &path)?.campaign(id.as_bytes())?;
            let stop = crate::shutdown::flag();
            while !stop.load(Ordering::SeqCst) {
                match cand.events().recv_timeout(Duration::from_millis(200)) {
                    Ok(ElectionEvent::Elected { token }) => writeln!(out, "LEADER {token}")?,
                    Ok(ElectionEvent::Suspended) => writeln!(out, "SUSPENDED")?,
                    Ok(ElectionEvent::Resumed) => writeln!(out, "RESUMED")?,
                    // The candidacy stands again by itself on a new session (`REJOINED` follows).
                    Ok(ElectionEvent::Lost(r @ tickbox_coord::LostReason::SessionExpired)) => {
                        writeln!(out, "LOST {r:?}")?
                    }
                    Ok(ElectionEvent::Rejoined {
                        was_leader,
                        out_for,
                    }) => writeln!(
                        out,
                        "REJOINED {} {}",
                        was_leader.map_or("-".to_owned(), |t| t.to_string()),
                        out_for.as_millis()
                    )?,
                    Ok(ElectionEvent::Lost(r)) => {
                        writeln!(out, "LOST {r:?}")?;
                        return Ok(ExitCode::from(exit_code::ERROR));
                    }
                    Err(_) => continue,
                }
                out.flush()?;
            }
            cand.resign()?;
            eprintln!("coord elect {path}: resigned");
        }
    }
    Ok(ExitCode::from(exit_code::OK))
}

/// A recipe's `RECIPE<TAB>details`: its state line without the path column.
fn recipe_details(s: &RecipeState) -> String {
    let line = s.line();
    match line.split_once('\t') {
        Some((_, rest)) => rest.to_owned(),
        None => line,
    }
}

/// How often the group loop looks at ownership changes, the stop flag and the idle clock.
const GROUP_TICK: Duration = Duration::from_millis(20);

/// `tickbox subscribe --group PATH`: this process joins the sharded group at PATH and consumes only the feed
/// shards (`--connect` endpoints, in order) whose lock it holds, each with its own Black Box subscriber, started
/// when the shard is acquired and shut down when it is lost (a dead member's shards come here after its session
/// timeout; a surplus shard is handed back when another member joins). Prints one summary per shard it owned.
pub(crate) fn subscribe_group(
    args: &super::subscribe::Args,
    config: &TickboxConfig,
    path: &str,
    id: &str,
    sub_config: &tickbox_subscriber::SubscriberConfig,
    workers: &tickbox_workers::WorkerPoolConfig,
) -> anyhow::Result<ExitCode> {
    use std::collections::BTreeMap;
    use tickbox_coord::{ShardEvent, Shards};
    use tickbox_subscriber::{standard_worker, StandardWorker, Subscriber};

    let coord = connect(args.zk.as_deref(), config, "--group")?;
    let count = u32::try_from(sub_config.shards.len()).context("too many shards")?;
    let member = Shards::new(&coord, path, count)
        .and_then(|s| s.join(id))
        .with_context(|| format!("--group {path}: joining as {id}"))?;
    tracing::info!(group = %path, member = %id, shards = count, "joined the subscriber group");
    let stop = crate::shutdown::flag();
    let ctx = tickbox_zmqx::context::build(&config.context)?;
    let delay = args.debug_worker_delay.map(|d| d.0);
    let deadline = args.duration.map(|d| Instant::now() + d.0);
    let mut running: BTreeMap<u32, Subscriber<StandardWorker>> = BTreeMap::new();
    type Done = Vec<(u32, tickbox_subscriber::Report<StandardWorker>)>;
    let mut done: Done = Vec::new();
    let mut worker_failure = None;
    let mut finish =
        |shard: u32, sub: Subscriber<StandardWorker>, done: &mut Done| -> anyhow::Result<()> {
            let (report, failed) = sub.shutdown_partial()?;
            if let Some(e) = failed {
                tracing::error!(shard, "{e}");
                worker_failure.get_or_insert(e);
            }
            done.push((shard, report));
            Ok(())
        };
    let mut idle = (0u64, Instant::now());
    loop {
        let mut changed = false;
        while let Ok(ev) = member.events().try_recv() {
            match ev {
                ShardEvent::Acquired { shard, token } => {
                    let mut one = sub_config.clone();
                    one.shards = vec![sub_config.shards[shard as usize].clone()];
                    let sub = Subscriber::start(&ctx, &one, workers, |_| standard_worker(delay))
                        .with_context(|| format!("starting the subscriber for shard {shard}"))?;
                    tracing::info!(shard, token, endpoint = %one.shards[0].connect.join(","), "acquired shard");
                    running.insert(shard, sub);
                    changed = true;
                }
                ShardEvent::Lost { shard, reason } => {
                    if let Some(sub) = running.remove(&shard) {
                        finish(shard, sub, &mut done)?;
                    }
                    tracing::info!(shard, ?reason, "released shard");
                    changed = true;
                }
                ShardEvent::Suspended { shard } => {
                    tracing::warn!(shard, "ZooKeeper connection lost: ownership uncertain")
                }
                ShardEvent::Resumed { shard } => {
                    tracing::info!(shard, "ZooKeeper connection back: still owner")
                }
            }
        }
        if changed {
            // One line with the whole picture, for operators and tests.
            tracing::info!(
                "group {path}: {id} owns shards {:?}",
                running.keys().collect::<Vec<_>>()
            );
        }
        let now = Instant::now();
        if let Some(limit) = args.idle_exit {
            let received: u64 = running
                .values()
                .flat_map(|s| s.live_shards())
                .map(|s| s.received)
                .sum::<u64>()
                + done.iter().map(|(_, r)| r.received()).sum::<u64>();
            if received != idle.0 {
                idle = (received, now);
            } else if received > 0 && now.duration_since(idle.1) >= limit.0 {
                tracing::info!(idle = %limit, "no frame for the idle limit: stopping");
                break;
            }
        }
        if stop.load(Ordering::Relaxed)
            || deadline.is_some_and(|d| now >= d)
            || running
                .values()
                .any(|s| s.is_tripped() || s.workers_failed())
        {
            break;
        }
        std::thread::sleep(GROUP_TICK);
    }
    for (shard, sub) in std::mem::take(&mut running) {
        finish(shard, sub, &mut done)?;
    }
    // Leave the group before printing, so the shards move on at once rather than after a session timeout.
    drop(member);
    let signalled = stop.load(Ordering::Relaxed);
    let mut exit = ExitCode::from(exit_code::OK);
    for (shard, report) in &done {
        let stopped_by = report.stopped_by(signalled);
        let mut one = sub_config.clone();
        one.shards = vec![sub_config.shards[*shard as usize].clone()];
        if args.json {
            let mut v = report.summary_json(&one, stopped_by);
            v["group_shard"] = (*shard).into();
            println!("{v}");
        } else {
            println!("group shard {shard}:");
            print!("{}", report.summary_table(None, stopped_by));
        }
        if report.fatal.is_some() {
            exit = super::subscribe::finish(report);
        }
    }
    if let Some(err) = worker_failure {
        eprintln!("error: {err}");
        return Ok(ExitCode::from(exit_code::WORKER_FAILED));
    }
    Ok(exit)
}
