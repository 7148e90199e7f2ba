//! The recorder accounts for every publisher sequence (gap notices where losses happened, tap events, duplicates,
//! cached values, the ledger in the journal's metadata), and the replayer re-publishes a journal under its original
//! identities so a subscriber's tracker tells recorded gaps from its own loss.

use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

use tickbox_journal::{Reader, Writer, WriterOptions};
use tickbox_recorder::{Recorder, ReplayOptions, Replayer, Speed};
use tickbox_wire::{
    encode_to_vec, Flags, GapCause, Header, Heartbeat, Kind, MessageRef, Payload, SequenceTracker,
    SystemClock,
};

const SESSION: u64 = 1_767_000_000_000_000_000;

fn quote(publisher: u32, seq: u64) -> Vec<u8> {
    tickbox_testkit::quote(&format!("Q.XNAS.S{}", seq % 5), publisher, seq)
        .session(SESSION)
        .instrument(seq as u32)
        .frame()
}

fn cached(publisher: u32, seq: u64) -> Vec<u8> {
    let mut f = quote(publisher, seq);
    tickbox_wire::set_flags_in_place(&mut f, Flags::CACHED).unwrap();
    f
}

fn heartbeat(publisher: u32, seq: u64) -> Vec<u8> {
    let hb = Heartbeat {
        interval_ns: 1,
        messages_sent: seq,
    };
    encode_to_vec(
        &format!("H.{publisher}"),
        &Header::live(Kind::Heartbeat, publisher, seq, seq).with_session(SESSION),
        &hb.into(),
    )
    .unwrap()
}

/// (kind, publisher, sequence, gap range) of a record.
type Row = (Kind, u32, u64, Option<(u64, u64)>);

/// Every record in a journal.
fn contents(path: &std::path::Path) -> Vec<Row> {
    let mut r = Reader::open(path).unwrap();
    let mut out = Vec::new();
    while let Some(rec) = r.next().unwrap() {
        let m = MessageRef::decode(rec.payload).unwrap();
        let gap = match m.payload().unwrap() {
            Payload::Gap(n) => {
                assert_eq!(n.cause, GapCause::NotReceived);
                assert_eq!(m.topic(), format!("G.{}", m.header().publisher_id));
                assert_eq!(m.header().session, SESSION);
                assert!(n.detected_ns > 1_600_000_000_000_000_000);
                Some((n.first_missing, n.last_missing))
            }
            _ => None,
        };
        out.push((m.kind(), m.header().publisher_id, m.header().sequence, gap));
    }
    out
}

