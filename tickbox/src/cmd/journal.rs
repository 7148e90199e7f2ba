//! `tickbox journal info|verify|dump PATH`: inspect a recorded journal (ring file or archive directory). Also home
//! of the size/time argument parsers shared with `record` and `replay`.
//!
//! `info` and `verify` account for publisher sequences: per publisher, data records recorded, sequences missing
//! (named by the recorder's gap records) and records overwritten by ring laps, from the ledger the recorder keeps
//! in the journal's metadata, or from a scan of the records when there is none. `verify` exits 5 on corruption;
//! a journal intact but with gap records or overwritten records is reported as GAPPY, and exits 6 under
//! `--strict`.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use tickbox_journal::{summarize, JournalError, JournalSummary, Reader};
use tickbox_recorder::{Ledger, OverwriteStats};
use tickbox_wire::{Flags, Kind, MessageRef, Payload};

use crate::config::TickboxConfig;
use crate::exit_code;

#[derive(Debug, clap::Args)]
#[command(
    after_help = "Exit codes: 0 ok; 1 error (not a journal, unreadable); 5 corrupt record or header (verify, info); 6 `verify --strict` on an intact journal that is incomplete: it holds gap records (publisher sequences the recorder never received) or records overwritten by ring laps."
)]
pub struct Args {
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

pub fn run(args: Args, _config: &TickboxConfig) -> anyhow::Result<ExitCode> {
    match args.action {
        Action::Info { path, json } => {
            let s =
                summarize(&path, false).with_context(|| format!("reading {}", path.display()))?;
            let acct = Accounting::of(&path);
            if json {
                println!("{}", report_json(&path, &s, &acct, None));
            } else {
                print_summary(&path, &s);
                print_accounting(&acct);
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
    let acct = Accounting::of(path);
    // Damaged head/tail pointers are corruption even when every record was recovered from the data.
    let verdict = match (&s.corruption, s.metadata_repairs.is_empty(), acct.gappy()) {
        (Some(_), _, _) | (None, false, _) => "corrupt",
        (None, true, true) => "gappy",
        (None, true, false) => "ok",
    };
    if json {
        println!("{}", report_json(path, &s, &acct, Some(verdict)));
    } else {
        print_summary(path, &s);
        print_accounting(&acct);
        print_metadata(&s);
        match &s.corruption {
            None if verdict == "corrupt" => println!(
                "verify        CORRUPT: the header's head/tail pointers are damaged; {} records recovered from the \
                 data ({} more past the stored head), see above",
                s.records, s.records_beyond_head
            ),
            None if verdict == "ok" => println!(
                "verify        OK: {} records, every checksum and sequence valid, no publisher sequence missing",
                s.records
            ),
            None => println!(
                "verify        GAPPY: {} records intact (every checksum and sequence valid), but the journal lacks \
                 {} publisher sequence(s) ({} gap record(s)) and {} record(s) were overwritten by ring laps",
                s.records,
                acct.missing(),
                acct.scan.gap_records,
                acct.overwritten_records()
            ),
            Some(c) => println!(
                "verify        CORRUPT at offset {} of {}{}: {}",
                c.offset,
                c.path.display(),
                c.seq
                    .map(|s| format!(" (record seq {s})"))
                    .unwrap_or_default(),
                c.reason
            ),
        }
    }
    Ok(match verdict {
        "corrupt" => ExitCode::from(exit_code::CORRUPT),
        "gappy" if strict => ExitCode::from(crate::exit_code::GAPPY),
        _ => ExitCode::SUCCESS,
    })
}

/// What `summarize` had to recover from the data, and intact records it found past the stored head.
fn print_metadata(s: &JournalSummary) {
    for repair in &s.metadata_repairs {
        println!("metadata      DAMAGED {repair}");
    }
    if s.unpublished_records > 0 {
        println!(
            "unpublished   {} intact record(s) past the published head (a batch a writer had not published; a \
             writer opening the journal keeps them)",
            s.unpublished_records
        );
    }
}

/// One publisher as a scan of the records sees it.
#[derive(Debug, Clone, Default)]
struct ScanRow {
    publisher: u32,
    data: u64,
    gap_records: u64,
    missing: u64,
}

/// Bound on publishers a scan attributes records to (the rest are summed in `overflow`).
const MAX_SCAN_PUBLISHERS: usize = 4096;

/// What the records of a journal say, read one by one.
#[derive(Debug, Clone, Default)]
struct Scan {
    data: u64,
    heartbeats: u64,
    gap_records: u64,
    /// Sequences named by gap records.
    missing: u64,
    cached: u64,
    /// Records that are not tickbox frames.
    foreign: u64,
    /// Bytes the records occupy in the journal (record headers and alignment included).
    stored_bytes: u64,
    publishers: Vec<ScanRow>,
    overflow: ScanRow,
    /// Why the scan stopped early, if it did.
    stopped: Option<String>,
}

impl Scan {
    fn of(path: &Path) -> Scan {
        let mut scan = Scan::default();
        let mut r = match Reader::open(path) {
            Ok(r) => r,
            Err(e) => {
                scan.stopped = Some(e.to_string());
                return scan;
            }
        };
        let mut last_hit = 0usize;
        loop {
            let rec = match r.next() {
                Ok(Some(rec)) => rec,
                Ok(None) => break,
                // A ring being written meanwhile: the oldest records moved on; carry on from the new oldest.
                Err(JournalError::Lapped { .. }) => continue,
                Err(e) => {
                    scan.stopped = Some(e.to_string());
                    break;
                }
            };
            scan.stored_bytes += (tickbox_journal::RECORD_HEADER_SIZE + rec.payload.len() as u64)
                .next_multiple_of(8);
            let Ok(m) = MessageRef::decode(rec.payload) else {
                scan.foreign += 1;
                continue;
            };
            let h = m.header();
            if h.flags.contains(Flags::CACHED) {
                scan.cached += 1;
                continue;
            }
            let publisher = h.publisher_id;
            let row = match scan.publishers.get(last_hit) {
                Some(r) if r.publisher == publisher => Some(last_hit),
                _ => match scan
                    .publishers
                    .iter()
                    .position(|r| r.publisher == publisher)
                {
                    Some(i) => Some(i),
                    None if scan.publishers.len() < MAX_SCAN_PUBLISHERS
                        && h.kind != Kind::Heartbeat =>
                    {
                        scan.publishers.push(ScanRow {
                            publisher,
                            ..ScanRow::default()
                        });
                        Some(scan.publishers.len() - 1)
                    }
                    None => None,
                },
            };
            if let Some(i) = row {
                last_hit = i;
            }
            let row = match row {
                Some(i) => &mut scan.publishers[i],
                None => &mut scan.overflow,
            };
            match (h.kind, m.payload()) {
                (Kind::Heartbeat, _) => scan.heartbeats += 1,
                (Kind::Gap, Ok(Payload::Gap(n))) => {
                    scan.gap_records += 1;
                    scan.missing = scan.missing.saturating_add(n.missing());
                    row.gap_records += 1;
                    row.missing = row.missing.saturating_add(n.missing());
                }
                (Kind::Gap, _) => scan.foreign += 1,
                _ => {
                    scan.data += 1;
                    row.data += 1;
                }
            }
        }
        scan
    }
}

/// A journal's publisher accounting: the recorder's ledger when the journal has one, and a scan of the records.
struct Accounting {
    ledger: Option<Ledger>,
    /// Why the stored metadata could not be used, if there was some.
    ledger_error: Option<String>,
    overwritten: OverwriteStats,
    scan: Scan,
}

impl Accounting {
    fn of(path: &Path) -> Accounting {
        let (ledger, ledger_error) = match tickbox_recorder::read_app_meta(path) {
            Ok(meta) if meta.is_empty() => (None, None),
            Ok(meta) => match Ledger::decode(&meta) {
                Ok(l) => (Some(l), None),
                Err(e) => (None, Some(e.to_string())),
            },
            Err(e) => (None, Some(e.to_string())),
        };
        let overwritten = tickbox_recorder::overwritten_at(path).unwrap_or_default();
        Accounting {
            ledger,
            ledger_error,
            overwritten,
            scan: Scan::of(path),
        }
    }

    fn recorded(&self) -> u64 {
        self.ledger
            .as_ref()
            .map_or(self.scan.data, |l| l.totals().recorded)
    }

    fn missing(&self) -> u64 {
        self.ledger
            .as_ref()
            .map_or(self.scan.missing, |l| l.totals().missing)
    }

    /// Data records overwritten, attributed to publishers (ledger only).
    fn overwritten_data(&self) -> u64 {
        self.ledger.as_ref().map_or(0, |l| l.totals().overwritten)
    }

    /// Every record a ring lap overwrote: the journal's own count, or the ledger's when that is larger (a journal
    /// written before the count existed).
    fn overwritten_records(&self) -> u64 {
        let from_ledger = self
            .ledger
            .as_ref()
            .map_or(0, |l| l.totals().overwritten + l.other_overwritten);
        self.overwritten.records.max(from_ledger)
    }

    fn gappy(&self) -> bool {
        self.missing() > 0 || self.scan.gap_records > 0 || self.overwritten_records() > 0
    }

    /// Rows: (publisher, recorded, missing, gap records in the journal, overwritten, data in the journal).
    fn rows(&self) -> Vec<(u32, u64, u64, u64, u64, u64)> {
        let scan_row = |p: u32| self.scan.publishers.iter().find(|r| r.publisher == p);
        let mut rows = Vec::new();
        match &self.ledger {
            Some(l) => {
                for r in l.rows() {
                    let s = scan_row(r.publisher);
                    rows.push((
                        r.publisher,
                        r.recorded,
                        r.missing,
                        s.map_or(0, |s| s.gap_records),
                        r.overwritten,
                        s.map_or(0, |s| s.data),
                    ));
                }
                // Publishers in the records the ledger does not name (another writer appended to the journal).
                for s in &self.scan.publishers {
                    if l.row(s.publisher).is_none() {
                        rows.push((s.publisher, 0, 0, s.gap_records, 0, s.data));
                    }
                }
            }
            None => {
                for s in &self.scan.publishers {
                    rows.push((s.publisher, s.data, s.missing, s.gap_records, 0, s.data));
                }
            }
        }
        rows
    }
}

fn print_accounting(a: &Accounting) {
    match (&a.ledger, &a.ledger_error) {
        (Some(l), _) => println!(
            "ledger        the recorder's ({} run(s)), beside a scan of the records",
            l.runs
        ),
        (None, Some(e)) => {
            println!("ledger        unreadable ({e}); figures from a scan of the records")
        }
        (None, None) => println!("ledger        none; figures from a scan of the records"),
    }
    println!(
        "accounting    recorded {}, missing {} ({} gap records in the journal), overwritten {} records ({}) in {} lap(s)",
        a.recorded(),
        a.missing(),
        a.scan.gap_records,
        a.overwritten_records(),
        fmt_bytes(a.overwritten.bytes),
        a.overwritten.laps
    );
    println!(
        "records by kind data {}, gap {}, heartbeat {}, cached {}, foreign {}; stored {}",
        a.scan.data,
        a.scan.gap_records,
        a.scan.heartbeats,
        a.scan.cached,
        a.scan.foreign,
        fmt_bytes(a.scan.stored_bytes)
    );
    if let Some(why) = &a.scan.stopped {
        println!("scan          stopped early: {why}");
    }
    let rows = a.rows();
    if rows.is_empty() {
        return;
    }
    println!(
        "{:>12}  {:>12}  {:>10}  {:>8}  {:>11}  {:>12}",
        "publisher", "recorded", "missing", "gap recs", "overwritten", "in journal"
    );
    for (p, rec, miss, gaps, over, data) in rows.iter().take(50) {
        println!("{p:>12}  {rec:>12}  {miss:>10}  {gaps:>8}  {over:>11}  {data:>12}");
    }
    if rows.len() > 50 {
        println!(
            "{:>12}  (--json lists all)",
            format!("+{} more", rows.len() - 50)
        );
    }
}

fn report_json(
    path: &Path,
    s: &JournalSummary,
    a: &Accounting,
    verdict: Option<&str>,
) -> serde_json::Value {
    let publishers: Vec<serde_json::Value> = a
        .rows()
        .into_iter()
        .map(|(p, rec, miss, gaps, over, data)| {
            serde_json::json!({
                "publisher": p,
                "recorded": rec,
                "missing": miss,
                "gap_records": gaps,
                "overwritten": over,
                "in_journal": data,
            })
        })
        .collect();
    let mut v = serde_json::json!({
        "path": path.display().to_string(),
        "mode": format!("{:?}", s.header.mode).to_lowercase(),
        "format_version": s.header.version,
        "capacity": s.header.capacity,
        "description": s.header.description,
        "segments": s.segments,
        "records": s.records,
        "payload_bytes": s.payload_bytes,
        "stored_bytes": a.scan.stored_bytes,
        "first_seq": s.first_seq,
        "last_seq": s.last_seq,
        "first_time_ns": s.first_time_ns,
        "last_time_ns": s.last_time_ns,
        "writer_active": s.writer_active,
        "ledger": if a.ledger.is_some() { "recorder" } else { "scan" },
        "recorder_runs": a.ledger.as_ref().map_or(0, |l| l.runs),
        "recorded": a.recorded(),
        "missing": a.missing(),
        "overwritten": a.overwritten_records(),
        "overwritten_data": a.overwritten_data(),
        "overwritten_bytes": a.overwritten.bytes,
        "laps": a.overwritten.laps,
        "data_records": a.scan.data,
        "gap_records": a.scan.gap_records,
        "heartbeats": a.scan.heartbeats,
        "cached": a.scan.cached,
        "foreign_records": a.scan.foreign,
        "publishers": publishers,
        "metadata_repairs": s.metadata_repairs,
        "records_beyond_head": s.records_beyond_head,
        "unpublished_records": s.unpublished_records,
        "corruption": s.corruption.as_ref().map(|c| serde_json::json!({
            "path": c.path.display().to_string(),
            "offset": c.offset,
            "seq": c.seq,
            "reason": c.reason,
        })),
    });
    if let Some(verdict) = verdict {
        v["verdict"] = verdict.into();
    }
    v
}

fn print_summary(path: &Path, s: &JournalSummary) {
    let h = &s.header;
    println!("path          {}", path.display());
    println!("mode          {:?}, format v{}", h.mode, h.version);
    println!("capacity      {} per file", fmt_bytes(h.capacity));
    println!("created       {}", fmt_time(h.created_ns));
    println!("description   {}", h.description);
    println!("segments      {}", s.segments);
    println!("records       {}", s.records);
    println!("payload       {}", fmt_bytes(s.payload_bytes));
    match (s.first_seq, s.last_seq) {
        (Some(a), Some(b)) => println!("seq range     {a} ..= {b}"),
        _ => println!("seq range     (empty)"),
    }
    if let (Some(a), Some(b)) = (s.first_time_ns, s.last_time_ns) {
        println!(
            "time range    {} .. {} ({:.3} s)",
            fmt_time(a),
            fmt_time(b),
            b.saturating_sub(a) as f64 / 1e9
        );
    }
    println!(
        "writer        {}",
        if s.writer_active {
            "open (or crashed; the next writer open recovers it)"
        } else {
            "closed cleanly"
        }
    );
    if s.unpublished_bytes > 0 {
        println!(
            "unpublished   {} bytes past the published end",
            s.unpublished_bytes
        );
    }
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
    println!(
        "{:>10}  {:<30}  {:>5}  {:<20}  {:<10}  {:>10}  {:>8}  flags",
        "seq", "capture", "bytes", "topic", "kind", "publisher", "pub_seq"
    );
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
        let t = fmt_time(rec.capture_time_ns);
        match MessageRef::decode(rec.payload) {
            Ok(m) => {
                let h = m.header();
                println!(
                    "{:>10}  {:<30}  {:>5}  {:<20}  {:<10}  {:>10}  {:>8}  {:#06x}",
                    rec.seq,
                    t,
                    rec.payload.len(),
                    m.topic(),
                    m.kind().name(),
                    h.publisher_id,
                    h.sequence,
                    h.flags.0
                );
            }
            Err(e) => {
                let hex: String = rec
                    .payload
                    .iter()
                    .take(16)
                    .map(|b| format!("{b:02x}"))
                    .collect();
                println!(
                    "{:>10}  {:<30}  {:>5}  (not a tickbox frame: {e}) {hex}",
                    rec.seq,
                    t,
                    rec.payload.len()
                );
            }
        }
        n += 1;
    }
    Ok(ExitCode::SUCCESS)
}

/// Capture time of a journal's oldest record (for `+DURATION` times).
pub(crate) fn first_capture_ns(path: &Path) -> anyhow::Result<u64> {
    let mut r = Reader::open(path)?;
    match r.next()? {
        Some(rec) => Ok(rec.capture_time_ns),
        None => anyhow::bail!(
            "{} is empty: a +DURATION time needs a first record",
            path.display()
        ),
    }
}

/// A point in time: ns since the epoch, RFC 3339, or `+DURATION` after the journal's first record (`first` is only
/// called in that case).
pub(crate) fn parse_time(
    s: &str,
    first: impl FnOnce() -> anyhow::Result<u64>,
) -> anyhow::Result<u64> {
    tickbox_units::parse_time(s, first)
}

/// RFC 3339 UTC with nanoseconds.
pub(crate) fn fmt_time(ns: u64) -> String {
    tickbox_units::format_rfc3339(ns)
}

pub(crate) fn fmt_bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = n as f64;
    let mut u = 0;
    while v >= 1024.0 && u < UNITS.len() - 1 {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{n} B")
    } else {
        format!("{v:.2} {}", UNITS[u])
    }
}
