//! Reading DBN files (plain or zstd, versions 1 to 3, legacy DBZ, headerless fragments) and writing them into a
//! tickbox journal as vendor frames.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::fs::File;
use std::io::{BufReader, Chain, Cursor, Read, Seek};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use dbn::decode::dbn::{MetadataDecoder, RecordDecoder};
use dbn::decode::{dbz, DbnMetadata, DecodeRecordRef, DynReader};
use dbn::encode::dbn::MetadataEncoder;
use dbn::{Metadata, Record, RecordRef, SymbolIndex, TsSymbolMap, VersionUpgradePolicy};
use tickbox_journal::{Durability, Writer, WriterOptions};

use crate::error::DbnError;
use crate::frame::{encode_vendor_frame, VendorHeader, VENDOR_TOPIC_LETTER};
use crate::manifest::{Manifest, Source, SourceForm, MANIFEST_FORMAT};

/// Options of [`import_files`].
#[derive(Debug, Clone)]
pub struct ImportOptions {
    /// Bytes per archive segment.
    pub segment_size: u64,
    /// DBN version of headerless fragments. `None`: taken from a `.v1.`/`.v2.`/`.v3.` in the file name, else
    /// left unknown (0); the record bytes are kept exactly either way.
    pub fragment_version: Option<u8>,
    /// Records appended per journal batch.
    pub batch: usize,
}

impl Default for ImportOptions {
    fn default() -> Self {
        ImportOptions {
            segment_size: 64 << 20,
            fragment_version: None,
            batch: 4096,
        }
    }
}

/// What [`import_files`] did.
#[derive(Debug, Clone)]
pub struct ImportReport {
    /// One entry per file, as written to the manifest.
    pub manifest: Manifest,
    /// Records written in all.
    pub records: u64,
    /// Time spent.
    pub elapsed: Duration,
}

impl ImportReport {
    /// Records written per second of `elapsed` (0 before any time has passed).
    pub fn rate(&self) -> f64 {
        let secs = self.elapsed.as_secs_f64();
        if secs > 0.0 {
            self.records as f64 / secs
        } else {
            0.0
        }
    }

    /// What `tickbox import` prints of an import into `journal`.
    pub fn summary(&self, journal: &Path) -> ImportSummary {
        ImportSummary {
            journal: journal.display().to_string(),
            records: self.records,
            seconds: self.elapsed.as_secs_f64(),
            records_per_second: self.rate(),
            manifest: self.manifest.clone(),
        }
    }
}

/// `tickbox import`'s summary: `--json` serializes it, `Display` is the per-source table and a total line.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct ImportSummary {
    /// The journal written.
    pub journal: String,
    /// Records written in all.
    pub records: u64,
    /// Time spent, seconds.
    pub seconds: f64,
    /// Records written per second.
    pub records_per_second: f64,
    /// One entry per file, as written to the manifest.
    pub manifest: Manifest,
}

impl std::fmt::Display for ImportSummary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (i, s) in self.manifest.sources.iter().enumerate() {
            writeln!(
                f,
                "source {i:>3}  {:<44}  {:?} v{}{}  schema {:<10}  {:>10} records",
                s.file,
                s.form,
                s.version,
                if s.compressed { " zstd" } else { "" },
                s.schema.as_deref().unwrap_or("-"),
                s.records
            )?;
        }
        write!(
            f,
            "imported {} records into {} in {:.3} s ({:.0} records/s)",
            self.records, self.journal, self.seconds, self.records_per_second
        )
    }
}

/// Bound on the topic cache of one import (cleared when full).
const MAX_CACHED_TOPICS: usize = 1 << 16;

/// Fixed part of legacy DBZ metadata, after the skippable frame's 8-byte prelude; the zstd-compressed variable
/// part (symbols and mappings) follows it.
const DBZ_FIXED_METADATA: usize = 96;

/// Most bytes the variable part of DBZ metadata may decompress to. Real files hold symbols and mappings in a few
/// megabytes at most; a damaged frame must not decompress without bound.
const MAX_DBZ_VARIABLE_METADATA: u64 = 64 << 20;

