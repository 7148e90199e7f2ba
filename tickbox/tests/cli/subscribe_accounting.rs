//! `tickbox subscribe` as a real process: what it refuses at start (a missing NIC), what it says when it got
//! nothing, and its `--json` accounting of duplicates, restarts and forged sequences.

use crate::common;

use std::time::Duration;

use common::Captured;

use tickbox_wire::{encode_to_vec, now_ns, Header, Heartbeat, Kind, Payload, Quote};

/// A raw wire-format publisher on an XPUB that never drops.
struct Publisher {
    socket: zmq::Socket,
    endpoint: String,
}

impl Publisher {
    fn new(ctx: &zmq::Context) -> Self {
        let tickbox_testkit::FakePublisher { socket, endpoint } =
            tickbox_testkit::FakePublisher::bind(ctx);
        Publisher { socket, endpoint }
    }

    fn await_subscription(&self) {
        self.socket.set_rcvtimeo(10_000).unwrap();
        self.socket
            .recv_bytes(0)
            .expect("subscriber connects within 10 s");
    }

    fn send(&self, topic: &str, header: Header, payload: Payload) {
        self.socket
            .send(encode_to_vec(topic, &header, &payload).unwrap(), 0)
            .unwrap();
    }

    fn quote(&self, session: u64, seq: u64) {
        let h = Header::live(Kind::Quote, 4, seq, now_ns()).with_session(session);
        self.send("Q.XNAS.AAPL", h, Quote::default().into());
    }
}

fn json(stdout: &str) -> serde_json::Value {
    let line = stdout
        .lines()
        .find(|l| l.starts_with('{'))
        .unwrap_or_else(|| panic!("no JSON object on stdout:\n{stdout}"));
    serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"))
}

#[test]
fn a_missing_nic_is_an_error_at_start_naming_the_interface() {
    let (status, stdout, stderr) = Captured::spawn(&[
        "subscribe",
        "--connect",
        "tcp://127.0.0.1:1",
        "--nic",
        "nosuch0",
        "--duration",
        "10s",
    ])
    .wait(Duration::from_secs(10));
    assert_eq!(status.code(), Some(1), "{stdout}\n{stderr}");
    let errors: Vec<&str> = stderr.lines().filter(|l| l.starts_with("error:")).collect();
    assert_eq!(errors.len(), 1, "{stderr}");
    assert!(errors[0].contains("nosuch0"), "{stderr}");
    assert!(errors[0].contains("no such network interface"), "{stderr}");
    // Refused before any socket work: no summary, no "running" line.
    assert!(!stderr.contains("subscriber running"), "{stderr}");
    assert!(stdout.is_empty(), "{stdout}");
}

#[test]
fn a_subscriber_that_received_nothing_exits_non_zero_and_says_so() {
    let ctx = zmq::Context::new();
    let silent = Publisher::new(&ctx);
    let (status, stdout, stderr) = Captured::spawn(&[
        "subscribe",
        "--connect",
        &silent.endpoint,
        "--duration",
        "300ms",
        "--json",
    ])
    .wait(Duration::from_secs(10));
    assert_eq!(status.code(), Some(1), "{stdout}\n{stderr}");
    assert!(stderr.contains("received nothing"), "{stderr}");
    assert_eq!(json(&stdout)["received"], 0);
}

#[test]
fn json_counts_duplicates_restarts_and_forged_jumps_and_gap_policy_die_keeps_running() {
    let ctx = zmq::Context::new();
    let p = Publisher::new(&ctx);
    let proc = Captured::spawn(&[
        "subscribe",
        "--connect",
        &p.endpoint,
        "--gap-policy",
        "die",
        "--workers",
        "3",
        "--duration",
        "1500ms",
        "--json",
    ]);
    p.await_subscription();
    for seq in 1..=10 {
        p.quote(1_000, seq);
    }
    // The same frame twice: a duplicate, not a restart followed by a false gap.
    p.quote(1_000, 10);
    // A forged heartbeat naming sequence u64::MAX - 1: an anomaly, not 1.8e19 missing messages.
    let forged = Header::live(Kind::Heartbeat, 4, u64::MAX - 1, now_ns()).with_session(1_000);
    p.send("H.4", forged, Heartbeat::default().into());
    for seq in 11..=20 {
        p.quote(1_000, seq);
    }
    // The publisher restarts (new session) with a sequence above the old one's last: a restart, not a gap.
    for seq in 5_000..=5_009 {
        p.quote(2_000, seq);
    }
    let (status, stdout, stderr) = proc.wait(Duration::from_secs(15));
    assert_eq!(
        status.code(),
        Some(0),
        "gap_policy die must not fire:\n{stdout}\n{stderr}"
    );
    let v = json(&stdout);
    for (key, want) in [
        ("received", 32u64),
        ("data_received", 30),
        ("missing", 0),
        ("gaps", 0),
        ("duplicates", 1),
        ("restarts", 1),
        ("anomalies", 1),
        ("recorded_gaps", 0),
        ("reordered", 0),
        ("unprocessed", 0),
        ("processed", 32),
    ] {
        assert_eq!(v[key].as_u64(), Some(want), "{key} in {v}");
    }
    assert_eq!(v["dispatch"], "by_topic");
    assert_eq!(v["snail_mode"], "strict");
    let publishers = v["publishers"].as_array().unwrap();
    assert_eq!(publishers.len(), 1, "{v}");
    assert_eq!(publishers[0]["publisher"], 4);
    assert_eq!(publishers[0]["session"], 2_000);
    assert_eq!(publishers[0]["last_sequence"], 5_009);
    assert!(publishers[0]["clock_offset_ns"].is_i64(), "{v}");
    // One symbol and one heartbeat topic: with by_topic, per-worker counts say who got them.
    let workers = v["workers"].as_array().unwrap();
    assert_eq!(workers.len(), 3);
    let processed: u64 = workers
        .iter()
        .map(|w| w["processed"].as_u64().unwrap())
        .sum();
    let forwarded: u64 = workers
        .iter()
        .map(|w| w["forwarded"].as_u64().unwrap())
        .sum();
    assert_eq!((processed, forwarded), (32, 32));
    // All 31 AAPL quotes on one worker (the heartbeat may or may not share it).
    let most = workers
        .iter()
        .map(|w| w["processed"].as_u64().unwrap())
        .max()
        .unwrap();
    assert!(most >= 31, "AAPL quotes spread over workers: {v}");
}
