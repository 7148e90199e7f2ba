//! Decoded fields of journal records, for `journal dump` and the json/csv exports: DBN records through the `dbn`
//! crate's JSON encoder (prices as decimals, times RFC 3339), tickbox frames field by field in the same style.

use std::io::Cursor;

use dbn::decode::dbn::RecordDecoder;
use dbn::encode::EncodeRecordRef;
use dbn::VersionUpgradePolicy;
use serde_json::{Map, Value};
use tickbox_units::format_rfc3339;
use tickbox_wire::{MessageRef, Payload, PRICE_SCALE};

use crate::error::DbnError;
use crate::frame::VendorFrame;
use crate::manifest::Manifest;

/// A journal record's frame, decoded for display.
#[derive(Debug, Clone, PartialEq)]
pub struct Decoded {
    /// Frame topic.
    pub topic: String,
    /// Kind name (`quote`, …, `vendor`).
    pub kind: &'static str,
    /// Header publisher id.
    pub publisher_id: u32,
    /// Header sequence.
    pub sequence: u64,
    /// Header flags.
    pub flags: u16,
    /// Header origin time, ns.
    pub origin_time_ns: u64,
    /// The payload's fields (nested for DBN records).
    pub fields: Value,
}

/// A fixed-point price (1e-9 units) as a decimal with nine fraction digits.
pub fn format_price(units: i64) -> String {
    let sign = if units < 0 { "-" } else { "" };
    let abs = units.unsigned_abs();
    let scale = PRICE_SCALE as u64;
    format!("{sign}{}.{:09}", abs / scale, abs % scale)
}

/// Whether the source at `index` of `manifest` appends `ts_out` to its records.
fn ts_out_of(manifest: Option<&Manifest>, index: u32) -> bool {
    manifest
        .and_then(|m| m.sources.get(index as usize))
        .is_some_and(|s| s.ts_out)
}

/// One DBN record's fields, as the `dbn` crate's JSON encoder writes them with decimal prices and RFC 3339
/// times. `ts_out`: the record carries an appended send timestamp (shown as `ts_out`).
pub fn record_json(version: u8, ts_out: bool, record: &[u8]) -> Result<Value, DbnError> {
    let bad = |why: String| DbnError::Invalid(format!("DBN record: {why}"));
    let mut bytes = record.to_vec();
    let mut out_ts = None;
    if ts_out && bytes.len() >= 24 {
        let at = bytes.len() - 8;
        out_ts = Some(u64::from_le_bytes(bytes[at..].try_into().unwrap_or([0; 8])));
        bytes.truncate(at);
        bytes[0] = bytes[0].saturating_sub(2);
    }
    if bytes.first().map(|&l| usize::from(l) * 4) != Some(bytes.len()) {
        return Err(bad(format!(
            "length byte disagrees with its {} bytes",
            bytes.len()
        )));
    }
    if !crate::frame::record_fits(&bytes) {
        return Err(bad(format!(
            "rtype {:#04x} unknown, or {} bytes too short for it",
            bytes.get(1).copied().unwrap_or(0),
            bytes.len()
        )));
    }
    let version = if (1..=3).contains(&version) {
        version
    } else {
        dbn::DBN_VERSION
    };
    let mut dec = RecordDecoder::with_version(
        Cursor::new(bytes),
        version,
        VersionUpgradePolicy::AsIs,
        false,
    )
    .map_err(|e| bad(e.to_string()))?;
    let rec = dec
        .decode_ref()
        .map_err(|e| bad(e.to_string()))?
        .ok_or_else(|| bad("empty".into()))?;
    let mut buf = Vec::new();
    let mut enc = dbn::encode::json::Encoder::builder(&mut buf)
        .use_pretty_px(true)
        .use_pretty_ts(true)
        .build();
    enc.encode_record_ref(rec).map_err(|e| bad(e.to_string()))?;
    drop(enc);
    let mut v: Value = serde_json::from_slice(&buf).map_err(|e| bad(e.to_string()))?;
    if let (Some(t), Value::Object(m)) = (out_ts, &mut v) {
        m.insert("ts_out".into(), Value::String(format_rfc3339(t)));
    }
    Ok(v)
}