/// Checks what the `dbn` crate's DBZ metadata decoder takes on trust: it decompresses the variable part without a
/// bound and reads its first field without checking that the part has 4 bytes (a damaged file panicked
/// `import` and `feed --source`). The rest of the metadata is left to the crate, which reports its own errors.
/// Reads `file` (named `path`) from its start.
fn check_dbz_metadata(path: &Path, file: &mut impl Read) -> Result<(), DbnError> {
    let mut prelude = [0u8; 8];
    let got = fill(file, &mut prelude).map_err(|e| DbnError::io(path, e))?;
    let frame = u32::from_le_bytes([prelude[4], prelude[5], prelude[6], prelude[7]]);
    let mut metadata = Vec::new();
    file.take(u64::from(frame))
        .read_to_end(&mut metadata)
        .map_err(|e| DbnError::io(path, e))?;
    if got < prelude.len() || metadata.len() < frame as usize {
        return Err(DbnError::refused(
            path,
            format!(
                "truncated DBZ metadata: {} of {frame} bytes",
                metadata.len()
            ),
        ));
    }
    let Some(compressed) = metadata.get(DBZ_FIXED_METADATA..) else {
        return Err(DbnError::refused(
            path,
            format!("DBZ metadata of {frame} bytes, shorter than its {DBZ_FIXED_METADATA}-byte fixed part"),
        ));
    };
    let mut variable = Vec::new();
    zstd::Decoder::new(compressed)
        .and_then(|d| {
            d.take(MAX_DBZ_VARIABLE_METADATA + 1)
                .read_to_end(&mut variable)
        })
        .map_err(|e| {
            DbnError::refused(
                path,
                format!("DBZ metadata's symbols are not a zstd frame: {e}"),
            )
        })?;
    if variable.len() as u64 > MAX_DBZ_VARIABLE_METADATA {
        return Err(DbnError::refused(
            path,
            format!(
                "DBZ metadata's symbols decompress to more than {} MiB",
                MAX_DBZ_VARIABLE_METADATA >> 20
            ),
        ));
    }
    if variable.len() < 4 {
        return Err(DbnError::refused(
            path,
            format!(
                "DBZ metadata's symbols are {} bytes, shorter than their 4-byte layout length",
                variable.len()
            ),
        ));
    }
    Ok(())
}

type Stream = Counted<Chain<Cursor<Vec<u8>>, DynReader<'static, BufReader<File>>>>;

/// The record stream of a DBN file or fragment as the `dbn` crate's decoder reads it: it counts the bytes it
/// hands out and checks every record's length byte before the decoder sees the record.
///
/// - **Counting:** the decoder ends cleanly at EOF even when the last record is cut short; comparing what it
///   read with what it decoded is how a truncated file is told apart.
/// - **Lengths:** every DBN record is a whole number of 8-byte words (its header holds a `u64`), and the decoder
///   views the record after it in place. A damaged length byte that is a multiple of 4 but not of 8 would have it
///   view every later record at a misaligned address. The bytes before such a record are handed out, then the
///   read fails naming its offset and length, so the file is refused after its last good record.
pub(crate) struct Counted<R> {
    inner: R,
    read: Arc<AtomicU64>,
    /// Bytes still to hand out before the next record's length byte.
    to_next_record: usize,
    /// A bad length found in a chunk: the bytes before it went out, this comes next.
    refusal: Option<String>,
}

impl<R> Counted<R> {
    fn new(inner: R, read: Arc<AtomicU64>) -> Self {
        Counted {
            inner,
            read,
            to_next_record: 0,
            refusal: None,
        }
    }
}

impl<R: Read> Read for Counted<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if let Some(why) = self.refusal.take() {
            return Err(std::io::Error::new(std::io::ErrorKind::InvalidData, why));
        }
        let n = self.inner.read(buf)?;
        let mut at = self.to_next_record;
        while at < n {
            let len = usize::from(buf[at]) * 4;
            if len < 16 || len % 8 != 0 {
                let offset = self.read.load(Ordering::Relaxed) + at as u64;
                let why = format!(
                    "record length {len} bytes at stream byte {offset}: DBN records are whole 8-byte words of at \
                     least 16"
                );
                if at == 0 {
                    return Err(std::io::Error::new(std::io::ErrorKind::InvalidData, why));
                }
                self.refusal = Some(why);
                self.to_next_record = 0;
                self.read.fetch_add(at as u64, Ordering::Relaxed);
                return Ok(at);
            }
            at += len;
        }
        self.to_next_record = at - n;
        self.read.fetch_add(n as u64, Ordering::Relaxed);
        Ok(n)
    }
}

enum Records {
    Dbn(Box<RecordDecoder<Stream>>),
    Dbz(Box<dbz::Decoder<BufReader<File>>>),
}

