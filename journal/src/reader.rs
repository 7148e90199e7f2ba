//! Readers: iterate records in order, tail a journal being written, detect being lapped, seek by sequence or
//! capture time through a sparse index. Compressed files (a ring, or archive segments, see [`crate::compress`])
//! are read through the same API: their records are inflated a frame at a time, sought through their index.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{fence, Ordering};
use std::sync::Arc;

use crate::archive;
use crate::crc;
use crate::error::{JournalError, Result};
use crate::packed::{self, Inflater, Packed, ReadAhead};
use crate::segment::{align8, frame_crc, Frame, HeaderInfo, Mode, Segment, RECORD_HEADER_SIZE};

/// One record as read back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Record<'a> {
    /// Journal sequence: 1, 2, 3, ... in append order, never reused.
    pub seq: u64,
    /// Capture time given to `append`, ns since the Unix epoch.
    pub capture_time_ns: u64,
    /// The bytes given to `append`. Borrowed until the next call on the reader: from the reader's own copy (a ring,
    /// the archive segment being written, or a compressed file's inflated frame), or from the mapping (a sealed
    /// archive segment, never written again).
    pub payload: &'a [u8],
}

/// What [`Reader::skip_damage`] passed over to reach the next record that verifies.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Skipped {
    /// The file where the damage starts (the ring, or the archive segment).
    pub path: PathBuf,
    /// Byte offset of the damage in that file (in a compressed file: of the frame that does not read).
    pub offset: u64,
    /// Bytes passed over (damaged records, compressed frames that do not read, and whole segments whose header
    /// is damaged).
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

/// Where a reader stands in a plain (mapped) file.
struct Plain {
    seg: Segment,
    pos: u64,
    /// `pos % capacity`, tracked so the hot path never divides.
    off: u64,
    cached_head: u64,
    scratch: Vec<u8>,
    index: SparseIndex,
    /// Positions whose records were found intact by [`Plain::verify_ahead`], a few at a time: a sealed segment's
    /// bytes never change, so a record checked ahead of its turn is not checked again.
    verified: std::ops::Range<u64>,
    /// The owner of a local copy fetched by range: asked for the whole file before its records are first read
    /// (a plain file has no index to find a record by without walking the records before it).
    fetch: Option<crate::fetch::Fetcher>,
}

/// Where a reader stands in a compressed file.
#[derive(Debug)]
struct PackedPos {
    file: Arc<Packed>,
    /// The frame whose records are in `plain` (when `loaded`), else the next one to load.
    frame: usize,
    loaded: bool,
    plain: Vec<u8>,
    /// Byte of `plain` the next record starts at.
    at: usize,
    inflater: Inflater,
    /// The frame the last error was in (`skip_damage` goes on after it).
    failed: Option<usize>,
    /// The frame loaded last: loading the one after it means the reader streams, and the read-ahead starts.
    last_loaded: Option<usize>,
    /// Inflates the next frame while this one is read (once the reader streams).
    ahead: Option<ReadAhead>,
    /// A buffer for the read-ahead to inflate into.
    spare: Vec<u8>,
}

/// The file a reader is reading. One per reader; the plain one is read on the hot path, so it stays inline.
#[allow(clippy::large_enum_variant)]
enum Current {
    Plain(Plain),
    Packed(Box<PackedPos>),
}

/// Where the record [`Reader::next`] found lies, so it can be borrowed once the search is over.
#[derive(Debug, Clone, Copy)]
enum Found {
    /// In a sealed plain segment's map: the frame at data offset `off`.
    Mapped { off: u64, frame_len: u32 },
    /// In the plain reader's copy.
    Copied { plen: usize },
    /// In a compressed file's inflated frame, from byte `at`.
    Inflated { at: usize, plen: usize },
}

/// What one look at the current file gave.
enum Step {
    /// A record; its sequence and capture time, and where it lies.
    Record(u64, u64, Found),
    /// Caught up with the writer (or the end of a file nothing will add to).
    CaughtUp,
    /// The end of an archive segment nothing will add to: the next one follows.
    SegmentEnd,
}

