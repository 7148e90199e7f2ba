//! Batched replay: records packed into `#B` batch frames reach a batch-aware subscriber exactly as the same replay
//! sends them one per message; a subscriber with a topic prefix (or one that does not read batches) keeps getting
//! single frames, so prefix filtering and old readers keep working.

use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

use tickbox_journal::{Reader, Writer, WriterOptions};
use tickbox_recorder::{Recorder, ReplayOptions, ReplayStats, Replayer, Speed};
use tickbox_wire::{
    batch_records, encode_to_vec, is_batch, Flags, Header, Kind, MessageRef, Quote, SystemClock,
    Trade, BATCH_TOPIC,
};

const SESSION: u64 = 1_767_000_000_000_000_000;
const T0: u64 = 1_767_364_200_000_000_000;

/// Publishers 1 and 2, each 1..=n, alternating quotes (XNAS, XLON) and trades. Records come in bursts of 10 that
/// share a capture time, bursts 5 ms apart (so a paced replay has ticks to batch within).
fn journal(path: &std::path::Path, n: u64) -> u64 {
    let mut w = Writer::open(path, &WriterOptions::ring(16 << 20)).unwrap();
    let mut rec = Recorder::new(&mut w).unwrap();
    let mut batch = w.batch();
    let mut count = 0u64;
    for seq in 1..=n {
        for publisher in [1u32, 2] {
            let burst = count / 10;
            let t = T0 + burst * 5_000_000;
            let frame = match seq % 3 {
                0 => encode_to_vec(
                    &format!("T.XNAS.S{}", seq % 7),
                    &Header::live(Kind::Trade, publisher, seq, t).with_session(SESSION),
                    &Trade {
                        trade_id: seq,
                        ..Trade::default()
                    }
                    .into(),
                ),
                r => encode_to_vec(
                    &format!("Q.{}.S{}", if r == 1 { "XNAS" } else { "XLON" }, seq % 5),
                    &Header::live(Kind::Quote, publisher, seq, t).with_session(SESSION),
                    &Quote {
                        instrument_id: seq as u32,
                        bid_size: publisher,
                        ..Quote::default()
                    }
                    .into(),
                ),
            }
            .unwrap();
            rec.on_frame(&mut batch, t, &frame).unwrap();
            count += 1;
        }
    }
    batch.commit().unwrap();
    rec.after_commit(&mut w).unwrap();
    count
}

/// What a record is, send time aside (the replay stamps its own): topic, publisher, sequence, origin time, flags,
/// payload bytes.
type Row = (String, u32, u64, u64, u16, Vec<u8>);

/// A record as received: what it is, and the send time the replay stamped on it.
type Received = (Row, u64);

fn row(frame: &[u8]) -> Received {
    let m = MessageRef::decode(frame).unwrap();
    let h = m.header();
    assert!(h.flags.contains(Flags::REPLAY));
    assert!(h.send_time_ns > 1_600_000_000_000_000_000, "replay's clock");
    (
        (
            m.topic().to_string(),
            h.publisher_id,
            h.sequence,
            h.origin_time_ns,
            h.flags.0,
            m.payload_bytes().to_vec(),
        ),
        h.send_time_ns,
    )
}

/// A SUB on `ep` with these subscriptions; linger 0 so the test never waits on it.
fn sub(ctx: &zmq::Context, ep: &str, prefixes: &[&[u8]]) -> zmq::Socket {
    let s = ctx.socket(zmq::SUB).unwrap();
    s.set_linger(0).unwrap();
    s.set_rcvhwm(0).unwrap();
    for p in prefixes {
        s.set_subscribe(p).unwrap();
    }
    s.connect(ep).unwrap();
    s
}

/// Receives until `want` records (heartbeats aside) arrived or 10 s passed. Returns the records, and per message
/// received, whether it was a batch and the records it carried.
/// One subscriber's haul: every record in order, and the records of each message it received.
type Haul = (Vec<Row>, Vec<Vec<Received>>);

fn receive(s: &zmq::Socket, want: usize) -> Haul {
    let (mut rows, mut messages) = (Vec::new(), Vec::new());
    let deadline = Instant::now() + Duration::from_secs(10);
    while rows.len() < want && Instant::now() < deadline {
        if s.poll(zmq::POLLIN, 100).unwrap() == 0 {
            continue;
        }
        let f = s.recv_bytes(0).unwrap();
        let carried: Vec<Received> = if is_batch(&f) {
            let records = batch_records(&f).unwrap();
            assert!(records.declared_count() >= 2, "a lone record goes alone");
            records.map(|r| row(r.unwrap())).collect()
        } else if MessageRef::decode(&f).unwrap().kind() == Kind::Heartbeat {
            continue;
        } else {
            vec![row(&f)]
        };
        rows.extend(carried.iter().map(|r| r.0.clone()));
        messages.push(carried);
    }
    (rows, messages)
}

