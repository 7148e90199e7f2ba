//! The one field vocabulary of every export format: the record kinds, each kind's columns (name, type, meaning),
//! and the decoding of a journal record into a row of values in column order. Parquet, CSV and JSON all write
//! these names in this order; only how a value is spelled differs (see [`FieldType`]). The book's table of the
//! vocabulary (`docs/book/src/export.md`) is checked against [`fields_of`] by a test.

use tickbox_journal::Record;
use tickbox_wire::{MessageRef, Payload, Side, PRICE_SCALE};

/// What kind of record a row is: the wire kinds, the recorder's gap notices, and imported vendor (DBN) records.
/// A dataset is partitioned by it (`kind=quote/`), CSV writes one file per kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum RecordKind {
    /// Top of book.
    Quote,
    /// A print.
    Trade,
    /// A publisher's heartbeat.
    Heartbeat,
    /// One price level of a depth book.
    BookLevel,
    /// A recorder's gap notice: sequences of a publisher that never reached it.
    Gap,
    /// A record imported from a DBN file, kept as the file held it.
    Vendor,
}

impl RecordKind {
    /// Every kind, in the order summaries list them.
    pub const ALL: [RecordKind; 6] = [
        RecordKind::Quote,
        RecordKind::Trade,
        RecordKind::Heartbeat,
        RecordKind::BookLevel,
        RecordKind::Gap,
        RecordKind::Vendor,
    ];

    /// The kind's name: the partition value, the CSV file name, `--kind`, and `journal dump`'s kind column.
    pub fn name(self) -> &'static str {
        match self {
            RecordKind::Quote => "quote",
            RecordKind::Trade => "trade",
            RecordKind::Heartbeat => "heartbeat",
            RecordKind::BookLevel => "book_level",
            RecordKind::Gap => "gap",
            RecordKind::Vendor => "vendor",
        }
    }

    /// The kind named `name` (as [`RecordKind::name`] spells it).
    pub fn parse(name: &str) -> Option<RecordKind> {
        RecordKind::ALL.into_iter().find(|k| k.name() == name)
    }

    /// Position in [`RecordKind::ALL`].
    pub fn index(self) -> usize {
        self as usize
    }
}

/// How prices are written (Databento's `price_type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PriceType {
    /// Exact: the wire's integer count of 1e-9, in a column named `<name>_e9` (the price times 10⁹). The scale is
    /// also in the Parquet schema's metadata (`tickbox.price_scale`) and each price column's.
    #[default]
    Fixed,
    /// A float64 of the price in currency units, in a column named `<name>`: convenient, not exact.
    Float,
}

impl PriceType {
    /// The name `--price` and the schema metadata (`tickbox.price_type`) use.
    pub fn name(self) -> &'static str {
        match self {
            PriceType::Fixed => "fixed",
            PriceType::Float => "float",
        }
    }
}

/// A column's type, and so how each format writes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FieldType {
    /// Parquet `Timestamp(ns, UTC)`; JSON and CSV: RFC 3339 with nine fraction digits. Never null.
    Time,
    /// As [`FieldType::Time`], null (empty in CSV) when the source says 0 (unknown).
    OptTime,
    /// Unsigned integers of 8, 16, 32 and 64 bits: Parquet's unsigned integer types; JSON and CSV: the number.
    U8,
    /// See [`FieldType::U8`].
    U16,
    /// See [`FieldType::U8`].
    U32,
    /// See [`FieldType::U8`].
    U64,
    /// A price: `Int64` named `<name>_e9` ([`PriceType::Fixed`]) or `Float64` named `<name>` ([`PriceType::Float`]).
    Price,
    /// UTF-8 text.
    Str,
    /// Bytes: Parquet `Binary`; JSON and CSV: lower-case hex.
    Bytes,
}

/// One column of the vocabulary.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FieldDef {
    /// Column name (a price's name before `_e9`).
    pub name: &'static str,
    /// Its type.
    pub ty: FieldType,
    /// What it holds, for the book's table.
    pub doc: &'static str,
}

const fn f(name: &'static str, ty: FieldType, doc: &'static str) -> FieldDef {
    FieldDef { name, ty, doc }
}

