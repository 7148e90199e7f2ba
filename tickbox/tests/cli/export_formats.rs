//! `tickbox journal export` of a recording to Parquet, CSV, JSON and DBN, read back by readers nobody here wrote
//! (pyarrow, DuckDB, Polars, the `dbn` crate, Databento's Python client), each held against what `journal dump`
//! prints of the same journal: row counts per kind, the sum of trade sizes, first and last capture time, one
//! symbol's first and last trade price. Filters, refusals that leave nothing behind, and a damaged journal
//! (every intact record exported, the range reported, exit 5).

use crate::common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use common::{TempDir, TICKBOX};
use serde_json::Value;
use tickbox_journal::{Writer, WriterOptions};
use tickbox_wire::{
    encode_to_vec, GapCause, GapNotice, Header, Heartbeat, Kind, Payload, Quote, Side, Trade,
};

/// 2026-01-02T23:58:00Z: the fixture's records straddle midnight UTC, so the dataset has two dates.
pub(crate) const T0: u64 = 1_767_398_280_000_000_000;
/// Records in the fixture: quotes and trades of three symbols, a heartbeat every 100, one gap notice.
pub(crate) const RECORDS: u64 = 6_000;
const SYMBOLS: [(&str, u32); 3] = [("AAPL", 1), ("MSFT", 2), ("SPY", 3)];

/// An archive journal of the fixture's records, 40 ms apart (four minutes, across midnight UTC).
pub(crate) fn fixture(dir: &Path) -> PathBuf {
    let j = dir.join("day");
    let mut w = Writer::open(&j, &WriterOptions::archive(8 << 20)).unwrap();
    let mut seq = 0u64;
    for i in 0..RECORDS {
        let t = T0 + i * 40_000_000;
        let (sym, iid) = SYMBOLS[(i % 3) as usize];
        let frame = if i % 100 == 99 {
            encode_to_vec(
                "H.XNAS",
                &Header::live(Kind::Heartbeat, 7, seq, t),
                &Payload::Heartbeat(Heartbeat {
                    interval_ns: 1_000_000_000,
                    messages_sent: seq,
                }),
            )
        } else if i == 3_001 {
            seq += 5;
            encode_to_vec(
                "G.XNAS",
                &Header::live(Kind::Gap, 7, seq, t),
                &Payload::Gap(GapNotice {
                    first_missing: seq - 4,
                    last_missing: seq,
                    detected_ns: t,
                    cause: GapCause::NotReceived,
                }),
            )
        } else if i % 4 == 0 {
            seq += 1;
            encode_to_vec(
                &format!("T.XNAS.{sym}"),
                &Header::live(Kind::Trade, 7, seq, t - 1_000).with_session(11),
                &Payload::Trade(Trade {
                    instrument_id: iid,
                    price: 100_000_000_000 + i as i64 * 10_000_000,
                    size: 1 + (i % 17) as u32,
                    aggressor: if i % 8 == 0 { Side::Buy } else { Side::Sell },
                    trade_id: i,
                    venue_time_ns: t - 5_000,
                }),
            )
        } else {
            seq += 1;
            encode_to_vec(
                &format!("Q.XNAS.{sym}"),
                &Header::live(Kind::Quote, 7, seq, t - 1_000).with_session(11),
                &Payload::Quote(Quote {
                    instrument_id: iid,
                    bid_px: 99_990_000_000 + i as i64 * 1_000_000,
                    ask_px: 100_010_000_000 + i as i64 * 1_000_000,
                    bid_size: 100 + (i % 7) as u32,
                    ask_size: 200,
                    bid_orders: 3,
                    ask_orders: 4,
                    venue_time_ns: 0,
                }),
            )
        }
        .unwrap();
        w.append(t, &frame).unwrap();
    }
    w.close().unwrap();
    j
}

pub(crate) fn tickbox(args: &[&str]) -> Output {
    Command::new(TICKBOX).args(args).output().unwrap()
}

pub(crate) fn ok(o: &Output) -> String {
    assert!(
        o.status.success(),
        "exit {:?}\nstdout: {}\nstderr: {}",
        o.status.code(),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8(o.stdout.clone()).unwrap()
}

/// What `journal dump` prints of a journal, reduced to the figures every reader must agree on.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Expected {
    pub(crate) rows_by_kind: BTreeMap<String, u64>,
    pub(crate) trade_size_sum: u64,
    pub(crate) first_capture: String,
    pub(crate) last_capture: String,
    /// AAPL's first and last trade price, as dump prints it (a decimal).
    pub(crate) aapl_first_px: String,
    pub(crate) aapl_last_px: String,
}

