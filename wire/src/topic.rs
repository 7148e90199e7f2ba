//! Topics and sharding. Quotes and trades of one symbol must land on the same shard so their relative order is
//! kept, so the shard key is the topic without its kind letter (`XNAS.AAPL` for `Q.XNAS.AAPL`).

use crate::kind::Kind;

/// `K.VENUE.SYMBOL`, e.g. `Q.XNAS.AAPL`. Built once per symbol at start-up, not per message.
pub fn make_topic(kind: Kind, venue: &str, symbol: &str) -> String {
    let mut topic = String::with_capacity(2 + venue.len() + 1 + symbol.len());
    topic.push(kind.topic_letter());
    topic.push('.');
    topic.push_str(venue);
    topic.push('.');
    topic.push_str(symbol);
    topic
}

/// The heartbeat topic of a publisher, `H.<publisher id>`: every publisher's heartbeats go out on it.
pub fn heartbeat_topic(publisher_id: u32) -> String {
    format!("{}.{publisher_id}", Kind::Heartbeat.topic_letter())
}

/// The topic of a publisher's gap notices, `G.<publisher id>`.
pub fn gap_topic(publisher_id: u32) -> String {
    format!("{}.{publisher_id}", Kind::Gap.topic_letter())
}

/// The part of a topic that decides its shard: everything after the first `.` (the whole topic if none).
pub fn shard_key_of_topic(topic: &[u8]) -> &[u8] {
    match topic.iter().position(|&b| b == b'.') {
        Some(dot) => &topic[dot + 1..],
        None => topic,
    }
}

/// Two words that, with its length, determine a key of up to 16 bytes: for 8..=16 bytes the first and the last
/// eight (overlapping when shorter than 16), for 4..8 the first and the last four, below that the bytes. Tables
/// keyed by topics or symbols compare such keys as two integers instead of calling `memcmp`, and hash them from
/// the two words; a longer key needs its middle compared (and hashed) too.
#[inline]
pub fn key_words(bytes: &[u8]) -> (u64, u64) {
    let n = bytes.len();
    if n >= 8 {
        let first = u64::from_le_bytes(bytes[..8].try_into().unwrap_or([0; 8]));
        let last = u64::from_le_bytes(bytes[n - 8..].try_into().unwrap_or([0; 8]));
        (first, last)
    } else if n >= 4 {
        let first = u32::from_le_bytes(bytes[..4].try_into().unwrap_or([0; 4]));
        let last = u32::from_le_bytes(bytes[n - 4..].try_into().unwrap_or([0; 4]));
        (u64::from(first), u64::from(last))
    } else {
        let mut first = 0u64;
        for (i, &b) in bytes.iter().enumerate() {
            first |= u64::from(b) << (8 * i);
        }
        (first, 0)
    }
}

/// FNV-1a, 64-bit. Stable across processes, builds and Rust versions (unlike `DefaultHasher`), so every
/// process of a deployment agrees on which shard owns a symbol.
pub fn stable_hash(bytes: &[u8]) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        hash ^= u64::from(b);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    hash
}

/// Which of `shards` shards owns `shard_key`. `shards` of zero is treated as one.
pub fn shard_for(shard_key: &[u8], shards: usize) -> usize {
    (stable_hash(shard_key) % shards.max(1) as u64) as usize
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_publishers_own_topics_name_its_id() {
        assert_eq!(heartbeat_topic(9001), "H.9001");
        assert_eq!(gap_topic(7), "G.7");
    }

    /// With its length, the two words give back every byte of a key of up to 16 bytes, so comparing them is
    /// comparing the keys.
    #[test]
    fn key_words_determine_short_keys() {
        let text = b"Q.XNAS.AAPL.EXTRA";
        for len in 0..=16 {
            let key = &text[..len];
            let (first, last) = key_words(key);
            let mut back = vec![0u8; len];
            let (lo, hi) = if len >= 8 {
                (8, 8)
            } else if len >= 4 {
                (4, 4)
            } else {
                (len, 0)
            };
            for (i, b) in back.iter_mut().enumerate().take(lo) {
                *b = (first >> (8 * i)) as u8;
            }
            for k in 0..hi {
                back[len - hi + k] = (last >> (8 * k)) as u8;
            }
            assert_eq!(back, key, "length {len}");
        }
    }

    #[test]
    fn quote_and_trade_of_a_symbol_share_a_shard() {
        let q = make_topic(Kind::Quote, "XNAS", "AAPL");
        let t = make_topic(Kind::Trade, "XNAS", "AAPL");
        assert_eq!(q, "Q.XNAS.AAPL");
        assert_eq!(shard_key_of_topic(q.as_bytes()), b"XNAS.AAPL");
        assert_eq!(
            shard_for(shard_key_of_topic(q.as_bytes()), 7),
            shard_for(shard_key_of_topic(t.as_bytes()), 7)
        );
    }

    #[test]
    fn hash_is_pinned() {
        // Changing the hash re-shards every deployment; this value must never change.
        assert_eq!(stable_hash(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(stable_hash(b"a"), 0xaf63_dc4c_8601_ec8c);
    }

    #[test]
    fn shards_are_reasonably_balanced() {
        let mut counts = [0usize; 4];
        for i in 0..4000 {
            counts[shard_for(format!("XNAS.S{i:04}").as_bytes(), 4)] += 1;
        }
        for c in counts {
            assert!((800..1200).contains(&c), "{counts:?}");
        }
    }
}
