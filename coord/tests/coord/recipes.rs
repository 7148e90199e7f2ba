//! Barriers, double barrier, two-phase commit, queues, membership, election and shard ownership on a real
//! ZooKeeper.

use crate::common;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use common::{connect, server};
use tickbox_coord::{
    Barrier, Decision, DoubleBarrier, Election, ElectionEvent, Group, Queue, ShardEvent, Shards,
    TxCoordinator, TxParticipant, Vote,
};

const T: Option<Duration> = Some(Duration::from_secs(15));

/// Five parties wait at a simple barrier; none passes before it is lowered; one arriving after it was lowered
/// passes at once.
#[test]
fn barrier_five_parties_one_late() {
    let Some(zk) = server("barrier") else { return };
    let c = connect(&zk);
    let b = Barrier::new(&c, "/test/barrier/b").unwrap();
    b.raise().unwrap();
    let lowered = Arc::new(AtomicBool::new(false));
    let passed = Arc::new(AtomicUsize::new(0));
    let waiters: Vec<_> = (0..4)
        .map(|_| {
            let c = connect(&zk);
            let (lowered, passed) = (lowered.clone(), passed.clone());
            std::thread::spawn(move || {
                let b = Barrier::new(&c, "/test/barrier/b").unwrap();
                b.wait(T).unwrap();
                assert!(lowered.load(Ordering::SeqCst), "passed a raised barrier");
                passed.fetch_add(1, Ordering::SeqCst);
            })
        })
        .collect();
    // A bounded wait raises Timeout while the barrier stands.
    assert!(matches!(
        b.wait(Some(Duration::from_millis(200))),
        Err(tickbox_coord::CoordError::Timeout(_))
    ));
    assert_eq!(passed.load(Ordering::SeqCst), 0);
    lowered.store(true, Ordering::SeqCst);
    b.lower().unwrap();
    for w in waiters {
        w.join().unwrap();
    }
    assert_eq!(passed.load(Ordering::SeqCst), 4);
    let late = connect(&zk);
    let t = Instant::now();
    Barrier::new(&late, "/test/barrier/b")
        .unwrap()
        .wait(T)
        .unwrap();
    assert!(t.elapsed() < Duration::from_secs(2));
}

/// Five parties at a double barrier, one joining late: nobody enters before all five joined, nobody leaves
/// before all five started leaving; the directory is clean afterwards (no party nodes, no ready flag).
#[test]
fn double_barrier_five_parties_one_late() {
    const N: usize = 5;
    let Some(zk) = server("double_barrier") else {
        return;
    };
    let joined = Arc::new(AtomicUsize::new(0));
    let entered = Arc::new(AtomicUsize::new(0));
    let leaving = Arc::new(AtomicUsize::new(0));
    let (late_go_tx, late_go_rx) = mpsc::channel::<()>();
    let late_go_rx = Arc::new(std::sync::Mutex::new(late_go_rx));
    let party = |i: usize| {
        let c = connect(&zk);
        let (joined, entered, leaving, late_go_rx) = (
            joined.clone(),
            entered.clone(),
            leaving.clone(),
            late_go_rx.clone(),
        );
        std::thread::spawn(move || {
            let b = DoubleBarrier::new(&c, "/test/dbarrier", N).unwrap();
            joined.fetch_add(1, Ordering::SeqCst);
            let inside = b.enter(format!("party-{i}").as_bytes(), T).unwrap();
            assert_eq!(
                joined.load(Ordering::SeqCst),
                N,
                "entered before all joined"
            );
            entered.fetch_add(1, Ordering::SeqCst);
            if i == N - 1 {
                // The late party also leaves late.
                late_go_rx
                    .lock()
                    .unwrap()
                    .recv_timeout(Duration::from_secs(15))
                    .unwrap();
            }
            leaving.fetch_add(1, Ordering::SeqCst);
            inside.leave(T).unwrap();
            assert_eq!(
                leaving.load(Ordering::SeqCst),
                N,
                "left before all started leaving"
            );
        })
    };
    let mut threads: Vec<_> = (0..N - 1).map(party).collect();
    let c = connect(&zk);
    let b = DoubleBarrier::new(&c, "/test/dbarrier", N).unwrap();
    tickbox_testkit::wait_for(
        "N - 1 parties in the barrier",
        Duration::from_secs(10),
        || b.state().unwrap().present >= N - 1,
    );
    assert_eq!(entered.load(Ordering::SeqCst), 0);
    assert!(!b.state().unwrap().ready);
    threads.push(party(N - 1));
    tickbox_testkit::wait_for("N - 1 parties leaving", Duration::from_secs(10), || {
        leaving.load(Ordering::SeqCst) >= N - 1
    });
    assert_eq!(entered.load(Ordering::SeqCst), N);
    late_go_tx.send(()).unwrap();
    for t in threads {
        t.join().unwrap();
    }
    let st = b.state().unwrap();
    assert_eq!((st.present, st.ready), (0, false));
}

