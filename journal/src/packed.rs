//! Compressed journals: a closed ring or archive segment stored as independent zstd frames with an index by
//! sequence and capture time, so a reader can start anywhere by inflating one frame. [`crate::compress`] writes
//! them in place of the plain files (same names); [`crate::Reader`] and [`crate::summarize`] read them like
//! plain ones. The layout is in the crate docs ("Compressed files").
//!
//! Everything read from a compressed file is checked before it is used: the header and the index carry CRC32C
//! checksums, every frame zstd's own checksum of its content, and every record inside its journal checksum. A
//! damaged index is rebuilt by scanning the frames; a damaged frame is reported as damage at its offset, and the
//! records of the frames around it read. Allocation is bounded by what the file's header allows, whatever the
//! file says.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, OnceLock};

use crate::error::{JournalError, Result};
use crate::segment::{
    align8, frame_crc, HeaderInfo, Mode, APP_META_MAX, MAX_DESCRIPTION, PAD_FLAG,
};
use crate::RECORD_HEADER_SIZE;

/// zstd skippable-frame magic of a compressed journal's header frame (the first bytes of the file).
pub(crate) const HEADER_FRAME: u32 = 0x184D_2A5B;
/// zstd skippable-frame magic of the index frame (the last frame of the file).
const INDEX_FRAME: u32 = 0x184D_2A5C;
/// First 4 bytes of every zstd frame.
const ZSTD_MAGIC: u32 = 0xFD2F_B528;

/// First 8 bytes of a compressed journal's header, after the skippable frame's magic and size.
pub const PACKED_MAGIC: [u8; 8] = *b"TBXJPAK\0";
/// Last 8 bytes of a compressed journal: the index trailer's magic.
const INDEX_MAGIC: [u8; 8] = *b"TBXJPIX\0";
/// The compressed-file format version this build writes and reads.
pub const PACKED_VERSION: u32 = 1;

/// Bytes of the header's fixed part (before the application metadata and the checksum).
const HEADER_FIXED: usize = 392;
/// Bytes of one index entry.
const ENTRY: usize = 48;
/// Bytes of the index trailer: frame count, checksum, version, magic.
const TRAILER: usize = 24;
/// Bytes of a skippable frame's own header (magic, size).
const SKIP_HEADER: u64 = 8;

/// Most plain bytes one frame may hold, whatever a file says (this build writes frames of about
/// [`CompressOptions::frame_bytes`](crate::CompressOptions), or one record when a record is larger).
pub(crate) const MAX_FRAME_PLAIN: u64 = 1 << 30;
/// Most bytes a scan of a damaged file reads at once looking for the end of a frame.
const MAX_SCAN_WINDOW: u64 = 256 << 20;

/// Whether `bytes` (a file's first 16 bytes) start a compressed journal.
pub(crate) fn sniff(bytes: &[u8]) -> bool {
    bytes.len() >= 16 && bytes[..4] == HEADER_FRAME.to_le_bytes() && bytes[8..16] == PACKED_MAGIC
}

/// Whether the file at `path` is a compressed journal (a file too short to be one is not).
pub(crate) fn is_packed(path: &Path) -> Result<bool> {
    let file = File::open(path).map_err(|e| JournalError::io(path, e))?;
    let mut head = [0u8; 16];
    let got = read_at_most(&file, &mut head, 0).map_err(|e| JournalError::io(path, e))?;
    Ok(sniff(&head[..got]))
}

/// Whether `first_bytes` (at least the first 16 bytes of a file, when it has them) start a tickbox journal file,
/// plain ([`crate::MAGIC`]) or compressed ([`PACKED_MAGIC`]): how a tool that takes several kinds of file tells a
/// journal from the others.
pub fn is_journal_file(first_bytes: &[u8]) -> bool {
    first_bytes.starts_with(&crate::MAGIC) || sniff(first_bytes)
}

/// [`JournalError::Compressed`] if the file at `path` is a compressed journal: a writer cannot append to one.
pub(crate) fn refuse_compressed(path: &Path) -> Result<()> {
    if is_packed(path)? {
        return Err(JournalError::Compressed { path: path.into() });
    }
    Ok(())
}

/// A record frame of a compressed journal file as its index lists it: what a reader that fetches the file by
/// byte range (from an object store) needs to fetch only the frames a time window reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameSpan {
    /// File offset of the frame.
    pub offset: u64,
    /// Its compressed length.
    pub stored: u64,
    /// Sequence of its first record.
    pub first_seq: u64,
    /// Records it holds.
    pub records: u64,
    /// Capture time of its first record, ns since the epoch.
    pub first_time: u64,
    /// Capture time of its last record.
    pub last_time: u64,
}

/// Bytes from the start of a compressed journal file to the end of its header frame, from the file's first 16
/// bytes; `None` if they do not start a compressed journal.
pub fn packed_header_len(first: &[u8]) -> Option<u64> {
    sniff(first).then(|| SKIP_HEADER + u64::from(le_u32(first, 4)))
}

/// Bytes that the index frame takes at the end of a compressed journal file of `len` bytes, from the file's last
/// 24 bytes (the index trailer); `None` if they are not one (the index is missing or damaged: a reader must read
/// the whole file, whose frames a scan finds).
pub fn packed_index_len(len: u64, trailer: &[u8]) -> Option<u64> {
    if trailer.len() != TRAILER || trailer[16..24] != INDEX_MAGIC {
        return None;
    }
    let total = le_u64(trailer, 0)
        .checked_mul(ENTRY as u64)?
        .checked_add(TRAILER as u64 + SKIP_HEADER)?;
    (total <= len).then_some(total)
}

/// The frames of the compressed journal file at `path`, as its checked index lists them, reading only its header
/// and its index: a local copy that holds those two and nothing else yet answers. `None` if the index is damaged
/// or missing (then every byte of the file must be read).
pub fn packed_frames(path: &Path) -> Result<Option<Vec<FrameSpan>>> {
    let p = Packed::open_with(path, false)?;
    if p.index_repair.is_some() {
        return Ok(None);
    }
    Ok(Some(
        p.frames
            .iter()
            .map(|e| FrameSpan {
                offset: e.offset,
                stored: e.stored,
                first_seq: e.first_seq,
                records: e.records,
                first_time: e.first_time,
                last_time: e.last_time,
            })
            .collect(),
    ))
}

