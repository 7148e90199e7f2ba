//! Reading a recorded journal back as the recorder's user sees it: what `journal info`, `journal verify` and
//! `journal dump` report.
//!
//! Publisher accounting comes from two sources that are shown side by side: the recorder's [`Ledger`] (stored in
//! the journal's metadata; it knows what a ring overwrote) and a [`RecordScan`] of the records themselves (it knows
//! what is really there). A journal with no ledger (written by another tool, or before ledgers existed) is
//! accounted from the scan alone.

use std::fmt::{self, Write as _};
use std::path::Path;

use tickbox_journal::{JournalError, JournalSummary, Reader, Record};
use tickbox_units::{format_rfc3339, format_size_approx};
use tickbox_wire::{Flags, Kind, MessageRef, Payload};

use crate::{Ledger, OverwriteStats};

/// Bound on publishers a scan attributes records to; records of further publishers are summed in
/// [`RecordScan::overflow`], so a journal full of forged publisher ids cannot grow the scan without bound.
pub const MAX_SCAN_PUBLISHERS: usize = 4096;

/// One publisher as a scan of the records sees it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ScanRow {
    /// Publisher id from the frame header (0 for the overflow row).
    pub publisher: u32,
    /// Data records (quotes, trades, …) of this publisher in the journal.
    pub data: u64,
    /// Gap records the recorder wrote for this publisher.
    pub gap_records: u64,
    /// Publisher sequences those gap records name as never received.
    pub missing: u64,
}

/// What the records of a journal say, read one by one (checksums are the reader's business, not the scan's).
#[derive(Debug, Clone, Default)]
pub struct RecordScan {
    /// Data records of every publisher.
    pub data: u64,
    /// Heartbeats (they carry no data and are not attributed to publishers).
    pub heartbeats: u64,
    /// Gap records: losses the recorder noticed while recording.
    pub gap_records: u64,
    /// Sequences named by gap records.
    pub missing: u64,
    /// LVC cached values (replays of an earlier value, outside the publisher's sequence).
    pub cached: u64,
    /// Vendor records (kind 6 in `docs/book/src/wire.md`: an imported DBN record kept byte for byte); also counted in
    /// [`RecordScan::data`] and attributed to their publisher.
    pub vendor: u64,
    /// Records that are not tickbox frames.
    pub foreign: u64,
    /// Bytes the records occupy in the journal (record headers and alignment included).
    pub stored_bytes: u64,
    /// Per publisher, in order of first appearance, at most [`MAX_SCAN_PUBLISHERS`].
    pub publishers: Vec<ScanRow>,
    /// Everything attributed to publishers past the bound.
    pub overflow: ScanRow,
    /// Why the scan stopped before the end, if it did.
    pub stopped: Option<String>,
    /// Damaged stretches the scan passed over (records that do not verify): the scan goes on at the next record
    /// that does, so what follows is still counted.
    pub damaged_ranges: u64,
    /// Records in them (their sequences).
    pub corrupt_records: u64,
    /// What the first one was.
    pub first_damage: Option<String>,
}