/// Two-phase commit: all commit → commit; one votes abort → abort (seen by every participant); one never
/// votes → abort at the timeout.
#[test]
fn two_phase_commit_abort_vote_and_timeout() {
    let Some(zk) = server("two_phase_commit") else {
        return;
    };
    let c = connect(&zk);
    let run = |tx: &str, votes: Vec<Option<Vote>>, timeout: Duration| {
        let names: Vec<String> = (0..votes.len()).map(|i| format!("site{i}")).collect();
        let name_refs: Vec<&str> = names.iter().map(String::as_str).collect();
        let coordinator = TxCoordinator::begin(&c, tx, &name_refs, b"proposal").unwrap();
        let parts: Vec<_> = votes
            .into_iter()
            .zip(names.clone())
            .map(|(v, n)| {
                let pc = connect(&zk);
                let tx = tx.to_owned();
                std::thread::spawn(move || {
                    let p = TxParticipant::new(&pc, &tx, &n).unwrap();
                    assert_eq!(p.proposal(Duration::from_secs(5)).unwrap(), b"proposal");
                    if let Some(v) = v {
                        p.vote(v).unwrap();
                    }
                    p.outcome(Duration::from_secs(15)).unwrap()
                })
            })
            .collect();
        let outcome = coordinator.decide(timeout).unwrap();
        let seen: Vec<Decision> = parts.into_iter().map(|p| p.join().unwrap()).collect();
        assert!(
            seen.iter().all(|d| *d == outcome.decision),
            "participants saw {seen:?}, coordinator {outcome:?}"
        );
        outcome
    };
    let o = run(
        "/test/tx/all",
        vec![Some(Vote::Commit); 3],
        Duration::from_secs(10),
    );
    assert_eq!((o.decision, o.timed_out), (Decision::Commit, false));
    let t = Instant::now();
    let o = run(
        "/test/tx/abort",
        vec![Some(Vote::Commit), Some(Vote::Abort), Some(Vote::Commit)],
        Duration::from_secs(10),
    );
    assert_eq!((o.decision, o.timed_out), (Decision::Abort, false));
    assert!(
        t.elapsed() < Duration::from_secs(5),
        "an abort vote decides at once"
    );
    let t = Instant::now();
    let o = run(
        "/test/tx/timeout",
        vec![Some(Vote::Commit), None, Some(Vote::Commit)],
        Duration::from_millis(800),
    );
    assert_eq!((o.decision, o.timed_out), (Decision::Abort, true));
    assert_eq!(o.votes[1], ("site1".to_owned(), None));
    assert!(t.elapsed() >= Duration::from_millis(800));
}

/// FIFO queue and priority queue with two consumers: every item is taken once, lower priorities first.
#[test]
fn queue_and_priority_queue() {
    let Some(zk) = server("queue") else { return };
    let c = connect(&zk);
    let q = Queue::new(&c, "/test/queue").unwrap();
    assert_eq!(q.take(Some(Duration::from_millis(100))).unwrap(), None);
    for i in 0..5u8 {
        q.put(&[i]).unwrap();
    }
    q.put_with_priority(b"urgent", 1).unwrap();
    assert_eq!(q.len().unwrap(), 6);
    assert_eq!(q.take(T).unwrap().unwrap(), b"urgent");
    for i in 0..5u8 {
        assert_eq!(q.take(T).unwrap().unwrap(), vec![i]);
    }
    // A blocked consumer is woken by a put; two consumers share 50 items exactly once.
    let taken = Arc::new(std::sync::Mutex::new(Vec::new()));
    let consumers: Vec<_> = (0..2)
        .map(|_| {
            let cc = connect(&zk);
            let taken = taken.clone();
            std::thread::spawn(move || {
                let q = Queue::new(&cc, "/test/queue").unwrap();
                while let Some(item) = q.take(Some(Duration::from_millis(1500))).unwrap() {
                    taken.lock().unwrap().push(item[0]);
                }
            })
        })
        .collect();
    for i in 0..50u8 {
        q.put(&[i]).unwrap();
    }
    for cons in consumers {
        cons.join().unwrap();
    }
    let mut got = taken.lock().unwrap().clone();
    got.sort();
    assert_eq!(got, (0..50u8).collect::<Vec<_>>());
}

