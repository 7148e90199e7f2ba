//! Majordomo fault tests over real sockets: a worker dies mid-request, the broker restarts.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use tickbox_majordomo::{
    run_broker, spawn_status_worker, BrokerConfig, BrokerStats, Client, ClientConfig, MdpWorker,
    MdpWorkerConfig,
};

fn bcfg() -> BrokerConfig {
    BrokerConfig {
        heartbeat_interval: Duration::from_millis(100).into(),
        heartbeat_liveness: 3,
        request_expiry: Duration::from_millis(5000).into(),
        busy_timeout: Duration::from_millis(5000).into(),
        ..Default::default()
    }
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

fn start_broker(
    ctx: &zmq::Context,
    ep: &str,
) -> (String, Arc<AtomicBool>, JoinHandle<BrokerStats>) {
    let stop = Arc::new(AtomicBool::new(false));
    let (tx, rx) = std::sync::mpsc::channel();
    let (c, s, e) = (ctx.clone(), Arc::clone(&stop), ep.to_string());
    let h = std::thread::spawn(move || {
        run_broker(&tickbox_auth::Gate::open(&c), &e, bcfg(), &s, Some(tx)).unwrap()
    });
    (rx.recv_timeout(Duration::from_secs(5)).unwrap(), stop, h)
}

#[test]
fn worker_killed_mid_request_client_gets_exactly_one_reply_after_retry() {
    let ctx = zmq::Context::new();
    let (ep, stop, broker) = start_broker(&ctx, "tcp://127.0.0.1:*");
    let executed = Arc::new(AtomicU32::new(0));
    // The doomed worker takes the request and dies without replying or saying goodbye.
    let (c, e) = (ctx.clone(), ep.clone());
    let (got_tx, got_rx) = std::sync::mpsc::channel();
    let doomed = std::thread::spawn(move || {
        let mut w = MdpWorker::connect(&c, &e, "work", wcfg()).unwrap();
        let req = loop {
            if let Some(r) = w.recv(Duration::from_millis(100)).unwrap() {
                break r;
            }
        };
        got_tx.send(req.body).unwrap();
        w.abandon();
    });
    let mut client = Client::new(
        &ctx,
        &ep,
        ClientConfig {
            timeout: Duration::from_millis(500).into(),
            attempts: 3,
        },
    );
    let (c, e, ex) = (ctx.clone(), ep.clone(), Arc::clone(&executed));
    let wstop = Arc::new(AtomicBool::new(false));
    let ws = Arc::clone(&wstop);
    let client_thread = std::thread::spawn(move || {
        let r = client
            .request("work", &[b"job-1".to_vec()])
            .map_err(|e| e.to_string());
        (r, client.resends)
    });
    assert_eq!(
        got_rx.recv_timeout(Duration::from_secs(5)).unwrap(),
        vec![b"job-1".to_vec()]
    );
    doomed.join().unwrap();
    // A healthy worker appears; the client's retry lands on it.
    let healthy = std::thread::spawn(move || {
        let mut w = MdpWorker::connect(&c, &e, "work", wcfg()).unwrap();
        w.serve(&ws, |b| {
            ex.fetch_add(1, Ordering::SeqCst);
            vec![[b"done:".as_slice(), &b[0]].concat()]
        })
        .unwrap();
    });
    let (reply, resends) = client_thread.join().unwrap();
    assert_eq!(reply.unwrap(), vec![b"done:job-1".to_vec()]);
    assert_eq!(resends, 1);
    assert_eq!(executed.load(Ordering::SeqCst), 1);
    wstop.store(true, Ordering::Relaxed);
    healthy.join().unwrap();
    stop.store(true, Ordering::Relaxed);
    broker.join().unwrap();
}

#[test]
fn broker_restart_workers_reregister_and_clients_recover() {
    let ctx = zmq::Context::new();
    let dir = tempfile::tempdir().unwrap();
    let ep = format!("ipc://{}/broker.sock", dir.path().display());
    let (_, stop1, broker1) = start_broker(&ctx, &ep);
    let wstop = Arc::new(AtomicBool::new(false));
    let (c, e, ws) = (ctx.clone(), ep.clone(), Arc::clone(&wstop));
    let worker = std::thread::spawn(move || {
        let mut w = MdpWorker::connect(&c, &e, "echo", wcfg()).unwrap();
        w.serve(&ws, |b| b.clone()).unwrap();
        w.reconnects()
    });
    let mut client = Client::new(
        &ctx,
        &ep,
        ClientConfig {
            timeout: Duration::from_millis(500).into(),
            attempts: 10,
        },
    );
    assert_eq!(
        client.request("echo", &[b"before".to_vec()]).unwrap(),
        vec![b"before".to_vec()]
    );

    stop1.store(true, Ordering::Relaxed);
    broker1.join().unwrap();
    // libzmq closes the old broker's listener in its I/O thread: the new one starts once nothing listens there.
    let path = dir.path().join("broker.sock");
    tickbox_testkit::wait_for(
        "the old broker's listener to close",
        Duration::from_secs(5),
        || std::os::unix::net::UnixStream::connect(&path).is_err(),
    );
    let (_, stop2, broker2) = start_broker(&ctx, &ep);
    let t0 = Instant::now();
    assert_eq!(
        client.request("echo", &[b"after".to_vec()]).unwrap(),
        vec![b"after".to_vec()]
    );
    assert!(t0.elapsed() < Duration::from_secs(5));
    wstop.store(true, Ordering::Relaxed);
    assert!(
        worker.join().unwrap() >= 1,
        "the worker noticed the dead broker and reconnected"
    );
    stop2.store(true, Ordering::Relaxed);
    let stats = broker2.join().unwrap();
    assert_eq!(stats.workers_registered, 1);
}

#[test]
fn status_worker_answers_with_the_closure_body() {
    let ctx = zmq::Context::new();
    let (ep, stop, broker) = start_broker(&ctx, "tcp://127.0.0.1:*");
    let counter = Arc::new(AtomicU32::new(0));
    let c2 = Arc::clone(&counter);
    let status = spawn_status_worker(&ctx, &ep, "feed", wcfg(), move || {
        format!("{{\"published\":{}}}", c2.fetch_add(1, Ordering::SeqCst)).into_bytes()
    })
    .unwrap();
    assert_eq!(status.service(), "tickbox.feed.status");
    let mut client = Client::new(
        &ctx,
        &ep,
        ClientConfig {
            timeout: Duration::from_millis(1000).into(),
            attempts: 3,
        },
    );
    assert_eq!(
        client
            .request("tickbox.feed.status", &[b"".to_vec()])
            .unwrap(),
        vec![b"{\"published\":0}".to_vec()]
    );
    assert_eq!(
        client
            .request("tickbox.feed.status", &[b"x".to_vec()])
            .unwrap(),
        vec![b"{\"published\":1}".to_vec()]
    );
    status.stop().unwrap();
    assert!(spawn_status_worker(&ctx, &ep, "bad name", wcfg(), Vec::new).is_err());
    stop.store(true, Ordering::Relaxed);
    broker.join().unwrap();
}