impl RecordScan {
    /// Scans every record of the journal at `path`. Never fails: an error stops the scan and is kept in
    /// [`RecordScan::stopped`], so what was read before it is still reported.
    pub fn of(path: &Path) -> RecordScan {
        let mut scan = RecordScan::default();
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
                // Damage: counted, and the scan goes on at the next record that verifies.
                Err(e @ JournalError::CorruptRecord { .. }) => {
                    scan.first_damage.get_or_insert_with(|| e.to_string());
                    match r.skip_damage() {
                        Ok(skipped) => {
                            scan.damaged_ranges += 1;
                            scan.corrupt_records += skipped.records;
                            continue;
                        }
                        Err(e) => {
                            scan.stopped = Some(e.to_string());
                            break;
                        }
                    }
                }
                Err(e) => {
                    scan.stopped = Some(e.to_string());
                    break;
                }
            };
            scan.stored_bytes += (tickbox_journal::RECORD_HEADER_SIZE + rec.payload.len() as u64)
                .next_multiple_of(8);
            let Ok(m) = MessageRef::decode(rec.payload) else {
                match vendor_publisher(rec.payload) {
                    Some(publisher) => {
                        scan.vendor += 1;
                        scan.data += 1;
                        let row = scan.row_of(publisher, &mut last_hit, true);
                        row.data += 1;
                    }
                    None => scan.foreign += 1,
                }
                continue;
            };
            let h = m.header();
            if h.flags.contains(Flags::CACHED) {
                scan.cached += 1;
                continue;
            }
            match (h.kind, m.payload()) {
                (Kind::Heartbeat, _) => {
                    scan.heartbeats += 1;
                    scan.row_of(h.publisher_id, &mut last_hit, false);
                }
                (Kind::Gap, Ok(Payload::Gap(n))) => {
                    scan.gap_records += 1;
                    scan.missing = scan.missing.saturating_add(n.missing());
                    let row = scan.row_of(h.publisher_id, &mut last_hit, true);
                    row.gap_records += 1;
                    row.missing = row.missing.saturating_add(n.missing());
                }
                (Kind::Gap, _) => scan.foreign += 1,
                _ => {
                    scan.data += 1;
                    scan.row_of(h.publisher_id, &mut last_hit, true).data += 1;
                }
            }
        }
        scan
    }

    /// Adds the scan of the journal that follows this one in a history.
    pub fn add(&mut self, later: &RecordScan) {
        self.data += later.data;
        self.heartbeats += later.heartbeats;
        self.gap_records += later.gap_records;
        self.missing = self.missing.saturating_add(later.missing);
        self.cached += later.cached;
        self.vendor += later.vendor;
        self.foreign += later.foreign;
        self.stored_bytes += later.stored_bytes;
        let mut last_hit = 0;
        for r in &later.publishers {
            let row = self.row_of(r.publisher, &mut last_hit, true);
            row.data += r.data;
            row.gap_records += r.gap_records;
            row.missing = row.missing.saturating_add(r.missing);
        }
        self.overflow.data += later.overflow.data;
        self.overflow.gap_records += later.overflow.gap_records;
        self.overflow.missing = self.overflow.missing.saturating_add(later.overflow.missing);
        if self.stopped.is_none() {
            self.stopped.clone_from(&later.stopped);
        }
        self.damaged_ranges += later.damaged_ranges;
        self.corrupt_records += later.corrupt_records;
        if self.first_damage.is_none() {
            self.first_damage.clone_from(&later.first_damage);
        }
    }

    /// The row of `publisher`, created when `create` and the bound allows, else the overflow row. Consecutive
    /// records mostly come from the same publisher, so the last row found (`last_hit`) is tried first.
    fn row_of(&mut self, publisher: u32, last_hit: &mut usize, create: bool) -> &mut ScanRow {
        let found = match self.publishers.get(*last_hit) {
            Some(r) if r.publisher == publisher => Some(*last_hit),
            _ => self
                .publishers
                .iter()
                .position(|r| r.publisher == publisher),
        };
        let index = match found {
            Some(i) => Some(i),
            None if create && self.publishers.len() < MAX_SCAN_PUBLISHERS => {
                self.publishers.push(ScanRow {
                    publisher,
                    ..ScanRow::default()
                });
                Some(self.publishers.len() - 1)
            }
            None => None,
        };
        match index {
            Some(i) => {
                *last_hit = i;
                &mut self.publishers[i]
            }
            None => &mut self.overflow,
        }
    }
}

/// Kind number of a vendor record (an imported record kept byte for byte, `docs/book/src/wire.md`). `tickbox_wire` does
/// not decode it (its payload has no fixed size), so the scan reads the fixed header itself.
const VENDOR_KIND: u8 = 6;

/// The publisher id of a version-2 vendor frame, or `None` for anything else.
fn vendor_publisher(frame: &[u8]) -> Option<u32> {
    let nul = frame.iter().position(|&b| b == 0)?;
    let header = frame.get(nul + 1..nul + 1 + 40)?;
    if header[0] != 2 || header[1] != VENDOR_KIND {
        return None;
    }
    Some(u32::from_le_bytes(header[4..8].try_into().ok()?))
}

