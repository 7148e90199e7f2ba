//! The LVC proxy over real sockets: late joiners, existing subscribers, bounds, upstream subscriptions,
//! publisher restarts and malformed input.

use crate::lvc_util;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use lvc_util::*;
use tickbox_lvc::{supersedes, LvcConfig, MalformedPolicy, Overflow};
use tickbox_wire::Header;

const SECOND: Duration = Duration::from_secs(1);

#[test]
fn late_joiners_get_every_last_value_and_prefix_joiners_only_theirs() {
    let ctx = zmq::Context::new();
    let publisher = TestPub::bind(&ctx);
    let lvc = start(&ctx, lvc_config(&publisher.endpoint), &publisher);
    // Two rounds over 1,000 topics, then silence: the cache must hold round two.
    let mut seq = 0;
    for round in 1..=2 {
        for i in 0..1000 {
            seq += 1;
            publisher.send(&quote_frame(&format!("Q.XNAS.S{i:03}"), 7, seq, seq, round));
        }
    }
    assert!(wait_until(5 * SECOND, || lvc.stats().messages_in == 2000));
    assert_eq!(lvc.stats().topics_cached, 1000);
    let endpoint = lvc.endpoints().downstream.clone();

    let a = subscriber(&ctx, &endpoint, &[b""]);
    let joined = Instant::now();
    let got = recv_until(&a, 5 * SECOND, |g| g.len() >= 1000);
    let took = joined.elapsed();
    assert_eq!(got.len(), 1000);
    assert!(took < SECOND, "1,000 cached values took {took:?}");
    let topics: BTreeSet<String> = got.iter().map(|f| topic(f)).collect();
    assert_eq!(topics.len(), 1000);
    for frame in &got {
        assert!(is_cached(frame), "a cached value must carry CACHED");
        assert_eq!(bid(frame), 2, "the cache must hold the last value");
        assert!(header(frame).sequence > 1000);
    }

    // A second identical subscription is seen (XPUB_VERBOSE) and served too. The first subscriber receives the
    // burst again, all marked CACHED.
    let b = subscriber(&ctx, &endpoint, &[b""]);
    let got_b = recv_until(&b, 5 * SECOND, |g| g.len() >= 1000);
    assert_eq!(got_b.len(), 1000);
    assert!(got_b.iter().all(|f| is_cached(f)));
    let again = recv_until(&a, 5 * SECOND, |g| g.len() >= 1000);
    assert_eq!(again.len(), 1000);
    assert!(again.iter().all(|f| is_cached(f)));

    // A prefix subscriber gets exactly the matching subset, and nothing else arrives.
    let c = subscriber(&ctx, &endpoint, &[b"Q.XNAS.S1"]);
    let got_c = recv_quiet(&c, Duration::from_millis(300), 5 * SECOND);
    assert_eq!(got_c.len(), 100);
    assert!(got_c
        .iter()
        .all(|f| topic(f).starts_with("Q.XNAS.S1") && is_cached(f)));
    let stats = lvc.join().unwrap();
    assert_eq!(stats.subscribes, 3);
    assert_eq!(stats.cached_sent, 2100);
    assert_eq!(stats.messages_out, 2000);
}

/// What a well-behaved consumer does with the stream: a gap detector on live frames only, and a last-value book
/// that applies cached values only under `supersedes`.
#[derive(Default)]
struct Consumer {
    live_sequences: Vec<u64>,
    cached_seen: u64,
    cached_applied: u64,
    book: HashMap<String, (Header, i64)>,
}

impl Consumer {
    fn apply(&mut self, frame: &[u8]) {
        let h = header(frame);
        if is_cached(frame) {
            self.cached_seen += 1;
        } else {
            self.live_sequences.push(h.sequence);
        }
        let held = self.book.get(&topic(frame)).map(|(h, _)| *h);
        if supersedes(&h, held.as_ref()) {
            if is_cached(frame) {
                self.cached_applied += 1;
            }
            self.book.insert(topic(frame), (h, bid(frame)));
        }
    }
}

