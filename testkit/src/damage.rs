//! Damage done to files on purpose: the integrity tests flip bits and bytes where a disk or a crash would.

use std::os::unix::fs::FileExt;
use std::path::Path;

fn open(path: &Path) -> std::fs::File {
    std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Flips bit `bit` (0 = least significant) of the little-endian 64-bit word at `offset`.
pub fn flip_bit(path: &Path, offset: u64, bit: u32) {
    let f = open(path);
    let mut b = [0u8; 8];
    f.read_exact_at(&mut b, offset).unwrap();
    let v = u64::from_le_bytes(b) ^ (1u64 << bit);
    f.write_all_at(&v.to_le_bytes(), offset).unwrap();
}

/// Inverts every bit of the byte at `offset`.
pub fn invert_byte(path: &Path, offset: u64) {
    let f = open(path);
    let mut b = [0u8; 1];
    f.read_exact_at(&mut b, offset).unwrap();
    f.write_all_at(&[!b[0]], offset).unwrap();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_damage_changes_exactly_what_it_says() {
        let dir = crate::TempDir::new("kit-damage");
        let path = dir.join("f");
        std::fs::write(&path, [0u8; 16]).unwrap();
        flip_bit(&path, 8, 9);
        invert_byte(&path, 0);
        let mut want = [0u8; 16];
        want[0] = 0xff;
        want[9] = 0x02;
        assert_eq!(std::fs::read(&path).unwrap(), want);
    }
}
