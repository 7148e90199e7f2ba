//! `journal export` to an object store: a real S3 server (Garage, one node on loopback, started here on free
//! ports in a temp dir and stopped by the test), read back by pyarrow's S3 filesystem and DuckDB's httpfs, held
//! against `journal dump`; an unreachable or unauthorised store is one line and exit 13 with nothing left; the
//! credentials never appear in what tickbox prints, even at trace level.

use crate::common;
use crate::export_formats::{
    check_reader, expected_from_dump, fixture, need_python_modules, ok, python, RECORDS,
};

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::{KillOnDrop, TempDir, TICKBOX};
use serde_json::Value;

const SECRET: &str = "0f1e2d3c4b5a69788796a5b4c3d2e1f00f1e2d3c4b5a69788796a5b4c3d2e1f0";

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn export_with_env(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(TICKBOX);
    cmd.arg("journal").arg("export").args(args);
    for k in [
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_SESSION_TOKEN",
        "AWS_ENDPOINT_URL",
        "AWS_ENDPOINT",
        "AWS_REGION",
        "AWS_DEFAULT_REGION",
        "AWS_PROFILE",
    ] {
        cmd.env_remove(k);
    }
    for (k, v) in env {
        cmd.env(k, v);
    }
    common::output_within(cmd, Duration::from_secs(60))
}

