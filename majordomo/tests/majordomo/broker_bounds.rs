//! The broker under a request flood for a service nobody serves: its memory stays within the configured queue
//! bound (measured as the resident set of a separate broker process), refusals and expiries are counted, and a
//! real service keeps answering meanwhile.
//!
//! The broker runs in a child process (this test binary re-executed with `MDP_BOUNDS_CHILD` set, running only
//! `child_broker`) so its `/proc/<pid>/status` holds nothing of the flooding client.

use std::io::{BufRead, BufReader, Write};
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tickbox_majordomo::{
    run_broker, BrokerConfig, Client, ClientConfig, MdpWorker, MdpWorkerConfig,
};

const CHILD_ENV: &str = "MDP_BOUNDS_CHILD";
const BOUND: u64 = 32 << 20;
const MSG: usize = 64 << 10;
const FLOOD_BYTES: usize = 256 << 20;

/// Not a test on its own: the broker process the flood test starts. Returns at once unless re-executed.
#[test]
fn child_broker() {
    let Some(ep) = std::env::var_os(CHILD_ENV) else {
        return;
    };
    let ep = ep.into_string().unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let s = Arc::clone(&stop);
    // The parent closing our stdin (or dying) is the stop signal.
    std::thread::spawn(move || {
        let mut sink = String::new();
        let _ = std::io::stdin().read_line(&mut sink);
        s.store(true, Ordering::Relaxed);
    });
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        if let Ok(ep) = rx.recv() {
            println!("BOUND {ep}");
        }
    });
    let cfg = BrokerConfig {
        heartbeat_interval: Duration::from_millis(100).into(),
        request_expiry: Duration::from_millis(1500).into(),
        max_queued_bytes: tickbox_units::ByteSize(BOUND),
        // Besides its own bounded queue the broker holds what libzmq's receive pipe holds: up to `receive_hwm`
        // messages of the flooding peer. At the default 1000 that is 62.5 MiB of 64 KiB requests, more than the
        // test's slack, and how much of it fills depends on how far a loaded machine lets the broker fall behind
        // (a full run once peaked 6 MiB over). 100 keeps libzmq's share (6.25 MiB) inside the slack whatever the
        // load, so the peak measures the broker's queue.
        receive_hwm: 100,
        ..Default::default()
    };
    let stats = run_broker(
        &tickbox_auth::Gate::open(&zmq::Context::new()),
        &ep,
        cfg,
        &stop,
        Some(tx),
    )
    .unwrap();
    println!(
        "STATS refused={} expired={} peak={} queued={}",
        stats.requests_refused, stats.requests_expired, stats.queued_bytes_peak, stats.queued_bytes
    );
}

use tickbox_testkit::memory;
use tickbox_testkit::ChildGuard as Kill;

fn rss_kb(pid: u32) -> u64 {
    memory::resident_kib(memory::Process::Pid(pid)).expect("the broker's VmRSS")
}

