//! 8/MMI over real sockets with raw clients: exact 3-byte status frames, the service frame echoes the `mmi.*`
//! name, READY for `mmi.*` is refused with DISCONNECT.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tickbox_majordomo::{run_broker, BrokerConfig, BrokerStats};

type Frames = Vec<Vec<u8>>;

fn f(parts: &[&[u8]]) -> Frames {
    parts.iter().map(|p| p.to_vec()).collect()
}

fn recv(s: &zmq::Socket) -> Frames {
    assert!(s.poll(zmq::POLLIN, 3000).unwrap() > 0, "no reply");
    s.recv_multipart(0).unwrap()
}

/// A broker on a wildcard loopback port: its endpoint, its stop flag and its thread (which returns its stats).
fn start_broker(
    ctx: &zmq::Context,
    cfg: BrokerConfig,
) -> (
    String,
    Arc<AtomicBool>,
    std::thread::JoinHandle<BrokerStats>,
) {
    let stop = Arc::new(AtomicBool::new(false));
    let (tx, rx) = std::sync::mpsc::channel();
    let (c, s) = (ctx.clone(), Arc::clone(&stop));
    let broker = std::thread::spawn(move || {
        run_broker(
            &tickbox_auth::Gate::open(&c),
            "tcp://127.0.0.1:*",
            cfg,
            &s,
            Some(tx),
        )
        .unwrap()
    });
    (
        rx.recv_timeout(Duration::from_secs(5)).unwrap(),
        stop,
        broker,
    )
}

#[test]
fn mmi_answers_200_404_501_with_exact_frames() {
    let ctx = zmq::Context::new();
    let cfg = BrokerConfig {
        heartbeat_interval: Duration::from_millis(100).into(),
        ..Default::default()
    };
    let (ep, stop, broker) = start_broker(&ctx, cfg);

    let req = ctx.socket(zmq::REQ).unwrap();
    req.set_linger(0).unwrap();
    req.connect(&ep).unwrap();
    let ask = |svc: &[u8], body: &[u8]| {
        req.send_multipart(f(&[b"MDPC01", svc, body]), 0).unwrap();
        recv(&req)
    };
    assert_eq!(
        ask(b"mmi.service", b"echo"),
        f(&[b"MDPC01", b"mmi.service", b"404"])
    );

    let worker = ctx.socket(zmq::DEALER).unwrap();
    worker.set_linger(0).unwrap();
    worker.connect(&ep).unwrap();
    worker
        .send_multipart(f(&[b"", b"MDPW01", &[1], b"echo"]), 0)
        .unwrap();
    let mut status = Vec::new();
    tickbox_testkit::wait_until(Duration::from_secs(2), || {
        status = ask(b"mmi.service", b"echo");
        status[2] == b"200"
    });
    assert_eq!(status, f(&[b"MDPC01", b"mmi.service", b"200"]));
    assert_eq!(ask(b"mmi.foo", b"x"), f(&[b"MDPC01", b"mmi.foo", b"501"]));
    assert_eq!(ask(b"mmi.", b"x"), f(&[b"MDPC01", b"mmi.", b"501"]));

    // DEALER client: same answer with the empty delimiter it wrote itself.
    let dealer = ctx.socket(zmq::DEALER).unwrap();
    dealer.set_linger(0).unwrap();
    dealer.connect(&ep).unwrap();
    dealer
        .send_multipart(f(&[b"", b"MDPC01", b"mmi.service", b"nobody"]), 0)
        .unwrap();
    assert_eq!(recv(&dealer), f(&[b"", b"MDPC01", b"mmi.service", b"404"]));
    // 18/MDP 0.2 client: a FINAL.
    dealer
        .send_multipart(f(&[b"MDPC02", &[1], b"mmi.service", b"echo"]), 0)
        .unwrap();
    assert_eq!(recv(&dealer), f(&[b"MDPC02", &[3], b"mmi.service", b"200"]));

    // A worker may not offer an mmi.* service.
    let bad = ctx.socket(zmq::DEALER).unwrap();
    bad.set_linger(0).unwrap();
    bad.connect(&ep).unwrap();
    bad.send_multipart(f(&[b"", b"MDPW01", &[1], b"mmi.service"]), 0)
        .unwrap();
    assert_eq!(recv(&bad), f(&[b"", b"MDPW01", &[5]]));

    // The worker leaves: presence goes back to 404.
    worker
        .send_multipart(f(&[b"", b"MDPW01", &[5]]), 0)
        .unwrap();
    tickbox_testkit::wait_until(Duration::from_secs(2), || {
        status = ask(b"mmi.service", b"echo");
        status[2] == b"404"
    });
    assert_eq!(status[2], b"404");
    stop.store(true, Ordering::Relaxed);
    let stats = broker.join().unwrap();
    assert!(stats.mmi >= 6);
}

#[test]
fn await_served_says_no_until_the_broker_has_seen_the_workers_ready() {
    let ctx = zmq::Context::new();
    let (ep, stop, broker) = start_broker(&ctx, BrokerConfig::default());
    let open = tickbox_auth::Security::default();
    let await_served = |within| {
        tickbox_majordomo::client::await_served(&ctx, &ep, &open, &["echo", "tick"], within)
            .unwrap()
    };
    assert!(
        !await_served(Duration::from_millis(200)),
        "nobody serves echo yet"
    );

    let workers: Vec<zmq::Socket> = ["echo", "tick"]
        .iter()
        .map(|service| {
            let w = ctx.socket(zmq::DEALER).unwrap();
            w.set_linger(0).unwrap();
            w.connect(&ep).unwrap();
            w.send_multipart(f(&[b"", b"MDPW01", &[1], service.as_bytes()]), 0)
                .unwrap();
            w
        })
        .collect();
    assert!(
        await_served(Duration::from_secs(5)),
        "both workers said READY"
    );

    drop(workers);
    stop.store(true, Ordering::Relaxed);
    broker.join().unwrap();
}
