//! `tickbox journal stitch`: the canonical day from the journals of recorders elected one after another
//! (`record --elect`), each with the leader spans of its leadership log.
//!
//! Every data record is known by its publisher, session and sequence. The stitch takes each one **once**: from the
//! journal that was leader when it was recorded, where that journal holds it, and otherwise (nobody led then: a
//! kill -9 left a leader's last moments and the successor's first before its election to no one; or the leader
//! lost it) from the first journal that holds it. What no journal holds is what the day lacks: the stitched
//! journal says so with gap records, as a recorder does, and the report lists it.
//!
//! Two passes. The first reads every journal and notes, per publisher and session, the sequence ranges each one
//! holds and the ranges each one held as leader (interval sets: as many entries as holes, not records). The second
//! merges the journals by capture time and appends what the first pass chose, through the recorder's own
//! [`Recorder`] (so the stitched journal has a ledger and gap records of its own). Within a publisher the stitched
//! journal keeps sequence order even where two recorders' clocks disagree: a record whose predecessor is still to
//! come from another journal waits for it (bounded). Recorded heartbeats are left out (a replay sends its own, and a
//! heartbeat of one recorder could name a sequence the other journal is still to supply); recorded gap records are
//! left out too: the stitched journal's own say what the day as a whole lacks; LVC cached values are taken from
//! the leader only.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use serde::Serialize;
use tickbox_journal::{JournalError, Writer, WriterOptions};
use tickbox_wire::{Flags, Kind, MessageRef};

use crate::error::RecorderError;
use crate::history_reader::HistoryReader;
use crate::record::Recorder;

/// Bound on the sequence ranges the first pass keeps (all journals, all publishers): holes, not records, so a day
/// of sane journals needs a handful per publisher.
pub const MAX_RANGES: usize = 1_000_000;
/// Bound on records waiting for a predecessor from another journal.
pub const MAX_WAITING: usize = 1_000_000;
/// Holes listed one by one in the report (all are counted).
const LISTED_HOLES: usize = 1000;

/// A journal-sequence span a recorder led (from its leadership log): `from` its election, up to `until` inclusive
/// (`None`: to the end of its journal, e.g. killed while leader).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct LeaderSpan {
    /// First journal sequence recorded as leader.
    pub from: u64,
    /// Last journal sequence recorded as leader.
    pub until: Option<u64>,
}

impl LeaderSpan {
    fn holds(&self, seq: u64) -> bool {
        seq >= self.from && self.until.is_none_or(|u| seq <= u)
    }
}

/// One recorder's journal and when it led.
#[derive(Debug, Clone)]
pub struct StitchInput {
    /// Its journal (or history).
    pub path: PathBuf,
    /// The spans it led.
    pub spans: Vec<LeaderSpan>,
}

/// Sorted, disjoint, inclusive ranges of sequences.
#[derive(Debug, Clone, Default)]
struct Ranges(BTreeMap<u64, u64>);

impl Ranges {
    /// Adds `q`; returns how many ranges were added (0 or 1).
    fn insert(&mut self, q: u64) -> usize {
        // The range starting at or before q.
        let before = self.0.range(..=q).next_back().map(|(&a, &b)| (a, b));
        if let Some((_, b)) = before {
            if q <= b {
                return 0;
            }
        }
        let joins_before = before.is_some_and(|(_, b)| b + 1 == q);
        let after = self.0.range(q + 1..).next().map(|(&a, &b)| (a, b));
        let joins_after = after.is_some_and(|(a, _)| a == q + 1);
        match (joins_before, joins_after) {
            (true, true) => {
                let (a, _) = before.unwrap_or((q, q));
                let (c, d) = after.unwrap_or((q, q));
                self.0.remove(&c);
                self.0.insert(a, d);
                0
            }
            (true, false) => {
                let (a, _) = before.unwrap_or((q, q));
                self.0.insert(a, q);
                0
            }
            (false, true) => {
                let (c, d) = after.unwrap_or((q, q));
                self.0.remove(&c);
                self.0.insert(q, d);
                0
            }
            (false, false) => {
                self.0.insert(q, q);
                1
            }
        }
    }

    fn contains(&self, q: u64) -> bool {
        self.0.range(..=q).next_back().is_some_and(|(_, &b)| q <= b)
    }

    /// Whether any of `a..=b` is held.
    fn any_in(&self, a: u64, b: u64) -> bool {
        a <= b && (self.contains(a) || self.0.range(a..=b).next().is_some())
    }