#[test]
fn existing_subscribers_are_not_harmed_when_others_join() {
    const QUIET: u64 = 1000;
    const TOTAL: u64 = 21_000;
    let ctx = zmq::Context::new();
    let (ep_tx, ep_rx) = mpsc::channel();
    let (go_tx, go_rx) = mpsc::channel::<()>();
    let (progress_tx, progress_rx) = mpsc::channel::<u64>();
    let publisher_ctx = ctx.clone();
    let publisher = std::thread::spawn(move || {
        let publisher = TestPub::bind(&publisher_ctx);
        ep_tx.send(publisher.endpoint.clone()).unwrap();
        assert!(publisher.next_subscription(5 * SECOND).is_some());
        go_rx.recv_timeout(10 * SECOND).unwrap();
        // 1,000 topics sent once (only a cache can tell a late joiner about them), then 50 hot topics.
        let mut truth = BTreeMap::new();
        for seq in 1..=TOTAL {
            let topic = if seq <= QUIET {
                format!("Q.XNAS.Q{:03}", seq - 1)
            } else {
                format!("Q.XNAS.H{:02}", seq % 50)
            };
            publisher.send(&quote_frame(&topic, 9, seq, seq, seq as i64));
            truth.insert(topic, seq as i64);
            if seq % 1000 == 0 {
                let _ = progress_tx.send(seq);
                std::thread::sleep(Duration::from_millis(10));
            }
        }
        drop(progress_tx);
        // Keep the socket open until released: closing it (linger 100 ms) on a busy machine could discard the
        // last messages still queued for the proxy.
        let _ = go_rx.recv_timeout(20 * SECOND);
        truth
    });
    let endpoint = ep_rx.recv_timeout(5 * SECOND).unwrap();
    let lvc = tickbox_lvc::spawn(&tickbox_auth::Gate::open(&ctx), lvc_config(&endpoint)).unwrap();
    let downstream = lvc.endpoints().downstream.clone();
    let a = subscriber(&ctx, &downstream, &[b""]);
    assert!(wait_until(5 * SECOND, || lvc.stats().subscribes == 1));
    go_tx.send(()).unwrap();

    // Others join mid-stream; each join sends a cached burst that also reaches `a`.
    let mut b = None;
    let mut c = None;
    while let Ok(sent) = progress_rx.recv_timeout(10 * SECOND) {
        if sent == 5000 {
            b = Some(subscriber(&ctx, &downstream, &[b""]));
        }
        if sent == 12_000 {
            c = Some(subscriber(&ctx, &downstream, &[b"Q.XNAS.Q1"]));
        }
    }
    let (b, c) = (b.unwrap(), c.unwrap());

    let mut consumer_a = Consumer::default();
    let frames = recv_until(&a, 10 * SECOND, |g| {
        g.iter().filter(|f| !is_cached(f)).count() as u64 >= TOTAL
    });
    frames.iter().for_each(|f| consumer_a.apply(f));
    frames_quiet_after(&a, &mut consumer_a);
    let _ = go_tx.send(());
    let truth = publisher.join().unwrap();
    // The existing subscriber's live stream is exactly the publisher's: no gap, no duplicate, no cached value
    // counted as live; it did receive the others' bursts, and applied none of them.
    assert_eq!(consumer_a.live_sequences, (1..=TOTAL).collect::<Vec<_>>());
    assert!(
        consumer_a.cached_seen >= QUIET,
        "the joins' bursts reached the existing subscriber"
    );
    assert_eq!(consumer_a.cached_applied, 0);
    assert_eq!(book_values(&consumer_a), truth);

    // The late joiner: its live part is gap-free from where it joined, and its book (cached fill-ins, then live)
    // ends exactly at the publisher's last values, including the 1,000 topics that never updated again.
    let mut consumer_b = Consumer::default();
    frames_quiet_after(&b, &mut consumer_b);
    let live = &consumer_b.live_sequences;
    assert!(
        !live.is_empty() && live.windows(2).all(|w| w[1] == w[0] + 1),
        "gap in the late joiner's live stream"
    );
    assert_eq!(*live.last().unwrap(), TOTAL);
    assert!(consumer_b.cached_applied >= QUIET);
    assert_eq!(book_values(&consumer_b), truth);

    // The prefix joiner sees only its subset.
    let mut consumer_c = Consumer::default();
    frames_quiet_after(&c, &mut consumer_c);
    let expected: BTreeMap<String, i64> = truth
        .iter()
        .filter(|(t, _)| t.starts_with("Q.XNAS.Q1"))
        .map(|(t, v)| (t.clone(), *v))
        .collect();
    assert_eq!(expected.len(), 100);
    assert_eq!(book_values(&consumer_c), expected);
    drop(lvc);
}

