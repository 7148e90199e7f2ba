//! Proxy throughput: LVC (with and without a consumed Espresso tap) against a plain libzmq XSUB/XPUB proxy
//! (`zmq_proxy`) and against no proxy at all, 100-byte wire frames over TCP loopback, same run, 3 rounds.
//!
//! `cargo bench -p tickbox-lvc --bench proxy` (env `PROXY_BENCH_MESSAGES`, default 1,000,000 per measurement).
//!
//! Every hop is lossless (XPUB_NODROP publisher, `back_pressure = block` LVC, NODROP on the plain proxy's XPUB),
//! so each measurement delivers exactly N messages and the figure is N / (last receive - first receive).
//! Publisher, proxy and subscriber each get their own context (one I/O thread each), as separate processes would.

use std::sync::mpsc;
use std::time::{Duration, Instant};

use tickbox_lvc as lvc;
use tickbox_lvc::{BackPressure, LvcConfig};
use tickbox_wire::{encode_to_vec, Header, Kind, Quote};

const TOPICS: usize = 1000;

#[derive(Clone, Copy, Debug, PartialEq)]
enum Setup {
    Direct,
    ZmqProxy,
    ZmqProxyCapture,
    Lvc,
    LvcTap,
}

impl Setup {
    fn name(self) -> &'static str {
        match self {
            Setup::Direct => "no proxy",
            Setup::ZmqProxy => "zmq_proxy",
            Setup::ZmqProxyCapture => "zmq_proxy + capture",
            Setup::Lvc => "lvc",
            Setup::LvcTap => "lvc + tap",
        }
    }
}

fn frames() -> Vec<Vec<u8>> {
    (0..TOPICS)
        .map(|i| {
            // 15-byte topic + NUL + 40-byte header + 44-byte quote = 100 bytes.
            let topic = format!("Q.XNAS.{i:0>8}");
            let frame = encode_to_vec(
                &topic,
                &Header::live(Kind::Quote, 1, 1, 1),
                &Quote::default().into(),
            )
            .unwrap();
            assert_eq!(frame.len(), 100);
            frame
        })
        .collect()
}

/// CPU time used by the whole process (all threads, user + system), in seconds. Unlike wall time it does not
/// count time spent waiting for a core, so it stays meaningful on a machine shared with other work.
fn process_cpu_seconds() -> f64 {
    tickbox_testkit::cpu::process_cpu().as_secs_f64()
}

/// Thread CPU time of the calling thread, in seconds.
fn thread_cpu_seconds() -> f64 {
    tickbox_testkit::cpu::thread_cpu().as_secs_f64()
}

fn xpub_nodrop(ctx: &zmq::Context) -> zmq::Socket {
    let mut s = ctx.socket(zmq::XPUB).unwrap();
    s.set_linger(0).unwrap();
    s.set_sndhwm(100_000).unwrap();
    tickbox_zmqx::set_xpub_nodrop(&mut s, true).unwrap();
    s
}

