//! Whole-journal inspection for `tickbox journal info|verify`: counts, ranges, and the first bad record.

use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;

use crate::archive;
use crate::error::{JournalError, Result};
use crate::packed::{self, Inflater, Packed};
use crate::segment::{Frame, HeaderInfo, Mode, Segment, HEADER_SIZE};

/// The first record that failed validation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Corruption {
    /// The file holding it (the ring, or the archive segment).
    pub path: PathBuf,
    /// Byte offset of the record's frame in that file.
    pub offset: u64,
    /// Its sequence, if the header was readable.
    pub seq: Option<u64>,
    /// What is wrong (bad checksum, impossible length, broken sequence, truncation).
    pub reason: String,
}

/// A stretch of a journal that does not verify, and what follows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DamagedRange {
    /// The file holding it (the ring, or the archive segment).
    pub path: PathBuf,
    /// Byte offset in that file where the damage starts (0 for a segment whose header is damaged).
    pub offset: u64,
    /// Bytes up to the next record that verifies (or to the end of what is published).
    pub bytes: u64,
    /// What is wrong there.
    pub reason: String,
    /// Intact records from the end of this range up to the next damaged range or the end of the journal.
    pub intact_after: u64,
}

/// What a journal holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JournalSummary {
    /// Header of the first file (ring, or first archive segment).
    pub header: HeaderInfo,
    /// Files walked: 1 for a ring, the segment count for an archive.
    pub segments: u64,
    /// Records walked (up to the first corruption, if any).
    pub records: u64,
    /// Payload bytes of those records (record headers and padding not included).
    pub payload_bytes: u64,
    /// Sequence of the oldest record walked; `None` for an empty journal.
    pub first_seq: Option<u64>,
    /// Sequence of the newest record walked; `None` for an empty journal.
    pub last_seq: Option<u64>,
    /// Capture time of the oldest record walked (ns since the Unix epoch).
    pub first_time_ns: Option<u64>,
    /// Capture time of the newest record walked (ns since the Unix epoch).
    pub last_time_ns: Option<u64>,
    /// A writer has it open, or died without anyone recovering it since.
    pub writer_active: bool,
    /// Bytes written past the published end (in flight, or torn by a crash; dropped by the next writer open).
    pub unpublished_bytes: u64,
    /// Whether checksums were checked (`verify`) or only the frame structure (`info`).
    pub checksums_checked: bool,
    /// The first record that failed validation; `None` when everything checked out.
    pub corruption: Option<Corruption>,
    /// Every damaged stretch, in order: the walk goes on past each one at the next record that verifies (whose
    /// checksum holds and whose sequence can follow), so it can say how much intact data follows.
    pub damaged: Vec<DamagedRange>,
    /// Intact records after the first damaged range (not counted in `records`).
    pub records_after_damage: u64,
    /// Damaged head/tail pointers found and recovered by scanning the records (what was wrong, what was kept).
    pub metadata_repairs: Vec<String>,
    /// Intact records (checksummed, consecutive) past the stored head and past the writer's reserved range: a
    /// damaged head pointer. Not counted in `records`; a writer opening the journal keeps them.
    pub records_beyond_head: u64,
    /// Intact records past the head but within the reserved range: a batch not yet published (a writer crashed
    /// before publishing it, or is about to). A writer opening the journal keeps them.
    pub unpublished_records: u64,
    /// What ring laps overwrote over the journal's life (from the header; zero for an archive).
    pub overwritten: crate::OverwriteStats,
    /// The newest application-metadata block (the last archive segment's), if one was stored.
    pub app_meta: Option<Vec<u8>>,
    /// What the journal takes on disk.
    pub disk: DiskUse,
}

