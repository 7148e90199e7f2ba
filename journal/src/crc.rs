//! A record's CRC32C, computed from the record's parts in one chain of 8-byte `crc32` instructions.
//!
//! The checksum covers the record body: sequence and capture time (little-endian), the payload, and the zero
//! padding to the next multiple of 8 (see [`frame_crc`](crate::segment::frame_crc)). The `crc32c` crate computes
//! it well on long buffers, but a 100-byte market-data record cost four calls (each re-dispatching on the CPU and
//! walking unaligned heads and tails a byte at a time) and was half an append. Here the body is fed as whole words
//! built in registers: the two header words, the payload's full words, and its last partial word read as the
//! payload's last 8 bytes shifted down over the padding (one load instead of a byte loop). The value is bit for bit
//! the crate's (tests compare every length), so the on-disk format is unchanged. The writer's path,
//! [`BodyStore::store_body`], stores each word into the map in the same pass.
//!
//! One serial chain is deliberate: splitting the body into three chains folded with carry-less multiplies measured
//! slower on the target machine for bodies this short, and the chains of consecutive records already overlap in
//! the CPU because they are independent. A reader of sealed records does not have that overlap (each record's
//! check sits between decoding the last one and handing it on), so it checks four records' chains side by side
//! ([`Sse42::frame_crcs`]).

use std::sync::atomic::{AtomicU64, Ordering};

/// A record's checksum: `frame_crc(frame_len, body)` where `body` = `seq` and `capture_ns` as little-endian words,
/// `payload`, and zeros to the next multiple of 8, computed with the `crc32c` crate. It is [`Portable`]'s: on a CPU
/// with SSE4.2 the writer's [`Sse42`] store computes the same value in its own pass (short payloads come here).
#[inline]
pub(crate) fn record_crc(frame_len: u32, seq: u64, capture_ns: u64, payload: &[u8]) -> u32 {
    let mut crc = crc32c::crc32c_append(frame_len, &seq.to_le_bytes());
    crc = crc32c::crc32c_append(crc, &capture_ns.to_le_bytes());
    crc = crc32c::crc32c_append(crc, payload);
    crc32c::crc32c_append(
        crc,
        &[0u8; 8][..payload.len().next_multiple_of(8) - payload.len()],
    )
}

/// How the writer stores a record's body and computes its checksum: [`Portable`] anywhere, [`Sse42`] with the
/// CPU's `crc32` instruction. The writer's record path is generic over it, and with [`Sse42`] the `crc32`
/// instructions sit inline in it (see [`Sse42::step`]), so the whole path (room check, stores, checksum) inlines
/// into the caller's loop.
pub(crate) trait BodyStore: Copy {
    /// Stores a record's body (`words[1..]`: sequence, capture time, payload, zero padding) into the map with
    /// relaxed 8-byte atomic stores, and returns its checksum ([`record_crc`]). The caller stores `words[0]`
    /// (length and checksum) last, with release.
    ///
    /// `words.len()` must be `3 + payload.len().div_ceil(8)`, the frame's words, the header's first word
    /// included (the writer sizes the slice from the payload, so it always is): with any other length the stores
    /// stay inside `words` but the body is not the record's.
    fn store_body(
        self,
        words: &[AtomicU64],
        frame_len: u32,
        seq: u64,
        capture_ns: u64,
        payload: &[u8],
    ) -> u32;
}

/// Stores the body word by word, then checksums it with the `crc32c` crate (which picks its own CPU path).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Portable;

impl BodyStore for Portable {
    #[inline]
    fn store_body(
        self,
        words: &[AtomicU64],
        frame_len: u32,
        seq: u64,
        capture_ns: u64,
        payload: &[u8],
    ) -> u32 {
        debug_assert_eq!(words.len(), 3 + payload.len().div_ceil(8));
        words[1].store(seq.to_le(), Ordering::Relaxed);
        words[2].store(capture_ns.to_le(), Ordering::Relaxed);
        let mut chunks = payload.chunks_exact(8);
        for (dst, chunk) in words[3..].iter().zip(&mut chunks) {
            let mut w = [0u8; 8];
            w.copy_from_slice(chunk);
            dst.store(u64::from_le_bytes(w).to_le(), Ordering::Relaxed);
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut w = [0u8; 8];
            w[..rest.len()].copy_from_slice(rest);
            words[words.len() - 1].store(u64::from_le_bytes(w).to_le(), Ordering::Relaxed);
        }
        record_crc(frame_len, seq, capture_ns, payload)
    }
}