fn replay(
    ctx: &zmq::Context,
    path: &std::path::Path,
    speed: Speed,
    batch: u16,
    subscriptions: &[&[&[u8]]],
    expect: usize,
    wants: &[usize],
) -> (ReplayStats, Vec<Haul>) {
    let mut replayer = Replayer::bind(
        &tickbox_auth::Gate::open(ctx),
        ReplayOptions {
            bind: vec!["tcp://127.0.0.1:*".into()],
            speed,
            heartbeat_interval: Duration::ZERO,
            batch_max_records: batch,
            ..ReplayOptions::default()
        },
    )
    .unwrap();
    let ep = replayer.endpoints()[0].clone();
    let subs: Vec<zmq::Socket> = subscriptions.iter().map(|p| sub(ctx, &ep, p)).collect();
    // The batch opt-in is not a subscriber of its own.
    let total: u64 = subscriptions
        .iter()
        .flat_map(|p| p.iter())
        .filter(|p| **p != BATCH_TOPIC.as_bytes())
        .count() as u64;
    let stop = AtomicBool::new(false);
    assert!(replayer
        .wait_subscribers(total, Some(Duration::from_secs(10)), &stop)
        .unwrap());
    let mut reader = Reader::open(path).unwrap();
    let stats = replayer
        .run(&mut reader, &SystemClock, &stop, |_| {})
        .unwrap();
    assert_eq!(stats.sent, expect as u64, "{stats:?}");
    // Received while the replayer (and its XPUB's queues) is still alive.
    let got = subs
        .iter()
        .zip(wants)
        .map(|(s, &w)| receive(s, w))
        .collect();
    (stats, got)
}

/// A batch-aware reader: the opt-in first, so a replayer that counts the "" as a subscriber already knows.
const AWARE: &[&[u8]] = &[BATCH_TOPIC.as_bytes(), b""];

#[test]
fn batched_and_single_replays_deliver_the_same_records_in_the_same_order() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("j.tbj");
    let n = journal(&path, 500) as usize;
    let ctx = zmq::Context::new();

    let (batched, got) = replay(&ctx, &path, Speed::Max, 64, &[AWARE], n, &[n]);
    let (rows_b, messages_b) = &got[0];
    let (single, got) = replay(&ctx, &path, Speed::Max, 1, &[AWARE], n, &[n]);
    let (rows_s, messages_s) = &got[0];

    assert_eq!(rows_b.len(), n);
    assert_eq!(rows_b, rows_s, "same records, same order");
    // The journal's own order, per publisher gap-free.
    for p in [1u32, 2] {
        let seqs: Vec<u64> = rows_b.iter().filter(|r| r.1 == p).map(|r| r.2).collect();
        assert_eq!(seqs, (1..=(n as u64 / 2)).collect::<Vec<_>>());
    }
    assert_eq!(single.batches_sent, 0);
    assert_eq!(single.frames_sent, n as u64);
    assert_eq!(messages_s.len(), n);
    assert!(batched.batches_sent > 0, "{batched:?}");
    assert_eq!(batched.frames_sent, messages_b.len() as u64);
    assert!(
        batched.frames_sent * 20 <= n as u64,
        "at --speed max most messages carry many records: {batched:?}"
    );
    assert!(messages_b.iter().all(|m| m.len() <= 64));
    assert_eq!(
        batched.bytes, single.bytes,
        "record bytes, not message bytes"
    );
    assert_eq!(batched.per_shard, vec![n as u64]);
}

#[test]
fn a_prefix_subscriber_gets_only_single_frames_of_its_prefix() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("j.tbj");
    let n = journal(&path, 150) as usize;
    let ctx = zmq::Context::new();

    // A batch-aware subscriber and a prefix subscriber on the same shard: nothing may be batched. The prefix
    // takes the XNAS quotes: sequences 1, 4, 7, ... of each publisher.
    let xnas = 2 * (1..=150u64).filter(|s| s % 3 == 1).count();
    let (stats, got) = replay(
        &ctx,
        &path,
        Speed::Max,
        64,
        &[AWARE, &[b"Q.XNAS."]],
        n,
        &[n, xnas],
    );
    assert_eq!(stats.batches_sent, 0, "{stats:?}");
    assert_eq!(stats.frames_sent, n as u64);
    let (all, messages) = &got[0];
    assert_eq!(all.len(), n);
    assert!(messages.iter().all(|m| m.len() == 1));
    let (prefixed, messages) = &got[1];
    assert!(messages.iter().all(|m| m.len() == 1), "single frames only");
    let expected: Vec<Row> = all
        .iter()
        .filter(|r| r.0.starts_with("Q.XNAS."))
        .cloned()
        .collect();
    assert_eq!(expected.len(), xnas);
    assert_eq!(prefixed, &expected);
}

