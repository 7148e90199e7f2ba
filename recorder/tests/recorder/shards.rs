//! Recording several shards: each endpoint is read on its own thread and handed to the journal's one writer, so
//! every publisher's sequences are journalled exactly once, in order, whatever the interleaving of the shards.

use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

use tickbox_journal::{Reader, Writer, WriterOptions};
use tickbox_recorder::{record, RecordOptions};
use tickbox_wire::{Kind, MessageRef};

const SESSION: u64 = 1_767_000_000_000_000_000;
const SHARDS: u32 = 3;
/// Publishers per shard: a publisher lives on one shard, as the feed places them.
const PER_SHARD: u32 = 2;
const PER_PUBLISHER: u64 = 6_000;

fn quote(publisher: u32, seq: u64) -> Vec<u8> {
    tickbox_testkit::quote(&format!("Q.XNAS.P{publisher}.S{}", seq % 7), publisher, seq)
        .session(SESSION)
        .frame()
}

/// A shard's publishers interleaved, packed into batch frames of up to `per_batch` records.
fn shard_batches(shard: u32, per_batch: usize) -> Vec<Vec<u8>> {
    let mut frames = Vec::new();
    for seq in 1..=PER_PUBLISHER {
        for p in 0..PER_SHARD {
            frames.push(quote(shard * 10 + p + 1, seq));
        }
    }
    tickbox_testkit::batches(&frames, per_batch)
}

/// Waits (bounded) until `publisher` has seen both the recorder's subscriptions (everything and batches).
fn await_subscriptions(publisher: &zmq::Socket) {
    let mut seen = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(5);
    while seen.len() < 2 && Instant::now() < deadline {
        if publisher.poll(zmq::POLLIN, 50).unwrap() > 0 {
            seen.push(publisher.recv_bytes(0).unwrap());
        }
    }
    seen.sort();
    assert_eq!(seen, vec![b"\x01".to_vec(), b"\x01#B".to_vec()]);
}

#[test]
fn a_three_shard_batched_feed_journals_every_publishers_sequence_once_in_order() {
    let total = u64::from(SHARDS * PER_SHARD) * PER_PUBLISHER;
    let ctx = zmq::Context::new();
    let mut publishers = Vec::new();
    let mut endpoints = Vec::new();
    for _ in 0..SHARDS {
        let mut p = ctx.socket(zmq::XPUB).unwrap();
        p.set_linger(1_000).unwrap();
        p.set_xpub_verbose(true).unwrap();
        p.set_sndhwm(1_000).unwrap();
        // Lossless, as `feed --no-drop`: a small HWM makes the readers' back-pressure reach the publishers.
        tickbox_zmqx::set_xpub_nodrop(&mut p, true).unwrap();
        endpoints.push(tickbox_zmqx::bind_resolved(&p, "tcp://127.0.0.1:*").unwrap());
        publishers.push(p);
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("shards.tbj");
    let recorder = {
        let ctx = ctx.clone();
        let path = path.clone();
        let endpoints = endpoints.clone();
        std::thread::spawn(move || {
            let mut w = Writer::open(&path, &WriterOptions::ring(32 << 20)).unwrap();
            let opts = RecordOptions {
                connect: endpoints,
                max_messages: Some(total),
                duration: Some(Duration::from_secs(15)),
                receive_hwm: 1_000,
                // Pinning is best effort: a core the machine lacks is logged and the reader runs unpinned.
                reader_cores: vec![0],
                ..RecordOptions::default()
            };
            record(&ctx, &mut w, &opts, &AtomicBool::new(false), |_| {}).unwrap()
        })
    };
    for p in &publishers {
        await_subscriptions(p);
    }
    // The shards publish at once, each from its own thread, with batches of different sizes.
    let senders: Vec<_> = publishers
        .into_iter()
        .enumerate()
        .map(|(shard, p)| {
            std::thread::spawn(move || {
                for b in shard_batches(shard as u32, 5 + 9 * shard) {
                    p.send(b, 0).unwrap();
                }
            })
        })
        .collect();
    for s in senders {
        s.join().unwrap();
    }
    let stats = recorder.join().unwrap();
    assert_eq!(
        (
            stats.messages,
            stats.recorded,
            stats.missing,
            stats.gap_events
        ),
        (total, total, 0, 0)
    );
    assert_eq!((stats.invalid_frames, stats.duplicates), (0, 0));
    assert!(stats.batch_frames > 0);
    assert_eq!(stats.publishers.len(), (SHARDS * PER_SHARD) as usize);

    let mut per_publisher: std::collections::BTreeMap<u32, Vec<u64>> = Default::default();
    let mut r = Reader::open(&path).unwrap();
    while let Some(rec) = r.next().unwrap() {
        let m = MessageRef::decode(rec.payload).unwrap();
        assert_eq!(m.kind(), Kind::Quote);
        per_publisher
            .entry(m.header().publisher_id)
            .or_default()
            .push(m.header().sequence);
    }
    assert_eq!(per_publisher.len(), (SHARDS * PER_SHARD) as usize);
    for (publisher, sequences) in per_publisher {
        assert!(
            sequences.iter().copied().eq(1..=PER_PUBLISHER),
            "publisher {publisher}: {} records, not 1..={PER_PUBLISHER} in order",
            sequences.len()
        );
    }
}

#[test]
fn a_shard_that_cannot_be_reached_is_refused_before_recording() {
    let ctx = zmq::Context::new();
    let dir = tempfile::tempdir().unwrap();
    let mut w = Writer::open(dir.path().join("x.tbj"), &WriterOptions::ring(1 << 20)).unwrap();
    let opts = RecordOptions {
        connect: vec!["tcp://127.0.0.1:1".into(), "nonsense://x".into()],
        duration: Some(Duration::from_secs(5)),
        ..RecordOptions::default()
    };
    let err = record(&ctx, &mut w, &opts, &AtomicBool::new(false), |_| {}).unwrap_err();
    assert!(err.to_string().contains("nonsense://x"), "{err}");
}
