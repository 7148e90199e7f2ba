//! The read loop every export shares: every intact record of the input in order, from the window's start;
//! damage passed over and noted; records read, their bytes and progress counted; records outside the capture-time
//! window counted as filtered out; reading stops once capture times pass the window's end by
//! [`READ_PAST_TO_NS`] (a history of weeks is not read to its end for an hour's export).

use std::path::Path;

use tickbox_journal::{JournalError, Record};
use tickbox_recorder::HistoryReader;

use crate::error::ExportError;
use crate::options::{Filter, READ_PAST_TO_NS};
use crate::summary::{pass_damage, ExportSummary, Progress};

/// Reads `reader` (opened on `input`) through `filter`'s time window, handing `take` each record inside it with
/// the summary; reports progress every 65,536 records read and once at the end.
pub(crate) fn read_window(
    input: &Path,
    reader: &mut HistoryReader,
    filter: &Filter,
    s: &mut ExportSummary,
    progress: &mut dyn FnMut(Progress),
    mut take: impl FnMut(&Record<'_>, &mut ExportSummary) -> Result<(), ExportError>,
) -> Result<(), ExportError> {
    let journal_err = |e: JournalError| ExportError::Journal {
        path: input.display().to_string(),
        source: e,
    };
    if let Some(from) = filter.from_ns {
        reader.seek_time(from).map_err(journal_err)?;
    }
    let start_seq = reader.position_seq().unwrap_or(reader.header().base_seq);
    let total = reader.end_seq().saturating_sub(start_seq);
    let stop_at = filter.to_ns.map(|t| t.saturating_add(READ_PAST_TO_NS));
    loop {
        let rec = match reader.next() {
            Ok(Some(rec)) => rec,
            Ok(None) => break,
            Err(JournalError::CorruptRecord { .. }) => {
                if pass_damage(reader, s).map_err(journal_err)? {
                    continue;
                }
                break;
            }
            Err(e) => return Err(journal_err(e)),
        };
        s.records_read += 1;
        s.bytes_read += rec.payload.len() as u64;
        if s.records_read.is_multiple_of(65_536) {
            progress(Progress {
                read: s.records_read,
                total,
                rows: s.rows,
            });
        }
        if !filter.in_window(rec.capture_time_ns) {
            s.filtered_out += 1;
            if stop_at.is_some_and(|t| rec.capture_time_ns >= t) {
                break;
            }
            continue;
        }
        take(&rec, s)?;
    }
    progress(Progress {
        read: s.records_read,
        total,
        rows: s.rows,
    });
    Ok(())
}
