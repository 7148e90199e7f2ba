//! The recording thread's own cost per record, without sockets: `Recorder::on_message` (decode, per-publisher
//! sequence accounting, the ledger, the journal append) over batch frames of 64 records as `feed --batch auto`
//! sends them, committed `batch_max` records at a time as `tickbox record` commits, beside a loop that appends the
//! same records to a journal with nothing else (the journal's share of that cost). Each round writes a fresh
//! archive journal; the archive's preparer faults pages in on its own thread, so the figure is the recording
//! thread's CPU time (`CLOCK_THREAD_CPUTIME_ID`), which a shared machine disturbs far less than wall time.
//!
//! `cargo bench -p tickbox-recorder --bench record` prints each round, then the medians and ranges.

use tickbox_journal::{Writer, WriterOptions};
use tickbox_recorder::{Recorder, RecorderConfig};
use tickbox_wire::{batch_records, Header, Kind};

const RECORDS: u64 = 2_000_000;
const SYMBOLS: u64 = 2_000;
const PUBLISHERS: u64 = 4;
const ROUNDS: usize = 5;
const BATCH_RECORDS: usize = 64;

/// The records as batch frames of [`BATCH_RECORDS`], each publisher's sequences gap-free.
fn batch_frames() -> Vec<Vec<u8>> {
    let t0 = 1_700_000_000_000_000_000u64;
    let frames: Vec<Vec<u8>> = (0..RECORDS)
        .map(|i| {
            let publisher = (i % PUBLISHERS) as u32 + 1;
            let header = Header::live(Kind::Quote, publisher, i / PUBLISHERS + 1, t0 + i * 1_000);
            tickbox_testkit::market_frame(i, SYMBOLS, header.with_session(1))
        })
        .collect();
    tickbox_testkit::batches(&frames, BATCH_RECORDS)
}

/// CPU time of the calling thread, in seconds.
fn thread_cpu_seconds() -> f64 {
    tickbox_testkit::cpu::thread_cpu().as_secs_f64()
}

/// A fresh archive journal in its own temporary directory.
fn fresh_journal() -> (tempfile::TempDir, Writer) {
    let dir = tempfile::tempdir().unwrap();
    let writer = Writer::open(dir.path().join("day"), &WriterOptions::archive(1 << 30)).unwrap();
    (dir, writer)
}

/// The recorder over every frame; returns the recording thread's CPU nanoseconds per record.
fn recorded(frames: &[Vec<u8>], batch_max: usize) -> f64 {
    let (_dir, mut writer) = fresh_journal();
    let mut rec = Recorder::new(&mut writer).unwrap();
    let cpu0 = thread_cpu_seconds();
    let mut next = frames.iter();
    let mut capture = 1u64;
    let mut more = true;
    while more {
        let mut batch = writer.batch();
        let mut in_batch = 0;
        while in_batch < batch_max {
            let Some(frame) = next.next() else {
                more = false;
                break;
            };
            capture += 1;
            in_batch += rec.on_message(&mut batch, capture, frame).unwrap();
        }
        batch.commit().unwrap();
    }
    let ns = (thread_cpu_seconds() - cpu0) * 1e9 / RECORDS as f64;
    let stats = rec.stats();
    assert_eq!((stats.recorded, stats.missing), (RECORDS, 0), "{stats:?}");
    ns
}

/// The same records appended with nothing else, committed as often; the recording thread's CPU ns per record.
fn appended(frames: &[Vec<u8>], batch_max: usize) -> f64 {
    let (_dir, mut writer) = fresh_journal();
    let cpu0 = thread_cpu_seconds();
    let mut records = frames
        .iter()
        .flat_map(|f| batch_records(f).unwrap().map(Result::unwrap));
    let mut capture = 1u64;
    let mut more = true;
    let mut n = 0;
    while more {
        let mut batch = writer.batch();
        for _ in 0..batch_max {
            let Some(record) = records.next() else {
                more = false;
                break;
            };
            capture += 1;
            batch.append(capture, record).unwrap();
            n += 1;
        }
        batch.commit().unwrap();
    }
    assert_eq!(n, RECORDS);
    (thread_cpu_seconds() - cpu0) * 1e9 / RECORDS as f64
}

fn main() {
    let frames = batch_frames();
    let batch_max = RecorderConfig::default().batch_max;
    let (mut rec, mut app) = (Vec::new(), Vec::new());
    for round in 0..ROUNDS {
        // Alternating which goes first, so neither always meets a machine the other warmed.
        let (r, a) = if round % 2 == 0 {
            let r = recorded(&frames, batch_max);
            (r, appended(&frames, batch_max))
        } else {
            let a = appended(&frames, batch_max);
            (recorded(&frames, batch_max), a)
        };
        println!("round {round}: recorder {r:.1} ns/record, bare append {a:.1} ns/record");
        rec.push(r);
        app.push(a);
    }
    for (what, mut v) in [("recorder", rec), ("bare append", app)] {
        let (m, lo, hi) = tickbox_tuning::median_min_max(&mut v).expect("ROUNDS > 0");
        println!("{what}: median {m:.1} ns/record of the recording thread's CPU, range {lo:.1} .. {hi:.1}");
    }
}
