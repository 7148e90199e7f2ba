//! A plan applied for real: `tickbox subscribe` runs with a plan-shaped config on this machine, and the kernel's
//! view of each of its threads (`/proc/<pid>/task/*/{comm,status}`) must match where the config put it.

use crate::common;

use std::process::{Command, Stdio};
use std::time::Duration;

use common::{eventually, KillOnDrop, TempDir, TICKBOX};

/// `(tid, comm, Cpus_allowed_list)` of every thread of `pid`.
fn tasks(pid: u32) -> Vec<(u32, String, String)> {
    let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    let mut out: Vec<(u32, String, String)> = dir
        .filter_map(|e| {
            let e = e.ok()?;
            let tid: u32 = e.file_name().to_str()?.parse().ok()?;
            let comm = std::fs::read_to_string(e.path().join("comm")).ok()?;
            let status = std::fs::read_to_string(e.path().join("status")).ok()?;
            let allowed = status
                .lines()
                .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))?
                .trim()
                .to_owned();
            Some((tid, comm.trim_end().to_owned(), allowed))
        })
        .collect();
    out.sort();
    out
}

fn cpus() -> Vec<usize> {
    tickbox_zmqx::context::allowed_cpus()
        .unwrap()
        .into_iter()
        .collect()
}

/// Starts `tickbox subscribe` with a plan-like config: shard 0 on the last CPU, workers on the last and first,
/// two I/O threads pinned the other way round. Returns the process and the planned CPUs.
fn start_planned_subscriber(dir: &TempDir) -> (KillOnDrop, zmq::Socket, usize, usize) {
    let all = cpus();
    let (first, last) = (all[0], all[all.len() - 1]);
    let ctx = zmq::Context::new();
    let publisher = ctx.socket(zmq::PUB).unwrap();
    publisher.set_linger(0).unwrap();
    let endpoint = tickbox_testkit::bind_loopback(&publisher);
    let config = format!(
        "[context]\nio_threads = 2\nio_thread_cpus = [{last}, {first}]\nthread_name_prefix = \"tbx\"\n\n\
         [subscriber]\n\n[[subscriber.shards]]\nconnect = [\"{endpoint}\"]\ncore = {last}\n\n\
         [workers]\ncount = 2\ncores = [{last}, {first}]\n"
    );
    let path = dir.path().join("plan.toml");
    std::fs::write(&path, config).unwrap();
    let child = Command::new(TICKBOX)
        .args([
            "--config",
            path.to_str().unwrap(),
            "subscribe",
            "--duration",
            "30s",
        ])
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    (KillOnDrop(child), publisher, first, last)
}

#[test]
fn subscribe_pins_its_shard_and_workers_where_the_config_says() {
    let dir = TempDir::new("tune-pin");
    let (child, _publisher, first, last) = start_planned_subscriber(&dir);
    let pid = child.0.id();
    // Thread names come from the code: `tickbox-shard-<n>`, `tickbox-worker-<n>` (cut by the kernel to 15 bytes,
    // so workers all read `tickbox-worker-`; they are spawned in index order, so tids order them).
    let mut seen = Vec::new();
    let ready = eventually(Duration::from_secs(10), Duration::from_millis(20), || {
        seen = tasks(pid);
        let shards = seen.iter().filter(|t| t.1 == "tickbox-shard-0").count();
        let workers = seen
            .iter()
            .filter(|t| t.1.starts_with("tickbox-worker"))
            .count();
        // Pinning happens first thing in each thread; wait until the mask has changed, bounded.
        shards == 1
            && workers == 2
            && seen
                .iter()
                .filter(|t| t.1.starts_with("tickbox-"))
                .all(|t| !t.2.contains('-') && !t.2.contains(','))
    });
    assert!(
        ready || cpus().len() == 1,
        "threads never appeared pinned: {seen:?}"
    );
    let shard = seen.iter().find(|t| t.1 == "tickbox-shard-0").unwrap();
    assert_eq!(shard.2, last.to_string(), "{seen:?}");
    let workers: Vec<&(u32, String, String)> = seen
        .iter()
        .filter(|t| t.1.starts_with("tickbox-worker"))
        .collect();
    assert_eq!(workers[0].2, last.to_string(), "{seen:?}");
    assert_eq!(workers[1].2, first.to_string(), "{seen:?}");
}

