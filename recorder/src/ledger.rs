//! The recorder's per-publisher ledger: what it recorded, what it knows the journal lacks (gap notices), and what
//! a ring lap overwrote. Kept in memory while recording and persisted in the journal's application metadata at
//! every batch commit, so `journal info` can report it and a recorder appending to the journal later continues it
//! (and resumes each publisher's sequence where the journal left it).
//!
//! # Encoding (version 1, little-endian, at most the journal's app-meta size)
//!
//! | offset | size | field |
//! |---|---|---|
//! | 0 | 4 | magic `TBRL` |
//! | 4 | 2 | version (1) |
//! | 6 | 2 | rows `n` |
//! | 8 | 4 | recorder runs that appended to this journal |
//! | 12 | 4 | reserved (0) |
//! | 16 | 8 | records overwritten that belong to no publisher (heartbeats, gap notices, foreign frames) |
//! | 24 | 8 | journal sequence the ledger accounts up to (exclusive): records from here on are not in it yet |
//! | 32 | 56 × n | rows |
//!
//! Row: `publisher u32 | flags u32 | session u64 | last_sequence u64 | recorded u64 | missing u64 | gap_events u64 |
//! overwritten u64`. Flag bit 0 marks the overflow row (always last): the publishers that did not fit, summed, its
//! `publisher` field holding how many they are. The encoding is bounded by the space given: rows that do not fit
//! are folded into the overflow row, so counts are never dropped, only their attribution.

use serde::Serialize;

const MAGIC: [u8; 4] = *b"TBRL";
const VERSION: u16 = 1;
const HEADER_LEN: usize = 32;
const ROW_LEN: usize = 56;
const FLAG_OVERFLOW: u32 = 1;

/// Default bound on publishers tracked in memory (the same as the sequence tracker's).
pub const MAX_LEDGER_PUBLISHERS: usize = tickbox_wire::sequence::DEFAULT_MAX_PUBLISHERS;

/// One publisher's account in a journal.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct LedgerRow {
    /// The publisher's id, from its messages' headers.
    pub publisher: u32,
    /// Session of the publisher's last recorded message (0: unknown).
    pub session: u64,
    /// Last sequence accounted for (recorded, or named by a gap notice).
    pub last_sequence: u64,
    /// Data records written to the journal.
    pub recorded: u64,
    /// Sequences named by gap notices written to the journal (lost before the recorder).
    pub missing: u64,
    /// Gap notices written.
    pub gap_events: u64,
    /// Data records a ring lap overwrote.
    pub overwritten: u64,
}

/// Publishers beyond the ledger's bound (in memory or in the encoding), summed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct LedgerOverflow {
    /// How many publishers are folded in here.
    pub publishers: u64,
    /// Data records written, as in [`LedgerRow::recorded`].
    pub recorded: u64,
    /// Sequences named by gap notices, as in [`LedgerRow::missing`].
    pub missing: u64,
    /// Gap notices written, as in [`LedgerRow::gap_events`].
    pub gap_events: u64,
    /// Data records a ring lap overwrote, as in [`LedgerRow::overwritten`].
    pub overwritten: u64,
}

impl LedgerOverflow {
    fn absorb(&mut self, r: &LedgerRow) {
        // Saturating: the inputs may come from disk.
        self.publishers = self.publishers.saturating_add(1);
        self.recorded = self.recorded.saturating_add(r.recorded);
        self.missing = self.missing.saturating_add(r.missing);
        self.gap_events = self.gap_events.saturating_add(r.gap_events);
        self.overwritten = self.overwritten.saturating_add(r.overwritten);
    }
}

/// Why stored ledger bytes could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LedgerError {
    /// Shorter than a ledger header or not starting with `TBRL`: the metadata is someone else's (or empty).
    #[error("not a recorder ledger (bad magic)")]
    BadMagic,
    /// A ledger encoding this build does not read (the number is the stored version).
    #[error("ledger version {0} is not supported (this build reads version {VERSION})")]
    Version(u16),
    /// The header names more rows than the bytes hold.
    #[error("ledger truncated: {rows} rows need {needed} bytes, have {have}")]
    Truncated {
        /// Row count in the header.
        rows: u16,
        /// Bytes those rows need, header included.
        needed: usize,
        /// Bytes given.
        have: usize,
    },
    /// The overflow row is only ever written last; one elsewhere means corrupt bytes.
    #[error("ledger overflow row is not the last row")]
    MisplacedOverflow,
}

