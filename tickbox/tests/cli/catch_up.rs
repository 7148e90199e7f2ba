//! A late joiner catches up from a recorder's history service and goes live: real processes (`feed`, `record
//! --serve`, `subscribe --catch-up`), the subscriber's tape checked record by record.

use crate::common;

use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use common::{
    endpoint_in, eventually, output_within, signal, spawn_and_pick, spawn_feed_with_endpoints,
    KillOnDrop, TempDir, TICKBOX,
};

fn history_endpoint(line: &str) -> Option<String> {
    line.strip_prefix("record history service endpoint ")
        .and_then(endpoint_in)
}

/// A feed at 5k msg/s on 40 symbols for `feed_for`, and a recorder serving the journal it writes, both under
/// `config` when given.
struct Recording {
    /// Killed when dropped: bind it for as long as the feed must run.
    feed: KillOnDrop,
    recorder: KillOnDrop,
    endpoint: String,
    history: String,
    journal: PathBuf,
}

fn record_a_feed(dir: &TempDir, feed_for: &str, config: Option<&Path>) -> Recording {
    record_a_sharded_feed(dir, feed_for, config, 1)
}

/// [`record_a_feed`] with the feed on `shards` shards, each its own publisher; the recorder reads them all (one
/// reader thread per shard) and `endpoint` lists them comma-separated.
fn record_a_sharded_feed(
    dir: &TempDir,
    feed_for: &str,
    config: Option<&Path>,
    shards: usize,
) -> Recording {
    let config_args: Vec<&str> = match config {
        Some(path) => vec!["--config", path.to_str().unwrap()],
        None => Vec::new(),
    };
    let binds = vec!["tcp://127.0.0.1:*"; shards].join(",");
    let mut feed_args = vec![
        "--bind",
        &binds,
        "--rate",
        "5k",
        "--symbols",
        "40",
        "--duration",
        feed_for,
        "--json",
    ];
    feed_args.extend(&config_args);
    let (feed, endpoints) = spawn_feed_with_endpoints(&feed_args, shards);
    let endpoint = endpoints.join(",");
    let journal = dir.0.join("day");
    let mut record_args = vec!["record"];
    record_args.extend(&config_args);
    record_args.extend([
        "--connect",
        &endpoint,
        "--journal",
        journal.to_str().unwrap(),
        "--serve",
        "tcp://127.0.0.1:*",
        "--duration",
        "30s",
    ]);
    let (recorder, history) = spawn_and_pick(&record_args, history_endpoint);
    Recording {
        feed,
        recorder,
        endpoint,
        history,
        journal,
    }
}

/// Records in the journal so far (0 while it does not exist yet).
fn journal_records(journal: &std::path::Path) -> u64 {
    let out = Command::new(TICKBOX)
        .args(["journal", "info", "--json", "--journal"])
        .arg(journal)
        .stderr(Stdio::null())
        .output()
        .expect("run journal info");
    serde_json::from_slice::<serde_json::Value>(&out.stdout)
        .ok()
        .and_then(|v| v["data_records"].as_u64())
        .unwrap_or(0)
}

/// Waits (up to 10 s) until the journal holds at least `n` records; fails the test with `what` otherwise.
fn await_records(journal: &std::path::Path, n: u64, what: &str) {
    assert!(
        eventually(Duration::from_secs(10), Duration::from_millis(50), || {
            journal_records(journal) >= n
        }),
        "{what}"
    );
}

/// What a tape holds: per (publisher, topic) the sequences in tape order, and every data sequence per publisher.
struct Tape {
    by_topic: BTreeMap<(u64, String), Vec<u64>>,
    by_publisher: BTreeMap<u64, Vec<u64>>,
}

fn read_tape(path: &std::path::Path) -> Tape {
    let mut by_topic: BTreeMap<(u64, String), Vec<u64>> = BTreeMap::new();
    let mut by_publisher: BTreeMap<u64, Vec<u64>> = BTreeMap::new();
    let text = std::fs::read_to_string(path).expect("the tape");
    for line in text.lines() {
        let record: serde_json::Value = serde_json::from_str(line).expect("a tape line");
        let kind = record["kind"].as_str().unwrap_or_default();
        if kind != "quote" && kind != "trade" {
            continue;
        }
        let publisher = record["publisher"].as_u64().unwrap();
        let sequence = record["sequence"].as_u64().unwrap();
        let topic = record["topic"].as_str().unwrap().to_owned();
        by_topic
            .entry((publisher, topic))
            .or_default()
            .push(sequence);
        by_publisher.entry(publisher).or_default().push(sequence);
    }
    Tape {
        by_topic,
        by_publisher,
    }
}

