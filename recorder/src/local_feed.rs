//! The journal side of `tickbox replay --local` (a backtest): every record's frame and capture time handed, in
//! journal order, to a sink (the Black Box's shard logic, in `tickbox_subscriber::replay_local`), with what could
//! not be read counted. No socket and no pacing: the sink takes records as fast as its workers go.
//!
//! Damage never ends a backtest: as the socket replay does, a stretch of records that do not verify is passed
//! over to the next record that does (counted: ranges, records, bytes), and each publisher whose sequence the
//! damage took gets a gap notice before its next record, so the Black Box counts those sequences as the
//! journal's holes (a recorded gap) rather than its own loss. Every intact record is processed.
//!
//! Where each publisher was before the damage is found when the damage is met, not kept record by record (a
//! header decode per record would cost the backtest's hot path what damage almost never needs): the input looks
//! back over at most [`LOOK_BACK`] records before the damage ([`ReplayInput::recent_publishers`]), and the records
//! after it are decoded until each of those publishers has been seen once, or [`LOOK_BACK`] records have passed.
//! A publisher silent for that long on either side gets no notice (the Black Box counts its jump as a gap).

use std::path::{Path, PathBuf};

use crate::history_reader::HistoryReader;

use crate::error::RecorderError;
use crate::input::{Input, PublisherPositions, ReplayInput};

/// What a [`LocalFeed`] read.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LocalFeedReport {
    /// Records handed to the sink.
    pub records: u64,
    /// Times a ring being written overtook the reader (reading went on from the oldest record).
    pub lapped: u64,
    /// Why reading stopped before the end, if it did.
    pub read_error: Option<String>,
    /// Damaged stretches passed over (records that do not verify, archive segments whose header is damaged).
    pub damaged_ranges: u64,
    /// Records in them (their sequences).
    pub corrupt_records: u64,
    /// Bytes in them.
    pub corrupt_bytes: u64,
    /// Gap notices handed to the sink for publisher sequences the damage took.
    pub damage_gap_notices: u64,
}

/// Records looked at on each side of a damaged stretch to name what it took from each publisher.
pub const LOOK_BACK: u64 = 1 << 20;

/// A journal opened for a local replay.
pub struct LocalFeed {
    path: PathBuf,
    input: FeedInput,
}

/// What a local replay reads: one journal or history straight from its reader (the backtest's hot path: no
/// dynamic call and no [`Input`] per record), or any [`ReplayInput`] (several recordings merged).
// One per local replay, never moved while it runs: the size of a variant does not matter.
#[allow(clippy::large_enum_variant)]
enum FeedInput {
    One(HistoryReader),
    Any(Box<dyn ReplayInput>),
}

/// One step of a [`FeedInput`].
enum Step<'a> {
    Record(tickbox_journal::Record<'a>),
    End,
    Lapped,
    Damaged(String),
}

impl FeedInput {
    fn input(&mut self) -> &mut dyn ReplayInput {
        match self {
            FeedInput::One(r) => r,
            FeedInput::Any(i) => i.as_mut(),
        }
    }

    #[inline]
    fn step(&mut self) -> Result<Step<'_>, RecorderError> {
        match self {
            FeedInput::One(r) => match r.next() {
                Ok(Some(rec)) => Ok(Step::Record(rec)),
                Ok(None) => Ok(Step::End),
                Err(tickbox_journal::JournalError::Lapped { .. }) => Ok(Step::Lapped),
                Err(e @ tickbox_journal::JournalError::CorruptRecord { .. }) => {
                    Ok(Step::Damaged(e.to_string()))
                }
                Err(e) => Err(e.into()),
            },
            FeedInput::Any(i) => match i.next_input()? {
                Input::Record(rec) => Ok(Step::Record(rec)),
                Input::End => Ok(Step::End),
                Input::Lapped { .. } => Ok(Step::Lapped),
                Input::Damaged(e) => Ok(Step::Damaged(e.to_string())),
            },
        }
    }
}

impl LocalFeed {
    /// Opens the journal at `path` (a ring file, an archive directory or a history).
    pub fn open(path: &Path) -> Result<LocalFeed, RecorderError> {
        let reader = HistoryReader::open(path).map_err(|source| RecorderError::Open {
            path: path.to_path_buf(),
            source,
        })?;
        Ok(LocalFeed {
            path: path.to_path_buf(),
            input: FeedInput::One(reader),
        })
    }

