//! Several recordings replayed as one stream: `replay --journal a,b` (and `--local`) merges journals or histories
//! by capture time. Every record goes out as it was recorded, under its own publisher's identity and sequence; the
//! merge only decides the order (by capture time, the first recording first on a tie), so each recording's own
//! order, and so each publisher's, is kept.
//!
//! Each input is one recorder's clock: capture times of two recorders on one box (or one clock-disciplined
//! network) order their records as they arrived. The merged stream numbers its records 1, 2, 3, ... (a journal
//! sequence means nothing across recordings), so a window by sequence (`--from-seq`) needs one recording.

use std::path::Path;

use tickbox_journal::{JournalError, Record, Skipped};

use crate::error::RecorderError;
use crate::history_reader::HistoryReader;
use crate::input::{Input, Position, ReplayInput};

/// The next record of one input, copied out of it.
#[derive(Debug, Default)]
struct Head {
    capture_ns: u64,
    payload: Vec<u8>,
    /// Holds a record not yet given out.
    full: bool,
}

/// Several journals or histories read as one stream in capture-time order.
pub struct MergedInput {
    inputs: Vec<HistoryReader>,
    heads: Vec<Head>,
    /// The input whose head the last record was (refilled on the next call).
    taken: Option<usize>,
    /// The input whose damage the last call reported (what `skip_damage` passes over).
    damaged: Option<usize>,
    /// The input the last `skip_damage` passed damage in.
    skipped_in: Option<usize>,
    /// Records given out (the merged stream's sequence).
    given: u64,
    /// Records the inputs held when opened (the progress denominator).
    total: u64,
}

impl MergedInput {
    /// Opens every path (journal or history) at its oldest record.
    pub fn open(paths: &[impl AsRef<Path>]) -> Result<MergedInput, RecorderError> {
        let mut inputs = Vec::with_capacity(paths.len());
        let mut total = 0;
        for p in paths {
            let p = p.as_ref();
            let mut r = HistoryReader::open(p).map_err(|source| RecorderError::Open {
                path: p.to_path_buf(),
                source,
            })?;
            let first = r.position_seq().unwrap_or(r.header().base_seq);
            r.seek_end()?;
            total += r.end_seq().saturating_sub(first);
            r.seek_oldest()?;
            inputs.push(r);
        }
        let n = inputs.len();
        Ok(MergedInput {
            inputs,
            heads: (0..n).map(|_| Head::default()).collect(),
            taken: None,
            damaged: None,
            skipped_in: None,
            given: 0,
            total,
        })
    }

    /// The inputs, in the order given.
    pub fn inputs(&self) -> &[HistoryReader] {
        &self.inputs
    }

    fn clear(&mut self) {
        for h in &mut self.heads {
            h.full = false;
        }
        self.taken = None;
        self.damaged = None;
        self.given = 0;
    }

    /// Fills every empty head it can; `Some` for the first input that is damaged or lapped (it is reported before
    /// anything else is given out, as a single journal's reader would).
    fn fill(&mut self) -> Result<Option<(usize, Input<'static>)>, RecorderError> {
        for (i, (input, head)) in self.inputs.iter_mut().zip(&mut self.heads).enumerate() {
            if head.full {
                continue;
            }
            match input.next() {
                Ok(Some(rec)) => {
                    head.capture_ns = rec.capture_time_ns;
                    head.payload.clear();
                    head.payload.extend_from_slice(rec.payload);
                    head.full = true;
                }
                // At its end for now (a recording in progress may grow): looked at again on the next call.
                Ok(None) => {}
                Err(JournalError::Lapped { wanted_seq }) => {
                    return Ok(Some((i, Input::Lapped { wanted_seq })))
                }
                Err(e @ JournalError::CorruptRecord { .. }) => {
                    return Ok(Some((i, Input::Damaged(e))))
                }
                Err(e) => return Err(e.into()),
            }
        }
        Ok(None)
    }
}

impl ReplayInput for MergedInput {
    fn seek(&mut self, from: Option<Position>) -> Result<(), RecorderError> {
        self.clear();
        for input in &mut self.inputs {
            match from {
                None => input.seek_oldest()?,
                Some(Position::Time(t)) => input.seek_time(t)?,
                Some(Position::Seq(_)) if self.heads.len() > 1 => {
                    return Err(RecorderError::Settings(
                        "a window by journal sequence (--from-seq, --to-seq) needs one journal or history: \
                         several recordings have no common sequence (select by --from/--to)"
                            .into(),
                    ))
                }
                Some(Position::Seq(s)) => input.seek_seq(s)?,
            }
        }
        Ok(())
    }

