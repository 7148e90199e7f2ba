//! `tickbox replay --topics/--from/--to/--tz`: every time form selects the records it names (by origin time),
//! topic prefixes select by topic with gap notices only when named, bad values are usage errors, and a selection
//! that matches nothing exits 9 saying what the journal holds.

use crate::common;

use std::path::Path;
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use common::{endpoint_in, forward_lines, output_within, KillOnDrop, TempDir, TICKBOX};
use tickbox_journal::{Writer, WriterOptions};
use tickbox_wire::{
    encode_to_vec, GapCause, GapNotice, Header, Heartbeat, Kind, MessageRef, Payload, Quote, Trade,
};

/// 2026-11-24T14:25:00Z: 09:25 in New York (EST).
const T0: u64 = 1_795_530_300_000_000_000;
const SEC: u64 = 1_000_000_000;
/// Data records, one per second of origin time from T0.
const N: u64 = 600;

/// Topic of data record `i`: even `Q.XNAS.AAPL`, `i % 4 == 1` `T.XNAS.MSFT`, `i % 4 == 3` `Q.XNYS.IBM`.
fn topic(i: u64) -> &'static str {
    match i % 4 {
        0 | 2 => "Q.XNAS.AAPL",
        1 => "T.XNAS.MSFT",
        _ => "Q.XNYS.IBM",
    }
}

/// A ring journal: data record `i` (instrument id `i`) has origin time T0 + i s and is captured 2 ms later; a
/// recorded heartbeat follows record 300 and a gap notice (`G.7`) follows record 400, each at that record's time.
fn journal(path: &Path) {
    let mut w = Writer::open(path, &WriterOptions::ring(4 << 20)).unwrap();
    let header = |kind, seq, origin| Header {
        origin_time_ns: origin,
        ..Header::live(kind, 7, seq, origin)
    };
    for i in 0..N {
        let origin = T0 + i * SEC;
        let t = topic(i);
        let frame = if t.starts_with("T.") {
            let trade = Trade {
                instrument_id: i as u32,
                trade_id: i,
                ..Trade::default()
            };
            encode_to_vec(t, &header(Kind::Trade, i + 1, origin), &trade.into())
        } else {
            let quote = Quote {
                instrument_id: i as u32,
                ..Quote::default()
            };
            encode_to_vec(t, &header(Kind::Quote, i + 1, origin), &quote.into())
        }
        .unwrap();
        w.append(origin + 2_000_000, &frame).unwrap();
        if i == 300 {
            let hb = Heartbeat {
                interval_ns: SEC,
                messages_sent: i + 1,
            };
            let frame =
                encode_to_vec("H.7", &header(Kind::Heartbeat, i + 1, origin), &hb.into()).unwrap();
            w.append(origin + 2_000_000, &frame).unwrap();
        }
        if i == 400 {
            let notice = GapNotice {
                first_missing: 1000,
                last_missing: 1001,
                detected_ns: origin,
                cause: GapCause::NotReceived,
            };
            let frame =
                encode_to_vec("G.7", &header(Kind::Gap, 1001, origin), &notice.into()).unwrap();
            w.append(origin + 2_000_000, &frame).unwrap();
        }
    }
}

/// What a replay run printed and what one subscriber received.
struct Run {
    status: ExitStatus,
    summary: serde_json::Value,
    stderr: String,
    /// (topic, instrument id or, for a gap notice, u64::MAX), data and gap notices in arrival order.
    got: Vec<(String, u64)>,
}