fn wire_fields(p: &Payload) -> Value {
    let mut m = Map::new();
    let mut put = |k: &str, v: String| {
        m.insert(k.to_owned(), Value::String(v));
    };
    let side = |s: tickbox_wire::Side| format!("{s:?}").to_lowercase();
    let time = |t: u64| {
        if t == 0 {
            String::new()
        } else {
            format_rfc3339(t)
        }
    };
    match p {
        Payload::Quote(q) => {
            put("instrument_id", q.instrument_id.to_string());
            put("bid_px", format_price(q.bid_px));
            put("ask_px", format_price(q.ask_px));
            put("bid_size", q.bid_size.to_string());
            put("ask_size", q.ask_size.to_string());
            put("bid_orders", q.bid_orders.to_string());
            put("ask_orders", q.ask_orders.to_string());
            put("venue_time", time(q.venue_time_ns));
        }
        Payload::Trade(t) => {
            put("instrument_id", t.instrument_id.to_string());
            put("price", format_price(t.price));
            put("size", t.size.to_string());
            put("aggressor", side(t.aggressor));
            put("trade_id", t.trade_id.to_string());
            put("venue_time", time(t.venue_time_ns));
        }
        Payload::Heartbeat(h) => {
            put("interval_ns", h.interval_ns.to_string());
            put("messages_sent", h.messages_sent.to_string());
        }
        Payload::BookLevel(b) => {
            put("instrument_id", b.instrument_id.to_string());
            put("side", side(b.side));
            put("level", b.level.to_string());
            put("price", format_price(b.price));
            put("size", b.size.to_string());
            put("order_count", b.order_count.to_string());
            put("venue_time", time(b.venue_time_ns));
        }
        Payload::Gap(g) => {
            put("first_missing", g.first_missing.to_string());
            put("last_missing", g.last_missing.to_string());
            put("detected", time(g.detected_ns));
            put("cause", format!("{:?}", g.cause).to_lowercase());
        }
    }
    Value::Object(m)
}

/// Decodes a journal record: a vendor frame (its DBN record's fields) or a tickbox frame (its payload's fields).
/// `None` when it is neither (a foreign record, or a damaged frame).
pub fn decode_frame(frame: &[u8], manifest: Option<&Manifest>) -> Option<Decoded> {
    if let Ok(v) = VendorFrame::decode(frame) {
        let fields = record_json(v.version, ts_out_of(manifest, v.source), v.record)
            .unwrap_or_else(|e| Value::String(format!("undecodable: {e}")));
        return Some(Decoded {
            topic: v.topic.to_owned(),
            kind: "vendor",
            publisher_id: v.header.publisher_id,
            sequence: v.header.sequence,
            flags: v.header.flags,
            origin_time_ns: v.header.origin_time_ns,
            fields,
        });
    }
    let m = MessageRef::decode(frame).ok()?;
    let h = m.header();
    let fields = match m.payload() {
        Ok(p) => wire_fields(&p),
        Err(e) => Value::String(format!("undecodable: {e}")),
    };
    Some(Decoded {
        topic: m.topic().to_owned(),
        kind: m.kind().name(),
        publisher_id: h.publisher_id,
        sequence: h.sequence,
        flags: h.flags.0,
        origin_time_ns: h.origin_time_ns,
        fields,
    })
}