    fn next_input(&mut self) -> Result<Input<'_>, RecorderError> {
        if let Some(i) = self.taken.take() {
            self.heads[i].full = false;
        }
        if let Some((i, input)) = self.fill()? {
            if matches!(input, Input::Damaged(_)) {
                self.damaged = Some(i);
            }
            return Ok(input);
        }
        let mut best: Option<usize> = None;
        for (i, h) in self.heads.iter().enumerate() {
            if h.full && best.is_none_or(|b| h.capture_ns < self.heads[b].capture_ns) {
                best = Some(i);
            }
        }
        let Some(i) = best else {
            return Ok(Input::End);
        };
        self.taken = Some(i);
        self.given += 1;
        let h = &self.heads[i];
        Ok(Input::Record(Record {
            seq: self.given,
            capture_time_ns: h.capture_ns,
            payload: &h.payload,
        }))
    }

    fn skip_damage(&mut self) -> Result<Skipped, RecorderError> {
        let i = self
            .damaged
            .take()
            .ok_or_else(|| RecorderError::Settings("skip_damage without damage reported".into()))?;
        self.skipped_in = Some(i);
        Ok(self.inputs[i].skip_damage()?)
    }

    fn recent_publishers(
        &mut self,
        before: u64,
        window: u64,
    ) -> Result<crate::input::PublisherPositions, RecorderError> {
        // The sequence is the damaged recording's own: it looks back in that one.
        match self.skipped_in {
            Some(i) => ReplayInput::recent_publishers(&mut self.inputs[i], before, window),
            None => Ok(crate::input::PublisherPositions::default()),
        }
    }

    fn end_seq(&self) -> u64 {
        self.total.max(self.given) + 1
    }

    fn position_seq(&self) -> Option<u64> {
        Some(self.given + 1)
    }
}

/// The replay input for `paths`: one journal or history as it is, several merged by capture time.
pub fn open_input(paths: &[impl AsRef<Path>]) -> Result<Box<dyn ReplayInput>, RecorderError> {
    match paths {
        [one] => {
            let p = one.as_ref();
            Ok(Box::new(HistoryReader::open(p).map_err(|source| {
                RecorderError::Open {
                    path: p.to_path_buf(),
                    source,
                }
            })?))
        }
        _ => Ok(Box::new(MergedInput::open(paths)?)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tickbox_journal::{Writer, WriterOptions};
    use tickbox_wire::{encode_to_vec, Header, Kind, MessageRef, Quote};

    /// A journal of `publisher`'s quotes 1..=n, quote `i` captured at `times(i)`.
    fn journal(path: &Path, publisher: u32, n: u64, times: impl Fn(u64) -> u64) {
        let mut w = Writer::open(path, &WriterOptions::archive(1 << 20)).unwrap();
        for i in 1..=n {
            let f = encode_to_vec(
                "Q.XNAS.AAPL",
                &Header::live(Kind::Quote, publisher, i, times(i)),
                &Quote::default().into(),
            )
            .unwrap();
            w.append(times(i), &f).unwrap();
        }
        w.close().unwrap();
    }

    fn drain(m: &mut MergedInput) -> Vec<(u64, u64, u32, u64)> {
        let mut out = Vec::new();
        loop {
            match m.next_input().unwrap() {
                Input::Record(r) => {
                    let h = *MessageRef::decode(r.payload).unwrap().header();
                    out.push((r.seq, r.capture_time_ns, h.publisher_id, h.sequence));
                }
                Input::End => return out,
                other => panic!("{other:?}"),
            }
        }
    }

    #[test]
    fn two_recordings_merge_by_capture_time_keeping_each_identity_and_order() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (dir.path().join("a"), dir.path().join("b"));
        // Feed A every 10 ns from 10, feed B every 15 ns from 20: ties at 20, 50 and 80 (A first: it was given
        // first).
        journal(&a, 1, 10, |i| i * 10);
        journal(&b, 2, 7, |i| i * 15 + 5);
        let mut m = MergedInput::open(&[&a, &b]).unwrap();
        m.seek(None).unwrap();
        let got = drain(&mut m);
        assert_eq!(got.len(), 17);
        let times: Vec<u64> = got.iter().map(|g| g.1).collect();
        let mut sorted = times.clone();
        sorted.sort();
        assert_eq!(times, sorted, "capture-time order");
        assert_eq!(
            got.iter().map(|g| g.0).collect::<Vec<_>>(),
            (1..=17).collect::<Vec<_>>(),
            "the merged stream's own sequence"
        );
        for publisher in [1, 2] {
            let seqs: Vec<u64> = got
                .iter()
                .filter(|g| g.2 == publisher)
                .map(|g| g.3)
                .collect();
            let n = if publisher == 1 { 10 } else { 7 };
            assert_eq!(seqs, (1..=n).collect::<Vec<_>>(), "publisher {publisher}");
        }
        let tie: Vec<u32> = got.iter().filter(|g| g.1 == 50).map(|g| g.2).collect();
        assert_eq!(tie, [1, 2]);
        // A seek by time seeks every input.
        m.seek(Some(Position::Time(60))).unwrap();
        let got = drain(&mut m);
        assert!(got.iter().all(|g| g.1 >= 60));
        assert_eq!(got.len(), 5 + 4);
        // By sequence there is no common position.
        assert!(m.seek(Some(Position::Seq(3))).is_err());
        assert_eq!(m.end_seq(), 18);
    }
}
