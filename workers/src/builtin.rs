//! Built-in workers: statistics, a last-value book per instrument, and a deliberate delay (for testing the snail).

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::time::Duration;

use tickbox_wire::{key_words, shard_key_of_topic, DecodeError, Flags, Kind, MessageRef, Payload};

use crate::{Delivery, Record, Worker};

/// FNV-1a for short topic keys: several times cheaper than SipHash on 10-20 byte strings, and topics come from
/// our own publishers, so hash flooding is not a concern worth paying for per message.
#[derive(Default, Clone, Copy)]
pub struct FnvHasher(u64);

impl Hasher for FnvHasher {
    #[inline]
    fn finish(&self) -> u64 {
        self.0
    }
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        let mut hash = if self.0 == 0 {
            0xcbf2_9ce4_8422_2325
        } else {
            self.0
        };
        for &b in bytes {
            hash ^= u64::from(b);
            hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
        }
        self.0 = hash;
    }
}

type FnvMap<K, V> = HashMap<K, V, BuildHasherDefault<FnvHasher>>;

/// A hash of a key from its words (and, past 16 bytes, its middle too): a few multiplies instead of FNV's one
/// per byte. It only places keys in this process's tables; which worker a symbol goes to is decided elsewhere.
#[inline]
fn key_hash(bytes: &[u8], (first, last): (u64, u64)) -> u64 {
    const K1: u64 = 0x9e37_79b9_7f4a_7c15;
    const K2: u64 = 0xc2b2_ae3d_27d4_eb4f;
    let mut h = (first ^ (bytes.len() as u64).rotate_left(56)).wrapping_mul(K1)
        ^ last.rotate_left(31).wrapping_mul(K2);
    if bytes.len() > 16 {
        for chunk in bytes[8..bytes.len() - 8].chunks(8) {
            let mut word = [0u8; 8];
            word[..chunk.len()].copy_from_slice(chunk);
            h = (h ^ u64::from_le_bytes(word))
                .wrapping_mul(K1)
                .rotate_left(27);
        }
    }
    h ^= h >> 32;
    h = h.wrapping_mul(K2);
    h ^ (h >> 29)
}

/// One key of a [`NameTable`]: its name (checked as UTF-8 once, at insertion), its words and its hash.
#[derive(Debug, Clone)]
struct Slot<V> {
    name: Box<str>,
    words: (u64, u64),
    hash: u64,
    value: V,
}

impl<V> Slot<V> {
    #[inline]
    fn is(&self, bytes: &[u8], words: (u64, u64), hash: u64) -> bool {
        self.hash == hash
            && self.name.len() == bytes.len()
            && self.words == words
            && (bytes.len() <= 16 || self.name.as_bytes() == bytes)
    }
}

/// A map from names to values for the per-record hot path, looked up by the name's bytes: open addressing with
/// linear probing over an index of slots kept in insertion order, at most half full. A known name is found
/// with one hash of a few multiplies and, for names of up to 16 bytes, two integer compares; only a name never
/// seen before is checked as UTF-8.
#[derive(Debug, Clone)]
struct NameTable<V> {
    slots: Vec<Slot<V>>,
    /// Indices into `slots`; `EMPTY` where none. Its length is a power of two, at least twice `slots.len()`.
    index: Vec<u32>,
}

const EMPTY: u32 = u32::MAX;

/// What [`NameTable::find`] computed for a name it did not hold, so inserting it does not compute it again.
#[derive(Debug, Clone, Copy)]
struct Miss {
    words: (u64, u64),
    hash: u64,
}

impl<V> Default for NameTable<V> {
    fn default() -> Self {
        Self {
            slots: Vec::new(),
            index: Vec::new(),
        }
    }
}

impl<V> NameTable<V> {
    fn len(&self) -> usize {
        self.slots.len()
    }

    fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    fn iter(&self) -> impl Iterator<Item = (&str, &V)> {
        self.slots.iter().map(|s| (&*s.name, &s.value))
    }

    /// The index position holding `bytes`, or the empty one where it would go.
    #[inline]
    fn probe(&self, bytes: &[u8], words: (u64, u64), hash: u64) -> (usize, Option<usize>) {
        let mask = self.index.len() - 1;
        let mut at = (hash as usize) & mask;
        loop {
            let slot = self.index[at];
            if slot == EMPTY {
                return (at, None);
            }
            if self.slots[slot as usize].is(bytes, words, hash) {
                return (at, Some(slot as usize));
            }
            at = (at + 1) & mask;
        }
    }

