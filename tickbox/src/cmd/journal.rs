//! `tickbox journal info|verify|dump PATH`: inspect a recorded journal (ring file or archive directory). The
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
use tickbox_journal::{summarize, JournalError, Reader};
use tickbox_recorder::{
    dump_header, format_dump_line, format_metadata_repairs, format_summary, format_verdict,
    JournalAccounting, JournalVerdict,
};

use crate::config::TickboxConfig;
use crate::exit_code;

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
    /// Print records: sequence, capture time, size, topic and wire header.
    Dump {
        path: PathBuf,
        /// Start at this journal sequence.
        #[arg(long, conflicts_with = "from")]
        from_seq: Option<u64>,
        /// Start at this capture time: ns since the epoch, RFC 3339 (2026-01-02T14:30:00Z) or +DURATION after the
        /// first record (+90s, +1.5m, +250ms).
        #[arg(long)]
        from: Option<String>,
        /// Print at most this many records.
        #[arg(long, default_value_t = 20)]
        limit: u64,
    },
}

pub(crate) fn run(args: Args, _config: &TickboxConfig) -> anyhow::Result<ExitCode> {
    match args.action {
        Action::Info { path, json } => {
            let s =
                summarize(&path, false).with_context(|| format!("reading {}", path.display()))?;
            let acct = JournalAccounting::of(&path);
            if json {
                println!("{}", acct.to_json(&path, &s, None));
            } else {
                print!("{}{acct}", format_summary(&path, &s));
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
            limit,
        } => dump(&path, from_seq, from.as_deref(), limit),
    }
}

fn verify(path: &Path, strict: bool, json: bool) -> anyhow::Result<ExitCode> {
    let s = match summarize(path, true) {
        Ok(s) => s,
        Err(e @ (JournalError::CorruptHeader { .. } | JournalError::Truncated { .. })) => {
            if json {
                println!(
                    "{}",
                    serde_json::json!({"path": path.display().to_string(), "verdict": "corrupt", "error": e.to_string()})
                );
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
) -> anyhow::Result<ExitCode> {
    let mut r = Reader::open(path).with_context(|| format!("opening {}", path.display()))?;
    if let Some(seq) = from_seq {
        r.seek_seq(seq)?;
    } else if let Some(t) = from {
        let t = parse_time(t, || first_capture_ns(path))?;
        r.seek_time(t)?;
    }
    println!("{}", dump_header());
    let mut n = 0;
    while n < limit {
        let rec = match r.next() {
            Ok(Some(rec)) => rec,
            Ok(None) => break,
            Err(e @ JournalError::CorruptRecord { .. }) => {
                println!("CORRUPT: {e}");
                return Ok(ExitCode::from(exit_code::CORRUPT));
            }
            Err(e) => return Err(e.into()),
        };
        println!("{}", format_dump_line(&rec));
        n += 1;
    }
    Ok(ExitCode::SUCCESS)
}

/// Capture time of a journal's oldest record (for `+DURATION` times).
pub(crate) fn first_capture_ns(path: &Path) -> anyhow::Result<u64> {
    tickbox_recorder::first_capture_ns(path)?.ok_or_else(|| {
        anyhow::anyhow!(
            "{} is empty: a +DURATION time needs a first record",
            path.display()
        )
    })
}

/// A point in time: ns since the epoch, RFC 3339, or `+DURATION` after the journal's first record (`first` is only
/// called in that case).
pub(crate) fn parse_time(
    s: &str,
    first: impl FnOnce() -> anyhow::Result<u64>,
) -> anyhow::Result<u64> {
    tickbox_units::parse_time(s, first)
}