/// Membership: members appear, a watcher sees changes, a member whose session closes disappears.
#[test]
fn group_membership() {
    let Some(zk) = server("membership") else {
        return;
    };
    let c = connect(&zk);
    let g = Group::new(&c, "/test/group").unwrap();
    let a = g.join("a", b"host-a").unwrap();
    assert!(a.is_held());
    let other = connect(&zk);
    let b = Group::new(&other, "/test/group")
        .unwrap()
        .join("b", b"host-b")
        .unwrap();
    assert_eq!(g.members().unwrap(), vec!["a", "b"]);
    // Same name from another session is refused.
    assert!(matches!(
        Group::new(&other, "/test/group").unwrap().join("a", b""),
        Err(tickbox_coord::CoordError::MemberExists(_))
    ));
    let known = g.members().unwrap();
    drop(b);
    drop(other); // closes that session
    let now = g.wait_change(&known, Duration::from_secs(5)).unwrap();
    assert_eq!(now, vec!["a"]);
    drop(a);
    assert!(g.members().unwrap().is_empty());
}

/// Election: one leader at a time, the next candidate (and only it) takes over when the leader resigns or its
/// session closes, tokens strictly increase.
#[test]
fn election_succession() {
    let Some(zk) = server("election") else { return };
    let sessions: Vec<_> = (0..3).map(|_| connect(&zk)).collect();
    let candidates: Vec<_> = sessions
        .iter()
        .enumerate()
        .map(|(i, c)| {
            Election::new(c, "/test/elect")
                .unwrap()
                .campaign(format!("cand-{i}").as_bytes())
                .unwrap()
        })
        .collect();
    let t0 = candidates[0].wait_elected(Duration::from_secs(5)).unwrap();
    assert!(candidates[0].is_leader());
    assert!(!candidates[1].is_leader() && !candidates[2].is_leader());
    let (_, id) = Election::new(&sessions[1], "/test/elect")
        .unwrap()
        .leader()
        .unwrap()
        .unwrap();
    assert_eq!(id, b"cand-0");
    let mut it = candidates.into_iter();
    let first = it.next().unwrap();
    first.resign().unwrap();
    let second = it.next().unwrap();
    let t1 = second.wait_elected(Duration::from_secs(5)).unwrap();
    assert!(t1 > t0);
    let third = it.next().unwrap();
    assert!(!third.is_leader());
    assert!(
        third.events().try_recv().is_err(),
        "a follower behind the new leader was woken"
    );
    drop(second);
    let t2 = third.wait_elected(Duration::from_secs(5)).unwrap();
    assert!(t2 > t1);
}

/// Election under connection loss: the server is restarted twice; the leader is suspended then resumed (same
/// session), no other candidate is ever elected meanwhile, and at no sampled instant are two leaders.
#[test]
fn election_no_two_leaders_across_server_restart() {
    let Some(mut zk) = server("election_connection_loss") else {
        return;
    };
    // The longest session the test server allows, so that a slow JVM restart on a loaded machine stays
    // well inside it (the client itself gives up after 1.4 × the timeout).
    let sessions: Vec<_> = (0..3)
        .map(|_| common::connect_timeout(&zk, common::LONG_SESSION))
        .collect();
    let candidates: Arc<Vec<_>> = Arc::new(
        sessions
            .iter()
            .map(|c| {
                Election::new(c, "/test/elect-restart")
                    .unwrap()
                    .campaign(b"x")
                    .unwrap()
            })
            .collect(),
    );
    candidates[0].wait_elected(Duration::from_secs(5)).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let sampler = {
        let (candidates, stop) = (candidates.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut samples = 0u64;
            while !stop.load(Ordering::SeqCst) {
                let leaders = candidates.iter().filter(|c| c.is_leader()).count();
                assert!(leaders <= 1, "{leaders} leaders at once");
                samples += 1;
                std::thread::yield_now();
            }
            samples
        })
    };
    for _ in 0..2 {
        let t = Instant::now();
        zk.restart().unwrap();
        eprintln!("server restarted in {:?}", t.elapsed());
        // The leader goes Suspended then Resumed.
        let mut seen = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(10);
        while !seen.contains(&ElectionEvent::Resumed) {
            let left = deadline.saturating_duration_since(Instant::now());
            seen.push(
                candidates[0]
                    .events()
                    .recv_timeout(left)
                    .expect("leader resumes after the restart"),
            );
        }
        assert!(seen.contains(&ElectionEvent::Suspended), "{seen:?}");
        assert!(candidates[0].is_leader());
    }
    stop.store(true, Ordering::SeqCst);
    assert!(sampler.join().unwrap() > 0);
    for c in &candidates[1..] {
        let ev = c.events().try_recv();
        assert!(ev.is_err(), "a follower was told {ev:?} during the restart");
    }
}