/// Flattens nested fields into `(dotted.key, text)` pairs (`hd.ts_event`, `levels.0.bid_px`); strings are
/// unquoted, nulls empty.
pub fn flatten(v: &Value) -> Vec<(String, String)> {
    fn go(prefix: &str, v: &Value, out: &mut Vec<(String, String)>) {
        let key = |k: &str| {
            if prefix.is_empty() {
                k.to_owned()
            } else {
                format!("{prefix}.{k}")
            }
        };
        match v {
            Value::Object(m) => m.iter().for_each(|(k, v)| go(&key(k), v, out)),
            Value::Array(a) => a
                .iter()
                .enumerate()
                .for_each(|(i, v)| go(&key(&i.to_string()), v, out)),
            Value::String(s) => out.push((prefix.to_owned(), s.clone())),
            Value::Null => out.push((prefix.to_owned(), String::new())),
            other => out.push((prefix.to_owned(), other.to_string())),
        }
    }
    let mut out = Vec::new();
    go("", v, &mut out);
    out
}

/// The header columns of one `journal dump` line for a decoded record, aligned with the recorder's dump header:
/// journal sequence, capture time, size, topic, kind, publisher, publisher sequence, flags.
pub fn format_dump_columns(seq: u64, capture_time_ns: u64, bytes: usize, d: &Decoded) -> String {
    format!(
        "{:>10}  {:<30}  {:>5}  {:<20}  {:<10}  {:>10}  {:>8}  {:#06x}",
        seq,
        format_rfc3339(capture_time_ns),
        bytes,
        d.topic,
        d.kind,
        d.publisher_id,
        d.sequence,
        d.flags
    )
}

