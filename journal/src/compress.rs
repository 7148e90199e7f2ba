//! Compressing a closed journal in place ([`compress`]): each plain file (a ring, or every archive segment) is
//! rewritten as a compressed file under a temporary name, checked by reading it back whole, synced, and renamed
//! over the plain one, so the journal keeps its path and readers go on reading it through the same API.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::Path;
use std::sync::atomic::Ordering;

use crate::archive;
use crate::error::{JournalError, Result};
use crate::packed::{self, FrameEntry, Inflater, Packed, PackedHeader};
use crate::segment::{align8, frame_crc, Frame, Mode, Segment, STATE_SEALED, STATE_WRITER_OPEN};
use crate::writer::recover;

/// How [`compress`] compresses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CompressOptions {
    /// zstd level (1 fastest to 19; negative levels are faster still). 3 unless set.
    pub level: i32,
    /// Plain bytes of records per compressed frame (64 KiB to 64 MiB; 1 MiB unless set). A reader that starts in
    /// the middle of a file inflates one frame; a damaged frame loses its records, the others read.
    pub frame_bytes: u64,
}

impl Default for CompressOptions {
    fn default() -> Self {
        CompressOptions {
            level: 3,
            frame_bytes: 1 << 20,
        }
    }
}

/// What [`compress`] did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct CompressReport {
    /// Files compressed now (the ring, or archive segments).
    pub files: u64,
    /// Files that were compressed already, left as they were.
    pub already_compressed: u64,
    /// Files a killed writer had left open, recovered first as a writer opening the journal would (what a crash
    /// left unfinished is discarded, every complete record kept).
    pub recovered: u64,
    /// Records in the files compressed now.
    pub records: u64,
    /// Bytes of those records as the plain files stored them.
    pub record_bytes: u64,
    /// Bytes the plain files took on disk (allocated blocks).
    pub bytes_before: u64,
    /// Bytes the compressed files take.
    pub bytes_after: u64,
    /// Compressed frames written.
    pub frames: u64,
}

/// Compresses the closed journal at `path` (a ring file or an archive directory) in place. Each plain file is
/// written compressed under a temporary name beside it (`*.compressing`), read back whole (every frame inflated,
/// every record's checksum and sequence checked), synced, and renamed over the plain file, and the directory
/// synced: at every instant the journal holds one complete copy of each file, plain or compressed, under its own
/// name. Files already compressed are left alone, so an interrupted compression can be run again.
///
/// The journal's writer lock is held throughout: a journal open for writing is refused
/// ([`JournalError::Locked`]), and no writer can open it meanwhile. A journal a killed writer left is recovered
/// first (as a writer opening it would). A journal that does not verify (a damaged record) is refused with the
/// error naming the damage, and left as it is. Readers are not disturbed: one reading a plain file when it is
/// replaced goes on with the file it opened; the next open reads the compressed one, through the same API.
pub fn compress(path: impl AsRef<Path>, options: &CompressOptions) -> Result<CompressReport> {
    let path = path.as_ref();
    let levels = zstd::compression_level_range();
    if !levels.contains(&options.level) || !(64 << 10..=64 << 20).contains(&options.frame_bytes) {
        return Err(JournalError::InvalidOptions(format!(
            "compression level {} (zstd takes {}..={}) or frame size {} (64 KiB to 64 MiB)",
            options.level,
            levels.start(),
            levels.end(),
            options.frame_bytes
        )));
    }
    let mut report = CompressReport::default();
    if path.is_dir() {
        let _lock = archive::lock_dir(path)?;
        archive::remove_temporaries(path)?;
        let segments = archive::list_segments(path)?;
        if segments.is_empty() {
            return Err(JournalError::NotAJournal {
                path: path.into(),
                reason: "archive directory holds no segment".into(),
            });
        }
        for (i, (_, file)) in segments.iter().enumerate() {
            if packed::is_packed(file)? {
                report.already_compressed += 1;
                continue;
            }
            let seg = Segment::open(file, true)?;
            if seg.info.mode != Mode::Archive {
                return Err(JournalError::InvalidOptions(format!(
                    "{} in an archive directory is not an archive segment",
                    file.display()
                )));
            }
            settle(&seg, i + 1 == segments.len(), &mut report)?;
            compress_file(&seg, file, options, &mut report)?;
        }
        sync_dir(path);
    } else {
        if !path.exists() {
            return Err(JournalError::NotAJournal {
                path: path.into(),
                reason: "no such file or directory".into(),
            });
        }
        if packed::is_packed(path)? {
            report.already_compressed = 1;
            return Ok(report);
        }
        let seg = Segment::open(path, true)?;
        if seg.info.mode != Mode::Ring {
            return Err(JournalError::InvalidOptions(format!(
                "{} is one segment of an archive: compress the archive's directory",
                path.display()
            )));
        }
        seg.lock_exclusive()?;
        let temporary = path.with_extension(crate::names::COMPRESSING_EXT);
        let _ = std::fs::remove_file(&temporary);
        settle(&seg, true, &mut report)?;
        compress_file(&seg, path, options, &mut report)?;
        if let Some(dir) = path.parent() {
            sync_dir(dir);
        }
    }
    Ok(report)
}

