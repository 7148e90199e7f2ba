//! `journal ls`, `journal info DIR` and `journal verify DIR`: a history looked at as one journal, and journal by
//! journal.
//!
//! [`Catalog`] is the cheap look (`ls`): each journal's card (header, first and last records, ledger; cached once
//! it is closed) and the journal-sequence chain between them. [`HistoryCheck`] walks every journal (`info`
//! without checksums, `verify` with), sums their ledgers and scans into one accounting, and checks the chain: a
//! journal's first sequence must follow the previous one's last, or records are missing from the history (a
//! journal deleted by hand; retention only ever removes the oldest). The verdict is the worst of the journals',
//! a break in the chain making it at least GAPPY.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use serde_json::Value;
use tickbox_journal::{summarize, JournalError, JournalSummary};
use tickbox_units::format_size_approx;

use crate::catalog::JournalCard;
use crate::error::RecorderError;
use crate::history_dir::HistoryDir;
use crate::inspect::{JournalAccounting, JournalVerdict, RecordScan};
use crate::ledger::Ledger;
use crate::selection::{format_in_zone, TimeZone};

/// Records missing between two journals of a history.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChainBreak {
    /// The journal before the hole.
    pub after: String,
    /// The journal after it.
    pub before: String,
    /// The first journal sequence missing.
    pub first_missing: u64,
    /// The last journal sequence missing.
    pub last_missing: u64,
}

impl ChainBreak {
    fn to_json(&self) -> Value {
        serde_json::json!({
            "after": self.after,
            "before": self.before,
            "first_missing": self.first_missing,
            "last_missing": self.last_missing,
        })
    }

    fn line(&self) -> String {
        format!(
            "chain         BROKEN: journal seqs {} ..= {} are in no journal (between {} and {})",
            self.first_missing, self.last_missing, self.after, self.before
        )
    }
}

/// The journal-sequence holes between consecutive cards (empty journals are passed).
fn breaks_of(cards: &[JournalCard]) -> Vec<ChainBreak> {
    let mut out = Vec::new();
    let mut last: Option<(&str, u64)> = None;
    for c in cards {
        let (Some(first), Some(end)) = (c.first_seq, c.last_seq) else {
            continue;
        };
        if let Some((name, prev)) = last {
            if first > prev + 1 {
                out.push(ChainBreak {
                    after: name.to_owned(),
                    before: c.name.clone(),
                    first_missing: prev + 1,
                    last_missing: first - 1,
                });
            }
        }
        last = Some((&c.name, end));
    }
    out
}

/// The journals of a history, each by its card (`journal ls`).
#[derive(Debug, Clone)]
pub struct Catalog {
    /// The history.
    pub path: PathBuf,
    /// How it rolls.
    pub roll: String,
    /// Its journals, oldest first.
    pub cards: Vec<JournalCard>,
    /// Holes in the journal sequence between them.
    pub breaks: Vec<ChainBreak>,
}

impl Catalog {
    /// Reads each journal's card (cached, or made from a few reads of its header and records).
    pub fn of(dir: &Path) -> Result<Catalog, RecorderError> {
        let history = HistoryDir::open(dir)?;
        let mut cards = Vec::new();
        for j in history.journals()? {
            cards.push(
                JournalCard::of(&j.path).map_err(|source| RecorderError::Open {
                    path: j.path.clone(),
                    source,
                })?,
            );
        }
        Ok(Catalog {
            path: dir.to_path_buf(),
            roll: history.roll().to_string(),
            breaks: breaks_of(&cards),
            cards,
        })
    }

    /// Verifies every journal (checksums and sequences) and keeps each verdict in its card.
    pub fn verify(&mut self) -> Result<(), RecorderError> {
        for card in &mut self.cards {
            let path = self.path.join(&card.name);
            let verdict = match summarize(&path, true) {
                Ok(s) => JournalAccounting::of(&path).verdict(&s),
                Err(e) if is_unreadable(&e) => JournalVerdict::Corrupt,
                Err(source) => return Err(RecorderError::Open { path, source }),
            };
            card.set_verified(verdict.as_str(), &path);
        }
        Ok(())
    }

