//! [`HistoryReader`]: reads a journal, or a history of journals as one (see `history_dir`), with the journal
//! [`Reader`]'s API. Every reader of this crate (replay, `--local`, the history service, selection, progress)
//! opens journals through it, so each of them takes a history wherever it takes a journal.
//!
//! Journals are read in order of their first sequence; the sequence continues from one to the next. A seek by
//! sequence or by capture time picks the journal first (by its first sequence, or its first record's capture
//! time: a few opens, never a scan) and then seeks inside it through the journal's own index, so seeking to the
//! last hour of a long history costs about what reading an hour does. Reading on at the end of a journal moves to
//! the next one once it exists (a recorder rolling while the reader tails the history is followed), and the
//! reader holds a read lease (see `lease`) on the journal it is in, so retention leaves it alone.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use tickbox_journal::{HeaderInfo, JournalError, Reader, Record, Skipped};

use crate::error::RecorderError;
use crate::history_dir::{HistoryDir, HistoryJournal};
use crate::input::{Input, Position, ReplayInput};
use crate::lease::Lease;

/// A journal or a history, read as one journal.
pub struct HistoryReader {
    path: PathBuf,
    /// The history's journals, oldest first (one entry for a plain journal).
    journals: Vec<HistoryJournal>,
    history: Option<HistoryDir>,
    /// The journal being read: its index in `journals`, its reader and lease.
    index: usize,
    reader: Reader,
    lease: Option<Lease>,
    /// The next journal, opened by the `next` that reached the end of the current one (and returned its first
    /// record); it becomes current at the following call.
    upcoming: Option<(usize, Reader, Option<Lease>)>,
    /// The last `next` found nothing more: the next call looks for journals a roll added.
    at_end: bool,
    /// First capture time of journals looked at by a time seek.
    first_capture: HashMap<usize, Option<u64>>,
    /// The last journal's end when the history was last looked at (0 for a plain journal).
    history_end: u64,
    /// The entries of the history directory that may be journals, as of the last look.
    names: Vec<String>,
}

/// The entries of a history directory that may be journals, sorted.
fn names_in(dir: &Path) -> Result<Vec<String>, JournalError> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .map_err(|source| JournalError::Io {
            path: dir.to_path_buf(),
            source,
        })?
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| crate::catalog::is_journal_name(n))
        .collect();
    names.sort();
    Ok(names)
}

/// The end sequence of the journal at `path` (0 when it cannot be read).
fn end_of(path: &Path) -> u64 {
    Reader::open(path)
        .and_then(|mut r| r.seek_end().map(|()| r.end_seq()))
        .unwrap_or(0)
}

impl std::fmt::Debug for HistoryReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HistoryReader")
            .field("path", &self.path)
            .field("journals", &self.journals.len())
            .field("index", &self.index)
            .finish()
    }
}

fn journal_err(path: &Path) -> impl Fn(HistoryErrorSource) -> JournalError + '_ {
    move |e| match e {
        HistoryErrorSource::Journal(e) => e,
        HistoryErrorSource::Other(reason) => JournalError::NotAJournal {
            path: path.to_path_buf(),
            reason,
        },
    }
}

/// What opening a history can fail with, as the journal's own error type carries it.
enum HistoryErrorSource {
    Journal(JournalError),
    Other(String),
}

impl From<crate::error::HistoryError> for HistoryErrorSource {
    fn from(e: crate::error::HistoryError) -> Self {
        match e {
            crate::error::HistoryError::Journal { source, .. } => {
                HistoryErrorSource::Journal(source)
            }
            other => HistoryErrorSource::Other(other.to_string()),
        }
    }
}

/// Opens journal `j` for reading with a read lease (`None` from a history whose retention is deleting it).
fn open_leased(
    j: &HistoryJournal,
    lease: bool,
) -> Result<Option<(Reader, Option<Lease>)>, JournalError> {
    let lease = if lease {
        match Lease::read(&j.path) {
            Ok(Some(l)) => Some(l),
            Ok(None) => return Ok(None),
            Err(source) => {
                return Err(JournalError::Io {
                    path: crate::lease::lease_path(&j.path),
                    source,
                })
            }
        }
    } else {
        None
    };
    match Reader::open(&j.path) {
        Ok(r) => Ok(Some((r, lease))),
        // Deleted between the listing and the open (retention): gone, like one being deleted.
        Err(JournalError::NotAJournal { .. }) if lease.is_some() && !j.path.exists() => Ok(None),
        Err(e) => Err(e),
    }
}