/// Recovers a file a killed writer left open, as a writer opening the journal would: the complete records kept,
/// a torn end discarded, an archive segment before the last sealed. The caller holds the writer lock.
fn settle(seg: &Segment, last: bool, report: &mut CompressReport) -> Result<()> {
    let archive = seg.info.mode == Mode::Archive;
    if seg.writer_open() || (archive && !last && !seg.sealed()) {
        let rec = recover(seg)?;
        tracing::warn!(
            path = %seg.path.display(),
            records = rec.records,
            discarded_bytes = rec.discarded_bytes,
            "a killed writer left the journal open: recovered before compressing"
        );
        if archive && !last {
            seg.state().store(STATE_SEALED, Ordering::Release);
        } else {
            seg.state().fetch_and(!STATE_WRITER_OPEN, Ordering::Release);
        }
        report.recovered += 1;
    }
    Ok(())
}

fn sync_dir(dir: &Path) {
    let dir = if dir.as_os_str().is_empty() {
        Path::new(".")
    } else {
        dir
    };
    if let Ok(d) = File::open(dir) {
        let _ = d.sync_all();
    }
}

/// Writes the records of `seg` (its path `path`) compressed, checks the result, and renames it over `path`.
fn compress_file(
    seg: &Segment,
    path: &Path,
    options: &CompressOptions,
    report: &mut CompressReport,
) -> Result<()> {
    let tmp = path.with_extension(crate::names::COMPRESSING_EXT);
    let written = write_packed(seg, &tmp, options).and_then(|(header, frames)| {
        check_packed(&tmp, &header)?;
        Ok((header, frames))
    });
    let (header, frames) = match written {
        Ok(w) => w,
        Err(e) => {
            let _ = std::fs::remove_file(&tmp);
            return Err(e);
        }
    };
    let (_, before) = crate::segment::disk_use(&seg.file).map_err(|e| JournalError::io(path, e))?;
    std::fs::rename(&tmp, path).map_err(|e| JournalError::io(path, e))?;
    let after = std::fs::metadata(path)
        .map(|m| std::os::unix::fs::MetadataExt::blocks(&m) * 512)
        .map_err(|e| JournalError::io(path, e))?;
    report.files += 1;
    report.records += header.records;
    report.record_bytes += header.record_bytes;
    report.bytes_before += before;
    report.bytes_after += after;
    report.frames += frames;
    Ok(())
}