    /// Where `bytes` is, or what inserting it needs.
    #[inline]
    fn find(&self, bytes: &[u8]) -> Result<usize, Miss> {
        let words = key_words(bytes);
        let hash = key_hash(bytes, words);
        if !self.index.is_empty() {
            if let (_, Some(i)) = self.probe(bytes, words, hash) {
                return Ok(i);
            }
        }
        Err(Miss { words, hash })
    }

    #[inline]
    fn get(&self, bytes: &[u8]) -> Option<&V> {
        self.find(bytes).ok().map(|i| &self.slots[i].value)
    }

    #[inline]
    fn value_mut(&mut self, i: usize) -> &mut V {
        &mut self.slots[i].value
    }

    /// The value for `bytes`, inserting `make()` first if the name is new; a new name must be UTF-8
    /// (`TopicNotUtf8` otherwise, nothing inserted).
    #[inline]
    fn get_or_insert_with(
        &mut self,
        bytes: &[u8],
        make: impl FnOnce() -> V,
    ) -> Result<&mut V, DecodeError> {
        match self.find(bytes) {
            Ok(i) => Ok(&mut self.slots[i].value),
            Err(miss) => self.insert_new(bytes, miss, make),
        }
    }

    /// Inserts `bytes`, which [`find`](Self::find) just missed, with `make()`; `bytes` must be UTF-8
    /// (`TopicNotUtf8` otherwise, nothing inserted).
    #[cold]
    #[inline(never)]
    fn insert_new(
        &mut self,
        bytes: &[u8],
        miss: Miss,
        make: impl FnOnce() -> V,
    ) -> Result<&mut V, DecodeError> {
        let name: Box<str> = tickbox_wire::topic_str(bytes)?.into();
        if (self.slots.len() + 1) * 2 > self.index.len() {
            self.grow();
        }
        let (at, _) = self.probe(bytes, miss.words, miss.hash);
        let i = self.slots.len();
        // Slot numbers are u32 to keep the index small; four thousand million boxed names would not fit in
        // memory first.
        self.index[at] = i as u32;
        self.slots.push(Slot {
            name,
            words: miss.words,
            hash: miss.hash,
            value: make(),
        });
        Ok(&mut self.slots[i].value)
    }

    fn grow(&mut self) {
        let size = (self.index.len() * 2).max(64);
        self.index = vec![EMPTY; size];
        let mask = size - 1;
        for (i, slot) in self.slots.iter().enumerate() {
            let mut at = (slot.hash as usize) & mask;
            while self.index[at] != EMPTY {
                at = (at + 1) & mask;
            }
            self.index[at] = i as u32;
        }
    }
}

/// Per-topic message counts; per-prefix figures are derived from them at report time, so the hot path does one
/// map lookup per message and allocates only the first time a topic is seen.
pub type Topics = FnvMap<Box<str>, u64>;

/// Distinct Guide topics a [`GuideTopics`] counts by name; messages of further topics are counted together as
/// [`GuideTopics::overflow`], so a publisher with unbounded keys cannot grow a worker's memory without bound.
pub const GUIDE_TOPICS_MAX: usize = 1024;

/// Longest topic frame counted by name (bytes); longer ones are counted in [`GuideTopics::overflow`].
pub const GUIDE_TOPIC_BYTES_MAX: usize = 256;

/// Guide messages (`subscribe --framing guide`) counted per topic frame, bounded by [`GUIDE_TOPICS_MAX`]
/// distinct topics of at most [`GUIDE_TOPIC_BYTES_MAX`] bytes. A known topic is found without allocating; only a
/// new one is copied, once.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct GuideTopics {
    topics: FnvMap<Box<[u8]>, u64>,
    overflow: u64,
    messages: u64,
    body_bytes: u64,
}

impl GuideTopics {
    /// Counts one message of `topic` with a body of `body_len` bytes.
    #[inline]
    pub fn count(&mut self, topic: &[u8], body_len: usize) {
        self.messages += 1;
        self.body_bytes += body_len as u64;
        self.add(topic, 1);
    }

    #[inline]
    fn add(&mut self, topic: &[u8], n: u64) {
        if let Some(c) = self.topics.get_mut(topic) {
            *c += n;
        } else if self.topics.len() < GUIDE_TOPICS_MAX && topic.len() <= GUIDE_TOPIC_BYTES_MAX {
            self.topics.insert(topic.into(), n);
        } else {
            self.overflow += n;
        }
    }

