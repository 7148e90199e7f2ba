//! `tickbox lvc` as a real process: prints its endpoints, serves a late joiner from its cache, prints its final
//! counters on Ctrl-C, and serves `tickbox.lvc.status` through a Majordomo broker.

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use common::{signal, spawn_with_lines, KillOnDrop, TICKBOX};
use tickbox_wire::{encode_to_vec, Flags, Header, Kind, MessageRef, Quote};

fn quote(topic: &str, seq: u64) -> Vec<u8> {
    encode_to_vec(
        topic,
        &Header::live(Kind::Quote, 1, seq, seq),
        &Quote::default().into(),
    )
    .unwrap()
}

fn recv_for(sock: &zmq::Socket, timeout: Duration, want: usize) -> Vec<Vec<u8>> {
    let deadline = Instant::now() + timeout;
    let mut got = Vec::new();
    while got.len() < want && Instant::now() < deadline {
        if sock.poll(zmq::POLLIN, 20).unwrap() > 0 {
            while let Ok(f) = sock.recv_bytes(zmq::DONTWAIT) {
                got.push(f);
            }
        }
    }
    got
}

#[test]
fn lvc_process_serves_late_joiners_and_reports_on_ctrl_c() {
    let ctx = zmq::Context::new();
    let publisher = ctx.socket(zmq::XPUB).unwrap();
    publisher.set_linger(0).unwrap();
    let pub_ep = tickbox_zmqx::bind_resolved(&publisher, "tcp://127.0.0.1:*").unwrap();

    let child = Command::new(TICKBOX)
        .args(["lvc", "--upstream", &pub_ep, "--bind", "tcp://127.0.0.1:*"])
        .args([
            "--tap",
            "tcp://127.0.0.1:*",
            "--stats-interval",
            "0s",
            "--duration",
            "20s",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut child = KillOnDrop(child);
    let (line_tx, line_rx) = mpsc::channel();
    let stdout = child.0.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = line_tx.send(line);
        }
    });
    let mut downstream = None;
    let mut tap = None;
    while downstream.is_none() || tap.is_none() {
        let line = line_rx
            .recv_timeout(Duration::from_secs(10))
            .expect("lvc printed no endpoints");
        if let Some(ep) = line.strip_prefix("lvc subscribers ") {
            downstream = Some(ep.to_owned());
        }
        if let Some(ep) = line.strip_prefix("lvc tap ") {
            tap = Some(ep.to_owned());
        }
    }
    let downstream = downstream.unwrap();
    assert!(downstream.starts_with("tcp://127.0.0.1:") && !downstream.ends_with('*'));

    // The proxy subscribes to everything upstream.
    publisher.set_rcvtimeo(5000).unwrap();
    assert_eq!(publisher.recv_bytes(0).unwrap(), b"\x01");

    // A first subscriber proves the path is up (warm-up messages until one arrives), then sees 100 topics live.
    let first = ctx.socket(zmq::SUB).unwrap();
    first.set_linger(0).unwrap();
    first.connect(&downstream).unwrap();
    first.set_subscribe(b"").unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut warm = 0;
    loop {
        warm += 1;
        publisher.send(quote("W.WARM.UP", warm), 0).unwrap();
        if !recv_for(&first, Duration::from_millis(50), 1).is_empty() {
            break;
        }
        assert!(Instant::now() < deadline, "nothing came through the proxy");
    }
    for i in 0..100u64 {
        publisher
            .send(quote(&format!("Q.XNAS.S{i:03}"), 1000 + i), 0)
            .unwrap();
    }
    let mut live_topics = 0;
    let deadline = Instant::now() + Duration::from_secs(5);
    while live_topics < 100 && Instant::now() < deadline {
        let got = recv_for(&first, Duration::from_millis(50), usize::MAX);
        live_topics += got.iter().filter(|f| f.starts_with(b"Q.XNAS.")).count();
    }
    assert_eq!(live_topics, 100);

    // The late joiner gets all 100 from the cache.
    let late = ctx.socket(zmq::SUB).unwrap();
    late.set_linger(0).unwrap();
    late.connect(&downstream).unwrap();
    late.set_subscribe(b"Q.XNAS.").unwrap();
    let cached = recv_for(&late, Duration::from_secs(5), 100);
    assert_eq!(cached.len(), 100);
    for f in &cached {
        assert!(MessageRef::decode(f)
            .unwrap()
            .header()
            .flags
            .contains(Flags::CACHED));
    }

    // Ctrl-C: clean exit with the final table.
    signal(child.0.id(), "INT");
    let status = child.wait_exit(Duration::from_secs(10), "lvc did not stop on SIGINT");
    assert!(status.success(), "{status:?}");
    reader.join().unwrap();
    let table: Vec<String> = line_rx.try_iter().collect();
    let row = |name: &str| -> u64 {
        let line = table
            .iter()
            .find(|l| l.starts_with(name))
            .unwrap_or_else(|| panic!("no `{name}` in {table:?}"));
        line.split_whitespace().last().unwrap().parse().unwrap()
    };
    assert_eq!(row("topics cached"), 101);
    // 100 to the late joiner, plus the warm-up topic if a warm-up message beat the first subscription.
    assert!((100..=101).contains(&row("cached sent")), "{table:?}");
    assert_eq!(row("messages in"), warm + 100);
}

