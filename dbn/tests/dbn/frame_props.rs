//! The vendor frame decoder and the record decoder behind dump/export never panic on bad bytes: random input,
//! and valid frames with bytes flipped, cut or appended, give a typed error or a consistent frame.

use proptest::prelude::*;
use tickbox_dbn::{decode_frame, encode_vendor_frame, record_json, VendorFrame, VendorHeader};
use tickbox_testkit::memory;

fn valid_frame(record_words: u8, rtype: u8, fill: u8) -> Vec<u8> {
    let len = usize::from(record_words.max(4)) * 4;
    let mut rec = vec![fill; len];
    rec[0] = (len / 4) as u8;
    rec[1] = rtype;
    let mut out = Vec::new();
    let h = VendorHeader {
        publisher_id: 1,
        sequence: 2,
        send_time_ns: 3,
        origin_time_ns: 4,
        session: 5,
        flags: 0,
    };
    encode_vendor_frame(&mut out, "V.GLBX.ESH1", &h, 3, 0, &rec);
    out
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    #[test]
    fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..600)) {
        let _ = VendorFrame::decode(&bytes);
        let _ = decode_frame(&bytes, None);
        let _ = record_json(3, false, &bytes);
        let _ = record_json(1, true, &bytes);
    }

    #[test]
    fn mutated_frames_never_panic_and_stay_consistent(
        words in 4u8..40, rtype in any::<u8>(), fill in any::<u8>(),
        flips in proptest::collection::vec((any::<usize>(), any::<u8>()), 0..6),
        cut in any::<usize>(), extra in proptest::collection::vec(any::<u8>(), 0..4),
    ) {
        let mut f = valid_frame(words, rtype, fill);
        prop_assert!(VendorFrame::decode(&f).is_ok());
        for (at, b) in flips {
            let n = f.len();
            f[at % n] = b;
        }
        let cut = cut % (f.len() + 1);
        f.truncate(cut);
        f.extend_from_slice(&extra);
        if let Ok(v) = VendorFrame::decode(&f) {
            // Whatever decodes is self-consistent: the record's own length covers exactly the rest of the frame.
            prop_assert_eq!(v.record.len(), usize::from(v.record[0]) * 4);
            prop_assert_eq!(v.record[1], v.rtype);
            prop_assert!(f.ends_with(v.record));
            let _ = record_json(v.version, false, v.record);
        }
        let _ = decode_frame(&f, None);
    }
}

fn sample_dbn() -> Vec<u8> {
    use tickbox_dbn::dbn::encode::{dbn::Encoder, EncodeRecord};
    use tickbox_dbn::dbn::{rtype, MboMsg, Metadata, RecordHeader, SType, TradeMsg};
    let meta = Metadata::builder()
        .dataset("GLBX.MDP3".to_owned())
        .schema(None)
        .start(1)
        .stype_in(Some(SType::InstrumentId))
        .stype_out(SType::InstrumentId)
        .build();
    let mut out = Vec::new();
    let mut enc = Encoder::new(&mut out, &meta).unwrap();
    for i in 0..4u64 {
        let mbo = MboMsg {
            hd: RecordHeader::new::<MboMsg>(rtype::MBO, 1, 7, i),
            order_id: i,
            price: 5,
            size: 1,
            flags: Default::default(),
            channel_id: 0,
            action: b'A' as _,
            side: b'B' as _,
            ts_recv: i + 1,
            ts_in_delta: 0,
            sequence: 1,
        };
        enc.encode_record(&mbo).unwrap();
        let t = TradeMsg {
            hd: RecordHeader::new::<TradeMsg>(rtype::MBP_0, 1, 7, i),
            price: 5,
            size: 1,
            action: b'T' as _,
            side: b'A' as _,
            flags: Default::default(),
            depth: 0,
            ts_recv: i + 1,
            ts_in_delta: 0,
            sequence: 2,
        };
        enc.encode_record(&t).unwrap();
    }
    out
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 120, ..ProptestConfig::default() })]

    /// A damaged DBN file is imported or refused with an error, never a panic.
    #[test]
    fn mutated_dbn_files_import_or_are_refused(
        flips in proptest::collection::vec((any::<usize>(), any::<u8>()), 1..8),
        cut in any::<usize>(),
    ) {
        let mut bytes = sample_dbn();
        for (at, b) in flips {
            let n = bytes.len();
            bytes[at % n] = b;
        }
        let cut = cut % (bytes.len() + 1);
        bytes.truncate(cut.max(1));
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("x.dbn");
        std::fs::write(&f, &bytes).unwrap();
        let _ = tickbox_dbn::import_files(&dir.path().join("j"), &[f], &tickbox_dbn::ImportOptions::default());
    }
}