    /// The listing as one JSON object.
    pub fn to_json(&self) -> Value {
        let journals: Vec<Value> = self
            .cards
            .iter()
            .map(|c| {
                let mut v = serde_json::to_value(c).unwrap_or(Value::Null);
                if let Some(o) = v.as_object_mut() {
                    o.remove("stamp");
                    o.insert(
                        "verified".into(),
                        c.verified
                            .as_ref()
                            .map_or(Value::Null, |v| v.verdict.clone().into()),
                    );
                    o.insert(
                        "verified_at_ns".into(),
                        c.verified.as_ref().map_or(Value::Null, |v| v.at_ns.into()),
                    );
                }
                v
            })
            .collect();
        serde_json::json!({
            "history": self.path.display().to_string(),
            "roll": self.roll,
            "journals": journals,
            "records": self.cards.iter().map(|c| c.records).sum::<u64>(),
            "bytes_on_disk": self.cards.iter().map(|c| c.bytes_on_disk).sum::<u64>(),
            "chain_breaks": self.breaks.iter().map(ChainBreak::to_json).collect::<Vec<_>>(),
        })
    }

    /// The listing as a table, times in `tz`.
    pub fn table(&self, tz: &TimeZone) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "history       {} (roll {}), {} journal(s)",
            self.path.display(),
            self.roll,
            self.cards.len()
        );
        let width = self
            .cards
            .iter()
            .map(|c| c.name.len())
            .max()
            .unwrap_or(6)
            .max(6);
        let _ = writeln!(
            out,
            "{:<width$}  {:<27}  {:<27}  {:>10}  {:>10}  {:>10}  {:>10}  {:<10}  verified",
            "period",
            "first capture",
            "last capture",
            "records",
            "seqs from",
            "publishers",
            "on disk",
            "stored"
        );
        let when = |t: Option<u64>| t.map_or_else(|| "-".to_owned(), |t| format_in_zone(t, tz));
        for c in &self.cards {
            let _ = writeln!(
                out,
                "{:<width$}  {:<27}  {:<27}  {:>10}  {:>10}  {:>10}  {:>10}  {:<10}  {}",
                c.name,
                when(c.first_capture_ns),
                when(c.last_capture_ns),
                c.records,
                c.first_seq
                    .map_or_else(|| "-".to_owned(), |s| s.to_string()),
                c.publishers,
                format_size_approx(c.bytes_on_disk),
                match (c.open, c.compressed) {
                    (true, _) => "open",
                    (false, true) => "compressed",
                    (false, false) => "plain",
                },
                c.verified.as_ref().map_or("-", |v| v.verdict.as_str())
            );
        }
        let _ = writeln!(
            out,
            "total         {} records, {} on disk",
            self.cards.iter().map(|c| c.records).sum::<u64>(),
            format_size_approx(self.cards.iter().map(|c| c.bytes_on_disk).sum())
        );
        for b in &self.breaks {
            let _ = writeln!(out, "{}", b.line());
        }
        out
    }
}

/// A journal that cannot be walked at all: its header (every segment's) is damaged, or it is cut short.
fn is_unreadable(e: &JournalError) -> bool {
    matches!(
        e,
        JournalError::CorruptHeader { .. } | JournalError::Truncated { .. }
    )
}

/// One journal of a history, walked.
#[derive(Debug, Clone)]
pub struct JournalCheck {
    /// Its card.
    pub card: JournalCard,
    /// Its walk (`None`: it could not be walked; `error` says why).
    pub summary: Option<JournalSummary>,
    /// Why it could not be walked.
    pub error: Option<String>,
    /// Its verdict, when checksums were checked.
    pub verdict: Option<JournalVerdict>,
    /// Its accounting.
    pub accounting: Option<JournalAccounting>,
}

/// A history walked journal by journal (`journal info DIR`, `journal verify DIR`).
#[derive(Debug, Clone)]
pub struct HistoryCheck {
    /// The history.
    pub path: PathBuf,
    /// How it rolls.
    pub roll: String,
    /// Its journals, oldest first.
    pub journals: Vec<JournalCheck>,
    /// Holes in the journal sequence between them.
    pub breaks: Vec<ChainBreak>,
    /// The whole history's walk: records, sequences and times from first to last journal, damage of all.
    pub summary: Option<JournalSummary>,
    /// The whole history's accounting: the journals' ledgers and scans summed.
    pub accounting: JournalAccounting,
    /// Checksums were checked.
    pub checksums: bool,
}

