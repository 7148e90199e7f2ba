//! `tickbox record` accounts for every publisher sequence (gap notices, tap events, duplicates, per-publisher
//! ledger, `--json`), `journal info`/`verify` report it (GAPPY, `--strict` exit 6), and a ring that laps says so
//! and counts what it overwrote. Real processes.

use crate::common;

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::{Background, TempDir, TICKBOX};
use tickbox_journal::{Writer, WriterOptions};
use tickbox_wire::{encode_to_vec, Header, Heartbeat, Kind, MessageRef};

const SESSION: u64 = 1_767_000_000_000_000_007;

fn quote(publisher: u32, seq: u64) -> Vec<u8> {
    tickbox_testkit::quote(&format!("Q.XNAS.P{publisher}S{}", seq % 4), publisher, seq)
        .session(SESSION)
        .instrument(seq as u32)
        .frame()
}

fn heartbeat(publisher: u32, seq: u64) -> Vec<u8> {
    let hb = Heartbeat {
        interval_ns: 1,
        messages_sent: seq,
    };
    encode_to_vec(
        &format!("H.{publisher}"),
        &Header::live(Kind::Heartbeat, publisher, seq, seq).with_session(SESSION),
        &hb.into(),
    )
    .unwrap()
}

fn json_of(o: &Output) -> serde_json::Value {
    let text = String::from_utf8_lossy(&o.stdout);
    let line = text
        .lines()
        .find(|l| l.starts_with('{'))
        .unwrap_or_else(|| panic!("no JSON in {o:?}"));
    serde_json::from_str(line).unwrap()
}

/// `journal info --json` of `journal`, which must succeed.
fn journal_info(journal: &Path) -> serde_json::Value {
    let o = tickbox(&[
        "journal",
        "info",
        "--journal",
        journal.to_str().unwrap(),
        "--json",
    ]);
    assert!(o.status.success(), "{o:?}");
    json_of(&o)
}

fn tickbox(args: &[&str]) -> Output {
    let mut cmd = Command::new(TICKBOX);
    cmd.args(args).stdin(Stdio::null());
    common::output_within(cmd, Duration::from_secs(20))
}

/// A publisher socket the recorder connects to; returns it once the recorder has subscribed.
fn publisher(ctx: &zmq::Context) -> (zmq::Socket, String) {
    let p = ctx.socket(zmq::XPUB).unwrap();
    p.set_linger(1000).unwrap();
    p.set_sndhwm(0).unwrap();
    let ep = tickbox_testkit::bind_loopback(&p);
    (p, ep)
}

fn record(journal: &Path, ep: &str, max: u64, extra: &[&str]) -> Background {
    let mut cmd = Command::new(TICKBOX);
    cmd.args([
        "record",
        "--connect",
        ep,
        "--journal",
        journal.to_str().unwrap(),
        "--max-messages",
        &max.to_string(),
        "--duration",
        "15s",
        "--quiet",
        "--json",
    ])
    .args(extra)
    .stdin(Stdio::null());
    Background::spawn(cmd)
}

