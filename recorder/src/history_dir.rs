//! A history: a directory of journals, one per trading period, written by `tickbox record --roll` and read as one.
//!
//! ```text
//! DIR/
//!   tickbox-history.json         the roll ({"roll": "daily at 17:00:00 America/New_York"}): what makes DIR a history
//!   2026-11-23/                  one archive journal per period, named by its start (see `roll`)
//!   2026-11-23.summary.json      its cached summary, written when it closes (`journal ls` reads it, never a scan)
//!   2026-11-24/                  the period being recorded
//! ```
//!
//! The journal sequence continues from one journal to the next (each new journal starts at its predecessor's
//! next sequence) and so does every publisher's sequence chain (the recorder's tracker runs on across a roll and
//! each journal's ledger starts where the last one left each publisher). Journals are ordered by their first
//! sequence, so a history reads as one journal: nothing lost or counted twice at a roll, and a missing journal is
//! a hole in the sequence `journal verify DIR` reports.

use std::path::{Path, PathBuf};
use std::sync::mpsc;

use tickbox_journal::{JournalError, Reader, Writer, WriterOptions};

use crate::catalog::HISTORY_FILE;
use crate::error::{HistoryError, RecorderError};
use crate::ledger::Ledger;
use crate::record::{Journals, Recorder, RollCheck};
use crate::roll::{Period, Roll};

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> HistoryError + '_ {
    move |source| HistoryError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// One journal of a history.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HistoryJournal {
    /// Its name (the period it holds).
    pub name: String,
    /// Its path.
    pub path: PathBuf,
    /// The sequence of its first record (what orders a history's journals).
    pub first_seq: u64,
}

/// A history directory (see the module documentation).
#[derive(Debug, Clone)]
pub struct HistoryDir {
    dir: PathBuf,
    roll: Roll,
}

impl HistoryDir {
    /// Whether `path` is a history directory.
    pub fn is_history(path: &Path) -> bool {
        path.join(HISTORY_FILE).is_file()
    }

    /// Opens the history at `dir`.
    pub fn open(dir: &Path) -> Result<HistoryDir, HistoryError> {
        let file = dir.join(HISTORY_FILE);
        if !file.is_file() {
            return Err(HistoryError::NotAHistory {
                path: dir.to_path_buf(),
            });
        }
        let text = std::fs::read_to_string(&file).map_err(io(&file))?;
        let bad = |reason: String| HistoryError::BadHistoryFile {
            path: file.clone(),
            reason,
        };
        let v: serde_json::Value = serde_json::from_str(&text).map_err(|e| bad(e.to_string()))?;
        let roll = v["roll"]
            .as_str()
            .ok_or_else(|| bad("no \"roll\"".into()))?;
        let roll = Roll::from_description(roll).map_err(|e| bad(e.to_string()))?;
        Ok(HistoryDir {
            dir: dir.to_path_buf(),
            roll,
        })
    }

    /// Opens the history at `dir`, creating it with `roll` when it does not exist. A `roll` that differs from an
    /// existing history's is kept from now on (the periods recorded so far keep their journals).
    pub fn create_or_open(dir: &Path, roll: Option<&Roll>) -> Result<HistoryDir, HistoryError> {
        if Self::is_history(dir) {
            let mut h = Self::open(dir)?;
            if let Some(roll) = roll.filter(|r| **r != h.roll) {
                tracing::info!(history = %dir.display(), "the history rolls {roll} from now on (was {})", h.roll);
                h.roll = roll.clone();
                h.store()?;
            }
            return Ok(h);
        }
        if dir.is_file() || crate::catalog::holds_journal(dir) {
            return Err(HistoryError::IsAJournal {
                path: dir.to_path_buf(),
            });
        }
        let roll = roll.ok_or_else(|| HistoryError::NoRoll {
            path: dir.to_path_buf(),
        })?;
        std::fs::create_dir_all(dir).map_err(io(dir))?;
        let h = HistoryDir {
            dir: dir.to_path_buf(),
            roll: roll.clone(),
        };
        h.store()?;
        Ok(h)
    }

    /// Writes `tickbox-history.json` (to a temporary name, then renamed over, so a reader never sees half).
    fn store(&self) -> Result<(), HistoryError> {
        let file = self.dir.join(HISTORY_FILE);
        let tmp = self.dir.join(format!(".{HISTORY_FILE}.tmp"));
        let text = serde_json::json!({ "roll": self.roll.to_string() }).to_string();
        std::fs::write(&tmp, text + "\n").map_err(io(&tmp))?;
        std::fs::rename(&tmp, &file).map_err(io(&file))
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.dir
    }

    /// How it rolls.
    pub fn roll(&self) -> &Roll {
        &self.roll
    }

