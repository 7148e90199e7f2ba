//! The live snail threshold: changing the shared value while the subscriber runs changes the verdict, at the
//! engine level (fake clock) and over real sockets.

use std::time::Duration;

use tickbox_subscriber::{
    Fatal, HumanDuration, SharedThreshold, SnailVerdict, Subscriber, SubscriberConfig,
    SubscriberShardConfig,
};
use tickbox_wire::{encode_to_vec, now_ns, Header, Kind, Quote};
use tickbox_workers::{Delivery, Worker, WorkerPoolConfig};

#[test]
fn engine_verdict_follows_the_shared_threshold() {
    let threshold = SharedThreshold::new(Duration::from_millis(10));
    let header = Header::live(Kind::Quote, 1, 1, 1_000_000);
    let now = 1_000_000 + 2_000_000; // 2 ms late
    assert!(matches!(
        threshold.snail().check(&header, now),
        SnailVerdict::OnTime { .. }
    ));
    // A clone is the same value: the writer's change is what every reader sees next.
    let writer = threshold.clone();
    writer.set(Duration::from_millis(1));
    assert_eq!(threshold.get(), Duration::from_millis(1));
    assert_eq!(
        threshold.snail().check(&header, now),
        SnailVerdict::Late {
            lateness_ns: 2_000_000
        }
    );
    writer.set(Duration::ZERO);
    assert_eq!(
        threshold.get(),
        Duration::ZERO,
        "zero reads back as disabled"
    );
    assert!(matches!(
        threshold.snail().check(&header, u64::MAX),
        SnailVerdict::OnTime { .. }
    ));
}

struct Count(u64);

impl Worker for Count {
    fn on_message(&mut self, _msg: &tickbox_wire::MessageRef<'_>, _d: &Delivery) {
        self.0 += 1;
    }
}

#[test]
fn lowering_the_threshold_while_running_trips_the_snail() {
    let ctx = zmq::Context::new();
    let tickbox_testkit::FakePublisher {
        socket: publisher,
        endpoint,
    } = tickbox_testkit::FakePublisher::bind(&ctx);
    let config = SubscriberConfig {
        shards: vec![SubscriberShardConfig {
            connect: vec![endpoint],
            ..SubscriberShardConfig::default()
        }],
        max_lateness: HumanDuration(Duration::from_secs(1)),
        ..SubscriberConfig::default()
    };
    let workers = WorkerPoolConfig {
        count: Some(1),
        ..WorkerPoolConfig::default()
    };
    let sub = Subscriber::start(&ctx, &config, &workers, |_| Count(0)).unwrap();
    publisher.set_rcvtimeo(5_000).unwrap();
    assert_eq!(publisher.recv_bytes(0).expect("subscription")[0], 1);

    // 20 ms old messages: fine under 1 s.
    let send = |seq: u64| {
        let header = Header::live(Kind::Quote, 9, seq, now_ns() - 20_000_000);
        let frame = encode_to_vec("Q.XNAS.TEST", &header, &Quote::default().into()).unwrap();
        publisher.send(frame, 0).unwrap();
    };
    for seq in 1..=50 {
        send(seq);
    }
    tickbox_testkit::wait_until(Duration::from_secs(5), || sub.forwarded() >= 50);
    assert_eq!(sub.forwarded(), 50);
    assert!(!sub.is_tripped());
    assert_eq!(sub.live_shards()[0].received, 50);

    sub.threshold().set(Duration::from_millis(5));
    send(51);
    tickbox_testkit::wait_until(Duration::from_secs(5), || sub.is_tripped());
    assert!(
        sub.is_tripped(),
        "the lowered threshold must apply to the next message"
    );
    assert_eq!(sub.live_shards()[0].late, 1);
    let report = sub.shutdown().unwrap();
    match report.fatal {
        Some(Fatal::Snail(e)) => {
            assert_eq!(e.sequence, 51);
            assert_eq!(e.threshold_ns, 5_000_000);
            assert!(e.lateness_ns >= 20_000_000);
        }
        other => panic!("expected the snail, got {other:?}"),
    }
}
