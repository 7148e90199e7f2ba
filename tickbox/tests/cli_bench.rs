//! `tickbox bench` end to end: the real binary, tiny durations, and every report file checked by reading it back.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use common::{TempDir, TICKBOX};
use tickbox_bench::report::{parse_hgrm, read_hlog, read_jsonl, UNCORRECTED_TAG};
use tickbox_bench::BenchRecord;

fn tickbox(args: &[&str]) -> Output {
    let out = Command::new(TICKBOX)
        .args(args)
        .env("RUST_LOG", "warn")
        .output()
        .expect("run tickbox");
    eprintln!("stdout:\n{}", String::from_utf8_lossy(&out.stdout));
    eprintln!("stderr:\n{}", String::from_utf8_lossy(&out.stderr));
    out
}

fn files_with(dir: &Path, suffix: &str) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.to_string_lossy().ends_with(suffix))
        .collect();
    v.sort();
    v
}

#[test]
fn latency_writes_table_and_report_files_that_parse() {
    let dir = TempDir::new("cli-bench-latency");
    let out = tickbox(&[
        "bench",
        "latency",
        "--rate",
        "2k",
        "--transport",
        "inproc",
        "--duration",
        "300ms",
        "--warmup",
        "100ms",
        "--log-interval",
        "100ms",
        "--out",
        dir.0.to_str().unwrap(),
    ]);
    assert!(out.status.success());
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert!(stdout.contains("raw-pubsub-inproc-2k"), "{stdout}");
    assert!(stdout.contains("tickbox-inproc-2k"), "{stdout}");
    assert!(stdout.contains("p99.9") && stdout.contains("p99.99"));

    // Interval logs: round-trip through the hdrhistogram interval-log reader, corrected and uncorrected.
    let hlogs = files_with(&dir.0, ".hlog");
    assert_eq!(hlogs.len(), 2, "{hlogs:?}");
    for hlog in &hlogs {
        let entries = read_hlog(hlog).unwrap();
        assert!(
            entries.len() >= 4,
            "{}: {} entries",
            hlog.display(),
            entries.len()
        );
        let corrected: u64 = entries
            .iter()
            .filter(|e| e.tag.is_none())
            .map(|e| e.histogram.len())
            .sum();
        let uncorrected: u64 = entries
            .iter()
            .filter(|e| e.tag.as_deref() == Some(UNCORRECTED_TAG))
            .map(|e| e.histogram.len())
            .sum();
        assert_eq!(corrected, 600, "{}", hlog.display());
        assert_eq!(uncorrected, 600);
    }
    // Percentile distributions, corrected and uncorrected.
    let hgrms = files_with(&dir.0, ".hgrm");
    assert_eq!(hgrms.len(), 4, "{hgrms:?}");
    for hgrm in &hgrms {
        let parsed = parse_hgrm(&std::fs::read_to_string(hgrm).unwrap()).unwrap();
        assert_eq!(parsed.total_count, 600, "{}", hgrm.display());
        assert!(parsed.max_us > 0.0);
    }
    // Plot.
    let svgs = files_with(&dir.0, ".svg");
    assert_eq!(svgs.len(), 1);
    let svg = std::fs::read_to_string(&svgs[0]).unwrap();
    assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
    assert!(svg.contains("tickbox-inproc-2k") && svg.contains("raw-pubsub-inproc-2k"));
    let png = std::fs::read(svgs[0].with_extension("png")).unwrap();
    assert!(png.starts_with(b"\x89PNG\r\n\x1a\n"));
    // Results.
    let jsons = files_with(&dir.0, "-latency.json");
    let records = read_jsonl(&jsons[0]).unwrap();
    assert_eq!(records.len(), 2);
    for r in &records {
        let BenchRecord::Latency(r) = r else {
            panic!("{r:?}")
        };
        assert_eq!(r.rate, 2_000);
        assert_eq!(r.scheduled, 600);
        assert_eq!(r.received, 600);
        assert_eq!(r.size, 100);
        assert!(r.corrected.p50 <= r.corrected.p999 && r.corrected.p999 <= r.corrected.max);
    }
}