/// Proof that this CPU has SSE4.2: only [`Sse42::detect`] makes one, after checking.
#[cfg(target_arch = "x86_64")]
#[derive(Debug, Clone, Copy)]
pub(crate) struct Sse42(());

#[cfg(target_arch = "x86_64")]
impl Sse42 {
    /// `Some` on a CPU with SSE4.2 (checked once per process, then one relaxed load).
    #[inline]
    pub(crate) fn detect() -> Option<Sse42> {
        hw::available().then_some(Sse42(()))
    }

    /// One `crc32` step over a 64-bit word, as inline assembly rather than the intrinsic: the intrinsic inlines
    /// only into functions compiled for SSE4.2, which the caller's loop (`Batch::append` in the recorder) is not,
    /// so every record would pay a call into one. The instruction is the same; the run-time check that allows it
    /// is the token.
    #[inline(always)]
    fn step(self, r: u64, v: u64) -> u64 {
        let mut r = r;
        // SAFETY: `self` exists only if `detect` found SSE4.2 on this CPU, the instruction's one requirement. It
        // reads and writes two registers and nothing else (no memory, no stack, no flags), as the options say.
        unsafe {
            std::arch::asm!("crc32 {r}, {v}", r = inout(reg) r, v = in(reg) v, options(pure, nomem, nostack, preserves_flags))
        };
        r
    }
}

/// How many sealed records [`Sse42::frame_crcs`] checks side by side.
#[cfg(target_arch = "x86_64")]
pub(crate) const LANES: usize = 4;

#[cfg(target_arch = "x86_64")]
impl Sse42 {
    /// The checksums ([`frame_crc`](crate::segment::frame_crc)) of [`LANES`] frames at once, each given as its
    /// length and its body (a whole number of 8-byte words, as a frame's body always is). A reader checking one
    /// record at a time runs one chain of `crc32` instructions, each waiting for the last (three cycles apiece),
    /// while the CPU could start one every cycle: a 100-byte record's chain was a quarter of `replay --local`'s
    /// reading thread. Here the chains of four records advance together over the words they all have, then each
    /// finishes its own.
    // Not inlined: in the reader's loop the four chains' registers spilled to the stack, and a store and reload
    // between two `crc32`s more than doubled each step.
    #[inline(never)]
    pub(crate) fn frame_crcs(self, frames: [(u32, &[u8]); LANES]) -> [u32; LANES] {
        debug_assert!(frames.iter().all(|(_, b)| b.len() % 8 == 0));
        let word = |w: &[u8]| u64::from_le_bytes(w.try_into().unwrap_or([0; 8]));
        let common = frames.iter().map(|(_, b)| b.len()).min().unwrap_or(0) / 8 * 8;
        let [(l0, b0), (l1, b1), (l2, b2), (l3, b3)] = frames;
        let (mut r0, mut r1, mut r2, mut r3) = (
            u64::from(!l0),
            u64::from(!l1),
            u64::from(!l2),
            u64::from(!l3),
        );
        let lanes = b0[..common]
            .chunks_exact(8)
            .zip(b1[..common].chunks_exact(8))
            .zip(b2[..common].chunks_exact(8))
            .zip(b3[..common].chunks_exact(8));
        for (((w0, w1), w2), w3) in lanes {
            r0 = self.step(r0, word(w0));
            r1 = self.step(r1, word(w1));
            r2 = self.step(r2, word(w2));
            r3 = self.step(r3, word(w3));
        }
        let rest = |r: u64, body: &[u8]| {
            body[common..]
                .chunks_exact(8)
                .fold(r, |r, w| self.step(r, word(w)))
        };
        [rest(r0, b0), rest(r1, b1), rest(r2, b2), rest(r3, b3)].map(|r| !(r as u32))
    }
}