    fn union(&mut self, other: &Ranges) {
        for (&a, &b) in &other.0 {
            // Few ranges: insert the ends and the inside by merging neighbours.
            let mut lo = a;
            let mut hi = b;
            let overlapping: Vec<(u64, u64)> = self
                .0
                .range(..=b.saturating_add(1))
                .filter(|(_, &e)| e.saturating_add(1) >= a)
                .map(|(&s, &e)| (s, e))
                .collect();
            for (s, e) in overlapping {
                self.0.remove(&s);
                lo = lo.min(s);
                hi = hi.max(e);
            }
            self.0.insert(lo, hi);
        }
    }

    /// The holes between the ranges.
    fn holes(&self) -> Vec<(u64, u64)> {
        let mut out = Vec::new();
        let mut prev: Option<u64> = None;
        for (&a, &b) in &self.0 {
            if let Some(p) = prev {
                if a > p + 1 {
                    out.push((p + 1, a - 1));
                }
            }
            prev = Some(b);
        }
        out
    }
}

/// A publisher's stream: (publisher, session).
type Key = (u32, u64);

/// What one input gave.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct InputReport {
    /// The journal.
    pub path: String,
    /// The spans it led.
    pub spans: Vec<LeaderSpan>,
    /// Its records.
    pub records: u64,
    /// Its data records.
    pub data: u64,
    /// Data records it holds from when it led.
    pub as_leader: u64,
    /// Data records taken from it while it led.
    pub taken_as_leader: u64,
    /// Data records taken from it from when it did not lead: gaps of the leaders filled.
    pub filled: u64,
    /// Data records not taken: another journal's copy was.
    pub duplicates: u64,
    /// Damaged stretches passed over in it (counted, each logged).
    pub damaged_ranges: u64,
}

/// Sequences no journal holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Hole {
    /// The publisher.
    pub publisher: u32,
    /// Its session.
    pub session: u64,
    /// First sequence missing.
    pub first: u64,
    /// Last sequence missing.
    pub last: u64,
}

/// What a stitch did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct StitchReport {
    /// The stitched journal.
    pub out: String,
    /// Each input.
    pub inputs: Vec<InputReport>,
    /// Data records written.
    pub data: u64,
    /// Records written (data, cached values, gap records).
    pub written: u64,
    /// Publisher sequences no journal holds (the stitched journal's gap records name them).
    pub missing: u64,
    /// The first holes, one by one.
    pub holes: Vec<Hole>,
    /// Holes in all.
    pub hole_count: u64,
    /// Recorded heartbeats left out.
    pub heartbeats_left_out: u64,
    /// Recorded gap records left out (the stitched journal writes its own).
    pub gap_records_left_out: u64,
    /// Cached values taken (from leaders).
    pub cached: u64,
    /// Records that were not tickbox frames (left out).
    pub foreign: u64,
    /// Records that waited for a predecessor from another journal (two recorders' clocks disagreeing).
    pub reordered: u64,
}

/// The report for people: a line per input, the stitched journal's totals, then the publisher sequences neither
/// journal holds (each hole of the first ones on its own line).
impl std::fmt::Display for StitchReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for i in &self.inputs {
            let spans: Vec<String> = i
                .spans
                .iter()
                .map(|s| match s.until {
                    Some(u) => format!("{} ..= {u}", s.from),
                    None => format!("{} .. end", s.from),
                })
                .collect();
            writeln!(
                f,
                "input         {}: led journal seqs [{}]; {} data records, {} taken as leader, {} filled a leader's \
                 gap, {} duplicates left{}",
                i.path,
                spans.join(", "),
                i.data,
                i.taken_as_leader,
                i.filled,
                i.duplicates,
                if i.damaged_ranges > 0 {
                    format!(", {} damaged stretch(es) passed", i.damaged_ranges)
                } else {
                    String::new()
                }
            )?;
        }
        writeln!(
            f,
            "stitched      {}: {} data records, {} records written ({} cached values); {} heartbeats and {} \
             recorded gap records left out; {} waited for a predecessor",
            self.out,
            self.data,
            self.written,
            self.cached,
            self.heartbeats_left_out,
            self.gap_records_left_out,
            self.reordered
        )?;
        writeln!(
            f,
            "neither has   {} publisher sequence(s) in {} hole(s){}",
            self.missing,
            self.hole_count,
            if self.missing > 0 {
                " (gap records in the stitched journal name them)"
            } else {
                ""
            }
        )?;
        for h in &self.holes {
            writeln!(
                f,
                "  publisher {} session {}: {} ..= {}",
                h.publisher, h.session, h.first, h.last
            )?;
        }
        Ok(())
    }
}