/// The compressed file: header frame, one zstd frame per `frame_bytes` of records (whole records, as the plain
/// file stores them), index frame. Every record is checked (checksum, consecutive sequence) on the way: a damaged
/// journal is not compressed. Returns the header written and the number of frames.
fn write_packed(
    seg: &Segment,
    tmp: &Path,
    options: &CompressOptions,
) -> Result<(PackedHeader, u64)> {
    let io = |e| JournalError::io(tmp, e);
    let file = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .open(tmp)
        .map_err(io)?;
    let mut header = PackedHeader {
        info: seg.info.clone(),
        records: 0,
        first_seq: seg.info.base_seq.max(1),
        next_seq: 0,
        record_bytes: 0,
        overwritten: seg.overwritten_checked(false).0,
        compressed_ns: crate::segment::now_ns(),
        level: options.level,
        app_meta: seg.app_meta(),
    };
    // The header's length is known now (the metadata is): a placeholder, written for real at the end.
    let header_len = packed::encode_header(&header).len() as u64;
    let mut out = std::io::BufWriter::with_capacity(1 << 20, &file);
    out.write_all(&vec![0u8; header_len as usize]).map_err(io)?;
    let mut compressor = zstd::bulk::Compressor::new(options.level).map_err(io)?;
    compressor
        .set_parameter(zstd::zstd_safe::CParameter::ChecksumFlag(true))
        .map_err(io)?;
    compressor
        .set_parameter(zstd::zstd_safe::CParameter::ContentSizeFlag(true))
        .map_err(io)?;
    let mut entries: Vec<FrameEntry> = Vec::new();
    let mut chunk: Vec<u8> = Vec::with_capacity(options.frame_bytes as usize + (1 << 16));
    let mut entry: Option<FrameEntry> = None;
    let mut offset = header_len;
    let mut stored: Vec<u8> = Vec::new();
    let mut flush = |chunk: &mut Vec<u8>,
                     entry: &mut Option<FrameEntry>,
                     out: &mut std::io::BufWriter<&File>,
                     offset: &mut u64|
     -> Result<()> {
        let Some(mut e) = entry.take() else {
            return Ok(());
        };
        stored.clear();
        stored.reserve(zstd::zstd_safe::compress_bound(chunk.len()));
        compressor
            .compress_to_buffer(&chunk[..], &mut stored)
            .map_err(io)?;
        out.write_all(&stored).map_err(io)?;
        e.offset = *offset;
        e.stored = stored.len() as u64;
        e.plain = chunk.len() as u64;
        *offset += e.stored;
        entries.push(e);
        chunk.clear();
        Ok(())
    };
    let ring = seg.info.mode == Mode::Ring;
    let tail = seg.tail().load(Ordering::Acquire);
    let head = seg.published_head();
    let mut expected = (!ring).then_some(seg.info.base_seq);
    let mut body = Vec::new();
    let mut p = tail;
    let corrupt = |p: u64, reason: String| JournalError::CorruptRecord {
        path: seg.path.clone(),
        offset: seg.file_offset(p),
        reason: format!("{reason} (a journal that does not verify is not compressed)"),
    };
    while p < head {
        match seg.frame_at(p) {
            Frame::Skip(n) | Frame::Pad(n) if ring => p += n,
            Frame::Record {
                frame_len,
                crc,
                seq,
                capture_ns,
            } => {
                if expected.is_some_and(|e| e != seq) {
                    return Err(corrupt(
                        p,
                        format!("sequence {seq} where {expected:?} was expected"),
                    ));
                }
                seg.copy_body(p % seg.cap, frame_len, &mut body);
                if frame_crc(frame_len, &body) != crc {
                    return Err(corrupt(p, format!("checksum mismatch in record seq {seq}")));
                }
                let size = align8(frame_len as u64);
                if !chunk.is_empty() && chunk.len() as u64 + size > options.frame_bytes {
                    flush(&mut chunk, &mut entry, &mut out, &mut offset)?;
                }
                if size > packed::MAX_FRAME_PLAIN {
                    return Err(JournalError::InvalidOptions(format!(
                        "record seq {seq} of {size} bytes is larger than a compressed frame may be"
                    )));
                }
                chunk.extend_from_slice(&frame_len.to_le_bytes());
                chunk.extend_from_slice(&crc.to_le_bytes());
                chunk.extend_from_slice(&body);
                let e = entry.get_or_insert(FrameEntry {
                    offset: 0,
                    stored: 0,
                    plain: 0,
                    first_seq: seq,
                    records: 0,
                    first_time: capture_ns,
                    last_time: capture_ns,
                    damaged: false,
                });
                e.records += 1;
                e.last_time = capture_ns;
                if header.records == 0 {
                    header.first_seq = seq;
                }
                header.records += 1;
                header.record_bytes += size;
                expected = Some(seq + 1);
                p += size;
            }
            Frame::Skip(_) | Frame::Pad(_) => {
                return Err(corrupt(p, "padding in an archive segment".into()))
            }
            Frame::Invalid(reason) => return Err(corrupt(p, reason.to_string())),
        }
    }
    flush(&mut chunk, &mut entry, &mut out, &mut offset)?;
    if seg.faults() != 0 {
        return Err(seg.truncated_under_us());
    }
    header.next_seq = match expected {
        Some(next) => next.max(seg.head_seq().load(Ordering::Acquire)),
        None => seg.head_seq().load(Ordering::Acquire).max(1),
    };
    out.write_all(&packed::encode_index(&entries)).map_err(io)?;
    out.flush().map_err(io)?;
    drop(out);
    let encoded = packed::encode_header(&header);
    debug_assert_eq!(encoded.len() as u64, header_len);
    std::os::unix::fs::FileExt::write_all_at(&file, &encoded, 0).map_err(io)?;
    file.sync_all().map_err(io)?;
    Ok((header, entries.len() as u64))
}

/// Reads the compressed file at `tmp` back whole before it replaces anything: its header says what was written,
/// its index is intact, every frame inflates, and every record in it verifies and follows the one before.
fn check_packed(tmp: &Path, written: &PackedHeader) -> Result<()> {
    let bad = |reason: String| JournalError::CorruptRecord {
        path: tmp.to_path_buf(),
        offset: 0,
        reason: format!("the compressed file does not read back as written: {reason}"),
    };
    let p = Packed::open(tmp)?;
    if p.header != *written || p.index_repair.is_some() {
        return Err(bad(p
            .index_repair
            .unwrap_or_else(|| "header differs".into())));
    }
    let mut inflater = Inflater::new();
    let mut plain = Vec::new();
    let mut next = written.first_seq;
    let mut records = 0;
    for k in 0..p.frames.len() {
        p.load(k, &mut inflater, &mut plain).map_err(bad)?;
        let mut at = 0;
        while at < plain.len() {
            let r = packed::record_at(&plain, at, true).map_err(bad)?;
            if r.seq != next {
                return Err(bad(format!("sequence {} where {next} was expected", r.seq)));
            }
            next += 1;
            records += 1;
            at += r.size;
        }
    }
    if records != written.records {
        return Err(bad(format!("{records} records of {}", written.records)));
    }
    Ok(())
}
