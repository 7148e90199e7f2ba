//! Hostile environments: the file shrinking under a live reader or writer (another process truncating it), the
//! disk filling up while recording, and a reader racing a writer that laps it.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tickbox_journal::{
    summarize, Durability, JournalError, Reader, Writer, WriterOptions, HEADER_SIZE, MIN_CAPACITY,
};

fn payload_for(seq: u64) -> Vec<u8> {
    let len = (seq * 37 % 200) as usize;
    (0..len).map(|i| (seq as usize + i) as u8).collect()
}

/// Truncates `path` through its own file descriptor, as another process would.
fn truncate(path: &std::path::Path, len: u64) {
    std::fs::OpenOptions::new()
        .write(true)
        .open(path)
        .unwrap()
        .set_len(len)
        .unwrap();
}

#[test]
fn a_file_truncated_under_an_iterating_reader_is_an_error_not_a_sigbus() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ring.tbj");
    let cap = 4u64 << 20;
    let mut w = Writer::open(&path, &WriterOptions::ring(cap)).unwrap();
    // Fill most of the ring, so records live on pages far past the cut below.
    let mut seq = 0;
    while w.next_seq() < 25_000 {
        seq = w.append(seq, &payload_for(w.next_seq())).unwrap();
    }
    drop(w);
    let cut = HEADER_SIZE + MIN_CAPACITY;
    let mut r = Reader::open(&path).unwrap();
    let first = r.next().unwrap().unwrap().seq;
    assert_eq!(first, 1);

    let stop = Arc::new(AtomicBool::new(false));
    let truncator = {
        let path = path.clone();
        let stop = Arc::clone(&stop);
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(20));
            truncate(&path, cut);
            stop.store(true, Ordering::Release);
        })
    };
    // Iterate (rewinding at the end) until the reader reports the truncation; bounded in time.
    let deadline = Instant::now() + Duration::from_secs(15);
    let mut read = 0u64;
    let err = loop {
        assert!(
            Instant::now() < deadline,
            "reader never noticed the truncation ({read} records read)"
        );
        match r.next() {
            Ok(Some(rec)) => {
                assert_eq!(rec.payload, &payload_for(rec.seq)[..], "seq {}", rec.seq);
                read += 1;
            }
            Ok(None) => r.seek_oldest(),
            Err(e) => break e,
        }
    };
    truncator.join().unwrap();
    assert!(stop.load(Ordering::Acquire));
    match &err {
        JournalError::Truncated {
            actual, expected, ..
        } => {
            assert_eq!(*actual, cut);
            assert_eq!(*expected, HEADER_SIZE + cap);
        }
        other => panic!("expected a truncation error, got {other:?}"),
    }
    eprintln!("reader read {read} records, then: {err}");
    // The error is sticky: the mapping no longer shows the file.
    assert!(matches!(r.next(), Err(JournalError::Truncated { .. })));
    // Reopening refuses the file; `summarize` reads what precedes the cut.
    assert!(matches!(
        Reader::open(&path),
        Err(JournalError::Truncated { .. })
    ));
    let s = summarize(&path, true).unwrap();
    assert!(s.records > 0 && s.corruption.is_some(), "{s:?}");
}

#[test]
fn a_file_truncated_under_a_writer_fails_its_next_append() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ring.tbj");
    let cap = 1u64 << 20;
    let mut w = Writer::open(&path, &WriterOptions::ring(cap)).unwrap();
    for i in 0..100 {
        w.append(i, &payload_for(i)).unwrap();
    }
    truncate(&path, HEADER_SIZE + MIN_CAPACITY);
    // The writer keeps writing into its mapping; the first append that touches a page past the cut fails.
    let mut failed = None;
    for i in 0..cap / 24 {
        if let Err(e) = w.append(i, &payload_for(i)) {
            failed = Some(e);
            break;
        }
    }
    let err = failed.expect("no append failed after the file was truncated");
    assert!(
        matches!(err, JournalError::Truncated { .. }),
        "expected a truncation error, got {err:?}"
    );
    assert!(matches!(
        w.append(0, b"x"),
        Err(JournalError::Truncated { .. })
    ));
}

/// Child half of `a_full_disk_fails_segment_growth_and_keeps_every_complete_record`: records into an archive,
/// then lowers its file size limit below a segment's size (the disk "fills up"), and keeps recording until the
/// journal says it cannot. Prints the last sequence recorded and the error.
#[test]
#[allow(unsafe_code)] // setrlimit and signal: std has neither
fn fsize_child_writer() {
    let Ok(dir) = std::env::var("TICKBOX_JOURNAL_FSIZE_CHILD") else {
        return;
    };
    // SAFETY: ignoring SIGXFSZ, so exceeding the limit is an EFBIG error instead of killing this process.
    unsafe { libc::signal(libc::SIGXFSZ, libc::SIG_IGN) };
    let mut w = Writer::open(
        &dir,
        &WriterOptions::archive(MIN_CAPACITY).durability(Durability::PerBatch),
    )
    .unwrap();
    let mut last = 0;
    for i in 0..2_000u64 {
        last = w.append(i, &payload_for(i + 1)).unwrap();
    }
    let limit = libc::rlimit {
        rlim_cur: MIN_CAPACITY / 2,
        rlim_max: MIN_CAPACITY / 2,
    };
    // SAFETY: setrlimit reads one `rlimit` through the pointer, a live local.
    assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_FSIZE, &limit) }, 0);
    // Batches of 16 records (about 1.6 KB): committed with a write the file size limit refuses, so the writer
    // falls back to storing them through the mapping into what it reserved.
    let mut err = None;
    for i in 0..10_000u64 {
        let first = w.next_seq();
        let batch: Vec<Vec<u8>> = (first..first + 16).map(payload_for).collect();
        let appended = w.append_batch(batch.iter().map(|p| (i, &p[..])));
        last = w.next_seq() - 1;
        if let Err(e) = appended {
            err = Some(e);
            break;
        }
    }
    println!("LAST {last}");
    println!(
        "FULL {}",
        err.as_ref().is_some_and(JournalError::is_disk_full)
    );
    println!("ERR {:?}", err.map(|e| e.to_string()));
    drop(w);
}

