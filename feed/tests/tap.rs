//! The Espresso tap over real sockets: a faithful, ordered copy that never slows live traffic.

mod lvc_util;

use std::sync::mpsc;
use std::time::Duration;

use lvc_util::*;
use tickbox_feed::lvc::LvcConfig;
use tickbox_feed::tap::TapFrame;

const SECOND: Duration = Duration::from_secs(1);

fn with_tap(upstream: &str) -> LvcConfig {
    LvcConfig {
        tap: Some("tcp://127.0.0.1:*".into()),
        ..lossless(lvc_config(upstream))
    }
}

#[test]
fn the_tap_carries_every_forwarded_message_in_order_plus_subscription_events() {
    let ctx = zmq::Context::new();
    let publisher = TestPub::bind(&ctx);
    let lvc = start(&ctx, with_tap(&publisher.endpoint), &publisher);
    let tap = subscriber(&ctx, lvc.endpoints().tap.as_ref().unwrap(), &[b""]);
    assert!(wait_until(5 * SECOND, || lvc.stats().tap_subscriptions == 1));
    let sub = subscriber(&ctx, &lvc.endpoints().downstream, &[b""]);
    assert!(wait_until(5 * SECOND, || lvc.stats().subscribes == 1));

    let mut sent = Vec::new();
    for seq in 1..=5_000u64 {
        let frame = quote_frame(&format!("Q.XNAS.S{:02}", seq % 40), 4, seq, seq, seq as i64);
        publisher.send(&frame);
        sent.push(frame);
        if seq % 1000 == 0 {
            // Malformed frames are dropped by the proxy, so they must not appear on the tap either.
            publisher.send(b"junk");
        }
    }
    let live = recv_until(&sub, 10 * SECOND, |g| g.len() >= sent.len());
    assert_eq!(live, sent);
    let tapped = recv_until(&tap, 10 * SECOND, |g| g.len() > sent.len());
    let (events, messages): (Vec<_>, Vec<_>) = tapped.iter().partition(|f| {
        matches!(
            TapFrame::classify(f),
            Ok(TapFrame::Subscribe(_) | TapFrame::Unsubscribe(_))
        )
    });
    assert_eq!(events.len(), 1);
    assert_eq!(TapFrame::classify(events[0]), Ok(TapFrame::Subscribe(b"")));
    let messages: Vec<Vec<u8>> = messages.into_iter().cloned().collect();
    assert_eq!(
        messages, live,
        "the tap must be the forwarded stream, byte for byte, in order"
    );

    // A late joiner's cached burst is not on the tap (tap_cached = false), only its subscription event.
    let late = subscriber(&ctx, &lvc.endpoints().downstream, &[b"Q.XNAS.S1"]);
    assert_eq!(recv_until(&late, 5 * SECOND, |g| g.len() >= 10).len(), 10);
    let after = recv_quiet(&tap, Duration::from_millis(300), 5 * SECOND);
    assert_eq!(after.len(), 1);
    assert_eq!(
        TapFrame::classify(&after[0]),
        Ok(TapFrame::Subscribe(b"Q.XNAS.S1"))
    );
    let stats = lvc.join().unwrap();
    assert_eq!(stats.tap_dropped, 0);
    assert_eq!(stats.tap_sent, 5_000 + 2);
}

/// Sends `count` messages through a lossless LVC (optionally with a tap consumer that never reads) and returns
/// how many the subscriber received, plus the proxy's tap drop count.
fn run_through_lvc(count: u64, stalled_tap: bool) -> (u64, u64) {
    let ctx = zmq::Context::new();
    let (ep_tx, ep_rx) = mpsc::channel();
    let (go_tx, go_rx) = mpsc::channel::<()>();
    let publisher_ctx = ctx.clone();
    let publisher = std::thread::spawn(move || {
        let publisher = TestPub::bind(&publisher_ctx);
        ep_tx.send(publisher.endpoint.clone()).unwrap();
        assert!(publisher.next_subscription(5 * SECOND).is_some());
        go_rx.recv_timeout(10 * SECOND).unwrap();
        for seq in 1..=count {
            publisher.send(&quote_frame("Q.XNAS.AAPL", 1, seq, seq, 0));
        }
    });
    let endpoint = ep_rx.recv_timeout(5 * SECOND).unwrap();
    let config = LvcConfig {
        tap_hwm: 10,
        ..with_tap(&endpoint)
    };
    let lvc = tickbox_feed::lvc::spawn(&ctx, config).unwrap();
    let stalled = stalled_tap.then(|| {
        let tap = ctx.socket(zmq::SUB).unwrap();
        tap.set_linger(0).unwrap();
        tap.set_rcvhwm(10).unwrap();
        tap.set_rcvbuf(4096).unwrap();
        tap.connect(lvc.endpoints().tap.as_ref().unwrap()).unwrap();
        tap.set_subscribe(b"").unwrap();
        tap
    });
    if stalled_tap {
        assert!(wait_until(5 * SECOND, || lvc.stats().tap_subscriptions == 1));
    }
    let sub = subscriber(&ctx, &lvc.endpoints().downstream, &[b""]);
    assert!(wait_until(5 * SECOND, || lvc.stats().subscribes == 1));
    go_tx.send(()).unwrap();
    let mut received = 0u64;
    let mut expected_seq = 1;
    let deadline = std::time::Instant::now() + 15 * SECOND;
    while received < count && std::time::Instant::now() < deadline {
        if sub.poll(zmq::POLLIN, 50).unwrap() > 0 {
            while let Ok(frame) = sub.recv_bytes(zmq::DONTWAIT) {
                assert_eq!(
                    header(&frame).sequence,
                    expected_seq,
                    "live stream lost or reordered a message"
                );
                expected_seq += 1;
                received += 1;
            }
        }
    }
    publisher.join().unwrap();
    drop(stalled);
    let stats = lvc.join().unwrap();
    assert_eq!(stats.downstream_dropped, 0);
    (received, stats.tap_dropped)
}

#[test]
fn a_stalled_tap_consumer_costs_tap_copies_never_live_messages() {
    const COUNT: u64 = 100_000;
    let (without_tap_reader, no_drops) = run_through_lvc(COUNT, false);
    let (with_stalled_reader, tap_dropped) = run_through_lvc(COUNT, true);
    assert_eq!(without_tap_reader, COUNT);
    assert_eq!(
        with_stalled_reader, COUNT,
        "live delivery must not depend on the tap"
    );
    assert_eq!(no_drops, 0);
    assert!(
        tap_dropped > 0,
        "the stalled consumer should have cost tap copies"
    );
    assert!(tap_dropped < COUNT);
}
