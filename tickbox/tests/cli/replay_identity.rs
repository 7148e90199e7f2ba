//! `tickbox replay` re-publishes a journal under its original identities (publisher id, session, sequence), gap
//! notices included, cached values consuming nothing; waits for a subscriber by default; and fails loudly when it
//! published to nobody. Real processes; the journals are written directly.

use crate::common;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{spawn_and_read, Background, TempDir, TICKBOX};
use tickbox_journal::{Writer, WriterOptions};
use tickbox_wire::{
    encode_to_vec, Flags, GapCause, GapNotice, Header, Kind, MessageRef, SequenceTracker,
};

const SESSION_A: u64 = 1_767_000_000_000_000_001;
const SESSION_B: u64 = 1_767_000_000_000_000_002;
const T0: u64 = 1_767_364_200_000_000_000;

fn quote(publisher: u32, session: u64, seq: u64) -> Vec<u8> {
    tickbox_testkit::quote(&format!("Q.XNAS.P{publisher}S{}", seq % 3), publisher, seq)
        .sent_at(T0 + seq)
        .session(session)
        .instrument(seq as u32)
        .frame()
}

fn notice(publisher: u32, session: u64, first: u64, last: u64) -> Vec<u8> {
    let n = GapNotice {
        first_missing: first,
        last_missing: last,
        detected_ns: T0,
        cause: GapCause::NotReceived,
    };
    encode_to_vec(
        &format!("G.{publisher}"),
        &Header::live(Kind::Gap, publisher, last, T0).with_session(session),
        &n.into(),
    )
    .unwrap()
}

/// Publisher 4 (session A): 1..=30 with 11..=15 lost (a gap notice where 16 arrived); publisher 9 (session B):
/// 1..=10, interleaved.
fn gappy_journal(path: &Path) {
    let mut w = Writer::open(path, &WriterOptions::ring(1 << 20)).unwrap();
    let mut t = T0;
    for seq in 1..=30u64 {
        t += 1_000;
        if seq == 16 {
            w.append(t, &notice(4, SESSION_A, 11, 15)).unwrap();
        }
        if !(11..=15).contains(&seq) {
            w.append(t, &quote(4, SESSION_A, seq)).unwrap();
        }
        if seq <= 10 {
            w.append(t, &quote(9, SESSION_B, seq)).unwrap();
        }
    }
}

/// Connects a SUB (everything) to `ep`.
fn sub(ctx: &zmq::Context, ep: &str) -> zmq::Socket {
    let s = ctx.socket(zmq::SUB).unwrap();
    s.set_linger(0).unwrap();
    s.set_rcvhwm(0).unwrap();
    s.set_subscribe(b"").unwrap();
    s.connect(ep).unwrap();
    s
}

fn replay_cmd(journal: &Path, ep: &str, extra: &[&str]) -> Command {
    let mut cmd = Command::new(TICKBOX);
    cmd.args([
        "replay",
        "--journal",
        journal.to_str().unwrap(),
        "--bind",
        ep,
        "--speed",
        "max",
        "--quiet",
        "--json",
    ])
    .args(extra)
    .stdin(Stdio::null());
    cmd
}

fn json_of(stdout: &[u8]) -> serde_json::Value {
    let text = String::from_utf8_lossy(stdout);
    let line = text
        .lines()
        .find(|l| l.starts_with('{'))
        .unwrap_or_else(|| panic!("no JSON in {text}"));
    serde_json::from_str(line).unwrap()
}