pub(crate) fn expected_from_dump(journal: &Path, extra: &[&str]) -> Expected {
    let mut args = vec!["journal", "dump", journal.to_str().unwrap(), "--limit", "0"];
    args.extend_from_slice(extra);
    let text = ok(&tickbox(&args));
    let mut e = Expected {
        rows_by_kind: BTreeMap::new(),
        trade_size_sum: 0,
        first_capture: String::new(),
        last_capture: String::new(),
        aapl_first_px: String::new(),
        aapl_last_px: String::new(),
    };
    for line in text.lines().skip(1) {
        let cols: Vec<&str> = line.split_whitespace().collect();
        let (capture, topic, kind) = (cols[1], cols[3], cols[4]);
        *e.rows_by_kind.entry(kind.to_owned()).or_default() += 1;
        if e.first_capture.is_empty() {
            e.first_capture = capture.to_owned();
        }
        e.last_capture = capture.to_owned();
        let field = |name: &str| {
            cols.iter()
                .find_map(|c| c.strip_prefix(&format!("{name}=")))
                .unwrap_or_else(|| panic!("no {name} in {line}"))
                .to_owned()
        };
        if kind == "trade" {
            e.trade_size_sum += field("size").parse::<u64>().unwrap();
            if topic == "T.XNAS.AAPL" {
                if e.aapl_first_px.is_empty() {
                    e.aapl_first_px = field("price");
                }
                e.aapl_last_px = field("price");
            }
        }
    }
    e
}

/// A decimal price as dump prints it (`100.010000000`) in units of 1e-9.
pub(crate) fn e9(decimal: &str) -> i64 {
    let (int, frac) = decimal.split_once('.').unwrap();
    int.parse::<i64>().unwrap() * 1_000_000_000 + frac.parse::<i64>().unwrap()
}

/// ns since the epoch of an RFC 3339 time as dump prints it.
pub(crate) fn ns(rfc3339: &str) -> i64 {
    tickbox_units::parse_rfc3339(rfc3339).unwrap() as i64
}

// ---- Python readers -------------------------------------------------------------------------------------------

