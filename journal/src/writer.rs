//! The single writer: append, batches, durability, ring overwrite, archive rolling, and crash recovery on open.

use std::any::Any;
use std::collections::VecDeque;
use std::mem::MaybeUninit;
use std::ops::RangeInclusive;
use std::path::{Path, PathBuf};
use std::sync::atomic::{fence, AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use crate::archive;
use crate::crc;
use crate::error::{JournalError, Result};
use crate::segment::{
    align8, Frame, HeaderInfo, Mode, Prefaulted, Prepared, Segment, PAD_FLAG, RECORD_HEADER_SIZE,
    STATE_SEALED, STATE_WRITER_OPEN,
};

/// Where records live.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    /// One file of fixed capacity (data bytes, rounded up to 4 KiB); the oldest records are overwritten.
    Ring {
        /// Data bytes of the ring; the file is this plus the 4096-byte header.
        capacity: u64,
    },
    /// A directory of segment files of `segment_size` data bytes each; full segments are sealed, never overwritten.
    Archive {
        /// Data bytes of each segment file. A payload may be at most half of it, less the 24-byte record header.
        segment_size: u64,
    },
}

/// When appended bytes are forced to stable storage with `msync`. Records are visible to readers (and survive a
/// killed process) as soon as they are published, whatever the policy; the policy only matters for power loss or
/// a kernel crash.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Durability {
    /// Never msync explicitly; the kernel writes pages back on its own schedule.
    None,
    /// A background thread msyncs the journal every interval.
    Periodic(Duration),
    /// msync the bytes of every `append` / batch before it returns.
    PerBatch,
}

/// Options for [`Writer::open`].
#[derive(Debug, Clone)]
pub struct WriterOptions {
    /// Used when the journal is created; an existing journal keeps its own layout (a mismatched mode is an error).
    pub layout: Layout,
    /// When appended bytes are msynced; [`Durability::None`] unless set.
    pub durability: Durability,
    /// Stored in the header of files this writer creates (program, source endpoint, ...).
    pub description: String,
    /// The sequence of a new archive's first record (1 unless set): a journal that continues another (the next
    /// period of a history) continues its sequence. An existing journal keeps its own.
    pub first_seq: u64,
}

impl WriterOptions {
    /// A ring of `capacity` data bytes, no explicit msync, no description.
    pub fn ring(capacity: u64) -> Self {
        WriterOptions {
            layout: Layout::Ring { capacity },
            durability: Durability::None,
            description: String::new(),
            first_seq: 1,
        }
    }

    /// An archive of `segment_size`-byte segments, no explicit msync, no description.
    pub fn archive(segment_size: u64) -> Self {
        WriterOptions {
            layout: Layout::Archive { segment_size },
            durability: Durability::None,
            description: String::new(),
            first_seq: 1,
        }
    }

    /// Sets when appended bytes are forced to disk.
    pub fn durability(mut self, durability: Durability) -> Self {
        self.durability = durability;
        self
    }

    /// Sets the sequence a new archive starts at (at least 1; a ring always starts at 1).
    pub fn first_seq(mut self, seq: u64) -> Self {
        self.first_seq = seq.max(1);
        self
    }

    /// Sets the free text stored in the header of files this writer creates (at most
    /// [`MAX_DESCRIPTION`](crate::MAX_DESCRIPTION) bytes; longer text is cut at a character boundary).
    pub fn description(mut self, description: impl Into<String>) -> Self {
        self.description = description.into();
        self
    }
}

/// What [`Writer::open`] found and did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RecoveryReport {
    /// No journal existed: a new one was created.
    pub created: bool,
    /// The previous writer closed the journal cleanly (false after a crash or kill).
    pub clean_shutdown: bool,
    /// Complete records found in the scanned file (the ring, or the last archive segment).
    pub records: u64,
    /// Sequence the next append gets.
    pub next_seq: u64,
    /// Complete records that had been written but not yet published when the previous writer died; kept.
    pub unpublished_records_kept: u64,
    /// Bytes of torn (incomplete) writes past the last complete record; discarded.
    pub discarded_bytes: u64,
    /// Bytes the previous writer had published that fail validation (media corruption, or power loss with
    /// `Durability::None`); discarded, and logged as an error.
    pub lost_published_bytes: u64,
    /// Archive segments found unsealed before the last one (a crash while rolling) and sealed now.
    pub segments_sealed: u64,
}

struct Flusher {
    shared: Arc<FlusherShared>,
    thread: Option<std::thread::JoinHandle<()>>,
}

struct FlusherShared {
    segment: Mutex<(Arc<Segment>, bool)>,
    wake: Condvar,
}

impl Flusher {
    fn start(segment: Arc<Segment>, every: Duration) -> Flusher {
        let shared = Arc::new(FlusherShared {
            segment: Mutex::new((segment, false)),
            wake: Condvar::new(),
        });
        let worker = Arc::clone(&shared);
        let thread = std::thread::Builder::new()
            .name("journal-msync".into())
            .spawn(move || {
                let mut guard = match worker.segment.lock() {
                    Ok(g) => g,
                    Err(_) => return,
                };
                loop {
                    guard = match worker.wake.wait_timeout(guard, every) {
                        Ok((g, _)) => g,
                        Err(_) => return,
                    };
                    if guard.1 {
                        return;
                    }
                    let seg = Arc::clone(&guard.0);
                    drop(guard);
                    if let Err(err) = seg.raw().flush() {
                        tracing::error!(path = %seg.path.display(), "periodic msync failed: {err}");
                    }
                    guard = match worker.segment.lock() {
                        Ok(g) => g,
                        Err(_) => return,
                    };
                }
            })
            .ok();
        Flusher { shared, thread }
    }

    fn set_segment(&self, segment: Arc<Segment>) {
        if let Ok(mut g) = self.shared.segment.lock() {
            g.0 = segment;
        }
    }
}

