//! Its own test binary: the flood test reads this process's resident set size (VmRSS), which other tests' threads
//! would move.
//!
//! The snapshot channel over real sockets: a late joiner's cached values go to it alone, prefixes and Guide
//! multipart values come back exactly, and a client that floods requests without reading costs the proxy bounded
//! memory and live subscribers nothing.

#[path = "lvc/lvc_util/mod.rs"]
mod lvc_util;

use std::time::{Duration, Instant};

use lvc_util::*;
use tickbox_lvc::snapshot::{
    encode_request, encode_request_in, fetch, End, EndStatus, FetchStatus,
};
use tickbox_lvc::{LateJoiners, LvcConfig};

const SECOND: Duration = Duration::from_secs(1);

fn snapshot_config(upstream: &str, late_joiners: LateJoiners) -> LvcConfig {
    LvcConfig {
        snapshot: Some("tcp://127.0.0.1:*".into()),
        late_joiners,
        ..lvc_config(upstream)
    }
}

/// Every value of a snapshot of `prefixes`, each as its frames.
fn snapshot(
    ctx: &zmq::Context,
    endpoint: &str,
    prefixes: &[&str],
) -> (tickbox_lvc::snapshot::SnapshotOutcome, Vec<Vec<Vec<u8>>>) {
    let mut values = Vec::new();
    let outcome = fetch(
        ctx,
        &Default::default(),
        endpoint,
        prefixes,
        10 * SECOND,
        |parts| values.push(parts.iter().map(|p| p.to_vec()).collect::<Vec<_>>()),
    )
    .unwrap();
    (outcome, values)
}

fn vm_rss_kib() -> u64 {
    tickbox_testkit::memory::resident_kib(tickbox_testkit::memory::Process::This)
        .expect("VmRSS in /proc/self/status")
}

#[test]
fn snapshot_mode_sends_bystanders_nothing_cached_and_the_late_joiner_every_last_value_alone() {
    let ctx = zmq::Context::new();
    let publisher = TestPub::bind(&ctx);
    let lvc = start(
        &ctx,
        snapshot_config(&publisher.endpoint, LateJoiners::Snapshot),
        &publisher,
    );
    let down = lvc.endpoints().downstream.clone();
    let snap = lvc.endpoints().snapshot.clone().expect("snapshot bound");

    // The bystander is in place before anything is published.
    let bystander = subscriber(&ctx, &down, &[b""]);
    assert!(wait_until(5 * SECOND, || lvc.stats().subscribes >= 1));
    // A client on the snapshot socket that asks nothing must receive nothing.
    let idle = ctx.socket(zmq::DEALER).unwrap();
    idle.set_linger(0).unwrap();
    idle.connect(&snap).unwrap();

    const TOPICS: usize = 50;
    for round in 0..3u64 {
        for t in 0..TOPICS {
            let seq = round * TOPICS as u64 + t as u64 + 1;
            publisher.send(&quote_frame(
                &format!("Q.X.S{t:03}"),
                1,
                seq,
                seq,
                round as i64 * 1000 + t as i64,
            ));
        }
    }
    assert!(wait_until(5 * SECOND, || lvc.stats().messages_in == 3 * TOPICS as u64));
    let live = recv_until(&bystander, 5 * SECOND, |got| got.len() >= 3 * TOPICS);
    assert_eq!(live.len(), 3 * TOPICS);

    // The late joiner subscribes first (so nothing falls between snapshot and live), then asks.
    let joiner = subscriber(&ctx, &down, &[b""]);
    assert!(wait_until(5 * SECOND, || lvc.stats().subscribes >= 2));
    let (outcome, values) = snapshot(&ctx, &snap, &[""]);
    assert_eq!(outcome.status, FetchStatus::Complete, "{outcome:?}");
    assert_eq!(
        (outcome.received, outcome.sent),
        (TOPICS as u64, Some(TOPICS as u64))
    );
    let mut topics: Vec<String> = values
        .iter()
        .map(|v| {
            assert_eq!(v.len(), 1, "a tickbox value is one frame");
            assert!(is_cached(&v[0]), "snapshot values are marked CACHED");
            // The last value of each topic (round 2).
            assert!(bid(&v[0]) >= 2000);
            topic(&v[0])
        })
        .collect();
    topics.dedup();
    assert_eq!(topics.len(), TOPICS);

    // Zero cached copies reached the bystander or the joiner's SUB, and nothing reached the idle client.
    let extra = recv_quiet(&bystander, Duration::from_millis(300), 3 * SECOND);
    assert!(
        extra.iter().all(|f| !is_cached(f)),
        "bystander got cached copies"
    );
    assert!(extra.is_empty());
    assert!(recv_quiet(&joiner, Duration::from_millis(200), 3 * SECOND).is_empty());
    assert_eq!(idle.poll(zmq::POLLIN, 200).unwrap(), 0);
    let stats = lvc.stats();
    assert_eq!(stats.cached_sent, 0);
    assert_eq!(
        (stats.snapshot_requests, stats.snapshot_values),
        (1, TOPICS as u64)
    );
    assert_eq!(stats.snapshot_completed, 1);

    // Live traffic still reaches both.
    publisher.send(&quote_frame("Q.X.S000", 1, 1000, 1000, 7));
    for sub in [&bystander, &joiner] {
        let got = recv_until(sub, 5 * SECOND, |g| !g.is_empty());
        assert_eq!(got.len(), 1);
        assert!(!is_cached(&got[0]));
    }
}

