//! Ctrl-C (SIGINT) and SIGTERM stop every long-running command cleanly: exit 0 with its summary (or last line)
//! printed, within a bound.
//!
//! A signal can land while a command's thread sits in `zmq_poll`; libzmq then returns EINTR, which used to be
//! treated as a failure (exit 1, no summary) by the broker, the clone and freelance servers and sometimes `tap`.
//! Each test runs one command twice at once, one run per signal, after waiting until it is ready.

use crate::common;

use std::io::{BufRead, BufReader, Read};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use common::{call_service, endpoint_in, send_signal, TempDir, TICKBOX};

/// How long a command may take to stop after the signal; generous for a loaded two-core machine.
const STOP_WITHIN: Duration = Duration::from_secs(8);
/// How long a command (or fixture) may take to become ready.
const READY_WITHIN: Duration = Duration::from_secs(10);

type Lines = Arc<Mutex<Vec<String>>>;

/// A `tickbox` child with both streams collected line by line while it runs; killed on drop.
struct Proc {
    name: String,
    child: Child,
    out: Lines,
    err: Lines,
    readers: Vec<JoinHandle<()>>,
}

fn collect(stream: impl Read + Send + 'static, into: Lines) -> JoinHandle<()> {
    std::thread::spawn(move || {
        for line in BufReader::new(stream).lines().map_while(Result::ok) {
            into.lock().unwrap().push(line);
        }
    })
}

impl Proc {
    fn spawn(name: &str, args: &[String]) -> Proc {
        let mut child = Command::new(TICKBOX)
            .args(args)
            // Info logs carry several readiness and summary lines; no colours, so they match as plain text.
            .env("RUST_LOG", "info")
            .env("NO_COLOR", "1")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn tickbox");
        let out = Lines::default();
        let err = Lines::default();
        let readers = vec![
            collect(child.stdout.take().unwrap(), Arc::clone(&out)),
            collect(child.stderr.take().unwrap(), Arc::clone(&err)),
        ];
        Proc {
            name: name.to_owned(),
            child,
            out,
            err,
            readers,
        }
    }

    fn dump(&self) -> String {
        format!(
            "{}\n--- stdout\n{}\n--- stderr\n{}",
            self.name,
            self.out.lock().unwrap().join("\n"),
            self.err.lock().unwrap().join("\n")
        )
    }