impl Drop for Flusher {
    fn drop(&mut self) {
        if let Ok(mut g) = self.shared.segment.lock() {
            g.1 = true;
        }
        self.shared.wake.notify_all();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The ring-lap counters a writer continues from: the stored ones, or (damaged) recomputed from the records and
/// stored back with a valid checksum.
fn seg_counters(seg: &Segment) -> (u64, u64, u64) {
    let (counters, note) = seg.overwritten_checked(false);
    if let Some(note) = note {
        tracing::warn!(path = %seg.path.display(), "{note}");
        seg.store_overwritten(counters.0, counters.1, counters.2);
    }
    counters
}

/// The one writer of a journal (enforced with an exclusive `flock`, released by the kernel if the process dies).
pub struct Writer {
    root: PathBuf,
    mode: Mode,
    seg: Arc<Segment>,
    /// Absolute position just past the last written record (published or not).
    head: u64,
    /// Absolute position of the oldest intact record (ring).
    tail: u64,
    /// `head % capacity` and `tail % capacity`, tracked so the hot path never divides.
    head_off: u64,
    tail_off: u64,
    /// Absolute position up to which bytes have been msynced.
    synced: u64,
    next_seq: u64,
    max_payload: usize,
    segment_size: u64,
    description: String,
    durability: Durability,
    flusher: Option<Flusher>,
    recovery: RecoveryReport,
    /// Archive mode: the directory lock file, held for the writer's life.
    _dir_lock: Option<std::fs::File>,
    /// What ring laps have overwritten (persisted in the header whenever the tail moves).
    overwritten: OverwriteStats,
    /// Told about each record just before a ring lap overwrites it.
    on_overwrite: Option<Box<dyn OverwriteSink>>,
    /// `overwritten` changed since it was last stored in the header (stored at the next publish).
    counters_dirty: bool,
    /// Data bytes of the current file (copied from the segment so the hot path need not reload it after its
    /// stores into the map).
    cap: u64,
    /// Absolute position up to which records can be written with no overwrite, padding or roll: for a ring the
    /// lower of `tail + cap` and the end of the current lap, for an archive the segment's end. One comparison
    /// with it is the whole room check of an append that needs nothing done. A ring also comes back at
    /// `next_mark_at`, to leave a [`Mark`].
    room_end: u64,
    /// Ring: record starts this writer left behind, oldest first, at least [`mark_spacing`] apart and none behind
    /// `tail`, so a lapped ring with no overwrite hook moves its tail to one of them with arithmetic instead of
    /// reading every record it passes. Bounded: a ring holds at most `cap / mark_spacing + 2` of them.
    marks: VecDeque<Mark>,
    /// The first absolute position at which a record start becomes the next mark.
    next_mark_at: u64,
    /// Data offset of the last record this writer wrote ([`NO_FRAME`] before its first).
    last_record_off: u64,
    /// Bytes of padding this writer has left at the ends of ring laps (frames and short remainders alike).
    padding: u64,
    /// Archive: the next segment's file, being made on a thread of its own ([`Segment::prepare`]) so that a roll
    /// on the recording thread only writes a header and renames.
    preparing: Option<Preparing>,
    /// Archive: what the preparer's pre-faulting of the segments this writer rolled into achieved.
    prefault: PrefaultStats,
    /// Archive: bytes a second the last complete pre-fault managed ([`PREFAULT_RATE_GUESS`] before one), which
    /// decides when the next one starts ([`prefault_due`]).
    prefault_rate: Arc<AtomicU64>,
}

/// What a pre-fault is assumed to manage before this writer has timed one: 1 GiB/s (a 1 GiB segment took about a
/// second of a core on the 2-core development machine).
const PREFAULT_RATE_GUESS: u64 = 1 << 30;

/// However fast pre-faults have been, the preparer starts at least this long before the current segment is full:
/// a small segment's pre-fault still waits for a core, and the time to full is an estimate.
const PREFAULT_MIN_LEAD: Duration = Duration::from_secs(2);

/// Whether the preparer should start faulting the next segment in: once the current one, filled at the pace it has
/// been so far (`head` bytes of `capacity` in `elapsed`), will be full within twice the time a pre-fault of a
/// segment takes at `prefault_rate` bytes a second, or within [`PREFAULT_MIN_LEAD`] if that is longer. A writer
/// that has written nothing yet never is.
fn prefault_due(head: u64, capacity: u64, elapsed: Duration, prefault_rate: u64) -> bool {
    if head == 0 {
        return false;
    }
    let lead_ns = (2 * u128::from(capacity) * 1_000_000_000 / u128::from(prefault_rate.max(1)))
        .max(PREFAULT_MIN_LEAD.as_nanos());
    // remaining / (head / elapsed) <= lead, without dividing (u128: no overflow for any real segment or run).
    let remaining = u128::from(capacity.saturating_sub(head));
    remaining * elapsed.as_nanos() <= lead_ns * u128::from(head)
}

/// How often a preparer waiting to pre-fault looks at the current segment's head (and at a roll's cancel).
const PREFAULT_WAIT_POLL: Duration = Duration::from_millis(5);

/// The next archive segment being made and pre-faulted on its own thread (see `Writer::prepare_next`).
struct Preparing {
    /// The index of the segment it is for.
    index: u64,
    /// Set by a roll that needs the segment now: the thread stops pre-faulting and hands over what it has.
    cancel: Arc<AtomicBool>,
    handle: std::thread::JoinHandle<Result<(Prepared, Prefaulted)>>,
}

impl Preparing {
    /// Stops the pre-faulting and waits for the file (its creation is not cut short: a roll needs it whole).
    fn finish(self) -> Option<(Prepared, Prefaulted)> {
        self.cancel.store(true, Ordering::Relaxed);
        self.handle.join().ok().and_then(|r| r.ok())
    }
}

/// How much of the archive segments a writer rolled into were already faulted in by the preparer, off the
/// recording thread (the rest faulted on first write, on the recording thread).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PrefaultStats {
    /// Rolls into a prepared segment whose every page was already faulted in.
    pub complete: u64,
    /// Rolls into a segment that was only partly faulted in (the roll came first, or the kernel refused), or not
    /// prepared at all.
    pub partial: u64,
    /// Bytes of those segments that were faulted in before the roll.
    pub bytes: u64,
}

/// `last_record_off` before this writer has written a record.
const NO_FRAME: u64 = u64::MAX;

/// A record start in a ring, with what the writer knew there: enough to move the tail from one mark to a later
/// one and account exactly for the records it passes without reading them.
#[derive(Debug, Clone, Copy)]
struct Mark {
    /// Absolute position of the record.
    pos: u64,
    /// Its sequence.
    seq: u64,
    /// `Writer::padding` when it was written: the padding between two marks is the difference.
    padding: u64,
    /// Data offset of the record just before it, whose length word is cleared once the tail jumps to this mark
    /// (see `Writer::advance_tail`).
    prev_record_off: u64,
}

/// What ring laps have overwritten so far (all zero for an archive). Persisted in the journal header, so it
/// survives reopening and is reported by [`crate::summarize`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct OverwriteStats {
    /// Records overwritten.
    pub records: u64,
    /// Bytes of those records (frames, 8-aligned, padding excluded).
    pub bytes: u64,
    /// Times the oldest record position wrapped past the end of the ring.
    pub laps: u64,
}