/// `subscribe --connect ENDPOINT --catch-up HISTORY --from start` until 1.5 s without a frame, with a JSON
/// summary, taping what its workers handled to `tape`.
fn catch_up_from_start(endpoint: &str, history: &str, tape: &Path) -> Command {
    let mut subscribe = Command::new(TICKBOX);
    subscribe.args([
        "subscribe",
        "--connect",
        endpoint,
        "--catch-up",
        history,
        "--from",
        "start",
        // What these tests check is what reaches the workers, not the snail: records a stopped recorder took late
        // are judged by their capture time (as late as the stop), and a loaded machine's workers can fall a second
        // behind.
        "--max-lateness",
        "30s",
        "--idle-exit",
        "1500ms",
        "--json",
        "--tape",
        tape.to_str().unwrap(),
    ]);
    subscribe
}

/// [`catch_up_from_start`], its JSON summary and its tape. Every topic's sequences on the tape are in order.
fn join_from_start(dir: &TempDir, endpoint: &str, history: &str) -> (serde_json::Value, Tape) {
    let tape = dir.0.join("tape.ndjson");
    let out = output_within(
        catch_up_from_start(endpoint, history, &tape),
        Duration::from_secs(20),
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let summary: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON summary");
    let tape = read_tape(&tape);
    for ((publisher, topic), sequences) in &tape.by_topic {
        assert!(
            sequences.windows(2).all(|w| w[0] < w[1]),
            "publisher {publisher} topic {topic} out of order or repeated"
        );
    }
    (summary, tape)
}

/// The feed publishes for 5 s into a recorder serving its journal; the recorder is stopped for a second early on
/// (SIGSTOP) with small queues, so it loses records; a subscriber joins once 5,000 records are recorded and catches up from the
/// start. Its workers see each sequence once: the journal's records before the seam and the live ones after,
/// nothing twice, nothing missing but what the recorder itself lost (reported as recorded gaps), and each symbol
/// in sequence order.
#[test]
fn a_late_joiner_gets_every_sequence_once_and_in_order_across_the_seam() {
    let dir = TempDir::new("catch-up");
    // Small socket buffers and a small queue on the recorder's side, so a stopped recorder loses records once the
    // feed's queue to it (1000 records) is full; the subscriber, which keeps reading, is never that far behind.
    let lossy = dir.0.join("lossy.toml");
    std::fs::write(
        &lossy,
        "[recorder]\nrcvhwm = 100\n[context.sockets.recorder]\nrcvbuf = 4096\n[context.sockets.feed]\nsndbuf = 4096\n",
    )
    .unwrap();
    let Recording {
        feed: _feed,
        recorder,
        endpoint,
        history,
        journal,
    } = record_a_feed(&dir, "5s", Some(&lossy));
    // The recorder's own loss: its SUB queue overflows while it is stopped.
    await_records(&journal, 1_000, "the recorder recorded nothing");
    signal(recorder.0.id(), "STOP");
    std::thread::sleep(Duration::from_millis(1000)); // The fault itself: the recorder stays stopped this long.
    signal(recorder.0.id(), "CONT");
    await_records(&journal, 5_000, "the recorder recorded nothing");
    let (summary, Tape { by_publisher, .. }) = join_from_start(&dir, &endpoint, &history);
    let catch_up = &summary["catch_up"];
    assert_eq!(catch_up["live"], true, "{catch_up}");
    assert_eq!(catch_up["outcome"]["status"], "complete", "{catch_up}");
    assert!(
        catch_up["history_records"].as_u64().unwrap() >= 5_000,
        "{catch_up}"
    );
    assert!(catch_up["live_records"].as_u64().unwrap() > 0, "{catch_up}");
    assert_eq!(catch_up["holes"].as_array().unwrap().len(), 0, "{catch_up}");
    assert!(catch_up["took_ns"].as_u64().is_some(), "{catch_up}");
    assert_eq!(summary["missing"], 0, "this hop lost nothing: {summary}");
    assert_eq!(summary["duplicates"], 0, "{summary}");

    let recorded_missing = summary["recorded_gaps"].as_u64().unwrap();
    assert!(
        recorded_missing > 0,
        "the stopped recorder lost nothing: {summary}"
    );
    assert_eq!(by_publisher.len(), 1);
    for (publisher, sequences) in &by_publisher {
        let distinct: HashSet<u64> = sequences.iter().copied().collect();
        assert_eq!(
            distinct.len(),
            sequences.len(),
            "publisher {publisher}: a sequence reached the workers twice"
        );
        let first = *sequences.iter().min().unwrap();
        let last = *sequences.iter().max().unwrap();
        assert_eq!(
            last - first + 1,
            sequences.len() as u64 + recorded_missing,
            "publisher {publisher}: {first}..={last} holds {} records and {recorded_missing} recorded as lost",
            sequences.len()
        );
    }
    // The seam is where history ended and live began, one after the other.
    let seam = &catch_up["seam"][0];
    assert_eq!(
        seam["first_live"].as_u64().unwrap(),
        seam["last_history"].as_u64().unwrap() + 1,
        "{seam}"
    );
}

/// A live buffer smaller than the catch-up needs: the subscriber stops with an error naming the budget, and the
/// records it did hand over are in order.
/// The feed outlasts the join by far, even on a machine so loaded that starting the recorder and the subscriber
/// takes seconds, so live records keep arriving while the history is fetched (with the feed already over, the
/// history alone would fit and the budget never be reached). The test does not wait for it: the subscriber stops
/// at the budget, and the feed is stopped when the test ends.
#[test]
fn a_live_buffer_past_its_budget_is_an_error_that_names_it() {
    let dir = TempDir::new("catch-up-budget");
    let Recording {
        feed: _feed,
        recorder: _recorder,
        endpoint,
        history,
        journal,
    } = record_a_feed(&dir, "60s", None);
    // History enough that fetching it takes several times as long as 1 KiB of live records (about ten at 5k
    // msg/s: 2 ms) takes to arrive, however fast the machine: otherwise the catch-up could finish inside the budget.
    await_records(&journal, 10_000, "the recorder recorded nothing");
    let tape = dir.0.join("tape.ndjson");
    let mut subscribe = Command::new(TICKBOX);
    subscribe.args([
        "subscribe",
        "--connect",
        &endpoint,
        "--catch-up",
        &history,
        "--catch-up-budget",
        "1KiB",
        // What is checked is the budget, not the snail: a loaded machine's workers can fall a second behind.
        "--max-lateness",
        "30s",
        "--idle-exit",
        "1500ms",
        "--tape",
        tape.to_str().unwrap(),
    ]);
    let out = output_within(subscribe, Duration::from_secs(20));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("budget of 1024 bytes"), "{stderr}");
    let by_topic = read_tape(&tape).by_topic;
    for ((publisher, topic), sequences) in &by_topic {
        assert!(
            sequences.windows(2).all(|w| w[0] < w[1]),
            "publisher {publisher} topic {topic} out of order or repeated"
        );
    }
}

