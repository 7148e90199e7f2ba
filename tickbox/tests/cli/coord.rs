//! `tickbox coord` against a real ZooKeeper: `ls`, `get`, `state` (lock holder and token, leader, double barrier,
//! queue, group), and `lock --hold` / `elect` killed with SIGKILL: the next process takes over within the session
//! timeout with a greater fencing token.

use crate::common;

use std::process::Command;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use common::{output_within, spawn_with_lines, TICKBOX};
use tickbox_coord::testing::ZkServer;
use tickbox_coord::{Coord, CoordOptions, DoubleBarrier, Election, Group, Lock, Queue};

const SESSION: &str = "2s";

fn coord_cmd(zk: &ZkServer, args: &[&str]) -> Command {
    let mut cmd = Command::new(TICKBOX);
    cmd.args([
        "coord",
        "--zk",
        &zk.connect_string(),
        "--session-timeout",
        SESSION,
    ])
    .args(args);
    cmd
}

fn run_ok(zk: &ZkServer, args: &[&str]) -> String {
    let out = output_within(coord_cmd(zk, args), Duration::from_secs(20));
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// The first line on `rx` with `prefix`, parsed as the token after it (at most 15 s).
fn token_after(rx: &mpsc::Receiver<String>, prefix: &str) -> u64 {
    common::first_line_where(
        rx,
        Duration::from_secs(15),
        &format!("no {prefix} line"),
        |line| line.strip_prefix(prefix).map(|t| t.trim().parse().unwrap()),
    )
}

#[test]
fn cli_coord_ls_get_and_state() {
    let Some(zk) = ZkServer::start_or_skip("cli_coord_ls_get_and_state") else {
        return;
    };
    let c = Coord::connect_with(&zk.connect_string(), &CoordOptions::default()).unwrap();
    let _held = Lock::new(&c, "/fleet/lock").unwrap().acquire(None).unwrap();
    let cand = Election::new(&c, "/fleet/recorders")
        .unwrap()
        .campaign(b"rec-a")
        .unwrap();
    cand.wait_elected(Duration::from_secs(5)).unwrap();
    let db = DoubleBarrier::new(&c, "/fleet/start", 3).unwrap();
    let other = Coord::connect_with(&zk.connect_string(), &CoordOptions::default()).unwrap();
    let waiting = {
        let db = DoubleBarrier::new(&other, "/fleet/start", 3).unwrap();
        std::thread::spawn(move || db.enter(b"x", Some(Duration::from_secs(1))).is_err())
    };
    let q = Queue::new(&c, "/fleet/jobs").unwrap();
    q.put(b"one").unwrap();
    q.put(b"two").unwrap();
    let _m = Group::new(&c, "/fleet/members")
        .unwrap()
        .join("sub-1", b"")
        .unwrap();
    c.create_persistent("/fleet/note", b"hello").unwrap();
    // Wait for the barrier party to be present.
    assert!(common::eventually(
        Duration::from_secs(5),
        Duration::from_millis(10),
        || db.state().unwrap().present == 1
    ));

    let ls = run_ok(&zk, &["ls", "/fleet"]);
    assert_eq!(
        ls.lines()
            .map(|l| l.split('\t').next().unwrap())
            .collect::<Vec<_>>(),
        ["jobs", "lock", "members", "note", "recorders", "start"]
    );
    // Each recipe child carries its state; a plain node only its name.
    assert!(ls.contains("members\tgroup\tmembers=sub-1\n"), "{ls}");
    assert!(ls.contains("recorders\telection\tleader=\"rec-a\""), "{ls}");
    assert!(
        ls.contains("start\tdouble-barrier\tpresent=1 ready=false\n"),
        "{ls}"
    );
    assert!(ls.contains("\nnote\n"), "{ls}");
    assert_eq!(run_ok(&zk, &["get", "/fleet/note"]), "hello\n");
    let missing = output_within(
        coord_cmd(&zk, &["get", "/fleet/nope"]),
        Duration::from_secs(20),
    );
    assert_eq!(missing.status.code(), Some(1));

    let json: serde_json::Value =
        serde_json::from_str(&run_ok(&zk, &["state", "/fleet", "--json"])).unwrap();
    assert_eq!(json["schema_version"], 1);
    let by_path = |p: &str| {
        json["recipes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|v| v["path"] == p)
            .cloned()
            .unwrap_or_else(|| panic!("{p} in {json}"))
    };
    assert_eq!(by_path("/fleet/lock")["recipe"], "lock");
    assert_eq!(by_path("/fleet/lock")["holder"]["token"], 0);
    assert_eq!(by_path("/fleet/recorders")["leader"]["id"], "rec-a");
    assert_eq!(by_path("/fleet/start")["present"], 1);
    assert_eq!(by_path("/fleet/start")["ready"], false);
    assert_eq!(by_path("/fleet/jobs")["items"], 2);
    assert_eq!(
        by_path("/fleet/members")["members"],
        serde_json::json!(["sub-1"])
    );
    let text = run_ok(&zk, &["state", "/fleet"]);
    assert!(text.contains("/fleet/lock\tlock\tholder=lock-"), "{text}");
    assert!(
        waiting.join().unwrap(),
        "the barrier party should time out (only 1 of 3)"
    );
}

#[test]
fn cli_coord_watch_prints_changes() {
    let Some(zk) = ZkServer::start_or_skip("cli_coord_watch") else {
        return;
    };
    let c = Coord::connect_with(&zk.connect_string(), &CoordOptions::default()).unwrap();
    c.ensure_path("/w").unwrap();
    let zs = zk.connect_string();
    let (_child, lines) = spawn_with_lines(&[
        "coord", "--zk", &zs, "watch", "/w", "--count", "2", "--for", "15s",
    ]);
    // The watch is registered asynchronously: keep touching until the first event is printed.
    let first = (0..100)
        .find_map(|i| {
            c.create_persistent(&format!("/w/n{i}"), b"").unwrap();
            lines.recv_timeout(Duration::from_millis(100)).ok()
        })
        .expect("watch printed an event");
    assert!(first.starts_with("NodeCreated\t/w/n"), "{first}");
}

#[test]
fn cli_coord_kill_9_lock_holder_and_leader() {
    let Some(zk) = ZkServer::start_or_skip("cli_coord_kill_9") else {
        return;
    };
    let zs = zk.connect_string();
    for (op, prefix) in [("lock", "HELD "), ("elect", "LEADER ")] {
        let path = format!("/kill/{op}");
        let mut args = vec![
            "coord",
            "--zk",
            &zs,
            "--session-timeout",
            SESSION,
            op,
            &path,
        ];
        if op == "lock" {
            args.push("--hold");
        }
        let (mut first, first_lines) = spawn_with_lines(&args);
        let t0 = token_after(&first_lines, prefix);
        let (_second, second_lines) = spawn_with_lines(&args);
        let c = Coord::connect_with(&zs, &CoordOptions::default()).unwrap();
        assert!(common::eventually(
            Duration::from_secs(10),
            Duration::from_millis(5),
            || c.children(&path).unwrap().len() == 2
        ));
        let killed = Instant::now();
        first.0.kill().unwrap();
        let t1 = token_after(&second_lines, prefix);
        let took = killed.elapsed();
        eprintln!("{op}: takeover {took:?} after kill -9 (session {SESSION})");
        assert!(t1 > t0, "{op}: token {t1} after {t0}");
        assert!(
            took < Duration::from_secs(3),
            "{op}: takeover took {took:?}"
        );
    }
}
