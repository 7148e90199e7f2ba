//! `--metrics`: a real Prometheus (Debian's package, started here on a free port with its own config and data
//! directory) scrapes a running `feed → subscribe` and a `record`; the totals it stored after the stream settled
//! equal the `--json` summaries the processes print when stopped. Without the `prometheus` binary that test skips
//! and says why; the others (a taken port, 404, a flood of scrapes beside a live stream) run everywhere.

use crate::common;

use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;
use std::process::Command;
use std::sync::mpsc::Receiver;
use std::time::{Duration, Instant};

use common::{signal, spawn_piped, KillOnDrop, TempDir, TICKBOX};

const T: Duration = Duration::from_secs(5);

/// The `metrics endpoint http://ADDR/metrics` line a command prints on stderr, as `ADDR`.
fn metrics_addr(stderr: &Receiver<String>) -> String {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let line = stderr
            .recv_timeout(left)
            .expect("no `metrics endpoint` line on stderr");
        if let Some(url) = line.strip_prefix("metrics endpoint http://") {
            return url.trim_end_matches("/metrics").to_owned();
        }
    }
}

/// `tickbox ARGS` with both outputs read as lines.
fn spawn(args: &[&str]) -> (KillOnDrop, Receiver<String>, Receiver<String>) {
    spawn_piped(Command::new(TICKBOX).args(args))
}

/// The endpoints of the `feed shard N … endpoint EP` lines (on stderr with `--json`), and the metrics address
/// when `metrics` (its line comes first).
fn feed_endpoints(
    stderr: &Receiver<String>,
    shards: usize,
    metrics: bool,
) -> (Vec<String>, String) {
    let mut eps = Vec::new();
    let mut addr = String::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    while eps.len() < shards || (metrics && addr.is_empty()) {
        let left = deadline.saturating_duration_since(Instant::now());
        let line = stderr.recv_timeout(left).expect("feed endpoint lines");
        if line.starts_with("feed shard ") {
            eps.push(line.rsplit(' ').next().unwrap().to_owned());
        } else if let Some(url) = line.strip_prefix("metrics endpoint http://") {
            addr = url.trim_end_matches("/metrics").to_owned();
        }
    }
    (eps, addr)
}

