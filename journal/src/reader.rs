//! Readers: iterate records in order, tail a journal being written, detect being lapped, seek by sequence or
//! capture time through a sparse index.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{fence, Ordering};

use crate::archive;
use crate::error::{JournalError, Result};
use crate::segment::{align8, frame_crc, Frame, HeaderInfo, Mode, Segment, RECORD_HEADER_SIZE};

/// One record as read back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Record<'a> {
    /// Journal sequence: 1, 2, 3, ... in append order, never reused.
    pub seq: u64,
    /// Capture time given to `append`, ns since the Unix epoch.
    pub capture_time_ns: u64,
    /// The bytes given to `append`. Borrowed until the next call on the reader: from the reader's own copy (a ring,
    /// or the archive segment being written), or from the mapping (a sealed archive segment, never written again).
    pub payload: &'a [u8],
}

/// What [`Reader::skip_damage`] passed over to reach the next record that verifies.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Skipped {
    /// The file where the damage starts (the ring, or the archive segment).
    pub path: PathBuf,
    /// Byte offset of the damage in that file.
    pub offset: u64,
    /// Bytes passed over (damaged records, and whole segments whose header is damaged).
    pub bytes: u64,
    /// The first sequence not read (the one the damaged record should have had), when known.
    pub first_missing: Option<u64>,
    /// Sequence of the record reading resumes at; `None` when nothing verifies after the damage.
    pub resumed_at: Option<u64>,
    /// Records passed over: the sequences between `first_missing` and `resumed_at` (or the journal's next
    /// sequence, when nothing follows); 0 when unknown.
    pub records: u64,
    /// Archive segments passed over whole because their header is damaged.
    pub segments: u64,
}

/// One index entry per this many records.
const INDEX_EVERY: u64 = 64;

#[derive(Debug, Clone, Copy)]
struct IndexEntry {
    seq: u64,
    time: u64,
    pos: u64,
}

/// Sparse index of one file, built lazily on the first seek and extended as the file grows.
#[derive(Debug, Default)]
struct SparseIndex {
    entries: Vec<IndexEntry>,
    built_to: u64,
    count: u64,
}

/// Reads a journal (ring file or archive directory) in sequence order. A reader never blocks: `next` returns
/// `Ok(None)` when it has caught up with the writer; call it again later to tail the journal.
pub struct Reader {
    root: PathBuf,
    /// Reading an archive directory (rolls from segment to segment).
    archive_dir: bool,
    seg: Segment,
    pos: u64,
    /// `pos % capacity`, tracked so the hot path never divides.
    off: u64,
    cached_head: u64,
    expected: Option<u64>,
    scratch: Vec<u8>,
    verify: bool,
    index: SparseIndex,
    first_cache: HashMap<u64, (u64, u64)>,
    /// Archive segments before the first one that opens, whose header is damaged (their index, path and reason):
    /// the first `next()` from the oldest position reports them as corruption at offset 0 of the first one, and
    /// `skip_damage` passes them, so a zeroed first segment header is damage like any later one.
    leading: Vec<(u64, PathBuf, String)>,
    /// `leading` is still to be reported by the next `next()` (the reader is at the oldest record).
    leading_pending: bool,
    /// The last `next()` reported `leading`: `skip_damage` passes those segments.
    leading_reported: bool,
    /// Index of the first archive segment that opens.
    first_intact: u64,
}

