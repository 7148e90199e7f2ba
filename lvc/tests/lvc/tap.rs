//! The Espresso tap over real sockets: a faithful, ordered copy that never slows live traffic, and (by default)
//! never lets one slow tap consumer cost another.

use crate::lvc_util;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use lvc_util::*;
use tickbox_lvc::{LvcConfig, TapDrop};
use tickbox_wire::tap::TapFrame;

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

/// Sends `count` messages through a lossless LVC whose tap counts its drops (optionally with a tap consumer that
/// never reads) and returns how many the subscriber received, plus the proxy's tap drop count.
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
        // Keep the socket open until released: closing it (linger 100 ms) on a busy machine could discard the
        // last messages still queued for the proxy.
        let _ = go_rx.recv_timeout(20 * SECOND);
    });
    let endpoint = ep_rx.recv_timeout(5 * SECOND).unwrap();
    let config = LvcConfig {
        tap_hwm: 10,
        tap_drop: TapDrop::Counted,
        ..with_tap(&endpoint)
    };
    let lvc = tickbox_lvc::spawn(&tickbox_auth::Gate::open(&ctx), config).unwrap();
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
    let deadline = Instant::now() + 15 * SECOND;
    while received < count && Instant::now() < deadline {
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
    let _ = go_tx.send(());
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

/// What the reading tap consumer got: data-frame sequences in arrival order, and subscription events.
struct Tapped {
    sequences: Vec<u64>,
    events: u64,
}

/// A tap consumer on its own thread that reads as fast as it can (as a recorder does), until it has `count`
/// data frames or, once `done` is set, nothing more arrives for 300 ms (bounded by 20 s overall).
fn reading_tap_consumer(
    ctx: &zmq::Context,
    endpoint: String,
    count: usize,
    done: Arc<AtomicBool>,
) -> std::thread::JoinHandle<Tapped> {
    let ctx = ctx.clone();
    std::thread::spawn(move || {
        let sub = subscriber(&ctx, &endpoint, &[b""]);
        let mut got = Tapped {
            sequences: Vec::with_capacity(count),
            events: 0,
        };
        let deadline = Instant::now() + 20 * SECOND;
        let mut last = Instant::now();
        while got.sequences.len() < count && Instant::now() < deadline {
            if sub.poll(zmq::POLLIN, 20).unwrap() > 0 {
                while let Ok(frame) = sub.recv_bytes(zmq::DONTWAIT) {
                    match TapFrame::classify(&frame) {
                        Ok(TapFrame::Message(m)) => got.sequences.push(m.header().sequence),
                        Ok(_) => got.events += 1,
                        Err(err) => panic!("undecodable tap frame: {err}"),
                    }
                }
                last = Instant::now();
            } else if done.load(Ordering::SeqCst) && last.elapsed() > Duration::from_millis(300) {
                break;
            }
        }
        got
    })
}

/// Two tap consumers, one that never reads (small queues) and one that reads everything, under `mode`.
/// Returns the reader's view, how many data frames the stalled consumer could have read, and the proxy stats.
fn two_tap_consumers(mode: TapDrop, count: u64) -> (Tapped, u64, tickbox_lvc::LvcStats) {
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
            publisher.send(&quote_frame(
                &format!("Q.XNAS.S{:02}", seq % 20),
                1,
                seq,
                seq,
                0,
            ));
            // At most ~100k msg/s: the healthy reader must only keep up on average, and `tap_hwm` (20k) is then
            // 200 ms of slack for a reader starved by a busy machine (the whole test suite on 2 cores). The stalled
            // consumer overflows whatever the rate, since it never reads.
            if seq % 100 == 0 {
                std::thread::sleep(Duration::from_millis(1));
            }
        }
        let _ = go_rx.recv_timeout(20 * SECOND);
    });
    let endpoint = ep_rx.recv_timeout(5 * SECOND).unwrap();
    let config = LvcConfig {
        tap_hwm: 20_000,
        tap_drop: mode,
        ..with_tap(&endpoint)
    };
    let lvc = tickbox_lvc::spawn(&tickbox_auth::Gate::open(&ctx), config).unwrap();
    let tap_ep = lvc.endpoints().tap.clone().unwrap();
    // Like `tickbox tap` stuck behind a terminal: subscribed, never reading, tiny queues.
    let stalled = ctx.socket(zmq::SUB).unwrap();
    stalled.set_linger(0).unwrap();
    stalled.set_rcvhwm(10).unwrap();
    stalled.set_rcvbuf(4096).unwrap();
    stalled.connect(&tap_ep).unwrap();
    stalled.set_subscribe(b"").unwrap();
    let done = Arc::new(AtomicBool::new(false));
    let reader = reading_tap_consumer(&ctx, tap_ep, count as usize, Arc::clone(&done));
    assert!(wait_until(5 * SECOND, || lvc.stats().tap_subscriptions == 2));
    let sub = subscriber(&ctx, &lvc.endpoints().downstream, &[b""]);
    assert!(wait_until(5 * SECOND, || lvc.stats().subscribes == 1));
    go_tx.send(()).unwrap();

    let mut expected_seq = 1;
    let deadline = Instant::now() + 15 * SECOND;
    while expected_seq <= count && Instant::now() < deadline {
        if sub.poll(zmq::POLLIN, 50).unwrap() > 0 {
            while let Ok(frame) = sub.recv_bytes(zmq::DONTWAIT) {
                assert_eq!(
                    header(&frame).sequence,
                    expected_seq,
                    "live stream lost or reordered a message"
                );
                expected_seq += 1;
            }
        }
    }
    assert_eq!(
        expected_seq,
        count + 1,
        "the live subscriber missed messages"
    );
    let _ = go_tx.send(());
    publisher.join().unwrap();
    done.store(true, Ordering::SeqCst);
    let tapped = reader.join().unwrap();
    let stalled_got = recv_quiet(&stalled, Duration::from_millis(300), 5 * SECOND)
        .iter()
        .filter(|f| matches!(TapFrame::classify(f), Ok(TapFrame::Message(_))))
        .count() as u64;
    let stats = lvc.join().unwrap();
    assert_eq!(stats.downstream_dropped, 0);
    assert_eq!(stats.messages_out, count);
    (tapped, stalled_got, stats)
}