fn frames_quiet_after(sock: &zmq::Socket, consumer: &mut Consumer) {
    for f in recv_quiet(sock, Duration::from_millis(300), 10 * SECOND) {
        consumer.apply(&f);
    }
}

fn book_values(consumer: &Consumer) -> BTreeMap<String, i64> {
    consumer
        .book
        .iter()
        .map(|(t, (_, v))| (t.clone(), *v))
        .collect()
}

fn fill(publisher: &TestPub, topics: usize) {
    for i in 0..topics {
        let seq = i as u64 + 1;
        publisher.send(&quote_frame(&format!("Q.XNAS.S{i:04}"), 1, seq, seq, 1));
    }
}

#[test]
fn cache_stays_within_its_caps_and_counts_what_it_drops() {
    let ctx = zmq::Context::new();
    for overflow in [Overflow::EvictLru, Overflow::RejectNew] {
        let publisher = TestPub::bind(&ctx);
        let config = LvcConfig {
            max_topics: 100,
            overflow,
            ..lvc_config(&publisher.endpoint)
        };
        let lvc = start(&ctx, config, &publisher);
        fill(&publisher, 1000);
        assert!(wait_until(5 * SECOND, || lvc.stats().messages_in == 1000));
        let stats = lvc.stats();
        assert_eq!(stats.topics_cached, 100);
        match overflow {
            Overflow::EvictLru => assert_eq!(stats.cache_evicted, 900),
            Overflow::RejectNew => assert_eq!(stats.cache_rejected, 900),
        }
        let sub = subscriber(&ctx, &lvc.endpoints().downstream, &[b""]);
        let got = recv_until(&sub, 5 * SECOND, |g| g.len() >= 100);
        let topics: BTreeSet<String> = got.iter().map(|f| topic(f)).collect();
        let first = match overflow {
            Overflow::EvictLru => 900, // the freshest survive
            Overflow::RejectNew => 0,  // the first ones stay
        };
        let expected: BTreeSet<String> = (first..first + 100)
            .map(|i| format!("Q.XNAS.S{i:04}"))
            .collect();
        assert_eq!(topics, expected);
        // Live traffic is untouched by the caps.
        publisher.send(&quote_frame("Q.XNAS.NEW", 1, 1001, 1001, 5));
        let live = recv_until(&sub, 5 * SECOND, |g| !g.is_empty());
        assert_eq!(live.len(), 1);
        assert!(!is_cached(&live[0]));
        assert!(!lvc.is_finished());
        lvc.join().unwrap();
    }

    // The byte cap holds too.
    let publisher = TestPub::bind(&ctx);
    let config = LvcConfig {
        max_bytes: 20_000,
        ..lvc_config(&publisher.endpoint)
    };
    let lvc = start(&ctx, config, &publisher);
    fill(&publisher, 1000);
    assert!(wait_until(5 * SECOND, || lvc.stats().messages_in == 1000));
    let stats = lvc.join().unwrap();
    assert!(stats.cache_bytes <= 20_000, "{stats}");
    assert!(stats.topics_cached > 0 && stats.topics_cached < 1000);
    assert_eq!(stats.topics_cached + stats.cache_evicted, 1000);
}

