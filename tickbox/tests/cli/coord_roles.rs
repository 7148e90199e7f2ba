//! The coordinating flags of tickbox's own commands, as real processes against a real ZooKeeper:
//! `replay --start-barrier` with two `subscribe --start-barrier` started at different times, `record --elect`
//! with the leader killed -9 mid-feed, and `subscribe --group` sharing four feed shards with a member killed -9.

use crate::common;

use std::io::Read;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use common::{endpoint_in, signal, spawn_piped, KillOnDrop, TempDir, TICKBOX};
use tickbox_coord::testing::{ZkEnsemble, ZkServer};
use tickbox_coord::{Coord, CoordOptions, DoubleBarrier, Shards};
use tickbox_journal::{Writer, WriterOptions};
use tickbox_wire::{encode_to_vec, Header, Kind, Quote};

/// Session timeout of every process in these tests (the test server allows 0.5 s to 5 s).
const SESSION: Duration = Duration::from_secs(2);

/// A `tickbox` child with its stdout and stderr lines.
struct Proc {
    child: KillOnDrop,
    out: mpsc::Receiver<String>,
    err: mpsc::Receiver<String>,
}

impl Proc {
    fn spawn(args: &[&str]) -> Proc {
        let (child, out, err) = spawn_piped(
            Command::new(TICKBOX)
                .args(args)
                .env("RUST_LOG", "info")
                .stdin(Stdio::null()),
        );
        Proc { child, out, err }
    }

    /// The first stderr line `pick` maps to `Some`, within `limit` (panics past it, with what was seen).
    fn stderr_until<T>(&self, limit: Duration, what: &str, pick: impl Fn(&str) -> Option<T>) -> T {
        let deadline = Instant::now() + limit;
        let mut seen = Vec::new();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.err.recv_timeout(left) {
                Ok(line) => {
                    if let Some(v) = pick(&line) {
                        return v;
                    }
                    seen.push(line);
                }
                Err(_) => panic!(
                    "no {what} within {limit:?}; stderr so far:\n{}",
                    seen.join("\n")
                ),
            }
        }
    }

    /// The first stdout line `pick` maps to `Some`, within `limit` (panics past it).
    fn stdout_until<T>(&self, limit: Duration, what: &str, pick: impl Fn(&str) -> Option<T>) -> T {
        let deadline = Instant::now() + limit;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let line = self
                .out
                .recv_timeout(left)
                .unwrap_or_else(|_| panic!("no {what} on stdout within {limit:?}"));
            if let Some(v) = pick(&line) {
                return v;
            }
        }
    }

    /// Waits for exit (bounded) and returns the exit code and all of stdout.
    fn finish(mut self, limit: Duration, what: &str) -> (Option<i32>, String) {
        let status = self.child.wait_exit(limit, what);
        let mut out = String::new();
        while let Ok(l) = self.out.recv_timeout(Duration::from_secs(2)) {
            out.push_str(&l);
            out.push('\n');
        }
        (status.code(), out)
    }
}

fn session(zk: &ZkServer) -> Coord {
    session_at(&zk.connect_string())
}

fn session_at(hosts: &str) -> Coord {
    Coord::connect_with(
        hosts,
        &CoordOptions {
            session_timeout: SESSION,
            connect_timeout: Duration::from_secs(10),
        },
    )
    .expect("connect to the test server")
}

/// A config file naming the test ensemble and the short session timeout, as `[coord]` in the TOML.
fn config(dir: &Path, zk: &ZkServer) -> String {
    config_at(dir, &zk.connect_string())
}

fn config_at(dir: &Path, hosts: &str) -> String {
    let path = dir.join("tickbox.toml");
    std::fs::write(
        &path,
        format!("[coord]\nzk = \"{hosts}\"\nsession_timeout = \"2s\"\nbarrier_timeout = \"15s\"\n"),
    )
    .unwrap();
    path.to_str().unwrap().to_owned()
}

/// Polls `cond` every 20 ms for at most `limit`.
fn wait_for(limit: Duration, what: &str, mut cond: impl FnMut() -> bool) {
    assert!(
        common::eventually(limit, Duration::from_millis(20), &mut cond),
        "{what} within {limit:?}"
    );
}