#[test]
fn a_full_disk_fails_segment_growth_and_keeps_every_complete_record() {
    let dir = tempfile::tempdir().unwrap();
    let archive = dir.path().join("archive");
    let child = tickbox_testkit::ChildGuard(
        tickbox_testkit::self_test_command(module_path!(), "fsize_child_writer")
            .arg("--nocapture")
            .env("TICKBOX_JOURNAL_FSIZE_CHILD", &archive)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap(),
    );
    let output = child.wait_output(Duration::from_secs(15));
    let (status, out) = (output.status, String::from_utf8_lossy(&output.stdout));
    assert!(status.success(), "child failed: {status:?}\n{out}");
    let last: u64 = out
        .lines()
        .find_map(|l| l.split_once("LAST ").map(|(_, v)| v))
        .expect("child printed its last sequence")
        .parse()
        .unwrap();
    let err = out
        .lines()
        .find_map(|l| l.split_once("ERR ").map(|(_, v)| v))
        .expect("child printed its error");
    eprintln!("child: last seq {last}, error {err}");
    // The limit is below one segment's size: the segment being written cannot grow to its end, or the next one
    // cannot be made (whichever the writer reaches first).
    assert!(
        out.contains("FULL true") && err.contains("File too large"),
        "expected DiskFull (EFBIG), got {err}"
    );
    assert!(last > 2_000);
    // No half-made segment is left behind, and verification reads every complete record.
    for entry in std::fs::read_dir(&archive).unwrap() {
        let name = entry.unwrap().file_name();
        assert!(
            !name.to_string_lossy().ends_with(".creating"),
            "{name:?} left behind"
        );
    }
    let s = summarize(&archive, true).unwrap();
    assert_eq!(s.corruption, None, "{s:?}");
    assert_eq!(s.records, last);
    assert_eq!((s.first_seq, s.last_seq), (Some(1), Some(last)));
    let mut r = Reader::open(&archive).unwrap();
    let mut n = 0;
    while let Some(rec) = r.next().unwrap() {
        n += 1;
        assert_eq!(rec.seq, n);
        assert_eq!(rec.payload, &payload_for(n)[..]);
    }
    assert_eq!(n, last);
}

/// A reader racing a writer that laps it over and over: every record it returns is intact, and being lapped is
/// reported as `Lapped`, never as corruption (with records copied out by atomic loads and validated on the copy).
#[test]
fn a_reader_lapped_again_and_again_never_returns_a_torn_record() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ring.tbj");
    let mut w = Writer::open(&path, &WriterOptions::ring(MIN_CAPACITY)).unwrap();
    w.append(1, &payload_for(1)).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let stop = Arc::clone(&stop);
        std::thread::spawn(move || {
            let deadline = Instant::now() + Duration::from_secs(3);
            while !stop.load(Ordering::Relaxed) && Instant::now() < deadline {
                let s = w.next_seq();
                w.append(s, &payload_for(s)).unwrap();
            }
        })
    };
    let mut r = Reader::open(&path).unwrap();
    let (mut good, mut lapped) = (0u64, 0u64);
    let deadline = Instant::now() + Duration::from_secs(2);
    while Instant::now() < deadline {
        match r.next() {
            Ok(Some(rec)) => {
                assert_eq!(rec.payload, &payload_for(rec.seq)[..], "seq {}", rec.seq);
                assert_eq!(rec.capture_time_ns, rec.seq);
                good += 1;
            }
            Ok(None) => std::thread::yield_now(),
            Err(JournalError::Lapped { .. }) => lapped += 1,
            Err(e) => panic!("after {good} good records: {e}"),
        }
    }
    stop.store(true, Ordering::Relaxed);
    writer.join().unwrap();
    eprintln!("{good} intact records, lapped {lapped} times");
    assert!(good > 1000);
}

#[test]
fn app_meta_written_while_read_is_never_torn() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("meta.tbj");
    let mut w = Writer::open(&path, &WriterOptions::ring(MIN_CAPACITY)).unwrap();
    w.set_app_meta(&[0u8; 700]).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let stop = Arc::clone(&stop);
        std::thread::spawn(move || {
            let mut i = 0u8;
            while !stop.load(Ordering::Relaxed) {
                i = i.wrapping_add(1);
                w.set_app_meta(&[i; 700]).unwrap();
                // Paced like a real writer (the recorder stores its ledger at most once per publish), though far
                // faster; a reader that sees both slots mid-write retries.
                std::thread::sleep(Duration::from_micros(20));
            }
        })
    };
    let deadline = Instant::now() + Duration::from_millis(500);
    let mut reads = 0;
    while Instant::now() < deadline {
        let meta = tickbox_journal::read_app_meta(&path).unwrap().unwrap();
        assert_eq!(meta.len(), 700);
        assert!(meta.iter().all(|&b| b == meta[0]), "torn metadata");
        reads += 1;
    }
    stop.store(true, Ordering::Relaxed);
    writer.join().unwrap();
    assert!(reads > 10);
    // A byte of the file flipped behind the journal's back is still caught by the slot checksums.
    tickbox_testkit::damage::invert_byte(&path, 1024 + 16);
    tickbox_testkit::damage::invert_byte(&path, 2560 + 16);
    assert_eq!(tickbox_journal::read_app_meta(&path).unwrap(), None);
}