/// Replays the journal at max speed with `extra` flags into one SUB that subscribes to everything, and collects
/// what arrives until the replay has exited and every record its summary counts as sent has arrived.
fn replay(journal: &Path, extra: &[&str]) -> Run {
    let mut child = KillOnDrop(
        Command::new(TICKBOX)
            .args(["replay", "--journal", journal.to_str().unwrap()])
            .args(["--bind", "tcp://127.0.0.1:*", "--speed", "max", "--json"])
            .args(if extra.contains(&"--wait-for-subscribers") {
                &[][..]
            } else {
                &["--wait-for-subscribers", "1", "--wait-timeout", "10s"][..]
            })
            .args(extra)
            .env_remove("RUST_LOG")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let err_lines = forward_lines(child.0.stderr.take().unwrap());
    let out_lines = forward_lines(child.0.stdout.take().unwrap());
    let mut stderr = String::new();
    let endpoint = loop {
        let line = err_lines
            .recv_timeout(Duration::from_secs(10))
            .unwrap_or_else(|_| panic!("replay printed no endpoint; stderr:\n{stderr}"));
        stderr.push_str(&line);
        stderr.push('\n');
        if let Some(ep) = endpoint_in(&line) {
            break ep;
        }
    };
    let ctx = zmq::Context::new();
    let sub = ctx.socket(zmq::SUB).unwrap();
    sub.set_linger(0).unwrap();
    sub.set_rcvhwm(0).unwrap();
    sub.set_subscribe(b"").unwrap();
    sub.connect(&endpoint).unwrap();
    let mut got = Vec::new();
    let mut status = None;
    let mut summary = None;
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        while let Ok(frame) = sub.recv_bytes(zmq::DONTWAIT) {
            let m = MessageRef::decode(&frame).unwrap();
            let id = match m.payload().unwrap() {
                Payload::Quote(q) => u64::from(q.instrument_id),
                Payload::Trade(t) => u64::from(t.instrument_id),
                Payload::Gap(_) => u64::MAX,
                Payload::Heartbeat(_) => continue,
                other => panic!("unexpected {other:?}"),
            };
            got.push((m.topic().to_owned(), id));
        }
        if status.is_none() {
            status = child.0.try_wait().unwrap();
        }
        if summary.is_none() {
            if let Ok(line) = out_lines.try_recv() {
                summary = Some(serde_json::from_str::<serde_json::Value>(&line).unwrap());
            }
        }
        if let (Some(_), Some(s)) = (&status, &summary) {
            if got.len() as u64 >= s["sent"].as_u64().unwrap() {
                break;
            }
        }
        assert!(
            Instant::now() < deadline,
            "replay {extra:?}: exited {status:?}, summary {summary:?}, {} received",
            got.len()
        );
        let mut items = [sub.as_poll_item(zmq::POLLIN)];
        zmq::poll(&mut items, 20).unwrap();
    }
    while let Ok(line) = err_lines.recv_timeout(Duration::from_secs(2)) {
        stderr.push_str(&line);
        stderr.push('\n');
    }
    Run {
        status: status.unwrap(),
        summary: summary.unwrap(),
        stderr,
        got,
    }
}

fn ids(run: &Run) -> Vec<u64> {
    run.got.iter().map(|(_, id)| *id).collect()
}