/// A journal of `n` quotes of publisher 7, sequences 1..=n, capture times 1 ms apart.
fn write_journal(path: &Path, n: u64) {
    let mut w = Writer::open(path, &WriterOptions::ring(4 << 20)).unwrap();
    let t0 = 1_767_364_200_000_000_000u64;
    for i in 1..=n {
        let t = t0 + i * 1_000_000;
        let q = Quote {
            instrument_id: i as u32,
            bid_px: i as i64,
            ..Quote::default()
        };
        let frame = encode_to_vec(
            &format!("Q.XNAS.S{}", i % 5),
            &Header::live(Kind::Quote, 7, i, t),
            &q.into(),
        )
        .unwrap();
        w.append(t, &frame).unwrap();
    }
}

/// The replay waits at the barrier for both subscribers (started one after the other), sends nothing before
/// both are in (each receives sequence 1 and all 300 records, none missing), and all three exit once all left.
#[test]
fn replay_start_barrier_waits_for_every_subscriber_and_all_exit() {
    let Some(zk) = ZkServer::start_or_skip("replay_start_barrier") else {
        return;
    };
    let dir = TempDir::new("coord-barrier");
    let journal = dir.path().join("j.tbj");
    write_journal(&journal, 300);
    let hosts = zk.connect_string();
    let c = session(&zk);
    let barrier = DoubleBarrier::new(&c, "/tb/start", 3).unwrap();

    let replay = Proc::spawn(&[
        "replay",
        "--journal",
        journal.to_str().unwrap(),
        "--bind",
        "tcp://127.0.0.1:*",
        "--speed",
        "max",
        "--zk",
        &hosts,
        "--start-barrier",
        "/tb/start",
        "--parties",
        "2",
        "--quiet",
    ]);
    let endpoint = replay.stderr_until(Duration::from_secs(10), "replay endpoint", endpoint_in);
    wait_for(Duration::from_secs(10), "replay in the barrier", || {
        barrier.state().unwrap().present == 1
    });
    let subscriber = |id: &str| {
        Proc::spawn(&[
            "subscribe",
            "--connect",
            &endpoint,
            "--zk",
            &hosts,
            "--start-barrier",
            "/tb/start",
            "--parties",
            "2",
            "--idle-exit",
            "1s",
            "--max-lateness",
            "0",
            "--member-id",
            id,
            "--json",
        ])
    };
    let a = subscriber("sub-a");
    wait_for(
        Duration::from_secs(10),
        "first subscriber in the barrier",
        || barrier.state().unwrap().present == 2,
    );
    // The second subscriber comes later: the barrier stays closed meanwhile.
    std::thread::sleep(Duration::from_millis(500));
    let st = barrier.state().unwrap();
    assert!(!st.ready, "barrier opened with one subscriber: {st:?}");
    let b = subscriber("sub-b");

    let (code, out) = replay.finish(Duration::from_secs(15), "replay exits once all left");
    assert_eq!(code, Some(0), "replay: {out}");
    for (name, p) in [("sub-a", a), ("sub-b", b)] {
        let (code, out) = p.finish(Duration::from_secs(10), "subscriber exits once all left");
        assert_eq!(code, Some(0), "{name}: {out}");
        let v: serde_json::Value =
            serde_json::from_str(out.trim()).unwrap_or_else(|e| panic!("{name}: {e}: {out}"));
        let p7 = v["publishers"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["publisher"] == 7)
            .unwrap_or_else(|| panic!("{name}: no publisher 7 in {v}"))
            .clone();
        assert_eq!(p7["first_sequence"], 1, "{name} missed the start: {p7}");
        assert_eq!(p7["last_sequence"], 300, "{name}: {p7}");
        assert_eq!(p7["received"], 300, "{name}: {p7}");
        assert_eq!(p7["missing"], 0, "{name}: {p7}");
    }
    let st = barrier.state().unwrap();
    assert_eq!(st.present, 0, "every party left: {st:?}");
    assert!(!st.ready, "the flag is cleared for the next run: {st:?}");
}

