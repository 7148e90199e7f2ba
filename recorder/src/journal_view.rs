//! What `tickbox journal info` and `journal verify` say of a journal file or a history directory: one view read
//! once, shown as text or as one JSON object, and the verdict that picks the exit code. `info` reads without
//! checking checksums and adds the handovers of an elected recording (given as read from the leadership log);
//! `verify` checks every checksum and calls a header it cannot read a view of its own (corrupt). Also the line
//! `journal compress` ends with.

use std::path::{Path, PathBuf};

use serde_json::Value;
use tickbox_journal::{summarize, CompressReport, JournalError, JournalSummary, Unreadable};

use crate::{
    format_metadata_repairs, format_summary, format_verdict, HistoryCheck, HistoryDir,
    JournalAccounting, JournalVerdict, RecorderError,
};

/// Why a journal could not be viewed (damage is not an error: it is in the view and its verdict).
#[derive(Debug, thiserror::Error)]
pub enum ViewError {
    /// The journal could not be read.
    #[error("{doing} {}", path.display())]
    Read {
        /// `reading` or `verifying`.
        doing: &'static str,
        /// The journal.
        path: PathBuf,
        /// Why.
        #[source]
        source: JournalError,
    },
    /// The history directory could not be read.
    #[error(transparent)]
    History(#[from] RecorderError),
}

/// A journal file or a history directory, read for `info` or `verify`.
#[derive(Debug)]
pub enum JournalView {
    /// A journal file, its summary and its accounting of publisher sequences.
    Journal {
        /// The journal.
        path: PathBuf,
        /// Its structure.
        summary: Box<JournalSummary>,
        /// Its accounting.
        accounting: Box<JournalAccounting>,
    },
    /// A history directory: every journal, the chain between them, the summed accounting.
    History {
        /// The directory.
        path: PathBuf,
        /// What was found.
        check: Box<HistoryCheck>,
    },
    /// A journal whose header or structure cannot be read at all (`verify`).
    Unreadable {
        /// The journal.
        path: PathBuf,
        /// Why.
        error: JournalError,
    },
}

impl JournalView {
    /// `journal info`: the journal or history at `path`, checksums not checked.
    pub fn info(path: &Path) -> Result<JournalView, ViewError> {
        Self::read(path, false)
    }

    /// `journal verify`: the journal or history at `path`, every checksum checked.
    pub fn verify(path: &Path) -> Result<JournalView, ViewError> {
        match Self::read(path, true) {
            Err(ViewError::Read {
                source:
                    error @ (JournalError::CorruptHeader { .. } | JournalError::Truncated { .. }),
                ..
            }) => Ok(JournalView::Unreadable {
                path: path.to_path_buf(),
                error,
            }),
            other => other,
        }
    }

    fn read(path: &Path, checksums: bool) -> Result<JournalView, ViewError> {
        let path = path.to_path_buf();
        if HistoryDir::is_history(&path) {
            let check = Box::new(HistoryCheck::of(&path, checksums)?);
            return Ok(JournalView::History { path, check });
        }
        let summary = match summarize(&path, checksums) {
            Ok(s) => Box::new(s),
            Err(source) => {
                let doing = if checksums { "verifying" } else { "reading" };
                return Err(ViewError::Read {
                    doing,
                    path,
                    source,
                });
            }
        };
        let accounting = Box::new(JournalAccounting::of(&path));
        Ok(JournalView::Journal {
            path,
            summary,
            accounting,
        })
    }

    /// Whether anything is damaged: a broken structure, records that do not verify, a journal of a history that
    /// could not be read.
    pub fn damaged(&self) -> bool {
        match self {
            JournalView::Journal {
                summary,
                accounting,
                ..
            } => accounting.damaged(summary),
            JournalView::History { check, .. } => check.damaged(),
            JournalView::Unreadable { .. } => true,
        }
    }

    /// The verdict of `verify`: corrupt, gappy (intact but incomplete) or ok.
    pub fn verdict(&self) -> JournalVerdict {
        match self {
            JournalView::Journal {
                summary,
                accounting,
                ..
            } => accounting.verdict(summary),
            JournalView::History { check, .. } => check.verdict(),
            JournalView::Unreadable { .. } => JournalVerdict::Corrupt,
        }
    }

    /// `info --json`: the summary and accounting, with `handovers` (the leadership log's entries) as `leadership`
    /// when there are any.
    pub fn info_json(&self, handovers: Vec<Value>) -> Value {
        let mut v = self.json(None);
        if let JournalView::History { check, .. } = self {
            v["damaged_journals"] = check.damaged().into();
        }
        if !handovers.is_empty() {
            v["leadership"] = handovers.into();
        }
        v
    }

    /// `info`'s text, with a line per handover (`handover_lines`).
    pub fn info_text(&self, handover_lines: &[String]) -> String {
        match self {
            JournalView::Journal {
                path,
                summary,
                accounting,
            } => {
                let mut text = format!("{}{accounting}", format_summary(path, summary));
                for line in handover_lines {
                    text.push_str(line);
                    text.push('\n');
                }
                if let Some(c) = &summary.corruption {
                    text.push_str(&format!(
                        "structure     BROKEN at offset {} of {}: {}\n",
                        c.offset,
                        c.path.display(),
                        c.reason
                    ));
                }
                text
            }
            JournalView::History { check, .. } => check.info_text(handover_lines),
            JournalView::Unreadable { error, .. } => format!("CORRUPT: {error}\n"),
        }
    }

