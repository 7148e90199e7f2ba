//! `tickbox subscribe --tape` when the tape cannot be written: the run still ends with its summary, the records
//! not written are counted in one `error:` line, and the exit code is 1, never a silent short tape.

use crate::common;

use std::process::{Command, Stdio};
use std::time::Duration;

use common::{KillOnDrop, TICKBOX};

#[test]
fn a_tape_on_a_full_disk_is_counted_and_exits_1() {
    if std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/full")
        .is_err()
    {
        eprintln!("no /dev/full here: nothing to test");
        return;
    }
    let (feed, endpoints) = common::spawn_feed_with_endpoints(
        &[
            "--bind",
            "tcp://127.0.0.1:*",
            "--rate",
            "50000",
            "--max-messages",
            "5000",
            "--wait-for-subscribers",
            "1",
            "--heartbeat",
            "20ms",
            "--json",
        ],
        1,
    );
    let endpoint = &endpoints[0];
    let subscribe = KillOnDrop(
        Command::new(TICKBOX)
            .args([
                "subscribe",
                "--connect",
                endpoint,
                "--idle-exit",
                "500ms",
                "--duration",
                "15s",
                "--max-lateness",
                "0",
                "--tape",
                "/dev/full",
                "--json",
            ])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let fed = feed.wait_output(Duration::from_secs(15));
    assert!(fed.status.success(), "feed: {:?}", fed.status);
    let out = subscribe.wait_output(Duration::from_secs(15));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    // The summary is still printed, and says every message was processed.
    let summary: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stdout)));
    assert!(summary.is_object(), "{summary}");
    let errors: Vec<&str> = err.lines().filter(|l| l.starts_with("error:")).collect();
    assert_eq!(errors.len(), 1, "{err}");
    assert!(
        errors[0].contains("--tape /dev/full") && errors[0].contains("records not written"),
        "{err}"
    );
    // Every record handled (5000 data messages and the heartbeats) is counted as not written.
    let lost: u64 = errors[0]
        .split(": ")
        .nth(2)
        .and_then(|s| s.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no count in {}", errors[0]));
    // A loaded machine may drop some at the feed's high-water mark: those are counted as missing, not handled.
    let missing = summary["missing"].as_u64().unwrap_or(0);
    assert!(lost + missing >= 5000, "{err}\n{summary}");
    assert!(err.contains("tape /dev/full: 0 records written"), "{err}");
}