/// Reads into `buf` from `offset` until it is full or the file ends; returns the bytes read.
fn read_at_most(file: &File, buf: &mut [u8], offset: u64) -> std::io::Result<usize> {
    let mut got = 0;
    while got < buf.len() {
        match file.read_at(&mut buf[got..], offset + got as u64) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(got)
}

fn le_u32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

fn le_u64(b: &[u8], at: usize) -> u64 {
    let mut w = [0u8; 8];
    w.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(w)
}

/// What a compressed file says about itself and the plain file it was made from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PackedHeader {
    /// The plain file's static header (its version is the plain file's).
    pub(crate) info: HeaderInfo,
    /// Records held.
    pub(crate) records: u64,
    /// Sequence of the first record (the base sequence when there are none).
    pub(crate) first_seq: u64,
    /// The sequence the plain file's writer would have given next.
    pub(crate) next_seq: u64,
    /// Bytes of the records as the plain file stored them (frames, 8-aligned).
    pub(crate) record_bytes: u64,
    /// A ring's lap counters: records, bytes and laps overwritten before it was compressed.
    pub(crate) overwritten: (u64, u64, u64),
    /// When it was compressed, ns since the Unix epoch.
    pub(crate) compressed_ns: u64,
    /// The zstd level it was compressed at.
    pub(crate) level: i32,
    /// The plain file's newest application-metadata block.
    pub(crate) app_meta: Option<Vec<u8>>,
}

impl PackedHeader {
    /// The header frame's content: fixed fields, the application metadata, then a CRC32C of everything before.
    pub(crate) fn encode(&self) -> Vec<u8> {
        let meta = self.app_meta.as_deref().unwrap_or(&[]);
        let mut b = vec![0u8; HEADER_FIXED + meta.len() + 4];
        let len = b.len() as u32;
        let put64 =
            |b: &mut [u8], at: usize, v: u64| b[at..at + 8].copy_from_slice(&v.to_le_bytes());
        let put32 =
            |b: &mut [u8], at: usize, v: u32| b[at..at + 4].copy_from_slice(&v.to_le_bytes());
        b[..8].copy_from_slice(&PACKED_MAGIC);
        put32(&mut b, 8, PACKED_VERSION);
        put32(&mut b, 12, len);
        put32(&mut b, 16, self.info.version);
        put32(
            &mut b,
            20,
            match self.info.mode {
                Mode::Ring => 1,
                Mode::Archive => 2,
            },
        );
        put64(&mut b, 24, self.info.capacity);
        put64(&mut b, 32, self.info.created_ns);
        put64(&mut b, 40, self.info.base_seq);
        put64(&mut b, 48, self.info.segment_index);
        put64(&mut b, 56, self.records);
        put64(&mut b, 64, self.first_seq);
        put64(&mut b, 72, self.next_seq);
        put64(&mut b, 80, self.record_bytes);
        put64(&mut b, 88, self.overwritten.0);
        put64(&mut b, 96, self.overwritten.1);
        put64(&mut b, 104, self.overwritten.2);
        put64(&mut b, 112, self.compressed_ns);
        put32(&mut b, 120, self.level as u32);
        let desc = self.info.description.as_bytes();
        let desc = &desc[..desc.len().min(MAX_DESCRIPTION)];
        put32(&mut b, 124, desc.len() as u32);
        b[128..128 + desc.len()].copy_from_slice(desc);
        put32(&mut b, 384, u32::from(self.app_meta.is_some()));
        put32(&mut b, 388, meta.len() as u32);
        b[HEADER_FIXED..HEADER_FIXED + meta.len()].copy_from_slice(meta);
        let crc = crc32c::crc32c(&b[..b.len() - 4]);
        let at = b.len() - 4;
        put32(&mut b, at, crc);
        b
    }

    /// Parses and checks a header frame's content (`b`: the bytes after the skippable frame's own 8).
    fn decode(path: &Path, b: &[u8]) -> Result<PackedHeader> {
        let bad = |reason: String| JournalError::CorruptHeader {
            path: path.into(),
            offset: SKIP_HEADER,
            reason: format!("compressed journal header: {reason}"),
        };
        if b.len() < HEADER_FIXED + 4 || b[..8] != PACKED_MAGIC {
            return Err(bad(format!("{} bytes, or no magic", b.len())));
        }
        let version = le_u32(b, 8);
        if version != PACKED_VERSION {
            return Err(JournalError::UnsupportedVersion {
                path: path.into(),
                found: version,
                supported: PACKED_VERSION,
            });
        }
        let len = le_u32(b, 12) as usize;
        if len != b.len() {
            return Err(bad(format!("length {len} in a frame of {}", b.len())));
        }
        let stored = le_u32(b, len - 4);
        let actual = crc32c::crc32c(&b[..len - 4]);
        if stored != actual {
            return Err(bad(format!(
                "checksum {stored:#010x}, computed {actual:#010x}"
            )));
        }
        let mode = match le_u32(b, 20) {
            1 => Mode::Ring,
            2 => Mode::Archive,
            other => return Err(bad(format!("unknown mode {other}"))),
        };
        let desc_len = le_u32(b, 124) as usize;
        let meta_len = le_u32(b, 388) as usize;
        if desc_len > MAX_DESCRIPTION
            || meta_len > APP_META_MAX
            || HEADER_FIXED + meta_len + 4 != len
        {
            return Err(bad(format!(
                "description of {desc_len} or metadata of {meta_len} bytes in a header of {len}"
            )));
        }
        let capacity = le_u64(b, 24);
        if capacity > 1 << 48 {
            return Err(bad(format!("impossible capacity {capacity}")));
        }
        Ok(PackedHeader {
            info: HeaderInfo {
                version: le_u32(b, 16),
                mode,
                capacity,
                created_ns: le_u64(b, 32),
                base_seq: le_u64(b, 40),
                segment_index: le_u64(b, 48),
                description: String::from_utf8_lossy(&b[128..128 + desc_len]).into_owned(),
            },
            records: le_u64(b, 56),
            first_seq: le_u64(b, 64),
            next_seq: le_u64(b, 72),
            record_bytes: le_u64(b, 80),
            overwritten: (le_u64(b, 88), le_u64(b, 96), le_u64(b, 104)),
            compressed_ns: le_u64(b, 112),
            level: le_u32(b, 120) as i32,
            app_meta: (le_u32(b, 384) != 0)
                .then(|| b[HEADER_FIXED..HEADER_FIXED + meta_len].to_vec()),
        })
    }
}