impl HistoryReader {
    /// Opens a journal (ring file or archive directory) or a history directory, positioned at its oldest record.
    pub fn open(path: impl AsRef<Path>) -> Result<HistoryReader, JournalError> {
        let path = path.as_ref();
        if !HistoryDir::is_history(path) {
            let reader = Reader::open(path)?;
            return Ok(HistoryReader {
                path: path.to_path_buf(),
                journals: vec![HistoryJournal {
                    name: String::new(),
                    path: path.to_path_buf(),
                    first_seq: reader.header().base_seq,
                }],
                history: None,
                index: 0,
                reader,
                lease: None,
                upcoming: None,
                at_end: false,
                first_capture: HashMap::new(),
                history_end: 0,
                names: Vec::new(),
            });
        }
        let err = journal_err(path);
        let history = HistoryDir::open(path).map_err(|e| err(e.into()))?;
        // Listed before the journals are, so an entry added meanwhile is seen by the next look.
        let names = names_in(path)?;
        let journals = history.journals().map_err(|e| err(e.into()))?;
        let mut index = 0;
        let opened = loop {
            let Some(j) = journals.get(index) else {
                return Err(JournalError::NotAJournal {
                    path: path.to_path_buf(),
                    reason: "the history holds no journal yet".into(),
                });
            };
            if let Some(opened) = open_leased(j, true)? {
                break opened;
            }
            index += 1;
        };
        let history_end = journals.last().map_or(0, |j| end_of(&j.path));
        Ok(HistoryReader {
            path: path.to_path_buf(),
            journals,
            history: Some(history),
            index,
            reader: opened.0,
            lease: opened.1,
            upcoming: None,
            at_end: false,
            first_capture: HashMap::new(),
            history_end,
            names,
        })
    }

    /// Whether this reads a history (rather than one journal).
    pub fn is_history(&self) -> bool {
        self.history.is_some()
    }

    /// The path it was opened with.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The journals read, oldest first (one for a plain journal), as of the last look.
    pub fn journals(&self) -> &[HistoryJournal] {
        &self.journals
    }

    /// The journal being read.
    pub fn current_journal(&self) -> &Path {
        let i = self.upcoming.as_ref().map_or(self.index, |(i, _, _)| *i);
        &self.journals[i].path
    }

    fn promote(&mut self) {
        if let Some((i, reader, lease)) = self.upcoming.take() {
            self.index = i;
            self.reader = reader;
            self.lease = lease;
        }
    }

    fn cur(&self) -> &Reader {
        self.upcoming.as_ref().map_or(&self.reader, |(_, r, _)| r)
    }

    /// Looks again for the history's journals (a roll adds one). A tailing reader calls it at every poll, so it
    /// costs one directory listing unless an entry came or went since the last look.
    fn refresh(&mut self) -> Result<(), JournalError> {
        let Some(h) = &self.history else {
            return Ok(());
        };
        let err = journal_err(&self.path);
        let names = names_in(h.path())?;
        if names == self.names {
            return Ok(());
        }
        self.names = names;
        let journals = h.journals().map_err(|e| err(e.into()))?;
        // Keep the current journal's place: it is still there (its lease keeps retention off it).
        let current = &self.journals[self.index].path;
        if let Some(i) = journals.iter().position(|j| &j.path == current) {
            self.index = i;
            self.history_end = journals.last().map_or(0, |j| end_of(&j.path));
            self.journals = journals;
            self.first_capture.clear();
        }
        Ok(())
    }

    /// Moves to journal `i` (or the first after it that can be opened), at its oldest record.
    fn go_to(&mut self, mut i: usize) -> Result<(), JournalError> {
        self.upcoming = None;
        self.at_end = false;
        if i == self.index {
            self.reader.seek_oldest();
            return Ok(());
        }
        while let Some(j) = self.journals.get(i) {
            if let Some((reader, lease)) = open_leased(j, self.history.is_some())? {
                self.index = i;
                self.reader = reader;
                self.lease = lease;
                return Ok(());
            }
            i += 1;
        }
        Ok(())
    }

