//! `tickbox lvc --tap-framing guide` through the real binary: plain ZeroMQ SUB sockets on the tap receive every
//! tapped message as the Guide's two-frame capture `[topic][value]` (a tickbox frame: its topic, then the whole
//! frame; a plain publisher's multipart message: as it came; a subscription event: `\0`, then the event frame),
//! their prefix subscriptions filter by topic, and `tickbox tap --framing guide` decodes the captures.

use crate::common;

use std::collections::BTreeMap;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use common::{endpoint_in, forward_lines, KillOnDrop, TICKBOX};
use tickbox_wire::tap::{TapFrame, EVENT_MARKER};
use tickbox_wire::{Kind, MessageRef};

/// A raw SUB on `endpoint` with the given subscriptions.
fn raw_sub(ctx: &zmq::Context, endpoint: &str, prefixes: &[&[u8]]) -> zmq::Socket {
    let sub = ctx.socket(zmq::SUB).unwrap();
    sub.set_linger(0).unwrap();
    sub.set_rcvhwm(0).unwrap();
    for p in prefixes {
        sub.set_subscribe(p).unwrap();
    }
    sub.connect(endpoint).unwrap();
    sub
}

/// Every multipart message waiting on `sub`.
fn drain(sub: &zmq::Socket, into: &mut Vec<Vec<Vec<u8>>>) {
    while let Ok(parts) = sub.recv_multipart(zmq::DONTWAIT) {
        into.push(parts);
    }
}

/// Lines of `lines` until one contains `needle` or `limit` passes; all of them, the last one the match.
fn lines_until(lines: &mpsc::Receiver<String>, needle: &str, limit: Duration) -> Vec<String> {
    let deadline = Instant::now() + limit;
    let mut seen = Vec::new();
    while let Ok(line) = lines.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
        let done = line.contains(needle);
        seen.push(line);
        if done {
            break;
        }
    }
    seen
}

