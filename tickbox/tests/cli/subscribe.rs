//! `tickbox subscribe` as a real process against the real feed: summary table, Ctrl-C, garbage, `--nic`.

use crate::common;

use std::time::Duration;

use common::Captured;

use tickbox_feed::{Feed, FeedConfig, FeedReport, PacingMode, Rate};

fn feed(shards: usize, per_shard: u64) -> FeedConfig {
    FeedConfig {
        shards: vec![tickbox_feed::PublisherShardConfig::default(); shards],
        symbols: 100,
        rate: Rate::PerSecond(100_000),
        mode: PacingMode::Paced,
        back_pressure: tickbox_zmqx::BackPressure::Block,
        // The tests join the feed before they stop `tickbox subscribe`: no drain wait.
        drain_timeout: std::time::Duration::ZERO.into(),
        wait_for_subscribers: 1,
        max_messages_per_shard: Some(per_shard),
        ..FeedConfig::default()
    }
}

/// `(name, value)` pairs from the summary's "distinct topics: N ... quotes N  trades N ..." line.
fn counter(stdout: &str, name: &str) -> u64 {
    let line = stdout
        .lines()
        .find(|l| l.starts_with("distinct topics:"))
        .expect("topics line");
    let words: Vec<&str> = line.split_whitespace().collect();
    let at = words
        .windows(2)
        .position(|w| w[0] == name || w[0] == format!("{name}:"))
        .expect(name);
    words[at + 1].parse().unwrap()
}

/// Column `col` of the summary's `all` row.
fn all_row(stdout: &str, col: usize) -> u64 {
    let line = stdout
        .lines()
        .find(|l| l.trim_start().starts_with("all "))
        .expect("all row");
    line.split_whitespace().nth(col).unwrap().parse().unwrap()
}

/// `tickbox subscribe ARGS`, serving its metrics, with the address they are served at.
fn subscribe(args: &[&str]) -> (Captured, String) {
    let args: Vec<&str> = args.iter().copied().chain(["--metrics", "0"]).collect();
    let proc = Captured::spawn(&args);
    let addr = proc
        .stderr_line("metrics endpoint http://", Duration::from_secs(10))
        .expect("a metrics endpoint line");
    (proc, addr.trim_end_matches("/metrics").to_owned())
}

/// Waits (bounded) until the subscriber's shards have received `frames` frames in all, as its metrics say.
fn await_received(metrics: &str, frames: u64) {
    let received = || -> Option<f64> {
        let (code, body) =
            tickbox_metrics::fetch(metrics, "/metrics", Duration::from_secs(2), 1 << 20).ok()?;
        (code == 200).then_some(())?;
        Some(
            tickbox_metrics::text::parse(&body)
                .iter()
                .filter(|s| {
                    s.name == "tickbox_received_total" && s.label("role") == Some("subscribe")
                })
                .map(|s| s.value)
                .sum(),
        )
    };
    tickbox_testkit::wait_for(
        &format!("the subscriber to receive {frames} frames"),
        Duration::from_secs(10),
        || received() == Some(frames as f64),
    );
}

/// Frames a feed sent: data and heartbeats.
fn sent_frames(report: &FeedReport) -> u64 {
    report
        .shards
        .iter()
        .map(|s| s.counts.data() + s.counts.heartbeats)
        .sum()
}

fn sent_data(report: &FeedReport) -> (u64, u64) {
    (
        report.shards.iter().map(|s| s.counts.quotes).sum(),
        report.shards.iter().map(|s| s.counts.trades).sum(),
    )
}

