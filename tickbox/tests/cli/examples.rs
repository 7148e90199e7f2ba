//! The operator's files in `examples/`, checked by the tools that will read them: Prometheus's `promtool` (the
//! alert rules parse, and their unit tests pass), `systemd-analyze verify` (the service units), and the metric
//! names the rules and the dashboard query are ones the commands really serve. A missing tool skips its part and
//! says why (`.ci/run` installs Debian's `prometheus`; `systemd-analyze` comes with systemd).

use crate::common;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::mpsc::Receiver;
use std::time::{Duration, Instant};

use common::{signal, spawn_piped, TempDir, TICKBOX};

fn examples() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .join("examples")
}

fn which(name: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|p| p.join(name))
            .find(|p| p.is_file())
    })
}

fn run_ok(cmd: &mut Command) -> String {
    let out = common::output_within(
        std::mem::replace(cmd, Command::new("true")),
        Duration::from_secs(60),
    );
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{text}");
    text
}

#[test]
fn the_alert_rules_pass_promtool_check_and_their_unit_tests() {
    let Some(promtool) = which("promtool") else {
        eprintln!("SKIP the_alert_rules_pass_promtool: no `promtool` (Debian's `prometheus` package; .ci/run installs it)");
        return;
    };
    let dir = examples().join("prometheus");
    let checked = run_ok(Command::new(&promtool).current_dir(&dir).args([
        "check",
        "rules",
        "tickbox.rules.yml",
    ]));
    assert!(checked.contains("SUCCESS"), "{checked}");
    let tested = run_ok(Command::new(&promtool).current_dir(&dir).args([
        "test",
        "rules",
        "tickbox.rules.test.yml",
    ]));
    assert!(tested.contains("SUCCESS"), "{tested}");
    let config = run_ok(Command::new(&promtool).current_dir(&dir).args([
        "check",
        "config",
        "prometheus.yml",
    ]));
    assert!(config.contains("SUCCESS"), "{config}");
    // Every alert named in the rules has a unit test that makes it fire.
    let rules = std::fs::read_to_string(dir.join("tickbox.rules.yml")).unwrap();
    let tests = std::fs::read_to_string(dir.join("tickbox.rules.test.yml")).unwrap();
    for alert in rules
        .lines()
        .filter_map(|l| l.trim().strip_prefix("- alert: "))
    {
        assert!(
            tests.contains(&format!(
                "alertname: {alert}\n        exp_alerts:\n          - "
            )),
            "{alert} has no unit test that fires it"
        );
    }
}

#[test]
fn the_service_units_pass_systemd_analyze_verify() {
    let Some(analyze) = which("systemd-analyze") else {
        eprintln!(
            "SKIP the_service_units_pass_systemd_analyze_verify: no `systemd-analyze` on this host"
        );
        return;
    };
    let dir = TempDir::new("units");
    let mut units = Vec::new();
    for entry in std::fs::read_dir(examples().join("systemd")).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if !name.ends_with(".service") {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        // The stop signal is one the commands handle (the ctrlc handler takes SIGINT, SIGTERM and SIGHUP), and
        // each unit restarts, is hardened and exposes metrics on loopback.
        for needed in [
            "KillSignal=SIGTERM",
            "Restart=on-failure",
            "NoNewPrivileges=yes",
            "ProtectSystem=strict",
            "--metrics 127.0.0.1:",
        ] {
            assert!(text.contains(needed), "{name} lacks {needed}");
        }
        // verify checks that ExecStart's binary exists: point it at the one Cargo built.
        let local = dir.join(&name);
        std::fs::write(&local, text.replace("/usr/local/bin/tickbox", TICKBOX)).unwrap();
        units.push(local);
    }
    let names: BTreeSet<String> = units
        .iter()
        .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    for role in ["feed", "lvc", "subscribe", "record", "broker"] {
        assert!(
            names.contains(&format!("tickbox-{role}.service")),
            "{names:?}"
        );
    }
    for unit in &units {
        let out = common::output_within(
            {
                let mut c = Command::new(&analyze);
                c.arg("verify").arg(unit);
                c
            },
            Duration::from_secs(30),
        );
        let stderr = String::from_utf8_lossy(&out.stderr);
        if !out.status.success() && stderr.contains("System has not been booted with systemd") {
            eprintln!("SKIP the_service_units_pass_systemd_analyze_verify: {stderr}");
            return;
        }
        assert!(out.status.success(), "{}: {stderr}", unit.display());
    }
    // The stop signal really stops a command cleanly, summary printed.
    let (_feed, out, err) =
        spawn_piped(Command::new(TICKBOX).args(["feed", "--rate", "1k", "--json"]));
    // Once it runs: its shard says where it publishes.
    common::line_after(&err, "feed shard 0");
    signal(_feed.0.id(), "TERM");
    let summary = last_json(&out, Duration::from_secs(10));
    assert!(summary["sent"].is_u64(), "{summary}");
}