/// Shard ownership: two members share four shards two and two; when one member's session closes, the survivor
/// owns all four; tokens of the moved shards increase.
#[test]
fn shards_balance_and_move_on_member_loss() {
    let Some(zk) = server("shards") else { return };
    let (ca, cb) = (connect(&zk), connect(&zk));
    let a = Shards::new(&ca, "/test/shards", 4)
        .unwrap()
        .join("a")
        .unwrap();
    // A alone owns all four.
    let mut a_owned = std::collections::BTreeMap::new();
    let collect = |m: &tickbox_coord::ShardMember,
                   owned: &mut std::collections::BTreeMap<u32, u64>,
                   want: usize| {
        let deadline = Instant::now() + Duration::from_secs(10);
        while owned.len() != want || m.owned() != want {
            let left = deadline.saturating_duration_since(Instant::now());
            match m.events().recv_timeout(left.max(Duration::from_millis(1))) {
                Ok(ShardEvent::Acquired { shard, token }) => {
                    owned.insert(shard, token);
                }
                Ok(ShardEvent::Lost { shard, .. }) => {
                    owned.remove(&shard);
                }
                Ok(_) => {}
                Err(_) => panic!("owned {owned:?}, wanted {want}"),
            }
        }
    };
    collect(&a, &mut a_owned, 4);
    let b = Shards::new(&cb, "/test/shards", 4)
        .unwrap()
        .join("b")
        .unwrap();
    let mut b_owned = std::collections::BTreeMap::new();
    collect(&b, &mut b_owned, 2);
    collect(&a, &mut a_owned, 2);
    assert!(
        a_owned.keys().all(|k| !b_owned.contains_key(k)),
        "a {a_owned:?} b {b_owned:?}"
    );
    let owners = Shards::new(&ca, "/test/shards", 4)
        .unwrap()
        .owners()
        .unwrap();
    assert!(owners.values().all(|o| o.is_some()));
    drop(b);
    drop(cb);
    let before = a_owned.clone();
    collect(&a, &mut a_owned, 4);
    for (shard, token) in &a_owned {
        if !before.contains_key(shard) {
            assert!(
                *token > b_owned[shard],
                "shard {shard}: token {token} after {}",
                b_owned[shard]
            );
        }
    }
}

/// A leader whose session expires is told `Suspended` then `Lost(SessionExpired)` and never keeps believing it
/// leads; once the server is back the candidate stands again on a new session by itself (`Rejoined`, saying
/// it was the leader) and, alone, leads again with a greater token.
#[test]
fn leader_told_lost_on_session_expiry_and_stands_again() {
    let Some(mut zk) = server("leader_expiry") else {
        return;
    };
    let c = common::connect_timeout(&zk, Duration::from_secs(1));
    let cand = Election::new(&c, "/test/elect-expiry")
        .unwrap()
        .campaign(b"a")
        .unwrap();
    let t0 = cand.wait_elected(Duration::from_secs(5)).unwrap();
    zk.stop();
    let ev = |timeout| cand.events().recv_timeout(timeout).unwrap();
    assert_eq!(ev(Duration::from_secs(5)), ElectionEvent::Suspended);
    assert!(!cand.is_leader());
    assert_eq!(
        ev(Duration::from_secs(10)),
        ElectionEvent::Lost(tickbox_coord::LostReason::SessionExpired)
    );
    assert!(!cand.is_leader());
    let old_node = cand.path();
    zk.restart().unwrap();
    match ev(Duration::from_secs(10)) {
        ElectionEvent::Rejoined { was_leader, .. } => assert_eq!(was_leader, Some(t0)),
        other => panic!("{other:?}"),
    }
    assert_ne!(cand.path(), old_node);
    assert_eq!(c.generation(), 1);
    // The expired session's node was deleted, so the candidate does not wait for the server to expire it.
    let t1 = cand.wait_elected(Duration::from_secs(2)).unwrap();
    assert!(t1 > t0);
    assert!(cand.is_leader());
}
