//! `tickbox journal info|verify|dump|export PATH`: inspect a recorded journal (ring file or archive directory). The
//! accounting and formatting live in `tickbox_recorder` (its `inspect` module); this file parses arguments and picks exit codes.
//!
//! `info` and `verify` account for publisher sequences: per publisher, data records recorded, sequences missing
//! (named by the recorder's gap records) and records overwritten by ring laps, from the ledger the recorder keeps
//! in the journal's metadata, or from a scan of the records when there is none. `verify` exits 5 on corruption;
//! a journal intact but with gap records or overwritten records is reported as GAPPY, and exits 6 under
//! `--strict`.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use tickbox_dbn::DumpFilter;
use tickbox_journal::{summarize, JournalError, Reader, Unreadable};
use tickbox_recorder::{
    dump_header, format_metadata_repairs, format_summary, format_verdict, JournalAccounting,
    JournalVerdict,
};

use crate::config::TickboxConfig;
use crate::exit_code;
use crate::outcome::first_capture_ns;

#[derive(Debug, clap::Args)]
#[command(
    after_help = "Exit codes: 0 ok; 1 error (not a journal, unreadable, open for writing); 5 corrupt record or header (verify, info, compress); 6 `verify --strict` on an intact journal that is incomplete: it holds gap records (publisher sequences the recorder never received) or records overwritten by ring laps."
)]
pub(crate) struct Args {
    #[command(subcommand)]
    action: Action,
}