/// What a journal's files take on disk, all files together (see [`JournalSummary::disk`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct DiskUse {
    /// Bytes allocated on disk (`st_blocks`, what `du` counts).
    pub allocated_bytes: u64,
    /// Bytes of the files as `ls -l` counts them: a ring's header and whole capacity; an archive segment's header,
    /// records and what a live writer reserved ahead of them; a compressed file's compressed bytes.
    pub file_bytes: u64,
    /// Bytes of the records held as a plain journal stores them: frames with their 24-byte headers and
    /// alignment (a ring's lap-end padding included). For a compressed file, what it holds once inflated.
    pub record_bytes: u64,
    /// Bytes allocated beyond the records and headers: a ring's unused capacity (a ring is allocated whole when
    /// it is made: bounded by design), or what a live archive writer reserved ahead of its records (one to two
    /// allocation steps for a recorder's pace; a closed archive holds its records and less than a page per
    /// segment). Zero for compressed files, which hold less than their records.
    pub reserved_bytes: u64,
    /// Files stored compressed (see `compress`).
    pub compressed_files: u64,
}

/// One journal file opened for inspection, plain or compressed.
enum Opened {
    Plain(Segment),
    Packed(Packed),
}

impl Opened {
    fn open(path: &Path) -> Result<Opened> {
        if packed::is_packed(path)? {
            return Ok(Opened::Packed(Packed::open(path)?));
        }
        Ok(Opened::Plain(Segment::open_for_inspection(path)?))
    }

    fn path(&self) -> &Path {
        match self {
            Opened::Plain(seg) => &seg.path,
            Opened::Packed(p) => &p.path,
        }
    }

    fn info(&self) -> &HeaderInfo {
        match self {
            Opened::Plain(seg) => &seg.info,
            Opened::Packed(p) => &p.header.info,
        }
    }
}

/// Walks every published record of the journal at `path`. With `check_checksums`, each record's CRC32C is
/// verified; structure (lengths, sequence continuity) is always checked. A corrupt record ends the walk and is
/// reported in `corruption` (not as an `Err`); errors are for journals that cannot be opened at all.
pub fn summarize(path: impl AsRef<Path>, check_checksums: bool) -> Result<JournalSummary> {
    let path = path.as_ref();
    let files: Vec<PathBuf> = if path.is_dir() {
        archive::list_segments(path)?
            .into_iter()
            .map(|(_, p)| p)
            .collect()
    } else {
        vec![path.to_path_buf()]
    };
    let Some(first) = files.first() else {
        return Err(JournalError::NotAJournal {
            path: path.into(),
            reason: "archive directory holds no segment".into(),
        });
    };
    // Opened once: a damaged header is repaired by reading the records, which is not paid for twice. An archive
    // whose first segments' headers are damaged takes its header from the first that opens; those before it are
    // damaged ranges like any later one. A ring, or an archive where none opens, is the first file's error.
    let mut first_seg = None;
    let mut first_error = None;
    for file in &files {
        match Opened::open(file) {
            Ok(seg) => {
                first_seg = Some(seg);
                break;
            }
            Err(e) if files.len() > 1 && e.is_damaged_header() => {
                first_error.get_or_insert(e);
            }
            Err(e) => return Err(first_error.unwrap_or(e)),
        }
    }
    let Some(opened) = first_seg.take() else {
        return Err(first_error.unwrap_or_else(|| JournalError::NotAJournal {
            path: first.clone(),
            reason: "no segment opens".into(),
        }));
    };
    let header = opened.info().clone();
    let mut first_seg = Some(opened);
    let mut s = JournalSummary {
        header,
        segments: files.len() as u64,
        records: 0,
        payload_bytes: 0,
        first_seq: None,
        last_seq: None,
        first_time_ns: None,
        last_time_ns: None,
        writer_active: false,
        unpublished_bytes: 0,
        checksums_checked: check_checksums,
        corruption: None,
        damaged: Vec::new(),
        records_after_damage: 0,
        metadata_repairs: Vec::new(),
        records_beyond_head: 0,
        unpublished_records: 0,
        overwritten: crate::OverwriteStats::default(),
        app_meta: None,
        disk: DiskUse::default(),
    };
    for file in &files {
        // Files before the first that opened are opened (and fail) again here, to be reported in order.
        let seg = match first_seg.take_if(|seg| seg.path() == file) {
            Some(seg) => seg,
            None => match Opened::open(file) {
                Ok(seg) => seg,
                // A later archive segment whose header is damaged: reported, and the walk goes on after it.
                Err(e) if e.is_damaged_header() => {
                    let reason = format!("damaged segment header: {e}");
                    s.corruption.get_or_insert_with(|| Corruption {
                        path: file.clone(),
                        offset: 0,
                        seq: None,
                        reason: reason.clone(),
                    });
                    let meta = std::fs::metadata(file).ok();
                    let len = meta.as_ref().map_or(0, |m| m.len());
                    s.disk.file_bytes += len;
                    s.disk.allocated_bytes += meta
                        .as_ref()
                        .map_or(0, |m| std::os::unix::fs::MetadataExt::blocks(m) * 512);
                    s.damaged.push(DamagedRange {
                        path: file.clone(),
                        offset: 0,
                        bytes: len,
                        reason,
                        intact_after: 0,
                    });
                    s.last_seq = None;
                    continue;
                }
                Err(e) => return Err(e),
            },
        };
        let seg = match seg {
            Opened::Plain(seg) => seg,
            Opened::Packed(p) => {
                walk_packed(&p, check_checksums, &mut s);
                continue;
            }
        };
        if seg.info.mode == Mode::Ring {
            let ((records, bytes, laps), note) = seg.overwritten_checked(seg.writer_live());
            s.overwritten = crate::OverwriteStats {
                records,
                bytes,
                laps,
            };
            if let Some(note) = note {
                s.metadata_repairs
                    .push(format!("{}: {note}", seg.path.display()));
            }
        }
        if let Some(meta) = seg.app_meta() {
            s.app_meta = Some(meta);
        }
        walk(&seg, check_checksums, &mut s)?;
    }
    Ok(s)
}

