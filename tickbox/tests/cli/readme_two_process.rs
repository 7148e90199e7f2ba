//! README's "Two processes" example, run as written (the two commands are read from README itself), scaled down
//! in time: the feed's fixed ports are swapped for free ones read back, `--json` is added to both so the test
//! reads counts rather than tables, and both are stopped with Ctrl-C after a few seconds.

use crate::common;

use std::io::Read;
use std::process::{Command, Stdio};
use std::sync::mpsc::Receiver;
use std::time::{Duration, Instant};

use common::{forward_lines, signal, KillOnDrop, TICKBOX};

const README: &str = include_str!("../../../README.md");

/// The `cargo run --release -- …` command lines of README's "Two processes" section, as argument lists.
fn readme_commands() -> Vec<Vec<String>> {
    let section = README
        .split("\n## Two processes")
        .nth(1)
        .expect("README has a \"Two processes\" section");
    let block = section
        .split("```sh")
        .nth(1)
        .and_then(|rest| rest.split("```").next())
        .expect("the section has a sh code block");
    block
        .lines()
        .filter_map(|line| line.trim().strip_prefix("cargo run --release -- "))
        .map(|args| args.split_whitespace().map(str::to_owned).collect())
        .collect()
}

fn flag_value<'a>(args: &'a [String], flag: &str) -> &'a str {
    let at = args
        .iter()
        .position(|a| a == flag)
        .unwrap_or_else(|| panic!("README command lacks {flag}: {args:?}"));
    &args[at + 1]
}

fn replace_flag(args: &mut [String], flag: &str, value: String) {
    let at = args.iter().position(|a| a == flag).expect("flag present");
    args[at + 1] = value;
}

fn spawn(args: &[String]) -> (KillOnDrop, Receiver<String>, std::process::ChildStderr) {
    let mut child = Command::new(TICKBOX)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn tickbox");
    let stdout = child.stdout.take().unwrap();
    let stderr = child.stderr.take().unwrap();
    (KillOnDrop(child), forward_lines(stdout), stderr)
}

/// The last line of `lines` that parses as a JSON object, waiting at most `limit` for the stream to end.
fn json_summary(lines: &Receiver<String>, limit: Duration) -> serde_json::Value {
    let deadline = Instant::now() + limit;
    let mut last = None;
    while let Some(left) = deadline.checked_duration_since(Instant::now()) {
        match lines.recv_timeout(left) {
            Ok(line) => {
                if let Ok(value @ serde_json::Value::Object(_)) = serde_json::from_str(&line) {
                    last = Some(value);
                }
            }
            Err(_) => break,
        }
    }
    last.expect("a JSON summary on stdout")
}

#[test]
fn readme_two_process_example_runs_clean_as_written() {
    let _turn = common::readme_tour_turn();
    let commands = readme_commands();
    assert_eq!(commands.len(), 2, "README shows a feed and a subscriber");
    let (mut feed_args, mut sub_args) = (commands[0].clone(), commands[1].clone());
    assert_eq!(feed_args[0], "feed");
    assert_eq!(sub_args[0], "subscribe");

    // Same shard count as README, on free ports.
    let shards = flag_value(&feed_args, "--bind").split(',').count();
    replace_flag(
        &mut feed_args,
        "--bind",
        vec!["tcp://127.0.0.1:*"; shards].join(","),
    );
    feed_args.push("--json".into());
    let (mut feed, feed_lines, mut feed_err) = spawn(&feed_args);
    // With --json the shard endpoint lines go to stderr.
    let (tx, endpoints) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut text = String::new();
        let mut buf = [0u8; 4096];
        while let Ok(n) = feed_err.read(&mut buf) {
            if n == 0 {
                break;
            }
            text.push_str(&String::from_utf8_lossy(&buf[..n]));
            while let Some(nl) = text.find('\n') {
                let line: String = text.drain(..=nl).collect();
                if line.starts_with("feed shard") {
                    if let Some(ep) = common::endpoint_in(&line) {
                        let _ = tx.send(ep);
                    }
                }
            }
        }
    });
    let endpoints: Vec<String> = (0..shards)
        .map(|_| {
            endpoints
                .recv_timeout(Duration::from_secs(10))
                .expect("feed printed its endpoints")
        })
        .collect();
    assert_eq!(
        flag_value(&sub_args, "--connect").split(',').count(),
        shards,
        "README's subscriber connects one SUB shard per feed shard"
    );
    replace_flag(&mut sub_args, "--connect", endpoints.join(","));
    sub_args.push("--json".into());
    let (mut sub, sub_lines, mut sub_err) = spawn(&sub_args);

    // README's example runs until Ctrl-C; a few seconds is the scaled-down run. The subscriber must still be alive
    // (the snail did not fire) when we stop it.
    std::thread::sleep(Duration::from_secs(4));
    if let Some(status) = sub.0.try_wait().unwrap() {
        let mut err = String::new();
        let _ = sub_err.read_to_string(&mut err);
        let out: Vec<String> = sub_lines.try_iter().collect();
        panic!(
            "the subscriber died while running README's example ({status}): {:?}\nstderr:\n{err}\nstdout:\n{}",
            sub_args,
            out.join("\n")
        );
    }
    signal(sub.0.id(), "INT");
    let status = sub.wait_exit(Duration::from_secs(10), "subscriber did not stop on Ctrl-C");
    assert!(status.success(), "subscriber exited with {status:?}");
    let summary = json_summary(&sub_lines, Duration::from_secs(5));
    let received = summary["data_received"].as_u64().expect("data_received");
    assert!(
        received > 20_000,
        "subscriber received only {received}: {summary}"
    );

    signal(feed.0.id(), "INT");
    let status = feed.wait_exit(Duration::from_secs(10), "feed did not stop on Ctrl-C");
    assert!(status.success(), "feed exited with {status:?}");
    let report = json_summary(&feed_lines, Duration::from_secs(5));
    assert_eq!(
        report["rate_shortfall"], false,
        "README's rate must hold on this machine: {report}"
    );
    assert!(report["sent"].as_u64().unwrap() >= received);
}
