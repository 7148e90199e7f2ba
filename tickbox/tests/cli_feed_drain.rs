//! The end of a `--no-drop` feed: it waits for its subscribers to leave before it closes, so a subscriber that is
//! behind when the feed has sent its last message still gets every message; one that stays is reported, and one
//! whose queue could not be flushed makes the feed exit 1 saying messages were dropped.

mod common;

use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use common::{endpoint_in, forward_lines, KillOnDrop, TICKBOX};
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
    let mut child = KillOnDrop(
        Command::new(TICKBOX)
            .args([
                "feed",
                "--bind",
                "tcp://127.0.0.1:*",
                "--no-drop",
                "--rate",
                "max",
            ])
            .args([
                "--wait-for-subscribers",
                "1",
                "--max-messages",
                &messages.to_string(),
            ])
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn tickbox feed"),
    );
    let out = forward_lines(child.0.stdout.take().unwrap());
    let err = forward_lines(child.0.stderr.take().unwrap());
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
    let (mut feed, ep, out, err) = spawn_feed(MESSAGES, &["--sndhwm", "100000"]);
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
        spawn_feed(200_000, &["--sndhwm", "1000000", "--drain-timeout", "1s"]);
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
    assert!(
        rest(&out).contains("1 subscriber(s) still connected"),
        "the summary says who stayed"
    );
}