    /// Header of the file being read.
    pub fn header(&self) -> &HeaderInfo {
        self.cur().header()
    }

    /// Whether a writer has the journal being read open.
    pub fn writer_active(&self) -> bool {
        self.cur().writer_active()
    }

    /// Sequence the next `next()` returns, when known.
    pub fn position_seq(&self) -> Option<u64> {
        self.cur().position_seq()
    }

    /// Sequence the writer gives its next record: of the whole history (its last journal's, as of the last
    /// look, or live while that journal is the one being read), or of the journal.
    pub fn end_seq(&self) -> u64 {
        self.cur().end_seq().max(self.history_end)
    }

    /// Turns checksum verification on or off for every journal read from now on.
    pub fn set_verify(&mut self, verify: bool) {
        self.reader.set_verify(verify);
        if let Some((_, r, _)) = &mut self.upcoming {
            r.set_verify(verify);
        }
    }

    /// Moves to the oldest record of the first journal.
    pub fn seek_oldest(&mut self) -> Result<(), JournalError> {
        self.go_to(0)
    }

    /// Moves past the last published record of the last journal.
    pub fn seek_end(&mut self) -> Result<(), JournalError> {
        self.refresh()?;
        self.go_to(self.journals.len().saturating_sub(1))?;
        self.reader.seek_end()
    }

    /// Positions at the first record with `seq >= target`: the journal whose sequences hold it, then its index.
    pub fn seek_seq(&mut self, target: u64) -> Result<(), JournalError> {
        self.refresh()?;
        let i = self
            .journals
            .iter()
            .rposition(|j| j.first_seq <= target)
            .unwrap_or(0);
        self.go_to(i)?;
        self.reader.seek_seq(target)
    }

    /// Positions at the first record with `capture_time_ns >= target_ns`: the last journal whose first record
    /// is not after it (by binary search over the journals' first records), then its index.
    pub fn seek_time(&mut self, target_ns: u64) -> Result<(), JournalError> {
        self.refresh()?;
        let (mut lo, mut hi) = (0usize, self.journals.len());
        // Invariant: journals before `lo` start at or before the target; journals from `hi` start after it.
        while lo < hi {
            let mid = (lo + hi) / 2;
            match self.first_capture_of(mid)? {
                Some(t) if t <= target_ns => lo = mid + 1,
                // An empty journal sorts as if it started after everything before it.
                Some(_) => hi = mid,
                None => lo = mid + 1,
            }
        }
        self.go_to(lo.saturating_sub(1))?;
        self.reader.seek_time(target_ns)
    }

    /// The capture time of journal `i`'s first record (`None`: it holds none), cached.
    fn first_capture_of(&mut self, i: usize) -> Result<Option<u64>, JournalError> {
        if let Some(t) = self.first_capture.get(&i) {
            return Ok(*t);
        }
        let path = &self.journals[i].path;
        // A closed journal's cached card has it (while its files are unchanged); else its first record says.
        let cached = crate::catalog::JournalCard::cached(path)
            .filter(|c| !c.open && c.stamp == crate::catalog::stamp_of(path))
            .map(|c| c.first_capture_ns);
        let t = match cached {
            Some(t) => t,
            None => first_capture_ns(path)?,
        };
        self.first_capture.insert(i, t);
        Ok(t)
    }

