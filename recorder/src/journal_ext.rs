//! The few journal features the recorder builds on beyond plain appends: the ring's overwrite accounting and hook,
//! and the application metadata slot the ledger is persisted in. Gathered here so the rest of the crate (and the
//! CLI) reads them through one narrow seam.
//!
//! STUB until the journal crate exposes `Writer::overwritten`, `set_on_overwrite`, `set_app_meta` and an app-meta
//! read path.

use std::path::Path;

use tickbox_journal::{JournalError, Writer};

/// What ring laps have overwritten so far (all zero for an archive).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct OverwriteStats {
    pub records: u64,
    pub bytes: u64,
    pub laps: u64,
}

/// Most bytes of application metadata a journal stores.
pub const APP_META_MAX: usize = 2048;

pub fn overwritten(_writer: &Writer) -> OverwriteStats {
    OverwriteStats::default()
}

pub fn set_app_meta(_writer: &mut Writer, _meta: &[u8]) -> Result<(), JournalError> {
    Ok(())
}

pub fn on_overwrite(_writer: &mut Writer, _f: impl FnMut(&[u8]) + Send + 'static) {}

pub fn read_app_meta(_path: &Path) -> Result<Vec<u8>, JournalError> {
    Ok(Vec::new())
}

/// What ring laps have overwritten in the journal at `path`. Until the journal counts it itself: a ring's
/// sequences start at 1 and never skip, so everything before its oldest record was overwritten (bytes and laps
/// are not known this way and stay 0).
pub fn overwritten_at(path: &Path) -> Result<OverwriteStats, JournalError> {
    let mut r = tickbox_journal::Reader::open(path)?;
    Ok(OverwriteStats {
        records: records_before_oldest(&mut r)?,
        ..OverwriteStats::default()
    })
}

/// For a ring: how many records precede the oldest one still held (0 for an archive or an empty ring).
pub fn records_before_oldest(r: &mut tickbox_journal::Reader) -> Result<u64, JournalError> {
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