    /// Adds `other`'s counts; the bound holds for the sum (what does not fit goes to the overflow).
    pub fn merge(&mut self, other: &GuideTopics) {
        self.messages += other.messages;
        self.body_bytes += other.body_bytes;
        self.overflow += other.overflow;
        for (topic, &n) in &other.topics {
            self.add(topic, n);
        }
    }

    /// Guide messages counted.
    pub fn messages(&self) -> u64 {
        self.messages
    }

    /// Their bodies' bytes, together.
    pub fn body_bytes(&self) -> u64 {
        self.body_bytes
    }

    /// Messages whose topic is not counted by name (past [`GUIDE_TOPICS_MAX`] topics, or too long).
    pub fn overflow(&self) -> u64 {
        self.overflow
    }

    /// Messages of `topic`, if it is counted by name.
    pub fn get(&self, topic: &[u8]) -> Option<u64> {
        self.topics.get(topic).copied()
    }

    /// Topics counted by name.
    pub fn len(&self) -> usize {
        self.topics.len()
    }

    /// True when no topic is counted by name.
    pub fn is_empty(&self) -> bool {
        self.topics.is_empty()
    }

    /// `(topic, messages)`, sorted by topic.
    pub fn sorted(&self) -> Vec<(&[u8], u64)> {
        let mut out: Vec<(&[u8], u64)> = self.topics.iter().map(|(t, &n)| (&**t, n)).collect();
        out.sort_unstable();
        out
    }
}

fn kind_index(kind: Kind) -> usize {
    match kind {
        Kind::Quote => 0,
        Kind::Trade => 1,
        Kind::Heartbeat => 2,
        Kind::BookLevel => 3,
        Kind::Gap => 4,
    }
}

/// Counts and rates per kind and per topic.
#[derive(Debug, Default, Clone)]
pub struct Stats {
    per_kind: [u64; 5],
    topics: NameTable<u64>,
    guide: GuideTopics,
    cached: u64,
    replayed: u64,
    first_ns: u64,
    last_ns: u64,
}

impl Stats {
    /// A worker that has seen nothing yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// A summary of what this worker saw.
    pub fn report(&self) -> StatsReport {
        StatsReport {
            per_kind: self.per_kind,
            topics: self
                .topics
                .iter()
                .map(|(topic, count)| (Box::from(topic), *count))
                .collect(),
            guide: self.guide.clone(),
            cached: self.cached,
            replayed: self.replayed,
            first_ns: self.first_ns,
            last_ns: self.last_ns,
        }
    }
}

impl Stats {
    /// Counts one message; a topic not seen before must be UTF-8 (then it is checked once, here).
    #[inline]
    fn count(
        &mut self,
        topic: &[u8],
        header: &tickbox_wire::Header,
        delivery: &Delivery,
    ) -> Result<(), DecodeError> {
        *self.topics.get_or_insert_with(topic, || 0)? += 1;
        self.per_kind[kind_index(header.kind)] += 1;
        if header.flags.contains(Flags::CACHED) {
            self.cached += 1;
        }
        if header.flags.contains(Flags::REPLAY) {
            self.replayed += 1;
        }
        if self.first_ns == 0 {
            self.first_ns = delivery.dequeued_ns;
        }
        self.last_ns = delivery.dequeued_ns;
        Ok(())
    }
}

impl Worker for Stats {
    #[inline]
    fn on_message(&mut self, msg: &MessageRef<'_>, delivery: &Delivery) {
        // A decoded message's topic is already UTF-8, so this cannot fail.
        let _ = self.count(msg.topic().as_bytes(), msg.header(), delivery);
    }

    /// Per-topic counts are reported by name, so a topic is checked for UTF-8 the first time it is seen (and a
    /// record whose topic is not UTF-8 is refused, as `Record::topic` would).
    #[inline]
    fn on_record(&mut self, rec: &Record<'_>, delivery: &Delivery) -> Result<(), DecodeError> {
        self.count(rec.topic_bytes(), rec.header(), delivery)
    }

    /// Counted per topic frame (bounded, see [`GuideTopics`]), and within the time span.
    #[inline]
    fn on_guide(&mut self, topic: &[u8], body: &[u8], delivery: &Delivery) {
        self.guide.count(topic, body.len());
        if self.first_ns == 0 {
            self.first_ns = delivery.dequeued_ns;
        }
        self.last_ns = delivery.dequeued_ns;
    }
}

