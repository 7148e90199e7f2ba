//! Shared helpers for the LVC and tap integration tests: a test publisher, subscribers, bounded waits.
#![allow(dead_code)]

use std::time::{Duration, Instant};

use tickbox_lvc::{BackPressure, LvcConfig, LvcHandle};
use tickbox_wire::{Flags, Header, MessageRef};

pub(crate) fn quote_frame(
    topic: &str,
    publisher: u32,
    seq: u64,
    origin_ns: u64,
    bid: i64,
) -> Vec<u8> {
    tickbox_testkit::quote(topic, publisher, seq)
        .sent_at(origin_ns)
        .bid(bid)
        .frame()
}

pub(crate) fn header(frame: &[u8]) -> Header {
    *MessageRef::decode(frame).unwrap().header()
}

pub(crate) fn topic(frame: &[u8]) -> String {
    MessageRef::decode(frame).unwrap().topic().to_owned()
}

pub(crate) fn bid(frame: &[u8]) -> i64 {
    match MessageRef::decode(frame).unwrap().payload().unwrap() {
        tickbox_wire::Payload::Quote(q) => q.bid_px,
        other => panic!("not a quote: {other:?}"),
    }
}

pub(crate) fn is_cached(frame: &[u8]) -> bool {
    header(frame).flags.contains(Flags::CACHED)
}

pub(crate) use tickbox_testkit::wait_until;
/// The fake upstream: sees the proxy's subscriptions and never drops, so tests can wait for the subscription and
/// count on every message reaching the proxy.
pub(crate) use tickbox_testkit::FakePublisher as TestPub;

pub(crate) fn lvc_config(upstream: &str) -> LvcConfig {
    LvcConfig {
        upstream: vec![upstream.to_owned()],
        bind: "tcp://127.0.0.1:*".into(),
        stats_interval: tickbox_units::HumanDuration(std::time::Duration::ZERO),
        ..LvcConfig::default()
    }
}

pub(crate) fn lossless(mut config: LvcConfig) -> LvcConfig {
    config.back_pressure = BackPressure::Block;
    config
}

/// Starts the proxy and waits until `publisher` has its upstream subscription (so nothing sent is filtered out).
pub(crate) fn start(ctx: &zmq::Context, config: LvcConfig, publisher: &TestPub) -> LvcHandle {
    let lvc = tickbox_lvc::spawn(&tickbox_auth::Gate::open(ctx), config).unwrap();
    let sub = publisher
        .next_subscription(Duration::from_secs(5))
        .expect("the proxy never subscribed upstream");
    assert_eq!(sub[0], 1);
    lvc
}

pub(crate) fn subscriber(ctx: &zmq::Context, endpoint: &str, prefixes: &[&[u8]]) -> zmq::Socket {
    let sub = ctx.socket(zmq::SUB).unwrap();
    sub.set_linger(0).unwrap();
    sub.set_rcvhwm(1_000_000).unwrap();
    sub.connect(endpoint).unwrap();
    for p in prefixes {
        sub.set_subscribe(p).unwrap();
    }
    sub
}

/// Receives until `done(received)` or `timeout`.
pub(crate) fn recv_until(
    sock: &zmq::Socket,
    timeout: Duration,
    mut done: impl FnMut(&[Vec<u8>]) -> bool,
) -> Vec<Vec<u8>> {
    let deadline = Instant::now() + timeout;
    let mut got = Vec::new();
    while !done(&got) && Instant::now() < deadline {
        if sock.poll(zmq::POLLIN, 20).unwrap() > 0 {
            while let Ok(frame) = sock.recv_bytes(zmq::DONTWAIT) {
                got.push(frame);
            }
        }
    }
    got
}

/// Receives for `quiet` after the last message (to prove nothing more comes), bounded by `timeout`.
pub(crate) fn recv_quiet(sock: &zmq::Socket, quiet: Duration, timeout: Duration) -> Vec<Vec<u8>> {
    let deadline = Instant::now() + timeout;
    let mut got = Vec::new();
    let mut last = Instant::now();
    while Instant::now() < deadline && last.elapsed() < quiet {
        if sock.poll(zmq::POLLIN, 10).unwrap() > 0 {
            while let Ok(frame) = sock.recv_bytes(zmq::DONTWAIT) {
                got.push(frame);
            }
            last = Instant::now();
        }
    }
    got
}