/// One frame of a compressed file, as its index (or a scan of a damaged file) describes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct FrameEntry {
    /// File offset of the frame.
    pub(crate) offset: u64,
    /// Its compressed length.
    pub(crate) stored: u64,
    /// Its plain length: the record frames it holds, as the plain file stored them.
    pub(crate) plain: u64,
    /// Sequence of its first record.
    pub(crate) first_seq: u64,
    /// Records it holds (at least one).
    pub(crate) records: u64,
    /// Capture time of its first record.
    pub(crate) first_time: u64,
    /// Capture time of its last record.
    pub(crate) last_time: u64,
    /// A stretch a scan of a damaged file could not read as a frame: its records (if it held any) are unknown.
    pub(crate) damaged: bool,
}

impl FrameEntry {
    fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.offset.to_le_bytes());
        out.extend_from_slice(&(self.stored as u32).to_le_bytes());
        out.extend_from_slice(&(self.plain as u32).to_le_bytes());
        out.extend_from_slice(&self.first_seq.to_le_bytes());
        out.extend_from_slice(&(self.records as u32).to_le_bytes());
        out.extend_from_slice(&0u32.to_le_bytes());
        out.extend_from_slice(&self.first_time.to_le_bytes());
        out.extend_from_slice(&self.last_time.to_le_bytes());
    }

    fn decode(b: &[u8]) -> FrameEntry {
        FrameEntry {
            offset: le_u64(b, 0),
            stored: u64::from(le_u32(b, 8)),
            plain: u64::from(le_u32(b, 12)),
            first_seq: le_u64(b, 16),
            records: u64::from(le_u32(b, 24)),
            first_time: le_u64(b, 32),
            last_time: le_u64(b, 40),
            damaged: false,
        }
    }

    /// The sequence after its last record.
    pub(crate) fn end_seq(&self) -> u64 {
        self.first_seq + self.records
    }
}

/// The index frame: `entries`, then the trailer (frame count, CRC32C over the entries and the count, format
/// version, [`INDEX_MAGIC`]), inside a skippable frame.
pub(crate) fn encode_index(entries: &[FrameEntry]) -> Vec<u8> {
    let mut body = Vec::with_capacity(entries.len() * ENTRY + TRAILER);
    for e in entries {
        e.encode(&mut body);
    }
    body.extend_from_slice(&(entries.len() as u64).to_le_bytes());
    let crc = crc32c::crc32c(&body);
    body.extend_from_slice(&crc.to_le_bytes());
    body.extend_from_slice(&PACKED_VERSION.to_le_bytes());
    body.extend_from_slice(&INDEX_MAGIC);
    let mut out = Vec::with_capacity(body.len() + 8);
    out.extend_from_slice(&INDEX_FRAME.to_le_bytes());
    out.extend_from_slice(&(body.len() as u32).to_le_bytes());
    out.extend_from_slice(&body);
    out
}

/// The header frame of a compressed file: the skippable frame's magic and size, then `header`'s content.
pub(crate) fn encode_header(header: &PackedHeader) -> Vec<u8> {
    let content = header.encode();
    let mut out = Vec::with_capacity(content.len() + 8);
    out.extend_from_slice(&HEADER_FRAME.to_le_bytes());
    out.extend_from_slice(&(content.len() as u32).to_le_bytes());
    out.extend_from_slice(&content);
    out
}

/// One record of a frame's plain bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct PlainRecord<'a> {
    pub(crate) seq: u64,
    pub(crate) capture_time_ns: u64,
    pub(crate) payload: &'a [u8],
    /// Bytes the record takes (8-aligned).
    pub(crate) size: usize,
}

/// The record at byte `at` of a frame's plain bytes, checked: its length fits, and (with `verify`) its checksum
/// holds. `Err` says what is wrong.
pub(crate) fn record_at(
    plain: &[u8],
    at: usize,
    verify: bool,
) -> std::result::Result<PlainRecord<'_>, String> {
    let rest = plain.len().saturating_sub(at);
    if rest < RECORD_HEADER_SIZE as usize {
        return Err(format!(
            "{rest} bytes left at byte {at}, too few for a record"
        ));
    }
    let frame_len = le_u32(plain, at);
    let crc = le_u32(plain, at + 4);
    if frame_len & PAD_FLAG != 0 || (frame_len as u64) < RECORD_HEADER_SIZE {
        return Err(format!(
            "impossible frame length {frame_len:#x} at byte {at}"
        ));
    }
    let size = align8(frame_len as u64) as usize;
    if size > rest {
        return Err(format!(
            "frame of {frame_len} bytes at byte {at} runs past the frame's {} bytes",
            plain.len()
        ));
    }
    let body = &plain[at + 8..at + size];
    if verify && frame_crc(frame_len, body) != crc {
        return Err(format!(
            "checksum mismatch in record seq {} at byte {at}",
            le_u64(plain, at + 8)
        ));
    }
    Ok(PlainRecord {
        seq: le_u64(plain, at + 8),
        capture_time_ns: le_u64(plain, at + 16),
        payload: &plain[at + RECORD_HEADER_SIZE as usize..at + frame_len as usize],
        size,
    })
}

