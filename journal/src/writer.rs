//! The single writer: append, batches, durability, ring overwrite, archive rolling, and crash recovery on open.

use std::any::Any;
use std::collections::VecDeque;
use std::mem::MaybeUninit;
use std::ops::RangeInclusive;
use std::path::{Path, PathBuf};
use std::sync::atomic::{fence, AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use crate::archive;
use crate::crc;
use crate::error::{JournalError, Result};
use crate::segment::{
    align8, Frame, HeaderInfo, Mode, Prepared, Segment, HEADER_SIZE, PAD_FLAG, RECORD_HEADER_SIZE,
    STATE_SEALED, STATE_WRITER_OPEN,
};
use crate::stage::{Stage, STAGE_WORDS};

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
    /// Archive: bytes an archive segment grows by on disk at a time ([`ALLOCATION_STEP`] unless set). Rounded up
    /// to 64 KiB, at most the segment size. A closed segment is cut to its records whatever the step.
    pub allocation_step: u64,
    /// The sequence of a new archive's first record (1 unless set): a journal that continues another (the next
    /// period of a history) continues its sequence. An existing journal keeps its own.
    pub first_seq: u64,
}

/// How much an archive segment grows by on disk at a time, unless [`WriterOptions::allocation_step`] says: 4 MiB.
/// A segment's file is as long as its records and the space reserved ahead of them, never its whole capacity:
/// a recording takes on disk what it holds, plus the reserve window while a writer is open (see
/// [`DiskReservation`]), and once closed its records (rounded up to a page).
pub const ALLOCATION_STEP: u64 = 4 << 20;

/// Staged bytes from which a commit writes them to the file with `pwrite`; fewer, into pages already in the page
/// cache, are stored through the mapping. On ext4 on the 2-core development machine a `pwrite` cost about 0.6 us
/// whatever its size (3.8 us for 6,400 bytes into fresh pages), a store through the mapping 4-5 us for each fresh
/// page it faulted in (110-140 ns for each 100-byte record; the first store into a segment just rolled into took
/// 1-2 ms) and nothing more for a page already in the cache once mapped: for a few records into pages already there
/// the mapping is cheaper, from about 1 KiB the write. A recorder at full speed commits tens of KiB at a time; one
/// at a moderate rate, a record or two. (`cargo bench -p tickbox-journal --bench append`: one commit per record
/// took 30 ns at the median, 640 ns when every commit was a write; a roll 150-170 us, 1.3 ms when fresh pages were
/// stored through the mapping.)
const WRITE_FROM: usize = 1024;

/// Smallest allocation step (and what a step is rounded up to).
const STEP_GRAIN: u64 = 64 << 10;

/// The most an archive writer reserves ahead of its records, however fast it writes (see [`reserve_window`]).
const MAX_AHEAD: u64 = 256 << 20;

/// How far ahead of the writer, in time at its recent pace, the preparer reserves: a few of its polls
/// ([`RESERVE_POLL`]), with room for a loaded machine's scheduling delays. Reserving is one `posix_fallocate` a
/// step, so a longer lead would only hold more disk. (It was set at 20 ms when the preparer also wrote zeros over
/// what it reserved, which write-back could reach before the writer's records did: 1.17-1.43 × the bytes stored
/// went to disk with 20 ms against 1.96-2.15 × with 200 ms, under constant write-back.)
const RESERVE_LEAD: Duration = Duration::from_millis(20);

/// A writer is held ahead of by at most this fraction (1/n) of what it has written since it opened, so the lead
/// grows as it shows it keeps writing: one that stops a fraction of a second after it starts holds little disk it
/// never reaches. (Set when the preparer faulted pages in over its lead: a 1 M-record `bench record` run wrote
/// 119 MB while the preparer faulted 194-253 MB before this bound.)
const LEAD_PER_WRITTEN: u64 = 8;

/// What a writer holds on disk ahead of its records ([`WriterOptions::disk_reservation`]): what a recorder checks
/// free space against before it starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct DiskReservation {
    /// Bytes allocated when the writer opens, before its first record: a ring's whole file (header and
    /// capacity), or an archive segment's header page and first allocation step.
    pub at_open: u64,
    /// The most bytes the writer holds allocated beyond its records at any time while it is open: a ring's whole
    /// file (it never grows past it), or an archive's reserve window at its widest (256 MiB, rounded up to the
    /// step, at the pace of a writer at memory speed; one step for a recorder's pace) plus one step and the next
    /// segment's header page.
    pub ahead_max: u64,
    /// A ring: the journal never takes more than `at_open`, whatever it records. An archive grows with its data.
    pub bounded: bool,
}

