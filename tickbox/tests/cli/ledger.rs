//! The ledger test: every message accounted for from feed to worker, through record and replay, as real processes.
//!
//! feed (lossy PUB, tiny HWM, bursts) → LVC → Espresso tap (a stalled consumer beside the recorder, tiny tap HWM)
//! → `record` → `replay` → `subscribe` with workers; a live `subscribe` on the LVC as well. Ground truth is each
//! publisher's own sequence range (`feed --json`). At every hop that accounts, delivered + reported missing =
//! published, exactly, and the missing counts of `record`, `journal info` and the replay's subscriber agree.

use crate::common;

use std::collections::BTreeMap;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::Receiver;
use std::time::{Duration, Instant};

use common::{eventually, signal, KillOnDrop, TempDir, TICKBOX};

/// A tickbox process with its stdout and stderr lines forwarded to channels.
struct Proc {
    child: KillOnDrop,
    out: Receiver<String>,
    err: Receiver<String>,
}

fn start(args: &[&str]) -> Proc {
    let mut child: Child = Command::new(TICKBOX)
        .args(args)
        .env("RUST_LOG", "info")
        .env("NO_COLOR", "1")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn tickbox");
    let out = common::forward_lines(child.stdout.take().unwrap());
    let err = common::forward_lines(child.stderr.take().unwrap());
    Proc {
        child: KillOnDrop(child),
        out,
        err,
    }
}

/// Waits at most `limit` for a line of `lines` that `pick` maps to `Some`.
fn wait_line<T>(
    lines: &Receiver<String>,
    limit: Duration,
    what: &str,
    pick: impl Fn(&str) -> Option<T>,
) -> T {
    let deadline = Instant::now() + limit;
    while let Some(left) = deadline.checked_duration_since(Instant::now()) {
        match lines.recv_timeout(left) {
            Ok(line) => {
                if let Some(found) = pick(&line) {
                    return found;
                }
            }
            Err(_) => break,
        }
    }
    panic!("no line for {what} within {limit:?}");
}

