//! One mapped journal file (a ring, or one archive segment): header layout, creation, validation on open, and the
//! frame walker shared by the writer, the reader, recovery and `verify`.

use std::fs::{File, OpenOptions};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use memmap2::{MmapOptions, MmapRaw};

use crate::error::{JournalError, Result};
use crate::guard::Guard;

/// First 8 bytes of every journal file.
pub const MAGIC: [u8; 8] = *b"TBXJRNL\0";
/// The newest format version this build writes and reads. Archive segments are written as version 2: the file
/// grows with its data and a closed segment is cut to it, so it may be shorter than its header's capacity (the
/// bytes past its end were never written). Rings are written as version 1, whose layout they keep (a ring is
/// allocated whole). Versions 1 and 2 are read.
pub const FORMAT_VERSION: u32 = 2;
/// The oldest format version this build reads.
pub const MIN_FORMAT_VERSION: u32 = 1;
/// The version a file of `mode` is written as (see [`FORMAT_VERSION`]).
pub(crate) fn version_for(mode: Mode) -> u32 {
    match mode {
        Mode::Ring => 1,
        Mode::Archive => FORMAT_VERSION,
    }
}
/// Bytes before the data region: one page, so the data region is page aligned.
pub const HEADER_SIZE: u64 = 4096;
/// Bytes of each record's header: frame length, CRC32C, sequence, capture time.
pub const RECORD_HEADER_SIZE: u64 = 24;
/// Smallest accepted data-region size.
pub const MIN_CAPACITY: u64 = 64 * 1024;
/// Largest accepted description (UTF-8 bytes); longer ones are truncated at a char boundary.
pub const MAX_DESCRIPTION: usize = 256;

/// Why a frame of a truncated file cannot be read.
pub(crate) const TRUNCATED: &str = "the file is truncated here";

/// High bit of a frame length: this frame is padding up to the end of the ring lap, not a record.
pub(crate) const PAD_FLAG: u32 = 1 << 31;

// Static header fields (written once, covered by STATIC_CRC).
const OFF_MAGIC: usize = 0;
const OFF_VERSION: usize = 8;
const OFF_HEADER_SIZE: usize = 12;
const OFF_MODE: usize = 16;
const OFF_CAPACITY: usize = 24;
const OFF_CREATED: usize = 32;
const OFF_BASE_SEQ: usize = 40;
const OFF_SEGMENT: usize = 48;
const OFF_DESC_LEN: usize = 56;
const OFF_DESC: usize = 64;
const OFF_STATIC_CRC: usize = OFF_DESC + MAX_DESCRIPTION; // 320
                                                          // Dynamic fields, each on its own cache line so readers polling `head` do not share a line with `tail` stores.
const OFF_HEAD: usize = 512;
const OFF_HEAD_SEQ: usize = 520;
const OFF_TAIL: usize = 576;
const OFF_RESERVE: usize = 640;
const OFF_STATE: usize = 704;

// Ring-lap accounting (in reserved header space that older files hold as zeros): records and bytes the ring
// overwrote, and laps completed. Written by the writer at each publish.
const OFF_OVERWRITTEN_RECORDS: usize = 768;
const OFF_OVERWRITTEN_BYTES: usize = 776;
const OFF_LAPS: usize = 784;
/// Checksum of the three lap counters: `COUNTERS_TAG << 32 | crc32c(records, bytes, laps)`, stored (release) after
/// them at each publish. Zero in files from before it existed.
const OFF_OVERWRITTEN_CRC: usize = 792;
const COUNTERS_TAG: u64 = 0x4c41_5053; // "LAPS"
/// Two application-metadata slots, each `generation u64 | len u32 | crc32c u32 | data`; readers take the valid slot
/// with the higher generation, so a torn write of one slot leaves the other.
const OFF_APP_META: usize = 1024;
const APP_META_SLOT: usize = 1536;
const APP_META_HEADER: usize = 16;
/// Largest application-metadata block a journal stores (the recorder keeps its per-publisher ledger there).
pub const APP_META_MAX: usize = APP_META_SLOT - APP_META_HEADER;

/// State bit: a writer has the journal open (still set after a crash: the next open runs recovery).
pub(crate) const STATE_WRITER_OPEN: u32 = 1;
/// State bit: archive segment is complete; its successor file exists.
pub(crate) const STATE_SEALED: u32 = 2;

/// Ring (fixed capacity, oldest overwritten) or archive segment (fills once, then the writer rolls to a new file).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// One file of fixed capacity; the oldest records are overwritten once it is full.
    Ring,
    /// A directory of segment files; nothing is overwritten, a full segment rolls to the next.
    Archive,
}

impl Mode {
    fn code(self) -> u32 {
        match self {
            Mode::Ring => 1,
            Mode::Archive => 2,
        }
    }
}

/// The static part of a journal file's header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeaderInfo {
    /// Format version of the file: 1 (rings, and archive segments written before version 2) or 2 (archive
    /// segments that grow with their data and are cut to it when closed). Other versions are refused.
    pub version: u32,
    /// Whether this file is a ring or an archive segment.
    pub mode: Mode,
    /// Bytes of the data region (ring capacity or segment size).
    pub capacity: u64,
    /// Creation time, ns since the Unix epoch.
    pub created_ns: u64,
    /// Sequence of the first record this file holds or held (archive segments; 1 for a ring).
    pub base_seq: u64,
    /// Archive segment number (0 for a ring).
    pub segment_index: u64,
    /// Free text set by the creating writer (program, endpoint, ...).
    pub description: String,
}

fn app_meta_crc(generation: u64, data: &[u8]) -> u32 {
    crc32c::crc32c_append(crc32c::crc32c(&generation.to_le_bytes()), data)
}

pub(crate) fn align8(n: u64) -> u64 {
    (n + 7) & !7
}

pub(crate) fn now_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
}

/// A record's checksum: CRC32C, seeded with the frame length, over the frame from the sequence field to the end
/// of its zero padding (`body` = bytes 8..align8(frame_len) of the frame). Seeding with the length covers it
/// without a separate pass, and the 8-aligned body lets the CPU's CRC instruction take 8 bytes at a time.
#[inline]
pub(crate) fn frame_crc(frame_len: u32, body: &[u8]) -> u32 {
    crc32c::crc32c_append(frame_len, body)
}

/// What sits at a data-region position.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Frame {
    /// Too little room before the end of the lap for a record header: skip this many bytes.
    Skip(u64),
    /// Padding frame of this many bytes up to the end of the lap.
    Pad(u64),
    /// A record (not yet checksum-verified).
    Record {
        frame_len: u32,
        crc: u32,
        seq: u64,
        capture_ns: u64,
    },
    /// Bytes that cannot be a frame here (zero or impossible length).
    Invalid(&'static str),
}

impl Frame {
    /// Bytes this frame occupies, if it is valid.
    pub(crate) fn size(&self) -> u64 {
        match *self {
            Frame::Skip(n) | Frame::Pad(n) => n,
            Frame::Record { frame_len, .. } => align8(frame_len as u64),
            Frame::Invalid(_) => 0,
        }
    }
}

/// A segment file made but not yet named ([`Segment::prepare`]): its header page and the first data bytes reserved
/// on disk, no header written yet. It grows ([`Prepared::extend`]) off the recording thread until the roll that
/// names it.
#[derive(Debug)]
pub(crate) struct Prepared {
    tmp: PathBuf,
    file: File,
    capacity: u64,
    /// Bytes of the file, all reserved: the header page and the data bytes reserved so far.
    file_len: u64,
}

/// The temporary name `path` is made under.
pub(crate) fn temporary_path(path: &Path) -> PathBuf {
    path.with_extension(crate::names::CREATING_EXT)
}

/// Reserves the blocks of `len` bytes at `offset` of `file`, growing the file over them: a full file system is an
/// error here (`ENOSPC`, `EDQUOT`, or `EFBIG` past the process's file size limit) instead of a SIGBUS when a page
/// of the mapping is first written.
// posix_fallocate through libc: std has no way to reserve blocks.
#[allow(unsafe_code)]
pub(crate) fn allocate(file: &File, offset: u64, len: u64) -> std::io::Result<()> {
    if len == 0 {
        return Ok(());
    }
    // SAFETY: plain syscall on an fd `file` owns for the duration of the call.
    let rc = unsafe {
        libc::posix_fallocate(
            std::os::fd::AsRawFd::as_raw_fd(file),
            offset as libc::off_t,
            len as libc::off_t,
        )
    };
    if rc == libc::EOPNOTSUPP || rc == libc::EINVAL {
        // No fallocate on this file system (glibc emulates it, other libcs may not): reserve the blocks by writing
        // one zero byte per 4 KiB block, which is what the emulation does; the last byte grows the file. Only
        // bytes nobody has written yet are reserved (past the end of the file).
        let end = offset + len;
        let mut at = offset;
        while at < end {
            std::os::unix::fs::FileExt::write_all_at(file, &[0], at)?;
            at = (at + 4096) & !4095;
        }
        return std::os::unix::fs::FileExt::write_all_at(file, &[0], end - 1);
    }
    if rc != 0 {
        return Err(std::io::Error::from_raw_os_error(rc));
    }
    Ok(())
}