/// The last JSON object printed on `stdout` before it closed (within `limit`).
fn json_summary(stdout: &Receiver<String>, limit: Duration) -> serde_json::Value {
    let deadline = Instant::now() + limit;
    let mut last = None;
    while let Some(left) = deadline.checked_duration_since(Instant::now()) {
        match stdout.recv_timeout(left) {
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

/// Sum of every sample named `name` with `role` in a scrape of `addr`.
fn scraped_sum(addr: &str, name: &str, role: &str) -> f64 {
    let (code, body) = tickbox_metrics::fetch(addr, "/metrics", T, 16 << 20).expect("scrape");
    assert_eq!(code, 200);
    tickbox_metrics::text::parse(&body)
        .iter()
        .filter(|s| s.name == name && s.label("role") == Some(role))
        .map(|s| s.value)
        .sum()
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A Prometheus server of our own: a generated config scraping `targets` every 200 ms, a temp data directory, a
/// free port; killed on drop. Prometheus hands new targets to its scrapers about 5 s after it starts, so the
/// targets are addresses the test chose (free ports) and it starts before the processes it scrapes.
struct Prometheus {
    _child: KillOnDrop,
    addr: String,
    dir: TempDir,
}

impl Prometheus {
    /// `None` (having said why) when Debian's `prometheus` is not installed (`.ci/run` installs it). Returns once
    /// every target is in its scrape pool.
    fn start_or_skip(test: &str, targets: &[&str]) -> Option<Prometheus> {
        let Some(binary) = which("prometheus") else {
            eprintln!(
                "SKIP {test}: no `prometheus` binary on PATH (Debian's `prometheus` package; .ci/run installs it)"
            );
            return None;
        };
        let dir = TempDir::new("prometheus");
        let list: Vec<String> = targets.iter().map(|t| format!("'{t}'")).collect();
        let config = format!(
            "global:\n  scrape_interval: 200ms\n  scrape_timeout: 200ms\nscrape_configs:\n  - job_name: tickbox\n    \
             static_configs:\n      - targets: [{}]\n",
            list.join(", ")
        );
        let config_path = dir.join("prometheus.yml");
        std::fs::write(&config_path, config).unwrap();
        let addr = format!("127.0.0.1:{}", free_port());
        let log = std::fs::File::create(dir.join("prometheus.log")).unwrap();
        let child = Command::new(binary)
            .arg(format!("--config.file={}", config_path.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.join("data").display()
            ))
            .arg(format!("--web.listen-address={addr}"))
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("start prometheus");
        let prometheus = Prometheus {
            _child: KillOnDrop(child),
            addr,
            dir,
        };
        let log =
            || std::fs::read_to_string(prometheus.dir.join("prometheus.log")).unwrap_or_default();
        let pooled = tickbox_testkit::wait_until(Duration::from_secs(20), || {
            tickbox_metrics::fetch(&prometheus.addr, "/api/v1/targets", T, 1 << 20).is_ok_and(
                |(c, body)| c == 200 && targets.iter().all(|t| body.contains(&format!("\"{t}\""))),
            )
        });
        assert!(
            pooled,
            "{test}: prometheus did not take its targets: {}",
            log()
        );
        Some(prometheus)
    }

    /// Waits until the last scrape of `addr` succeeded.
    fn await_up(&self, addr: &str) {
        let up = format!("up{{instance=\"{addr}\"}}");
        assert!(
            tickbox_testkit::wait_until(Duration::from_secs(10), || self.scalar(&up) == Some(1.0)),
            "prometheus did not scrape {addr}: {}",
            std::fs::read_to_string(self.dir.join("prometheus.log")).unwrap_or_default()
        );
    }

    /// The instant vector of `query` as (labels, value, sample time in s).
    fn query(&self, query: &str) -> Vec<(BTreeMap<String, String>, f64)> {
        let path = format!("/api/v1/query?query={}", percent_encode(query));
        let (code, body) =
            tickbox_metrics::fetch(&self.addr, &path, T, 16 << 20).expect("query prometheus");
        assert_eq!(code, 200, "{query}: {body}");
        let v: serde_json::Value = serde_json::from_str(&body).unwrap();
        v["data"]["result"]
            .as_array()
            .unwrap_or_else(|| panic!("{query}: {body}"))
            .iter()
            .map(|r| {
                let labels = r["metric"]
                    .as_object()
                    .unwrap()
                    .iter()
                    .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_owned()))
                    .collect();
                let value = r["value"][1].as_str().unwrap().parse().unwrap();
                (labels, value)
            })
            .collect()
    }

    /// The one value of a query that yields one sample (a `sum`, a `timestamp(...)`); `None` before it has data.
    fn scalar(&self, query: &str) -> Option<f64> {
        self.query(query).first().map(|(_, v)| *v)
    }
}

fn which(name: &str) -> Option<std::path::PathBuf> {
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|p| p.join(name))
            .find(|p| p.is_file())
    })
}

fn percent_encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

fn now_s() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

/// The summary counters of `subscribe --json` (top level) and the metric each is, summed over its labels.
const SUBSCRIBE_FIELDS: &[(&str, &str)] = &[
    ("received", "tickbox_received_total"),
    ("forwarded", "tickbox_forwarded_total"),
    ("processed", "tickbox_processed_total"),
    ("malformed", "tickbox_malformed_total"),
    ("gap_notices", "tickbox_gap_notices_total"),
    ("late", "tickbox_late_total"),
    ("data_received", "tickbox_data_received_total"),
    ("missing", "tickbox_missing_total"),
    ("gaps", "tickbox_gaps_total"),
    ("recorded_gaps", "tickbox_recorded_gaps_total"),
    ("recorded_gap_events", "tickbox_recorded_gap_events_total"),
    ("duplicates", "tickbox_duplicates_total"),
    ("reordered", "tickbox_reordered_total"),
    ("restarts", "tickbox_restarts_total"),
    ("anomalies", "tickbox_anomalies_total"),
    ("untracked", "tickbox_untracked_total"),
    ("batches", "tickbox_batches_total"),
    ("batch_malformed", "tickbox_batch_malformed_total"),
    ("handoff_dropped", "tickbox_handoff_dropped_total"),
    ("run_by_shard", "tickbox_run_by_shard_total"),
    ("run_by_shard_pauses", "tickbox_run_by_shard_pauses_total"),
    ("handshakes_refused", "tickbox_handshakes_refused_total"),
    ("cached", "tickbox_cached_total"),
];

