//! Arbitrary bytes as a journal file (and as the first segment of an archive): opening, iterating, seeking and
//! `summarize` return errors for bad data, never panic or fault.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tickbox_journal::{read_app_meta, summarize, Reader, HEADER_SIZE};

/// Inputs shorter than a header cannot get past the header check; larger ones are padded with zeros up to the
/// smallest journal so the fuzzer's mutations land in a file that can be opened.
const MIN_FILE: usize = (HEADER_SIZE + tickbox_journal::MIN_CAPACITY) as usize;

fn exercise(path: &std::path::Path) {
    let _ = summarize(path, true);
    let _ = summarize(path, false);
    let _ = read_app_meta(path);
    if let Ok(mut r) = Reader::open(path) {
        for _ in 0..10_000 {
            match r.next() {
                Ok(Some(rec)) => {
                    let _ = rec.payload.len();
                }
                Ok(None) => break,
                Err(tickbox_journal::JournalError::Lapped { .. }) => {}
                Err(_) => break,
            }
        }
        let _ = r.seek_seq(3);
        let _ = r.seek_time(1_000);
        let _ = r.next();
    }
}

fuzz_target!(|data: &[u8]| {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut bytes = data.to_vec();
    if bytes.len() > HEADER_SIZE as usize && bytes.len() < MIN_FILE {
        bytes.resize(MIN_FILE, 0);
    }
    let ring = dir.path().join("j.tbj");
    std::fs::write(&ring, &bytes).expect("write input");
    exercise(&ring);
    let archive = dir.path().join("a");
    std::fs::create_dir(&archive).expect("archive dir");
    std::fs::write(tickbox_journal::segment_path(&archive, 0), &bytes).expect("write input");
    exercise(&archive);
});