#[test]
fn subscribe_to_two_feed_shards_then_ctrl_c_prints_the_summary() {
    let ctx = zmq::Context::new();
    let handle = Feed::start(&tickbox_auth::Gate::open(&ctx), feed(2, 5_000)).unwrap();
    let endpoints = handle.endpoints().join(",");
    let (proc, metrics) = subscribe(&[
        "subscribe",
        "--connect",
        &endpoints,
        "--workers",
        "3",
        "--duration",
        "30s",
    ]);
    let report = handle.join().unwrap();
    await_received(&metrics, sent_frames(&report));
    proc.interrupt();
    let (status, stdout, stderr) = proc.wait(Duration::from_secs(10));
    assert_eq!(
        status.code(),
        Some(0),
        "stdout:\n{stdout}\nstderr:\n{stderr}"
    );
    assert!(stdout.contains("stopped by signal"), "{stdout}");
    let (quotes, trades) = sent_data(&report);
    assert_eq!(counter(&stdout, "quotes"), quotes, "{stdout}");
    assert_eq!(counter(&stdout, "trades"), trades, "{stdout}");
    assert_eq!(all_row(&stdout, 5), 0, "no gaps:\n{stdout}");
    assert_eq!(all_row(&stdout, 3), 0, "no malformed:\n{stdout}");
    assert_eq!(counter(&stdout, "unprocessed:"), 0);
    // Two shard rows, each with its own publisher's stream.
    for (i, shard) in report.shards.iter().enumerate() {
        let row = stdout
            .lines()
            .find(|l| {
                l.split_whitespace().next() == Some(&i.to_string()) && l.contains(&shard.endpoint)
            })
            .unwrap_or_else(|| panic!("no row for shard {i}:\n{stdout}"));
        let received: u64 = row.split_whitespace().nth(1).unwrap().parse().unwrap();
        assert_eq!(
            received,
            shard.counts.data() + shard.counts.heartbeats,
            "{stdout}"
        );
    }
}

#[test]
fn topic_prefixes_filter_and_never_report_gaps() {
    let ctx = zmq::Context::new();
    let handle = Feed::start(&tickbox_auth::Gate::open(&ctx), feed(1, 5_000)).unwrap();
    let endpoint = handle.endpoints().join(",");
    let (proc, metrics) = subscribe(&[
        "subscribe",
        "--connect",
        &endpoint,
        "--topics",
        "T.",
        "--duration",
        "30s",
    ]);
    let report = handle.join().unwrap();
    // Trades and, whatever the topics, heartbeats.
    let heartbeats: u64 = report.shards.iter().map(|s| s.counts.heartbeats).sum();
    await_received(&metrics, sent_data(&report).1 + heartbeats);
    proc.interrupt();
    let (status, stdout, stderr) = proc.wait(Duration::from_secs(10));
    assert_eq!(status.code(), Some(0), "{stderr}");
    let (_, trades) = sent_data(&report);
    assert_eq!(counter(&stdout, "trades"), trades, "{stdout}");
    assert_eq!(counter(&stdout, "quotes"), 0, "{stdout}");
    assert_eq!(all_row(&stdout, 5), 0, "{stdout}");
    assert!(!stderr.contains("sequence gap"), "{stderr}");
}

#[test]
fn a_run_of_nothing_but_foreign_frames_exits_1_with_one_line() {
    // The Guide's weather-update server: single text frames, none a tickbox frame.
    let ctx = zmq::Context::new();
    let publisher = ctx.socket(zmq::XPUB).unwrap();
    publisher.set_linger(0).unwrap();
    let endpoint = tickbox_zmqx::bind_resolved(&publisher, "tcp://127.0.0.1:*").unwrap();
    let proc = Captured::spawn(&["subscribe", "--connect", &endpoint, "--duration", "1500ms"]);
    publisher.set_rcvtimeo(10_000).unwrap();
    publisher.recv_bytes(0).expect("subscription");
    for i in 0..200u32 {
        let update = format!("{:05} {} {}", 10000 + i % 100, i % 60, 10 + i % 50);
        publisher.send(update.as_bytes(), 0).unwrap();
    }
    let (status, stdout, stderr) = proc.wait(Duration::from_secs(10));
    assert_eq!(status.code(), Some(1), "{stdout}\n{stderr}");
    let errors: Vec<&str> = stderr.lines().filter(|l| l.starts_with("error:")).collect();
    assert_eq!(errors.len(), 1, "{stderr}");
    assert!(
        errors[0].contains("all 200 frames received were malformed"),
        "{stderr}"
    );
    // Plain text: the Guide's examples; the line says how tickbox reads a Guide publisher.
    assert!(errors[0].contains("--framing guide"), "{stderr}");
    // The summary still says what arrived.
    assert_eq!(all_row(&stdout, 1), 200, "{stdout}");
    assert_eq!(all_row(&stdout, 3), 200, "{stdout}");
}

