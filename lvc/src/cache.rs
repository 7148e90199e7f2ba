//! The bounded last-value store: one value per key (a tickbox frame, or a plain publisher's multipart message), found by exact key on the hot path (hash map) and by prefix
//! when a subscription arrives (ordered map), with an intrusive LRU list so eviction is O(1).
#![deny(clippy::disallowed_methods, clippy::disallowed_types)]

use std::collections::hash_map::RandomState;
use std::collections::{BTreeMap, HashMap};
use std::ops::Bound;

use serde::{Deserialize, Serialize};
use tickbox_wire::ShortKeyCache;

/// What the cache does when a new key would exceed `max_topics` or `max_bytes`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Overflow {
    /// Evict the least recently updated key to make room (counted in `evicted`). A busy universe keeps its
    /// freshest topics.
    #[default]
    EvictLru,
    /// Keep what is cached and do not cache the new key (counted in `rejected`). The first `max_topics` keys
    /// stay cached for the life of the proxy.
    RejectNew,
}

/// Result of offering a frame to the cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Store {
    /// An existing key's value was replaced in place.
    Updated,
    /// A new key was added; `evicted` keys were dropped to make room.
    Inserted {
        /// How many least recently updated keys were evicted (0 unless the cache was full).
        evicted: usize,
    },
    /// The cache is full and the policy is [`Overflow::RejectNew`].
    Rejected,
    /// The frame alone is larger than `max_entry_bytes`.
    TooLarge,
}

const NIL: u32 = u32::MAX;

struct Slot {
    key: Box<[u8]>,
    /// The frame, or every part of a multipart value back to back.
    frame: Vec<u8>,
    /// Empty for a single frame; for a multipart value, where each part ends in `frame`.
    ends: Vec<u32>,
    /// Towards the most recently updated end.
    newer: u32,
    /// Towards the least recently updated end.
    older: u32,
}

/// The key hasher: std's SipHash-1-3 with a random key per cache. Topics come from publishers we do not control
/// (and, behind another LVC, from anyone who can publish), so an unkeyed hash lets crafted topics that share a
/// bucket turn every insert into a scan: 60k such topics stalled the proxy for 20 s. A keyed hash makes collisions
/// unpredictable, and cost no more than the unkeyed word hash it replaced: the engine bench
/// (`PROXY_BENCH_ONLY=engine`) measured 75-82 ns per message with it against 80 ns. Most messages now skip both
/// through the front index ([`FRONT_ENTRIES`]).
type KeyHashBuild = RandomState;

/// Places in the cache's front index: short keys' slots, found by two words and a multiply instead of `by_key`'s
/// keyed SipHash and `memcmp`, which were 30 % of the engine's time per message (the engine bench, 1,000 topics
/// of 15 bytes; 76.5-102.8 ns a message before it, 63.5-71.8 after). Its hash is not keyed, so topics crafted to
/// share a place can push each other out of it: each of their messages then costs the `by_key` lookup it cost
/// before, plus a probe and a write of one entry, never a scan.
const FRONT_ENTRIES: usize = 4096;

/// Bytes a multipart value's part boundary is charged (its offset), so a value of many empty parts still costs.
const PART_COST: usize = 4;

/// One cached value, as handed to the sender of a cached burst.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CachedValue<'a> {
    /// A tickbox wire frame (single-frame message).
    Frame(&'a [u8]),
    /// A plain publisher's multipart message, first part the topic, to be sent again part by part.
    Multipart(Parts<'a>),
}

/// The parts of a cached multipart value, in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Parts<'a> {
    data: &'a [u8],
    ends: &'a [u32],
}

impl<'a> Parts<'a> {
    /// How many parts (at least one: the topic).
    pub fn len(&self) -> usize {
        self.ends.len()
    }

    /// Never true for a stored value; present for API symmetry.
    pub fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    /// The parts, first the topic.
    pub fn iter(&self) -> impl Iterator<Item = &'a [u8]> + 'a {
        let data = self.data;
        let mut start = 0usize;
        self.ends.iter().map(move |&end| {
            let part = &data[start..end as usize];
            start = end as usize;
            part
        })
    }
}

