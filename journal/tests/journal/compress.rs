//! Compressed journals: `compress` rewrites a closed journal in place as seekable zstd frames, and every reader
//! (`Reader`: iterate, seek by sequence and time, skip damage; `summarize`; `read_app_meta`) reads it as it read
//! the plain one. Damage to a compressed frame is damage like any other: reported at its offset, passed over, the
//! rest read.

use std::path::{Path, PathBuf};
use std::time::Duration;

use proptest::prelude::*;
use tickbox_journal::{
    compress, list_segments, read_app_meta, summarize, CompressOptions, JournalError, Reader,
    Writer, WriterOptions, HEADER_SIZE,
};

/// `compress` of a journal whose writer this thread has closed, a `Locked` waited out (bounded): a process another
/// test is starting may hold the closed writer's lock for a moment ([`tickbox_testkit::retry_while`]; seen once
/// in seven full-suite runs, beside two busy loops).
fn compress_closed(
    path: &Path,
    options: &CompressOptions,
) -> Result<tickbox_journal::CompressReport, JournalError> {
    tickbox_testkit::retry_while(
        Duration::from_secs(5),
        || compress(path, options),
        |r| matches!(r, Err(JournalError::Locked { .. })),
    )
}

/// Payloads of several sizes with some repetition (as market data has), so they compress.
fn payload_for(seq: u64) -> Vec<u8> {
    let len = 20 + (seq * 37 % 180) as usize;
    let mut p: Vec<u8> = format!("Q.XNAS.SYM{:03}|", seq % 97).into_bytes();
    p.extend((0..len).map(|i| ((seq / 7) as usize + i % 13) as u8));
    p
}

fn time_for(seq: u64) -> u64 {
    1_700_000_000_000_000_000 + seq * 1_000 + (seq % 3)
}

type Rec = (u64, u64, Vec<u8>);

fn read_all(path: &Path) -> Vec<Rec> {
    let mut r = Reader::open(path).unwrap();
    let mut out = Vec::new();
    while let Some(rec) = r.next().unwrap() {
        out.push((rec.seq, rec.capture_time_ns, rec.payload.to_vec()));
    }
    out
}

/// A ring journal of `capacity` bytes at `path` holding records 1..=`records` (the oldest overwritten once it
/// laps), closed.
fn write_ring(path: &Path, capacity: u64, records: u64) {
    let mut w = Writer::open(path, &WriterOptions::ring(capacity)).unwrap();
    for seq in 1..=records {
        w.append(time_for(seq), &payload_for(seq)).unwrap();
    }
}

fn write_archive(path: &Path, records: u64, segment: u64) {
    let mut w = Writer::open(
        path,
        &WriterOptions::archive(segment).description("compress test"),
    )
    .unwrap();
    let mut seq = 1;
    while seq <= records {
        let n = (seq % 5 + 1).min(records - seq + 1);
        let batch: Vec<Vec<u8>> = (seq..seq + n).map(payload_for).collect();
        w.append_batch(
            batch
                .iter()
                .enumerate()
                .map(|(i, p)| (time_for(seq + i as u64), &p[..])),
        )
        .unwrap();
        seq += n;
    }
    w.set_app_meta(b"the ledger").unwrap();
    w.close().unwrap();
}

/// Copies a journal (file or directory of files) to `to`.
fn copy_journal(from: &Path, to: &Path) {
    if from.is_dir() {
        std::fs::create_dir_all(to).unwrap();
        for e in std::fs::read_dir(from).unwrap() {
            let e = e.unwrap();
            std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
        }
    } else {
        std::fs::copy(from, to).unwrap();
    }
}

/// What a reader finds seeking to `target` by sequence and by time, and the next few records after.
fn seeks(path: &Path, targets: &[u64]) -> Vec<Vec<u64>> {
    let mut r = Reader::open(path).unwrap();
    let mut out = Vec::new();
    for &t in targets {
        r.seek_seq(t).unwrap();
        let mut got = vec![r.position_seq().unwrap_or(0)];
        for _ in 0..3 {
            got.push(r.next().unwrap().map_or(0, |rec| rec.seq));
        }
        r.seek_time(time_for(t)).unwrap();
        for _ in 0..3 {
            got.push(r.next().unwrap().map_or(0, |rec| rec.seq));
        }
        out.push(got);
    }
    out
}