/// The same for `record --json`.
const RECORD_FIELDS: &[(&str, &str)] = &[
    ("messages", "tickbox_messages_total"),
    ("recorded", "tickbox_recorded_total"),
    ("missing", "tickbox_missing_total"),
    ("gap_events", "tickbox_gap_events_total"),
    ("upstream_gap_notices", "tickbox_upstream_gap_notices_total"),
    ("heartbeats", "tickbox_heartbeats_total"),
    ("cached", "tickbox_cached_total"),
    ("bytes", "tickbox_bytes_total"),
    ("batches", "tickbox_batches_total"),
    ("invalid", "tickbox_invalid_total"),
    ("tap_events", "tickbox_tap_events_total"),
    ("batch_frames", "tickbox_batch_frames_total"),
    ("multipart", "tickbox_multipart_total"),
    ("handshakes_refused", "tickbox_handshakes_refused_total"),
    ("duplicates", "tickbox_duplicates_total"),
    ("reordered", "tickbox_reordered_total"),
    ("restarts", "tickbox_restarts_total"),
    ("anomalies", "tickbox_anomalies_total"),
    ("untracked", "tickbox_untracked_total"),
    ("overwritten", "tickbox_overwritten_total"),
    ("overwritten_bytes", "tickbox_overwritten_bytes_total"),
    ("laps", "tickbox_laps_total"),
    ("reserve_stalls", "tickbox_reserve_stalls_total"),
    ("last_seq", "tickbox_last_seq"),
];

