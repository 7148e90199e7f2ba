//! `framing = "guide"`: the ZeroMQ Guide's `[topic][body]` publishers read by the Black Box over real sockets,
//! every body reaching exactly one worker (the topic's owner), malformed Guide messages counted, and the hint
//! counters the tickbox framing keeps for frames that look like the Guide's.

use std::time::Duration;

use tickbox_subscriber::{
    Framing, Handoff, Report, Subscriber, SubscriberConfig, SubscriberShardConfig,
};
use tickbox_wire::{encode_to_vec, now_ns, Header, Kind, MessageRef, Quote};
use tickbox_workers::{Delivery, Worker, WorkerPoolConfig};

/// Records every Guide message and every record it was given.
#[derive(Default)]
struct Recorder {
    guide: Vec<(Vec<u8>, Vec<u8>)>,
    records: u64,
}

impl Worker for Recorder {
    fn on_message(&mut self, _msg: &MessageRef<'_>, _d: &Delivery) {
        self.records += 1;
    }

    fn on_guide(&mut self, topic: &[u8], body: &[u8], _d: &Delivery) {
        self.guide.push((topic.to_vec(), body.to_vec()));
    }
}

/// A plain ZeroMQ publisher on an XPUB (so the test can wait for the subscriber) that never drops.
fn publisher(ctx: &zmq::Context) -> (zmq::Socket, String) {
    let tickbox_testkit::FakePublisher { socket, endpoint } =
        tickbox_testkit::FakePublisher::bind(ctx);
    socket.set_rcvtimeo(5_000).unwrap();
    (socket, endpoint)
}

/// Waits for the subscriber's two subscriptions (`#B` and `""`).
fn await_subscriber(socket: &zmq::Socket) {
    for _ in 0..2 {
        let sub = socket.recv_bytes(0).expect("subscription within 5 s");
        assert_eq!(sub[0], 1, "expected a subscribe frame");
    }
}

fn start(endpoint: &str, framing: Framing, handoff: Handoff) -> Subscriber<Recorder> {
    let config = SubscriberConfig {
        shards: vec![SubscriberShardConfig {
            connect: vec![endpoint.to_owned()],
            ..SubscriberShardConfig::default()
        }],
        framing,
        handoff,
        ..SubscriberConfig::default()
    };
    let workers = WorkerPoolConfig {
        count: Some(3),
        ..WorkerPoolConfig::default()
    };
    Subscriber::start(&zmq::Context::new(), &config, &workers, |_| {
        Recorder::default()
    })
    .unwrap()
}

/// Waits until `n` frames or messages were received in all (malformed ones included).
fn wait_received(sub: &Subscriber<Recorder>, n: u64) {
    tickbox_testkit::wait_for("everything to arrive", Duration::from_secs(10), || {
        sub.live_shards().iter().map(|s| s.received).sum::<u64>() >= n
    });
}

const TOPICS: [(&str, u64); 3] = [("alpha", 30), ("beta", 20), ("gamma.x", 10)];

fn guide_messages(report: &Report<Recorder>) -> Vec<(Vec<u8>, Vec<u8>)> {
    report
        .workers
        .iter()
        .flat_map(|w| w.worker.guide.iter().cloned())
        .collect()
}

#[test]
fn every_guide_body_reaches_its_topics_worker_once_in_order_over_both_handoffs() {
    for handoff in [Handoff::Ring, Handoff::Zmq] {
        let ctx = zmq::Context::new();
        let (publisher, endpoint) = publisher(&ctx);
        let sub = start(&endpoint, Framing::Guide, handoff);
        await_subscriber(&publisher);
        let total: u64 = TOPICS.iter().map(|(_, n)| n).sum();
        for i in 0..TOPICS[0].1 {
            for (topic, n) in TOPICS {
                if i < n {
                    let body = format!("{topic} body {i}");
                    publisher
                        .send_multipart([topic.as_bytes(), body.as_bytes()], 0)
                        .unwrap();
                }
            }
            if i == 5 {
                // Malformed for the Guide's framing: a lone frame, and three frames.
                publisher.send(&b"lonely"[..], 0).unwrap();
                publisher
                    .send_multipart([&b"alpha"[..], b"one", b"two"], 0)
                    .unwrap();
            }
        }
        wait_received(&sub, total + 2);
        let report = sub.shutdown().unwrap();
        assert_eq!(report.guide(), total, "{handoff}");
        assert_eq!(
            (report.guide_malformed(), report.malformed()),
            (2, 2),
            "{handoff}"
        );
        assert_eq!(report.forwarded(), total, "{handoff}");
        assert_eq!(report.processed(), total, "{handoff}");
        let seen = guide_messages(&report);
        for (topic, n) in TOPICS {
            let bodies: Vec<String> = seen
                .iter()
                .filter(|(t, _)| t == topic.as_bytes())
                .map(|(_, b)| String::from_utf8(b.clone()).unwrap())
                .collect();
            let want: Vec<String> = (0..n).map(|i| format!("{topic} body {i}")).collect();
            assert_eq!(bodies, want, "{handoff}: {topic}'s bodies, in order");
            let owners = report
                .workers
                .iter()
                .filter(|w| w.worker.guide.iter().any(|(t, _)| t == topic.as_bytes()))
                .count();
            assert_eq!(owners, 1, "{handoff}: {topic} goes to one worker");
        }
        assert_eq!(
            report.workers.iter().map(|w| w.worker.records).sum::<u64>(),
            0
        );
    }
}

#[test]
fn auto_reads_guide_messages_beside_tickbox_frames() {
    let ctx = zmq::Context::new();
    let (publisher, endpoint) = publisher(&ctx);
    let sub = start(&endpoint, Framing::Auto, Handoff::Ring);
    await_subscriber(&publisher);
    for seq in 1..=10u64 {
        let frame = encode_to_vec(
            "Q.XNAS.AAPL",
            &Header::live(Kind::Quote, 1, seq, now_ns()),
            &Quote::default().into(),
        )
        .unwrap();
        publisher.send(frame, 0).unwrap();
        publisher
            .send_multipart([&b"weather"[..], &seq.to_le_bytes()[..]], 0)
            .unwrap();
    }
    wait_received(&sub, 20);
    let report = sub.shutdown().unwrap();
    assert_eq!((report.guide(), report.malformed()), (10, 0));
    assert_eq!(
        report.workers.iter().map(|w| w.worker.records).sum::<u64>(),
        10
    );
    assert_eq!(guide_messages(&report).len(), 10);
}

/// Under the tickbox framing Guide messages are malformed frame by frame; those that look like the Guide's
/// (a part with more to follow, or plain text) are counted apart, so the CLI can say what was meant.
#[test]
fn the_tickbox_framing_counts_malformed_frames_that_look_like_the_guides() {
    let ctx = zmq::Context::new();
    let (publisher, endpoint) = publisher(&ctx);
    let sub = start(&endpoint, Framing::Tickbox, Handoff::Ring);
    await_subscriber(&publisher);
    for i in 0..10u8 {
        // Topic (more follows) then a binary body (neither multipart-first nor text): 1 of 2 looks like it.
        publisher
            .send_multipart([&b"alpha"[..], &[0xff, 0x00, i][..]], 0)
            .unwrap();
        publisher.send(&b"10001 23 45"[..], 0).unwrap();
        publisher.send(&[0xfe, 0x01, 0x00, i][..], 0).unwrap();
    }
    wait_received(&sub, 40);
    let report = sub.shutdown().unwrap();
    assert_eq!((report.malformed(), report.guide_like()), (40, 20));
    assert_eq!(report.guide(), 0);
}