    /// Waits (bounded) for a line containing `needle` on stdout (or stderr) and returns it.
    fn wait_line(&mut self, on_stderr: bool, needle: &str) -> String {
        let deadline = Instant::now() + READY_WITHIN;
        loop {
            let lines = if on_stderr { &self.err } else { &self.out };
            if let Some(line) = lines.lock().unwrap().iter().find(|l| l.contains(needle)) {
                return line.clone();
            }
            if let Some(status) = self.child.try_wait().unwrap() {
                panic!(
                    "exited ({status}) before printing {needle:?}: {}",
                    self.dump()
                );
            }
            assert!(
                Instant::now() < deadline,
                "no {needle:?} within {READY_WITHIN:?}: {}",
                self.dump()
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Sends `signal`, waits (bounded) for the exit and returns the exit code with everything printed.
    fn stop_with(mut self, signal: libc::c_int) -> (Option<i32>, String, String) {
        send_signal(self.child.id(), signal);
        let deadline = Instant::now() + STOP_WITHIN;
        let status = loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                break status;
            }
            assert!(
                Instant::now() < deadline,
                "still running {STOP_WITHIN:?} after signal {signal}: {}",
                self.dump()
            );
            std::thread::sleep(Duration::from_millis(10));
        };
        // The pipes close with the process, so the readers end promptly.
        for reader in self.readers.drain(..) {
            reader.join().unwrap();
        }
        let out = self.out.lock().unwrap().join("\n");
        let err = self.err.lock().unwrap().join("\n");
        (status.code(), out, err)
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn args(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| s.to_string()).collect()
}

/// Where a command says it is ready, or where its summary appears.
#[derive(Clone, Copy)]
enum Line {
    Out(&'static str),
    Err(&'static str),
    /// No ready line: readiness is established by the `ready_extra` step alone.
    Nothing,
}

/// A publisher to subscribe to (1000 msg/s), and its endpoint.
fn feed_fixture() -> (Proc, String) {
    let mut feed = Proc::spawn(
        "feed fixture",
        &args(&["feed", "--bind", "tcp://127.0.0.1:*", "--rate", "1000"]),
    );
    let line = feed.wait_line(false, "endpoint tcp://");
    let ep = endpoint_in(&line).unwrap();
    (feed, ep)
}

/// A Majordomo broker, and its endpoint.
fn broker_fixture() -> (Proc, String) {
    let mut broker = Proc::spawn(
        "broker fixture",
        &args(&["broker", "--bind", "tcp://127.0.0.1:*"]),
    );
    let line = broker.wait_line(false, "broker listening on");
    let ep = endpoint_in(&line).unwrap();
    (broker, ep)
}

/// Starts `argv` twice, waits until each is ready, stops one with SIGINT and the other with SIGTERM, and checks
/// both exit 0 with `summary` printed. `ready_extra` runs after the ready line (run index 0 or 1).
fn stops_cleanly(
    name: &str,
    argv: impl Fn(usize) -> Vec<String> + Sync,
    ready: Line,
    ready_extra: impl Fn(usize, &mut Proc) + Sync,
    summary: Line,
) {
    std::thread::scope(|scope| {
        let runs: Vec<_> = [(libc::SIGINT, "SIGINT"), (libc::SIGTERM, "SIGTERM")]
            .into_iter()
            .enumerate()
            .map(|(i, (signal, signame))| {
                let argv = &argv;
                let ready_extra = &ready_extra;
                scope.spawn(move || {
                    let label = format!("{name} ({signame})");
                    let mut proc = Proc::spawn(&label, &argv(i));
                    match ready {
                        Line::Out(needle) => drop(proc.wait_line(false, needle)),
                        Line::Err(needle) => drop(proc.wait_line(true, needle)),
                        Line::Nothing => {}
                    }
                    ready_extra(i, &mut proc);
                    let started = Instant::now();
                    let (code, out, err) = proc.stop_with(signal);
                    let took = started.elapsed();
                    assert_eq!(
                        code,
                        Some(0),
                        "{label}: exit code\n--- stdout\n{out}\n--- stderr\n{err}"
                    );
                    let (stream, needle) = match summary {
                        Line::Out(needle) => (&out, needle),
                        Line::Err(needle) => (&err, needle),
                        Line::Nothing => {
                            unreachable!("every command prints a summary or a last line")
                        }
                    };
                    assert!(
                        stream.contains(needle),
                        "{label}: no summary {needle:?}\n--- stdout\n{out}\n--- stderr\n{err}"
                    );
                    assert!(
                        !err.contains("Interrupted system call"),
                        "{label}: EINTR surfaced\n{err}"
                    );
                    took
                })
            })
            .collect();
        for run in runs {
            run.join().unwrap();
        }
    });
}

fn nothing(_: usize, _: &mut Proc) {}

#[test]
fn feed_stops_cleanly() {
    stops_cleanly(
        "feed",
        |_| args(&["feed", "--bind", "tcp://127.0.0.1:*", "--rate", "1000"]),
        Line::Out("endpoint tcp://"),
        nothing,
        Line::Out("total: "),
    );
}

#[test]
fn subscribe_stops_cleanly() {
    let (_feed, ep) = feed_fixture();
    // One broker per run, so each status answer comes from that run's subscriber.
    let (_b0, broker0) = broker_fixture();
    let (_b1, broker1) = broker_fixture();
    let brokers = [broker0, broker1];
    stops_cleanly(
        "subscribe",
        |i| args(&["subscribe", "--connect", &ep, "--broker", &brokers[i]]),
        Line::Err("subscriber running"),
        // A run that received nothing exits 1 by design: wait until its status shows traffic.
        |i, _| {
            let deadline = Instant::now() + READY_WITHIN;
            loop {
                let (code, out) = call_service(&brokers[i], "tickbox.subscribe.status", &[], 1_000);
                let received = (code == 0)
                    .then(|| serde_json::from_str::<serde_json::Value>(out.trim()).ok())
                    .flatten()
                    .and_then(|v| v["shards"][0]["received"].as_u64())
                    .unwrap_or(0);
                if received > 0 {
                    break;
                }
                assert!(Instant::now() < deadline, "subscriber received nothing");
                std::thread::sleep(Duration::from_millis(20));
            }
        },
        Line::Out("stopped by signal"),
    );
}

#[test]
fn lvc_stops_cleanly() {
    stops_cleanly(
        "lvc",
        |_| {
            args(&[
                "lvc",
                "--upstream-bind",
                "tcp://127.0.0.1:*",
                "--bind",
                "tcp://127.0.0.1:*",
                "--tap",
                "tcp://127.0.0.1:*",
            ])
        },
        Line::Out("lvc tap tcp://"),
        nothing,
        Line::Out("messages in"),
    );
}

#[test]
fn tap_stops_cleanly() {
    let (_feed, ep) = feed_fixture();
    stops_cleanly(
        "tap",
        |_| args(&["tap", "--connect", &ep]),
        // The first decoded quote: connected and inside the poll loop.
        Line::Out("quote"),
        nothing,
        Line::Err("tap: "),
    );
}

#[test]
fn record_stops_cleanly() {
    let (_feed, ep) = feed_fixture();
    let dir = TempDir::new("signals-record");
    stops_cleanly(
        "record",
        |i| {
            let journal = dir.path().join(format!("j{i}"));
            args(&[
                "record",
                "--connect",
                &ep,
                "--journal",
                journal.to_str().unwrap(),
                "--segment-size",
                "8MiB",
                "--quiet",
            ])
        },
        Line::Err("created journal"),
        nothing,
        Line::Out("multipart"),
    );
}

#[test]
fn replay_awaiting_start_stops_cleanly() {
    let (_feed, ep) = feed_fixture();
    let (_broker, broker) = broker_fixture();
    let dir = TempDir::new("signals-replay");
    let journal = dir.path().join("j");
    let journal = journal.to_str().unwrap().to_owned();
    // A small journal to replay.
    let mut rec = Proc::spawn(
        "record fixture",
        &args(&[
            "record",
            "--connect",
            &ep,
            "--journal",
            &journal,
            "--segment-size",
            "8MiB",
            "--max-messages",
            "20",
            "--quiet",
        ]),
    );
    let deadline = Instant::now() + READY_WITHIN;
    let status = loop {
        if let Some(status) = rec.child.try_wait().unwrap() {
            break status;
        }
        assert!(Instant::now() < deadline, "record fixture: {}", rec.dump());
        std::thread::sleep(Duration::from_millis(10));
    };
    assert!(status.success(), "record fixture: {}", rec.dump());
    stops_cleanly(
        "replay --await-start",
        |_| {
            args(&[
                "replay",
                "--journal",
                &journal,
                "--bind",
                "tcp://127.0.0.1:*",
                "--await-start",
                "--broker",
                &broker,
            ])
        },
        Line::Err("replay: idle, waiting for tickbox.replay.start"),
        nothing,
        Line::Err("replay: stopped after 0 run(s)"),
    );
}

#[test]
fn broker_stops_cleanly() {
    stops_cleanly(
        "broker",
        |_| args(&["broker", "--bind", "tcp://127.0.0.1:*"]),
        Line::Out("broker listening on"),
        nothing,
        Line::Out("requests "),
    );
}

#[test]
fn titanic_stops_cleanly() {
    let (_broker, broker) = broker_fixture();
    let dir = TempDir::new("signals-titanic");
    stops_cleanly(
        "titanic",
        |i| {
            let store = dir.path().join(format!("t{i}"));
            args(&[
                "titanic",
                "--broker",
                &broker,
                "--dir",
                store.to_str().unwrap(),
            ])
        },
        Line::Out("titanic ready"),
        nothing,
        Line::Out("dispatched "),
    );
}

#[test]
fn clone_server_stops_cleanly() {
    stops_cleanly(
        "clone-server",
        |_| args(&["clone-server", "--port", "0", "--interface", "127.0.0.1"]),
        Line::Out("clone-server port="),
        nothing,
        Line::Err("clone server stopped"),
    );
}

#[test]
fn freelance_server_stops_cleanly() {
    stops_cleanly(
        "freelance-server",
        |_| {
            args(&[
                "freelance-server",
                "--bind",
                "tcp://127.0.0.1:*",
                "--endpoint",
                "tcp://127.0.0.1:5555",
            ])
        },
        // Logged once the socket is bound, right before the loop.
        Line::Err("freelance server listening"),
        nothing,
        Line::Out("pings "),
    );
}

#[test]
fn demo_stops_cleanly() {
    stops_cleanly(
        "demo",
        |_| {
            args(&[
                "demo",
                "--duration",
                "60s",
                "--rate",
                "1000",
                "--no-baseline",
            ])
        },
        Line::Err("demo running"),
        nothing,
        Line::Out("pipeline received"),
    );
}

#[test]
fn ctl_watch_stops_cleanly() {
    let mut server = Proc::spawn(
        "clone-server fixture",
        &args(&["clone-server", "--port", "0", "--interface", "127.0.0.1"]),
    );
    let line = server.wait_line(false, "clone-server port=");
    let snapshot = line
        .split_whitespace()
        .find_map(|w| w.strip_prefix("snapshot="))
        .expect("snapshot endpoint")
        .to_owned();
    let set = common::output_within(
        {
            let mut cmd = Command::new(TICKBOX);
            cmd.args(["ctl", "--connect", &snapshot, "set", "signals/k1", "v1"]);
            cmd
        },
        READY_WITHIN,
    );
    assert_eq!(set.status.code(), Some(0), "{set:?}");
    stops_cleanly(
        "ctl watch",
        |_| {
            args(&[
                "ctl",
                "--connect",
                &snapshot,
                "watch",
                "signals/",
                "--existing",
            ])
        },
        // The existing entry, printed once the watch is live; it stays the last line.
        Line::Out("signals/k1\tv1"),
        nothing,
        Line::Out("signals/k1\tv1"),
    );
}

#[test]
fn coord_watch_lock_and_elect_stop_cleanly() {
    let Some(zk) =
        tickbox_coord::testing::ZkServer::start_or_skip("coord_watch_lock_and_elect_stop_cleanly")
    else {
        return;
    };
    let hosts = zk.connect_string();
    let coord = tickbox_coord::Coord::connect_with(&hosts, &tickbox_coord::CoordOptions::default())
        .unwrap();
    coord.create_persistent("/signals", b"").unwrap();
    for i in 0..2 {
        coord
            .create_persistent(&format!("/signals/w{i}"), b"")
            .unwrap();
    }
    let base = |i: usize, op: &str| -> Vec<String> {
        let mut v = args(&["coord", "--zk", &hosts, "--session-timeout", "2s"]);
        v.push(op.to_owned());
        v.push(format!("/signals/{op}{i}"));
        v
    };
    stops_cleanly(
        "coord lock --hold",
        |i| {
            let mut v = base(i, "lock");
            v.push("--hold".into());
            v
        },
        Line::Out("HELD "),
        nothing,
        Line::Err("released (token"),
    );
    stops_cleanly(
        "coord elect",
        |i| base(i, "elect"),
        Line::Out("LEADER "),
        nothing,
        Line::Err("resigned"),
    );
    stops_cleanly(
        "coord watch",
        |i| {
            let mut v = args(&["coord", "--zk", &hosts, "--session-timeout", "2s", "watch"]);
            v.push(format!("/signals/w{i}"));
            v
        },
        Line::Nothing,
        // The watch has no ready line: change its tree until it reports a change (bounded).
        |i, proc| {
            let deadline = Instant::now() + READY_WITHIN;
            for n in 0.. {
                coord
                    .create_persistent(&format!("/signals/w{i}/n{n}"), b"")
                    .unwrap();
                if !proc.out.lock().unwrap().is_empty() {
                    break;
                }
                assert!(
                    Instant::now() < deadline,
                    "watch saw nothing: {}",
                    proc.dump()
                );
                std::thread::sleep(Duration::from_millis(50));
            }
        },
        Line::Err("event(s)"),
    );
}
