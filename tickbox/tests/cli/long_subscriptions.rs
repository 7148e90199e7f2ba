//! A subscriber that sends a 32 KiB subscription prefix and then unsubscribes cannot crash or stall a publisher:
//! `tickbox feed` and `tickbox replay` bound what subscribers may send (`ZMQ_MAXMSGSIZE` from
//! `max_subscription_bytes`), drop the attacker, and go on serving everyone else. Real processes over `ipc://`.

use crate::common;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{KillOnDrop, TempDir, TICKBOX};
use tickbox_journal::{Writer, WriterOptions};
use tickbox_wire::{encode_to_vec, Header, Kind, MessageRef, Quote};

/// The reported attack: subscribe to a 32 KiB prefix, give it time to reach the publisher, unsubscribe. Returns
/// whether the publisher dropped the attacker's connection (seen on the attacker's socket monitor), which is what
/// the bound does; without it the prefix would be taken into the publisher's trie.
fn long_prefix_attack(endpoint: &str) -> bool {
    let endpoint = endpoint.to_owned();
    // libzmq's own subscription trie in the attacker's SUB recurses per prefix byte too: give it a large stack.
    std::thread::Builder::new()
        .stack_size(256 << 20)
        .spawn(move || {
            let ctx = zmq::Context::new();
            let sub = ctx.socket(zmq::SUB).unwrap();
            sub.set_linger(0).unwrap();
            sub.monitor(
                "inproc://attacker-monitor",
                zmq::SocketEvent::DISCONNECTED as i32,
            )
            .unwrap();
            let monitor = ctx.socket(zmq::PAIR).unwrap();
            monitor.set_linger(0).unwrap();
            monitor.connect("inproc://attacker-monitor").unwrap();
            sub.connect(&endpoint).unwrap();
            let prefix = vec![b'Q'; 32 * 1024];
            sub.set_subscribe(&prefix).unwrap();
            let dropped = monitor.poll(zmq::POLLIN, 5_000).unwrap() > 0;
            sub.set_unsubscribe(&prefix).unwrap();
            let _ = sub.poll(zmq::POLLIN, 200);
            dropped
        })
        .unwrap()
        .join()
        .unwrap()
}

/// Frames a plain subscriber to everything receives from `endpoint` within `limit`, stopping at `want`.
fn frames_received(endpoint: &str, want: usize, limit: Duration) -> usize {
    let ctx = zmq::Context::new();
    let sub = ctx.socket(zmq::SUB).unwrap();
    sub.set_linger(0).unwrap();
    sub.set_subscribe(b"").unwrap();
    sub.connect(endpoint).unwrap();
    let deadline = Instant::now() + limit;
    let mut got = 0;
    while got < want && Instant::now() < deadline {
        if sub.poll(zmq::POLLIN, 50).unwrap() > 0 {
            let frame = sub.recv_bytes(0).unwrap();
            assert!(MessageRef::decode(&frame).is_ok(), "undecodable frame");
            got += 1;
        }
    }
    got
}

fn spawn(args: &[&str]) -> KillOnDrop {
    KillOnDrop(
        Command::new(TICKBOX)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn tickbox"),
    )
}

fn wait_for_socket(path: &Path) {
    assert!(
        common::eventually(Duration::from_secs(10), Duration::from_millis(20), || path
            .exists()),
        "{} never appeared",
        path.display()
    );
}

#[test]
fn a_feed_survives_a_32_kib_subscription_and_keeps_serving() {
    let dir = TempDir::new("cli-long-sub-feed");
    let sock = dir.0.join("feed.sock");
    let ep = format!("ipc://{}", sock.display());
    let mut feed = spawn(&["feed", "--bind", &ep, "--rate", "2k", "--duration", "30s"]);
    wait_for_socket(&sock);
    assert!(
        long_prefix_attack(&ep),
        "the feed took a 32 KiB subscription instead of dropping the peer"
    );
    assert!(
        feed.0.try_wait().unwrap().is_none(),
        "the feed died after the long subscription"
    );
    let got = frames_received(&ep, 200, Duration::from_secs(10));
    assert_eq!(
        got, 200,
        "a normal subscriber got only {got} frames after the attack"
    );
    assert!(feed.0.try_wait().unwrap().is_none(), "the feed died");
}

#[test]
fn a_replay_survives_a_32_kib_subscription_and_keeps_serving() {
    let dir = TempDir::new("cli-long-sub-replay");
    let journal = dir.0.join("day.tbj");
    // 3,000 quotes 10 ms apart: 30 s of capture time, so a 1x replay is still running when the test is done.
    let t0 = 1_767_364_200_000_000_000u64;
    let mut w = Writer::open(&journal, &WriterOptions::ring(4 << 20)).unwrap();
    for seq in 1..=3_000u64 {
        let t = t0 + seq * 10_000_000;
        let frame = encode_to_vec(
            "Q.XNAS.LONG",
            &Header::live(Kind::Quote, 7, seq, t),
            &Quote::default().into(),
        )
        .unwrap();
        w.append(t, &frame).unwrap();
    }
    drop(w);
    let sock = dir.0.join("replay.sock");
    let ep = format!("ipc://{}", sock.display());
    let mut replay = spawn(&[
        "replay",
        "--journal",
        journal.to_str().unwrap(),
        "--bind",
        &ep,
        "--speed",
        "1",
        "--wait-timeout",
        "20s",
    ]);
    wait_for_socket(&sock);
    assert!(
        long_prefix_attack(&ep),
        "the replay took a 32 KiB subscription instead of dropping the peer"
    );
    assert!(
        replay.0.try_wait().unwrap().is_none(),
        "the replay died after the long subscription"
    );
    let got = frames_received(&ep, 50, Duration::from_secs(10));
    assert_eq!(
        got, 50,
        "a normal subscriber got only {got} frames after the attack"
    );
    assert!(replay.0.try_wait().unwrap().is_none(), "the replay died");
}
