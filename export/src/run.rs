//! One export: read a journal or history (every intact record; a damaged range is skipped and reported), select
//! by kind, topic and capture time, write the chosen format into an [`Output`], and report what was written.

use std::collections::BTreeMap;
use std::io::{BufWriter, Write};
use std::path::Path;
use std::time::{Duration, Instant};

use tickbox_journal::JournalError;
use tickbox_recorder::HistoryReader;

use crate::days::Days;
use crate::dest::{OutFile, Output, Shape};
use crate::error::ExportError;
use crate::parquet_out::{ParquetOptions, ParquetSink};
use crate::store::Location;
use crate::text::{write_err, CsvFile, JsonLines};
use crate::vocab::{PriceType, RecordKind, Row};

/// Output formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// A hive-partitioned Parquet dataset.
    Parquet,
    /// CSV, one file per kind.
    Csv,
    /// JSON lines.
    Json,
    /// DBN (an imported file rebuilt, or trades / top of book of a recording).
    Dbn,
}

impl Format {
    /// Its `--format` name.
    pub fn name(self) -> &'static str {
        match self {
            Format::Parquet => "parquet",
            Format::Csv => "csv",
            Format::Json => "json",
            Format::Dbn => "dbn",
        }
    }
}

/// Which records an export takes. Times are capture times, `from` inclusive and `to` exclusive (as the replay's
/// `--from`/`--to`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Filter {
    /// Kinds; empty: every kind.
    pub kinds: Vec<RecordKind>,
    /// Topic prefixes; empty: every topic.
    pub topics: Vec<String>,
    /// Records captured before this are left out.
    pub from_ns: Option<u64>,
    /// Records captured at or after this are left out.
    pub to_ns: Option<u64>,
}

/// Reading stops this long (of capture time) past `--to`: a recorder's capture clock may step back a little
/// (NTP), never by this much, and a history of weeks is not read to its end for an hour's export.
const READ_PAST_TO_NS: u64 = 60_000_000_000;

impl Filter {
    /// Whether `row` is selected (its capture time was checked by the reader).
    #[inline]
    pub fn selects(&self, row: &Row<'_>) -> bool {
        (self.kinds.is_empty() || self.kinds.contains(&row.kind))
            && (self.topics.is_empty()
                || self
                    .topics
                    .iter()
                    .any(|p| row.topic.starts_with(p.as_str())))
    }

    #[inline]
    fn in_window(&self, t: u64) -> bool {
        self.from_ns.is_none_or(|f| t >= f) && self.to_ns.is_none_or(|e| t < e)
    }
}

/// Everything an export needs besides its input and output.
#[derive(Debug, Clone)]
pub struct ExportOptions {
    /// Format.
    pub format: Format,
    /// Selection.
    pub filter: Filter,
    /// Prices exact or float (Parquet, CSV, JSON).
    pub price: PriceType,
    /// Zone of the date partitions (Parquet).
    pub days: Days,
    /// Parquet's file size bound and compression.
    pub parquet: ParquetOptions,
    /// For a DBN export of an import: which imported file.
    pub dbn_source: Option<u32>,
    /// For a DBN export: zstd-compress.
    pub dbn_zstd: bool,
}

/// A damaged range the export passed over.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Damage {
    /// The file where the damage starts.
    pub path: String,
    /// Its byte offset there.
    pub offset: u64,
    /// Bytes passed over.
    pub bytes: u64,
    /// Records passed over (0 when unknown).
    pub records: u64,
    /// First journal sequence not read, when known.
    pub first_missing: Option<u64>,
    /// Where reading resumed, if anything verified after it.
    pub resumed_at: Option<u64>,
}

