//! `tickbox replay --local`: a journal straight into the Black Box, no sockets. The summary counts what the journal
//! holds (records, its gap, per-worker counts, the skipped recorded heartbeat) and the multiple of real time; a
//! record that was late when it was recorded fires the snail (exit 3) at that record.

use crate::common;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use common::{output_within, TempDir, TICKBOX};
use tickbox_journal::{Writer, WriterOptions};
use tickbox_wire::{encode_to_vec, Header, Heartbeat, Kind, Quote, Trade};

const T0: u64 = 1_767_364_200_000_000_000;
const N: u64 = 2_000;
/// Left out of the journal: one gap of one sequence.
const MISSING: u64 = 100;

/// Publisher 1, sequences 1..=N but `MISSING`, one a millisecond of market time, recorded a microsecond after each
/// was sent except `late`, recorded 5 s after; one heartbeat in the middle.
fn journal(path: &Path, late: Option<u64>) {
    let mut w = Writer::open(path, &WriterOptions::ring(8 << 20)).unwrap();
    for seq in (1..=N).filter(|&s| s != MISSING) {
        let sent = T0 + seq * 1_000_000;
        let header = |kind| Header::live(kind, 1, seq, sent).with_session(T0);
        let frame = if seq % 4 == 0 {
            encode_to_vec(
                &format!("T.XNAS.S{}", seq % 13),
                &header(Kind::Trade),
                &Trade::default().into(),
            )
        } else {
            encode_to_vec(
                &format!("Q.XNAS.S{}", seq % 13),
                &header(Kind::Quote),
                &Quote::default().into(),
            )
        }
        .unwrap();
        let delay = if Some(seq) == late {
            5_000_000_000
        } else {
            1_000
        };
        w.append(sent + delay, &frame).unwrap();
        if seq == N / 2 {
            let hb = encode_to_vec(
                "H.1",
                &header(Kind::Heartbeat),
                &Heartbeat {
                    interval_ns: 1_000_000_000,
                    messages_sent: seq,
                }
                .into(),
            )
            .unwrap();
            w.append(sent + 1_000, &hb).unwrap();
        }
    }
    w.close().unwrap();
}

fn replay_local(path: &Path) -> (std::process::Output, serde_json::Value) {
    let mut cmd = Command::new(TICKBOX);
    cmd.args([
        "-q",
        "replay",
        "--journal",
        path.to_str().unwrap(),
        "--local",
        "--workers",
        "2",
        "--json",
    ]);
    let out = output_within(cmd, Duration::from_secs(20));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let json = serde_json::from_str(stdout.trim())
        .unwrap_or_else(|e| panic!("not one JSON object ({e}): {stdout}"));
    (out, json)
}

#[test]
fn a_journal_replays_locally_with_its_gap_and_per_worker_counts() {
    let dir = TempDir::new("replay-local");
    let path = dir.path().join("day.tbj");
    journal(&path, None);
    let (out, v) = replay_local(&path);
    assert!(
        out.status.success(),
        "exit {:?}: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let records = N - 1;
    assert_eq!(v["component"], "replay-local");
    assert_eq!(v["received"], records);
    assert_eq!(v["forwarded"], records);
    assert_eq!(v["processed"], records);
    assert_eq!(v["gaps"], 1);
    assert_eq!(v["missing"], 1);
    assert_eq!(v["skipped_heartbeats"], 1);
    assert_eq!(v["malformed"], 0);
    assert_eq!(v["batch_malformed"], 0);
    assert_eq!(v["handoff_dropped"], 0);
    let workers = v["workers"].as_array().unwrap();
    assert_eq!(workers.len(), 2);
    let per_worker: Vec<u64> = workers
        .iter()
        .map(|w| w["processed"].as_u64().unwrap())
        .collect();
    assert_eq!(per_worker.iter().sum::<u64>(), records);
    assert!(per_worker.iter().all(|&n| n > 0), "{per_worker:?}");
    assert!(v["records_per_sec"].as_u64().unwrap() > 0);
    // About 2 s of market time; any machine replays it faster than real time.
    assert!(v["real_time_multiple"].as_f64().unwrap() > 1.0, "{v}");
    assert_eq!(v["origin_first_ns"], T0 + 1_000_000);
    assert_eq!(v["origin_last_ns"], T0 + N * 1_000_000);
}

#[test]
fn a_record_late_when_recorded_fires_the_snail_at_that_record() {
    let dir = TempDir::new("replay-local-late");
    let path = dir.path().join("late.tbj");
    journal(&path, Some(777));
    let (out, v) = replay_local(&path);
    assert_eq!(
        out.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(v["fatal"]["reason"], "snail", "{v}");
    assert_eq!(v["fatal"]["sequence"], 777);
    assert!(String::from_utf8_lossy(&out.stderr).contains("SNAIL {"));
    assert!(v["processed"].as_u64().unwrap() < 777);
}
