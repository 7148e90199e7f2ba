//! Read leases on the journals of a history, so retention never deletes a journal someone is reading.
//!
//! The convention (any program reading a history follows it): beside journal `NAME` of a history lives the lease
//! file `NAME.readers`. A reader holds a shared `flock` on it for as long as it reads the journal (the replay,
//! `--local`, the history service, verify, export: everything in this crate that reads a history takes one); the
//! kernel drops the lock when the reader closes it or dies. Retention (`journal prune`, `record --retain`) takes
//! the exclusive lock without waiting before it deletes a journal, and keeps it while deleting: a journal whose
//! lease it cannot take is being read, and stays. A reader that finds the lease held exclusively (retention is
//! deleting that journal) treats the journal as gone.
//!
//! A journal still being written is protected apart from leases: its writer holds the archive's `writer.lock`,
//! which retention also tries (and releases) before deleting.

use std::fs::{File, OpenOptions};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

/// Suffix of a journal's lease file.
pub const LEASE_SUFFIX: &str = ".readers";

/// The lease file of the journal at `journal`.
pub fn lease_path(journal: &Path) -> PathBuf {
    let mut name = journal.file_name().unwrap_or_default().to_os_string();
    name.push(LEASE_SUFFIX);
    journal.with_file_name(name)
}

/// A held lease (shared: a reader; exclusive: retention deleting). Dropping it releases the lock.
#[derive(Debug)]
pub struct Lease {
    _file: File,
}

/// Takes `lock` (`LOCK_SH` or `LOCK_EX`) on `file` without waiting: `Ok(false)` when someone else holds a
/// conflicting lock.
// `flock` through libc: std's file locks need a newer Rust than the workspace's minimum.
#[allow(unsafe_code)]
fn try_flock(file: &File, lock: libc::c_int) -> std::io::Result<bool> {
    // SAFETY: flock takes no pointers; the descriptor stays open for the call because `file` owns it.
    let rc = unsafe { libc::flock(file.as_raw_fd(), lock | libc::LOCK_NB) };
    if rc == 0 {
        return Ok(true);
    }
    let err = std::io::Error::last_os_error();
    if err.raw_os_error() == Some(libc::EWOULDBLOCK) {
        return Ok(false);
    }
    Err(err)
}

fn open_lock_file(path: &Path) -> std::io::Result<File> {
    OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)
}

impl Lease {
    /// A reader's lease on `journal`: `Ok(None)` when retention is deleting it (the journal is gone).
    pub fn read(journal: &Path) -> std::io::Result<Option<Lease>> {
        let file = open_lock_file(&lease_path(journal))?;
        Ok(try_flock(&file, libc::LOCK_SH)?.then_some(Lease { _file: file }))
    }

    /// Retention's lease on `journal`: `Ok(None)` when a reader holds it.
    pub fn delete(journal: &Path) -> std::io::Result<Option<Lease>> {
        let file = open_lock_file(&lease_path(journal))?;
        Ok(try_flock(&file, libc::LOCK_EX)?.then_some(Lease { _file: file }))
    }
}

/// Whether a writer has the archive journal at `journal` open (its `writer.lock` is held). A ring file or a
/// compressed journal has no such lock and is never being written by a history's recorder once closed.
pub fn writer_holds(journal: &Path) -> bool {
    let lock = journal.join("writer.lock");
    if !lock.is_file() {
        return false;
    }
    match OpenOptions::new().read(true).write(true).open(&lock) {
        // Taken means nobody writes; the lock goes again when `file` drops at the end of this call.
        Ok(file) => !try_flock(&file, libc::LOCK_EX).unwrap_or(false),
        Err(_) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reader_keeps_retention_out_and_retention_keeps_readers_out() {
        let dir = tempfile::tempdir().unwrap();
        let journal = dir.path().join("2026-11-24");
        std::fs::create_dir(&journal).unwrap();
        assert_eq!(lease_path(&journal), dir.path().join("2026-11-24.readers"));
        let reader = Lease::read(&journal).unwrap().expect("nobody deletes");
        let other_reader = Lease::read(&journal).unwrap();
        assert!(other_reader.is_some(), "readers share");
        assert!(Lease::delete(&journal).unwrap().is_none(), "read: kept");
        drop((reader, other_reader));
        let deleting = Lease::delete(&journal).unwrap().expect("unread: may go");
        assert!(
            Lease::read(&journal).unwrap().is_none(),
            "being deleted: gone"
        );
        drop(deleting);
    }

    #[test]
    fn an_open_writer_is_seen_through_its_lock() {
        let dir = tempfile::tempdir().unwrap();
        let journal = dir.path().join("j");
        let w = tickbox_journal::Writer::open(
            &journal,
            &tickbox_journal::WriterOptions::archive(1 << 20),
        )
        .unwrap();
        assert!(writer_holds(&journal));
        w.close().unwrap();
        assert!(!writer_holds(&journal));
    }
}
