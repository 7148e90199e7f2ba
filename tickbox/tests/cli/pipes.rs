//! Output cut short by its reader (`tickbox … | head -1`) is not an error: no panic, no `error:` line, exit 0;
//! and `tickbox man` writes a page per command.

use crate::common;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::Duration;

use common::{TempDir, TICKBOX};

/// Runs `tickbox ARGS` with its stdout closed before it writes (as `| head -0` would), and returns its exit code
/// and stderr.
fn with_closed_stdout(args: &[&str]) -> (Option<i32>, String) {
    let mut child = common::KillOnDrop(
        Command::new(TICKBOX)
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn tickbox"),
    );
    drop(child.0.stdout.take());
    let out = child.wait_output(Duration::from_secs(20));
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn a_closed_pipe_is_no_error_anywhere() {
    for args in [
        &["completions", "fish"][..],
        &["completions", "bash"],
        &["man"],
        &["man", "journal", "verify"],
        &["config"],
        &["tune", "show", "--root", "/"],
        &["--help"],
        &["subscribe", "--help"],
    ] {
        let (code, err) = with_closed_stdout(args);
        assert_eq!(code, Some(0), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{args:?}: {err}");
        assert!(!err.contains("error"), "{args:?}: {err}");
    }
}

/// A command whose own outcome is a failure keeps that exit code when its reader has gone: `top --once` with a
/// process it cannot reach exits 1, not 101 from a panicking `print!`.
#[test]
fn a_closed_pipe_keeps_a_failing_commands_own_exit_code() {
    let (code, err) = with_closed_stdout(&["top", "--once", "--interval", "100ms", "127.0.0.1:1"]);
    assert_eq!(code, Some(1), "{err}");
    assert!(!err.contains("panicked"), "{err}");
}

#[test]
fn man_writes_a_page_per_command_and_prints_one_on_request() {
    let dir = TempDir::new("cli-man");
    let out = Command::new(TICKBOX)
        .args(["man", "--dir", dir.0.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(out.status.success());
    for page in [
        "tickbox.1",
        "tickbox-feed.1",
        "tickbox-journal-verify.1",
        "tickbox-bench-compare.1",
    ] {
        let text =
            std::fs::read_to_string(dir.0.join(page)).unwrap_or_else(|e| panic!("{page}: {e}"));
        assert!(text.contains(".TH"), "{page}");
    }
    let page = Command::new(TICKBOX)
        .args(["man", "journal", "verify"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&page.stdout);
    assert!(
        text.contains("tickbox\\-journal\\-verify") || text.contains("tickbox-journal-verify"),
        "{text}"
    );
    assert!(
        text.contains("Exit codes"),
        "the page carries the exit codes: {text}"
    );
    let missing = Command::new(TICKBOX)
        .args(["man", "nosuch"])
        .output()
        .unwrap();
    assert_eq!(missing.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&missing.stderr).contains("has no command `nosuch`"));
}

/// A supervisor that closes a subscriber's stderr (its log reader went away) must not kill it: the status lines and
/// logs it writes afterwards are dropped, and the run ends as it would have, with its summary on stdout.
#[test]
fn a_subscriber_whose_stderr_closes_keeps_running_to_its_summary() {
    let (_feed, endpoints) =
        common::spawn_feed_with_endpoints(&["--rate", "1k", "--duration", "20s", "--json"], 1);
    let mut sub = common::KillOnDrop(
        Command::new(TICKBOX)
            .args([
                "subscribe",
                "--connect",
                &endpoints[0],
                "--duration",
                "2s",
                "--stats-interval",
                "100ms",
                "--json",
            ])
            .env("RUST_LOG", "debug")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn tickbox subscribe"),
    );
    // Read here, not by a background reader, so that dropping it closes the pipe: the subscriber's next write
    // meets EPIPE.
    let mut stderr = BufReader::new(sub.0.stderr.take().unwrap()).lines();
    let status_line = stderr.find(|line| {
        line.as_ref()
            .is_ok_and(|line| line.starts_with("subscribe: received"))
    });
    assert!(status_line.is_some(), "no status line on stderr");
    drop(stderr);
    // The summary is one line, well inside the pipe's buffer: reading it after the exit cannot block the child.
    let out = sub.wait_output(Duration::from_secs(15));
    let summary = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{summary}");
    let summary: serde_json::Value = serde_json::from_str(&summary).expect("the --json summary");
    assert!(summary["received"].as_u64() > Some(0), "{summary}");
}