/// `became leader of PATH (token T, …` → T.
fn leader_token(line: &str) -> Option<u64> {
    let at = line.find("became leader of ")?;
    let rest = &line[at..];
    let t = rest.split("(token ").nth(1)?;
    t.split(',').next()?.trim().parse().ok()
}

/// Two recorders on one feed under `--elect` (ensemble from `[coord]`): the leader is killed -9 mid-feed, the
/// follower becomes leader within the session timeout with a greater token, and the handover point (the old
/// leader's last reported sequences, the new leader's first) is in its journal's leadership log, shown by
/// `journal info`.
#[test]
fn record_elect_follower_takes_over_after_kill_9_and_records_the_handover() {
    let Some(zk) = ZkServer::start_or_skip("record_elect") else {
        return;
    };
    let dir = TempDir::new("coord-elect");
    let cfg = config(dir.path(), &zk);
    let feed = Proc::spawn(&[
        "feed",
        "--bind",
        "tcp://127.0.0.1:*",
        "--rate",
        "2000",
        "--symbols",
        "4",
    ]);
    let endpoint = {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let line = feed
                .out
                .recv_timeout(deadline.saturating_duration_since(Instant::now()))
                .expect("feed endpoint");
            if let Some(ep) = endpoint_in(&line) {
                break ep;
            }
        }
    };
    let journal_a = dir.path().join("a");
    let journal_b = dir.path().join("b");
    let recorder = |journal: &Path| {
        Proc::spawn(&[
            "--config",
            &cfg,
            "record",
            "--connect",
            &endpoint,
            "--journal",
            journal.to_str().unwrap(),
            "--segment-size",
            "4MiB",
            "--elect",
            "/tb/recorders",
        ])
    };
    let mut a = recorder(&journal_a);
    let token_a = a.stderr_until(Duration::from_secs(10), "first leader", leader_token);
    let b = recorder(&journal_b);
    let c = session(&zk);
    wait_for(Duration::from_secs(10), "two candidates", || {
        c.children("/tb/recorders")
            .unwrap()
            .iter()
            .filter(|n| n.starts_with("n-"))
            .count()
            == 2
    });
    // Mid-feed: the leader has reported progress, i.e. recorded.
    wait_for(Duration::from_secs(10), "leader progress", || {
        tickbox_coord::last_progress(&c, "/tb/recorders")
            .unwrap()
            .is_some_and(|(_, _, p)| p["last_journal_seq"].as_u64().unwrap_or(0) > 100)
    });
    let killed = Instant::now();
    a.child.0.kill().unwrap();
    let _ = a.child.0.wait();
    let token_b = b.stderr_until(SESSION + Duration::from_secs(3), "takeover", leader_token);
    let took = killed.elapsed();
    eprintln!("recorder takeover {took:?} after kill -9 (session {SESSION:?})");
    assert!(
        took <= SESSION + Duration::from_millis(1500),
        "took {took:?}"
    );
    assert!(token_b > token_a, "fencing token {token_b} after {token_a}");

    signal(b.child.0.id(), "INT");
    let (code, _) = b.finish(Duration::from_secs(10), "recorder b stops on SIGINT");
    assert_eq!(code, Some(0));
    drop(feed);

    let log_b = tickbox_coord::HandoverLog::beside(&journal_b)
        .read()
        .unwrap();
    // Its election, and its resignation when SIGINT ended its run.
    assert_eq!(log_b.len(), 2, "{log_b:?}");
    assert_eq!(log_b[1]["event"], "resigned", "{log_b:?}");
    assert_eq!(log_b[1]["token"], token_b, "{log_b:?}");
    let h = &log_b[0];
    assert_eq!(h["token"], token_b);
    assert_eq!(h["previous"]["token"], token_a, "{h}");
    let old_last = h["previous"]["progress"]["last_journal_seq"]
        .as_u64()
        .unwrap();
    assert!(old_last > 100, "{h}");
    assert!(h["from"]["next_journal_seq"].as_u64().unwrap() > 1, "{h}");
    assert!(
        h["previous"]["progress"]["publishers"]
            .as_object()
            .is_some_and(|m| !m.is_empty()),
        "old leader's publisher sequences: {h}"
    );
    let log_a = tickbox_coord::HandoverLog::beside(&journal_a)
        .read()
        .unwrap();
    assert_eq!(log_a.len(), 1);
    assert_eq!(
        log_a[0]["previous"],
        serde_json::Value::Null,
        "a was the first leader"
    );

    let mut info = Command::new(TICKBOX)
        .args([
            "journal",
            "info",
            "--journal",
            journal_b.to_str().unwrap(),
            "--json",
        ])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut text = String::new();
    info.stdout
        .take()
        .unwrap()
        .read_to_string(&mut text)
        .unwrap();
    assert!(info.wait().unwrap().success());
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["leadership"][0]["token"], token_b, "{v}");

    // The canonical day: every data record either leader recorded, once, each publisher's in sequence order.
    let day = dir.path().join("day");
    let stitch = Command::new(TICKBOX)
        .args([
            "journal",
            "stitch",
            "--out",
            day.to_str().unwrap(),
            "--json",
            "--journal",
        ])
        .arg(format!("{},{}", journal_a.display(), journal_b.display()))
        .output()
        .unwrap();
    assert!(stitch.status.success(), "{stitch:?}");
    let report: serde_json::Value = serde_json::from_slice(&stitch.stdout).unwrap();
    let keys = |journal: &Path| {
        let mut r = tickbox_journal::Reader::open(journal).unwrap();
        let mut out = Vec::new();
        while let Some(rec) = r.next().unwrap() {
            let h = *tickbox_wire::MessageRef::decode(rec.payload)
                .unwrap()
                .header();
            if !matches!(h.kind, Kind::Heartbeat | Kind::Gap) {
                out.push((h.publisher_id, h.session, h.sequence));
            }
        }
        out
    };
    let stitched = keys(&day);
    let mut either: Vec<_> = keys(&journal_a)
        .into_iter()
        .chain(keys(&journal_b))
        .collect();
    either.sort();
    either.dedup();
    let mut once = stitched.clone();
    once.sort();
    once.dedup();
    assert_eq!(
        once.len(),
        stitched.len(),
        "a record stitched twice: {report}"
    );
    assert_eq!(once, either, "{report}");
    for w in stitched.windows(2) {
        if (w[0].0, w[0].1) == (w[1].0, w[1].1) {
            assert!(w[0].2 < w[1].2, "publisher order: {w:?}");
        }
    }
    assert_eq!(report["data"], stitched.len(), "{report}");
    // Each led for a while; what no leader held (before the first election was logged, between the kill and the
    // takeover) came from whichever journal had it; what neither had is named.
    for i in 0..2 {
        assert!(
            report["inputs"][i]["taken_as_leader"].as_u64().unwrap() > 0,
            "{report}"
        );
    }
    let holes: u64 = report["holes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["last"].as_u64().unwrap() - h["first"].as_u64().unwrap() + 1)
        .sum();
    assert_eq!(report["missing"], holes, "{report}");
}