#[test]
fn lvc_without_upstream_is_a_clear_error() {
    let out = Command::new(TICKBOX)
        .args(["lvc", "--bind", "tcp://127.0.0.1:*", "--duration", "1s"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("upstream"), "{stderr}");
}

/// The rest of the first line starting with `prefix`, waiting at most 10 s.
fn line_after(lines: &mpsc::Receiver<String>, prefix: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let line = lines
            .recv_timeout(left)
            .unwrap_or_else(|_| panic!("no `{prefix}` line"));
        if let Some(rest) = line.strip_prefix(prefix) {
            return rest.trim().to_owned();
        }
    }
}

fn lvc_status(broker: &str) -> Option<serde_json::Value> {
    let out = Command::new(TICKBOX)
        .args(["call", "--broker", broker, "--timeout-ms", "1000"])
        .args(["--attempts", "1", "tickbox.lvc.status"])
        .output()
        .unwrap();
    if !out.status.success() {
        return None;
    }
    let body = String::from_utf8_lossy(&out.stdout);
    Some(serde_json::from_str(body.trim()).expect("status is JSON"))
}

#[test]
fn lvc_serves_its_counters_as_tickbox_lvc_status() {
    let ctx = zmq::Context::new();
    let publisher = ctx.socket(zmq::XPUB).unwrap();
    publisher.set_linger(0).unwrap();
    let pub_ep = tickbox_zmqx::bind_resolved(&publisher, "tcp://127.0.0.1:*").unwrap();
    let (_broker, broker_lines) = spawn_with_lines(&["broker", "--bind", "tcp://127.0.0.1:*"]);
    let broker = line_after(&broker_lines, "broker listening on");
    let (_lvc, lvc_lines) = spawn_with_lines(&[
        "lvc",
        "--upstream",
        &pub_ep,
        "--bind",
        "tcp://127.0.0.1:*",
        "--tap",
        "tcp://127.0.0.1:*",
        "--tap-drop",
        "counted",
        "--stats-interval",
        "0s",
        "--duration",
        "20s",
        "--broker",
        &broker,
    ]);
    let downstream = line_after(&lvc_lines, "lvc subscribers");
    publisher.set_rcvtimeo(5000).unwrap();
    assert_eq!(publisher.recv_bytes(0).unwrap(), b"\x01");
    for i in 0..50u64 {
        publisher
            .send(quote(&format!("Q.XNAS.S{i:03}"), i + 1), 0)
            .unwrap();
    }
    // The worker registers asynchronously and the snapshot is refreshed every 500 ms: poll, bounded.
    let deadline = Instant::now() + Duration::from_secs(10);
    let status = loop {
        if let Some(status) = lvc_status(&broker) {
            if status["stats"]["topics_cached"] == 50 {
                break status;
            }
        }
        assert!(Instant::now() < deadline, "no status with 50 topics cached");
        std::thread::sleep(Duration::from_millis(200));
    };
    assert_eq!(status["component"], "lvc");
    assert_eq!(status["subscribers"], downstream.as_str());
    assert_eq!(status["tap_drop"], "counted");
    assert_eq!(status["tap_drops_counted"], true);
    assert_eq!(status["stats"]["messages_in"], 50);
    assert_eq!(status["stats"]["malformed"], 0);
    assert!(status["tap"]
        .as_str()
        .unwrap()
        .starts_with("tcp://127.0.0.1:"));

    // The status follows the proxy: a malformed frame shows up within a refresh or two.
    publisher.send(&b"junk"[..], 0).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let status = lvc_status(&broker);
        if status
            .as_ref()
            .is_some_and(|s| s["stats"]["malformed"] == 1)
        {
            assert_eq!(status.unwrap()["drops"], 1);
            break;
        }
        assert!(
            Instant::now() < deadline,
            "malformed frame never showed in the status"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}
