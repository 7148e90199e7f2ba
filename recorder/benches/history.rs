//! Seeking to the last hour of a long history against replaying that hour, and against the scan from the start
//! that the seek avoids: a day of 24 hourly journals (HOUR_RECORDS quotes each, capture times spread over each
//! hour) built once, then ROUNDS rounds, each timing, in turn: `HistoryReader::open` + `seek_time(start of the last
//! hour)` + the first record; reading that hour to its end; and reading from the oldest record up to that hour.
//! Run: `cargo bench -p tickbox-recorder --bench history` (prints medians with min and max); `HISTORY_HOURS` and
//! `HISTORY_HOUR_RECORDS` change the shape (a month of thin hours shows what the number of journals costs).

use std::time::{Duration, Instant};

use tickbox_journal::WriterOptions;
use tickbox_recorder::{HistoryReader, HistoryWriter, Journals, Recorder, Roll};
use tickbox_wire::{encode_to_vec, Header, Kind, Quote};

fn env_or(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}
const ROUNDS: usize = 5;
const HOUR_NS: u64 = 3_600_000_000_000;
/// 2026-11-24T00:00:00Z.
const T0: u64 = 1_795_478_400_000_000_000;

fn build(dir: &std::path::Path, hours: u64, per_hour: u64) {
    let roll = Roll::parse("hourly", None, None).unwrap();
    let (mut h, _) =
        HistoryWriter::open(dir, Some(&roll), &WriterOptions::archive(64 << 20), T0).unwrap();
    let mut rec = Recorder::new_after(h.writer(), None).unwrap();
    let step = HOUR_NS / per_hour;
    let mut seq = 0u64;
    for hour in 0..hours {
        // Each hour starts a journal (its first record's capture time is the roll's); batches of 1024 inside.
        let start = T0 + hour * HOUR_NS;
        if h.roll_check().due(start, rec.journal_bytes()) {
            h.roll(&mut rec, start).unwrap();
        }
        let mut k = 0;
        while k < per_hour {
            let mut batch = h.writer_mut().batch();
            for _ in 0..1024.min(per_hour - k) {
                seq += 1;
                let at = start + k * step;
                let q = Quote {
                    instrument_id: (seq % 500) as u32,
                    ..Quote::default()
                };
                let frame = encode_to_vec(
                    &format!("Q.XNAS.S{:03}", seq % 500),
                    &Header::live(Kind::Quote, 1, seq, at),
                    &q.into(),
                )
                .unwrap();
                rec.on_frame(&mut batch, at, &frame).unwrap();
                k += 1;
            }
            batch.commit().unwrap();
            rec.after_commit(h.writer()).unwrap();
        }
    }
    h.close().unwrap();
    // As `record` does behind a roll: each closed journal's card cached.
    for j in tickbox_recorder::HistoryDir::open(dir)
        .unwrap()
        .journals()
        .unwrap()
    {
        tickbox_recorder::JournalCard::of(&j.path).unwrap();
    }
}

fn median(mut v: Vec<Duration>) -> (Duration, Duration, Duration) {
    v.sort();
    (v[v.len() / 2], v[0], v[v.len() - 1])
}

fn main() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("day");
    let (hours, per_hour) = (
        env_or("HISTORY_HOURS", 24),
        env_or("HISTORY_HOUR_RECORDS", 100_000),
    );
    let t = Instant::now();
    build(&path, hours, per_hour);
    eprintln!(
        "built {hours} hourly journals of {per_hour} records in {:?}",
        t.elapsed()
    );
    let last_hour = T0 + (hours - 1) * HOUR_NS;
    let (mut seeks, mut hours_read, mut scans) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..ROUNDS {
        let t = Instant::now();
        let mut r = HistoryReader::open(&path).unwrap();
        r.seek_time(last_hour).unwrap();
        let first = r.next().unwrap().unwrap().capture_time_ns;
        seeks.push(t.elapsed());
        assert_eq!(first, last_hour);
        let t = Instant::now();
        let mut n = 1;
        while r.next().unwrap().is_some() {
            n += 1;
        }
        hours_read.push(t.elapsed());
        assert_eq!(n, per_hour);
        let t = Instant::now();
        let mut r = HistoryReader::open(&path).unwrap();
        let mut before = 0u64;
        while let Some(rec) = r.next().unwrap() {
            if rec.capture_time_ns >= last_hour {
                break;
            }
            before += 1;
        }
        scans.push(t.elapsed());
        assert_eq!(before, (hours - 1) * per_hour);
    }
    let show = |name: &str, v: Vec<Duration>| {
        let (m, lo, hi) = median(v);
        println!("{name:<48} median {m:>12.3?}  (min {lo:.3?}, max {hi:.3?})");
        m
    };
    let seek = show("open + seek to the last hour + first record", seeks);
    let hour = show(
        &format!("read the last hour ({per_hour} records)"),
        hours_read,
    );
    let scan = show("scan from the start to the last hour", scans);
    println!(
        "seek / hour read = {:.4}; scan / seek = {:.0}",
        seek.as_secs_f64() / hour.as_secs_f64(),
        scan.as_secs_f64() / seek.as_secs_f64()
    );
}