/// A plain ZeroMQ publisher on an XPUB bound to a free port, never dropping, so a test can wait for the
/// subscriber's subscriptions before sending.
fn plain_publisher(ctx: &zmq::Context) -> (zmq::Socket, String) {
    let tickbox_testkit::FakePublisher {
        socket: publisher,
        endpoint,
    } = tickbox_testkit::FakePublisher::bind(ctx);
    publisher.set_rcvtimeo(10_000).unwrap();
    (publisher, endpoint)
}

/// Waits (10 s at most) for the subscription to everything, which `subscribe` sends after `#B`.
fn await_everything(publisher: &zmq::Socket) {
    loop {
        let sub = publisher.recv_bytes(0).expect("subscription within 10 s");
        if sub == [1] {
            return;
        }
    }
}

/// What the two-frame publisher sends: `(topic, messages)`, one topic not UTF-8.
const GUIDE_TOPICS: [(&[u8], u64); 4] = [
    (b"10001", 50),
    (b"10002", 30),
    (b"weather.x", 20),
    (&[0xff, 0x01], 5),
];

/// Sends every topic's messages as `[topic][body]`, interleaved, then one malformed (lone) frame; returns how
/// many two-frame messages went out.
fn send_guide_messages(publisher: &zmq::Socket) -> u64 {
    for i in 0..50u64 {
        for (topic, n) in GUIDE_TOPICS {
            if i < n {
                let body = format!("{} {} {}", i, i % 60, 10 + i % 50);
                publisher
                    .send_multipart([topic, body.as_bytes()], 0)
                    .unwrap();
            }
        }
    }
    publisher.send(&b"lonely"[..], 0).unwrap();
    GUIDE_TOPICS.iter().map(|(_, n)| n).sum()
}

#[test]
fn framing_guide_delivers_every_body_to_the_workers_with_per_topic_counts_in_the_json() {
    let ctx = zmq::Context::new();
    let (publisher, endpoint) = plain_publisher(&ctx);
    let proc = Captured::spawn(&[
        "subscribe",
        "--connect",
        &endpoint,
        "--framing",
        "guide",
        "--workers",
        "2",
        "--json",
        "--idle-exit",
        "700ms",
        "--duration",
        "15s",
    ]);
    await_everything(&publisher);
    let sent = send_guide_messages(&publisher);
    let (status, stdout, stderr) = proc.wait(Duration::from_secs(19));
    assert_eq!(status.code(), Some(0), "{stdout}\n{stderr}");
    let v: serde_json::Value = serde_json::from_str(stdout.trim()).expect("one JSON object");
    assert_eq!(v["framing"], "guide");
    assert_eq!(v["received"], sent + 1, "{v}");
    assert_eq!(v["malformed"], 1, "{v}");
    let guide = &v["guide"];
    assert_eq!(guide["messages"], sent, "{guide}");
    assert_eq!(guide["malformed"], 1, "{guide}");
    // Counted by the workers: every body reached one.
    assert_eq!(guide["processed"], sent, "{guide}");
    assert_eq!(v["processed"], sent, "{v}");
    assert_eq!(guide["topics_overflow"], 0, "{guide}");
    let topics = guide["topics"].as_array().expect("topics");
    assert_eq!(topics.len(), GUIDE_TOPICS.len(), "{guide}");
    for (topic, n) in GUIDE_TOPICS {
        let entry = match std::str::from_utf8(topic) {
            Ok(text) => topics.iter().find(|t| t["topic"] == text),
            Err(_) => topics
                .iter()
                .find(|t| t["topic"] == "ff01" && t["hex"] == true),
        };
        assert_eq!(
            entry.unwrap_or_else(|| panic!("{topic:?} missing: {guide}"))["messages"],
            n,
            "{guide}"
        );
    }
}

