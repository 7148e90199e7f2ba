//! The end of a `--no-drop` feed: it waits for its subscribers to leave before it closes, so a subscriber that is
//! behind when the feed has sent its last message still gets every message; one that stays is reported, and one
//! whose queue could not be flushed makes the feed exit 1 saying how many messages were dropped (`undelivered`);
//! so does an interrupt while a subscriber is not reading.

use crate::common;

use std::process::Command;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use common::{endpoint_in, spawn_piped, KillOnDrop, TICKBOX};
use tickbox_wire::{Kind, MessageRef};

/// `tickbox feed`, no-drop, flat out, starting once one subscriber is there and stopping after `messages`, with
/// `args` besides; its stdout and stderr as line channels, and the shard's endpoint from its start-up line.
fn spawn_feed(
    messages: u64,
    args: &[&str],
) -> (
    KillOnDrop,
    String,
    mpsc::Receiver<String>,
    mpsc::Receiver<String>,
) {
    let (child, out, err) = spawn_piped(
        Command::new(TICKBOX)
            .args([
                "feed",
                "--bind",
                "tcp://127.0.0.1:*",
                "--back-pressure",
                "block",
                "--rate",
                "max",
            ])
            .args([
                "--wait-for-subscribers",
                "1",
                "--max-messages",
                &messages.to_string(),
            ])
            .args(args),
    );
    let line = out
        .recv_timeout(Duration::from_secs(10))
        .expect("the feed prints its endpoint");
    let ep = endpoint_in(&line).unwrap_or_else(|| panic!("no endpoint in {line:?}"));
    (child, ep, out, err)
}

/// A SUB on everything with small buffers, so what the feed has sent waits in its own queues.
fn small_sub(ctx: &zmq::Context, ep: &str) -> zmq::Socket {
    let sub = ctx.socket(zmq::SUB).unwrap();
    sub.set_linger(0).unwrap();
    sub.set_rcvhwm(20).unwrap();
    sub.set_rcvbuf(4096).unwrap();
    sub.set_rcvtimeo(100).unwrap();
    sub.connect(ep).unwrap();
    sub.set_subscribe(b"").unwrap();
    sub
}

/// The data messages' sequences in `frame`, or none for a heartbeat.
fn data_sequence(frame: &[u8]) -> Option<u64> {
    let m = MessageRef::decode(frame).expect("a tickbox frame");
    matches!(m.kind(), Kind::Quote | Kind::Trade).then_some(m.header().sequence)
}

fn rest(lines: &mpsc::Receiver<String>) -> String {
    let mut all = String::new();
    while let Ok(l) = lines.recv_timeout(Duration::from_millis(200)) {
        all.push_str(&l);
        all.push('\n');
    }
    all
}

#[test]
fn a_reader_that_is_behind_at_the_end_still_gets_every_message() {
    const MESSAGES: u64 = 100_000;
    let (mut feed, ep, out, err) = spawn_feed(MESSAGES, &["--send-hwm", "100000"]);
    let ctx = zmq::Context::new();
    let sub = small_sub(&ctx, &ep);
    let deadline = Instant::now() + Duration::from_secs(15);
    let mut seqs = Vec::new();
    let mut paused = false;
    while (seqs.len() as u64) < MESSAGES && Instant::now() < deadline {
        let Ok(frame) = sub.recv_bytes(0) else {
            continue;
        };
        seqs.extend(data_sequence(&frame));
        if !paused && seqs.len() as u64 == MESSAGES / 2 {
            // Behind by more than the kernel's socket buffers hold (50,000 messages, about 5 MB), and by less than
            // the feed's queue: the feed sends the rest, reaches its limit and ends meanwhile. Without the drain
            // it closed 300 ms later (closing heartbeats, 100 ms linger) and what libzmq still held was gone.
            paused = true;
            std::thread::sleep(Duration::from_millis(1_500));
        }
    }
    assert_eq!(seqs.len() as u64, MESSAGES, "every message arrived");
    assert!(
        seqs.windows(2).all(|w| w[1] > w[0]),
        "in publisher order, no repeats"
    );
    // Leaving (the SUB's close unsubscribes) is what the feed waits for.
    drop(sub);
    let status = feed.wait_exit(
        Duration::from_secs(10),
        "the feed did not end once its subscriber left",
    );
    assert_eq!(status.code(), Some(0), "stderr: {}", rest(&err));
    let summary = rest(&out);
    assert!(!summary.contains("WARNING"), "{summary}");
}

