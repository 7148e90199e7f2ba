//! `tickbox journal ls|prune|info|verify|dump|export --journal PATH`: inspect a recorded journal (ring file or archive directory). The
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

use crate::cli::journal::{Action, Args};
use crate::config::TickboxConfig;
use crate::exit_code;
use crate::out::{out, outln};
use crate::outcome::first_capture_ns;

pub(crate) fn run(args: Args, _config: &TickboxConfig) -> anyhow::Result<ExitCode> {
    match args.action {
        Action::Ls {
            journal,
            verify,
            tz,
            json,
        } => ls(&journal.path(), verify, &tz, json),
        Action::Prune {
            journal,
            retain,
            retain_size,
            dry_run,
            json,
        } => prune(&journal.path(), retain, retain_size, dry_run, json),
        Action::Stitch {
            journals,
            out,
            segment_size,
            json,
        } => stitch(&journals, &out, segment_size, json),
        Action::Info { journal, json } => {
            let path = journal.path();
            if HistoryDir::is_history(&path) {
                return history_info(&path, json);
            }
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
                crate::out::json(&v)?;
            } else {
                out!("{}{acct}", format_summary(&path, &s));
                for h in &handovers {
                    outln!("{}", tickbox_fleet::leadership::handover_line(h));
                }
            }
            if let Some(c) = &s.corruption {
                if !json {
                    outln!(
                        "structure     BROKEN at offset {} of {}: {}",
                        c.offset,
                        c.path.display(),
                        c.reason
                    );
                }
            }
            // Damage (a broken structure, or records that do not verify, which the accounting's scan met and
            // passed) is exit 5, like verify's: `info` says the journal is damaged, and how.
            Ok(if acct.damaged(&s) {
                ExitCode::from(exit_code::CORRUPT)
            } else {
                ExitCode::SUCCESS
            })
        }
        Action::Verify {
            journal,
            strict,
            json,
        } => {
            let path = journal.path();
            if HistoryDir::is_history(&path) {
                history_verify(&path, strict, json)
            } else {
                verify(&path, strict, json)
            }
        }
        Action::Dump {
            journal,
            from_seq,
            from,
            to,
            tz,
            limit,
            topics,
            kind,
            no_fields,
            json,
        } => {
            let path = journal.path();
            DumpFilter::check_kinds(&kind).map_err(anyhow::Error::msg)?;
            let filter = DumpFilter {
                to_ns: to
                    .as_deref()
                    .map(|t| tickbox_units::parse_time_in(t, &tz, || first_capture_ns(&path)))
                    .transpose()?,
                topics,
                kinds: kind,
                fields: !no_fields,
                ..DumpFilter::default()
            };
            let from = from
                .as_deref()
                .map(|t| tickbox_units::parse_time_in(t, &tz, || first_capture_ns(&path)))
                .transpose()?;
            dump(&path, from_seq, from, limit, &filter, json)
        }
        Action::Export(args) => crate::cmd::export::run(args),
        Action::Compress {
            journal,
            level,
            json,
        } => compress(&journal.path(), level, json),
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
        crate::out::json(&r)?;
    } else {
        outln!(
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

fn verify(path: &Path, strict: bool, json: bool) -> anyhow::Result<ExitCode> {
    let s = match summarize(path, true) {
        Ok(s) => s,
        Err(e @ (JournalError::CorruptHeader { .. } | JournalError::Truncated { .. })) => {
            if json {
                crate::out::json(&Unreadable::new(path, &e))?;
            } else {
                outln!("CORRUPT: {e}");
            }
            return Ok(ExitCode::from(exit_code::CORRUPT));
        }
        Err(e) => return Err(e).with_context(|| format!("verifying {}", path.display())),
    };
    let acct = JournalAccounting::of(path);
    let verdict = acct.verdict(&s);
    if json {
        crate::out::json(&acct.to_json(path, &s, Some(verdict)))?;
    } else {
        out!(
            "{}{acct}{}",
            format_summary(path, &s),
            format_metadata_repairs(&s)
        );
        outln!("{}", format_verdict(&s, &acct, verdict));
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
    from_ns: Option<u64>,
    limit: u64,
    filter: &DumpFilter,
    json: bool,
) -> anyhow::Result<ExitCode> {
    match dump_to(path, from_seq, from_ns, limit, filter, json) {
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
    from_ns: Option<u64>,
    limit: u64,
    filter: &DumpFilter,
    json: bool,
) -> anyhow::Result<ExitCode> {
    let mut filter = filter.clone();
    let mut r = HistoryReader::open(path).with_context(|| format!("opening {}", path.display()))?;
    if let Some(seq) = from_seq {
        r.seek_seq(seq)?;
    } else if let Some(t) = from_ns {
        r.seek_time(t)?;
        filter.from_ns = Some(t);
    }
    let manifest = tickbox_dbn::Manifest::read(path).unwrap_or(None);
    let mut out = std::io::BufWriter::new(crate::out::stdout());
    if !json {
        writeln!(out, "{}", dump_header())?;
    }
    let mut n = 0;
    let mut corrupt = None;
    while (limit == 0 || n < limit) && !crate::out::closed() {
        let rec = match r.next() {
            Ok(Some(rec)) => rec,
            Ok(None) => break,
            Err(e @ JournalError::CorruptRecord { .. }) => {
                corrupt = Some(e);
                break;
            }
            Err(e) => return Err(e.into()),
        };
        if json {
            let Some(row) = filter.json(&rec, manifest.as_ref()) else {
                continue;
            };
            writeln!(out, "{}", crate::out::versioned(&row)?)?;
        } else {
            let Some(line) = filter.line(&rec, manifest.as_ref()) else {
                continue;
            };
            writeln!(out, "{line}")?;
        }
        n += 1;
    }
    if json {
        let summary = serde_json::json!({
            "summary": {
                "records": n,
                "corrupt": corrupt.as_ref().map(|e| e.to_string()),
            }
        });
        writeln!(out, "{}", crate::out::versioned(&summary)?)?;
    } else if let Some(e) = &corrupt {
        writeln!(out, "CORRUPT: {e}")?;
    }
    out.flush()?;
    Ok(match corrupt {
        Some(_) => ExitCode::from(exit_code::CORRUPT),
        None => ExitCode::SUCCESS,
    })
}

/// `journal ls DIR` (or `s3://…`, fetched first).
fn ls(path: &Path, verify: bool, tz: &str, json: bool) -> anyhow::Result<ExitCode> {
    let tz = tickbox_recorder::parse_zone(tz)?;
    let mirror = match crate::cmd::export::fetch_for_ls(path, verify) {
        Ok(m) => m,
        Err(e @ tickbox_export::ExportError::Store { .. }) => {
            eprintln!("error: {e}");
            return Ok(ExitCode::from(exit_code::STORE));
        }
        Err(e) => return Err(e.into()),
    };
    let local = mirror.as_ref().map_or(path, |m| m.path());
    let mut catalog = Catalog::of(local)?;
    if verify {
        catalog.verify()?;
    }
    // Named as given (the store's URL), not as the temporary copy.
    catalog.path = path.to_path_buf();
    if json {
        crate::out::json(&catalog.to_json())?;
    } else {
        out!("{}", catalog.table(&tz));
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
        crate::out::json(&v)?;
    } else {
        let lines: Vec<String> = (handovers.iter())
            .map(tickbox_fleet::leadership::handover_line)
            .collect();
        out!("{}", check.info_text(&lines));
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
        crate::out::json(&v)?;
    } else {
        out!("{}", check.verify_text());
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
        crate::out::json(&report)?;
        return Ok(ExitCode::SUCCESS);
    }
    out!("{report}");
    Ok(ExitCode::SUCCESS)
}

/// `journal stitch`.
fn stitch(
    journals: &[PathBuf],
    out: &Path,
    segment_size: u64,
    json: bool,
) -> anyhow::Result<ExitCode> {
    let mut inputs = Vec::with_capacity(journals.len());
    for path in journals {
        let log = tickbox_coord::HandoverLog::beside(path)
            .read()
            .with_context(|| format!("reading the leadership log of {}", path.display()))?;
        if log.is_empty() {
            tracing::warn!(
                journal = %path.display(),
                "no leadership log beside it: it never led, its records only fill the leaders' gaps"
            );
        }
        inputs.push(tickbox_recorder::StitchInput {
            path: path.clone(),
            spans: tickbox_fleet::leadership::leader_spans(&log),
        });
    }
    anyhow::ensure!(
        inputs.iter().any(|i| !i.spans.is_empty()),
        "no journal has a leadership log with an election (record --elect writes JOURNAL.leadership.jsonl)"
    );
    let report = tickbox_recorder::stitch(&inputs, out, segment_size)?;
    if json {
        crate::out::json(&report)?;
        return Ok(ExitCode::SUCCESS);
    }
    print!("{report}");
    Ok(ExitCode::SUCCESS)
}