    /// The next record; `Ok(None)` when caught up with the writer of the last journal. At the end of any other
    /// journal, reading goes on in the next.
    #[allow(clippy::should_implement_trait)]
    pub fn next(&mut self) -> Result<Option<Record<'_>>, JournalError> {
        self.promote();
        if self.at_end {
            self.refresh()?;
        }
        // A later journal is only made once every record of this one is committed: looked at before reading,
        // an end of this one found after that is its real end.
        let later = self.index + 1 < self.journals.len();
        // The journal's answer is the history's, returned as it comes, in the last (or only) journal and wherever
        // an earlier one certainly holds more: matched and moved on below, the record was copied out of the slot
        // the journal reader had just stored it into, and that copy's loads waited for the stores (a tenth of
        // `replay --local`'s time). An earlier journal is closed (a later one is only made once all its records
        // are committed), so below the end of the part being read it answers a record or an error, never "caught
        // up". At that end, the match below goes on to the next part or journal.
        let holds_more = || {
            self.reader
                .position_seq()
                .is_some_and(|at| at < self.reader.end_seq())
        };
        if !later || holds_more() {
            let next = self.reader.next();
            self.at_end = matches!(next, Ok(None));
            debug_assert!(
                !(later && self.at_end),
                "an earlier journal caught up short of its end"
            );
            return next;
        }
        match self.reader.next() {
            Ok(None) if later => {}
            Ok(None) => {
                self.at_end = true;
                return Ok(None);
            }
            other => {
                self.at_end = false;
                return other;
            }
        }
        self.at_end = false;
        let mut i = self.index + 1;
        while let Some(j) = self.journals.get(i) {
            let last = i + 1 == self.journals.len();
            if let Some((reader, lease)) = open_leased(j, self.history.is_some())? {
                // A journal that holds nothing (made, then never written) is passed, unless it is the last.
                // An archive's first segment holds records whenever the archive does.
                if last || reader.header().base_seq < reader.end_seq() {
                    self.upcoming = Some((i, reader, lease));
                    break;
                }
            }
            i += 1;
        }
        match &mut self.upcoming {
            Some((_, reader, _)) => reader.next(),
            None => Ok(None),
        }
    }

    /// After [`HistoryReader::next`] returned [`JournalError::CorruptRecord`]: moves to the next record that
    /// verifies (see [`Reader::skip_damage`]); a damaged end of a journal goes on in the next.
    pub fn skip_damage(&mut self) -> Result<Skipped, JournalError> {
        self.promote();
        self.reader.skip_damage()
    }
}

impl ReplayInput for HistoryReader {
    fn seek(&mut self, from: Option<Position>) -> Result<(), RecorderError> {
        match from {
            Some(Position::Seq(s)) => self.seek_seq(s)?,
            Some(Position::Time(t)) => self.seek_time(t)?,
            None => self.seek_oldest()?,
        }
        Ok(())
    }

    fn next_input(&mut self) -> Result<Input<'_>, RecorderError> {
        Input::of(self.next())
    }

    fn skip_damage(&mut self) -> Result<Skipped, RecorderError> {
        Ok(HistoryReader::skip_damage(self)?)
    }

    fn end_seq(&self) -> u64 {
        HistoryReader::end_seq(self)
    }

    fn position_seq(&self) -> Option<u64> {
        HistoryReader::position_seq(self)
    }

    fn recent_publishers(
        &mut self,
        before: u64,
        window: u64,
    ) -> Result<crate::input::PublisherPositions, RecorderError> {
        // A reader of its own, so this one stays where the damage left it.
        let mut r = HistoryReader::open(&self.path)?;
        r.seek_seq(before.saturating_sub(window).max(1))?;
        let mut p = crate::input::PublisherPositions::default();
        loop {
            match r.next() {
                Ok(Some(rec)) if rec.seq < before => p.note(rec.payload),
                Ok(_) => break,
                // The look back meets damage of its own (or a lap): what it noted so far is what it knows.
                Err(_) => break,
            }
        }
        Ok(p)
    }
}