    /// Opens several journals or histories, merged by capture time (one is read as it is).
    pub fn open_all(paths: &[PathBuf]) -> Result<LocalFeed, RecorderError> {
        if let [one] = paths {
            return Self::open(one);
        }
        let name = paths
            .iter()
            .map(|p| p.display().to_string())
            .collect::<Vec<_>>()
            .join(",");
        Ok(Self::from_input(
            Path::new(&name),
            crate::merge::open_input(paths)?,
        ))
    }

    /// A local replay of any [`ReplayInput`], named `path` in what it logs.
    pub fn from_input(path: &Path, input: Box<dyn ReplayInput>) -> LocalFeed {
        LocalFeed {
            path: path.to_path_buf(),
            input: FeedInput::Any(input),
        }
    }

    /// Hands every record to `push` (its frame and capture time) until the journal ends or `push` returns false,
    /// passing damage over (see the module documentation).
    pub fn feed(&mut self, mut push: impl FnMut(&[u8], u64) -> bool) -> LocalFeedReport {
        let mut report = LocalFeedReport::default();
        // After damage: the publishers owed a look, and how many more records may be decoded for it.
        let mut watch: Option<(PublisherPositions, u64)> = None;
        // Where the last damage ended: a look back never reads again what an earlier one read.
        let mut resumed: u64 = 0;
        if let Err(e) = self.input.input().seek(None) {
            report.read_error = Some(e.to_string());
        }
        while report.read_error.is_none() {
            match self.input.step() {
                Ok(Step::Record(rec)) => {
                    report.records += 1;
                    if let Some((publishers, budget)) = &mut watch {
                        match publishers.after_damage(rec.payload, rec.capture_time_ns) {
                            Ok(Some(notice)) => {
                                report.damage_gap_notices += 1;
                                if !push(&notice, rec.capture_time_ns) {
                                    break;
                                }
                            }
                            Ok(None) => {}
                            Err(e) => tracing::warn!("no gap notice for journal damage: {e}"),
                        }
                        *budget -= 1;
                        if *budget == 0 || !publishers.owed() {
                            watch = None;
                        }
                    }
                    if !push(rec.payload, rec.capture_time_ns) {
                        break;
                    }
                }
                Ok(Step::End) => break,
                // A ring being written may overtake the reader: count it and carry on from the oldest record.
                Ok(Step::Lapped) => report.lapped += 1,
                Ok(Step::Damaged(err)) => match self.input.input().skip_damage() {
                    Ok(skipped) => {
                        report.damaged_ranges += 1;
                        report.corrupt_records += skipped.records;
                        report.corrupt_bytes += skipped.bytes;
                        if report.damaged_ranges <= 5 {
                            tracing::warn!(
                                records = skipped.records,
                                bytes = skipped.bytes,
                                resumed_at = skipped.resumed_at,
                                "{err}; skipped to the next record that verifies"
                            );
                        }
                        let mut publishers = match skipped.first_missing {
                            Some(before) => {
                                let window = LOOK_BACK.min(before.saturating_sub(resumed));
                                self.input
                                    .input()
                                    .recent_publishers(before, window)
                                    .unwrap_or_default()
                            }
                            None => PublisherPositions::default(),
                        };
                        resumed = skipped.resumed_at.unwrap_or(resumed);
                        publishers.damaged();
                        watch = publishers.owed().then_some((publishers, LOOK_BACK));
                    }
                    Err(e) => report.read_error = Some(error_text(e)),
                },
                Err(err) => report.read_error = Some(error_text(err)),
            }
        }
        if let Some(err) = &report.read_error {
            tracing::error!("reading {} stopped early: {err}", self.path.display());
        }
        report
    }
}

