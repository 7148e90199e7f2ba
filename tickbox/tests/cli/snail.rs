//! The Suicidal Snail as real processes: `tickbox subscribe` with a deliberately slow worker dies with the
//! documented exit code and says why on stderr; a fast one never does.

use crate::common;

use std::time::{Duration, Instant};

use common::Captured;

use tickbox_wire::{encode_to_vec, now_ns, Header, Kind, Quote};

const SNAIL_EXIT: i32 = 3;

struct Publisher {
    socket: zmq::Socket,
    endpoint: String,
    seq: u64,
}

impl Publisher {
    fn new(ctx: &zmq::Context) -> Self {
        let tickbox_testkit::FakePublisher { socket, endpoint } =
            tickbox_testkit::FakePublisher::bind(ctx);
        Publisher {
            socket,
            endpoint,
            seq: 0,
        }
    }

    fn await_subscription(&self) {
        self.socket.set_rcvtimeo(10_000).unwrap();
        let sub = self
            .socket
            .recv_bytes(0)
            .expect("subscriber connects within 10 s");
        assert_eq!(sub.first(), Some(&1));
    }

    fn send_sent_at(&mut self, send_time_ns: u64) {
        self.seq += 1;
        let header = Header::live(Kind::Quote, 1, self.seq, send_time_ns);
        let frame = encode_to_vec("Q.XNAS.AAPL", &header, &Quote::default().into()).unwrap();
        self.socket.send(frame, zmq::DONTWAIT).unwrap();
    }
}

/// The unsigned integer value of `"field":N` in a flat JSON object.
fn json_u64(json: &str, field: &str) -> u64 {
    let key = format!("\"{field}\":");
    let at = json
        .find(&key)
        .unwrap_or_else(|| panic!("{field} missing in {json}"))
        + key.len();
    json[at..]
        .chars()
        .take_while(char::is_ascii_digit)
        .collect::<String>()
        .parse()
        .unwrap()
}

#[test]
fn a_slow_worker_makes_the_subscriber_die_with_the_snail_exit_code() {
    let ctx = zmq::Context::new();
    let mut publisher = Publisher::new(&ctx);
    let mut proc = Captured::spawn(&[
        "subscribe",
        "--connect",
        &publisher.endpoint,
        "--workers",
        "1",
        // The backlog in a queue between shard and worker is what this is about (one worker on one shard runs
        // inline otherwise, its backlog waiting in the SUB socket and judged at the shard).
        "--handoff",
        "ring",
        "--max-lateness",
        "1s",
        "--debug-worker-delay",
        "5ms",
        "--duration",
        "15s",
    ]);
    publisher.await_subscription();
    // 1,000 msg/s, in bursts of 64 every 64 ms, into a worker that manages 200 msg/s. A burst fills a parcel,
    // which goes to the worker's queue, and the queue holds 15 of them (`handoff_hwm` 1,000 / 64 records), nearly
    // 5 s of that worker's work: the backlog waits in the queue, where only the worker sees it, while the shard
    // reads each burst as it comes. The worker sees 1 s of lateness about 1.2 s in. Sent one at a time, each
    // record was a parcel of its own, the queue was full after 15 records (75 ms of work) and the backlog waited
    // in the socket, where the shard judges it too: which stage fired first was then up to which thread a loaded
    // machine ran first (a full test run on 2 cores once held the shard back 480 ms).
    let deadline = Instant::now() + Duration::from_secs(10);
    while proc.exited().is_none() && Instant::now() < deadline {
        for _ in 0..64 {
            publisher.send_sent_at(now_ns());
        }
        std::thread::sleep(Duration::from_millis(64));
    }
    let (status, stdout, stderr) = proc.wait(Duration::from_secs(5));
    assert_eq!(
        status.code(),
        Some(SNAIL_EXIT),
        "stdout:\n{stdout}\nstderr:\n{stderr}"
    );
    let snail_line = stderr
        .lines()
        .find(|l| l.starts_with("SNAIL {"))
        .unwrap_or_else(|| panic!("no SNAIL line in:\n{stderr}"));
    let json = &snail_line["SNAIL ".len()..];
    assert!(json.contains("\"reason\":\"snail\""), "{json}");
    assert!(
        json.contains("\"stage\":\"worker\""),
        "the backlog is only visible at dequeue: {json}"
    );
    assert!(json.contains("\"threshold_ns\":1000000000"), "{json}");
    assert!(json.contains("\"topic\":\"Q.XNAS.AAPL\""), "{json}");
    assert!(json_u64(json, "lateness_ns") > 1_000_000_000, "{json}");
    let errors: Vec<&str> = stderr
        .lines()
        .filter(|l| l.contains("ERROR") && l.contains("Suicidal Snail"))
        .collect();
    assert_eq!(errors.len(), 1, "exactly one ERROR line:\n{stderr}");
    assert!(
        errors[0].contains("threshold 1s") && errors[0].contains("publisher 1"),
        "{}",
        errors[0]
    );
    assert!(stdout.contains("stopped by Suicidal Snail"), "{stdout}");
}

#[test]
fn a_fast_worker_never_trips_the_snail() {
    let ctx = zmq::Context::new();
    let mut publisher = Publisher::new(&ctx);
    let proc = Captured::spawn(&[
        "subscribe",
        "--connect",
        &publisher.endpoint,
        "--workers",
        "2",
        "--max-lateness",
        "250ms",
        "--duration",
        "2s",
    ]);
    publisher.await_subscription();
    for i in 0..3_000 {
        publisher.send_sent_at(now_ns());
        if i % 10 == 0 {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    let (status, stdout, stderr) = proc.wait(Duration::from_secs(10));
    assert_eq!(
        status.code(),
        Some(0),
        "stdout:\n{stdout}\nstderr:\n{stderr}"
    );
    assert!(!stderr.contains("SNAIL"), "{stderr}");
    let all = stdout
        .lines()
        .find(|l| l.trim_start().starts_with("all "))
        .expect("summary row");
    let received: u64 = all.split_whitespace().nth(1).unwrap().parse().unwrap();
    assert_eq!(received, 3_000, "{stdout}");
}

#[test]
fn a_message_already_late_on_arrival_trips_the_shard_check() {
    let ctx = zmq::Context::new();
    let mut publisher = Publisher::new(&ctx);
    let proc = Captured::spawn(&[
        "subscribe",
        "--connect",
        &publisher.endpoint,
        "--max-lateness",
        "1s",
        "--duration",
        "10s",
    ]);
    publisher.await_subscription();
    publisher.send_sent_at(now_ns());
    publisher.send_sent_at(now_ns() - 5_000_000_000);
    let (status, _stdout, stderr) = proc.wait(Duration::from_secs(10));
    assert_eq!(status.code(), Some(SNAIL_EXIT), "{stderr}");
    assert!(
        stderr.contains("\"stage\":\"shard\"") && stderr.contains("\"sequence\":2"),
        "{stderr}"
    );
}
