//! CSV (one file per kind, each with its own header: the kind's columns) and JSON lines (one object per row,
//! `kind` first, then the kind's columns). Both write the vocabulary's names; numbers are numbers (prices exact
//! integers of 1e-9 in `<name>_e9`, or floats with `--price float`), times RFC 3339 in UTC with nine fraction
//! digits, null times empty (CSV) or `null` (JSON), bytes lower-case hex.

use std::io::Write;

use crate::error::ExportError;
use crate::vocab::{
    column_name, columns_of, price_f64, FieldType, PriceType, RecordKind, Row, Value,
};

/// Formats times, reusing the text of the last second seen (rows come in time order, thousands a second).
#[derive(Debug, Default)]
pub(crate) struct TimeText {
    secs: u64,
    prefix: String,
}

impl TimeText {
    #[inline]
    pub(crate) fn write(&mut self, out: &mut impl Write, ns: u64) -> std::io::Result<()> {
        let secs = ns / 1_000_000_000;
        if self.prefix.is_empty() || secs != self.secs {
            let full = tickbox_units::format_rfc3339(ns);
            self.prefix = full[..full.len() - 11].to_owned();
            self.secs = secs;
        }
        out.write_all(self.prefix.as_bytes())?;
        write!(out, ".{:09}Z", ns % 1_000_000_000)
    }
}

fn hex(out: &mut impl Write, bytes: &[u8]) -> std::io::Result<()> {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut buf = Vec::with_capacity(bytes.len() * 2);
    for b in bytes {
        buf.push(DIGITS[usize::from(b >> 4)]);
        buf.push(DIGITS[usize::from(b & 15)]);
    }
    out.write_all(&buf)
}

/// Writes one value as CSV or JSON spells it (strings quoted by the caller's rules).
#[inline]
fn scalar(
    out: &mut impl Write,
    v: Value<'_>,
    ty: FieldType,
    price: PriceType,
    times: &mut TimeText,
    json: bool,
) -> std::io::Result<()> {
    let mut ints = itoa::Buffer::new();
    match v {
        Value::Time(0) if ty == FieldType::OptTime => {
            if json {
                out.write_all(b"null")?;
            }
            Ok(())
        }
        Value::Time(t) => {
            if json {
                out.write_all(b"\"")?;
                times.write(out, t)?;
                out.write_all(b"\"")
            } else {
                times.write(out, t)
            }
        }
        Value::U(x) => out.write_all(ints.format(x).as_bytes()),
        Value::Price(p) => match price {
            PriceType::Fixed => out.write_all(ints.format(p).as_bytes()),
            PriceType::Float => {
                let mut floats = ryu::Buffer::new();
                out.write_all(floats.format(price_f64(p)).as_bytes())
            }
        },
        Value::Str(s) => {
            if json {
                serde_json::to_writer(&mut *out, s).map_err(std::io::Error::other)
            } else if s.contains([',', '"', '\n', '\r']) {
                write!(out, "\"{}\"", s.replace('"', "\"\""))
            } else {
                out.write_all(s.as_bytes())
            }
        }
        Value::Bytes(b) => {
            if json {
                out.write_all(b"\"")?;
                hex(out, b)?;
                out.write_all(b"\"")
            } else {
                hex(out, b)
            }
        }
    }
}

/// One CSV file's rows (a kind's).
pub(crate) struct CsvFile<W: Write> {
    pub(crate) out: W,
    types: Vec<FieldType>,
    price: PriceType,
    times: TimeText,
    pub(crate) rows: u64,
}

impl<W: Write> CsvFile<W> {
    /// Starts `kind`'s file: writes its header.
    pub(crate) fn new(mut out: W, kind: RecordKind, price: PriceType) -> std::io::Result<Self> {
        let names: Vec<_> = columns_of(kind).map(|d| column_name(d, price)).collect();
        writeln!(out, "{}", names.join(","))?;
        Ok(CsvFile {
            out,
            types: columns_of(kind).map(|d| d.ty).collect(),
            price,
            times: TimeText::default(),
            rows: 0,
        })
    }

    /// Writes one row.
    #[inline]
    pub(crate) fn push(&mut self, row: &Row<'_>) -> std::io::Result<()> {
        let mut i = 0;
        let mut result = Ok(());
        let (out, types, times, price) = (&mut self.out, &self.types, &mut self.times, self.price);
        row.values(|v| {
            if result.is_ok() {
                if i > 0 {
                    result = out.write_all(b",");
                }
                let ty = types.get(i).copied().unwrap_or(FieldType::Str);
                if result.is_ok() {
                    result = scalar(out, v, ty, price, times, false);
                }
            }
            i += 1;
        });
        result?;
        self.out.write_all(b"\n")?;
        self.rows += 1;
        Ok(())
    }
}

