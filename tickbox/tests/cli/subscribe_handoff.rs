//! `tickbox subscribe` chooses its hand-off: inline when there is one worker per shard (as there is by default), the
//! ring when workers share a shard, what was asked for when `--handoff` is given; the summary says which and why, and
//! whichever it chose, every record reaches a worker and each symbol's records reach their worker in sequence order.

use crate::common;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use common::{Background, TempDir, TICKBOX};

/// Data records the feed sends.
const RECORDS: u64 = 4_000;

/// A subscriber run that ends a second after its last record (at most 15 s), never trips the snail, and prints its
/// summary as JSON.
const UNTIL_IDLE: [&str; 7] = [
    "--idle-exit",
    "1s",
    "--duration",
    "15s",
    "--max-lateness",
    "0",
    "--json",
];

/// Each (worker, publisher, topic)'s sequences, in handling order.
type Sequences = BTreeMap<(u64, u64, String), Vec<u64>>;

/// Every (worker, publisher, topic)'s sequences on the tape, in handling order, and how many data records it holds.
fn read_tape(path: &Path) -> (Sequences, u64) {
    let mut by_topic = Sequences::new();
    let mut records = 0;
    let text = std::fs::read_to_string(path).expect("the tape");
    for line in text.lines() {
        let record: serde_json::Value = serde_json::from_str(line).expect("a tape line");
        let kind = record["kind"].as_str().unwrap_or_default();
        if kind != "quote" && kind != "trade" {
            continue;
        }
        records += 1;
        by_topic
            .entry((
                record["worker"].as_u64().unwrap(),
                record["publisher"].as_u64().unwrap(),
                record["topic"].as_str().unwrap().to_owned(),
            ))
            .or_default()
            .push(record["sequence"].as_u64().unwrap());
    }
    (by_topic, records)
}

#[test]
fn subscribe_chooses_inline_for_one_worker_a_shard_and_says_why() {
    let dir = TempDir::new("subscribe-handoff");
    // Three subscribers at once on one feed, which waits for all three: the default (one worker for its one
    // shard, auto: inline), two workers (auto: the ring) and one worker with the ring asked for.
    let shapes: [(&str, &[&str], &str, &str); 3] = [
        ("default", &[], "inline", "one shard, one worker"),
        (
            "two",
            &["--workers", "2"],
            "ring",
            "2 worker(s) for 1 shard(s): inline needs one worker per shard",
        ),
        (
            "asked",
            &["--workers", "1", "--handoff", "ring"],
            "ring",
            "asked for (handoff = ring)",
        ),
    ];
    let (feed, endpoints) = common::spawn_feed_with_endpoints(
        &[
            "--bind",
            "tcp://127.0.0.1:*",
            "--rate",
            "20000",
            // Lossless: a subscriber that a loaded machine holds up is waited for, so "nothing lost" below tests
            // the subscriber's hand-off, not the CPU the machine had to spare.
            "--back-pressure",
            "block",
            "--max-messages",
            &RECORDS.to_string(),
            "--wait-for-subscribers",
            "3",
            "--heartbeat",
            "50ms",
            "--json",
        ],
        1,
    );
    let runs: Vec<_> = shapes
        .iter()
        .map(|(name, args, _, _)| {
            let tape = dir.0.join(format!("{name}.ndjson"));
            let mut cmd = Command::new(TICKBOX);
            cmd.args(["subscribe", "--connect", &endpoints[0]])
                .args(*args)
                .args(UNTIL_IDLE)
                .arg("--tape")
                .arg(&tape);
            (Background::spawn(cmd), tape)
        })
        .collect();
    let fed = feed.wait_output(Duration::from_secs(15));
    assert!(fed.status.success(), "feed: {:?}", fed.status);
    for ((name, _, handoff, reason), (run, tape)) in shapes.iter().zip(runs) {
        let out = run.finish(Duration::from_secs(15));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{name}: {stderr}");
        let summary: serde_json::Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("{name}: {e}: {}", String::from_utf8_lossy(&out.stdout)));
        assert_eq!(summary["handoff"], *handoff, "{name}: {summary}");
        assert_eq!(summary["handoff_reason"], *reason, "{name}: {summary}");
        // Nothing lost: every record sent was received, and every one received was handled by a worker.
        assert_eq!(summary["missing"], 0, "{name}: {summary}");
        assert_eq!(summary["unprocessed"], 0, "{name}: {summary}");
        assert_eq!(
            summary["processed"], summary["received"],
            "{name}: {summary}"
        );
        let (by_topic, records) = read_tape(&tape);
        assert_eq!(records, RECORDS, "{name}: data records on the tape");
        // Order per symbol: each symbol's records reach one worker, in sequence order.
        let mut worker_of: BTreeMap<(u64, &str), u64> = BTreeMap::new();
        for ((worker, publisher, topic), sequences) in &by_topic {
            assert!(
                sequences.windows(2).all(|w| w[0] < w[1]),
                "{name}: publisher {publisher} topic {topic} out of order on worker {worker}"
            );
            let first = *worker_of.entry((*publisher, topic)).or_insert(*worker);
            assert_eq!(first, *worker, "{name}: {topic} reached two workers");
        }
    }
}