/// The columns every kind starts with.
pub const COMMON: [FieldDef; 10] = [
    f(
        "capture_time",
        FieldType::Time,
        "when the recorder captured the record (the journal's capture time)",
    ),
    f(
        "journal_seq",
        FieldType::U64,
        "the record's journal sequence (unique in a history)",
    ),
    f("topic", FieldType::Str, "the message topic (`Q.XNAS.AAPL`)"),
    f(
        "symbol",
        FieldType::Str,
        "the topic without its kind letter and venue (`AAPL`)",
    ),
    f(
        "publisher_id",
        FieldType::U32,
        "the publisher the record came from",
    ),
    f(
        "session",
        FieldType::U64,
        "the publisher's run (its start time in ns; 0 unknown)",
    ),
    f(
        "sequence",
        FieldType::U64,
        "the publisher's sequence (gap-free per publisher and session)",
    ),
    f(
        "send_time",
        FieldType::Time,
        "when this copy was sent (the publisher's clock)",
    ),
    f(
        "origin_time",
        FieldType::Time,
        "when the event was first published",
    ),
    f(
        "flags",
        FieldType::U16,
        "header flags (1 cached by an LVC, 2 replayed)",
    ),
];

const QUOTE: [FieldDef; 8] = [
    f(
        "instrument_id",
        FieldType::U32,
        "the venue's numeric instrument id",
    ),
    f("bid_px", FieldType::Price, "best bid price"),
    f("ask_px", FieldType::Price, "best ask price"),
    f("bid_size", FieldType::U32, "quantity bid at bid_px"),
    f("ask_size", FieldType::U32, "quantity offered at ask_px"),
    f(
        "bid_orders",
        FieldType::U32,
        "orders at the best bid (0 unknown)",
    ),
    f(
        "ask_orders",
        FieldType::U32,
        "orders at the best ask (0 unknown)",
    ),
    f(
        "venue_time",
        FieldType::OptTime,
        "the venue's own timestamp (null unknown)",
    ),
];

const TRADE: [FieldDef; 6] = [
    f(
        "instrument_id",
        FieldType::U32,
        "the venue's numeric instrument id",
    ),
    f("price", FieldType::Price, "execution price"),
    f("size", FieldType::U32, "quantity traded"),
    f(
        "aggressor",
        FieldType::Str,
        "side that crossed the spread: buy, sell or none",
    ),
    f("trade_id", FieldType::U64, "the venue's trade id"),
    f(
        "venue_time",
        FieldType::OptTime,
        "the venue's own timestamp (null unknown)",
    ),
];

const HEARTBEAT: [FieldDef; 2] = [
    f(
        "interval_ns",
        FieldType::U64,
        "how often the publisher promises a message, ns",
    ),
    f(
        "messages_sent",
        FieldType::U64,
        "data messages the publisher had sent",
    ),
];

const BOOK_LEVEL: [FieldDef; 7] = [
    f(
        "instrument_id",
        FieldType::U32,
        "the venue's numeric instrument id",
    ),
    f("side", FieldType::Str, "buy (bid) or sell (ask)"),
    f("level", FieldType::U8, "0 is the best level"),
    f("price", FieldType::Price, "the level's price"),
    f(
        "size",
        FieldType::U32,
        "quantity resting at the level (0: removed)",
    ),
    f(
        "order_count",
        FieldType::U32,
        "orders resting at the level (0 unknown)",
    ),
    f(
        "venue_time",
        FieldType::OptTime,
        "the venue's own timestamp (null unknown)",
    ),
];

const GAP: [FieldDef; 5] = [
    f(
        "first_missing",
        FieldType::U64,
        "first sequence the journal lacks",
    ),
    f(
        "last_missing",
        FieldType::U64,
        "last sequence the journal lacks",
    ),
    f(
        "missing",
        FieldType::U64,
        "sequences the notice accounts for",
    ),
    f(
        "detected_time",
        FieldType::Time,
        "when the recorder noticed the gap",
    ),
    f(
        "cause",
        FieldType::Str,
        "why: not_received (lost before the recorder)",
    ),
];

const VENDOR: [FieldDef; 4] = [
    f(
        "rtype",
        FieldType::U8,
        "the DBN record type (0xa0 MBO, 0x00 MBP-1, …)",
    ),
    f(
        "dbn_version",
        FieldType::U8,
        "the DBN version of the record",
    ),
    f(
        "source",
        FieldType::U32,
        "which imported file (`tickbox import` order)",
    ),
    f(
        "record",
        FieldType::Bytes,
        "the DBN record as the file held it",
    ),
];

/// The columns of `kind` after [`COMMON`].
pub fn fields_of(kind: RecordKind) -> &'static [FieldDef] {
    match kind {
        RecordKind::Quote => &QUOTE,
        RecordKind::Trade => &TRADE,
        RecordKind::Heartbeat => &HEARTBEAT,
        RecordKind::BookLevel => &BOOK_LEVEL,
        RecordKind::Gap => &GAP,
        RecordKind::Vendor => &VENDOR,
    }
}

