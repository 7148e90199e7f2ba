//! `tickbox journal verify` on a ring whose header pointers took a flipped bit: it says what happened (exit 5, the
//! damage named) and every intact record is either read or reported, never dropped silently.

use crate::common;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use common::{output_within, TempDir, TICKBOX};
use tickbox_journal::{Writer, WriterOptions, MIN_CAPACITY};

const RECORDS: u64 = 4_000;

fn ring(path: &Path) {
    let mut w = Writer::open(path, &WriterOptions::ring(MIN_CAPACITY)).unwrap();
    for i in 0..RECORDS {
        w.append(1_000 + i, &[i as u8; 40]).unwrap();
    }
}

use tickbox_testkit::damage::flip_bit as flip;

fn verify(path: &Path) -> (Option<i32>, serde_json::Value) {
    let mut cmd = Command::new(TICKBOX);
    cmd.args([
        "journal",
        "verify",
        "--journal",
        path.to_str().unwrap(),
        "--json",
    ]);
    let out = output_within(cmd, Duration::from_secs(20));
    let text = String::from_utf8_lossy(&out.stdout);
    (
        out.status.code(),
        serde_json::from_str(text.trim()).expect("one JSON object"),
    )
}

#[test]
fn flipped_bits_in_head_and_tail_are_reported_and_nothing_intact_is_lost() {
    let dir = TempDir::new("journal-metadata");
    let clean = dir.path().join("clean.tbj");
    ring(&clean);
    let (code, report) = verify(&clean);
    assert_eq!(code, Some(0), "{report}");
    let held = report["records"].as_u64().unwrap();
    assert!(held < RECORDS, "the ring lapped: {report}");

    // tail: byte offset 576 of the header; head: 512.
    for (name, offset, bit) in [("tail", 576u64, 4u32), ("head", 512, 10)] {
        let path = dir.path().join(format!("{name}.tbj"));
        std::fs::copy(&clean, &path).unwrap();
        flip(&path, offset, bit);
        let (code, report) = verify(&path);
        assert_eq!(
            code,
            Some(5),
            "{name}: damaged metadata is corruption: {report}"
        );
        assert_eq!(report["verdict"], "corrupt", "{report}");
        let repairs = report["metadata_repairs"].as_array().unwrap();
        assert!(
            repairs.iter().any(|r| r.as_str().unwrap().contains(name)),
            "{name}: the damage is named: {report}"
        );
        assert_eq!(
            report["records"].as_u64().unwrap() + report["records_beyond_head"].as_u64().unwrap(),
            held,
            "{name}: every intact record read or reported: {report}"
        );
    }
}