#[cfg(target_arch = "x86_64")]
impl BodyStore for Sse42 {
    /// One pass: each payload word is loaded once, stored, and fed to `crc32`. The payload's last partial word is
    /// its last 8 bytes shifted down over the padding (one load instead of a byte loop), so payloads shorter than
    /// 8 bytes go through [`Portable`].
    #[inline(always)]
    fn store_body(
        self,
        words: &[AtomicU64],
        frame_len: u32,
        seq: u64,
        capture_ns: u64,
        payload: &[u8],
    ) -> u32 {
        if payload.len() < 8 {
            return Portable.store_body(words, frame_len, seq, capture_ns, payload);
        }
        debug_assert_eq!(words.len(), 3 + payload.len().div_ceil(8));
        words[1].store(seq.to_le(), Ordering::Relaxed);
        words[2].store(capture_ns.to_le(), Ordering::Relaxed);
        let mut r = self.step(u64::from(!frame_len), seq);
        r = self.step(r, capture_ns);
        let chunks = payload.chunks_exact(8);
        let rest = chunks.remainder().len();
        for (dst, chunk) in words[3..].iter().zip(chunks) {
            // `chunks_exact(8)` yields 8-byte slices, so the conversion cannot fail (and compiles to one load).
            let v = u64::from_le_bytes(chunk.try_into().unwrap_or([0; 8]));
            dst.store(v.to_le(), Ordering::Relaxed);
            r = self.step(r, v);
        }
        if rest != 0 {
            let mut w = [0u8; 8];
            w.copy_from_slice(&payload[payload.len() - 8..]);
            let v = u64::from_le_bytes(w) >> (8 * (8 - rest));
            words[words.len() - 1].store(v.to_le(), Ordering::Relaxed);
            r = self.step(r, v);
        }
        !(r as u32)
    }
}

/// Stores a record's body with the best [`BodyStore`] this CPU has and returns its checksum (tests; the writer
/// picks its store once per record for its whole path).
#[cfg(test)]
pub(crate) fn store_body(
    words: &[AtomicU64],
    frame_len: u32,
    seq: u64,
    capture_ns: u64,
    payload: &[u8],
) -> u32 {
    #[cfg(target_arch = "x86_64")]
    if let Some(hw) = Sse42::detect() {
        return hw.store_body(words, frame_len, seq, capture_ns, payload);
    }
    Portable.store_body(words, frame_len, seq, capture_ns, payload)
}

#[cfg(target_arch = "x86_64")]
mod hw {
    use std::sync::atomic::{AtomicU8, Ordering};

    /// 0 unknown, 1 absent, 2 present: one relaxed load per record instead of the feature-detection macro's
    /// lookup.
    static AVAILABLE: AtomicU8 = AtomicU8::new(0);

