//! `tickbox bench` end to end: the real binary, tiny durations, and every report file checked by reading it back.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use common::{TempDir, TICKBOX};
use tickbox_bench::report::{parse_hgrm, read_hlog, read_results, UNCORRECTED_TAG};
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

/// The width and height a PNG's IHDR chunk declares (bytes 16..24, big-endian), after checking the signature.
fn png_size(path: &Path) -> (u32, u32) {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    assert!(
        bytes.starts_with(b"\x89PNG\r\n\x1a\n"),
        "{} is not a PNG",
        path.display()
    );
    assert_eq!(&bytes[12..16], b"IHDR");
    let be = |at: usize| u32::from_be_bytes(bytes[at..at + 4].try_into().unwrap());
    (be(16), be(20))
}

/// Every result document carries the machine it ran on and a warnings list.
fn check_environment(doc: &serde_json::Value) {
    let env = &doc["environment"];
    for key in [
        "hostname",
        "cpu_model",
        "kernel",
        "tickbox_version",
        "timestamp",
    ] {
        assert!(
            env[key].as_str().is_some_and(|s| !s.is_empty()),
            "{key}: {env}"
        );
    }
    assert!(env["cores"].as_u64().unwrap() >= 1);
    for key in ["load_average_start", "load_average_end"] {
        assert!(env[key]["one"].as_f64().is_some(), "{key}: {env}");
        assert!(env[key]["fifteen"].as_f64().is_some(), "{key}: {env}");
    }
    assert!(doc["warnings"].is_array(), "{doc}");
}

fn read_doc(path: &Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

#[test]
fn latency_repeats_write_table_and_report_files_that_parse() {
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
        "--repeats",
        "2",
        "--out",
        dir.0.to_str().unwrap(),
    ]);
    assert!(out.status.success());
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert!(stdout.contains("inproc 2k msg/s"), "{stdout}");
    assert!(stdout.contains("2 repeat(s), order T R R T"), "{stdout}");
    assert!(stdout.contains("tickbox median (min–max)"), "{stdout}");
    for figure in ["p50 µs", "p99.9 µs", "p99.99 µs", "achieved msg/s", "lost"] {
        assert!(
            stdout.lines().any(|l| l.trim_start().starts_with(figure)),
            "{figure}: {stdout}"
        );
    }
    assert!(
        stdout.contains("host ") && stdout.contains("core(s)"),
        "{stdout}"
    );

    // Interval logs, one per system and repeat: round-trip through the hdrhistogram reader.
    let hlogs = files_with(&dir.0, ".hlog");
    assert_eq!(hlogs.len(), 4, "{hlogs:?}");
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
    for stem in [
        "tickbox-inproc-2k-r1",
        "tickbox-inproc-2k-r2",
        "raw-pubsub-inproc-2k-r1",
    ] {
        assert!(
            hlogs
                .iter()
                .any(|p| p.to_string_lossy().ends_with(&format!("{stem}.hlog"))),
            "{stem}: {hlogs:?}"
        );
    }
    // Percentile distributions, corrected and uncorrected, each stating its unit.
    let hgrms = files_with(&dir.0, ".hgrm");
    assert_eq!(hgrms.len(), 8, "{hgrms:?}");
    for hgrm in &hgrms {
        let text = std::fs::read_to_string(hgrm).unwrap();
        assert!(
            text.lines().next().unwrap().contains("microseconds"),
            "{}",
            hgrm.display()
        );
        let parsed = parse_hgrm(&text).unwrap();
        assert_eq!(parsed.total_count, 600, "{}", hgrm.display());
        assert!(parsed.max_us > 0.0);
    }
    // Plot: SVG and a PNG of the plot size.
    let svgs = files_with(&dir.0, ".svg");
    assert_eq!(svgs.len(), 1);
    let svg = std::fs::read_to_string(&svgs[0]).unwrap();
    assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
    assert!(svg.contains("tickbox-inproc-2k") && svg.contains("raw-pubsub-inproc-2k"));
    assert_eq!(
        png_size(&svgs[0].with_extension("png")),
        tickbox_bench::plot::PLOT_SIZE
    );
    // Result document: every repeat, the summary, the environment.
    let jsons = files_with(&dir.0, "-latency.json");
    let doc = read_doc(&jsons[0]);
    check_environment(&doc);
    assert_eq!(doc["bench"], "latency");
    assert_eq!(doc["repeats"], 2);
    let records = read_results(&jsons[0]).unwrap();
    assert_eq!(records.len(), 4);
    let mut repeats = Vec::new();
    for r in &records {
        let BenchRecord::Latency(r) = r else {
            panic!("{r:?}")
        };
        assert_eq!(r.rate, 2_000);
        assert_eq!(r.scheduled, 600);
        assert_eq!(r.received, 600);
        assert_eq!(r.size, 100);
        assert!(r.corrected.p50 <= r.corrected.p999 && r.corrected.p999 <= r.corrected.max);
        repeats.push((r.system.clone(), r.repeat));
    }
    // Alternating: tickbox first in repeat 1, the baseline first in repeat 2.
    assert_eq!(
        repeats,
        [
            ("tickbox".to_string(), 1),
            ("raw-pubsub".to_string(), 1),
            ("raw-pubsub".to_string(), 2),
            ("tickbox".to_string(), 2)
        ]
    );
    let summary = doc["summary"].as_array().unwrap();
    let p50 = summary.iter().find(|s| s["figure"] == "p50 µs").unwrap();
    assert_eq!(p50["tickbox"]["n"], 2);
    assert!(p50["ratio"]["of_medians"].as_f64().unwrap() > 0.0, "{p50}");
}