/// Every publisher's account in one journal.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize)]
pub struct Ledger {
    rows: Vec<LedgerRow>,
    /// Publishers beyond the bound on rows, summed (all zero while every publisher has a row).
    pub overflow: LedgerOverflow,
    /// Records overwritten that belong to no publisher's data (heartbeats, notices, foreign frames).
    pub other_overwritten: u64,
    /// Recorder runs that appended to the journal.
    pub runs: u32,
    /// Journal sequence this ledger accounts up to (exclusive); 0 when unknown.
    pub journal_next_seq: u64,
    #[serde(skip)]
    max_rows: usize,
    #[serde(skip)]
    last_hit: usize,
}

impl Ledger {
    /// An empty ledger with rows for up to [`MAX_LEDGER_PUBLISHERS`] publishers.
    pub fn new() -> Self {
        Self::with_max_publishers(MAX_LEDGER_PUBLISHERS)
    }

    /// An empty ledger with rows for up to `max` publishers (at least 1); later ones are summed in
    /// [`Ledger::overflow`].
    pub fn with_max_publishers(max: usize) -> Self {
        Ledger {
            max_rows: max.max(1),
            ..Ledger::default()
        }
    }

    /// Rows in order of first appearance (the overflow is apart).
    pub fn rows(&self) -> &[LedgerRow] {
        &self.rows
    }

    /// The row of `publisher`; `None` when it was never seen or is counted in the overflow.
    pub fn row(&self, publisher: u32) -> Option<&LedgerRow> {
        self.rows.iter().find(|r| r.publisher == publisher)
    }

    /// The row of `publisher`, created if there is room; `None` means "count it in the overflow".
    #[inline]
    pub fn row_mut(&mut self, publisher: u32) -> Option<&mut LedgerRow> {
        let i = match self.rows.get(self.last_hit) {
            Some(r) if r.publisher == publisher => self.last_hit,
            _ => match self.rows.iter().position(|r| r.publisher == publisher) {
                Some(i) => i,
                None if self.rows.len() < self.max_rows.max(1) => {
                    self.rows.push(LedgerRow {
                        publisher,
                        ..LedgerRow::default()
                    });
                    self.rows.len() - 1
                }
                None => return None,
            },
        };
        self.last_hit = i;
        self.rows.get_mut(i)
    }

    /// One data record of `publisher` (session, sequence) was written. An unbelieved sequence (an anomaly) is
    /// counted but does not move where the publisher is.
    #[inline]
    pub fn on_recorded(&mut self, publisher: u32, session: u64, sequence: u64, believed: bool) {
        match self.row_mut(publisher) {
            Some(r) => {
                r.recorded += 1;
                if believed {
                    if session != r.session {
                        r.session = session;
                        r.last_sequence = sequence;
                    } else {
                        r.last_sequence = r.last_sequence.max(sequence);
                    }
                }
            }
            None => self.overflow.recorded += 1,
        }
    }

    /// A gap notice for `first..=last` of `publisher` was written.
    pub fn on_gap(&mut self, publisher: u32, session: u64, first: u64, last: u64) {
        let n = last.saturating_sub(first).saturating_add(1);
        match self.row_mut(publisher) {
            Some(r) => {
                r.missing = r.missing.saturating_add(n);
                r.gap_events += 1;
                r.session = session;
                r.last_sequence = r.last_sequence.max(last);
            }
            None => {
                self.overflow.missing = self.overflow.missing.saturating_add(n);
                self.overflow.gap_events += 1;
            }
        }
    }

    /// `n` data records of `publisher` were overwritten by a ring lap.
    pub fn on_overwritten(&mut self, publisher: u32, n: u64) {
        match self.row_mut(publisher) {
            Some(r) => r.overwritten += n,
            None => self.overflow.overwritten += n,
        }
    }

    /// Where every publisher is, and nothing counted: the ledger a journal that continues this one starts with
    /// (the next period of a history), so the chain of each publisher's sequence goes on across journals.
    pub fn carried(&self) -> Ledger {
        Ledger {
            rows: self
                .rows
                .iter()
                .map(|r| LedgerRow {
                    publisher: r.publisher,
                    session: r.session,
                    last_sequence: r.last_sequence,
                    ..LedgerRow::default()
                })
                .collect(),
            journal_next_seq: self.journal_next_seq,
            max_rows: self.max_rows,
            ..Ledger::default()
        }
    }