#[test]
fn a_compressed_archive_reads_and_seeks_record_for_record_like_the_plain_one() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("day");
    let plain = dir.path().join("plain");
    write_archive(&path, 30_000, 1 << 20);
    copy_journal(&path, &plain);
    let before = summarize(&path, true).unwrap();
    assert!(before.segments >= 3, "{}", before.segments);
    let report = compress_closed(&path, &CompressOptions::default()).unwrap();
    eprintln!("{report:?}");
    assert_eq!(report.files, before.segments);
    assert_eq!((report.already_compressed, report.recovered), (0, 0));
    assert_eq!(report.records, 30_000);
    assert_eq!(report.record_bytes, before.disk.record_bytes);
    assert!(report.bytes_after * 3 < report.bytes_before, "{report:?}");
    // Same names, compressed content, nothing else left.
    crate::disk::assert_only_segments(&path);
    assert_eq!(list_segments(&path).unwrap().len() as u64, before.segments);

    assert_eq!(read_all(&path), read_all(&plain));
    // One segment file alone reads to its end, and no further.
    let one = tickbox_journal::segment_path(&path, 1);
    assert_eq!(
        read_all(&one),
        read_all(&tickbox_journal::segment_path(&plain, 1))
    );
    let r = Reader::open(&path).unwrap();
    assert!(r.compressed());
    assert_eq!(r.header().description, "compress test");
    let targets = [
        0, 1, 2, 63, 64, 65, 4_000, 9_999, 10_001, 17_777, 29_999, 30_000, 30_001, 99_999,
    ];
    assert_eq!(seeks(&path, &targets), seeks(&plain, &targets));

    let after = summarize(&path, true).unwrap();
    assert_eq!(
        (
            after.records,
            after.first_seq,
            after.last_seq,
            after.first_time_ns,
            after.last_time_ns
        ),
        (
            before.records,
            before.first_seq,
            before.last_seq,
            before.first_time_ns,
            before.last_time_ns
        )
    );
    assert_eq!(after.payload_bytes, before.payload_bytes);
    assert_eq!((after.corruption.clone(), after.damaged.len()), (None, 0));
    assert_eq!(after.header, before.header);
    assert_eq!(after.disk.compressed_files, before.segments);
    assert_eq!(after.disk.record_bytes, before.disk.record_bytes);
    assert_eq!(after.disk.reserved_bytes, 0);
    assert_eq!(after.app_meta.as_deref(), Some(&b"the ledger"[..]));
    assert_eq!(
        read_app_meta(&path).unwrap().as_deref(),
        Some(&b"the ledger"[..])
    );
    let fast = summarize(&path, false).unwrap();
    assert_eq!((fast.records, fast.corruption), (30_000, None));

    // Compressing again changes nothing; a writer cannot append to it.
    let again = compress_closed(&path, &CompressOptions::default()).unwrap();
    assert_eq!(
        (again.files, again.already_compressed),
        (0, before.segments)
    );
    assert!(matches!(
        Writer::open(&path, &WriterOptions::archive(1 << 20)),
        Err(JournalError::Compressed { .. })
    ));
}