#[test]
fn a_subscriber_that_does_not_read_batches_gets_single_frames() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("j.tbj");
    let n = journal(&path, 100) as usize;
    let ctx = zmq::Context::new();
    let (stats, got) = replay(&ctx, &path, Speed::Max, 64, &[&[b""]], n, &[n]);
    assert_eq!(stats.batches_sent, 0, "{stats:?}");
    assert_eq!(got[0].0.len(), n);
    assert!(got[0].1.iter().all(|m| m.len() == 1));
}

#[test]
fn a_paced_replay_batches_only_records_due_at_the_same_tick() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("j.tbj");
    // 200 records in bursts of 10 that share a capture time, 5 ms apart: 100 ms at 1x.
    let n = journal(&path, 100) as usize;
    let ctx = zmq::Context::new();
    let started = Instant::now();
    let (stats, got) = replay(&ctx, &path, Speed::Times(1.0), 64, &[AWARE], n, &[n]);
    assert!(started.elapsed() >= Duration::from_millis(90), "paced");
    let (rows, messages) = &got[0];
    assert_eq!(rows.len(), n);
    assert!(stats.batches_sent > 0, "{stats:?}");
    // A batch holds only records that were due when it was stamped: a record's due time is the anchor (the first
    // record's send time) plus its capture offset; the pacer sends what is due within its 200 us window. A
    // replay that fell behind (a busy machine) legitimately batches several bursts, all overdue.
    let first_send = messages[0][0].1;
    let window = 200_000;
    for m in messages {
        for (r, send) in m {
            let due = first_send + (r.3 - T0);
            assert!(
                due <= send + window,
                "sent {} ns early in a batch of {}",
                due - send,
                m.len()
            );
        }
        // One send time per batch: the clock is read once per tick.
        assert!(m.iter().all(|r| r.1 == m[0].1));
    }
    let (_, got_single) = replay(&ctx, &path, Speed::Times(4.0), 1, &[AWARE], n, &[n]);
    assert_eq!(rows, &got_single[0].0);
}

#[test]
fn heartbeats_follow_the_batched_records_they_name() {
    // Idle heartbeats and the final one name the last sequence sent: what is batched must be out before them,
    // or a subscriber would count the batched records as missing. Paced, so heartbeats fall between ticks.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("j.tbj");
    let n = journal(&path, 60) as usize;
    let ctx = zmq::Context::new();
    let mut replayer = Replayer::bind(
        &tickbox_auth::Gate::open(&ctx),
        ReplayOptions {
            bind: vec!["tcp://127.0.0.1:*".into()],
            speed: Speed::Times(1.0),
            heartbeat_interval: Duration::from_millis(2),
            batch_max_records: 64,
            ..ReplayOptions::default()
        },
    )
    .unwrap();
    let s = sub(&ctx, &replayer.endpoints()[0], AWARE);
    let stop = AtomicBool::new(false);
    assert!(replayer
        .wait_subscribers(1, Some(Duration::from_secs(10)), &stop)
        .unwrap());
    let mut reader = Reader::open(&path).unwrap();
    let stats = replayer
        .run(&mut reader, &SystemClock, &stop, |_| {})
        .unwrap();
    assert!(
        stats.batches_sent > 0 && stats.heartbeats_sent > 2,
        "{stats:?}"
    );
    let mut tracker = tickbox_wire::SequenceTracker::new();
    let (mut data, mut final_hbs) = (0usize, 0usize);
    let deadline = Instant::now() + Duration::from_secs(10);
    // Every record, then the final heartbeat of each of the two publishers.
    while (data < n || final_hbs < 2) && Instant::now() < deadline {
        if s.poll(zmq::POLLIN, 100).unwrap() == 0 {
            continue;
        }
        let f = s.recv_bytes(0).unwrap();
        let frames: Vec<&[u8]> = if is_batch(&f) {
            batch_records(&f).unwrap().map(Result::unwrap).collect()
        } else {
            vec![&f[..]]
        };
        for frame in frames {
            let m = MessageRef::decode(frame).unwrap();
            let ev = tracker.on_message(&m);
            assert!(!ev.is_loss(), "false gap: {ev:?}");
            if m.kind() == Kind::Heartbeat {
                final_hbs += usize::from(data == n && m.header().sequence == n as u64 / 2);
            } else {
                data += 1;
            }
        }
    }
    assert_eq!((data, final_hbs), (n, 2));
    assert_eq!(tracker.totals().missing, 0);
}
