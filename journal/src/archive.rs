//! Archive layout: a directory of numbered segment files plus a lock file for the single writer.

use std::fs::{File, OpenOptions};
use std::path::{Path, PathBuf};

use crate::error::{JournalError, Result};
use crate::names::{COMPRESSING_EXT, CREATING_EXT, SEGMENT_EXT};

const LOCK_FILE: &str = "writer.lock";

/// Path of segment `index` in `dir`: zero-padded so names sort in order.
pub fn segment_path(dir: &Path, index: u64) -> PathBuf {
    dir.join(format!("{index:010}.{SEGMENT_EXT}"))
}

/// Segments of an archive in index order. Files that are not segments (the lock, temporaries) are ignored.
pub fn list_segments(dir: &Path) -> Result<Vec<(u64, PathBuf)>> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(|e| JournalError::io(dir, e))? {
        let entry = entry.map_err(|e| JournalError::io(dir, e))?;
        let path = entry.path();
        if path.extension().and_then(|e| e.to_str()) != Some(SEGMENT_EXT) {
            continue;
        }
        let Some(index) = path
            .file_stem()
            .and_then(|s| s.to_str())
            .and_then(|s| s.parse::<u64>().ok())
        else {
            continue;
        };
        out.push((index, path));
    }
    out.sort();
    Ok(out)
}

/// Removes the half-made files a killed writer (or compression) left in `dir` under a temporary name; returns how
/// many. Only whoever holds the archive's lock calls this: nobody else makes files there meanwhile.
pub(crate) fn remove_temporaries(dir: &Path) -> Result<u64> {
    let mut removed = 0;
    for entry in std::fs::read_dir(dir).map_err(|e| JournalError::io(dir, e))? {
        let path = entry.map_err(|e| JournalError::io(dir, e))?.path();
        let ext = path.extension().and_then(|e| e.to_str());
        if ext == Some(CREATING_EXT) || ext == Some(COMPRESSING_EXT) {
            std::fs::remove_file(&path).map_err(|e| JournalError::io(&path, e))?;
            tracing::info!(path = %path.display(), "removed a half-made file a killed writer left");
            removed += 1;
        }
    }
    Ok(removed)
}

/// Opens (creating if needed) the archive's lock file and takes its exclusive `flock` without waiting; the kernel
/// drops the lock when the returned file is closed or the process dies. [`JournalError::Locked`] if held.
// `flock` through libc: std has no file locking on this Rust version.
#[allow(unsafe_code)]
pub(crate) fn lock_dir(dir: &Path) -> Result<File> {
    let path = dir.join(LOCK_FILE);
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&path)
        .map_err(|e| JournalError::io(&path, e))?;
    // SAFETY: flock takes no pointers; the fd is open for the duration of the call because `file` owns it.
    let rc = unsafe {
        libc::flock(
            std::os::fd::AsRawFd::as_raw_fd(&file),
            libc::LOCK_EX | libc::LOCK_NB,
        )
    };
    if rc != 0 {
        let err = std::io::Error::last_os_error();
        if err.raw_os_error() == Some(libc::EWOULDBLOCK) {
            return Err(JournalError::Locked { path: dir.into() });
        }
        return Err(JournalError::io(&path, err));
    }
    Ok(file)
}
