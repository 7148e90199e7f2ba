//! `batch = "auto"` over real sockets: a subscriber that reads batches gets the shard's messages packed into
//! `#B` frames, each message with its own gap-free sequence; a prefix subscriber (or a reader that does not say
//! it reads batches) keeps the stream one message per frame.

use std::time::{Duration, Instant};

use tickbox_feed::{BatchMode, Feed, FeedConfig, PublisherShardConfig, Rate};
use tickbox_wire::{batch_records, is_batch, Kind, MessageRef, BATCH_TOPIC};

/// A SUB with these subscriptions, connected before the feed sends (the feed waits for them).
fn sub(ctx: &zmq::Context, endpoint: &str, prefixes: &[&[u8]]) -> zmq::Socket {
    let s = ctx.socket(zmq::SUB).unwrap();
    s.set_linger(0).unwrap();
    s.set_rcvhwm(0).unwrap();
    s.connect(endpoint).unwrap();
    for p in prefixes {
        s.set_subscribe(p).unwrap();
    }
    s
}

/// What arrived: per ZeroMQ message, whether it was a batch and the (topic, sequence) of its data messages.
struct Received {
    batches: usize,
    singles: usize,
    data: Vec<(String, u64)>,
    largest_batch: usize,
}

/// Receives until `want` data messages arrived (heartbeats skipped) or 15 s passed.
fn receive(s: &zmq::Socket, want: usize) -> Received {
    let mut r = Received {
        batches: 0,
        singles: 0,
        data: Vec::new(),
        largest_batch: 0,
    };
    let deadline = Instant::now() + Duration::from_secs(15);
    while r.data.len() < want && Instant::now() < deadline {
        if s.poll(zmq::POLLIN, 100).unwrap() == 0 {
            continue;
        }
        let f = s.recv_bytes(0).unwrap();
        let mut take = |frame: &[u8]| {
            let m = MessageRef::decode(frame).unwrap();
            if m.kind() != Kind::Heartbeat {
                r.data.push((m.topic().to_string(), m.header().sequence));
            }
        };
        if is_batch(&f) {
            let records = batch_records(&f).unwrap();
            let n = usize::from(records.declared_count());
            for record in records {
                take(record.unwrap());
            }
            r.batches += 1;
            r.largest_batch = r.largest_batch.max(n);
        } else {
            take(&f);
            r.singles += 1;
        }
    }
    r
}

fn config(batch: BatchMode, limit: u64, subscriptions: usize) -> FeedConfig {
    FeedConfig {
        shards: vec![PublisherShardConfig::default()],
        symbols: 50,
        rate: Rate::PerSecond(200_000),
        back_pressure: tickbox_zmqx::BackPressure::Block,
        // The test stops its readers after the feed ends: no drain wait.
        drain_timeout: Duration::ZERO.into(),
        batch: Some(batch),
        wait_for_subscribers: subscriptions,
        subscriber_wait: Duration::from_secs(10).into(),
        max_messages_per_shard: Some(limit),
        publisher_id_base: 40,
        ..FeedConfig::default()
    }
}

/// A batch-aware reader: the opt-in first, so a publisher that counts the "" as a subscriber already knows.
const AWARE: &[&[u8]] = &[BATCH_TOPIC.as_bytes(), b""];

#[test]
fn auto_batches_for_a_batch_reader_and_keeps_every_sequence() {
    let ctx = zmq::Context::new();
    let limit = 5_000;
    let feed = Feed::start(
        &tickbox_auth::Gate::open(&ctx),
        config(BatchMode::Auto, limit, 1),
    )
    .unwrap();
    let s = sub(&ctx, &feed.shards()[0].endpoint, AWARE);
    let got = receive(&s, limit as usize);
    let seqs: Vec<u64> = got.data.iter().map(|d| d.1).collect();
    assert_eq!(seqs, (1..=limit).collect::<Vec<_>>(), "gap-free, in order");
    assert!(got.batches > 0, "batches arrived");
    assert!(got.largest_batch <= 64);
    let report = feed.join().unwrap();
    let c = report.shards[0].counts;
    assert_eq!(c.data(), limit);
    assert_eq!(c.batches as usize, got.batches);
    assert_eq!(c.frames as usize, got.batches + got.singles);
    assert!(c.frames < limit, "fewer messages than records: {c:?}");
    assert!(report.to_string().contains("of them batches"), "{report}");
}

#[test]
fn a_prefix_subscriber_keeps_single_frames_for_everyone() {
    let ctx = zmq::Context::new();
    let limit = 2_000;
    // Two subscribers: the batch reader ("" with its "#B" opt-in, which does not count) and the prefix one.
    let feed = Feed::start(
        &tickbox_auth::Gate::open(&ctx),
        config(BatchMode::Auto, limit, 2),
    )
    .unwrap();
    let ep = feed.shards()[0].endpoint.clone();
    let all = sub(&ctx, &ep, AWARE);
    let quotes = sub(&ctx, &ep, &[b"Q."]);
    let got = receive(&all, limit as usize);
    assert_eq!(got.data.len(), limit as usize);
    assert_eq!(got.batches, 0, "nothing batched while a prefix is held");
    let want_quotes: Vec<(String, u64)> = got
        .data
        .iter()
        .filter(|d| d.0.starts_with("Q."))
        .cloned()
        .collect();
    let q = receive(&quotes, want_quotes.len());
    assert_eq!(q.batches, 0);
    assert_eq!(q.data, want_quotes, "exactly its prefix, in order");
    let report = feed.join().unwrap();
    assert_eq!(report.shards[0].counts.batches, 0);
    assert_eq!(report.shards[0].counts.frames, limit);
}

#[test]
fn off_and_unaware_readers_get_single_frames() {
    let ctx = zmq::Context::new();
    let limit = 1_000;
    // Batching off: even a batch reader gets one message per frame.
    let feed = Feed::start(
        &tickbox_auth::Gate::open(&ctx),
        config(BatchMode::Off, limit, 1),
    )
    .unwrap();
    let s = sub(&ctx, &feed.shards()[0].endpoint, AWARE);
    let got = receive(&s, limit as usize);
    assert_eq!((got.data.len(), got.batches), (limit as usize, 0));
    drop(feed);
    // Batching on, but the only reader subscribed to "" alone (it never said it reads batches).
    let feed = Feed::start(
        &tickbox_auth::Gate::open(&ctx),
        config(BatchMode::Auto, limit, 1),
    )
    .unwrap();
    let s = sub(&ctx, &feed.shards()[0].endpoint, &[b""]);
    let got = receive(&s, limit as usize);
    assert_eq!((got.data.len(), got.batches), (limit as usize, 0));
    assert_eq!(feed.join().unwrap().shards[0].counts.batches, 0);
    assert!("auto".parse::<BatchMode>().is_ok() && "sometimes".parse::<BatchMode>().is_err());
}
