//! `ReplaySource`: a DBN file and its import read back as the same tickbox messages, in file order, with skip
//! reasons for records that have no tickbox equivalent; damaged files are errors, never a silent prefix.

use std::path::Path;

use tickbox_dbn::dbn::encode::dbn::Encoder;
use tickbox_dbn::dbn::encode::EncodeRecordRef;
use tickbox_dbn::dbn::{
    rtype, MboMsg, Mbp1Msg, Metadata, RecordHeader, RecordRef, SType, TradeMsg,
};
use tickbox_dbn::{import_files, ImportOptions, ReplayForm, ReplaySource};
use tickbox_feed::SourceItem;
use tickbox_wire::{MessageRef, Payload};

const T0: u64 = 1_700_000_000_000_000_000;

fn meta() -> Metadata {
    Metadata::builder()
        .dataset("XNAS.ITCH".to_owned())
        .schema(None)
        .start(T0)
        .stype_in(Some(SType::InstrumentId))
        .stype_out(SType::InstrumentId)
        .build()
}

fn trade(i: u64) -> TradeMsg {
    TradeMsg {
        hd: RecordHeader::new::<TradeMsg>(rtype::MBP_0, 2, 7 + (i % 2) as u32, T0 + i * 1_000),
        price: 100_000_000_000 + i as i64,
        size: 1 + i as u32,
        action: b'T' as _,
        side: b'B' as _,
        flags: Default::default(),
        depth: 0,
        ts_recv: T0 + i * 1_000 + 300,
        ts_in_delta: 0,
        sequence: i as u32,
    }
}

fn mbo(i: u64) -> MboMsg {
    MboMsg {
        hd: RecordHeader::new::<MboMsg>(rtype::MBO, 2, 9, T0 + i * 1_000),
        order_id: i,
        price: 1,
        size: 1,
        flags: Default::default(),
        channel_id: 0,
        action: b'A' as _,
        side: b'B' as _,
        ts_recv: T0 + i * 1_000 + 500,
        ts_in_delta: 0,
        sequence: i as u32,
    }
}

fn quote(i: u64) -> Mbp1Msg {
    let mut m = Mbp1Msg {
        hd: RecordHeader::new::<Mbp1Msg>(rtype::MBP_1, 2, 8, T0 + i * 1_000),
        action: b'A' as _,
        ts_recv: T0 + i * 1_000 + 200,
        ..Default::default()
    };
    m.levels[0].bid_px = 99_000_000_000;
    m.levels[0].ask_px = 101_000_000_000;
    m.levels[0].bid_sz = 10;
    m.levels[0].ask_sz = 20;
    m
}

/// Ten records: trades, a top-of-book update and MBO events in between.
fn write(path: &Path) -> Vec<u8> {
    let mut out = Vec::new();
    let mut enc = Encoder::new(&mut out, &meta()).unwrap();
    for i in 0..10u64 {
        match i % 5 {
            1 => enc.encode_record_ref(RecordRef::from(&mbo(i))).unwrap(),
            3 => enc.encode_record_ref(RecordRef::from(&quote(i))).unwrap(),
            _ => enc.encode_record_ref(RecordRef::from(&trade(i))).unwrap(),
        }
    }
    std::fs::write(path, &out).unwrap();
    out
}

/// A record as the feed will publish it, read back from its frame.
#[derive(Debug, Clone, PartialEq)]
struct SourceRecord {
    time_ns: u64,
    origin_time_ns: u64,
    topic: String,
    payload: Payload,
}

/// An item of a source, owned (the source lends its frames only until the next item).
#[derive(Debug, Clone, PartialEq)]
enum Item {
    Record(SourceRecord),
    Skipped(String),
}

fn read_all(path: &Path) -> (ReplayForm, Vec<Item>) {
    let mut src = ReplaySource::open(path).unwrap();
    let form = src.form();
    let mut items = Vec::new();
    while let Some(item) = src.next_item().unwrap() {
        items.push(match item {
            SourceItem::Skipped(reason) => Item::Skipped(reason),
            SourceItem::Record(r) => {
                let m = MessageRef::decode(r.frame).unwrap();
                Item::Record(SourceRecord {
                    time_ns: r.time_ns,
                    origin_time_ns: m.header().origin_time_ns,
                    topic: m.topic().to_owned(),
                    payload: m.payload().unwrap(),
                })
            }
        });
    }
    (form, items)
}