impl Prepared {
    /// Removes the file (a writer closing with a prepared segment it never used).
    pub(crate) fn discard(self) {
        let _ = std::fs::remove_file(&self.tmp);
    }

    /// Data bytes reserved so far.
    pub(crate) fn reserved(&self) -> u64 {
        self.file_len - HEADER_SIZE
    }

    /// Reserves the data region up to data offset `end` (at most the capacity).
    pub(crate) fn extend(&mut self, end: u64) -> Result<()> {
        let want = HEADER_SIZE + end.min(self.capacity);
        if want > self.file_len {
            allocate(&self.file, self.file_len, want - self.file_len)
                .map_err(|e| JournalError::io(&self.tmp, e))?;
            self.file_len = want;
        }
        Ok(())
    }
}

/// What [`Segment::trim`] did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Trimmed {
    /// The file held more than its records and was cut (or, version 1, had the rest deallocated).
    pub(crate) cut: bool,
    /// Bytes the file no longer has allocated on disk.
    pub(crate) released: u64,
}

/// Bytes an archive segment keeps when it is trimmed: the header, the records up to `head`, and the rest of the
/// page that holds a frame header at `head` (so a reader that mapped the segment before the cut and looks for a
/// record after the last one reads zeros from the file, not a page past its end).
pub(crate) fn trimmed_len(head: u64, capacity: u64) -> u64 {
    (HEADER_SIZE + head + RECORD_HEADER_SIZE)
        .next_multiple_of(4096)
        .min(HEADER_SIZE + capacity)
}

/// Deallocates `len` bytes at `offset` of `file`, keeping its length (FALLOC_FL_PUNCH_HOLE). Where the file system
/// cannot, the blocks stay allocated: only space is at stake, never data.
// fallocate through libc.
#[allow(unsafe_code)]
fn punch_hole(file: &File, offset: u64, len: u64) {
    // SAFETY: plain syscall on an fd `file` owns for the duration of the call.
    let rc = unsafe {
        libc::fallocate(
            std::os::fd::AsRawFd::as_raw_fd(file),
            libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
            offset as libc::off_t,
            len as libc::off_t,
        )
    };
    if rc != 0 {
        tracing::debug!(
            "no hole punched past the records: {}",
            std::io::Error::last_os_error()
        );
    }
}

/// Length and allocated bytes (`st_blocks`, what `du` counts) of an open file.
pub(crate) fn disk_use(file: &File) -> std::io::Result<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    let m = file.metadata()?;
    Ok((m.len(), m.blocks() * 512))
}

/// A mapped journal file.
pub(crate) struct Segment {
    pub(crate) path: PathBuf,
    /// SIGBUS registration of `map`. Declared before it so it is dropped (unregistered) before the unmap.
    guard: Guard,
    map: MmapRaw,
    /// Kept open: the writer's `flock` lives on it.
    pub(crate) file: File,
    pub(crate) info: HeaderInfo,
    pub(crate) cap: u64,
    /// Data bytes of the file that may be read or written: `cap`, or less for a truncated file opened for
    /// inspection, and for a growable segment the length of the file less its header as last seen (the writer
    /// raises it as it reserves more, readers re-read the file's length when the head passes it).
    avail: AtomicU64,
    /// Held while a growable segment is reserved further ([`Segment::reserve_to`]): the preparer and the writer
    /// both reserve.
    reserving: std::sync::Mutex<()>,
    /// An archive segment of version 2: the file grows with its data and is cut to it when closed, so it may be
    /// shorter than the capacity. The whole capacity is mapped all the same; no access goes past `avail`.
    growable: bool,
    /// Whether the mapping may be written (only a writer's is); `write_app_meta` refuses otherwise.
    writable: bool,
    /// `(actual, expected)` file lengths of a truncated file opened for inspection.
    pub(crate) truncated: Option<(u64, u64)>,
    /// Head and tail recovered by scanning, for a read-only open of a journal whose stored ones are damaged (a
    /// writable open writes the recovered values back instead).
    fixed: Option<(AtomicU64, AtomicU64)>,
    /// Absolute range whose records the rescan of a damaged header checksummed (read-only opens).
    pub(crate) verified: Option<(u64, u64)>,
    /// What was wrong with the stored head/tail and how it was recovered, for `verify`.
    pub(crate) metadata_repair: Option<String>,
}

// `Segment` is `Send + Sync` because every field is (memmap2 makes `MmapRaw` both). Every access to mapped bytes
// that can race is an atomic of one size per location (the scheme is in the crate docs); plain borrows of mapped
// bytes exist only where nothing writes them (`body_borrowed`). Checked here so a field that is neither fails to
// compile.
const _: fn() = || {
    fn send_sync<T: Send + Sync>() {}
    send_sync::<Segment>();
};

impl Segment {
    /// Creates a new journal file: written under a temporary name, space reserved, then renamed into place, so a
    /// crash never leaves a half-written header under the real name. `reserve`: data bytes reserved on disk now
    /// (a ring reserves its whole capacity; an archive segment its first allocation step, and grows from there).
    pub(crate) fn create(
        path: &Path,
        mode: Mode,
        capacity: u64,
        base_seq: u64,
        segment_index: u64,
        description: &str,
        reserve: u64,
    ) -> Result<Segment> {
        let prepared = Self::prepare(path, capacity, reserve)?;
        Self::finish(
            prepared,
            path,
            mode,
            base_seq,
            segment_index,
            description,
            true,
        )
    }