/// Inflates the frame after the one a reader is reading on a thread of its own, while the reader reads its
/// records: a reader streaming through a compressed file then waits for zstd only when it outruns the thread.
/// Started once a reader loads two frames in a row (a seek, or a reader that stops after a frame, never starts
/// one); one frame in flight at a time; the thread ends with the reader. At most one such thread per core runs
/// in the process ([`InflateSlot`]): a history service with many readers does not start a thread for each, and
/// a reader that finds no slot inflates every frame itself, as it always could.
pub(crate) struct ReadAhead {
    requests: Option<mpsc::Sender<(usize, Vec<u8>)>>,
    results: mpsc::Receiver<Inflated>,
    /// The frame asked for and not yet taken.
    pending: Option<usize>,
    thread: Option<std::thread::JoinHandle<()>>,
    /// Held until the thread has ended.
    _slot: InflateSlot,
}

/// Read-ahead threads running in this process (see [`InflateSlot`]).
static INFLATE_THREADS: AtomicUsize = AtomicUsize::new(0);

/// One of the process's read-ahead threads, counted in `count` while it lives.
#[derive(Debug)]
struct InflateSlot {
    count: &'static AtomicUsize,
}

impl InflateSlot {
    /// The most read-ahead threads at once: the machine's cores.
    fn limit() -> usize {
        static LIMIT: OnceLock<usize> = OnceLock::new();
        *LIMIT.get_or_init(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
    }

    /// A slot of `count`, if fewer than `limit` are taken.
    fn take(count: &'static AtomicUsize, limit: usize) -> Option<InflateSlot> {
        count
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < limit).then_some(n + 1)
            })
            .ok()
            .map(|_| InflateSlot { count })
    }
}

impl Drop for InflateSlot {
    fn drop(&mut self) {
        self.count.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A frame the read-ahead thread inflated: its index, the outcome, and the buffer it holds.
type Inflated = (usize, std::result::Result<(), String>, Vec<u8>);

impl std::fmt::Debug for ReadAhead {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReadAhead")
            .field("pending", &self.pending)
            .finish_non_exhaustive()
    }
}

impl ReadAhead {
    /// Starts the thread for `file`; `None` if every slot is taken or the OS refuses a thread (the reader inflates
    /// every frame itself, as it can).
    pub(crate) fn start(file: Arc<Packed>) -> Option<ReadAhead> {
        let slot = InflateSlot::take(&INFLATE_THREADS, InflateSlot::limit())?;
        let (requests, asked) = mpsc::channel::<(usize, Vec<u8>)>();
        let (done, results) = mpsc::channel();
        let thread = std::thread::Builder::new()
            .name("journal-inflate".into())
            .spawn(move || {
                let mut inflater = Inflater::new();
                while let Ok((k, mut buf)) = asked.recv() {
                    let outcome = file.load(k, &mut inflater, &mut buf);
                    if done.send((k, outcome, buf)).is_err() {
                        break;
                    }
                }
            })
            .ok()?;
        Some(ReadAhead {
            requests: Some(requests),
            results,
            pending: None,
            thread: Some(thread),
            _slot: slot,
        })
    }

    /// Asks for frame `k`, to be inflated into `buf` (a spare buffer, reused), unless a frame is in flight.
    pub(crate) fn request(&mut self, k: usize, buf: Vec<u8>) {
        if self.pending.is_some() {
            return;
        }
        if let Some(requests) = &self.requests {
            if requests.send((k, buf)).is_ok() {
                self.pending = Some(k);
            }
        }
    }

    /// Frame `k` (the outcome and the buffer holding it) if it is the one asked for, waiting for it; `None`
    /// otherwise (a frame asked for and no longer wanted is taken and dropped).
    pub(crate) fn take(&mut self, k: usize) -> Option<(std::result::Result<(), String>, Vec<u8>)> {
        self.pending.take()?;
        let (got, outcome, buf) = self.results.recv().ok()?;
        (got == k).then_some((outcome, buf))
    }
}

impl Drop for ReadAhead {
    fn drop(&mut self) {
        // Closing the channel ends the thread once it has finished the frame in hand.
        self.requests = None;
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// An open compressed file: its header and index, read and checked; frames are read and inflated on demand.
#[derive(Debug)]
pub(crate) struct Packed {
    pub(crate) path: PathBuf,
    file: File,
    pub(crate) header: PackedHeader,
    /// Frames in file order (a damaged file's unreadable stretches included, marked).
    pub(crate) frames: Vec<FrameEntry>,
    /// The file's length.
    pub(crate) len: u64,
    /// Where the frames start (past the header frame).
    pub(crate) frames_start: u64,
    /// What was wrong with the index, when it had to be rebuilt by scanning the frames.
    pub(crate) index_repair: Option<String>,
    /// The owner of a local copy fetched by range, asked for each frame before it is read.
    fetch: Option<crate::fetch::Fetcher>,
}

/// Reusable buffers and the zstd context for reading frames.
pub(crate) struct Inflater {
    stored: Vec<u8>,
    ctx: Option<zstd::bulk::Decompressor<'static>>,
}

impl std::fmt::Debug for Inflater {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Inflater").finish_non_exhaustive()
    }
}

impl Inflater {
    pub(crate) fn new() -> Inflater {
        Inflater {
            stored: Vec::new(),
            ctx: None,
        }
    }

    /// Inflates `stored` (one zstd frame) into `out`, which must come to exactly `plain` bytes (at most
    /// [`MAX_FRAME_PLAIN`]); `Err` says why not.
    fn inflate(
        &mut self,
        stored: &[u8],
        plain: u64,
        out: &mut Vec<u8>,
    ) -> std::result::Result<(), String> {
        if plain > MAX_FRAME_PLAIN {
            return Err(format!(
                "a frame of {plain} plain bytes is more than this build reads"
            ));
        }
        match zstd::zstd_safe::get_frame_content_size(stored) {
            Ok(Some(n)) if n == plain => {}
            Ok(Some(n)) => {
                return Err(format!(
                    "the frame says it holds {n} bytes, the index {plain}"
                ))
            }
            Ok(None) => return Err("the frame does not say how much it holds".into()),
            Err(_) => return Err("not a zstd frame".into()),
        }
        let ctx = match &mut self.ctx {
            Some(c) => c,
            None => self
                .ctx
                .insert(zstd::bulk::Decompressor::new().map_err(|e| format!("zstd context: {e}"))?),
        };
        out.clear();
        out.reserve(plain as usize);
        match ctx.decompress_to_buffer(stored, out) {
            Ok(n) if n as u64 == plain => Ok(()),
            Ok(n) => Err(format!("inflated to {n} bytes where {plain} were expected")),
            Err(e) => Err(format!("does not inflate: {e}")),
        }
    }
}

impl Packed {
    /// Opens and checks a compressed file: its header ([`JournalError::CorruptHeader`] if damaged, a header
    /// error as for a plain file) and its index (rebuilt by scanning the frames if damaged or missing, and said
    /// so in `index_repair`).
    pub(crate) fn open(path: &Path) -> Result<Packed> {
        Self::open_with(path, true)
    }

