//! Hermetic DBN → journal → DBN: files of many schemas written with the `dbn` crate's own encoder from records
//! built here, imported, compared field by field with what the `dbn` crate decodes, and exported back byte for
//! byte.

use std::fmt::Debug;
use std::io::Cursor;
use std::path::{Path, PathBuf};

use tickbox_dbn::dbn::decode::dbn::RecordDecoder;
use tickbox_dbn::dbn::decode::{DbnMetadata, DecodeRecord, DynDecoder};
use tickbox_dbn::dbn::encode::dbn::Encoder;
use tickbox_dbn::dbn::encode::{DbnEncodable, EncodeRecord};
use tickbox_dbn::dbn::{
    self, rtype, BboMsg, BidAskPair, CbboMsg, Cmbp1Msg, ConsolidatedBidAskPair, HasRType,
    ImbalanceMsg, MappingInterval, MboMsg, Mbp10Msg, Mbp1Msg, Metadata, OhlcvMsg, RecordHeader,
    SType, Schema, StatMsg, StatusMsg, SymbolMapping, TradeMsg, VersionUpgradePolicy,
};
use tickbox_dbn::{export_dbn, import_files, ImportOptions, VendorFrame};
use tickbox_journal::{summarize, Reader};

const T0: u64 = 1_609_160_400_000_000_000; // 2020-12-28T13:00:00Z
const ESH1: u32 = 5482;
const ESM1: u32 = 5483;

fn metadata(schema: Schema, version: u8) -> Metadata {
    let day = |d: u8| time::Date::from_calendar_date(2020, time::Month::December, d).unwrap();
    let mapping = |raw: &str, iid: u32| SymbolMapping {
        raw_symbol: raw.to_owned(),
        intervals: vec![MappingInterval {
            start_date: day(28),
            end_date: day(29),
            symbol: iid.to_string(),
        }],
    };
    Metadata::builder()
        .version(version)
        .dataset("GLBX.MDP3".to_owned())
        .schema(Some(schema))
        .start(T0)
        .end(std::num::NonZeroU64::new(T0 + 86_400_000_000_000))
        .stype_in(Some(SType::RawSymbol))
        .stype_out(SType::InstrumentId)
        .symbols(vec!["ESH1".to_owned(), "ESM1".to_owned()])
        .mappings(vec![mapping("ESH1", ESH1), mapping("ESM1", ESM1)])
        .build()
}

fn hd<T: HasRType>(rtype: u8, i: usize) -> RecordHeader {
    let iid = if i % 3 == 2 { ESM1 } else { ESH1 };
    RecordHeader::new::<T>(rtype, 1 + (i % 2) as u16, iid, T0 + 1_000 * i as u64)
}

fn px(i: usize) -> i64 {
    3_720_250_000_000 + 250_000_000 * (i as i64 % 7) - 1_000_000_000 * (i as i64 % 3)
}

fn pair(i: usize) -> BidAskPair {
    BidAskPair {
        bid_px: px(i),
        ask_px: px(i) + 250_000_000,
        bid_sz: 10 + i as u32,
        ask_sz: 20 + i as u32,
        bid_ct: 1 + i as u32 % 4,
        ask_ct: 2,
    }
}

fn cpair(i: usize) -> ConsolidatedBidAskPair {
    ConsolidatedBidAskPair {
        bid_px: px(i),
        ask_px: px(i) + 500_000_000,
        bid_sz: 5 + i as u32,
        ask_sz: 7,
        bid_pb: 1,
        ask_pb: 2,
        ..Default::default()
    }
}

const N: usize = 50;

fn recv(i: usize) -> u64 {
    T0 + 1_000 * i as u64 + 500
}

fn side(i: usize) -> std::ffi::c_char {
    [b'A', b'B', b'N'][i % 3] as std::ffi::c_char
}

/// Writes `records` as a DBN file (zstd when `zstd`), returns its path and the plain (uncompressed) bytes.
fn write_file<T: DbnEncodable>(
    dir: &Path,
    name: &str,
    meta: &Metadata,
    records: &[T],
    zstd: bool,
) -> (PathBuf, Vec<u8>) {
    let mut plain = Vec::new();
    let mut enc = Encoder::new(&mut plain, meta).unwrap();
    for r in records {
        enc.encode_record(r).unwrap();
    }
    let path = dir.join(name);
    if zstd {
        let f = std::fs::File::create(&path).unwrap();
        let mut enc = Encoder::with_zstd(f, meta).unwrap();
        for r in records {
            enc.encode_record(r).unwrap();
        }
    } else {
        std::fs::write(&path, &plain).unwrap();
    }
    (path, plain)
}