/// JSON lines: every kind in one stream, `kind` naming each row's.
pub(crate) struct JsonLines<W: Write> {
    pub(crate) out: W,
    price: PriceType,
    /// Per kind: `"name":` of each column, ready to write.
    keys: Vec<Vec<(Vec<u8>, FieldType)>>,
    times: TimeText,
    pub(crate) rows: u64,
}

impl<W: Write> JsonLines<W> {
    pub(crate) fn new(out: W, price: PriceType) -> Self {
        let keys = RecordKind::ALL
            .iter()
            .map(|&k| {
                columns_of(k)
                    .map(|d| {
                        (
                            format!(",\"{}\":", column_name(d, price)).into_bytes(),
                            d.ty,
                        )
                    })
                    .collect()
            })
            .collect();
        JsonLines {
            out,
            price,
            keys,
            times: TimeText::default(),
            rows: 0,
        }
    }

    #[inline]
    pub(crate) fn push(&mut self, row: &Row<'_>) -> std::io::Result<()> {
        let (out, times, price) = (&mut self.out, &mut self.times, self.price);
        let keys = &self.keys[row.kind.index()];
        write!(out, "{{\"kind\":\"{}\"", row.kind.name())?;
        let mut i = 0;
        let mut result = Ok(());
        row.values(|v| {
            if result.is_ok() {
                if let Some((key, ty)) = keys.get(i) {
                    result = out
                        .write_all(key)
                        .and_then(|()| scalar(out, v, *ty, price, times, true));
                }
            }
            i += 1;
        });
        result?;
        self.out.write_all(b"}\n")?;
        self.rows += 1;
        Ok(())
    }
}

/// Maps a write error on `what` to the export's error.
pub(crate) fn write_err(what: &str) -> impl Fn(std::io::Error) -> ExportError + '_ {
    move |e| ExportError::io(what, e)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tickbox_journal::Record;
    use tickbox_wire::{encode_to_vec, Header, Kind, Payload, Quote};

    fn quote() -> Vec<u8> {
        encode_to_vec(
            "Q.XNAS.AAPL",
            &Header::live(Kind::Quote, 7, 3, 1_767_364_200_000_000_000),
            &Payload::Quote(Quote {
                bid_px: 189_250_000_000,
                ask_px: 189_260_000_000,
                bid_size: 300,
                ..Quote::default()
            }),
        )
        .unwrap()
    }

    #[test]
    fn json_numbers_are_numbers_and_csv_matches_its_header() {
        let frame = quote();
        let rec = Record {
            seq: 4,
            capture_time_ns: 1_767_364_200_000_000_005,
            payload: &frame,
        };
        let row = Row::decode(&rec).unwrap();
        let mut j = JsonLines::new(Vec::new(), PriceType::Fixed);
        j.push(&row).unwrap();
        let line = String::from_utf8(j.out).unwrap();
        let v: serde_json::Value = serde_json::from_str(&line).unwrap();
        assert_eq!(v["kind"], "quote");
        assert_eq!(v["bid_px_e9"], 189_250_000_000i64);
        assert_eq!(v["bid_size"], 300);
        assert_eq!(v["journal_seq"], 4);
        assert_eq!(v["capture_time"], "2026-01-02T14:30:00.000000005Z");
        assert_eq!(v["venue_time"], serde_json::Value::Null);
        assert_eq!(v["symbol"], "AAPL");
        let mut f = JsonLines::new(Vec::new(), PriceType::Float);
        f.push(&row).unwrap();
        let v: serde_json::Value = serde_json::from_slice(&f.out).unwrap();
        assert_eq!(v["ask_px"], 189.26);

        let mut c = CsvFile::new(Vec::new(), RecordKind::Quote, PriceType::Fixed).unwrap();
        c.push(&row).unwrap();
        let text = String::from_utf8(c.out).unwrap();
        let mut lines = text.lines();
        let header: Vec<_> = lines.next().unwrap().split(',').collect();
        let cells: Vec<_> = lines.next().unwrap().split(',').collect();
        assert_eq!(header.len(), cells.len());
        let at = |name: &str| cells[header.iter().position(|h| *h == name).unwrap()];
        assert_eq!(at("bid_px_e9"), "189250000000");
        assert_eq!(at("venue_time"), "");
        assert_eq!(at("topic"), "Q.XNAS.AAPL");
    }
}