#[test]
fn prometheus_scrapes_feed_subscribe_and_record_and_its_totals_equal_the_json_summaries() {
    // Prometheus first, with the three addresses the processes will serve on (free ports chosen now).
    let (feed_metrics, rec_metrics, sub_metrics) = (
        format!("127.0.0.1:{}", free_port()),
        format!("127.0.0.1:{}", free_port()),
        format!("127.0.0.1:{}", free_port()),
    );
    let Some(prom) = Prometheus::start_or_skip(
        "prometheus_scrapes_feed_subscribe_and_record",
        &[&feed_metrics, &rec_metrics, &sub_metrics],
    ) else {
        return;
    };
    let dir = TempDir::new("metrics-prometheus");
    let journal = dir.join("day");
    // Both consumers subscribe before the feed sends (it waits for two subscriptions per shard), so each gets
    // the whole stream; the feed then stops by itself and the totals settle.
    let (_feed, feed_out, feed_err) = spawn(&[
        "feed",
        "--bind",
        "tcp://127.0.0.1:*,tcp://127.0.0.1:*",
        "--rate",
        "2k",
        "--max-messages",
        "4000",
        "--wait-for-subscribers",
        "2",
        "--json",
        "--metrics",
        &feed_metrics,
    ]);
    let (eps, _) = feed_endpoints(&feed_err, 2, true);
    let connect = eps.join(",");
    let journal_arg = journal.display().to_string();
    let (rec, rec_out, rec_err) = spawn(&[
        "record",
        "--connect",
        &connect,
        "--journal",
        &journal_arg,
        "--json",
        "--metrics",
        &rec_metrics,
    ]);
    assert_eq!(metrics_addr(&rec_err), rec_metrics);
    let (sub, sub_out, sub_err) = spawn(&[
        "subscribe",
        "--connect",
        &connect,
        "--json",
        "--metrics",
        &sub_metrics,
    ]);
    assert_eq!(metrics_addr(&sub_err), sub_metrics);
    for addr in [&feed_metrics, &rec_metrics, &sub_metrics] {
        prom.await_up(addr);
    }
    let feed_summary = json_summary(&feed_out, Duration::from_secs(30));
    let sent = feed_summary["sent"].as_u64().unwrap();
    assert_eq!(sent, 8000, "{feed_summary}");
    // The feed exits once its summary is out, so its series end with its last scrape: what Prometheus kept of it
    // is some of the stream, never more than the summary says.
    let feed_seen = prom
        .scalar("sum(max_over_time(tickbox_sent_total{role=\"feed\"}[1m]))")
        .expect("prometheus kept the feed's sent count");
    assert!(
        feed_seen > 0.0 && feed_seen <= sent as f64,
        "feed sent {sent}, scraped {feed_seen}"
    );
    // The stream has ended: wait until both consumers have taken all of it and their counts stand still (their
    // own endpoints say so; the recorder's counts are as of its last progress report, every 250 ms, so "still"
    // means unchanged over more than two reports), then for a Prometheus scrape after that moment, then stop them.
    let counts = || {
        (
            scraped_sum(&sub_metrics, "tickbox_received_total", "subscribe"),
            scraped_sum(&sub_metrics, "tickbox_data_received_total", "subscribe"),
            scraped_sum(&rec_metrics, "tickbox_messages_total", "record"),
            scraped_sum(&rec_metrics, "tickbox_recorded_total", "record"),
        )
    };
    let mut last = counts();
    assert!(
        tickbox_testkit::poll_until(Duration::from_secs(20), Duration::from_millis(600), || {
            let now = counts();
            let still = now == last && now.1 == sent as f64 && now.3 == sent as f64;
            last = now;
            still
        }),
        "the consumers did not get the whole stream, or their counts kept moving: {last:?}"
    );
    let settled = now_s();
    assert!(
        tickbox_testkit::wait_until(Duration::from_secs(20), || {
            [&sub_metrics, &rec_metrics].iter().all(|addr| {
                prom.scalar(&format!("timestamp(up{{instance=\"{addr}\"}})"))
                    .is_some_and(|t| t > settled + 0.05)
            })
        }),
        "no scrape after the stream settled"
    );
    let scraped = |role: &str, metric: &str| {
        prom.scalar(&format!("sum({metric}{{role=\"{role}\"}})"))
            .unwrap_or_else(|| panic!("prometheus has no {metric} of {role}"))
    };
    let sub_scraped: Vec<f64> = SUBSCRIBE_FIELDS
        .iter()
        .map(|(_, m)| scraped("subscribe", m))
        .collect();
    let rec_scraped: Vec<f64> = RECORD_FIELDS
        .iter()
        .map(|(_, m)| scraped("record", m))
        .collect();
    // The subscriber's receive-lateness histogram has one observation per record judged.
    let lateness_count = scraped("subscribe", "tickbox_lateness_seconds_count");
    let placement = prom.query("tickbox_shard_placement_info{role=\"subscribe\"}");
    signal(sub.0.id(), "INT");
    signal(rec.0.id(), "INT");
    let sub_summary = json_summary(&sub_out, Duration::from_secs(20));
    let rec_summary = json_summary(&rec_out, Duration::from_secs(20));
    for ((field, metric), value) in SUBSCRIBE_FIELDS.iter().zip(&sub_scraped) {
        assert_eq!(
            sub_summary[field].as_u64(),
            Some(*value as u64),
            "subscribe --json {field} vs Prometheus {metric}: {sub_summary}"
        );
    }
    for ((field, metric), value) in RECORD_FIELDS.iter().zip(&rec_scraped) {
        assert_eq!(
            rec_summary[field].as_u64(),
            Some(*value as u64),
            "record --json {field} vs Prometheus {metric}: {rec_summary}"
        );
    }
    assert_eq!(sub_summary["data_received"].as_u64(), Some(sent));
    assert_eq!(sub_summary["missing"].as_u64(), Some(0));
    assert!(
        lateness_count >= sent as f64,
        "lateness count {lateness_count}"
    );
    assert_eq!(placement.len(), 2, "one placement per shard: {placement:?}");
    for (i, shard) in sub_summary["shards"].as_array().unwrap().iter().enumerate() {
        let (labels, _) = placement
            .iter()
            .find(|(l, _)| l.get("shard").map(String::as_str) == Some(&i.to_string()))
            .expect("placement of the shard");
        assert_eq!(labels["endpoint"], shard["endpoints"][0].as_str().unwrap());
        assert!(
            shard.get("nic").is_some() && shard.get("core").is_some(),
            "{shard}"
        );
    }
}