/// The whole check for one schema.
fn round_trip<T>(schema: Schema, version: u8, records: Vec<T>, zstd: bool)
where
    T: DbnEncodable + HasRType<Header = RecordHeader> + PartialEq + Debug + Clone,
{
    let dir = tempfile::tempdir().unwrap();
    let meta = metadata(schema, version);
    let name = format!(
        "{}.v{version}.dbn{}",
        schema.as_str(),
        if zstd { ".zst" } else { "" }
    );
    let (file, plain) = write_file(dir.path(), &name, &meta, &records, zstd);

    // What the dbn crate itself decodes from the file.
    let mut theirs = DynDecoder::from_file(&file, VersionUpgradePolicy::AsIs).unwrap();
    assert_eq!(
        theirs.metadata(),
        &meta,
        "{name}: the dbn crate reads back our metadata"
    );
    let mut decoded: Vec<T> = Vec::new();
    while let Some(r) = theirs.decode_record::<T>().unwrap() {
        decoded.push(r.clone());
    }
    assert_eq!(
        decoded, records,
        "{name}: the dbn crate decodes what we encoded"
    );

    let journal = dir.path().join("j");
    let rep = import_files(
        &journal,
        std::slice::from_ref(&file),
        &ImportOptions::default(),
    )
    .unwrap();
    assert_eq!(rep.records, records.len() as u64, "{name}");
    assert_eq!(
        summarize(&journal, true).unwrap().records,
        records.len() as u64,
        "{name}: journal records"
    );

    // Field by field: every journal record decodes (through the dbn crate) to the record the file held, with the
    // tickbox header and capture time derived from it.
    let mut r = Reader::open(&journal).unwrap();
    let mut per_publisher = std::collections::HashMap::<u32, u64>::new();
    let mut i = 0;
    while let Some(rec) = r.next().unwrap() {
        let f = VendorFrame::decode(rec.payload).unwrap();
        let mut d = RecordDecoder::with_version(
            Cursor::new(f.record),
            version,
            VersionUpgradePolicy::AsIs,
            false,
        )
        .unwrap();
        let got: T = d.decode::<T>().unwrap().unwrap().clone();
        assert_eq!(got, decoded[i], "{name}: record {i}");
        let want = &decoded[i];
        assert_eq!(f.record, want.as_ref(), "{name}: record {i} bytes");
        assert_eq!(u16::from(f.rtype), want.raw_rtype());
        assert_eq!(f.version, version);
        assert_eq!(f.source, 0);
        assert_eq!(
            rec.capture_time_ns,
            want.raw_index_ts(),
            "{name}: capture = ts_recv"
        );
        assert_eq!(f.header.send_time_ns, want.raw_index_ts());
        assert_eq!(
            f.header.origin_time_ns,
            want.raw_ts_event(),
            "{name}: origin = ts_event"
        );
        assert_eq!(f.header.publisher_id, u32::from(want.publisher_id()));
        let seq = per_publisher.entry(f.header.publisher_id).or_insert(0);
        *seq += 1;
        assert_eq!(f.header.sequence, *seq, "{name}: per-publisher sequence");
        let sym = if want.instrument_id() == u64::from(ESH1) {
            "ESH1"
        } else {
            "ESM1"
        };
        assert_eq!(
            f.topic,
            format!("V.GLBX.{sym}"),
            "{name}: topic from the symbology"
        );
        i += 1;
    }
    assert_eq!(i, records.len());

    // Back out: byte-identical to the file's (decompressed) stream, and to what the dbn crate writes for the
    // records it decoded under the metadata it decoded.
    let mut out = Vec::new();
    let e = export_dbn(&journal, None, &mut out, false).unwrap();
    assert_eq!(e.records, records.len() as u64);
    assert!(
        out == plain,
        "{name}: export differs from the original ({} vs {} bytes)",
        out.len(),
        plain.len()
    );
    let mut reencoded = Vec::new();
    let mut enc = Encoder::new(&mut reencoded, theirs.metadata()).unwrap();
    for r in &decoded {
        enc.encode_record(r).unwrap();
    }
    assert!(
        out == reencoded,
        "{name}: export differs from the dbn crate's encoding"
    );

    // And compressed: a zstd export decodes to the same metadata and records.
    let mut z = Vec::new();
    export_dbn(&journal, None, &mut z, true).unwrap();
    let mut back = DynDecoder::inferred_with_buffer(
        std::io::BufReader::new(&z[..]),
        VersionUpgradePolicy::AsIs,
    )
    .unwrap();
    assert_eq!(back.metadata(), &meta);
    let mut n = 0;
    while let Some(r) = back.decode_record::<T>().unwrap() {
        assert_eq!(r, &decoded[n]);
        n += 1;
    }
    assert_eq!(n, records.len());
}

