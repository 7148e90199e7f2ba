//! Histories as a user keeps them: `record --roll` writing one journal per period, `journal ls`, `info` and
//! `verify` of the directory, `replay` and `replay --local` of the whole history or a time window of it.

use crate::common;

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::{KillOnDrop, TempDir, TICKBOX};
use tickbox_wire::{encode_to_vec, Header, Kind, MessageRef, Quote};

fn spawn(args: &[&str]) -> KillOnDrop {
    KillOnDrop(
        Command::new(TICKBOX)
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    )
}

fn run(args: &[&str]) -> Output {
    spawn(args).wait_output(Duration::from_secs(20))
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// Quote `i` of `publisher`: sequence `i`, instrument `i`.
fn quote(publisher: u32, i: u64) -> Vec<u8> {
    let q = Quote {
        instrument_id: i as u32,
        bid_px: i as i64,
        ..Quote::default()
    };
    encode_to_vec(
        "Q.XNAS.AAPL",
        &Header::live(Kind::Quote, publisher, i, tickbox_wire::now_ns()),
        &q.into(),
    )
    .unwrap()
}

/// What a journal record of `frame` takes: 24 bytes of record header, the frame, padding to 8.
fn stored(frame: &[u8]) -> u64 {
    (24 + frame.len() as u64).next_multiple_of(8)
}

/// Records `frames` (sent in order by one publisher socket) with `tickbox record ARGS --connect EP`; returns
/// the recorder's output.
fn record(args: &[&str], frames: &[Vec<u8>]) -> Output {
    let ctx = zmq::Context::new();
    let publisher = ctx.socket(zmq::XPUB).unwrap();
    publisher.set_linger(1000).unwrap();
    // Unbounded, so nothing is dropped at the high-water mark while the recorder writes.
    publisher.set_sndhwm(0).unwrap();
    let ep = tickbox_testkit::bind_loopback(&publisher);
    let n = frames.len().to_string();
    let mut all = vec!["record", "--connect", &ep, "--max-messages", &n];
    all.extend_from_slice(args);
    let recorder = spawn(&all);
    publisher.set_rcvtimeo(10_000).unwrap();
    // The subscription (and the batch opt-in after it) say the recorder is connected.
    assert_eq!(publisher.recv_bytes(0).unwrap(), b"\x01");
    for f in frames {
        publisher.send(&f[..], 0).unwrap();
    }
    recorder.wait_output(Duration::from_secs(20))
}

/// Data frames (heartbeats skipped) `sub` receives, until `n` or 15 s.
fn receive(sub: &zmq::Socket, n: usize) -> Vec<Vec<u8>> {
    let deadline = Instant::now() + Duration::from_secs(15);
    let mut got = Vec::new();
    while got.len() < n && Instant::now() < deadline {
        match sub.recv_bytes(0) {
            Ok(frame) => {
                if MessageRef::decode(&frame).is_ok_and(|m| m.kind() != Kind::Heartbeat) {
                    got.push(frame);
                }
            }
            Err(zmq::Error::EAGAIN) => {}
            Err(e) => panic!("{e}"),
        }
    }
    got
}

/// Replays `journal` (with `extra` flags and `--json`) onto one ipc shard and returns its output and the first `n`
/// data frames a subscriber there received (the summary's `sent` says whether there were more).
fn replay(dir: &Path, journal: &str, n: usize, extra: &[&str]) -> (Output, Vec<Vec<u8>>) {
    let ep = format!("ipc://{}/replay.sock", dir.display());
    let mut args = vec![
        "replay",
        "--journal",
        journal,
        "--bind",
        &ep,
        "--speed",
        "max",
        "--wait-subscribers",
        "1",
        "--wait-timeout",
        "10s",
        "--json",
        "--quiet",
    ];
    args.extend_from_slice(extra);
    let child = spawn(&args);
    let ctx = zmq::Context::new();
    let sub = ctx.socket(zmq::SUB).unwrap();
    sub.set_linger(0).unwrap();
    sub.set_subscribe(b"").unwrap();
    sub.set_rcvtimeo(200).unwrap();
    sub.connect(&ep).unwrap();
    let got = receive(&sub, n);
    // Leaving ends the replay's wait for its subscribers to finish reading.
    drop(sub);
    let out = child.wait_output(Duration::from_secs(20));
    (out, got)
}

/// The records a replay sent, from its `--json` summary.
fn sent(out: &Output) -> u64 {
    let v: serde_json::Value =
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", text(out)));
    v["sent"].as_u64().unwrap()
}

fn sequences(frames: &[Vec<u8>]) -> Vec<(u32, u64)> {
    frames
        .iter()
        .map(|f| {
            let h = *MessageRef::decode(f).unwrap().header();
            (h.publisher_id, h.sequence)
        })
        .collect()
}

#[test]
fn a_recording_that_rolls_three_times_is_one_history() {
    let dir = TempDir::new("cli-history-rolls");
    let history = dir.0.join("hist");
    let hist = history.to_str().unwrap();
    // Enough quotes for three rolls of 64 KiB (a journal rolls once it holds 64 KiB), and a few more.
    let roll = 64 << 10;
    let mut frames = Vec::new();
    let (mut bytes, mut rolls) = (0u64, 0);
    for i in 1.. {
        let f = quote(7, i);
        if bytes >= roll {
            rolls += 1;
            bytes = 0;
        }
        if rolls == 3 {
            // The first record of the fourth journal.
            frames.push(f);
            break;
        }
        bytes += stored(&f);
        frames.push(f);
    }
    let start = frames.len() as u64;
    frames.extend((1..=20).map(|k| quote(7, start + k)));
    let n = frames.len() as u64;
    let out = record(
        &[
            "--journal",
            hist,
            "--roll",
            "64KiB",
            "--segment-size",
            "1MiB",
            "--quiet",
        ],
        &frames,
    );
    assert!(out.status.success(), "{}", text(&out));
    let summary = text(&out);
    assert!(summary.contains(&format!("messages      {n}")), "{summary}");
    assert!(
        summary.contains("history       4 journal(s) started, 3 roll(s)"),
        "{summary}"
    );

    // journal ls: the four journals, their sequences chained, every record counted once.
    let ls = run(&["journal", "ls", "--journal", hist, "--json"]);
    assert!(ls.status.success(), "{}", text(&ls));
    let v: serde_json::Value = serde_json::from_slice(&ls.stdout).unwrap();
    let journals = v["journals"].as_array().unwrap();
    assert_eq!(journals.len(), 4, "{v}");
    assert_eq!(v["records"], n, "{v}");
    let mut next = 1;
    for j in journals {
        assert_eq!(j["first_seq"], next, "{v}");
        assert_eq!(j["publishers"], 1, "{v}");
        assert!(j["bytes_on_disk"].as_u64().unwrap() > 0, "{v}");
        assert_eq!(j["compressed"], false);
        next = j["last_seq"].as_u64().unwrap() + 1;
    }
    assert_eq!(next, n + 1);
    assert!(v["chain_breaks"].as_array().unwrap().is_empty());
    let table = text(&run(&["journal", "ls", "--journal", hist]));
    assert!(table.contains("4 journal(s)"), "{table}");

    // verify DIR: every journal and the chain; the verdicts are cached for ls.
    let verify = run(&["journal", "verify", "--journal", hist]);
    assert!(verify.status.success(), "{}", text(&verify));
    let report = text(&verify);
    assert!(
        report.contains(&format!("verify        OK: {n} records in 4 journals")),
        "{report}"
    );
    let v: serde_json::Value =
        serde_json::from_slice(&run(&["journal", "ls", "--journal", hist, "--json"]).stdout)
            .unwrap();
    assert!(
        v["journals"]
            .as_array()
            .unwrap()
            .iter()
            .all(|j| j["verified"] == "ok"),
        "{v}"
    );
    // info DIR: the whole history's accounting.
    let info = run(&["journal", "info", "--journal", hist, "--json"]);
    assert!(info.status.success(), "{}", text(&info));
    let v: serde_json::Value = serde_json::from_slice(&info.stdout).unwrap();
    assert_eq!(
        (v["records"].as_u64(), v["recorded"].as_u64()),
        (Some(n), Some(n)),
        "{v}"
    );
    assert_eq!(v["missing"], 0);

    // Replayed, the history is one stream: every sequence once, in order, under the original publisher.
    let (out, got) = replay(&dir.0, hist, n as usize, &[]);
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(sent(&out), n);
    assert_eq!(
        sequences(&got),
        (1..=n).map(|s| (7, s)).collect::<Vec<_>>(),
        "{}",
        text(&out)
    );
    // A window of origin time across the periods: seeks into the journal holding its start.
    let origin = |f: &Vec<u8>| MessageRef::decode(f).unwrap().header().origin_time_ns;
    let (from, to) = (
        origin(&frames[frames.len() / 3]),
        origin(&frames[frames.len() - 5]),
    );
    let want: Vec<(u32, u64)> = sequences(&frames)
        .into_iter()
        .zip(&frames)
        .filter(|(_, f)| (from..to).contains(&origin(f)))
        .map(|(s, _)| s)
        .collect();
    let (out, got) = replay(
        &dir.0,
        hist,
        want.len(),
        &["--from", &from.to_string(), "--to", &to.to_string()],
    );
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(
        (sequences(&got), sent(&out)),
        (want.clone(), want.len() as u64)
    );
    // And the backtest path reads it too.
    let local = run(&["replay", "--journal", hist, "--local", "--json"]);
    assert!(local.status.success(), "{}", text(&local));
    let v: serde_json::Value = serde_json::from_slice(&local.stdout).unwrap();
    assert_eq!(v["received"], n, "{v}");
}

/// A history of `journals` size-rolled journals of publisher 7's quotes (64 KiB each, the last one partly
/// filled); returns how many quotes it holds.
fn rolled_history(path: &Path, journals: usize) -> u64 {
    let mut frames = Vec::new();
    let (mut bytes, mut rolls) = (0u64, 0);
    for i in 1.. {
        let f = quote(7, i);
        if bytes >= 64 << 10 {
            rolls += 1;
            bytes = 0;
        }
        if rolls + 1 == journals {
            frames.push(f);
            break;
        }
        bytes += stored(&f);
        frames.push(f);
    }
    let out = record(
        &[
            "--journal",
            path.to_str().unwrap(),
            "--roll",
            "64KiB",
            "--segment-size",
            "1MiB",
            "--quiet",
        ],
        &frames,
    );
    assert!(out.status.success(), "{}", text(&out));
    frames.len() as u64
}

fn listed(path: &Path) -> Vec<String> {
    let ls = run(&[
        "journal",
        "ls",
        "--journal",
        path.to_str().unwrap(),
        "--json",
    ]);
    assert!(ls.status.success(), "{}", text(&ls));
    let v: serde_json::Value = serde_json::from_slice(&ls.stdout).unwrap();
    v["journals"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["name"].as_str().unwrap().to_owned())
        .collect()
}

#[test]
fn retention_deletes_oldest_first_and_never_a_journal_being_read_or_written() {
    let dir = TempDir::new("cli-history-prune");
    let history = dir.0.join("hist");
    let hist = history.to_str().unwrap();
    rolled_history(&history, 4);
    let names = listed(&history);
    assert_eq!(names.len(), 4);

    // A replay waiting for its subscriber holds the oldest journal: retention keeps it, and so everything after.
    let ep = format!("ipc://{}/held.sock", dir.0.display());
    let mut replay = Command::new(TICKBOX)
        .args([
            "replay",
            "--journal",
            hist,
            "--bind",
            &ep,
            "--wait-timeout",
            "20s",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The replay says where it publishes once the journal is open (and leased).
    let mut lines = std::io::BufReader::new(replay.stderr.take().unwrap());
    let mut line = String::new();
    while !line.contains("publishing on") {
        line.clear();
        assert!(
            std::io::BufRead::read_line(&mut lines, &mut line).unwrap() > 0,
            "the replay ended before binding"
        );
    }
    let replay = KillOnDrop(replay);
    let held = run(&[
        "journal",
        "prune",
        "--journal",
        hist,
        "--retain-size",
        "1",
        "--json",
    ]);
    assert!(held.status.success(), "{}", text(&held));
    let v: serde_json::Value = serde_json::from_slice(&held.stdout).unwrap();
    assert_eq!(v["deleted"].as_array().unwrap().len(), 0, "{v}");
    assert_eq!(v["kept"], serde_json::json!([names[0], "read"]), "{v}");
    drop(replay);

    // Nobody reads: the oldest go first, down to the size asked, and a dry run only says so.
    let dry = run(&[
        "journal",
        "prune",
        "--journal",
        hist,
        "--retain-size",
        "1",
        "--dry-run",
    ]);
    assert!(dry.status.success(), "{}", text(&dry));
    assert!(text(&dry).contains("would delete"), "{}", text(&dry));
    assert_eq!(listed(&history), names);
    // A recorder appending to the history holds its newest journal open: never deleted.
    let out = record(&["--journal", hist, "--quiet"], &[quote(8, 1)]);
    assert!(out.status.success(), "{}", text(&out));
    let mut names = listed(&history);
    assert_eq!(
        names.len(),
        5,
        "a size-rolled history starts a new journal per run"
    );
    let ctx = zmq::Context::new();
    let publisher = ctx.socket(zmq::XPUB).unwrap();
    publisher.set_linger(0).unwrap();
    let ep = tickbox_testkit::bind_loopback(&publisher);
    let recorder = spawn(&["record", "--connect", &ep, "--journal", hist, "--quiet"]);
    publisher.set_rcvtimeo(10_000).unwrap();
    assert_eq!(publisher.recv_bytes(0).unwrap(), b"\x01", "recording");
    names = listed(&history);
    let pruned = run(&[
        "journal",
        "prune",
        "--journal",
        hist,
        "--retain-size",
        "1",
        "--json",
    ]);
    assert!(pruned.status.success(), "{}", text(&pruned));
    let v: serde_json::Value = serde_json::from_slice(&pruned.stdout).unwrap();
    let deleted: Vec<&str> = v["deleted"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    assert_eq!(deleted, names[..names.len() - 1], "{v}");
    assert_eq!(
        v["kept"],
        serde_json::json!([names[names.len() - 1], "newest"]),
        "{v}"
    );
    assert_eq!(listed(&history), names[names.len() - 1..]);
    drop(recorder);
}

#[test]
fn record_retain_size_keeps_the_history_within_its_size_as_it_rolls() {
    let dir = TempDir::new("cli-history-retain");
    let history = dir.0.join("hist");
    let hist = history.to_str().unwrap();
    let frames: Vec<Vec<u8>> = (1..=3000).map(|i| quote(7, i)).collect();
    let out = record(
        &[
            "--journal",
            hist,
            "--roll",
            "64KiB",
            "--segment-size",
            "1MiB",
            "--retain-size",
            "200KiB",
            "--json",
            "--quiet",
        ],
        &frames,
    );
    assert!(out.status.success(), "{}", text(&out));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let rolls = v["rolls"].as_u64().unwrap();
    let deleted = v["housekeeping"]["deleted"].as_array().unwrap();
    assert!(rolls >= 4, "{v}");
    assert!(!deleted.is_empty(), "{v}");
    assert_eq!(v["housekeeping"]["errors"], 0, "{v}");
    // What is left fits, and is the newest journals, the sequence chain intact from the oldest kept.
    let ls = run(&["journal", "ls", "--journal", hist, "--json"]);
    let l: serde_json::Value = serde_json::from_slice(&ls.stdout).unwrap();
    assert!(l["bytes_on_disk"].as_u64().unwrap() <= 200 << 10, "{l}");
    assert_eq!(
        l["journals"].as_array().unwrap().len() as u64 + deleted.len() as u64,
        rolls + 1,
        "{l}"
    );
    assert!(l["chain_breaks"].as_array().unwrap().is_empty(), "{l}");
    let last = l["journals"].as_array().unwrap().last().unwrap()["last_seq"].clone();
    assert_eq!(last, 3000);
}

/// (publisher, sequence, capture time) of every record of the journal at `path`, in its order.
fn recorded(path: &Path) -> Vec<(u32, u64, u64)> {
    let mut r = tickbox_journal::Reader::open(path).unwrap();
    let mut out = Vec::new();
    while let Some(rec) = r.next().unwrap() {
        let h = *MessageRef::decode(rec.payload).unwrap().header();
        out.push((h.publisher_id, h.sequence, rec.capture_time_ns));
    }
    out
}

#[test]
fn two_recordings_of_two_feeds_replay_as_one_stream_merged_by_capture_time() {
    let dir = TempDir::new("cli-history-merge");
    let (a, b) = (dir.0.join("a"), dir.0.join("b"));
    const N: u64 = 400;
    // Two feeds, publishers 1 and 2, sent interleaved, each recorded by its own recorder.
    let ctx = zmq::Context::new();
    let mut recorders = Vec::new();
    let mut publishers = Vec::new();
    for journal in [&a, &b] {
        let publisher = ctx.socket(zmq::XPUB).unwrap();
        publisher.set_linger(1000).unwrap();
        publisher.set_sndhwm(0).unwrap();
        let ep = tickbox_testkit::bind_loopback(&publisher);
        recorders.push(spawn(&[
            "record",
            "--connect",
            &ep,
            "--journal",
            journal.to_str().unwrap(),
            "--segment-size",
            "1MiB",
            "--max-messages",
            &N.to_string(),
            "--quiet",
        ]));
        publisher.set_rcvtimeo(10_000).unwrap();
        assert_eq!(publisher.recv_bytes(0).unwrap(), b"\x01");
        publishers.push(publisher);
    }
    for i in 1..=N {
        for (k, publisher) in publishers.iter().enumerate() {
            publisher.send(quote(k as u32 + 1, i), 0).unwrap();
        }
    }
    for r in recorders {
        let out = r.wait_output(Duration::from_secs(20));
        assert!(out.status.success(), "{}", text(&out));
    }
    // The merged order: by capture time, the first recording first on a tie.
    let mut expected: Vec<(u64, usize, u32, u64)> = Vec::new();
    for (k, journal) in [&a, &b].iter().enumerate() {
        expected.extend(recorded(journal).into_iter().map(|(p, s, t)| (t, k, p, s)));
    }
    expected.sort();
    let expected: Vec<(u32, u64)> = expected.into_iter().map(|(_, _, p, s)| (p, s)).collect();
    assert_eq!(expected.len(), 2 * N as usize);

    let both = format!("{},{}", a.display(), b.display());
    let (out, got) = replay(&dir.0, &both, 2 * N as usize, &[]);
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(sent(&out), 2 * N);
    assert_eq!(sequences(&got), expected, "{}", text(&out));
    // The backtest path merges the same way: every record of both, each publisher's sequence gap-free.
    let local = run(&["replay", "--journal", &both, "--local", "--json"]);
    assert!(local.status.success(), "{}", text(&local));
    let v: serde_json::Value = serde_json::from_slice(&local.stdout).unwrap();
    assert_eq!(
        (v["received"].as_u64(), v["gaps"].as_u64()),
        (Some(2 * N), Some(0)),
        "{v}"
    );
    // A window of origin time selects across both.
    let origins: Vec<u64> = [&a, &b]
        .iter()
        .flat_map(|j| {
            let mut r = tickbox_journal::Reader::open(j).unwrap();
            let mut o = Vec::new();
            while let Some(rec) = r.next().unwrap() {
                o.push(
                    MessageRef::decode(rec.payload)
                        .unwrap()
                        .header()
                        .origin_time_ns,
                );
            }
            o
        })
        .collect();
    let mut sorted = origins.clone();
    sorted.sort();
    let mid = sorted[sorted.len() / 2];
    let late = origins.iter().filter(|&&o| o >= mid).count();
    let window = mid.to_string();
    let (out, got) = replay(&dir.0, &both, late, &["--from", &window]);
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(
        (got.len(), sent(&out)),
        (late, late as u64),
        "{}",
        text(&out)
    );
}

#[test]
fn damage_never_ends_a_backtest_and_info_says_the_journal_is_damaged() {
    use std::os::unix::fs::FileExt;
    let dir = TempDir::new("cli-history-damage");
    let journal = dir.0.join("j");
    // 2,000 quotes of publisher 7 (send times now, so the snail stays quiet), then one flipped byte in record 36.
    let mut w =
        tickbox_journal::Writer::open(&journal, &tickbox_journal::WriterOptions::archive(1 << 20))
            .unwrap();
    let frames: Vec<Vec<u8>> = (1..=2000).map(|i| quote(7, i)).collect();
    for f in &frames {
        w.append(tickbox_wire::now_ns(), f).unwrap();
    }
    w.close().unwrap();
    let at = 4096 + 35 * stored(&frames[0]) + 40;
    let seg = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(journal.join("0000000000.tbj"))
        .unwrap();
    let mut b = [0u8];
    seg.read_exact_at(&mut b, at).unwrap();
    seg.write_all_at(&[b[0] ^ 0xff], at).unwrap();
    let j = journal.to_str().unwrap();

    // The backtest processes every intact record, counts the damage, and exits 5 at the end.
    let local = run(&["replay", "--journal", j, "--local", "--json"]);
    assert_eq!(local.status.code(), Some(5), "{}", text(&local));
    let v: serde_json::Value = serde_json::from_slice(&local.stdout).unwrap();
    assert_eq!(v["processed"], 1999, "{v}");
    assert_eq!(
        (v["damaged_ranges"].as_u64(), v["corrupt_records"].as_u64()),
        (Some(1), Some(1)),
        "{v}"
    );
    // The lost sequence is the journal's hole (a recorded gap), not the Black Box's own loss.
    assert_eq!(
        (v["recorded_gaps"].as_u64(), v["gaps"].as_u64()),
        (Some(1), Some(0)),
        "{v}"
    );
    assert!(
        text(&local).contains("the journal is damaged"),
        "{}",
        text(&local)
    );

    // info says the journal is damaged, and exits 5.
    let info = run(&["journal", "info", j]);
    assert_eq!(info.status.code(), Some(5), "{}", text(&info));
    assert!(
        text(&info).contains("damaged       1 record(s) in 1 damaged stretch(es)"),
        "{}",
        text(&info)
    );
    let info = run(&["journal", "info", j, "--json"]);
    assert_eq!(info.status.code(), Some(5));
    let v: serde_json::Value = serde_json::from_slice(&info.stdout).unwrap();
    assert_eq!(v["damaged_ranges"], 1, "{v}");
}

#[test]
fn record_compress_compresses_each_closed_period_and_the_history_reads_the_same() {
    let dir = TempDir::new("cli-history-compress");
    let history = dir.0.join("hist");
    let hist = history.to_str().unwrap();
    let frames: Vec<Vec<u8>> = (1..=3000).map(|i| quote(7, i)).collect();
    let out = record(
        &[
            "--journal",
            hist,
            "--roll",
            "64KiB",
            "--segment-size",
            "1MiB",
            "--compress",
            "--json",
            "--quiet",
        ],
        &frames,
    );
    assert!(out.status.success(), "{}", text(&out));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let rolls = v["rolls"].as_u64().unwrap();
    assert!(rolls >= 3, "{v}");
    assert_eq!(
        v["housekeeping"]["compressed"], rolls,
        "every journal a roll closed: {v}"
    );
    assert_eq!(v["housekeeping"]["errors"], 0, "{v}");
    let ls = run(&["journal", "ls", hist, "--json"]);
    let l: serde_json::Value = serde_json::from_slice(&ls.stdout).unwrap();
    let journals = l["journals"].as_array().unwrap();
    let (last, closed) = journals.split_last().unwrap();
    assert!(closed.iter().all(|j| j["compressed"] == true), "{l}");
    assert_eq!(
        last["compressed"], false,
        "the journal the run ended in may go on: {l}"
    );
    // Read through the compressed frames: the same stream, verified.
    let (out, got) = replay(&dir.0, hist, 3000, &[]);
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(
        sequences(&got),
        (1..=3000).map(|s| (7, s)).collect::<Vec<_>>()
    );
    let verify = run(&["journal", "verify", hist]);
    assert!(verify.status.success(), "{}", text(&verify));
    // A second run of the same recording (a size roll: a new journal) compresses the one the first ended in.
    let out = record(
        &["--journal", hist, "--compress", "--quiet", "--json"],
        &[quote(7, 3001)],
    );
    assert!(out.status.success(), "{}", text(&out));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["housekeeping"]["compressed"], 1, "{v}");
}

#[test]
fn a_disk_that_fills_mid_run_stops_the_recorder_cleanly_with_its_summary_and_exit_12() {
    let dir = TempDir::new("cli-history-full");
    let journal = dir.0.join("full");
    let j = journal.to_str().unwrap();
    let ctx = zmq::Context::new();
    let publisher = ctx.socket(zmq::XPUB).unwrap();
    publisher.set_linger(0).unwrap();
    publisher.set_sndhwm(0).unwrap();
    let ep = tickbox_testkit::bind_loopback(&publisher);
    // A file size limit of 12 MiB (the shell's ulimit counts KiB), SIGXFSZ ignored so reaching it is an error
    // (EFBIG), not a kill: the disk "fills" inside the first 64 MiB segment, which grows 4 MiB at a time.
    let recorder = KillOnDrop(
        Command::new("sh")
            .arg("-c")
            .arg(format!(
                "trap '' XFSZ; ulimit -f 12288; exec {TICKBOX} record --connect {ep} --journal {j} \
                 --segment-size 64MiB --json --quiet"
            ))
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    publisher.set_rcvtimeo(10_000).unwrap();
    assert_eq!(publisher.recv_bytes(0).unwrap(), b"\x01", "recording");
    // More than 12 MiB of records; the recorder stops once it cannot grow the journal.
    const N: u64 = 150_000;
    for i in 1..=N {
        publisher.send(quote(7, i), 0).unwrap();
    }
    let out = recorder.wait_output(Duration::from_secs(20));
    assert_eq!(out.status.code(), Some(12), "{}", text(&out));
    let v: serde_json::Value =
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", text(&out)));
    assert!(
        v["disk_full"]
            .as_str()
            .is_some_and(|d| d.contains("File too large")),
        "{v}"
    );
    let recorded = v["messages"].as_u64().unwrap();
    assert!(recorded > 10_000 && recorded < N, "{v}");
    assert_eq!(v["missing"], 0, "{v}");
    // The journal is closed, verifies, and holds exactly the first records sent: nothing lost before the error.
    let verify = run(&["journal", "verify", j]);
    assert!(verify.status.success(), "{}", text(&verify));
    assert!(
        text(&verify).contains(&format!("verify        OK: {recorded} records")),
        "{}",
        text(&verify)
    );
    let mut r = tickbox_journal::Reader::open(&journal).unwrap();
    let mut k = 0;
    while let Some(rec) = r.next().unwrap() {
        k += 1;
        assert_eq!(
            MessageRef::decode(rec.payload).unwrap().header().sequence,
            k
        );
    }
    assert_eq!(k, recorded);
}

/// A late joiner catches up from the history service of a recorder rolling its history: every sequence once, in
/// order, history then live, across the journals the recorder rolled meanwhile.
#[test]
fn a_late_joiner_catches_up_across_the_journals_of_a_rolling_history() {
    use common::{
        endpoint_in, eventually, output_within, spawn_and_pick, spawn_feed_with_endpoints,
    };
    let dir = TempDir::new("cli-history-catch-up");
    let history = dir.0.join("hist");
    let hist = history.to_str().unwrap();
    let (_feed, endpoints) = spawn_feed_with_endpoints(
        &[
            "--bind",
            "tcp://127.0.0.1:*",
            "--rate",
            "5k",
            "--symbols",
            "40",
            "--duration",
            "5s",
            // Its summary as JSON on stdout, so the endpoint lines go to stderr where they are picked.
            "--json",
        ],
        1,
    );
    let feed = endpoints[0].clone();
    let (_recorder, service) = spawn_and_pick(
        &[
            "record",
            "--connect",
            &feed,
            "--journal",
            hist,
            "--roll",
            "64KiB",
            "--segment-size",
            "1MiB",
            "--serve",
            "tcp://127.0.0.1:*",
            "--duration",
            "30s",
        ],
        |line| {
            line.strip_prefix("record history service endpoint ")
                .and_then(endpoint_in)
        },
    );
    // Three journals or more before the late joiner comes.
    assert!(
        eventually(Duration::from_secs(15), Duration::from_millis(100), || {
            history.exists() && listed(&history).len() >= 3
        }),
        "the recorder did not roll"
    );
    let tape = dir.0.join("tape.ndjson");
    let mut subscribe = Command::new(TICKBOX);
    subscribe.args([
        "subscribe",
        "--connect",
        &feed,
        "--catch-up",
        &service,
        "--from",
        "start",
        "--max-lateness",
        "30s",
        "--idle-exit",
        "1500ms",
        "--json",
    ]);
    subscribe.arg("--tape").arg(&tape);
    let out = output_within(subscribe, Duration::from_secs(20));
    assert!(out.status.success(), "{}", text(&out));
    let summary: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let catch_up = &summary["catch_up"];
    assert_eq!(catch_up["outcome"]["status"], "complete", "{catch_up}");
    assert!(
        catch_up["history_records"].as_u64().unwrap() > 1000,
        "{catch_up}"
    );
    assert_eq!(summary["missing"], 0, "{summary}");
    assert_eq!(summary["duplicates"], 0, "{summary}");
    // The workers got publisher 1's sequences once each, without a hole, history then live.
    let mut seqs: Vec<u64> = std::fs::read_to_string(&tape)
        .unwrap()
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|v| v["kind"] == "quote" || v["kind"] == "trade")
        .filter_map(|v| v["sequence"].as_u64())
        .collect();
    let n = seqs.len();
    seqs.sort();
    seqs.dedup();
    assert_eq!(seqs.len(), n, "a sequence reached the workers twice");
    assert_eq!(
        seqs.last().unwrap() - seqs.first().unwrap() + 1,
        n as u64 + summary["recorded_gaps"].as_u64().unwrap_or(0),
        "{summary}"
    );
}
