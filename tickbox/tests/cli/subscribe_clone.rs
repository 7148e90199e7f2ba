//! `tickbox subscribe --clone`: membership, live threshold changes and alerts through a real Clone server, and
//! `--broker` status, all as real processes.

use crate::common;

use std::io::BufRead;
use std::process::{Command, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use common::{call_service, endpoint_in, eventually, spawn_and_pick, KillOnDrop, TICKBOX};

/// How often `eventually` re-checks: fast enough for these multi-second bounds, slow enough to spare the CPU.
const POLL: Duration = Duration::from_millis(100);

fn clone_server() -> (KillOnDrop, String) {
    let (proc, port) = spawn_and_pick(
        &[
            "clone-server",
            "--port",
            "0",
            "--interface",
            "127.0.0.1",
            "--hugz",
            "100ms",
        ],
        |line| {
            line.strip_prefix("clone-server ")?
                .split_whitespace()
                .find_map(|f| f.strip_prefix("port="))
                .map(str::to_owned)
        },
    );
    (proc, format!("tcp://127.0.0.1:{port}"))
}

fn feed() -> (KillOnDrop, String) {
    spawn_and_pick(
        &["feed", "--rate", "2000", "--duration", "30s"],
        endpoint_in,
    )
}

fn ctl(server: &str, args: &[&str]) -> Output {
    Command::new(TICKBOX)
        .args(["ctl", "--connect", server, "--timeout", "5s"])
        .args(args)
        .stderr(Stdio::null())
        .output()
        .expect("run ctl")
}

fn ls(server: &str, prefix: &str) -> String {
    String::from_utf8_lossy(&ctl(server, &["ls", prefix]).stdout).into_owned()
}

#[test]
fn clone_membership_live_threshold_and_alert() {
    let (_server, server) = clone_server();
    let (_feed, feed_ep) = feed();
    let id = format!("test-sub-{}", std::process::id());
    let mut child = Command::new(TICKBOX)
        .args([
            "subscribe",
            "--connect",
            &feed_ep,
            "--clone",
            &server,
            "--member-id",
            &id,
            "--max-lateness",
            "1s",
            "--duration",
            "30s",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn subscribe");
    let stderr = child.stderr.take().unwrap();
    let mut sub = KillOnDrop(child);
    let (err_tx, err_rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stderr).lines() {
            let Ok(line) = line else { break };
            if err_tx.send(line).is_err() {
                break;
            }
        }
    });
    // Every stderr line read so far.
    let mut said: Vec<String> = Vec::new();

    let member_key = format!("/members/subscribers/{id}");
    assert!(
        eventually(Duration::from_secs(10), POLL, || ls(&server, "/members/")
            .contains(&member_key)),
        "subscriber never registered under /members/subscribers/"
    );
    let info = ls(&server, "/members/subscribers/");
    assert!(info.contains("\"pid\""), "member info: {info}");

    // An invalid value is ignored: the subscriber keeps running on its current threshold.
    assert!(ctl(
        &server,
        &["set", "/config/subscriber/max_lateness", "whenever"]
    )
    .status
    .success());
    // Once the subscriber has said it ignores the value.
    let deadline = Instant::now() + Duration::from_secs(10);
    while !said
        .iter()
        .any(|l| l.contains("invalid max_lateness ignored"))
    {
        let left = deadline.saturating_duration_since(Instant::now());
        match err_rx.recv_timeout(left) {
            Ok(line) => said.push(line),
            Err(_) => panic!("the subscriber never said it ignored the value: {said:#?}"),
        }
    }
    assert!(
        sub.0.try_wait().unwrap().is_none(),
        "an invalid live value must not stop the subscriber"
    );

    // 1 us is far below any real lateness: the next message trips the snail.
    assert!(
        ctl(&server, &["set", "/config/subscriber/max_lateness", "1us"])
            .status
            .success()
    );
    let mut code = None;
    assert!(
        eventually(Duration::from_secs(10), POLL, || {
            code = sub.0.try_wait().unwrap().map(|s| s.code());
            code.is_some()
        }),
        "subscriber did not die after max_lateness=1us"
    );
    assert_eq!(code.unwrap(), Some(3), "the snail's exit code");
    // The subscriber has exited: the rest of its stderr comes until the pipe closes.
    while let Ok(line) = err_rx.recv_timeout(Duration::from_secs(5)) {
        said.push(line);
    }
    let stderr = said.join("\n");
    assert!(stderr.contains("SNAIL {"), "stderr: {stderr}");

    let alert = ctl(&server, &["get", &format!("/alerts/subscribers/{id}")]);
    assert!(
        alert.status.success(),
        "no alert under /alerts/subscribers/"
    );
    let alert: serde_json::Value =
        serde_json::from_slice(&alert.stdout).expect("the alert is the squawk JSON");
    assert_eq!(alert["reason"], "snail");
    assert_eq!(alert["threshold_ns"], 1_000);

    // A subscriber that exits removes its membership at once (the TTL covers a crash).
    assert!(
        eventually(Duration::from_secs(5), POLL, || !ls(&server, "/members/")
            .contains(&member_key)),
        "membership outlived the subscriber"
    );
}

#[test]
fn subscribe_serves_its_status_through_the_broker() {
    let (_broker, broker_ep) =
        spawn_and_pick(&["broker", "--bind", "tcp://127.0.0.1:*"], endpoint_in);
    let (_feed, feed_ep) = feed();
    let _sub = KillOnDrop(
        Command::new(TICKBOX)
            .args([
                "subscribe",
                "--connect",
                &feed_ep,
                "--max-lateness",
                "2s",
                "--duration",
                "30s",
                "--broker",
                &broker_ep,
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn subscribe"),
    );
    let mut last = String::new();
    let ok = eventually(Duration::from_secs(10), POLL, || {
        let (code, body) = call_service(&broker_ep, "tickbox.subscribe.status", &[], 1000);
        last = format!("exit {code}: {body}");
        if code != 0 {
            return false;
        }
        let Ok(status) = serde_json::from_str::<serde_json::Value>(body.trim()) else {
            return false;
        };
        status["shards"][0]["received"].as_u64().unwrap_or(0) > 0
            && status["state"] == "running"
            && status["max_lateness_ns"] == 2_000_000_000u64
            && status["component"] == "subscribe"
            && status["shards"][0]["gaps"] == 0
    });
    assert!(ok, "no usable status; last answer {last}");
}