#[test]
fn framing_guide_shows_per_topic_counts_in_the_summary_table() {
    let ctx = zmq::Context::new();
    let (publisher, endpoint) = plain_publisher(&ctx);
    let proc = Captured::spawn(&[
        "subscribe",
        "--connect",
        &endpoint,
        "--framing",
        "guide",
        "--idle-exit",
        "700ms",
        "--duration",
        "15s",
    ]);
    await_everything(&publisher);
    let sent = send_guide_messages(&publisher);
    let (status, stdout, stderr) = proc.wait(Duration::from_secs(19));
    assert_eq!(status.code(), Some(0), "{stdout}\n{stderr}");
    let line = stdout
        .lines()
        .find(|l| l.starts_with("guide messages:"))
        .unwrap_or_else(|| panic!("no guide line:\n{stdout}"));
    assert!(
        line.contains(&format!("{sent} received, 1 malformed, {sent} processed")),
        "{line}"
    );
    for want in [
        "\"10001\" 50",
        "\"10002\" 30",
        "\"weather.x\" 20",
        "0xff01 5",
    ] {
        assert!(line.contains(want), "{want} not in {line}");
    }
    assert_eq!(all_row(&stdout, 1), sent + 1, "{stdout}");
}

/// Two-frame messages read as tickbox frames: exit 1, and the line names --framing guide. Tickbox frames read as
/// Guide messages: exit 1, and the line names the tickbox framing.
#[test]
fn a_run_in_the_wrong_framing_exits_1_saying_which_framing_was_meant() {
    let ctx = zmq::Context::new();
    let (publisher, endpoint) = plain_publisher(&ctx);
    let proc = Captured::spawn(&["subscribe", "--connect", &endpoint, "--idle-exit", "500ms"]);
    await_everything(&publisher);
    for i in 0..20u8 {
        publisher
            .send_multipart([&[0x80, i][..], &[0xfe, 0x00, i][..]], 0)
            .unwrap();
    }
    let (status, stdout, stderr) = proc.wait(Duration::from_secs(15));
    assert_eq!(status.code(), Some(1), "{stdout}\n{stderr}");
    let errors: Vec<&str> = stderr.lines().filter(|l| l.starts_with("error:")).collect();
    assert_eq!(errors.len(), 1, "{stderr}");
    assert!(
        errors[0].contains("all 40 frames received were malformed"),
        "{stderr}"
    );
    assert!(errors[0].contains("--framing guide"), "{stderr}");

    let (publisher, endpoint) = plain_publisher(&ctx);
    let proc = Captured::spawn(&[
        "subscribe",
        "--connect",
        &endpoint,
        "--framing",
        "guide",
        "--idle-exit",
        "500ms",
    ]);
    await_everything(&publisher);
    for seq in 1..=20u64 {
        let header =
            tickbox_wire::Header::live(tickbox_wire::Kind::Quote, 1, seq, tickbox_wire::now_ns());
        let frame = tickbox_wire::encode_to_vec(
            "Q.XNAS.AAPL",
            &header,
            &tickbox_wire::Quote::default().into(),
        );
        publisher.send(frame.unwrap(), 0).unwrap();
    }
    let (status, stdout, stderr) = proc.wait(Duration::from_secs(15));
    assert_eq!(status.code(), Some(1), "{stdout}\n{stderr}");
    let errors: Vec<&str> = stderr.lines().filter(|l| l.starts_with("error:")).collect();
    assert_eq!(errors.len(), 1, "{stderr}");
    assert!(
        errors[0].contains("all 20 messages received were malformed"),
        "{stderr}"
    );
    assert!(errors[0].contains("--framing tickbox"), "{stderr}");
}