#[test]
fn prefixes_select_exactly_their_topics_and_guide_values_come_back_multipart() {
    let ctx = zmq::Context::new();
    let publisher = TestPub::bind(&ctx);
    let lvc = start(
        &ctx,
        snapshot_config(&publisher.endpoint, LateJoiners::Auto),
        &publisher,
    );
    let snap = lvc.endpoints().snapshot.clone().unwrap();
    let names = ["Q.A.1", "Q.A.2", "Q.AB.1", "Q.B.1", "T.A.1", "T.B.1"];
    for (i, t) in names.iter().enumerate() {
        publisher.send(&quote_frame(t, 1, i as u64 + 1, i as u64 + 1, i as i64));
    }
    publisher
        .socket
        .send_multipart([&b"G.EURUSD"[..], b"1.0841", b"1.0843"], 0)
        .unwrap();
    publisher
        .socket
        .send_multipart([&b"G.USDJPY"[..], b"151.20"], 0)
        .unwrap();
    assert!(wait_until(5 * SECOND, || lvc.stats().topics_cached == 8));

    // Overlapping and duplicate prefixes are served once; a NUL after a topic selects exactly that topic.
    let (outcome, values) = snapshot(&ctx, &snap, &["Q.A.", "T.A", "Q.A.1", "Q.AB.1\0", "Q.A."]);
    assert_eq!(outcome.status, FetchStatus::Complete);
    let mut got: Vec<String> = values.iter().map(|v| topic(&v[0])).collect();
    got.sort();
    assert_eq!(got, vec!["Q.A.1", "Q.A.2", "Q.AB.1", "T.A.1"]);

    let (outcome, values) = snapshot(&ctx, &snap, &["G."]);
    assert_eq!(outcome.status, FetchStatus::Complete);
    assert_eq!(
        values,
        vec![
            vec![b"G.EURUSD".to_vec(), b"1.0841".to_vec(), b"1.0843".to_vec()],
            vec![b"G.USDJPY".to_vec(), b"151.20".to_vec()],
        ]
    );
    let (outcome, values) = snapshot(&ctx, &snap, &["Z."]);
    assert_eq!((outcome.status, values.len()), (FetchStatus::Complete, 0));
    // `auto` with a snapshot endpoint is snapshot mode: a late SUB gets no burst on the XPUB.
    let sub = subscriber(&ctx, &lvc.endpoints().downstream, &[b"Q."]);
    assert!(wait_until(5 * SECOND, || lvc.stats().subscribes >= 1));
    assert!(recv_quiet(&sub, Duration::from_millis(300), 3 * SECOND).is_empty());
    assert_eq!(lvc.stats().cached_sent, 0);
}

