//! Clock skew as real processes: one publisher's clock 1.5 s behind ours and one 10 s ahead (headers crafted on
//! a raw XPUB). `tickbox subscribe` reports each offset; the strict snail fires on the behind publisher's on-time
//! messages, the skew-tolerant one only on real lateness.

use crate::common;

use std::time::{Duration, Instant};

use common::Captured;

use tickbox_wire::{encode_to_vec, now_ns, Header, Kind, Quote};

const MS: i64 = 1_000_000;
const BEHIND: u32 = 1;
const AHEAD: u32 = 2;
const BEHIND_BY: i64 = 1_500 * MS;
const AHEAD_BY: i64 = 10_000 * MS;
const SNAIL_EXIT: i32 = 3;

struct SkewedPublishers {
    socket: zmq::Socket,
    endpoint: String,
    seq: [u64; 2],
}

impl SkewedPublishers {
    fn new(ctx: &zmq::Context) -> Self {
        let tickbox_testkit::FakePublisher { socket, endpoint } =
            tickbox_testkit::FakePublisher::bind(ctx);
        SkewedPublishers {
            socket,
            endpoint,
            seq: [0; 2],
        }
    }

    fn await_subscription(&self) {
        self.socket.set_rcvtimeo(10_000).unwrap();
        self.socket
            .recv_bytes(0)
            .expect("subscriber connects within 10 s");
    }

    /// Sends one quote from `publisher`, stamped by its skewed clock, `late` before it is sent.
    fn send(&mut self, publisher: u32, late: i64) -> u64 {
        let skew = if publisher == BEHIND {
            -BEHIND_BY
        } else {
            AHEAD_BY
        };
        let stamp = (now_ns() as i64 + skew - late) as u64;
        let slot = &mut self.seq[(publisher - 1) as usize];
        *slot += 1;
        let header = Header::live(Kind::Quote, publisher, *slot, stamp).with_session(77);
        let topic = format!("Q.XNAS.P{publisher}");
        let frame = encode_to_vec(&topic, &header, &Quote::default().into()).unwrap();
        self.socket.send(frame, 0).unwrap();
        *slot
    }
}