#[test]
fn a_taken_metrics_port_is_one_line_and_exit_11() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let out = common::output_within(
        {
            let mut c = Command::new(TICKBOX);
            c.args(["feed", "--duration", "5s", "--metrics", &addr]);
            c
        },
        Duration::from_secs(15),
    );
    assert_eq!(out.status.code(), Some(11), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    let errors: Vec<&str> = stderr.lines().filter(|l| l.starts_with("error:")).collect();
    assert_eq!(errors.len(), 1, "{stderr}");
    assert!(
        errors[0].contains(&addr) && errors[0].contains("another process serves there"),
        "{stderr}"
    );
    drop(taken);
}

#[test]
fn a_flood_of_scrape_connections_is_refused_counted_and_leaves_the_stream_whole() {
    let (_feed, feed_out, feed_err) = spawn(&[
        "feed",
        "--bind",
        "tcp://127.0.0.1:*",
        "--rate",
        "2k",
        "--max-messages",
        "4000",
        "--wait-for-subscribers",
        "1",
        "--json",
    ]);
    let (eps, _) = feed_endpoints(&feed_err, 1, false);
    let (sub, sub_out, sub_err) = spawn(&[
        "subscribe",
        "--connect",
        &eps[0],
        "--json",
        "--metrics",
        "0",
    ]);
    let addr = metrics_addr(&sub_err);
    assert_eq!(
        tickbox_metrics::fetch(&addr, "/", T, 1 << 20).unwrap().0,
        404
    );
    assert_eq!(
        tickbox_metrics::fetch(&addr, "/metrics/../x", T, 1 << 20)
            .unwrap()
            .0,
        404
    );
    // Far more silent connections than handlers and queue, while the stream flows: those past the queue are
    // answered 503 at once and counted; once they go, scrapes are answered again.
    let flood: Vec<std::net::TcpStream> = (0..200)
        .filter_map(|_| std::net::TcpStream::connect(&addr).ok())
        .collect();
    for mut s in flood.iter().take(5) {
        let _ = s.write_all(b"GET /metrics HTTP/1.1\r\n");
    }
    std::thread::sleep(Duration::from_millis(100)); // let the acceptor take them all (not a readiness wait)
    drop(flood);
    let refused = || scraped_sum(&addr, "tickbox_metrics_refused_total", "subscribe");
    assert!(
        tickbox_testkit::wait_until(Duration::from_secs(10), || refused() >= 100.0),
        "refused connections not counted: {}",
        refused()
    );
    let feed_summary = json_summary(&feed_out, Duration::from_secs(30));
    assert_eq!(feed_summary["sent"].as_u64(), Some(4000), "{feed_summary}");
    assert!(tickbox_testkit::wait_until(Duration::from_secs(10), || {
        scraped_sum(&addr, "tickbox_data_received_total", "subscribe") == 4000.0
    }));
    signal(sub.0.id(), "INT");
    let summary = json_summary(&sub_out, Duration::from_secs(20));
    assert_eq!(summary["data_received"].as_u64(), Some(4000), "{summary}");
    assert_eq!(summary["missing"].as_u64(), Some(0), "{summary}");
}