/// A record a ring lap is about to overwrite, borrowed from the map just before its bytes are reused.
#[derive(Debug, Clone, Copy)]
pub struct OverwrittenRecord<'a> {
    /// Its journal sequence.
    pub seq: u64,
    /// Its capture time.
    pub capture_time_ns: u64,
    /// Its payload (as written by this journal's writer; the checksum is not re-checked on this path).
    pub payload: &'a [u8],
}

/// Told about each record a ring lap overwrites (see [`Writer::set_on_overwrite`]). Any
/// `FnMut(OverwrittenRecord) + Send` closure is one; a type of its own can also be taken back out with
/// [`Writer::overwrite_sink_mut`], so the layer above can read what it gathered without sharing it behind a lock
/// that every overwritten record would take.
pub trait OverwriteSink: Any + Send {
    /// `record` is about to be overwritten. Runs inside an append, on the writer's thread: must not block.
    fn overwritten(&mut self, record: OverwrittenRecord<'_>);

    /// `records` (oldest first) are about to be overwritten. The writer hands them over a group at a time, one
    /// call through the sink's vtable per group instead of per record; the provided loop calls
    /// [`OverwriteSink::overwritten`] on each, statically, so a sink need not write its own. Each record comes
    /// once, through one of the two.
    fn overwritten_group(&mut self, records: &[OverwrittenRecord<'_>]) {
        for record in records {
            self.overwritten(*record);
        }
    }
}

impl<F: FnMut(OverwrittenRecord<'_>) + Send + 'static> OverwriteSink for F {
    fn overwritten(&mut self, record: OverwrittenRecord<'_>) {
        self(record)
    }
}

impl Writer {
    /// Opens the journal at `path` for appending, creating it if missing. An existing journal is recovered: every
    /// complete record is kept, a torn tail is discarded, and [`Writer::recovery`] says what happened.
    pub fn open(path: impl AsRef<Path>, options: &WriterOptions) -> Result<Writer> {
        let path = path.as_ref();
        match options.layout {
            Layout::Ring { capacity } => Self::open_ring(path, round_capacity(capacity)?, options),
            Layout::Archive { segment_size } => {
                Self::open_archive(path, round_capacity(segment_size)?, options)
            }
        }
    }

    fn open_ring(path: &Path, capacity: u64, options: &WriterOptions) -> Result<Writer> {
        if path.is_dir() {
            return Err(JournalError::InvalidOptions(format!(
                "{} is a directory (an archive journal), not a ring file: open it as an archive",
                path.display()
            )));
        }
        let created = !path.exists();
        let seg = if created {
            Segment::create(path, Mode::Ring, capacity, 1, 0, &options.description)?
        } else {
            Segment::open(path, true)?
        };
        if seg.info.mode != Mode::Ring {
            return Err(JournalError::InvalidOptions(format!(
                "{} is not a ring journal",
                path.display()
            )));
        }
        seg.lock_exclusive()?;
        if !created && seg.info.capacity != capacity {
            tracing::info!(
                path = %path.display(),
                "existing ring keeps its capacity of {} bytes (requested {capacity})",
                seg.info.capacity
            );
        }
        let mut recovery = recover(&seg)?;
        recovery.created = created;
        Ok(Self::from_segment(
            path,
            Mode::Ring,
            seg,
            capacity,
            options,
            recovery,
            None,
        ))
    }

    fn open_archive(dir: &Path, segment_size: u64, options: &WriterOptions) -> Result<Writer> {
        if dir.is_file() {
            return Err(JournalError::InvalidOptions(format!(
                "{} is a file (a ring journal), not an archive directory: open it as a ring",
                dir.display()
            )));
        }
        std::fs::create_dir_all(dir).map_err(|e| JournalError::io(dir, e))?;
        let lock = archive::lock_dir(dir)?;
        let segments = archive::list_segments(dir)?;
        let mut sealed_now = 0;
        let (seg, created) = match segments.last() {
            None => (
                Segment::create(
                    &archive::segment_path(dir, 0),
                    Mode::Archive,
                    segment_size,
                    options.first_seq.max(1),
                    0,
                    &options.description,
                )?,
                true,
            ),
            Some((_, last)) => {
                for (_, p) in &segments[..segments.len() - 1] {
                    let s = Segment::open(p, true)?;
                    if !s.sealed() {
                        let _ = recover(&s)?;
                        s.state().store(STATE_SEALED, Ordering::Release);
                        sealed_now += 1;
                    }
                }
                (Segment::open(last, true)?, false)
            }
        };
        if seg.info.mode != Mode::Archive {
            return Err(JournalError::InvalidOptions(format!(
                "{} holds a segment that is not an archive segment",
                dir.display()
            )));
        }
        let mut recovery = recover(&seg)?;
        recovery.created = created;
        recovery.segments_sealed = sealed_now;
        let mut w = Self::from_segment(
            dir,
            Mode::Archive,
            seg,
            segment_size,
            options,
            recovery,
            Some(lock),
        );
        if w.seg.sealed() {
            // The previous writer sealed this segment but died before creating its successor.
            w.roll()?;
        } else {
            w.prepare_next(None);
        }
        Ok(w)
    }

    fn from_segment(
        root: &Path,
        mode: Mode,
        seg: Segment,
        segment_size: u64,
        options: &WriterOptions,
        recovery: RecoveryReport,
        dir_lock: Option<std::fs::File>,
    ) -> Writer {
        let seg = Arc::new(seg);
        let seg_for_counters = Arc::clone(&seg);
        let head = seg.head().load(Ordering::Acquire);
        let tail = seg.tail().load(Ordering::Acquire);
        let cap = seg.cap;
        let flusher = match options.durability {
            Durability::Periodic(every) => Some(Flusher::start(
                Arc::clone(&seg),
                every.max(Duration::from_millis(1)),
            )),
            _ => None,
        };
        if !recovery.clean_shutdown && !recovery.created {
            tracing::warn!(
                path = %root.display(),
                records = recovery.records,
                kept_unpublished = recovery.unpublished_records_kept,
                discarded_bytes = recovery.discarded_bytes,
                "journal was not closed cleanly; recovered"
            );
        }
        Writer {
            root: root.into(),
            mode,
            max_payload: seg.max_payload(),
            seg,
            head,
            tail,
            head_off: head % cap,
            tail_off: tail % cap,
            synced: head,
            next_seq: recovery.next_seq,
            segment_size,
            description: options.description.clone(),
            durability: options.durability,
            flusher,
            recovery,
            _dir_lock: dir_lock,
            overwritten: {
                let (records, bytes, laps) = seg_counters(&seg_for_counters);
                OverwriteStats {
                    records,
                    bytes,
                    laps,
                }
            },
            on_overwrite: None,
            counters_dirty: false,
            cap,
            // A ring's first append comes to `make_room_ring`, which computes the room and starts the marks.
            room_end: match mode {
                Mode::Ring => head,
                Mode::Archive => cap,
            },
            marks: match mode {
                Mode::Ring => VecDeque::with_capacity((cap / mark_spacing(cap)) as usize + 4),
                Mode::Archive => VecDeque::new(),
            },
            next_mark_at: head,
            last_record_off: NO_FRAME,
            padding: 0,
            preparing: None,
            prefault: PrefaultStats::default(),
            prefault_rate: Arc::new(AtomicU64::new(PREFAULT_RATE_GUESS)),
        }
    }

    /// What ring laps have overwritten so far, over the journal's life (all zero for an archive).
    pub fn overwritten(&self) -> OverwriteStats {
        self.overwritten
    }

    /// Tells `sink` about every record just before a ring lap overwrites it, so the layer above can attribute
    /// what was lost (the recorder counts it per publisher). It runs inside `append`, on the writer's thread, and
    /// must not block. A ring with a sink walks every record it overwrites (see the crate docs).
    pub fn set_on_overwrite(&mut self, sink: impl OverwriteSink) {
        self.on_overwrite = Some(Box::new(sink));
    }

    /// The sink given to [`Writer::set_on_overwrite`], if it is a `T`.
    pub fn overwrite_sink_mut<T: OverwriteSink>(&mut self) -> Option<&mut T> {
        let sink: &mut dyn Any = self.on_overwrite.as_deref_mut()?;
        sink.downcast_mut::<T>()
    }

    /// Stores `data` (at most [`crate::APP_META_MAX`] bytes) in the journal header, crash-safe: a reader sees the
    /// previous block or this one, never a torn mix. In an archive it goes to the current segment.
    pub fn set_app_meta(&mut self, data: &[u8]) -> Result<()> {
        self.seg.write_app_meta(data)
    }

    /// Archive: how much of each segment rolled into was faulted in off the recording thread (all zero for a
    /// ring).
    pub fn prefault_stats(&self) -> PrefaultStats {
        self.prefault
    }

    /// Archive: whether the next segment is made and pre-faulted, waiting for the roll (false for a ring, while
    /// the preparer still works or waits until the current segment's pace makes a pre-fault due, and when it
    /// could not start).
    pub fn next_segment_ready(&self) -> bool {
        self.preparing
            .as_ref()
            .is_some_and(|p| p.handle.is_finished())
    }

    /// What opening found: created, clean, records recovered, bytes discarded.
    pub fn recovery(&self) -> &RecoveryReport {
        &self.recovery
    }

    /// Header of the file currently written (the ring, or the current archive segment).
    pub fn header(&self) -> &HeaderInfo {
        &self.seg.info
    }

    /// The journal path (ring file or archive directory).
    pub fn path(&self) -> &Path {
        &self.root
    }

    /// Sequence the next appended record gets. Sequences start at 1 and never repeat or skip.
    pub fn next_seq(&self) -> u64 {
        self.next_seq
    }

    /// Largest payload this journal accepts.
    pub fn max_payload(&self) -> usize {
        self.max_payload
    }

    /// Appends one record and publishes it; returns its journal sequence.
    #[inline]
    pub fn append(&mut self, capture_time_ns: u64, payload: &[u8]) -> Result<u64> {
        let seq = self.write_record(capture_time_ns, payload)?;
        self.commit()?;
        Ok(seq)
    }

    /// Appends every record of `records`, publishing them together (one release store, one msync under
    /// `Durability::PerBatch`). Returns the sequences given, or `None` for an empty batch. If a record fails (too
    /// large), the records before it are still published.
    pub fn append_batch<'a, I>(&mut self, records: I) -> Result<Option<RangeInclusive<u64>>>
    where
        I: IntoIterator<Item = (u64, &'a [u8])>,
    {
        let first = self.next_seq;
        let mut result = Ok(());
        for (t, payload) in records {
            if let Err(e) = self.write_record(t, payload) {
                result = Err(e);
                break;
            }
        }
        self.commit()?;
        result?;
        Ok((self.next_seq > first).then(|| first..=self.next_seq - 1))
    }

    /// Starts a batch: records appended through it become visible together when it is committed (or dropped).
    pub fn batch(&mut self) -> Batch<'_> {
        Batch {
            writer: self,
            committed: false,
        }
    }

    /// Forces everything written so far to stable storage, whatever the durability policy.
    pub fn flush(&mut self) -> Result<()> {
        self.publish();
        self.seg.sync_range(self.synced, self.head)?;
        self.synced = self.head;
        Ok(())
    }

    /// Publishes, syncs (unless `Durability::None`) and marks the journal cleanly closed.
    pub fn close(mut self) -> Result<()> {
        self.shutdown()
    }

    fn shutdown(&mut self) -> Result<()> {
        self.publish();
        self.flusher = None;
        self.seg
            .state()
            .fetch_and(!STATE_WRITER_OPEN, Ordering::Release);
        if self.durability != Durability::None {
            self.seg.sync_range(self.synced, self.head)?;
            self.synced = self.head;
        }
        Ok(())
    }

    fn publish(&mut self) {
        if self.counters_dirty {
            self.counters_dirty = false;
            let o = self.overwritten;
            self.seg.store_overwritten(o.records, o.bytes, o.laps);
        }
        self.seg.head_seq().store(self.next_seq, Ordering::Relaxed);
        self.seg.head().store(self.head, Ordering::Release);
    }

    fn commit(&mut self) -> Result<()> {
        if self.seg.faults() != 0 {
            // The file shrank under the mapping: what was just written landed in zero pages, not the file.
            return Err(self.seg.truncated_under_us());
        }
        self.publish();
        if self.durability == Durability::PerBatch {
            self.seg.sync_range(self.synced, self.head)?;
            self.synced = self.head;
        }
        Ok(())
    }

    /// Writes one record without publishing it. The body is written first and the frame length last (release),
    /// so a record is never half-visible; `head` (published by `commit`) is what readers trust.
    #[inline]
    fn write_record(&mut self, capture_time_ns: u64, payload: &[u8]) -> Result<u64> {
        #[cfg(target_arch = "x86_64")]
        if let Some(hw) = crc::Sse42::detect() {
            return self.write_record_with(hw, capture_time_ns, payload);
        }
        self.write_record_with(crc::Portable, capture_time_ns, payload)
    }

    /// The record path. The common case is one branch: the frame ends below `room_end`, so nothing has to be
    /// padded, overwritten or rolled ([`Writer::make_room`] does that, and on a lapped ring moves `tail` far
    /// enough ahead, [`Writer::advance_tail`], that the records after it take this path too).
    #[inline(always)]
    fn write_record_with<B: crc::BodyStore>(
        &mut self,
        body: B,
        capture_time_ns: u64,
        payload: &[u8],
    ) -> Result<u64> {
        if payload.len() > self.max_payload {
            return Err(self.too_large(payload.len()));
        }
        let frame_len = (RECORD_HEADER_SIZE as usize + payload.len()) as u32;
        let size = align8(frame_len as u64);
        let (start_off, pad) = if self.head + size > self.room_end {
            self.make_room(size)?
        } else {
            (self.head_off, 0)
        };
        let end = self.head + pad + size;
        let seg = &*self.seg;
        // Recovery reports bytes past the last intact record up to `reserve` as a torn write: it covers the frame
        // before any of its bytes is stored.
        seg.reserve().store(end, Ordering::Relaxed);
        let seq = self.next_seq;
        // Every store is an 8-byte atomic at an 8-aligned offset, the same size and alignment readers load with:
        // a lapped ring reader may be copying these bytes right now, and the seqlock protocol (`tail` moved before
        // this write, re-checked by the reader after its copy) only makes that safe if neither side's access is a
        // data race. `room_end` (or `make_room`) leaves `start_off + size <= cap`, so the frame's words lie in
        // the writer's full-length mapping (`data_words` checks it once per frame).
        let words = seg.data_words(start_off, (size / 8) as usize);
        let crc = body.store_body(words, frame_len, seq, capture_time_ns, payload);
        // Length and checksum share the frame's first word, published last (release).
        words[0].store(
            (frame_len as u64 | (crc as u64) << 32).to_le(),
            Ordering::Release,
        );
        self.head = end;
        self.last_record_off = start_off;
        self.head_off = start_off + size;
        if self.head_off == self.cap {
            self.head_off = 0;
        }
        self.next_seq = seq + 1;
        Ok(seq)
    }

    #[cold]
    fn too_large(&self, len: usize) -> JournalError {
        JournalError::RecordTooLarge {
            len,
            max: self.max_payload,
        }
    }

    /// The slow side of `write_record`: returns where a frame of `size` bytes starts and how many bytes of padding
    /// precede it. Ring: pads to the next lap if the frame does not fit before the end, and moves `tail` past
    /// every record the write will overwrite. Archive: rolls to a new segment when this one is full.
    #[inline(never)]
    fn make_room(&mut self, size: u64) -> Result<(u64, u64)> {
        match self.mode {
            Mode::Ring => self.make_room_ring(size),
            Mode::Archive => {
                if self.head + size > self.cap {
                    self.roll()?;
                }
                self.room_end = self.cap;
                Ok((self.head_off, 0))
            }
        }
    }

    /// Ring: returns the data offset where a frame of `size` bytes starts and the padding before it (to the next
    /// lap, if it does not fit before the end), after moving `tail` past every record the write will overwrite
    /// (and telling readers, before writing). Leaves a [`Mark`] at the frame when one is due.
    // Writes the padding frame's length word through the mapping.
    #[allow(unsafe_code)]
    fn make_room_ring(&mut self, size: u64) -> Result<(u64, u64)> {
        let cap = self.cap;
        let rem = cap - self.head_off;
        let pad = if rem < size { rem } else { 0 };
        let start = self.head + pad;
        let end = start + size;
        if start >= self.next_mark_at && self.last_record_off != NO_FRAME {
            self.marks.push_back(Mark {
                pos: start,
                seq: self.next_seq,
                padding: self.padding + pad,
                prev_record_off: self.last_record_off,
            });
            self.next_mark_at = start + mark_spacing(cap);
        }
        if self.tail + cap < end {
            self.advance_tail(end - cap)?;
        }
        // The end of the lap this frame is written in: a frame that would cross it comes back here to pad.
        let lap_end = if pad == 0 {
            self.head - self.head_off + cap
        } else {
            start + cap
        };
        self.room_end = (self.tail + cap).min(lap_end).min(self.next_mark_at);
        if pad == 0 {
            return Ok((self.head_off, 0));
        }
        self.padding += pad;
        self.seg.reserve().store(end, Ordering::Relaxed);
        if pad >= RECORD_HEADER_SIZE {
            // SAFETY: `head_off + pad == cap` with `pad >= 24` and `head_off` 8-aligned, so the word is inside the
            // writer's full-length data region. Readers load frame words with the same 8-byte atomics.
            let word = unsafe { self.seg.data_word(self.head_off) };
            word.store(((PAD_FLAG | pad as u32) as u64).to_le(), Ordering::Release);
        }
        Ok((0, pad))
    }

    /// Ring: moves `tail` to a record start at or past `needed`, accounting for (and showing the overwrite hook)
    /// every record it passes, and tells readers before anything is overwritten.
    ///
    /// A lapped ring overwrites the oldest record at almost every append, and walking the records one by one
    /// means a chain of loads, each waiting for the length word of the one before. Two ways around it:
    ///
    /// - With no overwrite hook, the tail jumps from the mark it stands on to the first mark at or past `needed`:
    ///   the records passed are the difference of the marks' sequences, their bytes the distance less the padding
    ///   between, their laps the lap numbers' difference. Nothing is read.
    /// - With a hook (which must see every record), or while the tail is still among records an earlier writer
    ///   left (no mark there), it walks, [`tail_step`] further than needed, so the appends that follow find room
    ///   without coming back here at every record. The walk stops on the first mark it reaches, and jumps from
    ///   there when it can.
    ///
    /// Either way the records passed become unreadable (and are shown to the hook) a little before their bytes
    /// are reused: the ring always holds at least its capacity less one mark spacing or one step.
    // Clears a passed record's length word through the mapping.
    #[allow(unsafe_code)]
    fn advance_tail(&mut self, needed: u64) -> Result<()> {
        let cap = self.cap;
        let hook = self.on_overwrite.is_some();
        // Never past `head`: the records from there on are the ones being written.
        let target = if hook {
            (needed + tail_step(cap)).min(self.head)
        } else {
            needed
        };
        // The walk works on locals, stored back once: fields of `self` would be stored and reloaded at every
        // frame (the hook call hides whether it could see them), a chain of store-to-load forwards.
        let mut walk = Walk {
            tail: self.tail,
            off: self.tail_off,
            stats: self.overwritten,
            last_record: None,
        };
        let moved = loop {
            while self.marks.front().is_some_and(|m| m.pos < walk.tail) {
                self.marks.pop_front();
            }
            if walk.tail >= target {
                break Ok(());
            }
            let stop = if hook {
                // A hook sees every record: no jump, so the marks matter only once the walk is done (above).
                target
            } else {
                if let Some(&from) = self.marks.front().filter(|m| m.pos == walk.tail) {
                    let i = self.marks.partition_point(|m| m.pos < needed);
                    if let Some(&to) = self.marks.get(i) {
                        walk.stats.records += to.seq - from.seq;
                        walk.stats.bytes += (to.pos - from.pos) - (to.padding - from.padding);
                        walk.stats.laps += to.pos / cap - from.pos / cap;
                        walk.tail = to.pos;
                        walk.off = to.pos % cap;
                        walk.last_record = Some(to.prev_record_off);
                        self.marks.drain(..i);
                        break Ok(());
                    }
                }
                // Walk to the next mark (where a jump can start), or to the target if it comes first.
                self.marks
                    .iter()
                    .map(|m| m.pos)
                    .find(|&p| p > walk.tail)
                    .map_or(target, |p| p.min(target))
            };
            let sink = self.on_overwrite.as_deref_mut();
            if let Err(e) = walk_records(&self.seg, sink, &mut walk, stop) {
                break Err(e);
            }
        };
        let Walk {
            tail,
            off: tail_off,
            stats,
            last_record,
        } = walk;
        (self.tail, self.tail_off, self.overwritten) = (tail, tail_off, stats);
        self.counters_dirty = true;
        // What was passed is gone from readers' view even if the walk failed: the tail must cover it before
        // anything is reused. The counters reach the header at the next publish.
        self.seg.tail().store(self.tail, Ordering::Relaxed);
        moved?;
        // Readers check `tail` after copying a record, so the new tail must be visible before any overwrite: a
        // release fence keeps the stores below after it (on x86 a compiler barrier; stores stay in order).
        fence(Ordering::Release);
        if let Some(off) = last_record {
            // The records passed are still intact in the file, but readers and the hook count them gone. A scan
            // that rebuilds a damaged header takes the first chain of records that reaches the head: the last
            // record passed has its length word cleared, so no chain crosses it and the scan finds this tail, not
            // the records just before it.
            // SAFETY: `off` starts a record this writer wrote or `OwnFrames::at` accepted (8-aligned, its
            // header inside the writer's full-length data region); readers load it with the same 8-byte atomics,
            // and the tail moved past it above, before this store.
            unsafe { self.seg.data_word(off) }.store(0, Ordering::Relaxed);
        }
        Ok(())
    }

    /// Archive: publish and seal the current segment, continue in a new one whose base is the next sequence.
    fn roll(&mut self) -> Result<()> {
        self.publish();
        if self.durability != Durability::None {
            self.seg.sync_range(self.synced, self.head)?;
        }
        let next_index = self.seg.info.segment_index + 1;
        let path = archive::segment_path(&self.root, next_index);
        let prepared = match self.preparing.take() {
            // A failed preparation (a full disk) is tried again below, where its error stops the roll.
            Some(p) if p.index == next_index => p.finish(),
            Some(p) => {
                if let Some((p, _)) = p.finish() {
                    p.discard();
                }
                None
            }
            None => None,
        };
        let faulted = prepared.as_ref().map(|p| p.1).unwrap_or_default();
        let prepared = prepared.map(|p| p.0);
        let next = if path.exists() {
            // Left by a writer that died right after creating it; it is empty or was recovered as the last one.
            if let Some(p) = prepared {
                p.discard();
            }
            Segment::open(&path, true)?
        } else if let Some(p) = prepared {
            Segment::finish(
                p,
                &path,
                Mode::Archive,
                self.next_seq,
                next_index,
                &self.description,
                self.durability != Durability::None,
            )?
        } else {
            Segment::create(
                &path,
                Mode::Archive,
                self.segment_size,
                self.next_seq,
                next_index,
                &self.description,
            )?
        };
        next.state().store(STATE_WRITER_OPEN, Ordering::Release);
        // Seal only once the successor exists, so a reader that sees "sealed" always finds the next file.
        self.seg.state().store(STATE_SEALED, Ordering::Release);
        if self.durability != Durability::None {
            self.seg.sync_range(self.head, self.head)?;
        }
        if faulted.complete {
            self.prefault.complete += 1;
        } else {
            self.prefault.partial += 1;
        }
        self.prefault.bytes += faulted.bytes;
        let next = Arc::new(next);
        if let Some(f) = &self.flusher {
            f.set_segment(Arc::clone(&next));
        }
        let sealed = std::mem::replace(&mut self.seg, next);
        self.cap = self.seg.cap;
        self.room_end = self.cap;
        self.head = self.seg.head().load(Ordering::Acquire);
        self.head_off = self.head;
        self.tail = 0;
        self.tail_off = 0;
        self.synced = self.head;
        self.prepare_next(Some(sealed));
        Ok(())
    }

    /// Archive: off the recording thread, lets go of the segment just sealed (`sealed`) and makes the successor
    /// of the current one. Both were a roll's cost: unmapping a full 32 MiB segment took 1.5-2.6 ms, creating
    /// the next one (reserving and syncing its blocks) 18-46 ms on a busy disk; a roll now writes a header,
    /// renames and maps (about 0.1-0.2 ms). `cargo bench -p tickbox-journal --bench append` prints the roll's
    /// cost.
    fn prepare_next(&mut self, sealed: Option<Arc<Segment>>) {
        if self.mode != Mode::Archive {
            return;
        }
        let index = self.seg.info.segment_index + 1;
        let path = archive::segment_path(&self.root, index);
        let size = self.segment_size;
        let cancel = Arc::new(AtomicBool::new(false));
        let stop = Arc::clone(&cancel);
        let current = Arc::clone(&self.seg);
        let prefault_rate = Arc::clone(&self.prefault_rate);
        let spawned = std::thread::Builder::new()
            .name("journal-prepare".into())
            .spawn(move || {
                drop(sealed);
                let mut prepared = Segment::prepare(&path, size)?;
                // Faulting a segment in is the kernel zeroing every page of it: about a second of a core for 1 GiB
                // here. Done as soon as the previous segment opened, it took that core from the recorder and the
                // feed beside it on a 2-core machine for a segment a short recording never reached (`bench record`
                // of 1 M records: the recorder at 0.52-0.62x the subscriber's rate, 0.98-1.13x when it waited). It
                // starts once the current segment, at the pace it is being filled, will be full within twice the
                // time a pre-fault takes ([`prefault_due`]): at once for a writer at memory speed, later for a
                // recorder, never in a short run.
                let opened = std::time::Instant::now();
                let rate = prefault_rate.load(Ordering::Relaxed);
                while !prefault_due(
                    current.head().load(Ordering::Relaxed),
                    current.cap,
                    opened.elapsed(),
                    rate,
                ) {
                    if stop.load(Ordering::Relaxed) {
                        return Ok((prepared, Prefaulted::default()));
                    }
                    std::thread::sleep(PREFAULT_WAIT_POLL);
                }
                drop(current);
                let began = std::time::Instant::now();
                let faulted = prepared.prefault(&stop);
                if faulted.complete {
                    let ns = began.elapsed().as_nanos().max(1);
                    let measured =
                        (u128::from(faulted.bytes) * 1_000_000_000 / ns).min(u128::from(u64::MAX));
                    prefault_rate.store(measured as u64, Ordering::Relaxed);
                }
                Ok((prepared, faulted))
            });
        // No thread (resource limits): the sealed segment was dropped here with the closure, and the roll
        // creates the next one itself, as it always could.
        self.preparing = spawned.ok().map(|handle| Preparing {
            index,
            cancel,
            handle,
        });
    }
}

impl Drop for Writer {
    fn drop(&mut self) {
        if let Some((p, _)) = self.preparing.take().and_then(Preparing::finish) {
            p.discard();
        }
        if let Err(err) = self.shutdown() {
            tracing::error!(path = %self.root.display(), "closing journal: {err}");
        }
    }
}

/// A group of appends made visible together. Dropping it commits.
pub struct Batch<'w> {
    writer: &'w mut Writer,
    committed: bool,
}

impl Batch<'_> {
    /// Writes one record (not yet visible to readers); returns its sequence.
    #[inline]
    pub fn append(&mut self, capture_time_ns: u64, payload: &[u8]) -> Result<u64> {
        self.writer.write_record(capture_time_ns, payload)
    }

    /// Publishes the batch (and msyncs it under `Durability::PerBatch`).
    pub fn commit(mut self) -> Result<()> {
        self.committed = true;
        self.writer.commit()
    }
}

impl Drop for Batch<'_> {
    fn drop(&mut self) {
        if self.committed {
            return;
        }
        if let Err(err) = self.writer.commit() {
            tracing::error!("committing journal batch: {err}");
        }
    }
}

