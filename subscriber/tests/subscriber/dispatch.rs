//! Per-symbol order to workers: the real feed (two sharded publishers, 1,000 symbols) into the Black Box (two
//! shards, three workers), over tcp and over inproc. With `dispatch = "by_topic"` every worker sees each of its
//! topics' sequences strictly increasing and every topic lands on exactly one worker; `round_robin` still
//! delivers everything exactly once, without that guarantee.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use tickbox_feed::{FeedConfig, PacingMode, Rate};
use tickbox_subscriber::{Dispatch, Report, Subscriber, SubscriberConfig, SubscriberShardConfig};
use tickbox_wire::{shard_for, shard_key_of_topic, Kind, MessageRef};
use tickbox_workers::{worker_for_topic, Delivery, Worker, WorkerPoolConfig};

const SYMBOLS: usize = 1_000;
const WORKERS: usize = 3;
const PER_SHARD: u64 = 30_000;

/// Every data message a worker saw, in the order it saw them: (publisher, topic, sequence).
#[derive(Default)]
struct Recorder {
    seen: Vec<(u32, Box<str>, u64)>,
}

impl Worker for Recorder {
    fn on_message(&mut self, msg: &MessageRef<'_>, _d: &Delivery) {
        let h = msg.header();
        if h.kind != Kind::Heartbeat {
            self.seen
                .push((h.publisher_id, msg.topic().into(), h.sequence));
        }
    }
}

fn run(transport: &str, dispatch: Dispatch) -> (Report<Recorder>, u64) {
    let ctx = zmq::Context::new();
    static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let feed_config = FeedConfig {
        shards: (0..2)
            .map(|i| tickbox_feed::PublisherShardConfig {
                endpoint: match transport {
                    "tcp" => "tcp://127.0.0.1:*".to_owned(),
                    _ => format!("inproc://dispatch-test-{n}-{i}"),
                },
                ..tickbox_feed::PublisherShardConfig::default()
            })
            .collect(),
        symbols: SYMBOLS,
        rate: Rate::PerSecond(300_000),
        mode: PacingMode::Paced,
        back_pressure: tickbox_zmqx::BackPressure::Block,
        // The test stops its subscriber after the feed ends: no drain wait.
        drain_timeout: Duration::ZERO.into(),
        wait_for_subscribers: 1,
        max_messages_per_shard: Some(PER_SHARD),
        ..FeedConfig::default()
    };
    let feed = tickbox_feed::Feed::start(&tickbox_auth::Gate::open(&ctx), feed_config).unwrap();
    let config = SubscriberConfig {
        shards: feed
            .endpoints()
            .into_iter()
            .map(|e| SubscriberShardConfig {
                connect: vec![e],
                ..SubscriberShardConfig::default()
            })
            .collect(),
        dispatch,
        ..SubscriberConfig::default()
    };
    let workers = WorkerPoolConfig {
        count: Some(WORKERS),
        ..WorkerPoolConfig::default()
    };
    let sub = Subscriber::start(&ctx, &config, &workers, |_| Recorder::default()).unwrap();
    let sent = feed.join().unwrap();
    let heartbeats: u64 = sent.shards.iter().map(|s| s.counts.heartbeats).sum();
    let total = sent.total_data() + heartbeats;
    tickbox_testkit::wait_until(Duration::from_secs(15), || {
        sub.forwarded() >= total || sub.is_tripped()
    });
    let report = sub.shutdown().unwrap();
    assert!(report.fatal.is_none(), "{:?}", report.fatal);
    assert_eq!(report.forwarded(), total, "{transport} {dispatch}");
    assert_eq!(report.unprocessed, 0);
    (report, sent.total_data())
}

/// Exactly-once over all workers: every (publisher, sequence) seen once.
fn assert_exactly_once(report: &Report<Recorder>, data: u64) {
    let mut all: Vec<(u32, u64)> = report
        .workers
        .iter()
        .flat_map(|w| w.worker.seen.iter().map(|(p, _, s)| (*p, *s)))
        .collect();
    assert_eq!(all.len() as u64, data);
    all.sort_unstable();
    all.dedup();
    assert_eq!(all.len() as u64, data, "a message reached two workers");
}

fn assert_per_symbol_order(report: &Report<Recorder>, transport: &str) {
    let mut owner: HashMap<&str, usize> = HashMap::new();
    for w in &report.workers {
        let mut last: HashMap<(u32, &str), u64> = HashMap::new();
        for (publisher, topic, seq) in &w.worker.seen {
            if let Some(prev) = last.insert((*publisher, &**topic), *seq) {
                assert!(
                    *seq > prev,
                    "{transport}: worker {} saw {topic} from publisher {publisher} go {prev} -> {seq}",
                    w.index
                );
            }
            // A symbol's quotes and trades share an owner, so key by symbol, not by topic.
            let key = std::str::from_utf8(shard_key_of_topic(topic.as_bytes())).unwrap();
            let first = *owner.entry(key).or_insert(w.index);
            assert_eq!(
                first, w.index,
                "{transport}: symbol {key} reached workers {first} and {}",
                w.index
            );
            assert_eq!(worker_for_topic(topic.as_bytes(), WORKERS), w.index);
        }
    }
    assert!(
        owner.len() > SYMBOLS / 2,
        "only {} symbols seen",
        owner.len()
    );
    // Every worker got work, and from both feed shards: the dispatch hash is not the feed's shard hash.
    let mut pairs = HashSet::new();
    for (symbol, worker) in &owner {
        pairs.insert((shard_for(symbol.as_bytes(), 2), *worker));
    }
    assert_eq!(
        pairs.len(),
        2 * WORKERS,
        "{transport}: some feed shard never feeds some worker: {pairs:?}"
    );
    // The subscriber's per-worker forwarding counts agree with what the workers processed.
    for w in &report.workers {
        let forwarded: u64 = report
            .shards
            .iter()
            .map(|s| s.forwarded_per_worker[w.index])
            .sum();
        assert_eq!(forwarded, w.processed);
    }
}

#[test]
fn by_topic_keeps_each_symbol_on_one_worker_in_order_over_tcp() {
    let (report, data) = run("tcp", Dispatch::ByTopic);
    assert_exactly_once(&report, data);
    assert_per_symbol_order(&report, "tcp");
}

#[test]
fn by_topic_keeps_each_symbol_on_one_worker_in_order_over_inproc() {
    let (report, data) = run("inproc", Dispatch::ByTopic);
    assert_exactly_once(&report, data);
    assert_per_symbol_order(&report, "inproc");
}

#[test]
fn round_robin_delivers_everything_once_and_spreads_symbols() {
    let (report, data) = run("tcp", Dispatch::RoundRobin);
    assert_eq!(report.dispatch, Dispatch::RoundRobin);
    assert_exactly_once(&report, data);
    // No order is promised; what round robin does is spread one symbol over several workers.
    let mut owners: HashMap<&str, HashSet<usize>> = HashMap::new();
    for w in &report.workers {
        for (_, topic, _) in &w.worker.seen {
            owners.entry(&**topic).or_default().insert(w.index);
        }
    }
    assert!(owners.values().any(|ws| ws.len() > 1));
    // And every worker takes a share, even where all of them sleep between bursts (the shard runs a burst's end
    // on a sleeping worker, a different one each time).
    for w in &report.workers {
        assert!(w.processed > 0, "worker {} took nothing", w.index);
    }
}
