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
//! drop(w);
//! // Closed: compress it in place (seekable zstd frames); readers read it as before.
//! tickbox_journal::compress("/tmp/j.tbj", &tickbox_journal::CompressOptions::default())?;
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
//! # File format (versions 1 and 2, little-endian)
//!
//! A journal is either a **ring** (one file) or an **archive** (a directory of segment files `0000000000.tbj`,
//! `0000000001.tbj`, ... plus `writer.lock`). Every file is a 4096-byte header followed by `capacity` data bytes,
//! except an archive segment of version 2, whose file ends where its records and the space reserved after them
//! end (see "Disk use and a full disk" below); its layout is otherwise version 1's. Rings are written as version 1.
//!
//! Header, static part (written once; CRC32C over bytes 0..320 stored at 320):
//!
//! | offset | size | field |
//! |---|---|---|
//! | 0 | 8 | magic `TBXJRNL\0` |
//! | 8 | 4 | format version (1, or 2 for an archive segment that grows with its data) |
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
//! | 576 | `tail`: start of the oldest readable record; raised *before* the writer overwrites anything (see below) |
//! | 640 | `reserve`: end of the bytes the writer may have touched (for recovery reports) |
//! | 704 | state bits: 1 writer open (left set by a crash), 2 segment sealed (successor exists) |
//! | 768, 776, 784 | ring laps: records and bytes overwritten, laps completed (zero in files from before they existed) |
//! | 792 | checksum of the ring-lap counters: `0x4c415053 << 32 \| crc32c(records, bytes, laps)` (zero in files from before it existed) |
//! | 1024, 2560 | two application-metadata slots: `generation u64, len u32, crc32c u32, data` (the newest valid wins) |
//!
//! Damaged `head`/`tail`/`reserve` pointers are recovered from the records themselves (checksums and consecutive
//! sequences) when no writer is live, and `summarize` reports what it recovered; a truncated file is refused by
//! readers and writers, and `summarize` reads what precedes the cut and says where it is. The recovery is one pass
//! over at most a capacity of records (the `reserve` says which pointer to trust first, and a second reading is
//! only taken when the first finds nothing), so opening, `info` and `verify` of a damaged journal stay linear in
//! its size whatever header field is hit. Ring-lap counters whose checksum fails (or, in files from before the
//! checksum, that disagree with the records) are recomputed from the records: records overwritten are the
//! oldest record's sequence less one, laps the tail's position over the capacity, and bytes (the padding at lap
//! ends cannot be recovered) at most the tail's position. `head_seq` is informational: the records give the next
//! sequence whenever the journal holds any.
//!
//! Records, 8-byte aligned, never split across the end of a ring:
//!
//! | offset | size | field |
//! |---|---|---|
//! | 0 | 4 | frame length = 24 + payload length. High bit set: padding to the ring's end |
//! | 4 | 4 | CRC32C seeded with the frame length, over bytes 8..end of padding (sequence, time, payload, zeros) |
//! | 8 | 8 | journal sequence |
//! | 16 | 8 | capture time, ns |
//! | 24 | n | payload, then 0 to 7 zero bytes to the next multiple of 8 |
//!
//! Length and checksum form the frame's first 8-byte word, which the writer stores last (release). If fewer than 24
//! bytes remain before the ring's end, readers skip them implicitly. Payloads are at most half the capacity.
//!
//! The writer computes the checksum in the same pass that stores the body's words (with the CPU's `crc32`
//! instruction when it has SSE4.2, else the `crc32c` crate); the value is the same CRC32C either way, so files are
//! unchanged and still version 1. The ring-lap counters at 768..792 are stored at each publish (commit), not at
//! every record a lap overwrites.
//!
//! A lapped ring's writer raises `tail` past every record the next frame overwrites, and a little further, so
//! the appends that follow find room with one comparison instead of moving and publishing the tail at every
//! record:
//!
//! - With no overwrite hook it jumps between *marks*: record starts the writer noted as it wrote them, one every
//!   1/1024 of the capacity (at least 4 KiB, at most 1 MiB, at most 1/64 of a small ring), with their sequence and
//!   the padding written before them. Records, bytes and laps passed are differences of two marks; nothing is
//!   read. Marks live in the writer's memory (32 bytes each, at most `capacity / spacing + 2`: 1,026 up to a
//!   1 GiB ring); a writer that reopens a ring walks the records an earlier writer left until it reaches its own
//!   first mark.
//! - With an overwrite hook (which must see every record) it walks the records, on by up to 1/64 of the capacity
//!   (at most 2 KiB) past what the frame needs, and shows them to the hook a group at a time.
//!
//! The records passed are gone for readers (`Lapped`) and are shown to the hook and counted as overwritten when
//! the tail passes them, a little before their bytes are reused: a ring holds at least its capacity less one mark
//! spacing or one step. The writer clears the length word of the last record the tail passes, so a rescan that
//! rebuilds a damaged header (which takes the first chain of records reaching the head) starts at the tail, not at
//! those records. A stored `head` beyond `reserve` is header damage (the writer raises `reserve` before it writes
//! and publishes `head` after), which catches a head raised by less than what the ring's retention leaves free.
//! Nothing a reader or an older writer parses changed: files stay version 1, and journals written before read the
//! same.
//!
//! The `crc32` steps are emitted inline (`asm!`, behind the run-time SSE4.2 check), so the whole record path
//! (room check, stores, checksum) inlines into the caller's loop, without a call per record.
//!
//! # Compressed files (compressed format version 1)
//!
//! [`compress`] rewrites a closed journal in place: the ring file, or each archive segment file, keeps its name
//! and is replaced (write to `NAME.compressing`, read it back whole, fsync, rename over the plain file, fsync the
//! directory) by a compressed file. [`Reader`], [`summarize`] and [`read_app_meta`] tell the two apart by their
//! first bytes and read both through the same API; an archive may hold plain and compressed segments side by
//! side. A compressed file is read-only: a writer refuses it ([`JournalError::Compressed`]). The whole file is a
//! valid zstd stream (`zstd -d` gives the records, as the plain file stores them, back to back), made of:
//!
//! | part | content |
//! |---|---|
//! | header frame | zstd skippable frame, magic `0x184D2A5B`, then the header below |
//! | record frames | zstd frames (content size and content checksum set), each the plain file's record frames (24-byte record header, payload, zero padding to 8), whole records only, about [`CompressOptions::frame_bytes`] (1 MiB) of them |
//! | index frame | zstd skippable frame, magic `0x184D2A5C`: one 48-byte entry per record frame, then a 24-byte trailer, the file's last bytes |
//!
//! Header (after the skippable frame's magic and size; CRC32C over everything before the last 4 bytes):
//!
//! | offset | size | field |
//! |---|---|---|
//! | 0 | 8 | magic `TBXJPAK\0` |
//! | 8 | 4 | compressed format version (1) |
//! | 12 | 4 | header length, checksum included |
//! | 16 | 4 | the plain file's format version |
//! | 20 | 4 | mode: 1 ring, 2 archive segment |
//! | 24, 32, 40, 48 | 8 each | the plain file's capacity, creation time, base sequence, segment index |
//! | 56 | 8 | records held |
//! | 64 | 8 | sequence of the first record (the base sequence when none) |
//! | 72 | 8 | the sequence the plain file's writer would have given next |
//! | 80 | 8 | bytes of the records as the plain file stored them |
//! | 88, 96, 104 | 8 each | a ring's lap counters: records, bytes, laps overwritten |
//! | 112 | 8 | when it was compressed, ns since the Unix epoch |
//! | 120 | 4 | zstd level |
//! | 124 | 4 + 256 | description length and bytes |
//! | 384 | 4 | 1 if application metadata follows |
//! | 388 | 4 + n | application-metadata length and bytes (the plain file's newest block) |
//! | 392 + n | 4 | CRC32C |
//!
//! Index entry: file offset of the frame (8), compressed length (4), plain length (4), first sequence (8),
//! records (4), zero (4), first and last capture time (8 each). Trailer: frame count (8), CRC32C over the entries
//! and the count (4), compressed format version (4), magic `TBXJPIX\0` (8). Frames follow one another from the
//! end of the header to the index, their sequences consecutive.
//!
//! A reader opens the header and the index (two reads), so a seek by sequence or capture time finds its frame
//! in the index and inflates that one frame: starting anywhere costs one frame, not the file. A damaged header is
//! header damage (an archive's readers pass the segment, as for a plain one). A damaged index (its checksum, or
//! entries that do not describe the file) is rebuilt by reading the frames (reported by `summarize`). A frame
//! that does not inflate (zstd's content checksum, its length), or holds a record whose checksum or sequence
//! fails, is [`JournalError::CorruptRecord`] at the frame's file offset; [`Reader::skip_damage`] goes on at the
//! next frame that reads, and `summarize` reports the frame as a damaged range. Nothing a file says makes a
//! reader allocate more than a frame's plain length, at most 1 GiB.
//!
//! # Concurrency and crash safety
//!
//! One writer per journal (exclusive `flock`, dropped by the kernel when the process dies). Readers trust only
//! bytes below `head`.
//!
//! **No data races on mapped bytes.** A ring writer overwrites bytes a lapped reader may be reading at that very
//! moment, and the writer rewrites application-metadata slots readers may be copying; plain loads and stores there
//! would be data races (undefined behaviour), however well the checksums catch the torn values. So:
//!
//! - Every access to the data region and to the application-metadata slots is an 8-byte atomic at an 8-aligned
//!   offset (records are 8-aligned and padded, slots are 8-aligned): the writer stores records word by word
//!   (relaxed), then the frame's first word (length + checksum) with release; `head` is published with release.
//!   Because every access has the same size and alignment, racing accesses never overlap partially, as the memory
//!   model requires of atomics. Header fields (`head`, `tail`, ...) are atomics as before.
//! - Readers *copy* a record out of the map with relaxed word loads into their own buffer, then validate the
//!   copy: checksum on the copy, then (ring) an acquire fence and a re-read of `tail`. The writer raises `tail`
//!   and issues a release fence before overwriting anything, so if any loaded word came from an overwrite, the
//!   reader's fence synchronises with the writer's and it sees the raised `tail`: it reports `Lapped` and discards
//!   the copy (seqlock). Records returned point into the reader's buffer.
//! - Zero-copy only where nothing can write: a **sealed** archive segment (the writer sealed it after its last
//!   record, with release; readers see the seal with acquire; no writer, recovery included, ever writes a sealed
//!   segment's records) is borrowed straight from the map. The archive segment being written, whose published
//!   records a recovering writer could in principle rewrite after finding them corrupt, is copied like a ring.
//! - The writer's own reads (the overwrite hook, recovery) may borrow: the writer is the only process storing into
//!   the file, and readers only load.
//! - Application metadata: the writer fills the slot that is not the newest word by word, then the generation,
//!   then the (length, checksum) word with release. Readers copy both slots word by word and keep the newest that
//!   validates; if neither validates while a generation changed under them, they retry (bounded).
//!
//! **Truncation under a live mapping.** A process that shrinks a journal file under a reader or writer would make
//! the next access to a vanished page raise SIGBUS. Every mapping is registered with a process-wide SIGBUS handler
//! (installed on first use, chaining to any previous one) that maps a zero page over the faulting page and counts
//! the fault; readers check the count after every record, `summarize` after every frame, the writer at every
//! commit, and report [`JournalError::Truncated`] (sticky: reopen to continue). Files are also checked against
//! their header's size when opened.
//!
//! **Disk use and a full disk.** A ring is allocated whole when it is made (`posix_fallocate`, under a temporary
//! name, then renamed into place): it is a bounded buffer by design, and [`WriterOptions::disk_reservation`] and
//! [`JournalSummary::disk`] say what it reserves. An archive segment is not: its file (format version 2) holds its
//! header, its records and the space reserved ahead of them, and grows by allocation steps ([`ALLOCATION_STEP`],
//! 4 MiB unless set) that a preparer thread reserves (`posix_fallocate`, which grows the file) off the recording
//! thread, a window ahead of the published head: 20 ms of writing at its recent pace, at least one step (all a
//! recorder's pace needs), at most 256 MiB, and at most an eighth of what it has written since it opened. An
//! archive writer does not store its records through the mapping: it stages them in a private buffer and writes
//! them to the file (`pwrite`) when it commits, before it publishes the head, so that fresh pages enter the page
//! cache whole through `write` instead of one write fault each (readers see them through their mappings as
//! before; a record larger than the buffer, 512 KiB, is stored through the mapping). The writer only ever
//! stores below what is reserved, so a full disk (or a file size limit) is
//! [`JournalError::DiskFull`] from `append` when the writer reaches the end of the reservation and cannot reserve
//! more itself, never a SIGBUS; every record appended
//! before it is published and kept, and the writer closes cleanly. When a segment is sealed (by its preparer,
//! off the recording thread) or the writer closes, the file is cut to its records (the header, the records, and
//! the rest of the page that holds a record header after the last one, so that a reader that mapped the segment
//! before the cut reads zeros there, not a page past the end), so a closed archive takes on disk what it holds. A writer that opens an archive removes
//! the half-made files (`*.creating`) a killed writer left, cuts any segment still holding space past its records
//! (a killed writer's reserve window; a version 1 segment has its blocks past its records deallocated instead,
//! keeping its length, since readers of version 1 check it), and says so in [`RecoveryReport`]. Readers accept an
//! archive segment of version 2 shorter than its capacity; one shorter than its head is truncated. On open, the
//! writer walks from `tail`, keeping
//! the longest chain of records with valid lengths, checksums and consecutive sequences, and discards the rest: a
//! crash at any instant loses at most the records not yet fully written, and [`RecoveryReport`] says how many
//! bytes were discarded. Corrupt or truncated files produce typed [`JournalError`]s, never a panic.

