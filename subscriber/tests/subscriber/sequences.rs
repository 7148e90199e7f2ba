//! Sequence accounting in the Black Box over real sockets: only this hop's own loss trips `gap_policy = "die"`;
//! duplicates, restarts, forged jumps and gap notices are counted apart, and gap notices never reach workers or
//! the snail.

use std::time::Duration;

use tickbox_subscriber::{
    Fatal, GapPolicy, HumanDuration, Subscriber, SubscriberConfig, SubscriberShardConfig,
};
use tickbox_wire::{
    encode_to_vec, now_ns, GapCause, GapNotice, Header, Heartbeat, Kind, MessageRef, Payload, Quote,
};
use tickbox_workers::{Delivery, Worker, WorkerPoolConfig};

#[derive(Default)]
struct Kinds {
    seen: Vec<(Kind, u64)>,
}

impl Worker for Kinds {
    fn on_message(&mut self, msg: &MessageRef<'_>, _d: &Delivery) {
        self.seen.push((msg.kind(), msg.header().sequence));
    }
}

struct Publisher {
    socket: zmq::Socket,
    endpoint: String,
}

impl Publisher {
    fn new(ctx: &zmq::Context) -> Self {
        let tickbox_testkit::FakePublisher { socket, endpoint } =
            tickbox_testkit::FakePublisher::bind(ctx);
        Publisher { socket, endpoint }
    }

    fn await_subscription(&self) {
        self.socket.set_rcvtimeo(5_000).unwrap();
        self.socket.recv_bytes(0).expect("subscription within 5 s");
    }

    fn send(&self, topic: &str, header: Header, payload: Payload) {
        self.socket
            .send(encode_to_vec(topic, &header, &payload).unwrap(), 0)
            .unwrap();
    }

    fn quote(&self, session: u64, seq: u64) {
        let h = Header::live(Kind::Quote, 1, seq, now_ns()).with_session(session);
        self.send("Q.XNAS.AAPL", h, Quote::default().into());
    }
}

fn start(p: &Publisher) -> Subscriber<Kinds> {
    let config = SubscriberConfig {
        shards: vec![SubscriberShardConfig {
            connect: vec![p.endpoint.clone()],
            ..SubscriberShardConfig::default()
        }],
        gap_policy: GapPolicy::Die,
        // Far below the hour-old notice below, far above what a loaded machine adds to a live quote.
        max_lateness: "10s".parse::<HumanDuration>().unwrap(),
        ..SubscriberConfig::default()
    };
    let workers = WorkerPoolConfig {
        count: Some(2),
        ..WorkerPoolConfig::default()
    };
    Subscriber::start(&zmq::Context::new(), &config, &workers, |_| {
        Kinds::default()
    })
    .unwrap()
}

fn wait_received(sub: &Subscriber<Kinds>, n: u64) {
    tickbox_testkit::wait_until(Duration::from_secs(10), || {
        sub.live_shards()[0].received >= n || sub.is_tripped()
    });
}

#[test]
fn duplicates_restarts_forged_jumps_and_gap_notices_never_trip_gap_policy_die() {
    let ctx = zmq::Context::new();
    let p = Publisher::new(&ctx);
    let sub = start(&p);
    p.await_subscription();
    const S1: u64 = 111;
    const S2: u64 = 222;
    for seq in 1..=5 {
        p.quote(S1, seq);
    }
    p.quote(S1, 5); // duplicate
    let forged = Header::live(Kind::Heartbeat, 1, u64::MAX - 1, now_ns()).with_session(S1);
    p.send("H.1", forged, Heartbeat::default().into());
    // A gap notice from a replayed journal: sequences 6..=9 were never recorded. Its send time is an hour old,
    // which would be far past the 10 s snail threshold if it were timed.
    let notice = Header::live(Kind::Gap, 1, 9, now_ns() - 3_600_000_000_000).with_session(S1);
    p.send(
        "G.1",
        notice,
        Payload::Gap(GapNotice {
            first_missing: 6,
            last_missing: 9,
            detected_ns: 1,
            cause: GapCause::NotReceived,
        }),
    );
    p.quote(S1, 10);
    // The publisher restarts (new session) and its first sequence is above the old one's last.
    for seq in 500..=502 {
        p.quote(S2, seq);
    }
    wait_received(&sub, 12);
    tickbox_testkit::wait_until(Duration::from_secs(5), || sub.forwarded() >= 11);
    let report = sub.shutdown().unwrap();
    assert!(report.fatal.is_none(), "{:?}", report.fatal);
    let t = report.sequence_totals();
    assert_eq!(
        (
            t.received,
            t.missing,
            t.duplicates,
            t.restarts,
            t.anomalies,
            t.recorded_missing
        ),
        (9, 0, 1, 1, 1, 4),
        "{t:?}"
    );
    assert_eq!(report.gaps(), 0);
    assert_eq!(report.gap_notices(), 1);
    assert_eq!(report.received(), 12);
    // Workers got market data and heartbeats only: never the notice.
    let seen: Vec<(Kind, u64)> = report
        .workers
        .iter()
        .flat_map(|w| w.worker.seen.iter().copied())
        .collect();
    assert_eq!(seen.len(), 11);
    assert!(seen.iter().all(|(k, _)| *k != Kind::Gap));
    let ledgers = report.ledgers();
    assert_eq!(ledgers.len(), 1);
    assert_eq!((ledgers[0].session, ledgers[0].last_sequence), (S2, 502));
}

#[test]
fn own_loss_still_trips_gap_policy_die() {
    let ctx = zmq::Context::new();
    let p = Publisher::new(&ctx);
    let sub = start(&p);
    p.await_subscription();
    for seq in [1, 2, 5] {
        p.quote(7, seq);
    }
    tickbox_testkit::wait_until(Duration::from_secs(10), || sub.is_tripped());
    let report = sub.shutdown().unwrap();
    match report.fatal {
        Some(Fatal::Gap(g)) => assert_eq!((g.first_missing, g.last_missing), (3, 4)),
        other => panic!("expected a gap fatal, got {other:?}"),
    }
}