fn walk(seg: &Segment, check: bool, s: &mut JournalSummary) -> Result<()> {
    s.writer_active |= seg.writer_open();
    if let Ok((len, allocated)) = crate::segment::disk_use(&seg.file) {
        let records = seg
            .head()
            .load(Ordering::Acquire)
            .saturating_sub(seg.tail().load(Ordering::Acquire))
            .min(seg.cap);
        s.disk.allocated_bytes += allocated;
        s.disk.file_bytes += len;
        s.disk.record_bytes += records;
        // Of the file's own bytes: the blocks a file system spends on its bookkeeping (an extent tree) are not
        // something the journal reserved.
        s.disk.reserved_bytes += allocated.min(len).saturating_sub(records + HEADER_SIZE);
    }
    if let Some((actual, expected)) = seg.truncated {
        s.metadata_repairs.push(format!(
            "{}: truncated: the file has {actual} of its {expected} bytes (readers and writers refuse it until it is \
             extended; what lies before the cut is reported here)",
            seg.path.display()
        ));
    }
    if let Some(note) = &seg.metadata_repair {
        s.metadata_repairs
            .push(format!("{}: {note}", seg.path.display()));
    }
    let tail = seg.tail().load(Ordering::Acquire);
    let head = seg.published_head();
    // At most a capacity: a reserve further on is damage (reported by the open), not bytes in flight.
    s.unpublished_bytes += seg
        .reserve()
        .load(Ordering::Acquire)
        .saturating_sub(head)
        .min(seg.cap);
    let ring = seg.info.mode == Mode::Ring;
    let mut expected = if ring {
        s.last_seq.map(|l| l + 1)
    } else {
        Some(seg.info.base_seq)
    };
    let mut p = tail;
    while p < head {
        let frame = seg.frame_at(p);
        let lapped = ring && seg.tail().load(Ordering::Acquire) > p;
        if lapped {
            return Err(JournalError::Lapped {
                wanted_seq: expected.unwrap_or(0),
            });
        }
        let bad = |seq: Option<u64>, reason: String| Corruption {
            path: seg.path.clone(),
            offset: seg.file_offset(p),
            seq,
            reason,
        };
        match frame {
            Frame::Skip(n) | Frame::Pad(n) => p += n,
            Frame::Invalid(reason) => {
                if seg.faults() != 0 {
                    return Err(seg.truncated_under_us());
                }
                let reason = match seg.truncated {
                    Some((actual, expected)) => format!(
                        "{reason}: the file has {actual} of its {expected} bytes; {} records were readable before \
                         offset {actual}",
                        s.records
                    ),
                    None => reason.to_string(),
                };
                let c = bad(None, reason);
                match damaged(seg, s, c, p, head, expected) {
                    Some((q, seq)) => (p, expected) = (q, Some(seq)),
                    None => return Ok(()),
                }
                continue;
            }
            Frame::Record {
                frame_len,
                crc,
                seq,
                capture_ns,
            } => {
                // Records the rescan of a damaged header already checksummed are not checksummed twice.
                let checked = seg.verified.is_some_and(|(from, to)| from <= p && p < to);
                let crc_bad = check && !checked && !seg.crc_ok(p, frame_len, crc);
                // The checksum was computed from the map while a live ring writer may have been overwriting the
                // record: only trust it if the tail is still behind it (seqlock re-check), and only if every page
                // read was still backed by the file.
                if seg.faults() != 0 {
                    return Err(seg.truncated_under_us());
                }
                if ring && seg.tail().load(Ordering::Acquire) > p {
                    return Err(JournalError::Lapped {
                        wanted_seq: expected.unwrap_or(0),
                    });
                }
                let broken = if crc_bad {
                    Some(format!("checksum mismatch in record seq {seq}"))
                } else {
                    expected
                        .filter(|&e| e != seq)
                        .map(|e| format!("sequence {seq} where {e} was expected"))
                };
                if let Some(reason) = broken {
                    let c = bad(Some(seq), reason);
                    match damaged(seg, s, c, p, head, expected) {
                        Some((q, seq)) => (p, expected) = (q, Some(seq)),
                        None => return Ok(()),
                    }
                    continue;
                }
                expected = Some(seq + 1);
                if let Some(range) = s.damaged.last_mut() {
                    // Past a damaged range: counted apart, so `records` keeps meaning the intact prefix.
                    range.intact_after += 1;
                    s.records_after_damage += 1;
                    p += frame.size();
                    continue;
                }
                s.records += 1;
                s.payload_bytes += frame_len as u64 - crate::segment::RECORD_HEADER_SIZE;
                s.first_seq.get_or_insert(seq);
                s.first_time_ns.get_or_insert(capture_ns);
                s.last_seq = Some(seq);
                s.last_time_ns = Some(capture_ns);
                p += frame.size();
            }
        }
    }
    // Nothing intact is dropped silently: records chained after the stored head are counted. Within the reserved
    // range they are a batch a writer had not published yet (in flight, or cut short by a crash); past it, the head
    // pointer itself is damaged.
    if !seg.writer_live() {
        if let Some((end, n)) = seg.chain_after(head, expected) {
            let reserve = seg.reserve().load(Ordering::Acquire).max(head);
            if end > reserve {
                s.records_beyond_head += n;
                s.metadata_repairs.push(format!(
                    "{}: the stored head {head} hides {n} intact records (up to {end}): the head pointer is \
                     damaged; a writer opening the journal keeps them",
                    seg.path.display()
                ));
            } else {
                s.unpublished_records += n;
            }
        }
    }
    Ok(())
}

