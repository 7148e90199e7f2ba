//! `tickbox feed --json`: the summary as one JSON object, and the truth about the rate it achieved.

use crate::common;

use std::process::Command;
use std::time::Duration;

use common::{output_within, TICKBOX};

fn feed_json(args: &[&str]) -> (serde_json::Value, String) {
    let mut cmd = Command::new(TICKBOX);
    cmd.arg("feed")
        .args(["--bind", "tcp://127.0.0.1:*", "--json"])
        .args(args)
        .env("RUST_LOG", "warn");
    let out = output_within(cmd, Duration::from_secs(20));
    assert!(out.status.success(), "feed failed: {out:?}");
    let stdout = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 1, "stdout is one JSON object: {stdout}");
    (
        serde_json::from_str(lines[0]).expect("valid JSON"),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn json_summary_has_integer_counts_and_the_target() {
    let (report, stderr) = feed_json(&["--rate", "2k", "--max-messages", "300"]);
    assert_eq!(report["sent"].as_u64(), Some(300), "{report}");
    assert_eq!(report["target_rate"].as_u64(), Some(2_000), "{report}");
    assert!(report["achieved_rate"].is_u64(), "{report}");
    assert_eq!(report["shards"][0]["last_sequence"].as_u64(), Some(300));
    // The endpoint line moved to stderr, so stdout stays machine-readable.
    assert!(stderr.contains("feed shard 0"), "{stderr}");
}

#[test]
fn a_rate_the_host_cannot_reach_is_reported_not_hidden() {
    let (report, stderr) = feed_json(&["--rate", "500m", "--duration", "1s"]);
    assert_eq!(report["target_rate"].as_u64(), Some(500_000_000));
    assert_eq!(report["rate_shortfall"], true, "{report}");
    assert!(
        report["achieved_rate"].as_u64().unwrap() < 475_000_000,
        "{report}"
    );
    assert!(
        stderr.contains("the feed achieved"),
        "warning logged: {stderr}"
    );
}

#[test]
fn flat_out_has_no_target_to_miss() {
    let (report, _) = feed_json(&["--rate", "max", "--max-messages", "1000"]);
    assert!(report["target_rate"].is_null(), "{report}");
    assert_eq!(report["rate_shortfall"], false);
    assert_eq!(report["sent"].as_u64(), Some(1000));
}