/// `record --elect`: the leadership the election gives is a metric (what the "no recorder leading" alert reads).
#[test]
fn record_elect_serves_its_leadership() {
    let Some(zk) =
        tickbox_coord::testing::ZkServer::start_or_skip("record_elect_serves_its_leadership")
    else {
        return;
    };
    let dir = TempDir::new("metrics-elect");
    let journal = dir.join("j").display().to_string();
    let zk_hosts = zk.connect_string();
    let (rec, _out, rec_err) = spawn(&[
        "record",
        "--connect",
        "tcp://127.0.0.1:1",
        "--journal",
        &journal,
        "--segment-size",
        "4MiB",
        "--zk",
        &zk_hosts,
        "--elect",
        "/tb/metrics",
        "--metrics",
        "0",
    ]);
    let addr = metrics_addr(&rec_err);
    assert!(
        tickbox_testkit::wait_until(Duration::from_secs(15), || {
            scraped_sum(&addr, "tickbox_recorder_leading", "record") == 1.0
        }),
        "the elected recorder does not say it leads"
    );
    signal(rec.0.id(), "INT");
}

/// `tune check` warns under `[security]` about a metrics endpoint off the loopback, even with `allow_ips` fencing
/// the ZeroMQ sockets (the HTTP endpoint is outside ZAP); a loopback one passes.
#[test]
fn tune_check_warns_about_a_metrics_bind_off_the_loopback() {
    let dir = TempDir::new("metrics-tune");
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tuning/tests/fixtures/vm");
    let check = |bind: &str| -> Vec<serde_json::Value> {
        let file = dir.join("tickbox.toml");
        std::fs::write(
            &file,
            format!("[security]\nallow_ips = [\"10.0.0.0/8\"]\n\n[metrics]\nbind = \"{bind}\"\n"),
        )
        .unwrap();
        let out = common::output_within(
            {
                let mut c = Command::new(TICKBOX);
                c.arg("--config")
                    .arg(&file)
                    .args(["tune", "check", "--json", "--root"])
                    .arg(&root);
                c
            },
            Duration::from_secs(20),
        );
        assert!(out.status.success(), "{out:?}");
        let findings: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        findings["findings"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|f| f["check"] == "metrics_bind")
            .cloned()
            .collect()
    };
    let exposed = check("0.0.0.0:9100");
    assert_eq!(exposed.len(), 1, "{exposed:?}");
    assert_eq!(exposed[0]["severity"], "warning");
    assert!(exposed[0]["message"]
        .as_str()
        .unwrap()
        .starts_with("[security]"));
    assert!(check("127.0.0.1:9100").is_empty());
    assert!(check("9100").is_empty());
}

/// The samples of `name` (with `role`) in a scrape of `addr`, summed; `None` when the metric is absent.
fn scraped(addr: &str, name: &str, role: &str) -> Option<f64> {
    let (code, body) = tickbox_metrics::fetch(addr, "/metrics", T, 16 << 20).ok()?;
    (code == 200).then_some(())?;
    let samples: Vec<_> = tickbox_metrics::text::parse(&body)
        .into_iter()
        .filter(|s| s.name == name && s.label("role") == Some(role))
        .collect();
    (!samples.is_empty()).then(|| samples.iter().map(|s| s.value).sum())
}