    /// Its journals, oldest first (by first sequence). Entries that are not journals (summaries, leases, the
    /// roll file, temporaries) are passed over; a journal that cannot be opened is an error naming it.
    pub fn journals(&self) -> Result<Vec<HistoryJournal>, HistoryError> {
        let mut out = Vec::new();
        for entry in std::fs::read_dir(&self.dir).map_err(io(&self.dir))? {
            let entry = entry.map_err(io(&self.dir))?;
            let name = entry.file_name().to_string_lossy().into_owned();
            let path = entry.path();
            if !crate::catalog::is_journal_name(&name) || !crate::catalog::holds_journal(&path) {
                continue;
            }
            // A closed journal's cached card knows its first sequence (while its files are unchanged): no need to
            // open it.
            let cached = crate::catalog::JournalCard::cached(&path)
                .filter(|c| !c.open && c.stamp == crate::catalog::stamp_of(&path))
                .and_then(|c| c.first_seq);
            if let Some(first_seq) = cached {
                out.push(HistoryJournal {
                    name,
                    path,
                    first_seq,
                });
                continue;
            }
            let first_seq = match Reader::open(&path) {
                Ok(r) => r.header().base_seq,
                // A journal whose every header is damaged still has a place: after the others, by name.
                Err(e) if e.is_damaged_header() => u64::MAX,
                Err(source) => return Err(HistoryError::Journal { path, source }),
            };
            out.push(HistoryJournal {
                name,
                path,
                first_seq,
            });
        }
        out.sort_by(|a, b| (a.first_seq, &a.name).cmp(&(b.first_seq, &b.name)));
        Ok(out)
    }

    /// A path for a new journal of `period` that no journal has: the period's name, else with `~001`, `~002`, ...
    fn new_journal_path(&self, period: &Period) -> PathBuf {
        let plain = self.dir.join(&period.name);
        if !plain.exists() {
            return plain;
        }
        (1u32..)
            .map(|n| self.dir.join(format!("{}~{n:03}", period.name)))
            .find(|p| !p.exists())
            .unwrap_or(plain)
    }
}

/// The journal sequence a journal's writer would give next (its end).
fn end_seq(path: &Path) -> Result<u64, HistoryError> {
    let journal = |source| HistoryError::Journal {
        path: path.to_path_buf(),
        source,
    };
    let mut r = Reader::open(path).map_err(journal)?;
    r.seek_end().map_err(journal)?;
    Ok(r.end_seq())
}

/// The recorder's ledger stored in a journal, if any.
fn ledger_of(path: &Path) -> Option<Ledger> {
    let meta = crate::journal_ext::read_app_meta(path).ok()?;
    (!meta.is_empty())
        .then(|| Ledger::decode(&meta).ok())
        .flatten()
}

/// A journal a [`HistoryWriter`] closed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Closed {
    /// The journal.
    pub path: PathBuf,
    /// A roll closed it (its period is over: it is never written again); else the recording ended in it, and
    /// the next recording of the same period may append to it.
    pub rolled: bool,
}

/// Whether the last segment of the archive at `path` is compressed (a writer cannot append to it).
fn ends_compressed(path: &Path) -> bool {
    let Some((_, last)) = tickbox_journal::list_segments(path)
        .ok()
        .and_then(|s| s.into_iter().last())
    else {
        return false;
    };
    crate::catalog::is_compressed(&last)
}

/// The writing side of a history: the current period's journal, and the roll to the next.
pub struct HistoryWriter {
    history: HistoryDir,
    options: WriterOptions,
    writer: Writer,
    period: Period,
    /// Journals this run created (what a run that recorded nothing removes again).
    created: Vec<PathBuf>,
    /// Journals closed, handed on (for their card, compression, retention).
    closed: Option<mpsc::Sender<Closed>>,
    rolls: u64,
}