#[test]
fn an_unreachable_store_is_one_line_and_exit_13_with_nothing_left() {
    let dir = TempDir::new("export-s3-unreachable");
    let j = fixture(dir.path());
    let port = free_port(); // nothing listens there
    let endpoint = format!("http://127.0.0.1:{port}");
    let env = [
        ("AWS_ACCESS_KEY_ID", "GK0123456789abcdef01234567"),
        ("AWS_SECRET_ACCESS_KEY", SECRET),
        ("AWS_ENDPOINT_URL", endpoint.as_str()),
        ("AWS_REGION", "garage"),
        ("RUST_LOG", "trace"),
    ];
    let started = Instant::now();
    let o = export_with_env(
        &[
            j.to_str().unwrap(),
            "--format",
            "parquet",
            "--out",
            "s3://research/day",
        ],
        &env,
    );
    assert_eq!(
        o.status.code(),
        Some(13),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(
        started.elapsed() < Duration::from_secs(45),
        "an unreachable store fails within the retry bound"
    );
    let err = String::from_utf8_lossy(&o.stderr);
    let errors: Vec<&str> = err.lines().filter(|l| l.starts_with("error:")).collect();
    assert_eq!(errors.len(), 1, "one line: {err}");
    assert!(errors[0].contains("s3://research/day"), "{err}");
    assert!(!err.contains(SECRET) && !String::from_utf8_lossy(&o.stdout).contains(SECRET));
    // No credentials at all: refused before asking anything (never a cloud metadata service).
    let o = export_with_env(
        &[
            j.to_str().unwrap(),
            "--format",
            "parquet",
            "--out",
            "s3://research/day",
        ],
        &[("AWS_ENDPOINT_URL", endpoint.as_str())],
    );
    assert_eq!(o.status.code(), Some(13));
    assert!(String::from_utf8_lossy(&o.stderr).contains("AWS_ACCESS_KEY_ID"));
    // Credentials in the URL: refused, and not repeated.
    let o = export_with_env(
        &[
            j.to_str().unwrap(),
            "--format",
            "parquet",
            "--out",
            &format!("s3://GK01:{SECRET}@research/day"),
        ],
        &env,
    );
    assert_eq!(o.status.code(), Some(1));
    assert!(!String::from_utf8_lossy(&o.stderr).contains(SECRET));
}

/// A one-node Garage on loopback, in a temp dir, stopped when dropped.
struct Garage {
    _server: KillOnDrop,
    config: PathBuf,
    s3_port: u16,
    key_id: String,
    secret: String,
    bin: PathBuf,
}

fn garage_bin() -> Option<PathBuf> {
    let on_path = Command::new("garage")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if on_path {
        return Some(PathBuf::from("garage"));
    }
    let home = std::env::var_os("HOME").map(PathBuf::from)?;
    let p = home.join(".cargo/bin/garage");
    p.is_file().then_some(p)
}

impl Garage {
    fn cli(&self, args: &[&str]) -> Output {
        let mut cmd = Command::new(&self.bin);
        cmd.arg("-c").arg(&self.config).args(args);
        common::output_within(cmd, Duration::from_secs(30))
    }

    fn start(dir: &Path) -> Result<Garage, String> {
        let bin = garage_bin().ok_or(
            "garage is not installed (.ci/run installs it: cargo install garage --locked)"
                .to_owned(),
        )?;
        let (rpc, s3, admin) = (free_port(), free_port(), free_port());
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let config = dir.join("garage.toml");
        std::fs::write(
            &config,
            format!(
                "metadata_dir = \"{meta}\"\ndata_dir = \"{data}\"\ndb_engine = \"sqlite\"\nreplication_factor = 1\n\
                 rpc_bind_addr = \"127.0.0.1:{rpc}\"\nrpc_public_addr = \"127.0.0.1:{rpc}\"\nrpc_secret = \"{SECRET}\"\n\
                 [s3_api]\ns3_region = \"garage\"\napi_bind_addr = \"127.0.0.1:{s3}\"\nroot_domain = \".s3.garage.localhost\"\n\
                 [admin]\napi_bind_addr = \"127.0.0.1:{admin}\"\n",
                meta = dir.join("meta").display(),
                data = dir.join("data").display(),
            ),
        )
        .unwrap();
        let server = Command::new(&bin)
            .arg("-c")
            .arg(&config)
            .arg("server")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("garage server: {e}"))?;
        let mut g = Garage {
            _server: KillOnDrop(server),
            config,
            s3_port: s3,
            key_id: String::new(),
            secret: String::new(),
            bin,
        };
        // The node answers its CLI's `status` once its RPC is up (`node id` answers from the key file before).
        let deadline = Instant::now() + Duration::from_secs(20);
        let id = loop {
            let o = g.cli(&["node", "id", "-q"]);
            if o.status.success() && g.cli(&["status"]).status.success() {
                break String::from_utf8_lossy(&o.stdout).trim().to_owned();
            }
            assert!(
                Instant::now() < deadline,
                "garage did not start: {}",
                String::from_utf8_lossy(&o.stderr)
            );
            std::thread::sleep(Duration::from_millis(100));
        };
        let node = id.split('@').next().unwrap_or_default().to_owned();
        let step = |o: Output, what: &str| {
            assert!(
                o.status.success(),
                "garage {what}: {}{}",
                String::from_utf8_lossy(&o.stdout),
                String::from_utf8_lossy(&o.stderr)
            );
            String::from_utf8_lossy(&o.stdout).into_owned()
        };
        step(
            g.cli(&["layout", "assign", "-z", "dc1", "-c", "1G", &node]),
            "layout assign",
        );
        step(
            g.cli(&["layout", "apply", "--version", "1"]),
            "layout apply",
        );
        let key = step(g.cli(&["key", "create", "tickbox-test"]), "key create");
        let field = |name: &str| {
            key.lines()
                .find_map(|l| l.trim().strip_prefix(name).map(|v| v.trim().to_owned()))
                .unwrap_or_else(|| panic!("no {name} in {key}"))
        };
        g.key_id = field("Key ID:");
        g.secret = field("Secret key:");
        step(g.cli(&["bucket", "create", "research"]), "bucket create");
        step(
            g.cli(&[
                "bucket",
                "allow",
                "--read",
                "--write",
                "--owner",
                "research",
                "--key",
                "tickbox-test",
            ]),
            "bucket allow",
        );
        Ok(g)
    }

    fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.s3_port)
    }

    fn env(&self) -> Vec<(&'static str, String)> {
        vec![
            ("AWS_ACCESS_KEY_ID", self.key_id.clone()),
            ("AWS_SECRET_ACCESS_KEY", self.secret.clone()),
            ("AWS_ENDPOINT_URL", self.endpoint()),
            ("AWS_REGION", "garage".to_owned()),
        ]
    }
}