/// Last value per key, bounded by key count and bytes.
///
/// Memory accounting counts the bytes we choose to keep (each frame's length plus its key, stored twice; for a
/// multipart value every part's bytes plus 4 bytes per part), not allocator or map overhead, so the real
/// footprint is that plus roughly 100 bytes per key.
pub struct LastValueCache {
    by_key: HashMap<Box<[u8]>, u32, KeyHashBuild>,
    /// Short keys' slots, remembered in front of `by_key` (see [`FRONT_ENTRIES`]).
    front: ShortKeyCache<u32>,
    ordered: BTreeMap<Box<[u8]>, u32>,
    slots: Vec<Slot>,
    free: Vec<u32>,
    newest: u32,
    oldest: u32,
    bytes: usize,
    max_topics: usize,
    max_bytes: usize,
    max_entry_bytes: usize,
    overflow: Overflow,
}

impl LastValueCache {
    /// An empty cache holding at most `max_topics` keys and `max_bytes` bytes (frames plus keys, each key
    /// counted twice); a key whose frame plus keys exceeds `max_entry_bytes` is never cached.
    pub fn new(
        max_topics: usize,
        max_bytes: usize,
        max_entry_bytes: usize,
        overflow: Overflow,
    ) -> Self {
        Self {
            by_key: HashMap::default(),
            front: ShortKeyCache::new(FRONT_ENTRIES),
            ordered: BTreeMap::new(),
            slots: Vec::new(),
            free: Vec::new(),
            newest: NIL,
            oldest: NIL,
            bytes: 0,
            // A slot index is a u32 and NIL is reserved.
            max_topics: max_topics.min(NIL as usize - 1),
            max_bytes,
            max_entry_bytes,
            overflow,
        }
    }

    /// Keys cached now.
    pub fn len(&self) -> usize {
        self.by_key.len()
    }

    /// Whether nothing is cached.
    pub fn is_empty(&self) -> bool {
        self.by_key.is_empty()
    }

    /// Bytes held (frame buffers plus keys), the quantity bounded by `max_bytes`.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// The cached single frame for exactly `key` (`None` if absent or a multipart value).
    pub fn get(&self, key: &[u8]) -> Option<&[u8]> {
        match self.get_value(key)? {
            CachedValue::Frame(frame) => Some(frame),
            CachedValue::Multipart(_) => None,
        }
    }