#[test]
fn recorder_writes_a_gap_notice_where_the_loss_was_noticed() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("j.tbj");
    let mut w = Writer::open(&path, &WriterOptions::ring(1 << 20)).unwrap();
    let mut rec = Recorder::new(&mut w).unwrap();
    let stream: Vec<Vec<u8>> = vec![
        b"\x00\x01Q.".to_vec(), // tap subscription event
        quote(1, 1),
        quote(2, 10),
        quote(1, 2),
        quote(1, 5), // 3..=4 lost
        b"junk".to_vec(),
        quote(1, 5),  // duplicate: not written again
        cached(1, 2), // LVC cached value: written, consumes nothing
        quote(2, 11),
        heartbeat(2, 13), // 12..=13 lost (a trailing loss revealed by a heartbeat)
        quote(1, 6),
        b"\x00\x00Q.".to_vec(), // tap unsubscription event
    ];
    {
        let mut batch = w.batch();
        for (i, f) in stream.iter().enumerate() {
            rec.on_frame(&mut batch, 1_000 + i as u64, f).unwrap();
        }
        batch.commit().unwrap();
    }
    rec.after_commit(&mut w).unwrap();
    let s = rec.stats();
    assert_eq!(
        (
            s.recorded,
            s.missing,
            s.gap_events,
            s.invalid_frames,
            s.tap_events
        ),
        (6, 4, 2, 1, 2),
        "{s:?}"
    );
    assert_eq!((s.duplicates, s.cached, s.heartbeats), (1, 1, 1), "{s:?}");
    let p1 = s.publishers.iter().find(|r| r.publisher == 1).unwrap();
    let p2 = s.publishers.iter().find(|r| r.publisher == 2).unwrap();
    assert_eq!((p1.recorded, p1.missing, p1.gap_events), (4, 2, 1));
    assert_eq!((p2.recorded, p2.missing, p2.gap_events), (2, 2, 1));
    // Ledger identity for a publisher seen from its first sequence: recorded + missing = the span.
    assert_eq!(p1.recorded + p1.missing, 6);
    drop(rec);
    w.close().unwrap();

    assert_eq!(
        contents(&path),
        vec![
            (Kind::Quote, 1, 1, None),
            (Kind::Quote, 2, 10, None),
            (Kind::Quote, 1, 2, None),
            (Kind::Gap, 1, 4, Some((3, 4))),
            (Kind::Quote, 1, 5, None),
            (Kind::Quote, 1, 2, None), // the cached value
            (Kind::Quote, 2, 11, None),
            (Kind::Gap, 2, 13, Some((12, 13))),
            (Kind::Heartbeat, 2, 13, None),
            (Kind::Quote, 1, 6, None),
        ]
    );
}

/// A journal holding publisher 5's sequences 1..=20 with 8..=10 lost (a gap notice), LVC cached values
/// interleaved, and one recorded heartbeat.
fn lvc_journal(path: &std::path::Path) {
    let mut w = Writer::open(path, &WriterOptions::ring(1 << 20)).unwrap();
    let mut rec = Recorder::new(&mut w).unwrap();
    let mut batch = w.batch();
    let mut t = 1_767_364_200_000_000_000u64;
    for seq in (1..=20).filter(|s| !(8..=10).contains(s)) {
        t += 1_000;
        rec.on_frame(&mut batch, t, &quote(5, seq)).unwrap();
        if seq % 4 == 0 {
            rec.on_frame(&mut batch, t, &cached(5, seq / 2)).unwrap();
        }
        if seq == 15 {
            rec.on_frame(&mut batch, t, &heartbeat(5, 15)).unwrap();
        }
    }
    batch.commit().unwrap();
    rec.after_commit(&mut w).unwrap();
    assert_eq!(rec.stats().missing, 3);
}

