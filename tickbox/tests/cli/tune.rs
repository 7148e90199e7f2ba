//! `tickbox tune` end to end: the real binary on fixture hosts (`--root`), its exit codes, a plan that
//! `--config` accepts, and a tiny real sweep.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use common::{output_within, TempDir, TICKBOX};

fn fixture(name: &str) -> String {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../tuning/tests/fixtures")
        .join(name)
        .to_string_lossy()
        .into_owned()
}

fn tickbox(args: &[&str]) -> Output {
    let mut cmd = Command::new(TICKBOX);
    cmd.args(args).env("RUST_LOG", "warn");
    let out = output_within(cmd, Duration::from_secs(20));
    eprintln!("stdout:\n{}", String::from_utf8_lossy(&out.stdout));
    eprintln!("stderr:\n{}", String::from_utf8_lossy(&out.stderr));
    out
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn show_prints_tables_and_json_of_a_fixture_host() {
    let root = fixture("two_socket_smt");
    let out = tickbox(&["tune", "show", "--root", &root]);
    assert!(out.status.success());
    let text = stdout(&out);
    assert!(
        text.contains("64 CPUs online, 32 physical cores, 2 socket(s), 2 NUMA node(s), SMT on"),
        "{text}"
    );
    assert!(text.contains("eth2-TxRx-3"), "{text}");

    let out = tickbox(&["tune", "show", "--root", &root, "--json"]);
    assert!(out.status.success());
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["cpus"].as_array().unwrap().len(), 64);
    assert_eq!(json["nodes"][1]["cpus"][0], 16);
    let eth1 = json["nics"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["name"] == "eth1")
        .unwrap();
    assert_eq!(eth1["numa_node"], 0);
    assert_eq!(eth1["driver"], "ixgbe");
    assert_eq!(eth1["irqs"][0]["affinity"][0], 1);
}

#[test]
fn show_reads_this_machine() {
    let out = tickbox(&["tune", "show", "--json"]);
    assert!(out.status.success());
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let online = std::thread::available_parallelism().unwrap().get();
    assert!(json["cpus"].as_array().unwrap().len() >= online);
}