impl HistoryWriter {
    /// Opens the history at `dir` (created with `roll` if missing) for a recording starting at `now_ns`: the last
    /// journal goes on when `now_ns` is still in its period (a size roll always starts a new journal), else a new
    /// journal starts, continuing the last one's sequence. Returns the writer and, for a new journal, the ledger
    /// of the journal before it (where each publisher was), for [`Recorder::new_after`].
    pub fn open(
        dir: &Path,
        roll: Option<&Roll>,
        options: &WriterOptions,
        now_ns: u64,
    ) -> Result<(HistoryWriter, Option<Ledger>), RecorderError> {
        let history = HistoryDir::create_or_open(dir, roll)?;
        let journals = history.journals()?;
        let period = history.roll().period_of(now_ns);
        // A journal compressed since (`journal compress`) is closed for good: the period goes on in a new one.
        let continue_last = journals.last().filter(|last| {
            !matches!(history.roll(), Roll::Size(_))
                && last.name == period.name
                && !ends_compressed(&last.path)
        });
        let (path, first_seq, previous, created) = match (continue_last, journals.last()) {
            (Some(last), _) => (last.path.clone(), 1, None, false),
            (None, Some(last)) => (
                history.new_journal_path(&period),
                end_seq(&last.path)?,
                ledger_of(&last.path),
                true,
            ),
            (None, None) => (history.new_journal_path(&period), 1, None, true),
        };
        let opts = options.clone().first_seq(first_seq);
        let writer = Writer::open(&path, &opts).map_err(|source| RecorderError::Open {
            path: path.clone(),
            source,
        })?;
        tracing::info!(history = %dir.display(), journal = %path.display(), roll = %history.roll(), "{} journal of the history", if created { "new" } else { "continuing the" });
        Ok((
            HistoryWriter {
                history,
                options: options.clone(),
                writer,
                period,
                created: if created { vec![path] } else { Vec::new() },
                closed: None,
                rolls: 0,
            },
            previous,
        ))
    }

    /// Hands every journal a roll closes to `tx`.
    pub fn on_closed(&mut self, tx: mpsc::Sender<Closed>) {
        self.closed = Some(tx);
    }

    /// The history.
    pub fn history(&self) -> &HistoryDir {
        &self.history
    }

    /// The journal being written.
    pub fn current(&self) -> &Path {
        self.writer.path()
    }

    /// The period being written.
    pub fn period(&self) -> &Period {
        &self.period
    }

    /// Rolls so far.
    pub fn rolls(&self) -> u64 {
        self.rolls
    }

    /// Journals this run created.
    pub fn created(&self) -> &[PathBuf] {
        &self.created
    }

    /// The current journal's writer, to look at.
    pub fn current_writer(&self) -> &Writer {
        &self.writer
    }

    /// The current journal's writer.
    pub fn writer_mut(&mut self) -> &mut Writer {
        &mut self.writer
    }

    /// Closes the current journal; returns its path.
    pub fn close(self) -> Result<PathBuf, JournalError> {
        let path = self.writer.path().to_path_buf();
        self.writer.close()?;
        if let Some(tx) = &self.closed {
            let _ = tx.send(Closed {
                path: path.clone(),
                rolled: false,
            });
        }
        Ok(path)
    }
}

impl Journals for HistoryWriter {
    fn writer(&mut self) -> &mut Writer {
        &mut self.writer
    }

    fn roll_check(&self) -> RollCheck {
        RollCheck {
            before_ns: self.period.end_ns,
            max_bytes: self.history.roll().size(),
        }
    }