/// The plan's `[context]` (two I/O threads, each on its CPU, named `tbx/ZMQbg/IO/<n>`) is applied by `subscribe`,
/// which builds its context with `tickbox_zmqx::context::build(&config.context)` before pinning anything; without
/// it, libzmq's I/O thread would inherit the first pinned shard's CPU.
#[test]
fn subscribe_pins_its_io_threads_where_the_config_says() {
    let dir = TempDir::new("tune-pin-io");
    let (child, _publisher, first, last) = start_planned_subscriber(&dir);
    let pid = child.0.id();
    let mut seen = Vec::new();
    let ready = eventually(Duration::from_secs(10), Duration::from_millis(20), || {
        seen = tasks(pid);
        seen.iter()
            .filter(|t| t.1.starts_with("tbx/ZMQbg/IO/"))
            .count()
            == 2
    });
    assert!(ready, "no tbx/ZMQbg/IO threads: {seen:?}");
    let io: Vec<(String, String)> = seen
        .iter()
        .filter(|t| t.1.starts_with("tbx/ZMQbg/IO/"))
        .map(|t| (t.1.clone(), t.2.clone()))
        .collect();
    let mut io = io;
    io.sort();
    assert_eq!(
        io,
        vec![
            ("tbx/ZMQbg/IO/0".to_owned(), last.to_string()),
            ("tbx/ZMQbg/IO/1".to_owned(), first.to_string()),
        ]
    );
}

/// `(name, Cpus_allowed_list)` of `pid`'s threads named `tbx/ZMQbg/IO/*`, once both appear (bounded wait).
fn named_io_threads(pid: u32) -> Vec<(String, String)> {
    let mut seen = Vec::new();
    let ready = eventually(Duration::from_secs(10), Duration::from_millis(20), || {
        seen = tasks(pid);
        seen.iter()
            .filter(|t| t.1.starts_with("tbx/ZMQbg/IO/"))
            .count()
            == 2
    });
    assert!(ready, "no tbx/ZMQbg/IO threads: {seen:?}");
    let mut io: Vec<(String, String)> = seen
        .iter()
        .filter(|t| t.1.starts_with("tbx/ZMQbg/IO/"))
        .map(|t| (t.1.clone(), t.2.clone()))
        .collect();
    io.sort();
    io
}

/// A `[context]` with two named I/O threads pinned the other way round from the CPU order.
fn context_section(dir: &TempDir) -> (std::path::PathBuf, Vec<(String, String)>) {
    let all = cpus();
    let (first, last) = (all[0], all[all.len() - 1]);
    let path = dir.path().join("context.toml");
    std::fs::write(
        &path,
        format!(
            "[context]\nio_threads = 2\nio_thread_cpus = [{last}, {first}]\nthread_name_prefix = \"tbx\"\n"
        ),
    )
    .unwrap();
    let want = vec![
        ("tbx/ZMQbg/IO/0".to_owned(), last.to_string()),
        ("tbx/ZMQbg/IO/1".to_owned(), first.to_string()),
    ];
    (path, want)
}

fn spawn_quiet(args: &[&str]) -> KillOnDrop {
    KillOnDrop(
        Command::new(TICKBOX)
            .args(args)
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    )
}

/// `record` builds its context from `[context]` too (it used a plain `zmq::Context` before): its I/O threads
/// carry the configured names and each sits on its configured CPU.
#[test]
fn record_puts_its_io_threads_where_the_config_says() {
    let dir = TempDir::new("tune-pin-record");
    let (config, want) = context_section(&dir);
    let ctx = zmq::Context::new();
    let publisher = ctx.socket(zmq::PUB).unwrap();
    publisher.set_linger(0).unwrap();
    let endpoint = tickbox_testkit::bind_loopback(&publisher);
    let journal = dir.path().join("j");
    let child = spawn_quiet(&[
        "--config",
        config.to_str().unwrap(),
        "record",
        "--connect",
        &endpoint,
        "--journal",
        journal.to_str().unwrap(),
        "--segment-size",
        "8MiB",
        "--duration",
        "30s",
    ]);
    assert_eq!(named_io_threads(child.0.id()), want);
}

/// `replay` likewise, on a journal a short `record` run leaves behind.
#[test]
fn replay_puts_its_io_threads_where_the_config_says() {
    let dir = TempDir::new("tune-pin-replay");
    let (config, want) = context_section(&dir);
    let ctx = zmq::Context::new();
    let publisher = ctx.socket(zmq::PUB).unwrap();
    publisher.set_linger(0).unwrap();
    let endpoint = tickbox_testkit::bind_loopback(&publisher);
    let journal = dir.path().join("j");
    let mut recorder = spawn_quiet(&[
        "record",
        "--connect",
        &endpoint,
        "--journal",
        journal.to_str().unwrap(),
        "--segment-size",
        "8MiB",
        "--duration",
        "100ms",
    ]);
    let status = recorder.wait_exit(Duration::from_secs(10), "record did not stop");
    assert!(status.success(), "record failed: {status}");
    let child = spawn_quiet(&[
        "--config",
        config.to_str().unwrap(),
        "replay",
        "--journal",
        journal.to_str().unwrap(),
        "--bind",
        "tcp://127.0.0.1:*",
        "--follow",
    ]);
    assert_eq!(named_io_threads(child.0.id()), want);
}
