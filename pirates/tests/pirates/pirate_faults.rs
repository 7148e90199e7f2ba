//! Pirate patterns over real sockets: Lazy Pirate against a server that goes away and comes back; Paranoid
//! Pirate queue with workers that crash, checked against the 6/PPP frames with raw sockets.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tickbox_pirates::{
    run_ppp_queue, LazyPirate, LazyPirateConfig, PirateError, PppConfig, PppQueueStats, PppWorker,
};

type Frames = Vec<Vec<u8>>;

fn f(parts: &[&[u8]]) -> Frames {
    parts.iter().map(|p| p.to_vec()).collect()
}

fn recv(s: &zmq::Socket, ms: i64) -> Option<Frames> {
    (s.poll(zmq::POLLIN, ms).unwrap() > 0).then(|| s.recv_multipart(0).unwrap())
}

#[test]
fn lazy_pirate_resends_on_a_new_socket_and_gives_up_after_n() {
    let ctx = zmq::Context::new();
    let dir = tempfile::tempdir().unwrap();
    let ep = format!("ipc://{}/lp.sock", dir.path().display());
    // A REP server that ignores the first request it sees (as if it crashed while handling it).
    let rep = ctx.socket(zmq::ROUTER).unwrap();
    rep.set_linger(0).unwrap();
    rep.bind(&ep).unwrap();
    let mut client = LazyPirate::new(
        &ctx,
        &ep,
        LazyPirateConfig {
            timeout: Duration::from_millis(200).into(),
            attempts: 3,
            ..LazyPirateConfig::default()
        },
    );
    let server = std::thread::spawn(move || {
        let first = recv(&rep, 2000).unwrap();
        let second = recv(&rep, 2000).unwrap();
        assert_ne!(first[0], second[0], "the retry comes from a new socket");
        assert_eq!(&second[1..], &f(&[b"", b"1"])[..]);
        rep.send_multipart(f(&[&second[0], b"", b"1"]), 0).unwrap();
    });
    assert_eq!(client.request(&f(&[b"1"])).unwrap(), f(&[b"1"]));
    assert_eq!(client.resends, 1);
    server.join().unwrap();
    // Nobody is listening now: give up after exactly 3 attempts.
    let t0 = Instant::now();
    assert!(matches!(
        client.request(&f(&[b"2"])),
        Err(PirateError::Exhausted(3))
    ));
    assert!(t0.elapsed() >= Duration::from_millis(600));
}

fn start_queue(
    ctx: &zmq::Context,
    cfg: PppConfig,
) -> (
    String,
    String,
    Arc<AtomicBool>,
    std::thread::JoinHandle<PppQueueStats>,
) {
    let stop = Arc::new(AtomicBool::new(false));
    let (tx, rx) = std::sync::mpsc::channel();
    let (c, s) = (ctx.clone(), Arc::clone(&stop));
    let h = std::thread::spawn(move || {
        run_ppp_queue(
            &tickbox_auth::Gate::open(&c),
            "tcp://127.0.0.1:*",
            "tcp://127.0.0.1:*",
            cfg,
            &s,
            Some(tx),
        )
        .unwrap()
    });
    let (fe, be) = rx.recv_timeout(Duration::from_secs(5)).unwrap();
    (fe, be, stop, h)
}

/// A PPP worker on its own thread until `stop`, answering with `reply`; the thread returns its reconnects.
fn spawn_worker(
    ctx: &zmq::Context,
    backend: &str,
    stop: &Arc<AtomicBool>,
    reply: fn(&Frames) -> Frames,
) -> std::thread::JoinHandle<u64> {
    let (c, e, s) = (ctx.clone(), backend.to_owned(), Arc::clone(stop));
    std::thread::spawn(move || {
        let mut w = PppWorker::connect(&c, &e, cfg()).unwrap();
        w.serve(&s, reply).unwrap();
        w.reconnects()
    })
}

fn cfg() -> PppConfig {
    PppConfig {
        heartbeat_interval: Duration::from_millis(100).into(),
        heartbeat_liveness: 3,
        reconnect: Duration::from_millis(100).into(),
        reconnect_max: Duration::from_millis(400).into(),
        max_queued: 100,
        ..PppConfig::default()
    }
}

#[test]
fn ppp_queue_conformance_with_raw_worker() {
    let ctx = zmq::Context::new();
    let (fe, be, stop, q) = start_queue(&ctx, cfg());
    let w = ctx.socket(zmq::DEALER).unwrap();
    w.set_linger(0).unwrap();
    w.connect(&be).unwrap();
    w.send(&[0x01u8][..], 0).unwrap();
    // Idle workers get [0x02] heartbeats from the queue.
    assert_eq!(recv(&w, 1000).unwrap(), f(&[&[2]]));
    w.send(&[0x02u8][..], 0).unwrap();
    let c = ctx.socket(zmq::REQ).unwrap();
    c.set_linger(0).unwrap();
    c.connect(&fe).unwrap();
    c.send("ping", 0).unwrap();
    let req = loop {
        let m = recv(&w, 1000).unwrap();
        if m != f(&[&[2]]) {
            break m;
        }
    };
    assert_eq!(req.len(), 3);
    assert_eq!(&req[1..], &f(&[b"", b"ping"])[..]);
    w.send_multipart(f(&[&req[0], b"", b"pong"]), 0).unwrap();
    assert_eq!(
        recv(&c, 1000).unwrap(),
        f(&[b"pong"]),
        "READY/HEARTBEAT never reach the client"
    );
    stop.store(true, Ordering::Relaxed);
    q.join().unwrap();
}

