//! The live view (`--stats-interval`): on a terminal (a pseudo-terminal from `script`) the replay's progress bar
//! is redrawn in place and cleared before the summary; through a pipe every report is a plain line without
//! escape codes; `-q` turns the default view off; `tap --top` redraws its table in place on a terminal.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use common::{output_within, KillOnDrop, TempDir, TICKBOX};
use tickbox_journal::{Writer, WriterOptions};
use tickbox_wire::{encode_to_vec, Header, Kind, MessageRef, Quote};

/// Records in the test journal, spread over [`SPAN`] of capture time (so a 1x replay lasts that long).
const N: u64 = 300;
const SPAN: Duration = Duration::from_millis(1500);

/// A journal of `N` quotes captured evenly over `SPAN`.
fn journal(path: &Path) {
    let mut w = Writer::open(path, &WriterOptions::ring(4 << 20)).unwrap();
    let t0 = 1_795_530_600_000_000_000u64;
    let step = SPAN.as_nanos() as u64 / (N - 1);
    for i in 0..N {
        let t = t0 + i * step;
        let quote = Quote {
            instrument_id: i as u32,
            ..Quote::default()
        };
        let frame = encode_to_vec(
            "Q.XNAS.AAPL",
            &Header::live(Kind::Quote, 7, i + 1, t),
            &quote.into(),
        )
        .unwrap();
        w.append(t, &frame).unwrap();
    }
}

