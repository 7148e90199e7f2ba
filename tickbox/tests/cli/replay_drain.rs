//! The end of a replay loses nothing silently. `--speed max` finishes sending long before a slower subscriber has
//! read everything, so the replay waits (up to `--drain-timeout`) for what is still queued to reach the network; a
//! subscriber that stops reading makes the wait run out, and the replay then exits 1 saying records were dropped
//! instead of reporting a clean run. A subscriber that leaves once it has read everything ends the wait at once.

use crate::common;

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use common::{output_within, TempDir, TICKBOX};
use tickbox_journal::{Writer, WriterOptions};
use tickbox_wire::{encode_to_vec, Header, Kind, MessageRef, Quote};

const T0: u64 = 1_767_364_200_000_000_000;
/// Far more than a Unix socket's kernel buffers hold (about 100 bytes a record), less than the replay's send HWM
/// (100,000 by default), so the run itself completes and the rest waits in the replay's pipe.
const N: u64 = 60_000;

fn journal(path: &Path) {
    let mut w = Writer::open(path, &WriterOptions::archive(64 << 20)).unwrap();
    for seq in 1..=N {
        let sent = T0 + seq * 1_000;
        let header = Header::live(Kind::Quote, 1, seq, sent).with_session(T0);
        let frame = encode_to_vec(
            &format!("Q.XNAS.S{}", seq % 13),
            &header,
            &Quote::default().into(),
        )
        .unwrap();
        w.append(sent + 1_000, &frame).unwrap();
    }
    w.close().unwrap();
}

fn replay(journal: &Path, endpoint: &str, drain: &str) -> std::process::Output {
    let mut cmd = Command::new(TICKBOX);
    cmd.args([
        "-q",
        "replay",
        "--journal",
        journal.to_str().unwrap(),
        "--bind",
        endpoint,
        "--speed",
        "max",
        "--batch",
        "1",
        "--drain-timeout",
        drain,
        "--json",
    ]);
    output_within(cmd, Duration::from_secs(20))
}

/// A SUB on `endpoint` that takes everything; a `stingy` one holds as little as libzmq allows (one message, a
/// small kernel buffer), so what it does not read stays queued on the replay's side.
fn subscriber(ctx: &zmq::Context, endpoint: &str, stingy: bool) -> zmq::Socket {
    let sub = ctx.socket(zmq::SUB).unwrap();
    sub.set_linger(0).unwrap();
    if stingy {
        sub.set_rcvhwm(1).unwrap();
        sub.set_rcvbuf(4096).unwrap();
    }
    sub.set_subscribe(b"").unwrap();
    sub.connect(endpoint).unwrap();
    sub
}

#[test]
fn a_subscriber_that_stops_reading_makes_the_replay_say_records_were_dropped() {
    let dir = TempDir::new("replay-drain-stuck");
    let path = dir.path().join("day.journal");
    journal(&path);
    let endpoint = format!("ipc://{}/replay.sock", dir.path().display());
    let ctx = zmq::Context::new();
    // Connected before the replay binds (ipc reconnects), and never read.
    let _sub = subscriber(&ctx, &endpoint, true);
    let started = Instant::now();
    let out = replay(&path, &endpoint, "500ms");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(
            "were still queued for a subscriber after --drain-timeout 500ms and were dropped"
        ),
        "{stderr}"
    );
    assert!(
        stderr.contains("1 subscription(s) still open after --drain-timeout 500ms"),
        "{stderr}"
    );
    // The summary still printed, with what was dropped counted, and the wait was bounded by the drain timeout.
    let summary: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON summary");
    assert_eq!(summary["sent"], N, "{summary}");
    let undelivered = summary["undelivered"].as_u64().expect("undelivered");
    assert!(undelivered > 0 && undelivered <= N, "{summary}");
    assert!(
        stderr.contains(&format!("{undelivered} record(s) were still queued")),
        "{stderr}"
    );
    assert!(started.elapsed() < Duration::from_secs(15));
}