/// Walks a compressed file: every frame inflated (zstd checks its own checksum), every record in it checked for
/// its structure and sequence, and with `check` its checksum. A frame that does not read, or holds a record that
/// fails, is a damaged range at its offset (consecutive ones are one range); the walk goes on with the next frame.
fn walk_packed(p: &Packed, check: bool, s: &mut JournalSummary) {
    let (len, allocated) = p.disk_use();
    s.disk.allocated_bytes += allocated;
    s.disk.file_bytes += len;
    s.disk.record_bytes += p.header.record_bytes;
    s.disk.compressed_files += 1;
    if p.header.info.mode == Mode::Ring {
        let (records, bytes, laps) = p.header.overwritten;
        s.overwritten = crate::OverwriteStats {
            records,
            bytes,
            laps,
        };
    }
    if let Some(meta) = &p.header.app_meta {
        s.app_meta = Some(meta.clone());
    }
    if let Some(note) = &p.index_repair {
        s.metadata_repairs
            .push(format!("{}: {note}", p.path.display()));
    }
    let mut expected = match p.header.info.mode {
        Mode::Ring => s.last_seq.map(|l| l + 1),
        Mode::Archive => Some(p.header.info.base_seq),
    };
    if p.header.records > 0 {
        expected = Some(p.header.first_seq);
    }
    let mut inflater = Inflater::new();
    let mut plain = Vec::new();
    // Whether the last frame was damaged: a damaged frame right after it extends its range.
    let mut in_damage = false;
    for (k, e) in p.frames.iter().enumerate() {
        let failed = match p.load(k, &mut inflater, &mut plain) {
            Err(why) => Some(why),
            Ok(()) => walk_frame(&plain, check, &mut expected, s)
                .err()
                .map(|why| format!("compressed frame {k}: {why}")),
        };
        let Some(reason) = failed else {
            in_damage = false;
            continue;
        };
        s.corruption.get_or_insert_with(|| Corruption {
            path: p.path.clone(),
            offset: e.offset,
            seq: (!e.damaged).then_some(e.first_seq),
            reason: reason.clone(),
        });
        match s.damaged.last_mut().filter(|_| in_damage) {
            Some(range) => range.bytes += e.stored,
            None => s.damaged.push(DamagedRange {
                path: p.path.clone(),
                offset: e.offset,
                bytes: e.stored,
                reason,
                intact_after: 0,
            }),
        }
        in_damage = true;
        // The next frame's first record says where the sequence goes on.
        expected = p
            .frames
            .get(k + 1)
            .filter(|n| !n.damaged)
            .map(|n| n.first_seq);
    }
}