/// Publishes warm-up frames until the subscriber has one (so the whole path is connected and subscribed), then
/// `n` data frames. Returns the subscriber's messages per second and the whole process's CPU nanoseconds per
/// message (publisher, proxy, subscriber and their I/O threads) over the measurement.
fn measure(setup: Setup, n: u64) -> (f64, f64) {
    let pub_ctx = zmq::Context::new();
    let proxy_ctx = zmq::Context::new();
    let sub_ctx = zmq::Context::new();
    let (ep_tx, ep_rx) = mpsc::channel::<String>();
    let (ready_tx, ready_rx) = mpsc::channel::<()>();

    let publisher = std::thread::spawn(move || {
        let socket = xpub_nodrop(&pub_ctx);
        let ep = tickbox_zmqx::bind_resolved(&socket, "tcp://127.0.0.1:*").unwrap();
        ep_tx.send(ep).unwrap();
        let warm = encode_to_vec(
            "W.WARM",
            &Header::live(Kind::Quote, 1, 0, 0),
            &Quote::default().into(),
        )
        .unwrap();
        while ready_rx.try_recv().is_err() {
            let _ = socket.send(&warm[..], zmq::DONTWAIT);
            while socket.recv_bytes(zmq::DONTWAIT).is_ok() {}
            std::thread::sleep(Duration::from_millis(1));
        }
        let frames = frames();
        for i in 0..n as usize {
            socket.send(&frames[i % TOPICS][..], 0).unwrap();
        }
        // Keep the socket until the subscriber is done (linger 0 would discard queued frames).
        std::thread::sleep(Duration::from_millis(50));
        socket
    });
    let upstream = ep_rx.recv().unwrap();

    // The proxy under test, and where the subscriber connects.
    let mut stop_plain: Option<zmq::Socket> = None;
    let mut plain_thread = None;
    let mut lvc_handle = None;
    let mut tap_thread = None;
    let downstream = match setup {
        Setup::Direct => upstream.clone(),
        Setup::ZmqProxy | Setup::ZmqProxyCapture => {
            let capture = setup == Setup::ZmqProxyCapture;
            let (tx, rx) = mpsc::channel();
            let ctx = proxy_ctx.clone();
            let up = upstream.clone();
            let control_ep = format!("inproc://proxy-control-{}", std::process::id());
            let ctl_ep = control_ep.clone();
            plain_thread = Some(std::thread::spawn(move || {
                let mut xsub = ctx.socket(zmq::XSUB).unwrap();
                xsub.set_linger(0).unwrap();
                xsub.set_rcvhwm(100_000).unwrap();
                xsub.connect(&up).unwrap();
                let mut xpub = xpub_nodrop(&ctx);
                let ep = tickbox_zmqx::bind_resolved(&xpub, "tcp://127.0.0.1:*").unwrap();
                let mut control = ctx.socket(zmq::PAIR).unwrap();
                control.set_linger(0).unwrap();
                control.bind(&ctl_ep).unwrap();
                if capture {
                    // libzmq's own capture: a lossy PUB, the equivalent of our tap.
                    let mut capture = ctx.socket(zmq::PUB).unwrap();
                    capture.set_linger(0).unwrap();
                    capture.set_sndhwm(100_000).unwrap();
                    let cap_ep =
                        tickbox_zmqx::bind_resolved(&capture, "tcp://127.0.0.1:*").unwrap();
                    tx.send((ep, Some(cap_ep))).unwrap();
                    let _ = zmq::proxy_steerable_with_capture(
                        &mut xsub,
                        &mut xpub,
                        &mut capture,
                        &mut control,
                    );
                } else {
                    tx.send((ep, None)).unwrap();
                    let _ = zmq::proxy_steerable(&mut xsub, &mut xpub, &mut control);
                }
            }));
            let (ep, cap_ep) = rx.recv().unwrap();
            if let Some(cap_ep) = cap_ep {
                tap_thread = Some(tap_consumer(&sub_ctx, cap_ep));
            }
            let stop = proxy_ctx.socket(zmq::PAIR).unwrap();
            stop.set_linger(0).unwrap();
            stop.connect(&control_ep).unwrap();
            stop_plain = Some(stop);
            ep
        }
        Setup::Lvc | Setup::LvcTap => {
            let config = LvcConfig {
                upstream: vec![upstream.clone()],
                bind: "tcp://127.0.0.1:*".into(),
                tap: (setup == Setup::LvcTap).then(|| "tcp://127.0.0.1:*".into()),
                back_pressure: BackPressure::Block,
                stats_interval: tickbox_units::HumanDuration(std::time::Duration::ZERO),
                ..LvcConfig::default()
            };
            let handle = lvc::spawn(&tickbox_auth::Gate::open(&proxy_ctx), config).unwrap();
            if let Some(tap_ep) = handle.endpoints().tap.clone() {
                tap_thread = Some(tap_consumer(&sub_ctx, tap_ep));
            }
            let ep = handle.endpoints().downstream.clone();
            lvc_handle = Some(handle);
            ep
        }
    };

    let sub = sub_ctx.socket(zmq::SUB).unwrap();
    sub.set_linger(0).unwrap();
    sub.set_rcvhwm(100_000).unwrap();
    sub.connect(&downstream).unwrap();
    sub.set_subscribe(b"").unwrap();
    let mut msg = zmq::Message::new();
    loop {
        sub.recv(&mut msg, 0).unwrap();
        if msg.starts_with(b"W.") {
            break;
        }
    }
    ready_tx.send(()).unwrap();
    let mut received = 0u64;
    let mut first = None;
    let cpu_before = process_cpu_seconds();
    sub.set_rcvtimeo(10_000).unwrap();
    while received < n {
        sub.recv(&mut msg, 0).expect("lossless path stalled");
        if msg.starts_with(b"Q.") {
            first.get_or_insert_with(Instant::now);
            received += 1;
        }
    }
    let elapsed = first.unwrap().elapsed();
    let cpu = process_cpu_seconds() - cpu_before;
    drop(publisher.join().unwrap());
    if let Some(stop) = stop_plain {
        stop.send("TERMINATE", 0).unwrap();
        plain_thread.unwrap().join().unwrap();
        if let Some(t) = tap_thread.take() {
            eprintln!("    (capture consumer got {} of {n})", t.join().unwrap());
        }
    }
    if let Some(handle) = lvc_handle {
        let stats = handle.join().unwrap();
        assert_eq!(stats.downstream_dropped, 0);
        if let Some(t) = tap_thread {
            let tapped = t.join().unwrap();
            eprintln!(
                "    (tap consumer got {tapped} of {n}; tap_dropped {})",
                stats.tap_dropped
            );
        }
    }
    (n as f64 / elapsed.as_secs_f64(), cpu * 1e9 / n as f64)
}