/// One publisher's line in the accounting table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PublisherAccount {
    /// Publisher id.
    pub publisher: u32,
    /// Data records the recorder wrote (ledger), or found (scan).
    pub recorded: u64,
    /// Sequences never received.
    pub missing: u64,
    /// Gap records for this publisher present in the journal.
    pub gap_records: u64,
    /// Data records a ring lap overwrote (ledger only).
    pub overwritten: u64,
    /// Data records present in the journal now.
    pub in_journal: u64,
}

/// The outcome of `journal verify`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JournalVerdict {
    /// Every record intact and nothing missing.
    Ok,
    /// Every record intact, but the journal is incomplete: gap records, or records overwritten by ring laps.
    Gappy,
    /// A corrupt record, or damaged head/tail metadata (even when every record could be recovered).
    Corrupt,
}

impl JournalVerdict {
    /// The word used in text and JSON output.
    pub fn as_str(self) -> &'static str {
        match self {
            JournalVerdict::Ok => "ok",
            JournalVerdict::Gappy => "gappy",
            JournalVerdict::Corrupt => "corrupt",
        }
    }
}

/// A journal's publisher accounting: the recorder's ledger when the journal has one, and a scan of the records.
#[derive(Debug, Clone)]
pub struct JournalAccounting {
    /// The recorder's ledger, when the journal holds a readable one.
    pub ledger: Option<Ledger>,
    /// Why the stored metadata could not be used, if there was some.
    pub ledger_error: Option<String>,
    /// What ring laps overwrote, as the journal counts it.
    pub overwritten: OverwriteStats,
    /// The records as they are.
    pub scan: RecordScan,
}

impl JournalAccounting {
    /// Reads the ledger and scans the records of the journal at `path`.
    pub fn of(path: &Path) -> JournalAccounting {
        let (ledger, ledger_error) = match crate::read_app_meta(path) {
            Ok(meta) if meta.is_empty() => (None, None),
            Ok(meta) => match Ledger::decode(&meta) {
                Ok(l) => (Some(l), None),
                Err(e) => (None, Some(e.to_string())),
            },
            Err(e) => (None, Some(e.to_string())),
        };
        let overwritten = crate::overwritten_at(path).unwrap_or_default();
        JournalAccounting {
            ledger,
            ledger_error,
            overwritten,
            scan: RecordScan::of(path),
        }
    }

    /// Data records recorded.
    pub fn recorded(&self) -> u64 {
        self.ledger
            .as_ref()
            .map_or(self.scan.data, |l| l.totals().recorded)
    }

    /// Publisher sequences never received.
    pub fn missing(&self) -> u64 {
        self.ledger
            .as_ref()
            .map_or(self.scan.missing, |l| l.totals().missing)
    }

    /// Data records overwritten, attributed to publishers (ledger only).
    pub fn overwritten_data(&self) -> u64 {
        self.ledger.as_ref().map_or(0, |l| l.totals().overwritten)
    }

    /// Every record a ring lap overwrote: the journal's own count, or the ledger's when that is larger (a journal
    /// written before the count existed).
    pub fn overwritten_records(&self) -> u64 {
        let from_ledger = self
            .ledger
            .as_ref()
            .map_or(0, |l| l.totals().overwritten + l.other_overwritten);
        self.overwritten.records.max(from_ledger)
    }

    /// Whether the records found damage (a record that does not verify, or a structure walk that broke).
    pub fn damaged(&self, summary: &JournalSummary) -> bool {
        summary.corruption.is_some() || self.scan.damaged_ranges > 0
    }

    /// Whether the journal lacks anything: missing sequences, gap records or overwritten records.
    pub fn gappy(&self) -> bool {
        self.missing() > 0 || self.scan.gap_records > 0 || self.overwritten_records() > 0
    }

    /// The verdict of `verify` for a journal whose structure `summary` describes.
    pub fn verdict(&self, summary: &JournalSummary) -> JournalVerdict {
        // Damaged head/tail pointers are corruption even when every record was recovered from the data.
        match (
            &summary.corruption,
            summary.metadata_repairs.is_empty(),
            self.gappy(),
        ) {
            (Some(_), _, _) | (None, false, _) => JournalVerdict::Corrupt,
            (None, true, true) => JournalVerdict::Gappy,
            (None, true, false) => JournalVerdict::Ok,
        }
    }

