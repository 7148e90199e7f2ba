//! Retention of a history: by age (`--retain 30d`) and by total size (`--retain-size 2TiB`), oldest journal first,
//! never the newest (the period being recorded), never a journal a writer has open or a reader holds a lease on
//! (see `lease`). `journal prune` runs it once; `record --retain` runs it at the start and after every roll.
//!
//! Oldest first means in the history's order, and retention stops at the first journal it must keep: deleting a
//! newer journal while an older one stays would cut a hole in the middle of the history. What it kept and why is
//! reported, like what it deleted.

use std::path::Path;
use std::time::Duration;

use serde::Serialize;

use crate::catalog::{card_path, JournalCard};
use crate::error::RecorderError;
use crate::history_dir::HistoryDir;
use crate::lease::{lease_path, writer_holds, Lease};

/// How much of a history to keep.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Retention {
    /// Journals whose last record is older than this go.
    pub max_age: Option<Duration>,
    /// While the journals take more than this on disk, the oldest go.
    pub max_bytes: Option<u64>,
}

impl Retention {
    /// Whether it keeps everything.
    pub fn is_none(&self) -> bool {
        self.max_age.is_none() && self.max_bytes.is_none()
    }
}

/// A journal retention removed, or would remove.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Pruned {
    /// Its name.
    pub name: String,
    /// Bytes it took on disk.
    pub bytes: u64,
    /// Its last record's capture time.
    pub last_capture_ns: Option<u64>,
    /// Why: `age` or `size`.
    pub why: &'static str,
}

/// What a prune did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct PruneReport {
    /// Journals deleted (or, dry, that would be), oldest first.
    pub deleted: Vec<Pruned>,
    /// Bytes they took.
    pub freed_bytes: u64,
    /// The first journal retention wanted gone but had to keep, and why (`open`: a writer has it; `read`: a
    /// reader holds its lease; `newest`: the period being recorded).
    pub kept: Option<(String, &'static str)>,
    /// Journals left.
    pub journals_left: u64,
    /// Bytes they take.
    pub bytes_left: u64,
    /// Nothing was deleted: the report says what would have been.
    pub dry_run: bool,
}

/// The report for people: a line per journal deleted (or that would be), the one kept and why, then the totals.
impl std::fmt::Display for PruneReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        use tickbox_units::format_size_approx as size;
        let verb = if self.dry_run {
            "would delete"
        } else {
            "deleted"
        };
        for p in &self.deleted {
            writeln!(f, "{verb}  {}  {}  ({})", p.name, size(p.bytes), p.why)?;
        }
        if let Some((name, why)) = &self.kept {
            let why = match *why {
                "open" => "a writer has it open",
                "read" => "it is being read (a replay or the history service holds its lease)",
                _ => "it is the newest journal",
            };
            writeln!(f, "kept     {name}: {why}; retention stops there")?;
        }
        writeln!(
            f,
            "prune         {} journal(s) {verb} ({}); {} left ({})",
            self.deleted.len(),
            size(self.freed_bytes),
            self.journals_left,
            size(self.bytes_left)
        )
    }
}