#[test]
fn parquet_to_garage_reads_back_in_pyarrow_and_duckdb_and_a_bad_key_leaves_nothing() {
    let dir = TempDir::new("export-s3");
    let garage = match Garage::start(&dir.path().join("garage")) {
        Ok(g) => g,
        Err(why) => {
            eprintln!("SKIPPED: {why}");
            return;
        }
    };
    let j = fixture(dir.path());
    let want = expected_from_dump(&j, &[]);
    let env_owned = garage.env();
    let mut env: Vec<(&str, &str)> = env_owned.iter().map(|(k, v)| (*k, v.as_str())).collect();
    env.push(("RUST_LOG", "trace"));
    let o = export_with_env(
        &[
            j.to_str().unwrap(),
            "--format",
            "parquet",
            "--out",
            "s3://research/tickbox/day",
            "--json",
        ],
        &env,
    );
    let text = ok(&o);
    for out in [&text, &String::from_utf8_lossy(&o.stderr).into_owned()] {
        assert!(!out.contains(&garage.secret), "the secret never shows");
    }
    let s: Value = serde_json::from_str(text.trim()).unwrap();
    assert_eq!(s["rows"], RECORDS);
    let files = s["files"].as_array().unwrap();
    assert!(files.iter().all(|f| f["path"]
        .as_str()
        .unwrap()
        .starts_with("s3://research/tickbox/day/date=")));
    // A file output to the store too: one JSON-lines object.
    ok(&export_with_env(
        &[
            j.to_str().unwrap(),
            "--format",
            "json",
            "--kind",
            "gap",
            "--out",
            "s3://research/tickbox/gaps.jsonl",
        ],
        &env,
    ));

    if let Err(why) = need_python_modules(
        &["pyarrow", "duckdb", "duckdb_extension_httpfs"],
        &["pyarrow", "duckdb==1.5.5", "duckdb-extension-httpfs==1.5.5"],
    ) {
        eprintln!("SKIPPED the readers' half: {why}");
        return;
    }
    let py_env = [
        ("S3_ENDPOINT", garage.endpoint()),
        ("S3_KEY", garage.key_id.clone()),
        ("S3_SECRET", garage.secret.clone()),
    ];
    let py_env: Vec<(&str, &str)> = py_env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    for reader in ["pyarrow", "duckdb"] {
        check_reader(reader, "s3://research/tickbox/day", &want, &py_env);
    }
    let gaps = python(
        r#"
import os, pyarrow.fs as pafs
fs = pafs.S3FileSystem(access_key=os.environ["S3_KEY"], secret_key=os.environ["S3_SECRET"],
    endpoint_override=os.environ["S3_ENDPOINT"], region="garage", scheme="http")
print(fs.open_input_stream("research/tickbox/gaps.jsonl").read().decode())
"#,
        &[],
        &py_env,
    )
    .unwrap();
    assert_eq!(
        gaps.lines()
            .filter(|l| l.contains("\"kind\":\"gap\""))
            .count(),
        1
    );

    // A key without rights on the bucket: refused, exit 13, and nothing written under the prefix.
    let no_rights = garage.cli(&["key", "create", "no-rights"]);
    let k = String::from_utf8_lossy(&no_rights.stdout).into_owned();
    let field = |name: &str| {
        k.lines()
            .find_map(|l| l.trim().strip_prefix(name).map(|v| v.trim().to_owned()))
            .unwrap()
    };
    let bad = [
        ("AWS_ACCESS_KEY_ID", field("Key ID:")),
        ("AWS_SECRET_ACCESS_KEY", field("Secret key:")),
        ("AWS_ENDPOINT_URL", garage.endpoint()),
        ("AWS_REGION", "garage".to_owned()),
    ];
    let bad: Vec<(&str, &str)> = bad.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let o = export_with_env(
        &[
            j.to_str().unwrap(),
            "--format",
            "parquet",
            "--out",
            "s3://research/refused",
        ],
        &bad,
    );
    assert_eq!(
        o.status.code(),
        Some(13),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let listed = python(
        r#"
import os, pyarrow.fs as pafs
fs = pafs.S3FileSystem(access_key=os.environ["S3_KEY"], secret_key=os.environ["S3_SECRET"],
    endpoint_override=os.environ["S3_ENDPOINT"], region="garage", scheme="http")
print(len(fs.get_file_info(pafs.FileSelector("research/refused", recursive=True, allow_not_found=True))))
"#,
        &[],
        &py_env,
    )
    .unwrap();
    assert_eq!(
        listed.trim(),
        "0",
        "nothing partial under the refused prefix"
    );
}

/// Records `n` quotes of one publisher with `tickbox record ARGS --connect EP` under `env`; the output.
fn record_quotes(args: &[&str], n: u64, env: &[(&str, &str)]) -> Output {
    let ctx = zmq::Context::new();
    let publisher = ctx.socket(zmq::XPUB).unwrap();
    publisher.set_linger(1000).unwrap();
    publisher.set_sndhwm(0).unwrap();
    let ep = tickbox_testkit::bind_loopback(&publisher);
    let count = n.to_string();
    let mut cmd = Command::new(TICKBOX);
    cmd.args(["record", "--connect", &ep, "--max-messages", &count])
        .args(args);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let recorder = KillOnDrop(
        cmd.stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    publisher.set_rcvtimeo(10_000).unwrap();
    assert_eq!(
        publisher.recv_bytes(0).unwrap(),
        b"\x01",
        "the recorder subscribes"
    );
    for i in 1..=n {
        let q = tickbox_wire::Quote {
            instrument_id: 1,
            bid_px: i as i64 * 1_000_000,
            ..tickbox_wire::Quote::default()
        };
        let f = tickbox_wire::encode_to_vec(
            "Q.XNAS.AAPL",
            &tickbox_wire::Header::live(tickbox_wire::Kind::Quote, 7, i, tickbox_wire::now_ns()),
            &q.into(),
        )
        .unwrap();
        publisher.send(&f[..], 0).unwrap();
    }
    recorder.wait_output(Duration::from_secs(30))
}

#[test]
fn record_archives_each_closed_journal_and_ls_and_export_read_the_history_back_from_the_store() {
    let dir = TempDir::new("export-s3-archive");
    let garage = match Garage::start(&dir.path().join("garage")) {
        Ok(g) => g,
        Err(why) => {
            eprintln!("SKIPPED: {why}");
            return;
        }
    };
    let env_owned = garage.env();
    let env: Vec<(&str, &str)> = env_owned.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let hist = dir.path().join("hist");
    // 3,000 quotes of ~120 bytes stored: five or six journals of 64 KiB.
    let o = record_quotes(
        &[
            "--journal",
            hist.to_str().unwrap(),
            "--roll",
            "64KiB",
            "--segment-size",
            "1MiB",
            "--archive-to",
            "s3://research/hist",
            "--archive-as",
            "journal,parquet",
        ],
        3_000,
        &env,
    );
    let out = format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(o.status.success(), "{out}");
    assert!(!out.contains(&garage.secret));
    let local_ls = ok(&tickbox_cmd(
        &["journal", "ls", hist.to_str().unwrap(), "--json"],
        &[],
    ));
    let journals = serde_json::from_str::<Value>(&local_ls).unwrap()["journals"]
        .as_array()
        .unwrap()
        .len();
    assert!(journals >= 4, "{local_ls}");
    assert!(
        out.contains(&format!("archive       {journals} journal(s) archived")),
        "{out}"
    );
    // journal ls of the store lists the same journals as of the directory.
    let names = |text: &str| -> Vec<String> {
        serde_json::from_str::<Value>(text).unwrap()["journals"]
            .as_array()
            .unwrap()
            .iter()
            .map(|j| j["name"].as_str().unwrap().to_owned())
            .collect()
    };
    let remote_ls = ok(&tickbox_cmd(
        &["journal", "ls", "s3://research/hist", "--json"],
        &env,
    ));
    assert_eq!(names(&remote_ls), names(&local_ls));
    // An export of the history from the store is the export of the directory, record for record.
    let local = ok(&tickbox_cmd(
        &[
            "journal",
            "export",
            hist.to_str().unwrap(),
            "--format",
            "json",
        ],
        &[],
    ));
    let remote = ok(&tickbox_cmd(
        &[
            "journal",
            "export",
            "s3://research/hist",
            "--format",
            "json",
        ],
        &env,
    ));
    assert_eq!(local.lines().count(), 3_000);
    assert!(
        remote == local,
        "the store's history exports as the directory does"
    );
    // A backtest replays the history from the store: every record.
    let local_replay = tickbox_cmd(
        &[
            "replay",
            "--journal",
            "s3://research/hist",
            "--local",
            "--json",
        ],
        &env,
    );
    let v: Value = serde_json::from_str(ok(&local_replay).trim()).unwrap_or(Value::Null);
    assert_eq!(v["processed"], 3_000, "{v}");
    // The Parquet half: one dataset under PREFIX/parquet, every quote once.
    if need_python_modules(&["pyarrow"], &["pyarrow"]).is_ok() {
        let n = python(
            r#"
import os, pyarrow.fs as pafs, pyarrow.dataset as ds
fs = pafs.S3FileSystem(access_key=os.environ["S3_KEY"], secret_key=os.environ["S3_SECRET"],
    endpoint_override=os.environ["S3_ENDPOINT"], region="garage", scheme="http")
t = ds.dataset("research/hist/parquet", filesystem=fs, format="parquet", partitioning="hive").to_table(columns=["sequence"])
s = t.column("sequence").to_pylist()
print(len(s), len(set(s)))
"#,
            &[],
            &[
                ("S3_ENDPOINT", garage.endpoint().as_str()),
                ("S3_KEY", garage.key_id.as_str()),
                ("S3_SECRET", garage.secret.as_str()),
            ],
        )
        .unwrap();
        assert_eq!(n.trim(), "3000 3000");
    }
}

/// The last `F of T bytes fetched` a command logged (the copy of a store's objects it read through).
fn fetched(stderr: &[u8]) -> (u64, u64) {
    let text = String::from_utf8_lossy(stderr);
    let line = text
        .lines()
        .rev()
        .find(|l| l.contains(" bytes fetched in "))
        .unwrap_or_else(|| panic!("no fetch line in {text}"));
    let words: Vec<&str> = line.split_whitespace().collect();
    let at = words.iter().position(|w| *w == "bytes").unwrap();
    let n = |w: &str| w.parse::<u64>().unwrap_or_else(|_| panic!("{line}"));
    (n(words[at - 3]), n(words[at - 1]))
}

#[test]
fn a_compressed_history_in_the_store_lists_from_its_cards_and_exports_from_ranged_reads() {
    let dir = TempDir::new("export-s3-ranges");
    let garage = match Garage::start(&dir.path().join("garage")) {
        Ok(g) => g,
        Err(why) => {
            eprintln!("SKIPPED: {why}");
            return;
        }
    };
    let env_owned = garage.env();
    let env: Vec<(&str, &str)> = env_owned.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let hist = dir.path().join("hist");
    // 40,000 quotes (about 5 MB as recorded) in journals of 2 MiB, compressed as each closes: frames of 1 MiB.
    let o = record_quotes(
        &[
            "--journal",
            hist.to_str().unwrap(),
            "--roll",
            "2MiB",
            "--segment-size",
            "4MiB",
            "--compress",
            "--archive-to",
            "s3://research/packed",
        ],
        40_000,
        &env,
    );
    let out = format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(o.status.success(), "{out}");
    let local_ls = ok(&tickbox_cmd(
        &["journal", "ls", hist.to_str().unwrap(), "--json"],
        &[],
    ));
    let listing: Value = serde_json::from_str(&local_ls).unwrap();
    let journals = listing["journals"].as_array().unwrap();
    assert!(journals.len() >= 2, "{local_ls}");
    // Each rolled journal is compressed as it closes; the one the run ended in stays plain (a later run may
    // append to it).
    assert!(
        journals[..journals.len() - 1]
            .iter()
            .all(|j| j["compressed"] == true),
        "{local_ls}"
    );
    // ls of the store: its cards, and each file's first bytes (a compressed one's header and index); not the frames,
    // nor the plain journal's records.
    let remote = tickbox_cmd(&["journal", "ls", "s3://research/packed", "--json"], &env);
    let remote_ls: Value = serde_json::from_str(&ok(&remote)).unwrap();
    assert_eq!(
        remote_ls["journals"].as_array().unwrap().len(),
        journals.len()
    );
    assert_eq!(remote_ls["records"], 40_000);
    let (got, total) = fetched(&remote.stderr);
    assert!(
        got * 3 < total,
        "ls fetched {got} of {total} bytes: the cards, headers and indexes only"
    );
    // An export of the whole history from the store reads every frame (once) and equals the directory's.
    let local = ok(&tickbox_cmd(
        &[
            "journal",
            "export",
            hist.to_str().unwrap(),
            "--format",
            "json",
        ],
        &[],
    ));
    let o = tickbox_cmd(
        &[
            "journal",
            "export",
            "s3://research/packed",
            "--format",
            "json",
            "--json",
        ],
        &env,
    );
    assert!(
        ok(&o) == local,
        "the store's history exports as the directory does"
    );
    let err = String::from_utf8_lossy(&o.stderr);
    let summary: Value = err
        .lines()
        .rev()
        .find_map(|l| serde_json::from_str(l).ok())
        .unwrap_or_else(|| panic!("no summary in {err}"));
    assert_eq!(summary["rows"], 40_000);
    assert_eq!(
        summary["fetched"]["bytes"], summary["fetched"]["bytes_total"],
        "every byte, none twice: {summary}"
    );
}

fn tickbox_cmd(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(TICKBOX);
    cmd.args(args);
    for (k, v) in env {
        cmd.env(k, v);
    }
    common::output_within(cmd, Duration::from_secs(60))
}

/// 2026-11-24T00:00:00Z.
const DAY0: u64 = 1_795_478_400_000_000_000;
const HOUR: u64 = 3_600_000_000_000;
/// Quotes of each hour of the history (one every 72 ms).
const PER_HOUR: u64 = 50_000;

/// A history of four hourly journals (`PER_HOUR` quotes each, origin times 1 ms before their capture times),
/// each compressed as a closed period is (frames of 64 KiB).
fn hourly_history(hist: &Path) -> u64 {
    use tickbox_wire::{encode_to_vec, Header, Kind, Quote};
    let roll = tickbox_recorder::Roll::parse("hourly", None, Some("UTC")).unwrap();
    tickbox_recorder::HistoryDir::create_or_open(hist, Some(&roll)).unwrap();
    let mut seq = 1;
    for h in 0..4 {
        let start = DAY0 + h * HOUR;
        let path = hist.join(roll.period_of(start).name);
        let opts = tickbox_journal::WriterOptions::archive(16 << 20).first_seq(seq);
        let mut w = tickbox_journal::Writer::open(&path, &opts).unwrap();
        for i in 0..PER_HOUR {
            let t = start + i * (HOUR / PER_HOUR);
            let f = encode_to_vec(
                if i % 2 == 0 {
                    "Q.XNAS.AAPL"
                } else {
                    "Q.XNYS.IBM"
                },
                &Header {
                    origin_time_ns: t - 1_000_000,
                    ..Header::live(Kind::Quote, 7, seq, t)
                },
                &Quote {
                    instrument_id: 1 + (i % 2) as u32,
                    bid_px: seq as i64 * 1_000,
                    ..Quote::default()
                }
                .into(),
            )
            .unwrap();
            w.append(t, &f).unwrap();
            seq += 1;
        }
        w.close().unwrap();
        let opts = tickbox_journal::CompressOptions {
            level: 3,
            frame_bytes: 64 << 10,
        };
        common::compress_closed(&path, &opts);
    }
    seq - 1
}

/// What a replay printed and what one subscriber received: (publisher sequence, origin time) of each quote.
struct Replayed {
    code: Option<i32>,
    summary: Value,
    stderr: String,
    got: Vec<(u64, u64)>,
}

/// `tickbox replay --journal JOURNAL ARGS` at full speed into one subscriber, which leaves once `expect` quotes
/// arrived (the replay's drain then ends at once), until the replay has exited.
fn replay_into_sub(journal: &str, args: &[&str], env: &[(&str, &str)], expect: usize) -> Replayed {
    let mut cmd = Command::new(TICKBOX);
    cmd.args([
        "replay",
        "--journal",
        journal,
        "--bind",
        "tcp://127.0.0.1:*",
    ])
    .args(["--speed", "max", "--json", "--wait-for-subscribers", "1"])
    .args(["--wait-timeout", "10s"])
    .args(args)
    .env_remove("RUST_LOG")
    .stdout(Stdio::piped())
    .stderr(Stdio::piped());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = KillOnDrop(cmd.spawn().unwrap());
    let err_lines = common::forward_lines(child.0.stderr.take().unwrap());
    let out_lines = common::forward_lines(child.0.stdout.take().unwrap());
    let mut stderr = String::new();
    let endpoint = loop {
        let line = err_lines
            .recv_timeout(Duration::from_secs(15))
            .unwrap_or_else(|_| panic!("replay printed no endpoint: {stderr}"));
        stderr.push_str(&line);
        stderr.push('\n');
        if let Some(ep) = common::endpoint_in(&line) {
            break ep;
        }
    };
    let ctx = zmq::Context::new();
    let mut sub = Some(ctx.socket(zmq::SUB).unwrap());
    if let Some(sub) = &sub {
        sub.set_linger(0).unwrap();
        sub.set_rcvhwm(0).unwrap();
        sub.set_subscribe(b"Q.").unwrap();
        sub.connect(&endpoint).unwrap();
    }
    let (mut got, mut code, mut summary) = (Vec::new(), None, None::<Value>);
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        while let Some(Ok(frame)) = sub.as_ref().map(|s| s.recv_bytes(zmq::DONTWAIT)) {
            let m = tickbox_wire::MessageRef::decode(&frame).unwrap();
            got.push((m.header().sequence, m.header().origin_time_ns));
        }
        if got.len() >= expect {
            sub = None;
        }
        if code.is_none() {
            code = child.0.try_wait().unwrap().map(|s| s.code());
        }
        if summary.is_none() {
            summary = out_lines
                .try_recv()
                .ok()
                .and_then(|l| serde_json::from_str(&l).ok());
        }
        if code.is_some() && summary.is_some() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "replay {args:?}: exited {code:?}, summary {summary:?}, {} received; {stderr}",
            got.len()
        );
        match &sub {
            Some(sub) => {
                let mut items = [sub.as_poll_item(zmq::POLLIN)];
                zmq::poll(&mut items, 20).unwrap();
            }
            None => std::thread::sleep(Duration::from_millis(20)),
        }
    }
    while let Ok(line) = err_lines.recv_timeout(Duration::from_secs(1)) {
        stderr.push_str(&line);
        stderr.push('\n');
    }
    Replayed {
        code: code.flatten(),
        summary: summary.unwrap(),
        stderr,
        got,
    }
}

