//! Batch frames and local replay reach the workers exactly as single frames over a socket do: the same records to
//! the same worker in the same per-symbol order, the same gap reports, the snail firing on the same record, and a
//! malformed batch counted and skipped.

use std::sync::atomic::AtomicBool;
use std::time::Duration;

use tickbox_subscriber::{
    replay_local, Fatal, Handoff, Report, Stage, Subscriber, SubscriberConfig,
    SubscriberShardConfig,
};
use tickbox_wire::{encode_to_vec, now_ns, BatchBuilder, Header, Kind, MessageRef, Quote, Trade};
use tickbox_workers::{Delivery, Record, Worker, WorkerPoolConfig};

const WORKERS: usize = 3;
const SYMBOLS: u64 = 17;
/// The sequence left out of every stream: one gap of one message.
const SKIPPED: u64 = 100;

/// What a worker saw, in order: (topic, sequence). Heartbeats are left out: a replay adds its own at the end.
#[derive(Default)]
struct Seen(Vec<(Vec<u8>, u64)>);

impl Worker for Seen {
    fn on_message(&mut self, msg: &MessageRef<'_>, _d: &Delivery) {
        if msg.kind() != Kind::Heartbeat {
            self.0
                .push((msg.topic().as_bytes().to_vec(), msg.header().sequence));
        }
    }

    fn on_record(
        &mut self,
        rec: &Record<'_>,
        _d: &Delivery,
    ) -> Result<(), tickbox_wire::DecodeError> {
        if rec.kind() != Kind::Heartbeat {
            self.0
                .push((rec.topic_bytes().to_vec(), rec.header().sequence));
        }
        Ok(())
    }
}

/// `n` sequences of publisher 1 (quotes and trades over 17 symbols), `SKIPPED` left out, sent at `send_ns`; the
/// sequence `late` (if any) claims to have been sent 5 s earlier.
fn frames(n: u64, send_ns: u64, late: Option<u64>) -> Vec<Vec<u8>> {
    (1..=n)
        .filter(|&seq| seq != SKIPPED)
        .map(|seq| {
            let sent = if Some(seq) == late {
                send_ns - 5_000_000_000
            } else {
                send_ns
            };
            let sym = seq % SYMBOLS;
            if seq % 3 == 0 {
                let h = Header::live(Kind::Trade, 1, seq, sent).with_session(77);
                encode_to_vec(&format!("T.XNAS.S{sym}"), &h, &Trade::default().into()).unwrap()
            } else {
                let h = Header::live(Kind::Quote, 1, seq, sent).with_session(77);
                encode_to_vec(&format!("Q.XNAS.S{sym}"), &h, &Quote::default().into()).unwrap()
            }
        })
        .collect()
}

fn config(endpoint: String, handoff: Handoff) -> SubscriberConfig {
    SubscriberConfig {
        shards: vec![SubscriberShardConfig {
            connect: vec![endpoint],
            ..SubscriberShardConfig::default()
        }],
        handoff,
        ..SubscriberConfig::default()
    }
}

fn pool() -> WorkerPoolConfig {
    WorkerPoolConfig {
        count: Some(WORKERS),
        ..WorkerPoolConfig::default()
    }
}

/// An XPUB on a free port and a subscriber connected to it, returned once the subscription has arrived.
fn connect(ctx: &zmq::Context, handoff: Handoff) -> (zmq::Socket, Subscriber<Seen>) {
    let xpub = ctx.socket(zmq::XPUB).unwrap();
    xpub.set_linger(1_000).unwrap();
    xpub.set_sndhwm(0).unwrap();
    let endpoint = tickbox_testkit::bind_loopback(&xpub);
    let sub = Subscriber::start(ctx, &config(endpoint, handoff), &pool(), |_| {
        Seen::default()
    })
    .unwrap();
    xpub.set_rcvtimeo(10_000).unwrap();
    // The subscriber's "" subscription: after it, nothing sent is lost to a slow join.
    loop {
        let event = xpub.recv_bytes(0).expect("no subscription within 10 s");
        if event == [1] {
            break;
        }
    }
    (xpub, sub)
}

fn send_singles(xpub: &zmq::Socket, frames: &[Vec<u8>]) {
    for f in frames {
        xpub.send(&f[..], 0).unwrap();
    }
}