    /// [`Packed::open`]; with `scan` false, a damaged or missing index is only said in `index_repair` (no
    /// frames), and nothing but the header and the index is read.
    fn open_with(path: &Path, scan: bool) -> Result<Packed> {
        let file = File::open(path).map_err(|e| JournalError::io(path, e))?;
        let len = file
            .metadata()
            .map_err(|e| JournalError::io(path, e))?
            .len();
        let mut first = [0u8; 16];
        let got = read_at_most(&file, &mut first, 0).map_err(|e| JournalError::io(path, e))?;
        if !sniff(&first[..got]) {
            let mut magic = [0u8; 8];
            magic[..got.min(8)].copy_from_slice(&first[..got.min(8)]);
            return Err(JournalError::BadMagic {
                path: path.into(),
                found: magic,
                expected: PACKED_MAGIC,
            });
        }
        let size = u64::from(le_u32(&first, 4));
        let max = (HEADER_FIXED + APP_META_MAX + 4) as u64;
        if size > max || SKIP_HEADER + size > len {
            if SKIP_HEADER + size > len && size <= max {
                return Err(JournalError::Truncated {
                    path: path.into(),
                    actual: len,
                    expected: SKIP_HEADER + size,
                });
            }
            return Err(JournalError::CorruptHeader {
                path: path.into(),
                offset: 4,
                reason: format!("compressed journal header of {size} bytes"),
            });
        }
        let mut content = vec![0u8; size as usize];
        file.read_exact_at(&mut content, SKIP_HEADER)
            .map_err(|e| JournalError::io(path, e))?;
        let header = PackedHeader::decode(path, &content)?;
        let frames_start = SKIP_HEADER + size;
        let mut packed = Packed {
            path: path.into(),
            file,
            header,
            frames: Vec::new(),
            len,
            frames_start,
            index_repair: None,
            fetch: crate::fetch::fetcher_of(path),
        };
        match packed.read_index() {
            Ok(frames) => packed.frames = frames,
            Err((why, _)) if !scan => packed.index_repair = Some(why),
            Err((why, scan_end)) => {
                // A copy fetched by range: the scan reads every frame.
                if let Some(f) = &packed.fetch {
                    f.fetch(path, 0..len)
                        .map_err(|e| JournalError::io(path, e))?;
                }
                let frames = packed.scan(scan_end)?;
                packed.index_repair = Some(format!(
                    "the index of the compressed file is {why}: rebuilt by reading its {} frames",
                    frames.len()
                ));
                tracing::warn!(path = %path.display(), "{}", packed.index_repair.as_deref().unwrap_or(""));
                packed.frames = frames;
            }
        }
        Ok(packed)
    }

    /// The index as stored, checked against the header and the file; `Err` says what is wrong and where a scan
    /// of the frames should stop (the start of an index frame that is there but damaged, else the file's end).
    fn read_index(&self) -> std::result::Result<Vec<FrameEntry>, (String, u64)> {
        let len = self.len;
        let none = |why: &str| (why.to_string(), len);
        if len < self.frames_start + SKIP_HEADER + TRAILER as u64 {
            return Err(none("missing (the file is cut short)"));
        }
        let mut trailer = [0u8; TRAILER];
        self.file
            .read_exact_at(&mut trailer, len - TRAILER as u64)
            .map_err(|e| none(&format!("unreadable ({e})")))?;
        if trailer[16..24] != INDEX_MAGIC {
            return Err(none(
                "missing (no index at the end: the file is cut short or damaged)",
            ));
        }
        let count = le_u64(&trailer, 0);
        let room = (len - self.frames_start - SKIP_HEADER - TRAILER as u64) / ENTRY as u64;
        if count > room {
            return Err(none(&format!("damaged ({count} frames cannot fit)")));
        }
        let body_len = count as usize * ENTRY + TRAILER;
        let index_start = len - body_len as u64 - SKIP_HEADER;
        let mut frame = vec![0u8; body_len + SKIP_HEADER as usize];
        self.file
            .read_exact_at(&mut frame, index_start)
            .map_err(|e| none(&format!("unreadable ({e})")))?;
        let damaged = |why: String| (why, index_start);
        if le_u32(&frame, 0) != INDEX_FRAME || le_u32(&frame, 4) as usize != body_len {
            return Err(damaged("damaged (its frame header is wrong)".into()));
        }
        let body = &frame[SKIP_HEADER as usize..];
        let covered = count as usize * ENTRY + 8;
        let stored_crc = le_u32(body, covered);
        if crc32c::crc32c(&body[..covered]) != stored_crc {
            return Err(damaged("damaged (its checksum fails)".into()));
        }
        if le_u32(body, covered + 4) != PACKED_VERSION {
            return Err(damaged(format!("of version {}", le_u32(body, covered + 4))));
        }
        let entries: Vec<FrameEntry> = body[..count as usize * ENTRY]
            .chunks_exact(ENTRY)
            .map(FrameEntry::decode)
            .collect();
        self.check_entries(&entries, index_start)
            .map_err(|why| damaged(format!("inconsistent ({why})")))?;
        Ok(entries)
    }