/// Spawns `subscribe` with `extra` flags; feeds both publishers on time every 2 ms (and, at `inject_after`, one
/// message of the ahead publisher really 2 s late) until the process exits; returns its output and the late
/// message's sequence.
fn run(extra: &[&str], inject_after: Option<Duration>) -> (i32, String, String, u64) {
    let ctx = zmq::Context::new();
    let mut p = SkewedPublishers::new(&ctx);
    let mut args = vec![
        "subscribe",
        "--connect",
        &p.endpoint,
        "--max-lateness",
        "500ms",
        "--duration",
        "1500ms",
        "--json",
    ];
    args.extend_from_slice(extra);
    let mut proc = Captured::spawn(&args);
    p.await_subscription();
    let started = Instant::now();
    let mut late_seq = 0;
    while proc.exited().is_none() && started.elapsed() < Duration::from_secs(10) {
        p.send(BEHIND, 0);
        p.send(AHEAD, 0);
        if inject_after.is_some_and(|d| started.elapsed() >= d) && late_seq == 0 {
            late_seq = p.send(AHEAD, 2_000 * MS);
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    let (status, stdout, stderr) = proc.wait(Duration::from_secs(10));
    (status.code().unwrap_or(-1), stdout, stderr, late_seq)
}

fn summary(stdout: &str) -> serde_json::Value {
    let line = stdout
        .lines()
        .find(|l| l.starts_with('{'))
        .unwrap_or_else(|| panic!("no JSON on stdout:\n{stdout}"));
    serde_json::from_str(line).unwrap()
}

fn snail(stderr: &str) -> serde_json::Value {
    let line = stderr
        .lines()
        .find_map(|l| l.strip_prefix("SNAIL "))
        .unwrap_or_else(|| panic!("no SNAIL line:\n{stderr}"));
    serde_json::from_str(line).unwrap()
}

fn offset(v: &serde_json::Value, publisher: u32) -> i64 {
    v["clock_offsets"]
        .as_array()
        .unwrap()
        .iter()
        .find(|o| o["publisher"] == publisher)
        .unwrap_or_else(|| panic!("no offset for {publisher}: {v}"))["offset_ns"]
        .as_i64()
        .unwrap()
}

#[test]
fn offsets_are_reported_and_skew_tolerant_mode_ignores_them_for_on_time_messages() {
    let (code, stdout, stderr, _) = run(&["--snail-mode", "skew_tolerant"], None);
    assert_eq!(code, 0, "{stdout}\n{stderr}");
    let v = summary(&stdout);
    assert_eq!(v["snail_mode"], "skew_tolerant");
    // The minimum one-way delay: the skew plus the best loopback delay (well under 250 ms even when loaded).
    let behind = offset(&v, BEHIND);
    let ahead = offset(&v, AHEAD);
    assert!(
        (BEHIND_BY..BEHIND_BY + 250 * MS).contains(&behind),
        "behind offset {behind}"
    );
    assert!(
        (-AHEAD_BY..-AHEAD_BY + 250 * MS).contains(&ahead),
        "ahead offset {ahead}"
    );
    // Per publisher, the JSON carries the same offsets.
    let publishers = v["publishers"].as_array().unwrap();
    assert!(publishers
        .iter()
        .any(|p| p["publisher"] == BEHIND && p["clock_offset_ns"].as_i64() == Some(behind)));
    // Each publisher's offset is beyond the default 100 ms bound: warned once each, not once per message.
    let warnings: Vec<&str> = stderr
        .lines()
        .filter(|l| l.contains("clock offset beyond"))
        .collect();
    assert_eq!(warnings.len(), 2, "{stderr}");
    assert!(v["received"].as_u64().unwrap() > 100, "{v}");
}

#[test]
fn skew_tolerant_snail_fires_on_real_lateness_of_a_publisher_whose_clock_is_ahead() {
    let (code, stdout, stderr, late_seq) = run(
        &["--snail-mode", "skew_tolerant"],
        Some(Duration::from_millis(300)),
    );
    assert_eq!(code, SNAIL_EXIT, "{stdout}\n{stderr}");
    let fatal = snail(&stderr);
    assert_eq!(fatal["publisher"], AHEAD, "{fatal}");
    assert_eq!(fatal["sequence"], late_seq, "{fatal}");
    let lateness = fatal["lateness_ns"].as_i64().unwrap();
    assert!(
        (2_000 * MS - 250 * MS..2_000 * MS + 250 * MS).contains(&lateness),
        "lateness {lateness}"
    );
}

#[test]
fn strict_snail_fires_on_the_behind_publishers_on_time_messages_and_misses_the_ahead_ones_lateness()
{
    let (code, stdout, stderr, _) = run(&["--snail-mode", "strict"], None);
    assert_eq!(code, SNAIL_EXIT, "{stdout}\n{stderr}");
    let fatal = snail(&stderr);
    assert_eq!(fatal["publisher"], BEHIND, "{fatal}");
    // The same run as above but strict, and without the behind publisher's noise: the really late message of
    // the ahead publisher hides behind its clock (this is what skew_tolerant exists for).
    let ctx = zmq::Context::new();
    let mut p = SkewedPublishers::new(&ctx);
    let mut proc = Captured::spawn(&[
        "subscribe",
        "--connect",
        &p.endpoint,
        "--max-lateness",
        "500ms",
        "--duration",
        "800ms",
        "--snail-mode",
        "strict",
        "--json",
    ]);
    p.await_subscription();
    let started = Instant::now();
    let mut injected = false;
    while proc.exited().is_none() && started.elapsed() < Duration::from_secs(10) {
        p.send(AHEAD, 0);
        if !injected && started.elapsed() > Duration::from_millis(200) {
            p.send(AHEAD, 2_000 * MS);
            injected = true;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    let (status, stdout, stderr) = proc.wait(Duration::from_secs(10));
    assert!(injected);
    assert_eq!(status.code(), Some(0), "{stdout}\n{stderr}");
}