/// A record as the stitch sees it.
enum Class {
    Data(Key, u64),
    Heartbeat,
    Gap,
    Cached,
    Foreign,
}

fn classify(frame: &[u8]) -> Class {
    let Ok(m) = MessageRef::decode(frame) else {
        return Class::Foreign;
    };
    let h = m.header();
    if h.flags.contains(Flags::CACHED) {
        return Class::Cached;
    }
    match h.kind {
        Kind::Heartbeat => Class::Heartbeat,
        Kind::Gap => Class::Gap,
        _ => Class::Data((h.publisher_id, h.session), h.sequence),
    }
}

fn open(path: &Path) -> Result<HistoryReader, RecorderError> {
    HistoryReader::open(path).map_err(|source| RecorderError::Open {
        path: path.to_path_buf(),
        source,
    })
}

/// The first pass's view of the inputs.
struct Holdings {
    /// Per input, per stream: sequences it holds, and those it holds from when it led.
    have: Vec<HashMap<Key, Ranges>>,
    lead: Vec<HashMap<Key, Ranges>>,
    /// Per stream: held by anyone; held by a leader.
    any: HashMap<Key, Ranges>,
    any_lead: HashMap<Key, Ranges>,
}

/// Stitches `inputs` into a new journal at `out` (an archive of `segment_size`-byte segments, which must not
/// exist yet).
pub fn stitch(
    inputs: &[StitchInput],
    out: &Path,
    segment_size: u64,
) -> Result<StitchReport, RecorderError> {
    if out.exists() {
        return Err(RecorderError::Settings(format!(
            "{} exists: the stitched day goes into a new journal",
            out.display()
        )));
    }
    let mut report = StitchReport {
        out: out.display().to_string(),
        inputs: inputs
            .iter()
            .map(|i| InputReport {
                path: i.path.display().to_string(),
                spans: i.spans.clone(),
                ..InputReport::default()
            })
            .collect(),
        ..StitchReport::default()
    };
    let holdings = first_pass(inputs, &mut report)?;
    for (key, ranges) in &holdings.any {
        for (first, last) in ranges.holes() {
            report.hole_count += 1;
            report.missing += last - first + 1;
            if report.holes.len() < LISTED_HOLES {
                report.holes.push(Hole {
                    publisher: key.0,
                    session: key.1,
                    first,
                    last,
                });
            }
        }
    }
    report
        .holes
        .sort_by_key(|h| (h.publisher, h.session, h.first));
    second_pass(inputs, &holdings, out, segment_size, &mut report)?;
    Ok(report)
}

fn first_pass(
    inputs: &[StitchInput],
    report: &mut StitchReport,
) -> Result<Holdings, RecorderError> {
    let mut h = Holdings {
        have: Vec::new(),
        lead: Vec::new(),
        any: HashMap::new(),
        any_lead: HashMap::new(),
    };
    let mut ranges = 0usize;
    for (i, input) in inputs.iter().enumerate() {
        let mut have: HashMap<Key, Ranges> = HashMap::new();
        let mut lead: HashMap<Key, Ranges> = HashMap::new();
        let mut r = open(&input.path)?;
        let ir = &mut report.inputs[i];
        loop {
            let rec = match r.next() {
                Ok(Some(rec)) => rec,
                Ok(None) => break,
                Err(JournalError::CorruptRecord { .. }) => {
                    r.skip_damage()?;
                    continue;
                }
                Err(e) => return Err(e.into()),
            };
            ir.records += 1;
            let Class::Data(key, q) = classify(rec.payload) else {
                continue;
            };
            ir.data += 1;
            ranges += have.entry(key).or_default().insert(q);
            if input.spans.iter().any(|s| s.holds(rec.seq)) {
                ir.as_leader += 1;
                ranges += lead.entry(key).or_default().insert(q);
            }
            if ranges > MAX_RANGES {
                return Err(RecorderError::Settings(format!(
                    "stitch: more than {MAX_RANGES} separate sequence ranges in the journals: they do not look like \
                     recordings of one feed"
                )));
            }
        }
        for (k, v) in &have {
            h.any.entry(*k).or_default().union(v);
        }
        for (k, v) in &lead {
            h.any_lead.entry(*k).or_default().union(v);
        }
        h.have.push(have);
        h.lead.push(lead);
    }
    Ok(h)
}

