//! Arbitrary bytes as a compressed journal file (a ring, and an archive's only segment), seeded with real
//! compressed journals so the fuzzer works on the header, frame and index decoders: opening, iterating (passing
//! damage), seeking and `summarize` return errors for bad data, never panic, never loop, and never allocate more
//! than a frame's stated length (at most 1 GiB).
#![no_main]

use libfuzzer_sys::fuzz_target;
use tickbox_journal::{read_app_meta, summarize, JournalError, Reader};

fn exercise(path: &std::path::Path) {
    let _ = summarize(path, true);
    let _ = summarize(path, false);
    let _ = read_app_meta(path);
    if let Ok(mut r) = Reader::open(path) {
        let mut last = 0;
        for _ in 0..10_000 {
            match r.next() {
                Ok(Some(rec)) => {
                    // Sequences only go forward.
                    assert!(rec.seq > last || last == 0, "seq {} after {last}", rec.seq);
                    last = rec.seq;
                }
                Ok(None) => break,
                Err(JournalError::CorruptRecord { .. }) => {
                    if r.skip_damage().is_err() {
                        break;
                    }
                }
                Err(_) => break,
            }
        }
        let _ = r.seek_seq(3);
        let _ = r.next();
        let _ = r.seek_time(1_000);
        let _ = r.next();
        r.seek_oldest();
        let _ = r.next();
    }
}

fuzz_target!(|data: &[u8]| {
    let dir = tempfile::tempdir().expect("temp dir");
    let ring = dir.path().join("j.tbj");
    std::fs::write(&ring, data).expect("write input");
    exercise(&ring);
    let archive = dir.path().join("a");
    std::fs::create_dir(&archive).expect("archive dir");
    std::fs::write(tickbox_journal::segment_path(&archive, 0), data).expect("write input");
    exercise(&archive);
});