/// Runs `python3 -c code args…` (at most 60 s); its stdout, or its stderr as the error.
pub(crate) fn python(code: &str, args: &[&str], env: &[(&str, &str)]) -> Result<String, String> {
    let mut cmd = Command::new("python3");
    cmd.arg("-c").arg(code).args(args);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = common::output_within(cmd, Duration::from_secs(60));
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

/// The Python modules `modules` (PyPI names `packages`), installing them with pip (one bounded attempt) when
/// missing; the reason when they cannot be had (the test then skips and says so).
pub(crate) fn need_python_modules(modules: &[&str], packages: &[&str]) -> Result<(), String> {
    let import = format!("import {}", modules.join(", "));
    if python(&import, &[], &[]).is_ok() {
        return Ok(());
    }
    let mut pip = Command::new("python3");
    pip.args([
        "-m",
        "pip",
        "install",
        "--quiet",
        "--disable-pip-version-check",
    ])
    .args(packages)
    .stdout(Stdio::null())
    .stderr(Stdio::null());
    let _ = common::output_within(pip, Duration::from_secs(300));
    python(&import, &[], &[]).map(|_| ()).map_err(|e| {
        format!(
            "the Python modules {modules:?} are missing and `pip install {}` failed: {}",
            packages.join(" "),
            e.lines().last().unwrap_or_default()
        )
    })
}

/// Reads a Parquet dataset with one reader and prints the figures of [`Expected`] as JSON: rows per kind (from
/// the hive partition), the sum of trade sizes, min/max capture time in ns, AAPL's first and last trade price
/// (by journal sequence).
pub(crate) const READ_DATASET: &str = r#"
import sys, json
reader, root = sys.argv[1], sys.argv[2]
out = {}
s3 = root.startswith("s3://")
if reader == "pyarrow":
    import os, glob
    import pyarrow.dataset as ds, pyarrow.compute as pc, pyarrow.fs as pafs
    fs = None
    if s3:
        fs = pafs.S3FileSystem(access_key=os.environ["S3_KEY"], secret_key=os.environ["S3_SECRET"],
            endpoint_override=os.environ["S3_ENDPOINT"], region="garage", scheme="http")
        root = root[len("s3://"):]
        files = [f.path for f in fs.get_file_info(pafs.FileSelector(root, recursive=True)) if f.is_file]
    else:
        files = glob.glob(root + "/**/*.parquet", recursive=True)
    d = ds.dataset(root, format="parquet", partitioning="hive", filesystem=fs)
    t = d.to_table(columns=["kind", "capture_time"])
    kinds = t.column("kind").to_pylist()
    out["rows_by_kind"] = {k: kinds.count(k) for k in set(kinds)}
    ts = t.column("capture_time").cast("int64")
    out["min_ns"], out["max_ns"] = pc.min(ts).as_py(), pc.max(ts).as_py()
    # Kinds have their own columns: a dataset of the trade partitions' files.
    tr = ds.dataset(sorted(f for f in files if "/kind=trade/" in f), format="parquet", filesystem=fs).to_table(
        columns=["size", "symbol", "price_e9", "journal_seq"])
    out["trade_size_sum"] = pc.sum(tr.column("size")).as_py()
    a = tr.filter(pc.equal(tr.column("symbol"), "AAPL")).sort_by("journal_seq")
    out["aapl_first_px"], out["aapl_last_px"] = a.column("price_e9")[0].as_py(), a.column("price_e9")[-1].as_py()
    out["tz"] = str(d.schema.field("capture_time").type)
elif reader == "duckdb":
    import duckdb
    if s3:
        import os, glob as g, duckdb_extension_httpfs
        ext = g.glob(os.path.join(os.path.dirname(duckdb_extension_httpfs.__file__), "extensions", "*", "httpfs.duckdb_extension"))[0]
        duckdb.sql(f"LOAD '{ext}'")
        host = os.environ["S3_ENDPOINT"].split("://", 1)[1]
        duckdb.sql(f"CREATE SECRET s3 (TYPE s3, KEY_ID '{os.environ['S3_KEY']}', SECRET '{os.environ['S3_SECRET']}', "
                   f"ENDPOINT '{host}', URL_STYLE 'path', USE_SSL false, REGION 'garage')")
    glob = root + "/**/*.parquet"
    q = lambda s: duckdb.sql(s).fetchall()
    src = f"read_parquet('{glob}', hive_partitioning=true, union_by_name=true)"
    out["rows_by_kind"] = dict(q(f"select kind, count(*) from {src} group by kind"))
    mn, mx = q(f"select epoch_ns(min(capture_time)), epoch_ns(max(capture_time)) from {src}")[0]
    out["min_ns"], out["max_ns"] = mn, mx
    trades = f"read_parquet('{root}/*/kind=trade/*.parquet', hive_partitioning=true)"
    out["trade_size_sum"] = int(q(f"select sum(size) from {trades}")[0][0])
    first, last = q(f"select first(price_e9 order by journal_seq), last(price_e9 order by journal_seq) from {trades} where symbol = 'AAPL'")[0]
    out["aapl_first_px"], out["aapl_last_px"] = first, last
elif reader == "polars":
    import polars as pl
    # One scan per kind (their columns differ); the kind comes from the partition directory.
    parts = {}
    mins, maxs = [], []
    import glob as g, os
    for kind_dir in sorted(set(os.path.basename(p) for p in g.glob(root + "/*/kind=*"))):
        kind = kind_dir.split("=", 1)[1]
        df = pl.scan_parquet(f"{root}/*/{kind_dir}/*.parquet").select(
            pl.len().alias("n"), pl.col("capture_time").min().dt.epoch("ns").alias("mn"),
            pl.col("capture_time").max().dt.epoch("ns").alias("mx")).collect()
        parts[kind] = df["n"][0]
        mins.append(df["mn"][0]); maxs.append(df["mx"][0])
    out["rows_by_kind"] = parts
    out["min_ns"], out["max_ns"] = int(min(mins)), int(max(maxs))
    tr = pl.scan_parquet(f"{root}/*/kind=trade/*.parquet").collect()
    out["trade_size_sum"] = int(tr["size"].sum())
    a = tr.filter(pl.col("symbol") == "AAPL").sort("journal_seq")
    out["aapl_first_px"], out["aapl_last_px"] = int(a["price_e9"][0]), int(a["price_e9"][-1])
print(json.dumps(out))
"#;

pub(crate) fn check_reader(reader: &str, dataset: &str, want: &Expected, env: &[(&str, &str)]) {
    let got = python(READ_DATASET, &[reader, dataset], env)
        .unwrap_or_else(|e| panic!("{reader} could not read {dataset}: {e}"));
    let v: Value = serde_json::from_str(got.trim()).unwrap();
    let kinds: BTreeMap<String, u64> = v["rows_by_kind"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(k, n)| (k.clone(), n.as_u64().unwrap()))
        .collect();
    assert_eq!(kinds, want.rows_by_kind, "{reader}: rows per kind");
    assert_eq!(
        v["trade_size_sum"], want.trade_size_sum,
        "{reader}: sum of trade sizes"
    );
    assert_eq!(
        v["min_ns"],
        ns(&want.first_capture),
        "{reader}: first capture time"
    );
    assert_eq!(
        v["max_ns"],
        ns(&want.last_capture),
        "{reader}: last capture time"
    );
    assert_eq!(
        v["aapl_first_px"],
        e9(&want.aapl_first_px),
        "{reader}: AAPL's first trade price"
    );
    assert_eq!(
        v["aapl_last_px"],
        e9(&want.aapl_last_px),
        "{reader}: AAPL's last trade price"
    );
    if reader == "pyarrow" {
        assert_eq!(
            v["tz"], "timestamp[ns, tz=UTC]",
            "capture_time is Timestamp(ns, UTC)"
        );
    }
}

fn files_under(root: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else {
                out.push(p.strip_prefix(root).unwrap().display().to_string());
            }
        }
    }
    out.sort();
    out
}