#[test]
fn record_counts_gaps_per_publisher_and_journal_info_verify_agree() {
    let dir = TempDir::new("cli-record-acct");
    let journal = dir.0.join("day"); // an archive: the default
    let ctx = zmq::Context::new();
    let (p, ep) = publisher(&ctx);
    // From the stream, appended: 90 + 50 quotes and one heartbeat.
    let mut rec = record(&journal, &ep, 141, &["--segment-size", "1MiB"]);
    assert_eq!(
        rec.await_subscription(&p, Duration::from_secs(15)),
        b"\x01",
        "recorder subscribed"
    );
    p.send(&b"\x00\x01Q.XNAS"[..], 0).unwrap(); // a tap subscription event
    p.send(&b"not a frame"[..], 0).unwrap();
    for seq in 1..=100 {
        if !(40..=49).contains(&seq) {
            p.send(quote(1, seq), 0).unwrap();
        }
        if seq <= 50 {
            p.send(quote(2, seq), 0).unwrap();
        }
    }
    p.send(quote(2, 50), 0).unwrap(); // a duplicate
    p.send(heartbeat(2, 52), 0).unwrap(); // 51..=52 never arrived: a trailing loss
    let out = rec.finish(Duration::from_secs(20));
    assert!(out.status.success(), "{out:?}");
    let v = json_of(&out);
    for (key, want) in [
        ("recorded", 140),
        ("missing", 12),
        ("overwritten", 0),
        ("gap_events", 2),
        ("invalid", 1),
        ("tap_events", 1),
        ("duplicates", 1),
        ("restarts", 0),
        ("anomalies", 0),
        ("heartbeats", 1),
    ] {
        assert_eq!(v[key].as_u64(), Some(want), "{key}: {v}");
    }
    assert_eq!(v["mode"], "archive", "{v}");
    // How often the recording thread reserved the archive's disk itself is reported; how often depends on the
    // machine's timing, so only that it is there.
    assert!(v["reserve_stalls"].is_u64(), "{v}");
    let rows = v["publishers"].as_array().unwrap();
    let row = |p: u64| rows.iter().find(|r| r["publisher"] == p).unwrap().clone();
    assert_eq!(
        (row(1)["recorded"].as_u64(), row(1)["missing"].as_u64()),
        (Some(90), Some(10))
    );
    assert_eq!(
        (row(2)["recorded"].as_u64(), row(2)["missing"].as_u64()),
        (Some(50), Some(2))
    );
    assert!(
        std::path::Path::new(&journal).is_dir(),
        "archive by default"
    );

    // journal info: the same figures, per publisher too.
    let info = journal_info(&journal);
    for (key, want) in [
        ("records", 143),
        ("recorded", 140),
        ("missing", 12),
        ("overwritten", 0),
        ("gap_records", 2),
        ("data_records", 140),
    ] {
        assert_eq!(info[key].as_u64(), Some(want), "{key}: {info}");
    }
    let rows = info["publishers"].as_array().unwrap();
    let row = |p: u64| rows.iter().find(|r| r["publisher"] == p).unwrap().clone();
    assert_eq!(
        (
            row(1)["recorded"].as_u64(),
            row(1)["missing"].as_u64(),
            row(1)["gap_records"].as_u64()
        ),
        (Some(90), Some(10), Some(1))
    );
    assert_eq!(
        (
            row(2)["recorded"].as_u64(),
            row(2)["missing"].as_u64(),
            row(2)["gap_records"].as_u64()
        ),
        (Some(50), Some(2), Some(1))
    );
    let o = tickbox(&["journal", "info", "--journal", journal.to_str().unwrap()]);
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(
        text.contains("recorded 140, missing 12 (2 gap records"),
        "{text}"
    );

    // verify: intact but gappy; --strict makes that exit 6.
    let o = tickbox(&["journal", "verify", "--journal", journal.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{o:?}");
    assert!(
        String::from_utf8_lossy(&o.stdout).contains("verify        GAPPY: 143 records intact"),
        "{o:?}"
    );
    let o = tickbox(&[
        "journal",
        "verify",
        "--journal",
        journal.to_str().unwrap(),
        "--strict",
    ]);
    assert_eq!(o.status.code(), Some(6), "{o:?}");
    let o = tickbox(&[
        "journal",
        "verify",
        "--journal",
        journal.to_str().unwrap(),
        "--strict",
        "--json",
    ]);
    assert_eq!(o.status.code(), Some(6), "{o:?}");
    assert_eq!(json_of(&o)["verdict"], "gappy");

    // A complete journal passes --strict.
    let clean = dir.0.join("clean.tbj");
    {
        let mut w = Writer::open(&clean, &WriterOptions::ring(1 << 20)).unwrap();
        for seq in 1..=20 {
            w.append(seq, &quote(3, seq)).unwrap();
        }
    }
    let o = tickbox(&[
        "journal",
        "verify",
        "--journal",
        clean.to_str().unwrap(),
        "--strict",
    ]);
    assert_eq!(o.status.code(), Some(0), "{o:?}");
    assert!(
        String::from_utf8_lossy(&o.stdout).contains("verify        OK: 20 records"),
        "{o:?}"
    );
}

#[test]
fn a_lapped_ring_counts_what_it_overwrote_and_replay_starts_at_the_oldest_kept() {
    let dir = TempDir::new("cli-record-lap");
    let journal = dir.0.join("ring.tbj");
    let ctx = zmq::Context::new();
    let (p, ep) = publisher(&ctx);
    const N: u64 = 3_000; // ~128 bytes each: about six laps of a 64 KiB ring
    let mut rec = record(&journal, &ep, N, &["--ring", "--capacity", "64k"]);
    assert_eq!(
        rec.await_subscription(&p, Duration::from_secs(15)),
        b"\x01",
        "recorder subscribed"
    );
    for seq in 1..=N {
        p.send(quote(1, seq), 0).unwrap();
    }
    let out = rec.finish(Duration::from_secs(20));
    assert!(out.status.success(), "{out:?}");
    let v = json_of(&out);
    let overwritten = v["overwritten"].as_u64().unwrap();
    assert_eq!(v["recorded"], N, "{v}");
    assert_eq!(v["mode"], "ring", "{v}");
    // A ring is allocated whole: nothing to reserve while recording.
    assert_eq!(v["reserve_stalls"].as_u64(), Some(0), "{v}");
    assert!(overwritten > N / 2, "{v}");
    assert!(v["laps"].as_u64().unwrap() >= 1, "{v}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("overwriting unread history"),
        "a loud warning: {err}"
    );

    let info = journal_info(&journal);
    assert_eq!(info["overwritten"], overwritten, "{info}");
    // The recorder's ledger is stored in the journal and attributes every overwritten record to its publisher.
    assert_eq!(info["ledger"], "recorder", "{info}");
    assert_eq!(info["publishers"][0]["publisher"], 1, "{info}");
    assert_eq!(info["publishers"][0]["overwritten"], overwritten, "{info}");
    assert!(info["laps"].as_u64().unwrap() >= 1, "{info}");
    let kept = info["records"].as_u64().unwrap();
    assert_eq!(
        kept + overwritten,
        N,
        "every record kept or counted overwritten: {info}"
    );
    let first = info["first_seq"].as_u64().unwrap();
    assert_eq!(first, overwritten + 1, "{info}");
    let o = tickbox(&[
        "journal",
        "verify",
        "--journal",
        journal.to_str().unwrap(),
        "--strict",
    ]);
    assert_eq!(
        o.status.code(),
        Some(6),
        "overwritten records make it incomplete: {o:?}"
    );

    // Replay from the oldest kept record: the first message is publisher sequence `first`.
    let rep_ep = format!("ipc://{}/ring.sock", dir.0.display());
    let mut cmd = Command::new(TICKBOX);
    cmd.args([
        "replay",
        "--journal",
        journal.to_str().unwrap(),
        "--bind",
        &rep_ep,
        "--speed",
        "max",
        "--quiet",
    ]);
    let replay = Background::spawn(cmd);
    let s = ctx.socket(zmq::SUB).unwrap();
    s.set_linger(0).unwrap();
    s.set_subscribe(b"Q.").unwrap();
    s.connect(&rep_ep).unwrap();
    let mut got = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    while (got.len() as u64) < kept && Instant::now() < deadline {
        if s.poll(zmq::POLLIN, 50).unwrap() > 0 {
            let f = s.recv_bytes(0).unwrap();
            got.push(MessageRef::decode(&f).unwrap().header().sequence);
        }
    }
    assert_eq!(got, (first..=N).collect::<Vec<_>>());
    assert!(replay.finish(Duration::from_secs(10)).status.success());
}