#[derive(Debug, clap::Subcommand)]
enum Action {
    /// Header, record count, sequence and capture-time range, and per publisher recorded / missing / overwritten
    /// (structure checked, checksums not).
    Info {
        path: PathBuf,
        /// Print one JSON object on stdout (integer counts) instead of the table.
        #[arg(long)]
        json: bool,
    },
    /// Check every record's checksum and the sequence chain; exit 5 naming the first bad record's offset. An
    /// intact journal with gap records or overwritten records is reported GAPPY (exit 0, or 6 with --strict).
    Verify {
        path: PathBuf,
        /// Exit 6 when the journal is intact but incomplete (gap records, or records overwritten by ring laps).
        #[arg(long)]
        strict: bool,
        /// Print one JSON object on stdout (integer counts) instead of the table.
        #[arg(long)]
        json: bool,
    },
    /// Print records: sequence, capture time, size, topic, wire header and the decoded fields (prices as
    /// decimals, times RFC 3339). Exits quietly when its output pipe closes (`| head`).
    Dump {
        path: PathBuf,
        /// Start at this journal sequence.
        #[arg(long, conflicts_with = "from")]
        from_seq: Option<u64>,
        /// Start at this capture time: ns since the epoch, RFC 3339 (2026-01-02T14:30:00Z) or +DURATION after the
        /// first record (+90s, +1.5m, +250ms).
        #[arg(long)]
        from: Option<String>,
        /// Stop after this capture time (same forms as --from); records past it are skipped.
        #[arg(long)]
        to: Option<String>,
        /// Print at most this many records (0 = all).
        #[arg(long, default_value_t = 20)]
        limit: u64,
        /// Only records whose topic starts with one of these prefixes (comma-separated: `Q.,V.GLBX.`).
        #[arg(long, value_delimiter = ',')]
        topics: Vec<String>,
        /// Only records of these kinds (comma-separated: quote, trade, heartbeat, book_level, gap, vendor).
        #[arg(long, value_delimiter = ',')]
        kind: Vec<String>,
        /// Show only the header columns, not the decoded fields.
        #[arg(long)]
        no_fields: bool,
    },
    /// Write the records: `dbn` rebuilds an imported DBN file byte for byte (metadata, then records); `json`
    /// (one object per line) and `csv` give every record's decoded fields.
    Export {
        path: PathBuf,
        /// Output format.
        #[arg(long, value_enum)]
        format: ExportFormat,
        /// Output file (default: stdout). For `dbn`, a name ending in `.zst` is zstd-compressed.
        #[arg(long)]
        out: Option<PathBuf>,
        /// For `dbn`: which imported file (0-based, as `tickbox import` listed them); needed when there are several.
        #[arg(long)]
        source: Option<u32>,
    },
    /// Compress a closed journal in place (zstd frames with an index, same path); every command reads it as
    /// before. Refused while a writer has it open; one that does not verify is left alone (exit 5).
    Compress {
        path: PathBuf,
        /// zstd level: 1 (fastest) to 19.
        #[arg(long, default_value_t = 3)]
        level: i32,
        /// Print what was done as one JSON object on stdout.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Debug, Clone, Copy, clap::ValueEnum)]
enum ExportFormat {
    Dbn,
    Json,
    Csv,
}

pub(crate) fn run(args: Args, _config: &TickboxConfig) -> anyhow::Result<ExitCode> {
    match args.action {
        Action::Info { path, json } => {
            let s =
                summarize(&path, false).with_context(|| format!("reading {}", path.display()))?;
            let acct = JournalAccounting::of(&path);
            // Handovers of an elected recording (`record --elect`), kept beside the journal.
            let handovers = tickbox_coord::HandoverLog::beside(&path)
                .read()
                .with_context(|| format!("reading the leadership log of {}", path.display()))?;
            if json {
                let mut v = acct.to_json(&path, &s, None);
                if !handovers.is_empty() {
                    v["leadership"] = handovers.into();
                }
                println!("{v}");
            } else {
                print!("{}{acct}", format_summary(&path, &s));
                for h in &handovers {
                    println!("{}", tickbox_fleet::leadership::handover_line(h));
                }
            }
            if let Some(c) = &s.corruption {
                if !json {
                    println!(
                        "structure     BROKEN at offset {} of {}: {}",
                        c.offset,
                        c.path.display(),
                        c.reason
                    );
                }
                return Ok(ExitCode::from(exit_code::CORRUPT));
            }
            Ok(ExitCode::SUCCESS)
        }
        Action::Verify { path, strict, json } => verify(&path, strict, json),
        Action::Dump {
            path,
            from_seq,
            from,
            to,
            limit,
            topics,
            kind,
            no_fields,
        } => {
            DumpFilter::check_kinds(&kind).map_err(anyhow::Error::msg)?;
            let filter = DumpFilter {
                to_ns: to
                    .as_deref()
                    .map(|t| tickbox_units::parse_time(t, || first_capture_ns(&path)))
                    .transpose()?,
                topics,
                kinds: kind,
                fields: !no_fields,
                ..DumpFilter::default()
            };
            dump(&path, from_seq, from.as_deref(), limit, &filter)
        }
        Action::Export {
            path,
            format,
            out,
            source,
        } => export(&path, format, out.as_deref(), source),
        Action::Compress { path, level, json } => compress(&path, level, json),
    }
}

fn compress(path: &Path, level: i32, json: bool) -> anyhow::Result<ExitCode> {
    let options = tickbox_journal::CompressOptions {
        level,
        ..Default::default()
    };
    let r = match tickbox_journal::compress(path, &options) {
        Ok(r) => r,
        Err(e) if e.is_damaged_header() || matches!(e, JournalError::CorruptRecord { .. }) => {
            eprintln!("error: {} not compressed: {e}", path.display());
            return Ok(ExitCode::from(exit_code::CORRUPT));
        }
        Err(e) => return Err(e).with_context(|| format!("compressing {}", path.display())),
    };
    if json {
        println!("{}", serde_json::to_string(&r)?);
    } else {
        println!(
            "compressed {} files: {} records, {} bytes on disk -> {} ({:.1}x); {} already compressed",
            r.files,
            r.records,
            r.bytes_before,
            r.bytes_after,
            r.bytes_before as f64 / r.bytes_after.max(1) as f64,
            r.already_compressed
        );
    }
    Ok(ExitCode::SUCCESS)
}

fn export(
    path: &Path,
    format: ExportFormat,
    out: Option<&Path>,
    source: Option<u32>,
) -> anyhow::Result<ExitCode> {
    let sink: Box<dyn Write> = match out {
        Some(p) => Box::new(std::io::BufWriter::new(
            std::fs::File::create(p).with_context(|| format!("creating {}", p.display()))?,
        )),
        None => Box::new(std::io::BufWriter::new(std::io::stdout().lock())),
    };
    let result = match format {
        ExportFormat::Dbn => {
            let zstd = out.is_some_and(|p| p.extension().is_some_and(|e| e == "zst"));
            tickbox_dbn::export_dbn(path, source, sink, zstd)
        }
        ExportFormat::Json => tickbox_dbn::export_text(path, tickbox_dbn::TextFormat::Json, sink),
        ExportFormat::Csv => tickbox_dbn::export_text(path, tickbox_dbn::TextFormat::Csv, sink),
    };
    match result {
        Ok(rep) => {
            if out.is_some() {
                println!("exported {} records ({} skipped)", rep.records, rep.skipped);
            }
            Ok(ExitCode::SUCCESS)
        }
        Err(e) if e.is_broken_pipe() => Ok(ExitCode::SUCCESS),
        Err(e) => Err(e).with_context(|| format!("exporting {}", path.display())),
    }
}

fn verify(path: &Path, strict: bool, json: bool) -> anyhow::Result<ExitCode> {
    let s = match summarize(path, true) {
        Ok(s) => s,
        Err(e @ (JournalError::CorruptHeader { .. } | JournalError::Truncated { .. })) => {
            if json {
                println!("{}", serde_json::to_string(&Unreadable::new(path, &e))?);
            } else {
                println!("CORRUPT: {e}");
            }
            return Ok(ExitCode::from(exit_code::CORRUPT));
        }
        Err(e) => return Err(e).with_context(|| format!("verifying {}", path.display())),
    };
    let acct = JournalAccounting::of(path);
    let verdict = acct.verdict(&s);
    if json {
        println!("{}", acct.to_json(path, &s, Some(verdict)));
    } else {
        print!(
            "{}{acct}{}",
            format_summary(path, &s),
            format_metadata_repairs(&s)
        );
        println!("{}", format_verdict(&s, &acct, verdict));
    }
    Ok(match verdict {
        JournalVerdict::Corrupt => ExitCode::from(exit_code::CORRUPT),
        JournalVerdict::Gappy if strict => ExitCode::from(exit_code::GAPPY),
        _ => ExitCode::SUCCESS,
    })
}

fn dump(
    path: &Path,
    from_seq: Option<u64>,
    from: Option<&str>,
    limit: u64,
    filter: &DumpFilter,
) -> anyhow::Result<ExitCode> {
    match dump_to(path, from_seq, from, limit, filter) {
        // The reader of our output went away (`| head`): nothing more to say, and nothing went wrong.
        Err(e)
            if e.downcast_ref::<std::io::Error>()
                .is_some_and(|e| e.kind() == std::io::ErrorKind::BrokenPipe) =>
        {
            Ok(ExitCode::SUCCESS)
        }
        other => other,
    }
}

fn dump_to(
    path: &Path,
    from_seq: Option<u64>,
    from: Option<&str>,
    limit: u64,
    filter: &DumpFilter,
) -> anyhow::Result<ExitCode> {
    let mut filter = filter.clone();
    let mut r = Reader::open(path).with_context(|| format!("opening {}", path.display()))?;
    if let Some(seq) = from_seq {
        r.seek_seq(seq)?;
    } else if let Some(t) = from {
        let t = tickbox_units::parse_time(t, || first_capture_ns(path))?;
        r.seek_time(t)?;
        filter.from_ns = Some(t);
    }
    let manifest = tickbox_dbn::Manifest::read(path).unwrap_or(None);
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    writeln!(out, "{}", dump_header())?;
    let mut n = 0;
    while limit == 0 || n < limit {
        let rec = match r.next() {
            Ok(Some(rec)) => rec,
            Ok(None) => break,
            Err(e @ JournalError::CorruptRecord { .. }) => {
                writeln!(out, "CORRUPT: {e}")?;
                out.flush()?;
                return Ok(ExitCode::from(exit_code::CORRUPT));
            }
            Err(e) => return Err(e.into()),
        };
        let Some(line) = filter.line(&rec, manifest.as_ref()) else {
            continue;
        };
        writeln!(out, "{line}")?;
        n += 1;
    }
    out.flush()?;
    Ok(ExitCode::SUCCESS)
}
