//! Removing a journal a failed run created and never wrote to: start-up debris, not data. Either layout: a ring
//! file or an archive directory.

use std::path::Path;

/// Removes the journal at `path` (a ring file, or an archive directory and its segments).
pub fn remove_journal(path: &Path) -> std::io::Result<()> {
    if path.is_dir() {
        std::fs::remove_dir_all(path)
    } else {
        std::fs::remove_file(path)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn either_layout_is_removed_whole() {
        let dir = tempfile::tempdir().unwrap();
        let ring = dir.path().join("ring.tbj");
        std::fs::write(&ring, b"x").unwrap();
        remove_journal(&ring).unwrap();
        assert!(!ring.exists());
        let archive = dir.path().join("day");
        std::fs::create_dir(&archive).unwrap();
        std::fs::write(archive.join("00000000.seg"), b"x").unwrap();
        remove_journal(&archive).unwrap();
        assert!(!archive.exists());
        assert!(remove_journal(&archive).is_err());
    }
}