    /// Whether `entries` can describe this file's frames: in order, inside the file, consecutive sequences from
    /// the header's first, plain lengths within bounds, records counted as the header counts them.
    fn check_entries(
        &self,
        entries: &[FrameEntry],
        index_start: u64,
    ) -> std::result::Result<(), String> {
        let h = &self.header;
        let mut at = self.frames_start;
        let mut seq = h.first_seq;
        let mut records = 0u64;
        let mut plain = 0u64;
        for (k, e) in entries.iter().enumerate() {
            let bad = |what: &str| format!("frame {k}: {what}");
            if e.offset != at {
                return Err(bad(&format!("at {} where {at} was expected", e.offset)));
            }
            if e.stored == 0 || e.offset + e.stored > index_start {
                return Err(bad(&format!("{} bytes at {}", e.stored, e.offset)));
            }
            if e.records == 0
                || e.plain > MAX_FRAME_PLAIN
                || e.records * RECORD_HEADER_SIZE > e.plain
                || e.plain > h.record_bytes
            {
                return Err(bad(&format!("{} records in {} bytes", e.records, e.plain)));
            }
            if e.first_seq != seq {
                return Err(bad(&format!(
                    "first sequence {} where {seq} was expected",
                    e.first_seq
                )));
            }
            at = e.offset + e.stored;
            seq = e.end_seq();
            records += e.records;
            plain += e.plain;
        }
        if at != index_start || records != h.records || plain != h.record_bytes {
            return Err(format!(
                "frames end at {at} (index at {index_start}), hold {records} records of {plain} bytes where the \
                 header says {} of {}",
                h.records, h.record_bytes
            ));
        }
        Ok(())
    }

    /// Rebuilds the index by reading the frames from the header to `end`: each zstd frame is inflated and its
    /// records read; bytes that are not a readable frame become damaged entries, up to the next frame found.
    fn scan(&self, end: u64) -> Result<Vec<FrameEntry>> {
        let mut entries = Vec::new();
        let mut inflater = Inflater::new();
        let mut window = Vec::new();
        let mut plain = Vec::new();
        let mut at = self.frames_start;
        let mut damaged_from: Option<u64> = None;
        let io = |e| JournalError::io(&self.path, e);
        let close_damage = |entries: &mut Vec<FrameEntry>, from: &mut Option<u64>, to: u64| {
            if let Some(start) = from.take() {
                entries.push(FrameEntry {
                    offset: start,
                    stored: to - start,
                    plain: 0,
                    first_seq: 0,
                    records: 0,
                    first_time: 0,
                    last_time: 0,
                    damaged: true,
                });
            }
        };
        while at + 4 <= end {
            let mut magic = [0u8; 4];
            self.file.read_exact_at(&mut magic, at).map_err(io)?;
            let magic = u32::from_le_bytes(magic);
            if magic == INDEX_FRAME {
                // The index frame is the last thing in the file, damaged or not: no frame follows it.
                break;
            }
            if magic & 0xFFFF_FFF0 == 0x184D_2A50 && at + SKIP_HEADER <= end {
                // A skippable frame (an index, or anything another tool added): passed over.
                let mut size = [0u8; 4];
                self.file.read_exact_at(&mut size, at + 4).map_err(io)?;
                let next = at + SKIP_HEADER + u64::from(u32::from_le_bytes(size));
                if next <= end {
                    close_damage(&mut entries, &mut damaged_from, at);
                    at = next;
                    continue;
                }
            }
            if magic == ZSTD_MAGIC {
                if let Some(entry) =
                    self.scan_frame(at, end, &mut window, &mut inflater, &mut plain)?
                {
                    close_damage(&mut entries, &mut damaged_from, at);
                    at = entry.offset + entry.stored;
                    entries.push(entry);
                    continue;
                }
            }
            damaged_from.get_or_insert(at);
            at = self.next_magic(at + 1, end)?;
        }
        close_damage(&mut entries, &mut damaged_from, at.min(end));
        Ok(entries)
    }

    /// The zstd frame at `at`, read whole, inflated and its records read; `None` if it is not one.
    fn scan_frame(
        &self,
        at: u64,
        end: u64,
        window: &mut Vec<u8>,
        inflater: &mut Inflater,
        plain: &mut Vec<u8>,
    ) -> Result<Option<FrameEntry>> {
        let mut want = (1u64 << 20).min(end - at);
        let stored = loop {
            window.resize(want as usize, 0);
            let got = read_at_most(&self.file, window, at)
                .map_err(|e| JournalError::io(&self.path, e))?;
            window.truncate(got);
            match zstd::zstd_safe::find_frame_compressed_size(window) {
                Ok(n) if n <= window.len() => break n as u64,
                _ if want < (end - at).min(MAX_SCAN_WINDOW) => {
                    want = (want * 4).min(end - at).min(MAX_SCAN_WINDOW);
                }
                _ => return Ok(None),
            }
        };
        let content = match zstd::zstd_safe::get_frame_content_size(&window[..stored as usize]) {
            Ok(Some(n)) if n <= MAX_FRAME_PLAIN && n <= self.header.record_bytes => n,
            _ => return Ok(None),
        };
        if inflater
            .inflate(&window[..stored as usize], content, plain)
            .is_err()
        {
            return Ok(None);
        }
        let mut entry = FrameEntry {
            offset: at,
            stored,
            plain: content,
            first_seq: 0,
            records: 0,
            first_time: 0,
            last_time: 0,
            damaged: false,
        };
        let mut p = 0;
        while p < plain.len() {
            let Ok(r) = record_at(plain, p, true) else {
                return Ok(None);
            };
            if entry.records == 0 {
                entry.first_seq = r.seq;
                entry.first_time = r.capture_time_ns;
            } else if r.seq != entry.end_seq() {
                return Ok(None);
            }
            entry.records += 1;
            entry.last_time = r.capture_time_ns;
            p += r.size;
        }
        Ok((entry.records > 0).then_some(entry))
    }