/// Every column of `kind`: [`COMMON`] then [`fields_of`].
pub fn columns_of(kind: RecordKind) -> impl Iterator<Item = &'static FieldDef> {
    COMMON.iter().chain(fields_of(kind))
}

/// The name a column is written under: a price's name gets `_e9` when prices are fixed.
pub fn column_name(def: &FieldDef, price: PriceType) -> std::borrow::Cow<'static, str> {
    match (def.ty, price) {
        (FieldType::Price, PriceType::Fixed) => format!("{}_e9", def.name).into(),
        _ => def.name.into(),
    }
}

/// One value of a row, in the order of [`columns_of`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Value<'a> {
    /// A time in ns since the epoch ([`FieldType::Time`]); 0 is null for [`FieldType::OptTime`].
    Time(u64),
    /// An unsigned integer (every unsigned width).
    U(u64),
    /// A price in units of 1e-9.
    Price(i64),
    /// Text.
    Str(&'a str),
    /// Bytes.
    Bytes(&'a [u8]),
}

/// A journal record decoded for export: its kind, its common fields, and its payload.
#[derive(Debug, Clone, Copy)]
pub struct Row<'a> {
    /// The record's kind.
    pub kind: RecordKind,
    /// Capture time, ns.
    pub capture_ns: u64,
    /// Journal sequence.
    pub journal_seq: u64,
    /// Topic.
    pub topic: &'a str,
    /// Publisher id.
    pub publisher_id: u32,
    /// Publisher session.
    pub session: u64,
    /// Publisher sequence.
    pub sequence: u64,
    /// Send time, ns.
    pub send_ns: u64,
    /// Origin time, ns.
    pub origin_ns: u64,
    /// Header flags.
    pub flags: u16,
    body: Body<'a>,
}

#[derive(Debug, Clone, Copy)]
enum Body<'a> {
    Wire(Payload),
    Vendor {
        rtype: u8,
        version: u8,
        source: u32,
        record: &'a [u8],
    },
}

/// The symbol of a topic: what follows its kind letter and venue (`AAPL` of `Q.XNAS.AAPL`); a topic of fewer
/// parts gives what follows its first dot, or itself.
pub fn symbol_of(topic: &str) -> &str {
    let rest = topic.split_once('.').map_or(topic, |(_, r)| r);
    rest.split_once('.').map_or(rest, |(_, s)| s)
}

fn side_name(s: Side) -> &'static str {
    match s {
        Side::None => "none",
        Side::Buy => "buy",
        Side::Sell => "sell",
    }
}

