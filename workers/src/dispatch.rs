//! Which worker gets a message: the per-symbol dispatch rule shared by every shard.

use serde::{Deserialize, Serialize};
use tickbox_wire::{shard_key_of_topic, stable_hash};

/// How shards hand messages to workers (`dispatch` in `[subscriber]`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Dispatch {
    /// One worker per symbol key, in order (see [`crate::Worker`]).
    #[default]
    ByTopic,
    /// Workers take turns; no per-symbol order.
    RoundRobin,
}

impl Dispatch {
    /// The config spelling (`by_topic`, `round_robin`), which [`str::parse`] reads back.
    pub fn as_str(self) -> &'static str {
        match self {
            Dispatch::ByTopic => "by_topic",
            Dispatch::RoundRobin => "round_robin",
        }
    }
}

impl std::fmt::Display for Dispatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for Dispatch {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "by_topic" => Ok(Dispatch::ByTopic),
            "round_robin" => Ok(Dispatch::RoundRobin),
            other => Err(format!(
                "dispatch must be by_topic or round_robin, not {other:?}"
            )),
        }
    }
}

/// The worker (of `workers`) that owns `shard_key`.
///
/// The feed shards symbols with `stable_hash(key) % shards`; using the same residue here would tie workers to
/// feed shards (with 2 feed shards and 2 workers, shard 0 would only ever feed worker 0). So the hash is first
/// put through a bijective 64-bit finaliser (murmur3's fmix64, which makes every output bit depend on every input
/// bit) and then mapped to `0..workers` by its high bits (multiply-shift), which are unrelated to the low residue.
#[inline]
pub fn worker_for_key(shard_key: &[u8], workers: usize) -> usize {
    let mut h = stable_hash(shard_key);
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    h ^= h >> 33;
    ((u128::from(h) * workers.max(1) as u128) >> 64) as usize
}

/// The worker (of `workers`) that owns `topic`'s symbol: quotes and trades of a symbol share one.
#[inline]
pub fn worker_for_topic(topic: &[u8], workers: usize) -> usize {
    worker_for_key(shard_key_of_topic(topic), workers)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tickbox_wire::shard_for;

    #[test]
    fn a_symbol_quotes_and_trades_share_a_worker_and_the_choice_is_pinned() {
        for sym in ["AAPL", "MSFT", "S0", "S999"] {
            let q = format!("Q.XNAS.{sym}");
            let t = format!("T.XNAS.{sym}");
            assert_eq!(
                worker_for_topic(q.as_bytes(), 3),
                worker_for_topic(t.as_bytes(), 3)
            );
        }
        // Changing the rule moves symbols between workers of running deployments: keep it fixed.
        let got: Vec<usize> = (0..8)
            .map(|i| worker_for_topic(format!("Q.XNAS.S{i}").as_bytes(), 4))
            .collect();
        assert_eq!(got, [1, 2, 3, 2, 0, 0, 0, 0], "dispatch rule changed");
        assert_eq!(worker_for_key(b"anything", 0), 0);
        assert_eq!(worker_for_key(b"anything", 1), 0);
    }

    #[test]
    fn every_feed_shard_feeds_every_worker_and_load_is_balanced() {
        // The trap: hashing like the feed's shard_for would map feed shard s only onto worker s.
        for (shards, workers) in [(2, 2), (3, 3), (2, 4), (4, 2)] {
            let mut matrix = vec![vec![0usize; workers]; shards];
            for i in 0..4_000 {
                let key = format!("XNAS.S{i}");
                matrix[shard_for(key.as_bytes(), shards)]
                    [worker_for_key(key.as_bytes(), workers)] += 1;
            }
            let per_cell = 4_000 / (shards * workers);
            for row in &matrix {
                for &n in row {
                    assert!(
                        n > per_cell / 2 && n < per_cell * 3 / 2,
                        "{shards} shards x {workers} workers unbalanced: {matrix:?}"
                    );
                }
            }
        }
    }

    #[test]
    fn parses_and_prints_both_modes() {
        for d in [Dispatch::ByTopic, Dispatch::RoundRobin] {
            assert_eq!(d.as_str().parse::<Dispatch>().unwrap(), d);
        }
        assert!("random".parse::<Dispatch>().is_err());
        assert_eq!(Dispatch::default(), Dispatch::ByTopic);
    }
}
