//! Runs the real `tickbox feed` binary and subscribes to the endpoints it prints.

use crate::common;

use std::process::Command;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use common::{remaining_lines, signal, spawn_with_lines, KillOnDrop, TICKBOX};
use tickbox_wire::{Kind, MessageRef};

fn spawn_feed(args: &[&str]) -> (KillOnDrop, mpsc::Receiver<String>) {
    let mut feed_args = vec!["feed"];
    feed_args.extend_from_slice(args);
    spawn_with_lines(&feed_args)
}

/// The endpoints printed at start-up, in shard order.
fn read_endpoints(lines: &mpsc::Receiver<String>, shards: usize) -> Vec<String> {
    let mut endpoints = Vec::new();
    while endpoints.len() < shards {
        let line = lines
            .recv_timeout(Duration::from_secs(10))
            .expect("feed printed its endpoints");
        if let Some(at) = line.find(" endpoint ") {
            assert!(
                line.starts_with(&format!("feed shard {} ", endpoints.len())),
                "{line}"
            );
            endpoints.push(line[at + " endpoint ".len()..].trim().to_string());
        }
    }
    endpoints
}

#[test]
fn feed_prints_endpoints_publishes_and_summarises() {
    let (mut child, lines) = spawn_feed(&[
        "--bind",
        "tcp://127.0.0.1:*,tcp://127.0.0.1:*",
        "--rate",
        "20k",
        "--symbols",
        "200",
        "--duration",
        "1500ms",
    ]);
    let endpoints = read_endpoints(&lines, 2);
    assert_ne!(endpoints[0], endpoints[1]);
    let ctx = zmq::Context::new();
    for (shard, endpoint) in endpoints.iter().enumerate() {
        let sub = ctx.socket(zmq::SUB).unwrap();
        sub.set_linger(0).unwrap();
        sub.set_rcvtimeo(200).unwrap();
        sub.connect(endpoint).unwrap();
        sub.set_subscribe(b"Q.XNAS.").unwrap();
        let mut got = 0;
        let deadline = Instant::now() + Duration::from_secs(5);
        while got < 20 && Instant::now() < deadline {
            if let Ok(frame) = sub.recv_bytes(0) {
                let msg = MessageRef::decode(&frame).expect("valid frame");
                assert_eq!(msg.kind(), Kind::Quote);
                assert_eq!(msg.header().publisher_id, 1 + shard as u32);
                got += 1;
            }
        }
        assert_eq!(got, 20, "shard {shard} at {endpoint} published quotes");
    }
    let status = child.wait_exit(Duration::from_secs(10), "feed did not exit in time");
    assert!(status.success(), "{status}");
    let rest = remaining_lines(&lines);
    let summary = rest.join("\n");
    assert!(summary.contains("shard"), "{summary}");
    assert!(summary.contains("total: "), "{summary}");
    assert_eq!(
        rest.iter()
            .filter(|l| l.contains("tcp://127.0.0.1:"))
            .count(),
        2,
        "one summary row per shard: {summary}"
    );
}

#[test]
fn pathological_pattern_sends_every_topic_once_then_trickles() {
    let (mut child, lines) = spawn_feed(&[
        "--pattern",
        "pathological",
        "--symbols",
        "50",
        "--wait-for-subscribers",
        "1",
        "--heartbeat",
        "0ms",
    ]);
    let endpoints = read_endpoints(&lines, 1);
    let ctx = zmq::Context::new();
    let sub = ctx.socket(zmq::SUB).unwrap();
    sub.set_linger(0).unwrap();
    sub.set_rcvtimeo(100).unwrap();
    sub.connect(&endpoints[0]).unwrap();
    sub.set_subscribe(b"").unwrap();
    let mut topics = std::collections::HashSet::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    while topics.len() < 100 && Instant::now() < deadline {
        if let Ok(frame) = sub.recv_bytes(0) {
            let msg = MessageRef::decode(&frame).unwrap();
            assert!(
                topics.insert(msg.topic().to_string()),
                "{} twice",
                msg.topic()
            );
        }
    }
    assert_eq!(topics.len(), 100, "a quote and a trade topic per symbol");
    // Then one message per second, not a flood.
    let mut later = 0;
    let until = Instant::now() + Duration::from_millis(1_500);
    while Instant::now() < until {
        if sub.recv_bytes(0).is_ok() {
            later += 1;
        }
    }
    assert!((1..=3).contains(&later), "{later}");
    // Ctrl-C equivalent: SIGTERM stops it cleanly with a summary.
    signal(child.0.id(), "TERM");
    let status = child.wait_exit(Duration::from_secs(5), "feed did not exit in time");
    assert!(status.success(), "{status}");
    let summary = remaining_lines(&lines);
    assert!(
        summary.iter().any(|l| l.starts_with("total: ")),
        "{summary:?}"
    );
}

#[test]
fn bad_arguments_fail_with_a_message() {
    let output = Command::new(TICKBOX)
        .args(["feed", "--rate", "fast"])
        .output()
        .unwrap();
    assert!(!output.status.success());
    assert!(String::from_utf8_lossy(&output.stderr).contains("invalid rate"));
    let output = Command::new(TICKBOX)
        .args([
            "feed",
            "--bind",
            "tcp://127.0.0.1:*",
            "--cores",
            "0,1",
            "--duration",
            "1s",
        ])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&output.stderr).contains("one core per shard"));
}

/// `--no-drop`, the old spelling of `--back-pressure block`, still works and says what to write instead.
#[test]
fn the_old_no_drop_flag_still_reads_and_warns() {
    let out = Command::new(TICKBOX)
        .args(["feed", "--bind", "tcp://127.0.0.1:*", "--no-drop"])
        .args(["--rate", "max", "--max-messages", "10"])
        .args(["--drain-timeout", "1s", "--json"])
        .output()
        .expect("run tickbox feed");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("--no-drop is deprecated: write --back-pressure block"),
        "{stderr}"
    );
    let summary: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON summary");
    assert_eq!(summary["sent"], 10, "{summary}");
    let out = Command::new(TICKBOX)
        .args(["feed", "--bind", "tcp://127.0.0.1:*", "--no-drop"])
        .args(["--back-pressure", "drop"])
        .output()
        .expect("run tickbox feed");
    assert!(
        !out.status.success(),
        "the old and the new spelling together are refused"
    );
}

/// `--sndhwm`, the old spelling of `--send-hwm`, still works and says what to write instead; both together are
/// refused.
#[test]
fn the_old_sndhwm_flag_still_reads_and_warns() {
    let out = Command::new(TICKBOX)
        .args(["feed", "--bind", "tcp://127.0.0.1:*", "--sndhwm", "500"])
        .args(["--rate", "max", "--max-messages", "10", "--json"])
        .output()
        .expect("run tickbox feed");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("--sndhwm is deprecated: write --send-hwm"),
        "{stderr}"
    );
    let out = Command::new(TICKBOX)
        .args(["feed", "--bind", "tcp://127.0.0.1:*"])
        .args(["--sndhwm", "500", "--send-hwm", "500"])
        .output()
        .expect("run tickbox feed");
    assert!(
        !out.status.success(),
        "the two spellings together are refused"
    );
}