#[test]
fn subscriptions_reach_publishers_once_and_leave_with_the_last_subscriber() {
    let ctx = zmq::Context::new();
    let publisher = TestPub::bind(&ctx);
    let config = LvcConfig {
        cache_prefixes: vec!["Q.".into()],
        ..lvc_config(&publisher.endpoint)
    };
    let lvc = spawn_and_expect(&ctx, config, &publisher, b"\x01Q.");
    let endpoint = lvc.endpoints().downstream.clone();
    let short = Duration::from_millis(300);

    let one = subscriber(&ctx, &endpoint, &[b"T."]);
    assert_eq!(
        publisher.next_subscription(5 * SECOND).as_deref(),
        Some(&b"\x01T."[..])
    );
    let two = subscriber(&ctx, &endpoint, &[b"T."]);
    assert!(wait_until(5 * SECOND, || lvc.stats().subscribes == 2));
    assert_eq!(
        publisher.next_subscription(short),
        None,
        "a duplicate must not go upstream"
    );
    drop(one);
    assert_eq!(
        publisher.next_subscription(short),
        None,
        "T. still has a subscriber"
    );
    drop(two);
    assert_eq!(
        publisher.next_subscription(5 * SECOND).as_deref(),
        Some(&b"\x00T."[..])
    );

    // The proxy's own prefix is never released by a subscriber leaving.
    let three = subscriber(&ctx, &endpoint, &[b"Q."]);
    assert!(wait_until(5 * SECOND, || lvc.stats().subscribes == 3));
    drop(three);
    assert!(wait_until(5 * SECOND, || lvc.stats().unsubscribes == 2));
    assert_eq!(publisher.next_subscription(short), None);
    lvc.join().unwrap();
}

fn spawn_and_expect(
    ctx: &zmq::Context,
    config: LvcConfig,
    publisher: &TestPub,
    first: &[u8],
) -> tickbox_lvc::LvcHandle {
    let lvc = tickbox_lvc::spawn(&tickbox_auth::Gate::open(ctx), config).unwrap();
    assert_eq!(
        publisher.next_subscription(5 * SECOND).as_deref(),
        Some(first)
    );
    lvc
}