impl WriterOptions {
    /// A ring of `capacity` data bytes, no explicit msync, no description.
    pub fn ring(capacity: u64) -> Self {
        WriterOptions {
            layout: Layout::Ring { capacity },
            durability: Durability::None,
            description: String::new(),
            allocation_step: ALLOCATION_STEP,
            first_seq: 1,
        }
    }

    /// An archive of `segment_size`-byte segments, no explicit msync, no description.
    pub fn archive(segment_size: u64) -> Self {
        WriterOptions {
            layout: Layout::Archive { segment_size },
            durability: Durability::None,
            description: String::new(),
            allocation_step: ALLOCATION_STEP,
            first_seq: 1,
        }
    }

    /// Sets how much an archive segment grows by on disk at a time (see [`ALLOCATION_STEP`]).
    pub fn allocation_step(mut self, bytes: u64) -> Self {
        self.allocation_step = bytes;
        self
    }

    /// What a writer with these options allocates on disk: at open, and at most ahead of its records while it
    /// runs. A journal that already exists keeps its own layout, which may differ.
    pub fn disk_reservation(&self) -> DiskReservation {
        match self.layout {
            Layout::Ring { capacity } => {
                let file = HEADER_SIZE + round_capacity(capacity).unwrap_or(capacity);
                DiskReservation {
                    at_open: file,
                    ahead_max: file,
                    bounded: true,
                }
            }
            Layout::Archive { segment_size } => {
                let size = round_capacity(segment_size).unwrap_or(segment_size);
                let step = effective_step(self.allocation_step, size);
                DiskReservation {
                    at_open: HEADER_SIZE + step,
                    ahead_max: reserve_window(f64::INFINITY, u64::MAX, step) + step + HEADER_SIZE,
                    bounded: false,
                }
            }
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
    /// Archive segments that held disk space past their records and were cut to them now: the last one, as a
    /// killed writer left it with its reserve window; earlier ones a writer was killed before it cut, or written
    /// before segments were cut (version 1: their blocks past the records are deallocated).
    pub segments_trimmed: u64,
    /// Bytes of disk those segments gave back.
    pub bytes_released: u64,
    /// Half-made files a killed writer left under a temporary name (`*.creating`), removed.
    pub temporaries_removed: u64,
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
    /// Archive: the preparer, a thread that keeps disk reserved ahead of the writer in the current segment and,
    /// near its end, makes the next segment's file ([`keep_ahead`]), so that the recording thread does not
    /// allocate blocks, and a roll only writes a header and renames.
    preparing: Option<Preparing>,
    /// Archive: times the recording thread reserved disk itself (see [`Writer::reserve_stalls`]).
    reserve_stalls: u64,
    /// Archive: the records written since the last commit, which it writes to the file (see [`crate::stage`]);
    /// empty for a ring.
    stage: Stage,
    /// Archive: a write of staged records has failed (and was logged).
    write_refused: bool,
    /// Archive: data offset up to which this writer has brought the current segment's pages into the page cache
    /// (whole pages; a page reclaimed since faults in again, as any page of a mapping does).
    cached_to: u64,
    /// Archive: bytes a segment grows by on disk at a time.
    step: u64,
    /// Archive: the writer's pace as the preparer measured it (`f64` bits of bytes a second).
    rate: Arc<AtomicU64>,
    /// Archive: bytes this writer wrote into the segments it rolled out of (with `began_at`, what it has written
    /// since it opened, which bounds the preparer's lead: [`LEAD_PER_WRITTEN`]).
    written_earlier: u64,
    /// Archive: the head at which this writer began writing the current segment.
    began_at: u64,
}

/// The allocation step a writer uses: `requested` rounded up to [`STEP_GRAIN`], at least that, at most the segment.
fn effective_step(requested: u64, segment_size: u64) -> u64 {
    requested
        .max(STEP_GRAIN)
        .next_multiple_of(STEP_GRAIN)
        .min(segment_size)
}

/// How far ahead of its records the preparer keeps an archive writer reserved, for a writer
/// that has recently written `rate` bytes a second: [`RESERVE_LEAD`] of writing at that pace, at least one `step`
/// (what an idle or slow writer holds ahead: a recorder at 12 MB/s holds one 4 MiB step), at most [`MAX_AHEAD`],
/// in whole steps, and at most an eighth of the `written` bytes the writer has written since it opened
/// ([`LEAD_PER_WRITTEN`]). A writer at memory speed gets the widest window, and what it reaches before the
/// preparer does it reserves itself (counted in [`Writer::reserve_stalls`]).
fn reserve_window(rate: f64, written: u64, step: u64) -> u64 {
    let lead = rate * RESERVE_LEAD.as_secs_f64();
    let bytes = if lead.is_finite() {
        (lead as u64).min(MAX_AHEAD)
    } else {
        MAX_AHEAD
    };
    bytes
        .min(written / LEAD_PER_WRITTEN)
        .max(step)
        .next_multiple_of(step)
}

/// The pace of a writer as the preparer sees it from its published head: the bytes a second it has written over
/// the last look, or, when it slows down, what it wrote before decaying by half every second (a recorder's
/// bursts keep their window through the lulls between them).
#[derive(Debug, Clone, Copy)]
struct Pace {
    head: u64,
    at: Instant,
    rate: f64,
}

impl Pace {
    /// Shortest interval a rate is measured over.
    const MIN_INTERVAL: Duration = Duration::from_millis(20);

    fn new(head: u64, at: Instant, rate: f64) -> Pace {
        Pace { head, at, rate }
    }

    /// Takes the head seen at `now`; returns the rate in bytes a second.
    fn update(&mut self, head: u64, now: Instant) -> f64 {
        let dt = now.saturating_duration_since(self.at);
        if dt >= Self::MIN_INTERVAL {
            let secs = dt.as_secs_f64();
            let seen = head.saturating_sub(self.head) as f64 / secs;
            self.rate = seen.max(self.rate * 0.5f64.powf(secs));
            (self.head, self.at) = (head, now);
        }
        self.rate
    }
}

/// How often the preparer looks at the writer's head while the writer moves; an idle writer is looked at less
/// often, up to [`RESERVE_IDLE_POLL`] (a writer that starts again has a whole step reserved ahead of it).
const RESERVE_POLL: Duration = Duration::from_millis(5);
const RESERVE_IDLE_POLL: Duration = Duration::from_millis(50);

/// After a reservation fails (a full disk), how long the preparer waits before it tries again. The writer itself
/// tries at once when it reaches the end of what is reserved, and returns [`JournalError::DiskFull`] if that
/// fails too.
const RESERVE_RETRY: Duration = Duration::from_millis(500);

/// The preparer of an archive writer, for one current segment (see `Writer::prepare_next`).
struct Preparing {
    /// The index of the next segment it prepares.
    index: u64,
    /// Set by a roll (or the close) that needs what the thread has now: it stops and hands it over.
    cancel: Arc<AtomicBool>,
    /// The next segment is made and reserved as far as the window reaches into it.
    ready: Arc<AtomicBool>,
    handle: std::thread::JoinHandle<Option<Prepared>>,
}

impl Preparing {
    /// Stops the thread (within one system call) and takes the next segment as far as it got.
    fn finish(self) -> Option<Prepared> {
        self.cancel.store(true, Ordering::Relaxed);
        // Cut a wait for the next look short (on a loaded machine a sleeping thread wakes late).
        self.handle.thread().unpark();
        self.handle.join().ok().flatten()
    }
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
            Segment::create(
                path,
                Mode::Ring,
                capacity,
                1,
                0,
                &options.description,
                capacity,
            )?
        } else {
            crate::packed::refuse_compressed(path)?;
            Segment::open(path, true)?
        };
        if seg.info.mode != Mode::Ring {
            return Err(JournalError::InvalidOptions(format!(
                "{} is not a ring journal",
                path.display()
            )));
        }
        seg.lock_exclusive()?;
        // What a writer killed while creating the ring left (a new ring is made under the same name, over it), or
        // a compression killed midway (it holds this lock while it works).
        let temporaries_removed = [
            crate::segment::temporary_path(path),
            path.with_extension(crate::names::COMPRESSING_EXT),
        ]
        .iter()
        .filter(|t| !created && std::fs::remove_file(t).is_ok())
        .count() as u64;
        if !created && seg.info.capacity != capacity {
            tracing::info!(
                path = %path.display(),
                "existing ring keeps its capacity of {} bytes (requested {capacity})",
                seg.info.capacity
            );
        }
        let mut recovery = recover(&seg)?;
        recovery.created = created;
        recovery.temporaries_removed = temporaries_removed;
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
        let temporaries_removed = archive::remove_temporaries(dir)?;
        let segments = archive::list_segments(dir)?;
        let step = effective_step(options.allocation_step, segment_size);
        let (mut sealed_now, mut trimmed, mut released) = (0, 0, 0);
        let (seg, created) = match segments.last() {
            None => (
                Segment::create(
                    &archive::segment_path(dir, 0),
                    Mode::Archive,
                    segment_size,
                    options.first_seq.max(1),
                    0,
                    &options.description,
                    step,
                )?,
                true,
            ),
            Some((_, last)) => {
                crate::packed::refuse_compressed(last)?;
                for (_, p) in &segments[..segments.len() - 1] {
                    if crate::packed::is_packed(p)? {
                        // Compressed: sealed and cut to its records by the compression.
                        continue;
                    }
                    let s = Segment::open(p, true)?;
                    if !s.sealed() {
                        let _ = recover(&s)?;
                        s.state().store(STATE_SEALED, Ordering::Release);
                        sealed_now += 1;
                    }
                    let t = s.trim()?;
                    trimmed += u64::from(t.cut);
                    released += t.released;
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
        recovery.segments_trimmed = trimmed;
        recovery.bytes_released = released;
        recovery.temporaries_removed = temporaries_removed;
        if !seg.sealed() {
            // What a killed writer reserved ahead of its records (up to a whole window) goes back; then a step of
            // room, so that a disk too full to record on says so here rather than at the first append.
            let t = seg.trim()?;
            recovery.segments_trimmed += u64::from(t.cut);
            recovery.bytes_released += t.released;
            let head = seg.head().load(Ordering::Acquire);
            seg.reserve_to(head + step)?;
        }
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
                Mode::Archive => seg_for_counters.avail().min(cap),
            },
            marks: match mode {
                Mode::Ring => VecDeque::with_capacity((cap / mark_spacing(cap)) as usize + 4),
                Mode::Archive => VecDeque::new(),
            },
            next_mark_at: head,
            last_record_off: NO_FRAME,
            padding: 0,
            preparing: None,
            reserve_stalls: 0,
            stage: Stage::new(match mode {
                Mode::Ring => 0,
                Mode::Archive => STAGE_WORDS,
            }),
            write_refused: false,
            // The page that holds the head may not be in the cache: its first write brings it in.
            cached_to: head & !4095,
            step: effective_step(options.allocation_step, segment_size),
            rate: Arc::new(AtomicU64::new(0)),
            written_earlier: 0,
            began_at: head,
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

    /// Archive: times the recording thread reserved disk itself because its preparer had not (zero for a ring):
    /// an allocation step when it reached the end of what was reserved (it writes faster than the preparer keeps
    /// up, or the disk is full), or the next segment's file when it rolled before the preparer had made it. Each
    /// is a system call or a few on the recording thread.
    pub fn reserve_stalls(&self) -> u64 {
        self.reserve_stalls
    }

    /// Archive: whether the next segment is made and reserved as far as the reserve window reaches into it,
    /// waiting for the roll (false for a ring, until the writer comes within a window of its segment's
    /// end, and when the preparer could not start).
    pub fn next_segment_ready(&self) -> bool {
        self.preparing
            .as_ref()
            .is_some_and(|p| p.ready.load(Ordering::Acquire))
    }

    /// Bytes the journal's files hold allocated on disk beyond its records right now: a ring's unused capacity
    /// (all of it is allocated when the ring is made), or the space an archive writer has reserved ahead of its
    /// records in the current segment (see [`DiskReservation`]). A prepared next segment is not counted until
    /// the roll.
    pub fn reserved_ahead(&self) -> u64 {
        match self.mode {
            Mode::Ring => HEADER_SIZE + self.cap - (self.head - self.tail).min(self.cap),
            Mode::Archive => self.seg.avail().saturating_sub(self.head),
        }
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
        // The preparer first: it may be reserving more of the current segment, which the trim below cuts off.
        if let Some(p) = self.preparing.take().and_then(Preparing::finish) {
            p.discard();
        }
        self.publish();
        self.flusher = None;
        self.seg
            .state()
            .fetch_and(!STATE_WRITER_OPEN, Ordering::Release);
        if self.durability != Durability::None {
            self.seg.sync_range(self.synced, self.head)?;
            self.synced = self.head;
        }
        if self.mode == Mode::Archive {
            // What was reserved ahead of the records goes back: a closed segment holds its records. A writer that
            // opens it again reserves anew.
            self.seg.trim()?;
            self.room_end = self.seg.avail().min(self.cap);
        }
        Ok(())
    }

    /// Makes everything written so far visible to readers: an archive's staged records go to the file first.
    fn publish(&mut self) {
        self.write_staged();
        if self.counters_dirty {
            self.counters_dirty = false;
            let o = self.overwritten;
            self.seg.store_overwritten(o.records, o.bytes, o.laps);
        }
        self.seg.head_seq().store(self.next_seq, Ordering::Relaxed);
        self.seg.head().store(self.head, Ordering::Release);
    }

    /// Archive: writes the staged records to the segment's file. `reserve` covers them first, so that a crash in
    /// the middle of the write leaves a torn write that recovery reports, as a store through the mapping would.
    fn write_staged(&mut self) {
        let Some((at, bytes)) = self.stage.staged() else {
            return;
        };
        let end = at + bytes.len() as u64;
        self.seg.reserve().store(end, Ordering::Relaxed);
        // A few records into pages already in the page cache are cheaper stored through the mapping; anything
        // larger, or reaching a page not yet there, is written (a store would fault that page in).
        let write = bytes.len() >= WRITE_FROM || end > self.cached_to;
        let refused = if write {
            self.seg.write_data(at, bytes).err()
        } else {
            None
        };
        self.cached_to = self.cached_to.max(end.next_multiple_of(4096));
        if let Some(err) = &refused {
            // The file refused the write (a file size limit, an I/O error), but the records lie in reserved
            // blocks, which the mapping stores into without asking: stored there, as a ring's are, they are
            // kept, and a disk that cannot take more says so where it always did, when a reservation fails.
            if !std::mem::replace(&mut self.write_refused, true) {
                tracing::warn!(
                    path = %self.seg.path.display(),
                    "writing records failed ({err}); storing them through the mapping instead"
                );
            }
        }
        if !write || refused.is_some() {
            self.store_staged_through_the_mapping(at);
        }
        self.stage.clear();
    }

    /// Copies the staged words to data offset `at` through the mapping (published by the head store that follows,
    /// as a ring's records are).
    fn store_staged_through_the_mapping(&self, at: u64) {
        let words = self.stage.words();
        for (to, from) in self.seg.data_words(at, words.len()).iter().zip(words) {
            to.store(from.load(Ordering::Relaxed), Ordering::Relaxed);
        }
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
        let n = (size / 8) as usize;
        // An archive's records go to its stage (a record too large for it, through the mapping like a ring's).
        let staged =
            self.mode == Mode::Archive && (self.stage.fits(start_off, n) || self.stage_room_for(n));
        let seg = &*self.seg;
        if !staged {
            // Recovery reports bytes past the last intact record up to `reserve` as a torn write: it covers the
            // frame before any of its bytes is stored.
            seg.reserve().store(end, Ordering::Relaxed);
        }
        let seq = self.next_seq;
        // Every store is an 8-byte atomic at an 8-aligned offset, the same size and alignment readers load with:
        // a lapped ring reader may be copying these bytes right now, and the seqlock protocol (`tail` moved before
        // this write, re-checked by the reader after its copy) only makes that safe if neither side's access is a
        // data race. `room_end` (or `make_room`) leaves `start_off + size <= cap`, so the frame's words lie in
        // the writer's full-length mapping (`data_words` checks it once per frame).
        let words = if staged {
            self.stage.take(start_off, n)
        } else {
            seg.data_words(start_off, n)
        };
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

    /// Archive: a frame of `n` words does not go in behind what is staged (the stage is full): writes the stage
    /// out, and says whether the frame can be staged at all.
    #[cold]
    fn stage_room_for(&mut self, n: usize) -> bool {
        self.write_staged();
        self.stage.holds(n)
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
                let end = self.head + size;
                if end > self.seg.avail() {
                    self.reserve_here(end)?;
                }
                self.room_end = self.seg.avail().min(self.cap);
                Ok((self.head_off, 0))
            }
        }
    }

    /// Archive: the writer has reached the end of what the preparer reserved (it writes faster than the preparer
    /// keeps up, or the disk is full): reserves up to the allocation step that holds `end` itself. If the file
    /// system has no room for a whole step, as much as the frame needs, so that nothing that fits is refused;
    /// if not even that, [`JournalError::DiskFull`], with nothing written.
    #[cold]
    fn reserve_here(&mut self, end: u64) -> Result<()> {
        self.reserve_stalls += 1;
        let step_end = end.next_multiple_of(self.step).min(self.cap);
        match self.seg.reserve_to(step_end) {
            Err(e) if e.is_disk_full() => {
                let tight = end.next_multiple_of(4096).min(self.cap);
                if tight < step_end && self.seg.reserve_to(tight).is_ok() {
                    return Ok(());
                }
                Err(e)
            }
            other => other,
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
            // A preparation that failed (a full disk) is tried again below, where its error stops the roll.
            Some(p) if p.index == next_index => p.finish(),
            Some(p) => {
                if let Some(p) = p.finish() {
                    p.discard();
                }
                None
            }
            None => None,
        };
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
            // Not prepared (the writer outran its preparer, or it could not start): made here, synced only
            // under a durability that asks for it, as a prepared one is.
            self.reserve_stalls += 1;
            Segment::finish(
                Segment::prepare(&path, self.segment_size, self.step)?,
                &path,
                Mode::Archive,
                self.next_seq,
                next_index,
                &self.description,
                self.durability != Durability::None,
            )?
        };
        next.state().store(STATE_WRITER_OPEN, Ordering::Release);
        // Seal only once the successor exists, so a reader that sees "sealed" always finds the next file.
        self.seg.state().store(STATE_SEALED, Ordering::Release);
        if self.durability != Durability::None {
            self.seg.sync_range(self.head, self.head)?;
        }
        let next = Arc::new(next);
        if let Some(f) = &self.flusher {
            f.set_segment(Arc::clone(&next));
        }
        let sealed = std::mem::replace(&mut self.seg, next);
        self.written_earlier += self.head.saturating_sub(self.began_at);
        self.cap = self.seg.cap;
        self.room_end = self.seg.avail().min(self.cap);
        self.head = self.seg.head().load(Ordering::Acquire);
        self.began_at = self.head;
        self.cached_to = self.head & !4095;
        self.head_off = self.head;
        self.tail = 0;
        self.tail_off = 0;
        self.synced = self.head;
        self.prepare_next(Some(sealed));
        Ok(())
    }

    /// Archive: starts the preparer for the current segment ([`keep_ahead`]), which first cuts the segment just
    /// sealed (`sealed`) to its records and lets go of it. All of it was once a roll's cost on the recording
    /// thread: unmapping a full 32 MiB segment took 1.5-2.6 ms, creating the next one (reserving and syncing its
    /// blocks) 18-46 ms on a busy disk; a roll now writes a header, renames and maps (about 0.1-0.2 ms).
    /// `cargo bench -p tickbox-journal --bench append` prints the roll's cost.
    fn prepare_next(&mut self, sealed: Option<Arc<Segment>>) {
        if self.mode != Mode::Archive {
            return;
        }
        let index = self.seg.info.segment_index + 1;
        let cancel = Arc::new(AtomicBool::new(false));
        let ready = Arc::new(AtomicBool::new(false));
        let ahead = Ahead {
            current: Arc::clone(&self.seg),
            next_path: archive::segment_path(&self.root, index),
            segment_size: self.segment_size,
            step: self.step,
            cancel: Arc::clone(&cancel),
            ready: Arc::clone(&ready),
            rate: Arc::clone(&self.rate),
            written_earlier: self.written_earlier,
            began_at: self.began_at,
        };
        let spawned = std::thread::Builder::new()
            .name("journal-prepare".into())
            .spawn(move || {
                if let Some(sealed) = sealed {
                    if let Err(err) = sealed.trim() {
                        tracing::warn!(path = %sealed.path.display(), "sealed segment not cut to its records: {err}");
                    }
                }
                keep_ahead(ahead)
            });
        // No thread (resource limits): the sealed segment was dropped here with the closure (uncut: the next
        // writer to open the journal cuts it), and the writer reserves and rolls by itself, as it always can.
        self.preparing = spawned.ok().map(|handle| Preparing {
            index,
            cancel,
            ready,
            handle,
        });
    }
}

/// What the preparer of one current segment works with.
struct Ahead {
    /// The segment the writer is filling.
    current: Arc<Segment>,
    /// Where the next segment will be.
    next_path: PathBuf,
    segment_size: u64,
    step: u64,
    cancel: Arc<AtomicBool>,
    /// Set once the next segment is made and reserved as far as the window reaches into it.
    ready: Arc<AtomicBool>,
    /// The writer's pace as last measured (`f64` bits), carried from one segment's preparer to the next.
    rate: Arc<AtomicU64>,
    /// What the writer wrote before the current segment, and the head it began this one at.
    written_earlier: u64,
    began_at: u64,
}

/// The preparer's loop, until the roll or the close cancels it: keeps the writer's current segment reserved on
/// disk [`reserve_window`] ahead of its published head, one allocation step at a time, and once the window
/// reaches past the segment's end makes the next segment's file (under its temporary name) and reserves the part
/// of the window that falls in it. Returns that file, for the roll to name.
///
/// Nothing here is on the recording thread: block allocation (a system call and the file system's bookkeeping)
/// happens here, ahead of need, and only as far ahead as the writer's pace asks, so a slow recorder holds one step
/// ahead on disk, not a segment. A reservation that fails (a full disk) is tried again after [`RESERVE_RETRY`];
/// the writer, reaching the end of what is reserved, tries itself and reports it.
fn keep_ahead(a: Ahead) -> Option<Prepared> {
    let cur = &*a.current;
    let cap = cur.cap;
    let mut pace = Pace::new(
        cur.head().load(Ordering::Relaxed),
        Instant::now(),
        f64::from_bits(a.rate.load(Ordering::Relaxed)),
    );
    let mut next: Option<Prepared> = None;
    let mut retry_at: Option<Instant> = None;
    let mut warned = false;
    let mut last_head = u64::MAX;
    let fail = |warned: &mut bool, err: JournalError| {
        if !std::mem::replace(warned, true) {
            tracing::warn!("journal preparer cannot reserve ahead of the writer: {err}");
        }
        Some(Instant::now() + RESERVE_RETRY)
    };
    while !a.cancel.load(Ordering::Relaxed) {
        let now = Instant::now();
        let head = cur.head().load(Ordering::Relaxed);
        let rate = pace.update(head, now);
        a.rate.store(rate.to_bits(), Ordering::Relaxed);
        // Page aligned: steps are reserved a page at a time.
        let written = a.written_earlier + head.saturating_sub(a.began_at);
        let want = (head + reserve_window(rate, written, a.step)).next_multiple_of(4096);
        let avail = cur.avail();
        let retry = retry_at.is_some_and(|t| now < t);
        let next_want = want.saturating_sub(cap).min(a.segment_size);
        // The current segment reserved up to the window, then the next one's file made once the window reaches
        // into it, and reserved as far as it reaches.
        if !retry && avail < want.min(cap) {
            let to = (avail + 1).next_multiple_of(a.step).min(cap);
            retry_at = cur.reserve_to(to).err().and_then(|e| fail(&mut warned, e));
            continue;
        }
        if !retry && next_want > 0 && next.is_none() {
            // The header page only: its first step is reserved below like every later one.
            match Segment::prepare(&a.next_path, a.segment_size, 0) {
                Ok(p) => next = Some(p),
                Err(e) => retry_at = fail(&mut warned, e),
            }
            continue;
        }
        if let Some(p) = next.as_mut().filter(|_| next_want > 0) {
            if !retry && p.reserved() < next_want {
                let to = (p.reserved() + 1).next_multiple_of(a.step);
                retry_at = p.extend(to).err().and_then(|e| fail(&mut warned, e));
                continue;
            }
            if p.reserved() >= next_want {
                a.ready.store(true, Ordering::Release);
            }
        }
        // All this segment will need is done once it is reserved to its end and the next one as far as the window
        // reaches: the thread ends, so that the roll finds it finished instead of waiting for it to wake up (tens
        // of milliseconds on a loaded machine).
        if avail == cap && next.as_ref().is_some_and(|p| p.reserved() >= next_want) {
            break;
        }
        let poll = if head == last_head {
            RESERVE_IDLE_POLL
        } else {
            RESERVE_POLL
        };
        last_head = head;
        std::thread::park_timeout(poll);
    }
    next
}

impl Drop for Writer {
    fn drop(&mut self) {
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
        ..RecoveryReport::default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;
    const STEP: u64 = ALLOCATION_STEP;

    #[test]
    fn the_reserve_window_follows_the_pace_in_whole_steps_between_one_step_and_the_cap() {
        let long = u64::MAX;
        // Idle, or a recorder at 12 MB/s (0.24 MB in the lead): one step.
        assert_eq!(reserve_window(0.0, long, STEP), STEP);
        assert_eq!(reserve_window(12e6, long, STEP), STEP);
        // 1 GB/s: 20 MB in the lead, rounded up to whole steps (20 MiB).
        assert_eq!(reserve_window(1e9, long, STEP), 20 * MIB);
        // Faster than any writer, or no measure at all: the cap.
        assert_eq!(reserve_window(50e9, long, STEP), MAX_AHEAD);
        assert_eq!(reserve_window(f64::INFINITY, long, STEP), MAX_AHEAD);
        // A step that does not divide the lead or the cap: still whole steps.
        assert_eq!(reserve_window(1e9, long, 3 * MIB), 7 * 3 * MIB);
        assert_eq!(
            reserve_window(f64::INFINITY, long, 3 * MIB),
            (MAX_AHEAD / (3 * MIB) + 1) * 3 * MIB
        );
        // A writer that has only just started is held ahead of by an eighth of what it wrote, at least a step:
        // at 1 GB/s (20 MB in the lead) it gets the whole lead once it has written 160 MiB.
        assert_eq!(reserve_window(1e9, 0, STEP), STEP);
        assert_eq!(reserve_window(1e9, 80 * MIB, STEP), 12 * MIB);
        assert_eq!(reserve_window(1e9, 160 * MIB, STEP), 20 * MIB);
        assert_eq!(reserve_window(1e9, 1 << 40, STEP), 20 * MIB);
        // Steps are rounded up to 64 KiB and at most the segment.
        assert_eq!(effective_step(1, MIB), 64 << 10);
        assert_eq!(effective_step(100 << 10, MIB), 128 << 10);
        assert_eq!(effective_step(STEP, 1 << 16), 1 << 16);
    }

    #[test]
    fn the_pace_is_what_the_head_moved_and_decays_by_half_a_second_once_it_stops() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let mut p = Pace::new(0, t0, 0.0);
        // Too soon to measure: nothing changes.
        assert_eq!(p.update(1 << 20, t0 + ms(5)), 0.0);
        // 10 MB in 100 ms: 100 MB/s.
        let r = p.update(10_000_000, t0 + ms(100));
        assert!((r - 100e6).abs() < 1.0, "{r}");
        // Idle for a second: half of it.
        let r = p.update(10_000_000, t0 + ms(1100));
        assert!((r - 50e6).abs() < 1e3, "{r}");
        // Faster again: the new pace at once.
        let r = p.update(10_000_000 + 40_000_000, t0 + ms(1200));
        assert!((r - 400e6).abs() < 1e3, "{r}");
        // A head that went back (a roll to a new segment with a fresh pace is a new Pace; never negative here).
        let r = p.update(0, t0 + ms(1300));
        assert!(r > 0.0);
    }

    #[test]
    fn the_reservation_says_what_a_ring_and_an_archive_hold_on_disk() {
        let ring = WriterOptions::ring(100_000).disk_reservation();
        assert_eq!(
            ring,
            DiskReservation {
                at_open: HEADER_SIZE + 102_400,
                ahead_max: HEADER_SIZE + 102_400,
                bounded: true
            }
        );
        let archive = WriterOptions::archive(1 << 30).disk_reservation();
        assert_eq!(archive.at_open, HEADER_SIZE + STEP);
        assert_eq!(archive.ahead_max, MAX_AHEAD + STEP + HEADER_SIZE);
        assert!(!archive.bounded);
        let small = WriterOptions::archive(1 << 20)
            .allocation_step(1 << 16)
            .disk_reservation();
        assert_eq!(small.at_open, HEADER_SIZE + (1 << 16));
    }
}