fn last_json(lines: &Receiver<String>, limit: Duration) -> serde_json::Value {
    let deadline = Instant::now() + limit;
    let mut last = None;
    while let Some(left) = deadline.checked_duration_since(Instant::now()) {
        match lines.recv_timeout(left) {
            Ok(line) => {
                if let Ok(v @ serde_json::Value::Object(_)) = serde_json::from_str(&line) {
                    last = Some(v);
                }
            }
            Err(_) => break,
        }
    }
    last.expect("a JSON summary on stdout")
}

/// The metric names (`tickbox_…`, as stored: with `_total`, `_bucket`, …) the rules and the dashboard query.
fn names_queried() -> BTreeSet<String> {
    let mut text =
        std::fs::read_to_string(examples().join("prometheus/tickbox.rules.yml")).unwrap();
    text.push_str(
        &std::fs::read_to_string(examples().join("grafana/tickbox-dashboard.json")).unwrap(),
    );
    let mut names = BTreeSet::new();
    let bytes = text.as_bytes();
    let mut i = 0;
    while let Some(at) = text[i..].find("tickbox_") {
        let start = i + at;
        let end = text[start..]
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .map_or(text.len(), |e| start + e);
        // `tickbox_` inside a word (a file name like tickbox_decode) is not a query.
        if start == 0 || !(bytes[start - 1].is_ascii_alphanumeric() || bytes[start - 1] == b'_') {
            names.insert(text[start..end].to_owned());
        }
        i = end;
    }
    names
}

/// The sample names every `/metrics` line of `addr` carries.
fn served(addr: &str) -> BTreeSet<String> {
    let (code, body) =
        tickbox_metrics::fetch(addr, "/metrics", Duration::from_secs(5), 16 << 20).unwrap();
    assert_eq!(code, 200);
    tickbox_metrics::text::parse(&body)
        .into_iter()
        .map(|s| s.name)
        .collect()
}

fn metrics_addr(stderr: &Receiver<String>) -> String {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let line = stderr
            .recv_timeout(deadline.saturating_duration_since(Instant::now()))
            .expect("metrics endpoint line");
        if let Some(url) = line.strip_prefix("metrics endpoint http://") {
            return url.trim_end_matches("/metrics").to_owned();
        }
    }
}