#[test]
fn per_consumer_tap_a_stalled_inspector_never_costs_the_recorder() {
    const COUNT: u64 = 100_000;
    let (reader, stalled_got, stats) = two_tap_consumers(TapDrop::PerConsumer, COUNT);
    assert!(
        stalled_got < COUNT,
        "the stalled consumer was meant to overflow its queue (got {stalled_got})"
    );
    assert_eq!(
        reader.sequences,
        (1..=COUNT).collect::<Vec<_>>(),
        "the reading consumer must get every forwarded message, in order"
    );
    assert_eq!(reader.events, 1, "the live subscriber's subscription event");
    // libzmq dropped the stalled consumer's copies silently: the proxy offered every copy and saw no drop.
    assert_eq!(stats.tap_sent, COUNT + 1);
    assert_eq!(stats.tap_dropped, 0);
}

#[test]
fn counted_tap_counts_drops_but_a_stalled_consumer_costs_everyone() {
    const COUNT: u64 = 100_000;
    let (reader, stalled_got, stats) = two_tap_consumers(TapDrop::Counted, COUNT);
    // The trade-off this mode makes: exact drop counts at the proxy, and the healthy consumer loses exactly the
    // copies the stalled one could not take.
    assert!(stats.tap_dropped > 0, "{stats}");
    assert!(stalled_got < COUNT);
    assert_eq!(reader.sequences.len() as u64 + stats.tap_dropped, COUNT);
    assert_eq!(stats.tap_sent, reader.sequences.len() as u64 + 1);
    assert!(
        reader.sequences.windows(2).all(|w| w[0] < w[1]),
        "what the reader did get is in order"
    );
}