/// A record chosen for the stitched journal, waiting for its predecessor.
struct Waiting {
    capture_ns: u64,
    frame: Vec<u8>,
}

/// Appends chosen records in each stream's sequence order.
struct Out<'a> {
    writer: Writer,
    recorder: Recorder,
    any: &'a HashMap<Key, Ranges>,
    /// Per stream: the next sequence expected, once one was written.
    next: HashMap<Key, u64>,
    waiting: HashMap<Key, BTreeMap<u64, Waiting>>,
    waiting_n: usize,
    /// Per stream: taken already (a sequence is written once).
    taken: HashMap<Key, Ranges>,
}

impl Out<'_> {
    fn append(&mut self, capture_ns: u64, frame: &[u8]) -> Result<(), RecorderError> {
        let mut batch = self.writer.batch();
        self.recorder.on_frame(&mut batch, capture_ns, frame)?;
        batch.commit()?;
        Ok(())
    }

    /// Whether sequence `q` of `key` can go now: it is the next, or nothing between the last one and it is held
    /// by any journal.
    fn ready(&self, key: Key, q: u64) -> bool {
        match self.next.get(&key) {
            None => true,
            Some(&n) => q <= n || !self.any.get(&key).is_some_and(|r| r.any_in(n, q - 1)),
        }
    }

    fn data(
        &mut self,
        key: Key,
        q: u64,
        capture_ns: u64,
        frame: &[u8],
        report: &mut StitchReport,
    ) -> Result<(), RecorderError> {
        if !self.ready(key, q) {
            report.reordered += 1;
            self.waiting.entry(key).or_default().insert(
                q,
                Waiting {
                    capture_ns,
                    frame: frame.to_vec(),
                },
            );
            self.waiting_n += 1;
            if self.waiting_n > MAX_WAITING {
                // Something never came (a journal lost it after the first pass): go on without it.
                tracing::warn!(
                    "stitch: more than {MAX_WAITING} records waiting; writing them as they are"
                );
                self.flush_all(report)?;
            }
            return Ok(());
        }
        self.write_data(key, q, capture_ns, frame, report)?;
        self.release(key, report)
    }

    fn write_data(
        &mut self,
        key: Key,
        q: u64,
        capture_ns: u64,
        frame: &[u8],
        report: &mut StitchReport,
    ) -> Result<(), RecorderError> {
        self.append(capture_ns, frame)?;
        report.data += 1;
        let n = self.next.entry(key).or_insert(q + 1);
        *n = (*n).max(q + 1);
        Ok(())
    }

    /// Writes what waited on `key` and can go now.
    fn release(&mut self, key: Key, report: &mut StitchReport) -> Result<(), RecorderError> {
        loop {
            let Some(first) = self
                .waiting
                .get(&key)
                .and_then(|w| w.keys().next().copied())
            else {
                return Ok(());
            };
            if !self.ready(key, first) {
                return Ok(());
            }
            let w = self
                .waiting
                .get_mut(&key)
                .and_then(|m| m.remove(&first))
                .expect("the first waiting record is there");
            self.waiting_n -= 1;
            self.write_data(key, first, w.capture_ns, &w.frame, report)?;
        }
    }

    fn flush_all(&mut self, report: &mut StitchReport) -> Result<(), RecorderError> {
        let waiting = std::mem::take(&mut self.waiting);
        self.waiting_n = 0;
        for (key, records) in waiting {
            for (q, w) in records {
                self.write_data(key, q, w.capture_ns, &w.frame, report)?;
            }
        }
        Ok(())
    }
}

