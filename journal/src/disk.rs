//! Free space on the file system a journal lives on, for a recorder's check before it starts (see
//! [`crate::WriterOptions::disk_reservation`]).

use std::path::Path;

use crate::error::{JournalError, Result};

/// Bytes an unprivileged writer can still allocate on the file system that holds `path` (`statvfs`: available
/// blocks times the fragment size). `path` need not exist yet (a journal about to be created): its nearest
/// existing ancestor is asked.
pub fn disk_free(path: &Path) -> Result<u64> {
    let mut at = path;
    while !at.exists() {
        match at.parent() {
            Some(p) if !p.as_os_str().is_empty() => at = p,
            _ => {
                at = Path::new(".");
                break;
            }
        }
    }
    statvfs_free(at).map_err(|e| JournalError::io(at, e))
}

// statvfs through libc: std has no file-system statistics.
#[allow(unsafe_code)]
fn statvfs_free(path: &Path) -> std::io::Result<u64> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(path.as_os_str().as_bytes())
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
    let mut st = std::mem::MaybeUninit::<libc::statvfs>::uninit();
    // SAFETY: `c` is a NUL-terminated path that outlives the call; statvfs writes one `statvfs` through the
    // pointer, which points at a live local of that type.
    let rc = unsafe { libc::statvfs(c.as_ptr(), st.as_mut_ptr()) };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: statvfs returned 0, so it filled the whole struct.
    let st = unsafe { st.assume_init() };
    // The field types differ between targets (u64 on 64-bit Linux, u32 on some 32-bit ones).
    #[allow(clippy::useless_conversion)]
    Ok(u64::from(st.f_bavail).saturating_mul(u64::from(st.f_frsize)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn free_space_is_asked_of_the_nearest_existing_directory() {
        let dir = tempfile::tempdir().unwrap();
        let here = disk_free(dir.path()).unwrap();
        assert!(here > 0);
        let later = disk_free(&dir.path().join("not/yet/a/journal")).unwrap();
        // Same file system; other processes may allocate meanwhile, so only the order of magnitude is the same.
        assert!(
            later > here / 2 && later < here.saturating_mul(2),
            "{here} vs {later}"
        );
    }
}
