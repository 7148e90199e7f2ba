//! Measurement, not a pass/fail check (ignored by default): how fast the proxy serves a large snapshot, and what a
//! snapshot being served costs live traffic. Live messages are timestamped at send and timed at a subscriber,
//! alternating rounds with and without a 100,000-value snapshot in flight.
//!
//! `cargo test --release -p tickbox-lvc --test lvc snapshot_measure:: -- --ignored --nocapture`

use crate::lvc_util;

use std::time::{Duration, Instant};

use lvc_util::*;
use tickbox_lvc::snapshot::{fetch, FetchStatus};
use tickbox_lvc::{LateJoiners, LvcConfig};

const TOPICS: u64 = 100_000;

/// Sends `n` live frames one every `gap` and returns their one-way latencies (ns), sorted.
fn live_round(
    publisher: &TestPub,
    sub: &zmq::Socket,
    n: u64,
    gap: Duration,
    base_seq: u64,
) -> Vec<u64> {
    let mut lat = Vec::with_capacity(n as usize);
    let t0 = Instant::now();
    let mut next = t0;
    let mut sent = 0;
    let deadline = t0 + Duration::from_secs(20);
    while (lat.len() as u64) < n && Instant::now() < deadline {
        if sent < n && Instant::now() >= next {
            let now = tickbox_wire::now_ns();
            publisher.send(&quote_frame("T.LIVE", 2, base_seq + sent, now, 0));
            sent += 1;
            next += gap;
        }
        while let Ok(frame) = sub.recv_bytes(zmq::DONTWAIT) {
            let origin = header(&frame).origin_time_ns;
            lat.push(tickbox_wire::now_ns().saturating_sub(origin));
        }
    }
    lat.sort_unstable();
    lat
}

fn pct(sorted: &[u64], q: f64) -> u64 {
    sorted[((sorted.len() as f64 - 1.0) * q) as usize]
}

struct Setup {
    publisher: TestPub,
    lvc: tickbox_lvc::LvcHandle,
    sub: zmq::Socket,
    snap: String,
}

fn setup(ctx: &zmq::Context, slice: usize) -> Setup {
    let publisher = TestPub::bind(ctx);
    let config = LvcConfig {
        snapshot: Some("tcp://127.0.0.1:*".into()),
        late_joiners: LateJoiners::Snapshot,
        snapshot_slice: slice,
        ..lvc_config(&publisher.endpoint)
    };
    let lvc = start(ctx, config, &publisher);
    for t in 0..TOPICS {
        publisher.send(&quote_frame(&format!("Q.M.{t:06}"), 1, t + 1, t + 1, 1));
    }
    assert!(wait_until(Duration::from_secs(30), || lvc
        .stats()
        .topics_cached
        == TOPICS));
    let snap = lvc.endpoints().snapshot.clone().unwrap();
    let sub = subscriber(ctx, &lvc.endpoints().downstream, &[b"T."]);
    assert!(wait_until(Duration::from_secs(5), || lvc
        .stats()
        .subscribes
        >= 1));
    // Warm the live path.
    live_round(&publisher, &sub, 200, Duration::from_micros(100), 1);
    Setup {
        publisher,
        lvc,
        sub,
        snap,
    }
}

#[test]
#[ignore = "measurement; run with --ignored --nocapture, preferably --release"]
fn snapshot_throughput_and_cost_to_live_traffic() {
    let ctx = zmq::Context::new();
    // The default slice, and one so large that a whole snapshot goes out in one wake-up.
    let setups = [
        (256, setup(&ctx, 256)),
        (1024, setup(&ctx, 1024)),
        (1 << 30, setup(&ctx, 1 << 30)),
    ];
    let mut seq = 1_000;
    for round in 0..4 {
        for (slice, s) in &setups {
            let quiet = live_round(&s.publisher, &s.sub, 2_000, Duration::from_micros(100), seq);
            seq += 10_000;
            let (ctx2, snap2) = (ctx.clone(), s.snap.clone());
            let fetcher = std::thread::spawn(move || {
                let started = Instant::now();
                let mut n = 0u64;
                let outcome = fetch(
                    &ctx2,
                    &Default::default(),
                    &snap2,
                    &[""],
                    Duration::from_secs(30),
                    |_| n += 1,
                )
                .unwrap();
                (outcome, n, started.elapsed())
            });
            let busy = live_round(&s.publisher, &s.sub, 2_000, Duration::from_micros(100), seq);
            seq += 10_000;
            let (outcome, n, took) = fetcher.join().unwrap();
            assert_eq!(outcome.status, FetchStatus::Complete);
            assert_eq!(s.lvc.stats().downstream_dropped, 0);
            eprintln!(
                "round {round} slice {slice}: snapshot {n} values in {:.1} ms ({:.0} values/s); live latency \
                 p50/p99/max µs: quiet {:.0}/{:.0}/{:.0}, during snapshot {:.0}/{:.0}/{:.0}",
                took.as_secs_f64() * 1e3,
                n as f64 / took.as_secs_f64(),
                pct(&quiet, 0.5) as f64 / 1e3,
                pct(&quiet, 0.99) as f64 / 1e3,
                pct(&quiet, 1.0) as f64 / 1e3,
                pct(&busy, 0.5) as f64 / 1e3,
                pct(&busy, 0.99) as f64 / 1e3,
                pct(&busy, 1.0) as f64 / 1e3,
            );
        }
    }
}
