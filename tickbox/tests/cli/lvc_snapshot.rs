//! `tickbox subscribe --lvc-snapshot` against a real `tickbox lvc --snapshot`: the late joiner gets the last value
//! of every topic through the snapshot socket, alone, and its JSON summary says so; a bystander subscribed before
//! gets no cached copy.

use crate::common;

use std::process::Command;
use std::time::{Duration, Instant};

use common::{line_after, output_within, recv_for, spawn_with_lines, TICKBOX};
use tickbox_wire::{Flags, MessageRef};

fn quote(topic: &str, seq: u64, bid: i64) -> Vec<u8> {
    tickbox_testkit::quote(topic, 1, seq).bid(bid).frame()
}

fn is_cached(frame: &[u8]) -> bool {
    MessageRef::decode(frame)
        .unwrap()
        .header()
        .flags
        .contains(Flags::CACHED)
}

#[test]
fn subscribe_with_lvc_snapshot_gets_every_last_value_alone() {
    let ctx = zmq::Context::new();
    let publisher = ctx.socket(zmq::XPUB).unwrap();
    publisher.set_linger(0).unwrap();
    let pub_ep = tickbox_zmqx::bind_resolved(&publisher, "tcp://127.0.0.1:*").unwrap();
    let (_lvc, lines) = spawn_with_lines(&[
        "lvc",
        "--upstream",
        &pub_ep,
        "--bind",
        "tcp://127.0.0.1:*",
        "--snapshot",
        "tcp://127.0.0.1:*",
        "--stats-interval",
        "0s",
        "--duration",
        "20s",
    ]);
    let downstream = line_after(&lines, "lvc subscribers ");
    let snapshot = line_after(&lines, "lvc snapshot ");
    publisher.set_rcvtimeo(15_000).unwrap();
    assert_eq!(publisher.recv_bytes(0).unwrap(), b"\x01");

    // The bystander: subscribed to everything before anything is published; proves the path is up.
    let bystander = ctx.socket(zmq::SUB).unwrap();
    bystander.set_linger(0).unwrap();
    bystander.set_rcvhwm(100_000).unwrap();
    bystander.connect(&downstream).unwrap();
    bystander.set_subscribe(b"").unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut seq = 0;
    loop {
        seq += 1;
        publisher.send(quote("W.WARM.UP", seq, 0), 0).unwrap();
        if !recv_for(&bystander, Duration::from_millis(50), 1).is_empty() {
            break;
        }
        assert!(Instant::now() < deadline, "nothing came through the proxy");
    }
    // 100 topics, two updates each: the snapshot must carry the second.
    for round in 0..2 {
        for i in 0..100u64 {
            seq += 1;
            publisher
                .send(
                    quote(&format!("Q.XNAS.S{i:03}"), seq, round * 1000 + i as i64),
                    0,
                )
                .unwrap();
        }
    }
    let live = recv_for(&bystander, Duration::from_secs(5), 200);
    assert_eq!(
        live.iter().filter(|f| f.starts_with(b"Q.XNAS.")).count(),
        200
    );

    let mut cmd = Command::new(TICKBOX);
    cmd.args([
        "subscribe",
        "--connect",
        &downstream,
        "--lvc-snapshot",
        &snapshot,
    ])
    .args([
        "--topics",
        "Q.XNAS.",
        "--idle-exit",
        "1s",
        "--duration",
        "15s",
        "--json",
    ]);
    let out = output_within(cmd, Duration::from_secs(20));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{:?}\n{stderr}", out.status);
    let summary: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON summary");
    assert_eq!(summary["cached"], 100, "{summary}");
    assert_eq!(summary["received"], 100, "{summary}");
    let snap = &summary["lvc_snapshot"];
    assert_eq!(snap["status"], "complete", "{summary}");
    assert_eq!(snap["complete"], true);
    assert_eq!(
        (snap["received"].as_u64(), snap["sent"].as_u64()),
        (Some(100), Some(100))
    );
    assert_eq!(summary["distinct_topics"], 100, "{summary}");

    // The bystander got no cached copy of anything the late joiner was sent.
    let extra = recv_for(&bystander, Duration::from_millis(300), usize::MAX);
    assert!(
        extra.iter().all(|f| !is_cached(f)),
        "bystander got cached copies"
    );
}

#[test]
fn an_unanswered_lvc_snapshot_is_reported_incomplete() {
    let ctx = zmq::Context::new();
    // A publisher to subscribe to, and a snapshot endpoint that never answers.
    let publisher = ctx.socket(zmq::PUB).unwrap();
    publisher.set_linger(0).unwrap();
    let pub_ep = tickbox_zmqx::bind_resolved(&publisher, "tcp://127.0.0.1:*").unwrap();
    let silent = ctx.socket(zmq::ROUTER).unwrap();
    silent.set_linger(0).unwrap();
    let silent_ep = tickbox_zmqx::bind_resolved(&silent, "tcp://127.0.0.1:*").unwrap();
    let mut cmd = Command::new(TICKBOX);
    cmd.args([
        "subscribe",
        "--connect",
        &pub_ep,
        "--lvc-snapshot",
        &silent_ep,
    ])
    .args([
        "--lvc-snapshot-timeout",
        "300ms",
        "--duration",
        "1500ms",
        "--json",
    ])
    // The live quotes below carry made-up origin times.
    .args(["--max-lateness", "0"]);
    let child = std::thread::spawn(move || output_within(cmd, Duration::from_secs(15)));
    // Something live, so the run is not an "received nothing" failure.
    let deadline = Instant::now() + Duration::from_secs(10);
    while !child.is_finished() && Instant::now() < deadline {
        publisher.send(quote("Q.LIVE", 1, 1), 0).unwrap();
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.join().unwrap();
    let summary: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON summary");
    let snap = &summary["lvc_snapshot"];
    assert_eq!(snap["status"], "timed_out", "{summary}");
    assert_eq!(snap["complete"], false);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("LVC snapshot incomplete"), "{stderr}");
}
