//! What running the ZeroMQ Guide's own Majordomo and Titanic programs against tickbox found, as real-socket
//! tests: a request arriving after a worker's heartbeat expiry but before the broker's purge timer goes to the
//! next live worker (and Titanic completes it exactly once); a Titanic request the broker dropped undelivered is
//! sent again and completes exactly once under `redispatch = "never"`; 100 000 pipelined requests (the Guide's
//! asynchronous client) complete through a broker with its default bounds; a flood past the queue bound is
//! refused with every refusal counted.
//!
//! The dying worker is written from 7/MDP on a plain DEALER, so nothing of tickbox's own worker hides what the
//! broker does.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use tickbox_majordomo::titanic::{FsyncPolicy, Redispatch, Titanic, TitanicConfig};
use tickbox_majordomo::{
    run_broker, BrokerConfig, BrokerStats, Client, ClientConfig, MdpWorker, MdpWorkerConfig,
};

type Frames = Vec<Vec<u8>>;

const READY: u8 = 0x01;
const REQUEST: u8 = 0x02;
const REPLY: u8 = 0x03;
const HEARTBEAT: u8 = 0x04;

struct Broker {
    ep: String,
    stop: Arc<AtomicBool>,
    handle: Option<JoinHandle<BrokerStats>>,
}