#[test]
fn a_compressed_lapped_ring_keeps_its_records_and_its_lap_counts() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ring.tbj");
    let plain = dir.path().join("plain.tbj");
    write_ring(&path, 256 << 10, 20_000);
    copy_journal(&path, &plain);
    let before = summarize(&path, true).unwrap();
    assert!(before.overwritten.laps > 3, "{:?}", before.overwritten);
    let report = compress(
        &path,
        &CompressOptions {
            level: 1,
            frame_bytes: 64 << 10,
        },
    )
    .unwrap();
    assert_eq!((report.files, report.records), (1, before.records));
    assert!(report.frames > 1);
    let records = read_all(&path);
    assert_eq!(records, read_all(&plain));
    assert_eq!(records.last().unwrap().0, 20_000);
    let after = summarize(&path, true).unwrap();
    assert_eq!(after.overwritten, before.overwritten);
    assert_eq!(
        (after.first_seq, after.last_seq),
        (before.first_seq, before.last_seq)
    );
    let first = before.first_seq.unwrap();
    let targets = [
        0,
        first - 1,
        first,
        first + 1,
        first + 500,
        19_999,
        20_000,
        20_001,
    ];
    assert_eq!(seeks(&path, &targets), seeks(&plain, &targets));
    assert!(matches!(
        Writer::open(&path, &WriterOptions::ring(256 << 10)),
        Err(JournalError::Compressed { .. })
    ));
}

#[test]
fn a_journal_open_for_writing_is_not_compressed() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("day");
    let mut w = Writer::open(&path, &WriterOptions::archive(1 << 20)).unwrap();
    w.append(1, b"x").unwrap();
    assert!(matches!(
        compress(&path, &CompressOptions::default()),
        Err(JournalError::Locked { .. })
    ));
    let ring = dir.path().join("ring.tbj");
    let mut r = Writer::open(&ring, &WriterOptions::ring(1 << 16)).unwrap();
    r.append(1, b"x").unwrap();
    assert!(matches!(
        compress(&ring, &CompressOptions::default()),
        Err(JournalError::Locked { .. })
    ));
    // Untouched: still plain, still written.
    w.append(2, b"y").unwrap();
    drop(w);
    drop(r);
    assert!(!Reader::open(&path).unwrap().compressed());
    assert_eq!(read_all(&path).len(), 2);
    // Bad options are refused before anything is touched.
    assert!(matches!(
        compress(
            &path,
            &CompressOptions {
                level: 99,
                frame_bytes: 1 << 20
            }
        ),
        Err(JournalError::InvalidOptions(_))
    ));
}

#[test]
fn killed_compress_child_writer() {
    // Child half of `a_journal_a_killed_writer_left_is_recovered_then_compressed`.
    let Ok(path) = std::env::var("TICKBOX_JOURNAL_COMPRESS_CHILD") else {
        return;
    };
    let mut w = Writer::open(&path, &WriterOptions::archive(1 << 20)).unwrap();
    for seq in 1..=20_000 {
        w.append(time_for(seq), &payload_for(seq)).unwrap();
    }
    std::fs::write(format!("{path}.ready"), "20000").unwrap();
    loop {
        std::thread::park();
    }
}

#[test]
fn a_journal_a_killed_writer_left_is_recovered_then_compressed() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("day");
    let mut child = tickbox_testkit::ChildGuard(
        tickbox_testkit::self_test_command(module_path!(), "killed_compress_child_writer")
            .arg("--nocapture")
            .env("TICKBOX_JOURNAL_COMPRESS_CHILD", &path)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap(),
    );
    let ready = dir.path().join("day.ready");
    assert!(tickbox_testkit::poll_until(
        Duration::from_secs(15),
        Duration::from_millis(5),
        || ready.exists()
    ));
    let _ = child.0.kill();
    child.0.wait().unwrap();
    assert!(summarize(&path, false).unwrap().writer_active);
    let report = compress_closed(&path, &CompressOptions::default()).unwrap();
    assert_eq!(
        (report.recovered, report.records),
        (1, 20_000),
        "{report:?}"
    );
    let records = read_all(&path);
    assert_eq!(records.len(), 20_000);
    assert!(records
        .iter()
        .all(|(s, t, p)| *t == time_for(*s) && *p == payload_for(*s)));
    let s = summarize(&path, true).unwrap();
    assert!(!s.writer_active);
    assert_eq!(s.corruption, None);
}