/// Two `subscribe --group` members share a four-shard feed two and two; after kill -9 of one, the other owns
/// all four within the session timeout, and `coord ls` shows it as the only member and every shard's owner.
#[test]
fn subscribe_group_shards_move_to_the_survivor_after_kill_9() {
    let Some(zk) = ZkServer::start_or_skip("subscribe_group") else {
        return;
    };
    let dir = TempDir::new("coord-group");
    let cfg = config(dir.path(), &zk);
    let feed = Proc::spawn(&[
        "feed",
        "--bind",
        "tcp://127.0.0.1:*,tcp://127.0.0.1:*,tcp://127.0.0.1:*,tcp://127.0.0.1:*",
        "--rate",
        "400",
        "--symbols",
        "8",
    ]);
    let mut endpoints = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    while endpoints.len() < 4 {
        let line = feed
            .out
            .recv_timeout(deadline.saturating_duration_since(Instant::now()))
            .expect("four feed endpoints");
        if let Some(ep) = endpoint_in(&line) {
            endpoints.push(ep);
        }
    }
    let connect = endpoints.join(",");
    let member = |id: &str| {
        Proc::spawn(&[
            "--config",
            &cfg,
            "subscribe",
            "--connect",
            &connect,
            "--group",
            "/tb/group",
            "--member-id",
            id,
            "--max-lateness",
            "0",
            "--workers",
            "1",
        ])
    };
    let mut a = member("sub-a");
    let b = member("sub-b");
    let c = session(&zk);
    let shards = Shards::new(&c, "/tb/group", 4).unwrap();
    let owned_by = |who: &str| {
        shards
            .owners()
            .unwrap()
            .values()
            .filter(|o| o.as_ref().is_some_and(|(m, _)| m == who))
            .count()
    };
    wait_for(Duration::from_secs(10), "two shards each", || {
        owned_by("sub-a") == 2 && owned_by("sub-b") == 2
    });
    // Consume the survivor's log up to its two-shard line, so that only a line after the kill can match below
    // (it may have owned all four for a moment before the other joined).
    b.stderr_until(Duration::from_secs(5), "survivor owning two", |l| {
        let owned = l.split("sub-b owns shards [").nth(1)?;
        (owned.split(',').count() == 2).then_some(())
    });
    let killed = Instant::now();
    a.child.0.kill().unwrap();
    let _ = a.child.0.wait();
    b.stderr_until(
        SESSION + Duration::from_secs(3),
        "survivor owning all four",
        |l| l.contains("sub-b owns shards [0, 1, 2, 3]").then_some(()),
    );
    let took = killed.elapsed();
    eprintln!("shards moved {took:?} after kill -9 (session {SESSION:?})");
    assert!(
        took <= SESSION + Duration::from_millis(1500),
        "took {took:?}"
    );
    assert_eq!(owned_by("sub-b"), 4);

    let mut ls = Command::new(TICKBOX);
    ls.args(["--config", &cfg, "coord", "ls", "/tb/group"]);
    let out = common::output_within(ls, Duration::from_secs(15));
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    let first = text.lines().next().unwrap_or_default();
    assert!(
        first.starts_with(".\tshards\tmembers=sub-b owners=0:sub-b/"),
        "{text}"
    );
    for i in 1..4 {
        assert!(first.contains(&format!(",{i}:sub-b/")), "{text}");
    }
    assert!(
        text.lines().any(|l| l == "members\tgroup\tmembers=sub-b"),
        "{text}"
    );

    signal(b.child.0.id(), "INT");
    let (code, out) = b.finish(Duration::from_secs(10), "survivor stops on SIGINT");
    assert_eq!(code, Some(0), "{out}");
    assert!(
        out.contains("group shard 3:"),
        "one summary per shard owned: {out}"
    );
    drop(feed);
}