#[test]
fn dbn_and_its_import_read_as_the_same_messages_in_file_order() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("mixed.dbn");
    write(&file);
    let (form, items) = read_all(&file);
    assert_eq!(form, ReplayForm::Dbn);
    assert_eq!(
        items.len(),
        10,
        "one item per record, none dropped or added"
    );
    for (i, item) in items.iter().enumerate() {
        let i = i as u64;
        match (i % 5, item) {
            (1, Item::Skipped(reason)) => {
                assert_eq!(reason, "DBN mbo: no tickbox equivalent")
            }
            (
                3,
                Item::Record(SourceRecord {
                    time_ns,
                    origin_time_ns,
                    topic,
                    payload: Payload::Quote(q),
                }),
            ) => {
                assert_eq!(topic, "Q.XNAS.8");
                assert_eq!(
                    (*time_ns, *origin_time_ns),
                    (T0 + i * 1_000 + 200, T0 + i * 1_000)
                );
                assert_eq!(
                    (q.bid_px, q.ask_px, q.bid_size, q.ask_size),
                    (99_000_000_000, 101_000_000_000, 10, 20)
                );
            }
            (
                0 | 2 | 4,
                Item::Record(SourceRecord {
                    time_ns,
                    origin_time_ns,
                    topic,
                    payload: Payload::Trade(t),
                }),
            ) => {
                assert_eq!(topic, &format!("T.XNAS.{}", 7 + i % 2));
                assert_eq!(
                    (*time_ns, *origin_time_ns),
                    (T0 + i * 1_000 + 300, T0 + i * 1_000)
                );
                assert_eq!(
                    (t.price, t.size),
                    (100_000_000_000 + i as i64, 1 + i as u32)
                );
            }
            other => panic!("record {i}: unexpected {other:?}"),
        }
    }
    let journal = dir.path().join("journal");
    import_files(
        &journal,
        std::slice::from_ref(&file),
        &ImportOptions::default(),
    )
    .unwrap();
    let (form, from_journal) = read_all(&journal);
    assert_eq!(form, ReplayForm::Journal);
    assert_eq!(
        from_journal, items,
        "the import replays exactly as its file"
    );
    // Compressed (`tickbox journal compress`), its segment file is still told from a DBN file and reads the same.
    tickbox_journal::compress(&journal, &tickbox_journal::CompressOptions::default()).unwrap();
    let (form, compressed) = read_all(&tickbox_journal::segment_path(&journal, 0));
    assert_eq!(form, ReplayForm::Journal);
    assert_eq!(compressed, items);
}

#[test]
fn damaged_sources_are_errors_naming_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("whole.dbn");
    let bytes = write(&file);
    // Cut in the middle of the last record: the prefix must not pass for the whole file.
    let cut = dir.path().join("cut.dbn");
    std::fs::write(&cut, &bytes[..bytes.len() - 7]).unwrap();
    let mut src = ReplaySource::open(&cut).unwrap();
    let err = loop {
        match src.next_item() {
            Ok(Some(_)) => {}
            Ok(None) => panic!("a truncated file read to a clean end"),
            Err(e) => break e.to_string(),
        }
    };
    assert!(err.contains("cut.dbn"), "{err}");
    for (name, content) in [
        ("empty.dbn", &b""[..]),
        ("noise.dbn", &b"this is not market data at all"[..]),
        ("header.dbn", &bytes[..20]),
    ] {
        let p = dir.path().join(name);
        std::fs::write(&p, content).unwrap();
        let err = ReplaySource::open(&p).err().map(|e| e.to_string());
        let err = err.unwrap_or_else(|| panic!("{name} opened"));
        assert!(err.contains(name), "{err}");
    }
    // A journal file cut short is refused by the journal reader, named.
    let journal = dir.path().join("j");
    import_files(
        &journal,
        std::slice::from_ref(&file),
        &ImportOptions::default(),
    )
    .unwrap();
    let segment = std::fs::read_dir(&journal)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| {
            p.extension()
                .is_some_and(|e| e == tickbox_journal::SEGMENT_EXT)
        })
        .unwrap();
    let seg_bytes = std::fs::read(&segment).unwrap();
    let cut_journal = dir.path().join("cut.tbj");
    std::fs::write(&cut_journal, &seg_bytes[..seg_bytes.len() / 2]).unwrap();
    let err = match ReplaySource::open(&cut_journal) {
        Err(e) => e.to_string(),
        Ok(mut src) => loop {
            match src.next_item() {
                Ok(Some(_)) => {}
                Ok(None) => panic!("a journal cut in half read to a clean end"),
                Err(e) => break e.to_string(),
            }
        },
    };
    assert!(err.contains("cut.tbj"), "{err}");
}