impl Reader {
    /// Opens a journal for reading, positioned at its oldest record. A ring file, an archive directory, or a single
    /// archive segment file are accepted; checksums are verified on every record (see [`Reader::set_verify`]).
    pub fn open(path: impl AsRef<Path>) -> Result<Reader> {
        let path = path.as_ref();
        let mut leading = Vec::new();
        let (seg, archive_dir) = if path.is_dir() {
            let segments = archive::list_segments(path)?;
            if segments.is_empty() {
                return Err(JournalError::NotAJournal {
                    path: path.into(),
                    reason: "archive directory holds no segment yet".into(),
                });
            }
            let mut opened = None;
            let mut first_error = None;
            for (index, file) in &segments {
                match Segment::open(file, false) {
                    Ok(seg) => {
                        opened = Some(seg);
                        break;
                    }
                    Err(e) if e.is_damaged_header() => {
                        leading.push((*index, file.clone(), e.to_string()));
                        first_error.get_or_insert(e);
                    }
                    Err(e) => return Err(e),
                }
            }
            match (opened, first_error) {
                (Some(seg), _) => (seg, true),
                // No segment opens: the first one's damage is the error (a header damage, not "not a journal").
                (None, Some(e)) => return Err(e),
                (None, None) => unreachable!("segments is not empty"),
            }
        } else if path.exists() {
            (Segment::open(path, false)?, false)
        } else {
            return Err(JournalError::NotAJournal {
                path: path.into(),
                reason: "no such file or directory".into(),
            });
        };
        let mut r = Reader {
            root: path.into(),
            archive_dir,
            seg,
            pos: 0,
            off: 0,
            cached_head: 0,
            expected: None,
            scratch: Vec::new(),
            verify: true,
            index: SparseIndex::default(),
            first_cache: HashMap::new(),
            leading_pending: !leading.is_empty(),
            leading_reported: false,
            leading,
            first_intact: 0,
        };
        r.first_intact = r.seg.info.segment_index;
        r.seek_oldest();
        Ok(r)
    }

    /// Turns per-record checksum verification on or off (on by default; off saves ~10 ns per 100-byte record).
    pub fn set_verify(&mut self, verify: bool) {
        self.verify = verify;
    }

    /// Header of the file being read (the ring, or the current archive segment).
    pub fn header(&self) -> &HeaderInfo {
        &self.seg.info
    }

    /// True while a writer has the journal open (or died without closing it and nobody recovered it yet).
    pub fn writer_active(&self) -> bool {
        self.seg.writer_open()
    }

    /// Sequence the next `next()` returns, when known (after a seek or a lap it is known after the first record).
    pub fn position_seq(&self) -> Option<u64> {
        self.expected
    }

    /// Sequence the writer will give its next record (of the file being read): an upper bound for progress.
    pub fn end_seq(&self) -> u64 {
        self.seg.head_seq().load(Ordering::Acquire)
    }

    /// Moves to the oldest record still held (ring: the tail; archive: the first record of the first segment).
    pub fn seek_oldest(&mut self) {
        if self.archive_dir && self.seg.info.segment_index != self.first_intact {
            let _ = self.open_segment(self.first_intact);
        }
        self.leading_pending = !self.leading.is_empty();
        self.set_pos(self.seg.tail().load(Ordering::Acquire));
        self.expected = (self.seg.info.mode == Mode::Archive).then_some(self.seg.info.base_seq);
        self.cached_head = 0;
    }

    /// Moves past the last published record: the next `next()` returns only records appended from now on.
    pub fn seek_end(&mut self) -> Result<()> {
        if self.archive_dir {
            let segments = archive::list_segments(&self.root)?;
            if let Some((i, _)) = segments.last() {
                self.open_segment(*i)?;
            }
        }
        self.set_pos(self.seg.head().load(Ordering::Acquire));
        self.expected = Some(self.seg.head_seq().load(Ordering::Acquire));
        self.cached_head = self.pos;
        self.leading_pending = false;
        Ok(())
    }

    /// Positions at the first record with `seq >= target` (or at the end if there is none), in O(log n) plus at
    /// most 64 record hops. Targets older than the oldest record position at the oldest.
    pub fn seek_seq(&mut self, target: u64) -> Result<()> {
        let ge = move |seq: u64, _t: u64| seq >= target;
        self.seek_by(&ge, target, true)
    }

    /// Positions at the first record with `capture_time_ns >= target_ns` (or at the end), in O(log n). Assumes
    /// capture times do not decrease along the journal (the recorder stamps them from one clock).
    pub fn seek_time(&mut self, target_ns: u64) -> Result<()> {
        let ge = move |_seq: u64, t: u64| t >= target_ns;
        self.seek_by(&ge, target_ns, false)
    }