/// The file offsets of a compressed file's frames, from its index: the trailer's frame count, then the entries.
fn frame_offsets(file: &Path) -> Vec<(u64, u64)> {
    let bytes = std::fs::read(file).unwrap();
    let n = bytes.len();
    let count = u64::from_le_bytes(bytes[n - 24..n - 16].try_into().unwrap()) as usize;
    let entries = &bytes[n - 24 - 48 * count..n - 24];
    entries
        .chunks_exact(48)
        .map(|e| {
            let offset = u64::from_le_bytes(e[..8].try_into().unwrap());
            let stored = u32::from_le_bytes(e[8..12].try_into().unwrap()) as u64;
            (offset, stored)
        })
        .collect()
}

/// A compressed ring of 10,000 records in frames of about 64 KiB; returns its path and its records.
fn compressed_ring(dir: &Path, name: &str) -> (PathBuf, Vec<Rec>) {
    let path = dir.join(name);
    write_ring(&path, 4 << 20, 10_000);
    let records = read_all(&path);
    compress(
        &path,
        &CompressOptions {
            level: 3,
            frame_bytes: 64 << 10,
        },
    )
    .unwrap();
    (path, records)
}

/// Reads everything, passing damage: the records read and what was passed.
fn read_through(path: &Path) -> (Vec<Rec>, Vec<tickbox_journal::Skipped>) {
    let mut r = Reader::open(path).unwrap();
    let (mut got, mut skipped) = (Vec::new(), Vec::new());
    loop {
        match r.next() {
            Ok(Some(rec)) => got.push((rec.seq, rec.capture_time_ns, rec.payload.to_vec())),
            Ok(None) => break,
            Err(JournalError::CorruptRecord { .. }) => skipped.push(r.skip_damage().unwrap()),
            Err(e) => panic!("{e}"),
        }
        assert!(skipped.len() < 10, "{skipped:?}");
    }
    (got, skipped)
}

#[test]
fn a_flipped_byte_in_a_compressed_frame_is_damage_and_the_rest_reads() {
    let dir = tempfile::tempdir().unwrap();
    let (path, records) = compressed_ring(dir.path(), "ring.tbj");
    let frames = frame_offsets(&path);
    assert!(frames.len() > 5, "{}", frames.len());
    let (offset, stored) = frames[3];
    tickbox_testkit::damage::invert_byte(&path, offset + stored / 2);

    let (got, skipped) = read_through(&path);
    assert_eq!(skipped.len(), 1, "{skipped:?}");
    let s = &skipped[0];
    assert_eq!(
        (s.path.clone(), s.offset, s.bytes),
        (path.clone(), offset, stored)
    );
    let missing: Vec<u64> = (s.first_missing.unwrap()..s.resumed_at.unwrap()).collect();
    assert_eq!(s.records, missing.len() as u64);
    assert!(!missing.is_empty());
    // Every record outside the damaged frame is read, intact and in order.
    let expected: Vec<Rec> = records
        .iter()
        .filter(|r| !missing.contains(&r.0))
        .cloned()
        .collect();
    assert_eq!(got, expected);

    let v = summarize(&path, true).unwrap();
    let c = v.corruption.clone().unwrap();
    assert_eq!((c.path, c.offset), (path.clone(), offset));
    assert_eq!(v.damaged.len(), 1);
    assert_eq!((v.damaged[0].offset, v.damaged[0].bytes), (offset, stored));
    assert_eq!(v.records + v.records_after_damage, got.len() as u64);
    assert_eq!(v.damaged[0].intact_after, v.records_after_damage);
    // A seek past the damage does not see it; one into it lands on the damaged frame, reported by `next`.
    let mut r = Reader::open(&path).unwrap();
    r.seek_seq(s.resumed_at.unwrap() + 10).unwrap();
    assert_eq!(r.next().unwrap().unwrap().seq, s.resumed_at.unwrap() + 10);
    r.seek_seq(missing[1]).unwrap();
    assert!(matches!(r.next(), Err(JournalError::CorruptRecord { .. })));
    assert_eq!(r.skip_damage().unwrap().resumed_at, s.resumed_at);
}

