//! End-to-end over real sockets: what a subscriber of a shard actually receives.

use std::time::{Duration, Instant};

use tickbox_feed::{Feed, FeedConfig, FeedError, PacingMode, Pattern, PublisherShardConfig, Rate};
use tickbox_wire::{shard_for, shard_key_of_topic, Kind, MessageRef, Payload};

fn sub(ctx: &zmq::Context, endpoint: &str, prefix: &[u8]) -> zmq::Socket {
    let sub = ctx.socket(zmq::SUB).unwrap();
    sub.set_linger(0).unwrap();
    sub.set_rcvtimeo(100).unwrap();
    sub.set_rcvhwm(100_000).unwrap();
    sub.connect(endpoint).unwrap();
    sub.set_subscribe(prefix).unwrap();
    sub
}

/// Receives until `done` says so or the deadline passes; returns the frames.
fn collect(
    sub: &zmq::Socket,
    within: Duration,
    mut done: impl FnMut(&[Vec<u8>]) -> bool,
) -> Vec<Vec<u8>> {
    let deadline = Instant::now() + within;
    let mut frames = Vec::new();
    while Instant::now() < deadline && !done(&frames) {
        if let Ok(frame) = sub.recv_bytes(0) {
            frames.push(frame);
        }
    }
    frames
}

#[test]
fn a_shard_subscriber_gets_gap_free_sequences_of_only_its_symbols() {
    let ctx = zmq::Context::new();
    let limit = 3_000;
    let feed = Feed::start(
        &tickbox_auth::Gate::open(&ctx),
        FeedConfig {
            shards: vec![PublisherShardConfig::default(); 3],
            symbols: 300,
            rate: Rate::PerSecond(30_000),
            back_pressure: tickbox_zmqx::BackPressure::Block,
            // The test stops its readers after the feed ends: no drain wait.
            drain_timeout: Duration::ZERO.into(),
            wait_for_subscribers: 1,
            max_messages_per_shard: Some(limit),
            // Only shard 1 gets a subscriber; the others start after this wait.
            subscriber_wait: Duration::from_millis(500).into(),
            publisher_id_base: 70,
            ..FeedConfig::default()
        },
    )
    .unwrap();
    let shard = &feed.shards()[1];
    assert_eq!(shard.publisher_id, 71);
    assert!(
        shard.endpoint.starts_with("tcp://127.0.0.1:"),
        "{}",
        shard.endpoint
    );
    let sub = sub(&ctx, &shard.endpoint, b"");
    let frames = collect(&sub, Duration::from_secs(15), |f| {
        f.iter()
            .filter(|m| MessageRef::decode(m).unwrap().kind() != Kind::Heartbeat)
            .count()
            >= limit as usize
    });
    let mut expected_seq = 1;
    for frame in &frames {
        let msg = MessageRef::decode(frame).expect("valid frame");
        assert_eq!(msg.header().publisher_id, 71);
        if msg.kind() == Kind::Heartbeat {
            assert_eq!(msg.topic(), "H.71");
            assert_eq!(
                msg.header().sequence,
                expected_seq - 1,
                "heartbeat repeats the last sequence"
            );
            continue;
        }
        assert_eq!(msg.header().sequence, expected_seq, "gap or reorder");
        expected_seq += 1;
        assert_eq!(
            shard_for(shard_key_of_topic(msg.topic().as_bytes()), 3),
            1,
            "{}",
            msg.topic()
        );
        let payload = msg.payload().unwrap();
        assert!(matches!(payload, Payload::Quote(_) | Payload::Trade(_)));
    }
    assert_eq!(
        expected_seq - 1,
        limit,
        "every message of the shard arrived"
    );
    let report = feed.join().unwrap();
    assert_eq!(report.shards.len(), 3);
    for s in &report.shards {
        assert_eq!(s.counts.data(), limit);
        assert_eq!(s.last_sequence, limit);
        assert!(s.counts.quotes > s.counts.trades);
    }
}

