//! `tickbox replay --broker EP --await-start` driven over Majordomo (`tickbox.replay.start`/`.stop`/`.status`),
//! and `tickbox record --broker EP` answering `tickbox.record.status`, as real processes.

use crate::common;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{endpoint_in, spawn_and_read, KillOnDrop, TempDir, TICKBOX};
use tickbox_journal::{Writer, WriterOptions};
use tickbox_wire::{encode_to_vec, Flags, Header, Kind, MessageRef, Payload, Quote};

/// Spawns `tickbox ARGS` (stdin closed) and returns it with the first `tcp://` endpoint it prints on stdout
/// or, with `on_stderr`, stderr.
fn spawn_printing_endpoint(args: &[&str], on_stderr: bool) -> (KillOnDrop, String) {
    let mut cmd = Command::new(TICKBOX);
    cmd.args(args).stdin(Stdio::null());
    if on_stderr {
        cmd.stdout(Stdio::null()).stderr(Stdio::piped());
    } else {
        cmd.stdout(Stdio::piped()).stderr(Stdio::null());
    }
    spawn_and_read(&mut cmd, on_stderr, endpoint_in)
}

/// `tickbox call`: (exit code, reply text).
fn call(broker: &str, service: &str, body: &[&str]) -> (i32, String) {
    let (code, reply) = common::call_service(broker, service, body, 2000);
    (code, reply.trim().to_owned())
}

