//! Journal → DBN: the imported file rebuilt (metadata then records, byte for byte). The other export formats, and
//! DBN of a recording, are the `tickbox-export` crate's.

use std::io::Write;
use std::path::Path;

use tickbox_recorder::HistoryReader;

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