/// Two `record --elect` recorders on a three-node ensemble stopped as a whole for 3 × the session timeout (the
/// fault campaign's outage): the leader stops claiming its journal canonical as soon as ZooKeeper is gone (before
/// any other recorder could win), both lose their sessions, both stand again on new ones, and one of them leads
/// again within a session timeout + 2 s of the quorum returning, with a greater token. The old leader's handover
/// log says where its leadership was lost and that it rejoined as a candidate.
#[test]
fn record_elect_leads_again_after_whole_ensemble_outage() {
    let Some(mut zk) = ZkEnsemble::start_or_skip("record_elect_outage") else {
        return;
    };
    let dir = TempDir::new("coord-elect-outage");
    let cfg = config_at(dir.path(), &zk.connect_string());
    let feed = Proc::spawn(&[
        "feed",
        "--bind",
        "tcp://127.0.0.1:*",
        "--rate",
        "1000",
        "--symbols",
        "4",
    ]);
    let endpoint = {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let line = feed
                .out
                .recv_timeout(deadline.saturating_duration_since(Instant::now()))
                .expect("feed endpoint");
            if let Some(ep) = endpoint_in(&line) {
                break ep;
            }
        }
    };
    let journals = [dir.path().join("a"), dir.path().join("b")];
    let recorder = |journal: &Path| {
        Proc::spawn(&[
            "--config",
            &cfg,
            "record",
            "--connect",
            &endpoint,
            "--journal",
            journal.to_str().unwrap(),
            "--segment-size",
            "4MiB",
            "--elect",
            "/tb/recorders",
        ])
    };
    let a = recorder(&journals[0]);
    let token_a = a.stderr_until(Duration::from_secs(10), "first leader", leader_token);
    let b = recorder(&journals[1]);
    {
        let c = session_at(&zk.connect_string());
        wait_for(Duration::from_secs(10), "two candidates", || {
            c.children("/tb/recorders")
                .unwrap()
                .iter()
                .filter(|n| n.starts_with("n-"))
                .count()
                == 2
        });
    }
    zk.stop_all();
    a.stderr_until(Duration::from_secs(5), "the leader's suspension", |l| {
        l.contains("ZooKeeper connection lost").then_some(())
    });
    let suspended = Instant::now();
    // The outage: three session timeouts without any server.
    std::thread::sleep(SESSION * 3);
    zk.start_all().expect("ensemble back");
    let quorum = Instant::now();
    assert!(suspended < quorum);
    // Whichever recorder leads first after the outage.
    let limit = SESSION + Duration::from_secs(2);
    let mut lines: [Vec<String>; 2] = [Vec::new(), Vec::new()];
    let (winner, token) = loop {
        let mut found = None;
        for (i, p) in [&a, &b].iter().enumerate() {
            while let Ok(l) = p.err.try_recv() {
                if let Some(t) = leader_token(&l) {
                    found = Some((i, t));
                }
                lines[i].push(l);
            }
        }
        if let Some(f) = found {
            break f;
        }
        assert!(
            quorum.elapsed() <= limit + Duration::from_millis(500),
            "no recorder leads {limit:?} after the quorum returned; a:\n{}\nb:\n{}",
            lines[0].join("\n"),
            lines[1].join("\n")
        );
        std::thread::sleep(Duration::from_millis(10));
    };
    eprintln!(
        "recorder {winner} leads again {:?} after the quorum returned (token {token} > {token_a})",
        quorum.elapsed()
    );
    assert!(token > token_a, "token {token} after {token_a}");
    // What each recorder must have said; a recorder's leadership tick (every 200 ms) may say it after the
    // winner already leads, so read on (bounded) until it does.
    let deadline = Instant::now() + Duration::from_secs(5);
    let lost_a = format!("lost the leadership (token {token_a}");
    let rejoined = "back in the recorder election as a candidate";
    for (i, p, what) in [
        (0, &a, lost_a.as_str()),
        (0, &a, rejoined),
        (1, &b, rejoined),
    ] {
        while !lines[i].iter().any(|l| l.contains(what)) {
            match p
                .err
                .recv_timeout(deadline.saturating_duration_since(Instant::now()))
            {
                Ok(l) => lines[i].push(l),
                Err(_) => panic!(
                    "recorder {i} never said {what:?}; stderr:\n{}",
                    lines[i].join("\n")
                ),
            }
        }
    }
    for p in [a, b] {
        signal(p.child.0.id(), "INT");
        let (code, _) = p.finish(Duration::from_secs(10), "recorder stops on SIGINT");
        assert_eq!(code, Some(0));
    }
    drop(feed);
    let log_a = tickbox_coord::HandoverLog::beside(&journals[0])
        .read()
        .unwrap();
    let events: Vec<&str> = log_a
        .iter()
        .map(|e| e["event"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(&events[..3], ["elected", "lost", "rejoined"], "{log_a:?}");
    assert_eq!(log_a[1]["token"], token_a);
    assert_eq!(log_a[2]["was_leader"], token_a);
    let info = Command::new(TICKBOX)
        .args([
            "journal",
            "info",
            "--journal",
            journals[0].to_str().unwrap(),
        ])
        .output()
        .unwrap();
    let info = String::from_utf8_lossy(&info.stdout);
    assert!(info.contains("leader lost"), "{info}");
    assert!(info.contains("candidate     rejoined"), "{info}");
    // No two recorders canonical at once, by their own leadership logs: a recorder's canonical span runs from
    // an election (`at_ns`) to the loss of that leadership (`until_ns`, when its connection dropped) or to its
    // resignation when its run ended (the other one may be elected then); the two recorders' spans must not
    // overlap, and every span is closed.
    let spans = |journal: &Path| -> Vec<(u64, u64)> {
        let log = tickbox_coord::HandoverLog::beside(journal).read().unwrap();
        let mut spans = Vec::new();
        let mut open = None;
        for e in &log {
            match e["event"].as_str() {
                Some("elected") => {
                    assert!(open.is_none(), "elected while leading: {log:?}");
                    open = Some(e["at_ns"].as_u64().expect("at_ns"));
                }
                Some("lost" | "resigned") => {
                    let from = open.take().expect("a loss follows an election");
                    let until = e["until_ns"].as_u64().expect("until_ns");
                    assert!(from <= until, "{log:?}");
                    spans.push((from, until));
                }
                _ => {}
            }
        }
        spans.extend(open.map(|from| (from, u64::MAX)));
        spans
    };
    let (spans_a, spans_b) = (spans(&journals[0]), spans(&journals[1]));
    eprintln!("canonical spans (ns): a {spans_a:?}, b {spans_b:?}");
    // a led before the outage; the winner led after it; nobody's leadership ended unlogged.
    let led_after = [&spans_a, &spans_b][winner].len();
    assert!(
        !spans_a.is_empty() && led_after > usize::from(winner == 0),
        "{spans_a:?} {spans_b:?}"
    );
    assert!(
        spans_a.iter().chain(&spans_b).all(|s| s.1 < u64::MAX),
        "a leadership without its end in the log: {spans_a:?} {spans_b:?}"
    );
    for x in &spans_a {
        for y in &spans_b {
            assert!(
                x.1 <= y.0 || y.1 <= x.0,
                "a canonical {x:?} and b canonical {y:?} at once"
            );
        }
    }
}

/// A recorder under `--elect` that serves its journal (`--serve`) publishes the service's endpoint in its
/// election id; a late joiner given `--catch-up zk:PATH` finds the leader's service there and catches up from it.
#[test]
fn a_late_joiner_finds_the_elected_recorders_history_service() {
    let Some(zk) = ZkServer::start_or_skip("catch_up_elect") else {
        return;
    };
    let dir = TempDir::new("coord-catch-up");
    let cfg = config(dir.path(), &zk);
    let feed = Proc::spawn(&[
        "feed",
        "--bind",
        "tcp://127.0.0.1:*",
        "--rate",
        "2000",
        "--symbols",
        "4",
        "--duration",
        "4s",
    ]);
    let endpoint = feed.stdout_until(Duration::from_secs(10), "feed endpoint", endpoint_in);
    let journal = dir.path().join("day");
    let recorder = Proc::spawn(&[
        "--config",
        &cfg,
        "record",
        "--connect",
        &endpoint,
        "--journal",
        journal.to_str().unwrap(),
        "--segment-size",
        "4MiB",
        "--serve",
        "tcp://127.0.0.1:*",
        "--elect",
        "/tb/history",
    ]);
    let served = recorder.stdout_until(Duration::from_secs(10), "history endpoint", |line| {
        line.strip_prefix("record history service endpoint ")
            .map(|rest| rest.trim().to_owned())
    });
    recorder.stderr_until(Duration::from_secs(10), "leadership", leader_token);
    // Mid-feed: the leader has recorded something to catch up on.
    let c = session(&zk);
    wait_for(Duration::from_secs(10), "leader progress", || {
        tickbox_coord::last_progress(&c, "/tb/history")
            .unwrap()
            .is_some_and(|(_, _, p)| p["last_journal_seq"].as_u64().unwrap_or(0) > 500)
    });
    let subscriber = Proc::spawn(&[
        "--config",
        &cfg,
        "subscribe",
        "--connect",
        &endpoint,
        "--catch-up",
        "zk:/tb/history",
        "--idle-exit",
        "1500ms",
        "--json",
    ]);
    let (code, out) = subscriber.finish(Duration::from_secs(20), "the late joiner");
    assert_eq!(code, Some(0), "{out}");
    let summary: serde_json::Value = serde_json::from_str(out.trim()).expect("one JSON summary");
    assert_eq!(
        summary["catch_up"]["endpoint"],
        served.as_str(),
        "{summary}"
    );
    assert_eq!(summary["catch_up"]["live"], true, "{summary}");
    assert!(
        summary["catch_up"]["history_records"].as_u64().unwrap() > 500,
        "{summary}"
    );
    assert_eq!(summary["missing"], 0, "{summary}");
    assert_eq!(summary["duplicates"], 0, "{summary}");
}