impl Records {
    fn next(&mut self) -> dbn::Result<Option<RecordRef<'_>>> {
        match self {
            Records::Dbn(d) => d.decode_ref(),
            Records::Dbz(d) => d.decode_record_ref(),
        }
    }
}

/// A DBN source opened for reading: its description and its records.
pub struct OpenedSource {
    /// The manifest entry (with `records` 0 until read).
    pub source: Source,
    /// The decoded metadata (none for fragments).
    pub metadata: Option<Metadata>,
    records: Records,
    path: PathBuf,
    count: u64,
    /// Bytes the record decoder has read from the stream (DBN and fragments; `None` for DBZ).
    stream_read: Option<Arc<AtomicU64>>,
    /// Bytes of the records decoded so far.
    decoded: u64,
}

impl OpenedSource {
    /// The next record exactly as the file holds it; `Ok(None)` at the end.
    pub fn next_record(&mut self) -> Result<Option<RecordRef<'_>>, DbnError> {
        let n = self.count;
        match self.records.next() {
            // DBZ's decoder reads its own zstd stream, so `Counted` cannot check its lengths ahead of it; it
            // views one record per call, so refusing an off-grid record here stops it before it views the next
            // at a misaligned address.
            Ok(Some(r)) if r.record_size() % 8 != 0 => Err(DbnError::refused(
                &self.path,
                format!(
                    "record {}: length {} bytes: DBN records are whole 8-byte words",
                    n + 1,
                    r.record_size()
                ),
            )),
            Ok(Some(r)) => {
                self.count += 1;
                self.decoded += r.record_size() as u64;
                Ok(Some(r))
            }
            Ok(None) => match &self.stream_read {
                Some(read) if read.load(Ordering::Relaxed) > self.decoded => {
                    Err(DbnError::refused(
                        &self.path,
                        format!(
                            "truncated: {} bytes after record {n} are not a whole record",
                            read.load(Ordering::Relaxed) - self.decoded
                        ),
                    ))
                }
                _ => Ok(None),
            },
            Err(e) => Err(DbnError::refused(
                &self.path,
                format!("record {}: {e}", n + 1),
            )),
        }
    }
}

