//! Topics and sharding. Quotes and trades of one symbol must land on the same shard so their relative order is
//! kept, so the shard key is the topic without its kind letter (`XNAS.AAPL` for `Q.XNAS.AAPL`).

use crate::header::Kind;

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

/// The part of a topic that decides its shard: everything after the first `.` (the whole topic if none).
pub fn shard_key_of_topic(topic: &[u8]) -> &[u8] {
    match topic.iter().position(|&b| b == b'.') {
        Some(dot) => &topic[dot + 1..],
        None => topic,
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
