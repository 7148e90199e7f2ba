//! Any ZeroMQ publisher through the LVC: a plain `[topic][value...]` multipart publisher, written here from bare
//! `zmq` sockets, is cached by topic and replayed to late joiners as the same multipart message.

use crate::lvc_util;

use std::time::{Duration, Instant};

use lvc_util::wait_until;
use tickbox_lvc::{LvcConfig, LvcHandle};

const SECOND: Duration = Duration::from_secs(1);
const MAX_ENTRY_BYTES: usize = 256;

type Message = Vec<Vec<u8>>;

fn msg(parts: &[&[u8]]) -> Message {
    parts.iter().map(|p| p.to_vec()).collect()
}

fn send(publisher: &zmq::Socket, message: &Message) {
    publisher.send_multipart(message, 0).unwrap();
}

/// Receives whole multipart messages until `count` arrived or `timeout`.
fn recv_messages(sub: &zmq::Socket, count: usize, timeout: Duration) -> Vec<Message> {
    let deadline = Instant::now() + timeout;
    let mut got = Vec::new();
    while got.len() < count && Instant::now() < deadline {
        if sub.poll(zmq::POLLIN, 20).unwrap() > 0 {
            while let Ok(message) = sub.recv_multipart(zmq::DONTWAIT) {
                got.push(message);
            }
        }
    }
    got
}

fn late_joiner(ctx: &zmq::Context, lvc: &LvcHandle, prefix: &[u8]) -> zmq::Socket {
    let before = lvc.stats().subscribes;
    let sub = ctx.socket(zmq::SUB).unwrap();
    sub.set_linger(0).unwrap();
    sub.connect(&lvc.endpoints().downstream).unwrap();
    sub.set_subscribe(prefix).unwrap();
    assert!(
        wait_until(5 * SECOND, || lvc.stats().subscribes > before),
        "the proxy never saw the subscription"
    );
    sub
}