#[test]
fn parquet_dataset_reads_the_same_in_pyarrow_duckdb_and_polars_as_journal_dump() {
    let dir = TempDir::new("export-parquet");
    let j = fixture(dir.path());
    let want = expected_from_dump(&j, &[]);
    assert_eq!(want.rows_by_kind.values().sum::<u64>(), RECORDS);
    let out = dir.path().join("ds");
    let o = tickbox(&[
        "journal",
        "export",
        j.to_str().unwrap(),
        "--format",
        "parquet",
        "--out",
        out.to_str().unwrap(),
        "--json",
    ]);
    let summary: Value = serde_json::from_str(ok(&o).trim()).unwrap();
    // Versioned like every other `--json` object, so a script can check what it parses.
    assert_eq!(summary["schema_version"], 1, "{summary}");
    assert_eq!(summary["rows"], RECORDS);
    assert_eq!(summary["records_read"], RECORDS);
    assert!(
        summary["compression_ratio"].as_f64().unwrap() > 1.0,
        "{summary}"
    );
    // Hive partitions: two dates, one directory per kind, one file each (the size bound is far away).
    let files = files_under(&out);
    assert!(
        files.contains(&"date=2026-01-02/kind=quote/part-000000000002.parquet".to_owned()),
        "{files:?}"
    );
    assert!(
        files
            .iter()
            .any(|f| f.starts_with("date=2026-01-03/kind=trade/")),
        "{files:?}"
    );
    assert!(files.iter().any(|f| f.contains("kind=gap/")), "{files:?}");
    assert_eq!(
        files.len() as u64,
        summary["files"].as_array().unwrap().len() as u64
    );
    assert!(
        files.iter().all(|f| f.ends_with(".parquet")),
        "nothing staged is left: {files:?}"
    );

    if let Err(why) = need_python_modules(
        &["pyarrow", "duckdb", "polars"],
        &["pyarrow", "duckdb", "polars"],
    ) {
        eprintln!("SKIPPED the readers' half: {why}");
        return;
    }
    let ds = out.to_str().unwrap();
    for reader in ["pyarrow", "duckdb", "polars"] {
        check_reader(reader, ds, &want, &[]);
    }

    // Schema: prices exact with their scale declared, statistics on capture_time and symbol, zstd, a bloom filter
    // on symbol.
    let meta = python(
        r#"
import sys, json, pyarrow.parquet as pq
f = pq.ParquetFile(sys.argv[1])
md, sch = f.metadata, f.schema_arrow
rg = md.row_group(0)
col = {rg.column(i).path_in_schema: rg.column(i) for i in range(rg.num_columns)}
print(json.dumps({
  "meta": {k.decode(): v.decode() for k, v in sch.metadata.items() if k.startswith(b"tickbox")},
  "px": str(sch.field("bid_px_e9").type),
  "px_meta": {k.decode(): v.decode() for k, v in (sch.field("bid_px_e9").metadata or {}).items()},
  "size": str(sch.field("bid_size").type),
  "compression": col["capture_time"].compression,
  "stats_time": col["capture_time"].statistics.has_min_max,
  "stats_symbol": [col["symbol"].statistics.min, col["symbol"].statistics.max],
  "bloom": col["symbol"].bloom_filter_offset is not None if hasattr(col["symbol"], "bloom_filter_offset") else None,
}))
"#,
        &[out.join("date=2026-01-02/kind=quote/part-000000000002.parquet").to_str().unwrap()],
        &[],
    )
    .unwrap();
    let m: Value = serde_json::from_str(meta.trim()).unwrap();
    assert_eq!(m["meta"]["tickbox.price_type"], "fixed");
    assert_eq!(m["meta"]["tickbox.price_scale"], "1000000000");
    assert_eq!(m["px"], "int64");
    assert_eq!(m["px_meta"]["tickbox.price_scale"], "1000000000");
    assert_eq!(m["size"], "uint32");
    assert_eq!(m["compression"], "ZSTD");
    assert_eq!(m["stats_time"], true);
    assert_eq!(m["stats_symbol"], serde_json::json!(["AAPL", "SPY"]));

    // DuckDB prunes by date: with every file of the second date made unreadable, a query of the first date's
    // trades still answers (it never opens them), and one of every date fails (so the first could have failed).
    for f in files.iter().filter(|f| f.starts_with("date=2026-01-03/")) {
        std::fs::write(out.join(f), b"not parquet").unwrap();
    }
    let day1 = day_rows(&j, "2026-01-02T", "trade");
    let count = |filter: &str| {
        python(
            r#"
import sys, duckdb
src = f"read_parquet('{sys.argv[1]}/*/kind=trade/*.parquet', hive_partitioning=true)"
print(duckdb.sql(f"select count(*) from {src} {sys.argv[2]}").fetchall()[0][0])
"#,
            &[ds, filter],
            &[],
        )
    };
    let pruned = count("where date = '2026-01-02'").unwrap();
    assert_eq!(
        pruned.trim().parse::<u64>().unwrap(),
        day1,
        "DuckDB read only the first date's files"
    );
    assert!(
        count("").is_err(),
        "the damaged second date is noticed when it is read"
    );
}

