//! Workers that panic while traffic flows: the Black Box notices, its shards stop instead of blocking on a dead
//! worker's queue, shutdown returns within a few seconds, and the panic is reported (with the survivors' report).

use std::time::{Duration, Instant};

use tickbox_feed::{FeedConfig, FeedHandle, PacingMode, Rate};
use tickbox_subscriber::{
    Dispatch, Subscriber, SubscriberConfig, SubscriberError, SubscriberShardConfig,
};
use tickbox_wire::MessageRef;
use tickbox_workers::{Delivery, Worker, WorkerError, WorkerPoolConfig};

/// Panics on its first message when `dies`, else counts.
struct Fragile {
    dies: bool,
    seen: u64,
}

impl Worker for Fragile {
    fn on_message(&mut self, _msg: &MessageRef<'_>, _d: &Delivery) {
        assert!(!self.dies, "worker told to panic on its first message");
        self.seen += 1;
    }
}

/// A feed that keeps publishing (well past the test) until dropped.
fn feed(ctx: &zmq::Context) -> FeedHandle {
    let config = FeedConfig {
        shards: vec![tickbox_feed::PublisherShardConfig::default(); 2],
        symbols: 64,
        rate: Rate::PerSecond(50_000),
        mode: PacingMode::Paced,
        wait_for_subscribers: 1,
        ..FeedConfig::default()
    };
    tickbox_feed::Feed::start(&tickbox_auth::Gate::open(ctx), config).unwrap()
}

fn start(
    ctx: &zmq::Context,
    endpoints: &[String],
    dispatch: Dispatch,
    workers: usize,
    dies: fn(usize) -> bool,
) -> Subscriber<Fragile> {
    let config = SubscriberConfig {
        shards: endpoints
            .iter()
            .map(|e| SubscriberShardConfig {
                connect: vec![e.clone()],
                ..SubscriberShardConfig::default()
            })
            .collect(),
        dispatch,
        // Small queues fill at once behind a dead worker: the case that used to block a shard.
        handoff_hwm: 8,
        ..SubscriberConfig::default()
    };
    let pool = WorkerPoolConfig {
        count: Some(workers),
        ..WorkerPoolConfig::default()
    };
    Subscriber::start(ctx, &config, &pool, |i| Fragile {
        dies: dies(i),
        seen: 0,
    })
    .unwrap()
}

/// Waits (bounded) for the subscriber to notice a panicked worker.
fn await_failure(sub: &Subscriber<Fragile>) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !sub.workers_failed() {
        assert!(
            Instant::now() < deadline,
            "no worker failure noticed within 10 s (forwarded {})",
            sub.forwarded()
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// `shutdown_partial` returns within `limit`, with the report and the panic.
fn shutdown_within(
    sub: Subscriber<Fragile>,
    limit: Duration,
) -> (tickbox_subscriber::Report<Fragile>, Option<WorkerError>) {
    let t = Instant::now();
    let (report, failure) = sub.shutdown_partial().unwrap();
    assert!(
        t.elapsed() < limit,
        "shutdown took {:?} (limit {limit:?})",
        t.elapsed()
    );
    (report, failure)
}

#[test]
fn every_worker_panicking_by_topic_ends_the_shards_and_shutdown_reports_it() {
    let ctx = zmq::Context::new();
    let feed = feed(&ctx);
    let sub = start(&ctx, &feed.endpoints(), Dispatch::ByTopic, 2, |_| true);
    await_failure(&sub);
    let (report, failure) = shutdown_within(sub, Duration::from_secs(3));
    assert!(
        matches!(failure, Some(WorkerError::Panicked(0 | 1))),
        "{failure:?}"
    );
    assert!(report.workers.is_empty(), "no worker survived to report");
    assert!(report.received() > 0, "traffic was flowing");
    drop(feed);
}

#[test]
fn every_worker_panicking_round_robin_ends_the_shards_and_shutdown_reports_it() {
    let ctx = zmq::Context::new();
    let feed = feed(&ctx);
    let sub = start(&ctx, &feed.endpoints(), Dispatch::RoundRobin, 3, |_| true);
    await_failure(&sub);
    let t = Instant::now();
    // The plain shutdown turns the panic into an error.
    match sub.shutdown() {
        Err(SubscriberError::Workers(WorkerError::Panicked(i))) => assert!(i < 3),
        Err(other) => panic!("unexpected error {other}"),
        Ok(_) => panic!("a panicked worker was not reported"),
    }
    assert!(
        t.elapsed() < Duration::from_secs(3),
        "shutdown took {:?}",
        t.elapsed()
    );
    drop(feed);
}

#[test]
fn one_worker_panicking_keeps_the_survivors_report() {
    let ctx = zmq::Context::new();
    let feed = feed(&ctx);
    // By topic, worker 1 gets a share of the 64 symbols' messages within the first few ms.
    let sub = start(&ctx, &feed.endpoints(), Dispatch::ByTopic, 2, |i| i == 1);
    await_failure(&sub);
    let (report, failure) = shutdown_within(sub, Duration::from_secs(3));
    assert!(
        matches!(failure, Some(WorkerError::Panicked(1))),
        "{failure:?}"
    );
    assert_eq!(report.workers.len(), 1, "the survivor reports");
    assert_eq!(report.workers[0].index, 0);
    // Not aborted: the survivor processed what it was given instead of discarding it.
    assert_eq!(report.workers[0].discarded, 0);
    assert_eq!(report.workers[0].processed, report.workers[0].worker.seen);
    drop(feed);
}
