//! What an export did: rows, files, damage passed over, speed; and its printed form.

use std::collections::BTreeMap;
use std::time::Duration;

use tickbox_journal::JournalError;
use tickbox_recorder::HistoryReader;

use crate::dest::OutFile;

/// A damaged range the export passed over.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Damage {
    /// The file where the damage starts.
    pub path: String,
    /// Its byte offset there.
    pub offset: u64,
    /// Bytes passed over.
    pub bytes: u64,
    /// Records passed over (0 when unknown).
    pub records: u64,
    /// First journal sequence not read, when known.
    pub first_missing: Option<u64>,
    /// Where reading resumed, if anything verified after it.
    pub resumed_at: Option<u64>,
}

/// What an export did.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct ExportSummary {
    /// The format.
    pub format: &'static str,
    /// Rows written.
    pub rows: u64,
    /// Rows written per kind.
    pub rows_by_kind: BTreeMap<&'static str, u64>,
    /// Journal records read (selected or not).
    pub records_read: u64,
    /// Bytes of the records read (their payloads, as recorded).
    pub bytes_read: u64,
    /// Bytes of the selected records.
    pub bytes_selected: u64,
    /// Records the filter left out.
    pub filtered_out: u64,
    /// Records that are neither a tickbox frame nor an imported record (counted, not written).
    pub undecodable: u64,
    /// Damaged ranges passed over.
    pub damaged: Vec<Damage>,
    /// Files written.
    pub files: Vec<OutFile>,
    /// Bytes written (all files).
    pub bytes_written: u64,
    /// Selected record bytes per byte written.
    pub compression_ratio: f64,
    /// Wall time, seconds.
    pub seconds: f64,
    /// Rows per second.
    pub rows_per_second: f64,
    /// Selected record megabytes (10⁶) per second.
    pub mb_per_second: f64,
}

/// Progress, for a bar: records read so far of about how many.
#[derive(Debug, Clone, Copy)]
pub struct Progress {
    /// Journal records read.
    pub read: u64,
    /// Journal records the input holds from where reading began (an estimate for a growing journal).
    pub total: u64,
    /// Rows written.
    pub rows: u64,
}

/// After the reader met a damaged range: passes it, notes it in the summary, and says whether anything verifies
/// after it.
pub(crate) fn pass_damage(
    reader: &mut HistoryReader,
    s: &mut ExportSummary,
) -> Result<bool, JournalError> {
    let sk = reader.skip_damage()?;
    s.damaged.push(Damage {
        path: sk.path.display().to_string(),
        offset: sk.offset,
        bytes: sk.bytes,
        records: sk.records,
        first_missing: sk.first_missing,
        resumed_at: sk.resumed_at,
    });
    Ok(sk.resumed_at.is_some())
}

/// Fills the derived figures of a summary.
pub(crate) fn finish_summary(s: &mut ExportSummary, elapsed: Duration) {
    s.bytes_written = s.files.iter().map(|f| f.bytes).sum();
    s.compression_ratio = if s.bytes_written > 0 {
        s.bytes_selected as f64 / s.bytes_written as f64
    } else {
        0.0
    };
    s.seconds = elapsed.as_secs_f64();
    let secs = s.seconds.max(1e-9);
    s.rows_per_second = s.rows as f64 / secs;
    s.mb_per_second = s.bytes_selected as f64 / 1e6 / secs;
}

/// `n` with thousands separated by commas.
fn count(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

impl ExportSummary {
    /// The summary as `journal export` prints it: rows per kind, files, bytes, compression ratio, speed, every
    /// damaged range passed over and every file written.
    pub fn text(&self) -> String {
        let s = self;
        use std::fmt::Write;
        let mut t = String::new();
        let kinds: Vec<String> = s
            .rows_by_kind
            .iter()
            .map(|(k, n)| format!("{k} {}", count(*n)))
            .collect();
        let _ = writeln!(
            t,
            "exported      {} rows{} into {} file(s), {}",
            count(s.rows),
            if kinds.is_empty() {
                String::new()
            } else {
                format!(" ({})", kinds.join(", "))
            },
            s.files.len(),
            tickbox_units::format_size_approx(s.bytes_written)
        );
        let _ = writeln!(
            t,
            "read          {} records ({}); {} filtered out, {} undecodable",
            count(s.records_read),
            tickbox_units::format_size_approx(s.bytes_read),
            count(s.filtered_out),
            count(s.undecodable)
        );
        if s.bytes_written > 0 {
            let _ = writeln!(
                t,
                "ratio         {:.2}x (bytes of the records exported per byte written)",
                s.compression_ratio
            );
        }
        let _ = writeln!(
            t,
            "speed         {:.2} s, {} rows/s, {:.1} MB/s",
            s.seconds,
            count(s.rows_per_second as u64),
            s.mb_per_second
        );
        for d in &s.damaged {
            let _ = writeln!(
                t,
                "damaged       {} at offset {}: {} bytes, {} records passed over{}",
                d.path,
                d.offset,
                d.bytes,
                d.records,
                d.resumed_at
                    .map_or(", nothing verifies after it".to_owned(), |r| format!(
                        ", resumed at sequence {r}"
                    ))
            );
        }
        if !s.damaged.is_empty() {
            let _ = writeln!(
                t,
                "export        every intact record was exported; the damaged ranges above were passed over (exit 5)"
            );
        }
        for f in &s.files {
            let _ = writeln!(
                t,
                "file          {}  {} rows  {}",
                f.path,
                count(f.rows),
                f.bytes
            );
        }
        t
    }
}