/// How far past what a frame needs a lapped ring with an overwrite hook walks its tail (see
/// `Writer::advance_tail`): 1/64 of the capacity, at most [`STEP_MAX`]. The ring's retention shrinks by at most
/// that much.
///
/// The walk reads the records it passes, one after the other, and those lines are about to be written anyway: a
/// short step leaves them in the first-level cache for the stores that follow; a step of 64 KiB was slower than
/// none (the lines it read were evicted again before the writer reached them). Measured with 100-byte records in
/// a 256 MiB ring, alternating the ways in one process over the same ring (medians of 41-51 blocks of 200,000
/// records), with [`PREFETCH_DISTANCE`]: a 2 KiB step took 24.9 ns a record where 1 KiB took 25.5 (lines warm in
/// the last-level cache); with lines in no cache, 33.0 ns where 4 KiB took 33.4 and a 1 KiB step with one 1 KiB
/// prefetch burst per walk (the way before this one) 35.0. Unhooked appends took 23.4.
const STEP_MAX: u64 = 2048;

fn tail_step(cap: u64) -> u64 {
    (cap / 64).min(STEP_MAX)
}

/// How far ahead of the record it stands on a tail walk asks for the lines of the records to come: those of the
/// next walk or the one after, so they have arrived when it runs. Asking for each record's two lines as the walk
/// passes it spreads the requests over the walk (asking for a whole step's lines at once was slower, see
/// [`STEP_MAX`]). Without the second line of each record (the walk reads only the first; the appends write both)
/// appends were 25% slower; distances of 2-16 KiB measured alike, 1 KiB and less slower.
const PREFETCH_DISTANCE: u64 = 4096;

