//! `--broker EP` registers a component's `tickbox.<component>.status` Majordomo service; `tickbox call` reads it.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

const TICKBOX: &str = env!("CARGO_BIN_EXE_tickbox");

struct Reaper(Child);

impl Drop for Reaper {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Spawns `tickbox ARGS` and returns it with the first `tcp://` endpoint it prints on stdout.
fn spawn_printing_endpoint(args: &[&str]) -> (Reaper, String) {
    let mut child = Command::new(TICKBOX)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn tickbox");
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if let Some(at) = line.find("tcp://") {
                let endpoint = line[at..]
                    .split_whitespace()
                    .next()
                    .unwrap_or("")
                    .to_owned();
                let _ = tx.send(endpoint);
            }
        }
    });
    let endpoint = rx
        .recv_timeout(Duration::from_secs(10))
        .expect("endpoint printed");
    (Reaper(child), endpoint)
}

fn call(broker: &str, service: &str) -> (i32, String) {
    let out = Command::new(TICKBOX)
        .args([
            "call",
            "--broker",
            broker,
            "--timeout-ms",
            "1000",
            "--attempts",
            "1",
            service,
        ])
        .output()
        .expect("run tickbox call");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

#[test]
fn feed_serves_its_status_through_the_broker() {
    let (_broker, broker_ep) = spawn_printing_endpoint(&["broker", "--bind", "tcp://127.0.0.1:*"]);
    let (_feed, _feed_ep) = spawn_printing_endpoint(&[
        "feed",
        "--rate",
        "2000",
        "--duration",
        "15s",
        "--broker",
        &broker_ep,
    ]);
    // The worker registers asynchronously and the snapshot refreshes every 500 ms: poll, bounded.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (code, body) = call(&broker_ep, "tickbox.feed.status");
        if code == 0 && body.contains("\"last_sequence\"") && !body.contains("\"last_sequence\":0")
        {
            let status: serde_json::Value =
                serde_json::from_str(body.trim()).expect("status is JSON");
            assert_eq!(status["component"], "feed");
            assert!(
                status["shards"][0]["quotes"].as_u64().unwrap() > 0,
                "{body}"
            );
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no usable status: exit {code}, body {body}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    // An unknown service times out with the documented exit code.
    let (code, _) = call(&broker_ep, "tickbox.nothing.status");
    assert_eq!(code, 4);
}