    /// Per publisher: the ledger's rows (with what the scan found beside them), then publishers the ledger does not
    /// name (another writer appended to the journal); without a ledger, the scan's rows.
    pub fn rows(&self) -> Vec<PublisherAccount> {
        let scan_row = |p: u32| self.scan.publishers.iter().find(|r| r.publisher == p);
        let mut rows = Vec::new();
        match &self.ledger {
            Some(l) => {
                for r in l.rows() {
                    let s = scan_row(r.publisher);
                    rows.push(PublisherAccount {
                        publisher: r.publisher,
                        recorded: r.recorded,
                        missing: r.missing,
                        gap_records: s.map_or(0, |s| s.gap_records),
                        overwritten: r.overwritten,
                        in_journal: s.map_or(0, |s| s.data),
                    });
                }
                for s in &self.scan.publishers {
                    if l.row(s.publisher).is_none() {
                        rows.push(PublisherAccount {
                            publisher: s.publisher,
                            recorded: 0,
                            missing: 0,
                            gap_records: s.gap_records,
                            overwritten: 0,
                            in_journal: s.data,
                        });
                    }
                }
            }
            None => {
                for s in &self.scan.publishers {
                    rows.push(PublisherAccount {
                        publisher: s.publisher,
                        recorded: s.data,
                        missing: s.missing,
                        gap_records: s.gap_records,
                        overwritten: 0,
                        in_journal: s.data,
                    });
                }
            }
        }
        rows
    }

