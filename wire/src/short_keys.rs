//! A direct-mapped cache of values keyed by short byte strings (topics, symbols, cache keys of up to
//! [`ShortKeyCache::MAX_KEY`] bytes), for putting in front of a slower lookup on a per-message path.
//!
//! An entry holds its key exactly (its length and the two [`key_words`] that determine it), so a hit is the
//! answer for that key and never a neighbour's. Each key has one place, found by an unkeyed multiply of its two
//! words: keys that share a place (by chance, or crafted by someone who publishes topics) only push each other out,
//! so the worst case is the slower lookup for every message, never a scan.
//!
//! Why one place per key and not a set of several: a feed's 2,000 symbols in 4,096 places leave about 45 % of them
//! sharing a place, so a lookup in front of the dispatch rule misses on roughly 9-26 % of records, yet four ways
//! per set, compared without a branch, made a hit cost more than those misses saved (`cargo bench -p tickbox-wire
//! --bench short_keys`: 7.7-9.5 ns a lookup against 3.8-6.6 ns for 2,000 symbols; 11.8-22.5 against 6.4-11.7 for
//! 10,000). A larger table is the cheaper cure: 16,384 places leave 13 % of those symbols sharing (the multiply
//! applied to the synthetic feed's names), and the subscriber's worker cache is that size (measured in a local
//! replay, where the journal's data streams through the same caches).

use crate::key_words;

/// A cache of `V` by key (see the module documentation).
pub struct ShortKeyCache<V> {
    entries: Box<[Entry<V>]>,
    /// `64 - log2(entries)`: the hash's top bits pick the entry.
    shift: u32,
}

#[derive(Clone, Copy)]
struct Entry<V> {
    words: (u64, u64),
    /// The key's length; [`EMPTY`] for an entry that holds nothing (no cached key is that long).
    len: u32,
    value: V,
}

const EMPTY: u32 = u32::MAX;

impl<V: Copy + Default> ShortKeyCache<V> {
    /// The longest key cached; a longer one is never found and never stored.
    pub const MAX_KEY: usize = 16;

    /// An empty cache of `entries` places (rounded up to a power of two, at least one).
    pub fn new(entries: usize) -> Self {
        let entries = entries.max(1).next_power_of_two();
        let empty = Entry {
            words: (0, 0),
            len: EMPTY,
            value: V::default(),
        };
        ShortKeyCache {
            entries: vec![empty; entries].into_boxed_slice(),
            shift: 64 - entries.trailing_zeros(),
        }
    }

    #[inline]
    fn place(&self, words: (u64, u64), len: u32) -> usize {
        let h = (words.0 ^ words.1.rotate_left(32) ^ u64::from(len))
            .wrapping_mul(0x9e37_79b9_7f4a_7c15);
        // A one-entry cache shifts by 64, which `checked_shr` turns into place 0.
        h.checked_shr(self.shift).unwrap_or(0) as usize
    }

    /// The value cached for exactly `key`, if any.
    #[inline]
    pub fn get(&self, key: &[u8]) -> Option<V> {
        if key.len() > Self::MAX_KEY {
            return None;
        }
        let (words, len) = (key_words(key), key.len() as u32);
        let entry = &self.entries[self.place(words, len)];
        (entry.len == len && entry.words == words).then_some(entry.value)
    }

    /// Caches `value` for `key` (nothing for a key longer than [`Self::MAX_KEY`]), in place of whatever key held
    /// its place.
    #[inline]
    pub fn insert(&mut self, key: &[u8], value: V) {
        if key.len() > Self::MAX_KEY {
            return;
        }
        let (words, len) = (key_words(key), key.len() as u32);
        let at = self.place(words, len);
        self.entries[at] = Entry { words, len, value };
    }

    /// Forgets `key`, if it is cached.
    pub fn remove(&mut self, key: &[u8]) {
        if key.len() > Self::MAX_KEY {
            return;
        }
        let (words, len) = (key_words(key), key.len() as u32);
        let at = self.place(words, len);
        let entry = &mut self.entries[at];
        if entry.len == len && entry.words == words {
            entry.len = EMPTY;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_finds_only_its_own_value() {
        let mut cache = ShortKeyCache::<u32>::new(8);
        // Many more keys than places, of every short length (the empty key included): each either finds
        // exactly the value stored for it or nothing, never a key that shares its place or its words.
        let keys: Vec<Vec<u8>> = (0..=16)
            .flat_map(|len| (0..40u8).map(move |i| vec![i; len]))
            .chain((0..200).map(|i| format!("Q.XNAS.S{i}").into_bytes()))
            .collect();
        for (i, key) in keys.iter().enumerate() {
            cache.insert(key, i as u32);
            assert_eq!(cache.get(key), Some(i as u32));
        }
        let mut found = 0;
        for (i, key) in keys.iter().enumerate() {
            if let Some(v) = cache.get(key) {
                assert_eq!(v, i as u32, "{key:?}");
                found += 1;
            }
        }
        assert!((1..=8).contains(&found), "{found} of 8 places hold a key");
    }

    #[test]
    fn long_keys_are_never_cached_and_removal_is_exact() {
        let mut cache = ShortKeyCache::<u32>::new(1);
        let long = [7u8; 17];
        cache.insert(&long, 1);
        assert_eq!(cache.get(&long), None);
        cache.insert(b"Q.A", 2);
        // Another key's removal leaves the one held alone.
        cache.remove(b"Q.B");
        assert_eq!(cache.get(b"Q.A"), Some(2));
        cache.remove(b"Q.A");
        assert_eq!(cache.get(b"Q.A"), None);
    }
}