#[test]
fn flood_for_absent_service_stays_within_queue_bound_and_real_service_answers() {
    if std::env::var_os(CHILD_ENV).is_some() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let ep = format!("ipc://{}/broker", dir.path().display());
    let mut child = Kill(
        tickbox_testkit::self_test_command(module_path!(), "child_broker")
            .arg("--nocapture")
            .env(CHILD_ENV, &ep)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let pid = child.0.id();
    let (line_tx, lines) = std::sync::mpsc::channel::<String>();
    let out = child.0.stdout.take().unwrap();
    std::thread::spawn(move || {
        for l in BufReader::new(out).lines().map_while(Result::ok) {
            if line_tx.send(l).is_err() {
                break;
            }
        }
    });
    let wait_line = |prefix: &str| -> String {
        let end = Instant::now() + Duration::from_secs(15);
        loop {
            let left = end.saturating_duration_since(Instant::now());
            let l = lines
                .recv_timeout(left)
                .unwrap_or_else(|_| panic!("child never printed {prefix:?}"));
            // The harness may print "test child_broker ... " on the same line first.
            if let Some(at) = l.find(prefix) {
                return l[at + prefix.len()..].to_string();
            }
        }
    };
    let bound_ep = wait_line("BOUND ");
    assert_eq!(bound_ep, ep);
    let baseline_kb = rss_kb(pid);

    let ctx = zmq::Context::new();
    let flood = ctx.socket(zmq::DEALER).unwrap();
    flood.set_linger(0).unwrap();
    flood.set_sndtimeo(10_000).unwrap();
    flood.connect(&ep).unwrap();
    let body = vec![0x5au8; MSG];
    let n = FLOOD_BYTES / MSG;
    let t0 = Instant::now();
    for _ in 0..n {
        flood
            .send_multipart([b"".as_slice(), b"MDPC01", b"nobody", &body], 0)
            .expect("broker stopped reading the flood");
    }
    // A real service with a worker answers a client in the middle of the flood ...
    let wstop = Arc::new(AtomicBool::new(false));
    let (e, s) = (ep.clone(), Arc::clone(&wstop));
    let worker = std::thread::spawn(move || {
        let ctx = zmq::Context::new();
        let cfg = MdpWorkerConfig {
            heartbeat_interval: Duration::from_millis(100).into(),
            reconnect: Duration::from_millis(100).into(),
            ..Default::default()
        };
        let mut w = MdpWorker::connect(&ctx, &e, "echo", cfg).unwrap();
        w.serve(&s, |b| b.clone()).unwrap();
    });
    let mut client = Client::new(
        &ctx,
        &ep,
        ClientConfig {
            timeout: Duration::from_millis(2000).into(),
            attempts: 5,
        },
    );
    let reply = client.request("echo", &[b"still here".to_vec()]).unwrap();
    assert_eq!(reply, vec![b"still here".to_vec()]);
    // ... and the flooding connection itself is served once the broker has read everything before it: one
    // pipe is FIFO, so this reply means the whole flood went through the broker.
    flood
        .send_multipart([b"".as_slice(), b"MDPC01", b"echo", b"marker"], 0)
        .unwrap();
    assert!(
        flood.poll(zmq::POLLIN, 20_000).unwrap() > 0,
        "the flooding client's own echo request was never answered"
    );
    let r = flood.recv_multipart(0).unwrap();
    assert_eq!(r.last().unwrap(), b"marker");
    let flood_secs = t0.elapsed().as_secs_f64();
    let during_kb = rss_kb(pid);
    // Past request_expiry every queued request is gone; give the broker a few ticks beyond it.
    std::thread::sleep(Duration::from_millis(2500));
    let after_kb = rss_kb(pid);
    // A second flood after the expiry: what expiry released is reused, so the peak does not move up.
    for _ in 0..n {
        flood
            .send_multipart([b"".as_slice(), b"MDPC01", b"nobody", &body], 0)
            .expect("broker stopped reading the second flood");
    }
    flood
        .send_multipart([b"".as_slice(), b"MDPC01", b"echo", b"marker2"], 0)
        .unwrap();
    assert!(flood.poll(zmq::POLLIN, 20_000).unwrap() > 0);
    assert_eq!(flood.recv_multipart(0).unwrap().last().unwrap(), b"marker2");
    std::thread::sleep(Duration::from_millis(2500));
    // VmHWM is the peak over the broker's whole life, both floods and expiries included.
    let peak_kb = memory::peak_resident_kib(memory::Process::Pid(pid)).expect("the broker's VmHWM");
    let final_kb = rss_kb(pid);
    let slack_kb = 32 << 10;
    println!(
        "flood {} MiB in {flood_secs:.2} s; bound {} MiB; broker RSS baseline {} KiB, after flood {} KiB, after expiry {} KiB, after a second flood and expiry {} KiB, peak (VmHWM) {} KiB",
        FLOOD_BYTES >> 20,
        BOUND >> 20,
        baseline_kb,
        during_kb,
        after_kb,
        final_kb,
        peak_kb
    );
    assert!(
        peak_kb < baseline_kb + (BOUND >> 10) + slack_kb,
        "peak RSS {peak_kb} KiB exceeds baseline {baseline_kb} KiB + bound {} KiB + slack {slack_kb} KiB",
        BOUND >> 10
    );

    wstop.store(true, Ordering::Relaxed);
    worker.join().unwrap();
    drop(flood);
    // Closing stdin stops the broker, which prints its counters.
    let mut stdin = child.0.stdin.take().unwrap();
    let _ = stdin.write_all(b"\n");
    drop(stdin);
    let stats = wait_line("STATS ");
    println!("broker stats: {stats}");
    let field = |k: &str| -> u64 {
        stats
            .split_whitespace()
            .find_map(|kv| kv.strip_prefix(k))
            .and_then(|v| v.parse().ok())
            .unwrap()
    };
    let (refused, expired) = (field("refused="), field("expired="));
    assert_eq!(
        refused + expired,
        2 * n as u64,
        "every flood request is either refused or expired"
    );
    assert!(refused > 0, "the bound was reached");
    assert!(field("peak=") <= BOUND);
    assert_eq!(field("queued="), 0);
    child.wait_exit(Duration::from_secs(10), "broker did not stop");
}
