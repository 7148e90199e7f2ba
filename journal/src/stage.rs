//! An archive writer's staging buffer: its records are stored here and reach the segment's file with one `write`
//! at each commit, where a ring's go straight into its mapping.
//!
//! An archive segment grows with its records, so the pages a record lands in are fresh: stored through the
//! mapping, each one cost the recording thread a page fault and the file system's block bookkeeping, or cost a
//! preparer thread zeros and `MADV_POPULATE_WRITE` ahead of it (on 2 cores, as much CPU as the recording thread's
//! own work). A `write` of a commit's records takes whole large folios into the page cache in one call, and the
//! mapping readers use sees them there.

use std::sync::atomic::AtomicU64;

/// Words an archive writer stages (512 KiB): a commit larger than this is written out as it fills, a record larger
/// than this goes through the mapping.
pub(crate) const STAGE_WORDS: usize = 64 << 10;

/// Records stored but not yet written to their segment's file: `len` words for data offsets `at..at + 8 * len`.
pub(crate) struct Stage {
    /// Atomics only because the record code ([`crate::crc::BodyStore`]) stores into mapped words, which must be;
    /// nothing but the writer's thread ever sees these.
    words: Box<[AtomicU64]>,
    len: usize,
    at: u64,
}

impl Stage {
    /// A stage of `words` words; zero for a writer that writes through its mapping (a ring).
    pub(crate) fn new(words: usize) -> Stage {
        Stage {
            words: (0..words).map(|_| AtomicU64::new(0)).collect(),
            len: 0,
            at: 0,
        }
    }

    /// Whether a frame of `n` words at data offset `off` goes in behind what is staged.
    #[inline]
    pub(crate) fn fits(&self, off: u64, n: usize) -> bool {
        self.len + n <= self.words.len() && (self.len == 0 || self.end() == off)
    }

    /// Whether a frame of `n` words can be staged at all (once what is staged is written out).
    pub(crate) fn holds(&self, n: usize) -> bool {
        n <= self.words.len()
    }

    /// The words of a frame of `n` words at data offset `off`, which [`Stage::fits`].
    #[inline]
    pub(crate) fn take(&mut self, off: u64, n: usize) -> &[AtomicU64] {
        debug_assert!(self.fits(off, n));
        if self.len == 0 {
            self.at = off;
        }
        let words = &self.words[self.len..self.len + n];
        self.len += n;
        words
    }

    /// Data offset just past what is staged.
    pub(crate) fn end(&self) -> u64 {
        self.at + 8 * self.len as u64
    }

    /// What is staged, as bytes for the file, and the data offset they go to; `None` when nothing is.
    // A byte view of the staged words.
    #[allow(unsafe_code)]
    pub(crate) fn staged(&self) -> Option<(u64, &[u8])> {
        if self.len == 0 {
            return None;
        }
        // SAFETY: `AtomicU64` has the size, alignment and bit validity of `u64`, so `len` of them are `8 * len`
        // initialised bytes. Reading them non-atomically races with nothing: the stage is owned by its writer and
        // never shared with another thread, and every store into it goes through `take`, which needs `&mut self`,
        // so none can happen while the returned borrow of `self` lives.
        let bytes =
            unsafe { std::slice::from_raw_parts(self.words.as_ptr().cast::<u8>(), 8 * self.len) };
        Some((self.at, bytes))
    }

    /// The staged words.
    pub(crate) fn words(&self) -> &[AtomicU64] {
        &self.words[..self.len]
    }

    /// Forgets what is staged (it has been written out).
    pub(crate) fn clear(&mut self) {
        self.len = 0;
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::Ordering;

    use super::*;

    #[test]
    fn frames_stage_only_contiguously_and_within_the_buffer() {
        let mut s = Stage::new(8);
        assert!(s.staged().is_none());
        assert!(s.fits(4096, 3));
        s.take(4096, 3)[2].store(u64::from_le_bytes(*b"abcdefgh").to_le(), Ordering::Relaxed);
        assert!(!s.fits(4096, 1), "not behind what is staged");
        assert!(s.fits(4120, 5) && !s.fits(4120, 6), "past the buffer");
        s.take(4120, 1);
        let (at, bytes) = s.staged().unwrap();
        assert_eq!(
            (at, bytes.len(), &bytes[16..24]),
            (4096, 32, &b"abcdefgh"[..])
        );
        assert_eq!(s.end(), 4128);
        s.clear();
        assert!(s.staged().is_none() && s.fits(0, 8) && !s.holds(9));
    }
}