/// `--shape processes`: a real `tickbox feed` process and `tickbox subscribe` process beside a raw PUB process
/// and SUB process, every scheduled message received by both, sane percentiles, one table, and quick.
#[test]
fn latency_processes_shape_runs_feed_and_subscribe_processes_beside_raw_ones() {
    let dir = TempDir::new("bench-proc");
    let started = std::time::Instant::now();
    let out = tickbox(&[
        "bench",
        "latency",
        "--shape",
        "processes",
        "--rate",
        "2k",
        "--duration",
        "300ms",
        "--warmup",
        "200ms",
        "--log-interval",
        "100ms",
        "--repeats",
        "1",
        "--out",
        dir.0.to_str().unwrap(),
    ]);
    let took = started.elapsed();
    assert!(
        out.status.success(),
        "bench latency --shape processes failed"
    );
    assert!(took < std::time::Duration::from_secs(20), "took {took:?}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("shape: processes"), "{stdout}");
    assert!(
        stdout.contains("tickbox feed → tickbox subscribe"),
        "{stdout}"
    );
    let jsons = files_with(&dir.0, "-latency.json");
    assert_eq!(jsons.len(), 1);
    let records = read_results(&jsons[0]).unwrap();
    let mut systems = Vec::new();
    for r in &records {
        let BenchRecord::Latency(r) = r else {
            panic!("{r:?}")
        };
        assert_eq!(r.shape, tickbox_bench::Shape::Processes, "{r:?}");
        assert_eq!(r.scheduled, 600, "{r:?}");
        assert_eq!(
            (r.received, r.lost),
            (600, 0),
            "{} lost messages: {r:?}",
            r.system
        );
        for p in [r.corrected, r.uncorrected] {
            assert!(
                p.p50 > 0 && p.p50 <= p.p99 && p.p99 <= p.max,
                "{}: {p:?}",
                r.system
            );
            assert_eq!(p.count, 600);
        }
        // Charged from the intended time, a message is never earlier than from its actual send stamp.
        assert!(r.corrected.max >= r.uncorrected.max, "{r:?}");
        assert!(r.files.contains("-tcp-proc-2k-r1"), "{r:?}");
        systems.push(r.system.clone());
    }
    assert_eq!(systems, ["tickbox", "raw-pubsub"]);
    assert_eq!(files_with(&dir.0, ".hgrm").len(), 4);
}

#[test]
fn latency_processes_shape_refuses_what_it_cannot_run() {
    for extra in [["--transport", "inproc"], ["--via-lvc", "--no-raw"]] {
        let mut args = vec![
            "bench",
            "latency",
            "--shape",
            "processes",
            "--duration",
            "100ms",
        ];
        args.extend(extra);
        let out = tickbox(&args);
        assert!(!out.status.success(), "{extra:?}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains("--shape processes"), "{stderr}");
    }
}

#[test]
fn throughput_repeats_tickbox_beside_both_raw_baselines_and_plots_them() {
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
        // Long enough for every receiver to join even on a loaded machine: only the measured window counts.
        "--warmup",
        "300ms",
        "--transport",
        "inproc",
        "--repeats",
        "2",
        "--out",
        dir.0.to_str().unwrap(),
    ]);
    assert!(out.status.success());
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert!(
        stdout.contains("×pushpull") && stdout.contains("×pubsub") && stdout.contains("HWM 10000"),
        "{stdout}"
    );
    let jsons = files_with(&dir.0, "-throughput.json");
    let doc = read_doc(&jsons[0]);
    check_environment(&doc);
    assert_eq!(doc["order"], "T R R T");
    let records = read_results(&jsons[0]).unwrap();
    let systems: Vec<(String, u32)> = records
        .iter()
        .map(|r| match r {
            BenchRecord::Throughput(t) => {
                assert!(t.messages > 0, "{t:?}");
                assert_eq!(t.size, 100);
                (t.system.clone(), t.repeat)
            }
            other => panic!("{other:?}"),
        })
        .collect();
    let names: Vec<&str> = systems.iter().map(|(s, _)| s.as_str()).collect();
    assert_eq!(
        names,
        [
            "tickbox-batched",
            "tickbox",
            "raw-pushpull",
            "raw-pubsub",
            "raw-pushpull-batched",
            "raw-pubsub-batched",
            "raw-pushpull-batched",
            "raw-pubsub-batched",
            "raw-pushpull",
            "raw-pubsub",
            "tickbox",
            "tickbox-batched"
        ]
    );
    assert_eq!(systems[6].1, 2);
    // Like with like: the batched raw baselines send the feed's batch of 100 B messages per ZeroMQ message and
    // count each message inside.
    let per_batch = tickbox_bench::records_per_batch(100) as u64;
    assert_eq!(per_batch, 64);
    for r in &records {
        if let BenchRecord::Throughput(t) = r {
            if t.system.ends_with("-batched") && t.system.starts_with("raw") {
                assert_eq!(t.messages % per_batch, 0, "{t:?}");
            }
        }
    }
    // The headline is the batched configuration, against the batched baselines; the single-frame rows stay.
    let figures: Vec<&str> = doc["summary"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["figure"].as_str().unwrap())
        .collect();
    assert_eq!(figures[0], "batched msg/s ×pushpull batched", "{figures:?}");
    assert!(figures.contains(&"msg/s ×pubsub"), "{figures:?}");
    assert!(
        !figures.contains(&"batched msg/s ×pubsub"),
        "no batched figure against an unbatched baseline: {figures:?}"
    );
    assert!(stdout.contains("batched msg/s ×pubsub batched"), "{stdout}");
    // The throughput plot, PNG and SVG.
    let pngs = files_with(&dir.0, "-throughput.png");
    assert_eq!(pngs.len(), 1, "{pngs:?}");
    assert_eq!(png_size(&pngs[0]), tickbox_bench::plot::PLOT_SIZE);
    let svg = std::fs::read_to_string(pngs[0].with_extension("svg")).unwrap();
    assert!(svg.contains("push/pull") && svg.contains("msg/s"), "{svg}");
}