    /// Adds `later`, the ledger of the journal that follows this one in a history: counts are summed per
    /// publisher, and where each publisher is comes from `later`.
    pub fn add(&mut self, later: &Ledger) {
        for r in &later.rows {
            match self.row_mut(r.publisher) {
                Some(row) => {
                    row.recorded = row.recorded.saturating_add(r.recorded);
                    row.missing = row.missing.saturating_add(r.missing);
                    row.gap_events = row.gap_events.saturating_add(r.gap_events);
                    row.overwritten = row.overwritten.saturating_add(r.overwritten);
                    if r.last_sequence > 0 || r.session != 0 {
                        row.session = r.session;
                        row.last_sequence = r.last_sequence;
                    }
                }
                None => self.overflow.absorb(r),
            }
        }
        let o = &later.overflow;
        self.overflow.publishers = self.overflow.publishers.max(o.publishers);
        self.overflow.recorded = self.overflow.recorded.saturating_add(o.recorded);
        self.overflow.missing = self.overflow.missing.saturating_add(o.missing);
        self.overflow.gap_events = self.overflow.gap_events.saturating_add(o.gap_events);
        self.overflow.overwritten = self.overflow.overwritten.saturating_add(o.overwritten);
        self.other_overwritten = self
            .other_overwritten
            .saturating_add(later.other_overwritten);
        self.runs = self.runs.saturating_add(later.runs);
        self.journal_next_seq = later.journal_next_seq;
    }

    /// Totals over every row and the overflow.
    pub fn totals(&self) -> LedgerOverflow {
        let mut t = self.overflow;
        for r in &self.rows {
            t.absorb(r);
        }
        t
    }

    /// Encodes into at most `max_bytes` (rows that do not fit are folded into the overflow row).
    pub fn encode(&self, max_bytes: usize) -> Vec<u8> {
        let room = max_bytes.saturating_sub(HEADER_LEN) / ROW_LEN;
        let needs_overflow = self.overflow.publishers > 0
            || self.overflow.recorded + self.overflow.missing + self.overflow.overwritten > 0;
        let (kept, overflow) = if self.rows.len() + usize::from(needs_overflow) <= room {
            (self.rows.len(), needs_overflow.then_some(self.overflow))
        } else {
            // Keep room - 1 rows, fold the rest (and the in-memory overflow) into the last row.
            let kept = room.saturating_sub(1);
            let mut o = self.overflow;
            for r in &self.rows[kept..] {
                o.absorb(r);
            }
            (kept, (room > 0).then_some(o))
        };
        let n = kept + usize::from(overflow.is_some());
        let mut out = Vec::with_capacity(HEADER_LEN + n * ROW_LEN);
        out.extend_from_slice(&MAGIC);
        out.extend_from_slice(&VERSION.to_le_bytes());
        out.extend_from_slice(&(n as u16).to_le_bytes());
        out.extend_from_slice(&self.runs.to_le_bytes());
        out.extend_from_slice(&0u32.to_le_bytes());
        out.extend_from_slice(&self.other_overwritten.to_le_bytes());
        out.extend_from_slice(&self.journal_next_seq.to_le_bytes());
        let mut row = |publisher: u32, flags: u32, vals: [u64; 6]| {
            out.extend_from_slice(&publisher.to_le_bytes());
            out.extend_from_slice(&flags.to_le_bytes());
            for v in vals {
                out.extend_from_slice(&v.to_le_bytes());
            }
        };
        for r in &self.rows[..kept] {
            row(
                r.publisher,
                0,
                [
                    r.session,
                    r.last_sequence,
                    r.recorded,
                    r.missing,
                    r.gap_events,
                    r.overwritten,
                ],
            );
        }
        if let Some(o) = overflow {
            row(
                o.publishers.min(u32::MAX as u64) as u32,
                FLAG_OVERFLOW,
                [0, 0, o.recorded, o.missing, o.gap_events, o.overwritten],
            );
        }
        out
    }