#[test]
fn mbo() {
    let recs = (0..N)
        .map(|i| MboMsg {
            hd: hd::<MboMsg>(rtype::MBO, i),
            order_id: 1_000 + i as u64,
            price: px(i),
            size: 1 + i as u32,
            flags: dbn::FlagSet::from(128),
            channel_id: 3,
            action: [b'A', b'C', b'M', b'T', b'F'][i % 5] as std::ffi::c_char,
            side: side(i),
            ts_recv: recv(i),
            ts_in_delta: 17_214,
            sequence: 1_170_352 + i as u32,
        })
        .collect();
    round_trip(Schema::Mbo, 3, recs, false);
}

#[test]
fn trades_zstd() {
    let recs = (0..N)
        .map(|i| TradeMsg {
            hd: hd::<TradeMsg>(rtype::MBP_0, i),
            price: px(i),
            size: 1 + i as u32,
            action: b'T' as std::ffi::c_char,
            side: side(i),
            flags: dbn::FlagSet::default(),
            depth: 0,
            ts_recv: recv(i),
            ts_in_delta: 100,
            sequence: i as u32,
        })
        .collect();
    round_trip(Schema::Trades, 3, recs, true);
}

fn mbp1(i: usize, rt: u8) -> Mbp1Msg {
    Mbp1Msg {
        hd: hd::<Mbp1Msg>(rt, i),
        price: px(i),
        size: 2,
        action: [b'A', b'T', b'C'][i % 3] as std::ffi::c_char,
        side: side(i),
        flags: dbn::FlagSet::from(130),
        depth: 0,
        ts_recv: recv(i),
        ts_in_delta: 5,
        sequence: 7 + i as u32,
        levels: [pair(i)],
    }
}

#[test]
fn mbp1_and_tbbo() {
    round_trip(
        Schema::Mbp1,
        3,
        (0..N).map(|i| mbp1(i, rtype::MBP_1)).collect(),
        false,
    );
    round_trip(
        Schema::Tbbo,
        3,
        (0..N).map(|i| mbp1(i, rtype::MBP_1)).collect(),
        true,
    );
}

#[test]
fn mbp10() {
    let recs = (0..N)
        .map(|i| Mbp10Msg {
            hd: hd::<Mbp10Msg>(rtype::MBP_10, i),
            price: px(i),
            size: 3,
            action: b'A' as std::ffi::c_char,
            side: side(i),
            flags: dbn::FlagSet::default(),
            depth: (i % 10) as u8,
            ts_recv: recv(i),
            ts_in_delta: 9,
            sequence: i as u32,
            levels: std::array::from_fn(|l| pair(i + l)),
        })
        .collect();
    round_trip(Schema::Mbp10, 3, recs, true);
}