    /// The slow half of [`Segment::create`], which needs neither the base sequence nor the recording thread: a
    /// file under a temporary name beside `path`, its header page and `reserve` data bytes reserved. An archive
    /// writer prepares its next segment this way in the background, so a roll only writes the header and renames
    /// (see [`Segment::finish`]). Until then the file is no segment: readers list only `.tbj` names.
    pub(crate) fn prepare(path: &Path, capacity: u64, reserve: u64) -> Result<Prepared> {
        if capacity < MIN_CAPACITY || !capacity.is_multiple_of(8) {
            return Err(JournalError::InvalidOptions(format!(
                "capacity {capacity} must be a multiple of 8 and at least {MIN_CAPACITY}"
            )));
        }
        let tmp = temporary_path(path);
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&tmp)
            .map_err(|e| JournalError::io(&tmp, e))?;
        let mut prepared = Prepared {
            tmp,
            file,
            capacity,
            file_len: 0,
        };
        // Reserve the blocks now so a full disk is an error here, not a SIGBUS in the middle of a recording.
        // Nothing half-made is left under the temporary name either: a failed creation (a full disk, a file size
        // limit) removes it, so the journal directory holds only what `verify` can read.
        let reserved = allocate(&prepared.file, 0, HEADER_SIZE + reserve.min(capacity));
        if let Err(e) = reserved {
            let _ = std::fs::remove_file(&prepared.tmp);
            return Err(JournalError::io(&prepared.tmp, e));
        }
        prepared.file_len = HEADER_SIZE + reserve.min(capacity);
        Ok(prepared)
    }

    /// Makes a prepared file the segment at `path`: writes its header, renames it into place and opens it.
    /// `sync`: make the header and the rename durable first (creation always does; a roll under
    /// `Durability::None` need not).
    pub(crate) fn finish(
        prepared: Prepared,
        path: &Path,
        mode: Mode,
        base_seq: u64,
        segment_index: u64,
        description: &str,
        sync: bool,
    ) -> Result<Segment> {
        let Prepared {
            tmp,
            file,
            capacity,
            ..
        } = prepared;
        let fail = |e: std::io::Error| {
            let _ = std::fs::remove_file(&tmp);
            JournalError::io(&tmp, e)
        };
        let mut header = vec![0u8; HEADER_SIZE as usize];
        let mut desc = description;
        while desc.len() > MAX_DESCRIPTION {
            let mut cut = MAX_DESCRIPTION;
            while !desc.is_char_boundary(cut) {
                cut -= 1;
            }
            desc = &desc[..cut];
        }
        header[OFF_MAGIC..OFF_MAGIC + 8].copy_from_slice(&MAGIC);
        put_u32(&mut header, OFF_VERSION, version_for(mode));
        put_u32(&mut header, OFF_HEADER_SIZE, HEADER_SIZE as u32);
        put_u32(&mut header, OFF_MODE, mode.code());
        put_u64(&mut header, OFF_CAPACITY, capacity);
        put_u64(&mut header, OFF_CREATED, now_ns());
        put_u64(&mut header, OFF_BASE_SEQ, base_seq);
        put_u64(&mut header, OFF_SEGMENT, segment_index);
        put_u32(&mut header, OFF_DESC_LEN, desc.len() as u32);
        header[OFF_DESC..OFF_DESC + desc.len()].copy_from_slice(desc.as_bytes());
        let crc = crc32c::crc32c(&header[..OFF_STATIC_CRC]);
        put_u32(&mut header, OFF_STATIC_CRC, crc);
        put_u64(&mut header, OFF_HEAD_SEQ, base_seq);
        std::os::unix::fs::FileExt::write_all_at(&file, &header, 0).map_err(fail)?;
        if sync {
            file.sync_data().map_err(fail)?;
        }
        std::fs::rename(&tmp, path).map_err(|e| JournalError::io(path, e))?;
        if let Some(dir) = path.parent().filter(|_| sync) {
            // Make the rename itself durable.
            if let Ok(d) = File::open(if dir.as_os_str().is_empty() {
                Path::new(".")
            } else {
                dir
            }) {
                let _ = d.sync_all();
            }
        }
        // The renamed file is the same inode: open it through the descriptor already held.
        Self::open_file(path, file, true, false)
    }

    /// Opens and validates an existing journal file. Never maps bytes the file does not have.
    pub(crate) fn open(path: &Path, writable: bool) -> Result<Segment> {
        Self::open_with(path, writable, false)
    }

    /// Opens a possibly truncated file read-only, for inspection: only the bytes it has are mapped, and frames past
    /// them read as invalid, so `verify` can say where the data stops and what it could read before.
    pub(crate) fn open_for_inspection(path: &Path) -> Result<Segment> {
        Self::open_with(path, false, true)
    }

    fn open_with(path: &Path, writable: bool, allow_truncated: bool) -> Result<Segment> {
        let file = OpenOptions::new()
            .read(true)
            .write(writable)
            .open(path)
            .map_err(|e| JournalError::io(path, e))?;
        Self::open_file(path, file, writable, allow_truncated)
    }

    /// [`Segment::open_with`] on a file already open at its start.
    fn open_file(
        path: &Path,
        file: File,
        writable: bool,
        allow_truncated: bool,
    ) -> Result<Segment> {
        let len = file
            .metadata()
            .map_err(|e| JournalError::io(path, e))?
            .len();
        if len < HEADER_SIZE {
            if len >= 8 {
                let mut magic = [0u8; 8];
                std::os::unix::fs::FileExt::read_exact_at(&file, &mut magic, 0)
                    .map_err(|e| JournalError::io(path, e))?;
                if magic != MAGIC {
                    return Err(bad_magic(path, magic));
                }
            }
            return Err(JournalError::Truncated {
                path: path.into(),
                actual: len,
                expected: HEADER_SIZE,
            });
        }
        let mut header = vec![0u8; HEADER_SIZE as usize];
        std::os::unix::fs::FileExt::read_exact_at(&file, &mut header, 0)
            .map_err(|e| JournalError::io(path, e))?;
        let info = parse_header(path, &header)?;
        let total = HEADER_SIZE + info.capacity;
        let growable = info.mode == Mode::Archive && info.version >= 2;
        let mut truncated = None;
        if len < total && !growable {
            if !allow_truncated || writable {
                return Err(JournalError::Truncated {
                    path: path.into(),
                    actual: len,
                    expected: total,
                });
            }
            truncated = Some((len, total));
        }
        // A growable segment is mapped whole, past the end of its file too: mapping beyond the end is allowed, and
        // no access goes past `avail` (the file's length), so none faults; the writer's mapping then covers every
        // byte it will reserve. Any other file is at least `total` bytes long (checked above) unless opened for
        // inspection, where only what it has is mapped. Shared mutation is through atomics and the single-writer
        // protocol described in lib.rs.
        let mapped = if growable { total } else { total.min(len) };
        let mut opts = MmapOptions::new();
        opts.len(mapped as usize);
        let map = if writable {
            opts.map_raw(&file)
        } else {
            opts.map_raw_read_only(&file)
        }
        .map_err(|e| JournalError::io(path, e))?;
        let cap = info.capacity;
        let guard = Guard::register(map.as_ptr(), map.len());
        let mut seg = Segment {
            path: path.into(),
            guard,
            map,
            file,
            info,
            cap,
            avail: AtomicU64::new(if growable { 0 } else { mapped - HEADER_SIZE }),
            reserving: std::sync::Mutex::new(()),
            growable,
            writable,
            truncated,
            fixed: None,
            verified: None,
            metadata_repair: None,
        };
        // The head first, then the file's length: a writer grows the file before it publishes a head within it.
        let stored_head = seg.head().load(Ordering::Acquire);
        seg.refresh_avail();
        let damage = seg.check_dynamic().err();
        // A growable file shorter than its (undamaged) head lost records: truncated, as a short file of version 1.
        if growable && damage.is_none() && stored_head > seg.avail() {
            let (actual, expected) = (HEADER_SIZE + seg.avail(), HEADER_SIZE + stored_head);
            if !allow_truncated || writable {
                return Err(JournalError::Truncated {
                    path: path.into(),
                    actual,
                    expected,
                });
            }
            seg.truncated = Some((actual, expected));
        }
        // Records carry checksums and consecutive sequences, so damaged head/tail pointers can be recovered from the
        // data itself. Only when no writer is live: a running writer moves both, and a reader must not freeze them.
        let quiet = writable || !seg.writer_live();
        if quiet && (damage.is_some() || !seg.tail_is_a_record()) {
            let (stored_tail, stored_head) = (
                seg.tail().load(Ordering::Acquire),
                seg.head().load(Ordering::Acquire),
            );
            match seg.rescan_extent() {
                Some((tail, head, how)) => {
                    let reserve = seg.reserve().load(Ordering::Acquire);
                    // A reserve more than a capacity beyond the head is as damaged as one below it.
                    let new_reserve = if reserve >= head && reserve - head <= seg.cap {
                        reserve
                    } else {
                        head
                    };
                    let note = if (tail, head) == (stored_tail, stored_head) {
                        format!(
                            "stored reserve {reserve} is below the head {head} the records confirm, or more than a \
                             capacity beyond it: the reserve pointer is damaged; it is set to the head"
                        )
                    } else {
                        format!(
                            "stored tail {stored_tail} / head {stored_head} are damaged; {how}: tail {tail}, head \
                             {head}"
                        )
                    };
                    tracing::warn!(path = %seg.path.display(), "{note}");
                    if writable {
                        // Reserve first: a reader opening meanwhile must never see a head beyond it.
                        seg.reserve().store(new_reserve, Ordering::Release);
                        seg.tail().store(tail, Ordering::Release);
                        seg.head().store(head, Ordering::Release);
                    } else {
                        seg.fixed = Some((AtomicU64::new(head), AtomicU64::new(tail)));
                    }
                    // Every record between them was checksummed by the rescan: `verify` and a writer's recovery
                    // need not again.
                    seg.verified = Some((tail, head));
                    seg.metadata_repair = Some(note);
                }
                None => {
                    if let Some(err) = damage {
                        return Err(err);
                    }
                }
            }
        } else if let Some(err) = damage {
            return Err(err);
        }
        Ok(seg)
    }

    /// Whether a writer holds this file's lock right now (the state bit alone stays set after a crash).
    pub(crate) fn writer_live(&self) -> bool {
        if !self.writer_open() {
            return false;
        }
        if self.info.mode == Mode::Archive {
            // The archive's lock lives on its directory's lock file: trust the state bit.
            return true;
        }
        // SAFETY: plain syscalls on an fd we own; a lock we obtain is released at once.
        unsafe {
            let fd = std::os::fd::AsRawFd::as_raw_fd(&self.file);
            if libc::flock(fd, libc::LOCK_SH | libc::LOCK_NB) == 0 {
                libc::flock(fd, libc::LOCK_UN);
                false
            } else {
                true
            }
        }
    }

    /// Whether the stored tail can be trusted: it starts a checksummed record, or the journal is empty there, or
    /// it is an archive segment's tail of 0. Every archive segment's records start at 0, so a first record there
    /// that fails its checksum is damage to that record, which a reader reports and passes; taken for a damaged
    /// tail, it made the rescan start the segment at the next intact run, and a reader lost the intact record
    /// after the damaged one as well.
    fn tail_is_a_record(&self) -> bool {
        let tail = self.tail().load(Ordering::Acquire);
        let head = self.head().load(Ordering::Acquire);
        if tail >= head || (self.info.mode == Mode::Archive && tail == 0) {
            return true;
        }
        match self.frame_at(tail) {
            Frame::Record { frame_len, crc, .. } => self.crc_ok(tail, frame_len, crc),
            Frame::Skip(_) | Frame::Pad(_) => true,
            Frame::Invalid(_) => false,
        }
    }

    /// Follows the chain of checksummed records with consecutive sequences from absolute position `from`, at most to
    /// `limit`; returns where it ends and how many records it holds (`None` if `from` does not start a record).
    fn chain_from(&self, from: u64, limit: u64) -> Option<(u64, u64)> {
        let mut p = from;
        let mut records = 0u64;
        let mut expected: Option<u64> = None;
        while p < limit {
            match self.frame_at(p) {
                Frame::Skip(n) | Frame::Pad(n) if self.info.mode == Mode::Ring && records > 0 => {
                    if p + n > limit {
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
                    if end > limit
                        || expected.is_some_and(|e| e != seq)
                        || !self.crc_ok(p, frame_len, crc)
                    {
                        break;
                    }
                    records += 1;
                    expected = Some(seq + 1);
                    p = end;
                }
                _ => break,
            }
        }
        (records > 0).then_some((p, records))
    }

    /// The first record at or after absolute position `from` (before `limit`) that verifies and can follow a
    /// damaged stretch: its sequence is at least `min_seq` (when known) and no further on than the bytes passed
    /// allow (every record takes at least 24 bytes), so bytes inside a payload that look like a frame cost a
    /// comparison, not a checksum. Steps 8 bytes at a time; linear in the distance scanned. Returns its position
    /// and sequence.
    pub(crate) fn resync(&self, from: u64, limit: u64, min_seq: Option<u64>) -> Option<(u64, u64)> {
        let ring = self.info.mode == Mode::Ring;
        let mut p = align8(from);
        while p < limit {
            match self.frame_at(p) {
                Frame::Record {
                    frame_len,
                    crc,
                    seq,
                    ..
                } => {
                    let end = p + align8(frame_len as u64);
                    let plausible = min_seq
                        .is_none_or(|m| seq >= m && seq - m <= (p - from) / RECORD_HEADER_SIZE + 1);
                    if plausible && end <= limit && self.crc_ok(p, frame_len, crc) {
                        return Some((p, seq));
                    }
                    p += 8;
                }
                Frame::Skip(n) | Frame::Pad(n) if ring => p += n,
                _ => p += 8,
            }
        }
        None
    }

    /// The chain of records continuing sequence `expected` right at `head` (`None` if there is none): what a
    /// damaged (too low) head pointer would hide.
    pub(crate) fn chain_after(&self, head: u64, expected: Option<u64>) -> Option<(u64, u64)> {
        let limit = if self.info.mode == Mode::Ring {
            self.tail().load(Ordering::Acquire).saturating_add(self.cap)
        } else {
            self.cap
        };
        match self.frame_at(head) {
            Frame::Record { seq, .. } if expected.is_none_or(|e| e == seq) => {
                self.chain_from(head, limit)
            }
            _ => None,
        }
    }

    /// The start of the run of checksummed, consecutive records that ends exactly at `head` (and how many records it
    /// holds), looking back at most one capacity: the tail a damaged (but plausible) tail pointer hid.
    ///
    /// One pass, linear in the capacity whatever the damage: records in the last capacity before `head` were all
    /// written in order and never overlap, so the runs they form are disjoint and the one wanted is the last.
    /// Where no record verifies, the scan moves on 8 bytes at a time; a frame found there must carry a sequence
    /// after the last verified one and no further on than the bytes between them allow (every record takes at
    /// least 24 bytes) before its checksum is computed, so bytes inside a payload that happen to look like a long
    /// frame cost a comparison, not a checksum over half the ring (which made this quadratic).
    fn chain_ending_at(&self, head: u64) -> Option<(u64, u64)> {
        let ring = self.info.mode == Mode::Ring;
        let mut p = head.saturating_sub(self.cap);
        // The current run: its start, its record count, the sequence that continues it.
        let mut run: Option<(u64, u64, u64)> = None;
        // The last record that verified (sequence, position): sequences only grow along the window.
        let mut last: Option<(u64, u64)> = None;
        while p < head {
            match self.frame_at(p) {
                Frame::Skip(n) | Frame::Pad(n) if ring && run.is_some() => {
                    if p + n > head {
                        return None;
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
                    let continues = run.is_some_and(|(_, _, next)| next == seq);
                    let plausible = continues
                        || last.is_none_or(|(s, at)| {
                            seq > s && seq - s <= (p - at) / RECORD_HEADER_SIZE + 1
                        });
                    if end <= head && plausible && self.crc_ok(p, frame_len, crc) {
                        run = Some(match run {
                            Some((start, n, _)) if continues => (start, n + 1, seq + 1),
                            _ => (p, 1, seq + 1),
                        });
                        last = Some((seq, p));
                        p = end;
                    } else {
                        run = None;
                        p += 8;
                    }
                }
                _ => {
                    run = None;
                    p += 8;
                }
            }
        }
        run.filter(|_| p == head).map(|(start, n, _)| (start, n))
    }

    /// Recovers (tail, head) from the records themselves. Two readings of the damage: the tail is right (the head is
    /// the end of its chain), or the head is right (the tail is the first record of the run ending exactly there).
    /// Absolute positions are only known modulo the capacity from the data, so both readings can look consistent;
    /// the writer's `reserve`, which tracks the head (raised before every frame, the head published after), says
    /// which pointer to trust first.
    ///
    /// Each reading is one pass over at most a capacity of records, and a second reading is only taken when the
    /// first finds nothing: a damaged header costs about one checksummed pass over the ring, whatever field is hit.
    fn rescan_extent(&self) -> Option<(u64, u64, String)> {
        let tail = self.tail().load(Ordering::Acquire);
        let head = self.head().load(Ordering::Acquire);
        let reserve = self.reserve().load(Ordering::Acquire);
        let ring = self.info.mode == Mode::Ring;
        let from_tail = || {
            if !tail.is_multiple_of(8) || !(ring || tail == 0) {
                return None;
            }
            let limit = if ring {
                tail.saturating_add(self.cap)
            } else {
                self.cap
            };
            let (end, n) = self.chain_from(tail, limit)?;
            Some(if end == head {
                // The records confirm the stored pair: what is damaged is the reserve.
                (
                    tail,
                    head,
                    "the records confirm the stored tail and head".to_string(),
                )
            } else {
                (
                    tail,
                    end,
                    format!("head recovered from {n} intact records after the tail"),
                )
            })
        };
        let from_head = || {
            if !head.is_multiple_of(8) || !(ring || head <= self.cap) {
                return None;
            }
            let (p, n) = self.chain_ending_at(head)?;
            Some((
                p,
                head,
                format!("tail recovered as the first of {n} intact records ending at the head"),
            ))
        };
        // A head within a capacity below the reserve is what a writer leaves (equal after a clean close, below it
        // by a batch not yet published): the tail is the suspect, so the run ending at the head is read first.
        // A head beyond the reserve was never stored by a writer: the chain from the tail is read first.
        let head_plausible = head <= reserve && reserve - head <= self.cap;
        if head_plausible {
            from_head().or_else(from_tail)
        } else {
            from_tail().or_else(from_head)
        }
    }

    /// Sanity of the writer-maintained fields, so walking from them can never leave the data region.
    fn check_dynamic(&self) -> Result<()> {
        let head = self.head().load(Ordering::Acquire);
        let tail = self.tail().load(Ordering::Acquire);
        let bad = |reason: String| {
            Err(JournalError::CorruptHeader {
                path: self.path.clone(),
                offset: OFF_HEAD as u64,
                reason,
            })
        };
        if tail > head {
            return bad(format!("tail {tail} beyond head {head}"));
        }
        // The writer raises `reserve` before it stores a frame and publishes `head` after, so a head beyond it was
        // not written by a writer: a flipped bit. Without this, a head raised by less than the ring's free space
        // would pass every other check and lead a walk into records of the previous lap.
        let reserve = self.reserve().load(Ordering::Acquire);
        if head > reserve {
            return bad(format!("head {head} beyond the writer's reserve {reserve}"));
        }
        if reserve - head > self.cap {
            return bad(format!(
                "reserve {reserve} more than a capacity beyond the head {head}"
            ));
        }
        if head - tail > self.cap {
            return bad(format!(
                "head {head} - tail {tail} exceeds capacity {}",
                self.cap
            ));
        }
        if self.info.mode == Mode::Archive && (head > self.cap || tail != 0) {
            return bad(format!(
                "archive segment head {head} / tail {tail} out of range"
            ));
        }
        if !tail.is_multiple_of(8) || !head.is_multiple_of(8) {
            return bad(format!("unaligned head {head} or tail {tail}"));
        }
        Ok(())
    }

    pub(crate) fn raw(&self) -> &MmapRaw {
        &self.map
    }

    /// The header word at byte `off`. Callers pass the `OFF_*` constants, so the check folds away.
    #[inline]
    fn atomic_u64(&self, off: usize) -> &AtomicU64 {
        assert!(off.is_multiple_of(8) && off + 8 <= HEADER_SIZE as usize);
        // SAFETY: `off` is 8-byte aligned and inside the header page (checked above), which every mapping holds
        // (files shorter than the header are refused), and the mapping is page aligned. The kernel keeps the page
        // alive while `self.map` lives, which outlives the returned borrow; all access to it is atomic.
        unsafe { &*(self.map.as_ptr().add(off) as *const AtomicU64) }
    }

    /// Absolute byte position just past the last published record.
    #[inline]
    pub(crate) fn head(&self) -> &AtomicU64 {
        match &self.fixed {
            Some((head, _)) => head,
            None => self.atomic_u64(OFF_HEAD),
        }
    }
    /// Sequence the next record will get (published with `head`; informational).
    #[inline]
    pub(crate) fn head_seq(&self) -> &AtomicU64 {
        self.atomic_u64(OFF_HEAD_SEQ)
    }
    /// Absolute position of the oldest intact record; raised before the writer overwrites.
    #[inline]
    pub(crate) fn tail(&self) -> &AtomicU64 {
        match &self.fixed {
            Some((_, tail)) => tail,
            None => self.atomic_u64(OFF_TAIL),
        }
    }
    /// Highest absolute position the writer may have touched; bytes in (head, reserve] are in flight.
    #[inline]
    pub(crate) fn reserve(&self) -> &AtomicU64 {
        self.atomic_u64(OFF_RESERVE)
    }
    /// The state bits ([`STATE_WRITER_OPEN`], [`STATE_SEALED`]).
    #[inline]
    pub(crate) fn state(&self) -> &AtomicU32 {
        // SAFETY: as in `atomic_u64`: `OFF_STATE` is a 4-byte-aligned constant inside the always-mapped header page.
        unsafe { &*(self.map.as_ptr().add(OFF_STATE) as *const AtomicU32) }
    }

    /// Ring-lap accounting as stored: (records, bytes, laps).
    #[inline]
    fn overwritten_counters(&self) -> (&AtomicU64, &AtomicU64, &AtomicU64) {
        (
            self.atomic_u64(OFF_OVERWRITTEN_RECORDS),
            self.atomic_u64(OFF_OVERWRITTEN_BYTES),
            self.atomic_u64(OFF_LAPS),
        )
    }

    /// Stores the ring-lap counters and their checksum (the writer, at each publish).
    pub(crate) fn store_overwritten(&self, records: u64, bytes: u64, laps: u64) {
        let (r, b, l) = self.overwritten_counters();
        r.store(records, Ordering::Relaxed);
        b.store(bytes, Ordering::Relaxed);
        l.store(laps, Ordering::Relaxed);
        self.atomic_u64(OFF_OVERWRITTEN_CRC)
            .store(counters_word(records, bytes, laps), Ordering::Release);
    }

    /// The ring-lap counters as stored, and whether their checksum holds. A read racing the writer's update is
    /// retried (bounded); files written before the checksum existed (its word zero) are [`Counters::Unchecked`].
    /// `live`: a writer may be storing them now (never true for the writer itself: asking the lock whether a
    /// writer is live through the writer's own descriptor would release its lock).
    pub(crate) fn overwritten(&self, live: bool) -> Counters {
        let mut seen = (0, 0, 0);
        for _ in 0..64 {
            let word = self.atomic_u64(OFF_OVERWRITTEN_CRC).load(Ordering::Acquire);
            let (r, b, l) = self.overwritten_counters();
            seen = (
                r.load(Ordering::Acquire),
                b.load(Ordering::Acquire),
                l.load(Ordering::Acquire),
            );
            if word == 0 {
                return Counters::Unchecked(seen);
            }
            if word == counters_word(seen.0, seen.1, seen.2) {
                return Counters::Valid(seen);
            }
            if !live {
                break;
            }
            std::thread::yield_now();
        }
        Counters::Damaged(seen)
    }

    /// The ring-lap counters to trust, and what was wrong with the stored ones. Stored counters whose checksum
    /// fails, or (files from before the checksum) that disagree with the records, are recomputed from the ring
    /// itself: records overwritten are the oldest record's sequence less one (sequences start at 1 and are
    /// consecutive), laps are the tail's position over the capacity, and bytes, which the records cannot give back
    /// (the padding at the end of each lap is gone), are bounded by the tail's position, padding included.
    ///
    /// `live`: another process's writer may be moving the ring (see [`Segment::overwritten`]).
    pub(crate) fn overwritten_checked(&self, live: bool) -> ((u64, u64, u64), Option<String>) {
        if self.info.mode != Mode::Ring {
            return ((0, 0, 0), None);
        }
        let stored = self.overwritten(live);
        let recomputed = || {
            let tail = self.tail().load(Ordering::Acquire);
            if tail >= self.head().load(Ordering::Acquire) {
                return (tail == 0).then_some((0, 0, 0));
            }
            match self.frame_at(tail) {
                Frame::Record { seq, .. } if seq >= 1 => Some((seq - 1, tail, tail / self.cap)),
                _ => None,
            }
        };
        match stored {
            Counters::Valid(c) => (c, None),
            Counters::Unchecked(c) => {
                if live {
                    return (c, None);
                }
                match recomputed() {
                    Some(r) if (r.0, r.2) != (c.0, c.2) => (
                        r,
                        Some(format!(
                            "the ring-lap counters (records {}, bytes {}, laps {}) disagree with the records: \
                             recomputed as records {}, laps {}, bytes at most {}",
                            c.0, c.1, c.2, r.0, r.2, r.1
                        )),
                    ),
                    _ => (c, None),
                }
            }
            Counters::Damaged(c) => {
                let r = recomputed().unwrap_or((0, 0, 0));
                (
                    r,
                    Some(format!(
                        "the ring-lap counters (records {}, bytes {}, laps {}) fail their checksum: damaged; \
                         recomputed from the records as records {}, laps {}, bytes at most {}",
                        c.0, c.1, c.2, r.0, r.2, r.1
                    )),
                )
            }
        }
    }

    /// The 8-byte word at byte `at` of the mapping (header or data region).
    ///
    /// # Safety
    ///
    /// `at` must be a multiple of 8 with `at + 8` inside the mapping (the header page, or `HEADER_SIZE + off` with
    /// `off + 8 <= avail`). Every access to the mapped bytes anywhere in this crate is an 8-byte atomic at an
    /// 8-aligned offset (or a 4-byte atomic at the state word, which nothing else overlaps), so the access sizes
    /// never overlap partially, as the memory model requires of racing atomics.
    #[inline]
    unsafe fn word_at(&self, at: usize) -> &AtomicU64 {
        debug_assert!(at.is_multiple_of(8) && at + 8 <= self.map.len());
        // SAFETY: the caller guarantees an aligned word inside the mapping, which lives as long as `self`; the
        // word is only ever accessed atomically (see above).
        unsafe { AtomicU64::from_ptr(self.map.as_mut_ptr().add(at) as *mut u64) }
    }

    /// Faults the SIGBUS guard redirected in this mapping: non-zero once the file shrank under it.
    #[inline]
    pub(crate) fn faults(&self) -> u32 {
        self.guard.faults()
    }

    /// The error for a mapping the guard caught touching pages past the end of the file.
    pub(crate) fn truncated_under_us(&self) -> JournalError {
        let actual = self.file.metadata().map(|m| m.len()).unwrap_or(0);
        JournalError::Truncated {
            path: self.path.clone(),
            actual,
            expected: if self.growable {
                HEADER_SIZE + self.head().load(Ordering::Acquire)
            } else {
                HEADER_SIZE + self.cap
            },
        }
    }

    /// Data bytes of the file that may be accessed (see the field).
    #[inline]
    pub(crate) fn avail(&self) -> u64 {
        // Relaxed: it bounds accesses to bytes the file has; the kernel orders the file's growth (a completed
        // system call) before any access that depends on it, whatever the memory order of this load.
        self.avail.load(Ordering::Relaxed)
    }

    /// A growable segment: re-reads the file's length (a writer has grown it since).
    pub(crate) fn refresh_avail(&self) {
        if !self.growable {
            return;
        }
        let len = self.file.metadata().map(|m| m.len()).unwrap_or(0);
        let data = len.saturating_sub(HEADER_SIZE).min(self.cap);
        self.avail.store(data, Ordering::Release);
    }

    /// The published head (acquire). On a growable segment the file's length is re-read when the head has moved
    /// past what was known of it: the writer grows the file before it publishes records there.
    #[inline]
    pub(crate) fn published_head(&self) -> u64 {
        let head = self.head().load(Ordering::Acquire);
        if head > self.avail() {
            self.refresh_avail();
        }
        head
    }

    /// A growable segment: reserves the data region up to data offset `end` (at most the capacity) on disk,
    /// growing the file over it, so the writer may store there. Writer side only: the preparer thread, or the
    /// writer itself when it has caught up with the preparer. A full disk is [`JournalError::DiskFull`], and
    /// nothing more is reserved.
    pub(crate) fn reserve_to(&self, end: u64) -> Result<()> {
        let end = end.min(self.cap);
        if !self.growable {
            return Ok(());
        }
        // One reservation at a time: where the file system has no fallocate, `allocate` writes zero bytes past
        // `avail`, and a second reserver that read the same `avail` could move it on and let its writer store where
        // the first one's zeros are still to land.
        let _one = self.reserving.lock().unwrap_or_else(|e| e.into_inner());
        let have = self.avail();
        if end > have {
            allocate(&self.file, HEADER_SIZE + have, end - have)
                .map_err(|e| JournalError::io(&self.path, e))?;
            self.avail.fetch_max(end, Ordering::AcqRel);
        }
        Ok(())
    }

    /// Writes `bytes` to the file at data offset `off` (the writer's staged records), inside what is reserved.
    pub(crate) fn write_data(&self, off: u64, bytes: &[u8]) -> Result<()> {
        debug_assert!(off + bytes.len() as u64 <= self.avail());
        std::os::unix::fs::FileExt::write_all_at(&self.file, bytes, HEADER_SIZE + off)
            .map_err(|e| JournalError::io(&self.path, e))
    }

    /// An archive segment whose records are all published (sealed, closed, or recovered by a writer that opens
    /// it): gives back the disk space past its records. A writer that goes on writing it reserves anew. A growable file (version 2) is cut to [`trimmed_len`]; a version 1 file, whose
    /// length readers of that version check, keeps its length and has the blocks past its records deallocated
    /// (a hole), where the file system can. Only the writer side calls this, holding the journal's lock, after
    /// the last publish; a ring is never trimmed (it is bounded by design).
    pub(crate) fn trim(&self) -> Result<Trimmed> {
        // A version 1 segment a writer may still write (not sealed) keeps its blocks: it is written in place,
        // never grown, so a hole punched there would be allocated again by a page fault, which a full disk
        // turns into a SIGBUS.
        if self.info.mode != Mode::Archive || !self.writable || !(self.growable || self.sealed()) {
            return Ok(Trimmed::default());
        }
        let io = |e| JournalError::io(&self.path, e);
        let head = self.head().load(Ordering::Acquire);
        let keep = trimmed_len(head, self.cap);
        let (len, before) = disk_use(&self.file).map_err(io)?;
        let cut = if self.growable {
            len > keep
        } else {
            // A version 1 file keeps its length; what counts is whether it still has blocks past its records.
            before > keep
        };
        if !cut {
            return Ok(Trimmed::default());
        }
        if self.growable {
            self.file.set_len(keep).map_err(io)?;
            self.avail.store(keep - HEADER_SIZE, Ordering::Release);
        } else {
            punch_hole(&self.file, keep, len - keep);
        }
        let (_, after) = disk_use(&self.file).map_err(io)?;
        Ok(Trimmed {
            cut,
            released: before.saturating_sub(after),
        })
    }

    /// The newest valid application-metadata block, if any. The slots are copied out with word loads (the writer
    /// may be rewriting one) and validated on the copy. If neither slot validates and a generation changed while
    /// they were read (the writer rewrote both meanwhile), the read is retried, a bounded number of times.
    pub(crate) fn app_meta(&self) -> Option<Vec<u8>> {
        for _ in 0..64 {
            let (best, generations) = self.read_app_meta_slots();
            if best.is_some() || generations == self.app_meta_generations() {
                return best;
            }
            std::thread::yield_now();
        }
        None
    }

    fn app_meta_generations(&self) -> [u64; 2] {
        // SAFETY: both slots' first words are 8-aligned and inside the always-mapped header page.
        let generation = |slot: usize| unsafe { self.word_at(OFF_APP_META + slot * APP_META_SLOT) };
        [0, 1].map(|slot| u64::from_le(generation(slot).load(Ordering::Acquire)))
    }

    fn read_app_meta_slots(&self) -> (Option<Vec<u8>>, [u64; 2]) {
        let generations = self.app_meta_generations();
        let mut best: Option<(u64, Vec<u8>)> = None;
        for slot in 0..2 {
            let at = OFF_APP_META + slot * APP_META_SLOT;
            // SAFETY: both slots are 8-aligned and lie inside the 4096-byte header page, which is always mapped.
            let word =
                |i: usize| u64::from_le(unsafe { self.word_at(at + i) }.load(Ordering::Acquire));
            let len_crc = word(8);
            let generation = word(0);
            let (len, crc) = ((len_crc as u32) as usize, (len_crc >> 32) as u32);
            if generation == 0 || len > APP_META_MAX {
                continue;
            }
            let mut data = Vec::with_capacity(len.next_multiple_of(8));
            let mut i = APP_META_HEADER;
            while data.len() < len {
                data.extend_from_slice(&word(i).to_le_bytes());
                i += 8;
            }
            data.truncate(len);
            if app_meta_crc(generation, &data) != crc {
                continue;
            }
            if best.as_ref().is_none_or(|(g, _)| generation > *g) {
                best = Some((generation, data));
            }
        }
        (best.map(|(_, data)| data), generations)
    }

    /// Writes `data` into the slot not holding the newest block, length and checksum last (one word), so a crash
    /// mid-write leaves the previous block readable. Only the writer calls it. Every store is an 8-byte atomic, so
    /// a reader copying the slot at the same time reads some mix of old and new words, which the checksum rejects.
    pub(crate) fn write_app_meta(&self, data: &[u8]) -> Result<()> {
        if data.len() > APP_META_MAX {
            return Err(JournalError::InvalidOptions(format!(
                "application metadata of {} bytes exceeds {APP_META_MAX}",
                data.len()
            )));
        }
        if !self.writable {
            return Err(JournalError::InvalidOptions(
                "application metadata can only be written through a writer".into(),
            ));
        }
        // SAFETY: for each `word_at` below, slot offsets are 8-aligned and inside the header page, and the whole
        // slot (16-byte header plus at most `APP_META_MAX` data bytes) fits in `APP_META_SLOT`.
        let word = |at: usize| unsafe { self.word_at(at) };
        let mut newest = (0u64, 0usize);
        for slot in 0..2 {
            let generation =
                u64::from_le(word(OFF_APP_META + slot * APP_META_SLOT).load(Ordering::Acquire));
            if generation >= newest.0 {
                newest = (generation, slot);
            }
        }
        let slot = 1 - newest.1;
        let generation = newest.0 + 1;
        let at = OFF_APP_META + slot * APP_META_SLOT;
        let crc = app_meta_crc(generation, data);
        word(at + 8).store(0, Ordering::Relaxed);
        for (i, chunk) in data.chunks(8).enumerate() {
            let mut w = [0u8; 8];
            w[..chunk.len()].copy_from_slice(chunk);
            word(at + APP_META_HEADER + 8 * i)
                .store(u64::from_le_bytes(w).to_le(), Ordering::Relaxed);
        }
        word(at).store(generation.to_le(), Ordering::Relaxed);
        word(at + 8).store(
            (data.len() as u64 | (crc as u64) << 32).to_le(),
            Ordering::Release,
        );
        Ok(())
    }

    /// The data-region word at offset `off` (a multiple of 8), for the writer's stores.
    ///
    /// # Safety
    ///
    /// `off + 8 <= cap` and `off` a multiple of 8, in a full-length mapping (the writer's always is).
    #[inline]
    pub(crate) unsafe fn data_word(&self, off: u64) -> &AtomicU64 {
        debug_assert!(off + 8 <= self.avail());
        // SAFETY: the caller guarantees the word is inside the mapped data region and aligned.
        unsafe { self.word_at((HEADER_SIZE + off) as usize) }
    }

    /// The `n` data-region words from offset `off` (a multiple of 8), for the writer's stores of a whole frame.
    /// One bounds check and one pointer load per frame instead of one per word.
    ///
    /// # Panics
    ///
    /// If the words do not lie inside the mapped data region, or `off` is not 8-aligned.
    #[inline]
    pub(crate) fn data_words(&self, off: u64, n: usize) -> &[AtomicU64] {
        assert!(
            off.is_multiple_of(8) && off + 8 * n as u64 <= self.avail(),
            "{n} words at data offset {off} are outside the mapped data region"
        );
        // SAFETY: the words lie inside the mapping (checked above), which lives as long as `self`; the mapping is
        // page aligned and `HEADER_SIZE + off` a multiple of 8, so each word is aligned for `AtomicU64` (same size
        // and layout as `u64`). Every access to mapped data bytes is an 8-byte atomic (see `word_at`), so handing
        // out shared atomics is sound.
        unsafe {
            std::slice::from_raw_parts(
                self.map.as_ptr().add((HEADER_SIZE + off) as usize) as *const AtomicU64,
                n,
            )
        }
    }

    /// Pointer to data-region offset `off`. Hot paths track offsets to avoid a division per record.
    ///
    /// # Safety
    ///
    /// `off` must lie inside the mapped data region: `off < cap`, and for a truncated file opened for inspection
    /// `off <= avail` as well (`frame_at_off` checks both before it reads).
    #[inline]
    pub(crate) unsafe fn data_ptr_off(&self, off: u64) -> *mut u8 {
        debug_assert!(off < self.cap && off <= self.avail());
        // SAFETY: the caller guarantees `HEADER_SIZE + off` is inside the mapping, so the offset pointer stays in
        // the same allocation.
        unsafe { self.map.as_mut_ptr().add((HEADER_SIZE + off) as usize) }
    }

    /// The writer's view of its data region for walking a ring's tail ([`OwnFrames`]); `None` if the region is
    /// not mapped whole (only a truncated file opened for inspection is not, never a writer's).
    #[inline]
    pub(crate) fn own_frames(&self) -> Option<OwnFrames<'_>> {
        (self.avail() >= self.cap).then(|| OwnFrames {
            // SAFETY: offset 0 of the data region is inside the mapping (`cap > 0`, the region mapped whole).
            base: unsafe { self.data_ptr_off(0) },
            cap: self.cap,
            ring: self.info.mode == Mode::Ring,
            _seg: std::marker::PhantomData,
        })
    }

    /// File offset of absolute position `pos` (for error messages and `verify`).
    pub(crate) fn file_offset(&self, pos: u64) -> u64 {
        HEADER_SIZE + pos % self.cap
    }

    #[inline]
    pub(crate) fn max_payload(&self) -> usize {
        (self.cap / 2 - RECORD_HEADER_SIZE).min(i32::MAX as u64 - RECORD_HEADER_SIZE) as usize
    }

    /// Decodes the frame at absolute position `pos`.
    pub(crate) fn frame_at(&self, pos: u64) -> Frame {
        self.frame_at_off(pos % self.cap)
    }

    /// Decodes the frame at data-region offset `off`. Reads only header words, always inside the mapping; the
    /// caller decides whether the bytes can be trusted (published, not lapped).
    #[inline]
    pub(crate) fn frame_at_off(&self, off: u64) -> Frame {
        let rem = self.cap - off;
        if rem < RECORD_HEADER_SIZE {
            return Frame::Skip(rem);
        }
        if off + RECORD_HEADER_SIZE > self.avail() {
            return Frame::Invalid(TRUNCATED);
        }
        // SAFETY: off + 24 <= avail (checked above) and `off` is a multiple of 8 (frames are 8-aligned).
        let word = |i: u64| unsafe { self.word_at((HEADER_SIZE + off + i) as usize) };
        // Frame length and checksum share the first word, stored last by the writer (release): this acquire load
        // pairs with it. A word the writer is overwriting in a ring reads as some value the caller discards after
        // checking `tail`.
        let w0 = u64::from_le(word(0).load(Ordering::Acquire));
        let frame_len = w0 as u32;
        if frame_len & PAD_FLAG != 0 {
            let n = (frame_len & !PAD_FLAG) as u64;
            return if n == rem && self.info.mode == Mode::Ring {
                Frame::Pad(n)
            } else {
                Frame::Invalid("padding frame does not end at the end of the ring")
            };
        }
        if (frame_len as u64) < RECORD_HEADER_SIZE {
            return Frame::Invalid(if frame_len == 0 {
                "zero frame length"
            } else {
                "frame shorter than its header"
            });
        }
        if align8(frame_len as u64) > rem
            || frame_len as u64 - RECORD_HEADER_SIZE > self.max_payload() as u64
        {
            return Frame::Invalid("frame length runs past the end of the data region");
        }
        if off + align8(frame_len as u64) > self.avail() {
            return Frame::Invalid(TRUNCATED);
        }
        Frame::Record {
            frame_len,
            crc: (w0 >> 32) as u32,
            seq: u64::from_le(word(8).load(Ordering::Relaxed)),
            capture_ns: u64::from_le(word(16).load(Ordering::Relaxed)),
        }
    }

    /// Panics unless a record frame of `frame_len` bytes at data offset `off` lies inside the mapped data region.
    /// `frame_at_off` only returns frames that do, so this never fires; it keeps the two slice constructors below
    /// sound whatever their arguments.
    #[inline]
    fn check_frame_bounds(&self, off: u64, frame_len: u32) {
        let len = frame_len as u64;
        assert!(
            len >= RECORD_HEADER_SIZE && off + align8(len) <= self.avail(),
            "frame of {len} bytes at data offset {off} is outside the mapped data region"
        );
    }

    /// Copies the body of the record frame at data-region offset `off` (bytes 8..align8(frame_len): sequence,
    /// capture time, payload, zero padding) into `dst` with relaxed 8-byte atomic loads. The copy may be torn if the
    /// writer is overwriting the frame (a lapped ring reader): callers validate it afterwards (checksum on the
    /// copy, then `tail`), never the mapped bytes.
    ///
    /// # Panics
    ///
    /// If the frame does not lie inside the mapped data region (never for a frame `frame_at_off` returned).
    #[inline]
    pub(crate) fn copy_body(&self, off: u64, frame_len: u32, dst: &mut Vec<u8>) {
        self.check_frame_bounds(off, frame_len);
        let n = (align8(frame_len as u64) - 8) as usize;
        // Every byte is overwritten below: only growth is zero-filled (never, for records of one size).
        dst.truncate(n);
        dst.resize(n, 0);
        let base = (HEADER_SIZE + off + 8) as usize;
        for (i, chunk) in dst.chunks_exact_mut(8).enumerate() {
            // SAFETY: the frame lies inside the mapped data region (checked above), so every 8-aligned word of its
            // body does too.
            let w = unsafe { self.word_at(base + 8 * i) }.load(Ordering::Relaxed);
            chunk.copy_from_slice(&w.to_ne_bytes());
        }
    }

    /// The body of the record frame at data offset `off` (bytes 8..align8(frame_len)), borrowed from the mapping.
    ///
    /// # Safety
    ///
    /// Nothing may write these bytes while the borrow lives: the segment is a sealed archive segment (its writer
    /// finished it and no writer ever rewrites a sealed segment's records), or the caller is the journal's single
    /// writer reading bytes it wrote itself (readers only load).
    ///
    /// # Panics
    ///
    /// If the frame does not lie inside the mapped data region (never for a frame `frame_at_off` returned).
    #[inline]
    pub(crate) unsafe fn body_borrowed(&self, off: u64, frame_len: u32) -> &[u8] {
        self.check_frame_bounds(off, frame_len);
        // SAFETY: the whole frame lies inside the mapped data region (checked above), the mapping lives as long as
        // `self`, and the caller guarantees no concurrent writes, so a shared slice over it is sound.
        unsafe {
            std::slice::from_raw_parts(
                self.data_ptr_off(off).add(8),
                (align8(frame_len as u64) - 8) as usize,
            )
        }
    }

    /// Checksum of the frame at data offset `off`, computed with word loads from the map (so it may run while the
    /// writer overwrites the frame; the caller checks `tail` afterwards).
    ///
    /// # Panics
    ///
    /// If the frame does not lie inside the mapped data region (never for a frame `frame_at_off` returned).
    pub(crate) fn crc_at_off(&self, off: u64, frame_len: u32) -> u32 {
        self.check_frame_bounds(off, frame_len);
        let n = (align8(frame_len as u64) - 8) as usize;
        let base = (HEADER_SIZE + off + 8) as usize;
        let mut crc = frame_len;
        let mut buf = [0u8; 512];
        let mut done = 0;
        while done < n {
            let take = (n - done).min(buf.len());
            for (i, chunk) in buf[..take].chunks_exact_mut(8).enumerate() {
                // SAFETY: as in `copy_body`: an aligned word of a frame inside the mapped data region.
                let w = unsafe { self.word_at(base + done + 8 * i) }.load(Ordering::Relaxed);
                chunk.copy_from_slice(&w.to_ne_bytes());
            }
            crc = crc32c::crc32c_append(crc, &buf[..take]);
            done += take;
        }
        crc
    }

    /// Whether the record frame at absolute position `pos` matches its checksum.
    pub(crate) fn crc_ok(&self, pos: u64, frame_len: u32, crc: u32) -> bool {
        self.crc_at_off(pos % self.cap, frame_len) == crc
    }

    pub(crate) fn sealed(&self) -> bool {
        self.state().load(Ordering::Acquire) & STATE_SEALED != 0
    }

    pub(crate) fn writer_open(&self) -> bool {
        self.state().load(Ordering::Acquire) & STATE_WRITER_OPEN != 0
    }

    /// Takes the exclusive writer lock (released by the kernel when the process dies).
    pub(crate) fn lock_exclusive(&self) -> Result<()> {
        // SAFETY: plain syscall on an fd we own.
        let rc = unsafe {
            libc::flock(
                std::os::fd::AsRawFd::as_raw_fd(&self.file),
                libc::LOCK_EX | libc::LOCK_NB,
            )
        };
        if rc != 0 {
            let err = std::io::Error::last_os_error();
            if err.raw_os_error() == Some(libc::EWOULDBLOCK) {
                return Err(JournalError::Locked {
                    path: self.path.clone(),
                });
            }
            return Err(JournalError::io(&self.path, err));
        }
        Ok(())
    }

    /// msync of the data bytes between absolute positions `from..to` plus the header page.
    pub(crate) fn sync_range(&self, from: u64, to: u64) -> Result<()> {
        let io = |e| JournalError::io(&self.path, e);
        if to > from {
            let len = to - from;
            if len >= self.cap {
                self.map
                    .flush_range(HEADER_SIZE as usize, self.cap as usize)
                    .map_err(io)?;
            } else {
                let start = from % self.cap;
                let first = len.min(self.cap - start);
                self.map
                    .flush_range((HEADER_SIZE + start) as usize, first as usize)
                    .map_err(io)?;
                if first < len {
                    self.map
                        .flush_range(HEADER_SIZE as usize, (len - first) as usize)
                        .map_err(io)?;
                }
            }
        }
        self.map.flush_range(0, HEADER_SIZE as usize).map_err(io)
    }
}