#[test]
fn replay_counts_every_record_beside_the_raw_baseline() {
    let dir = TempDir::new("cli-bench-replay");
    let out = tickbox(&[
        "bench",
        "replay",
        "--records",
        "20000",
        "--repeats",
        "1",
        "--drain",
        "3s",
        "--out",
        dir.0.to_str().unwrap(),
    ]);
    assert!(out.status.success());
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert!(
        stdout.contains("records/s") && stdout.contains("late receive p99 µs"),
        "{stdout}"
    );
    let jsons = files_with(&dir.0, "-replay.json");
    let doc = read_doc(&jsons[0]);
    check_environment(&doc);
    assert_eq!(doc["bench"], "replay");
    let records = doc["records"].as_array().unwrap();
    assert_eq!(records.len(), 2, "{doc}");
    for system in ["tickbox", "raw-pubsub"] {
        let r = records
            .iter()
            .find(|r| r["system"] == system)
            .unwrap_or_else(|| panic!("{system} missing: {doc}"));
        assert_eq!(r["kind"], "replay");
        assert_eq!(r["records"], 20_000, "{r}");
        assert_eq!(r["delivered"], 20_000, "{r}");
        assert_eq!(r["lost"], 0, "{r}");
        assert!(r["records_per_s"].as_f64().unwrap() > 0.0, "{r}");
    }
    let tickbox = records.iter().find(|r| r["system"] == "tickbox").unwrap();
    assert!(tickbox["frames"].as_u64().unwrap() >= 1, "{tickbox}");
    // Lost is the subscriber's own accounting, which must have seen every sequence.
    assert_eq!(tickbox["gap_missing"], 0, "{tickbox}");
    assert!(
        tickbox["lateness_receive"]["p99"].as_u64().is_some(),
        "{tickbox}"
    );
    let rate = doc["summary"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["figure"] == "records/s")
        .unwrap();
    assert!(
        rate["ratio"]["of_medians"].as_f64().unwrap() > 0.0,
        "{rate}"
    );
    assert!(doc["warnings"]
        .as_array()
        .unwrap()
        .iter()
        .all(|w| w["kind"] != "lost"));
    assert_eq!(
        png_size(&files_with(&dir.0, "-replay.png")[0]),
        tickbox_bench::plot::PLOT_SIZE
    );
}