/// Records of `kind` captured on the UTC day whose RFC 3339 prefix is `day`, by `journal dump`.
fn day_rows(j: &Path, day: &str, kind: &str) -> u64 {
    let text = ok(&tickbox(&[
        "journal",
        "dump",
        j.to_str().unwrap(),
        "--limit",
        "0",
        "--no-fields",
        "--kind",
        kind,
    ]));
    text.lines()
        .skip(1)
        .filter(|l| {
            l.split_whitespace()
                .nth(1)
                .is_some_and(|c| c.starts_with(day))
        })
        .count() as u64
}

#[test]
fn csv_per_kind_and_json_use_the_parquet_vocabulary_with_numbers_as_numbers() {
    let dir = TempDir::new("export-text");
    let j = fixture(dir.path());
    let want = expected_from_dump(&j, &[]);
    // CSV: one file per kind, each with its own header.
    let csv = dir.path().join("csv");
    ok(&tickbox(&[
        "journal",
        "export",
        j.to_str().unwrap(),
        "--format",
        "csv",
        "--out",
        csv.to_str().unwrap(),
    ]));
    let mut names = files_under(&csv);
    names.sort();
    assert_eq!(
        names,
        ["gap.csv", "heartbeat.csv", "quote.csv", "trade.csv"]
    );
    let trades = std::fs::read_to_string(csv.join("trade.csv")).unwrap();
    let mut lines = trades.lines();
    let header: Vec<&str> = lines.next().unwrap().split(',').collect();
    let col = |n: &str| {
        header
            .iter()
            .position(|h| *h == n)
            .unwrap_or_else(|| panic!("no {n} in {header:?}"))
    };
    let rows: Vec<Vec<&str>> = lines.map(|l| l.split(',').collect()).collect();
    assert_eq!(rows.len() as u64, want.rows_by_kind["trade"]);
    let sum: u64 = rows
        .iter()
        .map(|r| r[col("size")].parse::<u64>().unwrap())
        .sum();
    assert_eq!(sum, want.trade_size_sum);
    let aapl: Vec<_> = rows.iter().filter(|r| r[col("symbol")] == "AAPL").collect();
    assert_eq!(
        aapl[0][col("price_e9")].parse::<i64>().unwrap(),
        e9(&want.aapl_first_px)
    );
    assert_eq!(
        aapl[0][col("capture_time")].len(),
        "2026-01-02T23:58:00.000000000Z".len()
    );

    // JSON lines: the same names, numbers as JSON numbers, times RFC 3339, `kind` on each row.
    let json = ok(&tickbox(&[
        "journal",
        "export",
        j.to_str().unwrap(),
        "--format",
        "json",
    ]));
    let rows: Vec<Value> = json
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(rows.len() as u64, RECORDS);
    let t = rows.iter().find(|r| r["kind"] == "trade").unwrap();
    let csv_names: Vec<&str> = header.clone();
    let json_names: Vec<&str> = t
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .filter(|k| *k != "kind")
        .collect();
    let mut a = csv_names.clone();
    let mut b = json_names.clone();
    a.sort();
    b.sort();
    assert_eq!(a, b, "CSV and JSON name a trade's fields alike");
    assert!(
        t["price_e9"].is_i64() && t["size"].is_u64() && t["journal_seq"].is_u64(),
        "{t}"
    );
    assert_eq!(t["capture_time"].as_str().unwrap(), want.first_capture);
    let q = rows.iter().find(|r| r["kind"] == "quote").unwrap();
    assert!(
        q["venue_time"].is_null(),
        "an unknown venue time is null: {q}"
    );
    // --price float: floats under the plain names.
    let f = ok(&tickbox(&[
        "journal",
        "export",
        j.to_str().unwrap(),
        "--format",
        "json",
        "--price",
        "float",
        "--kind",
        "trade",
    ]));
    let first: Value = serde_json::from_str(f.lines().next().unwrap()).unwrap();
    assert_eq!(
        first["price"].as_f64().unwrap(),
        e9(&want.aapl_first_px) as f64 / 1e9
    );
}