/// A writer's decoder of the frames it wrote, for its walk over the tail of a ring: the data region's base and
/// capacity stay in registers across the walk, and each step is one load (of the length word only) and the few
/// checks that keep the walk inside the region, since every append of a lapped ring depends on it
/// ([`Segment::frame_at_off`] decodes and checks everything, for readers of untrusted files). A reopened ring's
/// oldest records come from disk, so an impossible frame is `None`, never a panic.
pub(crate) struct OwnFrames<'a> {
    /// Start of the data region, mapped whole (`avail >= cap`).
    base: *mut u8,
    cap: u64,
    ring: bool,
    _seg: std::marker::PhantomData<&'a Segment>,
}

impl<'a> OwnFrames<'a> {
    /// The bytes the frame at data offset `off` takes and, for a record, its frame length (0 for padding or a
    /// too-short end of the lap); `None` if the frame is impossible (or `off` is past the region).
    #[inline(always)]
    pub(crate) fn at(&self, off: u64) -> Option<(u64, u32)> {
        let rem = self.cap.checked_sub(off)?;
        if rem < RECORD_HEADER_SIZE {
            return Some((rem, 0));
        }
        // SAFETY: `off + 24 <= cap` and the region is mapped whole, so the word is inside the mapping; `off` is a
        // multiple of 8 (frames are 8-aligned, and so is every offset the walk reaches). Relaxed: the writer
        // reads back its own stores (readers never store). Same access as `Segment::word_at`.
        let w0 = u64::from_le(
            unsafe { AtomicU64::from_ptr(self.base.add(off as usize) as *mut u64) }
                .load(Ordering::Relaxed),
        );
        let frame_len = w0 as u32;
        if frame_len & PAD_FLAG != 0 {
            let n = (frame_len & !PAD_FLAG) as u64;
            return (n == rem && self.ring).then_some((n, 0));
        }
        let size = align8(frame_len as u64);
        (frame_len as u64 >= RECORD_HEADER_SIZE && size <= rem).then_some((size, frame_len))
    }