/// The control plane serves its counters too: a broker counts the MMI query `tickbox call` makes (and the 404
/// it answers), a Clone server its sequence after a `ctl set`, and titanic, queue and freelance-server theirs.
#[test]
fn control_plane_commands_serve_their_counters() {
    let dir = TempDir::new("metrics-control");
    let (_broker, broker_out, broker_err) =
        spawn(&["broker", "--bind", "tcp://127.0.0.1:*", "--metrics", "0"]);
    let broker_addr = metrics_addr(&broker_err);
    let broker_ep = common::line_after(&broker_out, "broker listening on");
    let (code, _) = common::call_service(&broker_ep, "tickbox.nothing.status", &[], 2000);
    assert_eq!(code, 1, "an unknown service is MMI's 404");
    assert!(
        tickbox_testkit::wait_until(Duration::from_secs(5), || {
            scraped(&broker_addr, "tickbox_mmi_total", "broker") == Some(1.0)
                && scraped(&broker_addr, "tickbox_requests_total", "broker") == Some(1.0)
        }),
        "the broker's counters did not show the MMI query"
    );
    let titanic_dir = dir.join("titanic").display().to_string();
    let (_titanic, _t_out, titanic_err) = spawn(&[
        "titanic",
        "--broker",
        &broker_ep,
        "--dir",
        &titanic_dir,
        "--metrics",
        "0",
    ]);
    let titanic_addr = metrics_addr(&titanic_err);
    assert_eq!(
        scraped(&titanic_addr, "tickbox_dispatched_total", "titanic"),
        Some(0.0)
    );
    let (_clone, clone_out, clone_err) = spawn(&[
        "clone-server",
        "--port",
        "0",
        "--interface",
        "127.0.0.1",
        "--metrics",
        "0",
    ]);
    let clone_addr = metrics_addr(&clone_err);
    let ready = common::line_after(&clone_out, "clone-server port=");
    let port = ready.split_whitespace().next().unwrap();
    let set = common::output_within(
        {
            let mut c = Command::new(TICKBOX);
            c.args([
                "ctl",
                "--server",
                &format!("tcp://127.0.0.1:{port}"),
                "--timeout",
                "5s",
                "set",
                "/app/x",
                "1",
            ]);
            c
        },
        Duration::from_secs(15),
    );
    assert!(set.status.success(), "{set:?}");
    assert!(
        tickbox_testkit::wait_until(Duration::from_secs(5), || {
            scraped(&clone_addr, "tickbox_sequence", "clone-server") == Some(1.0)
                && scraped(&clone_addr, "tickbox_keys", "clone-server") == Some(1.0)
        }),
        "the Clone server's sequence did not move"
    );
    assert_eq!(
        scraped(&clone_addr, "tickbox_bstar_state_info", "clone-server"),
        Some(1.0)
    );
    let (_queue, _q_out, queue_err) = spawn(&[
        "queue",
        "--frontend",
        "tcp://127.0.0.1:*",
        "--backend",
        "tcp://127.0.0.1:*",
        "--metrics",
        "0",
    ]);
    let queue_addr = metrics_addr(&queue_err);
    assert!(tickbox_testkit::wait_until(Duration::from_secs(5), || {
        scraped(&queue_addr, "tickbox_requests_total", "queue") == Some(0.0)
    }));
    let (_fl, _f_out, fl_err) = spawn(&[
        "freelance-server",
        "--bind",
        "tcp://127.0.0.1:0",
        "--endpoint",
        "tcp://127.0.0.1:1",
        "--metrics",
        "0",
    ]);
    let fl_addr = metrics_addr(&fl_err);
    assert!(tickbox_testkit::wait_until(Duration::from_secs(5), || {
        scraped(&fl_addr, "tickbox_pings_total", "freelance-server") == Some(0.0)
    }));
}

/// Where a shard actually ran is in `subscribe --json`, the table and the placement info metric: pinned to core
/// 0 (every machine has it), no NIC or I/O thread asked for.
#[test]
fn shard_placement_is_in_the_summary_and_the_metrics() {
    let (_feed, _fo, feed_err) = spawn(&[
        "feed",
        "--bind",
        "tcp://127.0.0.1:*",
        "--rate",
        "1k",
        "--duration",
        "20s",
        "--json",
    ]);
    let (eps, _) = feed_endpoints(&feed_err, 1, false);
    let (sub, sub_out, sub_err) = spawn(&[
        "subscribe",
        "--connect",
        &eps[0],
        "--cores",
        "0",
        "--json",
        "--metrics",
        "0",
    ]);
    let addr = metrics_addr(&sub_err);
    assert!(tickbox_testkit::wait_until(Duration::from_secs(10), || {
        let (_, body) = tickbox_metrics::fetch(&addr, "/metrics", T, 16 << 20).unwrap();
        tickbox_metrics::text::parse(&body).iter().any(|s| {
            s.name == "tickbox_shard_placement_info"
                && s.label("core") == Some("0")
                && s.label("nic") == Some("")
                && s.label("endpoint") == Some(eps[0].as_str())
        })
    }));
    signal(sub.0.id(), "INT");
    let summary = json_summary(&sub_out, Duration::from_secs(20));
    let shard = &summary["shards"][0];
    assert_eq!(shard["core"], 0, "{shard}");
    assert!(
        shard["nic"].is_null() && shard["io_thread"].is_null(),
        "{shard}"
    );
}