fn send_batches(xpub: &zmq::Socket, frames: &[Vec<u8>], per_batch: u16) {
    let mut batch = BatchBuilder::new(64 * 1024, per_batch);
    for f in frames {
        if !batch.try_push(f) {
            xpub.send(batch.frame(), 0).unwrap();
            batch.clear();
            assert!(batch.try_push(f));
        }
    }
    if !batch.is_empty() {
        xpub.send(batch.frame(), 0).unwrap();
    }
}

/// Waits until `n` records were forwarded (or the subscriber tripped), then shuts down.
fn finish(sub: Subscriber<Seen>, n: u64) -> Report<Seen> {
    tickbox_testkit::wait_until(Duration::from_secs(10), || {
        sub.forwarded() >= n || sub.is_tripped()
    });
    sub.shutdown().unwrap()
}

fn per_worker(report: &Report<Seen>) -> Vec<Vec<(Vec<u8>, u64)>> {
    let mut out = vec![Vec::new(); WORKERS];
    for w in &report.workers {
        out[w.index] = w.worker.0.clone();
    }
    out
}

fn check_per_symbol_order(workers: &[Vec<(Vec<u8>, u64)>]) {
    let mut owner = std::collections::HashMap::new();
    for (i, seen) in workers.iter().enumerate() {
        let mut last = std::collections::HashMap::new();
        for (topic, seq) in seen {
            let key = tickbox_wire::shard_key_of_topic(topic).to_vec();
            assert_eq!(
                *owner.entry(key.clone()).or_insert(i),
                i,
                "symbol on two workers"
            );
            let prev = last.insert(key, *seq).unwrap_or(0);
            assert!(*seq > prev, "worker {i}: sequence {seq} after {prev}");
        }
    }
}

fn run(handoff: Handoff, batched: Option<u16>, frames: &[Vec<u8>]) -> Report<Seen> {
    let ctx = zmq::Context::new();
    let (xpub, sub) = connect(&ctx, handoff);
    match batched {
        Some(per_batch) => send_batches(&xpub, frames, per_batch),
        None => send_singles(&xpub, frames),
    }
    finish(sub, frames.len() as u64)
}

#[test]
fn batches_and_single_frames_reach_workers_identically() {
    const N: u64 = 3_000;
    let frames = frames(N, now_ns(), None);
    let single = run(Handoff::Ring, None, &frames);
    let baseline = per_worker(&single);
    assert_eq!(
        baseline.iter().map(Vec::len).sum::<usize>(),
        frames.len(),
        "every record reaches exactly one worker"
    );
    check_per_symbol_order(&baseline);
    assert_eq!((single.gaps(), single.missing()), (1, 1));
    assert_eq!(single.batches(), 0);
    for (handoff, per_batch) in [(Handoff::Ring, 64), (Handoff::Ring, 7), (Handoff::Zmq, 64)] {
        let report = run(handoff, Some(per_batch), &frames);
        assert_eq!(
            per_worker(&report),
            baseline,
            "{handoff} batches of {per_batch}"
        );
        assert_eq!(report.received(), frames.len() as u64);
        assert!(report.batches() >= (frames.len() as u64).div_ceil(u64::from(per_batch)));
        assert_eq!(report.batch_malformed(), 0);
        assert_eq!((report.gaps(), report.missing()), (1, 1));
        // The gap is noticed at the same record: the one after the skipped sequence.
        let ledger = &report.ledgers()[0];
        let base = &single.ledgers()[0];
        assert_eq!(
            (
                ledger.missing,
                ledger.gap_events,
                ledger.last_sequence,
                ledger.received
            ),
            (
                base.missing,
                base.gap_events,
                base.last_sequence,
                base.received
            )
        );
    }
    // Single frames over the zmq hand-off too.
    let zmq_single = run(Handoff::Zmq, None, &frames);
    assert_eq!(per_worker(&zmq_single), baseline);
}

#[test]
fn a_late_record_inside_a_batch_fires_the_snail_at_that_record() {
    let late = 157;
    let frames = frames(400, now_ns(), Some(late));
    for batched in [None, Some(32)] {
        let report = run(Handoff::Ring, batched, &frames);
        match &report.fatal {
            Some(Fatal::Snail(e)) => {
                assert_eq!(e.stage, Stage::Shard);
                assert_eq!(e.sequence, late, "batched {batched:?}");
                assert!(e.lateness_ns >= 4_000_000_000);
            }
            other => panic!("batched {batched:?}: expected the snail, got {other:?}"),
        }
        // Nothing after the late record was forwarded.
        for w in &report.workers {
            assert!(w.worker.0.iter().all(|(_, s)| *s < late));
        }
    }
}

