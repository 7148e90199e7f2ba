//! The journal side of `tickbox replay --local` (a backtest): every record's frame and capture time handed, in
//! journal order, to a sink (the Black Box's shard logic, in `tickbox_subscriber::replay_local`), with what could
//! not be read counted. No socket and no pacing: the sink takes records as fast as its workers go.

use std::path::{Path, PathBuf};

use crate::history_reader::HistoryReader;

use crate::error::RecorderError;
use crate::replay::{Input, ReplayInput};

/// What a [`LocalFeed`] read.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LocalFeedReport {
    /// Records handed to the sink.
    pub records: u64,
    /// Times a ring being written overtook the reader (reading went on from the oldest record).
    pub lapped: u64,
    /// Why reading stopped before the end, if it did.
    pub read_error: Option<String>,
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

    /// Hands every record to `push` (its frame and capture time) until the journal ends or `push` returns false.
    pub fn feed(&mut self, mut push: impl FnMut(&[u8], u64) -> bool) -> LocalFeedReport {
        let mut report = LocalFeedReport::default();
        if let Err(e) = self.input.seek(None) {
            report.read_error = Some(e.to_string());
        }
        while report.read_error.is_none() {
            match self.input.next_input() {
                Ok(Input::Record(rec)) => {
                    report.records += 1;
                    if !push(rec.payload, rec.capture_time_ns) {
                        break;
                    }
                }
                Ok(Input::End) => break,
                // A ring being written may overtake the reader: count it and carry on from the oldest record.
                Ok(Input::Lapped { .. }) => report.lapped += 1,
                Ok(Input::Damaged(err)) => report.read_error = Some(err.to_string()),
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
    use tickbox_journal::{Writer, WriterOptions};

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