#[test]
fn a_flooding_client_that_never_reads_is_bounded_abandoned_and_costs_live_traffic_nothing() {
    let ctx = zmq::Context::new();
    let publisher = TestPub::bind(&ctx);
    let config = LvcConfig {
        snapshot_hwm: 200,
        snapshot_stall_timeout: tickbox_units::HumanDuration(Duration::from_millis(300)),
        snapshot_max_prefixes: 4,
        ..snapshot_config(&publisher.endpoint, LateJoiners::Snapshot)
    };
    let lvc = start(&ctx, config, &publisher);
    let down = lvc.endpoints().downstream.clone();
    let snap = lvc.endpoints().snapshot.clone().unwrap();
    // A cache whose full snapshot (about 1 MB) outgrows what the kernel and libzmq queue for a client.
    const TOPICS: u64 = 8_000;
    for t in 0..TOPICS {
        publisher.send(&quote_frame(
            &format!("Q.FLOOD.{t:05}.{}", "x".repeat(40)),
            1,
            t + 1,
            t + 1,
            1,
        ));
    }
    assert!(wait_until(10 * SECOND, || lvc.stats().topics_cached == TOPICS));
    let normal = subscriber(&ctx, &down, &[b"T."]);
    assert!(wait_until(5 * SECOND, || lvc.stats().subscribes >= 1));
    let rss_before = vm_rss_kib();

    // The flooder: a tiny receive buffer and queue, and it never reads.
    let flooder = ctx.socket(zmq::DEALER).unwrap();
    flooder.set_linger(0).unwrap();
    flooder.set_rcvhwm(1).unwrap();
    flooder.set_rcvbuf(4096).unwrap();
    flooder.connect(&snap).unwrap();
    let flood_until = Instant::now() + 2 * SECOND;
    let mut requests = 0u64;
    let mut seq = 0u64;
    let mut live_sent = 0u64;
    while Instant::now() < flood_until {
        for i in 0..50 {
            if flooder
                .send_multipart(encode_request(requests + i + 1, &[""]), zmq::DONTWAIT)
                .is_ok()
            {
                requests += 1;
            }
        }
        // Live traffic keeps flowing meanwhile.
        for _ in 0..20 {
            seq += 1;
            publisher.send(&quote_frame("T.LIVE", 2, seq, seq, seq as i64));
            live_sent += 1;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    assert!(requests > 100, "the flood sent {requests} requests");
    assert!(
        wait_until(5 * SECOND, || lvc.stats().snapshot_abandoned >= 1),
        "the stalled reply was never abandoned: {}",
        lvc.stats()
    );
    // Every live message reached the normal subscriber, during the flood and after it.
    let got = recv_until(&normal, 10 * SECOND, |g| g.len() as u64 >= live_sent);
    assert_eq!(got.len() as u64, live_sent);
    let stats = lvc.stats();
    assert!(stats.snapshot_refused >= 1, "{stats}");
    assert!(stats.snapshot_active <= 1, "{stats}");
    let rss_after = vm_rss_kib();
    eprintln!("flood: {requests} requests, VmRSS {rss_before} -> {rss_after} KiB, {stats}");
    // The proxy runs in this process: what it queued for the flooder is bounded by the HWM and the socket
    // buffers, not by the number of requests.
    assert!(
        rss_after < rss_before + 64 * 1024,
        "VmRSS grew from {rss_before} KiB to {rss_after} KiB"
    );

    // Malformed requests are answered and counted, never fatal.
    let client = ctx.socket(zmq::DEALER).unwrap();
    client.set_linger(0).unwrap();
    client.connect(&snap).unwrap();
    let bad: Vec<Vec<Vec<u8>>> = vec![
        vec![b"hello".to_vec()],
        encode_request::<&str>(11, &[]),
        encode_request(12, &["a", "b", "c", "d", "e"]),
        {
            let mut r = encode_request(13, &["Q."]);
            r[0][6] = 99;
            r
        },
    ];
    for request in &bad {
        client.send_multipart(request, 0).unwrap();
    }
    let mut ends = Vec::new();
    let deadline = Instant::now() + 5 * SECOND;
    while ends.len() < bad.len() && Instant::now() < deadline {
        if client.poll(zmq::POLLIN, 50).unwrap() > 0 {
            let parts = client.recv_multipart(0).unwrap();
            ends.push(End::decode(&parts[0]).expect("an end marker"));
        }
    }
    assert_eq!(ends.len(), bad.len());
    assert!(ends
        .iter()
        .all(|e| e.status == EndStatus::Malformed && e.sent == 0));
    assert_eq!(ends[1].request_id, 11);
    assert!(wait_until(2 * SECOND, || lvc.stats().snapshot_malformed == 4));
    // And the channel still serves a well-behaved client.
    let (outcome, _) = snapshot(&ctx, &snap, &["Q.FLOOD.0001"]);
    assert_eq!(
        (outcome.status, outcome.received),
        (FetchStatus::Complete, 10)
    );
}

#[test]
fn broadcast_mode_keeps_the_cached_burst_on_the_xpub_and_snapshot_needs_an_endpoint() {
    let ctx = zmq::Context::new();
    let publisher = TestPub::bind(&ctx);
    let lvc = start(
        &ctx,
        snapshot_config(&publisher.endpoint, LateJoiners::Broadcast),
        &publisher,
    );
    publisher.send(&quote_frame("Q.X.A", 1, 1, 1, 5));
    assert!(wait_until(5 * SECOND, || lvc.stats().topics_cached == 1));
    let joiner = subscriber(&ctx, &lvc.endpoints().downstream, &[b"Q."]);
    let got = recv_until(&joiner, 5 * SECOND, |g| !g.is_empty());
    assert_eq!(got.len(), 1);
    assert!(is_cached(&got[0]));
    // The snapshot socket serves too in broadcast mode.
    let (outcome, values) = snapshot(&ctx, lvc.endpoints().snapshot.as_deref().unwrap(), &["Q."]);
    assert_eq!((outcome.status, values.len()), (FetchStatus::Complete, 1));
    drop(lvc);

    let err = tickbox_lvc::spawn(
        &tickbox_auth::Gate::open(&ctx),
        LvcConfig {
            snapshot: None,
            late_joiners: LateJoiners::Snapshot,
            ..lvc_config(&publisher.endpoint)
        },
    )
    .err()
    .expect("snapshot mode without an endpoint is refused");
    assert!(err.to_string().contains("snapshot"), "{err}");
}

#[test]
fn a_snapshot_that_gets_no_answer_times_out_as_an_outcome() {
    let ctx = zmq::Context::new();
    // A ROUTER that reads requests and never answers.
    let silent = ctx.socket(zmq::ROUTER).unwrap();
    silent.set_linger(0).unwrap();
    let ep = tickbox_zmqx::bind_resolved(&silent, "tcp://127.0.0.1:*").unwrap();
    let started = Instant::now();
    let outcome = fetch(
        &ctx,
        &Default::default(),
        &ep,
        &["Q."],
        Duration::from_millis(300),
        |_| {},
    )
    .unwrap();
    assert_eq!(outcome.status, FetchStatus::TimedOut);
    assert!(!outcome.is_complete());
    assert!(started.elapsed() < 3 * SECOND);
    assert!(
        silent.poll(zmq::POLLIN, 1000).unwrap() > 0,
        "the request was sent"
    );
}

#[test]
fn a_cache_that_missed_a_publishers_first_values_says_so_to_version_2_and_counts_version_1() {
    let ctx = zmq::Context::new();
    let publisher = TestPub::bind(&ctx);
    let lvc = start(
        &ctx,
        snapshot_config(&publisher.endpoint, LateJoiners::Snapshot),
        &publisher,
    );
    let snap = lvc.endpoints().snapshot.clone().expect("snapshot bound");
    // Publisher 1 sent sequences 1..=100 before the proxy heard it (as a publisher started first does): the proxy
    // first hears 101, then loses 103..=104.
    for seq in [101u64, 102, 105] {
        publisher.send(&quote_frame(&format!("Q.X.S{seq}"), 1, seq, seq, 1));
    }
    assert!(wait_until(5 * SECOND, || lvc.stats().messages_in == 3));
    let stats = lvc.stats();
    assert_eq!(stats.sequences.missed_before_join, 100, "{stats}");
    assert_eq!(
        (stats.sequences.missing, stats.sequences.gap_events),
        (2, 1)
    );
    let accounts = lvc.publishers();
    assert_eq!(accounts.len(), 1);
    assert_eq!(
        (
            accounts[0].publisher,
            accounts[0].received,
            accounts[0].missing
        ),
        (1, 3, 2)
    );
    assert_eq!(lvc.sequence_counters().load().missed_before_join, 100);
    // The same counts for a metrics scrape (`--metrics`), under the names the subscriber uses.
    let scrape = tickbox_metrics::render("lvc", vec![std::sync::Arc::new(lvc.metrics())]);
    assert!(
        scrape.contains("tickbox_publisher_missing_total{role=\"lvc\",publisher=\"1\"} 2"),
        "{scrape}"
    );
    assert!(
        scrape.contains("tickbox_missed_before_join_total{role=\"lvc\"} 100"),
        "{scrape}"
    );

    // A version 2 client: every cached value, and the count of what the cache lacks.
    let (outcome, values) = snapshot(&ctx, &snap, &[""]);
    assert_eq!(values.len(), 3);
    assert_eq!(outcome.status, FetchStatus::CacheIncomplete, "{outcome:?}");
    let loss = outcome.loss.expect("a version 2 end marker");
    assert_eq!((loss.missed, loss.dropped), (102, 0));

    // A version 1 client (an older subscriber) gets the 25-byte marker it reads, status complete; the proxy
    // counts that it could not say.
    let old = ctx.socket(zmq::DEALER).unwrap();
    old.set_linger(0).unwrap();
    old.connect(&snap).unwrap();
    old.send_multipart(encode_request_in(1, 77, &[""]), 0)
        .unwrap();
    let mut end = None;
    let deadline = Instant::now() + 5 * SECOND;
    while end.is_none() && Instant::now() < deadline {
        if old.poll(zmq::POLLIN, 50).unwrap() > 0 {
            let parts = old.recv_multipart(0).unwrap();
            if parts.len() == 1 && parts[0].starts_with(b"TBSNAP") {
                assert_eq!(parts[0].len(), tickbox_lvc::snapshot::END_LEN);
                end = End::decode(&parts[0]);
            }
        }
    }
    let end = end.expect("an end marker");
    assert_eq!(
        (end.request_id, end.sent, end.status, end.loss),
        (77, 3, EndStatus::Complete, None)
    );
    assert!(wait_until(2 * SECOND, || lvc.stats().snapshot_lacking == 2));
}

#[test]
fn a_version_2_client_gets_its_values_from_a_version_1_proxy() {
    // A proxy of the first version: it reads only version 1 heads and answers anything else `malformed` with
    // request id 0, as that version does.
    let ctx = zmq::Context::new();
    let router = ctx.socket(zmq::ROUTER).unwrap();
    router.set_linger(0).unwrap();
    router.bind("tcp://127.0.0.1:*").unwrap();
    let endpoint = router.get_last_endpoint().unwrap().unwrap();
    let old_proxy = std::thread::spawn(move || {
        let mut heads = Vec::new();
        let deadline = Instant::now() + 10 * SECOND;
        while heads.len() < 2 && Instant::now() < deadline {
            if router.poll(zmq::POLLIN, 50).unwrap() == 0 {
                continue;
            }
            let parts = router.recv_multipart(0).unwrap();
            let (peer, head) = (&parts[0], &parts[1]);
            heads.push(head[6]);
            let id = u64::from_le_bytes(head[8..16].try_into().unwrap());
            let mut end = tickbox_lvc::snapshot::MAGIC.to_vec();
            end.extend_from_slice(&[1, b'E']);
            if head[6] == 1 {
                let value = quote_frame("Q.X.OLD", 1, 1, 1, 5);
                router.send_multipart([peer.as_slice(), &value], 0).unwrap();
                end.extend_from_slice(&id.to_le_bytes());
                end.extend_from_slice(&1u64.to_le_bytes());
                end.push(0);
            } else {
                end.extend_from_slice(&0u64.to_le_bytes());
                end.extend_from_slice(&0u64.to_le_bytes());
                end.push(3);
            }
            router.send_multipart([peer.as_slice(), &end], 0).unwrap();
        }
        heads
    });
    let (outcome, values) = snapshot(&ctx, &endpoint, &[""]);
    assert_eq!(outcome.status, FetchStatus::Complete, "{outcome:?}");
    assert_eq!(
        (values.len(), outcome.sent, outcome.loss),
        (1, Some(1), None)
    );
    assert_eq!(
        old_proxy.join().unwrap(),
        vec![2, 1],
        "asked in version 2, then 1"
    );
}