#[test]
fn a_malformed_batch_is_counted_and_skipped() {
    let ctx = zmq::Context::new();
    let (xpub, sub) = connect(&ctx, Handoff::Ring);
    let frames = frames(50, now_ns(), None);
    let mut batch = BatchBuilder::new(64 * 1024, 64);
    for f in &frames[..4] {
        assert!(batch.try_push(f));
    }
    let good = batch.frame().to_vec();
    // Cut inside the fourth record: three records arrive, then the damage is counted.
    let cut = good[..good.len() - 5].to_vec();
    xpub.send(&cut[..], 0).unwrap();
    // A batch of an unknown layout version, and one whose record is not a tickbox frame.
    let mut version = good.clone();
    version[3] = 99;
    xpub.send(&version[..], 0).unwrap();
    let mut junk = BatchBuilder::new(1024, 4);
    assert!(junk.try_push(b"not a frame"));
    xpub.send(junk.frame(), 0).unwrap();
    send_batches(&xpub, &frames[10..], 16);
    let report = finish(sub, 3 + (frames.len() as u64 - 10));
    assert_eq!(report.batch_malformed(), 3);
    assert_eq!(report.forwarded(), 3 + frames.len() as u64 - 10);
    assert!(report.fatal.is_none());
}

/// The same journal replayed over a socket (the recorder's replayer, which batches) and locally.
#[test]
fn local_replay_and_socket_replay_give_workers_the_same_sequences() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("day.tbj");
    let t0 = now_ns();
    let frames = frames(5_000, t0, None);
    {
        let mut w =
            tickbox_journal::Writer::open(&path, &tickbox_journal::WriterOptions::ring(16 << 20))
                .unwrap();
        for (i, f) in frames.iter().enumerate() {
            w.append(t0 + i as u64 * 1_000, f).unwrap();
        }
        w.close().unwrap();
    }
    // Local: the journal's capture times are the receive times, so nothing is late.
    let ctx = zmq::Context::new();
    let stop = AtomicBool::new(false);
    let local = replay_local(
        &ctx,
        &SubscriberConfig::default(),
        &pool(),
        |_| Seen::default(),
        &stop,
        |sink| {
            let mut reader = tickbox_journal::Reader::open(&path).unwrap();
            while let Ok(Some(rec)) = reader.next() {
                if !sink.push(rec.payload, rec.capture_time_ns) {
                    break;
                }
            }
        },
    )
    .unwrap();
    assert!(local.panicked.is_empty());
    let local_seen = per_worker(&local.report);
    assert_eq!(local_seen.iter().map(Vec::len).sum::<usize>(), frames.len());
    check_per_symbol_order(&local_seen);
    assert_eq!((local.report.gaps(), local.report.missing()), (1, 1));
    assert!(local.report.fatal.is_none());
    assert!(local.real_time_multiple().is_none(), "one origin time only");
    // Over a socket.
    let mut replayer = tickbox_recorder::Replayer::bind(
        &tickbox_auth::Gate::open(&ctx),
        tickbox_recorder::ReplayOptions {
            bind: vec!["tcp://127.0.0.1:*".into()],
            speed: tickbox_recorder::Speed::Max,
            ..tickbox_recorder::ReplayOptions::default()
        },
    )
    .unwrap();
    let endpoint = replayer.endpoints()[0].clone();
    let sub = Subscriber::start(&ctx, &config(endpoint, Handoff::Ring), &pool(), |_| {
        Seen::default()
    })
    .unwrap();
    assert!(replayer
        .wait_subscribers(1, Some(Duration::from_secs(10)), &stop)
        .unwrap());
    let mut reader = tickbox_journal::Reader::open(&path).unwrap();
    let stats = replayer
        .run(&mut reader, &tickbox_wire::SystemClock, &stop, |_| {})
        .unwrap();
    assert_eq!(stats.sent, frames.len() as u64);
    let socket = finish(sub, frames.len() as u64);
    let socket_seen = per_worker(&socket);
    for (i, (s, l)) in socket_seen.iter().zip(&local_seen).enumerate() {
        assert_eq!(
            s.len(),
            l.len(),
            "worker {i}: socket vs local record counts"
        );
        if let Some(at) = s.iter().zip(l).position(|(a, b)| a != b) {
            panic!(
                "worker {i} differs at {at}: socket {:?} local {:?}",
                s[at], l[at]
            );
        }
    }
    assert_eq!((socket.gaps(), socket.missing()), (1, 1));
    assert!(socket.batches() > 0, "the replayer sent batch frames");
}