#[test]
fn a_damaged_index_is_rebuilt_from_the_frames() {
    let dir = tempfile::tempdir().unwrap();
    let (path, records) = compressed_ring(dir.path(), "ring.tbj");
    let len = std::fs::metadata(&path).unwrap().len();
    // A byte of the last index entry.
    tickbox_testkit::damage::invert_byte(&path, len - 24 - 20);
    let (got, skipped) = read_through(&path);
    assert!(skipped.is_empty());
    assert_eq!(got, records);
    let s = summarize(&path, true).unwrap();
    assert_eq!(s.corruption, None);
    assert!(
        s.metadata_repairs
            .iter()
            .any(|r| r.contains("index") && r.contains("rebuilt")),
        "{:?}",
        s.metadata_repairs
    );
}

#[test]
fn a_cut_compressed_file_reads_up_to_the_cut() {
    let dir = tempfile::tempdir().unwrap();
    let (path, records) = compressed_ring(dir.path(), "ring.tbj");
    let frames = frame_offsets(&path);
    let (offset, stored) = frames[frames.len() / 2];
    std::fs::OpenOptions::new()
        .write(true)
        .open(&path)
        .unwrap()
        .set_len(offset + stored / 2)
        .unwrap();
    let (got, skipped) = read_through(&path);
    // The frames before the cut read; the cut one is damage, at its offset.
    assert_eq!(skipped.len(), 1, "{skipped:?}");
    assert_eq!(skipped[0].offset, offset);
    assert_eq!(skipped[0].resumed_at, None);
    assert_eq!(got, records[..got.len()].to_vec());
    assert_eq!(got.last().unwrap().0 + 1, skipped[0].first_missing.unwrap());
    let s = summarize(&path, true).unwrap();
    assert_eq!(s.records, got.len() as u64);
    assert_eq!(s.corruption.unwrap().offset, offset);
}

#[test]
fn an_archive_half_compressed_reads_as_one_and_a_writer_goes_on_with_it() {
    let dir = tempfile::tempdir().unwrap();
    // Two archives with the same records: one compressed, whose first segments replace the plain one's, as a
    // compression interrupted midway leaves it.
    let packed = dir.path().join("packed");
    let mixed = dir.path().join("mixed");
    write_archive(&packed, 25_000, 1 << 20);
    write_archive(&mixed, 25_000, 1 << 20);
    let plain_records = read_all(&mixed);
    compress_closed(&packed, &CompressOptions::default()).unwrap();
    let segments = list_segments(&mixed).unwrap();
    assert!(segments.len() >= 3);
    for (i, p) in &segments[..segments.len() - 1] {
        std::fs::copy(tickbox_journal::segment_path(&packed, *i), p).unwrap();
    }
    std::fs::write(mixed.join("0000000002.compressing"), b"half-written").unwrap();
    assert_eq!(read_all(&mixed), plain_records);
    assert_eq!(
        summarize(&mixed, true).unwrap().disk.compressed_files,
        segments.len() as u64 - 1
    );
    let mut w = Writer::open(&mixed, &WriterOptions::archive(1 << 20)).unwrap();
    assert_eq!(w.recovery().temporaries_removed, 1);
    w.append(time_for(25_001), &payload_for(25_001)).unwrap();
    drop(w);
    assert_eq!(read_all(&mixed).len(), 25_001);
    let report = compress_closed(&mixed, &CompressOptions::default()).unwrap();
    assert_eq!(
        (report.files, report.already_compressed),
        (1, segments.len() as u64 - 1)
    );
    assert_eq!(read_all(&mixed).len(), 25_001);
}