/// Two ring workers, fed a record every 10 ms, so each record finds its worker asleep: the shard runs those
/// records on the sleeping worker itself and counts them (`run_by_shard`). A worker that takes 5 ms a record makes
/// such a run longer than a wake-up costs, and the shard pauses running them (`run_by_shard_pauses`); either
/// way every record is handled, by its worker's state, exactly once.
#[test]
fn the_summary_counts_what_the_shard_ran_on_sleeping_workers_and_its_pauses_for_a_slow_one() {
    let ctx = zmq::Context::new();
    let tickbox_testkit::FakePublisher {
        socket: publisher,
        endpoint,
    } = tickbox_testkit::FakePublisher::bind(&ctx);
    // Every subscription passed on, so both subscribers' are seen (a plain XPUB passes on only the first).
    publisher.set_xpub_verbose(true).unwrap();
    let shapes: [(&str, &[&str]); 2] = [("quick", &[]), ("slow", &["--debug-worker-delay", "5ms"])];
    let mut runs: Vec<Background> = shapes
        .iter()
        .map(|(_, args)| {
            let mut cmd = Command::new(TICKBOX);
            cmd.args(["subscribe", "--connect", &endpoint])
                .args(["--workers", "2", "--handoff", "ring"])
                .args(*args)
                .args(UNTIL_IDLE);
            Background::spawn(cmd)
        })
        .collect();
    // Until both subscribers have subscribed to everything (the publisher passes on every subscription).
    let mut subscribed = 0;
    while subscribed < runs.len() {
        // Watched through the next subscriber due, so one that exits at start fails here with its output.
        if runs[subscribed].await_subscription(&publisher, Duration::from_secs(10)) == [1] {
            subscribed += 1;
        }
    }
    const SENT: u64 = 60;
    for seq in 1..=SENT {
        let header =
            tickbox_wire::Header::live(tickbox_wire::Kind::Quote, 1, seq, tickbox_wire::now_ns());
        let topic = format!("Q.XNAS.S{}", seq % 4);
        let frame =
            tickbox_wire::encode_to_vec(&topic, &header, &tickbox_wire::Quote::default().into())
                .unwrap();
        publisher.send(frame, 0).unwrap();
        std::thread::sleep(Duration::from_millis(10));
    }
    for ((name, _), run) in shapes.iter().zip(runs) {
        let out = run.finish(Duration::from_secs(15));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{name}: {stderr}");
        let summary: serde_json::Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("{name}: {e}: {}", String::from_utf8_lossy(&out.stdout)));
        assert_eq!(summary["processed"], SENT, "{name}: {summary}");
        assert_eq!(summary["missing"], 0, "{name}: {summary}");
        let ran = summary["run_by_shard"].as_u64().unwrap();
        let pauses = summary["run_by_shard_pauses"].as_u64().unwrap();
        assert!((1..=SENT).contains(&ran), "{name}: {summary}");
        assert_eq!(
            summary["shards"][0]["run_by_shard"], ran,
            "{name}: {summary}"
        );
        assert_eq!(
            summary["shards"][0]["run_by_shard_pauses"], pauses,
            "{name}: {summary}"
        );
        if *name == "slow" {
            // Each run takes at least 5 ms: the second in a row earns a pause, and a pause is earned by a run,
            // so there are never more pauses than records run.
            assert!((1..=ran).contains(&pauses), "{name}: {summary}");
        }
    }
}