// A reader moves between threads (a replay's, a history service's): checked here so a field that cannot fails to
// compile.
const _: fn() = || {
    fn send<T: Send>() {}
    send::<Reader>();
};

/// Opens one journal file, plain or compressed.
fn open_file(path: &Path) -> Result<Current> {
    if packed::is_packed(path)? {
        return Ok(Current::Packed(Box::new(PackedPos::new(Packed::open(
            path,
        )?))));
    }
    Ok(Current::Plain(Plain::new(Segment::open(path, false)?)))
}

/// Reads a journal (ring file or archive directory) in sequence order. A reader never blocks: `next` returns
/// `Ok(None)` when it has caught up with the writer; call it again later to tail the journal.
pub struct Reader {
    root: PathBuf,
    /// Reading an archive directory (rolls from segment to segment).
    archive_dir: bool,
    cur: Current,
    expected: Option<u64>,
    verify: bool,
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
    /// archive segment file are accepted, plain or compressed; checksums are verified on every record (see
    /// [`Reader::set_verify`]).
    pub fn open(path: impl AsRef<Path>) -> Result<Reader> {
        let path = path.as_ref();
        let mut leading = Vec::new();
        let (cur, archive_dir) = if path.is_dir() {
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
                match open_file(file) {
                    Ok(cur) => {
                        opened = Some(cur);
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
                (Some(cur), _) => (cur, true),
                // No segment opens: the first one's damage is the error (a header damage, not "not a journal").
                (None, Some(e)) => return Err(e),
                (None, None) => unreachable!("segments is not empty"),
            }
        } else if path.exists() {
            (open_file(path)?, false)
        } else {
            return Err(JournalError::NotAJournal {
                path: path.into(),
                reason: "no such file or directory".into(),
            });
        };
        let mut r = Reader {
            root: path.into(),
            archive_dir,
            cur,
            expected: None,
            verify: true,
            first_cache: HashMap::new(),
            leading_pending: !leading.is_empty(),
            leading_reported: false,
            leading,
            first_intact: 0,
        };
        r.first_intact = r.header().segment_index;
        r.seek_oldest();
        Ok(r)
    }

    /// Turns per-record checksum verification on or off (on by default; off saves ~10 ns per 100-byte record).
    /// A compressed frame's own checksum is checked either way.
    pub fn set_verify(&mut self, verify: bool) {
        self.verify = verify;
    }

    /// Header of the file being read (the ring, or the current archive segment; for a compressed file, the
    /// header of the plain file it was made from).
    pub fn header(&self) -> &HeaderInfo {
        match &self.cur {
            Current::Plain(p) => &p.seg.info,
            Current::Packed(p) => &p.file.header.info,
        }
    }

    /// Whether the file being read is compressed.
    pub fn compressed(&self) -> bool {
        matches!(self.cur, Current::Packed(_))
    }

    /// True while a writer has the journal open (or died without closing it and nobody recovered it yet).
    /// Never for a compressed file.
    pub fn writer_active(&self) -> bool {
        match &self.cur {
            Current::Plain(p) => p.seg.writer_open(),
            Current::Packed(_) => false,
        }
    }

    /// Sequence the next `next()` returns, when known (after a seek or a lap it is known after the first record).
    pub fn position_seq(&self) -> Option<u64> {
        self.expected
    }

    /// Sequence the writer will give its next record (of the file being read): an upper bound for progress.
    pub fn end_seq(&self) -> u64 {
        match &self.cur {
            Current::Plain(p) => p.seg.head_seq().load(Ordering::Acquire),
            Current::Packed(p) => p.file.end_seq(),
        }
    }

    fn index(&self) -> u64 {
        self.header().segment_index
    }

    fn path_now(&self) -> &Path {
        match &self.cur {
            Current::Plain(p) => &p.seg.path,
            Current::Packed(p) => &p.file.path,
        }
    }

    /// Moves to the oldest record still held (ring: the tail; archive: the first record of the first segment).
    pub fn seek_oldest(&mut self) {
        if self.archive_dir && self.index() != self.first_intact {
            let _ = self.open_segment(self.first_intact);
        }
        self.leading_pending = !self.leading.is_empty();
        let archive = self.header().mode == Mode::Archive;
        self.expected = match &mut self.cur {
            Current::Plain(p) => {
                p.set_pos(p.seg.tail().load(Ordering::Acquire));
                p.cached_head = 0;
                archive.then_some(p.seg.info.base_seq)
            }
            Current::Packed(p) => {
                p.rewind(0);
                Some(p.file.header.first_seq)
            }
        };
    }

    /// Moves past the last published record: the next `next()` returns only records appended from now on.
    pub fn seek_end(&mut self) -> Result<()> {
        if self.archive_dir {
            let segments = archive::list_segments(&self.root)?;
            if let Some((i, _)) = segments.last() {
                self.open_segment(*i)?;
            }
        }
        self.expected = Some(match &mut self.cur {
            Current::Plain(p) => {
                p.set_pos(p.seg.head().load(Ordering::Acquire));
                p.cached_head = p.pos;
                p.seg.head_seq().load(Ordering::Acquire)
            }
            Current::Packed(p) => {
                p.rewind(p.file.frames.len());
                p.file.end_seq()
            }
        });
        self.leading_pending = false;
        Ok(())
    }

    /// Positions at the first record with `seq >= target` (or at the end if there is none), in O(log n) plus at
    /// most 64 record hops (in a compressed file: one frame inflated). Targets older than the oldest record
    /// position at the oldest.
    pub fn seek_seq(&mut self, target: u64) -> Result<()> {
        let ge = move |seq: u64, _t: u64| seq >= target;
        self.seek_by(&ge)
    }

    /// Positions at the first record with `capture_time_ns >= target_ns` (or at the end), in O(log n). Assumes
    /// capture times do not decrease along the journal (the recorder stamps them from one clock).
    pub fn seek_time(&mut self, target_ns: u64) -> Result<()> {
        let ge = move |_seq: u64, t: u64| t >= target_ns;
        self.seek_by(&ge)
    }

    /// The next record, `Ok(None)` when caught up with the writer, or an error: [`JournalError::Lapped`] if the
    /// writer overwrote the records this reader wanted (the reader has moved to the oldest record; call again),
    /// [`JournalError::CorruptRecord`] for a published record that fails validation (in a compressed file: a
    /// frame that does not inflate, or a record in it that fails; [`Reader::skip_damage`] goes on after it).
    #[allow(clippy::should_implement_trait)]
    // Borrows records of sealed archive segments straight from the map; the block below says why that is sound.
    #[allow(unsafe_code)]
    pub fn next(&mut self) -> Result<Option<Record<'_>>> {
        self.leading_reported = false;
        if self.leading_pending {
            self.leading_pending = false;
            // Only from the oldest record: a seek past it did not want what the damaged segments held.
            if self.index() == self.first_intact && self.at_oldest() {
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
        let (seq, capture_time_ns, found) = loop {
            let step = match &mut self.cur {
                Current::Plain(p) => p.step(&mut self.expected, self.verify, self.archive_dir)?,
                Current::Packed(p) => p.step(&mut self.expected, self.verify, self.archive_dir)?,
            };
            match step {
                Step::Record(seq, t, found) => break (seq, t, found),
                Step::CaughtUp => return Ok(None),
                Step::SegmentEnd => {
                    let next = self.index() + 1;
                    if let Err(e) = self.open_segment(next) {
                        return Err(damaged_segment(&self.root, next, e));
                    }
                    self.expected = Some(self.header().base_seq);
                }
            }
        };
        let payload: &[u8] = match (&self.cur, found) {
            (Current::Plain(p), Found::Mapped { off, frame_len }) => {
                // SAFETY: `step` borrows only from sealed segments (acquire load of their state, stored by the
                // writer after their last record): no writer ever writes their records again.
                let body = unsafe { p.seg.body_borrowed(off, frame_len) };
                &body[16..frame_len as usize - 8]
            }
            (Current::Plain(p), Found::Copied { plen }) => &p.scratch[16..16 + plen],
            (Current::Packed(p), Found::Inflated { at, plen }) => {
                let at = at + RECORD_HEADER_SIZE as usize;
                &p.plain[at..at + plen]
            }
            _ => unreachable!("a record is found in the file being read"),
        };
        Ok(Some(Record {
            seq,
            capture_time_ns,
            payload,
        }))
    }

    /// Whether the reader stands at the oldest record of the file being read.
    fn at_oldest(&self) -> bool {
        match &self.cur {
            Current::Plain(p) => p.pos == p.seg.tail().load(Ordering::Acquire),
            Current::Packed(p) => p.frame == 0 && p.at == 0,
        }
    }

    /// After [`Reader::next`] returned [`JournalError::CorruptRecord`], moves to the next record that verifies (its
    /// checksum holds and its sequence can follow the last one read), passing over the damage, and over whole
    /// archive segments whose header is damaged; says what it passed. Linear in the bytes passed. When nothing
    /// verifies after the damage, the reader is left at the end of what is published and `resumed_at` is `None`.
    /// In a compressed file the damage passed is the frame that did not read (or held the record that failed),
    /// and any after it that do not read either.
    pub fn skip_damage(&mut self) -> Result<Skipped> {
        if std::mem::take(&mut self.leading_reported) {
            // What `next()` reported was the damaged segments before the first that opens: they are passed whole,
            // and reading resumes at the oldest record that opens. Their first sequence is known only for the
            // archive's first segment (the writer numbers from 1).
            let (first_index, path, _) = &self.leading[0];
            let first_missing = (*first_index == 0).then_some(1);
            let resumed = self.header().base_seq;
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
            path: self.path_now().to_path_buf(),
            offset: 0,
            bytes: 0,
            first_missing,
            resumed_at: None,
            records: 0,
            segments: 0,
        };
        let resumed = match &mut self.cur {
            Current::Plain(p) => {
                skipped.offset = p.seg.file_offset(p.pos);
                if self.archive_dir
                    && p.seg.sealed()
                    && p.pos >= p.seg.head().load(Ordering::Acquire)
                {
                    // Rolling to the next segment failed: its header is what is damaged.
                    skipped.path = archive::segment_path(&self.root, p.seg.info.segment_index + 1);
                    skipped.offset = 0;
                }
                // The damaged frame itself is not a record start: the scan begins just past its first word.
                p.resync_from(p.pos + 8, p.pos, first_missing, &mut skipped.bytes)
            }
            Current::Packed(p) => {
                let failed = p.failed.take().unwrap_or(p.frame);
                match p.file.frames.get(failed) {
                    Some(e) => skipped.offset = e.offset,
                    None if self.archive_dir => {
                        // At the end of this file: rolling to the next segment failed, its header is damaged.
                        skipped.path =
                            archive::segment_path(&self.root, p.file.header.info.segment_index + 1);
                    }
                    None => {}
                }
                p.resume_after(failed, &mut skipped.bytes)
            }
        };
        if let Some(seq) = resumed {
            return Ok(self.resumed(skipped, seq));
        }
        // Nothing more in this file. An archive goes on with the next segment that opens, unless this one may
        // still grow (the segment being written).
        while self.archive_dir && self.file_is_final() {
            let mut index = self.index() + 1;
            let mut opened = false;
            loop {
                let path = archive::segment_path(&self.root, index);
                if !path.exists() {
                    break;
                }
                match open_file(&path) {
                    Ok(cur) => {
                        self.cur = cur;
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
            let base = Some(self.header().base_seq);
            let resumed = match &mut self.cur {
                Current::Plain(p) => p.resync_from(0, 0, base, &mut skipped.bytes),
                Current::Packed(p) => p.resume_after_start(&mut skipped.bytes),
            };
            if let Some(seq) = resumed {
                return Ok(self.resumed(skipped, seq));
            }
        }
        // Nothing verifies after the damage (yet): what the writer numbered since is what was passed.
        let next = self.end_seq();
        skipped.records = first_missing.map_or(0, |f| next.saturating_sub(f));
        self.expected = None;
        if let Current::Plain(p) = &mut self.cur {
            p.cached_head = 0;
        }
        Ok(skipped)
    }

    /// `skipped`, completed for a reader that resumes at `seq`.
    fn resumed(&mut self, mut skipped: Skipped, seq: u64) -> Skipped {
        self.expected = Some(seq);
        skipped.resumed_at = Some(seq);
        skipped.records = skipped.first_missing.map_or(0, |f| seq.saturating_sub(f));
        skipped
    }

    /// Whether nothing will be added to the file being read (a sealed segment, or a compressed file).
    fn file_is_final(&self) -> bool {
        match &self.cur {
            Current::Plain(p) => p.seg.sealed(),
            Current::Packed(_) => true,
        }
    }

    fn open_segment(&mut self, index: u64) -> Result<()> {
        if self.index() == index && self.header().mode == Mode::Archive {
            return Ok(());
        }
        let path = archive::segment_path(&self.root, index);
        self.cur = open_file(&path)?;
        Ok(())
    }

    /// First record (seq, capture time) of archive segment `index`, or None if it is empty.
    fn segment_first(&mut self, index: u64) -> Result<Option<(u64, u64)>> {
        if let Some(v) = self.first_cache.get(&index) {
            return Ok(Some(*v));
        }
        let path = archive::segment_path(&self.root, index);
        let first = match open_file(&path)? {
            Current::Packed(p) => p
                .file
                .frames
                .iter()
                .find(|e| !e.damaged)
                .map(|e| (e.first_seq, e.first_time)),
            Current::Plain(p) => {
                let seg = p.seg;
                if seg.head().load(Ordering::Acquire) == 0 {
                    return Ok(None);
                }
                match seg.frame_at(0) {
                    Frame::Record {
                        seq, capture_ns, ..
                    } => Some((seq, capture_ns)),
                    _ => {
                        return Err(JournalError::CorruptRecord {
                            path: seg.path.clone(),
                            offset: seg.file_offset(0),
                            reason: "first record of a published segment is invalid".into(),
                        })
                    }
                }
            }
        };
        if let Some(v) = first {
            self.first_cache.insert(index, v);
        }
        Ok(first)
    }

    fn seek_by(&mut self, ge: &dyn Fn(u64, u64) -> bool) -> Result<()> {
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
                // An empty segment is the last written: nothing in it is before the target.
                let before = match self.segment_first(segments[mid].0)? {
                    Some((s, t)) => !ge(s, t),
                    None => false,
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
        let wanted_seq = self.expected.unwrap_or(0);
        self.expected = match &mut self.cur {
            Current::Plain(p) => p.seek(ge).map_err(|e| match e {
                JournalError::Lapped { .. } => JournalError::Lapped { wanted_seq },
                e => e,
            })?,
            Current::Packed(p) => p.seek(ge),
        };
        Ok(())
    }
}

impl Plain {
    fn new(seg: Segment) -> Plain {
        Plain {
            fetch: crate::fetch::fetcher_of(&seg.path),
            seg,
            pos: 0,
            off: 0,
            cached_head: 0,
            scratch: Vec::new(),
            index: SparseIndex::default(),
            verified: 0..0,
        }
    }

    /// Checks the checksums of the record at `pos` (data offset `off`) of this sealed segment and of the next
    /// ones, [`crc::LANES`] together (see [`crc::Sse42::frame_crcs`]), and marks those found intact, up to the
    /// first that is not, as verified. With fewer records published ahead, or no SSE4.2, it marks none and each
    /// record is checked alone; a record that fails is checked again alone, so the error is the one it always was.
    /// Reading ahead meets a file cut under the reader (the SIGBUS guard counts it) a few records early, which
    /// the caller reports as it would at the cut.
    #[allow(unsafe_code)]
    fn verify_ahead(&mut self, pos: u64, off: u64) {
        #[cfg(not(target_arch = "x86_64"))]
        let _ = (pos, off);
        #[cfg(target_arch = "x86_64")]
        if let Some(hw) = crc::Sse42::detect() {
            let mut frames = [(0u32, 0u32, 0u64, &[][..]); crc::LANES];
            let (mut p, mut o) = (pos, off);
            for lane in &mut frames {
                if p >= self.cached_head {
                    return;
                }
                let Frame::Record { frame_len, crc, .. } = self.seg.frame_at_off(o) else {
                    return;
                };
                // SAFETY: only called for a sealed archive segment (the caller borrows its records): no writer
                // ever writes its records again.
                let body = unsafe { self.seg.body_borrowed(o, frame_len) };
                let len = align8(frame_len as u64);
                (p, o) = (p + len, o + len);
                *lane = (frame_len, crc, p, body);
            }
            let got = hw.frame_crcs(frames.map(|(frame_len, _, _, body)| (frame_len, body)));
            let end = frames
                .iter()
                .zip(got)
                .take_while(|((_, crc, _, _), got)| got == crc)
                .last()
                .map_or(pos, |((_, _, end, _), _)| *end);
            self.verified = pos..end;
        }
    }

    /// The next record of this file, or why there is none. The hot path: a published record in the current
    /// segment is one frame decode, a copy (or a borrow of a sealed segment) and a checksum.
    #[inline]
    // Borrows records of sealed archive segments straight from the map; the block says why that is sound.
    #[allow(unsafe_code)]
    fn step(
        &mut self,
        expected: &mut Option<u64>,
        verify: bool,
        archive_dir: bool,
    ) -> Result<Step> {
        loop {
            if self.pos >= self.cached_head {
                self.fetch_records()?;
                self.cached_head = self.seg.published_head();
                if self.pos >= self.cached_head {
                    if archive_dir && self.seg.sealed() {
                        // `sealed` is stored after the final publish, so this re-read of head is final.
                        self.cached_head = self.seg.published_head();
                        if self.pos >= self.cached_head {
                            return Ok(Step::SegmentEnd);
                        }
                        continue;
                    }
                    return Ok(Step::CaughtUp);
                }
            }
            let pos = self.pos;
            let off = self.off;
            let ring = self.seg.info.mode == Mode::Ring;
            match self.seg.frame_at_off(off) {
                Frame::Skip(n) | Frame::Pad(n) => {
                    if ring && self.lapped_at(pos) {
                        return Err(self.lapped(expected));
                    }
                    self.advance(n);
                }
                Frame::Invalid(reason) => {
                    if self.seg.faults() != 0 {
                        return Err(self.seg.truncated_under_us());
                    }
                    if ring && self.lapped_at(pos) {
                        return Err(self.lapped(expected));
                    }
                    return Err(self.corrupt(pos, reason.to_string()));
                }
                Frame::Record { frame_len, crc, .. } => {
                    let plen = frame_len as usize - RECORD_HEADER_SIZE as usize;
                    // A sealed archive segment is never written again: its records are borrowed from the map.
                    // Anything else (a ring, the segment being written) is copied out with atomic word loads and
                    // validated on the copy; in a ring, the copy is then checked against `tail` (seqlock).
                    let borrow = !ring && self.seg.sealed();
                    if borrow && verify && !self.verified.contains(&pos) {
                        self.verify_ahead(pos, off);
                    }
                    let body: &[u8] = if borrow {
                        // SAFETY: the segment is sealed (acquire load of its state, stored by the writer after its
                        // last record): no writer ever writes its records again.
                        unsafe { self.seg.body_borrowed(off, frame_len) }
                    } else {
                        self.seg.copy_body(off, frame_len, &mut self.scratch);
                        if ring && self.lapped_at(pos) {
                            return Err(self.lapped(expected));
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
                    if verify && !self.verified.contains(&pos) && frame_crc(frame_len, body) != crc
                    {
                        return Err(
                            self.corrupt(pos, format!("checksum mismatch in record seq {seq}"))
                        );
                    }
                    if let Some(e) = *expected {
                        if e != seq {
                            return Err(
                                self.corrupt(pos, format!("sequence {seq} where {e} was expected"))
                            );
                        }
                    }
                    *expected = Some(seq + 1);
                    self.advance(align8(frame_len as u64));
                    let found = if borrow {
                        Found::Mapped { off, frame_len }
                    } else {
                        Found::Copied { plen }
                    };
                    return Ok(Step::Record(seq, capture_ns, found));
                }
            }
        }
    }

    /// The first record that verifies from absolute position `from` on (see `Segment::resync`): moves there and
    /// returns its sequence, adding the bytes passed since `counted` to `bytes`. Without one, moves to the end of
    /// what is published, adds the bytes up to it, and returns `None`.
    fn resync_from(
        &mut self,
        from: u64,
        counted: u64,
        min_seq: Option<u64>,
        bytes: &mut u64,
    ) -> Option<u64> {
        let head = self.seg.published_head();
        self.cached_head = 0;
        if let Some((p, seq)) = self.seg.resync(from, head, min_seq) {
            *bytes += p - counted;
            self.set_pos(p);
            return Some(seq);
        }
        *bytes += head.saturating_sub(counted);
        self.set_pos(head.max(self.pos));
        None
    }

    #[inline]
    fn advance(&mut self, n: u64) {
        self.pos += n;
        self.off += n;
        if self.off >= self.seg.cap {
            self.off = 0;
        }
    }

    /// Before the first read of a local copy's records: the whole file fetched (cold path: once per file).
    fn fetch_records(&mut self) -> Result<()> {
        if let Some(f) = self.fetch.take() {
            f.fetch(&self.seg.path, 0..u64::MAX)
                .map_err(|e| JournalError::io(&self.seg.path, e))?;
        }
        Ok(())
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

    fn lapped(&mut self, expected: &mut Option<u64>) -> JournalError {
        let wanted_seq = expected.unwrap_or(0);
        self.set_pos(self.seg.tail().load(Ordering::Acquire));
        *expected = None;
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

    /// Positions at the first record that satisfies `ge` in this file; returns its sequence (`None` at the end).
    fn seek(&mut self, ge: &dyn Fn(u64, u64) -> bool) -> Result<Option<u64>> {
        self.fetch_records()?;
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
            self.cached_head = 0;
            return Ok(found);
        }
        Err(JournalError::Lapped { wanted_seq: 0 })
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
        Err(JournalError::Lapped { wanted_seq: 0 })
    }
}

impl PackedPos {
    fn new(file: Packed) -> PackedPos {
        PackedPos {
            file: Arc::new(file),
            frame: 0,
            loaded: false,
            plain: Vec::new(),
            at: 0,
            inflater: Inflater::new(),
            failed: None,
            last_loaded: None,
            ahead: None,
            spare: Vec::new(),
        }
    }

    /// Moves to the start of frame `frame` (not yet inflated).
    fn rewind(&mut self, frame: usize) {
        self.frame = frame;
        self.loaded = false;
        self.at = 0;
        self.failed = None;
    }

    /// Inflates frame `k` and stands at its start; `Err` says why it does not read.
    fn load(&mut self, k: usize) -> std::result::Result<(), String> {
        self.rewind(k);
        let streaming = self.last_loaded.is_some_and(|last| last + 1 == k);
        self.last_loaded = Some(k);
        let outcome = match self.ahead.as_mut().and_then(|a| a.take(k)) {
            Some((outcome, buf)) => {
                self.spare = std::mem::replace(&mut self.plain, buf);
                outcome
            }
            None => self.file.load(k, &mut self.inflater, &mut self.plain),
        };
        if streaming && k + 1 < self.file.frames.len() {
            if self.ahead.is_none() {
                self.ahead = ReadAhead::start(Arc::clone(&self.file));
            }
            if let Some(ahead) = &mut self.ahead {
                ahead.request(k + 1, std::mem::take(&mut self.spare));
            }
        }
        outcome?;
        self.loaded = true;
        Ok(())
    }

    fn corrupt(&mut self, k: usize, reason: String) -> JournalError {
        self.failed = Some(k);
        JournalError::CorruptRecord {
            path: self.file.path.clone(),
            offset: self.file.frames.get(k).map_or(self.file.len, |e| e.offset),
            reason,
        }
    }

    fn step(
        &mut self,
        expected: &mut Option<u64>,
        verify: bool,
        archive_dir: bool,
    ) -> Result<Step> {
        loop {
            if !self.loaded {
                if self.frame >= self.file.frames.len() {
                    // Nothing is ever added to a compressed file. Reading an archive directory, the next segment
                    // follows, if there is one: a compressed segment may be the last (a writer never appends
                    // after it).
                    let index = self.file.header.info.segment_index;
                    let next = self
                        .file
                        .path
                        .parent()
                        .filter(|_| archive_dir)
                        .map(|dir| archive::segment_path(dir, index + 1));
                    return Ok(if next.is_some_and(|p| p.exists()) {
                        Step::SegmentEnd
                    } else {
                        Step::CaughtUp
                    });
                }
                let k = self.frame;
                if let Err(why) = self.load(k) {
                    return Err(self.corrupt(k, why));
                }
            }
            if self.at >= self.plain.len() {
                self.rewind(self.frame + 1);
                continue;
            }
            let k = self.frame;
            let r = match packed::record_at(&self.plain, self.at, verify) {
                Ok(r) => r,
                Err(why) => return Err(self.corrupt(k, format!("compressed frame {k}: {why}"))),
            };
            if let Some(e) = *expected {
                if e != r.seq {
                    let why = format!(
                        "compressed frame {k}: sequence {} where {e} was expected",
                        r.seq
                    );
                    return Err(self.corrupt(k, why));
                }
            }
            *expected = Some(r.seq + 1);
            let found = Found::Inflated {
                at: self.at,
                plen: r.payload.len(),
            };
            self.at += r.size;
            return Ok(Step::Record(r.seq, r.capture_time_ns, found));
        }
    }

    /// Stands at the first frame after `failed` that reads, adding the compressed bytes passed (`failed`'s
    /// included) to `bytes`; returns its first sequence, or `None` (at the end) if none does.
    fn resume_after(&mut self, failed: usize, bytes: &mut u64) -> Option<u64> {
        let mut k = failed;
        if let Some(e) = self.file.frames.get(k) {
            *bytes += e.stored;
        }
        k += 1;
        self.resume_from(k, bytes)
    }

    /// The same from the first frame.
    fn resume_after_start(&mut self, bytes: &mut u64) -> Option<u64> {
        self.resume_from(0, bytes)
    }

    fn resume_from(&mut self, mut k: usize, bytes: &mut u64) -> Option<u64> {
        while k < self.file.frames.len() {
            let e = self.file.frames[k];
            if !e.damaged && self.load(k).is_ok() {
                return Some(e.first_seq);
            }
            *bytes += e.stored;
            k += 1;
        }
        self.rewind(self.file.frames.len());
        None
    }

    /// Positions at the first record that satisfies `ge`: the first frame whose last record does is inflated and
    /// walked. Returns that record's sequence (`None` at the end). A frame that does not inflate is left to
    /// `next()` to report.
    fn seek(&mut self, ge: &dyn Fn(u64, u64) -> bool) -> Option<u64> {
        let frames = &self.file.frames;
        let Some(k) = frames
            .iter()
            .position(|e| !e.damaged && ge(e.end_seq() - 1, e.last_time))
        else {
            self.rewind(frames.len());
            return None;
        };
        let first = frames[k].first_seq;
        if self.load(k).is_err() {
            self.rewind(k);
            return Some(first);
        }
        let mut at = 0;
        while at < self.plain.len() {
            match packed::record_at(&self.plain, at, false) {
                Ok(r) if ge(r.seq, r.capture_time_ns) => {
                    self.at = at;
                    return Some(r.seq);
                }
                Ok(r) => at += r.size,
                Err(_) => break,
            }
        }
        // The index said a record here satisfies `ge`, the frame says otherwise (damage the checksums will
        // report): the frame's start.
        self.at = 0;
        Some(first)
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
        let pos = match &self.cur {
            Current::Plain(p) => p.pos,
            Current::Packed(p) => p.frame as u64,
        };
        f.debug_struct("Reader")
            .field("path", &self.root)
            .field("segment", &self.index())
            .field("compressed", &self.compressed())
            .field("pos", &pos)
            .field("expected", &self.expected)
            .finish()
    }
}