#[test]
fn a_damaged_journal_is_not_compressed() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ring.tbj");
    write_ring(&path, 1 << 20, 2_000);
    tickbox_testkit::damage::invert_byte(&path, HEADER_SIZE + 50_000);
    let before = std::fs::read(&path).unwrap();
    let err = compress_closed(&path, &CompressOptions::default()).unwrap_err();
    assert!(matches!(err, JournalError::CorruptRecord { .. }), "{err}");
    assert!(err.to_string().contains("not compressed"), "{err}");
    assert_eq!(std::fs::read(&path).unwrap(), before);
    assert!(!dir.path().join("ring.compressing").exists());
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 12, ..ProptestConfig::default() })]

    /// Any records, any frame size: the compressed journal reads back record for record, and a seek to any
    /// sequence or time lands where the plain one's does.
    #[test]
    fn compressed_reads_back_and_seeks_like_plain(
        sizes in prop::collection::vec(0usize..3000, 1..400),
        frame_kib in 64u64..256,
        step in 1u64..5,
        seek_to in prop::collection::vec(0u64..500, 4),
    ) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("j");
        let plain = dir.path().join("plain");
        let mut w = Writer::open(&path, &WriterOptions::archive(1 << 16)).unwrap();
        for (i, n) in sizes.iter().enumerate() {
            let seq = i as u64 + 1;
            let payload: Vec<u8> = (0..*n).map(|k| (seq as usize * 31 + k) as u8).collect();
            w.append(seq * step, &payload).unwrap();
        }
        drop(w);
        copy_journal(&path, &plain);
        compress_closed(&path, &CompressOptions { level: 1, frame_bytes: frame_kib << 10 }).unwrap();
        prop_assert_eq!(read_all(&path), read_all(&plain));
        let mut a = Reader::open(&path).unwrap();
        let mut b = Reader::open(&plain).unwrap();
        for t in seek_to {
            a.seek_seq(t).unwrap();
            b.seek_seq(t).unwrap();
            prop_assert_eq!(a.next().unwrap().map(|r| r.seq), b.next().unwrap().map(|r| r.seq));
            a.seek_time(t * step).unwrap();
            b.seek_time(t * step).unwrap();
            prop_assert_eq!(a.next().unwrap().map(|r| r.seq), b.next().unwrap().map(|r| r.seq));
        }
        let (sa, sb) = (summarize(&path, true).unwrap(), summarize(&plain, true).unwrap());
        prop_assert_eq!((sa.records, sa.last_seq, sa.payload_bytes), (sb.records, sb.last_seq, sb.payload_bytes));
    }
}

/// A reader streaming a compressed file (its next frame inflated ahead, on a thread) that seeks back and forth,
/// and reads on from each seek across several frames, gets what a reader of the plain file gets.
#[test]
fn a_streaming_reader_that_seeks_back_and_forth_reads_like_the_plain_one() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ring.tbj");
    let plain = dir.path().join("plain.tbj");
    write_ring(&path, 8 << 20, 40_000);
    copy_journal(&path, &plain);
    compress(
        &path,
        &CompressOptions {
            level: 1,
            frame_bytes: 64 << 10,
        },
    )
    .unwrap();
    let mut a = Reader::open(&path).unwrap();
    let mut b = Reader::open(&plain).unwrap();
    let run = |r: &mut Reader, n: usize| -> Vec<Rec> {
        (0..n)
            .map_while(|_| {
                r.next()
                    .unwrap()
                    .map(|x| (x.seq, x.capture_time_ns, x.payload.to_vec()))
            })
            .collect()
    };
    assert_eq!(run(&mut a, 5_000), run(&mut b, 5_000));
    for target in [30_000, 10, 39_990, 12_345, 12_346, 1, 25_000] {
        a.seek_seq(target).unwrap();
        b.seek_seq(target).unwrap();
        assert_eq!(run(&mut a, 3_000), run(&mut b, 3_000), "from {target}");
        a.seek_time(time_for(target + 7)).unwrap();
        b.seek_time(time_for(target + 7)).unwrap();
        assert_eq!(
            run(&mut a, 1_500),
            run(&mut b, 1_500),
            "from time of {target}"
        );
    }
    a.seek_oldest();
    assert_eq!(run(&mut a, 50_000).len(), 40_000);
}