/// What an export did.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct ExportSummary {
    /// The format.
    pub format: &'static str,
    /// Rows written.
    pub rows: u64,
    /// Rows written per kind.
    pub rows_by_kind: BTreeMap<&'static str, u64>,
    /// Journal records read (selected or not).
    pub records_read: u64,
    /// Bytes of the records read (their payloads, as recorded).
    pub bytes_read: u64,
    /// Bytes of the selected records.
    pub bytes_selected: u64,
    /// Records the filter left out.
    pub filtered_out: u64,
    /// Records that are neither a tickbox frame nor an imported record (counted, not written).
    pub undecodable: u64,
    /// Damaged ranges passed over.
    pub damaged: Vec<Damage>,
    /// Files written.
    pub files: Vec<OutFile>,
    /// Bytes written (all files).
    pub bytes_written: u64,
    /// Selected record bytes per byte written.
    pub compression_ratio: f64,
    /// Wall time, seconds.
    pub seconds: f64,
    /// Rows per second.
    pub rows_per_second: f64,
    /// Selected record megabytes (10⁶) per second.
    pub mb_per_second: f64,
}

/// Progress, for a bar: records read so far of about how many.
#[derive(Debug, Clone, Copy)]
pub struct Progress {
    /// Journal records read.
    pub read: u64,
    /// Journal records the input holds from where reading began (an estimate for a growing journal).
    pub total: u64,
    /// Rows written.
    pub rows: u64,
}