    fn roll(&mut self, recorder: &mut Recorder, capture_ns: u64) -> Result<(), RecorderError> {
        let period = self.history.roll().period_of(capture_ns);
        let path = self.history.new_journal_path(&period);
        let opts = self.options.clone().first_seq(self.writer.next_seq());
        let next = Writer::open(&path, &opts).map_err(|source| RecorderError::Open {
            path: path.clone(),
            source,
        })?;
        let old = std::mem::replace(&mut self.writer, next);
        recorder.continue_into(&mut self.writer)?;
        let old_path = old.path().to_path_buf();
        old.close()?;
        tracing::info!(from = %old_path.display(), to = %path.display(), first_seq = self.writer.next_seq(), "history rolled to a new journal");
        self.period = period;
        self.created.push(path);
        self.rolls += 1;
        if let Some(tx) = &self.closed {
            let _ = tx.send(Closed {
                path: old_path,
                rolled: true,
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tickbox_wire::{encode_to_vec, Header, Kind, Quote};

    const DAY: u64 = 86_400_000_000_000;
    /// 2026-11-24T00:00:00Z.
    const T0: u64 = 1_795_478_400_000_000_000;

    fn quote(publisher: u32, seq: u64) -> Vec<u8> {
        encode_to_vec(
            "Q.XNAS.AAPL",
            &Header::live(Kind::Quote, publisher, seq, 0),
            &Quote::default().into(),
        )
        .unwrap()
    }

    /// Records `seqs` of publisher 7, each at its capture time, rolling where the history says.
    fn record(h: &mut HistoryWriter, rec: &mut Recorder, frames: &[(u64, u64)]) {
        for &(seq, at) in frames {
            if h.roll_check().due(at, rec.journal_bytes()) {
                h.roll(rec, at).unwrap();
            }
            let mut batch = h.writer().batch();
            rec.on_frame(&mut batch, at, &quote(7, seq)).unwrap();
            batch.commit().unwrap();
            rec.after_commit(h.writer()).unwrap();
        }
    }

    #[test]
    fn a_daily_history_rolls_at_midnight_continuing_every_sequence() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("hist");
        let roll = Roll::parse("daily", None, None).unwrap();
        let opts = WriterOptions::archive(1 << 20);
        let (mut h, previous) = HistoryWriter::open(&path, Some(&roll), &opts, T0).unwrap();
        assert!(previous.is_none());
        let mut rec = Recorder::new_after(h.writer(), None).unwrap();
        // Three days, with a loss (sequence 5) across the second midnight: a test clock of capture times.
        let frames = [
            (1, T0 + 1),
            (2, T0 + DAY - 1),
            (3, T0 + DAY),
            (4, T0 + 2 * DAY - 1),
            (6, T0 + 2 * DAY + 5),
        ];
        record(&mut h, &mut rec, &frames);
        assert_eq!(h.rolls(), 2);
        h.close().unwrap();
        let journals = HistoryDir::open(&path).unwrap().journals().unwrap();
        let names: Vec<&str> = journals.iter().map(|j| j.name.as_str()).collect();
        assert_eq!(names, ["2026-11-24", "2026-11-25", "2026-11-26"]);
        // The journal sequence continues: data, data | data, data | gap notice, data.
        let firsts: Vec<u64> = journals.iter().map(|j| j.first_seq).collect();
        assert_eq!(firsts, [1, 3, 5]);
        // Each journal's ledger counts its own records; the loss across the roll is a gap in the third.
        let ledgers: Vec<Ledger> = journals
            .iter()
            .map(|j| ledger_of(&j.path).unwrap())
            .collect();
        let row = |l: &Ledger| {
            let r = l.row(7).unwrap();
            (r.recorded, r.missing, r.last_sequence)
        };
        assert_eq!(row(&ledgers[0]), (2, 0, 2));
        assert_eq!(row(&ledgers[1]), (2, 0, 4));
        assert_eq!(row(&ledgers[2]), (1, 1, 6));
    }

    #[test]
    fn a_restart_continues_the_period_or_starts_the_next_after_the_last() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("hist");
        let roll = Roll::parse("daily", None, None).unwrap();
        let opts = WriterOptions::archive(1 << 20);
        let (mut h, _) = HistoryWriter::open(&path, Some(&roll), &opts, T0).unwrap();
        let mut rec = Recorder::new_after(h.writer(), None).unwrap();
        record(&mut h, &mut rec, &[(1, T0 + 1), (2, T0 + 2)]);
        h.close().unwrap();
        // Later the same day, no --roll given: the history's own roll, the same journal.
        let (mut h, previous) = HistoryWriter::open(&path, None, &opts, T0 + 10).unwrap();
        assert!(previous.is_none());
        assert_eq!(h.writer().next_seq(), 3);
        assert!(h.created().is_empty());
        h.close().unwrap();
        // The next day: a new journal after the last, seeded with where publisher 7 was, so the loss of 3 while
        // no recorder ran is noticed.
        let (mut h, previous) = HistoryWriter::open(&path, None, &opts, T0 + DAY + 1).unwrap();
        assert_eq!(h.writer().next_seq(), 3);
        let mut rec = Recorder::new_after(h.writer(), previous.as_ref()).unwrap();
        record(&mut h, &mut rec, &[(4, T0 + DAY + 2)]);
        assert_eq!(rec.stats().missing, 1);
        h.close().unwrap();
        assert_eq!(
            HistoryDir::open(&path).unwrap().journals().unwrap().len(),
            2
        );
    }

    #[test]
    fn a_size_history_rolls_when_full_and_a_journal_is_no_history() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("hist");
        let roll = Roll::parse("64KiB", None, None).unwrap();
        let opts = WriterOptions::archive(1 << 20);
        let (mut h, _) = HistoryWriter::open(&path, Some(&roll), &opts, T0).unwrap();
        let mut rec = Recorder::new_after(h.writer(), None).unwrap();
        let frames: Vec<(u64, u64)> = (1..=3000).map(|i| (i, T0 + i)).collect();
        record(&mut h, &mut rec, &frames);
        h.close().unwrap();
        let journals = HistoryDir::open(&path).unwrap().journals().unwrap();
        assert!(journals.len() >= 3, "{journals:?}");
        // Every record once, in order, across the journals.
        let mut seqs = Vec::new();
        for j in &journals {
            let mut r = Reader::open(&j.path).unwrap();
            while let Some(rec) = r.next().unwrap() {
                seqs.push(rec.seq);
            }
        }
        assert_eq!(seqs, (1..=3000).collect::<Vec<u64>>());
        // An archive journal cannot become a history.
        let plain = dir.path().join("plain");
        drop(Writer::open(&plain, &opts).unwrap());
        let err = HistoryWriter::open(&plain, Some(&roll), &opts, T0)
            .err()
            .unwrap();
        assert!(err.to_string().contains("is a journal"), "{err}");
    }
}