#[test]
fn record_counts_every_record_beside_the_black_box_and_raw() {
    let dir = TempDir::new("cli-bench-record");
    let out = tickbox(&[
        "bench",
        "record",
        "--records",
        "30001",
        "--shards",
        "2",
        "--repeats",
        "1",
        "--segment-size",
        "16MiB",
        "--drain",
        "3s",
        "--out",
        dir.0.to_str().unwrap(),
    ]);
    assert!(out.status.success());
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert!(
        stdout.contains("records/s ×raw") && stdout.contains("records/s ×subscribe"),
        "{stdout}"
    );
    let jsons = files_with(&dir.0, "-record.json");
    let doc = read_doc(&jsons[0]);
    check_environment(&doc);
    assert_eq!(doc["bench"], "record");
    assert_eq!(doc["order"], "T S R");
    let records = doc["records"].as_array().unwrap();
    assert_eq!(records.len(), 3, "{doc}");
    for system in ["tickbox-record", "tickbox-subscribe", "raw-mmap"] {
        let r = records
            .iter()
            .find(|r| r["system"] == system)
            .unwrap_or_else(|| panic!("{system} missing: {doc}"));
        assert_eq!(r["kind"], "record");
        // Rounded up to a multiple of the shards.
        assert_eq!(r["records"], 30_002, "{r}");
        assert_eq!(r["shards"], 2, "{r}");
        // The counts add up: every record delivered, none lost, none the system's accounting misses.
        assert_eq!(r["delivered"], 30_002, "{r}");
        assert_eq!(r["lost"], 0, "{r}");
        assert!(r["records_per_s"].as_f64().unwrap() > 0.0, "{r}");
        assert!(r["feed_rate"].as_f64().unwrap() > 0.0, "{r}");
        // A batched feed: the readers got batch frames.
        assert!(r["batch_frames"].as_u64().unwrap() >= 1, "{r}");
    }
    let recorder = records
        .iter()
        .find(|r| r["system"] == "tickbox-record")
        .unwrap();
    assert_eq!(recorder["accounted_missing"], 0, "{recorder}");
    // Every record and at least its header went into the journal.
    assert!(
        recorder["bytes_written"].as_u64().unwrap() > 30_002 * 60,
        "{recorder}"
    );
    // How often its recording thread reserved disk itself (how often depends on the machine's timing); only the
    // recorder has a preparer.
    assert!(recorder["reserve_stalls"].is_u64(), "{recorder}");
    let raw = records.iter().find(|r| r["system"] == "raw-mmap").unwrap();
    assert!(raw["accounted_missing"].is_null(), "{raw}");
    assert!(raw["reserve_stalls"].is_null(), "{raw}");
    let summary = doc["summary"].as_array().unwrap();
    for figure in ["records/s ×raw", "records/s ×subscribe"] {
        let rate = summary
            .iter()
            .find(|s| s["figure"] == figure)
            .unwrap_or_else(|| panic!("{figure} missing: {doc}"));
        assert!(
            rate["ratio"]["of_medians"].as_f64().unwrap() > 0.0,
            "{rate}"
        );
    }
    let missing = summary
        .iter()
        .find(|s| s["figure"] == "ledger missing")
        .unwrap();
    assert_eq!(missing["tickbox"]["max"], 0.0, "{missing}");
    assert!(doc["warnings"]
        .as_array()
        .unwrap()
        .iter()
        .all(|w| w["kind"] != "lost"));
    assert_eq!(read_results(&jsons[0]).unwrap().len(), 3);
    assert_eq!(
        png_size(&files_with(&dir.0, "-record.png")[0]),
        tickbox_bench::plot::PLOT_SIZE
    );
}

