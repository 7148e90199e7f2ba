//! The few journal features the recorder builds on beyond plain appends: the ring's overwrite accounting and hook,
//! and the application metadata slot the ledger is persisted in. Gathered here so the rest of the crate (and the
//! CLI) reads them through one narrow seam.

use std::path::Path;

use tickbox_journal::{JournalError, Writer};

pub(crate) use tickbox_journal::{OverwriteSink, OverwrittenRecord};
pub use tickbox_journal::{OverwriteStats, APP_META_MAX};

/// What ring laps have overwritten so far (all zero for an archive).
pub fn overwritten(writer: &Writer) -> OverwriteStats {
    writer.overwritten()
}

/// Stores `meta` (at most [`APP_META_MAX`] bytes) in the journal header, crash-safe.
pub(crate) fn set_app_meta(writer: &mut Writer, meta: &[u8]) -> Result<(), JournalError> {
    writer.set_app_meta(meta)
}

/// Shows `sink` every record just before a ring lap overwrites it.
pub(crate) fn on_overwrite(writer: &mut Writer, sink: impl OverwriteSink) {
    writer.set_on_overwrite(sink);
}

/// The sink given to [`on_overwrite`], if it is a `T`: the recorder drains what it counted after each commit.
pub(crate) fn overwrite_sink<T: OverwriteSink>(writer: &mut Writer) -> Option<&mut T> {
    writer.overwrite_sink_mut::<T>()
}

/// The application metadata stored in the journal at `path` (empty when none was stored).
pub fn read_app_meta(path: &Path) -> Result<Vec<u8>, JournalError> {
    Ok(tickbox_journal::read_app_meta(path)?.unwrap_or_default())
}

/// What ring laps have overwritten in the journal at `path`, as its header counts it. A ring written before the
/// journal counted laps has zero there: then everything before its oldest record was overwritten (a ring's
/// sequences start at 1 and never skip), and bytes and laps are not known.
pub fn overwritten_at(path: &Path) -> Result<OverwriteStats, JournalError> {
    let counted = tickbox_journal::summarize(path, false)?.overwritten;
    if counted != OverwriteStats::default() {
        return Ok(counted);
    }
    let mut r = tickbox_journal::Reader::open(path)?;
    Ok(OverwriteStats {
        records: records_before_oldest(&mut r)?,
        ..OverwriteStats::default()
    })
}

/// For a ring: how many records precede the oldest one still held (0 for an archive or an empty ring).
pub(crate) fn records_before_oldest(r: &mut tickbox_journal::Reader) -> Result<u64, JournalError> {
    if r.header().mode != tickbox_journal::Mode::Ring {
        return Ok(0);
    }
    r.seek_oldest();
    loop {
        match r.next() {
            Ok(Some(rec)) => return Ok(rec.seq.saturating_sub(1)),
            Ok(None) => return Ok(r.end_seq().saturating_sub(1)),
            Err(JournalError::Lapped { .. }) => continue,
            Err(e) => return Err(e),
        }
    }
}