#[test]
fn garbage_on_the_wire_is_counted_and_logged_and_the_subscriber_keeps_running() {
    let ctx = zmq::Context::new();
    let publisher = ctx.socket(zmq::XPUB).unwrap();
    publisher.set_linger(0).unwrap();
    let endpoint = tickbox_zmqx::bind_resolved(&publisher, "tcp://127.0.0.1:*").unwrap();
    let proc = Captured::spawn(&["subscribe", "--connect", &endpoint, "--duration", "1500ms"]);
    publisher.set_rcvtimeo(10_000).unwrap();
    publisher.recv_bytes(0).expect("subscription");
    for i in 0..50u64 {
        publisher.send(&b"\x00\x01garbage"[..], 0).unwrap();
        let header =
            tickbox_wire::Header::live(tickbox_wire::Kind::Quote, 1, i + 1, tickbox_wire::now_ns());
        let frame = tickbox_wire::encode_to_vec(
            "Q.XNAS.AAPL",
            &header,
            &tickbox_wire::Quote::default().into(),
        );
        publisher.send(frame.unwrap(), 0).unwrap();
    }
    let (status, stdout, stderr) = proc.wait(Duration::from_secs(10));
    assert_eq!(status.code(), Some(0), "{stderr}");
    assert_eq!(all_row(&stdout, 1), 100, "{stdout}");
    assert_eq!(all_row(&stdout, 3), 50, "{stdout}");
    assert_eq!(counter(&stdout, "quotes"), 50, "{stdout}");
    // Logged, but rate-limited: far fewer lines than bad frames.
    let logged = stderr
        .lines()
        .filter(|l| l.contains("malformed frame"))
        .count();
    assert!((1..=3).contains(&logged), "{logged} log lines:\n{stderr}");
}

#[test]
fn nic_connects_through_the_named_interface() {
    let ctx = zmq::Context::new();
    let handle = Feed::start(&tickbox_auth::Gate::open(&ctx), feed(1, 2_000)).unwrap();
    let endpoint = handle.endpoints().join(",");
    let (proc, metrics) = subscribe(&[
        "subscribe",
        "--connect",
        &endpoint,
        "--nic",
        "lo",
        "--duration",
        "30s",
    ]);
    let report = handle.join().unwrap();
    await_received(&metrics, sent_frames(&report));
    proc.interrupt();
    let (status, stdout, stderr) = proc.wait(Duration::from_secs(10));
    assert_eq!(status.code(), Some(0), "{stderr}");
    assert_eq!(counter(&stdout, "quotes"), sent_data(&report).0, "{stdout}");
}

#[test]
fn bad_arguments_are_errors_not_panics() {
    for args in [
        &["subscribe"][..],
        &[
            "subscribe",
            "--connect",
            "tcp://127.0.0.1:1",
            "--max-lateness",
            "fast",
        ],
        &[
            "subscribe",
            "--connect",
            "tcp://127.0.0.1:1",
            "--gap-policy",
            "maybe",
        ],
        &["subscribe", "--connect", "ipc:///tmp/x", "--nic", "lo"],
        &[
            "subscribe",
            "--connect",
            "tcp://127.0.0.1:1,tcp://127.0.0.1:2",
            "--nic",
            "a,b,c",
        ],
    ] {
        let (status, _out, err) = Captured::spawn(args).wait(Duration::from_secs(10));
        assert!(
            matches!(status.code(), Some(1) | Some(2)),
            "{args:?}: {status:?}\n{err}"
        );
        assert!(!err.contains("panicked"), "{err}");
    }
}
