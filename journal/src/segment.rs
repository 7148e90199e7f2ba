//! One mapped journal file (a ring, or one archive segment): header layout, creation, validation on open, and the
//! frame walker shared by the writer, the reader, recovery and `verify`.

use std::fs::{File, OpenOptions};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use memmap2::{MmapOptions, MmapRaw};

use crate::error::{JournalError, Result};

/// First 8 bytes of every journal file.
pub const MAGIC: [u8; 8] = *b"TBXJRNL\0";
/// The format version this build writes and reads.
pub const FORMAT_VERSION: u32 = 1;
/// Bytes before the data region: one page, so the data region is page aligned.
pub const HEADER_SIZE: u64 = 4096;
/// Bytes of each record's header: frame length, CRC32C, sequence, capture time.
pub const RECORD_HEADER_SIZE: u64 = 24;
/// Smallest accepted data-region size.
pub const MIN_CAPACITY: u64 = 64 * 1024;
/// Largest accepted description (UTF-8 bytes); longer ones are truncated at a char boundary.
pub const MAX_DESCRIPTION: usize = 256;

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

/// State bit: a writer has the journal open (still set after a crash: the next open runs recovery).
pub(crate) const STATE_WRITER_OPEN: u32 = 1;
/// State bit: archive segment is complete; its successor file exists.
pub(crate) const STATE_SEALED: u32 = 2;

/// Ring (fixed capacity, oldest overwritten) or archive segment (fills once, then the writer rolls to a new file).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    Ring,
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
    pub version: u32,
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

/// A mapped journal file.
pub(crate) struct Segment {
    pub(crate) path: PathBuf,
    map: MmapRaw,
    /// Kept open: the writer's `flock` lives on it.
    pub(crate) file: File,
    pub(crate) info: HeaderInfo,
    pub(crate) cap: u64,
}

// SAFETY: every shared mutable field of the mapping is accessed through atomics; record bytes are written only by
// the single writer in ranges readers are told (via `head`/`tail`) not to trust yet.
unsafe impl Send for Segment {}
unsafe impl Sync for Segment {}