#[test]
fn every_metric_the_rules_and_the_dashboard_query_is_one_a_command_serves() {
    let dir = TempDir::new("examples-names");
    let journal = dir.join("day");
    let mut served_names = BTreeSet::new();
    // A short stream through every role that serves metrics: feed → subscribe and record; a broker; an LVC;
    // then a replay of what was recorded.
    let (_feed, feed_out, feed_err) = spawn_piped(Command::new(TICKBOX).args([
        "feed",
        "--bind",
        "tcp://127.0.0.1:*",
        "--rate",
        "2k",
        "--max-messages",
        "2000",
        "--wait-for-subscribers",
        "2",
        "--json",
        "--metrics",
        "0",
    ]));
    let feed_addr = metrics_addr(&feed_err);
    let ep = loop {
        let line = feed_err
            .recv_timeout(Duration::from_secs(10))
            .expect("feed endpoint");
        if line.starts_with("feed shard ") {
            break line.rsplit(' ').next().unwrap().to_owned();
        }
    };
    let journal_arg = journal.display().to_string();
    let (rec, rec_out, rec_err) = spawn_piped(Command::new(TICKBOX).args([
        "record",
        "--connect",
        &ep,
        "--journal",
        &journal_arg,
        "--json",
        "--metrics",
        "0",
    ]));
    let rec_addr = metrics_addr(&rec_err);
    let (sub, sub_out, sub_err) = spawn_piped(Command::new(TICKBOX).args([
        "subscribe",
        "--connect",
        &ep,
        "--json",
        "--metrics",
        "0",
    ]));
    let sub_addr = metrics_addr(&sub_err);
    let (_broker, _b_out, broker_err) = spawn_piped(Command::new(TICKBOX).args([
        "broker",
        "--bind",
        "tcp://127.0.0.1:*",
        "--metrics",
        "0",
    ]));
    served_names.extend(served(&metrics_addr(&broker_err)));
    let (_lvc, _l_out, lvc_err) = spawn_piped(Command::new(TICKBOX).args([
        "lvc",
        "--upstream",
        &ep,
        "--bind",
        "tcp://127.0.0.1:*",
        "--metrics",
        "0",
    ]));
    served_names.extend(served(&metrics_addr(&lvc_err)));
    assert!(tickbox_testkit::wait_until(Duration::from_secs(20), || {
        tickbox_metrics::text::parse(
            &tickbox_metrics::fetch(&sub_addr, "/metrics", Duration::from_secs(5), 16 << 20)
                .unwrap()
                .1,
        )
        .iter()
        .any(|s| s.name == "tickbox_data_received_total" && s.value > 0.0)
    }));
    served_names.extend(served(&feed_addr));
    served_names.extend(served(&sub_addr));
    let _ = last_json(&feed_out, Duration::from_secs(20));
    assert!(tickbox_testkit::wait_until(Duration::from_secs(10), || {
        tickbox_metrics::text::parse(
            &tickbox_metrics::fetch(&rec_addr, "/metrics", Duration::from_secs(5), 16 << 20)
                .unwrap()
                .1,
        )
        .iter()
        .any(|s| s.name == "tickbox_recorded_total" && s.value > 0.0)
    }));
    served_names.extend(served(&rec_addr));
    signal(sub.0.id(), "INT");
    signal(rec.0.id(), "INT");
    let _ = last_json(&sub_out, Duration::from_secs(10));
    let _ = last_json(&rec_out, Duration::from_secs(10));
    let (replay, _r_out, replay_err) = spawn_piped(Command::new(TICKBOX).args([
        "replay",
        "--journal",
        &journal_arg,
        "--bind",
        "tcp://127.0.0.1:*",
        "--speed",
        "max",
        "--metrics",
        "0",
        "--back-pressure",
        "drop",
        "--wait-for-subscribers",
        "0",
        "--follow",
    ]));
    let replay_addr = metrics_addr(&replay_err);
    assert!(tickbox_testkit::wait_until(Duration::from_secs(10), || {
        served(&replay_addr).contains("tickbox_replay_position_seconds")
    }));
    served_names.extend(served(&replay_addr));
    drop(replay);
    // Served only under `record --elect` (a ZooKeeper election): metrics::record_elect_serves_its_leadership.
    served_names.insert("tickbox_recorder_leading".into());
    let missing: Vec<String> = names_queried()
        .into_iter()
        .filter(|n| !served_names.contains(n))
        .collect();
    assert!(
        missing.is_empty(),
        "the examples query metrics no command serves: {missing:?}\nserved: {served_names:?}"
    );
}