#[test]
fn ohlcv_status_imbalance_statistics() {
    let ohlcv = (0..N)
        .map(|i| OhlcvMsg {
            hd: hd::<OhlcvMsg>(rtype::OHLCV_1S, i),
            open: px(i),
            high: px(i) + 1_000_000_000,
            low: px(i) - 1_000_000_000,
            close: px(i + 1),
            volume: 1_000 * i as u64,
        })
        .collect();
    round_trip(Schema::Ohlcv1S, 3, ohlcv, false);
    let status = (0..N)
        .map(|i| StatusMsg {
            hd: hd::<StatusMsg>(rtype::STATUS, i),
            ts_recv: recv(i),
            action: 7,
            reason: (i % 4) as u16,
            trading_event: 0,
            is_trading: b'Y' as std::ffi::c_char,
            is_quoting: b'Y' as std::ffi::c_char,
            is_short_sell_restricted: b'~' as std::ffi::c_char,
            ..Default::default()
        })
        .collect();
    round_trip(Schema::Status, 3, status, true);
    let imb = (0..N)
        .map(|i| ImbalanceMsg {
            hd: hd::<ImbalanceMsg>(rtype::IMBALANCE, i),
            ts_recv: recv(i),
            ref_price: px(i),
            paired_qty: i as u32,
            total_imbalance_qty: 2 * i as u32,
            side: side(i),
            ..Default::default()
        })
        .collect();
    round_trip(Schema::Imbalance, 3, imb, false);
    let stats = (0..N)
        .map(|i| StatMsg {
            hd: hd::<StatMsg>(rtype::STATISTICS, i),
            ts_recv: recv(i),
            ts_ref: T0,
            price: px(i),
            quantity: -5 + i as i64,
            sequence: i as u32,
            stat_type: 1 + (i % 5) as u16,
            channel_id: 1,
            update_action: 1,
            ..Default::default()
        })
        .collect();
    round_trip(Schema::Statistics, 3, stats, true);
}

#[test]
fn bbo_cmbp_cbbo() {
    let bbo = (0..N)
        .map(|i| BboMsg {
            hd: hd::<BboMsg>(rtype::BBO_1S, i),
            price: px(i),
            size: 4,
            side: side(i),
            ts_recv: recv(i),
            sequence: i as u32,
            levels: [pair(i)],
            ..BboMsg::default_for_schema(Schema::Bbo1S)
        })
        .collect();
    round_trip(Schema::Bbo1S, 3, bbo, false);
    let cmbp = (0..N)
        .map(|i| Cmbp1Msg {
            hd: hd::<Cmbp1Msg>(rtype::CMBP_1, i),
            price: px(i),
            size: 4,
            action: b'A' as std::ffi::c_char,
            side: side(i),
            ts_recv: recv(i),
            levels: [cpair(i)],
            ..Cmbp1Msg::default_for_schema(Schema::Cmbp1)
        })
        .collect();
    round_trip(Schema::Cmbp1, 3, cmbp, true);
    let cbbo = (0..N)
        .map(|i| CbboMsg {
            hd: hd::<CbboMsg>(rtype::CBBO_1S, i),
            price: px(i),
            size: 4,
            side: side(i),
            ts_recv: recv(i),
            levels: [cpair(i)],
            ..CbboMsg::default_for_schema(Schema::Cbbo1S)
        })
        .collect();
    round_trip(Schema::Cbbo1S, 3, cbbo, false);
}

#[test]
fn definitions_v3_and_v2() {
    let v3 = (0..N)
        .map(|i| dbn::v3::InstrumentDefMsg {
            hd: hd::<dbn::v3::InstrumentDefMsg>(rtype::INSTRUMENT_DEF, i),
            ts_recv: recv(i),
            min_price_increment: 250_000_000,
            raw_symbol: dbn::record::str_to_c_chars("ESH1").unwrap(),
            ..Default::default()
        })
        .collect();
    round_trip(Schema::Definition, 3, v3, true);
    let v2 = (0..N)
        .map(|i| dbn::v2::InstrumentDefMsg {
            hd: hd::<dbn::v2::InstrumentDefMsg>(rtype::INSTRUMENT_DEF, i),
            ts_recv: recv(i),
            min_price_increment: 250_000_000,
            ..Default::default()
        })
        .collect();
    round_trip(Schema::Definition, 2, v2, false);
}