    /// The offset of the next zstd frame magic, or of the index frame's, at or after `from` (or `end`).
    fn next_magic(&self, from: u64, end: u64) -> Result<u64> {
        let (frame, index) = (ZSTD_MAGIC.to_le_bytes(), INDEX_FRAME.to_le_bytes());
        let mut buf = vec![0u8; 64 << 10];
        let mut at = from;
        while at + 4 <= end {
            let take = (buf.len() as u64).min(end - at) as usize;
            let got = read_at_most(&self.file, &mut buf[..take], at)
                .map_err(|e| JournalError::io(&self.path, e))?;
            if got < 4 {
                break;
            }
            if let Some(i) = buf[..got].windows(4).position(|w| w == frame || w == index) {
                return Ok(at + i as u64);
            }
            at += (got - 3) as u64;
        }
        Ok(end)
    }

    /// Reads frame `k` and inflates it into `out`; `Err` says why it cannot be read (damage at its offset).
    pub(crate) fn load(
        &self,
        k: usize,
        inflater: &mut Inflater,
        out: &mut Vec<u8>,
    ) -> std::result::Result<(), String> {
        let e = self.frames[k];
        if e.damaged {
            return Err(format!(
                "{} bytes that are not a readable compressed frame",
                e.stored
            ));
        }
        if let Some(f) = &self.fetch {
            f.fetch(&self.path, e.offset..e.offset + e.stored)
                .map_err(|err| format!("compressed frame {k} cannot be fetched: {err}"))?;
        }
        let mut stored = std::mem::take(&mut inflater.stored);
        stored.resize(e.stored as usize, 0);
        let read = self.file.read_exact_at(&mut stored, e.offset);
        let result = match read {
            Err(err) => Err(format!("compressed frame {k} cannot be read: {err}")),
            Ok(()) => inflater.inflate(&stored, e.plain, out).map_err(|why| {
                format!(
                    "compressed frame {k} (records seq {}..{}): {why}",
                    e.first_seq,
                    e.end_seq()
                )
            }),
        };
        inflater.stored = stored;
        result
    }

    /// The sequence after the last record.
    pub(crate) fn end_seq(&self) -> u64 {
        self.header.next_seq
    }

    /// (length, allocated bytes) of the file.
    pub(crate) fn disk_use(&self) -> (u64, u64) {
        crate::segment::disk_use(&self.file).unwrap_or((self.len, self.len))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn inflate_slots_are_bounded_and_given_back() {
        // A count of its own: readers in other tests take the process's slots.
        static COUNT: AtomicUsize = AtomicUsize::new(0);
        let held: Vec<_> = (0..3).map_while(|_| InflateSlot::take(&COUNT, 3)).collect();
        assert_eq!(held.len(), 3);
        assert!(InflateSlot::take(&COUNT, 3).is_none());
        drop(held);
        assert!(InflateSlot::take(&COUNT, 3).is_some());
        assert_eq!(COUNT.load(Ordering::Acquire), 0);
    }

    fn header() -> PackedHeader {
        PackedHeader {
            info: HeaderInfo {
                version: 2,
                mode: Mode::Archive,
                capacity: 1 << 30,
                created_ns: 17,
                base_seq: 1001,
                segment_index: 3,
                description: "récorder".into(),
            },
            records: 2,
            first_seq: 1001,
            next_seq: 1003,
            record_bytes: 64,
            overwritten: (0, 0, 0),
            compressed_ns: 99,
            level: -5,
            app_meta: Some(vec![7; 100]),
        }
    }

    /// A compressed file with two records in one frame, as `compress` lays it out.
    fn file_bytes() -> Vec<u8> {
        let h = header();
        let mut out = encode_header(&h);
        let mut plain = Vec::new();
        for seq in [1001u64, 1002] {
            let payload = [seq as u8; 8];
            let frame_len = (RECORD_HEADER_SIZE + 8) as u32;
            let mut body = Vec::new();
            body.extend_from_slice(&seq.to_le_bytes());
            body.extend_from_slice(&(seq * 10).to_le_bytes());
            body.extend_from_slice(&payload);
            plain.extend_from_slice(&frame_len.to_le_bytes());
            plain.extend_from_slice(&frame_crc(frame_len, &body).to_le_bytes());
            plain.extend_from_slice(&body);
        }
        let mut c = zstd::bulk::Compressor::new(3).unwrap();
        c.set_parameter(zstd::zstd_safe::CParameter::ChecksumFlag(true))
            .unwrap();
        let stored = c.compress(&plain).unwrap();
        let entry = FrameEntry {
            offset: out.len() as u64,
            stored: stored.len() as u64,
            plain: plain.len() as u64,
            first_seq: 1001,
            records: 2,
            first_time: 10010,
            last_time: 10020,
            damaged: false,
        };
        out.extend_from_slice(&stored);
        out.extend_from_slice(&encode_index(&[entry]));
        out
    }

    fn write(bytes: &[u8]) -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("0000000003.tbj");
        std::fs::write(&path, bytes).unwrap();
        (dir, path)
    }

    #[test]
    fn a_copy_holding_only_the_header_and_the_index_lists_the_frames() {
        let bytes = file_bytes();
        let len = bytes.len() as u64;
        let head = packed_header_len(&bytes[..16]).unwrap();
        let tail = packed_index_len(len, &bytes[bytes.len() - TRAILER..]).unwrap();
        // A copy of the file's length with only those ranges written (the frames left as a hole of zeros), as a
        // reader fetching from an object store makes it.
        let mut sparse = vec![0u8; bytes.len()];
        sparse[..head as usize].copy_from_slice(&bytes[..head as usize]);
        let from = (len - tail) as usize;
        sparse[from..].copy_from_slice(&bytes[from..]);
        let (_d, path) = write(&sparse);
        let frames = packed_frames(&path).unwrap().unwrap();
        assert_eq!(frames.len(), 1);
        assert_eq!(
            (frames[0].offset, frames[0].offset + frames[0].stored),
            (head, len - tail),
            "the one frame lies between the header and the index"
        );
        assert_eq!((frames[0].first_seq, frames[0].records), (1001, 2));
        assert_eq!((frames[0].first_time, frames[0].last_time), (10010, 10020));
        // Not a compressed file, or a trailer that is not one: no spans.
        assert_eq!(packed_header_len(&[0u8; 16]), None);
        assert_eq!(packed_index_len(len, &[0u8; TRAILER]), None);
        // A damaged index: `None` (read the whole file), and nothing scanned.
        let mut broken = sparse.clone();
        let at = broken.len() - TRAILER - 4;
        broken[at] ^= 0xff;
        let (_d2, path) = write(&broken);
        assert_eq!(packed_frames(&path).unwrap(), None);
    }

