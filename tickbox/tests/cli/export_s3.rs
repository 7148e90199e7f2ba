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
        // The node answers its CLI once its RPC is up.
        let deadline = Instant::now() + Duration::from_secs(20);
        let id = loop {
            let o = g.cli(&["node", "id", "-q"]);
            if o.status.success() {
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