#[test]
fn a_replay_window_from_the_store_reads_its_frames_by_range_and_sends_what_the_directory_sends() {
    let dir = TempDir::new("export-s3-replay");
    let garage = match Garage::start(&dir.path().join("garage")) {
        Ok(g) => g,
        Err(why) => {
            eprintln!("SKIPPED: {why}");
            return;
        }
    };
    if let Err(why) = need_python_modules(&["pyarrow"], &["pyarrow"]) {
        eprintln!("SKIPPED: pyarrow (to put the history into the store) did not install: {why}");
        return;
    }
    let env_owned = garage.env();
    let env: Vec<(&str, &str)> = env_owned.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let hist = dir.path().join("hist");
    let records = hourly_history(&hist);
    assert_eq!(records, 4 * PER_HOUR);
    // Into the store as `record --archive-to` leaves a history: its files under the prefix.
    python(
        r#"
import os, sys, pyarrow.fs as pafs
fs = pafs.S3FileSystem(access_key=os.environ["S3_KEY"], secret_key=os.environ["S3_SECRET"],
    endpoint_override=os.environ["S3_ENDPOINT"], region="garage", scheme="http")
pafs.copy_files(sys.argv[1], "research/hourly", destination_filesystem=fs)
"#,
        &[hist.to_str().unwrap()],
        &[
            ("S3_ENDPOINT", garage.endpoint().as_str()),
            ("S3_KEY", garage.key_id.as_str()),
            ("S3_SECRET", garage.secret.as_str()),
        ],
    )
    .unwrap();
    // Ten minutes of the fourth hour, by origin time.
    let (from, to) = (
        DAY0 + 3 * HOUR + 20 * 60_000_000_000,
        DAY0 + 3 * HOUR + 30 * 60_000_000_000,
    );
    let window = ["--from", &from.to_string(), "--to", &to.to_string()].map(str::to_owned);
    let window: Vec<&str> = window.iter().map(String::as_str).collect();
    // Every quote of the window, as from the directory, and no damage reported.
    let origin = |i: u64| DAY0 + 3 * HOUR + i * (HOUR / PER_HOUR) - 1_000_000;
    let wanted = (0..PER_HOUR)
        .filter(|&i| (from..to).contains(&origin(i)))
        .count();
    let local = replay_into_sub(hist.to_str().unwrap(), &window, &[], wanted);
    assert_eq!(local.code, Some(0), "{}", local.stderr);
    let remote = replay_into_sub("s3://research/hourly", &window, &env, wanted);
    assert_eq!(remote.code, Some(0), "{}", remote.stderr);
    assert_eq!(local.got.len(), wanted);
    assert_eq!(local.summary["sent"], wanted);
    assert!(local.got.iter().all(|(_, o)| (from..to).contains(o)));
    assert!(
        remote.got == local.got,
        "the store's replay sends the directory's records"
    );
    assert_eq!(remote.summary["sent"], local.summary["sent"]);
    assert_eq!(remote.summary["damaged_ranges"], 0, "{}", remote.summary);
    // Read by range: the window's frames (and the ends of the history, which the replay reads to resolve the
    // times), not the history: 638,615 of 4,935,520 bytes when this was written.
    let fetched = &remote.summary["fetched"][0];
    let (bytes, total) = (
        fetched["bytes"].as_u64().unwrap(),
        fetched["bytes_total"].as_u64().unwrap(),
    );
    assert!(fetched["reads"].as_u64().unwrap() > 0, "{fetched}");
    assert!(
        bytes * 4 < total,
        "a ten-minute window of four hours fetched {bytes} of {total} bytes"
    );
    let printed = format!("{}{}", remote.stderr, remote.summary);
    assert!(!printed.contains(&garage.secret));
}
