//! The Guide's two-frame envelope ([topic][body]) through `tickbox lvc`, as real processes: a plain ZeroMQ
//! publisher written here from bare sockets, and `tickbox feed --pattern pathological --framing guide` (the Guide's
//! pathological publisher). A late joiner gets the last value of every topic; `tickbox tap --framing auto` shows
//! the envelopes beside tickbox frames.

use crate::common;

use std::collections::BTreeMap;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use common::{endpoint_in, forward_lines, KillOnDrop, TICKBOX};

/// Starts `tickbox lvc` with a tap, reading its upstream from `upstream`; returns it with (subscribers, tap).
fn start_lvc(upstream: &str) -> (KillOnDrop, String, String) {
    let mut lvc = KillOnDrop(
        Command::new(TICKBOX)
            .args([
                "lvc",
                "--upstream",
                upstream,
                "--bind",
                "tcp://127.0.0.1:*",
                "--tap",
                "tcp://127.0.0.1:*",
            ])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let lines = forward_lines(lvc.0.stdout.take().unwrap());
    let (mut subscribers, mut tap) = (None, None);
    while subscribers.is_none() || tap.is_none() {
        let line = lines
            .recv_timeout(Duration::from_secs(10))
            .expect("the LVC printed no endpoints");
        if line.starts_with("lvc subscribers ") {
            subscribers = endpoint_in(&line);
        } else if line.starts_with("lvc tap ") {
            tap = endpoint_in(&line);
        }
    }
    (lvc, subscribers.unwrap(), tap.unwrap())
}

/// Every message a late joiner is served on subscribing to everything, by first frame, until `want` topics arrived.
fn late_joiner(ctx: &zmq::Context, endpoint: &str, want: usize) -> BTreeMap<Vec<u8>, Vec<Vec<u8>>> {
    let sub = ctx.socket(zmq::SUB).unwrap();
    sub.set_linger(0).unwrap();
    sub.set_rcvhwm(0).unwrap();
    sub.set_subscribe(b"").unwrap();
    sub.connect(endpoint).unwrap();
    let mut got = BTreeMap::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    while got.len() < want && Instant::now() < deadline {
        if sub.poll(zmq::POLLIN, 100).unwrap() > 0 {
            let mut parts = sub.recv_multipart(0).unwrap();
            let topic = parts.remove(0);
            got.insert(topic, parts);
        }
    }
    got
}

#[test]
fn a_plain_two_frame_publisher_through_the_lvc_serves_last_values_and_shows_in_the_tap() {
    let ctx = zmq::Context::new();
    // A plain publisher, as in the Guide: XPUB only so it can see the LVC's subscription before sending.
    let publisher = ctx.socket(zmq::XPUB).unwrap();
    publisher.set_linger(0).unwrap();
    let upstream = tickbox_testkit::bind_loopback(&publisher);
    let (_lvc, subscribers, tap_ep) = start_lvc(&upstream);
    assert!(
        publisher.poll(zmq::POLLIN, 10_000).unwrap() > 0,
        "the LVC never subscribed upstream"
    );
    publisher.recv_bytes(0).unwrap();

    // The inspector, on the LVC's tap, reading envelopes and tickbox frames alike.
    let mut tap = KillOnDrop(
        Command::new(TICKBOX)
            .args([
                "tap",
                "--connect",
                &tap_ep,
                "--framing",
                "auto",
                "--no-events",
            ])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let tap_lines = forward_lines(tap.0.stdout.take().unwrap());
    // The tap connects on its own time: send a marker until it shows one, so it is known to be reading.
    let shown = |lines: &mpsc::Receiver<String>, needle: &str, limit: Duration| {
        let deadline = Instant::now() + limit;
        while let Ok(line) = lines.recv_timeout(deadline.saturating_duration_since(Instant::now()))
        {
            if line.contains(needle) {
                return Some(line);
            }
        }
        None
    };
    let mut ready = None;
    for _ in 0..100 {
        publisher.send("probe", zmq::SNDMORE).unwrap();
        publisher.send("ready?", 0).unwrap();
        ready = shown(&tap_lines, "ready?", Duration::from_millis(100));
        if ready.is_some() {
            break;
        }
    }
    let ready = ready.expect("the tap never showed an envelope");
    assert!(ready.starts_with("probe "), "{ready}");
    assert!(
        ready.contains("guide") && ready.contains("1 frame(s) 6 bytes"),
        "{ready}"
    );

    // 100 topics, three rounds of values: the last round is what a late joiner must get.
    for round in 0..3 {
        for topic in 0..100 {
            publisher
                .send(format!("A.{topic:03}").as_str(), zmq::SNDMORE)
                .unwrap();
            publisher
                .send(format!("round {round} of {topic}").as_str(), 0)
                .unwrap();
        }
    }
    // A tickbox frame on the same LVC shows as a decoded message beside them.
    let quote = tickbox_wire::encode_to_vec(
        "Q.XNAS.AAPL",
        &tickbox_wire::Header::live(tickbox_wire::Kind::Quote, 7, 1, 1),
        &tickbox_wire::Payload::Quote(Default::default()),
    )
    .unwrap();
    publisher.send(quote, 0).unwrap();
    let line = shown(&tap_lines, "round 2 of 99", Duration::from_secs(10))
        .expect("the tap missed the last envelope");
    assert!(line.starts_with("A.099 "), "{line}");
    let line = shown(&tap_lines, "Q.XNAS.AAPL", Duration::from_secs(10))
        .expect("the tap missed the tickbox frame");
    assert!(
        line.contains("quote") && line.contains("pub 7 seq 1"),
        "{line}"
    );

    let cached = late_joiner(&ctx, &subscribers, 102);
    assert_eq!(cached.len(), 102, "100 topics, the probe and the quote");
    for topic in 0..100 {
        let key = format!("A.{topic:03}").into_bytes();
        assert_eq!(
            cached[&key],
            vec![format!("round 2 of {topic}").into_bytes()],
            "topic {topic}"
        );
    }
}

#[test]
fn the_pathological_publisher_in_guide_framing_leaves_the_lvc_the_last_value_of_every_topic() {
    let ctx = zmq::Context::new();
    // The feed waits for two subscriptions: the LVC's and an observer's that sees every message, so the last
    // value of each topic is known independently of the LVC.
    let mut feed = KillOnDrop(
        Command::new(TICKBOX)
            .args([
                "feed",
                "--pattern",
                "pathological",
                "--framing",
                "guide",
                "--symbols",
                "500",
                "--wait-for-subscribers",
                "2",
                "--duration",
                "2500ms",
                "--heartbeat",
                "0s",
            ])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let lines = forward_lines(feed.0.stdout.take().unwrap());
    let endpoint = loop {
        let line = lines
            .recv_timeout(Duration::from_secs(10))
            .expect("the feed printed no endpoint");
        if let Some(ep) = endpoint_in(&line) {
            break ep;
        }
    };
    let observer = ctx.socket(zmq::SUB).unwrap();
    observer.set_linger(0).unwrap();
    observer.set_rcvhwm(0).unwrap();
    observer.set_subscribe(b"").unwrap();
    observer.connect(&endpoint).unwrap();
    let (_lvc, subscribers, _tap) = start_lvc(&endpoint);
    let mut last: BTreeMap<Vec<u8>, Vec<Vec<u8>>> = BTreeMap::new();
    let mut messages = 0;
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        assert!(Instant::now() < deadline, "the feed did not end");
        if observer.poll(zmq::POLLIN, 50).unwrap() > 0 {
            let mut parts = observer.recv_multipart(0).unwrap();
            assert_eq!(parts.len(), 2, "the Guide's envelope: [topic][body]");
            let topic = parts.remove(0);
            let body = tickbox_wire::MessageRef::decode(&parts[0]).unwrap();
            assert_eq!(body.topic().as_bytes(), topic.as_slice());
            last.insert(topic, parts);
            messages += 1;
        } else if feed.0.try_wait().unwrap().is_some() {
            break;
        }
    }
    // The burst: one message for each of the 1,000 topics (a quote and a trade per symbol), then updates.
    assert_eq!(last.len(), 1_000);
    assert!(messages > 1_000, "no update after the burst ({messages})");
    let cached = late_joiner(&ctx, &subscribers, 1_000);
    assert_eq!(cached.len(), 1_000);
    // Each value as it went out live, but for the CACHED flag its cached copy carries (a snapshot never hands
    // out a tickbox frame that looks live).
    let uncached: BTreeMap<Vec<u8>, Vec<Vec<u8>>> = cached
        .into_iter()
        .map(|(topic, mut parts)| {
            let frame = &mut parts[0];
            let header = *tickbox_wire::MessageRef::decode(frame).unwrap().header();
            assert!(
                header.flags.contains(tickbox_wire::Flags::CACHED),
                "a cached value without CACHED"
            );
            tickbox_wire::set_flags_in_place(
                frame,
                header.flags.without(tickbox_wire::Flags::CACHED),
            )
            .unwrap();
            (topic, parts)
        })
        .collect();
    assert_eq!(
        uncached, last,
        "the late joiner got something other than the last values"
    );
}