/// Two files in one journal: each exports back on its own (`source`), byte for byte; without `source` export
/// refuses; trades and top of book derive their tickbox equivalents on read.
#[test]
fn two_sources_and_derived_wire_payloads() {
    let dir = tempfile::tempdir().unwrap();
    let trades: Vec<TradeMsg> = (0..N)
        .map(|i| TradeMsg {
            hd: hd::<TradeMsg>(rtype::MBP_0, i),
            price: px(i),
            size: 1 + i as u32,
            action: b'T' as std::ffi::c_char,
            side: side(i),
            flags: dbn::FlagSet::default(),
            depth: 0,
            ts_recv: recv(i),
            ts_in_delta: 100,
            sequence: i as u32,
        })
        .collect();
    let quotes: Vec<Mbp1Msg> = (0..N)
        .map(|i| {
            let mut m = mbp1(i, rtype::MBP_1);
            m.action = b'A' as std::ffi::c_char;
            m
        })
        .collect();
    let (f1, p1) = write_file(
        dir.path(),
        "t.dbn",
        &metadata(Schema::Trades, 3),
        &trades,
        false,
    );
    let (f2, p2) = write_file(
        dir.path(),
        "q.dbn.zst",
        &metadata(Schema::Mbp1, 3),
        &quotes,
        true,
    );
    let journal = dir.path().join("j");
    let rep = import_files(&journal, &[f1, f2], &ImportOptions::default()).unwrap();
    assert_eq!(rep.records, 2 * N as u64);
    assert_eq!(rep.manifest.sources.len(), 2);
    let mut out = Vec::new();
    assert!(
        export_dbn(&journal, None, &mut out, false).is_err(),
        "two sources need --source"
    );
    for (src, plain) in [(0u32, &p1), (1, &p2)] {
        let mut out = Vec::new();
        let rep = export_dbn(&journal, Some(src), &mut out, false).unwrap();
        assert_eq!(rep.records, N as u64);
        assert_eq!(rep.skipped, N as u64);
        assert!(&out == plain, "source {src} round trip");
    }
    let mut r = Reader::open(&journal).unwrap();
    let (mut t, mut q) = (0, 0);
    while let Some(rec) = r.next().unwrap() {
        let f = VendorFrame::decode(rec.payload).unwrap();
        let (topic, h, p) = tickbox_dbn::derive_wire(&f).expect("trades and mbp-1 derive");
        assert_eq!(h.origin_time_ns, f.header.origin_time_ns);
        match p {
            tickbox_wire::Payload::Trade(x) => {
                let want = &trades[t];
                assert_eq!(topic, f.topic.replacen('V', "T", 1));
                assert_eq!(
                    (x.price, x.size, x.trade_id),
                    (want.price, want.size, u64::from(want.sequence))
                );
                assert_eq!(x.instrument_id, want.hd.instrument_id);
                let side = match want.side as u8 {
                    b'B' => tickbox_wire::Side::Buy,
                    b'A' => tickbox_wire::Side::Sell,
                    _ => tickbox_wire::Side::None,
                };
                assert_eq!(x.aggressor, side);
                t += 1;
            }
            tickbox_wire::Payload::Quote(x) => {
                let l = &quotes[q].levels[0];
                assert_eq!(topic, f.topic.replacen('V', "Q", 1));
                assert_eq!(
                    (
                        x.bid_px,
                        x.ask_px,
                        x.bid_size,
                        x.ask_size,
                        x.bid_orders,
                        x.ask_orders
                    ),
                    (l.bid_px, l.ask_px, l.bid_sz, l.ask_sz, l.bid_ct, l.ask_ct)
                );
                q += 1;
            }
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!((t, q), (N, N));
}

/// The importer refuses what it cannot read, naming the file and why, before it creates the journal.
#[test]
fn refusals_name_the_file_and_create_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let cases: [(&str, &[u8], &str); 4] = [
        ("empty.dbn", b"", "empty file"),
        ("text.dbn", b"hello, this is not market data\n", "not DBN"),
        ("v9.dbn", b"DBN\x09\x00\x00\x00\x00", "DBN version 9"),
        (
            "cut.dbn",
            b"DBN\x03\xff\x00\x00\x00abc",
            "truncated DBN metadata",
        ),
    ];
    for (name, bytes, why) in cases {
        let f = dir.path().join(name);
        std::fs::write(&f, bytes).unwrap();
        let journal = dir.path().join(format!("j-{name}"));
        let e = import_files(&journal, &[f], &ImportOptions::default())
            .unwrap_err()
            .to_string();
        assert!(e.contains(name) && e.contains(why), "{name}: {e}");
        assert!(!journal.exists(), "{name}: no journal on refusal");
    }
}