/// What one or more [`Stats`] workers saw; reports from several workers [`merge`](StatsReport::merge).
#[derive(Debug, Default, Clone)]
pub struct StatsReport {
    /// Messages per kind, indexed like [`Kind::ALL`].
    pub per_kind: [u64; 5],
    /// Messages per exact topic; [`StatsReport::per_prefix`] folds them by prefix.
    pub topics: Topics,
    /// Guide messages per topic frame (not in `per_kind` or `topics`: they have no kind).
    pub guide: GuideTopics,
    /// Messages flagged CACHED (LVC snapshot values).
    pub cached: u64,
    /// Messages flagged REPLAY.
    pub replayed: u64,
    /// When the first message was dequeued (ns since the Unix epoch); 0 before any.
    pub first_ns: u64,
    /// When the last message was dequeued (ns since the Unix epoch); 0 before any.
    pub last_ns: u64,
}

impl StatsReport {
    /// Adds `other`'s counts to these and widens the time span to cover both.
    pub fn merge(&mut self, other: &StatsReport) {
        for (a, b) in self.per_kind.iter_mut().zip(other.per_kind) {
            *a += b;
        }
        for (topic, count) in &other.topics {
            *self.topics.entry(topic.clone()).or_insert(0) += count;
        }
        self.guide.merge(&other.guide);
        self.cached += other.cached;
        self.replayed += other.replayed;
        if other.first_ns != 0 && (self.first_ns == 0 || other.first_ns < self.first_ns) {
            self.first_ns = other.first_ns;
        }
        self.last_ns = self.last_ns.max(other.last_ns);
    }

    /// Messages of every kind.
    pub fn total(&self) -> u64 {
        self.per_kind.iter().sum()
    }

    /// Messages of `kind`.
    pub fn count(&self, kind: Kind) -> u64 {
        self.per_kind[kind_index(kind)]
    }

    /// Different topics seen.
    pub fn distinct_topics(&self) -> usize {
        self.topics.len()
    }

    /// Time between the first and the last message seen.
    pub fn span(&self) -> Duration {
        Duration::from_nanos(self.last_ns.saturating_sub(self.first_ns))
    }

    /// `count` over [`span`](Self::span), in messages per second (0 when the span is empty).
    pub fn rate(&self, count: u64) -> f64 {
        let secs = self.span().as_secs_f64();
        if secs > 0.0 {
            count as f64 / secs
        } else {
            0.0
        }
    }

    /// Message counts per topic prefix made of the first `segments` dot-separated parts (`Q.XNAS` for 2), sorted.
    pub fn per_prefix(&self, segments: usize) -> Vec<(String, u64)> {
        let mut out: FnvMap<&str, u64> = FnvMap::default();
        for (topic, count) in &self.topics {
            *out.entry(topic_prefix(topic, segments)).or_insert(0) += count;
        }
        let mut out: Vec<(String, u64)> = out.into_iter().map(|(k, v)| (k.to_owned(), v)).collect();
        out.sort();
        out
    }
}

/// The first `segments` dot-separated parts of `topic` (the whole topic if it has fewer).
pub(crate) fn topic_prefix(topic: &str, segments: usize) -> &str {
    let mut dots = 0;
    for (i, b) in topic.bytes().enumerate() {
        if b == b'.' {
            dots += 1;
            if dots == segments {
                return &topic[..i];
            }
        }
    }
    topic
}

/// Where a value came from, for "is this newer?" decisions. Ordered by origin time, then sequence.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub struct Stamp {
    /// The header's `origin_time_ns`: when the value was first published (ns since the Unix epoch), kept by replays
    /// and the LVC, so a cached or replayed value sorts where it was born.
    pub origin_time_ns: u64,
    /// The header's sequence, which breaks ties between values published in the same nanosecond.
    pub sequence: u64,
}

/// Best bid/offer and last trade of one instrument.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct BookEntry {
    /// Best bid, in units of [`tickbox_wire::PRICE_SCALE`]; 0 until a quote arrived.
    pub bid_px: i64,
    /// Quantity at the best bid.
    pub bid_size: u32,
    /// Best ask, in units of [`tickbox_wire::PRICE_SCALE`]; 0 until a quote arrived.
    pub ask_px: i64,
    /// Quantity at the best ask.
    pub ask_size: u32,
    /// Stamp of the quote the bid/ask came from; `None` until a quote arrived.
    pub quote: Option<Stamp>,
    /// Price of the newest trade, in units of [`tickbox_wire::PRICE_SCALE`]; 0 until a trade arrived.
    pub last_trade_px: i64,
    /// Quantity of the newest trade.
    pub last_trade_size: u32,
    /// Stamp of the newest trade; `None` until a trade arrived.
    pub trade: Option<Stamp>,
}

