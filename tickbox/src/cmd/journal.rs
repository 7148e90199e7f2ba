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
use tickbox_journal::{summarize, JournalError, Unreadable};
use tickbox_recorder::{
    dump_header, format_metadata_repairs, format_summary, format_verdict, Catalog, HistoryCheck,
    HistoryDir, HistoryReader, JournalAccounting, JournalVerdict,
};

use crate::config::TickboxConfig;
use crate::exit_code;
use crate::outcome::first_capture_ns;

#[derive(Debug, clap::Args)]
#[command(
    after_help = "Exit codes: 0 ok; 1 error (not a journal, unreadable); 5 corrupt record or header (verify, info); 6 `verify --strict` on an intact journal that is incomplete: it holds gap records (publisher sequences the recorder never received) or records overwritten by ring laps."
)]
pub(crate) struct Args {
    #[command(subcommand)]
    action: Action,
}

#[derive(Debug, clap::Subcommand)]
enum Action {
    /// The journals of a history (a directory `record --roll` writes): period, first and last capture time,
    /// records, first sequence, publishers, bytes on disk, stored plain or compressed, and the verdict of the last
    /// verify while the journal is unchanged since. Reads each journal's header, first and last records and ledger
    /// (cached beside a closed journal as NAME.summary.json), never a scan.
    Ls {
        /// The history directory.
        path: PathBuf,
        /// Verify every journal now (checksums and sequences, a scan) and keep the verdicts.
        #[arg(long)]
        verify: bool,
        /// Time zone of the capture times shown: an IANA name (America/New_York).
        #[arg(long, default_value = "UTC", value_name = "ZONE")]
        tz: String,
        /// Print one JSON object on stdout (integer counts) instead of the table.
        #[arg(long)]
        json: bool,
    },
    /// Apply retention to a history now: delete its oldest journals, by age (--retain) and by total size
    /// (--retain-size), oldest first, never the newest, one a writer has open or one a reader holds (replay,
    /// the history service): retention stops at the first journal it must keep, so the history never gets a hole.
    Prune {
        /// The history directory.
        path: PathBuf,
        /// Delete journals whose last record is older than this (e.g. 30d).
        #[arg(long, value_parser = tickbox_units::parse_duration, value_name = "AGE", required_unless_present = "retain_size")]
        retain: Option<std::time::Duration>,
        /// Delete the oldest journals while the history takes more than this on disk (e.g. 2TiB).
        #[arg(long, value_parser = tickbox_units::parse_size, value_name = "SIZE")]
        retain_size: Option<u64>,
        /// Say what would be deleted, delete nothing.
        #[arg(long)]
        dry_run: bool,
        /// Print one JSON object on stdout instead of the lines.
        #[arg(long)]
        json: bool,
    },
    /// Header, record count, sequence and capture-time range, and per publisher recorded / missing / overwritten
    /// (structure checked, checksums not).
    Info {
        /// A journal (ring file or archive directory) or a history directory (its journals as one).
        path: PathBuf,
        /// Print one JSON object on stdout (integer counts) instead of the table.
        #[arg(long)]
        json: bool,
    },
    /// Check every record's checksum and the sequence chain; exit 5 naming the first bad record's offset. An
    /// intact journal with gap records or overwritten records is reported GAPPY (exit 0, or 6 with --strict).
    Verify {
        /// A journal (ring file or archive directory) or a history directory (every journal, and the sequence
        /// chain between them).
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
    /// Write the records as a Parquet dataset (partitioned by date and kind), CSV (one file per kind), JSON lines
    /// or DBN, to a path or an object store (s3://bucket/prefix), with --kind, --topics and --from/--to. Exit 5
    /// when a damaged range was passed over (every intact record is exported), 12 when the object store cannot
    /// be reached or refuses; a failed export leaves nothing at the destination.
    Export(crate::cmd::export::ExportArgs),
}

pub(crate) fn run(args: Args, _config: &TickboxConfig) -> anyhow::Result<ExitCode> {
    match args.action {
        Action::Ls {
            path,
            verify,
            tz,
            json,
        } => ls(&path, verify, &tz, json),
        Action::Prune {
            path,
            retain,
            retain_size,
            dry_run,
            json,
        } => prune(&path, retain, retain_size, dry_run, json),
        Action::Info { path, json } if HistoryDir::is_history(&path) => history_info(&path, json),
        Action::Verify { path, strict, json } if HistoryDir::is_history(&path) => {
            history_verify(&path, strict, json)
        }
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
        Action::Export(args) => crate::cmd::export::run(args),
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
    let mut r = HistoryReader::open(path).with_context(|| format!("opening {}", path.display()))?;
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

/// `journal ls DIR` (or `s3://…`, fetched first).
fn ls(path: &Path, verify: bool, tz: &str, json: bool) -> anyhow::Result<ExitCode> {
    let tz = tickbox_recorder::parse_zone(tz)?;
    let mirror = match crate::cmd::export::fetch(path) {
        Ok(m) => m,
        Err(e @ tickbox_export::ExportError::Store { .. }) => {
            eprintln!("error: {e}");
            return Ok(ExitCode::from(exit_code::STORE));
        }
        Err(e) => return Err(e.into()),
    };
    let path = mirror.as_ref().map_or(path, |m| m.path());
    let mut catalog = Catalog::of(path)?;
    if verify {
        catalog.verify()?;
    }
    if json {
        println!("{}", catalog.to_json());
    } else {
        print!("{}", catalog.table(&tz));
    }
    Ok(ExitCode::SUCCESS)
}

/// `journal info DIR`: the history as one journal, each journal's line, the summed accounting, handovers.
fn history_info(path: &Path, json: bool) -> anyhow::Result<ExitCode> {
    let check = HistoryCheck::of(path, false)?;
    let handovers = tickbox_coord::HandoverLog::beside(path)
        .read()
        .with_context(|| format!("reading the leadership log of {}", path.display()))?;
    if json {
        let mut v = match &check.summary {
            Some(s) => check.accounting.to_json(path, s, None),
            None => serde_json::json!({ "path": path.display().to_string() }),
        };
        check.add_to_json(&mut v);
        v["damaged_journals"] = check.damaged().into();
        if !handovers.is_empty() {
            v["leadership"] = handovers.into();
        }
        println!("{v}");
    } else {
        println!(
            "history       roll {}, {} journal(s)",
            check.roll,
            check.journals.len()
        );
        print!("{}", check.journal_lines());
        if let Some(s) = &check.summary {
            print!("{}{}", format_summary(path, s), check.accounting);
        }
        for h in &handovers {
            println!("{}", tickbox_fleet::leadership::handover_line(h));
        }
        if check.damaged() {
            println!("structure     BROKEN: a journal above is damaged (journal verify DIR lists the damage)");
        }
    }
    Ok(if check.damaged() {
        ExitCode::from(exit_code::CORRUPT)
    } else {
        ExitCode::SUCCESS
    })
}

/// `journal verify DIR`: every journal verified, the chain between them checked, one verdict for the history.
fn history_verify(path: &Path, strict: bool, json: bool) -> anyhow::Result<ExitCode> {
    let check = HistoryCheck::of(path, true)?;
    let verdict = check.verdict();
    if json {
        let mut v = match &check.summary {
            Some(s) => check.accounting.to_json(path, s, Some(verdict)),
            None => {
                serde_json::json!({ "path": path.display().to_string(), "verdict": verdict.as_str() })
            }
        };
        check.add_to_json(&mut v);
        println!("{v}");
    } else {
        println!(
            "history       roll {}, {} journal(s)",
            check.roll,
            check.journals.len()
        );
        print!("{}", check.journal_lines());
        if let Some(s) = &check.summary {
            print!(
                "{}{}{}",
                format_summary(path, s),
                check.accounting,
                format_metadata_repairs(s)
            );
            let line = match (verdict, check.breaks.is_empty()) {
                (JournalVerdict::Gappy, false) => format!(
                    "verify        GAPPY: the journals are intact, but the history lacks the journal sequences above \
                     (a journal is missing){}",
                    if check.accounting.gappy() { ", and publisher sequences its gap records name" } else { "" }
                ),
                _ => format_verdict(s, &check.accounting, verdict)
                    .replacen(" records,", &format!(" records in {} journals,", check.journals.len()), 1),
            };
            println!("{line}");
        } else {
            println!("verify        CORRUPT: no journal of the history could be read");
        }
    }
    Ok(match verdict {
        JournalVerdict::Corrupt => ExitCode::from(exit_code::CORRUPT),
        JournalVerdict::Gappy if strict => ExitCode::from(exit_code::GAPPY),
        _ => ExitCode::SUCCESS,
    })
}

/// `journal prune DIR`.
fn prune(
    path: &Path,
    retain: Option<std::time::Duration>,
    retain_size: Option<u64>,
    dry_run: bool,
    json: bool,
) -> anyhow::Result<ExitCode> {
    let retention = tickbox_recorder::Retention {
        max_age: retain,
        max_bytes: retain_size,
    };
    let report = tickbox_recorder::prune(path, &retention, tickbox_wire::now_ns(), dry_run)?;
    if json {
        println!("{}", serde_json::to_value(&report)?);
        return Ok(ExitCode::SUCCESS);
    }
    let verb = if dry_run { "would delete" } else { "deleted" };
    for p in &report.deleted {
        println!(
            "{verb}  {}  {}  ({})",
            p.name,
            tickbox_units::format_size_approx(p.bytes),
            p.why
        );
    }
    if let Some((name, why)) = &report.kept {
        let why = match *why {
            "open" => "a writer has it open",
            "read" => "it is being read (a replay or the history service holds its lease)",
            _ => "it is the newest journal",
        };
        println!("kept     {name}: {why}; retention stops there");
    }
    println!(
        "prune         {} journal(s) {verb} ({}); {} left ({})",
        report.deleted.len(),
        tickbox_units::format_size_approx(report.freed_bytes),
        report.journals_left,
        tickbox_units::format_size_approx(report.bytes_left)
    );
    Ok(ExitCode::SUCCESS)
}