#[test]
fn filters_select_alike_in_every_format() {
    let dir = TempDir::new("export-filters");
    let j = fixture(dir.path());
    let from = "2026-01-03T00:00:00Z";
    let to = "2026-01-03T00:01:00.020Z";
    let want = expected_from_dump(
        &j,
        &[
            "--from",
            from,
            "--to",
            to,
            "--topics",
            "T.XNAS.AAPL,Q.XNAS.AAPL",
        ],
    );
    // dump's --to keeps a record captured exactly at it, export's (the replay's) does not: none is, at 40 ms steps.
    let args = [
        "--from",
        from,
        "--to",
        to,
        "--topics",
        "T.XNAS.AAPL,Q.XNAS.AAPL",
    ];
    let n = |kind: &str| want.rows_by_kind.get(kind).copied().unwrap_or(0);
    let json = ok(&tickbox(
        &[
            &["journal", "export", j.to_str().unwrap(), "--format", "json"][..],
            &args,
        ]
        .concat(),
    ));
    assert_eq!(json.lines().count() as u64, n("quote") + n("trade"));
    let csv = ok(&tickbox(
        &[
            &[
                "journal",
                "export",
                j.to_str().unwrap(),
                "--format",
                "csv",
                "--kind",
                "trade",
            ][..],
            &args,
        ]
        .concat(),
    ));
    assert_eq!(csv.lines().count() as u64 - 1, n("trade"));
    let ds = dir.path().join("ds");
    let o = ok(&tickbox(
        &[
            &[
                "journal",
                "export",
                j.to_str().unwrap(),
                "--format",
                "parquet",
                "--json",
                "--out",
                ds.to_str().unwrap(),
            ][..],
            &args,
        ]
        .concat(),
    ));
    let s: Value = serde_json::from_str(o.trim()).unwrap();
    assert_eq!(s["rows_by_kind"]["quote"], n("quote"));
    assert_eq!(s["rows_by_kind"]["trade"], n("trade"));
    assert!(files_under(&ds)
        .iter()
        .all(|f| f.starts_with("date=2026-01-03/")));
    // Time of day in a zone, as replay takes it: 19:00 in New York is midnight UTC in January.
    let ny = ok(&tickbox(&[
        "journal",
        "export",
        j.to_str().unwrap(),
        "--format",
        "json",
        "--kind",
        "heartbeat",
        "--from",
        "19:00",
        "--tz",
        "America/New_York",
    ]));
    assert!(
        ny.lines()
            .all(|l| l.contains("\"capture_time\":\"2026-01-03T")),
        "{ny}"
    );
}