enum Sink {
    Parquet(ParquetSink),
    Csv(Vec<Option<CsvFile<BufWriter<std::fs::File>>>>, Shape),
    CsvStdout(CsvFile<BufWriter<std::io::StdoutLock<'static>>>),
    Json(JsonLines<BufWriter<std::fs::File>>),
    JsonStdout(JsonLines<BufWriter<std::io::StdoutLock<'static>>>),
}

/// Where an export writes: a location, or stdout (CSV of one kind, JSON, DBN).
#[derive(Debug, Clone)]
pub enum Dest {
    /// Standard output.
    Stdout,
    /// A path or URL.
    At(Location),
}

fn shape_of(format: Format, dest: &Location, filter: &Filter) -> Result<Shape, ExportError> {
    Ok(match format {
        Format::Parquet => Shape::Dataset,
        Format::Json | Format::Dbn => Shape::File,
        Format::Csv => {
            let name = match dest {
                Location::Local(p) => p.to_string_lossy().into_owned(),
                Location::Store(u) => u.key.clone(),
            };
            if name.ends_with(".csv") {
                if filter.kinds.len() != 1 {
                    return Err(ExportError::Refused(format!(
                        "{}: one CSV file holds one kind: give --kind (e.g. --kind trade), or a directory for \
                         one file per kind",
                        dest.shown()
                    )));
                }
                Shape::File
            } else {
                Shape::Dataset
            }
        }
    })
}

/// Exports `input` (a journal or a history directory) to `dest`. `progress` is called about every 64k records.
pub fn export(
    input: &Path,
    dest: &Dest,
    opts: &ExportOptions,
    progress: &mut dyn FnMut(Progress),
) -> Result<ExportSummary, ExportError> {
    if opts.format == Format::Dbn {
        return crate::dbn_out::export_dbn(input, dest, opts);
    }
    let started = Instant::now();
    let journal_err = |e: JournalError| ExportError::Journal {
        path: input.display().to_string(),
        source: e,
    };
    let mut reader = HistoryReader::open(input).map_err(journal_err)?;
    // Nothing is written before the input opens and the destination answers.
    let mut output = None;
    let mut sink = match dest {
        Dest::Stdout => {
            let out = BufWriter::with_capacity(1 << 20, std::io::stdout().lock());
            match opts.format {
                Format::Json => Sink::JsonStdout(JsonLines::new(out, opts.price)),
                Format::Csv => {
                    let [kind] = opts.filter.kinds[..] else {
                        return Err(ExportError::Refused(
                            "CSV on stdout holds one kind: give --kind (e.g. --kind trade), or --out DIR for one \
                             file per kind"
                                .into(),
                        ));
                    };
                    Sink::CsvStdout(
                        CsvFile::new(out, kind, opts.price).map_err(write_err("stdout"))?,
                    )
                }
                _ => {
                    return Err(ExportError::Refused(format!(
                        "--format {} writes a dataset: give --out DIR or --out s3://bucket/prefix",
                        opts.format.name()
                    )))
                }
            }
        }
        Dest::At(loc) => {
            let shape = shape_of(opts.format, loc, &opts.filter)?;
            let out = Output::open(loc, shape)?;
            let sink = match opts.format {
                Format::Parquet => {
                    Sink::Parquet(ParquetSink::new(opts.parquet.clone(), opts.days.clone()))
                }
                Format::Csv => Sink::Csv(RecordKind::ALL.iter().map(|_| None).collect(), shape),
                _ => {
                    let path = out.stage("")?;
                    let file = std::fs::File::create(&path)
                        .map_err(|e| ExportError::io(path.display(), e))?;
                    Sink::Json(JsonLines::new(
                        BufWriter::with_capacity(1 << 20, file),
                        opts.price,
                    ))
                }
            };
            output = Some(out);
            sink
        }
    };
    if let Some(from) = opts.filter.from_ns {
        reader.seek_time(from).map_err(journal_err)?;
    }
    let start_seq = reader.position_seq().unwrap_or(reader.header().base_seq);
    let total = reader.end_seq().saturating_sub(start_seq);
    let mut s = ExportSummary {
        format: opts.format.name(),
        ..ExportSummary::default()
    };
    let mut by_kind = [0u64; 6];
    let stop_at = opts.filter.to_ns.map(|t| t.saturating_add(READ_PAST_TO_NS));
    loop {
        let rec = match reader.next() {
            Ok(Some(rec)) => rec,
            Ok(None) => break,
            Err(JournalError::CorruptRecord { .. }) => {
                if pass_damage(&mut reader, &mut s).map_err(journal_err)? {
                    continue;
                }
                break;
            }
            Err(e) => return Err(journal_err(e)),
        };
        s.records_read += 1;
        s.bytes_read += rec.payload.len() as u64;
        if s.records_read.is_multiple_of(65_536) {
            progress(Progress {
                read: s.records_read,
                total,
                rows: s.rows,
            });
        }
        if !opts.filter.in_window(rec.capture_time_ns) {
            s.filtered_out += 1;
            if stop_at.is_some_and(|t| rec.capture_time_ns >= t) {
                break;
            }
            continue;
        }
        let Some(row) = Row::decode(&rec) else {
            s.undecodable += 1;
            continue;
        };
        if !opts.filter.selects(&row) {
            s.filtered_out += 1;
            continue;
        }
        s.bytes_selected += rec.payload.len() as u64;
        by_kind[row.kind.index()] += 1;
        s.rows += 1;
        match &mut sink {
            Sink::Parquet(p) => {
                if let Some(out) = output.as_mut() {
                    p.push(&row, out)?;
                }
            }
            Sink::Csv(files, shape) => {
                let slot = &mut files[row.kind.index()];
                if slot.is_none() {
                    if let Some(out) = output.as_ref() {
                        let path = out.stage(&format!("{}.csv", row.kind.name()))?;
                        let file = std::fs::File::create(&path)
                            .map_err(|e| ExportError::io(path.display(), e))?;
                        *slot = Some(
                            CsvFile::new(
                                BufWriter::with_capacity(1 << 20, file),
                                row.kind,
                                opts.price,
                            )
                            .map_err(write_err(&path.display().to_string()))?,
                        );
                    }
                }
                let _ = shape;
                if let Some(f) = slot.as_mut() {
                    f.push(&row).map_err(write_err("the CSV file"))?;
                }
            }
            Sink::CsvStdout(f) => f.push(&row).map_err(write_err("stdout"))?,
            Sink::Json(j) => j.push(&row).map_err(write_err("the JSON file"))?,
            Sink::JsonStdout(j) => j.push(&row).map_err(write_err("stdout"))?,
        }
    }
    progress(Progress {
        read: s.records_read,
        total,
        rows: s.rows,
    });
    // Close every file, then make the output visible.
    match sink {
        Sink::Parquet(p) => {
            if let Some(out) = output.as_mut() {
                p.finish(out)?;
            }
        }
        Sink::Csv(files, _) => {
            for (kind, f) in RecordKind::ALL.iter().zip(files) {
                if let (Some(mut f), Some(out)) = (f, output.as_mut()) {
                    f.out.flush().map_err(write_err("the CSV file"))?;
                    out.closed(&format!("{}.csv", kind.name()), f.rows)?;
                }
            }
        }
        Sink::CsvStdout(mut f) => f.out.flush().map_err(write_err("stdout"))?,
        Sink::Json(mut j) => {
            j.out.flush().map_err(write_err("the JSON file"))?;
            if let Some(out) = output.as_mut() {
                out.closed("", j.rows)?;
            }
        }
        Sink::JsonStdout(mut j) => j.out.flush().map_err(write_err("stdout"))?,
    }
    if let Some(out) = output {
        s.files = out.commit()?;
    }
    for k in RecordKind::ALL {
        if by_kind[k.index()] > 0 {
            s.rows_by_kind.insert(k.name(), by_kind[k.index()]);
        }
    }
    finish_summary(&mut s, started.elapsed());
    Ok(s)
}

/// After the reader met a damaged range: passes it, notes it in the summary, and says whether anything verifies
/// after it.
pub(crate) fn pass_damage(
    reader: &mut HistoryReader,
    s: &mut ExportSummary,
) -> Result<bool, JournalError> {
    let sk = reader.skip_damage()?;
    s.damaged.push(Damage {
        path: sk.path.display().to_string(),
        offset: sk.offset,
        bytes: sk.bytes,
        records: sk.records,
        first_missing: sk.first_missing,
        resumed_at: sk.resumed_at,
    });
    Ok(sk.resumed_at.is_some())
}

/// Fills the derived figures of a summary.
pub(crate) fn finish_summary(s: &mut ExportSummary, elapsed: Duration) {
    s.bytes_written = s.files.iter().map(|f| f.bytes).sum();
    s.compression_ratio = if s.bytes_written > 0 {
        s.bytes_selected as f64 / s.bytes_written as f64
    } else {
        0.0
    };
    s.seconds = elapsed.as_secs_f64();
    let secs = s.seconds.max(1e-9);
    s.rows_per_second = s.rows as f64 / secs;
    s.mb_per_second = s.bytes_selected as f64 / 1e6 / secs;
}

/// `n` with thousands separated by commas.
fn count(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

impl ExportSummary {
    /// The summary as `journal export` prints it: rows per kind, files, bytes, compression ratio, speed, every
    /// damaged range passed over and every file written.
    pub fn text(&self) -> String {
        let s = self;
        use std::fmt::Write;
        let mut t = String::new();
        let kinds: Vec<String> = s
            .rows_by_kind
            .iter()
            .map(|(k, n)| format!("{k} {}", count(*n)))
            .collect();
        let _ = writeln!(
            t,
            "exported      {} rows{} into {} file(s), {}",
            count(s.rows),
            if kinds.is_empty() {
                String::new()
            } else {
                format!(" ({})", kinds.join(", "))
            },
            s.files.len(),
            tickbox_units::format_size_approx(s.bytes_written)
        );
        let _ = writeln!(
            t,
            "read          {} records ({}); {} filtered out, {} undecodable",
            count(s.records_read),
            tickbox_units::format_size_approx(s.bytes_read),
            count(s.filtered_out),
            count(s.undecodable)
        );
        if s.bytes_written > 0 {
            let _ = writeln!(
                t,
                "ratio         {:.2}x (bytes of the records exported per byte written)",
                s.compression_ratio
            );
        }
        let _ = writeln!(
            t,
            "speed         {:.2} s, {} rows/s, {:.1} MB/s",
            s.seconds,
            count(s.rows_per_second as u64),
            s.mb_per_second
        );
        for d in &s.damaged {
            let _ = writeln!(
                t,
                "damaged       {} at offset {}: {} bytes, {} records passed over{}",
                d.path,
                d.offset,
                d.bytes,
                d.records,
                d.resumed_at
                    .map_or(", nothing verifies after it".to_owned(), |r| format!(
                        ", resumed at sequence {r}"
                    ))
            );
        }
        if !s.damaged.is_empty() {
            let _ = writeln!(
                t,
                "export        every intact record was exported; the damaged ranges above were passed over (exit 5)"
            );
        }
        for f in &s.files {
            let _ = writeln!(
                t,
                "file          {}  {} rows  {}",
                f.path,
                count(f.rows),
                f.bytes
            );
        }
        t
    }
}