/// Capture time of a journal's oldest record (the origin of `+DURATION` times), or `None` for an empty journal.
pub fn first_capture_ns(path: &Path) -> Result<Option<u64>, JournalError> {
    let mut r = HistoryReader::open(path)?;
    Ok(r.next()?.map(|rec| rec.capture_time_ns))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history_dir::HistoryWriter;
    use crate::record::{Journals, Recorder};
    use crate::roll::Roll;
    use tickbox_journal::WriterOptions;
    use tickbox_wire::{encode_to_vec, Header, Kind, Quote};

    /// 2026-11-24T00:00:00Z.
    const T0: u64 = 1_795_478_400_000_000_000;

    /// A size-rolled history of `n` quotes of publisher 7, quote `i` captured at `T0 + i` ms; returns the
    /// journal count.
    fn history(path: &Path, n: u64) -> usize {
        let roll = Roll::parse("64KiB", None, None).unwrap();
        let (mut h, _) =
            HistoryWriter::open(path, Some(&roll), &WriterOptions::archive(1 << 20), T0).unwrap();
        let mut rec = Recorder::new_after(h.writer(), None).unwrap();
        append(&mut h, &mut rec, 1..=n);
        h.close().unwrap();
        HistoryDir::open(path).unwrap().journals().unwrap().len()
    }

    fn append(h: &mut HistoryWriter, rec: &mut Recorder, seqs: std::ops::RangeInclusive<u64>) {
        for i in seqs {
            let at = T0 + i * 1_000_000;
            if h.roll_check().due(at, rec.journal_bytes()) {
                h.roll(rec, at).unwrap();
            }
            let frame = encode_to_vec(
                "Q.XNAS.AAPL",
                &Header::live(Kind::Quote, 7, i, at),
                &Quote::default().into(),
            )
            .unwrap();
            let mut batch = h.writer().batch();
            rec.on_frame(&mut batch, at, &frame).unwrap();
            batch.commit().unwrap();
            rec.after_commit(h.writer()).unwrap();
        }
    }

    fn drain(r: &mut HistoryReader) -> Vec<(u64, u64)> {
        let mut out = Vec::new();
        while let Some(rec) = r.next().unwrap() {
            out.push((rec.seq, rec.capture_time_ns));
        }
        out
    }

    #[test]
    fn a_history_reads_as_one_journal_and_seeks_into_the_right_one() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("hist");
        let journals = history(&path, 3000);
        assert!(journals >= 4, "{journals} journals");
        let mut r = HistoryReader::open(&path).unwrap();
        assert!(r.is_history());
        let all = drain(&mut r);
        assert_eq!(
            all.iter().map(|(s, _)| *s).collect::<Vec<_>>(),
            (1..=3000).collect::<Vec<_>>()
        );
        for target in [1, 2, 700, 1500, 2999, 3000] {
            r.seek_seq(target).unwrap();
            assert_eq!(r.next().unwrap().unwrap().seq, target, "seek_seq {target}");
            r.seek_time(T0 + target * 1_000_000).unwrap();
            assert_eq!(r.next().unwrap().unwrap().seq, target, "seek_time {target}");
            // Between two records: the later one.
            r.seek_time(T0 + target * 1_000_000 - 1).unwrap();
            assert_eq!(
                r.next().unwrap().unwrap().seq,
                target,
                "seek_time before {target}"
            );
        }
        // Before everything: the first; after everything: nothing.
        r.seek_time(0).unwrap();
        assert_eq!(r.next().unwrap().unwrap().seq, 1);
        r.seek_time(u64::MAX).unwrap();
        assert!(r.next().unwrap().is_none());
        r.seek_end().unwrap();
        assert!(r.next().unwrap().is_none());
        // A plain journal reads through the same reader.
        let plain = r.journals()[0].path.clone();
        let mut p = HistoryReader::open(&plain).unwrap();
        assert!(!p.is_history());
        assert_eq!(drain(&mut p).first().map(|(s, _)| *s), Some(1));
    }

    #[test]
    fn a_reader_tailing_a_history_follows_the_recorder_across_rolls() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("hist");
        let roll = Roll::parse("64KiB", None, None).unwrap();
        let (mut h, _) =
            HistoryWriter::open(&path, Some(&roll), &WriterOptions::archive(1 << 20), T0).unwrap();
        let mut rec = Recorder::new_after(h.writer(), None).unwrap();
        append(&mut h, &mut rec, 1..=10);
        let mut r = HistoryReader::open(&path).unwrap();
        let mut seen: Vec<u64> = drain(&mut r).into_iter().map(|(s, _)| s).collect();
        // The recorder rolls twice or more while the reader waits at the end.
        append(&mut h, &mut rec, 11..=2000);
        assert!(h.rolls() >= 2);
        seen.extend(drain(&mut r).into_iter().map(|(s, _)| s));
        append(&mut h, &mut rec, 2001..=2100);
        seen.extend(drain(&mut r).into_iter().map(|(s, _)| s));
        h.close().unwrap();
        assert_eq!(seen, (1..=2100).collect::<Vec<_>>());
    }

    #[test]
    fn the_journal_being_read_is_leased() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("hist");
        history(&path, 2000);
        let mut r = HistoryReader::open(&path).unwrap();
        let first = r.current_journal().to_path_buf();
        assert!(Lease::delete(&first).unwrap().is_none(), "being read");
        r.seek_end().unwrap();
        let last = r.current_journal().to_path_buf();
        assert_ne!(first, last);
        assert!(Lease::delete(&first).unwrap().is_some(), "no longer read");
        assert!(Lease::delete(&last).unwrap().is_none(), "being read");
    }
}