/// `replay` at 1x onto an ipc endpoint (known before it starts, so no port needs reading back), reporting every
/// 200 ms.
fn replay_args(journal: &Path, endpoint: &str) -> Vec<String> {
    [
        "replay",
        "--journal",
        journal.to_str().unwrap(),
        "--bind",
        endpoint,
        "--speed",
        "1",
        "--wait-timeout",
        "10s",
        "--stats-interval",
        "200ms",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

/// Subscribes to `endpoint` and receives until all `N` quotes arrived (at most 15 s); the count is returned.
fn drain(endpoint: &str) -> u64 {
    let ctx = zmq::Context::new();
    let sub = ctx.socket(zmq::SUB).unwrap();
    sub.set_linger(0).unwrap();
    sub.set_subscribe(b"Q.").unwrap();
    sub.connect(endpoint).unwrap();
    let mut got = 0;
    let deadline = Instant::now() + Duration::from_secs(15);
    while got < N && Instant::now() < deadline {
        if sub.poll(zmq::POLLIN, 50).unwrap() > 0 {
            while let Ok(frame) = sub.recv_bytes(zmq::DONTWAIT) {
                if MessageRef::decode(&frame).unwrap().kind() == Kind::Quote {
                    got += 1;
                }
            }
        }
    }
    got
}

fn which(name: &str) -> Option<PathBuf> {
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|p| p.join(name))
        .find(|p| p.is_file())
}

/// Runs `cmd` on a thread (it may wait for our subscriber), subscribes meanwhile, and returns its output.
fn run_with_subscriber(cmd: Command, endpoint: &str) -> Output {
    let (tx, rx) = mpsc::channel();
    let runner = thread::spawn(move || {
        let _ = tx.send(output_within(cmd, Duration::from_secs(20)));
    });
    assert_eq!(drain(endpoint), N, "every record replayed");
    let out = rx
        .recv_timeout(Duration::from_secs(20))
        .expect("replay finished");
    runner.join().unwrap();
    out
}

#[test]
fn on_a_terminal_the_replay_bar_is_redrawn_in_place_and_cleared_before_the_summary() {
    let Some(script) = which("script") else {
        eprintln!("SKIPPED: no `script` (util-linux) to provide a terminal");
        return;
    };
    let dir = TempDir::new("live-pty");
    let j = dir.0.join("j.tbj");
    journal(&j);
    let endpoint = format!("ipc://{}/r.sock", dir.0.display());
    let command = format!("{TICKBOX} {}", replay_args(&j, &endpoint).join(" "));
    let mut cmd = Command::new(script);
    cmd.args(["-qec", &command, "/dev/null"])
        .env_remove("RUST_LOG")
        .stdin(Stdio::null());
    let out = run_with_subscriber(cmd, &endpoint);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    // indicatif redraws a line by returning to its start and erasing it.
    let redraws = text.matches("\r\u{1b}[2K").count();
    assert!(
        redraws >= 3,
        "expected the bar redrawn in place several times:\n{text:?}"
    );
    assert!(text.contains("replay: ["), "no progress bar:\n{text:?}");
    assert!(text.contains("x real time"), "{text:?}");
    // The summary starts on a line of its own: the bar was cleared, not left under it.
    let at = text.find("speed         1").expect("summary printed");
    // What precedes it since the bar's last erase is cursor movement at most, never bar text.
    let before = &text[..at];
    let after_erase = &before[before.rfind("\u{1b}[2K").map_or(0, |i| i + 4)..];
    let mut rest = after_erase.to_owned();
    while let Some(i) = rest.find('\u{1b}') {
        // Drop one CSI sequence: ESC [ parameters, then a final letter.
        let end = rest[i + 2..]
            .find(|c: char| c.is_ascii_alphabetic())
            .map_or(rest.len(), |j| i + 2 + j + 1);
        rest.replace_range(i..end, "");
    }
    // Whole lines may come between (the wait for the last queued records is announced before the summary),
    // but no bar text, and the summary starts a line.
    assert!(
        !rest.contains("replay: [") && (rest.trim().is_empty() || rest.ends_with('\n')),
        "the summary runs into the bar: {:?}",
        &before[before.len().saturating_sub(120)..]
    );
    assert!(
        !text[at..].contains("replay: ["),
        "the bar was drawn after the summary"
    );
}

#[test]
fn through_a_pipe_reports_are_plain_lines() {
    let dir = TempDir::new("live-pipe");
    let j = dir.0.join("j.tbj");
    journal(&j);
    let endpoint = format!("ipc://{}/r.sock", dir.0.display());
    let mut cmd = Command::new(TICKBOX);
    cmd.args(replay_args(&j, &endpoint))
        .env_remove("RUST_LOG")
        .stdin(Stdio::null());
    let out = run_with_subscriber(cmd, &endpoint);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(!err.contains('\u{1b}'), "escape codes in a pipe:\n{err:?}");
    assert!(!err.contains('\r'), "carriage returns in a pipe:\n{err:?}");
    // A 1.5 s replay reported every 200 ms: several lines, each with progress, rate and pace.
    let lines: Vec<&str> = err
        .lines()
        .filter(|l| l.starts_with("replay: ") && l.contains("x real time"))
        .collect();
    assert!(
        lines.len() >= 2,
        "expected at least two stats lines:\n{err}"
    );
    for line in &lines {
        assert!(line.contains("%), "), "no progress in {line:?}");
        assert!(line.contains("/s, "), "no rate in {line:?}");
    }
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.starts_with("speed "), "summary on stdout:\n{stdout}");

    // The feed reports the same way, and -q without --stats-interval reports nothing.
    let feed = |extra: &[&str]| {
        let mut cmd = Command::new(TICKBOX);
        cmd.args(["feed", "--bind", "tcp://127.0.0.1:*", "--rate", "1k"])
            .args(["--duration", "1s"])
            .args(extra)
            .env_remove("RUST_LOG")
            .stdin(Stdio::null());
        output_within(cmd, Duration::from_secs(15))
    };
    let out = feed(&["-q", "--stats-interval", "200ms"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    let stats = err.lines().filter(|l| l.starts_with("feed: sent ")).count();
    assert!(stats >= 2, "expected at least two feed stats lines:\n{err}");
    assert!(!err.contains('\u{1b}') && !err.contains('\r'), "{err:?}");
    let out = feed(&["-q"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!err.contains("feed: sent"), "-q still reports:\n{err}");
}

#[test]
fn tap_top_redraws_its_table_in_place_on_a_terminal() {
    let Some(script) = which("script") else {
        eprintln!("SKIPPED: no `script` (util-linux) to provide a terminal");
        return;
    };
    // A feed to tap directly (tap reads any tickbox PUB), its endpoint read back from its first stdout line.
    let mut feed = KillOnDrop(
        Command::new(TICKBOX)
            .args(["feed", "--bind", "tcp://127.0.0.1:*", "--rate", "500"])
            .args(["--duration", "10s", "-q"])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let lines = common::forward_lines(feed.0.stdout.take().unwrap());
    let endpoint = loop {
        let line = lines
            .recv_timeout(Duration::from_secs(10))
            .expect("feed endpoint");
        if let Some(ep) = common::endpoint_in(&line) {
            break ep;
        }
    };
    let command = format!("{TICKBOX} tap --connect {endpoint} --top --duration 2500ms -q");
    let mut cmd = Command::new(script);
    cmd.args(["-qec", &command, "/dev/null"])
        .stdin(Stdio::null());
    let out = output_within(cmd, Duration::from_secs(15));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    let frames = text.matches("\u{1b}[Hprefix ").count();
    assert!(
        frames >= 2,
        "expected the table redrawn from home:\n{text:?}"
    );
    assert!(
        text.contains("\u{1b}[J"),
        "no erase below the table:\n{text:?}"
    );
    drop(feed);
}

/// `subscribe`, `record` and `lvc` on one feed, each with a 200 ms interval into a pipe: several plain lines each.
#[test]
fn subscribe_record_and_lvc_report_plain_lines_through_a_pipe() {
    let dir = TempDir::new("live-others");
    let mut feed = KillOnDrop(
        Command::new(TICKBOX)
            .args(["feed", "--bind", "tcp://127.0.0.1:*", "--rate", "1k"])
            .args(["--duration", "10s", "-q"])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let lines = common::forward_lines(feed.0.stdout.take().unwrap());
    let endpoint = loop {
        let line = lines
            .recv_timeout(Duration::from_secs(10))
            .expect("feed endpoint");
        if let Some(ep) = common::endpoint_in(&line) {
            break ep;
        }
    };
    let journal = dir.0.join("j.tbj");
    let runs: Vec<(&str, Vec<String>)> = vec![
        (
            "subscribe: received ",
            vec!["subscribe".into(), "--connect".into(), endpoint.clone()],
        ),
        (
            "record: ",
            vec![
                "record".into(),
                "--connect".into(),
                endpoint.clone(),
                "--journal".into(),
                journal.to_str().unwrap().into(),
                "--ring".into(),
                "--capacity".into(),
                "8MiB".into(),
            ],
        ),
        (
            "lvc: in ",
            vec![
                "lvc".into(),
                "--upstream".into(),
                endpoint.clone(),
                "--bind".into(),
                "tcp://127.0.0.1:*".into(),
            ],
        ),
    ];
    // All three at once, each for 1.5 s: at least two reports each.
    let handles: Vec<_> = runs
        .into_iter()
        .map(|(want, args)| {
            let mut cmd = Command::new(TICKBOX);
            cmd.args(&args)
                .args(["--duration", "1500ms", "--stats-interval", "200ms", "-q"])
                .env_remove("RUST_LOG")
                .stdin(Stdio::null());
            thread::spawn(move || (want, output_within(cmd, Duration::from_secs(15))))
        })
        .collect();
    for handle in handles {
        let (want, out) = handle.join().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{want}: {:?}\n{err}", out.status);
        let reports = err.lines().filter(|l| l.starts_with(want)).count();
        assert!(reports >= 2, "expected at least two `{want}` lines:\n{err}");
        if want.starts_with("subscribe") {
            // Percentiles are asked for at each report and answered by the shard by the next one.
            let last = err.lines().rfind(|l| l.starts_with(want)).unwrap();
            assert!(last.contains(", lateness p50 "), "{last}");
            assert!(!last.contains(" max 0us"), "no lateness measured: {last}");
        }
        assert!(
            !err.contains('\u{1b}') && !err.contains('\r'),
            "escape codes in a pipe:\n{err:?}"
        );
    }
    drop(feed);
}