#[test]
fn a_failed_or_refused_export_leaves_nothing() {
    let dir = TempDir::new("export-refused");
    let j = fixture(dir.path());
    let run =
        |args: &[&str]| tickbox(&[&["journal", "export", j.to_str().unwrap()][..], args].concat());
    let err = |o: &Output| String::from_utf8_lossy(&o.stderr).into_owned();
    // CSV of several kinds into one file: refused before writing.
    let one = dir.path().join("x.csv");
    let o = run(&["--format", "csv", "--out", one.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1));
    assert!(err(&o).contains("--kind"), "{}", err(&o));
    assert!(!one.exists());
    // DBN of a recording without a schema-bearing kind: refused, no file (once a 0-byte x.dbn.zst).
    let dbn = dir.path().join("x.dbn.zst");
    let o = run(&["--format", "dbn", "--out", dbn.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1));
    assert!(err(&o).contains("--kind trade"), "{}", err(&o));
    assert!(!dbn.exists());
    // A destination that exists is never overwritten.
    std::fs::write(&one, b"keep").unwrap();
    let o = run(&[
        "--format",
        "csv",
        "--kind",
        "trade",
        "--out",
        one.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(std::fs::read(&one).unwrap(), b"keep");
    // A failure mid-way (a dataset file already there) leaves the rest unplaced and no staging behind.
    let ds = dir.path().join("ds");
    std::fs::create_dir_all(ds.join("date=2026-01-03/kind=gap")).unwrap();
    ok(&run(&[
        "--format",
        "parquet",
        "--kind",
        "gap",
        "--out",
        ds.to_str().unwrap(),
    ]));
    let before = files_under(&ds);
    let o = run(&["--format", "parquet", "--out", ds.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1), "{}", err(&o));
    assert!(err(&o).contains("exists"), "{}", err(&o));
    assert_eq!(
        files_under(&ds),
        before,
        "nothing placed, nothing staged left"
    );
    let hidden: Vec<_> = std::fs::read_dir(&ds)
        .unwrap()
        .filter_map(|e| {
            let n = e.unwrap().file_name().to_string_lossy().into_owned();
            n.starts_with('.').then_some(n)
        })
        .collect();
    assert!(hidden.is_empty(), "{hidden:?}");
}

#[test]
fn a_damaged_journal_exports_every_intact_record_and_exits_5() {
    let dir = TempDir::new("export-damage");
    let j = fixture(dir.path());
    // Flip bytes in the middle of the first segment's records.
    let seg = tickbox_journal::segment_path(&j, 0);
    let mut bytes = std::fs::read(&seg).unwrap();
    let at = 4096 + 100_000;
    for b in &mut bytes[at..at + 64] {
        *b ^= 0x5a;
    }
    std::fs::write(&seg, &bytes).unwrap();
    let verify = tickbox(&["journal", "verify", j.to_str().unwrap()]);
    assert_eq!(verify.status.code(), Some(5));
    let ds = dir.path().join("ds");
    let o = tickbox(&[
        "journal",
        "export",
        j.to_str().unwrap(),
        "--format",
        "parquet",
        "--out",
        ds.to_str().unwrap(),
    ]);
    assert_eq!(
        o.status.code(),
        Some(5),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(
        text.contains("damaged       ") && text.contains("offset"),
        "{text}"
    );
    let rows: u64 = text
        .lines()
        .find_map(|l| l.strip_prefix("exported      "))
        .and_then(|l| l.split_whitespace().next())
        .map(|n| n.replace(',', "").parse().unwrap())
        .unwrap();
    let json = tickbox(&[
        "journal",
        "export",
        j.to_str().unwrap(),
        "--format",
        "json",
        "--json",
    ]);
    assert_eq!(json.status.code(), Some(5));
    let s: Value = serde_json::from_str(
        String::from_utf8_lossy(&json.stderr)
            .lines()
            .last()
            .unwrap(),
    )
    .unwrap();
    let lost = s["damaged"][0]["records"].as_u64().unwrap();
    assert!(lost > 0 && lost < 10, "{s}");
    assert_eq!(rows + lost, RECORDS, "every record but the damaged ones");
    assert_eq!(
        String::from_utf8_lossy(&json.stdout).lines().count() as u64,
        rows
    );
}

#[test]
fn dbn_of_a_recording_reads_back_in_the_dbn_crate_and_databento() {
    use tickbox_dbn::dbn::decode::{DbnDecoder, DbnMetadata, DecodeRecord};
    use tickbox_dbn::dbn::{Mbp1Msg, TradeMsg};
    let dir = TempDir::new("export-dbn");
    let j = fixture(dir.path());
    let want = expected_from_dump(&j, &[]);
    let trades = dir.path().join("trades.dbn.zst");
    ok(&tickbox(&[
        "journal",
        "export",
        j.to_str().unwrap(),
        "--format",
        "dbn",
        "--kind",
        "trade",
        "--out",
        trades.to_str().unwrap(),
    ]));
    let mut dec = DbnDecoder::from_zstd_file(&trades).unwrap();
    let meta = dec.metadata().clone();
    assert_eq!(meta.schema, Some(tickbox_dbn::dbn::Schema::Trades));
    assert_eq!(meta.symbols, ["AAPL", "MSFT", "SPY"]);
    let aapl_iid = meta
        .mappings
        .iter()
        .find(|m| m.raw_symbol == "AAPL")
        .unwrap()
        .intervals[0]
        .symbol
        .clone();
    let mut n = 0u64;
    let mut sum = 0u64;
    let mut aapl = Vec::new();
    while let Some(t) = dec.decode_record::<TradeMsg>().unwrap() {
        n += 1;
        sum += u64::from(t.size);
        if t.hd.instrument_id.to_string() == aapl_iid {
            aapl.push(t.price);
        }
    }
    assert_eq!(n, want.rows_by_kind["trade"]);
    assert_eq!(sum, want.trade_size_sum);
    assert_eq!(aapl.first().copied(), Some(e9(&want.aapl_first_px)));
    assert_eq!(aapl.last().copied(), Some(e9(&want.aapl_last_px)));
    let quotes = dir.path().join("quotes.dbn");
    ok(&tickbox(&[
        "journal",
        "export",
        j.to_str().unwrap(),
        "--format",
        "dbn",
        "--kind",
        "quote",
        "--out",
        quotes.to_str().unwrap(),
    ]));
    let mut dec = DbnDecoder::from_file(&quotes).unwrap();
    let mut q = 0u64;
    while let Some(m) = dec.decode_record::<Mbp1Msg>().unwrap() {
        assert!(m.levels[0].bid_px < m.levels[0].ask_px);
        q += 1;
    }
    assert_eq!(q, want.rows_by_kind["quote"]);

    if let Err(why) = need_python_modules(&["databento"], &["databento"]) {
        eprintln!("SKIPPED Databento's reader: {why}");
        return;
    }
    let got = python(
        r#"
import sys, json, databento as db
store = db.DBNStore.from_file(sys.argv[1])
df = store.to_df(price_type="fixed", map_symbols=True)
a = df[df["symbol"] == "AAPL"]
print(json.dumps({"n": len(df), "sum": int(df["size"].sum()), "first": int(a["price"].iloc[0]), "last": int(a["price"].iloc[-1]), "schema": str(store.schema)}))
"#,
        &[trades.to_str().unwrap()],
        &[],
    )
    .unwrap();
    let v: Value = serde_json::from_str(got.trim()).unwrap();
    assert_eq!(v["n"], want.rows_by_kind["trade"]);
    assert_eq!(v["sum"], want.trade_size_sum);
    assert_eq!(v["first"], e9(&want.aapl_first_px));
    assert_eq!(v["last"], e9(&want.aapl_last_px));
    assert_eq!(v["schema"], "trades");
}

#[test]
fn a_compressed_journal_exports_as_the_plain_one_did() {
    let dir = TempDir::new("export-compressed");
    let j = fixture(dir.path());
    let json = |args: &[&str]| {
        ok(&tickbox(
            &[
                &["journal", "export", j.to_str().unwrap(), "--format", "json"][..],
                args,
            ]
            .concat(),
        ))
    };
    let plain = json(&[]);
    let plain_window = json(&["--from", "2026-01-03T00:00:00Z", "--kind", "trade"]);
    let report = common::compress_closed(&j, &tickbox_journal::CompressOptions::default());
    assert!(
        tickbox_journal::Reader::open(&j).unwrap().compressed(),
        "{report:?}"
    );
    assert_eq!(json(&[]), plain, "every record, byte for byte");
    assert_eq!(
        json(&["--from", "2026-01-03T00:00:00Z", "--kind", "trade"]),
        plain_window,
        "a seek into the compressed frames selects the same records"
    );
}