impl<'a> Row<'a> {
    /// Decodes a journal record: a tickbox frame (any wire kind, gap notices included) or an imported vendor
    /// frame. `None` for a record that is neither (a foreign payload, or a frame whose payload does not decode).
    pub fn decode(rec: &Record<'a>) -> Option<Row<'a>> {
        if let Ok(m) = MessageRef::decode(rec.payload) {
            let h = *m.header();
            let payload = m.payload().ok()?;
            let kind = match payload {
                Payload::Quote(_) => RecordKind::Quote,
                Payload::Trade(_) => RecordKind::Trade,
                Payload::Heartbeat(_) => RecordKind::Heartbeat,
                Payload::BookLevel(_) => RecordKind::BookLevel,
                Payload::Gap(_) => RecordKind::Gap,
            };
            return Some(Row {
                kind,
                capture_ns: rec.capture_time_ns,
                journal_seq: rec.seq,
                topic: m.topic(),
                publisher_id: h.publisher_id,
                session: h.session,
                sequence: h.sequence,
                send_ns: h.send_time_ns,
                origin_ns: h.origin_time_ns,
                flags: h.flags.0,
                body: Body::Wire(payload),
            });
        }
        let v = tickbox_dbn::VendorFrame::decode(rec.payload).ok()?;
        Some(Row {
            kind: RecordKind::Vendor,
            capture_ns: rec.capture_time_ns,
            journal_seq: rec.seq,
            topic: v.topic,
            publisher_id: v.header.publisher_id,
            session: v.header.session,
            sequence: v.header.sequence,
            send_ns: v.header.send_time_ns,
            origin_ns: v.header.origin_time_ns,
            flags: v.header.flags,
            body: Body::Vendor {
                rtype: v.rtype,
                version: v.version,
                source: v.source,
                record: v.record,
            },
        })
    }

    /// The wire payload, for a tickbox frame.
    pub fn payload(&self) -> Option<&Payload> {
        match &self.body {
            Body::Wire(p) => Some(p),
            Body::Vendor { .. } => None,
        }
    }

    /// Calls `put` with each value of the row, in the order of [`columns_of`]`(self.kind)`.
    #[inline]
    pub fn values(&self, mut put: impl FnMut(Value<'a>)) {
        put(Value::Time(self.capture_ns));
        put(Value::U(self.journal_seq));
        put(Value::Str(self.topic));
        put(Value::Str(symbol_of(self.topic)));
        put(Value::U(u64::from(self.publisher_id)));
        put(Value::U(self.session));
        put(Value::U(self.sequence));
        put(Value::Time(self.send_ns));
        put(Value::Time(self.origin_ns));
        put(Value::U(u64::from(self.flags)));
        match self.body {
            Body::Wire(Payload::Quote(q)) => {
                put(Value::U(u64::from(q.instrument_id)));
                put(Value::Price(q.bid_px));
                put(Value::Price(q.ask_px));
                put(Value::U(u64::from(q.bid_size)));
                put(Value::U(u64::from(q.ask_size)));
                put(Value::U(u64::from(q.bid_orders)));
                put(Value::U(u64::from(q.ask_orders)));
                put(Value::Time(q.venue_time_ns));
            }
            Body::Wire(Payload::Trade(t)) => {
                put(Value::U(u64::from(t.instrument_id)));
                put(Value::Price(t.price));
                put(Value::U(u64::from(t.size)));
                put(Value::Str(side_name(t.aggressor)));
                put(Value::U(t.trade_id));
                put(Value::Time(t.venue_time_ns));
            }
            Body::Wire(Payload::Heartbeat(h)) => {
                put(Value::U(h.interval_ns));
                put(Value::U(h.messages_sent));
            }
            Body::Wire(Payload::BookLevel(b)) => {
                put(Value::U(u64::from(b.instrument_id)));
                put(Value::Str(side_name(b.side)));
                put(Value::U(u64::from(b.level)));
                put(Value::Price(b.price));
                put(Value::U(u64::from(b.size)));
                put(Value::U(u64::from(b.order_count)));
                put(Value::Time(b.venue_time_ns));
            }
            Body::Wire(Payload::Gap(g)) => {
                put(Value::U(g.first_missing));
                put(Value::U(g.last_missing));
                put(Value::U(g.missing()));
                put(Value::Time(g.detected_ns));
                put(Value::Str(match g.cause {
                    tickbox_wire::GapCause::NotReceived => "not_received",
                }));
            }
            Body::Vendor {
                rtype,
                version,
                source,
                record,
            } => {
                put(Value::U(u64::from(rtype)));
                put(Value::U(u64::from(version)));
                put(Value::U(u64::from(source)));
                put(Value::Bytes(record));
            }
        }
    }
}

/// A price in units of 1e-9 as a float of currency units.
#[inline]
pub fn price_f64(units: i64) -> f64 {
    units as f64 / PRICE_SCALE as f64
}

#[cfg(test)]
mod tests {
    use super::*;
    use tickbox_wire::{encode_to_vec, Header, Kind, Quote, Trade};

    #[test]
    fn every_kind_gives_one_value_per_column() {
        let frames = [
            encode_to_vec(
                "Q.XNAS.AAPL",
                &Header::live(Kind::Quote, 7, 1, 5),
                &Payload::Quote(Quote {
                    bid_px: 1_500_000_000,
                    ..Quote::default()
                }),
            )
            .unwrap(),
            encode_to_vec(
                "T.XNAS.AAPL",
                &Header::live(Kind::Trade, 7, 2, 5),
                &Payload::Trade(Trade::default()),
            )
            .unwrap(),
        ];
        for frame in &frames {
            let rec = Record {
                seq: 9,
                capture_time_ns: 11,
                payload: frame,
            };
            let row = Row::decode(&rec).unwrap();
            let mut n = 0;
            row.values(|_| n += 1);
            assert_eq!(n, columns_of(row.kind).count(), "{:?}", row.kind);
        }
        assert!(Row::decode(&Record {
            seq: 1,
            capture_time_ns: 1,
            payload: b"not a frame"
        })
        .is_none());
    }

    #[test]
    fn symbols_and_names() {
        assert_eq!(symbol_of("Q.XNAS.AAPL"), "AAPL");
        assert_eq!(symbol_of("V.GLBX.ESZ6"), "ESZ6");
        assert_eq!(symbol_of("Q.AAPL"), "AAPL");
        assert_eq!(symbol_of("AAPL"), "AAPL");
        for k in RecordKind::ALL {
            assert_eq!(RecordKind::parse(k.name()), Some(k));
        }
        let px = &QUOTE[1];
        assert_eq!(column_name(px, PriceType::Fixed), "bid_px_e9");
        assert_eq!(column_name(px, PriceType::Float), "bid_px");
        assert_eq!(price_f64(189_250_000_000), 189.25);
    }
}