fn fill(r: &mut impl Read, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match r.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

fn version_from_name(path: &Path) -> Option<u8> {
    let name = path.file_name()?.to_str()?;
    name.split('.').find_map(|part| match part {
        "v1" => Some(1),
        "v2" => Some(2),
        "v3" => Some(3),
        _ => None,
    })
}

/// Opens one file: detects DBZ, DBN (plain or zstd) or a headerless fragment, and reads the metadata. Refuses a
/// file it cannot decode with an error naming the file and why.
pub fn open_source(path: &Path, fragment_version: Option<u8>) -> Result<OpenedSource, DbnError> {
    let file_name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let mut head = [0u8; 16];
    let mut f = File::open(path).map_err(|e| DbnError::io(path, e))?;
    let got = fill(&mut f, &mut head).map_err(|e| DbnError::io(path, e))?;
    drop(f);
    if got == 0 {
        return Err(DbnError::refused(
            path,
            "empty file: no DBN metadata and no records",
        ));
    }
    if dbz::starts_with_prefix(&head[..got]) {
        let mut file = BufReader::new(File::open(path).map_err(|e| DbnError::io(path, e))?);
        check_dbz_metadata(path, &mut file)?;
        file.rewind().map_err(|e| DbnError::io(path, e))?;
        let d =
            dbz::Decoder::with_upgrade_policy(file, VersionUpgradePolicy::AsIs).map_err(|e| {
                DbnError::refused(
                    path,
                    format!("legacy DBZ file the dbn crate cannot decode: {e}"),
                )
            })?;
        let metadata = d.metadata().clone();
        let mut raw = Vec::new();
        MetadataEncoder::new(&mut raw)
            .encode(&metadata)
            .map_err(|e| {
                DbnError::refused(
                    path,
                    format!("DBZ metadata cannot be re-encoded as DBN: {e}"),
                )
            })?;
        let mut source = source_entry(
            file_name,
            SourceForm::Dbz,
            true,
            &metadata,
            Some(&raw),
            false,
        );
        // DBZ is DBN's "version 0"; its records have the version 1 layout, which DBN metadata states as 1.
        source.version = 1;
        return Ok(OpenedSource {
            source,
            metadata: Some(metadata),
            records: Records::Dbz(Box::new(d)),
            path: path.to_path_buf(),
            count: 0,
            stream_read: None,
            decoded: 0,
        });
    }
    let mut reader = DynReader::from_file(path)
        .map_err(|e| DbnError::refused(path, format!("neither DBN nor zstd: {e}")))?;
    let compressed = reader.is_compressed();
    let mut prefix = [0u8; 8];
    let got = fill(&mut reader, &mut prefix)
        .map_err(|e| DbnError::refused(path, format!("unreadable (bad zstd stream?): {e}")))?;
    if got == 8 && &prefix[..3] == b"DBN" {
        let version = prefix[3];
        if !(1..=3).contains(&version) {
            return Err(DbnError::refused(
                path,
                format!("DBN version {version}: this importer reads versions 1 to 3"),
            ));
        }
        let len = u32::from_le_bytes([prefix[4], prefix[5], prefix[6], prefix[7]]) as usize;
        if len > 1 << 30 {
            return Err(DbnError::refused(
                path,
                format!("metadata length {len} is implausible"),
            ));
        }
        // Grown as bytes arrive rather than sized by the stated length, so a damaged length in a short file
        // cannot make the importer allocate up to a gigabyte.
        let mut raw = prefix.to_vec();
        let n = (&mut reader)
            .take(len as u64)
            .read_to_end(&mut raw)
            .map_err(|e| DbnError::io(path, e))?;
        if n != len {
            return Err(DbnError::refused(
                path,
                format!("truncated DBN metadata: {n} of {len} bytes"),
            ));
        }
        let metadata =
            MetadataDecoder::with_upgrade_policy(Cursor::new(&raw), VersionUpgradePolicy::AsIs)
                .decode()
                .map_err(|e| {
                    DbnError::refused(
                        path,
                        format!("DBN metadata the dbn crate cannot decode: {e}"),
                    )
                })?;
        let read = Arc::new(AtomicU64::new(0));
        let d = RecordDecoder::with_version(
            Counted::new(Cursor::new(Vec::new()).chain(reader), Arc::clone(&read)),
            version,
            VersionUpgradePolicy::AsIs,
            metadata.ts_out,
        )
        .map_err(|e| DbnError::dbn(path, e))?;
        let source = source_entry(
            file_name,
            SourceForm::Dbn,
            compressed,
            &metadata,
            Some(&raw),
            true,
        );
        return Ok(OpenedSource {
            source,
            metadata: Some(metadata),
            records: Records::Dbn(Box::new(d)),
            path: path.to_path_buf(),
            count: 0,
            stream_read: Some(read),
            decoded: 0,
        });
    }
    // No metadata header: a fragment, records only. Its version is not in the file.
    let version = fragment_version
        .or_else(|| version_from_name(path))
        .unwrap_or(0);
    if version > 3 {
        return Err(DbnError::refused(
            path,
            format!("fragment version {version}: this importer reads versions 1 to 3"),
        ));
    }
    // A record is at least a 16-byte header whose length byte covers it and whose rtype is known; anything else
    // is not DBN.
    if got < 2 || (prefix[0] as usize) * 4 < 16 || dbn::RType::try_from(prefix[1]).is_err() {
        return Err(DbnError::refused(
            path,
            "not DBN: no DBN or DBZ header, and the first bytes are not a DBN record (a headerless fragment)",
        ));
    }
    let read = Arc::new(AtomicU64::new(0));
    let d = RecordDecoder::with_version(
        Counted::new(
            Cursor::new(prefix[..got].to_vec()).chain(reader),
            Arc::clone(&read),
        ),
        if version == 0 {
            dbn::DBN_VERSION
        } else {
            version
        },
        VersionUpgradePolicy::AsIs,
        false,
    )
    .map_err(|e| DbnError::dbn(path, e))?;
    Ok(OpenedSource {
        source: Source {
            file: file_name,
            form: SourceForm::Fragment,
            compressed,
            version,
            ts_out: false,
            metadata: None,
            metadata_exact: false,
            dataset: None,
            schema: None,
            stype_in: None,
            stype_out: None,
            mappings: 0,
            records: 0,
        },
        metadata: None,
        records: Records::Dbn(Box::new(d)),
        path: path.to_path_buf(),
        count: 0,
        stream_read: Some(read),
        decoded: 0,
    })
}

fn source_entry(
    file: String,
    form: SourceForm,
    compressed: bool,
    m: &Metadata,
    raw: Option<&[u8]>,
    exact: bool,
) -> Source {
    Source {
        file,
        form,
        compressed,
        version: m.version,
        ts_out: m.ts_out,
        metadata: raw.map(Source::encode_metadata),
        metadata_exact: exact,
        dataset: Some(m.dataset.clone()),
        schema: m.schema.map(|s| s.as_str().to_owned()),
        stype_in: m.stype_in.map(|s| s.as_str().to_owned()),
        stype_out: Some(m.stype_out.as_str().to_owned()),
        mappings: m.mappings.len(),
        records: 0,
    }
}

/// The venue part of topics: the dataset's first component (`GLBX` of `GLBX.MDP3`), `DBN` when unknown.
fn venue_of(m: Option<&Metadata>) -> String {
    let v: String = m
        .and_then(|m| m.dataset.split('.').next())
        .unwrap_or("")
        .chars()
        .filter(|c| *c != '\0' && *c != '.')
        .collect();
    if v.is_empty() {
        "DBN".to_owned()
    } else {
        v
    }
}

/// The vendor topic of each record (`V.<venue>.<symbol>`), from a file's symbology.
pub(crate) struct Topics {
    symbols: TsSymbolMap,
    venue: String,
    cache: HashMap<(u32, u64), String>,
}

impl Topics {
    pub(crate) fn new(metadata: Option<&Metadata>) -> Self {
        Topics {
            symbols: metadata
                .and_then(|m| TsSymbolMap::from_metadata(m).ok())
                .unwrap_or_default(),
            venue: venue_of(metadata),
            cache: HashMap::new(),
        }
    }

    /// The topic of `rec`: its symbol where the symbology names one, else its instrument id.
    pub(crate) fn topic(&mut self, rec: &RecordRef<'_>) -> &str {
        // Symbology is by UTC day: one topic per (instrument, day of the index time), built once.
        let key = (
            rec.header().instrument_id,
            rec.raw_index_ts() / 86_400_000_000_000,
        );
        let Topics {
            symbols,
            venue,
            cache,
        } = self;
        if cache.len() >= MAX_CACHED_TOPICS && !cache.contains_key(&key) {
            cache.clear();
        }
        // One lookup for a topic already built (every record but a topic's first).
        cache.entry(key).or_insert_with(|| {
            let mut t = format!("{VENDOR_TOPIC_LETTER}.{venue}.");
            match symbols.get_for_rec(rec) {
                Some(s) if !s.is_empty() => t.extend(s.chars().filter(|c| *c != '\0')),
                _ => {
                    let _ = write!(t, "{}", rec.instrument_id());
                }
            }
            t
        })
    }
}

/// Imports `files`, in order, into a new archive journal at `journal` (which must not exist), and writes the
/// manifest. Every file is opened (and refused, naming it and why) before the journal is created.
pub fn import_files(
    journal: &Path,
    files: &[PathBuf],
    opts: &ImportOptions,
) -> Result<ImportReport, DbnError> {
    let started = Instant::now();
    if journal.exists() {
        return Err(DbnError::refused(
            journal,
            "already exists: import writes a new journal",
        ));
    }
    for f in files {
        open_source(f, opts.fragment_version)?;
    }
    let session = tickbox_wire::now_ns();
    let wopts = WriterOptions::archive(opts.segment_size)
        .durability(Durability::None)
        .description(format!("tickbox import of {} DBN file(s)", files.len()));
    let mut writer = Writer::open(journal, &wopts)?;
    let mut manifest = Manifest {
        format: MANIFEST_FORMAT,
        session,
        sources: Vec::new(),
    };
    let mut seqs: HashMap<u16, u64> = HashMap::new();
    let mut frames: Vec<Vec<u8>> = Vec::new();
    let mut times: Vec<u64> = Vec::new();
    let mut total = 0u64;
    for (index, f) in files.iter().enumerate() {
        let mut src = open_source(f, opts.fragment_version)?;
        let mut topics = Topics::new(src.metadata.as_ref());
        let version = src.source.version;
        let mut n = 0u64;
        let mut used = 0usize;
        while let Some(rec) = src.next_record()? {
            if !crate::frame::record_fits(rec.as_ref()) {
                return Err(DbnError::refused(
                    f,
                    format!(
                        "record {}: rtype {:#04x} unknown to the dbn crate, or its {} bytes too short for it",
                        n + 1,
                        rec.as_ref()[1],
                        rec.as_ref().len()
                    ),
                ));
            }
            let index_ts = rec.raw_index_ts();
            let topic = topics.topic(&rec);
            let seq = seqs.entry(rec.publisher_id()).or_insert(0);
            *seq += 1;
            let header = VendorHeader {
                flags: 0,
                publisher_id: u32::from(rec.publisher_id()),
                sequence: *seq,
                send_time_ns: index_ts,
                origin_time_ns: rec.raw_ts_event(),
                session,
            };
            if frames.len() <= used {
                frames.push(Vec::with_capacity(256));
                times.push(0);
            }
            encode_vendor_frame(
                &mut frames[used],
                topic,
                &header,
                version,
                index as u32,
                rec.as_ref(),
            );
            times[used] = header.send_time_ns;
            used += 1;
            n += 1;
            if used == opts.batch.max(1) {
                writer.append_batch(
                    times
                        .iter()
                        .copied()
                        .zip(frames.iter().map(|v| v.as_slice())),
                )?;
                used = 0;
            }
        }
        if used > 0 {
            writer.append_batch(
                times[..used]
                    .iter()
                    .copied()
                    .zip(frames[..used].iter().map(|v| v.as_slice())),
            )?;
        }
        src.source.records = n;
        total += n;
        manifest.sources.push(src.source);
    }
    writer.close()?;
    manifest.write(journal)?;
    Ok(ImportReport {
        manifest,
        records: total,
        elapsed: started.elapsed(),
    })
}

#[cfg(test)]
mod summary_tests {
    use super::*;

    #[test]
    fn the_summary_is_the_table_and_the_json_of_one_report() {
        let source = Source {
            file: "a.dbn.zst".into(),
            form: SourceForm::Dbn,
            compressed: true,
            version: 3,
            ts_out: false,
            metadata: None,
            metadata_exact: true,
            dataset: Some("XNAS.ITCH".into()),
            schema: Some("trades".into()),
            stype_in: None,
            stype_out: None,
            mappings: 0,
            records: 400,
        };
        let report = ImportReport {
            manifest: Manifest {
                format: MANIFEST_FORMAT,
                session: 1,
                sources: vec![source],
            },
            records: 400,
            elapsed: Duration::from_millis(200),
        };
        let summary = report.summary(Path::new("j"));
        assert_eq!(summary.records_per_second, 2000.0);
        let text = summary.to_string();
        assert!(
            text.contains("a.dbn.zst") && text.contains("Dbn v3 zstd"),
            "{text}"
        );
        assert!(
            text.ends_with("imported 400 records into j in 0.200 s (2000 records/s)"),
            "{text}"
        );
        let json = serde_json::to_value(&summary).unwrap();
        assert_eq!(json["journal"], "j");
        assert_eq!(json["records"], 400);
        assert_eq!(json["manifest"]["sources"][0]["records"], 400);
    }
}

#[cfg(test)]
mod topic_tests {
    use super::*;
    use dbn::{rtype, RecordHeader, TradeMsg};

    fn trade(instrument_id: u32, day: u64) -> TradeMsg {
        let ts = day * 86_400_000_000_000 + 1;
        TradeMsg {
            hd: RecordHeader::new::<TradeMsg>(rtype::MBP_0, 1, instrument_id, ts),
            price: 1,
            size: 1,
            action: b'T' as _,
            side: b'A' as _,
            flags: Default::default(),
            depth: 0,
            ts_recv: ts,
            ts_in_delta: 0,
            sequence: 1,
        }
    }

    /// Without symbology a record's topic is its instrument id, built once per (instrument, day); a file with more
    /// instruments than the bound keeps the cache at the bound (it starts afresh) and every topic right.
    #[test]
    fn topics_are_built_once_per_instrument_and_day_and_the_cache_stays_bounded() {
        let mut topics = Topics::new(None);
        let max = MAX_CACHED_TOPICS as u32;
        for id in 0..max + 10 {
            let t = trade(id, 3);
            assert_eq!(topics.topic(&RecordRef::from(&t)), format!("V.DBN.{id}"));
            assert!(topics.cache.len() <= MAX_CACHED_TOPICS);
        }
        assert_eq!(topics.cache.len(), 10, "cleared once, at the bound");
        // Known: found without a new entry.
        let again = trade(max + 3, 3);
        assert_eq!(
            topics.topic(&RecordRef::from(&again)),
            format!("V.DBN.{}", max + 3)
        );
        assert_eq!(topics.cache.len(), 10);
        // The same instrument on another day is a key of its own.
        let next_day = trade(max + 3, 4);
        assert_eq!(
            topics.topic(&RecordRef::from(&next_day)),
            format!("V.DBN.{}", max + 3)
        );
        assert_eq!(topics.cache.len(), 11);
    }
}
