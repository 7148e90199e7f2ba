//! The real feed (two sharded publishers) into the Black Box (two shards, three workers) over tcp.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use tickbox_feed::{FeedConfig, PacingMode, Rate};
use tickbox_subscriber::{Subscriber, SubscriberConfig, SubscriberShardConfig};
use tickbox_wire::{Kind, MessageRef};
use tickbox_workers::{Delivery, Worker, WorkerPoolConfig};

#[derive(Default)]
struct Recorder {
    seen: Vec<(u32, u64, Kind)>,
    topics: Vec<String>,
}

impl Worker for Recorder {
    fn on_message(&mut self, msg: &MessageRef<'_>, _d: &Delivery) {
        let h = msg.header();
        self.seen.push((h.publisher_id, h.sequence, h.kind));
        if h.kind != Kind::Heartbeat && self.topics.len() < 10_000 {
            self.topics.push(msg.topic().to_owned());
        }
    }
}

fn feed_config(per_shard: u64) -> FeedConfig {
    FeedConfig {
        shards: vec![tickbox_feed::PublisherShardConfig::default(); 2],
        symbols: 200,
        rate: Rate::PerSecond(200_000),
        mode: PacingMode::Paced,
        back_pressure: tickbox_zmqx::BackPressure::Block,
        // The test stops its subscriber after the feed ends: no drain wait.
        drain_timeout: Duration::ZERO.into(),
        wait_for_subscribers: 1,
        max_messages_per_shard: Some(per_shard),
        ..FeedConfig::default()
    }
}

fn subscriber_config(endpoints: &[String], topics: Vec<String>) -> SubscriberConfig {
    SubscriberConfig {
        shards: endpoints
            .iter()
            .map(|e| SubscriberShardConfig {
                connect: vec![e.clone()],
                ..SubscriberShardConfig::default()
            })
            .collect(),
        topics,
        ..SubscriberConfig::default()
    }
}

#[test]
fn two_feed_shards_to_two_subscriber_shards_and_three_workers_exactly_once() {
    let ctx = zmq::Context::new();
    const PER_SHARD: u64 = 25_000;
    let feed =
        tickbox_feed::Feed::start(&tickbox_auth::Gate::open(&ctx), feed_config(PER_SHARD)).unwrap();
    let endpoints = feed.endpoints();
    let workers = WorkerPoolConfig {
        count: Some(3),
        ..WorkerPoolConfig::default()
    };
    let sub = Subscriber::start(
        &ctx,
        &subscriber_config(&endpoints, Vec::new()),
        &workers,
        |_| Recorder::default(),
    )
    .unwrap();
    let sent = feed.join().unwrap();
    assert_eq!(sent.total_data(), 2 * PER_SHARD);
    let deadline = Instant::now() + Duration::from_secs(10);
    let heartbeats: u64 = sent.shards.iter().map(|s| s.counts.heartbeats).sum();
    while sub.forwarded() < 2 * PER_SHARD + heartbeats && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    let report = sub.shutdown().unwrap();
    assert!(report.fatal.is_none(), "{:?}", report.fatal);
    assert_eq!(
        (report.gaps(), report.malformed(), report.unprocessed),
        (0, 0, 0)
    );
    let mut data: HashMap<u32, Vec<u64>> = HashMap::new();
    for w in &report.workers {
        assert!(w.processed > 0, "worker {} got nothing", w.index);
        for &(publisher, seq, kind) in &w.worker.seen {
            if kind != Kind::Heartbeat {
                data.entry(publisher).or_default().push(seq);
            }
        }
    }
    assert_eq!(data.len(), 2, "both publishers seen");
    for shard in &sent.shards {
        let mut seqs = data.remove(&shard.publisher_id).expect("publisher seen");
        seqs.sort_unstable();
        let expected: Vec<u64> = (1..=shard.last_sequence).collect();
        assert!(
            seqs == expected,
            "publisher {}: not every sequence exactly once",
            shard.publisher_id
        );
    }
}

#[test]
fn prefix_subscription_on_a_real_feed_only_matching_topics_and_no_gaps() {
    let ctx = zmq::Context::new();
    let feed =
        tickbox_feed::Feed::start(&tickbox_auth::Gate::open(&ctx), feed_config(10_000)).unwrap();
    let endpoints = feed.endpoints();
    let workers = WorkerPoolConfig {
        count: Some(2),
        ..WorkerPoolConfig::default()
    };
    let sub = Subscriber::start(
        &ctx,
        &subscriber_config(&endpoints, vec!["T.".into()]),
        &workers,
        |_| Recorder::default(),
    )
    .unwrap();
    let sent = feed.join().unwrap();
    let trades: u64 = sent.shards.iter().map(|s| s.counts.trades).sum();
    assert!(trades > 0);
    // Heartbeats are forwarded too, whatever the topics.
    let heartbeats: u64 = sent.shards.iter().map(|s| s.counts.heartbeats).sum();
    tickbox_testkit::wait_until(Duration::from_secs(10), || {
        sub.forwarded() >= trades + heartbeats
    });
    let report = sub.shutdown().unwrap();
    assert_eq!(report.gaps(), 0);
    let got_trades: u64 = report
        .workers
        .iter()
        .flat_map(|w| &w.worker.seen)
        .filter(|m| m.2 == Kind::Trade)
        .count() as u64;
    assert_eq!(got_trades, trades);
    let others = report
        .workers
        .iter()
        .flat_map(|w| &w.worker.seen)
        .filter(|m| !matches!(m.2, Kind::Trade | Kind::Heartbeat))
        .count();
    assert_eq!(others, 0);
    assert!(report
        .workers
        .iter()
        .flat_map(|w| &w.worker.topics)
        .all(|t| t.starts_with("T.")));
}