#[test]
fn a_repeat_count_below_one_is_a_usage_error() {
    for bad in ["0", "-1", "two"] {
        // `--repeats=-1`: as a separate word, "-1" would be taken for a flag before our parser sees it.
        let flag = format!("--repeats={bad}");
        let out = tickbox(&["bench", "throughput", &flag, "--duration", "100ms"]);
        assert_eq!(out.status.code(), Some(2), "--repeats {bad}");
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("repeat"),
            "--repeats {bad}"
        );
    }
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
fn compare_fail_above_exits_10_on_a_regression_and_when_nothing_compares() {
    let dir = TempDir::new("cli-bench-fail-above");
    let (a, b, c) = (
        dir.0.join("a.json"),
        dir.0.join("b.json"),
        dir.0.join("c.json"),
    );
    std::fs::write(&a, BEFORE).unwrap();
    std::fs::write(&b, AFTER).unwrap();
    // Raw only: nothing in common with AFTER.
    std::fs::write(&c, BEFORE.lines().nth(1).unwrap()).unwrap();
    let path = |p: &std::path::Path| p.to_str().unwrap().to_owned();
    // 1.0 M → 1.5 M is no regression; the other way round is one of ×0.67.
    let out = tickbox(&[
        "bench",
        "compare",
        &path(&a),
        &path(&b),
        "--fail-above",
        "1.1",
    ]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = tickbox(&[
        "bench",
        "compare",
        &path(&b),
        &path(&a),
        "--fail-above",
        "1.1",
    ]);
    assert_eq!(out.status.code(), Some(10));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("regression: throughput tickbox tcp size=100 shards=1 msg/s"),
        "{err}"
    );
    let out = tickbox(&[
        "bench",
        "compare",
        &path(&c),
        &path(&b),
        "--fail-above",
        "1.1",
    ]);
    assert_eq!(out.status.code(), Some(10), "nothing comparable");
    assert!(String::from_utf8_lossy(&out.stderr).contains("nothing was checked"));
    let out = tickbox(&[
        "bench",
        "compare",
        &path(&a),
        &path(&b),
        "--fail-above",
        "0.5",
    ]);
    assert_eq!(
        out.status.code(),
        Some(2),
        "a ratio below 1 is a usage error"
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
