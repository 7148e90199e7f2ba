//! `tickbox journal export --format json|csv` and `tickbox journal dump` on an imported journal (plus a few
//! tickbox quotes appended to it): decoded fields with decimal prices and RFC 3339 times, exact row counts,
//! `--limit 0`, `--topics`, `--kind`, and a quiet exit when the reader of the output goes away.

use crate::common;
use crate::dbn_fixtures;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::{TempDir, TICKBOX};
use dbn_fixtures::{mbo, meta, T0};
use tickbox_dbn::dbn::encode::dbn::Encoder;
use tickbox_dbn::dbn::encode::EncodeRecord;
use tickbox_dbn::dbn::Schema;
use tickbox_journal::{Writer, WriterOptions};
use tickbox_wire::{encode_to_vec, Header, Kind, Quote};

const N: u64 = 3_000;

/// An imported journal of `N` MBO records over instruments 7, 8, 9 (topics `V.XNAS.7` …), with `quotes` tickbox
/// quotes appended after them.
pub(crate) fn journal(dir: &TempDir, quotes: u64) -> PathBuf {
    let m = meta(Schema::Mbo);
    let file = dir.path().join("mbo.dbn");
    let mut bytes = Vec::new();
    let mut enc = Encoder::new(&mut bytes, &m).unwrap();
    for i in 0..N {
        enc.encode_record(&mbo(i)).unwrap();
    }
    std::fs::write(&file, &bytes).unwrap();
    let j = dir.path().join("j");
    let o = run(&[
        "import",
        file.to_str().unwrap(),
        "--journal",
        j.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    if quotes > 0 {
        let mut w = Writer::open(&j, &WriterOptions::archive(64 << 20)).unwrap();
        for q in 0..quotes {
            let t = T0 + N * 1_000 + q;
            let quote = Quote {
                instrument_id: 7,
                bid_px: 189_250_000_000,
                ask_px: 189_260_000_000,
                bid_size: 300,
                ask_size: 200,
                ..Quote::default()
            };
            let frame = encode_to_vec(
                "Q.XNAS.AAPL",
                &Header::live(Kind::Quote, 1, q + 1, t),
                &quote.into(),
            )
            .unwrap();
            w.append(t, &frame).unwrap();
        }
        w.close().unwrap();
    }
    j
}

fn run(args: &[&str]) -> Output {
    Command::new(TICKBOX).args(args).output().unwrap()
}

fn ok_stdout(o: &Output) -> String {
    assert!(
        o.status.success(),
        "stderr: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8(o.stdout.clone()).unwrap()
}

fn rfc3339(ns: u64) -> String {
    tickbox_units::format_rfc3339(ns)
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[test]
fn json_export_has_one_object_per_record_in_the_export_vocabulary() {
    use tickbox_dbn::dbn::Record as _;
    let dir = TempDir::new("export-json");
    let j = journal(&dir, 2);
    let text = ok_stdout(&run(&[
        "journal",
        "export",
        "--journal",
        j.to_str().unwrap(),
        "--format",
        "json",
    ]));
    let rows: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(rows.len() as u64, N + 2);
    for (i, row) in rows.iter().take(N as usize).enumerate() {
        let want = mbo(i as u64);
        assert_eq!(row["kind"], "vendor");
        assert_eq!(row["journal_seq"], i as u64 + 1, "numbers as numbers");
        assert_eq!(row["topic"], format!("V.XNAS.{}", want.hd.instrument_id));
        assert_eq!(row["symbol"], want.hd.instrument_id.to_string());
        assert_eq!(row["capture_time"], rfc3339(want.ts_recv));
        assert_eq!(row["origin_time"], rfc3339(want.hd.ts_event));
        assert_eq!(row["rtype"], want.hd.rtype);
        assert_eq!(
            row["record"],
            hex(want.as_ref()),
            "the DBN record as imported"
        );
        assert_eq!(want.record_size(), want.as_ref().len());
    }
    let q = &rows[N as usize];
    assert_eq!(q["kind"], "quote");
    assert_eq!(q["bid_px_e9"], 189_250_000_000i64);
    assert_eq!(q["ask_px_e9"], 189_260_000_000i64);
    assert_eq!(q["bid_size"], 300);
}

#[test]
fn csv_export_has_a_header_and_one_row_per_record_of_its_kind() {
    let dir = TempDir::new("export-csv");
    let j = journal(&dir, 0);
    let out = dir.path().join("x.csv");
    let o = run(&[
        "journal",
        "export",
        "--journal",
        j.to_str().unwrap(),
        "--format",
        "csv",
        "--kind",
        "vendor",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert_eq!(N, 3_000);
    assert!(ok_stdout(&o).contains("exported      3,000 rows"));
    let text = std::fs::read_to_string(&out).unwrap();
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next().unwrap().split(',').collect();
    let col = |name: &str| {
        header
            .iter()
            .position(|h| *h == name)
            .unwrap_or_else(|| panic!("no column {name}"))
    };
    let rows: Vec<Vec<&str>> = lines.map(|l| l.split(',').collect()).collect();
    assert_eq!(rows.len() as u64, N);
    for (i, r) in rows.iter().enumerate() {
        let want = mbo(i as u64);
        assert_eq!(r.len(), header.len());
        assert_eq!(r[col("record")], hex(want.as_ref()));
        assert_eq!(r[col("capture_time")], rfc3339(want.ts_recv));
        assert_eq!(
            r[col("sequence")],
            (i + 1).to_string(),
            "the publisher's sequence"
        );
        assert_eq!(r[col("journal_seq")], (i + 1).to_string());
    }
    // A journal of several kinds is one CSV file per kind; one file takes --kind, refused before writing.
    let dir2 = TempDir::new("export-csv-mixed");
    let j2 = journal(&dir2, 1);
    let out2 = dir2.path().join("y.csv");
    let o = run(&[
        "journal",
        "export",
        "--journal",
        j2.to_str().unwrap(),
        "--format",
        "csv",
        "--out",
        out2.to_str().unwrap(),
    ]);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("--kind"), "{err}");
    assert!(!out2.exists());
    let per_kind = dir2.path().join("csv");
    ok_stdout(&run(&[
        "journal",
        "export",
        j2.to_str().unwrap(),
        "--format",
        "csv",
        "--out",
        per_kind.to_str().unwrap(),
    ]));
    assert_eq!(
        std::fs::read_to_string(per_kind.join("quote.csv"))
            .unwrap()
            .lines()
            .count(),
        2
    );
    assert_eq!(
        std::fs::read_to_string(per_kind.join("vendor.csv"))
            .unwrap()
            .lines()
            .count() as u64,
        N + 1
    );
}

fn dump(j: &Path, extra: &[&str]) -> Vec<String> {
    let mut args = vec!["journal", "dump", "--journal", j.to_str().unwrap()];
    args.extend_from_slice(extra);
    ok_stdout(&run(&args))
        .lines()
        .skip(1)
        .map(str::to_owned)
        .collect()
}

#[test]
fn dump_limits_filters_and_decodes() {
    let dir = TempDir::new("dump");
    let j = journal(&dir, 3);
    assert_eq!(dump(&j, &[]).len(), 20, "default limit");
    assert_eq!(
        dump(&j, &["--limit", "0"]).len() as u64,
        N + 3,
        "--limit 0 prints all"
    );
    assert_eq!(dump(&j, &["--limit", "5"]).len(), 5);
    let first = &dump(&j, &["--limit", "1"])[0];
    let want = mbo(0);
    for needle in [
        "V.XNAS.7".to_owned(),
        "vendor".to_owned(),
        format!("price={}", tickbox_dbn::format_price(want.price)),
        format!("ts_recv={}", rfc3339(want.ts_recv)),
        format!("hd.ts_event={}", rfc3339(want.hd.ts_event)),
        "order_id=10000".to_owned(),
    ] {
        assert!(first.contains(&needle), "{needle} missing from: {first}");
    }
    // Topics: instrument 8 is every third record.
    let eights = dump(&j, &["--limit", "0", "--topics", "V.XNAS.8"]);
    assert_eq!(eights.len() as u64, N / 3);
    assert!(eights.iter().all(|l| l.contains("V.XNAS.8 ")));
    let both = dump(&j, &["--limit", "0", "--topics", "V.XNAS.8,Q."]);
    assert_eq!(both.len() as u64, N / 3 + 3);
    // Kinds.
    let quotes = dump(&j, &["--limit", "0", "--kind", "quote"]);
    assert_eq!(quotes.len(), 3);
    assert!(
        quotes[0].contains("bid_px=189.250000000") && quotes[0].contains("ask_size=200"),
        "{}",
        quotes[0]
    );
    assert_eq!(
        dump(&j, &["--limit", "0", "--kind", "vendor"]).len() as u64,
        N
    );
    assert_eq!(dump(&j, &["--limit", "0", "--kind", "trade"]).len(), 0);
    let bad = run(&[
        "journal",
        "dump",
        "--journal",
        j.to_str().unwrap(),
        "--kind",
        "bogus",
    ]);
    assert!(!bad.status.success());
    // Time window: the first 10 records by capture time (ts_recv = T0 + i*1000 + 400).
    let window = dump(
        &j,
        &[
            "--limit",
            "0",
            "--from",
            &(T0 + 400).to_string(),
            "--to",
            &(T0 + 9_400).to_string(),
        ],
    );
    assert_eq!(window.len(), 10);
}

#[test]
fn dump_exits_quietly_when_the_pipe_closes() {
    let dir = TempDir::new("dump-pipe");
    let j = journal(&dir, 0);
    let mut child = common::KillOnDrop(
        Command::new(TICKBOX)
            .args([
                "journal",
                "dump",
                "--journal",
                j.to_str().unwrap(),
                "--limit",
                "0",
            ])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let stdout = child.0.stdout.take().unwrap();
    let mut first = String::new();
    BufReader::new(stdout).read_line(&mut first).unwrap(); // like `| head -1`; the reader then goes away
    assert!(first.contains("seq"));
    let deadline = Instant::now() + Duration::from_secs(15);
    let status = loop {
        if let Some(s) = child.0.try_wait().unwrap() {
            break s;
        }
        assert!(
            Instant::now() < deadline,
            "dump kept running after its reader left"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut err = String::new();
    std::io::Read::read_to_string(&mut child.0.stderr.take().unwrap(), &mut err).unwrap();
    assert!(status.success(), "exit {status:?}, stderr: {err}");
    assert!(
        err.is_empty(),
        "no error line and no panic on a closed pipe: {err}"
    );
}