    /// `verify --json`: the summary, the accounting and the verdict.
    pub fn verify_json(&self) -> Value {
        self.json(Some(self.verdict()))
    }

    /// `verify`'s text, ending with the verdict.
    pub fn verify_text(&self) -> String {
        match self {
            JournalView::Journal {
                path,
                summary,
                accounting,
            } => format!(
                "{}{accounting}{}{}\n",
                format_summary(path, summary),
                format_metadata_repairs(summary),
                format_verdict(summary, accounting, self.verdict())
            ),
            JournalView::History { check, .. } => check.verify_text(),
            JournalView::Unreadable { error, .. } => format!("CORRUPT: {error}\n"),
        }
    }

    fn json(&self, verdict: Option<JournalVerdict>) -> Value {
        match self {
            JournalView::Journal {
                path,
                summary,
                accounting,
            } => accounting.to_json(path, summary, verdict),
            JournalView::History { path, check } => {
                let mut v = match (&check.summary, verdict) {
                    (Some(s), verdict) => check.accounting.to_json(path, s, verdict),
                    (None, None) => serde_json::json!({ "path": path.display().to_string() }),
                    (None, Some(verdict)) => serde_json::json!({
                        "path": path.display().to_string(),
                        "verdict": verdict.as_str(),
                    }),
                };
                check.add_to_json(&mut v);
                v
            }
            JournalView::Unreadable { path, error } => {
                serde_json::to_value(Unreadable::new(path, error)).unwrap_or_default()
            }
        }
    }
}

/// `journal compress`'s summary line: what it compressed, and the ratio on disk.
pub fn compress_line(r: &CompressReport) -> String {
    format!(
        "compressed {} files: {} records, {} bytes on disk -> {} ({:.1}x); {} already compressed",
        r.files,
        r.records,
        r.bytes_before,
        r.bytes_after,
        r.bytes_before as f64 / r.bytes_after.max(1) as f64,
        r.already_compressed
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use tickbox_journal::{Writer, WriterOptions};

    fn ring(path: &Path, records: u64) {
        let mut w = Writer::open(path, &WriterOptions::ring(1 << 20)).unwrap();
        for i in 0..records {
            w.append(1_000 + i, b"not a frame").unwrap();
        }
        w.close().unwrap();
    }

    #[test]
    fn the_compress_line_gives_the_ratio_even_for_nothing_written() {
        let r = CompressReport {
            files: 2,
            records: 10,
            bytes_before: 3000,
            bytes_after: 1000,
            already_compressed: 1,
            ..CompressReport::default()
        };
        assert_eq!(
            compress_line(&r),
            "compressed 2 files: 10 records, 3000 bytes on disk -> 1000 (3.0x); 1 already compressed"
        );
        let empty = compress_line(&CompressReport::default());
        assert!(empty.contains("0 bytes on disk -> 0 (0.0x)"), "{empty}");
    }

    #[test]
    fn an_intact_journal_reads_the_same_for_info_and_verify() {
        let dir = tickbox_testkit::TempDir::new("journal-view");
        let path = dir.path().join("ring.tbj");
        ring(&path, 3);
        let info = JournalView::info(&path).unwrap();
        assert!(!info.damaged());
        let text = info.info_text(&["leader 1 from seq 1".into()]);
        assert!(
            text.starts_with(&format!("path          {}", path.display())),
            "{text}"
        );
        assert!(
            text.ends_with("leader 1 from seq 1\n"),
            "handovers last: {text}"
        );
        let json = info.info_json(vec![serde_json::json!({"event": "elected"})]);
        assert_eq!(json["leadership"][0]["event"], "elected");
        let verify = JournalView::verify(&path).unwrap();
        assert_ne!(verify.verdict(), JournalVerdict::Corrupt);
        assert_eq!(verify.verify_json()["verdict"], verify.verdict().as_str());
    }

    #[test]
    fn a_journal_whose_header_is_gone_is_an_error_for_info_and_corrupt_for_verify() {
        let dir = tickbox_testkit::TempDir::new("journal-view-broken");
        let path = dir.path().join("ring.tbj");
        ring(&path, 3);
        let mut bytes = std::fs::read(&path).unwrap();
        bytes[..64].fill(0);
        std::fs::write(&path, bytes).unwrap();
        let err = JournalView::info(&path).unwrap_err();
        assert!(err.to_string().starts_with("reading "), "{err}");
        let verify = JournalView::verify(&path).unwrap();
        assert!(
            matches!(verify, JournalView::Unreadable { .. }),
            "{verify:?}"
        );
        assert_eq!(verify.verdict(), JournalVerdict::Corrupt);
        assert!(verify.verify_text().starts_with("CORRUPT: "));
        assert_eq!(verify.verify_json()["verdict"], "corrupt");
    }
}