#[test]
fn a_restarted_publisher_replaces_cached_values_by_arrival() {
    let ctx = zmq::Context::new();
    let first = TestPub::bind(&ctx);
    let endpoint = first.endpoint.clone();
    let lvc = start(&ctx, lvc_config(&endpoint), &first);
    first.send(&quote_frame("Q.XNAS.AAPL", 3, 1_000, 1_000, 1));
    assert!(wait_until(5 * SECOND, || lvc.stats().messages_in == 1));
    drop(first);

    // Same endpoint, sequences start again at 1. The XSUB reconnects and replays its subscription.
    let deadline = Instant::now() + 5 * SECOND;
    let second = loop {
        // The old listener closes asynchronously in libzmq's I/O thread.
        if let Ok(publisher) = TestPub::try_bind_at(&ctx, &endpoint) {
            break publisher;
        }
        assert!(Instant::now() < deadline, "could not rebind {endpoint}");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(
        second.next_subscription(5 * SECOND).is_some(),
        "no subscription after restart"
    );
    second.send(&quote_frame("Q.XNAS.AAPL", 3, 1, 2_000, 2));
    assert!(wait_until(5 * SECOND, || lvc.stats().messages_in == 2));

    let sub = subscriber(&ctx, &lvc.endpoints().downstream, &[b"Q.XNAS.AAPL"]);
    let got = recv_until(&sub, 5 * SECOND, |g| !g.is_empty());
    assert_eq!(got.len(), 1);
    assert_eq!(header(&got[0]).sequence, 1);
    assert_eq!(bid(&got[0]), 2);
    lvc.join().unwrap();
}

#[test]
fn malformed_upstream_frames_are_counted_and_dropped_or_forwarded() {
    let ctx = zmq::Context::new();
    for policy in [MalformedPolicy::Drop, MalformedPolicy::Forward] {
        let publisher = TestPub::bind(&ctx);
        let config = LvcConfig {
            malformed: policy,
            ..lossless(lvc_config(&publisher.endpoint))
        };
        let lvc = start(&ctx, config, &publisher);
        let sub = subscriber(&ctx, &lvc.endpoints().downstream, &[b""]);
        assert!(wait_until(5 * SECOND, || lvc.stats().subscribes == 1));
        let valid = quote_frame("Q.XNAS.AAPL", 1, 1, 1, 1);
        let mut bad_version = valid.clone();
        bad_version["Q.XNAS.AAPL".len() + 1] = 99;
        publisher.send(b"not a wire frame");
        publisher.send(&bad_version);
        publisher.socket.send(&valid[..], zmq::SNDMORE).unwrap();
        publisher.send(&valid);
        publisher.send(&valid);
        let got = recv_quiet(&sub, Duration::from_millis(300), 5 * SECOND);
        let stats = lvc.stats();
        assert_eq!(stats.malformed, 3);
        assert_eq!(stats.messages_in, 4);
        match policy {
            MalformedPolicy::Drop => {
                assert_eq!(got, vec![valid.clone()]);
                assert_eq!(stats.messages_out, 1);
            }
            MalformedPolicy::Forward => {
                assert_eq!(
                    got,
                    vec![
                        b"not a wire frame".to_vec(),
                        bad_version.clone(),
                        valid.clone(),
                        valid.clone(),
                        valid.clone()
                    ]
                );
            }
        }
        // Never cached, and the proxy keeps working.
        assert_eq!(stats.topics_cached, 1);
        publisher.send(&quote_frame("Q.XNAS.MSFT", 1, 2, 2, 1));
        assert_eq!(recv_until(&sub, 5 * SECOND, |g| !g.is_empty()).len(), 1);
        assert!(!lvc.is_finished());
        lvc.join().unwrap();
    }
}

#[test]
fn sharded_feed_connecting_into_the_proxy_is_cached_for_late_joiners() {
    use tickbox_feed::{Feed, FeedConfig, Pattern, PublisherShardConfig};
    let ctx = zmq::Context::new();
    let lvc = tickbox_lvc::spawn(
        &tickbox_auth::Gate::open(&ctx),
        LvcConfig {
            upstream_bind: vec!["tcp://127.0.0.1:*".into()],
            bind: "tcp://127.0.0.1:*".into(),
            stats_interval: tickbox_units::HumanDuration(std::time::Duration::ZERO),
            ..LvcConfig::default()
        },
    )
    .unwrap();
    let upstream = lvc.endpoints().upstream[0].clone();
    let shard = PublisherShardConfig {
        endpoint: upstream,
        connect: true,
        core: None,
    };
    // The Guide's pathological publisher: every topic once (a quote and a trade per symbol), then near silence.
    let feed = Feed::start(
        &tickbox_auth::Gate::open(&ctx),
        FeedConfig {
            shards: vec![shard.clone(), shard],
            symbols: 500,
            pattern: Pattern::Pathological,
            pathological_interval: tickbox_units::HumanDuration(Duration::from_secs(60)),
            heartbeat_interval: tickbox_units::HumanDuration(Duration::ZERO),
            wait_for_subscribers: 1,
            ..FeedConfig::default()
        },
    )
    .unwrap();
    assert!(
        wait_until(10 * SECOND, || lvc.stats().topics_cached == 1000),
        "{}",
        lvc.stats()
    );
    let all = subscriber(&ctx, &lvc.endpoints().downstream, &[b""]);
    let got = recv_until(&all, 5 * SECOND, |g| g.len() >= 1000);
    assert_eq!(got.len(), 1000);
    assert!(got.iter().all(|f| is_cached(f)));
    let publishers: BTreeSet<u32> = got.iter().map(|f| header(f).publisher_id).collect();
    assert_eq!(publishers.len(), 2, "both shards' topics are cached");
    let trades = subscriber(&ctx, &lvc.endpoints().downstream, &[b"T."]);
    let got = recv_quiet(&trades, Duration::from_millis(300), 5 * SECOND);
    assert_eq!(got.len(), 500);
    assert!(got.iter().all(|f| topic(f).starts_with("T.")));
    feed.stop_and_join().unwrap();
    lvc.join().unwrap();
}