/// Applies `retention` to the history at `dir` at wall-clock time `now_ns` (with `dry_run`, only says what it
/// would delete).
pub fn prune(
    dir: &Path,
    retention: &Retention,
    now_ns: u64,
    dry_run: bool,
) -> Result<PruneReport, RecorderError> {
    let history = HistoryDir::open(dir)?;
    let journals = history.journals()?;
    let mut cards = Vec::with_capacity(journals.len());
    for j in &journals {
        let card = JournalCard::of(&j.path).map_err(|source| RecorderError::Open {
            path: j.path.clone(),
            source,
        })?;
        cards.push(card);
    }
    let mut total: u64 = cards.iter().map(|c| c.bytes_on_disk).sum();
    let cutoff = retention
        .max_age
        .map(|age| now_ns.saturating_sub(u64::try_from(age.as_nanos()).unwrap_or(u64::MAX)));
    let mut report = PruneReport {
        dry_run,
        ..PruneReport::default()
    };
    let mut left = journals.len();
    for (i, (j, card)) in journals.iter().zip(&cards).enumerate() {
        // A journal with no record is aged by its period (the name) being passed: its card has no time, so it
        // goes with the journals around it only by size.
        let too_old = cutoff.is_some_and(|cut| card.last_capture_ns.is_some_and(|t| t < cut));
        let too_big = retention.max_bytes.is_some_and(|max| total > max);
        let why = match (too_old, too_big) {
            (true, _) => "age",
            (false, true) => "size",
            (false, false) => break,
        };
        if i + 1 == journals.len() {
            report.kept = Some((j.name.clone(), "newest"));
            break;
        }
        if writer_holds(&j.path) {
            report.kept = Some((j.name.clone(), "open"));
            break;
        }
        let lease = match Lease::delete(&j.path) {
            Ok(Some(lease)) => lease,
            Ok(None) => {
                report.kept = Some((j.name.clone(), "read"));
                break;
            }
            Err(source) => {
                return Err(RecorderError::Journal(tickbox_journal::JournalError::Io {
                    path: lease_path(&j.path),
                    source,
                }))
            }
        };
        if !dry_run {
            tickbox_journal::remove_journal(&j.path).map_err(|source| {
                RecorderError::Journal(tickbox_journal::JournalError::Io {
                    path: j.path.clone(),
                    source,
                })
            })?;
            let _ = std::fs::remove_file(card_path(&j.path));
            // The lease file goes last, while its lock is still held (the lock goes with `lease`).
            let _ = std::fs::remove_file(lease_path(&j.path));
            tracing::info!(journal = %j.path.display(), why, bytes = card.bytes_on_disk, "retention deleted a journal of the history");
        }
        drop(lease);
        total = total.saturating_sub(card.bytes_on_disk);
        left -= 1;
        report.freed_bytes += card.bytes_on_disk;
        report.deleted.push(Pruned {
            name: j.name.clone(),
            bytes: card.bytes_on_disk,
            last_capture_ns: card.last_capture_ns,
            why,
        });
    }
    report.journals_left = left as u64;
    report.bytes_left = total;
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history_dir::HistoryWriter;
    use crate::history_reader::HistoryReader;
    use crate::record::{Journals, Recorder};
    use crate::roll::Roll;
    use tickbox_journal::WriterOptions;
    use tickbox_wire::{encode_to_vec, Header, Kind, Quote};

    const DAY: u64 = 86_400_000_000_000;
    /// 2026-11-24T00:00:00Z.
    const T0: u64 = 1_795_478_400_000_000_000;

    /// A daily history of `days` journals, 50 quotes each, the last still open when `keep_open`.
    fn history(path: &Path, days: u64) -> HistoryWriter {
        let roll = Roll::parse("daily", None, None).unwrap();
        let (mut h, _) =
            HistoryWriter::open(path, Some(&roll), &WriterOptions::archive(1 << 20), T0).unwrap();
        let mut rec = Recorder::new_after(h.writer(), None).unwrap();
        let mut seq = 0;
        for day in 0..days {
            for k in 0..50 {
                seq += 1;
                let at = T0 + day * DAY + k;
                if h.roll_check().due(at, rec.journal_bytes()) {
                    h.roll(&mut rec, at).unwrap();
                }
                let frame = encode_to_vec(
                    "Q.XNAS.AAPL",
                    &Header::live(Kind::Quote, 7, seq, at),
                    &Quote::default().into(),
                )
                .unwrap();
                let mut batch = h.writer().batch();
                rec.on_frame(&mut batch, at, &frame).unwrap();
                batch.commit().unwrap();
                rec.after_commit(h.writer()).unwrap();
            }
        }
        h
    }

    fn names(path: &Path) -> Vec<String> {
        HistoryDir::open(path)
            .unwrap()
            .journals()
            .unwrap()
            .into_iter()
            .map(|j| j.name)
            .collect()
    }

    #[test]
    fn age_retention_deletes_the_oldest_and_never_the_open_journal() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("hist");
        let h = history(&path, 5);
        let age = Retention {
            max_age: Some(Duration::from_secs(2 * 86_400)),
            max_bytes: None,
        };
        // On the 29th, journals whose last record is over two days old go: the 24th, 25th and 26th.
        let now = T0 + 5 * DAY;
        let dry = prune(&path, &age, now, true).unwrap();
        assert_eq!(dry.deleted.len(), 3);
        assert_eq!(names(&path).len(), 5, "a dry run deletes nothing");
        let report = prune(&path, &age, now, false).unwrap();
        let gone: Vec<&str> = report.deleted.iter().map(|p| p.name.as_str()).collect();
        assert_eq!(gone, ["2026-11-24", "2026-11-25", "2026-11-26"]);
        assert_eq!(names(&path), ["2026-11-27", "2026-11-28"]);
        assert_eq!(report.journals_left, 2);
        // Years later everything is old, but the journal being written stays.
        let report = prune(&path, &age, now + 1000 * DAY, false).unwrap();
        assert_eq!(report.deleted.len(), 1);
        assert_eq!(report.kept, Some(("2026-11-28".to_owned(), "newest")));
        assert!(!path.join("2026-11-27.summary.json").exists());
        assert!(!path.join("2026-11-27.readers").exists());
        h.close().unwrap();
        // The history still reads, from its oldest journal left.
        let mut r = HistoryReader::open(&path).unwrap();
        assert_eq!(r.next().unwrap().unwrap().seq, 201);
    }

    #[test]
    fn size_retention_stops_at_a_journal_being_read() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("hist");
        history(&path, 4).close().unwrap();
        let cards: Vec<u64> = HistoryDir::open(&path)
            .unwrap()
            .journals()
            .unwrap()
            .iter()
            .map(|j| JournalCard::of(&j.path).unwrap().bytes_on_disk)
            .collect();
        let total: u64 = cards.iter().sum();
        // Room for the newest two.
        let size = Retention {
            max_age: None,
            max_bytes: Some(total - cards[0] - cards[1]),
        };
        // A replay reading the second journal keeps it, and so everything after it.
        let mut reader = HistoryReader::open(&path).unwrap();
        reader.seek_seq(60).unwrap();
        let report = prune(&path, &size, T0, false).unwrap();
        assert_eq!(
            report.deleted.iter().map(|p| p.why).collect::<Vec<_>>(),
            ["size"]
        );
        assert_eq!(report.kept, Some(("2026-11-25".to_owned(), "read")));
        assert_eq!(
            reader.next().unwrap().unwrap().seq,
            60,
            "the reader reads on"
        );
        drop(reader);
        let report = prune(&path, &size, T0, false).unwrap();
        assert_eq!(report.deleted.len(), 1);
        assert!(report.bytes_left <= total - cards[0] - cards[1]);
        assert_eq!(names(&path), ["2026-11-26", "2026-11-27"]);
    }

    #[test]
    fn the_report_for_people_names_each_journal_the_one_kept_and_the_totals() {
        let report = PruneReport {
            deleted: vec![Pruned {
                name: "a.tbj".into(),
                bytes: 2048,
                last_capture_ns: None,
                why: "age",
            }],
            freed_bytes: 2048,
            kept: Some(("b.tbj".into(), "read")),
            journals_left: 2,
            bytes_left: 4096,
            dry_run: true,
        };
        let text = report.to_string();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines,
            [
                "would delete  a.tbj  2.00 KiB  (age)",
                "kept     b.tbj: it is being read (a replay or the history service holds its lease); retention stops \
                 there",
                "prune         1 journal(s) would delete (2.00 KiB); 2 left (4.00 KiB)",
            ]
        );
    }
}