    /// Reads an encoded ledger. Bytes past the rows are ignored (a later version may append fields).
    pub fn decode(bytes: &[u8]) -> Result<Ledger, LedgerError> {
        if bytes.len() < HEADER_LEN || bytes[..4] != MAGIC {
            return Err(LedgerError::BadMagic);
        }
        let u16_at = |i: usize| u16::from_le_bytes([bytes[i], bytes[i + 1]]);
        let u32_at = |i: usize| {
            let mut b = [0u8; 4];
            b.copy_from_slice(&bytes[i..i + 4]);
            u32::from_le_bytes(b)
        };
        let u64_at = |i: usize| {
            let mut b = [0u8; 8];
            b.copy_from_slice(&bytes[i..i + 8]);
            u64::from_le_bytes(b)
        };
        let version = u16_at(4);
        if version != VERSION {
            return Err(LedgerError::Version(version));
        }
        let n = u16_at(6);
        let needed = HEADER_LEN + n as usize * ROW_LEN;
        if bytes.len() < needed {
            return Err(LedgerError::Truncated {
                rows: n,
                needed,
                have: bytes.len(),
            });
        }
        let mut ledger = Ledger::new();
        ledger.runs = u32_at(8);
        ledger.other_overwritten = u64_at(16);
        ledger.journal_next_seq = u64_at(24);
        for i in 0..n as usize {
            let at = HEADER_LEN + i * ROW_LEN;
            let flags = u32_at(at + 4);
            let v = |k: usize| u64_at(at + 8 + 8 * k);
            if flags & FLAG_OVERFLOW != 0 {
                if i + 1 != n as usize {
                    return Err(LedgerError::MisplacedOverflow);
                }
                let o = &mut ledger.overflow;
                o.publishers = o.publishers.saturating_add(u32_at(at) as u64);
                o.recorded = o.recorded.saturating_add(v(2));
                o.missing = o.missing.saturating_add(v(3));
                o.gap_events = o.gap_events.saturating_add(v(4));
                o.overwritten = o.overwritten.saturating_add(v(5));
            } else if ledger.rows.len() >= ledger.max_rows {
                // More rows than this build tracks: fold, never drop.
                let r = LedgerRow {
                    recorded: v(2),
                    missing: v(3),
                    gap_events: v(4),
                    overwritten: v(5),
                    ..LedgerRow::default()
                };
                ledger.overflow.absorb(&r);
            } else {
                ledger.rows.push(LedgerRow {
                    publisher: u32_at(at),
                    session: v(0),
                    last_sequence: v(1),
                    recorded: v(2),
                    missing: v(3),
                    gap_events: v(4),
                    overwritten: v(5),
                });
            }
        }
        Ok(ledger)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(n: u32) -> Ledger {
        let mut l = Ledger::new();
        l.runs = 2;
        l.other_overwritten = 7;
        l.journal_next_seq = 1234;
        for p in 0..n {
            for s in 1..=(p as u64 + 1) {
                l.on_recorded(p, 99, s, true);
            }
            l.on_gap(p, 99, 100, 104);
            l.on_overwritten(p, 1);
        }
        l
    }

    #[test]
    fn round_trips() {
        let l = sample(5);
        let back = Ledger::decode(&l.encode(2048)).unwrap();
        assert_eq!(back.rows(), l.rows());
        assert_eq!(
            (back.runs, back.other_overwritten, back.journal_next_seq),
            (2, 7, 1234)
        );
        assert_eq!(back.totals(), l.totals());
        assert_eq!(back.row(3).unwrap().recorded, 4);
        assert_eq!(back.row(3).unwrap().missing, 5);
        assert_eq!(back.row(3).unwrap().last_sequence, 104);
    }

    #[test]
    fn what_does_not_fit_is_folded_not_dropped() {
        let l = sample(100);
        let bytes = l.encode(2048);
        assert!(bytes.len() <= 2048, "{}", bytes.len());
        let back = Ledger::decode(&bytes).unwrap();
        assert_eq!(back.rows().len(), (2048 - HEADER_LEN) / ROW_LEN - 1);
        assert_eq!(
            back.overflow.publishers as usize + back.rows().len(),
            100,
            "every publisher counted"
        );
        let (a, b) = (back.totals(), l.totals());
        assert_eq!(
            (a.recorded, a.missing, a.overwritten, a.gap_events),
            (b.recorded, b.missing, b.overwritten, b.gap_events)
        );
        // In-memory bound: the 3rd publisher of a 2-row ledger goes to the overflow.
        let mut small = Ledger::with_max_publishers(2);
        for p in 0..3 {
            small.on_recorded(p, 1, 1, true);
        }
        assert_eq!(small.rows().len(), 2);
        assert_eq!(small.overflow.recorded, 1);
        let back = Ledger::decode(&small.encode(2048)).unwrap();
        assert_eq!(back.totals().recorded, 3);
        // No room at all: header only, still decodes.
        assert!(Ledger::decode(&l.encode(HEADER_LEN))
            .unwrap()
            .rows()
            .is_empty());
    }

    #[test]
    fn bad_bytes_are_typed_errors() {
        let good = sample(3).encode(2048);
        assert_eq!(Ledger::decode(b"nope"), Err(LedgerError::BadMagic));
        assert_eq!(Ledger::decode(&[]), Err(LedgerError::BadMagic));
        let mut v = good.clone();
        v[4] = 9;
        assert_eq!(Ledger::decode(&v), Err(LedgerError::Version(9)));
        assert!(matches!(
            Ledger::decode(&good[..good.len() - 1]),
            Err(LedgerError::Truncated { .. })
        ));
        // Every prefix and every single-byte corruption: an error or a ledger, never a panic.
        for cut in 0..good.len() {
            let _ = Ledger::decode(&good[..cut]);
        }
        for i in 0..good.len() {
            let mut v = good.clone();
            v[i] ^= 0xff;
            let _ = Ledger::decode(&v);
        }
    }
}