/// A publisher restarts (a new session on the same endpoint) before the subscriber joins: the history holds both
/// sessions, each reaches the workers once and in order, the restart is counted as one, and the seam is in the
/// second session.
#[test]
fn a_publisher_restart_before_the_join_keeps_both_sessions_whole() {
    let dir = TempDir::new("catch-up-restart");
    let journal = dir.0.join("day");
    let endpoint = format!("ipc://{}", dir.0.join("feed.ipc").display());
    let (_recorder, history) = spawn_and_pick(
        &[
            "record",
            "--connect",
            &endpoint,
            "--journal",
            journal.to_str().unwrap(),
            "--serve",
            "tcp://127.0.0.1:*",
            "--duration",
            "30s",
        ],
        history_endpoint,
    );
    let feed_args = |duration: &'static str| {
        let mut feed = Command::new(TICKBOX);
        feed.args([
            "feed",
            "--bind",
            &endpoint,
            "--rate",
            "5k",
            "--symbols",
            "40",
            "--duration",
            duration,
        ]);
        feed
    };
    // The first session runs to its end before the second starts on the same endpoint.
    let first = output_within(feed_args("1500ms"), Duration::from_secs(20));
    assert!(
        first.status.success(),
        "{}",
        String::from_utf8_lossy(&first.stderr)
    );
    let first_session_records = journal_records(&journal);
    assert!(
        first_session_records > 1_000,
        "the recorder got {first_session_records} of the first session"
    );
    let second_started_ns = u64::try_from(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos(),
    )
    .unwrap();
    let mut second = feed_args("5s");
    second.stdout(Stdio::null()).stderr(Stdio::null());
    let _second = common::KillOnDrop(second.spawn().expect("spawn the second feed"));
    await_records(
        &journal,
        first_session_records + 3_000,
        "the recorder got nothing of the second session",
    );
    let tape = dir.0.join("tape.ndjson");
    let out = output_within(
        catch_up_from_start(&endpoint, &history, &tape),
        Duration::from_secs(20),
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let summary: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON summary");
    assert_eq!(summary["restarts"], 1, "{summary}");
    assert_eq!(summary["missing"], 0, "{summary}");
    assert_eq!(summary["duplicates"], 0, "{summary}");
    let seam = summary["catch_up"]["seam"].as_array().unwrap().clone();
    assert_eq!(seam.len(), 2, "one seam position per session: {seam:?}");
    assert!(
        seam[0]["first_live"].is_null(),
        "the first session ended before the join: {seam:?}"
    );
    assert_eq!(
        seam[1]["first_live"].as_u64().unwrap(),
        seam[1]["last_history"].as_u64().unwrap() + 1,
        "{seam:?}"
    );
    // Split the tape by session (origin times before and after the second feed started): each session's
    // sequences once, in order per symbol, and as many as its range less what the recorder lost.
    let text = std::fs::read_to_string(&tape).unwrap();
    let mut sessions: [BTreeMap<String, Vec<u64>>; 2] = Default::default();
    for line in text.lines() {
        let record: serde_json::Value = serde_json::from_str(line).unwrap();
        let kind = record["kind"].as_str().unwrap_or_default();
        if kind != "quote" && kind != "trade" {
            continue;
        }
        let second = record["origin_ns"].as_u64().unwrap() >= second_started_ns;
        sessions[usize::from(second)]
            .entry(record["topic"].as_str().unwrap().to_owned())
            .or_default()
            .push(record["sequence"].as_u64().unwrap());
    }
    let recorded_missing = summary["recorded_gaps"].as_u64().unwrap();
    let mut accounted = 0;
    for (index, topics) in sessions.iter().enumerate() {
        let all: Vec<u64> = topics.values().flatten().copied().collect();
        assert!(!all.is_empty(), "session {index} never reached the workers");
        for (topic, sequences) in topics {
            assert!(
                sequences.windows(2).all(|w| w[0] < w[1]),
                "session {index} topic {topic} out of order"
            );
        }
        let distinct: HashSet<u64> = all.iter().copied().collect();
        assert_eq!(
            distinct.len(),
            all.len(),
            "session {index}: a sequence reached the workers twice"
        );
        accounted += all.iter().max().unwrap() - all.iter().min().unwrap() + 1 - all.len() as u64;
    }
    assert_eq!(
        accounted, recorded_missing,
        "only what the recorder lost is missing: {summary}"
    );
}