    /// The next record, `Ok(None)` when caught up with the writer, or an error: [`JournalError::Lapped`] if the
    /// writer overwrote the records this reader wanted (the reader has moved to the oldest record; call again),
    /// [`JournalError::CorruptRecord`] for a published record that fails validation.
    #[allow(clippy::should_implement_trait)]
    // Borrows records of sealed archive segments straight from the map; the blocks below say why that is sound.
    #[allow(unsafe_code)]
    pub fn next(&mut self) -> Result<Option<Record<'_>>> {
        self.leading_reported = false;
        if self.leading_pending {
            self.leading_pending = false;
            // Only from the oldest record: a seek past it did not want what the damaged segments held.
            if self.seg.info.segment_index == self.first_intact
                && self.pos == self.seg.tail().load(Ordering::Acquire)
            {
                if let Some((_, path, reason)) = self.leading.first() {
                    self.leading_reported = true;
                    return Err(JournalError::CorruptRecord {
                        path: path.clone(),
                        offset: 0,
                        reason: format!("damaged segment header: {reason}"),
                    });
                }
            }
        }
        loop {
            if self.pos >= self.cached_head {
                self.cached_head = self.seg.published_head();
                if self.pos >= self.cached_head {
                    if self.archive_dir && self.seg.sealed() {
                        // `sealed` is stored after the final publish, so this re-read of head is final.
                        self.cached_head = self.seg.published_head();
                        if self.pos >= self.cached_head {
                            let next = self.seg.info.segment_index + 1;
                            if let Err(e) = self.open_segment(next) {
                                return Err(damaged_segment(&self.root, next, e));
                            }
                            self.set_pos(0);
                            self.expected = Some(self.seg.info.base_seq);
                        }
                        continue;
                    }
                    return Ok(None);
                }
            }
            let pos = self.pos;
            let off = self.off;
            let ring = self.seg.info.mode == Mode::Ring;
            match self.seg.frame_at_off(off) {
                Frame::Skip(n) | Frame::Pad(n) => {
                    if ring && self.lapped_at(pos) {
                        return Err(self.lapped());
                    }
                    self.advance(n);
                }
                Frame::Invalid(reason) => {
                    if self.seg.faults() != 0 {
                        return Err(self.seg.truncated_under_us());
                    }
                    if ring && self.lapped_at(pos) {
                        return Err(self.lapped());
                    }
                    return Err(self.corrupt(pos, reason.to_string()));
                }
                Frame::Record {
                    frame_len,
                    crc,
                    seq: _,
                    capture_ns: _,
                } => {
                    let plen = frame_len as usize - RECORD_HEADER_SIZE as usize;
                    // A sealed archive segment is never written again: its records are borrowed from the map.
                    // Anything else (a ring, the segment being written) is copied out with atomic word loads and
                    // validated on the copy; in a ring, the copy is then checked against `tail` (seqlock).
                    let borrow = !ring && self.seg.sealed();
                    let body: &[u8] = if borrow {
                        // SAFETY: the segment is sealed (acquire load of its state, stored by the writer after its
                        // last record): no writer ever writes its records again.
                        unsafe { self.seg.body_borrowed(off, frame_len) }
                    } else {
                        self.seg.copy_body(off, frame_len, &mut self.scratch);
                        if ring && self.lapped_at(pos) {
                            return Err(self.lapped());
                        }
                        &self.scratch
                    };
                    if self.seg.faults() != 0 {
                        return Err(self.seg.truncated_under_us());
                    }
                    let word = |i: usize| {
                        let mut w = [0u8; 8];
                        w.copy_from_slice(&body[i..i + 8]);
                        u64::from_le_bytes(w)
                    };
                    let (seq, capture_ns) = (word(0), word(8));
                    if self.verify && frame_crc(frame_len, body) != crc {
                        return Err(
                            self.corrupt(pos, format!("checksum mismatch in record seq {seq}"))
                        );
                    }
                    if let Some(e) = self.expected {
                        if e != seq {
                            return Err(
                                self.corrupt(pos, format!("sequence {seq} where {e} was expected"))
                            );
                        }
                    }
                    self.expected = Some(seq + 1);
                    self.advance(align8(frame_len as u64));
                    let payload: &[u8] = if borrow {
                        // SAFETY: as above, a sealed segment's records are never written again.
                        let body = unsafe { self.seg.body_borrowed(off, frame_len) };
                        &body[16..16 + plen]
                    } else {
                        &self.scratch[16..16 + plen]
                    };
                    return Ok(Some(Record {
                        seq,
                        capture_time_ns: capture_ns,
                        payload,
                    }));
                }
            }
        }
    }

    /// After [`Reader::next`] returned [`JournalError::CorruptRecord`], moves to the next record that verifies (its
    /// checksum holds and its sequence can follow the last one read), passing over the damage, and over whole
    /// archive segments whose header is damaged; says what it passed. Linear in the bytes passed. When nothing
    /// verifies after the damage, the reader is left at the end of what is published and `resumed_at` is `None`.
    pub fn skip_damage(&mut self) -> Result<Skipped> {
        if std::mem::take(&mut self.leading_reported) {
            // What `next()` reported was the damaged segments before the first that opens: they are passed whole,
            // and reading resumes at the oldest record that opens. Their first sequence is known only for the
            // archive's first segment (the writer numbers from 1).
            let (first_index, path, _) = &self.leading[0];
            let first_missing = (*first_index == 0).then_some(1);
            let resumed = self.seg.info.base_seq;
            return Ok(Skipped {
                path: path.clone(),
                offset: 0,
                bytes: self
                    .leading
                    .iter()
                    .map(|(_, p, _)| std::fs::metadata(p).map(|m| m.len()).unwrap_or(0))
                    .sum(),
                first_missing,
                resumed_at: Some(resumed),
                records: first_missing.map_or(0, |f| resumed.saturating_sub(f)),
                segments: self.leading.len() as u64,
            });
        }
        let first_missing = self.expected;
        let mut skipped = Skipped {
            path: self.seg.path.clone(),
            offset: self.seg.file_offset(self.pos),
            bytes: 0,
            first_missing,
            resumed_at: None,
            records: 0,
            segments: 0,
        };
        if self.archive_dir
            && self.seg.sealed()
            && self.pos >= self.seg.head().load(Ordering::Acquire)
        {
            // Rolling to the next segment failed: its header is what is damaged.
            skipped.path = archive::segment_path(&self.root, self.seg.info.segment_index + 1);
            skipped.offset = 0;
        }
        // The damaged frame itself is not a record start: the scan begins just past its first word. `counted`:
        // where the bytes of the current file not yet counted as passed begin.
        let (mut from, mut min_seq, mut counted) = (self.pos + 8, first_missing, self.pos);
        loop {
            let head = self.seg.published_head();
            if let Some((p, seq)) = self.seg.resync(from, head, min_seq) {
                skipped.bytes += p - counted;
                self.set_pos(p);
                self.expected = Some(seq);
                self.cached_head = 0;
                skipped.resumed_at = Some(seq);
                skipped.records = first_missing.map_or(0, |f| seq.saturating_sub(f));
                return Ok(skipped);
            }
            skipped.bytes += head.saturating_sub(counted);
            self.set_pos(head.max(self.pos));
            if !(self.archive_dir && self.seg.sealed()) {
                break;
            }
            // The rest of this sealed segment is damaged: on to the next one that opens.
            let mut index = self.seg.info.segment_index + 1;
            let mut opened = false;
            loop {
                let path = archive::segment_path(&self.root, index);
                if !path.exists() {
                    break;
                }
                match Segment::open(&path, false) {
                    Ok(seg) => {
                        self.seg = seg;
                        self.index = SparseIndex::default();
                        opened = true;
                        break;
                    }
                    Err(_) => {
                        skipped.segments += 1;
                        skipped.bytes += std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
                        index += 1;
                    }
                }
            }
            if !opened {
                break;
            }
            self.set_pos(0);
            (from, min_seq, counted) = (0, Some(self.seg.info.base_seq), 0);
        }
        // Nothing verifies after the damage (yet): what the writer numbered since is what was passed.
        let next = self.seg.head_seq().load(Ordering::Acquire);
        skipped.records = first_missing.map_or(0, |f| next.saturating_sub(f));
        self.expected = None;
        self.cached_head = 0;
        Ok(skipped)
    }

    #[inline]
    fn advance(&mut self, n: u64) {
        self.pos += n;
        self.off += n;
        if self.off >= self.seg.cap {
            self.off = 0;
        }
    }

    /// Moves to absolute position `pos` (cold path: divides).
    fn set_pos(&mut self, pos: u64) {
        self.pos = pos;
        self.off = pos % self.seg.cap;
    }

    fn lapped_at(&self, pos: u64) -> bool {
        fence(Ordering::Acquire);
        self.seg.tail().load(Ordering::Relaxed) > pos
    }

    fn lapped(&mut self) -> JournalError {
        let wanted_seq = self.expected.unwrap_or(0);
        self.set_pos(self.seg.tail().load(Ordering::Acquire));
        self.expected = None;
        JournalError::Lapped { wanted_seq }
    }

    fn corrupt(&self, pos: u64, reason: String) -> JournalError {
        if self.seg.faults() != 0 {
            // What looks corrupt is the zero page the SIGBUS guard put where the file was cut.
            return self.seg.truncated_under_us();
        }
        JournalError::CorruptRecord {
            path: self.seg.path.clone(),
            offset: self.seg.file_offset(pos),
            reason,
        }
    }

    fn open_segment(&mut self, index: u64) -> Result<()> {
        if self.seg.info.segment_index == index && self.seg.info.mode == Mode::Archive {
            return Ok(());
        }
        let path = archive::segment_path(&self.root, index);
        self.seg = Segment::open(&path, false)?;
        self.index = SparseIndex::default();
        self.cached_head = 0;
        Ok(())
    }

    /// First record (seq, capture time) of archive segment `index`, or None if it is empty.
    fn segment_first(&mut self, index: u64) -> Result<Option<(u64, u64)>> {
        if let Some(v) = self.first_cache.get(&index) {
            return Ok(Some(*v));
        }
        let seg = Segment::open(&archive::segment_path(&self.root, index), false)?;
        if seg.head().load(Ordering::Acquire) == 0 {
            return Ok(None);
        }
        match seg.frame_at(0) {
            Frame::Record {
                seq, capture_ns, ..
            } => {
                self.first_cache.insert(index, (seq, capture_ns));
                Ok(Some((seq, capture_ns)))
            }
            _ => Err(JournalError::CorruptRecord {
                path: seg.path.clone(),
                offset: seg.file_offset(0),
                reason: "first record of a published segment is invalid".into(),
            }),
        }
    }

    fn seek_by(&mut self, ge: &dyn Fn(u64, u64) -> bool, target: u64, by_seq: bool) -> Result<()> {
        if self.archive_dir {
            let segments = archive::list_segments(&self.root)?;
            if segments.is_empty() {
                return Ok(());
            }
            // Binary search for the last segment whose first record is before the target. Segment order is record
            // order, so the answer is in that segment or at the start of the next (which `next()` rolls to).
            let (mut lo, mut hi) = (0usize, segments.len());
            while lo < hi {
                let mid = (lo + hi) / 2;
                let before = if by_seq {
                    // The header's base sequence answers without reading a record.
                    let seg_base = match self.segment_first(segments[mid].0)? {
                        Some((s, _)) => s,
                        None => u64::MAX,
                    };
                    seg_base < target
                } else {
                    match self.segment_first(segments[mid].0)? {
                        Some((s, t)) => !ge(s, t),
                        None => false,
                    }
                };
                if before {
                    lo = mid + 1;
                } else {
                    hi = mid;
                }
            }
            let pick = lo.saturating_sub(1);
            self.open_segment(segments[pick].0)?;
        }
        self.seek_in_segment(ge)
    }

    fn seek_in_segment(&mut self, ge: &dyn Fn(u64, u64) -> bool) -> Result<()> {
        for _ in 0..4 {
            self.extend_index()?;
            let tail = self.seg.tail().load(Ordering::Acquire);
            let head = self.index.built_to;
            let cut = self.index.entries.partition_point(|e| e.pos < tail);
            self.index.entries.drain(..cut);
            let i = self.index.entries.partition_point(|e| !ge(e.seq, e.time));
            let mut p = if i == 0 {
                tail
            } else {
                self.index.entries[i - 1].pos
            };
            let mut found = None;
            while p < head {
                let f = self.seg.frame_at(p);
                match f {
                    Frame::Skip(n) | Frame::Pad(n) => p += n,
                    Frame::Record {
                        seq, capture_ns, ..
                    } => {
                        if ge(seq, capture_ns) {
                            found = Some(seq);
                            break;
                        }
                        p += f.size();
                    }
                    Frame::Invalid(reason) => {
                        if self.lapped_at(p) {
                            break;
                        }
                        return Err(self.corrupt(p, reason.to_string()));
                    }
                }
            }
            if self.seg.info.mode == Mode::Ring && self.lapped_at(p.min(head)) {
                continue;
            }
            self.set_pos(p);
            self.expected = found;
            self.cached_head = 0;
            return Ok(());
        }
        Err(JournalError::Lapped {
            wanted_seq: self.expected.unwrap_or(0),
        })
    }

    /// Extends the sparse index to the current head, restarting it at the tail if the writer lapped it.
    fn extend_index(&mut self) -> Result<()> {
        let head = self.seg.published_head();
        for _ in 0..4 {
            let tail = self.seg.tail().load(Ordering::Acquire);
            if self.index.built_to < tail || self.index.entries.is_empty() && self.index.count == 0
            {
                self.index = SparseIndex {
                    entries: Vec::new(),
                    built_to: tail,
                    count: 0,
                };
            }
            let mut p = self.index.built_to;
            let mut lapped = false;
            while p < head {
                let f = self.seg.frame_at(p);
                if self.seg.info.mode == Mode::Ring && self.lapped_at(p) {
                    lapped = true;
                    break;
                }
                match f {
                    Frame::Skip(n) | Frame::Pad(n) => p += n,
                    Frame::Record {
                        seq, capture_ns, ..
                    } => {
                        if self.index.count.is_multiple_of(INDEX_EVERY) {
                            self.index.entries.push(IndexEntry {
                                seq,
                                time: capture_ns,
                                pos: p,
                            });
                        }
                        self.index.count += 1;
                        p += f.size();
                    }
                    Frame::Invalid(reason) => return Err(self.corrupt(p, reason.to_string())),
                }
            }
            self.index.built_to = p;
            if !lapped {
                return Ok(());
            }
        }
        Err(JournalError::Lapped {
            wanted_seq: self.expected.unwrap_or(0),
        })
    }
}

/// A segment that cannot be opened while rolling to it: a damaged header (bad magic, version, checksum or
/// size) is corruption at its offset 0, which `skip_damage` passes over; anything else (I/O) stays what it is.
fn damaged_segment(root: &Path, index: u64, e: JournalError) -> JournalError {
    if e.is_damaged_header() {
        JournalError::CorruptRecord {
            path: archive::segment_path(root, index),
            offset: 0,
            reason: format!("damaged segment header: {e}"),
        }
    } else {
        e
    }
}

impl std::fmt::Debug for Reader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reader")
            .field("path", &self.root)
            .field("segment", &self.seg.info.segment_index)
            .field("pos", &self.pos)
            .field("expected", &self.expected)
            .finish()
    }
}