/// The records of a walk's group, once written.
///
/// # Safety
///
/// Every entry of `group` has been written.
#[allow(unsafe_code)]
#[inline(always)]
unsafe fn assume_init<'g, 'a>(
    group: &'g [MaybeUninit<OverwrittenRecord<'a>>],
) -> &'g [OverwrittenRecord<'a>] {
    // SAFETY: the caller guarantees every entry is initialised; `MaybeUninit<T>` has `T`'s layout.
    unsafe {
        &*(group as *const [MaybeUninit<OverwrittenRecord<'a>>] as *const [OverwrittenRecord<'a>])
    }
}

/// Most records a tail walk gathers before it shows them to the overwrite sink.
const GROUP: usize = 16;

/// Where a tail walk stands: the locals of [`Writer::advance_tail`], stored back into the writer once.
struct Walk {
    tail: u64,
    off: u64,
    stats: OverwriteStats,
    /// Data offset of the last record passed.
    last_record: Option<u64>,
}

/// Moves `walk` record by record to the first frame start at or past `stop`, counting every record it passes and
/// showing each to `sink`. The per-record work is the length word's load and the checks that keep the walk inside
/// the data region (a reopened ring's oldest records were written by an earlier writer, from disk).
#[allow(unsafe_code)]
#[inline(always)]
fn walk_records(
    seg: &Segment,
    mut sink: Option<&mut dyn OverwriteSink>,
    walk: &mut Walk,
    stop: u64,
) -> Result<()> {
    let corrupt = |off: u64| JournalError::CorruptRecord {
        path: seg.path.clone(),
        offset: crate::segment::HEADER_SIZE + off,
        reason: "writer found an invalid frame in its own published region".into(),
    };
    let Some(frames) = seg.own_frames() else {
        return Err(corrupt(walk.off));
    };
    let cap = seg.cap;
    let (mut tail, mut off) = (walk.tail, walk.off);
    let mut stats = walk.stats;
    let mut last_record = walk.last_record;
    // The records are gathered and shown to the sink a group at a time: a call per record through the vtable
    // spills the walk's state around it. Left uninitialised: filling it would cost as many stores per walk as a
    // full group's records.
    let mut group = [const { MaybeUninit::<OverwrittenRecord<'_>>::uninit() }; GROUP];
    let mut grouped = 0;
    let moved = loop {
        if tail >= stop {
            break Ok(());
        }
        // Two lines a record, a fixed distance ahead: the walks to come read them, and the appends after those
        // write them. Spread over the walk, the loads overlap with it instead of queueing behind a burst.
        frames.prefetch(off + PREFETCH_DISTANCE);
        frames.prefetch(off + PREFETCH_DISTANCE + 64);
        let Some((n, frame_len)) = frames.at(off) else {
            break Err(corrupt(off));
        };
        if frame_len != 0 {
            stats.records += 1;
            stats.bytes += n;
            last_record = Some(off);
            if let Some(sink) = sink.as_deref_mut() {
                // SAFETY: `at` accepted a record of `frame_len` bytes at `off`. This is the journal's single
                // writer (exclusive flock) reading records before it overwrites them; readers only ever load, so
                // nothing writes these bytes while the borrows (which end with this walk, before the tail is
                // published and anything is overwritten) live.
                let (seq, capture_time_ns, payload) = unsafe { frames.record(off, frame_len) };
                group[grouped].write(OverwrittenRecord {
                    seq,
                    capture_time_ns,
                    payload,
                });
                grouped += 1;
                if grouped == GROUP {
                    // SAFETY: all `GROUP` entries were written above since the last call.
                    sink.overwritten_group(unsafe { assume_init(&group) });
                    grouped = 0;
                }
            }
        }
        tail += n;
        off += n;
        if off >= cap {
            off = 0;
            stats.laps += 1;
        }
    };
    if let Some(sink) = sink {
        if grouped != 0 {
            // SAFETY: the first `grouped` entries were written since the last call.
            sink.overwritten_group(unsafe { assume_init(&group[..grouped]) });
        }
    }
    *walk = Walk {
        tail,
        off,
        stats,
        last_record,
    };
    moved
}

/// How far apart a ring's [`Mark`]s are: 1/1024 of the capacity, at least 4 KiB (but no more than 1/64 of a small
/// ring), at most 1 MiB. A jumping tail passes at most that much more than it must, so it is also what the ring's
/// retention may fall short of its capacity by. A ring holds at most `capacity / spacing + 2` marks of 32 bytes:
/// 1,026 up to a 1 GiB ring, 16,386 (512 KiB) for a 16 GiB one.
fn mark_spacing(cap: u64) -> u64 {
    (cap / 1024).clamp(4096, 1 << 20).min(cap / 64)
}

fn round_capacity(capacity: u64) -> Result<u64> {
    let c = capacity.max(crate::segment::MIN_CAPACITY);
    c.checked_add(4095)
        .map(|c| c & !4095)
        .ok_or_else(|| JournalError::InvalidOptions(format!("capacity {capacity} too large")))
}

/// Scans from the oldest record, keeps the longest chain of complete, checksummed, consecutive records, and resets
/// the published head to its end.
pub(crate) fn recover(seg: &Segment) -> Result<RecoveryReport> {
    let cap = seg.cap;
    let state = seg.state().load(Ordering::Acquire);
    let tail = seg.tail().load(Ordering::Acquire);
    let stored_head = seg.head().load(Ordering::Acquire);
    let reserve = seg.reserve().load(Ordering::Acquire).max(stored_head);
    let limit = if seg.info.mode == Mode::Ring {
        tail + cap
    } else {
        cap
    };
    let mut p = tail;
    let mut good_end = tail;
    let mut expected = (seg.info.mode == Mode::Archive).then_some(seg.info.base_seq);
    let mut records = 0u64;
    let mut unpublished = 0u64;
    let mut last_seq = None;
    while p < limit {
        match seg.frame_at(p) {
            Frame::Skip(n) | Frame::Pad(n) => {
                if seg.info.mode == Mode::Archive || p + n > limit {
                    break;
                }
                p += n;
            }
            Frame::Record {
                frame_len,
                crc,
                seq,
                ..
            } => {
                let end = p + align8(frame_len as u64);
                // Records the repair of a damaged header checksummed on this open are not checksummed twice.
                let checked = seg.verified.is_some_and(|(from, to)| from <= p && p < to);
                if end > limit
                    || expected.is_some_and(|e| e != seq)
                    || !(checked || seg.crc_ok(p, frame_len, crc))
                {
                    break;
                }
                records += 1;
                if p >= stored_head {
                    unpublished += 1;
                }
                expected = Some(seq + 1);
                last_seq = Some(seq);
                p = end;
                good_end = end;
            }
            Frame::Invalid(_) => break,
        }
    }
    let next_seq = match last_seq {
        Some(s) => s + 1,
        None => seg
            .head_seq()
            .load(Ordering::Acquire)
            .max(seg.info.base_seq)
            .max(1),
    };
    let lost = stored_head.saturating_sub(good_end);
    if lost > 0 {
        tracing::error!(
            path = %seg.path.display(),
            lost_bytes = lost,
            "published records failed validation during recovery (media corruption or power loss); truncated"
        );
    }
    seg.head_seq().store(next_seq, Ordering::Relaxed);
    seg.head().store(good_end, Ordering::Release);
    seg.reserve().store(good_end, Ordering::Relaxed);
    seg.state().fetch_or(STATE_WRITER_OPEN, Ordering::Release);
    Ok(RecoveryReport {
        created: false,
        clean_shutdown: state & STATE_WRITER_OPEN == 0,
        records,
        next_seq,
        unpublished_records_kept: unpublished,
        discarded_bytes: reserve.saturating_sub(good_end),
        lost_published_bytes: lost,
        segments_sealed: 0,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const GIB: u64 = 1 << 30;
    const MB: u64 = 1_000_000;

    #[test]
    fn a_prefault_is_due_when_the_segment_will_be_full_within_twice_its_time() {
        let ms = Duration::from_millis;
        // Nothing written: never, however long.
        assert!(!prefault_due(0, GIB, ms(60_000), GIB));
        // A writer at memory speed (64 MiB in 10 ms): at once.
        assert!(prefault_due(64 << 20, GIB, ms(10), GIB));
        // A recorder at 300 MB/s, a pre-fault at 1 GiB/s (about 1.07 s, so due at 2.15 s before full): not after
        // 120 MB (2.9 s to go), due after 500 MB (1.9 s to go).
        assert!(!prefault_due(120 * MB, GIB, ms(400), GIB));
        assert!(prefault_due(500 * MB, GIB, ms(1_667), GIB));
        // With pre-faults measured four times as fast it waits for the floor instead: 2 s before full.
        assert!(!prefault_due(350 * MB, GIB, ms(1_167), 4 * GIB));
        assert!(prefault_due(500 * MB, GIB, ms(1_667), 4 * GIB));
        // A small segment filled slowly (1 MiB at 4 MB/s: a quarter in 65 ms) is due within the floor.
        assert!(prefault_due(256 << 10, 1 << 20, ms(65), GIB));
        // A full segment is due, and so is one past its capacity (no underflow).
        assert!(prefault_due(GIB, GIB, ms(1), 1));
        assert!(prefault_due(GIB + 8, GIB, ms(1), 1));
        // A zero rate is read as 1 byte a second, not a division by zero.
        assert!(prefault_due(GIB / 2, GIB, ms(1), 0));
    }
}