/// Calls `service` until `ok(reply)` holds (workers register asynchronously); returns that reply.
fn call_until(broker: &str, service: &str, body: &[&str], ok: impl Fn(&str) -> bool) -> String {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (code, reply) = call(broker, service, body);
        if code == 0 && ok(&reply) {
            return reply;
        }
        assert!(
            Instant::now() < deadline,
            "{service} {body:?}: exit {code}, reply {reply:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn status(
    broker: &str,
    service: &str,
    ok: impl Fn(&serde_json::Value) -> bool,
) -> serde_json::Value {
    let reply = call_until(broker, service, &[], |r| {
        serde_json::from_str::<serde_json::Value>(r).is_ok_and(|v| ok(&v))
    });
    serde_json::from_str(&reply).unwrap()
}

/// A journal of `n` quotes, instrument id = journal sequence, capture times 100 ms apart (so speed 1 takes
/// `n / 10` seconds and `max` takes none).
fn write_journal(path: &Path, n: u64) {
    let mut w = Writer::open(path, &WriterOptions::ring(4 << 20)).unwrap();
    let t0 = 1_767_364_200_000_000_000u64;
    for i in 0..n {
        let t = t0 + i * 100_000_000;
        let frame = |id: u64| {
            let q = Quote {
                instrument_id: id as u32,
                bid_px: id as i64,
                ..Quote::default()
            };
            encode_to_vec(
                &format!("Q.XNAS.S{}", id % 7),
                &Header::live(Kind::Quote, 7, id, t),
                &q.into(),
            )
            .unwrap()
        };
        // Sequences start at 1 in a fresh journal; the frame carries its own so the test can check order.
        let seq = w.append(t, &frame(i + 1)).unwrap();
        assert_eq!(seq, i + 1);
    }
}

/// Data frames' instrument ids (heartbeats skipped) until `n` arrived or `limit` passed.
fn receive(sub: &zmq::Socket, n: usize, limit: Duration) -> Vec<u64> {
    let mut got = Vec::new();
    let deadline = Instant::now() + limit;
    while got.len() < n && Instant::now() < deadline {
        if sub.poll(zmq::POLLIN, 50).unwrap() == 0 {
            continue;
        }
        let frame = sub.recv_bytes(0).unwrap();
        let msg = MessageRef::decode(&frame).unwrap();
        if msg.kind() == Kind::Heartbeat {
            continue;
        }
        assert!(msg.header().flags.contains(Flags::REPLAY));
        match msg.payload().unwrap() {
            Payload::Quote(q) => got.push(q.instrument_id as u64),
            other => panic!("unexpected {other:?}"),
        }
    }
    got
}

#[test]
fn replay_waits_for_start_and_obeys_start_stop_over_the_broker() {
    let dir = TempDir::new("cli-replay-control-control");
    let journal = dir.0.join("j.tbj");
    write_journal(&journal, 200);
    let (_broker, broker) =
        spawn_printing_endpoint(&["broker", "--bind", "tcp://127.0.0.1:*"], false);
    let (_replay, shard) = spawn_printing_endpoint(
        &[
            "replay",
            "--journal",
            journal.to_str().unwrap(),
            "--bind",
            "tcp://127.0.0.1:*",
            "--broker",
            &broker,
            "--await-start",
            "--speed",
            "max",
            "--wait-for-subscribers",
            "1",
            "--quiet",
        ],
        true,
    );
    let ctx = zmq::Context::new();
    let sub = ctx.socket(zmq::SUB).unwrap();
    sub.set_linger(0).unwrap();
    sub.set_rcvhwm(0).unwrap();
    sub.set_subscribe(b"").unwrap();
    sub.connect(&shard).unwrap();

    // Idle: nothing to stop, and nothing published.
    call_until(&broker, "tickbox.replay.stop", &[], |r| {
        r == "409 not running"
    });
    let idle = status(&broker, "tickbox.replay.status", |v| v["state"] == "idle");
    assert_eq!(idle["runs"], 0);
    assert!(receive(&sub, 1, Duration::from_millis(300)).is_empty());

    // Bad bodies are refused with the reason and start nothing.
    let reply = call_until(&broker, "tickbox.replay.start", &["speed=fast"], |r| {
        r.starts_with("400")
    });
    assert!(reply.contains("speed"), "{reply}");
    let (_, reply) = call(
        &broker,
        "tickbox.replay.start",
        &["from=seq:50", "to=seq:10"],
    );
    assert!(reply.starts_with("400 empty range"), "{reply}");
    let (_, reply) = call(&broker, "tickbox.replay.start", &["pace=1"]);
    assert!(reply.starts_with("400 unknown key"), "{reply}");

    // A start replays every record, in journal order; status then says done.
    let (code, reply) = call(&broker, "tickbox.replay.start", &[]);
    assert_eq!(
        (code, reply.as_str()),
        (0, "200 started speed max from start to end")
    );
    let got = receive(&sub, 200, Duration::from_secs(10));
    assert_eq!(got, (1..=200).collect::<Vec<_>>());
    let done = status(&broker, "tickbox.replay.status", |v| {
        v["state"] == "done" && v["runs"] == 1
    });
    assert_eq!(done["sent"], 200, "{done}");
    assert_eq!(done["position_seq"], 200, "{done}");
    assert_eq!(done["stopped"], false, "{done}");
    assert_eq!(
        call(&broker, "tickbox.replay.stop", &[]).1,
        "409 not running"
    );

    // Startable again, with a range of its own.
    let (_, reply) = call(
        &broker,
        "tickbox.replay.start",
        &["from=seq:151 to=seq:161"],
    );
    assert!(
        reply.starts_with("200 started speed max from seq:151"),
        "{reply}"
    );
    assert_eq!(
        receive(&sub, 10, Duration::from_secs(10)),
        (151..161).collect::<Vec<_>>()
    );
    status(&broker, "tickbox.replay.status", |v| {
        v["state"] == "done" && v["runs"] == 2
    });

    // At original pacing the whole journal takes 20 s: a second start is refused, stop cuts it short.
    let (_, reply) = call(&broker, "tickbox.replay.start", &["speed=1"]);
    assert!(reply.starts_with("200 started speed 1x"), "{reply}");
    let first = receive(&sub, 3, Duration::from_secs(5));
    assert_eq!(first, vec![1, 2, 3]);
    assert_eq!(
        call(&broker, "tickbox.replay.start", &[]).1,
        "409 already running"
    );
    assert_eq!(call(&broker, "tickbox.replay.stop", &[]).1, "200 stopped");
    let stopped = status(&broker, "tickbox.replay.status", |v| {
        v["state"] == "done" && v["runs"] == 3
    });
    assert_eq!(stopped["stopped"], true, "{stopped}");
    let sent = stopped["sent"].as_u64().unwrap();
    assert!((3..200).contains(&sent), "{stopped}");
    // Nothing more arrives after the stop beyond what was already sent.
    let tail = receive(&sub, 200, Duration::from_millis(500));
    assert_eq!(tail.len() as u64, sent - 3, "{stopped}");
}

#[test]
fn record_serves_its_status_through_the_broker() {
    let dir = TempDir::new("cli-replay-control-record");
    let journal = dir.0.join("rec.tbj");
    let (_broker, broker) =
        spawn_printing_endpoint(&["broker", "--bind", "tcp://127.0.0.1:*"], false);
    let (_feed, feed) = spawn_printing_endpoint(
        &[
            "feed",
            "--bind",
            "tcp://127.0.0.1:*",
            "--rate",
            "2000",
            "--duration",
            "15s",
        ],
        false,
    );
    let _record = KillOnDrop(
        Command::new(TICKBOX)
            .args([
                "record",
                "--connect",
                &feed,
                "--journal",
                journal.to_str().unwrap(),
                "--capacity",
                "4MiB",
                "--broker",
                &broker,
                "--quiet",
            ])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn tickbox record"),
    );
    let s = status(&broker, "tickbox.record.status", |v| {
        v["messages"].as_u64().is_some_and(|m| m > 0)
    });
    assert_eq!(s["component"], "record");
    assert_eq!(s["state"], "recording");
    assert_eq!(s["journal"], journal.display().to_string());
    assert_eq!(s["connect"][0], feed.as_str());
    assert!(s["bytes"].as_u64().unwrap() > 0, "{s}");
    let (first, last) = (
        s["first_seq"].as_u64().unwrap(),
        s["last_seq"].as_u64().unwrap(),
    );
    assert_eq!(last - first + 1, s["messages"].as_u64().unwrap(), "{s}");
}
