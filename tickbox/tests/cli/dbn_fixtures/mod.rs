//! DBN records and metadata the import/export CLI tests build with the `dbn` crate (never vendor files).

use tickbox_dbn::dbn::{rtype, MboMsg, Metadata, RecordHeader, SType, Schema};

/// 2023-11-14T22:13:20Z: every record's time is an offset from it.
pub(crate) const T0: u64 = 1_700_000_000_000_000_000;

/// Metadata of an `XNAS.ITCH` file of `schema` keyed by instrument id.
pub(crate) fn meta(schema: Schema) -> Metadata {
    Metadata::builder()
        .dataset("XNAS.ITCH".to_owned())
        .schema(Some(schema))
        .start(T0)
        .stype_in(Some(SType::InstrumentId))
        .stype_out(SType::InstrumentId)
        .build()
}

/// The `i`-th MBO record: instruments 7, 8, 9 in turn, 1 µs apart, `ts_recv` 400 ns after `ts_event`.
pub(crate) fn mbo(i: u64) -> MboMsg {
    MboMsg {
        hd: RecordHeader::new::<MboMsg>(rtype::MBO, 2, 7 + (i % 3) as u32, T0 + i * 1_000),
        order_id: 10_000 + i,
        price: 189_250_000_000 + (i as i64 % 10) * 10_000_000,
        size: 100 + i as u32,
        flags: Default::default(),
        channel_id: 0,
        action: b'A' as _,
        side: if i.is_multiple_of(2) { b'B' } else { b'A' } as _,
        ts_recv: T0 + i * 1_000 + 400,
        ts_in_delta: 0,
        sequence: i as u32,
    }
}