/// The last value per instrument (keyed by topic without its kind letter, e.g. `XNAS.AAPL`).
///
/// A value is applied only when it is newer (origin time, then sequence) than what the book holds. That keeps a
/// CACHED value from the LVC from overwriting a live one that overtook it, and lets books built by several
/// workers (each seeing part of the stream) [`merge`](LastValueBook::merge) into the true last value.
#[derive(Debug, Default, Clone)]
pub struct LastValueBook {
    entries: NameTable<BookEntry>,
    /// Quote/trade/book payloads that failed to decode (bad enum byte).
    pub bad_payloads: u64,
    /// Values ignored because the book already held a newer one.
    pub stale_ignored: u64,
}

impl LastValueBook {
    /// An empty book.
    pub fn new() -> Self {
        Self::default()
    }

    /// The entry for `instrument`, keyed without the kind letter (`XNAS.AAPL`).
    pub fn get(&self, instrument: &str) -> Option<&BookEntry> {
        self.entries.get(instrument.as_bytes())
    }

    /// Instruments in the book.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True before any quote, trade or level-0 book level was applied.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Every instrument and its entry, in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &BookEntry)> {
        self.entries.iter()
    }

    /// Applies one message (quotes, trades, level-0 book levels; other kinds are ignored).
    pub fn apply(&mut self, msg: &MessageRef<'_>) {
        // A decoded message's topic is already UTF-8, so this cannot fail.
        let _ = self.apply_parts(msg.topic().as_bytes(), msg.header(), msg.payload());
    }

    /// Applies one value; the topic must be UTF-8 (`TopicNotUtf8` otherwise, nothing applied). Only a new
    /// instrument's key is validated in full; for a known one, the bytes before the key (the kind letter and its
    /// dot) are, which together with the key's check at insertion covers the whole topic.
    #[inline]
    fn apply_parts(
        &mut self,
        topic: &[u8],
        header: &tickbox_wire::Header,
        payload: Result<Payload, DecodeError>,
    ) -> Result<(), DecodeError> {
        let kind = header.kind;
        if !matches!(kind, Kind::Quote | Kind::Trade | Kind::BookLevel) {
            return Ok(());
        }
        let key = shard_key_of_topic(topic);
        let head = &topic[..topic.len() - key.len()];
        tickbox_wire::topic_str(head)?;
        // A new instrument's name is checked before the payload, so a non-UTF-8 topic is refused as such.
        let known = self.entries.find(key);
        if known.is_err() {
            tickbox_wire::topic_str(key)?;
        }
        let payload = match payload {
            Ok(p) => p,
            Err(_) => {
                self.bad_payloads += 1;
                return Ok(());
            }
        };
        let entry = match known {
            Ok(i) => self.entries.value_mut(i),
            Err(miss) => self.entries.insert_new(key, miss, BookEntry::default)?,
        };
        let stamp = Stamp {
            origin_time_ns: header.origin_time_ns,
            sequence: header.sequence,
        };
        let newer = |held: Option<Stamp>| held.is_none_or(|h| stamp > h);
        match payload {
            Payload::Quote(q) => {
                if newer(entry.quote) {
                    entry.bid_px = q.bid_px;
                    entry.bid_size = q.bid_size;
                    entry.ask_px = q.ask_px;
                    entry.ask_size = q.ask_size;
                    entry.quote = Some(stamp);
                } else {
                    self.stale_ignored += 1;
                }
            }
            Payload::Trade(t) => {
                if newer(entry.trade) {
                    entry.last_trade_px = t.price;
                    entry.last_trade_size = t.size;
                    entry.trade = Some(stamp);
                } else {
                    self.stale_ignored += 1;
                }
            }
            Payload::BookLevel(level) if level.level == 0 => {
                if newer(entry.quote) {
                    match level.side {
                        tickbox_wire::Side::Buy => {
                            entry.bid_px = level.price;
                            entry.bid_size = level.size;
                        }
                        tickbox_wire::Side::Sell => {
                            entry.ask_px = level.price;
                            entry.ask_size = level.size;
                        }
                        tickbox_wire::Side::None => return Ok(()),
                    }
                    entry.quote = Some(stamp);
                } else {
                    self.stale_ignored += 1;
                }
            }
            _ => {}
        }
        Ok(())
    }

    /// Folds another book in, keeping the newer value of each field.
    pub fn merge(&mut self, other: &LastValueBook) {
        for (key, theirs) in other.entries.iter() {
            // `key` is a name `other` already checked, so this cannot fail.
            let Ok(ours) = self
                .entries
                .get_or_insert_with(key.as_bytes(), BookEntry::default)
            else {
                continue;
            };
            if theirs.quote.is_some() && theirs.quote > ours.quote {
                ours.bid_px = theirs.bid_px;
                ours.bid_size = theirs.bid_size;
                ours.ask_px = theirs.ask_px;
                ours.ask_size = theirs.ask_size;
                ours.quote = theirs.quote;
            }
            if theirs.trade.is_some() && theirs.trade > ours.trade {
                ours.last_trade_px = theirs.last_trade_px;
                ours.last_trade_size = theirs.last_trade_size;
                ours.trade = theirs.trade;
            }
        }
        self.bad_payloads += other.bad_payloads;
        self.stale_ignored += other.stale_ignored;
    }
}