#[test]
fn guide_tap_framing_serves_raw_subs_and_the_inspector_every_message_as_topic_and_value() {
    let ctx = zmq::Context::new();
    // A plain publisher, as in the Guide: XPUB so it sees the LVC's upstream subscription before sending.
    let plain = ctx.socket(zmq::XPUB).unwrap();
    plain.set_linger(0).unwrap();
    let plain_ep = tickbox_testkit::bind_loopback(&plain);
    let mut lvc = KillOnDrop(
        Command::new(TICKBOX)
            .args([
                "lvc",
                "--upstream",
                &plain_ep,
                "--upstream-bind",
                "tcp://127.0.0.1:*",
                "--bind",
                "tcp://127.0.0.1:*",
                "--tap",
                "tcp://127.0.0.1:*",
                "--tap-framing",
                "guide",
            ])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let lvc_lines = forward_lines(lvc.0.stdout.take().unwrap());
    let (mut subscribers, mut publishers, mut tap_ep) = (None, None, None);
    while subscribers.is_none() || publishers.is_none() || tap_ep.is_none() {
        let line = lvc_lines
            .recv_timeout(Duration::from_secs(10))
            .expect("the LVC printed no endpoints");
        if line.starts_with("lvc subscribers ") {
            subscribers = endpoint_in(&line);
        } else if line.starts_with("lvc publishers ") {
            publishers = endpoint_in(&line);
        } else if line.starts_with("lvc tap ") {
            tap_ep = endpoint_in(&line);
        }
    }
    let (subscribers, publishers, tap_ep) =
        (subscribers.unwrap(), publishers.unwrap(), tap_ep.unwrap());
    assert!(
        plain.poll(zmq::POLLIN, 10_000).unwrap() > 0,
        "the LVC never subscribed upstream"
    );
    plain.recv_bytes(0).unwrap();

    // Three consumers of the tap: a raw SUB on everything, a raw SUB on trades only, and the inspector.
    let all = raw_sub(&ctx, &tap_ep, &[b""]);
    let trades = raw_sub(&ctx, &tap_ep, &[b"T."]);
    let mut inspector = KillOnDrop(
        Command::new(TICKBOX)
            .args(["tap", "--connect", &tap_ep, "--framing", "guide"])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let tap_lines = forward_lines(inspector.0.stdout.take().unwrap());
    // Consumers attach on their own time: probe (a topic every consumer takes) until all three have one.
    let (mut all_got, mut trades_got) = (Vec::new(), Vec::new());
    let mut inspector_ready = false;
    let deadline = Instant::now() + Duration::from_secs(10);
    while all_got.is_empty() || trades_got.is_empty() || !inspector_ready {
        assert!(
            Instant::now() < deadline,
            "the tap consumers never attached"
        );
        plain.send("T.probe", zmq::SNDMORE).unwrap();
        plain.send("ready?", 0).unwrap();
        std::thread::sleep(Duration::from_millis(50));
        drain(&all, &mut all_got);
        drain(&trades, &mut trades_got);
        while let Ok(line) = tap_lines.try_recv() {
            inspector_ready |= line.starts_with("T.probe ");
        }
    }

    // The plain publisher: two-frame and three-frame messages, passed through as they are.
    let mut plain_sent: Vec<Vec<Vec<u8>>> = Vec::new();
    for i in 0..50 {
        let mut parts = vec![
            format!("A.{i:02}").into_bytes(),
            format!("value {i}").into_bytes(),
        ];
        if i % 10 == 0 {
            parts.push(vec![0, 1, 2, 255]);
        }
        plain.send_multipart(&parts, 0).unwrap();
        plain_sent.push(parts);
    }
    // A subscriber of the LVC: its subscription is a tap event.
    let downstream = raw_sub(&ctx, &subscribers, &[b"Q."]);
    // The real feed into the LVC's upstream bind: 600 tickbox frames and its heartbeats.
    let feed = KillOnDrop(
        Command::new(TICKBOX)
            .args([
                "feed",
                "--connect",
                &publishers,
                "--rate",
                "20000",
                "--max-messages",
                "600",
                "--batch",
                "off",
                "--heartbeat",
                "20ms",
                "--wait-for-subscribers",
                "1",
                "--json",
            ])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let out = feed.wait_output(Duration::from_secs(15));
    assert!(out.status.success(), "feed: {:?}", out.status);
    let summary: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();

    // Everything the feed sent went out before it exited; the tap is quiet once a raw SUB stops receiving.
    let mut quiet_since = Instant::now();
    let deadline = Instant::now() + Duration::from_secs(10);
    while quiet_since.elapsed() < Duration::from_millis(300) {
        assert!(Instant::now() < deadline, "the tap never went quiet");
        let before = (all_got.len(), trades_got.len());
        drain(&all, &mut all_got);
        drain(&trades, &mut trades_got);
        if (all_got.len(), trades_got.len()) != before {
            quiet_since = Instant::now();
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    drop(downstream);

    // Sort the raw "everything" SUB's messages: probes, the plain publisher's, captures of tickbox frames, events.
    let mut plain_seen = Vec::new();
    let mut per_publisher: BTreeMap<u32, Vec<u64>> = BTreeMap::new();
    let mut data = 0u64;
    let mut events = Vec::new();
    for parts in &all_got {
        if parts[0] == b"T.probe" {
            assert_eq!(parts.len(), 2);
            continue;
        }
        if parts[0] == [EVENT_MARKER] {
            assert_eq!(parts.len(), 2, "an event is [\\0][event frame]");
            match TapFrame::classify(&parts[1]) {
                Ok(TapFrame::Subscribe(p)) => events.push(p.to_vec()),
                other => panic!("not a subscription event: {other:?}"),
            }
            continue;
        }
        if let Ok(msg) = MessageRef::decode(&parts[1]) {
            assert_eq!(
                parts.len(),
                2,
                "a tickbox frame is captured as [topic][frame]"
            );
            assert_eq!(
                parts[0],
                msg.topic().as_bytes(),
                "topic frame is the frame's topic"
            );
            let h = msg.header();
            if h.kind != Kind::Heartbeat {
                data += 1;
                per_publisher
                    .entry(h.publisher_id)
                    .or_default()
                    .push(h.sequence);
            }
            continue;
        }
        plain_seen.push(parts.clone());
    }
    assert_eq!(
        plain_seen, plain_sent,
        "plain multipart messages pass as they came"
    );
    assert_eq!(data, 600, "every feed message, as a capture: {summary}");
    for (publisher, seqs) in &per_publisher {
        let want: Vec<u64> = (1..=seqs.len() as u64).collect();
        assert_eq!(seqs, &want, "publisher {publisher}: gap-free, in order");
    }
    assert_eq!(
        events,
        [b"Q.".to_vec()],
        "the downstream subscription, once"
    );

    // The trades-only SUB: exactly the trades among the captures, nothing else. The probes are left out of the
    // comparison: the two SUBs attach at their own moments, so one can see probes sent before the other attached.
    let is_probe = |p: &&Vec<Vec<u8>>| p[0] == b"T.probe";
    let want_trades: Vec<&Vec<Vec<u8>>> = all_got
        .iter()
        .filter(|p| p[0].starts_with(b"T.") && !is_probe(p))
        .collect();
    assert!(want_trades.len() > 10, "the feed sent trades");
    let got_trades: Vec<&Vec<Vec<u8>>> = trades_got.iter().filter(|p| !is_probe(p)).collect();
    assert_eq!(
        got_trades, want_trades,
        "a prefix subscription filters on the topic frame"
    );

    // The inspector decoded the captures: every feed message shown as a tickbox message, no gap, the event, and
    // the plain publisher's envelopes as envelopes.
    let mut shown = lines_until(&tap_lines, "A.49 ", Duration::from_secs(5));
    let deadline = Instant::now() + Duration::from_secs(5);
    while (shown
        .iter()
        .filter(|l| l.contains(" quote ") || l.contains(" trade "))
        .count()
        < 600
        || !shown.iter().any(|l| l.starts_with("SUB ")))
        && Instant::now() < deadline
    {
        if let Ok(line) = tap_lines.recv_timeout(Duration::from_millis(100)) {
            shown.push(line);
        }
    }
    let decoded = shown
        .iter()
        .filter(|l| (l.contains(" quote ") || l.contains(" trade ")) && l.contains(" pub "))
        .count();
    assert_eq!(decoded, 600, "{:#?}", &shown[..shown.len().min(20)]);
    assert!(!shown.iter().any(|l| l.starts_with("GAP")), "{shown:#?}");
    assert!(shown.iter().any(|l| l == "SUB   \"Q.\""), "{shown:#?}");
    assert!(
        shown
            .iter()
            .any(|l| l.starts_with("A.10 ") && l.contains("2 frame(s)")),
        "{shown:#?}"
    );
}
