//! `tickbox-journal`: an append-only, memory-mapped record journal that survives crashes. It stores opaque
//! records (bytes + a capture time) and knows nothing of the wire format, so the data-plane recorder and the
//! control plane's Titanic service share the same engine.
//!
//! # API
//!
//! ```no_run
//! use tickbox_journal::{Durability, Reader, Writer, WriterOptions};
//! # fn main() -> Result<(), tickbox_journal::JournalError> {
//! // Ring: one file of fixed capacity, oldest records overwritten. (`WriterOptions::archive(segment_size)` for a
//! // directory of segments that are never overwritten.)
//! let opts = WriterOptions::ring(64 << 20).durability(Durability::None).description("example");
//! let mut w = Writer::open("/tmp/j.tbj", &opts)?; // creates, or recovers an existing journal
//! println!("{:?}", w.recovery());                 // what recovery kept and discarded
//! let seq = w.append(1_700_000_000_000_000_000, b"hello")?; // -> journal sequence (1, 2, 3, ...)
//! w.append_batch([(1, &b"a"[..]), (2, &b"b"[..])])?;         // one publish (and msync) for the batch
//! let mut b = w.batch();                                     // same, one record at a time
//! b.append(3, b"c")?;
//! b.commit()?;
//!
//! let mut r = Reader::open("/tmp/j.tbj")?;  // any number of readers, any process, while the writer runs
//! r.seek_seq(seq)?;                         // or r.seek_time(ns): O(log n) through a sparse index
//! while let Some(rec) = r.next()? {         // Ok(None) = caught up; call again later to tail
//!     println!("{} {} {:?}", rec.seq, rec.capture_time_ns, rec.payload);
//! }
//! # Ok(()) }
//! ```
//!
//! A ring reader that falls a whole capacity behind gets [`JournalError::Lapped`] (never garbage) and resumes at
//! the oldest record on its next call. [`summarize`] walks a whole journal for `info`/`verify`.
//!
//! # Durability
//!
//! A record is visible to readers, and survives the writer process being killed (`kill -9`), as soon as its
//! `append`/batch returns: the bytes are in the shared page cache. [`Durability`] decides when they reach the disk
//! (power loss): `None` (kernel writeback), `Periodic(d)` (a background thread msyncs every `d`), `PerBatch`
//! (msync before `append`/commit returns).
//!
//! # File format (version 1, little-endian)
//!
//! A journal is either a **ring** (one file) or an **archive** (a directory of segment files `0000000000.tbj`,
//! `0000000001.tbj`, ... plus `writer.lock`). Every file is a 4096-byte header followed by `capacity` data bytes.
//!
//! Header, static part (written once; CRC32C over bytes 0..320 stored at 320):
//!
//! | offset | size | field |
//! |---|---|---|
//! | 0 | 8 | magic `TBXJRNL\0` |
//! | 8 | 4 | format version (1) |
//! | 12 | 4 | header size (4096) |
//! | 16 | 4 | mode: 1 ring, 2 archive segment |
//! | 24 | 8 | capacity: data bytes |
//! | 32 | 8 | creation time, ns since the Unix epoch |
//! | 40 | 8 | base sequence (first record of an archive segment; 1 for a ring) |
//! | 48 | 8 | segment index |
//! | 56 | 4 | description length (≤ 256) |
//! | 64 | 256 | description (UTF-8) |
//! | 320 | 4 | header CRC32C |
//!
//! Header, dynamic part (atomics, each on its own cache line; positions are *absolute*: bytes written since the
//! file was created, so a ring offset is `pos % capacity`):
//!
//! | offset | field |
//! |---|---|
//! | 512 | `head`: end of the last published record (release store by the writer, acquire load by readers) |
//! | 520 | `head_seq`: sequence of the next record |
//! | 576 | `tail`: start of the oldest intact record; raised *before* the writer overwrites anything |
//! | 640 | `reserve`: end of the bytes the writer may have touched (for recovery reports) |
//! | 704 | state bits: 1 writer open (left set by a crash), 2 segment sealed (successor exists) |
//! | 768, 776, 784 | ring laps: records and bytes overwritten, laps completed (zero in files from before they existed) |
//! | 1024, 2560 | two application-metadata slots: `generation u64, len u32, crc32c u32, data` (the newest valid wins) |
//!
//! Damaged `head`/`tail` pointers are recovered from the records themselves (checksums and consecutive sequences)
//! when no writer is live, and `summarize` reports what it recovered; a truncated file is refused by readers and
//! writers, and `summarize` reads what precedes the cut and says where it is.
//!
//! Records, 8-byte aligned, never split across the end of a ring:
//!
//! | offset | size | field |
//! |---|---|---|
//! | 0 | 4 | frame length = 24 + payload length (written last, release). High bit set: padding to the ring's end |
//! | 4 | 4 | CRC32C seeded with the frame length, over bytes 8..end of padding (sequence, time, payload, zeros) |
//! | 8 | 8 | journal sequence |
//! | 16 | 8 | capture time, ns |
//! | 24 | n | payload, then 0 to 7 zero bytes to the next multiple of 8 |
//!
//! If fewer than 24 bytes remain before the ring's end, readers skip them implicitly. Payloads are at most half the
//! capacity.
//!
//! # Concurrency and crash safety
//!
//! One writer per journal (exclusive `flock`, dropped by the kernel when the process dies). Readers trust only
//! bytes below `head`. Ring readers copy a record and then re-read `tail`: if it moved past the record, the copy
//! may be torn and the reader reports `Lapped` (seqlock pattern). On open, the writer walks from `tail`, keeping
//! the longest chain of records with valid lengths, checksums and consecutive sequences, and discards the rest: a
//! crash at any instant loses at most the records not yet fully written, and [`RecoveryReport`] says how many
//! bytes were discarded. Corrupt or truncated files produce typed [`JournalError`]s, never a panic.

mod archive;
mod error;
mod reader;
// The memory map itself: atomics and raw reads and writes at offsets into the mapped file.
#[allow(unsafe_code)]
mod segment;
mod verify;
mod writer;

pub use archive::{list_segments, segment_path, SEGMENT_EXT};
pub use error::{JournalError, Result};
pub use reader::{Reader, Record};
pub use segment::{
    HeaderInfo, Mode, APP_META_MAX, FORMAT_VERSION, HEADER_SIZE, MAGIC, MAX_DESCRIPTION,
    MIN_CAPACITY, RECORD_HEADER_SIZE,
};
pub use verify::{read_app_meta, summarize, Corruption, JournalSummary};
pub use writer::{
    Batch, Durability, Layout, OverwriteHook, OverwriteStats, OverwrittenRecord, RecoveryReport,
    Writer, WriterOptions,
};
