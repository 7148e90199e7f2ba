//! 7/MDP 0.1 + 18/MDP 0.2 conformance over real sockets. The peers here are raw zmq sockets speaking the frames
//! of docs/book/src/protocols.md §2–§3 directly, so the broker and the APIs are checked against the RFC, not against each other.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use tickbox_majordomo::{
    run_broker, AsyncClient, BrokerConfig, BrokerStats, Client, ClientConfig, MdpWorker,
    MdpWorkerConfig, Version,
};

type Frames = Vec<Vec<u8>>;

struct BrokerThread {
    endpoint: String,
    stop: Arc<AtomicBool>,
    handle: Option<JoinHandle<BrokerStats>>,
}

impl BrokerThread {
    fn start(ctx: &zmq::Context, cfg: BrokerConfig) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let (tx, rx) = std::sync::mpsc::channel();
        let (c, s) = (ctx.clone(), Arc::clone(&stop));
        let handle = std::thread::spawn(move || {
            run_broker(
                &tickbox_auth::Gate::open(&c),
                "tcp://127.0.0.1:*",
                cfg,
                &s,
                Some(tx),
            )
            .expect("broker")
        });
        let endpoint = rx
            .recv_timeout(Duration::from_secs(5))
            .expect("broker bound");
        Self {
            endpoint,
            stop,
            handle: Some(handle),
        }
    }

    fn stop(mut self) -> BrokerStats {
        self.stop.store(true, Ordering::Relaxed);
        self.handle.take().unwrap().join().unwrap()
    }
}

