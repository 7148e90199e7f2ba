//! Arbitrary bytes as what tickbox reads from Databento sources: a journal's vendor frame (`journal dump`, the
//! exports, the derived wire message), and a DBN file or headerless fragment (`import`, `feed --source`).
//! Every path returns a value or an error, never a panic inside tickbox or the `dbn` crate.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tickbox_dbn::{
    decode_frame, derive_wire, import_files, record_json, ImportOptions, ReplaySource, VendorFrame,
};

/// Records read per input at most, so a large valid file cannot stall the run.
const MAX_ITEMS: usize = 10_000;

fn as_vendor_frame(bytes: &[u8]) {
    let _ = decode_frame(bytes, None);
    if let Ok(f) = VendorFrame::decode(bytes) {
        let _ = derive_wire(&f);
        for version in [f.version, 1, 3] {
            let _ = record_json(version, false, f.record);
            let _ = record_json(version, true, f.record);
        }
    }
    for version in 1..=3 {
        let _ = record_json(version, false, bytes);
        let _ = record_json(version, true, bytes);
    }
}

fn as_file(bytes: &[u8], name: &str) {
    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir.path().join(name);
    std::fs::write(&file, bytes).expect("write input");
    let opts = ImportOptions {
        segment_size: 1 << 20,
        ..ImportOptions::default()
    };
    let _ = import_files(&dir.path().join("journal"), &[file.clone()], &opts);
    if let Ok(mut source) = ReplaySource::open(&file) {
        for _ in 0..MAX_ITEMS {
            match source.next_item() {
                Ok(Some(_)) => {}
                Ok(None) | Err(_) => break,
            }
        }
    }
}

fuzz_target!(|data: &[u8]| {
    // The first byte picks how the rest is read, so one corpus covers frames, files and each fragment version.
    let Some((&mode, bytes)) = data.split_first() else {
        return;
    };
    match mode % 5 {
        0 => as_vendor_frame(bytes),
        1 => as_file(bytes, "input.dbn"),
        2 => as_file(bytes, "input.v1.dbn"),
        3 => as_file(bytes, "input.v2.dbn"),
        _ => as_file(bytes, "input.v3.dbn"),
    }
});