impl Worker for LastValueBook {
    #[inline]
    fn on_message(&mut self, msg: &MessageRef<'_>, _delivery: &Delivery) {
        self.apply(msg);
    }

    /// Instruments are keyed by name, so a topic must be UTF-8 (only for kinds the book keeps); a known
    /// instrument's key is not checked again.
    #[inline]
    fn on_record(&mut self, rec: &Record<'_>, _delivery: &Delivery) -> Result<(), DecodeError> {
        if matches!(rec.kind(), Kind::Quote | Kind::Trade | Kind::BookLevel) {
            // `apply_parts` checks the topic itself (a known instrument without a second UTF-8 pass), so the
            // payload is decoded without `Record::payload`'s topic check.
            let payload = Payload::decode(rec.kind(), rec.payload_bytes());
            self.apply_parts(rec.topic_bytes(), rec.header(), payload)?;
        }
        Ok(())
    }
}

/// Sleeps for a fixed time per message: a stand-in for an expensive consumer, used to prove that a slow worker
/// makes the Suicidal Snail fire.
#[derive(Debug, Clone, Copy)]
pub struct Delay(pub Duration);

impl Worker for Delay {
    fn on_message(&mut self, _msg: &MessageRef<'_>, _delivery: &Delivery) {
        if !self.0.is_zero() {
            std::thread::sleep(self.0);
        }
    }

