//! 9/TSP over real sockets with a raw REQ client, plus durability: Titanic and the broker restarted between
//! request and reply lose nothing acknowledged and execute nothing twice.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use tickbox_majordomo::titanic::{FsyncPolicy, Titanic, TitanicConfig};
use tickbox_majordomo::{run_broker, BrokerConfig, BrokerStats, MdpWorker, MdpWorkerConfig};

type Frames = Vec<Vec<u8>>;

fn f(parts: &[&[u8]]) -> Frames {
    parts.iter().map(|p| p.to_vec()).collect()
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

fn tcfg() -> TitanicConfig {
    TitanicConfig {
        fsync: FsyncPolicy::PerRequest,
        segment_bytes: 1 << 20,
        scan: Duration::from_millis(50).into(),
        dispatch_timeout: Duration::from_millis(1000).into(),
        worker: wcfg(),
        ..Default::default()
    }
}

struct Broker {
    stop: Arc<AtomicBool>,
    handle: Option<JoinHandle<BrokerStats>>,
}

impl Broker {
    fn start(ctx: &zmq::Context, ep: &str) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let (tx, rx) = std::sync::mpsc::channel();
        let (c, s, e) = (ctx.clone(), Arc::clone(&stop), ep.to_string());
        let cfg = BrokerConfig {
            heartbeat_interval: Duration::from_millis(100).into(),
            ..Default::default()
        };
        let handle = Some(std::thread::spawn(move || {
            run_broker(&tickbox_auth::Gate::open(&c), &e, cfg, &s, Some(tx)).unwrap()
        }));
        rx.recv_timeout(Duration::from_secs(5)).unwrap();
        Self { stop, handle }
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.handle.take() {
            h.join().unwrap();
        }
    }
}

/// A raw MDP/0.1 REQ client, straight from the RFC frames.
struct Raw {
    s: zmq::Socket,
}

impl Raw {
    fn new(ctx: &zmq::Context, ep: &str) -> Self {
        let s = ctx.socket(zmq::REQ).unwrap();
        s.set_linger(0).unwrap();
        s.connect(ep).unwrap();
        Self { s }
    }

    fn call(&self, service: &[u8], body: &[&[u8]]) -> Frames {
        let mut m = f(&[b"MDPC01", service]);
        m.extend(f(body));
        self.s.send_multipart(m, 0).unwrap();
        assert!(
            self.s.poll(zmq::POLLIN, 5000).unwrap() > 0,
            "no reply from {}",
            String::from_utf8_lossy(service)
        );
        let mut r = self.s.recv_multipart(0).unwrap();
        assert_eq!(&r[..2], &f(&[b"MDPC01", service])[..]);
        r.split_off(2)
    }