/// Two feed shards, two publishers: the recorder reads both, the late joiner subscribes to both and catches up
/// from the start. Each publisher's sequence reaches the workers once, in order, across its own seam.
#[test]
fn a_late_joiner_on_two_shards_gets_both_publishers_whole() {
    let dir = TempDir::new("catch-up-shards");
    let Recording {
        feed: _feed,
        recorder: _recorder,
        endpoint,
        history,
        journal,
    } = record_a_sharded_feed(&dir, "6s", None, 2);
    await_records(&journal, 4_000, "the recorder recorded nothing");
    let (summary, Tape { by_publisher, .. }) = join_from_start(&dir, &endpoint, &history);
    let catch_up = &summary["catch_up"];
    assert_eq!(catch_up["outcome"]["status"], "complete", "{catch_up}");
    assert!(catch_up["live_records"].as_u64().unwrap() > 0, "{catch_up}");
    assert_eq!(summary["missing"], 0, "{summary}");
    assert_eq!(summary["duplicates"], 0, "{summary}");
    assert_eq!(summary["recorded_gaps"], 0, "{summary}");
    let seams = catch_up["seam"].as_array().unwrap();
    assert_eq!(seams.len(), 2, "one seam per publisher: {catch_up}");
    for seam in seams {
        assert_eq!(
            seam["first_live"].as_u64().unwrap(),
            seam["last_history"].as_u64().unwrap() + 1,
            "{seam}"
        );
    }
    assert_eq!(by_publisher.len(), 2, "both publishers");
    // The recorder joined the running feed, so each publisher's journal starts where the recorder's
    // subscription took effect: from there on, every sequence once.
    for (publisher, sequences) in &by_publisher {
        let mut sorted = sequences.clone();
        sorted.sort_unstable();
        let (first, last) = (sorted[0], sorted[sorted.len() - 1]);
        assert!(
            sorted.iter().copied().eq(first..=last),
            "publisher {publisher}: {first}..={last} not each once ({} records)",
            sorted.len()
        );
    }
}