/// The JSON object the process prints last on stdout, after it exits (at most `limit`).
fn finish_json(mut p: Proc, interrupt: bool, limit: Duration) -> serde_json::Value {
    if interrupt {
        signal(p.child.0.id(), "INT");
    }
    let deadline = Instant::now() + limit;
    let status = loop {
        if let Some(status) = p.child.0.try_wait().unwrap() {
            break status;
        }
        if Instant::now() >= deadline {
            let stderr: Vec<String> = p.err.try_iter().collect();
            panic!(
                "process did not finish within {limit:?}; stderr:\n{}",
                stderr.join("\n")
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut last = None;
    while let Ok(line) = p.out.recv_timeout(Duration::from_secs(2)) {
        if let Ok(v @ serde_json::Value::Object(_)) = serde_json::from_str(&line) {
            last = Some(v);
        }
    }
    let stderr: Vec<String> = p.err.try_iter().collect();
    let json =
        last.unwrap_or_else(|| panic!("no JSON summary; status {status:?}; stderr {stderr:?}"));
    assert!(
        status.success(),
        "exit {status:?}: {json}\n{}",
        stderr.join("\n")
    );
    json
}

fn u(v: &serde_json::Value, key: &str) -> u64 {
    v[key]
        .as_u64()
        .unwrap_or_else(|| panic!("integer {key:?} in {v}"))
}

fn journal_info(journal: &str) -> serde_json::Value {
    let out = common::output_within(
        {
            let mut cmd = Command::new(TICKBOX);
            cmd.args(["journal", "info", "--journal", journal, "--json"]);
            cmd
        },
        Duration::from_secs(10),
    );
    let text = String::from_utf8_lossy(&out.stdout);
    serde_json::from_str(text.lines().last().unwrap_or("")).unwrap_or(serde_json::Value::Null)
}

/// Per-publisher `(recorded, missing)` from a `publishers` array.
fn per_publisher(v: &serde_json::Value) -> BTreeMap<u64, (u64, u64)> {
    v["publishers"]
        .as_array()
        .unwrap_or_else(|| panic!("publishers array in {v}"))
        .iter()
        .map(|p| (u(p, "publisher"), (u(p, "recorded"), u(p, "missing"))))
        .collect()
}

fn endpoint_after(prefix: &'static str) -> impl Fn(&str) -> Option<String> {
    move |line: &str| line.strip_prefix(prefix).map(|ep| ep.trim().to_owned())
}

#[test]
fn every_message_is_accounted_for_from_feed_to_worker_through_record_and_replay() {
    let dir = TempDir::new("ledger");
    let journal = dir.path().join("day");
    let journal = journal.to_str().unwrap();

    // The LVC with a tiny tap HWM: a tap consumer that falls behind loses copies, alone.
    let lvc = start(&[
        "lvc",
        "--upstream-bind",
        "tcp://127.0.0.1:*",
        "--bind",
        "tcp://127.0.0.1:*",
        "--tap",
        "tcp://127.0.0.1:*",
        "--tap-hwm",
        "1000",
    ]);
    let subscribers_ep = wait_line(
        &lvc.out,
        Duration::from_secs(10),
        "lvc subscribers",
        endpoint_after("lvc subscribers "),
    );
    let publishers_ep = wait_line(
        &lvc.out,
        Duration::from_secs(10),
        "lvc publishers",
        endpoint_after("lvc publishers "),
    );
    let tap_ep = wait_line(
        &lvc.out,
        Duration::from_secs(10),
        "lvc tap",
        endpoint_after("lvc tap "),
    );

    // A stalled tap consumer: subscribes to everything and never reads.
    let ctx = zmq::Context::new();
    let stalled = ctx.socket(zmq::SUB).unwrap();
    stalled.set_linger(0).unwrap();
    stalled.set_rcvhwm(10).unwrap();
    stalled.set_subscribe(b"").unwrap();
    stalled.connect(&tap_ep).unwrap();
    wait_line(
        &lvc.err,
        Duration::from_secs(10),
        "stalled consumer attached",
        |l| l.contains("tap consumer attached").then_some(()),
    );

    let recorder = start(&[
        "record",
        "--connect",
        &tap_ep,
        "--journal",
        journal,
        "--segment-size",
        "8MiB",
        "--json",
    ]);
    wait_line(
        &lvc.err,
        Duration::from_secs(10),
        "recorder attached",
        |l| l.contains("tap consumer attached").then_some(()),
    );
    // The subscribers here are judged on their accounting; the snail is `snail.rs`'s. With its default 1 s it
    // fired on a machine at load 6-8 (p50 lateness 414 ms), ending the run before the accounting was read.
    let live = start(&[
        "subscribe",
        "--connect",
        &subscribers_ep,
        "--workers",
        "2",
        "--max-lateness",
        "0",
        "--json",
    ]);
    wait_line(
        &lvc.err,
        Duration::from_secs(10),
        "live subscriber attached",
        |l| l.contains("subscriber attached").then_some(()),
    );

    // Two publishers, lossy, tiny HWM, bursts far larger than it: the feed → LVC hop loses messages.
    let feed = start(&[
        "feed",
        "--connect",
        &format!("{publishers_ep},{publishers_ep}"),
        "--rate",
        "200k",
        "--mode",
        "bursty",
        "--burst-size",
        "2000",
        "--send-hwm",
        "500",
        "--max-messages",
        "60000",
        "--wait-for-subscribers",
        "1",
        "--json",
    ]);
    let feed = finish_json(feed, false, Duration::from_secs(30));
    let published: BTreeMap<u64, u64> = feed["shards"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| (u(s, "publisher_id"), u(s, "last_sequence")))
        .collect();
    assert_eq!(published.len(), 2);
    let total_published: u64 = published.values().sum();

    // The feed's closing heartbeats name its last sequences; wait until the journal has accounted for them.
    let settled = eventually(Duration::from_secs(15), Duration::from_millis(100), || {
        let info = journal_info(journal);
        info["publishers"].as_array().is_some_and(|rows| {
            rows.len() == published.len()
                && rows.iter().all(|p| {
                    published.get(&u(p, "publisher")) == Some(&(u(p, "recorded") + u(p, "missing")))
                })
        })
    });
    let record = finish_json(recorder, true, Duration::from_secs(15));
    let live = finish_json(live, true, Duration::from_secs(15));
    assert!(
        settled,
        "the journal never accounted for every sequence: {record}"
    );

    // Hop 1: the recorder, through the lossy feed → LVC hop and the tiny-HWM tap.
    let recorded = per_publisher(&record);
    for (publisher, &sent) in &published {
        let (rec, missing) = recorded[publisher];
        assert_eq!(
            rec + missing,
            sent,
            "publisher {publisher}: recorded {rec} + missing {missing} != published {sent}"
        );
    }
    assert_eq!(
        u(&record, "recorded") + u(&record, "missing"),
        total_published
    );
    assert!(
        u(&record, "missing") > 0,
        "the forced loss did not happen: {record}"
    );
    assert_eq!(
        u(&record, "invalid"),
        0,
        "tap framing is never invalid: {record}"
    );

    // `journal info` tells the same story from the file alone.
    let info = journal_info(journal);
    assert_eq!(u(&info, "missing"), u(&record, "missing"), "{info}");
    assert_eq!(u(&info, "overwritten"), 0, "{info}");
    assert_eq!(per_publisher(&info), recorded, "{info}");

    // Hop 1': the live subscriber on the LVC.
    assert_eq!(
        u(&live, "data_received") + u(&live, "missing"),
        total_published,
        "live subscriber: {live}"
    );
    assert_eq!(u(&live, "duplicates"), 0, "{live}");

    // Hop 2: replay into a subscriber with workers. Recorded gaps arrive as gap notices, apart from transport loss.
    let replay = start(&[
        "replay",
        "--journal",
        journal,
        "--bind",
        "tcp://127.0.0.1:*",
        "--speed",
        "max",
        "--json",
    ]);
    let replay_ep = wait_line(
        &replay.err,
        Duration::from_secs(10),
        "replay endpoint",
        |l| {
            l.split("publishing on ")
                .nth(1)
                .map(|ep| ep.trim().to_owned())
        },
    );
    let downstream = start(&[
        "subscribe",
        "--connect",
        &replay_ep,
        "--workers",
        "3",
        "--idle-exit",
        "1s",
        "--max-lateness",
        "0",
        "--json",
    ]);
    let replay = finish_json(replay, false, Duration::from_secs(30));
    assert_eq!(u(&replay, "subscribers"), 1, "{replay}");
    // The subscriber stops by itself once the replay's stream (its closing heartbeats included) has gone quiet.
    let downstream = finish_json(downstream, false, Duration::from_secs(15));
    assert_eq!(
        u(&downstream, "missing"),
        0,
        "replay hop is lossless: {downstream}"
    );
    assert_eq!(u(&downstream, "duplicates"), 0, "{downstream}");
    assert_eq!(
        u(&downstream, "recorded_gaps"),
        u(&record, "missing"),
        "the subscriber of the replay sees exactly the recorder's gaps: {downstream}"
    );
    assert_eq!(
        u(&downstream, "data_received") + u(&downstream, "recorded_gaps"),
        total_published,
        "{downstream}"
    );

    eprintln!(
        "ledger: published {total_published} {published:?}; recorded {} missing {}; live received {} missing {}; \
         replay sent {}; replay subscriber received {} recorded gaps {} missing {}",
        u(&record, "recorded"),
        u(&record, "missing"),
        u(&live, "data_received"),
        u(&live, "missing"),
        u(&replay, "sent"),
        u(&downstream, "data_received"),
        u(&downstream, "recorded_gaps"),
        u(&downstream, "missing"),
    );
    drop(stalled);
    drop(lvc);
}
