//! Locks on a real ZooKeeper: mutual exclusion under contention, no herd, fencing tokens, shared and revocable
//! locks, and no two holders across a server restart (connection loss).

use crate::common;

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

use common::{connect, server};
use tickbox_coord::{HoldState, Lock, SharedLock};

/// 8 clients (8 sessions) × 200 acquisitions of one lock: the critical section is never entered twice at once,
/// every holder sees its lock `Held`, and tokens strictly increase from one holder to the next.
#[test]
fn mutual_exclusion_under_contention() {
    const CLIENTS: usize = 8;
    const ROUNDS: usize = 200;
    let Some(zk) = server("mutual_exclusion_under_contention") else {
        return;
    };
    let inside = Arc::new(AtomicUsize::new(0));
    let last_token = Arc::new(Mutex::new(None::<u64>));
    let total = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let threads: Vec<_> = (0..CLIENTS)
        .map(|_| {
            let c = connect(&zk);
            let (inside, last_token, total) = (inside.clone(), last_token.clone(), total.clone());
            std::thread::spawn(move || {
                let lock = Lock::new(&c, "/test/mutex").unwrap();
                for _ in 0..ROUNDS {
                    let g = lock.acquire(Some(Duration::from_secs(20))).unwrap();
                    assert_eq!(
                        inside.fetch_add(1, Ordering::SeqCst),
                        0,
                        "two holders at once"
                    );
                    assert!(g.is_held());
                    {
                        let mut last = last_token.lock().unwrap();
                        if let Some(prev) = *last {
                            assert!(g.token() > prev, "token {} after {}", g.token(), prev);
                        }
                        *last = Some(g.token());
                    }
                    total.fetch_add(1, Ordering::SeqCst);
                    assert_eq!(inside.fetch_sub(1, Ordering::SeqCst), 1);
                    g.release().unwrap();
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    assert_eq!(total.load(Ordering::SeqCst), CLIENTS * ROUNDS);
    eprintln!(
        "{} acquisitions by {CLIENTS} contending clients in {:?}",
        CLIENTS * ROUNDS,
        started.elapsed()
    );
}

/// Five waiters queue behind a holder; each release wakes exactly one of them (its successor), in FIFO order:
/// the watch notifications received over the whole run equal the number of releases.
#[test]
fn no_herd_each_release_wakes_exactly_one() {
    const WAITERS: usize = 5;
    let Some(zk) = server("no_herd") else { return };
    let c0 = connect(&zk);
    let lock0 = Lock::new(&c0, "/test/herd").unwrap();
    let first = lock0.acquire(None).unwrap();
    let (acq_tx, acq_rx) = mpsc::channel::<usize>();
    let mut release_txs = Vec::new();
    let mut handles = Vec::new();
    let mut locks = Vec::new();
    for i in 0..WAITERS {
        let c = connect(&zk);
        let lock = Lock::new(&c, "/test/herd").unwrap();
        locks.push((c.clone(), lock.clone()));
        let (rel_tx, rel_rx) = mpsc::channel::<()>();
        release_txs.push(rel_tx);
        let acq_tx = acq_tx.clone();
        handles.push(std::thread::spawn(move || {
            let g = lock.acquire(Some(Duration::from_secs(15))).unwrap();
            acq_tx.send(i).unwrap();
            rel_rx.recv_timeout(Duration::from_secs(15)).unwrap();
            g.release().unwrap();
        }));
        // Queue them in a known order: wait until this waiter's node is in the directory.
        let deadline = Instant::now() + Duration::from_secs(10);
        while c0.children("/test/herd").unwrap().len() < i + 2 {
            assert!(Instant::now() < deadline, "waiter {i} never queued");
            std::thread::yield_now();
        }
    }
    let total_wakeups = |locks: &[(tickbox_coord::Coord, Lock)]| -> u64 {
        locks
            .iter()
            .map(|(c, l)| {
                common::drain_notifications(c);
                l.wakeups()
            })
            .sum()
    };
    assert_eq!(
        total_wakeups(&locks),
        0,
        "a waiter woke while the holder held"
    );
    first.release().unwrap();
    for expected in 0..WAITERS {
        let who = acq_rx
            .recv_timeout(Duration::from_secs(10))
            .expect("next waiter acquires");
        assert_eq!(who, expected, "FIFO order");
        assert!(
            acq_rx.try_recv().is_err(),
            "two waiters acquired on one release"
        );
        // The successor was woken once; nobody else was (checked exactly at the end).
        release_txs[who].send(()).unwrap();
    }
    for h in handles {
        h.join().unwrap();
    }
    let per_waiter: Vec<u64> = locks.iter().map(|(_, l)| l.wakeups()).collect();
    assert_eq!(
        per_waiter,
        vec![1; WAITERS],
        "each waiter is woken exactly once (by its predecessor's release)"
    );
}

/// A shared lock: readers hold together, a writer waits for them and excludes later readers; revocation asks
/// the current holders to release.
#[test]
fn shared_lock_readers_writers_and_revocation() {
    let Some(zk) = server("shared_lock") else {
        return;
    };
    let (ca, cb, cc) = (connect(&zk), connect(&zk), connect(&zk));
    let la = SharedLock::new(&ca, "/test/rw").unwrap();
    let lb = SharedLock::new(&cb, "/test/rw").unwrap();
    let lc = SharedLock::new(&cc, "/test/rw").unwrap();
    let r1 = la.read(Some(Duration::from_secs(5))).unwrap();
    let r2 = lb.read(Some(Duration::from_secs(5))).unwrap();
    assert!(r1.is_held() && r2.is_held(), "two readers at once");
    // A writer cannot get in while readers hold.
    assert!(matches!(
        lc.write(Some(Duration::from_millis(300))),
        Err(tickbox_coord::CoordError::Timeout(_))
    ));
    let writer_in = Arc::new(AtomicBool::new(false));
    let w = {
        let (lc, writer_in) = (lc.clone(), writer_in.clone());
        std::thread::spawn(move || {
            let g = lc.write(Some(Duration::from_secs(10))).unwrap();
            writer_in.store(true, Ordering::SeqCst);
            g
        })
    };
    // Wait for the writer to queue, then revoke: both readers are asked to release.
    let deadline = Instant::now() + Duration::from_secs(5);
    while ca.children("/test/rw").unwrap().len() < 3 {
        assert!(Instant::now() < deadline);
        std::thread::yield_now();
    }
    assert_eq!(la.holders().unwrap().len(), 2);
    assert_eq!(la.revoke().unwrap(), 2);
    assert_eq!(
        r1.wait_change(HoldState::Held, Duration::from_secs(5)),
        HoldState::RevokeRequested
    );
    assert_eq!(
        r2.wait_change(HoldState::Held, Duration::from_secs(5)),
        HoldState::RevokeRequested
    );
    assert!(
        !writer_in.load(Ordering::SeqCst),
        "writer entered while readers held"
    );
    r1.release().unwrap();
    r2.release().unwrap();
    let wg = w.join().unwrap();
    assert!(wg.is_held());
    assert!(wg.token() > 1);
    // A reader queued behind the writer waits.
    assert!(matches!(
        la.read(Some(Duration::from_millis(300))),
        Err(tickbox_coord::CoordError::Timeout(_))
    ));
    wg.release().unwrap();
    la.read(Some(Duration::from_secs(5))).unwrap();
}

/// The lock holder is told when its session expires (here: the server is stopped for longer than the session
/// timeout) and never keeps believing it holds: `Suspended` as soon as the connection drops, `Lost` after.
///
/// The state is a latest-value channel, so the test must look while `Suspended` lasts: with a 1 s session, beside
/// two busy loops, the session had already expired on the client (its 1.4 s) when the test first looked, and it saw
/// `Lost` alone. The longest session the server allows leaves `Suspended` 7 s.
#[test]
fn holder_told_suspended_then_lost_on_expiry() {
    let Some(mut zk) = server("holder_told_on_expiry") else {
        return;
    };
    let c = common::connect_timeout(&zk, common::LONG_SESSION);
    let g = Lock::new(&c, "/test/expiry")
        .unwrap()
        .acquire(None)
        .unwrap();
    assert_eq!(g.state(), HoldState::Held);
    zk.stop();
    let s = g.wait_change(HoldState::Held, Duration::from_secs(5));
    assert_eq!(s, HoldState::Suspended);
    let s = g.wait_change(HoldState::Suspended, Duration::from_secs(15));
    assert!(matches!(s, HoldState::Lost(_)), "{s:?}");
    assert!(!g.is_held());
}

/// Three contenders cycle through a lock while the server is killed and restarted twice: at no instant do two
/// of them believe they hold it (a holder stops at `Suspended`), and tokens keep increasing.
#[test]
fn lock_no_two_holders_across_server_restart() {
    let Some(mut zk) = server("lock_connection_loss") else {
        return;
    };
    let inside = Arc::new(AtomicUsize::new(0));
    let last = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let rounds = Arc::new(AtomicUsize::new(0));
    let threads: Vec<_> = (0..3)
        .map(|_| {
            let c = common::connect_timeout(&zk, common::LONG_SESSION);
            let (inside, last, stop, rounds) =
                (inside.clone(), last.clone(), stop.clone(), rounds.clone());
            std::thread::spawn(move || {
                let lock = Lock::new(&c, "/test/restart").unwrap();
                while !stop.load(Ordering::SeqCst) {
                    let g = match lock.acquire(Some(Duration::from_secs(2))) {
                        Ok(g) => g,
                        Err(_) => continue, // timed out or connection trouble: try again
                    };
                    if !g.is_held() {
                        continue;
                    }
                    assert_eq!(
                        inside.fetch_add(1, Ordering::SeqCst),
                        0,
                        "two holders at once"
                    );
                    assert!(g.token() >= last.load(Ordering::SeqCst));
                    last.store(g.token(), Ordering::SeqCst);
                    // Hold for a while, stepping down the moment the holding is no longer certain.
                    let until = Instant::now() + Duration::from_millis(30);
                    while Instant::now() < until && g.is_held() {
                        std::thread::yield_now();
                    }
                    inside.fetch_sub(1, Ordering::SeqCst);
                    rounds.fetch_add(1, Ordering::SeqCst);
                    let _ = g.release();
                }
            })
        })
        .collect();
    let wait_rounds = |n: usize| {
        let start = rounds.load(Ordering::SeqCst);
        tickbox_testkit::wait_for("progress", Duration::from_secs(10), || {
            rounds.load(Ordering::SeqCst) >= start + n
        });
    };
    wait_rounds(5);
    for _ in 0..2 {
        zk.restart().unwrap();
        wait_rounds(5);
    }
    stop.store(true, Ordering::SeqCst);
    for t in threads {
        t.join().unwrap();
    }
}