/// Flattened fields as `key=value` pairs separated by spaces (values with spaces are quoted).
pub fn format_fields(fields: &[(String, String)]) -> String {
    fields
        .iter()
        .map(|(k, v)| {
            if v.contains(' ') || v.is_empty() {
                format!("{k}={v:?}")
            } else {
                format!("{k}={v}")
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}
/// The kinds `journal dump --kind` accepts.
pub const DUMP_KINDS: [&str; 6] = ["quote", "trade", "heartbeat", "book_level", "gap", "vendor"];

/// Which records `tickbox journal dump` prints, and how: a capture-time window, topic prefixes, kinds, and
/// whether decoded fields follow the columns.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DumpFilter {
    /// Records captured before this (ns since the epoch) are left out.
    pub from_ns: Option<u64>,
    /// Records captured after this are left out.
    pub to_ns: Option<u64>,
    /// Topic prefixes; empty: every topic. A record that does not decode has no topic and is left out when any
    /// is given.
    pub topics: Vec<String>,
    /// Kinds ([`DUMP_KINDS`]); empty: every kind.
    pub kinds: Vec<String>,
    /// Print the decoded fields after the columns.
    pub fields: bool,
}

impl DumpFilter {
    /// Checks that each of `kinds` is one of [`DUMP_KINDS`]; the error names the first that is not and lists them.
    pub fn check_kinds(kinds: &[String]) -> Result<(), String> {
        match kinds.iter().find(|k| !DUMP_KINDS.contains(&k.as_str())) {
            Some(k) => Err(format!("--kind {k}: not one of {}", DUMP_KINDS.join(", "))),
            None => Ok(()),
        }
    }

    /// Whether the filter keeps `rec`, and the record decoded (`None` inside when it does not decode).
    fn select(
        &self,
        rec: &tickbox_journal::Record<'_>,
        manifest: Option<&Manifest>,
    ) -> Option<Option<Decoded>> {
        if self.from_ns.is_some_and(|t| rec.capture_time_ns < t)
            || self.to_ns.is_some_and(|t| rec.capture_time_ns > t)
        {
            return None;
        }
        let decoded = decode_frame(rec.payload, manifest);
        if !self.topics.is_empty() || !self.kinds.is_empty() {
            let d = decoded.as_ref()?;
            if !self.topics.is_empty()
                && !self.topics.iter().any(|p| d.topic.starts_with(p.as_str()))
            {
                return None;
            }
            if !self.kinds.is_empty() && !self.kinds.iter().any(|k| k == d.kind) {
                return None;
            }
        }
        Some(decoded)
    }

    /// The record as one JSON object (`journal dump --json`): the journal sequence, capture time, size, and, when
    /// it decodes, the fields `journal export --format json` writes; `None` when the filter leaves it out.
    pub fn json(
        &self,
        rec: &tickbox_journal::Record<'_>,
        manifest: Option<&Manifest>,
    ) -> Option<Value> {
        let decoded = self.select(rec, manifest)?;
        let mut row = serde_json::json!({
            "journal_seq": rec.seq,
            "capture_time": tickbox_units::format_rfc3339(rec.capture_time_ns),
            "bytes": rec.payload.len(),
            "decoded": decoded.is_some(),
        });
        if let Some(d) = decoded {
            row["topic"] = d.topic.into();
            row["kind"] = d.kind.into();
            row["publisher_id"] = d.publisher_id.into();
            row["sequence"] = d.sequence.into();
            row["origin_time"] = tickbox_units::format_rfc3339(d.origin_time_ns).into();
            if self.fields {
                row["fields"] = d.fields;
            }
        }
        Some(row)
    }

    /// The dump line of `rec` (a journal record whose frame `manifest` helps decode), or `None` when the filter
    /// leaves it out.
    pub fn line(
        &self,
        rec: &tickbox_journal::Record<'_>,
        manifest: Option<&Manifest>,
    ) -> Option<String> {
        let decoded = self.select(rec, manifest)?;
        Some(match &decoded {
            Some(d) => {
                let cols = format_dump_columns(rec.seq, rec.capture_time_ns, rec.payload.len(), d);
                if self.fields {
                    format!("{cols}  {}", format_fields(&flatten(&d.fields)))
                } else {
                    cols
                }
            }
            None => tickbox_recorder::format_dump_line(rec),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tickbox_journal::Record;
    use tickbox_wire::{Header, Kind, Quote};

    fn quote_frame(topic: &str) -> Vec<u8> {
        let header = Header::live(Kind::Quote, 7, 1, 5);
        tickbox_wire::encode_to_vec(topic, &header, &Payload::Quote(Quote::default())).unwrap()
    }

    fn record(frame: &[u8], capture_time_ns: u64) -> Record<'_> {
        Record {
            seq: 3,
            capture_time_ns,
            payload: frame,
        }
    }

    #[test]
    fn the_dump_filter_keeps_what_its_window_topics_and_kinds_name() {
        let aapl = quote_frame("Q.XNAS.AAPL");
        let junk = b"not a frame".to_vec();
        let all = DumpFilter::default();
        assert!(all
            .line(&record(&aapl, 100), None)
            .unwrap()
            .contains("Q.XNAS.AAPL"));
        assert!(
            all.line(&record(&junk, 100), None).is_some(),
            "undecodable lines still show"
        );
        let window = DumpFilter {
            from_ns: Some(50),
            to_ns: Some(150),
            ..DumpFilter::default()
        };
        assert!(window.line(&record(&aapl, 49), None).is_none());
        assert!(window.line(&record(&aapl, 150), None).is_some());
        assert!(window.line(&record(&aapl, 151), None).is_none());
        let topics = DumpFilter {
            topics: vec!["Q.XNAS.M".into()],
            ..DumpFilter::default()
        };
        assert!(topics.line(&record(&aapl, 1), None).is_none());
        assert!(
            topics.line(&record(&junk, 1), None).is_none(),
            "no topic to match"
        );
        let kinds = DumpFilter {
            kinds: vec!["quote".into()],
            fields: false,
            ..DumpFilter::default()
        };
        assert!(kinds.line(&record(&aapl, 1), None).is_some());
        let trades = DumpFilter {
            kinds: vec!["trade".into()],
            ..DumpFilter::default()
        };
        assert!(trades.line(&record(&aapl, 1), None).is_none());
        assert!(DumpFilter::check_kinds(&["quote".into(), "gap".into()]).is_ok());
        let err = DumpFilter::check_kinds(&["quotes".into()]).unwrap_err();
        assert!(
            err.contains("--kind quotes: not one of quote, trade"),
            "{err}"
        );
    }
}