impl Segment {
    /// Creates a new journal file: written under a temporary name, space reserved, then renamed into place, so a
    /// crash never leaves a half-written header under the real name.
    pub(crate) fn create(
        path: &Path,
        mode: Mode,
        capacity: u64,
        base_seq: u64,
        segment_index: u64,
        description: &str,
    ) -> Result<Segment> {
        if capacity < MIN_CAPACITY || !capacity.is_multiple_of(8) {
            return Err(JournalError::InvalidOptions(format!(
                "capacity {capacity} must be a multiple of 8 and at least {MIN_CAPACITY}"
            )));
        }
        let tmp = path.with_extension("creating");
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&tmp)
            .map_err(|e| JournalError::io(&tmp, e))?;
        let total = HEADER_SIZE + capacity;
        file.set_len(total).map_err(|e| JournalError::io(&tmp, e))?;
        // Reserve the blocks now so a full disk is an error here, not a SIGBUS in the middle of a recording.
        // SAFETY: plain syscall on an fd we own.
        let rc = unsafe {
            libc::posix_fallocate(
                std::os::fd::AsRawFd::as_raw_fd(&file),
                0,
                total as libc::off_t,
            )
        };
        if rc != 0 && rc != libc::EOPNOTSUPP && rc != libc::EINVAL {
            let _ = std::fs::remove_file(&tmp);
            return Err(JournalError::io(
                &tmp,
                std::io::Error::from_raw_os_error(rc),
            ));
        }
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
        put_u32(&mut header, OFF_VERSION, FORMAT_VERSION);
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
        std::os::unix::fs::FileExt::write_all_at(&file, &header, 0)
            .map_err(|e| JournalError::io(&tmp, e))?;
        file.sync_all().map_err(|e| JournalError::io(&tmp, e))?;
        drop(file);
        std::fs::rename(&tmp, path).map_err(|e| JournalError::io(path, e))?;
        if let Some(dir) = path.parent() {
            // Make the rename itself durable.
            if let Ok(d) = File::open(if dir.as_os_str().is_empty() {
                Path::new(".")
            } else {
                dir
            }) {
                let _ = d.sync_all();
            }
        }
        Segment::open(path, true)
    }

    /// Opens and validates an existing journal file. Never maps bytes the file does not have.
    pub(crate) fn open(path: &Path, writable: bool) -> Result<Segment> {
        let mut file = OpenOptions::new()
            .read(true)
            .write(writable)
            .open(path)
            .map_err(|e| JournalError::io(path, e))?;
        let len = file
            .metadata()
            .map_err(|e| JournalError::io(path, e))?
            .len();
        if len < HEADER_SIZE {
            if len >= 8 {
                let mut magic = [0u8; 8];
                file.read_exact(&mut magic)
                    .map_err(|e| JournalError::io(path, e))?;
                if magic != MAGIC {
                    return Err(JournalError::BadMagic {
                        path: path.into(),
                        found: magic,
                        expected: MAGIC,
                    });
                }
            }
            return Err(JournalError::Truncated {
                path: path.into(),
                actual: len,
                expected: HEADER_SIZE,
            });
        }
        let mut header = vec![0u8; HEADER_SIZE as usize];
        file.read_exact(&mut header)
            .map_err(|e| JournalError::io(path, e))?;
        let info = parse_header(path, &header)?;
        let total = HEADER_SIZE + info.capacity;
        if len < total {
            return Err(JournalError::Truncated {
                path: path.into(),
                actual: len,
                expected: total,
            });
        }
        let mut opts = MmapOptions::new();
        opts.len(total as usize);
        // The file is at least `total` bytes long (checked above), so no access through the map faults. Shared
        // mutation is through atomics and the single-writer protocol described in lib.rs.
        let map = if writable {
            opts.map_raw(&file)
        } else {
            opts.map_raw_read_only(&file)
        }
        .map_err(|e| JournalError::io(path, e))?;
        let cap = info.capacity;
        let seg = Segment {
            path: path.into(),
            map,
            file,
            info,
            cap,
        };
        seg.check_dynamic()?;
        Ok(seg)
    }

    /// Sanity of the writer-maintained fields, so walking from them can never leave the data region.
    fn check_dynamic(&self) -> Result<()> {
        let head = self.head().load(Ordering::Acquire);
        let tail = self.tail().load(Ordering::Acquire);
        let bad = |reason: String| {
            Err(JournalError::CorruptHeader {
                path: self.path.clone(),
                reason,
            })
        };
        if tail > head {
            return bad(format!("tail {tail} beyond head {head}"));
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

    fn atomic_u64(&self, off: usize) -> &AtomicU64 {
        // SAFETY: offsets are constants inside the header page, 8-byte aligned in a page-aligned mapping.
        unsafe { &*(self.map.as_ptr().add(off) as *const AtomicU64) }
    }

    /// Absolute byte position just past the last published record.
    pub(crate) fn head(&self) -> &AtomicU64 {
        self.atomic_u64(OFF_HEAD)
    }
    /// Sequence the next record will get (published with `head`; informational).
    pub(crate) fn head_seq(&self) -> &AtomicU64 {
        self.atomic_u64(OFF_HEAD_SEQ)
    }
    /// Absolute position of the oldest intact record; raised before the writer overwrites.
    pub(crate) fn tail(&self) -> &AtomicU64 {
        self.atomic_u64(OFF_TAIL)
    }
    /// Highest absolute position the writer may have touched; bytes in (head, reserve] are in flight.
    pub(crate) fn reserve(&self) -> &AtomicU64 {
        self.atomic_u64(OFF_RESERVE)
    }
    pub(crate) fn state(&self) -> &AtomicU32 {
        // SAFETY: as `atomic_u64`, 4-byte aligned.
        unsafe { &*(self.map.as_ptr().add(OFF_STATE) as *const AtomicU32) }
    }

    /// Pointer to data-region offset `off` (< capacity). Hot paths track offsets to avoid a division per record.
    #[inline]
    pub(crate) fn data_ptr_off(&self, off: u64) -> *mut u8 {
        debug_assert!(off < self.cap);
        // SAFETY: off < cap, inside the mapping.
        unsafe { self.map.as_mut_ptr().add((HEADER_SIZE + off) as usize) }
    }

    /// File offset of absolute position `pos` (for error messages and `verify`).
    pub(crate) fn file_offset(&self, pos: u64) -> u64 {
        HEADER_SIZE + pos % self.cap
    }

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
        let p = self.data_ptr_off(off);
        // SAFETY: p..p+24 is inside the data region (rem >= 24) and 8-byte aligned.
        let frame_len = unsafe { (*(p as *const AtomicU32)).load(Ordering::Acquire) };
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
        // SAFETY: inside the data region as above.
        unsafe {
            Frame::Record {
                frame_len,
                crc: u32::from_le(std::ptr::read_volatile(p.add(4) as *const u32)),
                seq: u64::from_le(std::ptr::read_volatile(p.add(8) as *const u64)),
                capture_ns: u64::from_le(std::ptr::read_volatile(p.add(16) as *const u64)),
            }
        }
    }

    /// The payload bytes of the record frame at data-region offset `off`, borrowed from the mapping. The caller must
    /// know they are not being overwritten (archive, or checked against `tail` afterwards).
    #[inline]
    pub(crate) fn payload_off(&self, off: u64, frame_len: u32) -> &[u8] {
        // SAFETY: `frame_at_off` checked the frame fits in the data region.
        unsafe {
            std::slice::from_raw_parts(
                self.data_ptr_off(off).add(RECORD_HEADER_SIZE as usize),
                (frame_len as u64 - RECORD_HEADER_SIZE) as usize,
            )
        }
    }

    /// Checksum of the frame at data offset `off`, computed over the mapped bytes.
    #[inline]
    pub(crate) fn crc_at_off(&self, off: u64, frame_len: u32) -> u32 {
        // SAFETY: `frame_at_off` checked that align8(frame_len) bytes from `off` lie inside the data region.
        let body = unsafe {
            std::slice::from_raw_parts(
                self.data_ptr_off(off).add(8),
                (align8(frame_len as u64) - 8) as usize,
            )
        };
        frame_crc(frame_len, body)
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

/// Validates the static header: magic, version, checksum, then field ranges.
pub(crate) fn parse_header(path: &Path, header: &[u8]) -> Result<HeaderInfo> {
    let mut magic = [0u8; 8];
    magic.copy_from_slice(&header[OFF_MAGIC..OFF_MAGIC + 8]);
    if magic != MAGIC {
        return Err(JournalError::BadMagic {
            path: path.into(),
            found: magic,
            expected: MAGIC,
        });
    }
    let version = get_u32(header, OFF_VERSION);
    if version != FORMAT_VERSION {
        return Err(JournalError::UnsupportedVersion {
            path: path.into(),
            found: version,
            supported: FORMAT_VERSION,
        });
    }
    let corrupt = |reason: String| JournalError::CorruptHeader {
        path: path.into(),
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