    /// The summary and accounting as one JSON object (`journal info --json`, `journal verify --json`); every
    /// count is an integer.
    pub fn to_json(
        &self,
        path: &Path,
        s: &JournalSummary,
        verdict: Option<JournalVerdict>,
    ) -> serde_json::Value {
        let publishers: Vec<serde_json::Value> = self
            .rows()
            .into_iter()
            .map(|r| {
                serde_json::json!({
                    "publisher": r.publisher,
                    "recorded": r.recorded,
                    "missing": r.missing,
                    "gap_records": r.gap_records,
                    "overwritten": r.overwritten,
                    "in_journal": r.in_journal,
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
            "stored_bytes": self.scan.stored_bytes,
            "first_seq": s.first_seq,
            "last_seq": s.last_seq,
            "first_time_ns": s.first_time_ns,
            "last_time_ns": s.last_time_ns,
            "writer_active": s.writer_active,
            "ledger": if self.ledger.is_some() { "recorder" } else { "scan" },
            "recorder_runs": self.ledger.as_ref().map_or(0, |l| l.runs),
            "recorded": self.recorded(),
            "missing": self.missing(),
            "overwritten": self.overwritten_records(),
            "overwritten_data": self.overwritten_data(),
            "overwritten_bytes": self.overwritten.bytes,
            "laps": self.overwritten.laps,
            "data_records": self.scan.data,
            "gap_records": self.scan.gap_records,
            "heartbeats": self.scan.heartbeats,
            "cached": self.scan.cached,
            "vendor_records": self.scan.vendor,
            "foreign_records": self.scan.foreign,
            "publishers": publishers,
            "metadata_repairs": s.metadata_repairs,
            "records_beyond_head": s.records_beyond_head,
            "unpublished_records": s.unpublished_records,
            "damaged": s.damaged.iter().map(|d| serde_json::json!({
                "path": d.path.display().to_string(),
                "offset": d.offset,
                "bytes": d.bytes,
                "reason": d.reason,
                "intact_after": d.intact_after,
            })).collect::<Vec<_>>(),
            "records_after_damage": s.records_after_damage,
            "corruption": s.corruption.as_ref().map(|c| serde_json::json!({
                "path": c.path.display().to_string(),
                "offset": c.offset,
                "seq": c.seq,
                "reason": c.reason,
            })),
        });
        v["damaged_ranges"] = self.scan.damaged_ranges.into();
        v["corrupt_records"] = self.scan.corrupt_records.into();
        if let Some(verdict) = verdict {
            v["verdict"] = verdict.as_str().into();
        }
        v
    }
}

/// Rows shown in text before the table says "--json lists all".
const TEXT_ROWS: usize = 50;

impl fmt::Display for JournalAccounting {
    /// The accounting block of `journal info` / `verify`: where the figures come from, totals, records by kind,
    /// and the per-publisher table.
    fn fmt(&self, out: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (&self.ledger, &self.ledger_error) {
            (Some(l), _) => writeln!(
                out,
                "ledger        the recorder's ({} run(s)), beside a scan of the records",
                l.runs
            )?,
            (None, Some(e)) => writeln!(
                out,
                "ledger        unreadable ({e}); figures from a scan of the records"
            )?,
            (None, None) => writeln!(
                out,
                "ledger        none; figures from a scan of the records"
            )?,
        }
        writeln!(
            out,
            "accounting    recorded {}, missing {} ({} gap records in the journal), overwritten {} records ({}) in {} lap(s)",
            self.recorded(),
            self.missing(),
            self.scan.gap_records,
            self.overwritten_records(),
            format_size_approx(self.overwritten.bytes),
            self.overwritten.laps
        )?;
        writeln!(
            out,
            "records by kind data {} (vendor {}), gap {}, heartbeat {}, cached {}, foreign {}; stored {}",
            self.scan.data,
            self.scan.vendor,
            self.scan.gap_records,
            self.scan.heartbeats,
            self.scan.cached,
            self.scan.foreign,
            format_size_approx(self.scan.stored_bytes)
        )?;
        if let Some(why) = &self.scan.stopped {
            writeln!(out, "scan          stopped early: {why}")?;
        }
        if self.scan.damaged_ranges > 0 {
            writeln!(
                out,
                "damaged       {} record(s) in {} damaged stretch(es) do not verify, first: {} (journal verify lists them)",
                self.scan.corrupt_records,
                self.scan.damaged_ranges,
                self.scan.first_damage.as_deref().unwrap_or("-")
            )?;
        }
        let rows = self.rows();
        if rows.is_empty() {
            return Ok(());
        }
        writeln!(
            out,
            "{:>12}  {:>12}  {:>10}  {:>8}  {:>11}  {:>12}",
            "publisher", "recorded", "missing", "gap recs", "overwritten", "in journal"
        )?;
        for r in rows.iter().take(TEXT_ROWS) {
            writeln!(
                out,
                "{:>12}  {:>12}  {:>10}  {:>8}  {:>11}  {:>12}",
                r.publisher, r.recorded, r.missing, r.gap_records, r.overwritten, r.in_journal
            )?;
        }
        if rows.len() > TEXT_ROWS {
            writeln!(
                out,
                "{:>12}  (--json lists all)",
                format!("+{} more", rows.len() - TEXT_ROWS)
            )?;
        }
        Ok(())
    }
}

/// The structural part of `journal info`: header, extent, ranges, writer state.
pub fn format_summary(path: &Path, s: &JournalSummary) -> String {
    let h = &s.header;
    let mut out = String::new();
    let _ = writeln!(out, "path          {}", path.display());
    let _ = writeln!(out, "mode          {:?}, format v{}", h.mode, h.version);
    let _ = writeln!(
        out,
        "capacity      {} per file",
        format_size_approx(h.capacity)
    );
    let _ = writeln!(out, "created       {}", format_rfc3339(h.created_ns));
    let _ = writeln!(out, "description   {}", h.description);
    let _ = writeln!(out, "segments      {}", s.segments);
    let _ = writeln!(out, "records       {}", s.records);
    let _ = writeln!(out, "payload       {}", format_size_approx(s.payload_bytes));
    match (s.first_seq, s.last_seq) {
        (Some(a), Some(b)) => {
            let _ = writeln!(out, "seq range     {a} ..= {b}");
        }
        _ => {
            let _ = writeln!(out, "seq range     (empty)");
        }
    }
    if let (Some(a), Some(b)) = (s.first_time_ns, s.last_time_ns) {
        let _ = writeln!(
            out,
            "time range    {} .. {} ({:.3} s)",
            format_rfc3339(a),
            format_rfc3339(b),
            b.saturating_sub(a) as f64 / 1e9
        );
    }
    let _ = writeln!(
        out,
        "writer        {}",
        if s.writer_active {
            "open (or crashed; the next writer open recovers it)"
        } else {
            "closed cleanly"
        }
    );
    if s.unpublished_bytes > 0 {
        let _ = writeln!(
            out,
            "unpublished   {} bytes past the published end",
            s.unpublished_bytes
        );
    }
    out
}

/// What `summarize` had to recover from the data, and intact records it found past the stored head.
pub fn format_metadata_repairs(s: &JournalSummary) -> String {
    let mut out = String::new();
    for repair in &s.metadata_repairs {
        let _ = writeln!(out, "metadata      DAMAGED {repair}");
    }
    if s.unpublished_records > 0 {
        let _ = writeln!(
            out,
            "unpublished   {} intact record(s) past the published head (a batch a writer had not published; a \
             writer opening the journal keeps them)",
            s.unpublished_records
        );
    }
    out
}

/// The closing line of `journal verify`.
pub fn format_verdict(
    s: &JournalSummary,
    acct: &JournalAccounting,
    verdict: JournalVerdict,
) -> String {
    match (&s.corruption, verdict) {
        (None, JournalVerdict::Corrupt) => format!(
            "verify        CORRUPT: the header's head/tail pointers are damaged; {} records recovered from the \
             data ({} more past the stored head), see above",
            s.records, s.records_beyond_head
        ),
        (None, JournalVerdict::Ok) => format!(
            "verify        OK: {} records, every checksum and sequence valid, no publisher sequence missing",
            s.records
        ),
        (None, JournalVerdict::Gappy) => format!(
            "verify        GAPPY: {} records intact (every checksum and sequence valid), but the journal lacks \
             {} publisher sequence(s) ({} gap record(s)) and {} record(s) were overwritten by ring laps",
            s.records,
            acct.missing(),
            acct.scan.gap_records,
            acct.overwritten_records()
        ),
        (Some(c), _) => {
            let mut out = format!(
                "verify        CORRUPT at offset {} of {}{}: {}",
                c.offset,
                c.path.display(),
                c.seq
                    .map(|s| format!(" (record seq {s})"))
                    .unwrap_or_default(),
                c.reason
            );
            // Every damaged range, and how much intact data follows each (the walk goes on past them).
            for d in &s.damaged {
                out.push_str(&format!(
                    "\ndamaged       {} bytes at offset {} of {}: {}; {} intact records after it",
                    d.bytes,
                    d.offset,
                    d.path.display(),
                    d.reason,
                    d.intact_after
                ));
            }
            out
        }
    }
}

/// The column header of `journal dump`, aligned with [`format_dump_line`].
pub fn dump_header() -> String {
    format!(
        "{:>10}  {:<30}  {:>5}  {:<20}  {:<10}  {:>10}  {:>8}  flags",
        "seq", "capture", "bytes", "topic", "kind", "publisher", "pub_seq"
    )
}

/// One line of `journal dump`: journal sequence, capture time, size, and the frame's topic and header (or the
/// first bytes of a record that is not a tickbox frame, with why).
pub fn format_dump_line(rec: &Record<'_>) -> String {
    let t = format_rfc3339(rec.capture_time_ns);
    match MessageRef::decode(rec.payload) {
        Ok(m) => {
            let h = m.header();
            format!(
                "{:>10}  {:<30}  {:>5}  {:<20}  {:<10}  {:>10}  {:>8}  {:#06x}",
                rec.seq,
                t,
                rec.payload.len(),
                m.topic(),
                m.kind().name(),
                h.publisher_id,
                h.sequence,
                h.flags.0
            )
        }
        Err(e) => {
            let hex: String = rec
                .payload
                .iter()
                .take(16)
                .map(|b| format!("{b:02x}"))
                .collect();
            format!(
                "{:>10}  {:<30}  {:>5}  (not a tickbox frame: {e}) {hex}",
                rec.seq,
                t,
                rec.payload.len()
            )
        }
    }
}