#[test]
fn a_subscriber_that_reads_everything_gets_every_record_and_the_replay_exits_0() {
    let dir = TempDir::new("replay-drain-reads");
    let path = dir.path().join("day.journal");
    journal(&path);
    let endpoint = format!("ipc://{}/replay.sock", dir.path().display());
    let ctx = zmq::Context::new();
    let sub = subscriber(&ctx, &endpoint, false);
    // Reads one message per call, slowly enough that the replay has finished sending long before the last record
    // is read: the wait at the end is what gets them all through.
    let reader = std::thread::spawn(move || {
        let deadline = Instant::now() + Duration::from_secs(18);
        let mut quotes = 0u64;
        let mut last_seq = 0u64;
        while quotes < N && Instant::now() < deadline {
            if sub.poll(zmq::POLLIN, 100).unwrap() == 0 {
                continue;
            }
            let frame = sub.recv_bytes(0).unwrap();
            let msg = MessageRef::decode(&frame).expect("a tickbox frame");
            if msg.kind() == Kind::Quote {
                quotes += 1;
                assert_eq!(msg.header().sequence, last_seq + 1, "in order, none lost");
                last_seq = msg.header().sequence;
                if quotes.is_multiple_of(1_000) {
                    std::thread::sleep(Duration::from_millis(5));
                }
            }
        }
        (quotes, last_seq)
    });
    let out = replay(&path, &endpoint, "15s");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(!stderr.contains("dropped"), "{stderr}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(reader.join().unwrap(), (N, N), "{stdout}");
    let summary: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON summary");
    assert_eq!(summary["undelivered"], 0, "{summary}");
}

/// Ctrl-C (or SIGTERM) skips the drain wait, as docs/book/src/recorder-replay.md says, and an interrupted replay whose reader never read
/// says the records still queued were not delivered and exits 1 (it used to wait the whole --drain-timeout and
/// exit 0 with `sent` counting records nobody received).
#[test]
fn an_interrupt_skips_the_drain_wait_and_says_what_was_not_delivered() {
    for signal in ["INT", "TERM"] {
        let dir = TempDir::new("replay-drain-interrupt");
        let path = dir.path().join("day.journal");
        journal(&path);
        let endpoint = format!("ipc://{}/replay.sock", dir.path().display());
        let ctx = zmq::Context::new();
        let _sub = subscriber(&ctx, &endpoint, true);
        let mut child = common::KillOnDrop(
            Command::new(TICKBOX)
                .args([
                    "-q",
                    "replay",
                    "--journal",
                    path.to_str().unwrap(),
                    "--bind",
                    &endpoint,
                ])
                .args([
                    "--speed",
                    "max",
                    "--batch",
                    "1",
                    "--drain-timeout",
                    "60s",
                    "--json",
                ])
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap(),
        );
        let stderr = common::forward_lines(child.0.stderr.take().unwrap());
        let stdout = common::forward_lines(child.0.stdout.take().unwrap());
        // The run ends with records still queued; the replay says so and waits for the subscriber.
        let deadline = Instant::now() + Duration::from_secs(15);
        let mut before = Vec::new();
        while !before
            .last()
            .is_some_and(|l: &String| l.contains("still queued for subscribers; waiting up to"))
        {
            let left = deadline.saturating_duration_since(Instant::now());
            before.push(stderr.recv_timeout(left).unwrap_or_else(|_| {
                panic!("{signal}: the run did not end with records queued: {before:?}")
            }));
        }
        let interrupted = Instant::now();
        common::signal(child.0.id(), signal);
        let status = child.wait_exit(
            Duration::from_secs(5),
            "the interrupt did not end the drain wait",
        );
        let took = interrupted.elapsed();
        // The process has exited: its stderr ends, and the channel with it.
        let lines: Vec<String> =
            std::iter::from_fn(|| stderr.recv_timeout(Duration::from_secs(2)).ok()).collect();
        assert_eq!(status.code(), Some(1), "{signal}: {lines:?}");
        assert!(took < Duration::from_secs(3), "{signal}: took {took:?}");
        // The summary comes once the close knows what it left undelivered: most of the run, counted exactly.
        let summary = stdout
            .recv_timeout(Duration::from_secs(2))
            .expect("the run's summary");
        let summary: serde_json::Value = serde_json::from_str(&summary).unwrap();
        assert_eq!(summary["sent"], N, "{summary}");
        let undelivered = summary["undelivered"].as_u64().expect("undelivered");
        eprintln!(
            "{signal}: sent {}, undelivered {undelivered}, took {took:?}",
            summary["sent"]
        );
        assert!(undelivered > N / 2 && undelivered <= N, "{summary}");
        assert!(
            lines.iter().any(|l| l.contains(&format!(
                "{undelivered} record(s) still queued for a subscriber were not delivered"
            ))),
            "{signal}: {lines:?}"
        );
    }
}