#[test]
fn replay_keeps_identities_resends_gap_notices_and_cached_values_consume_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("lvc.tbj");
    lvc_journal(&path);
    let ctx = zmq::Context::new();
    let mut replayer = Replayer::bind(
        &tickbox_auth::Gate::open(&ctx),
        ReplayOptions {
            bind: vec!["tcp://127.0.0.1:*".into(), "tcp://127.0.0.1:*".into()],
            speed: Speed::Max,
            heartbeat_interval: Duration::from_millis(50),
            ..ReplayOptions::default()
        },
    )
    .unwrap();
    let subs: Vec<zmq::Socket> = replayer
        .endpoints()
        .iter()
        .map(|ep| {
            let s = ctx.socket(zmq::SUB).unwrap();
            s.set_linger(0).unwrap();
            s.set_subscribe(b"").unwrap();
            s.connect(ep).unwrap();
            s
        })
        .collect();
    let stop = AtomicBool::new(false);
    assert!(replayer
        .wait_subscribers(1, Some(Duration::from_secs(10)), &stop)
        .unwrap());
    let mut reader = Reader::open(&path).unwrap();
    let stats = replayer
        .run(&mut reader, &SystemClock, &stop, |_| {})
        .unwrap();
    assert_eq!(
        (
            stats.sent,
            stats.gap_notices,
            stats.cached,
            stats.skipped_heartbeats
        ),
        (17 + 1 + 4, 1, 4, 1),
        "{stats:?}"
    );
    // Publisher 5 is carried whole by shard 5 % 2 = 1.
    assert_eq!(stats.per_shard, vec![0, 22]);

    let mut tracker = SequenceTracker::new();
    let mut data = Vec::new();
    let mut last_hb = None;
    let deadline = Instant::now() + Duration::from_secs(10);
    while last_hb != Some(20) && Instant::now() < deadline {
        for s in &subs {
            while let Ok(f) = s.recv_bytes(zmq::DONTWAIT) {
                let m = MessageRef::decode(&f).unwrap();
                let h = m.header();
                assert!(h.flags.contains(Flags::REPLAY));
                assert_eq!((h.publisher_id, h.session), (5, SESSION), "identity kept");
                assert!(h.send_time_ns > 1_600_000_000_000_000_000, "replay's clock");
                let ev = tracker.on_message(&m);
                assert!(!ev.is_loss(), "false gap: {ev:?}");
                if m.kind() == Kind::Heartbeat {
                    last_hb = Some(h.sequence);
                } else if m.kind() == Kind::Quote && !h.flags.contains(Flags::CACHED) {
                    assert_eq!(h.origin_time_ns, h.sequence, "origin time kept");
                    data.push(h.sequence);
                }
            }
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(
        last_hb,
        Some(20),
        "a final heartbeat names the last sequence"
    );
    let expected: Vec<u64> = (1..=20).filter(|s| !(8..=10).contains(s)).collect();
    assert_eq!(data, expected);
    let t = tracker.totals();
    assert_eq!(
        (
            t.received,
            t.missing,
            t.recorded_missing,
            t.cached,
            t.duplicates
        ),
        (17, 0, 3, 4, 0),
        "{t:?}"
    );
}

#[test]
fn a_ring_lap_is_counted_and_attributed_to_the_publishers_it_evicted() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ring.tbj");
    let mut w = Writer::open(&path, &WriterOptions::ring(64 << 10)).unwrap();
    let mut rec = Recorder::new(&mut w).unwrap();
    let n = 3_000u64;
    for chunk in (1..=n).collect::<Vec<_>>().chunks(100) {
        let mut batch = w.batch();
        for &seq in chunk {
            rec.on_frame(
                &mut batch,
                seq,
                &quote(1 + (seq % 2) as u32, seq.div_ceil(2)),
            )
            .unwrap();
            if seq % 500 == 0 {
                rec.on_frame(&mut batch, seq, &heartbeat(1, seq / 2))
                    .unwrap();
            }
        }
        batch.commit().unwrap();
        rec.after_commit(&mut w).unwrap();
    }
    let s = rec.stats();
    assert_eq!(s.recorded, n);
    assert!(s.overwritten.records > n / 2, "{s:?}");
    assert!(s.overwritten.laps >= 1, "{s:?}");
    let per: u64 = s.publishers.iter().map(|r| r.overwritten).sum();
    let ledger = rec.journal_ledger().clone();
    assert_eq!(
        per + ledger.other_overwritten,
        s.overwritten.records,
        "every overwritten record attributed: data to its publisher, heartbeats apart"
    );
    assert!(ledger.other_overwritten >= 1, "heartbeats are not data");
    drop(rec);
    w.close().unwrap();
    // The ledger survives in the journal and agrees with what is left in it.
    let stored =
        tickbox_recorder::Ledger::decode(&tickbox_recorder::read_app_meta(&path).unwrap()).unwrap();
    assert_eq!(stored.rows(), ledger.rows());
    let mut r = Reader::open(&path).unwrap();
    let mut kept = 0u64;
    while let Some(rec) = r.next().unwrap() {
        if MessageRef::decode(rec.payload).unwrap().kind() == Kind::Quote {
            kept += 1;
        }
    }
    assert_eq!(
        kept + per,
        n,
        "data kept + data overwritten = data recorded"
    );
}