/// One consumer reading a tap/capture as fast as it can, as a recorder would; returns how many it got.
fn tap_consumer(ctx: &zmq::Context, endpoint: String) -> std::thread::JoinHandle<u64> {
    let ctx = ctx.clone();
    std::thread::spawn(move || {
        let sub = ctx.socket(zmq::SUB).unwrap();
        sub.set_linger(0).unwrap();
        sub.set_rcvtimeo(3000).unwrap();
        sub.connect(&endpoint).unwrap();
        sub.set_subscribe(b"").unwrap();
        let mut got = 0u64;
        let mut msg = zmq::Message::new();
        while sub.recv(&mut msg, 0).is_ok() {
            got += 1;
        }
        got
    })
}

/// The LVC's own per-message work (decode, cache update, LRU) without sockets, in ns per message: the part of
/// the proxy's cost that a plain proxy does not pay.
fn engine_ns_per_message(n: u64) -> f64 {
    let frames = frames();
    let mut engine = lvc::LvcEngine::new(&LvcConfig::default());
    for f in &frames {
        engine.handle_upstream(f);
    }
    let started = thread_cpu_seconds();
    for i in 0..n as usize {
        std::hint::black_box(engine.handle_upstream(std::hint::black_box(&frames[i % TOPICS])));
    }
    (thread_cpu_seconds() - started) * 1e9 / n as f64
}

fn main() {
    // `cargo test --benches` runs bench binaries with `--bench` absent; keep that quick.
    let quick = !std::env::args().any(|a| a == "--bench");
    let n: u64 = std::env::var("PROXY_BENCH_MESSAGES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(if quick { 20_000 } else { 1_000_000 });
    let setups = [
        Setup::Direct,
        Setup::ZmqProxy,
        Setup::ZmqProxyCapture,
        Setup::Lvc,
        Setup::LvcTap,
    ];
    let rounds = if quick { 1 } else { 3 };
    if std::env::var("PROXY_BENCH_ONLY").as_deref() == Ok("engine") {
        let engine: Vec<f64> = (0..rounds).map(|_| engine_ns_per_message(n * 10)).collect();
        println!("LVC engine alone (decode + cache update), thread CPU ns/message: {engine:.1?}");
        return;
    }
    let mut results = vec![Vec::new(); setups.len()];
    let mut cpu = vec![Vec::new(); setups.len()];
    for round in 1..=rounds {
        println!("round {round}: {n} messages of 100 bytes");
        for (i, setup) in setups.iter().enumerate() {
            let (rate, cpu_ns) = measure(*setup, n);
            results[i].push(rate);
            cpu[i].push(cpu_ns);
            println!(
                "  {:<20} {:>12.0} msg/s  {:>7.0} CPU ns/msg",
                setup.name(),
                rate,
                cpu_ns
            );
        }
        let plain = results[1][round - 1];
        println!(
            "  ratios: lvc / zmq_proxy {:.3}; lvc + tap / zmq_proxy + capture {:.3}; no proxy / zmq_proxy {:.3}",
            results[3][round - 1] / plain,
            results[4][round - 1] / results[2][round - 1],
            results[0][round - 1] / plain,
        );
    }
    let engine: Vec<f64> = (0..rounds).map(|_| engine_ns_per_message(n * 10)).collect();
    println!("\nLVC engine alone (decode + cache update), thread CPU ns/message: {engine:.1?}");
    println!("\nmedian of {rounds} rounds:");
    let median = |v: &Vec<f64>| {
        let mut v = v.clone();
        v.sort_by(|a, b| a.partial_cmp(b).unwrap());
        v[v.len() / 2]
    };
    let plain = median(&results[1]);
    for (i, setup) in setups.iter().enumerate() {
        let m = median(&results[i]);
        println!(
            "  {:<20} {:>12.0} msg/s  {:.3} x zmq_proxy",
            setup.name(),
            m,
            m / plain
        );
    }
    let paired = |a: usize, b: usize, of: &Vec<Vec<f64>>| {
        median(
            &(0..rounds)
                .map(|r| of[a][r] / of[b][r])
                .collect::<Vec<f64>>(),
        )
    };
    println!(
        "median of same-round throughput ratios: lvc / zmq_proxy {:.3}, lvc + tap / zmq_proxy + capture {:.3}",
        paired(3, 1, &results),
        paired(4, 2, &results)
    );
    println!(
        "median CPU per message (whole process, all threads; not inflated by waiting for a core):"
    );
    let plain_cpu = median(&cpu[1]);
    for (i, setup) in setups.iter().enumerate() {
        let m = median(&cpu[i]);
        println!(
            "  {:<20} {:>8.0} ns/msg  {:.3} x zmq_proxy",
            setup.name(),
            m,
            m / plain_cpu
        );
    }
    println!(
        "median of same-round CPU ratios: lvc / zmq_proxy {:.3}, lvc + tap / zmq_proxy + capture {:.3}",
        paired(3, 1, &cpu),
        paired(4, 2, &cpu)
    );
}