/// The journal's own text for a journal error (as the reader said it), anything else as it is.
fn error_text(err: RecorderError) -> String {
    match err {
        RecorderError::Journal(e) => e.to_string(),
        e => e.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::FileExt;
    use tickbox_journal::{Writer, WriterOptions};
    use tickbox_wire::{encode_to_vec, Header, Kind, MessageRef, Quote};

    /// A journal at `path` of publishers 1 and 2 alternating, sequences 1..=100 each, with a flipped byte in the
    /// 41st record (publisher 1, sequence 21).
    fn damaged_journal(path: &Path) {
        let mut w = Writer::open(path, &WriterOptions::archive(1 << 20)).unwrap();
        for i in 1..=100u64 {
            for p in [1u32, 2] {
                let f = encode_to_vec(
                    "Q.XNAS.AAPL",
                    &Header::live(Kind::Quote, p, i, 1000 + i),
                    &Quote::default().into(),
                )
                .unwrap();
                w.append(1000 + i, &f).unwrap();
            }
        }
        w.close().unwrap();
        let seg = path.join("0000000000.tbj");
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&seg)
            .unwrap();
        let mut r = tickbox_journal::Reader::open(path).unwrap();
        r.seek_seq(41).unwrap();
        let len = r.next().unwrap().unwrap().payload.len() as u64;
        let rec_len = (24 + len).next_multiple_of(8);
        let at = 4096 + 40 * rec_len + 30;
        let mut b = [0u8];
        f.read_exact_at(&mut b, at).unwrap();
        f.write_all_at(&[b[0] ^ 0xff], at).unwrap();
    }

    fn feed_all(mut feed: LocalFeed) -> (LocalFeedReport, Vec<(Kind, u32, u64)>) {
        let mut got = Vec::new();
        let report = feed.feed(|frame, _| {
            let h = *MessageRef::decode(frame).unwrap().header();
            got.push((h.kind, h.publisher_id, h.sequence));
            true
        });
        (report, got)
    }

    #[test]
    fn damage_is_passed_over_and_each_publisher_told_what_it_took() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("j");
        damaged_journal(&path);
        let (report, got) = feed_all(LocalFeed::open(&path).unwrap());
        assert_eq!(report.read_error, None);
        assert_eq!((report.damaged_ranges, report.corrupt_records), (1, 1));
        assert_eq!(report.records, 199, "every intact record");
        assert_eq!(report.damage_gap_notices, 1);
        let notice = got.iter().position(|g| g.0 == Kind::Gap).unwrap();
        assert_eq!(got[notice], (Kind::Gap, 1, 21));
        assert_eq!(got[notice + 1], (Kind::Quote, 1, 22));
    }

    #[test]
    fn damage_in_one_of_two_merged_recordings_is_named_from_that_recording() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (dir.path().join("a"), dir.path().join("b"));
        damaged_journal(&a);
        // A second recording of publishers 5 and 6, intact.
        let mut w = Writer::open(&b, &WriterOptions::archive(1 << 20)).unwrap();
        for i in 1..=100u64 {
            for p in [5u32, 6] {
                let f = encode_to_vec(
                    "Q.XNAS.MSFT",
                    &Header::live(Kind::Quote, p, i, 1000 + i),
                    &Quote::default().into(),
                )
                .unwrap();
                w.append(1000 + i, &f).unwrap();
            }
        }
        w.close().unwrap();
        let (report, got) = feed_all(LocalFeed::open_all(&[a, b]).unwrap());
        assert_eq!(report.records, 399);
        assert_eq!(report.damage_gap_notices, 1, "{got:?}");
        let notice = got.iter().position(|g| g.0 == Kind::Gap).unwrap();
        assert_eq!(got[notice], (Kind::Gap, 1, 21));
    }

    #[test]
    fn every_record_reaches_the_sink_in_order_until_it_says_stop() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("j");
        let mut w = Writer::open(&path, &WriterOptions::archive(1 << 20)).unwrap();
        for i in 0..10u64 {
            w.append(100 + i, &i.to_le_bytes()).unwrap();
        }
        w.close().unwrap();
        let mut seen = Vec::new();
        let report = LocalFeed::open(&path).unwrap().feed(|frame, t| {
            seen.push((u64::from_le_bytes(frame.try_into().unwrap()), t));
            true
        });
        assert_eq!(report.records, 10);
        assert_eq!(report.read_error, None);
        assert_eq!(seen, (0..10).map(|i| (i, 100 + i)).collect::<Vec<_>>());
        let mut n = 0;
        let report = LocalFeed::open(&path).unwrap().feed(|_, _| {
            n += 1;
            n < 3
        });
        assert_eq!((report.records, n), (3, 3));
    }
}
