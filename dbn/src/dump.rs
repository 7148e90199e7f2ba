//! `tickbox journal dump`: a journal's (or a history's) records, one line or one JSON object each, from a
//! sequence or a time, as a [`DumpFilter`] selects them, up to a limit; a damaged record ends the dump and is
//! named at its end.

use std::io::Write;
use std::path::{Path, PathBuf};

use serde_json::Value;
use tickbox_journal::JournalError;
use tickbox_recorder::{dump_header, HistoryReader};

use crate::{DumpFilter, Manifest};

/// Where a dump starts, how much it prints and how.
#[derive(Debug, Clone, Default)]
pub struct DumpRequest {
    /// Start at this journal sequence (wins over `from_ns`).
    pub from_seq: Option<u64>,
    /// Start at the first record captured at or after this (ns since the epoch).
    pub from_ns: Option<u64>,
    /// At most this many records printed; 0: no limit.
    pub limit: u64,
    /// Which records, and with their decoded fields or not.
    pub filter: DumpFilter,
    /// One JSON object per record and a summary object at the end, instead of the header and lines.
    pub json: bool,
}

/// What a dump printed.
#[derive(Debug)]
pub struct Dumped {
    /// Records printed.
    pub records: u64,
    /// The damage that ended the dump early, if any.
    pub corrupt: Option<JournalError>,
}

/// Why a dump failed (damage that ends it is not a failure: see [`Dumped::corrupt`]).
#[derive(Debug, thiserror::Error)]
pub enum DumpError {
    /// The journal could not be opened.
    #[error("opening {}", path.display())]
    Open {
        /// The journal or history.
        path: PathBuf,
        /// Why.
        #[source]
        source: JournalError,
    },
    /// The journal could not be read.
    #[error(transparent)]
    Journal(#[from] JournalError),
    /// The output could not be written.
    #[error(transparent)]
    Write(#[from] std::io::Error),
}

/// Dumps `path` as `request` asks into `out`: each JSON object passes through `stamp` (which adds what every JSON
/// output carries); `stop` is asked before each record (the reader of the output went away).
pub fn dump(
    path: &Path,
    request: &DumpRequest,
    out: &mut dyn Write,
    stamp: &dyn Fn(Value) -> Value,
    stop: &dyn Fn() -> bool,
) -> Result<Dumped, DumpError> {
    let mut filter = request.filter.clone();
    let open = |source| DumpError::Open {
        path: path.to_path_buf(),
        source,
    };
    let mut r = HistoryReader::open(path).map_err(open)?;
    if let Some(seq) = request.from_seq {
        r.seek_seq(seq)?;
    } else if let Some(t) = request.from_ns {
        r.seek_time(t)?;
        filter.from_ns = Some(t);
    }
    let manifest = Manifest::read(path).unwrap_or(None);
    if !request.json {
        writeln!(out, "{}", dump_header())?;
    }
    let limit = request.limit;
    let mut n = 0;
    let mut corrupt = None;
    while (limit == 0 || n < limit) && !stop() {
        let rec = match r.next() {
            Ok(Some(rec)) => rec,
            Ok(None) => break,
            Err(e @ JournalError::CorruptRecord { .. }) => {
                corrupt = Some(e);
                break;
            }
            Err(e) => return Err(e.into()),
        };
        if request.json {
            let Some(row) = filter.json(&rec, manifest.as_ref()) else {
                continue;
            };
            writeln!(out, "{}", stamp(row))?;
        } else {
            let Some(line) = filter.line(&rec, manifest.as_ref()) else {
                continue;
            };
            writeln!(out, "{line}")?;
        }
        n += 1;
    }
    if request.json {
        let summary = serde_json::json!({
            "summary": {
                "records": n,
                "corrupt": corrupt.as_ref().map(|e| e.to_string()),
            }
        });
        writeln!(out, "{}", stamp(summary))?;
    } else if let Some(e) = &corrupt {
        writeln!(out, "CORRUPT: {e}")?;
    }
    out.flush()?;
    Ok(Dumped {
        records: n,
        corrupt,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use tickbox_journal::{Writer, WriterOptions};
    use tickbox_wire::{encode_to_vec, Header, Kind, Quote};

    /// 2026-11-24T00:00:00Z.
    const T0: u64 = 1_795_478_400_000_000_000;

    /// A journal of `n` quotes on `Q.XNAS.AAPL` and `n` on `Q.XNAS.MSFT`, interleaved, 1 ms apart.
    fn journal(path: &Path, n: u64) {
        let mut w = Writer::open(path, &WriterOptions::archive(1 << 20)).unwrap();
        for i in 0..2 * n {
            let topic = if i % 2 == 0 {
                "Q.XNAS.AAPL"
            } else {
                "Q.XNAS.MSFT"
            };
            let at = T0 + i * 1_000_000;
            let frame = encode_to_vec(
                topic,
                &Header::live(Kind::Quote, 7, i + 1, at),
                &Quote::default().into(),
            )
            .unwrap();
            w.append(at, &frame).unwrap();
        }
        w.close().unwrap();
    }

    fn run(path: &Path, request: &DumpRequest) -> (Dumped, Vec<String>) {
        let mut out = Vec::new();
        let dumped = dump(path, request, &mut out, &|v| v, &|| false).unwrap();
        let text = String::from_utf8(out).unwrap();
        (dumped, text.lines().map(str::to_owned).collect())
    }

    #[test]
    fn a_dump_prints_the_selected_records_up_to_its_limit() {
        let dir = tickbox_testkit::TempDir::new("dbn-dump");
        let path = dir.path().join("j.tbj");
        journal(&path, 5);
        let request = DumpRequest {
            limit: 3,
            filter: DumpFilter {
                topics: vec!["Q.XNAS.MSFT".into()],
                ..DumpFilter::default()
            },
            ..DumpRequest::default()
        };
        let (dumped, lines) = run(&path, &request);
        assert_eq!(dumped.records, 3);
        assert!(dumped.corrupt.is_none());
        assert_eq!(lines[0], dump_header());
        assert_eq!(lines.len(), 4, "{lines:?}");
        assert!(
            lines[1..].iter().all(|l| l.contains("Q.XNAS.MSFT")),
            "{lines:?}"
        );
    }

    #[test]
    fn a_json_dump_ends_with_its_summary_and_a_stop_ends_it_early() {
        let dir = tickbox_testkit::TempDir::new("dbn-dump-json");
        let path = dir.path().join("j.tbj");
        journal(&path, 2);
        let request = DumpRequest {
            from_seq: Some(2),
            json: true,
            ..DumpRequest::default()
        };
        let (dumped, lines) = run(&path, &request);
        assert_eq!(dumped.records, 3, "records 2 to 4");
        let first: Value = serde_json::from_str(&lines[0]).unwrap();
        assert_eq!(first["journal_seq"], 2);
        let last: Value = serde_json::from_str(lines.last().unwrap()).unwrap();
        assert_eq!(last["summary"]["records"], 3);
        assert_eq!(last["summary"]["corrupt"], Value::Null);
        let mut out = Vec::new();
        let stopped = dump(&path, &request, &mut out, &|v| v, &|| true).unwrap();
        assert_eq!(stopped.records, 0, "stopped before the first record");
    }
}