#[test]
fn throughput_runs_tickbox_beside_both_raw_baselines() {
    let dir = TempDir::new("cli-bench-throughput");
    let out = tickbox(&[
        "bench",
        "throughput",
        "--sizes",
        "100",
        "--shards",
        "1",
        "--duration",
        "200ms",
        "--warmup",
        "50ms",
        "--transport",
        "inproc",
        "--out",
        dir.0.to_str().unwrap(),
    ]);
    assert!(out.status.success());
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert!(
        stdout.contains("×pushpull") && stdout.contains("HWM 10000"),
        "{stdout}"
    );
    let jsons = files_with(&dir.0, "-throughput.json");
    let records = read_jsonl(&jsons[0]).unwrap();
    let systems: Vec<String> = records
        .iter()
        .map(|r| match r {
            BenchRecord::Throughput(t) => {
                assert!(t.messages > 0, "{t:?}");
                assert_eq!(t.size, 100);
                t.system.clone()
            }
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(systems, ["tickbox", "raw-pushpull", "raw-pubsub"]);
}

const BEFORE: &str = r#"{"kind":"throughput","system":"tickbox","transport":"tcp","size":100,"shards":1,"duration_s":3.0,"messages":3000000,"msgs_per_s":1000000.0,"mb_per_s":100.0,"send_hwm":10000,"recv_hwm":10000,"no_drop":true}
{"kind":"throughput","system":"raw-pushpull","transport":"tcp","size":100,"shards":1,"duration_s":3.0,"messages":6000000,"msgs_per_s":2000000.0,"mb_per_s":200.0,"send_hwm":10000,"recv_hwm":10000,"no_drop":true}
"#;
const AFTER: &str = r#"{"kind":"throughput","system":"tickbox","transport":"tcp","size":100,"shards":1,"duration_s":3.0,"messages":4500000,"msgs_per_s":1500000.0,"mb_per_s":150.0,"send_hwm":10000,"recv_hwm":10000,"no_drop":true}
{"kind":"throughput","system":"tickbox","transport":"tcp","size":256,"shards":1,"duration_s":3.0,"messages":3000000,"msgs_per_s":1000000.0,"mb_per_s":256.0,"send_hwm":10000,"recv_hwm":10000,"no_drop":true}
"#;

#[test]
fn compare_prints_deltas_and_unmatched_configurations() {
    let dir = TempDir::new("cli-bench-compare");
    let a = dir.0.join("a.json");
    let b = dir.0.join("b.json");
    std::fs::write(&a, BEFORE).unwrap();
    std::fs::write(&b, AFTER).unwrap();
    let out = tickbox(&["bench", "compare", a.to_str().unwrap(), b.to_str().unwrap()]);
    assert!(out.status.success());
    let stdout = String::from_utf8(out.stdout).unwrap();
    let row = stdout
        .lines()
        .find(|l| l.starts_with("throughput tickbox tcp size=100 shards=1"))
        .unwrap_or_else(|| panic!("{stdout}"));
    assert!(row.contains("1000000→1500000 +50.0%"), "{row}");
    assert!(row.contains("100.0→150.0 +50.0%"), "{row}");
    assert!(
        stdout.contains("only in first:  throughput raw-pushpull tcp size=100 shards=1"),
        "{stdout}"
    );
    assert!(
        stdout.contains("only in second: throughput tickbox tcp size=256 shards=1"),
        "{stdout}"
    );
}

#[test]
fn bad_input_is_a_clear_error() {
    let dir = TempDir::new("cli-bench-bad");
    let bad = dir.0.join("bad.json");
    std::fs::write(&bad, "{\"kind\":\"latency\"}\n").unwrap();
    let out = tickbox(&[
        "bench",
        "compare",
        bad.to_str().unwrap(),
        bad.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("bad.json:1"));

    let out = tickbox(&[
        "bench",
        "latency",
        "--transport",
        "udp",
        "--duration",
        "100ms",
    ]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown transport"));

    let out = tickbox(&["bench", "latency", "--rate", "lots"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("invalid rate \"lots\""));
}
