//! `tickbox demo` as a real process: everything published arrives, the summary and the baseline are printed,
//! and Ctrl-C stops it cleanly with the same summary.

use crate::common;

use std::time::Duration;

use common::Captured;

fn sent_total(stdout: &str) -> u64 {
    let line = stdout
        .lines()
        .find(|l| l.starts_with("sent: "))
        .expect("sent line");
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

fn all_row(stdout: &str, col: usize) -> u64 {
    let line = stdout
        .lines()
        .find(|l| l.trim_start().starts_with("all "))
        .expect("all row");
    line.split_whitespace().nth(col).unwrap().parse().unwrap()
}

#[test]
fn demo_over_tcp_delivers_everything_and_prints_the_baseline() {
    let proc = Captured::spawn(&[
        "demo",
        "--duration",
        "1s",
        "--rate",
        "20k",
        "--shards",
        "2",
        "--workers",
        "2",
        "--transport",
        "tcp",
        "--baseline-duration",
        "300ms",
    ]);
    let (status, stdout, stderr) = proc.wait(Duration::from_secs(20));
    assert_eq!(
        status.code(),
        Some(0),
        "stdout:\n{stdout}\nstderr:\n{stderr}"
    );
    let sent = sent_total(&stdout);
    assert!(sent > 10_000, "{stdout}");
    assert_eq!(
        all_row(&stdout, 1),
        sent,
        "received == sent with no-drop:\n{stdout}"
    );
    assert_eq!(all_row(&stdout, 5), 0, "no gaps:\n{stdout}");
    assert!(
        stdout.contains("lossy PUB") && stdout.contains("XPUB_NODROP"),
        "{stdout}"
    );
    assert!(stdout.contains("stopped by end of run"), "{stdout}");
    // Feed and subscriber share one clock: a record can never be received before it was sent, so every
    // publisher's minimum delay is positive, however loaded the machine (the receive clock is read per frame).
    let offsets = stdout
        .lines()
        .find(|l| l.contains("clock offsets"))
        .expect("clock offsets line");
    let values = offsets
        .split_once("):")
        .expect("offsets after the legend")
        .1;
    assert!(
        !values.contains('-'),
        "negative delay in one process: {offsets}"
    );
    let shard_rows = stdout
        .lines()
        .filter(|l| l.contains("tcp://127.0.0.1:") && !l.contains("publisher"))
        .count();
    assert!(shard_rows >= 2, "{stdout}");
}

#[test]
fn demo_stops_cleanly_on_ctrl_c_with_the_summary() {
    let proc = Captured::spawn(&[
        "demo",
        "--duration",
        "60s",
        "--rate",
        "10k",
        "--no-baseline",
    ]);
    std::thread::sleep(Duration::from_millis(1_500));
    proc.interrupt();
    let (status, stdout, stderr) = proc.wait(Duration::from_secs(15));
    assert_eq!(
        status.code(),
        Some(0),
        "stdout:\n{stdout}\nstderr:\n{stderr}"
    );
    assert!(stdout.contains("stopped by signal"), "{stdout}");
    let sent = sent_total(&stdout);
    assert!(sent > 0);
    assert_eq!(all_row(&stdout, 1), sent, "{stdout}");
}

#[test]
fn demo_rejects_bad_arguments() {
    for args in [
        &["demo", "--rate", "lots"][..],
        &["demo", "--workers", "0"],
        &["demo", "--transport", "udp"],
    ] {
        let (status, _out, err) = Captured::spawn(args).wait(Duration::from_secs(10));
        assert!(
            matches!(status.code(), Some(1) | Some(2)),
            "{args:?}\n{err}"
        );
    }
}

#[test]
fn demo_json_is_one_versioned_object_with_the_feed_the_subscriber_and_the_baseline() {
    let proc = Captured::spawn(&[
        "demo",
        "--duration",
        "1s",
        "--rate",
        "10k",
        "--baseline-duration",
        "200ms",
        "--json",
    ]);
    let (status, out, err) = proc.wait(Duration::from_secs(30));
    assert!(status.success(), "{err}");
    let json: serde_json::Value = serde_json::from_str(out.trim()).expect("one JSON object");
    assert_eq!(json["schema_version"], 1);
    assert_eq!(json["component"], "demo");
    let sent = json["feed"]["sent"].as_u64().unwrap();
    assert!(sent > 0, "{json}");
    assert_eq!(
        json["subscriber"]["data_received"].as_u64(),
        Some(sent),
        "{json}"
    );
    assert_eq!(json["baseline"].as_array().map(Vec::len), Some(2), "{json}");
}