#[test]
fn ppp_workers_survive_queue_restart_and_clients_retry_through_crashes() {
    let ctx = zmq::Context::new();
    let (fe, be, stop, q) = start_queue(&ctx, cfg());
    let wstop = Arc::new(AtomicBool::new(false));
    let workers: Vec<_> = (0..2)
        .map(|_| {
            spawn_worker(&ctx, &be, &wstop, |b| {
                vec![[b"ok:".as_slice(), &b[0]].concat()]
            })
        })
        .collect();
    let mut client = LazyPirate::new(
        &ctx,
        &fe,
        LazyPirateConfig {
            timeout: Duration::from_millis(500).into(),
            attempts: 5,
            ..LazyPirateConfig::default()
        },
    );
    for i in 0..20u32 {
        let body = i.to_string().into_bytes();
        assert_eq!(
            client.request(std::slice::from_ref(&body)).unwrap(),
            vec![[b"ok:".as_slice(), &body].concat()]
        );
    }
    // Queue dies and is not replaced: workers notice (liveness) and keep trying with back-off.
    stop.store(true, Ordering::Relaxed);
    q.join().unwrap();
    std::thread::sleep(Duration::from_millis(600));
    wstop.store(true, Ordering::Relaxed);
    for w in workers {
        assert!(
            w.join().unwrap() >= 1,
            "worker reconnected after queue loss"
        );
    }
}

#[test]
fn ppp_worker_conformance_against_raw_queue() {
    let ctx = zmq::Context::new();
    let r = ctx.socket(zmq::ROUTER).unwrap();
    r.set_linger(0).unwrap();
    let ep = tickbox_testkit::bind_loopback(&r);
    let stop = Arc::new(AtomicBool::new(false));
    let (c, s) = (ctx.clone(), Arc::clone(&stop));
    let t = std::thread::spawn(move || {
        let mut w = PppWorker::connect(&c, &ep, cfg()).unwrap();
        w.serve(&s, |b| b.iter().rev().cloned().collect()).unwrap();
        w.reconnects()
    });
    let ready = recv(&r, 2000).unwrap();
    assert_eq!(
        &ready[1..],
        &f(&[&[1]])[..],
        "first message is exactly [0x01]"
    );
    let id = ready[0].clone();
    let hb = recv(&r, 2000).unwrap();
    assert_eq!(hb, vec![id.clone(), vec![2]], "heartbeat is exactly [0x02]");
    r.send_multipart(f(&[&id, b"client-7", b"", b"a", b"b"]), 0)
        .unwrap();
    let reply = loop {
        let m = recv(&r, 2000).unwrap();
        if m[1..] != f(&[&[2]])[..] {
            break m;
        }
    };
    assert_eq!(
        &reply[1..],
        &f(&[b"client-7", b"", b"b", b"a"])[..],
        "envelope echoed byte-identical"
    );
    // Silence from the queue: after 3 x 100 ms the worker reconnects on a new socket with a fresh READY.
    let again = loop {
        let m = recv(&r, 2000).expect("worker reconnects");
        if m[1..] == f(&[&[1]])[..] {
            break m;
        }
    };
    assert_ne!(again[0], id);
    stop.store(true, Ordering::Relaxed);
    assert!(t.join().unwrap() >= 1);
}

/// Three clients flood the queue with far more requests than its one worker serves or it holds: the queue
/// refuses what it cannot hold and keeps reading its worker meanwhile. When a pass of its loop read the front-end
/// until it ran dry, the back-end went unread for longer than this config's liveness (300 ms): in 2 of 3
/// five-second floods the queue declared its live worker dead and lost the request that worker held.
#[test]
fn a_request_flood_never_makes_the_queue_give_up_on_a_live_worker() {
    const FLOODERS: usize = 3;
    const FLOOD: Duration = Duration::from_secs(3);
    let ctx = zmq::Context::new();
    let (fe, be, stop, queue) = start_queue(&ctx, cfg());
    let worker_stop = Arc::new(AtomicBool::new(false));
    let worker = spawn_worker(&ctx, &be, &worker_stop, |b| b.clone());
    // The worker is registered once a request has been served.
    let mut client = LazyPirate::new(
        &ctx,
        &fe,
        LazyPirateConfig {
            timeout: Duration::from_millis(1000).into(),
            attempts: 5,
            ..LazyPirateConfig::default()
        },
    );
    assert_eq!(
        client.request(&[b"hello".to_vec()]).unwrap(),
        vec![b"hello".to_vec()]
    );
    let flood_end = Instant::now() + FLOOD;
    let flooders: Vec<_> = (0..FLOODERS)
        .map(|_| {
            let (c, fe) = (ctx.clone(), fe.clone());
            std::thread::spawn(move || {
                let s = c.socket(zmq::DEALER).unwrap();
                s.set_linger(0).unwrap();
                s.set_sndtimeo(100).unwrap();
                s.connect(&fe).unwrap();
                while Instant::now() < flood_end {
                    for _ in 0..256 {
                        let _ = s.send_multipart([b"".as_slice(), b"flood"], 0);
                    }
                    while s.recv_multipart(zmq::DONTWAIT).is_ok() {}
                }
            })
        })
        .collect();
    for f in flooders {
        f.join().unwrap();
    }
    worker_stop.store(true, Ordering::Relaxed);
    let reconnects = worker.join().unwrap();
    stop.store(true, Ordering::Relaxed);
    let stats = queue.join().unwrap();
    println!("{stats:?}; worker reconnects {reconnects}");
    assert!(
        stats.dropped > 0,
        "the flood never filled the queue, so it tested nothing: {stats:?}"
    );
    assert_eq!(
        (stats.workers_expired, stats.lost_with_worker),
        (0, 0),
        "a live worker was given up on: {stats:?}"
    );
    assert_eq!(reconnects, 0, "the worker gave up on the queue");
    assert!(
        stats.routed > 1,
        "the worker served nothing during the flood: {stats:?}"
    );
}