    fn on_record(&mut self, _rec: &Record<'_>, _delivery: &Delivery) -> Result<(), DecodeError> {
        if !self.0.is_zero() {
            std::thread::sleep(self.0);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tickbox_wire::{encode_to_vec, Header, Quote, Trade};

    fn quote(seq: u64, origin: u64, bid: i64, flags: Flags) -> Vec<u8> {
        let mut header = Header::live(Kind::Quote, 1, seq, origin + 5);
        header.origin_time_ns = origin;
        header.flags = flags;
        let q = Quote {
            bid_px: bid,
            ask_px: bid + 1,
            bid_size: 1,
            ask_size: 2,
            ..Quote::default()
        };
        encode_to_vec("Q.XNAS.AAPL", &header, &q.into()).unwrap()
    }

    /// A trade of 5 at 77 on `T.XNAS.AAPL`, sequence 3, origin time 300.
    fn trade_77x5() -> Vec<u8> {
        encode_to_vec(
            "T.XNAS.AAPL",
            &Header::live(Kind::Trade, 1, 3, 300),
            &Trade {
                price: 77,
                size: 5,
                ..Trade::default()
            }
            .into(),
        )
        .unwrap()
    }

    const D: Delivery = Delivery {
        worker: 0,
        dequeued_ns: 10,
    };

    /// Known topics are found by their bytes without a UTF-8 check, yet a record whose topic is not UTF-8 is still
    /// refused by both workers, whether its bad byte is in the instrument or in the kind letter of a known one,
    /// and nothing of it is counted or applied.
    #[test]
    fn a_topic_that_is_not_utf8_is_refused_even_when_its_instrument_is_known() {
        let good = quote(1, 1_000, 100, Flags::NONE);
        let mut bad_instrument = quote(2, 2_000, 200, Flags::NONE);
        bad_instrument[4] = 0xff; // inside "XNAS"
        let mut bad_kind = quote(3, 3_000, 300, Flags::NONE);
        bad_kind[0] = 0xff; // the kind letter of the known "XNAS.AAPL"
        let (mut stats, mut book) = (Stats::new(), LastValueBook::new());
        let rec = Record::decode(&good).unwrap();
        stats.on_record(&rec, &D).unwrap();
        book.on_record(&rec, &D).unwrap();
        for bad in [&bad_instrument, &bad_kind] {
            let rec = Record::decode(bad).unwrap();
            assert_eq!(stats.on_record(&rec, &D), Err(DecodeError::TopicNotUtf8));
            assert_eq!(book.on_record(&rec, &D), Err(DecodeError::TopicNotUtf8));
        }
        let report = stats.report();
        assert_eq!(report.total(), 1);
        assert_eq!(report.topics.get("Q.XNAS.AAPL"), Some(&1));
        assert_eq!(book.len(), 1);
        assert_eq!(book.get("XNAS.AAPL").unwrap().bid_px, 100);
        // The same topic again is found by its bytes.
        let again = quote(4, 4_000, 400, Flags::NONE);
        stats
            .on_record(&Record::decode(&again).unwrap(), &D)
            .unwrap();
        book.on_record(&Record::decode(&again).unwrap(), &D)
            .unwrap();
        assert_eq!(stats.report().topics.get("Q.XNAS.AAPL"), Some(&2));
        assert_eq!(book.get("XNAS.AAPL").unwrap().bid_px, 400);
    }

    /// Guide topics are counted by their bytes (text or not) up to the bound; what does not fit (a new topic past
    /// the cap, a topic too long) is counted as overflow, also when merging reports pushes the sum past the cap.
    #[test]
    fn guide_topics_are_bounded_and_count_the_overflow() {
        let mut g = GuideTopics::default();
        for i in 0..GUIDE_TOPICS_MAX + 10 {
            g.count(format!("t{i}").as_bytes(), 3);
        }
        g.count(b"t0", 1);
        g.count(&[0xff, 0x00, 0x01], 0);
        g.count(&vec![b'x'; GUIDE_TOPIC_BYTES_MAX + 1], 0);
        assert_eq!(g.len(), GUIDE_TOPICS_MAX);
        assert_eq!(g.get(b"t0"), Some(2));
        assert_eq!(g.get(&[0xff, 0x00, 0x01]), None);
        assert_eq!(g.overflow(), 12);
        assert_eq!(g.messages(), GUIDE_TOPICS_MAX as u64 + 13);
        assert_eq!(g.body_bytes(), 3 * (GUIDE_TOPICS_MAX as u64 + 10) + 1);
        let mut other = GuideTopics::default();
        other.count(b"t1", 0);
        other.count(b"new", 0);
        let mut stats = Stats::new();
        stats.on_guide(b"w", b"", &D);
        let mut merged = stats.report();
        merged.merge(&StatsReport {
            guide: g.clone(),
            ..StatsReport::default()
        });
        assert_eq!(merged.guide.get(b"w"), Some(1));
        assert_eq!(merged.total(), 0, "Guide messages have no kind");
        g.merge(&other);
        assert_eq!(
            (g.get(b"t1"), g.get(b"new"), g.overflow()),
            (Some(2), None, 13)
        );
    }

    /// The name table finds every name it holds and no other, across growth and for every length class of its
    /// short-key compare (below 4, 4..8, 8..=16 with overlapping words, and longer), including names that share
    /// their first and last eight bytes or differ only in length.
    #[test]
    fn name_table_finds_exactly_the_names_it_holds() {
        let mut names: Vec<String> = Vec::new();
        for len in 0..40 {
            names.push("x".repeat(len));
            names.push(format!("{}y", "x".repeat(len)));
        }
        for i in 0..3_000 {
            names.push(format!("Q.XNAS.S{i}"));
            names.push(format!("T.XNYS.LONGER.SYMBOL.{i}.SUFFIX"));
        }
        // Same first and last eight bytes, different middle (longer than 16).
        names.push("ABCDEFGH-one-12345678".to_owned());
        names.push("ABCDEFGH-two-12345678".to_owned());
        let mut table = NameTable::<usize>::default();
        for (i, n) in names.iter().enumerate() {
            *table.get_or_insert_with(n.as_bytes(), || 0).unwrap() = i;
        }
        assert_eq!(table.len(), names.len());
        for (i, n) in names.iter().enumerate() {
            assert_eq!(table.get(n.as_bytes()), Some(&i), "{n}");
            // Found, not inserted again.
            assert_eq!(
                *table
                    .get_or_insert_with(n.as_bytes(), || usize::MAX)
                    .unwrap(),
                i
            );
        }
        assert_eq!(table.len(), names.len());
        for absent in [
            "Q.XNAS.S3000",
            "Q.XNAS.S",
            "ABCDEFGH-six-12345678",
            "xxxz",
            "z",
        ] {
            assert_eq!(table.get(absent.as_bytes()), None, "{absent}");
        }
        assert_eq!(
            table.get_or_insert_with(b"bad\xff", || 0),
            Err(DecodeError::TopicNotUtf8)
        );
        assert_eq!(table.len(), names.len());
        let mut seen: Vec<&str> = table.iter().map(|(k, _)| k).collect();
        seen.sort_unstable();
        let mut want: Vec<&str> = names.iter().map(String::as_str).collect();
        want.sort_unstable();
        assert_eq!(seen, want);
    }

    /// A record whose payload does not decode (a bad enum byte) is counted as bad and adds no instrument to the
    /// book; the instrument is added by its first good value.
    #[test]
    fn a_bad_payload_adds_no_instrument() {
        let good = trade_77x5();
        let payload_at = good.len() - Record::decode(&good).unwrap().payload_bytes().len();
        // The first payload byte whose 0xff makes the payload undecodable is an enum byte.
        let bad = (payload_at..good.len())
            .map(|i| {
                let mut f = good.clone();
                f[i] = 0xff;
                f
            })
            .find(|f| Payload::decode(Kind::Trade, &f[payload_at..]).is_err())
            .expect("a trade has an enum byte");
        let mut book = LastValueBook::new();
        book.on_record(&Record::decode(&bad).unwrap(), &D).unwrap();
        assert_eq!(book.bad_payloads, 1);
        assert!(book.is_empty());
        book.on_record(&Record::decode(&good).unwrap(), &D).unwrap();
        assert_eq!(book.len(), 1);
        assert_eq!(book.get("XNAS.AAPL").unwrap().last_trade_px, 77);
    }

    #[test]
    fn cached_value_never_overwrites_a_newer_live_one() {
        let mut book = LastValueBook::new();
        let live = quote(10, 2_000, 105, Flags::NONE);
        let cached = quote(7, 1_000, 99, Flags::CACHED);
        book.on_message(&MessageRef::decode(&live).unwrap(), &D);
        book.on_message(&MessageRef::decode(&cached).unwrap(), &D);
        let e = book.get("XNAS.AAPL").unwrap();
        assert_eq!(e.bid_px, 105);
        assert_eq!(book.stale_ignored, 1);
        // A cached value that is genuinely newer (late joiner: nothing live yet) is applied.
        let mut fresh = LastValueBook::new();
        fresh.on_message(&MessageRef::decode(&cached).unwrap(), &D);
        assert_eq!(fresh.get("XNAS.AAPL").unwrap().bid_px, 99);
        fresh.on_message(&MessageRef::decode(&live).unwrap(), &D);
        assert_eq!(fresh.get("XNAS.AAPL").unwrap().bid_px, 105);
    }

    #[test]
    fn books_from_several_workers_merge_to_the_newest_value() {
        let mut a = LastValueBook::new();
        let mut b = LastValueBook::new();
        a.apply(&MessageRef::decode(&quote(2, 200, 50, Flags::NONE)).unwrap());
        b.apply(&MessageRef::decode(&quote(1, 100, 40, Flags::NONE)).unwrap());
        let trade = trade_77x5();
        b.apply(&MessageRef::decode(&trade).unwrap());
        b.merge(&a);
        let e = b.get("XNAS.AAPL").unwrap();
        assert_eq!((e.bid_px, e.last_trade_px, e.last_trade_size), (50, 77, 5));
        assert_eq!(b.len(), 1);
    }

    #[test]
    fn stats_count_per_kind_topic_and_prefix() {
        let mut stats = Stats::new();
        for (i, topic) in ["Q.XNAS.AAPL", "Q.XNAS.MSFT", "Q.XNYS.IBM"]
            .iter()
            .enumerate()
        {
            let header = Header::live(Kind::Quote, 1, i as u64 + 1, 1);
            let frame = encode_to_vec(topic, &header, &Quote::default().into()).unwrap();
            let d = Delivery {
                worker: 0,
                dequeued_ns: 1_000_000_000 * (i as u64 + 1),
            };
            stats.on_message(&MessageRef::decode(&frame).unwrap(), &d);
        }
        let mut report = Stats::new().report();
        report.merge(&stats.report());
        assert_eq!(report.count(Kind::Quote), 3);
        assert_eq!(report.total(), 3);
        assert_eq!(report.distinct_topics(), 3);
        assert_eq!(
            report.per_prefix(2),
            vec![("Q.XNAS".to_owned(), 2), ("Q.XNYS".to_owned(), 1)]
        );
        assert_eq!(report.span(), Duration::from_secs(2));
        assert!((report.rate(3) - 1.5).abs() < 1e-9);
        assert_eq!(topic_prefix("H.7", 2), "H.7");
    }
}
