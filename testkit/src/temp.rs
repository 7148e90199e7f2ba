//! Private scratch directories.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};

/// A private scratch directory, removed when the test ends however it ends (also on a panic).
///
/// The name carries the test process id and a per-process counter, so tests running in parallel (threads of
/// one binary, or several binaries) never share or delete each other's files; the tag says which test left a
/// directory behind if a test process is killed.
pub struct TempDir(pub PathBuf);

impl TempDir {
    /// Creates an empty `tickbox-{tag}-{pid}-{n}` in the system temp directory, clearing any leftover.
    pub fn new(tag: &str) -> Self {
        static N: AtomicU32 = AtomicU32::new(0);
        let n = N.fetch_add(1, Ordering::Relaxed);
        let p = std::env::temp_dir().join(format!("tickbox-{tag}-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        TempDir(p)
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.0
    }

    /// `name` inside the directory: a journal, a socket, a configuration file.
    pub fn join(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }

    /// An `ipc://` endpoint inside the directory, private to this test.
    pub fn ipc(&self, name: &str) -> String {
        format!("ipc://{}", self.0.join(name).display())
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_dirs_never_share_and_each_is_removed_on_drop() {
        let (a, b) = (TempDir::new("kit"), TempDir::new("kit"));
        assert_ne!(a.path(), b.path());
        std::fs::write(a.join("f"), b"x").unwrap();
        let kept = a.path().to_owned();
        drop(a);
        assert!(!kept.exists());
        assert!(b.ipc("s").starts_with("ipc://"));
    }
}