#[test]
fn check_reports_powersave_and_irqbalance_and_strict_fails_on_them() {
    let root = fixture("eight_core");
    let out = tickbox(&["tune", "check", "--root", &root]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "warnings alone do not fail without --strict"
    );
    let text = stdout(&out);
    assert!(text.contains("powersave"), "{text}");
    assert!(
        text.contains("fix: sudo cpupower -c 0-7 frequency-set -g performance"),
        "{text}"
    );
    assert!(
        text.contains("fix: sudo systemctl disable --now irqbalance"),
        "{text}"
    );

    let out = tickbox(&["tune", "check", "--root", &root, "--strict"]);
    assert_eq!(out.status.code(), Some(1));

    let out = tickbox(&["tune", "check", "--root", &root, "--json"]);
    let findings: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(findings["schema_version"], 1);
    let checks: Vec<&str> = findings["findings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["check"].as_str().unwrap())
        .collect();
    assert!(
        checks.contains(&"governor") && checks.contains(&"irqbalance"),
        "{checks:?}"
    );
}

#[test]
fn a_plan_is_a_config_the_other_commands_accept_and_passes_its_own_check() {
    let dir = TempDir::new("tune-plan");
    let root = fixture("two_socket_smt");
    let file = dir.path().join("plan.toml");
    let file_s = file.to_string_lossy().into_owned();
    let out = tickbox(&[
        "tune",
        "plan",
        "--root",
        &root,
        "--nic",
        "eth1,eth2",
        "--shards-per-nic",
        "2",
        "--workers",
        "1",
        "--connect",
        "tcp://10.0.1.1:5556,tcp://10.0.1.1:5557,tcp://10.0.2.1:5556,tcp://10.0.2.1:5557",
        "--out",
        &file_s,
    ]);
    assert!(out.status.success());
    let plan = std::fs::read_to_string(&file).unwrap();
    assert!(plan.contains("# No compromise"), "{plan}");

    let out = tickbox(&["config", "--config", &file_s]);
    assert!(out.status.success(), "the loader refused the plan");
    let effective: toml::Value = toml::from_str(&stdout(&out)).unwrap();
    let shards = effective["subscriber"]["shards"].as_array().unwrap();
    assert_eq!(shards.len(), 4);
    assert_eq!(shards[2]["nic"].as_str(), Some("eth2"));
    assert_eq!(
        shards[2]["connect"][0].as_str(),
        Some("tcp://10.0.2.1:5556")
    );
    // eth2 is on node 1 (CPUs 16-31 and 48-63), its IRQs on 16-17.
    let core = shards[2]["core"].as_integer().unwrap();
    assert!((18..32).contains(&core), "eth2's shard on CPU {core}");
    assert_eq!(effective["context"]["io_threads"].as_integer(), Some(2));
    assert_eq!(effective["workers"]["count"].as_integer(), Some(2));
    // Each NIC's shards use that NIC's I/O thread (ZMQ_AFFINITY bit), and the two NICs' bits differ; the
    // thread behind each bit is pinned on its NIC's node.
    let io_cpus = effective["context"]["io_thread_cpus"].as_array().unwrap();
    let io: Vec<(String, i64, i64)> = shards
        .iter()
        .map(|s| {
            let n = s["io_thread"].as_integer().unwrap();
            (
                s["nic"].as_str().unwrap().to_owned(),
                n,
                io_cpus[n as usize].as_integer().unwrap(),
            )
        })
        .collect();
    assert_eq!(io[0].1, io[1].1, "{io:?}");
    assert_eq!(io[2].1, io[3].1, "{io:?}");
    assert_ne!(io[0].1, io[2].1, "{io:?}");
    assert!(
        (0..16).contains(&io[0].2) || (32..48).contains(&io[0].2),
        "{io:?}"
    );
    assert!(
        (16..32).contains(&io[2].2) || (48..64).contains(&io[2].2),
        "{io:?}"
    );

    // The plan's own placement has no warning on the host it was made for; what stands is that its binds
    // beyond loopback run without [security] (unsecured_bind), which fencing them by IP clears.
    let out = tickbox(&[
        "--config", &file_s, "tune", "check", "--root", &root, "--json",
    ]);
    let findings: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let warnings: Vec<&str> = findings["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["severity"] == "warning")
        .map(|f| f["check"].as_str().unwrap())
        .collect();
    assert!(
        warnings.iter().all(|c| *c == "unsecured_bind"),
        "{warnings:?}"
    );
    let plan = std::fs::read_to_string(&file).unwrap();
    let fenced = if plan.contains("allow_ips = []") {
        plan.replacen("allow_ips = []", "allow_ips = [\"10.0.0.0/8\"]", 1)
    } else {
        format!("{plan}\n[security]\nallow_ips = [\"10.0.0.0/8\"]\n")
    };
    std::fs::write(&file, fenced).unwrap();
    let out = tickbox(&[
        "--config", &file_s, "tune", "check", "--root", &root, "--strict",
    ]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
}

#[test]
fn plan_on_a_small_host_says_what_it_compromised_and_a_missing_nic_fails() {
    let root = fixture("vm");
    let out = tickbox(&[
        "tune",
        "plan",
        "--root",
        &root,
        "--nic",
        "eth0",
        "--workers",
        "2",
    ]);
    assert!(out.status.success());
    let text = stdout(&out);
    assert!(text.contains("# Compromises this host forced:"), "{text}");

    let out = tickbox(&["tune", "plan", "--root", &root, "--nic", "eth7"]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("eth7") && err.contains("eth0"), "{err}");
}

#[test]
fn a_tiny_sweep_ranks_its_points_and_writes_a_loadable_winner() {
    let dir = TempDir::new("tune-sweep");
    let file = dir.path().join("best.toml");
    let file_s = file.to_string_lossy().into_owned();
    let started = std::time::Instant::now();
    let out = tickbox(&[
        "tune",
        "sweep",
        "--shards",
        "1",
        "--workers",
        "1",
        "--hwm",
        "1000",
        "--batch",
        "256",
        "--dispatch",
        "by_topic",
        "--io-threads",
        "1,2",
        "--pin",
        "no",
        "--repeats",
        "2",
        "--duration",
        "100ms",
        "--warmup",
        "50ms",
        "--rate",
        "5k",
        "--out",
        &file_s,
        "--json",
    ]);
    assert!(out.status.success());
    assert!(started.elapsed() < Duration::from_secs(20));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let results = json["results"].as_array().unwrap();
    assert_eq!(results.len(), 2, "2 points (the defaults are one of them)");
    let medians: Vec<f64> = results
        .iter()
        .map(|r| {
            assert_eq!(r["samples"].as_array().unwrap().len(), 2);
            assert!(r["p99_us"]["median"].as_f64().unwrap() > 0.0);
            r["throughput"]["median"].as_f64().unwrap()
        })
        .collect();
    assert!(medians.iter().all(|&m| m > 0.0), "{medians:?}");
    assert!(json["throughput_ratio"].as_f64().unwrap() > 0.0);
    assert_eq!(json["winner"], results[0]["point"]);
    assert_eq!(
        json["objective"], "balanced",
        "latency is part of the ranking"
    );

    let out = tickbox(&["config", "--config", &file_s]);
    assert!(out.status.success(), "the loader refused the winner");
    let effective: toml::Value = toml::from_str(&stdout(&out)).unwrap();
    assert_eq!(
        effective["context"]["io_threads"].as_integer().unwrap(),
        json["winner"]["io_threads"].as_i64().unwrap()
    );
    assert!(Path::new(&file).exists());
}

#[test]
fn check_holds_configured_socket_buffers_against_the_kernel_limits() {
    let dir = TempDir::new("tune-bufs");
    let file = dir.path().join("bufs.toml");
    std::fs::write(
        &file,
        "[context.sockets.subscriber]\nrcvbuf = 8388608\nrcvhwm = 50000\n",
    )
    .unwrap();
    let file_s = file.to_string_lossy().into_owned();
    // The loader takes the profile…
    let out = tickbox(&["config", "--config", &file_s]);
    assert!(out.status.success());
    assert!(stdout(&out).contains("rcvbuf = 8388608"));
    // …and check holds it against rmem_max (212992 on this fixture).
    let root = fixture("two_socket_smt");
    let out = tickbox(&[
        "--config", &file_s, "tune", "check", "--root", &root, "--strict",
    ]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stdout(&out).contains("fix: sudo sysctl -w net.core.rmem_max=8388608"),
        "{}",
        stdout(&out)
    );
}

/// Every new dimension reaches the points and the winner: two worker counts, two batches, both dispatch modes
/// (one I/O thread, unpinned, one repeat, throughput only, to stay well under the 20 s a test may take).
#[test]
fn a_sweep_crosses_workers_batch_and_dispatch_and_the_winner_carries_them() {
    let dir = TempDir::new("tune-sweep-dims");
    let file = dir.path().join("best.toml");
    let file_s = file.to_string_lossy().into_owned();
    let started = std::time::Instant::now();
    let out = tickbox(&[
        "tune",
        "sweep",
        "--workers",
        "1,2",
        "--batch",
        "16,256",
        "--dispatch",
        "round_robin,by_topic",
        "--io-threads",
        "1",
        "--pin",
        "no",
        "--repeats",
        "1",
        "--duration",
        "60ms",
        "--warmup",
        "20ms",
        "--no-latency",
        "--out",
        &file_s,
        "--json",
    ]);
    assert!(out.status.success());
    assert!(started.elapsed() < Duration::from_secs(20));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let points: Vec<(i64, i64, String)> = json["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            let p = &r["point"];
            (
                p["workers"].as_i64().unwrap(),
                p["batch"].as_i64().unwrap(),
                p["dispatch"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    for workers in [1, 2] {
        for batch in [16, 256] {
            for dispatch in ["round_robin", "by_topic"] {
                assert!(
                    points.contains(&(workers, batch, dispatch.to_owned())),
                    "{workers} {batch} {dispatch} missing from {points:?}"
                );
            }
        }
    }
    // round_robin was asked for: its points, and a winner among them, say they change semantics.
    let winner_rr = json["winner"]["dispatch"] == "round_robin";
    assert_eq!(
        json["winner_changes_semantics"]
            .as_array()
            .unwrap()
            .is_empty(),
        !winner_rr,
        "{json}"
    );
    if winner_rr {
        let text = std::fs::read_to_string(&file).unwrap();
        assert!(text.contains("CHANGES SEMANTICS: round_robin"), "{text}");
    }
    let out = tickbox(&["config", "--config", &file_s]);
    assert!(out.status.success(), "the loader refused the winner");
    let effective: toml::Value = toml::from_str(&stdout(&out)).unwrap();
    let w = &json["winner"];
    assert_eq!(
        effective["workers"]["count"].as_integer(),
        w["workers"].as_i64()
    );
    assert_eq!(
        effective["workers"]["batch"].as_integer(),
        w["batch"].as_i64()
    );
    assert_eq!(
        effective["subscriber"]["dispatch"].as_str(),
        w["dispatch"].as_str()
    );
}

#[test]
fn a_default_sweep_keeps_per_symbol_order_and_prints_its_trade_off() {
    let dir = TempDir::new("tune-sweep-default");
    let file = dir.path().join("best.toml");
    let out = tickbox(&[
        "tune",
        "sweep",
        "--workers",
        "1,2",
        "--io-threads",
        "1",
        "--pin",
        "no",
        "--repeats",
        "1",
        "--duration",
        "60ms",
        "--warmup",
        "20ms",
        "--rate",
        "5k",
        "--out",
        file.to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = stdout(&out);
    assert!(text.starts_with("ranked by balanced"), "{text}");
    assert!(
        !text.contains(" rr "),
        "round_robin swept without being asked:\n{text}"
    );
    assert!(text.contains("trade-off: "), "{text}");
    assert!(text.contains("× their p99 lateness"), "{text}");
}

/// `--pin plan` plans on this machine's first NIC: plan points pin shards, workers and the NIC's I/O thread and
/// point the shards' SUB at it; a host without any NIC gets the plan points skipped, and says so.
#[test]
fn plan_points_run_with_the_planners_placement() {
    let dir = TempDir::new("tune-sweep-plan");
    let file = dir.path().join("best.toml");
    let file_s = file.to_string_lossy().into_owned();
    let out = tickbox(&[
        "tune",
        "sweep",
        "--workers",
        "1",
        "--io-threads",
        "1",
        "--pin",
        "no,plan",
        "--repeats",
        "1",
        "--duration",
        "60ms",
        "--warmup",
        "20ms",
        "--no-latency",
        "--out",
        &file_s,
        "--json",
    ]);
    assert!(out.status.success());
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let plans: Vec<&serde_json::Value> = json["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| &r["point"])
        .filter(|p| p["pinning"] == "plan")
        .collect();
    let stderr = String::from_utf8_lossy(&out.stderr);
    if plans.is_empty() {
        assert!(stderr.contains("plan points skipped"), "{stderr}");
        return;
    }
    for p in plans {
        assert_eq!(p["shard_cores"].as_array().unwrap().len(), 1, "{p}");
        assert_eq!(p["worker_cores"].as_array().unwrap().len(), 1, "{p}");
        assert_eq!(p["io_cpus"].as_array().unwrap().len(), 1, "{p}");
        assert_eq!(p["shard_io_thread"], 0, "{p}");
    }
}

#[test]
fn a_grid_over_the_point_budget_is_refused_before_anything_runs() {
    let started = std::time::Instant::now();
    let out = tickbox(&[
        "tune",
        "sweep",
        "--workers",
        "1,2,3",
        "--batch",
        "1,2,3",
        "--io-threads",
        "1,2",
        "--pin",
        "no",
        "--max-points",
        "10",
    ]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("18 points") && err.contains("--max-points 10"),
        "{err}"
    );
    assert!(started.elapsed() < Duration::from_secs(5));
}