#[test]
fn an_idle_publisher_heartbeats_with_its_last_sequence() {
    let ctx = zmq::Context::new();
    // Pathological: one message per topic (2 per symbol), then one per minute, so the shard is idle after 20.
    let feed = Feed::start(
        &tickbox_auth::Gate::open(&ctx),
        FeedConfig {
            symbols: 10,
            pattern: Pattern::Pathological,
            pathological_interval: Duration::from_millis(60_000).into(),
            heartbeat_interval: Duration::from_millis(20).into(),
            wait_for_subscribers: 1,
            ..FeedConfig::default()
        },
    )
    .unwrap();
    let sub = sub(&ctx, &feed.endpoints()[0], b"");
    let frames = collect(&sub, Duration::from_secs(10), |f| {
        f.iter()
            .filter(|m| MessageRef::decode(m).unwrap().kind() == Kind::Heartbeat)
            .count()
            >= 5
    });
    let data: Vec<_> = frames
        .iter()
        .map(|f| MessageRef::decode(f).unwrap())
        .filter(|m| m.kind() != Kind::Heartbeat)
        .collect();
    assert_eq!(data.len(), 20, "one message for every topic");
    let topics: std::collections::HashSet<_> = data.iter().map(|m| m.topic()).collect();
    assert_eq!(topics.len(), 20, "each topic exactly once");
    let heartbeats: Vec<_> = frames
        .iter()
        .map(|f| MessageRef::decode(f).unwrap())
        .filter(|m| m.kind() == Kind::Heartbeat)
        .collect();
    assert!(heartbeats.len() >= 5);
    for hb in &heartbeats {
        assert_eq!(hb.topic(), "H.1");
        assert_eq!(hb.header().sequence, 20);
        let Payload::Heartbeat(p) = hb.payload().unwrap() else {
            panic!("not a heartbeat payload")
        };
        assert_eq!(p.interval_ns, 20_000_000);
        assert_eq!(p.messages_sent, 20);
    }
    // Heartbeats are spaced by the interval, not sent in a busy loop.
    let first = heartbeats.first().unwrap().header().send_time_ns;
    let last = heartbeats.last().unwrap().header().send_time_ns;
    assert!(
        last - first >= 15_000_000 * (heartbeats.len() as u64 - 1),
        "{first} {last}"
    );
    let report = feed.stop_and_join().unwrap();
    assert!(report.shards[0].counts.heartbeats >= 5);
}

#[test]
fn paced_feed_never_runs_ahead_of_its_rate() {
    let ctx = zmq::Context::new();
    let feed = Feed::start(
        &tickbox_auth::Gate::open(&ctx),
        FeedConfig {
            rate: Rate::PerSecond(5_000),
            duration: Some(Duration::from_millis(400).into()),
            ..FeedConfig::default()
        },
    )
    .unwrap();
    let report = feed.join().unwrap();
    let s = &report.shards[0];
    let scheduled = (s.duration.as_secs_f64() * 5_000.0) as u64 + 1;
    assert!(
        s.counts.data() <= scheduled,
        "{} > {scheduled}",
        s.counts.data()
    );
    // A loaded machine may lag, but not by half.
    assert!(
        s.counts.data() >= scheduled / 2,
        "{} of {scheduled}",
        s.counts.data()
    );
    assert_eq!(s.last_sequence, s.counts.data());
}

#[test]
fn flat_out_stops_at_the_message_limit() {
    let ctx = zmq::Context::new();
    let feed = Feed::start(
        &tickbox_auth::Gate::open(&ctx),
        FeedConfig {
            shards: vec![PublisherShardConfig::default(); 2],
            mode: PacingMode::FlatOut,
            max_messages_per_shard: Some(20_000),
            ..FeedConfig::default()
        },
    )
    .unwrap();
    let report = feed.join().unwrap();
    for s in &report.shards {
        assert_eq!(s.counts.data(), 20_000);
        assert_eq!(s.last_sequence, 20_000);
    }
    assert_eq!(report.total_data(), 40_000);
    assert!(report.to_string().contains("total: 40000 data messages"));
}

#[test]
fn inproc_works_through_the_shared_context_and_connect_mode_reaches_a_bound_sub() {
    let ctx = zmq::Context::new();
    let feed = Feed::start(
        &tickbox_auth::Gate::open(&ctx),
        FeedConfig {
            shards: vec![PublisherShardConfig {
                endpoint: "inproc://feed-test".into(),
                ..PublisherShardConfig::default()
            }],
            rate: Rate::PerSecond(2_000),
            ..FeedConfig::default()
        },
    )
    .unwrap();
    assert_eq!(feed.endpoints(), vec!["inproc://feed-test".to_string()]);
    let sub1 = sub(&ctx, "inproc://feed-test", b"Q.");
    let frames = collect(&sub1, Duration::from_secs(5), |f| f.len() >= 10);
    assert!(frames.len() >= 10);
    assert!(frames.iter().all(|f| f.starts_with(b"Q.XNAS.")));
    drop(feed);

    // The subscriber binds and the feed connects: the shape of a feed pushing into a proxy's frontend.
    let bound = ctx.socket(zmq::SUB).unwrap();
    bound.set_linger(0).unwrap();
    bound.set_rcvtimeo(100).unwrap();
    let endpoint = tickbox_zmqx::bind_resolved(&bound, "tcp://127.0.0.1:*").unwrap();
    bound.set_subscribe(b"").unwrap();
    let feed = Feed::start(
        &tickbox_auth::Gate::open(&ctx),
        FeedConfig {
            shards: vec![PublisherShardConfig {
                endpoint: endpoint.clone(),
                connect: true,
                core: None,
            }],
            rate: Rate::PerSecond(2_000),
            ..FeedConfig::default()
        },
    )
    .unwrap();
    assert_eq!(feed.endpoints(), vec![endpoint]);
    let frames = collect(&bound, Duration::from_secs(5), |f| f.len() >= 10);
    assert!(frames.len() >= 10);
    feed.stop_and_join().unwrap();
}

