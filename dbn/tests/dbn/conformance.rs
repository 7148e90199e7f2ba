//! Conformance over real vendor files: set `TICKBOX_DBN_DIR` to a directory of DBN files (`.dbn`, `.dbn.zst`,
//! legacy `.dbz`, headerless fragments). Every file must import or be refused with an error naming it; imported
//! records must equal, byte for byte and field by field, what the `dbn` crate decodes; and exporting must give
//! the file back (byte-identical stream; for DBZ, whose container DBN cannot reproduce, the record section byte
//! for byte and the metadata field by field). Without the variable the test says so and passes.

use std::io::{BufReader, Cursor, Read};
use std::path::Path;

use tickbox_dbn::dbn::decode::dbn::{MetadataDecoder, RecordDecoder};
use tickbox_dbn::dbn::decode::{DbnMetadata, DecodeRecordRef, DynDecoder, DynReader};
use tickbox_dbn::dbn::{Metadata, VersionUpgradePolicy};
use tickbox_dbn::{
    export_dbn, import_files, record_json, DbnError, ImportOptions, SourceForm, VendorFrame,
};
use tickbox_journal::{summarize, Reader};

/// Records of `path` as the dbn crate decodes them (each record's bytes), and its metadata if it has any.
fn crate_decode(path: &Path, form: SourceForm, version: u8) -> (Option<Metadata>, Vec<Vec<u8>>) {
    let mut out = Vec::new();
    match form {
        SourceForm::Fragment => {
            let r = DynReader::from_file(path).unwrap();
            let v = if version == 0 {
                tickbox_dbn::dbn::DBN_VERSION
            } else {
                version
            };
            let mut d =
                RecordDecoder::with_version(r, v, VersionUpgradePolicy::AsIs, false).unwrap();
            while let Some(rec) = d.decode_ref().unwrap() {
                out.push(rec.as_ref().to_vec());
            }
            (None, out)
        }
        _ => {
            let mut d = DynDecoder::from_file(path, VersionUpgradePolicy::AsIs).unwrap();
            let m = d.metadata().clone();
            while let Some(rec) = d.decode_record_ref().unwrap() {
                out.push(rec.as_ref().to_vec());
            }
            (Some(m), out)
        }
    }
}

#[test]
fn every_vendor_file_imports_and_round_trips() {
    let Some(dir) = std::env::var_os("TICKBOX_DBN_DIR") else {
        println!("SKIPPED every_vendor_file_imports_and_round_trips: set TICKBOX_DBN_DIR to a directory of DBN files");
        return;
    };
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_file())
        .collect();
    files.sort();
    assert!(!files.is_empty(), "TICKBOX_DBN_DIR holds no files");
    let tmp = tempfile::tempdir().unwrap();
    let (mut exact, mut fieldwise, mut refused) = (0, 0, 0);
    for (n, file) in files.iter().enumerate() {
        let name = file.file_name().unwrap().to_string_lossy().into_owned();
        let journal = tmp.path().join(format!("j{n}"));
        let rep = match import_files(
            &journal,
            std::slice::from_ref(file),
            &ImportOptions::default(),
        ) {
            Ok(r) => r,
            Err(e @ DbnError::Refused { .. }) => {
                let msg = e.to_string();
                assert!(
                    msg.contains(&name),
                    "{name}: the refusal must name the file: {msg}"
                );
                println!("{name:<44} REFUSED  {msg}");
                refused += 1;
                continue;
            }
            Err(e) => panic!("{name}: neither imported nor refused clearly: {e}"),
        };
        let src = &rep.manifest.sources[0];
        let (meta, theirs) = crate_decode(file, src.form, src.version);
        assert_eq!(rep.records, theirs.len() as u64, "{name}: record count");
        assert_eq!(
            summarize(&journal, true).unwrap().records,
            theirs.len() as u64,
            "{name}: journal info records"
        );

        let mut r = Reader::open(&journal).unwrap();
        let mut i = 0;
        while let Some(rec) = r.next().unwrap() {
            let f = VendorFrame::decode(rec.payload).unwrap();
            assert_eq!(f.record, &theirs[i][..], "{name}: record {i} bytes");
            assert_eq!(
                record_json(f.version, src.ts_out, f.record).unwrap(),
                record_json(src.version, src.ts_out, &theirs[i]).unwrap(),
                "{name}: record {i} fields"
            );
            i += 1;
        }
        assert_eq!(i, theirs.len(), "{name}");

        let mut out = Vec::new();
        export_dbn(&journal, None, &mut out, false).unwrap();
        let mut original = Vec::new();
        match src.form {
            SourceForm::Dbz => {
                // DBN cannot rebuild the DBZ container: the records byte for byte, the metadata field by field.
                let body: Vec<u8> = theirs.concat();
                assert!(out.ends_with(&body), "{name}: record section");
                let mut md = MetadataDecoder::with_upgrade_policy(
                    Cursor::new(&out),
                    VersionUpgradePolicy::AsIs,
                );
                let exported = md.decode().unwrap();
                // DBZ states version 0 ("before DBN"); its records are DBN version 1, and DBN metadata says so.
                let mut meta = meta.clone().unwrap();
                assert_eq!((meta.version, exported.version), (0, 1), "{name}: version");
                meta.version = 1;
                assert_eq!(exported, meta, "{name}: every other metadata field");
                assert_eq!(out.len() - body.len(), {
                    let l = u32::from_le_bytes(out[4..8].try_into().unwrap()) as usize;
                    8 + l
                });
                fieldwise += 1;
                println!("{name:<44} imported {:>3} records  {:?} v{}: records byte-identical, metadata field by field", theirs.len(), src.form, src.version);
            }
            _ => {
                DynReader::inferred_with_buffer(BufReader::new(std::fs::File::open(file).unwrap()))
                    .unwrap()
                    .read_to_end(&mut original)
                    .unwrap();
                assert!(
                    out == original,
                    "{name}: export differs from the file ({} vs {} bytes)",
                    out.len(),
                    original.len()
                );
                exact += 1;
                println!(
                    "{name:<44} imported {:>3} records  {:?} v{}{}: round trip byte-identical",
                    theirs.len(),
                    src.form,
                    src.version,
                    if src.compressed { " zstd" } else { "" }
                );
            }
        }
    }
    println!("{} files: {exact} byte-identical, {fieldwise} DBZ (records exact, metadata by field), {refused} refused", files.len());
}
