//! Compressed journals: a closed ring or archive segment stored as seekable zstd frames. This part: telling one
//! from a plain journal file, so a writer never appends to one.

use std::path::Path;

use crate::error::{JournalError, Result};

/// Extension of the temporary name a compressed file is written under before it replaces the plain one.
pub(crate) const TEMP_EXT: &str = "compressing";

/// zstd skippable-frame magic of a compressed journal's header frame (the first bytes of the file).
pub(crate) const HEADER_FRAME: u32 = 0x184D_2A5B;

/// First 8 bytes of a compressed journal's header, after the skippable frame's magic and size.
pub const PACKED_MAGIC: [u8; 8] = *b"TBXJPAK\0";

/// Whether `bytes` (a file's first 16 bytes) start a compressed journal.
pub(crate) fn sniff(bytes: &[u8]) -> bool {
    bytes.len() >= 16 && bytes[..4] == HEADER_FRAME.to_le_bytes() && bytes[8..16] == PACKED_MAGIC
}

/// Whether the file at `path` is a compressed journal (a file too short to be one is not).
pub(crate) fn is_packed(path: &Path) -> Result<bool> {
    use std::io::Read;
    let mut file = std::fs::File::open(path).map_err(|e| JournalError::io(path, e))?;
    let mut head = [0u8; 16];
    let mut got = 0;
    while got < head.len() {
        match file.read(&mut head[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(JournalError::io(path, e)),
        }
    }
    Ok(sniff(&head[..got]))
}

/// [`JournalError::Compressed`] if the file at `path` is a compressed journal: a writer cannot append to one.
pub(crate) fn refuse_compressed(path: &Path) -> Result<()> {
    if is_packed(path)? {
        return Err(JournalError::Compressed { path: path.into() });
    }
    Ok(())
}