    fn wait_reply(&self, uuid: &[u8]) -> Frames {
        let end = Instant::now() + Duration::from_secs(10);
        loop {
            let r = self.call(b"titanic.reply", &[uuid]);
            if r[0] != b"300" {
                return r;
            }
            assert!(Instant::now() < end, "reply never became available");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

fn counting_worker(
    ctx: &zmq::Context,
    ep: &str,
    service: &'static str,
    count: &Arc<AtomicU32>,
    stop: &Arc<AtomicBool>,
) -> JoinHandle<()> {
    let (c, e, n, s) = (
        ctx.clone(),
        ep.to_string(),
        Arc::clone(count),
        Arc::clone(stop),
    );
    std::thread::spawn(move || {
        let mut w = MdpWorker::connect(&c, &e, service, wcfg()).unwrap();
        w.serve(&s, |b| {
            n.fetch_add(1, Ordering::SeqCst);
            b.clone()
        })
        .unwrap();
    })
}

fn is_uuid(u: &[u8]) -> bool {
    u.len() == 32 && u.iter().all(u8::is_ascii_hexdigit)
}

#[test]
fn tsp_status_codes_and_idempotence() {
    let ctx = zmq::Context::new();
    let dir = tempfile::tempdir().unwrap();
    let ep = format!("ipc://{}/broker", dir.path().display());
    let _broker = Broker::start(&ctx, &ep);
    let titanic = Titanic::start(&ctx, &ep, &dir.path().join("j"), tcfg()).unwrap();
    let c = Raw::new(&ctx, &ep);
    let r = c.call(b"titanic.request", &[b"echo", b"multi", b"part"]);
    assert_eq!(r.len(), 2);
    assert_eq!(r[0], b"200");
    assert!(is_uuid(&r[1]));
    let uuid = r[1].clone();
    // No echo worker yet: pending.
    assert_eq!(c.call(b"titanic.reply", &[&uuid]), f(&[b"300"]));
    let count = Arc::new(AtomicU32::new(0));
    let wstop = Arc::new(AtomicBool::new(false));
    let w = counting_worker(&ctx, &ep, "echo", &count, &wstop);
    assert_eq!(c.wait_reply(&uuid), f(&[b"200", b"multi", b"part"]));
    assert_eq!(
        c.call(b"titanic.reply", &[&uuid]),
        f(&[b"200", b"multi", b"part"]),
        "reply is idempotent"
    );
    assert_eq!(
        c.call(b"titanic.reply", &[&uuid.to_ascii_lowercase()])[0],
        b"200"
    );
    assert_eq!(c.call(b"titanic.close", &[&uuid]), f(&[b"200"]));
    assert_eq!(
        c.call(b"titanic.close", &[&uuid]),
        f(&[b"200"]),
        "close is idempotent"
    );
    assert_eq!(
        c.call(b"titanic.reply", &[&uuid]),
        f(&[b"400"]),
        "after close"
    );
    assert_eq!(
        c.call(b"titanic.reply", &[b"0123456789abcdef0123456789abcdef"]),
        f(&[b"400"])
    );
    assert_eq!(
        c.call(b"titanic.close", &[b"0123456789abcdef0123456789abcdef"]),
        f(&[b"200"])
    );
    assert_eq!(c.call(b"titanic.reply", &[b"junk"]), f(&[b"400"]));
    assert_eq!(c.call(b"titanic.request", &[b"only-service"]), f(&[b"400"]));
    assert_eq!(count.load(Ordering::SeqCst), 1);
    wstop.store(true, Ordering::Relaxed);
    w.join().unwrap();
    titanic.stop().unwrap();
}

#[test]
fn acknowledged_requests_survive_titanic_and_broker_restarts_and_run_once() {
    let ctx = zmq::Context::new();
    let dir = tempfile::tempdir().unwrap();
    let ep = format!("ipc://{}/broker", dir.path().display());
    let jdir = dir.path().join("journal");
    let mut broker = Broker::start(&ctx, &ep);
    let titanic = Titanic::start(&ctx, &ep, &jdir, tcfg()).unwrap();
    let c = Raw::new(&ctx, &ep);
    let mut uuids = Vec::new();
    for i in 0..5u8 {
        let r = c.call(b"titanic.request", &[b"work", &[b'j', b'0' + i]]);
        assert_eq!(r[0], b"200");
        uuids.push(r[1].clone());
    }
    // Titanic goes down with 5 acknowledged, unexecuted requests; then the broker restarts too.
    titanic.stop().unwrap();
    drop(c);
    drop(broker);
    broker = Broker::start(&ctx, &ep);
    let titanic = Titanic::start(&ctx, &ep, &jdir, tcfg()).unwrap();
    assert_eq!(titanic.recovery().pending_requests, 5);
    let count = Arc::new(AtomicU32::new(0));
    let wstop = Arc::new(AtomicBool::new(false));
    let w = counting_worker(&ctx, &ep, "work", &count, &wstop);
    let c = Raw::new(&ctx, &ep);
    for (i, u) in uuids.iter().enumerate() {
        assert_eq!(
            c.wait_reply(u),
            vec![b"200".to_vec(), vec![b'j', b'0' + i as u8]]
        );
    }
    assert_eq!(count.load(Ordering::SeqCst), 5);
    // Restart Titanic again after the replies are stored: nothing is dispatched twice, replies are still there.
    titanic.stop().unwrap();
    let titanic = Titanic::start(&ctx, &ep, &jdir, tcfg()).unwrap();
    assert_eq!(titanic.recovery().pending_requests, 0);
    assert_eq!(titanic.recovery().open_requests, 5);
    std::thread::sleep(Duration::from_millis(300));
    for (i, u) in uuids.iter().enumerate() {
        assert_eq!(
            c.call(b"titanic.reply", &[u]),
            vec![b"200".to_vec(), vec![b'j', b'0' + i as u8]]
        );
    }
    assert_eq!(count.load(Ordering::SeqCst), 5, "nothing executed twice");
    wstop.store(true, Ordering::Relaxed);
    w.join().unwrap();
    titanic.stop().unwrap();
    drop(broker);
}

#[test]
fn open_requests_are_bounded_and_dispatch_is_journaled_ahead() {
    use tickbox_majordomo::titanic::{DispatchPolicy, Redispatch, Step, TitanicStore};
    let dir = tempfile::tempdir().unwrap();
    let cfg = TitanicConfig {
        max_open_requests: 2,
        ..tcfg()
    };
    let mut store = TitanicStore::open(dir.path(), &cfg).unwrap();
    let a = store.request(f(&[b"svc", b"a"]));
    assert_eq!(a[0], b"200");
    assert_eq!(store.request(f(&[b"svc", b"b"]))[0], b"200");
    assert_eq!(
        store.request(f(&[b"svc", b"c"])),
        f(&[b"500 too many open requests"])
    );
    assert_eq!(store.refused(), 1);
    let uuid = String::from_utf8(a[1].clone()).unwrap();
    store.dispatch(&uuid, 1).unwrap();
    drop(store);
    // Reopened (as after a crash): the first request is known to be dispatched and is not sent again.
    let store = TitanicStore::open(dir.path(), &cfg).unwrap();
    assert_eq!(store.recovery().pending_requests, 2);
    assert_eq!(store.recovery().dispatched_requests, 1);
    let now_ns = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64;
    let policy = DispatchPolicy {
        redispatch: Redispatch::Never,
        job_timeout_ns: 60_000_000_000,
        max_attempts: 3,
    };
    let steps = store.state().plan(now_ns, &policy, |_| false);
    assert!(
        matches!(&steps[0], Step::Resume { uuid: u, attempt: 1, .. } if *u == uuid),
        "{steps:?}"
    );
    assert!(
        matches!(&steps[1], Step::Send { attempt: 1, .. }),
        "{steps:?}"
    );
}