fn second_pass(
    inputs: &[StitchInput],
    h: &Holdings,
    out: &Path,
    segment_size: u64,
    report: &mut StitchReport,
) -> Result<(), RecorderError> {
    let description = format!(
        "tickbox journal stitch {}",
        inputs
            .iter()
            .map(|i| i.path.display().to_string())
            .collect::<Vec<_>>()
            .join(",")
    );
    let mut writer = Writer::open(
        out,
        &WriterOptions::archive(segment_size).description(description),
    )
    .map_err(|source| RecorderError::Open {
        path: out.to_path_buf(),
        source,
    })?;
    let recorder = Recorder::new(&mut writer)?;
    let mut o = Out {
        writer,
        recorder,
        any: &h.any,
        next: HashMap::new(),
        waiting: HashMap::new(),
        waiting_n: 0,
        taken: HashMap::new(),
    };
    let mut readers = inputs
        .iter()
        .map(|i| open(&i.path))
        .collect::<Result<Vec<_>, _>>()?;
    // The next record of each input, copied: (capture time, journal sequence, frame).
    let mut heads: Vec<Option<(u64, u64, Vec<u8>)>> = vec![None; readers.len()];
    let mut done = vec![false; readers.len()];
    loop {
        for (i, r) in readers.iter_mut().enumerate() {
            if heads[i].is_some() || done[i] {
                continue;
            }
            loop {
                match r.next() {
                    Ok(Some(rec)) => {
                        heads[i] = Some((rec.capture_time_ns, rec.seq, rec.payload.to_vec()));
                        break;
                    }
                    Ok(None) => {
                        done[i] = true;
                        break;
                    }
                    Err(JournalError::CorruptRecord { .. }) => {
                        let s = r.skip_damage()?;
                        report.inputs[i].damaged_ranges += 1;
                        tracing::warn!(journal = %inputs[i].path.display(), records = s.records, bytes = s.bytes, "stitch: a damaged stretch passed over");
                    }
                    Err(e) => return Err(e.into()),
                }
            }
        }
        let Some(i) = (0..heads.len())
            .filter(|&i| heads[i].is_some())
            .min_by_key(|&i| heads[i].as_ref().map(|h| h.0))
        else {
            break;
        };
        let (capture_ns, seq, frame) = heads[i].take().expect("chosen head is full");
        let leading = inputs[i].spans.iter().any(|s| s.holds(seq));
        match classify(&frame) {
            Class::Data(key, q) => {
                let from_leader = h.lead[i].get(&key).is_some_and(|r| r.contains(q));
                let a_leader_has = h.any_lead.get(&key).is_some_and(|r| r.contains(q));
                let taken = o.taken.get(&key).is_some_and(|r| r.contains(q));
                if taken || (a_leader_has && !from_leader) {
                    report.inputs[i].duplicates += 1;
                    continue;
                }
                o.taken.entry(key).or_default().insert(q);
                if from_leader {
                    report.inputs[i].taken_as_leader += 1;
                } else {
                    report.inputs[i].filled += 1;
                }
                o.data(key, q, capture_ns, &frame, report)?;
            }
            Class::Cached if leading => {
                report.cached += 1;
                o.append(capture_ns, &frame)?;
            }
            Class::Cached => {}
            Class::Heartbeat => report.heartbeats_left_out += 1,
            Class::Gap => report.gap_records_left_out += 1,
            Class::Foreign => report.foreign += 1,
        }
    }
    o.flush_all(report)?;
    o.recorder.after_commit(&mut o.writer)?;
    report.written = o.writer.next_seq().saturating_sub(1);
    o.writer
        .close()
        .map_err(|source| RecorderError::Close { source })?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use tickbox_wire::{encode_to_vec, Header, Quote};

    #[test]
    fn ranges_merge_and_say_what_is_between_them() {
        let mut r = Ranges::default();
        let added: usize = [1, 2, 3, 7, 8, 5, 4].iter().map(|&q| r.insert(q)).sum();
        assert_eq!(
            added, 3,
            "1..=3, 7..=8 and 5 start ranges; 4 joins two into one"
        );
        assert_eq!(r.0.len(), 2);
        assert!(r.contains(5) && !r.contains(6) && r.contains(8));
        assert_eq!(r.holes(), [(6, 6)]);
        assert!(r.any_in(6, 7) && !r.any_in(6, 6) && !r.any_in(9, 100));
        let mut u = Ranges::default();
        for q in [6, 20] {
            u.insert(q);
        }
        r.union(&u);
        assert_eq!(r.holes(), [(9, 19)]);
        assert_eq!(r.0.len(), 2);
    }

    /// A journal of publisher 7's quotes `seqs`, each captured at `t(q)`.
    fn journal(path: &Path, seqs: impl Iterator<Item = u64>, t: impl Fn(u64) -> u64) {
        let mut w = Writer::open(path, &WriterOptions::archive(1 << 20)).unwrap();
        for q in seqs {
            let f = encode_to_vec(
                "Q.XNAS.AAPL",
                &Header::live(Kind::Quote, 7, q, t(q)),
                &Quote::default().into(),
            )
            .unwrap();
            w.append(t(q), &f).unwrap();
        }
        w.close().unwrap();
    }

    fn read(path: &Path) -> Vec<(Kind, u64)> {
        let mut r = HistoryReader::open(path).unwrap();
        let mut out = Vec::new();
        while let Some(rec) = r.next().unwrap() {
            let h = *MessageRef::decode(rec.payload).unwrap().header();
            out.push((h.kind, h.sequence));
        }
        out
    }

    #[test]
    fn a_failover_stitches_every_record_once_in_order_and_names_what_neither_has() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b, out) = (
            dir.path().join("a"),
            dir.path().join("b"),
            dir.path().join("day"),
        );
        // A leads from the start and dies after 60 (killed: no end in its log); B, recording since 20 with its
        // own loss of 30..=34, is elected at sequence 70 of the feed. 61..=69 are only in B (nobody led then),
        // 90..=92 in neither. B's clock is 15 ns behind A's, so B's 61 comes before A's 60 in capture order: it
        // waits for it.
        journal(&a, 1..=60, |q| q * 10);
        let b_seqs: Vec<u64> = (20..=100)
            .filter(|q| !(30..=34).contains(q) && !(90..=92).contains(q))
            .collect();
        journal(&b, b_seqs.iter().copied(), |q| q * 10 - 15);
        let b_from = b_seqs.iter().position(|&q| q == 70).unwrap() as u64 + 1;
        let inputs = [
            StitchInput {
                path: a.clone(),
                spans: vec![LeaderSpan {
                    from: 1,
                    until: None,
                }],
            },
            StitchInput {
                path: b.clone(),
                spans: vec![LeaderSpan {
                    from: b_from,
                    until: None,
                }],
            },
        ];
        let report = stitch(&inputs, &out, 1 << 20).unwrap();
        let got = read(&out);
        let data: Vec<u64> = got
            .iter()
            .filter(|(k, _)| *k == Kind::Quote)
            .map(|(_, q)| *q)
            .collect();
        let want: Vec<u64> = (1..=100).filter(|q| !(90..=92).contains(q)).collect();
        assert_eq!(data, want, "every sequence either holds, once, in order");
        assert_eq!(
            report.holes,
            [Hole {
                publisher: 7,
                session: 0,
                first: 90,
                last: 92
            }]
        );
        assert_eq!(report.missing, 3);
        // The stitched journal says what it lacks where it lacks it.
        let gap_at = got.iter().position(|(k, _)| *k == Kind::Gap).unwrap();
        assert_eq!(got[gap_at].1, 92);
        assert_eq!(got[gap_at + 1], (Kind::Quote, 93));
        let (ra, rb) = (&report.inputs[0], &report.inputs[1]);
        assert_eq!((ra.taken_as_leader, ra.filled), (60, 0));
        assert_eq!(
            rb.filled,
            (61..=69).count() as u64,
            "61..=69 from the follower"
        );
        assert!(report.reordered > 0, "{report:?}");
        assert_eq!(rb.taken_as_leader, (70..=100).count() as u64 - 3);
        assert_eq!(rb.duplicates, (20..=60).count() as u64 - 5);
        assert_eq!(report.data, 97);
        // Refuses to overwrite.
        assert!(stitch(&inputs, &out, 1 << 20).is_err());
    }

    #[test]
    fn the_report_for_people_names_each_input_the_totals_and_each_hole() {
        let report = StitchReport {
            out: "out.tbj".into(),
            inputs: vec![InputReport {
                path: "a.tbj".into(),
                spans: vec![
                    LeaderSpan {
                        from: 1,
                        until: Some(9),
                    },
                    LeaderSpan {
                        from: 20,
                        until: None,
                    },
                ],
                data: 12,
                taken_as_leader: 10,
                filled: 2,
                duplicates: 3,
                damaged_ranges: 1,
                ..InputReport::default()
            }],
            data: 12,
            written: 14,
            missing: 2,
            holes: vec![Hole {
                publisher: 7,
                session: 5,
                first: 3,
                last: 4,
            }],
            hole_count: 1,
            heartbeats_left_out: 6,
            gap_records_left_out: 1,
            cached: 2,
            reordered: 0,
            ..StitchReport::default()
        };
        let text = report.to_string();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines,
            [
                "input         a.tbj: led journal seqs [1 ..= 9, 20 .. end]; 12 data records, 10 taken as leader, \
                 2 filled a leader's gap, 3 duplicates left, 1 damaged stretch(es) passed",
                "stitched      out.tbj: 12 data records, 14 records written (2 cached values); 6 heartbeats and 1 \
                 recorded gap records left out; 0 waited for a predecessor",
                "neither has   2 publisher sequence(s) in 1 hole(s) (gap records in the stitched journal name them)",
                "  publisher 7 session 5: 3 ..= 4",
            ]
        );
    }
}
