//! A flood of distinct publisher ids (forged headers) must neither slow nor corrupt the accounting of the real
//! publishers: the table stays at its bound, every refused message is counted as untracked, and the ledgers of
//! tracked publishers stay exact.

use proptest::prelude::*;
use tickbox_wire::sequence::{SequenceEvent, SequenceTracker, DEFAULT_MAX_PLAUSIBLE_JUMP};
use tickbox_wire::{Header, Kind};

const FLOOD: u32 = 100_000;
const BOUND: usize = 1_000;
const REAL: [u32; 3] = [7, 8, 9];

fn data(publisher: u32, seq: u64) -> Header {
    Header::live(Kind::Quote, publisher, seq, 1).with_session(42)
}

/// Runs the flood, then `traffic` (per real publisher: the sequences it delivers, increasing) interleaved with
/// one more message from every fifth forged id; checks every count against what was sent.
fn flood_then_traffic(traffic: &[Vec<u64>; 3]) -> Result<(), TestCaseError> {
    let mut t = SequenceTracker::with_bounds(BOUND, DEFAULT_MAX_PLAUSIBLE_JUMP);
    for &p in &REAL {
        let first = matches!(t.on_header(&data(p, 1), None), SequenceEvent::First { .. });
        prop_assert!(first, "publisher {} is tracked", p);
    }
    let mut untracked = 0u64;
    let mut fake_received = 0u64;
    for i in 0..FLOOD {
        match t.on_header(&data(1_000_000 + i, 1), None) {
            SequenceEvent::First { .. } => fake_received += 1,
            SequenceEvent::Untracked { publisher } => {
                prop_assert_eq!(publisher, 1_000_000 + i);
                untracked += 1;
            }
            other => prop_assert!(false, "unexpected {:?}", other),
        }
    }
    prop_assert_eq!(t.publisher_count(), BOUND);
    prop_assert_eq!(untracked, u64::from(FLOOD) - (BOUND - REAL.len()) as u64);

    let longest = traffic.iter().map(Vec::len).max().unwrap_or(0);
    let mut fake = 0u32;
    for step in 0..longest {
        for (p, seqs) in REAL.iter().zip(traffic) {
            if let Some(&s) = seqs.get(step) {
                t.on_header(&data(*p, s), None);
            }
        }
        for _ in 0..5 {
            let id = 1_000_000 + fake % FLOOD;
            fake = fake.wrapping_add(5);
            match t.on_header(&data(id, 2), None) {
                SequenceEvent::Untracked { .. } => untracked += 1,
                SequenceEvent::InOrder => fake_received += 1,
                other => prop_assert!(false, "unexpected {:?}", other),
            }
        }
    }

    for (p, seqs) in REAL.iter().zip(traffic) {
        let l = t.ledger(*p).expect("real publishers are tracked");
        let last = seqs.last().copied().unwrap_or(1);
        prop_assert_eq!(l.received, 1 + seqs.len() as u64, "publisher {}", p);
        prop_assert_eq!(l.last_sequence, last);
        prop_assert_eq!(l.missing, last - 1 - seqs.len() as u64, "publisher {}", p);
        prop_assert_eq!(l.received + l.missing, last - l.first_sequence + 1);
        prop_assert_eq!((l.duplicates, l.anomalies, l.restarts), (0, 0, 0));
    }
    let totals = t.totals();
    prop_assert_eq!(totals.untracked, untracked);
    prop_assert_eq!(totals.publishers, BOUND as u64);
    let real_received: u64 = traffic.iter().map(|s| 1 + s.len() as u64).sum();
    prop_assert_eq!(totals.received, real_received + fake_received);
    Ok(())
}

/// Increasing sequences from 2 with random holes.
fn increasing() -> impl Strategy<Value = Vec<u64>> {
    prop::collection::vec(1u64..4, 0..300).prop_map(|steps| {
        let mut s = 1u64;
        steps
            .into_iter()
            .map(|d| {
                s += d;
                s
            })
            .collect()
    })
}

#[test]
fn flood_of_100k_ids_then_gap_free_traffic_is_exact() {
    let gap_free: Vec<u64> = (2..=500).collect();
    flood_then_traffic(&[gap_free.clone(), gap_free.clone(), gap_free]).unwrap();
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 8, ..ProptestConfig::default() })]
    #[test]
    fn flood_of_100k_ids_then_lossy_traffic_is_exact(a in increasing(), b in increasing(), c in increasing()) {
        flood_then_traffic(&[a, b, c])?;
    }
}
