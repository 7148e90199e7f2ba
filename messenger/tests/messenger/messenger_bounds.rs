//! Bounded duplicate-suppression and retry state: forged ids and forged senders cannot grow the receiver's
//! memory, legitimate traffic is still delivered exactly once, and everything refused is counted.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use proptest::prelude::*;
use tickbox_messenger::{MessengerConfig, MessengerEngine, MsgAction, Route, Seen, SeenSet};

fn msg(sender: [u8; 16], id: u64, body: &[u8]) -> Vec<Vec<u8>> {
    vec![
        b"TBM1".to_vec(),
        vec![0x01],
        sender.to_vec(),
        id.to_be_bytes().to_vec(),
        0u64.to_be_bytes().to_vec(),
        0u64.to_be_bytes().to_vec(),
        body.to_vec(),
    ]
}

fn forged(n: u64) -> [u8; 16] {
    let mut u = [0xEE; 16];
    u[..8].copy_from_slice(&n.to_be_bytes());
    u
}

proptest! {
    /// The window answers exactly as documented: stale at or below `max - window`, otherwise exact, whatever ids
    /// arrive (small steps, reordering, huge forged jumps), in constant memory.
    #[test]
    fn seen_set_matches_its_documented_guarantee(
        window in 1usize..200,
        ids in prop::collection::vec(prop_oneof![
            8 => 0u64..600,
            1 => any::<u64>(),
            1 => (u64::MAX - 300)..=u64::MAX,
        ], 1..800),
    ) {
        let mut s = SeenSet::new(window);
        let bytes = s.heap_bytes();
        let (mut seen, mut max) = (HashSet::new(), 0u64);
        for id in ids {
            let expected = if id == 0 || id <= max.saturating_sub(window as u64) {
                Seen::Stale
            } else if seen.contains(&id) {
                Seen::Duplicate
            } else {
                Seen::New
            };
            prop_assert_eq!(s.check(id), expected, "id {} max {} window {}", id, max, window);
            seen.insert(id);
            max = max.max(id);
            let floor = max.saturating_sub(window as u64);
            let unseen = (max - floor) - seen.iter().filter(|&&x| x > floor).count() as u64;
            prop_assert_eq!(s.unseen_len() as u64, unseen);
            prop_assert_eq!(s.heap_bytes(), bytes);
        }
    }
}

#[test]
fn one_forged_huge_id_costs_a_window_not_its_value() {
    let t = Instant::now();
    let cfg = MessengerConfig {
        dedup_window: 4096,
        ..Default::default()
    };
    let mut b = MessengerEngine::new([2; 16], cfg);
    b.handle_timeout(t);
    let route = Route::Peer {
        listener: 0,
        identity: b"x".to_vec(),
    };
    let before = b.dedup_bytes();
    for id in [65_536, 1 << 40, u64::MAX] {
        b.handle_input(route.clone(), msg(forged(1), id, b"evil"));
        while b.poll_output().is_some() {}
        assert!(
            b.dedup_bytes() <= before + 4096 / 8 + 1024,
            "{} bytes after id {id}",
            b.dedup_bytes()
        );
    }
}

