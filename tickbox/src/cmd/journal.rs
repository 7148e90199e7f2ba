//! `tickbox journal ls|prune|info|verify|dump|export --journal PATH`: inspect a recorded journal (ring file or archive directory). The
//! accounting and formatting live in `tickbox_recorder` (its `inspect` module); this file parses arguments and picks exit codes.
//!
//! `info` and `verify` account for publisher sequences: per publisher, data records recorded, sequences missing
//! (named by the recorder's gap records) and records overwritten by ring laps, from the ledger the recorder keeps
//! in the journal's metadata, or from a scan of the records when there is none. `verify` exits 5 on corruption;
//! a journal intact but with gap records or overwritten records is reported as GAPPY, and exits 6 under
//! `--strict`.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use tickbox_dbn::{DumpError, DumpFilter, DumpRequest};
use tickbox_journal::JournalError;
use tickbox_recorder::{Catalog, JournalVerdict, JournalView, ViewError};

use crate::cli::journal::{Action, Args};
use crate::config::TickboxConfig;
use crate::exit_code;
use crate::out::{errln, out, outln};
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
        Action::Info { journal, json } => info(&journal.path(), json),
        Action::Verify {
            journal,
            strict,
            json,
        } => {
            let view = view(JournalView::verify(&journal.path()))?;
            if json {
                crate::out::json(&view.verify_json())?;
            } else {
                out!("{}", view.verify_text());
            }
            Ok(verdict_exit(view.verdict(), strict))
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
            let from_ns = from
                .as_deref()
                .map(|t| tickbox_units::parse_time_in(t, &tz, || first_capture_ns(&path)))
                .transpose()?;
            let request = DumpRequest {
                from_seq,
                from_ns,
                limit,
                filter,
                json,
            };
            dump(&path, &request)
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
            errln!("error: {} not compressed: {e}", path.display());
            return Ok(ExitCode::from(exit_code::CORRUPT));
        }
        Err(e) => return Err(e).with_context(|| format!("compressing {}", path.display())),
    };
    if json {
        crate::out::json(&r)?;
    } else {
        outln!("{}", tickbox_recorder::compress_line(&r));
    }
    Ok(ExitCode::SUCCESS)
}

fn dump(path: &Path, request: &DumpRequest) -> anyhow::Result<ExitCode> {
    let mut out = std::io::BufWriter::new(crate::out::stdout());
    let stamp = |v: serde_json::Value| crate::out::versioned(&v).unwrap_or(v);
    match tickbox_dbn::dump(path, request, &mut out, &stamp, &crate::out::closed) {
        Ok(dumped) if dumped.corrupt.is_some() => Ok(ExitCode::from(exit_code::CORRUPT)),
        Ok(_) => Ok(ExitCode::SUCCESS),
        // The reader of our output went away (`| head`): nothing more to say, and nothing went wrong.
        Err(DumpError::Write(e)) if e.kind() == std::io::ErrorKind::BrokenPipe => {
            Ok(ExitCode::SUCCESS)
        }
        Err(e) => Err(e.into()),
    }
}

/// `journal ls DIR` (or `s3://…`, fetched first).
fn ls(path: &Path, verify: bool, tz: &str, json: bool) -> anyhow::Result<ExitCode> {
    let tz = tickbox_recorder::parse_zone(tz)?;
    let mirror = match tickbox_export::Mirror::for_listing(path, verify) {
        Ok(m) => m,
        Err(e @ tickbox_export::ExportError::Store { .. }) => {
            errln!("error: {e}");
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

/// `journal info`: the journal or history, its accounting and the handovers of an elected recording (`record
/// --elect`, kept beside it). Damage (a broken structure, or records that do not verify, which the accounting's
/// scan met and passed) is exit 5, like verify's: `info` says the journal is damaged, and how.
fn info(path: &Path, json: bool) -> anyhow::Result<ExitCode> {
    let view = view(JournalView::info(path))?;
    let handovers = tickbox_fleet::leadership::read_log(path)?;
    if json {
        crate::out::json(&view.info_json(handovers))?;
    } else {
        let lines: Vec<String> = (handovers.iter())
            .map(tickbox_fleet::leadership::handover_line)
            .collect();
        out!("{}", view.info_text(&lines));
    }
    Ok(if view.damaged() {
        ExitCode::from(exit_code::CORRUPT)
    } else {
        ExitCode::SUCCESS
    })
}

/// A view's error as the main's exit code reads it (a history's error as it is, so the journal error inside it
/// stays in the chain).
fn view(view: Result<JournalView, ViewError>) -> anyhow::Result<JournalView> {
    view.map_err(|e| match e {
        ViewError::History(e) => e.into(),
        e => e.into(),
    })
}

/// `verify`'s exit: 5 when corrupt, 6 when gappy under `--strict`.
fn verdict_exit(verdict: JournalVerdict, strict: bool) -> ExitCode {
    match verdict {
        JournalVerdict::Corrupt => ExitCode::from(exit_code::CORRUPT),
        JournalVerdict::Gappy if strict => ExitCode::from(exit_code::GAPPY),
        _ => ExitCode::SUCCESS,
    }
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
    let inputs = tickbox_fleet::leadership::stitch_inputs(journals)?;
    let report = tickbox_recorder::stitch(&inputs, out, segment_size)?;
    if json {
        crate::out::json(&report)?;
        return Ok(ExitCode::SUCCESS);
    }
    out!("{report}");
    Ok(ExitCode::SUCCESS)
}