    /// The cached value for exactly `key`.
    pub fn get_value(&self, key: &[u8]) -> Option<CachedValue<'_>> {
        self.front
            .get(key)
            .or_else(|| self.by_key.get(key).copied())
            .map(|i| self.value(i))
    }

    /// The slot of `key`, if cached.
    #[inline]
    fn find(&mut self, key: &[u8]) -> Option<u32> {
        if let Some(index) = self.front.get(key) {
            return Some(index);
        }
        let index = *self.by_key.get(key)?;
        self.front.insert(key, index);
        Some(index)
    }

    fn value(&self, index: u32) -> CachedValue<'_> {
        let slot = &self.slots[index as usize];
        if slot.ends.is_empty() {
            CachedValue::Frame(&slot.frame)
        } else {
            CachedValue::Multipart(Parts {
                data: &slot.frame,
                ends: &slot.ends,
            })
        }
    }

    /// Stores `frame` as the last value of `key`. Replaces by arrival (never compares sequences), so a restarted
    /// publisher's new, lower sequences are accepted. Replacing an existing key copies into its existing buffer:
    /// no allocation when the frame is no larger than before, which is the steady state (fixed-size kinds).
    /// A value over `max_entry_bytes` is never cached; if it replaces a cached one, that stale value is removed
    /// too (a late joiner must not get a value older than the last one published).
    pub fn store(&mut self, key: &[u8], frame: &[u8]) -> Store {
        self.store_value(key, frame, &[])
    }

    /// Stores a multipart value: `data` is every part back to back and `ends` where each part ends in it (the
    /// last end is `data.len()`). Charged `data.len()` plus 4 bytes per part plus the key twice.
    pub fn store_parts(&mut self, key: &[u8], data: &[u8], ends: &[u32]) -> Store {
        debug_assert!(!ends.is_empty() && ends.last().is_some_and(|&e| e as usize == data.len()));
        self.store_value(key, data, ends)
    }

    /// Removes `key` if cached; returns whether it was.
    pub fn remove(&mut self, key: &[u8]) -> bool {
        match self.find(key) {
            Some(index) => {
                self.remove_index(index);
                true
            }
            None => false,
        }
    }

    fn store_value(&mut self, key: &[u8], frame: &[u8], ends: &[u32]) -> Store {
        let cost = frame.len() + PART_COST * ends.len() + 2 * key.len();
        if let Some(index) = self.find(key) {
            if cost > self.max_entry_bytes || cost > self.max_bytes {
                self.remove_index(index);
                return Store::TooLarge;
            }
            let slot = &mut self.slots[index as usize];
            let before = slot.frame.len() + PART_COST * slot.ends.len();
            slot.frame.clear();
            slot.frame.extend_from_slice(frame);
            slot.ends.clear();
            slot.ends.extend_from_slice(ends);
            self.bytes = self.bytes - before + frame.len() + PART_COST * ends.len();
            self.touch(index);
            if self.bytes > self.max_bytes && self.overflow == Overflow::EvictLru {
                // A key whose frame grew (a kind change on the same topic) can push us over; trim the oldest
                // others rather than refuse the newest value.
                self.evict_until_fits(0, index);
            }
            return Store::Updated;
        }
        if cost > self.max_entry_bytes || cost > self.max_bytes || self.max_topics == 0 {
            return Store::TooLarge;
        }
        let full = self.by_key.len() >= self.max_topics || self.bytes + cost > self.max_bytes;
        let mut evicted = 0;
        let mut reuse = None;
        if full {
            match self.overflow {
                Overflow::RejectNew => return Store::Rejected,
                Overflow::EvictLru => {
                    while self.by_key.len() >= self.max_topics || self.bytes + cost > self.max_bytes
                    {
                        let Some(buffer) = self.evict_oldest() else {
                            break;
                        };
                        evicted += 1;
                        // Keep one evicted buffer for the new key so churn at the cap does not allocate frames.
                        if reuse.is_none() {
                            reuse = Some(buffer);
                        }
                    }
                }
            }
        }
        let mut buffer = reuse.unwrap_or_default();
        buffer.clear();
        buffer.reserve_exact(frame.len());
        buffer.extend_from_slice(frame);
        self.bytes += cost;
        let slot = Slot {
            key: key.into(),
            frame: buffer,
            ends: ends.to_vec(),
            newer: NIL,
            older: NIL,
        };
        let index = match self.free.pop() {
            Some(i) => {
                self.slots[i as usize] = slot;
                i
            }
            None => {
                self.slots.push(slot);
                (self.slots.len() - 1) as u32
            }
        };
        self.by_key.insert(key.into(), index);
        self.front.insert(key, index);
        self.ordered.insert(key.into(), index);
        self.push_newest(index);
        Store::Inserted { evicted }
    }

    /// Every cached single frame that a ZeroMQ subscription to `prefix` would deliver, in key order (multipart
    /// values are left out; [`Self::values_matching`] has both).
    pub fn matching<'a>(&'a self, prefix: &'a [u8]) -> impl Iterator<Item = &'a [u8]> + 'a {
        self.values_matching(prefix)
            .filter_map(|value| match value {
                CachedValue::Frame(frame) => Some(frame),
                CachedValue::Multipart(_) => None,
            })
    }

    /// Every cached value that a ZeroMQ subscription to `prefix` would deliver (raw prefix match on the frame,
    /// or on a multipart value's first part, its topic), in key order. Keys start with the topic, so only keys
    /// starting with the part of `prefix` before its first NUL are visited; with a NUL (a frame's topic ends
    /// there) only that one topic's keys are, so a subscription like `\0x` matching nothing costs nothing,
    /// however large the cache.
    pub fn values_matching<'a>(
        &'a self,
        prefix: &'a [u8],
    ) -> impl Iterator<Item = CachedValue<'a>> + 'a {
        self.keyed_values_matching(prefix, None)
            .map(|(_, value)| value)
    }

    /// As [`Self::values_matching`], with each value's key, starting strictly after the key `after` (none: from
    /// the first). A snapshot served in slices resumes here from the last key it sent, so a key inserted or
    /// evicted between two slices neither repeats nor shifts what is left.
    pub fn keyed_values_matching<'a, 'p>(
        &'a self,
        prefix: &'p [u8],
        after: Option<&'p [u8]>,
    ) -> impl Iterator<Item = (&'a [u8], CachedValue<'a>)> + use<'a, 'p> {
        let (topic_part, exact) = match prefix.iter().position(|&b| b == 0) {
            Some(nul) => (&prefix[..nul], true),
            None => (prefix, false),
        };
        // A resume key sorts at or after `topic_part` when it came from this same iteration; anything else
        // (a caller's mistake) starts from the beginning rather than skipping matching keys.
        let start = match after {
            Some(key) if key >= topic_part => Bound::Excluded(key),
            _ => Bound::Included(topic_part),
        };
        self.ordered
            .range::<[u8], _>((start, Bound::Unbounded))
            .take_while(move |(key, _)| {
                key.starts_with(topic_part)
                    && (!exact || key.len() == topic_part.len() || key[topic_part.len()] == 0)
            })
            .filter_map(move |(key, &i)| {
                let value = self.value(i);
                let matches = match value {
                    CachedValue::Frame(frame) => frame.starts_with(prefix),
                    // The key of a multipart value is its first part.
                    CachedValue::Multipart(_) => key.starts_with(prefix),
                };
                matches.then_some((&key[..], value))
            })
    }

    fn evict_until_fits(&mut self, extra: usize, keep: u32) {
        while self.bytes + extra > self.max_bytes && self.oldest != NIL && self.oldest != keep {
            self.evict_oldest();
        }
    }

    /// Removes the least recently updated key; returns its frame buffer for reuse.
    fn evict_oldest(&mut self) -> Option<Vec<u8>> {
        let index = self.oldest;
        if index == NIL {
            return None;
        }
        Some(self.remove_index(index))
    }

    /// Removes the key in slot `index`; returns its frame buffer for reuse.
    fn remove_index(&mut self, index: u32) -> Vec<u8> {
        self.unlink(index);
        let slot = &mut self.slots[index as usize];
        let key = std::mem::take(&mut slot.key);
        let frame = std::mem::take(&mut slot.frame);
        let parts = std::mem::take(&mut slot.ends).len();
        self.by_key.remove(&key);
        self.front.remove(&key);
        self.ordered.remove(&key);
        self.bytes -= frame.len() + PART_COST * parts + 2 * key.len();
        self.free.push(index);
        frame
    }

    fn touch(&mut self, index: u32) {
        if self.newest != index {
            self.unlink(index);
            self.push_newest(index);
        }
    }

    fn unlink(&mut self, index: u32) {
        let (newer, older) = {
            let slot = &self.slots[index as usize];
            (slot.newer, slot.older)
        };
        if newer == NIL {
            self.newest = older;
        } else {
            self.slots[newer as usize].older = older;
        }
        if older == NIL {
            self.oldest = newer;
        } else {
            self.slots[older as usize].newer = newer;
        }
        let slot = &mut self.slots[index as usize];
        slot.newer = NIL;
        slot.older = NIL;
    }

    fn push_newest(&mut self, index: u32) {
        let old_newest = self.newest;
        {
            let slot = &mut self.slots[index as usize];
            slot.older = old_newest;
            slot.newer = NIL;
        }
        if old_newest != NIL {
            self.slots[old_newest as usize].newer = index;
        }
        self.newest = index;
        if self.oldest == NIL {
            self.oldest = index;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cache(max_topics: usize, overflow: Overflow) -> LastValueCache {
        LastValueCache::new(max_topics, usize::MAX, 4096, overflow)
    }

    #[test]
    fn update_replaces_in_place_without_growing() {
        let mut c = cache(10, Overflow::EvictLru);
        assert_eq!(c.store(b"Q.A", b"Q.A\0one"), Store::Inserted { evicted: 0 });
        let bytes = c.bytes();
        let ptr = c.get(b"Q.A").unwrap().as_ptr();
        assert_eq!(c.store(b"Q.A", b"Q.A\0two"), Store::Updated);
        assert_eq!(c.get(b"Q.A").unwrap(), b"Q.A\0two");
        // Same buffer, same accounting: the steady state neither allocates nor drifts.
        assert_eq!(c.get(b"Q.A").unwrap().as_ptr(), ptr);
        assert_eq!(c.bytes(), bytes);
        assert_eq!(c.len(), 1);
    }

    #[test]
    fn lru_evicts_least_recently_updated() {
        let mut c = cache(2, Overflow::EvictLru);
        c.store(b"A", b"A\0 1");
        c.store(b"B", b"B\0 1");
        c.store(b"A", b"A\0 2"); // A is now the freshest, B the oldest
        assert_eq!(c.store(b"C", b"C\0 1"), Store::Inserted { evicted: 1 });
        assert!(c.get(b"B").is_none());
        assert_eq!(c.get(b"A").unwrap(), b"A\0 2");
        assert_eq!(c.get(b"C").unwrap(), b"C\0 1");
        assert_eq!(c.len(), 2);
        assert_eq!(c.matching(b"").count(), 2);
    }

    #[test]
    fn reject_new_keeps_the_first_keys() {
        let mut c = cache(2, Overflow::RejectNew);
        c.store(b"A", b"A\0 1");
        c.store(b"B", b"B\0 1");
        assert_eq!(c.store(b"C", b"C\0 1"), Store::Rejected);
        assert_eq!(c.store(b"A", b"A\0 2"), Store::Updated);
        assert!(c.get(b"C").is_none());
        assert_eq!(c.len(), 2);
    }

    #[test]
    fn byte_cap_holds_under_churn() {
        let mut c = LastValueCache::new(usize::MAX, 1000, 4096, Overflow::EvictLru);
        for i in 0..10_000u32 {
            let key = format!("Q.S{i}");
            let mut frame = key.clone().into_bytes();
            frame.push(0);
            frame.extend_from_slice(&[7u8; 60]);
            c.store(key.as_bytes(), &frame);
            assert!(c.bytes() <= 1000, "bytes {} at {i}", c.bytes());
        }
        assert!(c.len() > 5);
        let mut big = vec![b'X'; 2000];
        big[1] = 0;
        assert_eq!(c.store(b"X", &big), Store::TooLarge);
    }

    #[test]
    fn multipart_values_are_charged_every_part_and_updates_keep_the_accounting() {
        let mut c = LastValueCache::new(10, 1000, 64, Overflow::EvictLru);
        // "T" + "ab" + "c": 4 bytes, 3 parts (12), key twice (2).
        assert_eq!(
            c.store_parts(b"T", b"Tabc", &[1, 3, 4]),
            Store::Inserted { evicted: 0 }
        );
        assert_eq!(c.bytes(), 4 + 12 + 2);
        let parts = match c.get_value(b"T") {
            Some(CachedValue::Multipart(p)) => p.iter().map(<[u8]>::to_vec).collect::<Vec<_>>(),
            other => panic!("{other:?}"),
        };
        assert_eq!(parts, vec![b"T".to_vec(), b"ab".to_vec(), b"c".to_vec()]);
        assert_eq!(c.get(b"T"), None);
        // Replaced by a single frame on the same key, then by a value too large: removed, not left stale.
        assert_eq!(c.store(b"T", b"T\0x"), Store::Updated);
        assert_eq!(c.bytes(), 3 + 2);
        assert_eq!(c.store(b"T", &[0; 63]), Store::TooLarge);
        assert!(c.is_empty());
        assert_eq!(c.bytes(), 0);
    }

    #[test]
    fn an_evicted_key_is_gone_from_the_front_index_when_its_slot_is_reused() {
        let mut c = cache(1, Overflow::EvictLru);
        assert!(matches!(c.store(b"Q.A", b"a1"), Store::Inserted { .. }));
        assert_eq!(c.store(b"Q.A", b"a2"), Store::Updated);
        // Q.B evicts Q.A and takes its slot: Q.A must not find Q.B's value through the slot it once had.
        assert_eq!(c.store(b"Q.B", b"b1"), Store::Inserted { evicted: 1 });
        assert_eq!(c.get(b"Q.A"), None);
        assert_eq!(c.get(b"Q.B"), Some(&b"b1"[..]));
        assert_eq!(c.store(b"Q.A", b"a3"), Store::Inserted { evicted: 1 });
        assert_eq!(c.get(b"Q.B"), None);
        assert_eq!(c.get(b"Q.A"), Some(&b"a3"[..]));
        assert!(c.remove(b"Q.A"));
        assert!(!c.remove(b"Q.A"));
        assert!(c.is_empty());
    }

    #[test]
    fn hash_spreads_topics_that_differ_only_at_the_end() {
        use std::hash::BuildHasher;
        let build = KeyHashBuild::default();
        let buckets: std::collections::HashSet<u64> = (0..1000)
            .map(|i| {
                let key: Box<[u8]> = format!("Q.XNAS.{i:0>16}").into_bytes().into();
                build.hash_one(&key) & 1023
            })
            .collect();
        // A uniform hash fills about 632 of 1,024 buckets with 1,000 keys; a weak one fills a handful.
        assert!(buckets.len() > 550, "{} buckets", buckets.len());
    }

    #[test]
    fn hash_is_keyed_per_cache() {
        use std::hash::BuildHasher;
        // Two caches must not agree on where keys land, or topics crafted offline to collide in one collide in
        // every proxy. 64 keys agreeing on 64-bit hashes by chance is impossible in practice.
        let (a, b) = (KeyHashBuild::default(), KeyHashBuild::default());
        let same = (0..64)
            .filter(|i| {
                let key: Box<[u8]> = format!("Q.XNAS.{i}").into_bytes().into();
                a.hash_one(&key) == b.hash_one(&key)
            })
            .count();
        assert_eq!(same, 0);
    }

    #[test]
    fn a_subscription_with_a_nul_visits_only_its_topic() {
        let mut c = cache(100, Overflow::EvictLru);
        for key in ["Q.A", "Q.AB", "Q.B"] {
            let mut frame = key.as_bytes().to_vec();
            frame.extend_from_slice(b"\0payload");
            c.store(key.as_bytes(), &frame);
        }
        c.store(b"Q.A\0\x01\x00", b"Q.A\0level");
        assert_eq!(c.matching(b"Q.A\0").count(), 2);
        assert_eq!(c.matching(b"\0x").count(), 0);
        assert_eq!(c.matching(b"Q.A\0zzz").count(), 0);
    }

    #[test]
    fn prefix_matching_is_the_zeromq_rule() {
        let mut c = cache(100, Overflow::EvictLru);
        for key in ["Q.XNAS.AAPL", "Q.XNAS.AA", "Q.XNYS.IBM", "T.XNAS.AAPL"] {
            let mut frame = key.as_bytes().to_vec();
            frame.extend_from_slice(b"\0payload");
            c.store(key.as_bytes(), &frame);
        }
        let topics = |prefix: &[u8]| -> Vec<String> {
            c.matching(prefix)
                .map(|f| {
                    let end = f.iter().position(|&b| b == 0).unwrap();
                    String::from_utf8(f[..end].to_vec()).unwrap()
                })
                .collect()
        };
        assert_eq!(topics(b"Q."), ["Q.XNAS.AA", "Q.XNAS.AAPL", "Q.XNYS.IBM"]);
        assert_eq!(topics(b"Q.XNAS.AA"), ["Q.XNAS.AA", "Q.XNAS.AAPL"]);
        // The NUL makes a subscription exact, as it does inside ZeroMQ.
        assert_eq!(topics(b"Q.XNAS.AA\0"), ["Q.XNAS.AA"]);
        assert_eq!(topics(b"").len(), 4);
        assert!(topics(b"Z").is_empty());
    }
}