/// Counts the records of one inflated frame into `s` (as `walk` does: the intact prefix, or after a damaged
/// range its `intact_after`). `Err` names the first record that fails; the records before it are counted.
fn walk_frame(
    plain: &[u8],
    check: bool,
    expected: &mut Option<u64>,
    s: &mut JournalSummary,
) -> std::result::Result<(), String> {
    let mut at = 0;
    while at < plain.len() {
        let r = packed::record_at(plain, at, check)?;
        if let Some(e) = *expected {
            if e != r.seq {
                return Err(format!("sequence {} where {e} was expected", r.seq));
            }
        }
        *expected = Some(r.seq + 1);
        at += r.size;
        if let Some(range) = s.damaged.last_mut() {
            range.intact_after += 1;
            s.records_after_damage += 1;
            continue;
        }
        s.records += 1;
        s.payload_bytes += r.payload.len() as u64;
        s.first_seq.get_or_insert(r.seq);
        s.first_time_ns.get_or_insert(r.capture_time_ns);
        s.last_seq = Some(r.seq);
        s.last_time_ns = Some(r.capture_time_ns);
    }
    Ok(())
}

/// Records the damaged stretch starting at `p` (the first one is also `corruption`) and finds the next record
/// that verifies before `head`: its position and sequence, or `None` (the range then runs to `head`).
fn damaged(
    seg: &Segment,
    s: &mut JournalSummary,
    c: Corruption,
    p: u64,
    head: u64,
    expected: Option<u64>,
) -> Option<(u64, u64)> {
    let next = if seg.truncated.is_some() && c.reason.contains(crate::segment::TRUNCATED) {
        None
    } else {
        seg.resync(p + 8, head, expected)
    };
    s.damaged.push(DamagedRange {
        path: c.path.clone(),
        offset: c.offset,
        bytes: next.map_or(head, |(q, _)| q) - p,
        reason: c.reason.clone(),
        intact_after: 0,
    });
    s.corruption.get_or_insert(c);
    next
}

/// The newest application-metadata block of the journal at `path` (ring file or archive directory), without
/// walking its records. In an archive, a segment just rolled to may not hold a block yet: the newest segment that
/// does is used.
pub fn read_app_meta(path: impl AsRef<Path>) -> Result<Option<Vec<u8>>> {
    let path = path.as_ref();
    let meta = |file: &Path| -> Result<Option<Vec<u8>>> {
        Ok(match Opened::open(file)? {
            Opened::Plain(seg) => seg.app_meta(),
            Opened::Packed(p) => p.header.app_meta,
        })
    };
    if !path.is_dir() {
        return meta(path);
    }
    for (_, file) in archive::list_segments(path)?.into_iter().rev() {
        if let Some(m) = meta(&file)? {
            return Ok(Some(m));
        }
    }
    Ok(None)
}