/// Every rtype at every length a record can have is described or refused, never a panic. Version 4's TBBO rtype
/// (0xC5, laid out as MBP-1) passed every length check and then panicked inside the `dbn` crate's encoder.
#[test]
fn every_rtype_at_every_length_is_described_or_refused() {
    for version in 1..=3u8 {
        for rtype in 0..=255u8 {
            for words in 4..=255u8 {
                let mut rec = vec![0u8; usize::from(words) * 4];
                rec[0] = words;
                rec[1] = rtype;
                let _ = record_json(version, false, &rec);
                let _ = record_json(version, true, &rec);
            }
        }
    }
}

/// Imports `file` into a fresh journal beside it and returns why the import was refused.
fn import_refusal(file: &std::path::Path) -> String {
    let journal = file.parent().unwrap().join("j");
    tickbox_dbn::import_files(
        &journal,
        &[file.to_path_buf()],
        &tickbox_dbn::ImportOptions::default(),
    )
    .expect_err("the import is refused")
    .to_string()
}

/// A record whose rtype the `dbn` crate cannot view is refused by the importer, naming the record and its
/// rtype, instead of panicking in the crate's index-time dispatch.
#[test]
fn an_unviewable_rtype_is_refused_by_import() {
    let mut rec = vec![0u8; std::mem::size_of::<tickbox_dbn::dbn::Mbp1Msg>()];
    rec[0] = (rec.len() / 4) as u8;
    rec[1] = tickbox_dbn::dbn::rtype::TBBO;
    let err = record_json(3, false, &rec).expect_err("0xC5 is not a version-3 rtype");
    assert!(err.to_string().contains("0xc5"), "{err}");
    let dir = tempfile::tempdir().unwrap();
    let fragment = dir.path().join("tbbo.v3.dbn");
    std::fs::write(&fragment, &rec).unwrap();
    let err = import_refusal(&fragment);
    assert!(err.contains("record 1: rtype 0xc5"), "{err}");
}

/// A record whose length is a multiple of 4 but not of 8 would leave every later record misaligned where the
/// `dbn` crate views it in place. The importer takes the records before it and then refuses the file, naming the
/// record and the stream offset.
#[test]
fn a_record_length_off_the_8_byte_grid_is_refused_after_the_good_records() {
    use tickbox_dbn::dbn::{rtype, RecordHeader, TradeMsg};
    let trade = |ts: u64| TradeMsg {
        hd: RecordHeader::new::<TradeMsg>(rtype::MBP_0, 1, 7, ts),
        price: 5,
        size: 1,
        action: b'T' as _,
        side: b'A' as _,
        flags: Default::default(),
        depth: 0,
        ts_recv: ts,
        ts_in_delta: 0,
        sequence: 2,
    };
    let first = trade(1);
    let mut fragment = AsRef::<[u8]>::as_ref(&first).to_vec();
    let good = fragment.len();
    let mut odd = vec![0u8; 20];
    odd[0] = 5;
    odd[1] = rtype::MBP_0;
    fragment.extend_from_slice(&odd);
    fragment.extend_from_slice(AsRef::<[u8]>::as_ref(&trade(2)));
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("odd.v3.dbn");
    std::fs::write(&file, &fragment).unwrap();

    let mut source = tickbox_dbn::open_source(&file, None).unwrap();
    assert!(
        source.next_record().unwrap().is_some(),
        "the first record is good"
    );
    let err = source.next_record().expect_err("the second is refused");
    let text = err.to_string();
    assert!(text.contains("record 2"), "{text}");
    assert!(
        text.contains(&format!("record length 20 bytes at stream byte {good}")),
        "{text}"
    );
    let err = import_refusal(&file);
    assert!(err.contains("record length 20"), "{err}");
}

/// Peak resident memory of this process, in KiB.
fn peak_rss_kib() -> u64 {
    memory::peak_resident_kib(memory::Process::This).unwrap_or(0)
}

/// A 16-byte file whose DBN header states almost a gigabyte of metadata is refused as truncated without the
/// importer allocating what the header states (it once sized its buffer from the length before reading).
#[test]
fn a_stated_metadata_length_is_not_allocated_before_it_is_read() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("huge-metadata.dbn");
    let mut bytes = b"DBN\x03".to_vec();
    bytes.extend_from_slice(&((1u32 << 30) - 1).to_le_bytes());
    bytes.extend_from_slice(&[0; 8]);
    std::fs::write(&file, &bytes).unwrap();
    let before = peak_rss_kib();
    let err = tickbox_dbn::open_source(&file, None)
        .err()
        .expect("refused");
    assert!(
        err.to_string()
            .contains("truncated DBN metadata: 8 of 1073741823 bytes"),
        "{err}"
    );
    let grown_mib = peak_rss_kib().saturating_sub(before) / 1024;
    assert!(grown_mib < 256, "peak memory grew by {grown_mib} MiB");
}