#[test]
fn bad_endpoints_and_configs_are_typed_errors() {
    let ctx = zmq::Context::new();
    let err = Feed::start(
        &tickbox_auth::Gate::open(&ctx),
        FeedConfig {
            shards: vec![
                PublisherShardConfig::default(),
                PublisherShardConfig {
                    endpoint: "bogus://nowhere".into(),
                    ..PublisherShardConfig::default()
                },
            ],
            ..FeedConfig::default()
        },
    )
    .err()
    .expect("binding a bogus endpoint must fail");
    assert!(matches!(err, FeedError::Endpoint { shard: 1, .. }), "{err}");
    let err = Feed::start(
        &tickbox_auth::Gate::open(&ctx),
        FeedConfig {
            quotes_per_trade: -1.0,
            ..FeedConfig::default()
        },
    )
    .err()
    .unwrap();
    assert!(matches!(
        err,
        FeedError::InvalidConfig {
            field: "quotes_per_trade",
            ..
        }
    ));
}

#[test]
fn live_stats_move_while_running() {
    let ctx = zmq::Context::new();
    let feed = Feed::start(
        &tickbox_auth::Gate::open(&ctx),
        FeedConfig {
            rate: Rate::PerSecond(10_000),
            ..FeedConfig::default()
        },
    )
    .unwrap();
    tickbox_testkit::wait_until(Duration::from_secs(5), || {
        feed.stats()[0].last_sequence >= 100
    });
    let stats = feed.stats()[0];
    assert!(stats.last_sequence >= 100);
    assert!(!stats.finished);
    assert!(!feed.is_finished());
    let report = feed.stop_and_join().unwrap();
    assert!(report.shards[0].last_sequence >= stats.last_sequence);
}

#[test]
fn shards_without_symbols_do_not_hold_up_a_bounded_run() {
    let ctx = zmq::Context::new();
    let feed = Feed::start(
        &tickbox_auth::Gate::open(&ctx),
        FeedConfig {
            shards: vec![PublisherShardConfig::default(); 4],
            symbol_names: vec!["ONLY".into()],
            mode: PacingMode::FlatOut,
            max_messages_per_shard: Some(500),
            ..FeedConfig::default()
        },
    )
    .unwrap();
    let owner = tickbox_feed::shard_of_symbol("XNAS", "ONLY", 4);
    assert_eq!(feed.shards()[owner].symbols, 1);
    let report = feed.join().unwrap();
    for s in &report.shards {
        let expected = if s.shard == owner { 500 } else { 0 };
        assert_eq!(s.counts.data(), expected, "shard {}", s.shard);
    }
}

#[test]
fn no_drop_back_pressure_loses_nothing_to_a_slow_subscriber() {
    let ctx = zmq::Context::new();
    let n = 100_000u64;
    let feed = Feed::start(
        &tickbox_auth::Gate::open(&ctx),
        FeedConfig {
            mode: PacingMode::FlatOut,
            back_pressure: tickbox_zmqx::BackPressure::Block,
            drain_timeout: Duration::ZERO.into(),
            send_hwm: 100,
            wait_for_subscribers: 1,
            max_messages_per_shard: Some(n),
            heartbeat_interval: Duration::from_millis(0).into(),
            ..FeedConfig::default()
        },
    )
    .unwrap();
    let sub = sub(&ctx, &feed.endpoints()[0], b"");
    sub.set_rcvhwm(100).unwrap();
    let mut expected = 1;
    let deadline = Instant::now() + Duration::from_secs(15);
    while expected <= n && Instant::now() < deadline {
        let Ok(frame) = sub.recv_bytes(0) else {
            continue;
        };
        let msg = MessageRef::decode(&frame).unwrap();
        assert_eq!(msg.header().sequence, expected, "lost or reordered");
        expected += 1;
        // A subscriber much slower than the feed: without no-drop, libzmq would drop at the HWM.
        if expected % 5_000 == 0 {
            std::thread::sleep(Duration::from_millis(5));
        }
    }
    assert_eq!(expected - 1, n, "every message arrived");
    let report = feed.join().unwrap();
    assert_eq!(report.shards[0].last_sequence, n);
}

/// A lossy feed does not wait for its subscribers at the end, so one still connected is nobody it waited for:
/// not counted as staying, and the summary has no warning about it.
#[test]
fn a_lossy_feed_counts_no_subscriber_as_staying_after_a_wait_it_did_not_make() {
    let ctx = zmq::Context::new();
    let feed = Feed::start(
        &tickbox_auth::Gate::open(&ctx),
        FeedConfig {
            mode: PacingMode::FlatOut,
            wait_for_subscribers: 1,
            max_messages_per_shard: Some(1_000),
            ..FeedConfig::default()
        },
    )
    .unwrap();
    // Connected for the whole run and after it.
    let sub = sub(&ctx, &feed.endpoints()[0], b"");
    let report = feed.join().unwrap();
    assert_eq!(report.shards[0].subscribers_at_close, 0, "{report:?}");
    assert!(!report.to_string().contains("WARNING"), "{report}");
    drop(sub);
}
