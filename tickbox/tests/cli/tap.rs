//! `tickbox tap` as a real process against an in-process LVC's tap.

use crate::common;

use std::process::Command;
use std::time::{Duration, Instant};

use common::Background;

use tickbox_lvc::{spawn, LvcConfig};
use tickbox_wire::{encode_to_vec, Header, Kind, Payload, Quote, Trade};

fn frame(kind: Kind, topic: &str, seq: u64) -> Vec<u8> {
    let payload = match kind {
        Kind::Quote => Payload::Quote(Quote::default()),
        _ => Payload::Trade(Trade {
            size: 7,
            price: 101 * tickbox_wire::PRICE_SCALE,
            ..Trade::default()
        }),
    };
    encode_to_vec(topic, &Header::live(kind, 1, seq, seq), &payload).unwrap()
}

/// Runs `tickbox tap` with `args` on the tap of a proxy fed quotes and trades for the whole run, with one
/// subscriber joining midway; returns stdout.
fn tap_output(args: &[&str]) -> String {
    let ctx = zmq::Context::new();
    let publisher = ctx.socket(zmq::XPUB).unwrap();
    publisher.set_linger(0).unwrap();
    let pub_ep = tickbox_zmqx::bind_resolved(&publisher, "tcp://127.0.0.1:*").unwrap();
    let lvc = spawn(
        &tickbox_auth::Gate::open(&ctx),
        LvcConfig {
            upstream: vec![pub_ep],
            bind: "tcp://127.0.0.1:*".into(),
            tap: Some("tcp://127.0.0.1:*".into()),
            stats_interval: tickbox_units::HumanDuration(std::time::Duration::ZERO),
            ..LvcConfig::default()
        },
    )
    .unwrap();
    publisher.set_rcvtimeo(15_000).unwrap();
    assert_eq!(publisher.recv_bytes(0).unwrap(), b"\x01");
    let tap_ep = lvc.endpoints().tap.clone().unwrap();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_tickbox"));
    cmd.arg("tap")
        .args(["--connect", &tap_ep, "--duration", "2500ms"])
        .args(args);
    let child = Background::spawn(cmd);
    let started = Instant::now();
    let mut seq = 0;
    let mut joiner = None;
    while started.elapsed() < Duration::from_millis(2200) {
        seq += 1;
        publisher
            .send(frame(Kind::Quote, "Q.XNAS.AAPL", seq), 0)
            .unwrap();
        seq += 1;
        publisher
            .send(frame(Kind::Trade, "T.XNAS.AAPL", seq), 0)
            .unwrap();
        if joiner.is_none() && started.elapsed() > Duration::from_millis(1200) {
            let sub = ctx.socket(zmq::SUB).unwrap();
            sub.set_linger(0).unwrap();
            sub.connect(&lvc.endpoints().downstream).unwrap();
            sub.set_subscribe(b"T.").unwrap();
            joiner = Some(sub);
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let out = child.finish(Duration::from_secs(15));
    assert!(out.status.success(), "{:?}", out.status);
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn tap_shows_filtered_decoded_messages_and_subscription_events() {
    let out = tap_output(&["--kinds", "trade", "--sample", "2"]);
    let trades = out
        .lines()
        .filter(|l| l.starts_with("T.XNAS.AAPL") && l.contains("trade"))
        .count();
    assert!(trades > 10, "{out}");
    assert!(out.contains("7 @ 101.0000"), "{out}");
    assert!(
        !out.lines().any(|l| l.starts_with("Q.")),
        "quotes must be filtered out:\n{out}"
    );
    assert!(
        out.lines().any(|l| l == "SUB   \"T.\""),
        "subscription event missing:\n{out}"
    );
    // The publisher's sequences are gap-free and nothing was lost on the way.
    assert!(!out.contains("GAP"), "{out}");
}

#[test]
fn tap_reports_its_own_loss_from_sequence_gaps() {
    let ctx = zmq::Context::new();
    let publisher = ctx.socket(zmq::XPUB).unwrap();
    publisher.set_linger(100).unwrap();
    let pub_ep = tickbox_zmqx::bind_resolved(&publisher, "tcp://127.0.0.1:*").unwrap();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_tickbox"));
    cmd.args(["tap", "--connect", &pub_ep, "--duration", "1500ms"]);
    let mut child = Background::spawn(cmd);
    // Send only once the inspector has subscribed, so nothing is lost to joining late.
    assert_eq!(
        child.await_subscription(&publisher, Duration::from_secs(15)),
        b"\x01"
    );
    for seq in [1, 2, 3, 5, 6, 10, 11] {
        publisher
            .send(frame(Kind::Quote, "Q.XNAS.AAPL", seq), 0)
            .unwrap();
    }
    let out = child.finish(Duration::from_secs(15));
    assert!(out.status.success(), "{:?}", out.status);
    let out = String::from_utf8(out.stdout).unwrap();
    let gaps: Vec<&str> = out.lines().filter(|l| l.starts_with("GAP")).collect();
    assert_eq!(
        gaps,
        [
            "GAP   pub 1 seq 4..=4 (1 missed)",
            "GAP   pub 1 seq 7..=9 (3 missed)"
        ],
        "{out}"
    );
    assert_eq!(
        out.lines().filter(|l| l.starts_with("Q.XNAS.AAPL")).count(),
        7
    );
}

#[test]
fn tap_top_prints_rates_per_prefix() {
    let out = tap_output(&["--top"]);
    assert!(out.contains("prefix"), "{out}");
    assert!(out.lines().any(|l| l.starts_with("Q.XNAS")), "{out}");
    assert!(out.lines().any(|l| l.starts_with("T.XNAS")), "{out}");
    assert!(out.lines().any(|l| l.starts_with("missed 0 ")), "{out}");
}

#[test]
fn tap_rejects_unknown_kinds() {
    let out = Command::new(env!("CARGO_BIN_EXE_tickbox"))
        .args(["tap", "--connect", "tcp://127.0.0.1:1", "--kinds", "bogus"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("bogus"));
}
