//! `tickbox journal compress`: an imported journal (3,000 DBN MBO records) compressed in place gives
//! byte-identical `journal dump`, `export --format json|csv|dbn` and `replay --local` counts to the plain journal;
//! compressing again does nothing; a flipped byte in a compressed frame is damage that `verify` and `dump` report
//! (exit 5).

use crate::common;
use crate::journal_export;

use std::path::Path;
use std::process::{Command, Output};
use std::time::Duration;

use common::{output_within, TempDir, TICKBOX};

fn run(args: &[&str]) -> Output {
    output_within(
        {
            let mut c = Command::new(TICKBOX);
            c.args(args);
            c
        },
        Duration::from_secs(20),
    )
}

fn ok_stdout(o: &Output) -> String {
    assert!(
        o.status.success(),
        "exit {:?}, stderr: {}",
        o.status,
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8(o.stdout.clone()).unwrap()
}

/// What each reading command makes of the journal at `j`.
fn readings(j: &Path, dir: &TempDir, tag: &str) -> Vec<String> {
    let js = j.to_str().unwrap();
    let mut out = vec![
        ok_stdout(&run(&["journal", "dump", js, "--limit", "0"])),
        ok_stdout(&run(&["journal", "export", js, "--format", "json"])),
    ];
    // CSV is one file per kind: the directory's files, in name order.
    let csv = dir.path().join(format!("{tag}-csv"));
    ok_stdout(&run(&[
        "journal",
        "export",
        "--journal",
        js,
        "--format",
        "csv",
        "--out",
        csv.to_str().unwrap(),
    ]));
    let mut files: Vec<_> = std::fs::read_dir(&csv)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no CSV file in {}", csv.display());
    for f in files {
        out.push(format!(
            "{}: {}",
            f.file_name().unwrap().to_string_lossy(),
            std::fs::read_to_string(&f).unwrap()
        ));
    }
    let dbn = dir.path().join(format!("{tag}.dbn"));
    ok_stdout(&run(&[
        "journal",
        "export",
        js,
        "--format",
        "dbn",
        "--source",
        "0",
        "--out",
        dbn.to_str().unwrap(),
    ]));
    out.push(format!("{:?}", std::fs::read(&dbn).unwrap()));
    let local = ok_stdout(&run(&[
        "-q",
        "replay",
        "--journal",
        js,
        "--local",
        "--workers",
        "2",
        "--json",
    ]));
    let v: serde_json::Value = serde_json::from_str(local.trim()).unwrap();
    for field in [
        "received",
        "processed",
        "gaps",
        "missing",
        "malformed",
        "origin_first_ns",
        "origin_last_ns",
    ] {
        out.push(format!("{field} {}", v[field]));
    }
    out
}

#[test]
fn a_compressed_journal_reads_through_every_command_like_the_plain_one() {
    let dir = TempDir::new("journal-compress");
    let j = journal_export::journal(&dir, 0);
    let js = j.to_str().unwrap();
    let plain = readings(&j, &dir, "plain");
    let o = run(&["journal", "compress", js, "--json"]);
    let report: serde_json::Value = serde_json::from_str(ok_stdout(&o).trim()).unwrap();
    assert!(report["files"].as_u64().unwrap() >= 1, "{report}");
    assert_eq!(report["records"], 3_000);
    assert!(
        report["bytes_after"].as_u64() < report["bytes_before"].as_u64(),
        "{report}"
    );
    assert_eq!(readings(&j, &dir, "compressed"), plain);
    let verify = ok_stdout(&run(&["journal", "verify", js]));
    assert!(verify.contains("OK"), "{verify}");
    let again = ok_stdout(&run(&["journal", "compress", js]));
    assert!(
        again.starts_with("compressed 0 files") && again.contains("already compressed"),
        "{again}"
    );

    // A byte flipped inside the first compressed frame (past the header frame, whose length its bytes 4..8 give).
    let segment = tickbox_journal::segment_path(&j, 0);
    let bytes = std::fs::read(&segment).unwrap();
    let header = 8 + u32::from_le_bytes(bytes[4..8].try_into().unwrap()) as u64;
    tickbox_testkit::damage::invert_byte(&segment, header + 200);
    let v = run(&["journal", "verify", js]);
    assert_eq!(
        v.status.code(),
        Some(5),
        "{}",
        String::from_utf8_lossy(&v.stdout)
    );
    let d = run(&["journal", "dump", js, "--limit", "0"]);
    assert_eq!(d.status.code(), Some(5));
    assert!(String::from_utf8_lossy(&d.stdout).contains("CORRUPT"));
}
