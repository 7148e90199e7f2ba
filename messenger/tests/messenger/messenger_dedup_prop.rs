//! Property tests: the constant-memory duplicate filter answers exactly like a plain HashSet, and two messenger
//! engines exchanging messages through a lossy, duplicating, reordering network run each handler exactly once.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use proptest::prelude::*;
use tickbox_messenger::{MessengerConfig, MessengerEngine, MsgAction, Route, SeenSet};

proptest! {
    #[test]
    fn seen_set_matches_hash_set(ids in prop::collection::vec(1u64..400, 0..600)) {
        let mut seen = SeenSet::new(1024);
        let mut plain = HashSet::new();
        for id in ids {
            prop_assert_eq!(seen.insert(id), plain.insert(id), "id {}", id);
        }
    }

    #[test]
    fn seen_set_mostly_in_order_stays_small(jitter in prop::collection::vec(0u64..8, 1..2000)) {
        // Every id 1..=n arrives once, each displaced by fewer than 8 places, plus a duplicate of each.
        let mut order: Vec<(u64, u64)> = jitter.iter().enumerate().map(|(i, j)| (i as u64 + j, i as u64 + 1)).collect();
        order.sort_unstable();
        let mut seen = SeenSet::new(1024);
        let mut plain = HashSet::new();
        for (_, id) in order {
            prop_assert_eq!(seen.insert(id), plain.insert(id));
            prop_assert!(!seen.insert(id));
            prop_assert!(seen.unseen_len() <= 16, "memory bounded by the reordering distance");
        }
        prop_assert_eq!(seen.unseen_len(), 0);
    }

    #[test]
    fn engines_deliver_exactly_once_over_a_bad_network(
        n in 1usize..40,
        faults in prop::collection::vec((0u8..10, 0u8..10, 0usize..4), 64..256),
    ) {
        let t0 = Instant::now();
        let cfg = MessengerConfig { retry: Duration::from_millis(10).into(), ..Default::default() };
        let mut a = MessengerEngine::new([1; 16], cfg.clone());
        let mut b = MessengerEngine::new([2; 16], cfg);
        let to_b = Route::Dest("b".into());
        let to_a = Route::Peer { listener: 0, identity: b"a".to_vec() };
        for i in 0..n {
            a.send(t0, to_b.clone(), 0, 1 + i as u64, vec![(i as u32).to_be_bytes().to_vec()]);
        }
        // In-flight messages: (to_b?, frames). Faults pick drop / duplicate / reorder per transmission.
        let mut wire: Vec<(bool, Vec<Vec<u8>>)> = Vec::new();
        let mut handled: HashMap<u32, u32> = HashMap::new();
        let mut replies: HashMap<u64, u32> = HashMap::new();
        let mut k = 0usize;
        let mut t = t0;
        for _round in 0..400 {
            for (engine, is_a) in [(&mut a, true), (&mut b, false)] {
                engine.handle_timeout(t);
                while let Some(act) = engine.poll_output() {
                    match act {
                        MsgAction::Transmit { frames, .. } => {
                            let (drop, dup, pos) = faults[k % faults.len()];
                            k += 1;
                            if drop < 3 { continue; }
                            let copies = if dup < 3 { 2 } else { 1 };
                            for _ in 0..copies {
                                let at = wire.len().saturating_sub(pos);
                                wire.insert(at, (is_a, frames.clone()));
                            }
                        }
                        MsgAction::Deliver { callback, reply_callback, body, .. } => {
                            if is_a {
                                *replies.entry(callback).or_default() += 1;
                            } else {
                                let v = u32::from_be_bytes(body[0].clone().try_into().unwrap());
                                *handled.entry(v).or_default() += 1;
                                // B's handler answers: the reply is sent once this drain ends (see REPLY below).
                                wire.push((false, vec![b"REPLY".to_vec(), reply_callback.to_be_bytes().to_vec()]));
                            }
                        }
                        MsgAction::GaveUp { .. } => prop_assert!(false, "no limit configured"),
                    }
                }
            }
            let batch = std::mem::take(&mut wire);
            for (from_a, frames) in batch {
                if frames[0] == b"REPLY" {
                    let cb = u64::from_be_bytes(frames[1].clone().try_into().unwrap());
                    b.send(t, to_a.clone(), cb, 0, vec![b"ok".to_vec()]);
                } else if from_a {
                    b.handle_input(to_a.clone(), frames);
                } else {
                    a.handle_input(to_b.clone(), frames);
                }
            }
            t += Duration::from_millis(5);
            if handled.len() == n && replies.len() == n && a.pending() == 0 && b.pending() == 0 && wire.is_empty() {
                break;
            }
        }
        prop_assert_eq!(handled.len(), n);
        prop_assert!(handled.values().all(|&c| c == 1));
        prop_assert_eq!(replies.len(), n);
        prop_assert!(replies.values().all(|&c| c == 1));
    }
}