#[test]
fn replay_keeps_publisher_session_and_sequence_and_resends_gap_notices() {
    let dir = TempDir::new("cli-replay-identity");
    let journal = dir.0.join("gappy.tbj");
    gappy_journal(&journal);
    let ep = format!("ipc://{}/identity.sock", dir.0.display());
    let ctx = zmq::Context::new();
    let s = sub(&ctx, &ep);
    let replay = Background::spawn(replay_cmd(&journal, &ep, &["--wait-timeout", "10s"]));

    let mut tracker = SequenceTracker::new();
    let mut data: Vec<(u32, u64)> = Vec::new();
    let mut notices = Vec::new();
    let mut final_hb = [false, false];
    let deadline = Instant::now() + Duration::from_secs(15);
    while final_hb != [true, true] && Instant::now() < deadline {
        if s.poll(zmq::POLLIN, 50).unwrap() == 0 {
            continue;
        }
        let f = s.recv_bytes(0).unwrap();
        let m = MessageRef::decode(&f).unwrap();
        let h = *m.header();
        assert!(h.flags.contains(Flags::REPLAY), "{h:?}");
        let session = match h.publisher_id {
            4 => SESSION_A,
            9 => SESSION_B,
            other => panic!("publisher {other}: not an original identity"),
        };
        assert_eq!(h.session, session, "session kept");
        assert!(!tracker.on_message(&m).is_loss(), "false gap at {h:?}");
        match m.kind() {
            Kind::Quote => {
                assert_eq!(h.origin_time_ns, T0 + h.sequence, "origin time kept");
                assert!(
                    h.send_time_ns > T0 + 1_000_000_000,
                    "the replay's send time"
                );
                data.push((h.publisher_id, h.sequence));
            }
            Kind::Gap => notices.push((h.publisher_id, h.sequence)),
            Kind::Heartbeat => match (h.publisher_id, h.sequence) {
                (4, 30) => final_hb[0] = true,
                (9, 10) => final_hb[1] = true,
                _ => {}
            },
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(final_hb, [true, true], "a final heartbeat per publisher");
    let p4: Vec<u64> = data.iter().filter(|d| d.0 == 4).map(|d| d.1).collect();
    let p9: Vec<u64> = data.iter().filter(|d| d.0 == 9).map(|d| d.1).collect();
    assert_eq!(
        p4,
        (1..=30)
            .filter(|s| !(11..=15).contains(s))
            .collect::<Vec<_>>()
    );
    assert_eq!(p9, (1..=10).collect::<Vec<_>>());
    assert_eq!(notices, vec![(4, 15)]);
    let t = tracker.totals();
    assert_eq!(
        (t.received, t.missing, t.recorded_missing, t.duplicates),
        (35, 0, 5, 0),
        "{t:?}"
    );

    let out = replay.finish(Duration::from_secs(10));
    assert!(out.status.success(), "{out:?}");
    let v = json_of(&out.stdout);
    assert_eq!(v["sent"], 36, "{v}");
    assert_eq!(v["gap_notices"], 1, "{v}");
    assert_eq!(v["cached"], 0, "{v}");
    assert_eq!(v["publishers"], 2, "{v}");
    assert_eq!(v["subscribers"], 1, "{v}");
    assert_eq!(v["speed"], "max", "{v}");
    assert!(v["rate"].is_u64() && v["duration_ns"].is_u64(), "{v}");
}

/// An LVC recording: publisher 5's 1..=300 with 41 cached values (old sequences, CACHED) interleaved and one
/// recorded gap (101..=110 lost before the recorder).
fn lvc_journal(path: &Path) {
    let mut w = Writer::open(path, &WriterOptions::ring(4 << 20)).unwrap();
    let mut t = T0;
    for seq in 1..=300u64 {
        t += 1_000;
        if (101..=110).contains(&seq) {
            continue;
        }
        if seq == 111 {
            w.append(t, &notice(5, SESSION_A, 101, 110)).unwrap();
        }
        w.append(t, &quote(5, SESSION_A, seq)).unwrap();
        if seq % 7 == 0 {
            let mut c = quote(5, SESSION_A, seq / 3 + 1);
            tickbox_wire::set_flags_in_place(&mut c, Flags::CACHED).unwrap();
            w.append(t, &c).unwrap();
        }
    }
}

#[test]
fn lvc_recording_replays_into_a_gap_policy_die_subscriber_without_a_false_gap() {
    let dir = TempDir::new("cli-replay-lvc-die");
    let journal = dir.0.join("lvc.tbj");
    lvc_journal(&journal);
    let config = dir.0.join("die.toml");
    std::fs::write(&config, "[subscriber]\ngap_policy = \"die\"\n").unwrap();
    let ep = format!("ipc://{}/lvc.sock", dir.0.display());
    let replay = Background::spawn(replay_cmd(&journal, &ep, &["--wait-timeout", "10s"]));
    let mut cmd = Command::new(TICKBOX);
    cmd.args([
        "--config",
        config.to_str().unwrap(),
        "subscribe",
        "--connect",
        &ep,
        "--workers",
        "1",
        "--max-lateness",
        "10s",
        "--duration",
        "4s",
        "--json",
    ])
    .stdin(Stdio::null());
    let subscriber = Background::spawn(cmd);
    let out = replay.finish(Duration::from_secs(15));
    assert!(out.status.success(), "{out:?}");
    let r = json_of(&out.stdout);
    assert_eq!(
        (r["sent"].as_u64(), r["gap_notices"].as_u64()),
        (Some(290 + 41 + 1), Some(1)),
        "{r}"
    );
    assert_eq!(r["cached"], 41, "{r}");
    let out = subscriber.finish(Duration::from_secs(15));
    assert!(
        out.status.success(),
        "gap_policy = die must not fire: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let s = json_of(&out.stdout);
    assert_eq!(s["missing"], 0, "{s}");
    assert_eq!(s["recorded_gaps"], 10, "{s}");
}

#[test]
fn replay_to_nobody_exits_1_saying_so() {
    let dir = TempDir::new("cli-replay-nobody");
    let journal = dir.0.join("gappy.tbj");
    gappy_journal(&journal);
    let ep = format!("ipc://{}/nobody.sock", dir.0.display());
    let cmd = replay_cmd(&journal, &ep, &["--wait-for-subscribers", "0"]);
    let out = common::output_within(cmd, Duration::from_secs(10));
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("delivered to no subscriber"), "{err}");
    let v = json_of(&out.stdout);
    assert_eq!(
        (v["sent"].as_u64(), v["subscribers"].as_u64()),
        (Some(36), Some(0)),
        "{v}"
    );
    assert_eq!(v["delivered"], false);

    // Waiting (the default) for a subscriber that never comes is bounded, and says what it waited for.
    let cmd = replay_cmd(&journal, &ep, &["--wait-timeout", "300ms"]);
    let started = Instant::now();
    let out = common::output_within(cmd, Duration::from_secs(10));
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(started.elapsed() < Duration::from_secs(5));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("no subscriber within"), "{err}");
    assert!(out.stdout.is_empty(), "nothing replayed: {out:?}");
}

fn waiting_line(line: &str) -> Option<String> {
    line.contains("waiting for 1 subscriber")
        .then(|| line.to_owned())
}

#[test]
fn default_replay_waits_for_one_subscriber_who_then_gets_everything() {
    let dir = TempDir::new("cli-replay-wait");
    let journal = dir.0.join("many.tbj");
    {
        let mut w = Writer::open(&journal, &WriterOptions::ring(4 << 20)).unwrap();
        for seq in 1..=2_000u64 {
            w.append(T0 + seq, &quote(2, SESSION_A, seq)).unwrap();
        }
    }
    let ep = format!("ipc://{}/wait.sock", dir.0.display());
    let mut cmd = replay_cmd(&journal, &ep, &[]);
    cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
    // Ready (bound, waiting) before anyone connects: nothing is sent meanwhile.
    let (mut replay, _) = spawn_and_read(&mut cmd, true, waiting_line);
    std::thread::sleep(Duration::from_millis(200));
    assert!(replay.0.try_wait().unwrap().is_none(), "still waiting");
    let ctx = zmq::Context::new();
    let s = sub(&ctx, &ep);
    let mut got = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    while got.len() < 2_000 && Instant::now() < deadline {
        if s.poll(zmq::POLLIN, 50).unwrap() == 0 {
            continue;
        }
        let f = s.recv_bytes(0).unwrap();
        let m = MessageRef::decode(&f).unwrap();
        if m.kind() == Kind::Quote {
            got.push(m.header().sequence);
        }
    }
    assert_eq!(
        got,
        (1..=2_000).collect::<Vec<_>>(),
        "every message, from the first"
    );
    let status = replay.wait_exit(Duration::from_secs(10), "replay did not exit");
    assert!(status.success(), "{status:?}");
}
