//! Recording a batched feed: the recorder opts in to batch frames and appends their records one by one, so the
//! journal, its gap notices and its ledger are those of the same feed sent in single frames.

use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

use tickbox_journal::{Reader, Writer, WriterOptions};
use tickbox_recorder::{record, RecordOptions, RecordStats, Recorder};
use tickbox_wire::{Kind, MessageRef, Payload};

const SESSION: u64 = 1_767_000_000_000_000_000;

fn quote(publisher: u32, seq: u64) -> Vec<u8> {
    tickbox_testkit::quote(&format!("Q.XNAS.S{}", seq % 5), publisher, seq)
        .session(SESSION)
        .frame()
}

/// Batch frames of up to 7 records each over `frames`.
fn batches(frames: &[Vec<u8>]) -> Vec<Vec<u8>> {
    tickbox_testkit::batches(frames, 7)
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
            Payload::Gap(n) => Some((n.first_missing, n.last_missing)),
            _ => None,
        };
        out.push((m.kind(), m.header().publisher_id, m.header().sequence, gap));
    }
    out
}

/// Records `messages` (one `on_message` each) into a fresh ring; returns its contents, the run's counters and the
/// journal's ledger rows.
fn record_all(
    dir: &std::path::Path,
    name: &str,
    messages: &[Vec<u8>],
) -> (Vec<Row>, RecordStats, Vec<tickbox_recorder::LedgerRow>) {
    let path = dir.join(name);
    let mut w = Writer::open(&path, &WriterOptions::ring(1 << 20)).unwrap();
    let mut rec = Recorder::new(&mut w).unwrap();
    {
        let mut batch = w.batch();
        for (i, m) in messages.iter().enumerate() {
            rec.on_message(&mut batch, 1_000 + i as u64, m).unwrap();
        }
        batch.commit().unwrap();
    }
    rec.after_commit(&mut w).unwrap();
    let ledger = rec.journal_ledger().rows().to_vec();
    let stats = rec.stats();
    drop(w);
    (contents(&path), stats, ledger)
}

#[test]
fn a_batched_stream_with_a_loss_is_recorded_as_the_same_stream_in_single_frames() {
    let dir = tempfile::tempdir().unwrap();
    // Two publishers interleaved; the batch holding sequences 15..=21 of publisher 1 is lost on the way.
    let mut frames = Vec::new();
    for seq in 1..=40 {
        frames.push(quote(1, seq));
        if seq % 3 == 0 {
            frames.push(quote(2, seq / 3));
        }
    }
    let mut batched = batches(&frames);
    let lost_batch = batched.remove(3);
    let lost: Vec<Vec<u8>> = tickbox_wire::batch_records(&lost_batch)
        .unwrap()
        .map(|r| r.unwrap().to_vec())
        .collect();
    let singles: Vec<Vec<u8>> = frames
        .iter()
        .filter(|f| !lost.contains(f))
        .cloned()
        .collect();

    let (single_journal, single_stats, single_ledger) =
        record_all(dir.path(), "single.tbj", &singles);
    let (batch_journal, batch_stats, batch_ledger) = record_all(dir.path(), "batch.tbj", &batched);
    assert_eq!(batch_journal, single_journal);
    assert_eq!(batch_ledger, single_ledger);
    assert_eq!(batch_stats.batch_frames, batched.len() as u64);
    assert_eq!(single_stats.batch_frames, 0);
    let counts = |s: &RecordStats| {
        (
            s.messages,
            s.recorded,
            s.missing,
            s.gap_events,
            s.invalid_frames,
        )
    };
    assert_eq!(counts(&batch_stats), counts(&single_stats));
    assert_eq!(batch_stats.publishers, single_stats.publishers);
    // The loss is named where it was noticed: right before the first record after it, for each publisher.
    let gaps: Vec<_> = batch_journal
        .iter()
        .filter_map(|r| r.3.map(|g| (r.1, g)))
        .collect();
    assert!(!gaps.is_empty());
    assert_eq!(batch_stats.missing, lost.len() as u64);
    for (publisher, (first, last)) in &gaps {
        let at = batch_journal
            .iter()
            .position(|r| r.3 == Some((*first, *last)))
            .unwrap();
        assert_eq!(
            batch_journal[at + 1],
            (Kind::Quote, *publisher, last + 1, None)
        );
    }
}

#[test]
fn record_opts_in_to_batches_and_journals_every_sequence_once_in_order() {
    const N: u64 = 5_000;
    let ctx = zmq::Context::new();
    let mut publisher = ctx.socket(zmq::XPUB).unwrap();
    publisher.set_linger(100).unwrap();
    publisher.set_xpub_verbose(true).unwrap();
    publisher.set_sndhwm(1_000_000).unwrap();
    tickbox_zmqx::set_xpub_nodrop(&mut publisher, true).unwrap();
    let endpoint = tickbox_zmqx::bind_resolved(&publisher, "tcp://127.0.0.1:*").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rec.tbj");
    let recorder = {
        let ctx = ctx.clone();
        let path = path.clone();
        std::thread::spawn(move || {
            let mut w = Writer::open(&path, &WriterOptions::ring(8 << 20)).unwrap();
            let opts = RecordOptions {
                connect: vec![endpoint],
                max_messages: Some(N),
                duration: Some(Duration::from_secs(15)),
                ..RecordOptions::default()
            };
            record(&ctx, &mut w, &opts, &AtomicBool::new(false), |_| {}).unwrap()
        })
    };
    // The recorder asks for everything and for batches.
    let mut seen = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(5);
    while seen.len() < 2 && Instant::now() < deadline {
        if publisher.poll(zmq::POLLIN, 50).unwrap() > 0 {
            seen.push(publisher.recv_bytes(0).unwrap());
        }
    }
    seen.sort();
    assert_eq!(seen, vec![b"\x01".to_vec(), b"\x01#B".to_vec()]);
    let frames: Vec<Vec<u8>> = (1..=N).map(|seq| quote(9, seq)).collect();
    for b in batches(&frames) {
        publisher.send(b, 0).unwrap();
    }
    let stats = recorder.join().unwrap();
    assert_eq!((stats.messages, stats.recorded, stats.missing), (N, N, 0));
    assert_eq!(stats.batch_frames, N.div_ceil(7));
    let journal = contents(&path);
    let sequences: Vec<u64> = journal.iter().map(|r| r.2).collect();
    assert_eq!(sequences, (1..=N).collect::<Vec<_>>());
}