/// Runs `tickbox ARGS` to completion (no subscriber involved).
fn tickbox(args: &[&str]) -> (Option<i32>, String, String) {
    let mut cmd = Command::new(TICKBOX);
    cmd.args(args).env_remove("RUST_LOG").stdin(Stdio::null());
    let out = output_within(cmd, Duration::from_secs(15));
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn a_time_of_day_in_a_zone_and_topic_prefixes_select_exactly_those_records() {
    let dir = TempDir::new("replay-sel-tod");
    let j = dir.0.join("j.tbj");
    journal(&j);
    let j = j.to_str().unwrap();
    // 09:30 .. 09:31 New York time is records 300..360; of those the Q.XNAS. ones are the even ones.
    let run = replay(
        Path::new(j),
        &[
            "--topics",
            "Q.XNAS.",
            "--from",
            "09:30",
            "--to",
            "09:31",
            "--tz",
            "America/New_York",
        ],
    );
    assert!(run.status.success(), "{}", run.stderr);
    assert_eq!(ids(&run), (300..360).step_by(2).collect::<Vec<_>>());
    assert!(run.got.iter().all(|(t, _)| t == "Q.XNAS.AAPL"));
    assert_eq!(run.summary["sent"], 30);
    // The replay seeks 5 s (the clock slack) before 09:30 by capture time and reads until 5 s past 09:31:
    // records 295..365, of which 40 are not selected; the recorded heartbeat is skipped as always, not counted.
    assert_eq!(run.summary["not_selected"], 40, "{}", run.summary);
    assert_eq!(run.summary["skipped_heartbeats"], 1);

    // A fraction of a second: 09:30:00.5 .. 09:30:03 is records 301 and 302.
    let run = replay(
        Path::new(j),
        &[
            "--from",
            "09:30:00.5",
            "--to",
            "09:30:03",
            "--tz",
            "America/New_York",
        ],
    );
    assert!(run.status.success(), "{}", run.stderr);
    assert_eq!(ids(&run), vec![301, 302]);
}

#[test]
fn rfc3339_local_date_times_and_ns_select_the_same_window() {
    let dir = TempDir::new("replay-sel-forms");
    let j = dir.0.join("j.tbj");
    journal(&j);
    let ten = (300..310).collect::<Vec<_>>();
    let t300 = (T0 + 300 * SEC).to_string();
    let t310 = (T0 + 310 * SEC).to_string();
    for (from, to, tz) in [
        ("2026-11-24T14:30:00Z", "2026-11-24T14:30:10Z", "UTC"),
        (
            "2026-11-24T09:30:00-05:00",
            "2026-11-24T15:30:10+01:00",
            "UTC",
        ),
        (
            "2026-11-24 09:30:00",
            "2026-11-24T09:30:10",
            "America/New_York",
        ),
        ("2026-11-24 14:30:00", "2026-11-24 14:30:10", "UTC"),
        (t300.as_str(), t310.as_str(), "Asia/Tokyo"),
        ("+300s", "+310s", "UTC"),
    ] {
        let run = replay(&j, &["--from", from, "--to", to, "--tz", tz]);
        assert!(run.status.success(), "{from} {to}: {}", run.stderr);
        assert_eq!(ids(&run), ten, "--from {from} --to {to} --tz {tz}");
        assert_eq!(run.summary["sent"], 10);
    }
}

#[test]
fn gap_notices_follow_the_window_and_go_out_under_topics_only_when_named() {
    let dir = TempDir::new("replay-sel-gaps");
    let j = dir.0.join("j.tbj");
    journal(&j);
    // Records 395..405 hold the trades 397 and 401 and, after 400, the gap notice.
    let window = ["--from", "+395s", "--to", "+405s"];
    let run = replay(&j, &[&window[..], &["--topics", "T.,G."]].concat());
    assert!(run.status.success(), "{}", run.stderr);
    assert_eq!(ids(&run), vec![397, u64::MAX, 401]);
    assert_eq!(run.summary["gap_notices"], 1);
    let run = replay(&j, &[&window[..], &["--topics", "T."]].concat());
    assert_eq!(
        ids(&run),
        vec![397, 401],
        "a topic subset leaves gap notices out"
    );
    assert_eq!(run.summary["gap_notices"], 0);
    // Without --topics the window alone carries the notice.
    let run = replay(&j, &window);
    assert_eq!(run.summary["sent"], 11);
    assert_eq!(run.summary["gap_notices"], 1);
}

const HOLDS: &str = "the journal holds 602 records with origin times";

#[test]
fn an_empty_selection_exits_9_saying_what_the_journal_holds() {
    let dir = TempDir::new("replay-sel-empty");
    let j = dir.0.join("j.tbj");
    journal(&j);
    let j = j.to_str().unwrap();
    let base = ["replay", "--journal", j, "--bind", "tcp://127.0.0.1:*"];
    // A window after the journal is known before binding or waiting for a subscriber.
    let (code, _, err) =
        tickbox(&[&base[..], &["--from", "10:00", "--tz", "America/New_York"]].concat());
    assert_eq!(code, Some(9), "{err}");
    assert_eq!(
        err.lines().last().unwrap(),
        format!(
            "error: replay selected no record (from 2026-11-24 10:00:00.000 EST): {HOLDS} \
             2026-11-24 09:25:00.000 EST .. 2026-11-24 09:34:59.000 EST; topic prefixes: G. (1), Q. (450), \
             T. (150); e.g. Q.XNAS.AAPL, T.XNAS.MSFT, Q.XNYS.IBM, G.7"
        )
    );
    let (code, _, err) = tickbox(&[&base[..], &["--to", "2026-11-24T14:00:00Z"]].concat());
    assert_eq!(code, Some(9), "{err}");
    assert!(
        err.contains(&format!(
            "(to 2026-11-24 14:00:00.000 UTC): {HOLDS} 2026-11-24 14:25:00.000 UTC .. 2026-11-24 14:34:59.000 UTC;"
        )),
        "{err}"
    );

    // A topic nobody published, and a sequence range past the end: found out by running; the summary still
    // prints (everything read was not selected) and the exit code says nothing was.
    let run = replay(
        Path::new(j),
        &["--topics", "X.,Q.XLON.", "--wait-for-subscribers", "0"],
    );
    assert_eq!(run.status.code(), Some(9), "{}", run.stderr);
    assert_eq!(run.summary["sent"], 0);
    assert_eq!(run.summary["not_selected"], 601);
    assert!(
        run.stderr.contains(
            "error: replay selected no record (topics X.,Q.XLON.): the journal holds 602 records"
        ),
        "{}",
        run.stderr
    );
    let run = replay(
        Path::new(j),
        &["--from-seq", "5000", "--wait-for-subscribers", "0"],
    );
    assert_eq!(run.status.code(), Some(9), "{}", run.stderr);
    assert!(
        run.stderr.contains(
            "error: replay selected no record (journal seqs 5000 .. end): the journal holds 602 records"
        ),
        "{}",
        run.stderr
    );
}

#[test]
fn bad_times_and_zones_are_usage_errors_naming_the_forms() {
    let dir = TempDir::new("replay-sel-bad");
    let j = dir.0.join("j.tbj");
    journal(&j);
    let j = j.to_str().unwrap();
    let base = ["replay", "--journal", j, "--bind", "tcp://127.0.0.1:*"];
    let (code, _, err) = tickbox(&[&base[..], &["--from", "09:3x"]].concat());
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("invalid value '09:3x' for '--from <TIME>': \"09:3x\" is not a time: "),
        "{err}"
    );
    let (code, _, err) = tickbox(&[&base[..], &["--to", "noon"]].concat());
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains(
            "\"noon\" is not a time: use RFC 3339 (2026-11-24T14:30:00Z, 2026-11-24T09:30:00-05:00), a local \
             date-time (2026-11-24 09:30:00) or a time of day (09:30, 09:30:00.5) in --tz, ns since the epoch, \
             or +DURATION after the first record"
        ),
        "{err}"
    );
    let (code, _, err) = tickbox(&[&base[..], &["--tz", "Mars/Olympus"]].concat());
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains(
            "\"Mars/Olympus\" is not a time zone: use an IANA name such as America/New_York"
        ),
        "{err}"
    );
    let (code, _, err) = tickbox(
        &[
            &base[..],
            &[
                "--from",
                "09:31",
                "--to",
                "09:30",
                "--tz",
                "America/New_York",
            ],
        ]
        .concat(),
    );
    assert_eq!(code, Some(1), "{err}");
    assert_eq!(
        err.trim_end(),
        "error: empty range: --from 2026-11-24 09:31:00.000 EST is not before --to 2026-11-24 09:30:00.000 EST"
    );
}