    /// Asks the CPU to start loading the cache line holding data byte `off`. A hint: it reads nothing and faults
    /// on nothing, so an `off` past the region (a walk near the end of the ring) only wastes it.
    #[inline(always)]
    pub(crate) fn prefetch(&self, off: u64) {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: a prefetch dereferences nothing; `wrapping_add` makes the address without claiming it is in
        // bounds.
        unsafe {
            std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(
                self.base.wrapping_add(off as usize) as *const i8,
            );
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = off;
    }

    /// The sequence, capture time and payload of the record of `frame_len` bytes at data offset `off`.
    ///
    /// # Safety
    ///
    /// [`OwnFrames::at`]`(off)` returned `Some((_, frame_len))` with `frame_len != 0` (so the frame lies inside
    /// the region), and nothing stores into the frame while the returned borrow lives.
    #[inline(always)]
    pub(crate) unsafe fn record(&self, off: u64, frame_len: u32) -> (u64, u64, &'a [u8]) {
        debug_assert!(
            frame_len as u64 >= RECORD_HEADER_SIZE && off + align8(frame_len as u64) <= self.cap
        );
        // SAFETY: the caller guarantees the frame lies inside the mapped region, which outlives `'a`, and that
        // nothing writes it while the borrow lives; frames are 8-aligned, so the two header words are aligned.
        unsafe {
            let at = self.base.add(off as usize);
            let seq = u64::from_le(std::ptr::read(at.add(8) as *const u64));
            let capture = u64::from_le(std::ptr::read(at.add(16) as *const u64));
            let payload = std::slice::from_raw_parts(
                at.add(RECORD_HEADER_SIZE as usize),
                frame_len as usize - RECORD_HEADER_SIZE as usize,
            );
            (seq, capture, payload)
        }
    }
}

/// The lap counters' checksum word (see [`OFF_OVERWRITTEN_CRC`]).
fn counters_word(records: u64, bytes: u64, laps: u64) -> u64 {
    let mut b = [0u8; 24];
    b[..8].copy_from_slice(&records.to_le_bytes());
    b[8..16].copy_from_slice(&bytes.to_le_bytes());
    b[16..].copy_from_slice(&laps.to_le_bytes());
    COUNTERS_TAG << 32 | crc32c::crc32c(&b) as u64
}

/// The ring-lap counters (records, bytes, laps) as read from a header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Counters {
    /// Their checksum holds.
    Valid((u64, u64, u64)),
    /// A file from before the checksum existed: plausible only if the records agree.
    Unchecked((u64, u64, u64)),
    /// Their checksum fails: damaged (or written by an older writer that does not store it).
    Damaged((u64, u64, u64)),
}