    #[inline]
    pub(super) fn available() -> bool {
        match AVAILABLE.load(Ordering::Relaxed) {
            2 => true,
            1 => false,
            _ => {
                let yes = std::is_x86_feature_detected!("sse4.2");
                AVAILABLE.store(if yes { 2 } else { 1 }, Ordering::Relaxed);
                yes
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn assembled(frame_len: u32, seq: u64, t: u64, payload: &[u8]) -> u32 {
        let mut body = Vec::new();
        body.extend_from_slice(&seq.to_le_bytes());
        body.extend_from_slice(&t.to_le_bytes());
        body.extend_from_slice(payload);
        body.resize(body.len().next_multiple_of(8), 0);
        crc32c::crc32c_append(frame_len, &body)
    }

    #[test]
    fn equals_the_crate_over_the_assembled_body_for_every_length() {
        let payload: Vec<u8> = (0..2048u32)
            .map(|i| (i.wrapping_mul(40_503) >> 7) as u8)
            .collect();
        for len in 0..payload.len() {
            // Unaligned starts too: the payload is the caller's slice, anywhere in memory.
            for start in [0usize, 5] {
                let p = &payload[start..(start + len).min(payload.len())];
                let frame_len = 24 + p.len() as u32;
                let (seq, t) = (
                    0x0102_0304_0506_0708u64 ^ len as u64,
                    1_700_000_000_123_456_789u64,
                );
                assert_eq!(
                    record_crc(frame_len, seq, t, p),
                    assembled(frame_len, seq, t, p),
                    "payload of {} bytes at offset {start}",
                    p.len()
                );
                // And the writer's own pass (the `crc32` instruction where the CPU has it), from the same
                // unaligned slice.
                let words: Vec<AtomicU64> = (0..3 + p.len().div_ceil(8))
                    .map(|_| AtomicU64::new(0))
                    .collect();
                assert_eq!(
                    store_body(&words, frame_len, seq, t, p),
                    assembled(frame_len, seq, t, p),
                    "stored payload of {} bytes at offset {start}",
                    p.len()
                );
            }
        }
    }

    #[test]
    fn store_body_stores_exactly_the_body_and_returns_its_checksum() {
        let payload: Vec<u8> = (0..1800u32).map(|i| (i * 7 + 3) as u8).collect();
        for len in 0..payload.len() {
            let p = &payload[..len];
            let frame_len = 24 + len as u32;
            let (seq, t) = (len as u64 * 1_000_003, 42u64 << 40 | len as u64);
            // Garbage first, as in a ring's previous lap: every body word must be overwritten, word 0 left alone.
            let words: Vec<AtomicU64> = (0..3 + len.div_ceil(8))
                .map(|i| AtomicU64::new(0xDEAD_BEEF_0000_0000 | i as u64))
                .collect();
            let crc = store_body(&words, frame_len, seq, t, p);
            let words2: Vec<AtomicU64> =
                (0..words.len()).map(|i| AtomicU64::new(i as u64)).collect();
            assert_eq!(
                Portable.store_body(&words2, frame_len, seq, t, p),
                crc,
                "portable store, payload of {len} bytes"
            );
            assert!(words[1..]
                .iter()
                .zip(&words2[1..])
                .all(|(a, b)| a.load(Ordering::Relaxed) == b.load(Ordering::Relaxed)));
            let mut body = Vec::new();
            body.extend_from_slice(&seq.to_le_bytes());
            body.extend_from_slice(&t.to_le_bytes());
            body.extend_from_slice(p);
            body.resize(body.len().next_multiple_of(8), 0);
            let stored: Vec<u8> = words[1..]
                .iter()
                .flat_map(|w| w.load(Ordering::Relaxed).to_ne_bytes())
                .collect();
            assert_eq!(stored, body, "payload of {len} bytes");
            assert_eq!(
                crc,
                crc32c::crc32c_append(frame_len, &body),
                "payload of {len} bytes"
            );
            assert_eq!(words[0].load(Ordering::Relaxed), 0xDEAD_BEEF_0000_0000);
        }
    }

    #[cfg(target_arch = "x86_64")]
    #[test]
    fn four_frames_checked_together_get_each_frames_own_checksum() {
        let Some(hw) = Sse42::detect() else {
            return;
        };
        let bytes: Vec<u8> = (0..8192u32)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
            .collect();
        // Bodies of different lengths in every lane, so the stretch all four share and each lane's own rest are
        // both exercised, each lane from its own place in memory.
        let words = [2usize, 3, 4, 7, 16, 33, 130];
        for (i, lens) in (0..words.len().pow(4)).map(|n| {
            let w = |k: u32| words[n / words.len().pow(k) % words.len()];
            (n, [w(0), w(1), w(2), w(3)])
        }) {
            let frames: [(u32, &[u8]); LANES] = std::array::from_fn(|lane| {
                let start = 8 * ((i * 7 + lane * 131) % 600);
                let body = &bytes[start..start + 8 * lens[lane]];
                (8 + body.len() as u32 + lane as u32, body)
            });
            let alone = frames.map(|(frame_len, body)| crate::segment::frame_crc(frame_len, body));
            assert_eq!(hw.frame_crcs(frames), alone, "bodies of {lens:?} words");
        }
    }

    #[test]
    fn every_single_bit_flip_changes_the_checksum() {
        let mut payload = vec![0x5au8; 100];
        let good = record_crc(124, 7, 9, &payload);
        for bit in 0..payload.len() * 8 {
            payload[bit / 8] ^= 1 << (bit % 8);
            assert_ne!(record_crc(124, 7, 9, &payload), good, "payload bit {bit}");
            payload[bit / 8] ^= 1 << (bit % 8);
        }
        for bit in 0..64 {
            assert_ne!(
                record_crc(124, 7 ^ 1 << bit, 9, &payload),
                good,
                "seq bit {bit}"
            );
            assert_ne!(
                record_crc(124, 7, 9 ^ 1 << bit, &payload),
                good,
                "time bit {bit}"
            );
        }
        assert_ne!(record_crc(125, 7, 9, &payload), good, "frame length");
    }
}