mod archive;
mod compress;
// Record checksums: the SSE4.2 `crc32` instruction behind a run-time CPU check.
#[allow(unsafe_code)]
mod crc;
mod discard;
// statvfs.
#[allow(unsafe_code)]
mod disk;
mod error;
mod fetch;
// The SIGBUS guard: a signal handler and `mmap` over faulting pages.
#[allow(unsafe_code)]
mod guard;
mod names;
mod packed;
mod reader;
// The memory map itself: atomics and raw reads and writes at offsets into the mapped file.
#[allow(unsafe_code)]
mod segment;
mod stage;
mod unreadable;
mod verify;
mod writer;

pub use archive::{list_segments, segment_path};
pub use compress::{compress, CompressOptions, CompressReport};
pub use discard::remove_journal;
pub use disk::disk_free;
pub use error::{JournalError, Result};
pub use fetch::{register_fetcher, unregister_fetcher, FetchOnRead};
pub use names::SEGMENT_EXT;
pub use packed::{
    is_journal_file, packed_frames, packed_header_len, packed_index_len, FrameSpan, PACKED_MAGIC,
    PACKED_VERSION,
};
pub use reader::{Reader, Record, Skipped};
pub use segment::{
    HeaderInfo, Mode, APP_META_MAX, FORMAT_VERSION, HEADER_SIZE, MAGIC, MAX_DESCRIPTION,
    MIN_CAPACITY, MIN_FORMAT_VERSION, RECORD_HEADER_SIZE,
};
pub use unreadable::Unreadable;
pub use verify::{read_app_meta, summarize, Corruption, DamagedRange, DiskUse, JournalSummary};
pub use writer::{
    Batch, DiskReservation, Durability, Layout, OverwriteSink, OverwriteStats, OverwrittenRecord,
    RecoveryReport, Writer, WriterOptions, ALLOCATION_STEP,
};