impl HistoryCheck {
    /// Walks every journal of the history at `dir` (verifying checksums with `checksums`).
    pub fn of(dir: &Path, checksums: bool) -> Result<HistoryCheck, RecorderError> {
        let history = HistoryDir::open(dir)?;
        let mut journals = Vec::new();
        let mut total: Option<JournalSummary> = None;
        let mut ledger: Option<Ledger> = None;
        let mut ledger_error = None;
        let mut scan = RecordScan::default();
        let mut overwritten = crate::journal_ext::OverwriteStats::default();
        for j in history.journals()? {
            let card = JournalCard::of(&j.path).map_err(|source| RecorderError::Open {
                path: j.path.clone(),
                source,
            })?;
            let (summary, error) = match summarize(&j.path, checksums) {
                Ok(s) => (Some(s), None),
                Err(e) if is_unreadable(&e) => (None, Some(e.to_string())),
                Err(source) => {
                    return Err(RecorderError::Open {
                        path: j.path,
                        source,
                    })
                }
            };
            let accounting = summary.as_ref().map(|_| JournalAccounting::of(&j.path));
            let verdict = match (&summary, &accounting) {
                _ if !checksums => None,
                (Some(s), Some(a)) => Some(a.verdict(s)),
                _ => Some(JournalVerdict::Corrupt),
            };
            let mut card = card;
            if let Some(v) = verdict {
                card.set_verified(v.as_str(), &j.path);
            }
            if let (Some(s), Some(a)) = (&summary, &accounting) {
                total = Some(match total.take() {
                    None => s.clone(),
                    Some(t) => add_summary(t, s),
                });
                match (&mut ledger, &a.ledger) {
                    (Some(l), Some(next)) => l.add(next),
                    (None, Some(next)) => ledger = Some(next.clone()),
                    (_, None) => {}
                }
                if ledger_error.is_none() {
                    ledger_error.clone_from(&a.ledger_error);
                }
                scan.add(&a.scan);
                overwritten.records += a.overwritten.records;
                overwritten.bytes += a.overwritten.bytes;
                overwritten.laps += a.overwritten.laps;
            }
            journals.push(JournalCheck {
                card,
                summary,
                error,
                verdict,
                accounting,
            });
        }
        let cards: Vec<JournalCard> = journals.iter().map(|j| j.card.clone()).collect();
        Ok(HistoryCheck {
            path: dir.to_path_buf(),
            roll: history.roll().to_string(),
            breaks: breaks_of(&cards),
            journals,
            summary: total,
            accounting: JournalAccounting {
                ledger,
                ledger_error,
                overwritten,
                scan,
            },
            checksums,
        })
    }

    /// The worst of the journals' verdicts; a break in the chain makes it at least GAPPY.
    pub fn verdict(&self) -> JournalVerdict {
        let worst = self
            .journals
            .iter()
            .map(|j| j.verdict.unwrap_or(JournalVerdict::Ok))
            .fold(JournalVerdict::Ok, worse);
        if self.breaks.is_empty() {
            worst
        } else {
            worse(worst, JournalVerdict::Gappy)
        }
    }

    /// Whether any journal's structure is damaged (a corrupt record, a damaged or cut header).
    pub fn damaged(&self) -> bool {
        self.journals.iter().any(|j| {
            j.error.is_some()
                || match (&j.summary, &j.accounting) {
                    (Some(s), Some(a)) => a.damaged(s),
                    (Some(s), None) => s.corruption.is_some(),
                    _ => false,
                }
        })
    }

    /// `journal info DIR` for people: the roll, a line per journal, the whole history's summary and accounting,
    /// the `handovers` lines given (the leadership log, which this crate does not read), then BROKEN when a
    /// journal is damaged.
    pub fn info_text(&self, handovers: &[String]) -> String {
        let mut out = format!(
            "history       roll {}, {} journal(s)\n{}",
            self.roll,
            self.journals.len(),
            self.journal_lines()
        );
        if let Some(s) = &self.summary {
            let summary = crate::inspect::format_summary(&self.path, s);
            let _ = write!(out, "{summary}{}", self.accounting);
        }
        for line in handovers {
            let _ = writeln!(out, "{line}");
        }
        if self.damaged() {
            out.push_str(
                "structure     BROKEN: a journal above is damaged (journal verify --journal DIR lists the damage)\n",
            );
        }
        out
    }

