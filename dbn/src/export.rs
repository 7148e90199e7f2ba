//! Journal → DBN (the imported file rebuilt: metadata then records, byte for byte), JSON lines and CSV.

use std::io::Write;
use std::path::Path;

use serde_json::{json, Value};
use tickbox_recorder::HistoryReader;
use tickbox_units::format_rfc3339;

use crate::describe::{decode_frame, flatten};
use crate::error::DbnError;
use crate::frame::VendorFrame;
use crate::manifest::{Manifest, Source};

/// What an export wrote.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ExportReport {
    /// Records written.
    pub records: u64,
    /// Journal records left out (other sources, tickbox frames in a DBN export, foreign records).
    pub skipped: u64,
}

/// Text formats of [`export_text`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TextFormat {
    /// One JSON object per line.
    Json,
    /// A header line, then one row per record (every record must have the first record's fields).
    Csv,
}

fn out_err(e: std::io::Error) -> DbnError {
    DbnError::Output(e)
}

/// Picks the source to export: `wanted`, or the only one.
pub fn pick_source(manifest: &Manifest, wanted: Option<u32>) -> Result<(u32, &Source), DbnError> {
    match wanted {
        Some(i) => manifest
            .sources
            .get(i as usize)
            .map(|s| (i, s))
            .ok_or_else(|| {
                DbnError::Invalid(format!(
                    "no source {i}: the journal holds {}",
                    manifest.sources.len()
                ))
            }),
        None if manifest.sources.len() == 1 => Ok((0, &manifest.sources[0])),
        None => Err(DbnError::Invalid(format!(
            "the journal holds {} imported files; pick one with --source N (0 = {})",
            manifest.sources.len(),
            manifest.sources.first().map_or("none", |s| s.file.as_str())
        ))),
    }
}

/// Writes the DBN stream of one imported source: its metadata bytes (none for a fragment), then its records in
/// journal order, each exactly as imported. `compress`: zstd-compress the stream.
pub fn export_dbn(
    journal: &Path,
    source: Option<u32>,
    out: impl Write,
    compress: bool,
) -> Result<ExportReport, DbnError> {
    let manifest = Manifest::read(journal)?.ok_or_else(|| {
        DbnError::Invalid(format!(
            "{} holds no DBN import manifest: only journals written by `tickbox import` export to DBN",
            journal.display()
        ))
    })?;
    let (index, src) = pick_source(&manifest, source)?;
    let meta = src.metadata_bytes()?;
    let compression = if compress {
        dbn::Compression::Zstd
    } else {
        dbn::Compression::None
    };
    let mut w = dbn::encode::DynWriter::new(out, compression)
        .map_err(|e| DbnError::Invalid(format!("zstd writer: {e}")))?;
    if let Some(m) = &meta {
        w.write_all(m).map_err(out_err)?;
    }
    let mut r = HistoryReader::open(journal)?;
    let mut rep = ExportReport::default();
    while let Some(rec) = r.next()? {
        match VendorFrame::decode(rec.payload) {
            Ok(f) if f.source == index => {
                w.write_all(f.record).map_err(out_err)?;
                rep.records += 1;
            }
            _ => rep.skipped += 1,
        }
    }
    w.flush().map_err(out_err)?;
    w.finish()
        .map_err(|e| DbnError::Invalid(format!("finishing output: {e}")))?;
    Ok(rep)
}

/// Writes every journal record as JSON lines or CSV: journal sequence, capture time (RFC 3339), topic, kind,
/// header fields, then the record's decoded fields (prices as decimals, times RFC 3339).
pub fn export_text(
    journal: &Path,
    format: TextFormat,
    mut out: impl Write,
) -> Result<ExportReport, DbnError> {
    let manifest = Manifest::read(journal)?;
    let mut r = HistoryReader::open(journal)?;
    let mut rep = ExportReport::default();
    let mut columns: Option<Vec<String>> = None;
    while let Some(rec) = r.next()? {
        let Some(d) = decode_frame(rec.payload, manifest.as_ref()) else {
            rep.skipped += 1;
            continue;
        };
        let row = (format == TextFormat::Json).then(|| {
            json!({
                "journal_seq": rec.seq,
                "capture_time": format_rfc3339(rec.capture_time_ns),
                "topic": d.topic,
                "kind": d.kind,
                "publisher_id": d.publisher_id,
                "sequence": d.sequence,
                "origin_time": format_rfc3339(d.origin_time_ns),
                "fields": d.fields,
            })
        });
        match format {
            TextFormat::Json => {
                serde_json::to_writer(&mut out, &row).map_err(|e| out_err(e.into()))?;
                out.write_all(b"\n").map_err(out_err)?;
            }
            TextFormat::Csv => {
                // Header columns first (named apart from the record's own fields), then the record's fields.
                let mut flat: Vec<(String, String)> = vec![
                    ("journal_seq".into(), rec.seq.to_string()),
                    ("capture_time".into(), format_rfc3339(rec.capture_time_ns)),
                    ("topic".into(), d.topic.clone()),
                    ("kind".into(), d.kind.to_owned()),
                    ("publisher_id".into(), d.publisher_id.to_string()),
                    ("pub_seq".into(), d.sequence.to_string()),
                    ("origin_time".into(), format_rfc3339(d.origin_time_ns)),
                ];
                flat.extend(flatten(&d.fields));
                let keys: Vec<String> = flat.iter().map(|(k, _)| k.clone()).collect();
                match &columns {
                    None => {
                        writeln!(out, "{}", keys.iter().map(|k| csv_cell(k)).collect::<Vec<_>>().join(","))
                            .map_err(out_err)?;
                        columns = Some(keys);
                    }
                    Some(c) if *c != keys => {
                        return Err(DbnError::Invalid(format!(
                            "journal record {} has other fields than the first record ({} kind, {} fields): CSV \
                             needs one layout; use --format json for mixed journals",
                            rec.seq,
                            d.kind,
                            keys.len()
                        )))
                    }
                    Some(_) => {}
                }
                let cells: Vec<String> = flat.iter().map(|(_, v)| csv_cell(v)).collect();
                writeln!(out, "{}", cells.join(",")).map_err(out_err)?;
            }
        }
        rep.records += 1;
    }
    out.flush().map_err(out_err)?;
    Ok(rep)
}

fn csv_cell(s: &str) -> String {
    if s.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_owned()
    }
}

/// The fields of a decoded row as JSON (for tests and tools).
pub fn row_fields(row: &Value) -> Option<&Value> {
    row.get("fields")
}