#[test]
fn a_subscriber_that_stays_is_reported_and_the_wait_is_bounded() {
    let started = Instant::now();
    let (mut feed, ep, out, err) = spawn_feed(2000, &["--drain-timeout", "1s"]);
    let ctx = zmq::Context::new();
    let sub = small_sub(&ctx, &ep);
    // Reads everything and keeps reading, but never leaves (a long-lived reader such as an LVC).
    let mut data = 0u64;
    let status = loop {
        if let Ok(frame) = sub.recv_bytes(0) {
            data += u64::from(data_sequence(&frame).is_some());
        }
        if let Some(status) = feed.0.try_wait().unwrap() {
            break status;
        }
        assert!(
            started.elapsed() < Duration::from_secs(15),
            "the feed waited past its drain timeout"
        );
    };
    assert_eq!(data, 2000);
    // It read everything: nothing was queued at the close, so nothing was dropped.
    assert_eq!(status.code(), Some(0), "stderr: {}", rest(&err));
    let summary = rest(&out);
    assert!(
        summary.contains("1 subscriber(s) still connected"),
        "the summary says who stayed: {summary}"
    );
}

#[test]
fn a_queue_left_unread_at_the_close_is_reported_as_dropped() {
    // The whole run fits in the feed's queue, so it ends by its limit, not blocked on a full pipe.
    let (mut feed, ep, out, err) =
        spawn_feed(200_000, &["--send-hwm", "1000000", "--drain-timeout", "1s"]);
    let ctx = zmq::Context::new();
    // Subscribes and never reads: what does not fit in the kernel's buffers stays in the feed's queue.
    let sub = small_sub(&ctx, &ep);
    let status = feed.wait_exit(
        Duration::from_secs(15),
        "the feed did not end within its drain timeouts",
    );
    drop(sub);
    let stderr = rest(&err);
    assert_eq!(status.code(), Some(1), "stderr: {stderr}");
    assert!(stderr.contains("were dropped at the close"), "{stderr}");
    let summary = rest(&out);
    assert!(
        summary.contains("1 subscriber(s) still connected"),
        "the summary says who stayed: {summary}"
    );
    assert!(
        summary.contains("undelivered: ")
            && summary.contains("still queued for a subscriber when the shards closed"),
        "the summary counts what was dropped: {summary}"
    );
}

/// `tickbox [global] feed --json` with `args`: the child, the endpoint (from its start-up line on stderr), and its stdout
/// and stderr as line channels.
fn spawn_feed_json(
    global: &[&str],
    args: &[&str],
) -> (
    KillOnDrop,
    String,
    mpsc::Receiver<String>,
    mpsc::Receiver<String>,
) {
    let (child, out, err) = spawn_piped(
        Command::new(TICKBOX)
            .arg("-q")
            .args(global)
            .args(["feed", "--bind", "tcp://127.0.0.1:*", "--json"])
            .args(["--wait-for-subscribers", "1"])
            .args(args),
    );
    let line = err
        .recv_timeout(Duration::from_secs(10))
        .expect("the feed prints its endpoint");
    let ep = endpoint_in(&line).unwrap_or_else(|| panic!("no endpoint in {line:?}"));
    (child, ep, out, err)
}