#[test]
fn a_plain_two_frame_publisher_is_cached_by_topic_and_replayed_to_late_joiners() {
    let ctx = zmq::Context::new();
    let lvc = tickbox_lvc::spawn(
        &tickbox_auth::Gate::open(&ctx),
        LvcConfig {
            upstream_bind: vec!["tcp://127.0.0.1:*".into()],
            bind: "tcp://127.0.0.1:*".into(),
            max_entry_bytes: MAX_ENTRY_BYTES,
            stats_interval: tickbox_units::HumanDuration(Duration::ZERO),
            ..LvcConfig::default()
        },
    )
    .unwrap();

    // A bare PUB, as any ZeroMQ application would have. It drops until the proxy's subscription reaches it, so
    // probe until one message got through; after that the connection is in place and nothing more is lost.
    let publisher = ctx.socket(zmq::PUB).unwrap();
    publisher.set_linger(100).unwrap();
    publisher.set_sndhwm(100_000).unwrap();
    publisher.connect(&lvc.endpoints().upstream[0]).unwrap();
    let probe = msg(&[b"probe", b"ready?"]);
    assert!(
        wait_until(5 * SECOND, || {
            send(&publisher, &probe);
            lvc.stats().messages_in > 0
        }),
        "the publisher never reached the proxy"
    );

    let value = |topic: &str, update: u32| format!("{topic}={update}").into_bytes();
    let topics = ["Q.AAA", "Q.BBB", "T.CCC"];
    let mut sent = 0;
    for update in 1..=5 {
        for topic in topics {
            send(&publisher, &msg(&[topic.as_bytes(), &value(topic, update)]));
            sent += 1;
        }
    }
    // More than two frames: the value is every part after the topic.
    send(&publisher, &msg(&[b"Q.MULTI", b"bid=1", b"ask=2"]));
    // A value over max_entry_bytes is forwarded, not cached, and takes the topic's older value out of the cache
    // (it is no longer the last one). Many small parts count too, not only bytes.
    send(&publisher, &msg(&[b"Q.BIG", b"small"]));
    send(&publisher, &msg(&[b"Q.BIG", &[b'x'; MAX_ENTRY_BYTES]]));
    let many_parts: Vec<&[u8]> = std::iter::once(&b"Q.PARTS"[..])
        .chain(std::iter::repeat_n(&b""[..], MAX_ENTRY_BYTES / 4))
        .collect();
    send(&publisher, &msg(&many_parts));
    // Last, so that once its topic is cached everything before it has been handled (one proxy thread, one
    // connection, in order). How many probes got through is unknown, hence the counts below relative to `in`.
    send(&publisher, &msg(&[b"Z.END", b"done"]));
    sent += 5;
    // probe, Q.AAA, Q.BBB, T.CCC, Q.MULTI, Z.END (Q.BIG's small value was removed by its large one).
    assert!(
        wait_until(5 * SECOND, || lvc.stats().topics_cached == 6),
        "not every message reached the proxy: {}",
        lvc.stats()
    );
    let stats = lvc.stats();
    assert!(stats.messages_in > sent as u64, "{stats}");
    assert_eq!(stats.malformed, 0, "{stats}");
    assert_eq!(stats.cache_too_large, 2, "{stats}");
    // Every message under the cache prefix "" was cached but the two too large ones, and all were forwarded
    // (nobody subscribed yet, but the XPUB takes them).
    assert_eq!(stats.multipart_cached, stats.messages_in - 2, "{stats}");
    assert_eq!(stats.multipart_forwarded, stats.messages_in, "{stats}");

    // A late joiner on "Q." gets exactly the last value of each matching topic, as the same multipart message,
    // in topic order, and nothing for T.CCC, Q.BIG or Q.PARTS.
    let quotes = late_joiner(&ctx, &lvc, b"Q.");
    let expected_cached = vec![
        msg(&[b"Q.AAA", b"Q.AAA=5"]),
        msg(&[b"Q.BBB", b"Q.BBB=5"]),
        msg(&[b"Q.MULTI", b"bid=1", b"ask=2"]),
    ];
    assert_eq!(recv_messages(&quotes, 3, 5 * SECOND), expected_cached);
    assert_eq!(lvc.stats().cached_sent, 3);

    // Then the live stream, unchanged, including a value too large to cache; the cached burst is over, since it
    // went out before anything live on this connection.
    let live = vec![
        msg(&[b"Q.AAA", b"Q.AAA=6"]),
        msg(&[b"Q.BIG", &[b'y'; MAX_ENTRY_BYTES]]),
        msg(&[b"Q.MULTI", b"bid=3", b"ask=4"]),
    ];
    let out_before = lvc.stats().multipart_forwarded;
    send(&publisher, &msg(&[b"T.CCC", b"T.CCC=6"]));
    for message in &live {
        send(&publisher, message);
    }
    assert_eq!(recv_messages(&quotes, 3, 5 * SECOND), live);
    assert!(wait_until(5 * SECOND, || lvc.stats().multipart_forwarded
        == out_before + 4));

    // An exact-topic late joiner gets that one topic's newest value.
    let trades = late_joiner(&ctx, &lvc, b"T.CCC");
    assert_eq!(
        recv_messages(&trades, 1, 5 * SECOND),
        vec![msg(&[b"T.CCC", b"T.CCC=6"])]
    );
    // The existing subscriber also sees that burst only if it matches its prefix: "Q." does not match T.CCC.
    assert!(recv_messages(&quotes, 1, Duration::from_millis(200)).is_empty());

    let stats = lvc.join().unwrap();
    assert_eq!(stats.malformed, 0, "{stats}");
    assert_eq!(stats.cache_too_large, 3, "{stats}");
    assert_eq!(stats.cached_sent, 4, "{stats}");
    assert!(stats.cache_bytes <= 256 << 20);
}