/// A legitimate sender A talks to B over a lossy, duplicating network while an attacker floods B with 10,000
/// forged sender ids, each claiming a huge message id.
#[test]
fn forged_ids_and_senders_keep_memory_bounded_and_legitimate_messages_exactly_once() {
    const MAX_SENDERS: usize = 8;
    const WINDOW: usize = 1024;
    let t0 = Instant::now();
    let cfg = MessengerConfig {
        retry: Duration::from_millis(10).into(),
        dedup_window: WINDOW,
        max_senders: MAX_SENDERS,
        sender_idle: Duration::from_secs(60).into(),
        ..Default::default()
    };
    let mut a = MessengerEngine::new([1; 16], cfg.clone());
    let mut b = MessengerEngine::new([2; 16], cfg);
    let to_b = Route::Dest("b".into());
    let from_a = Route::Peer {
        listener: 0,
        identity: b"a".to_vec(),
    };
    let evil = Route::Peer {
        listener: 0,
        identity: b"evil".to_vec(),
    };
    const N: u32 = 300;
    let mut t = t0;
    a.handle_timeout(t);
    b.handle_timeout(t);
    for i in 0..N {
        a.send(t, to_b.clone(), 0, 0, vec![i.to_be_bytes().to_vec()]);
    }
    // Deterministic faults: every 3rd transmission dropped, every 4th duplicated.
    let mut k = 0u64;
    let mut handled: HashMap<u32, u32> = HashMap::new();
    let mut forged_n = 0u64;
    let mut peak_bytes = 0usize;
    let mut forged_delivered = 0u64;
    for _round in 0..400 {
        let mut to_b_frames = Vec::new();
        let mut to_a_frames = Vec::new();
        a.handle_timeout(t);
        while let Some(act) = a.poll_output() {
            if let MsgAction::Transmit { frames, .. } = act {
                k += 1;
                if k.is_multiple_of(3) {
                    continue;
                }
                let copies = if k.is_multiple_of(4) { 2 } else { 1 };
                for _ in 0..copies {
                    to_b_frames.push(frames.clone());
                }
            }
        }
        for f in to_b_frames {
            b.handle_input(from_a.clone(), f);
        }
        // The attack, once A is known to B: 1,000 new forged senders per round, with huge ids. (A sender that first
        // shows up while the table is full of fresh senders is refused until some fall idle: see the end.)
        for _ in 0..1_000 {
            forged_n += 1;
            b.handle_input(
                evil.clone(),
                msg(forged(forged_n), 65_536 + forged_n * 1_000_003, b"evil"),
            );
        }
        b.handle_timeout(t);
        while let Some(act) = b.poll_output() {
            match act {
                MsgAction::Transmit { route, frames } => {
                    if route == from_a {
                        k += 1;
                        if !k.is_multiple_of(3) {
                            to_a_frames.push(frames);
                        }
                    }
                }
                MsgAction::Deliver { route, body, .. } => {
                    if route == from_a {
                        let v = u32::from_be_bytes(body[0].clone().try_into().unwrap());
                        *handled.entry(v).or_default() += 1;
                    } else {
                        forged_delivered += 1;
                    }
                }
                MsgAction::GaveUp { .. } => panic!("no limit configured"),
            }
        }
        for f in to_a_frames {
            a.handle_input(to_b.clone(), f);
        }
        peak_bytes = peak_bytes.max(b.dedup_bytes());
        assert!(b.senders() <= MAX_SENDERS);
        t += Duration::from_millis(5);
        if handled.len() == N as usize && a.pending() == 0 && forged_n >= 10_000 {
            break;
        }
    }
    assert_eq!(
        handled.len(),
        N as usize,
        "every legitimate message delivered"
    );
    assert!(handled.values().all(|&c| c == 1), "and each exactly once");
    assert_eq!(a.pending(), 0);
    // Bitmaps of at most MAX_SENDERS windows, plus the table itself.
    let bound = MAX_SENDERS * (WINDOW / 8) + 4096;
    assert!(
        peak_bytes <= bound,
        "dedup state peaked at {peak_bytes} bytes (bound {bound})"
    );
    assert!(forged_n >= 10_000);
    assert_eq!(
        forged_delivered + b.stats.senders_refused,
        forged_n,
        "every forged message is either delivered (a sender slot was free) or counted as refused"
    );
    assert!(forged_delivered < MAX_SENDERS as u64);
    assert_eq!(b.stats.senders_evicted, 0, "nobody was idle long enough");

    // A newcomer while every slot was heard within `sender_idle` is refused unacknowledged (it will retry)...
    let refused = b.stats.senders_refused;
    b.handle_input(evil.clone(), msg(forged(u64::MAX), 1, b"late"));
    assert_eq!(b.stats.senders_refused, refused + 1);
    assert!(b.poll_output().is_none(), "no ACK, no delivery");
    // ...and gets in once the least recently heard sender has been silent that long, evicting it.
    b.handle_timeout(t + Duration::from_secs(61));
    b.handle_input(evil.clone(), msg(forged(u64::MAX), 1, b"late"));
    assert_eq!(b.stats.senders_evicted, 1);
    assert!(matches!(b.poll_output(), Some(MsgAction::Transmit { .. })));
    assert!(matches!(b.poll_output(), Some(MsgAction::Deliver { .. })));
    assert!(b.senders() <= MAX_SENDERS);
}

#[test]
fn pending_is_bounded_in_count_and_bytes_and_refusals_are_give_ups() {
    let t = Instant::now();
    let cfg = MessengerConfig {
        max_pending: 3,
        max_pending_bytes: tickbox_units::ByteSize(10_000),
        ..Default::default()
    };
    let mut a = MessengerEngine::new([1; 16], cfg);
    let to = Route::Dest("b".into());
    for i in 0..3u64 {
        a.send(t, to.clone(), 0, 10 + i, vec![vec![0; 10]]);
    }
    while a.poll_output().is_some() {}
    let id = a.send(t, to.clone(), 0, 99, vec![vec![0; 10]]);
    assert_eq!(
        a.poll_output(),
        Some(MsgAction::GaveUp {
            msg_id: id,
            callback: 99
        })
    );
    assert_eq!((a.pending(), a.stats.pending_refused), (3, 1));

    let mut a = MessengerEngine::new(
        [1; 16],
        MessengerConfig {
            max_pending_bytes: tickbox_units::ByteSize(10_000),
            ..Default::default()
        },
    );
    a.send(t, to.clone(), 0, 1, vec![vec![0; 6_000]]);
    let big = a.send(t, to.clone(), 0, 2, vec![vec![0; 6_000]]);
    let acts: Vec<_> = std::iter::from_fn(|| a.poll_output()).collect();
    assert!(acts.contains(&MsgAction::GaveUp {
        msg_id: big,
        callback: 2
    }));
    assert_eq!((a.pending(), a.stats.pending_refused), (1, 1));
    assert!(a.pending_bytes() <= 10_000);
}
