//! One export: read a journal or history (every intact record; a damaged range is skipped and reported), select
//! by kind, topic and capture time, write the chosen format into an [`Output`], and report what was written.

use std::io::{BufWriter, Write};
use std::path::Path;
use std::time::Instant;

use tickbox_journal::JournalError;
use tickbox_recorder::HistoryReader;

use crate::dest::{Output, Shape};
use crate::error::ExportError;
use crate::options::{Dest, ExportOptions, Filter, Format};
use crate::parquet_out::ParquetSink;
use crate::read_window::read_window;
use crate::store::Location;
use crate::summary::{finish_summary, ExportSummary, Progress};
use crate::text::{write_err, CsvFile, JsonLines};
use crate::vocab::{RecordKind, Row};

enum Sink {
    Parquet(ParquetSink),
    Csv(Vec<Option<CsvFile<BufWriter<std::fs::File>>>>, Shape),
    CsvStdout(CsvFile<BufWriter<std::io::StdoutLock<'static>>>),
    Json(JsonLines<BufWriter<std::fs::File>>),
    JsonStdout(JsonLines<BufWriter<std::io::StdoutLock<'static>>>),
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
        return crate::dbn_out::export_dbn(input, dest, opts, progress);
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
    let mut s = ExportSummary {
        format: opts.format.name(),
        ..ExportSummary::default()
    };
    let mut by_kind = [0u64; 6];
    read_window(
        input,
        &mut reader,
        &opts.filter,
        &mut s,
        progress,
        |rec, s| {
            let Some(row) = Row::decode(rec) else {
                s.undecodable += 1;
                return Ok(());
            };
            if !opts.filter.selects(&row) {
                s.filtered_out += 1;
                return Ok(());
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
            Ok(())
        },
    )?;
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