fn put_u32(buf: &mut [u8], off: usize, v: u32) {
    buf[off..off + 4].copy_from_slice(&v.to_le_bytes());
}
fn put_u64(buf: &mut [u8], off: usize, v: u64) {
    buf[off..off + 8].copy_from_slice(&v.to_le_bytes());
}
fn get_u32(buf: &[u8], off: usize) -> u32 {
    let mut b = [0u8; 4];
    b.copy_from_slice(&buf[off..off + 4]);
    u32::from_le_bytes(b)
}
fn get_u64(buf: &[u8], off: usize) -> u64 {
    let mut b = [0u8; 8];
    b.copy_from_slice(&buf[off..off + 8]);
    u64::from_le_bytes(b)
}

/// A file without the journal magic. Named with the journal's own extension (every archive segment is), it is a
/// journal whose header was damaged (zeroed, overwritten), reported with its offset like any header damage;
/// anything else is a file of another kind.
fn bad_magic(path: &Path, found: [u8; 8]) -> JournalError {
    if path.extension().and_then(|e| e.to_str()) == Some(crate::names::SEGMENT_EXT) {
        JournalError::CorruptHeader {
            path: path.into(),
            offset: OFF_MAGIC as u64,
            reason: format!(
                "magic {found:02x?}, expected {MAGIC:02x?} (a .{} file whose header is damaged)",
                crate::names::SEGMENT_EXT
            ),
        }
    } else {
        JournalError::BadMagic {
            path: path.into(),
            found,
            expected: MAGIC,
        }
    }
}

