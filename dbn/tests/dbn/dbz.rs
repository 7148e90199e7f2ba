//! Legacy DBZ files built here byte by byte (the `dbn` crate reads DBZ but no longer writes it): a good one
//! imports, and damage the crate takes on trust (its metadata's variable part, a record length off the 8-byte
//! grid) is refused with an error naming the file instead of panicking inside the crate.

use std::path::{Path, PathBuf};

use tickbox_dbn::dbn::{rtype, FlagSet, MboMsg, RecordHeader};
use tickbox_dbn::{import_files, open_source, DbnError, ImportOptions, SourceForm};

/// A DBZ file: a zstd skippable frame holding the 96-byte fixed metadata and the zstd-compressed `variable`
/// part, then a zstd frame of `records`.
fn dbz(variable: &[u8], records: &[u8]) -> Vec<u8> {
    let mut metadata = b"DBZ\x01".to_vec();
    let mut dataset = [0u8; 16];
    dataset[..9].copy_from_slice(b"GLBX.MDP3");
    metadata.extend_from_slice(&dataset);
    metadata.extend_from_slice(&0u16.to_le_bytes()); // schema: MBO
    for field in [1u64, 2, 0, 0] {
        metadata.extend_from_slice(&field.to_le_bytes()); // start, end, limit, record count
    }
    metadata.extend_from_slice(&[1, 0, 0]); // zstd; instrument ids in and out
    metadata.extend_from_slice(&[0u8; 39]);
    assert_eq!(metadata.len(), 96);
    metadata.extend_from_slice(&zstd::encode_all(variable, 0).unwrap());
    let mut out = 0x184D_2A50u32.to_le_bytes().to_vec();
    out.extend_from_slice(&(metadata.len() as u32).to_le_bytes());
    out.extend_from_slice(&metadata);
    out.extend_from_slice(&zstd::encode_all(records, 0).unwrap());
    out
}

/// The variable part of a file with no symbols: layout length, then four empty lists.
fn no_symbols() -> Vec<u8> {
    [0u32; 5].iter().flat_map(|n| n.to_le_bytes()).collect()
}

fn mbo(order_id: u64) -> Vec<u8> {
    let m = MboMsg {
        hd: RecordHeader::new::<MboMsg>(rtype::MBO, 1, 7, order_id),
        order_id,
        price: 5,
        size: 1,
        flags: FlagSet::default(),
        channel_id: 0,
        action: b'A' as _,
        side: b'B' as _,
        ts_recv: order_id,
        ts_in_delta: 0,
        sequence: 1,
    };
    AsRef::<[u8]>::as_ref(&m).to_vec()
}

fn write(dir: &Path, name: &str, bytes: &[u8]) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, bytes).unwrap();
    path
}

fn refusal(path: &Path) -> String {
    match open_source(path, None) {
        Err(e @ DbnError::Refused { .. }) => e.to_string(),
        Err(e) => panic!("refused with the wrong error: {e}"),
        Ok(_) => panic!("{} was accepted", path.display()),
    }
}

#[test]
fn a_built_dbz_file_imports() {
    let dir = tempfile::tempdir().unwrap();
    let records = [mbo(1), mbo(2)].concat();
    let file = write(dir.path(), "good.dbz", &dbz(&no_symbols(), &records));
    assert_eq!(
        open_source(&file, None).unwrap().source.form,
        SourceForm::Dbz
    );
    let report = import_files(&dir.path().join("j"), &[file], &ImportOptions::default()).unwrap();
    assert_eq!(report.records, 2);
}

#[test]
fn damaged_dbz_metadata_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let short = write(dir.path(), "short.dbz", &dbz(&[0, 0], &mbo(1)));
    assert!(
        refusal(&short).contains("symbols are 2 bytes, shorter than their 4-byte layout length"),
        "{}",
        refusal(&short)
    );
    let bomb = vec![0u8; (64 << 20) + 1];
    let bomb = write(dir.path(), "bomb.dbz", &dbz(&bomb, &mbo(1)));
    assert!(refusal(&bomb).contains("decompress to more than 64 MiB"));
    let mut cut = dbz(&no_symbols(), &mbo(1));
    cut.truncate(60);
    let cut = write(dir.path(), "cut.dbz", &cut);
    assert!(refusal(&cut).contains("truncated DBZ metadata"));
}

/// One record whose length byte says 60 bytes (a multiple of 4, not of 8) would put the next record at a
/// misaligned address where the crate views it. The good records before it import; it is refused.
#[test]
fn a_dbz_record_length_off_the_8_byte_grid_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let mut odd = mbo(2);
    odd[0] = 15;
    odd.extend_from_slice(&[0; 4]);
    let records = [mbo(1), odd, mbo(3)].concat();
    let file = write(dir.path(), "odd.dbz", &dbz(&no_symbols(), &records));
    let mut source = open_source(&file, None).unwrap();
    assert!(source.next_record().unwrap().is_some());
    let err = source
        .next_record()
        .expect_err("the off-grid record is refused");
    assert!(
        err.to_string().contains("record 2: length 60 bytes"),
        "{err}"
    );
}
