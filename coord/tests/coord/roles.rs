//! The pieces tickbox's commands build on: a start barrier that honours a stop flag, a standing whose successor
//! learns where the previous leader stopped (and whose writes are fenced), and `inspect` showing a sharded
//! group's owners.

use crate::common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{connect, server};
use tickbox_coord::{
    inspect, CoordError, DoubleBarrier, HandoverLog, RecipeState, Shards, Standing, StandingEvent,
    StartBarrier,
};

#[test]
fn start_barrier_opens_for_all_and_a_stop_flag_interrupts_a_waiter() {
    let Some(zk) = server("start_barrier") else {
        return;
    };
    let (a, b) = (connect(&zk), connect(&zk));
    let never = AtomicBool::new(false);
    // Interrupted: the waiter gives up when the flag is set, and leaves no node behind.
    let stop = Arc::new(AtomicBool::new(false));
    let waiter = {
        let (a, stop) = (a.clone(), stop.clone());
        std::thread::spawn(move || {
            StartBarrier::enter(&a, "/r/start", 1, "replay", Duration::from_secs(10), &stop)
        })
    };
    let db = DoubleBarrier::new(&b, "/r/start", 2).unwrap();
    tickbox_testkit::wait_for("the waiter to enter", Duration::from_secs(5), || {
        db.state().unwrap().present == 1
    });
    let set = Instant::now();
    stop.store(true, Ordering::SeqCst);
    let r = waiter.join().unwrap();
    assert!(matches!(r, Err(CoordError::Interrupted)), "{r:?}");
    assert!(
        set.elapsed() < Duration::from_secs(1),
        "{:?}",
        set.elapsed()
    );
    assert_eq!(db.state().unwrap().present, 0);

    // Both parties: each enters once the other is in, and leave returns once both left.
    let other = {
        let b = b.clone();
        std::thread::spawn(move || {
            let never = AtomicBool::new(false);
            let s = StartBarrier::enter(&b, "/r/start", 1, "sub", Duration::from_secs(10), &never)
                .unwrap();
            s.leave(Duration::from_secs(10), &never).unwrap()
        })
    };
    let s =
        StartBarrier::enter(&a, "/r/start", 1, "replay", Duration::from_secs(10), &never).unwrap();
    assert!(s.leave(Duration::from_secs(10), &never).unwrap());
    assert!(other.join().unwrap());
    let st = db.state().unwrap();
    assert_eq!((st.present, st.ready), (0, false), "{st:?}");
}

#[test]
fn standing_hands_the_last_progress_to_the_next_leader_and_fences_the_old_one() {
    let Some(zk) = server("standing") else {
        return;
    };
    let (ca, cb) = (connect(&zk), connect(&zk));
    let mut a = Standing::campaign(&ca, "/r/rec", "rec-a").unwrap();
    let first = match a.wait(Duration::from_secs(5)).unwrap() {
        Some(StandingEvent::Elected(h)) => h,
        other => panic!("{other:?}"),
    };
    assert_eq!(first.previous, None);
    assert!(a.report(&serde_json::json!({"last": 41})).unwrap());
    assert!(a.report(&serde_json::json!({"last": 42})).unwrap());
    let mut b = Standing::campaign(&cb, "/r/rec", "rec-b").unwrap();
    assert!(
        b.wait(Duration::from_millis(300)).unwrap().is_none(),
        "b leads behind a"
    );
    assert!(
        !b.report(&serde_json::json!({"last": 0})).unwrap(),
        "a follower may not report"
    );
    a.resign().unwrap();
    let h = match b.wait(Duration::from_secs(5)).unwrap() {
        Some(StandingEvent::Elected(h)) => h,
        other => panic!("{other:?}"),
    };
    assert!(h.token > first.token);
    let prev = h.previous.clone().unwrap();
    assert_eq!((prev.token, prev.id.as_str()), (first.token, "rec-a"));
    assert_eq!(prev.progress["last"], 42);
    assert!(
        h.line().starts_with("became leader of /r/rec (token "),
        "{}",
        h.line()
    );
    assert!(b.report(&serde_json::json!({"last": 43})).unwrap());

    // A deposed leader that has not noticed (its standing still believes it leads): its write is refused
    // because a greater token owns the node.
    let cc = connect(&zk);
    let mut c = Standing::campaign(&cc, "/r/rec2", "rec-c").unwrap();
    assert!(matches!(
        c.wait(Duration::from_secs(5)).unwrap(),
        Some(StandingEvent::Elected(_))
    ));
    assert!(c.report(&serde_json::json!({"n": 1})).unwrap());
    cc.set(
        "/r/rec2/progress",
        serde_json::json!({"token": u64::MAX, "id": "newer", "progress": null})
            .to_string()
            .as_bytes(),
    )
    .unwrap();
    assert!(!c.report(&serde_json::json!({"n": 2})).unwrap());
    let (token, id, _) = tickbox_coord::last_progress(&cc, "/r/rec2")
        .unwrap()
        .unwrap();
    assert_eq!((token, id.as_str()), (u64::MAX, "newer"));

    let dir = tempfile::tempdir().unwrap();
    let log = HandoverLog::beside(&dir.path().join("journal"));
    assert!(log.read().unwrap().is_empty());
    log.append(&first.to_json()).unwrap();
    log.append(&h.to_json()).unwrap();
    let back = log.read().unwrap();
    assert_eq!(back.len(), 2);
    assert_eq!(back[1]["previous"]["token"], first.token);
    assert!(log
        .path()
        .to_str()
        .unwrap()
        .ends_with("journal.leadership.jsonl"));
}

#[test]
fn inspect_shows_a_sharded_group_with_its_owners() {
    let Some(zk) = server("inspect_shards") else {
        return;
    };
    let c = connect(&zk);
    let m = Shards::new(&c, "/r/group", 3)
        .unwrap()
        .join("only")
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    while m.owned() < 3 {
        assert!(Instant::now() < deadline, "owned {}", m.owned());
        let _ = m.events().recv_timeout(Duration::from_millis(50));
    }
    let states = inspect(&c, "/r").unwrap();
    let s = states
        .iter()
        .find(|s| matches!(s, RecipeState::Shards { .. }))
        .unwrap_or_else(|| panic!("{states:?}"));
    match s {
        RecipeState::Shards {
            path,
            members,
            owners,
        } => {
            assert_eq!(path, "/r/group");
            assert_eq!(members, &["only".to_owned()]);
            assert_eq!(owners.len(), 3);
            assert!(owners
                .iter()
                .all(|(_, o)| o.as_ref().is_some_and(|(m, _)| m == "only")));
        }
        _ => unreachable!(),
    }
    assert!(s
        .line()
        .starts_with("/r/group\tshards\tmembers=only owners=0:only/"));
}