/// Ctrl-C (or SIGTERM) while a subscriber never reads: what libzmq still holds for it when the shard closes is
/// counted as `undelivered` in the summary, said on stderr, and the feed exits 1.
#[test]
fn an_interrupted_feed_counts_what_it_left_undelivered() {
    // The feed's kernel send buffer kept small (as the subscriber's receive buffer is), so what the subscriber
    // does not read stays in libzmq's queue, which is what `undelivered` can see: with the kernel's default
    // (auto-tuned to megabytes on loopback) a slow start could leave the whole run in kernel buffers, which count
    // as delivered (docs/book/src/recorder-replay.md).
    let dir = common::TempDir::new("feed-undelivered");
    let config = dir.path().join("tickbox.toml");
    std::fs::write(&config, "[context.sockets.feed]\nsndbuf = 4096\n").unwrap();
    let global = ["--config", config.to_str().unwrap()];
    for signal in ["INT", "TERM"] {
        let (mut feed, ep, out, err) = spawn_feed_json(&global, &["--rate", "max"]);
        let ctx = zmq::Context::new();
        let sub = small_sub(&ctx, &ep);
        // Data is flowing (seen without reading it); at full speed the kernel's buffers and the feed's queue for
        // this subscriber are full within milliseconds.
        assert_eq!(
            sub.poll(zmq::POLLIN, 10_000).unwrap(),
            1,
            "{signal}: no data"
        );
        std::thread::sleep(Duration::from_millis(300));
        let interrupted = Instant::now();
        common::signal(feed.0.id(), signal);
        let status = feed.wait_exit(Duration::from_secs(5), "the interrupt did not end the feed");
        let took = interrupted.elapsed();
        drop(sub);
        let stderr = rest(&err);
        let summary = out.recv_timeout(Duration::from_secs(2)).expect("summary");
        assert_eq!(status.code(), Some(1), "{signal}: {stderr} {summary}");
        assert!(took < Duration::from_secs(3), "{signal}: took {took:?}");
        let summary: serde_json::Value = serde_json::from_str(&summary).unwrap();
        let sent = summary["sent"].as_u64().expect("sent");
        let undelivered = summary["undelivered"].as_u64().expect("undelivered");
        eprintln!("{signal}: sent {sent}, undelivered {undelivered}, took {took:?}");
        assert!(
            undelivered > 0 && undelivered <= sent,
            "{signal}: {summary}"
        );
        assert_eq!(
            summary["shards"][0]["undelivered"], undelivered,
            "{summary}"
        );
        assert!(
            stderr.contains(&format!(
                "{undelivered} message(s) still queued for a subscriber were not delivered"
            )),
            "{signal}: {stderr}"
        );
    }
}

/// A run whose subscriber reads everything leaves nothing queued: `undelivered` 0, exit 0.
#[test]
fn a_healthy_run_reports_nothing_undelivered() {
    const MESSAGES: u64 = 20_000;
    let (mut feed, ep, out, err) = spawn_feed_json(
        &[],
        &[
            "--back-pressure",
            "block",
            "--rate",
            "max",
            "--max-messages",
            &MESSAGES.to_string(),
            "--drain-timeout",
            "2s",
        ],
    );
    let ctx = zmq::Context::new();
    let sub = small_sub(&ctx, &ep);
    let deadline = Instant::now() + Duration::from_secs(15);
    let mut data = 0u64;
    while data < MESSAGES && Instant::now() < deadline {
        if let Ok(frame) = sub.recv_bytes(0) {
            data += u64::from(data_sequence(&frame).is_some());
        }
    }
    assert_eq!(data, MESSAGES);
    drop(sub);
    let status = feed.wait_exit(Duration::from_secs(10), "the feed did not end");
    assert_eq!(status.code(), Some(0), "stderr: {}", rest(&err));
    let summary: serde_json::Value =
        serde_json::from_str(&out.recv_timeout(Duration::from_secs(2)).expect("summary")).unwrap();
    assert_eq!(summary["sent"], MESSAGES, "{summary}");
    assert_eq!(summary["undelivered"], 0, "{summary}");
}