    /// `journal verify DIR` for people: the roll, a line per journal, the whole history's summary, accounting and
    /// repairs, then the verdict (GAPPY naming a missing journal when the chain breaks).
    pub fn verify_text(&self) -> String {
        let mut out = format!(
            "history       roll {}, {} journal(s)\n{}",
            self.roll,
            self.journals.len(),
            self.journal_lines()
        );
        let Some(s) = &self.summary else {
            out.push_str("verify        CORRUPT: no journal of the history could be read\n");
            return out;
        };
        let (path, verdict) = (self.path.as_path(), self.verdict());
        let _ = write!(
            out,
            "{}{}{}",
            crate::inspect::format_summary(path, s),
            self.accounting,
            crate::inspect::format_metadata_repairs(s)
        );
        let line = match (verdict, self.breaks.is_empty()) {
            (JournalVerdict::Gappy, false) => format!(
                "verify        GAPPY: the journals are intact, but the history lacks the journal sequences above (a \
                 journal is missing){}",
                if self.accounting.gappy() {
                    ", and publisher sequences its gap records name"
                } else {
                    ""
                }
            ),
            _ => crate::inspect::format_verdict(s, &self.accounting, verdict).replacen(
                " records,",
                &format!(" records in {} journals,", self.journals.len()),
                1,
            ),
        };
        let _ = writeln!(out, "{line}");
        out
    }

    /// One line per journal: period, sequences, records, state.
    pub fn journal_lines(&self) -> String {
        let mut out = String::new();
        for j in &self.journals {
            let state = match (&j.error, &j.summary, j.verdict) {
                (Some(e), _, _) => format!("UNREADABLE: {e}"),
                (None, _, Some(v)) => v.as_str().to_uppercase(),
                (None, Some(s), None) => match &s.corruption {
                    Some(c) => format!(
                        "BROKEN at offset {} of {}: {}",
                        c.offset,
                        c.path.display(),
                        c.reason
                    ),
                    None => "intact structure".to_owned(),
                },
                (None, None, None) => "-".to_owned(),
            };
            let _ = writeln!(
                out,
                "journal       {}  seqs {}  {} records  {}",
                j.card.name,
                match (j.card.first_seq, j.card.last_seq) {
                    (Some(a), Some(b)) => format!("{a} ..= {b}"),
                    _ => "(empty)".to_owned(),
                },
                j.card.records,
                state
            );
        }
        for b in &self.breaks {
            let _ = writeln!(out, "{}", b.line());
        }
        out
    }

    /// The history's part of the JSON object (`history`, `roll`, `journals`, `chain_breaks`), added to the
    /// whole history's summary and accounting object.
    pub fn add_to_json(&self, v: &mut Value) {
        v["history"] = self.path.display().to_string().into();
        v["roll"] = self.roll.clone().into();
        v["journals"] = self
            .journals
            .iter()
            .map(|j| {
                serde_json::json!({
                    "name": j.card.name,
                    "first_seq": j.card.first_seq,
                    "last_seq": j.card.last_seq,
                    "records": j.card.records,
                    "bytes_on_disk": j.card.bytes_on_disk,
                    "compressed": j.card.compressed,
                    "verdict": j.verdict.map(JournalVerdict::as_str),
                    "error": j.error,
                    "corruption": j.summary.as_ref().and_then(|s| s.corruption.as_ref()).map(|c| c.reason.clone()),
                })
            })
            .collect::<Vec<_>>()
            .into();
        v["chain_breaks"] = self
            .breaks
            .iter()
            .map(ChainBreak::to_json)
            .collect::<Vec<_>>()
            .into();
    }
}

fn worse(a: JournalVerdict, b: JournalVerdict) -> JournalVerdict {
    let rank = |v| match v {
        JournalVerdict::Ok => 0,
        JournalVerdict::Gappy => 1,
        JournalVerdict::Corrupt => 2,
    };
    if rank(b) > rank(a) {
        b
    } else {
        a
    }
}

/// `t` (the walk of the journals so far) followed by `s` (the next journal's walk).
fn add_summary(mut t: JournalSummary, s: &JournalSummary) -> JournalSummary {
    t.segments += s.segments;
    t.records += s.records;
    t.payload_bytes += s.payload_bytes;
    t.first_seq = t.first_seq.or(s.first_seq);
    t.last_seq = s.last_seq.or(t.last_seq);
    t.first_time_ns = t.first_time_ns.or(s.first_time_ns);
    t.last_time_ns = s.last_time_ns.or(t.last_time_ns);
    t.writer_active |= s.writer_active;
    t.unpublished_bytes += s.unpublished_bytes;
    if t.corruption.is_none() {
        t.corruption.clone_from(&s.corruption);
    }
    t.damaged.extend(s.damaged.iter().cloned());
    t.records_after_damage += s.records_after_damage;
    t.metadata_repairs
        .extend(s.metadata_repairs.iter().cloned());
    t.records_beyond_head += s.records_beyond_head;
    t.unpublished_records += s.unpublished_records;
    t.app_meta.clone_from(&s.app_meta);
    t
}