impl Drop for BrokerThread {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

fn fast() -> BrokerConfig {
    BrokerConfig {
        heartbeat_interval: Duration::from_millis(100).into(),
        heartbeat_liveness: 3,
        request_expiry: Duration::from_millis(5000).into(),
        busy_timeout: Duration::from_millis(5000).into(),
        ..Default::default()
    }
}

fn f(parts: &[&[u8]]) -> Frames {
    parts.iter().map(|p| p.to_vec()).collect()
}

fn sock(ctx: &zmq::Context, kind: zmq::SocketType, ep: &str) -> zmq::Socket {
    let s = ctx.socket(kind).unwrap();
    s.set_linger(0).unwrap();
    s.connect(ep).unwrap();
    s
}

fn recv(s: &zmq::Socket, ms: i64) -> Option<Frames> {
    if s.poll(zmq::POLLIN, ms).unwrap() > 0 {
        Some(s.recv_multipart(0).unwrap())
    } else {
        None
    }
}

/// Receive, skipping broker heartbeats, until something else arrives.
fn recv_non_hb(s: &zmq::Socket, ms: i64, hb: &[&[u8]]) -> Option<Frames> {
    let end = Instant::now() + Duration::from_millis(ms as u64);
    loop {
        let left = end.saturating_duration_since(Instant::now()).as_millis() as i64;
        let m = recv(s, left)?;
        if m != f(hb) {
            return Some(m);
        }
    }
}

const HB01: &[&[u8]] = &[b"", b"MDPW01", &[4]];
const DISC01: &[&[u8]] = &[b"", b"MDPW01", &[5]];

fn raw_worker(ctx: &zmq::Context, ep: &str, service: &[u8]) -> zmq::Socket {
    let w = sock(ctx, zmq::DEALER, ep);
    w.send_multipart(f(&[b"", b"MDPW01", &[1], service]), 0)
        .unwrap();
    w
}

/// Ask MMI until `service` has the wanted presence (registration is asynchronous).
fn wait_mmi(ctx: &zmq::Context, ep: &str, service: &[u8], want: &[u8]) {
    let c = sock(ctx, zmq::REQ, ep);
    tickbox_testkit::wait_for(
        &format!("service status {:?}", String::from_utf8_lossy(want)),
        Duration::from_secs(5),
        || {
            c.send_multipart(f(&[b"MDPC01", b"mmi.service", service]), 0)
                .unwrap();
            recv(&c, 2000).expect("mmi reply")[2] == want
        },
    );
}

#[test]
fn broker_routes_req_client_and_dealer_worker_with_exact_frames() {
    let ctx = zmq::Context::new();
    let b = BrokerThread::start(&ctx, fast());
    let w = raw_worker(&ctx, &b.endpoint, b"echo");
    wait_mmi(&ctx, &b.endpoint, b"echo", b"200");
    let c = sock(&ctx, zmq::REQ, &b.endpoint);
    c.send_multipart(f(&[b"MDPC01", b"echo", b"hello", b"world"]), 0)
        .unwrap();
    let req = recv_non_hb(&w, 2000, HB01).expect("request reaches worker");
    assert_eq!(req.len(), 7);
    assert_eq!(&req[..3], &f(&[b"", b"MDPW01", &[2]])[..]);
    assert_eq!(
        req[3].len(),
        5,
        "client address is the 5-byte libzmq routing id"
    );
    assert_eq!(req[3][0], 0);
    assert_eq!(&req[4..], &f(&[b"", b"hello", b"world"])[..]);
    let mut reply = f(&[b"", b"MDPW01", &[3]]);
    reply.push(req[3].clone());
    reply.extend(f(&[b"", b"HELLO", b"WORLD"]));
    w.send_multipart(reply, 0).unwrap();
    assert_eq!(
        recv(&c, 2000).unwrap(),
        f(&[b"MDPC01", b"echo", b"HELLO", b"WORLD"])
    );

    // DEALER client writes and receives the empty delimiter itself (4-part prefix).
    let d = sock(&ctx, zmq::DEALER, &b.endpoint);
    d.send_multipart(f(&[b"", b"MDPC01", b"echo", b"x"]), 0)
        .unwrap();
    let req = recv_non_hb(&w, 2000, HB01).unwrap();
    let mut reply = f(&[b"", b"MDPW01", &[3]]);
    reply.push(req[3].clone());
    reply.extend(f(&[b"", b"X"]));
    w.send_multipart(reply, 0).unwrap();
    assert_eq!(recv(&d, 2000).unwrap(), f(&[b"", b"MDPC01", b"echo", b"X"]));
    let stats = b.stop();
    assert_eq!(stats.replies, 2);
}

#[test]
fn broker_queues_requests_until_a_worker_appears() {
    let ctx = zmq::Context::new();
    let b = BrokerThread::start(&ctx, fast());
    let c = sock(&ctx, zmq::REQ, &b.endpoint);
    c.send_multipart(f(&[b"MDPC01", b"late", b"q"]), 0).unwrap();
    assert!(recv(&c, 200).is_none());
    let w = raw_worker(&ctx, &b.endpoint, b"late");
    let req = recv_non_hb(&w, 2000, HB01).expect("queued request delivered on READY");
    assert_eq!(req[5], b"q");
}

#[test]
fn broker_disconnects_protocol_violators() {
    let ctx = zmq::Context::new();
    let b = BrokerThread::start(&ctx, fast());
    // HEARTBEAT before READY.
    let w = sock(&ctx, zmq::DEALER, &b.endpoint);
    w.send_multipart(f(HB01), 0).unwrap();
    assert_eq!(recv(&w, 2000).unwrap(), f(DISC01));
    // REPLY from an unknown worker.
    let w = sock(&ctx, zmq::DEALER, &b.endpoint);
    w.send_multipart(f(&[b"", b"MDPW01", &[3], b"\x00abcd", b"", b"r"]), 0)
        .unwrap();
    assert_eq!(recv(&w, 2000).unwrap(), f(DISC01));
    // READY for a reserved mmi.* service.
    let w = raw_worker(&ctx, &b.endpoint, b"mmi.service");
    assert_eq!(recv(&w, 2000).unwrap(), f(DISC01));
    // Second READY on the same connection.
    let w = raw_worker(&ctx, &b.endpoint, b"dup");
    w.send_multipart(f(&[b"", b"MDPW01", &[1], b"dup"]), 0)
        .unwrap();
    assert_eq!(recv_non_hb(&w, 2000, HB01).unwrap(), f(DISC01));
    wait_mmi(&ctx, &b.endpoint, b"dup", b"404");
    // After DISCONNECT the broker goes silent to that worker: no heartbeats, no requests.
    assert!(recv(&w, 400).is_none());
    let stats = b.stop();
    assert_eq!(stats.disconnects_sent, 4);
}

#[test]
fn broker_heartbeats_idle_workers_and_expires_silent_ones() {
    let ctx = zmq::Context::new();
    let b = BrokerThread::start(&ctx, fast());
    let w = raw_worker(&ctx, &b.endpoint, b"hb");
    // Answer each heartbeat so the worker stays alive while we time the cadence.
    assert_eq!(recv(&w, 1000).unwrap(), f(HB01));
    w.send_multipart(f(HB01), 0).unwrap();
    let t0 = Instant::now();
    for _ in 0..2 {
        assert_eq!(recv(&w, 1000).unwrap(), f(HB01));
        w.send_multipart(f(HB01), 0).unwrap();
    }
    let two = t0.elapsed();
    assert!(
        two >= Duration::from_millis(150),
        "heartbeats follow the interval, got two within {two:?}"
    );
    // The raw worker never heartbeats back: after liveness x interval (300 ms) it is forgotten.
    wait_mmi(&ctx, &b.endpoint, b"hb", b"404");
    assert!(b.stop().workers_expired >= 1);
}

#[test]
fn broker_never_sends_to_a_worker_after_its_disconnect() {
    let ctx = zmq::Context::new();
    let b = BrokerThread::start(&ctx, fast());
    let w = raw_worker(&ctx, &b.endpoint, b"bye");
    wait_mmi(&ctx, &b.endpoint, b"bye", b"200");
    w.send_multipart(f(DISC01), 0).unwrap();
    wait_mmi(&ctx, &b.endpoint, b"bye", b"404");
    let c = sock(&ctx, zmq::DEALER, &b.endpoint);
    c.send_multipart(f(&[b"", b"MDPC01", b"bye", b"x"]), 0)
        .unwrap();
    // Drain whatever heartbeat may have been in flight before the DISCONNECT, then expect silence.
    let end = Instant::now() + Duration::from_millis(400);
    while let Some(m) = recv(
        &w,
        end.saturating_duration_since(Instant::now()).as_millis() as i64,
    ) {
        assert_eq!(
            m,
            f(HB01),
            "only a pre-DISCONNECT heartbeat may still arrive"
        );
    }
}

#[test]
fn broker_survives_malformed_input() {
    let ctx = zmq::Context::new();
    let b = BrokerThread::start(&ctx, fast());
    let junk = sock(&ctx, zmq::DEALER, &b.endpoint);
    let garbage: Vec<Frames> = vec![
        f(&[b""]),
        f(&[b"hello"]),
        f(&[b"", b"MDPC01"]),
        f(&[b"", b"MDPC01", b"svc"]),
        f(&[b"", b"XXXX01", b"svc", b"x"]),
        f(&[b"", b"MDPW01"]),
        f(&[b"", b"MDPW01", &[0xff]]),
        f(&[b"", b"MDPW01", &[1]]),
        f(&[b"", b"MDPW01", &[1], b"a", b"b"]),
        f(&[b"MDPW01", &[1], b"echo"]), // the message that kills the Python broker
        f(&[b"MDPC02", &[7], b"svc", b"x"]),
    ];
    let n = garbage.len() as u64;
    for g in garbage {
        junk.send_multipart(g, 0).unwrap();
    }
    let _w = raw_worker(&ctx, &b.endpoint, b"ok");
    wait_mmi(&ctx, &b.endpoint, b"ok", b"200");
    let stats = b.stop();
    assert_eq!(stats.malformed, n);
}

#[test]
fn mdp_02_partials_then_final_on_the_same_router() {
    let ctx = zmq::Context::new();
    let b = BrokerThread::start(&ctx, fast());
    let w = sock(&ctx, zmq::DEALER, &b.endpoint);
    w.send_multipart(f(&[b"MDPW02", &[1], b"v2"]), 0).unwrap();
    wait_mmi(&ctx, &b.endpoint, b"v2", b"200");
    let mut client = AsyncClient::connect_version(&ctx, &b.endpoint, Version::V02).unwrap();
    client.send("v2", &f(&[b"q"])).unwrap();
    let req = recv_non_hb(&w, 2000, &[b"MDPW02", &[5]]).unwrap();
    assert_eq!(req.len(), 5);
    assert_eq!(&req[..2], &f(&[b"MDPW02", &[2]])[..]);
    assert_eq!(&req[3..], &f(&[b"", b"q"])[..]);
    for (cmd, body) in [(3u8, b"p1"), (3, b"p2"), (4, b"ff")] {
        let mut m = f(&[b"MDPW02", &[cmd]]);
        m.push(req[2].clone());
        m.extend(f(&[b"", body]));
        w.send_multipart(m, 0).unwrap();
    }
    let mut got = Vec::new();
    while let Some(r) = client.recv(Duration::from_secs(2)).unwrap() {
        assert_eq!(r.service, b"v2");
        got.push((r.partial, r.body));
        if !got.last().unwrap().0 {
            break;
        }
    }
    assert_eq!(
        got,
        vec![
            (true, f(&[b"p1"])),
            (true, f(&[b"p2"])),
            (false, f(&[b"ff"]))
        ]
    );
    // A 0.1 REQ client is served by the same 0.2 worker and only sees the final reply.
    let c = sock(&ctx, zmq::REQ, &b.endpoint);
    c.send_multipart(f(&[b"MDPC01", b"v2", b"q1"]), 0).unwrap();
    let req = recv_non_hb(&w, 2000, &[b"MDPW02", &[5]]).unwrap();
    for (cmd, body) in [(3u8, b"p1"), (4, b"f1")] {
        let mut m = f(&[b"MDPW02", &[cmd]]);
        m.push(req[2].clone());
        m.extend(f(&[b"", body]));
        w.send_multipart(m, 0).unwrap();
    }
    assert_eq!(recv(&c, 2000).unwrap(), f(&[b"MDPC01", b"v2", b"f1"]));
}

// ---- the worker API against a raw ROUTER playing broker ----------------------------------------------------

fn raw_broker(ctx: &zmq::Context) -> (zmq::Socket, String) {
    let r = ctx.socket(zmq::ROUTER).unwrap();
    r.set_linger(0).unwrap();
    let ep = tickbox_testkit::bind_loopback(&r);
    (r, ep)
}

fn wcfg() -> MdpWorkerConfig {
    MdpWorkerConfig {
        heartbeat_interval: Duration::from_millis(100).into(),
        heartbeat_liveness: 3,
        reconnect: Duration::from_millis(100).into(),
        reconnect_max: Duration::from_millis(400).into(),
        v02: false,
        ..Default::default()
    }
}

#[test]
fn worker_api_ready_heartbeat_echo_and_reconnect_on_disconnect() {
    let ctx = zmq::Context::new();
    let (r, ep) = raw_broker(&ctx);
    let stop = Arc::new(AtomicBool::new(false));
    let (c2, ep2, s2) = (ctx.clone(), ep.clone(), Arc::clone(&stop));
    // Every lower bound below is measured from before the worker exists, so scheduling delays cannot shrink it.
    let spawned = Instant::now();
    let t = std::thread::spawn(move || {
        let mut w = MdpWorker::connect(&c2, &ep2, "echo", wcfg()).unwrap();
        w.serve(&s2, |body| {
            body.iter().map(|b| b.to_ascii_uppercase()).collect()
        })
        .unwrap();
        w.reconnects()
    });
    let ready = recv(&r, 2000).unwrap();
    let id1 = ready[0].clone();
    assert_eq!(
        &ready[1..],
        &f(&[b"", b"MDPW01", &[1], b"echo"])[..],
        "READY is exactly 4 frames"
    );
    // Heartbeat cadence: the next message from an idle worker is a heartbeat, not before one interval.
    let hb = recv(&r, 2000).unwrap();
    assert_eq!(&hb[1..], &f(HB01)[..]);
    assert!(spawned.elapsed() >= Duration::from_millis(100));
    // Request: echo the client address and the empty frame unchanged.
    let mut req = vec![id1.clone()];
    req.extend(f(&[b"", b"MDPW01", &[2], b"\x00CLNT", b"", b"ab", b"cd"]));
    r.send_multipart(req, 0).unwrap();
    let rep = recv_non_hb(&r, 2000, &[]).unwrap();
    let rep = if rep[1..] == f(HB01)[..] {
        recv_non_hb(&r, 2000, &[]).unwrap()
    } else {
        rep
    };
    assert_eq!(
        &rep[1..],
        &f(&[b"", b"MDPW01", &[3], b"\x00CLNT", b"", b"AB", b"CD"])[..]
    );
    // DISCONNECT: the worker opens a new socket (new identity) and sends READY again.
    let mut disc = vec![id1.clone()];
    disc.extend(f(DISC01));
    r.send_multipart(disc, 0).unwrap();
    let end = Instant::now() + Duration::from_secs(3);
    let again = loop {
        let m = recv(&r, 2000).expect("worker comes back");
        if m[1..] == f(&[b"", b"MDPW01", &[1], b"echo"])[..] {
            break m;
        }
        assert!(Instant::now() < end);
    };
    assert_ne!(again[0], id1, "a new socket, so a new routing identity");
    stop.store(true, Ordering::Relaxed);
    assert!(t.join().unwrap() >= 1);
    // The polite exit is a DISCONNECT.
    let last = recv_non_hb(&r, 2000, &[]).unwrap();
    let last = if last[1..] == f(HB01)[..] {
        recv(&r, 2000).unwrap()
    } else {
        last
    };
    assert_eq!(&last[1..], &f(DISC01)[..]);
}

#[test]
fn worker_api_reconnects_after_broker_silence() {
    let ctx = zmq::Context::new();
    let (r, ep) = raw_broker(&ctx);
    let stop = Arc::new(AtomicBool::new(false));
    let (c2, s2) = (ctx.clone(), Arc::clone(&stop));
    let t0 = Instant::now();
    let t = std::thread::spawn(move || {
        let mut w = MdpWorker::connect(&c2, &ep, "quiet", wcfg()).unwrap();
        w.serve(&s2, |b| b.clone()).unwrap();
        w.reconnects()
    });
    let first = recv(&r, 2000).unwrap();
    // We never answer; after liveness x interval + back-off (300 + 100 ms) a fresh READY arrives.
    let again = loop {
        let m = recv(&r, 2000).expect("reconnect");
        if m[1..] == f(&[b"", b"MDPW01", &[1], b"quiet"])[..] {
            break m;
        }
    };
    let waited = t0.elapsed();
    assert_ne!(again[0], first[0]);
    assert!(
        waited >= Duration::from_millis(400),
        "not before the liveness allowance: {waited:?}"
    );
    stop.store(true, Ordering::Relaxed);
    assert!(t.join().unwrap() >= 1);
}

// ---- the client APIs against a raw ROUTER playing broker ---------------------------------------------------

#[test]
fn sync_client_sends_exact_prefix_validates_reply_and_retries_with_new_socket() {
    let ctx = zmq::Context::new();
    let (r, ep) = raw_broker(&ctx);
    let (c2, ep2) = (ctx.clone(), ep.clone());
    let t = std::thread::spawn(move || {
        let mut c = Client::new(
            &c2,
            &ep2,
            ClientConfig {
                timeout: Duration::from_millis(300).into(),
                attempts: 3,
            },
        );
        let first = c.request("echo", &[b"one".to_vec()]);
        let second = c.request("echo", &[b"two".to_vec()]);
        (
            first.map_err(|e| e.to_string()),
            second.map_err(|e| e.to_string()),
            c.resends,
        )
    });
    let m1 = recv(&r, 2000).unwrap();
    assert_eq!(
        &m1[1..],
        &f(&[b"", b"MDPC01", b"echo", b"one"])[..],
        "REQ adds the empty frame: 3-part prefix"
    );
    // Ignore the first attempt: the client must close, reopen (new identity) and resend.
    let m2 = recv(&r, 2000).unwrap();
    assert_ne!(m1[0], m2[0]);
    let mut rep = vec![m2[0].clone()];
    rep.extend(f(&[b"", b"MDPC01", b"echo", b"ONE"]));
    r.send_multipart(rep, 0).unwrap();
    // Second request: answer with the wrong service name; the client must refuse it.
    let m3 = recv(&r, 2000).unwrap();
    let mut bad = vec![m3[0].clone()];
    bad.extend(f(&[b"", b"MDPC01", b"other", b"TWO"]));
    r.send_multipart(bad, 0).unwrap();
    let (first, second, resends) = t.join().unwrap();
    assert_eq!(first.unwrap(), f(&[b"ONE"]));
    assert!(second.is_err());
    assert_eq!(resends, 1);
}

#[test]
fn sync_client_gives_up_after_n_attempts() {
    let ctx = zmq::Context::new();
    let (r, ep) = raw_broker(&ctx);
    let mut c = Client::new(
        &ctx,
        &ep,
        ClientConfig {
            timeout: Duration::from_millis(100).into(),
            attempts: 3,
        },
    );
    let err = c.request("nobody", &[b"x".to_vec()]).unwrap_err();
    assert!(
        matches!(
            err,
            tickbox_majordomo::MdpError::Timeout { attempts: 3, .. }
        ),
        "{err}"
    );
    let mut seen = 0;
    while recv(&r, 50).is_some() {
        seen += 1;
    }
    assert_eq!(seen, 3);
}

#[test]
fn async_client_keeps_many_requests_in_flight() {
    let ctx = zmq::Context::new();
    let b = BrokerThread::start(&ctx, fast());
    let stop = Arc::new(AtomicBool::new(false));
    let mut workers = Vec::new();
    for _ in 0..3 {
        let (c2, ep, s2) = (ctx.clone(), b.endpoint.clone(), Arc::clone(&stop));
        workers.push(std::thread::spawn(move || {
            let mut w = MdpWorker::connect(&c2, &ep, "echo", wcfg()).unwrap();
            w.serve(&s2, |b| b.clone()).unwrap();
        }));
    }
    let mut client = AsyncClient::connect(&ctx, &b.endpoint).unwrap();
    for i in 0..200u32 {
        client.send("echo", &[i.to_be_bytes().to_vec()]).unwrap();
    }
    let mut seen = std::collections::BTreeSet::new();
    while seen.len() < 200 {
        let r = client
            .recv(Duration::from_secs(5))
            .unwrap()
            .expect("all replies arrive");
        assert_eq!(r.service, b"echo");
        seen.insert(u32::from_be_bytes(r.body[0].clone().try_into().unwrap()));
    }
    assert_eq!(seen, (0..200).collect());
    stop.store(true, Ordering::Relaxed);
    for w in workers {
        w.join().unwrap();
    }
}
