//! `tickbox freelance-server --echo` facing a client that sends large requests and never reads its replies: the
//! real server process's memory stays within its configured per-peer bound, the replies it cannot queue are
//! counted, and another client still gets answers.

use crate::common;

use std::time::Duration;

use common::{signal, spawn_with_lines, TempDir};
use tickbox_testkit::memory::{peak_resident_kib, resident_kib, Process::Pid};

const BODY: usize = 1_500_000;
const HOG_REQUESTS: usize = 100;
const GOOD_REQUESTS: usize = 10;

/// The server's resident memory now, KiB.
fn rss_kib(pid: u32) -> u64 {
    resident_kib(Pid(pid)).expect("the server's VmRSS")
}

/// One request-reply on the well-behaved ROUTER client, within 5 s.
fn ask(r: &zmq::Socket, ep: &str, seq: &[u8], body: &[u8]) -> Vec<Vec<u8>> {
    r.send_multipart([ep.as_bytes(), seq, body], 0).unwrap();
    assert!(
        r.poll(zmq::POLLIN, 5_000).unwrap() > 0,
        "no answer to request {seq:?} within 5 s while another client hogs the server"
    );
    r.recv_multipart(0).unwrap()
}

#[test]
fn unread_large_replies_stay_within_the_byte_bound_and_others_are_served() {
    let dir = TempDir::new("cli-freelance-bounds");
    let ep = format!("ipc://{}/fl.sock", dir.path().display());
    let (mut server, lines) = spawn_with_lines(&[
        "freelance-server",
        "--bind",
        &ep,
        "--echo",
        "--max-message-bytes",
        "2MiB",
        "--max-queued-bytes",
        "8MiB",
        "--json",
    ]);
    let first = lines.recv_timeout(Duration::from_secs(10)).unwrap();
    assert!(first.starts_with("freelance server"), "{first}");
    assert!(first.contains("at most 4 replies"), "{first}");
    let pid = server.0.id();

    let ctx = zmq::Context::new();
    let good = ctx.socket(zmq::ROUTER).unwrap();
    good.set_linger(0).unwrap();
    good.set_router_mandatory(true).unwrap();
    good.connect(&ep).unwrap();
    tickbox_testkit::wait_for(
        "the server to be reachable",
        Duration::from_secs(10),
        || good.send_multipart([ep.as_bytes(), b"PING"], 0).is_ok(),
    );
    assert!(good.poll(zmq::POLLIN, 5_000).unwrap() > 0);
    assert_eq!(good.recv_multipart(0).unwrap()[1], b"PONG");
    let baseline = rss_kib(pid);

    // The hog: a DEALER that never reads, with tiny receive queues so the server's side fills up; its own
    // send queue is short too, so each send waits for the server to take the previous requests.
    let hog = ctx.socket(zmq::DEALER).unwrap();
    hog.set_linger(0).unwrap();
    hog.set_rcvhwm(1).unwrap();
    hog.set_rcvbuf(64 * 1024).unwrap();
    hog.set_sndhwm(2).unwrap();
    hog.set_sndtimeo(10_000).unwrap();
    hog.connect(&ep).unwrap();
    let body = vec![0x5Au8; BODY];
    let mut peak_rss = baseline;
    for i in 0..HOG_REQUESTS {
        let seq = (i as u32).to_be_bytes();
        hog.send_multipart([&seq[..], &body[..]], 0)
            .unwrap_or_else(|e| panic!("hog request {i} not taken by the server within 10 s: {e}"));
        peak_rss = peak_rss.max(rss_kib(pid));
    }

    // Fair queuing: while these are answered, the few hog requests still in flight are read too.
    for i in 0..GOOD_REQUESTS {
        let seq = format!("good-{i}");
        let reply = ask(&good, &ep, seq.as_bytes(), b"hello");
        assert_eq!(
            reply,
            vec![ep.as_bytes().to_vec(), seq.into_bytes(), b"hello".to_vec()]
        );
        peak_rss = peak_rss.max(rss_kib(pid));
    }
    let peak_hwm = peak_resident_kib(Pid(pid)).expect("the server's VmHWM");
    // The kernel's per-process counters are updated lazily: take whichever reading is higher.
    let peak = peak_rss.max(peak_hwm);

    signal(pid, "INT");
    let status = server.wait_exit(Duration::from_secs(10), "freelance-server ignored SIGINT");
    assert!(status.success());
    let summary: serde_json::Value = lines
        .recv_timeout(Duration::from_secs(5))
        .map(|l| serde_json::from_str(&l).unwrap_or_else(|e| panic!("{l}: {e}")))
        .unwrap();
    eprintln!(
        "baseline VmRSS {baseline} KiB, peak VmRSS {peak_rss} KiB, VmHWM {peak_hwm} KiB; summary {summary}"
    );
    let n = |k: &str| {
        summary[k]
            .as_u64()
            .unwrap_or_else(|| panic!("{k} in {summary}"))
    };
    assert_eq!(
        n("requests"),
        (HOG_REQUESTS + GOOD_REQUESTS) as u64,
        "every request was read and answered or dropped"
    );
    // At most 4 replies queue for the hog, one more is being written and a few fit in its small buffers.
    assert!(
        n("dropped_full") >= (HOG_REQUESTS - 12) as u64,
        "unqueued replies are counted: {summary}"
    );
    assert_eq!(n("oversize"), 0);
    // Unbounded, the server would hold every unread reply: 100 × 1.5 MB = 150 MB. The bound is 8 MiB of
    // queued replies; allow for the request being echoed, the inbound queue and allocator slack.
    let allowed = 48 * 1024;
    assert!(
        peak.saturating_sub(baseline) < allowed,
        "server peak RSS grew by {} KiB (baseline {baseline} KiB), over {allowed} KiB",
        peak - baseline
    );
}