impl Broker {
    fn start(ctx: &zmq::Context, cfg: BrokerConfig) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let (tx, rx) = std::sync::mpsc::channel();
        let (c, s) = (ctx.clone(), Arc::clone(&stop));
        let handle = Some(std::thread::spawn(move || {
            run_broker(
                &tickbox_auth::Gate::open(&c),
                "tcp://127.0.0.1:*",
                cfg,
                &s,
                Some(tx),
            )
            .expect("broker")
        }));
        let ep = rx
            .recv_timeout(Duration::from_secs(5))
            .expect("broker bound");
        Self { ep, stop, handle }
    }

    fn stop(mut self) -> BrokerStats {
        self.stop.store(true, Ordering::Relaxed);
        self.handle.take().unwrap().join().unwrap()
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

/// A 7/MDP worker on a plain DEALER: READY, HEARTBEAT and REPLY exactly as the RFC lays them out.
struct RfcWorker {
    s: zmq::Socket,
}

impl RfcWorker {
    fn connect(ctx: &zmq::Context, ep: &str, identity: &[u8], service: &[u8]) -> Self {
        let s = ctx.socket(zmq::DEALER).unwrap();
        s.set_linger(0).unwrap();
        s.set_identity(identity).unwrap();
        s.connect(ep).unwrap();
        s.send_multipart([&b""[..], b"MDPW01", &[READY], service], 0)
            .unwrap();
        Self { s }
    }

    fn heartbeat(&self) {
        self.s
            .send_multipart([&b""[..], b"MDPW01", &[HEARTBEAT]], 0)
            .unwrap();
    }

    /// The next command from the broker within `ms`: (command byte, frames after it).
    fn recv(&self, ms: i64) -> Option<(u8, Frames)> {
        if self.s.poll(zmq::POLLIN, ms).unwrap() == 0 {
            return None;
        }
        let mut m = self.s.recv_multipart(0).unwrap();
        assert!(
            m.len() >= 3 && m[0].is_empty() && m[1] == b"MDPW01",
            "{m:?}"
        );
        let rest = m.split_off(3);
        Some((m[2][0], rest))
    }
}

fn wcfg(interval: Duration, liveness: u32) -> MdpWorkerConfig {
    MdpWorkerConfig {
        heartbeat_interval: interval.into(),
        heartbeat_liveness: liveness,
        reconnect: Duration::from_millis(100).into(),
        reconnect_max: Duration::from_millis(400).into(),
        v02: false,
        security: Default::default(),
    }
}

fn tcfg(worker: MdpWorkerConfig) -> TitanicConfig {
    TitanicConfig {
        fsync: FsyncPolicy::None,
        segment_bytes: 1 << 20,
        scan: Duration::from_millis(50).into(),
        dispatch_timeout: Duration::from_secs(30).into(),
        job_timeout: Duration::from_secs(30).into(),
        redispatch: Redispatch::Never,
        worker,
        ..Default::default()
    }
}

fn client(ctx: &zmq::Context, ep: &str) -> Client {
    Client::new(
        ctx,
        ep,
        ClientConfig {
            timeout: Duration::from_millis(3000).into(),
            attempts: 3,
        },
    )
}

/// `titanic.reply` polled until it is no longer `300`, for at most `limit`.
fn titanic_outcome(c: &mut Client, uuid: &[u8], limit: Duration) -> Frames {
    let end = Instant::now() + limit;
    loop {
        let r = c.request("titanic.reply", &[uuid.to_vec()]).unwrap();
        if r[0] != b"300" {
            return r;
        }
        assert!(
            Instant::now() < end,
            "titanic.reply still 300 after {limit:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn request_after_a_workers_expiry_goes_to_the_next_worker_and_titanic_completes_it_once() {
    // Interval 1 s, liveness 2: a worker is dead 2 s after it was last heard; the purge runs once a second.
    let interval = Duration::from_millis(1000);
    let ctx = zmq::Context::new();
    let broker = Broker::start(
        &ctx,
        BrokerConfig {
            heartbeat_interval: interval.into(),
            heartbeat_liveness: 2,
            ..Default::default()
        },
    );
    let dir = tempfile::tempdir().unwrap();
    let titanic = Titanic::start(&ctx, &broker.ep, dir.path(), tcfg(wcfg(interval, 2))).unwrap();

    // A registers first (first in the broker's LRU order), B second.
    let a = RfcWorker::connect(&ctx, &broker.ep, b"worker-A", b"echo");
    let mut mmi = client(&ctx, &broker.ep);
    tickbox_testkit::wait_for("worker A to register", Duration::from_secs(10), || {
        mmi.request("mmi.service", &[b"echo".to_vec()]).unwrap() == vec![b"200".to_vec()]
    });
    let executed = Arc::new(AtomicU32::new(0));
    let b_stop = Arc::new(AtomicBool::new(false));
    let b_thread = {
        let (c, ep, n, stop) = (
            ctx.clone(),
            broker.ep.clone(),
            Arc::clone(&executed),
            Arc::clone(&b_stop),
        );
        std::thread::spawn(move || {
            let b = RfcWorker::connect(&c, &ep, b"worker-B", b"echo");
            let mut next_hb = Instant::now();
            while !stop.load(Ordering::Relaxed) {
                if Instant::now() >= next_hb {
                    b.heartbeat();
                    next_hb = Instant::now() + interval / 4;
                }
                if let Some((cmd, mut rest)) = b.recv(50) {
                    if cmd == REQUEST {
                        n.fetch_add(1, Ordering::SeqCst);
                        let client = rest.remove(0);
                        let mut reply: Frames =
                            vec![vec![], b"MDPW01".to_vec(), vec![REPLY], client, vec![]];
                        reply.push(b"done by B".to_vec());
                        reply.extend(rest.into_iter().skip(1));
                        b.s.send_multipart(reply, 0).unwrap();
                    }
                }
            }
        })
    };

    // A stays alive until it has seen one broker heartbeat (the purge timer fires with the heartbeats), sends
    // its last heartbeat half an interval later and dies: it expires half an interval before a purge tick.
    let end = Instant::now() + Duration::from_secs(10);
    let tick = loop {
        assert!(Instant::now() < end, "A never got a broker heartbeat");
        a.heartbeat();
        if let Some((HEARTBEAT, _)) = a.recv(100) {
            break Instant::now();
        }
    };
    while Instant::now() < tick + interval / 2 {
        std::thread::sleep(Duration::from_millis(5));
    }
    a.heartbeat();
    let last_heard = Instant::now();
    // A is now silent. It is expired from last_heard + 2 intervals; the purge comes about half an interval later.
    while Instant::now() < last_heard + 2 * interval + Duration::from_millis(30) {
        std::thread::sleep(Duration::from_millis(5));
    }
    let mut c = client(&ctx, &broker.ep);
    let r = c
        .request("titanic.request", &[b"echo".to_vec(), b"payload".to_vec()])
        .unwrap();
    assert_eq!(r[0], b"200", "{r:?}");
    let uuid = r[1].clone();
    let outcome = titanic_outcome(&mut c, &uuid, Duration::from_secs(10));
    assert_eq!(
        outcome,
        vec![b"200".to_vec(), b"done by B".to_vec(), b"payload".to_vec()]
    );
    // Nothing else arrives for it: executed once, by B.
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(executed.load(Ordering::SeqCst), 1, "executed exactly once");
    let mut got_request = false;
    while let Some((cmd, _)) = a.recv(0) {
        got_request |= cmd == REQUEST;
    }
    assert!(!got_request, "the expired worker was sent the request");

    b_stop.store(true, Ordering::Relaxed);
    b_thread.join().unwrap();
    titanic.stop().unwrap();
    let stats = broker.stop();
    assert_eq!(
        stats.workers_expired_at_dispatch, 1,
        "the request met A expired but not yet purged (if 0, the purge tick came first: timing) {stats:?}"
    );
}

#[test]
fn titanic_sends_again_what_the_broker_never_delivered_and_it_runs_once() {
    let ctx = zmq::Context::new();
    let broker = Broker::start(
        &ctx,
        BrokerConfig {
            heartbeat_interval: Duration::from_millis(100).into(),
            // A request waiting for the busy worker is dropped quickly, undelivered.
            request_expiry: Duration::from_millis(300).into(),
            ..Default::default()
        },
    );
    let dir = tempfile::tempdir().unwrap();
    let titanic = Titanic::start(
        &ctx,
        &broker.ep,
        dir.path(),
        tcfg(wcfg(Duration::from_millis(100), 3)),
    )
    .unwrap();
    let counters = Arc::clone(&titanic.counters);

    // One worker: busy with "hold" for 1.5 s, then free; counts the Titanic job.
    let jobs = Arc::new(AtomicU32::new(0));
    let busy = Arc::new(AtomicBool::new(false));
    let wstop = Arc::new(AtomicBool::new(false));
    let worker = {
        let (c, ep, n, b, s) = (
            ctx.clone(),
            broker.ep.clone(),
            Arc::clone(&jobs),
            Arc::clone(&busy),
            Arc::clone(&wstop),
        );
        std::thread::spawn(move || {
            let mut w =
                MdpWorker::connect(&c, &ep, "slow", wcfg(Duration::from_millis(100), 3)).unwrap();
            w.serve(&s, |body| {
                if body[0] == b"hold" {
                    b.store(true, Ordering::SeqCst);
                    std::thread::sleep(Duration::from_millis(1500));
                } else {
                    n.fetch_add(1, Ordering::SeqCst);
                }
                body.clone()
            })
            .unwrap();
        })
    };
    let holder = {
        let (c, ep) = (ctx.clone(), broker.ep.clone());
        std::thread::spawn(move || {
            let mut cl = client(&c, &ep);
            cl.request("slow", &[b"hold".to_vec()]).unwrap()
        })
    };
    tickbox_testkit::wait_for(
        "the worker to take the hold",
        Duration::from_secs(10),
        || busy.load(Ordering::SeqCst),
    );
    let mut c = client(&ctx, &broker.ep);
    let r = c
        .request("titanic.request", &[b"slow".to_vec(), b"job".to_vec()])
        .unwrap();
    assert_eq!(r[0], b"200");
    // job_timeout is 30 s: without the broker's notice the expired attempt would be waited for that long and
    // then failed (redispatch = never).
    let outcome = titanic_outcome(&mut c, &r[1], Duration::from_secs(10));
    assert_eq!(outcome, vec![b"200".to_vec(), b"job".to_vec()]);
    assert_eq!(holder.join().unwrap(), vec![b"hold".to_vec()]);
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(jobs.load(Ordering::SeqCst), 1, "executed exactly once");
    let undelivered = counters.undelivered.load(Ordering::Relaxed);
    assert!(undelivered >= 1, "the first attempt expired in the broker");
    assert_eq!(counters.failed.load(Ordering::Relaxed), 0);
    wstop.store(true, Ordering::Relaxed);
    worker.join().unwrap();
    titanic.stop().unwrap();
    let stats = broker.stop();
    assert_eq!(stats.undelivered_notices, undelivered, "{stats:?}");
    assert!(stats.requests_expired >= 1);
}

/// A DEALER sending `n` MDP/0.1 requests without waiting, as the Guide's asynchronous client (`mdclient2`) does.
fn pipeline(dealer: &zmq::Socket, service: &[u8], n: usize) {
    for _ in 0..n {
        dealer
            .send_multipart([&b""[..], b"MDPC01", service, b"Hello world"], 0)
            .expect("the broker stopped reading");
    }
}

#[test]
fn hundred_thousand_pipelined_requests_complete_with_the_default_bounds() {
    const N: usize = 100_000;
    const WORKERS: usize = 4;
    // Broker, worker and client each with their own context (own I/O thread), as three processes would be.
    let ctx = zmq::Context::new();
    let broker = Broker::start(&zmq::Context::new(), BrokerConfig::default());
    // The Guide runs one worker; four keep the test's run time down on a loaded machine (each request is a
    // broker-worker round trip) without changing what is tested: the client still pipelines all 100 000
    // requests in a fraction of the time they take to serve, so the broker queues nearly all of them.
    let wstop = Arc::new(AtomicBool::new(false));
    let workers: Vec<_> = (0..WORKERS)
        .map(|_| {
            let (ep, s) = (broker.ep.clone(), Arc::clone(&wstop));
            std::thread::spawn(move || {
                let c = zmq::Context::new();
                let mut w =
                    MdpWorker::connect(&c, &ep, "echo", MdpWorkerConfig::default()).unwrap();
                w.serve(&s, |b| b.clone()).unwrap();
            })
        })
        .collect();
    let dealer = ctx.socket(zmq::DEALER).unwrap();
    dealer.set_linger(0).unwrap();
    dealer.set_sndtimeo(20_000).unwrap();
    dealer.connect(&broker.ep).unwrap();
    // Wait until the worker is registered, so the test measures the pipeline and not the start-up.
    let mut mmi = client(&ctx, &broker.ep);
    tickbox_testkit::wait_for("echo workers to register", Duration::from_secs(10), || {
        mmi.request("mmi.service", &[b"echo".to_vec()]).unwrap() == vec![b"200".to_vec()]
    });
    // mmi.service says 200 from the first worker on: give the others a moment (they only add speed).
    std::thread::sleep(Duration::from_millis(200));
    let t0 = Instant::now();
    pipeline(&dealer, b"echo", N);
    let sent = t0.elapsed();
    let mut got = 0;
    let end = Instant::now() + Duration::from_secs(60);
    while got < N {
        let left = end.saturating_duration_since(Instant::now()).as_millis() as i64;
        assert!(
            left > 0 && dealer.poll(zmq::POLLIN, left).unwrap() > 0,
            "only {got} of {N} replies"
        );
        let r = dealer.recv_multipart(0).unwrap();
        assert_eq!(r[3], b"Hello world");
        got += 1;
    }
    let all = t0.elapsed();
    println!("{N} pipelined requests: sent in {sent:.2?}, all replies in {all:.2?}");
    wstop.store(true, Ordering::Relaxed);
    for w in workers {
        w.join().unwrap();
    }
    let stats = broker.stop();
    assert_eq!(stats.requests_refused, 0, "{stats:?}");
    assert_eq!(stats.replies, N as u64);
    // The old default (10 000 queued per service) refused the rest: the queue really held more than that.
    assert!(
        stats.queued_bytes_peak > 10_000 * 150,
        "the pipeline never filled the queue: {stats:?}"
    );
    println!(
        "peak queued bytes {} of {}",
        stats.queued_bytes_peak,
        BrokerConfig::default().max_queued_bytes.0
    );
}

#[test]
fn a_flood_past_the_byte_bound_is_refused_and_every_refusal_is_counted_and_told() {
    const N: usize = 20_000;
    const BOUND: u64 = 256 << 10;
    let ctx = zmq::Context::new();
    let broker = Broker::start(
        &ctx,
        BrokerConfig {
            heartbeat_interval: Duration::from_millis(100).into(),
            request_expiry: Duration::from_millis(500).into(),
            max_queued_bytes: tickbox_units::ByteSize(BOUND),
            ..Default::default()
        },
    );
    // A client that takes undelivered notices (a Titanic dispatch identity) floods a service nobody serves.
    let dealer = ctx.socket(zmq::DEALER).unwrap();
    dealer.set_linger(0).unwrap();
    dealer.set_sndtimeo(20_000).unwrap();
    dealer
        .set_identity(b"TSP:0123456789ABCDEF0123456789ABCDEF:1")
        .unwrap();
    dealer.connect(&broker.ep).unwrap();
    pipeline(&dealer, b"nobody", N);
    let (mut refused, mut expired) = (0, 0);
    let end = Instant::now() + Duration::from_secs(15);
    while refused + expired < N {
        let left = end.saturating_duration_since(Instant::now()).as_millis() as i64;
        assert!(
            left > 0 && dealer.poll(zmq::POLLIN, left).unwrap() > 0,
            "told of {refused} refused and {expired} expired of {N}"
        );
        let r = dealer.recv_multipart(0).unwrap();
        assert_eq!(r[..4], [&b""[..], b"MDPC01", b"mmi.undelivered", b"nobody"]);
        match r[4].as_slice() {
            b"refused" => refused += 1,
            b"expired" => expired += 1,
            other => panic!("reason {other:?}"),
        }
    }
    let stats = broker.stop();
    println!(
        "flood of {N} past a {BOUND}-byte bound: {refused} refused, {expired} expired; {stats:?}"
    );
    assert!(refused > 0 && expired > 0);
    assert_eq!(stats.requests, N as u64);
    assert_eq!(stats.requests_refused, refused as u64);
    assert_eq!(stats.requests_expired, expired as u64);
    assert!(stats.queued_bytes_peak <= BOUND);
    assert_eq!(stats.queued_bytes, 0);
}