    #[test]
    fn the_header_round_trips_and_a_flipped_byte_fails_its_checksum() {
        let h = header();
        let frame = encode_header(&h);
        assert!(sniff(&frame));
        let back = PackedHeader::decode(Path::new("x"), &frame[8..]).unwrap();
        assert_eq!(back, h);
        let none = PackedHeader {
            app_meta: None,
            ..h.clone()
        };
        let frame = encode_header(&none);
        assert_eq!(
            PackedHeader::decode(Path::new("x"), &frame[8..]).unwrap(),
            none
        );
        for at in [8, 30, 150, HEADER_FIXED + 3] {
            let mut bad = encode_header(&h);
            bad[8 + at] ^= 0x40;
            assert!(
                PackedHeader::decode(Path::new("x"), &bad[8..]).is_err(),
                "byte {at}"
            );
        }
    }

    #[test]
    fn a_file_opens_with_its_index_and_inflates_its_frame() {
        let (_dir, path) = write(&file_bytes());
        let p = Packed::open(&path).unwrap();
        assert_eq!(p.index_repair, None);
        assert_eq!(p.frames.len(), 1);
        assert_eq!(p.header, header());
        let mut inflater = Inflater::new();
        let mut plain = Vec::new();
        p.load(0, &mut inflater, &mut plain).unwrap();
        let r = record_at(&plain, 0, true).unwrap();
        assert_eq!(
            (r.seq, r.capture_time_ns, r.payload),
            (1001, 10010, &[233u8; 8][..])
        );
        let r = record_at(&plain, r.size, true).unwrap();
        assert_eq!(r.seq, 1002);
        assert!(record_at(&plain, 2 * r.size, true).is_err());
    }

    #[test]
    fn a_damaged_or_missing_index_is_rebuilt_by_reading_the_frames() {
        let good = file_bytes();
        let expected = Packed::open(&write(&good).1).unwrap().frames;
        let n = good.len();
        // The entry's first sequence; the trailer's checksum; the frame count; the index cut off entirely.
        let mut cases: Vec<Vec<u8>> = Vec::new();
        for at in [n - 24 - 48 + 16, n - 16, n - 24] {
            let mut b = good.clone();
            b[at] ^= 1;
            cases.push(b);
        }
        cases.push(good[..expected[0].offset as usize + expected[0].stored as usize].to_vec());
        for bytes in cases {
            let (_dir, path) = write(&bytes);
            let p = Packed::open(&path).unwrap();
            assert!(p.index_repair.is_some());
            assert_eq!(p.frames, expected);
        }
    }

    #[test]
    fn a_damaged_frame_reads_as_damage_and_the_header_as_header_damage() {
        let good = file_bytes();
        let (offset, stored) = {
            let p = Packed::open(&write(&good).1).unwrap();
            (p.frames[0].offset as usize, p.frames[0].stored as usize)
        };
        let mut b = good.clone();
        b[offset + stored / 2] ^= 0x10;
        let (_dir, path) = write(&b);
        let p = Packed::open(&path).unwrap();
        let mut plain = Vec::new();
        let err = p.load(0, &mut Inflater::new(), &mut plain).unwrap_err();
        assert!(err.contains("compressed frame 0"), "{err}");
        let mut b = good.clone();
        b[40] ^= 1;
        let (_dir, path) = write(&b);
        assert!(Packed::open(&path).unwrap_err().is_damaged_header());
        let (_dir, path) = write(&good[..100]);
        assert!(Packed::open(&path).unwrap_err().is_damaged_header());
    }

    #[test]
    fn impossible_records_are_refused_by_what_is_wrong() {
        let mut plain = vec![0u8; 64];
        plain[..4].copy_from_slice(&(PAD_FLAG | 32).to_le_bytes());
        assert!(record_at(&plain, 0, false)
            .unwrap_err()
            .contains("impossible"));
        plain[..4].copy_from_slice(&8u32.to_le_bytes());
        assert!(record_at(&plain, 0, false)
            .unwrap_err()
            .contains("impossible"));
        plain[..4].copy_from_slice(&200u32.to_le_bytes());
        assert!(record_at(&plain, 0, false)
            .unwrap_err()
            .contains("runs past"));
        plain[..4].copy_from_slice(&32u32.to_le_bytes());
        assert!(record_at(&plain, 0, true).unwrap_err().contains("checksum"));
        assert!(record_at(&plain, 0, false).is_ok());
        assert!(record_at(&plain, 60, false)
            .unwrap_err()
            .contains("too few"));
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

        /// Bytes changed anywhere in a compressed file: opening it and reading every frame never panics, and
        /// whatever reads is the records that were written.
        #[test]
        fn damage_anywhere_never_panics_and_never_invents_records(
            flips in prop::collection::vec((any::<prop::sample::Index>(), 1u8..=255), 1..4),
            cut in prop::option::of(any::<prop::sample::Index>()),
        ) {
            let mut b = file_bytes();
            for (at, x) in flips {
                let i = at.index(b.len());
                b[i] ^= x;
            }
            if let Some(c) = cut {
                let len = c.index(b.len());
                b.truncate(len);
            }
            let (_dir, path) = write(&b);
            if let Ok(p) = Packed::open(&path) {
                let mut inflater = Inflater::new();
                let mut plain = Vec::new();
                for k in 0..p.frames.len() {
                    if p.load(k, &mut inflater, &mut plain).is_ok() {
                        let mut at = 0;
                        while let Ok(r) = record_at(&plain, at, true) {
                            prop_assert!(r.seq == 1001 || r.seq == 1002);
                            prop_assert_eq!(r.payload, &[r.seq as u8; 8][..]);
                            at += r.size;
                        }
                    }
                }
            }
        }
    }
}