/// Validates the static header: magic, version, checksum, then field ranges.
pub(crate) fn parse_header(path: &Path, header: &[u8]) -> Result<HeaderInfo> {
    let mut magic = [0u8; 8];
    magic.copy_from_slice(&header[OFF_MAGIC..OFF_MAGIC + 8]);
    if magic != MAGIC {
        return Err(bad_magic(path, magic));
    }
    let version = get_u32(header, OFF_VERSION);
    if !(MIN_FORMAT_VERSION..=FORMAT_VERSION).contains(&version) {
        return Err(JournalError::UnsupportedVersion {
            path: path.into(),
            found: version,
            supported: FORMAT_VERSION,
        });
    }
    let corrupt = |reason: String| JournalError::CorruptHeader {
        path: path.into(),
        offset: 0,
        reason,
    };
    let stored = get_u32(header, OFF_STATIC_CRC);
    let actual = crc32c::crc32c(&header[..OFF_STATIC_CRC]);
    if stored != actual {
        return Err(corrupt(format!(
            "header checksum {stored:#010x}, computed {actual:#010x}"
        )));
    }
    let header_size = get_u32(header, OFF_HEADER_SIZE);
    if header_size as u64 != HEADER_SIZE {
        return Err(corrupt(format!(
            "header size {header_size}, expected {HEADER_SIZE}"
        )));
    }
    let mode = match get_u32(header, OFF_MODE) {
        1 => Mode::Ring,
        2 => Mode::Archive,
        other => return Err(corrupt(format!("unknown mode {other}"))),
    };
    let capacity = get_u64(header, OFF_CAPACITY);
    if capacity < MIN_CAPACITY || !capacity.is_multiple_of(8) || capacity > (1u64 << 48) {
        return Err(corrupt(format!("impossible capacity {capacity}")));
    }
    let desc_len = get_u32(header, OFF_DESC_LEN) as usize;
    if desc_len > MAX_DESCRIPTION {
        return Err(corrupt(format!("description length {desc_len}")));
    }
    let description = String::from_utf8_lossy(&header[OFF_DESC..OFF_DESC + desc_len]).into_owned();
    Ok(HeaderInfo {
        version,
        mode,
        capacity,
        created_ns: get_u64(header, OFF_CREATED),
        base_seq: get_u64(header, OFF_BASE_SEQ),
        segment_index: get_u64(header, OFF_SEGMENT),
        description,
    })
}
