//! The journal side of `tickbox replay --local` (a backtest): every record's frame and capture time handed, in
//! journal order, to a sink (the Black Box's shard logic, in `tickbox_subscriber::replay_local`), with what could
//! not be read counted. No socket and no pacing: the sink takes records as fast as its workers go.
//!
//! Damage never ends a backtest: as the socket replay does, a stretch of records that do not verify is passed
//! over to the next record that does (counted: ranges, records, bytes), and each publisher whose sequence the
//! damage took gets a gap notice before its next record, so the Black Box counts those sequences as the
//! journal's holes (a recorded gap) rather than its own loss. Every intact record is processed.

use std::path::{Path, PathBuf};

use crate::history_reader::HistoryReader;

use tickbox_wire::{Flags, MessageRef};

use crate::error::RecorderError;
use crate::replay::{damage_notice, Input, ReplayInput};

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

/// Where each publisher is, so the sequences journal damage took from it can be named.
#[derive(Debug, Default)]
struct Publishers {
    /// (publisher, session, last sequence, damaged since).
    rows: Vec<(u32, u64, u64, bool)>,
    last_hit: usize,
}

impl Publishers {
    /// Notes `frame`'s publisher and sequence (data and gap records; heartbeats and cached values move
    /// nothing). Returns the gap notice due before it, when damage took sequences from its publisher.
    fn on_frame(&mut self, frame: &[u8], now: u64) -> Result<Option<Vec<u8>>, RecorderError> {
        let Ok(m) = MessageRef::decode(frame) else {
            return Ok(None);
        };
        let h = *m.header();
        if h.flags.contains(Flags::CACHED) || h.kind == tickbox_wire::Kind::Heartbeat {
            return Ok(None);
        }
        let i = match self.rows.get(self.last_hit) {
            Some(r) if r.0 == h.publisher_id => self.last_hit,
            _ => match self.rows.iter().position(|r| r.0 == h.publisher_id) {
                Some(i) => i,
                None if self.rows.len() < tickbox_wire::sequence::DEFAULT_MAX_PUBLISHERS => {
                    self.rows
                        .push((h.publisher_id, h.session, h.sequence, false));
                    return Ok(None);
                }
                // Bounded: past it a publisher's damage gap goes unnamed (the Black Box still counts the gap).
                None => return Ok(None),
            },
        };
        self.last_hit = i;
        let row = &mut self.rows[i];
        let notice = if row.3 && row.1 == h.session && h.sequence > row.2 + 1 {
            Some(
                damage_notice(
                    h.publisher_id,
                    h.session,
                    row.2 + 1,
                    h.sequence - 1,
                    now,
                    Flags::REPLAY,
                )?
                .1,
            )
        } else {
            None
        };
        *row = (h.publisher_id, h.session, h.sequence, false);
        Ok(notice)
    }

    fn damaged(&mut self) {
        for r in &mut self.rows {
            r.3 = true;
        }
    }
}

/// A journal opened for a local replay.
pub struct LocalFeed {
    path: PathBuf,
    input: Box<dyn ReplayInput>,
}

impl LocalFeed {
    /// Opens the journal at `path` (a ring file, an archive directory or a history).
    pub fn open(path: &Path) -> Result<LocalFeed, RecorderError> {
        let reader = HistoryReader::open(path).map_err(|source| RecorderError::Open {
            path: path.to_path_buf(),
            source,
        })?;
        Ok(Self::from_input(path, Box::new(reader)))
    }

    /// Opens several journals or histories, merged by capture time (one is read as it is).
    pub fn open_all(paths: &[PathBuf]) -> Result<LocalFeed, RecorderError> {
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
            input,
        }
    }

    /// Hands every record to `push` (its frame and capture time) until the journal ends or `push` returns false,
    /// passing damage over (see the module documentation).
    pub fn feed(&mut self, mut push: impl FnMut(&[u8], u64) -> bool) -> LocalFeedReport {
        let mut report = LocalFeedReport::default();
        let mut publishers = Publishers::default();
        if let Err(e) = self.input.seek(None) {
            report.read_error = Some(e.to_string());
        }
        while report.read_error.is_none() {
            match self.input.next_input() {
                Ok(Input::Record(rec)) => {
                    report.records += 1;
                    match publishers.on_frame(rec.payload, rec.capture_time_ns) {
                        Ok(Some(notice)) => {
                            report.damage_gap_notices += 1;
                            if !push(&notice, rec.capture_time_ns) {
                                break;
                            }
                        }
                        Ok(None) => {}
                        Err(e) => tracing::warn!("no gap notice for journal damage: {e}"),
                    }
                    if !push(rec.payload, rec.capture_time_ns) {
                        break;
                    }
                }
                Ok(Input::End) => break,
                // A ring being written may overtake the reader: count it and carry on from the oldest record.
                Ok(Input::Lapped { .. }) => report.lapped += 1,
                Ok(Input::Damaged(err)) => match self.input.skip_damage() {
                    Ok(skipped) => {
                        report.damaged_ranges += 1;
                        report.corrupt_records += skipped.records;
                        report.corrupt_bytes += skipped.bytes;
                        publishers.damaged();
                        if report.damaged_ranges <= 5 {
                            tracing::warn!(
                                records = skipped.records,
                                bytes = skipped.bytes,
                                resumed_at = skipped.resumed_at,
                                "{err}; skipped to the next record that verifies"
                            );
                        }
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
    use tickbox_wire::{encode_to_vec, Header, Kind, Quote};

    #[test]
    fn damage_is_passed_over_and_each_publisher_told_what_it_took() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("j");
        let mut w = Writer::open(&path, &WriterOptions::archive(1 << 20)).unwrap();
        // Publishers 1 and 2 alternate, sequences 1..=100 each.
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
        // A flipped byte in the 41st record (publisher 1, sequence 21).
        let seg = path.join("0000000000.tbj");
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&seg)
            .unwrap();
        let mut r = tickbox_journal::Reader::open(&path).unwrap();
        r.seek_seq(41).unwrap();
        let len = r.next().unwrap().unwrap().payload.len() as u64;
        let rec_len = (24 + len).next_multiple_of(8);
        let at = 4096 + 40 * rec_len + 30;
        let mut b = [0u8];
        f.read_exact_at(&mut b, at).unwrap();
        f.write_all_at(&[b[0] ^ 0xff], at).unwrap();
        let mut got = Vec::new();
        let report = LocalFeed::open(&path).unwrap().feed(|frame, _| {
            let h = *MessageRef::decode(frame).unwrap().header();
            got.push((h.kind, h.publisher_id, h.sequence));
            true
        });
        assert_eq!(report.read_error, None);
        assert_eq!((report.damaged_ranges, report.corrupt_records), (1, 1));
        assert_eq!(report.records, 199, "every intact record");
        assert_eq!(report.damage_gap_notices, 1);
        let notice = got.iter().position(|g| g.0 == Kind::Gap).unwrap();
        assert_eq!(got[notice], (Kind::Gap, 1, 21));
        assert_eq!(got[notice + 1], (Kind::Quote, 1, 22));
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
