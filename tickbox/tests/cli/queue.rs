//! `tickbox queue` (6/PPP) as a real process, with clients and workers written here from the RFC on plain sockets
//! (no tickbox code): requests reach workers in LRU order and come back; a worker killed mid-request is expired by
//! heartbeat and the client's Lazy Pirate retry completes on the survivor; a full backlog refuses and counts.

use crate::common;

use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use common::{spawn_and_read, KillOnDrop, TICKBOX};

const READY: u8 = 1;
const HEARTBEAT: u8 = 2;
const HEARTBEAT_MS: u64 = 100;

/// Starts `tickbox queue` on loopback ports chosen by the OS; returns it with its (frontend, backend).
fn start_queue(extra: &[&str]) -> (KillOnDrop, String, String) {
    let mut cmd = Command::new(TICKBOX);
    cmd.args([
        "queue",
        "--frontend",
        "tcp://127.0.0.1:*",
        "--backend",
        "tcp://127.0.0.1:*",
        "--heartbeat",
        "100ms",
        "--liveness",
        "3",
        "--json",
    ])
    .args(extra)
    .stdout(Stdio::piped())
    .stderr(Stdio::piped());
    let (child, line) = spawn_and_read(&mut cmd, true, |l| {
        l.starts_with("queue frontend ").then(|| l.to_owned())
    });
    let words: Vec<&str> = line.split_whitespace().collect();
    (child, words[2].to_owned(), words[4].to_owned())
}

/// SIGTERM, then the JSON summary the queue prints on its way out.
fn stop_queue(mut queue: KillOnDrop) -> serde_json::Value {
    common::signal(queue.0.id(), "TERM");
    let status = queue.wait_exit(Duration::from_secs(5), "queue ignored SIGTERM");
    assert!(status.success(), "{status:?}");
    let mut out = String::new();
    std::io::Read::read_to_string(&mut queue.0.stdout.take().unwrap(), &mut out).unwrap();
    serde_json::from_str(out.trim()).unwrap_or_else(|e| panic!("{e}: {out:?}"))
}

/// A 6/PPP worker from the RFC: DEALER, READY, a HEARTBEAT every interval, replies `<name>:<body>` with the
/// request's envelope. With `die_on_request`, it closes its socket on its first request without replying and
/// goes silent, as a killed process does.
fn worker(
    ctx: &zmq::Context,
    backend: &str,
    name: &'static str,
    die_on_request: bool,
    stop: Arc<AtomicBool>,
    heard: Arc<AtomicBool>,
) -> JoinHandle<u64> {
    let socket = ctx.socket(zmq::DEALER).unwrap();
    socket.set_linger(0).unwrap();
    socket.connect(backend).unwrap();
    std::thread::spawn(move || {
        socket.send(&[READY][..], 0).unwrap();
        let mut served = 0u64;
        let mut next_heartbeat = Instant::now() + Duration::from_millis(HEARTBEAT_MS);
        while !stop.load(Ordering::Relaxed) {
            if socket.poll(zmq::POLLIN, 20).unwrap() > 0 {
                let frames = socket.recv_multipart(0).unwrap();
                if frames.len() == 1 && frames[0] == [HEARTBEAT] {
                    heard.store(true, Ordering::Relaxed);
                    continue;
                }
                let Some(delim) = frames.iter().position(Vec::is_empty) else {
                    continue;
                };
                if die_on_request {
                    return served;
                }
                let mut reply = frames[..=delim].to_vec();
                let body = frames[delim + 1..].concat();
                reply.push([name.as_bytes(), b":", &body].concat());
                socket.send_multipart(reply, 0).unwrap();
                served += 1;
            }
            if Instant::now() >= next_heartbeat {
                socket.send(&[HEARTBEAT][..], 0).unwrap();
                next_heartbeat += Duration::from_millis(HEARTBEAT_MS);
            }
        }
        served
    })
}

/// A Lazy Pirate client from the Guide: REQ, wait `timeout`, on silence close the socket and resend on a new one,
/// at most `attempts` times. Returns the reply and the attempts it took.
fn lazy_request(
    ctx: &zmq::Context,
    frontend: &str,
    body: &str,
    timeout: i64,
    attempts: u32,
) -> Option<(String, u32)> {
    for attempt in 1..=attempts {
        let req = ctx.socket(zmq::REQ).unwrap();
        req.set_linger(0).unwrap();
        req.connect(frontend).unwrap();
        req.send(body, 0).unwrap();
        if req.poll(zmq::POLLIN, timeout).unwrap() > 0 {
            let reply = req.recv_string(0).unwrap().unwrap();
            return Some((reply, attempt));
        }
    }
    None
}

fn wait_for(flag: &AtomicBool, what: &str) {
    assert!(
        common::eventually(Duration::from_secs(5), Duration::from_millis(10), || {
            flag.load(Ordering::Relaxed)
        }),
        "{what}"
    );
}

#[test]
fn a_worker_killed_mid_request_is_expired_and_the_retry_completes_on_the_other() {
    let (queue, frontend, backend) = start_queue(&[]);
    let ctx = zmq::Context::new();
    let stop = Arc::new(AtomicBool::new(false));
    // The victim registers first, so the LRU queue hands it the first request.
    let victim_heard = Arc::new(AtomicBool::new(false));
    let victim = worker(
        &ctx,
        &backend,
        "victim",
        true,
        Arc::clone(&stop),
        Arc::clone(&victim_heard),
    );
    wait_for(&victim_heard, "the queue never heartbeat the first worker");
    let survivor_heard = Arc::new(AtomicBool::new(false));
    let survivor = worker(
        &ctx,
        &backend,
        "survivor",
        false,
        Arc::clone(&stop),
        Arc::clone(&survivor_heard),
    );
    wait_for(
        &survivor_heard,
        "the queue never heartbeat the second worker",
    );

    let (reply, attempts) =
        lazy_request(&ctx, &frontend, "first", 600, 3).expect("no reply after the victim died");
    assert_eq!(reply, "survivor:first");
    assert_eq!(attempts, 2, "the first attempt died with the victim");
    assert_eq!(victim.join().unwrap(), 0);
    for i in 0..10 {
        let body = format!("req-{i}");
        let (reply, attempts) = lazy_request(&ctx, &frontend, &body, 2_000, 1).unwrap();
        assert_eq!(reply, format!("survivor:{body}"));
        assert_eq!(attempts, 1);
    }
    // The victim went silent before the first attempt's 600 ms ran out; 3 silent intervals (300 ms) expire it.
    let summary = stop_queue(queue);
    stop.store(true, Ordering::Relaxed);
    assert_eq!(survivor.join().unwrap(), 11);
    assert_eq!(summary["requests"], 12, "{summary}");
    assert_eq!(summary["routed"], 12, "{summary}");
    assert_eq!(summary["replies"], 11, "{summary}");
    assert_eq!(summary["workers_seen"], 2, "{summary}");
    assert_eq!(summary["workers_expired"], 1, "{summary}");
    assert_eq!(summary["lost_with_worker"], 1, "{summary}");
    assert_eq!(summary["refused"], 0, "{summary}");
}

#[test]
fn a_full_backlog_refuses_and_counts_and_the_held_requests_are_served() {
    let (queue, frontend, backend) = start_queue(&["--max-queued", "2"]);
    let ctx = zmq::Context::new();
    // Three clients ask while no worker exists: two are held, the third is refused.
    let clients: Vec<zmq::Socket> = (0..3)
        .map(|i| {
            let s = ctx.socket(zmq::REQ).unwrap();
            s.set_linger(0).unwrap();
            s.connect(&frontend).unwrap();
            s.send(format!("held-{i}").as_str(), 0).unwrap();
            s
        })
        .collect();
    // Requests are only counted once the queue read them; the worker arriving later must find them waiting.
    std::thread::sleep(Duration::from_millis(300));
    let stop = Arc::new(AtomicBool::new(false));
    let heard = Arc::new(AtomicBool::new(false));
    let w = worker(&ctx, &backend, "w", false, Arc::clone(&stop), heard);
    // Which of the three reached the queue last (and was refused) is up to the network: each served client
    // must get its own reply, and exactly one must get none.
    let mut served = 0;
    let mut silent = 0;
    for (i, c) in clients.iter().enumerate() {
        if c.poll(zmq::POLLIN, 1_000).unwrap() > 0 {
            assert_eq!(c.recv_string(0).unwrap().unwrap(), format!("w:held-{i}"));
            served += 1;
        } else {
            silent += 1;
        }
    }
    let summary = stop_queue(queue);
    stop.store(true, Ordering::Relaxed);
    w.join().unwrap();
    assert_eq!((served, silent), (2, 1));
    assert_eq!(summary["refused"], 1, "{summary}");
    assert_eq!(summary["requests"], 3, "{summary}");
    assert_eq!(summary["routed"], 2, "{summary}");
}

#[test]
fn bad_flags_are_refused_before_anything_binds() {
    for args in [
        &["queue", "--liveness", "0"][..],
        &["queue", "--frontend", "127.0.0.1:5555"][..],
        &["queue", "--max-queued", "0"][..],
    ] {
        let out = Command::new(TICKBOX).args(args).output().unwrap();
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.starts_with("error: "), "{args:?}: {err}");
    }
}
