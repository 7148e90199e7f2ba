//! Requests/s through the Majordomo broker (1 and 10 clients, synchronous and asynchronous, one echo worker)
//! beside a raw-libzmq baseline measured in the same run (DEALER ↔ ROUTER echo, no broker, same payload).
//!
//! Run: `cargo bench -p tickbox-majordomo --bench mdp_throughput` (env `MDP_BENCH_N` = requests per case,
//! default 20000; `MDP_BENCH_RUNS` = repetitions, default 3).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tickbox_majordomo::{
    run_broker, AsyncClient, BrokerConfig, Client, ClientConfig, MdpWorker, MdpWorkerConfig,
};

const PAYLOAD: &[u8] = b"Hello world";

fn env(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Raw baseline: `clients` DEALERs against one ROUTER echo thread; sync = one in flight, async = all at once.
fn raw(ctx: &zmq::Context, clients: usize, n: usize, asynchronous: bool) -> f64 {
    let stop = Arc::new(AtomicBool::new(false));
    let (tx, rx) = std::sync::mpsc::channel();
    let (c, s) = (ctx.clone(), Arc::clone(&stop));
    let server = std::thread::spawn(move || {
        let r = c.socket(zmq::ROUTER).unwrap();
        r.set_linger(0).unwrap();
        r.set_sndhwm(0).unwrap();
        r.set_rcvhwm(0).unwrap();
        r.bind("tcp://127.0.0.1:*").unwrap();
        tx.send(r.get_last_endpoint().unwrap().unwrap()).unwrap();
        while !s.load(Ordering::Relaxed) {
            if r.poll(zmq::POLLIN, 50).unwrap() > 0 {
                while let Ok(m) = r.recv_multipart(zmq::DONTWAIT) {
                    r.send_multipart(m, 0).unwrap();
                }
            }
        }
    });
    let ep = rx.recv().unwrap();
    let per = n / clients;
    let t0 = Instant::now();
    let threads: Vec<_> = (0..clients)
        .map(|_| {
            let (c, ep) = (ctx.clone(), ep.clone());
            std::thread::spawn(move || {
                let d = c.socket(zmq::DEALER).unwrap();
                d.set_linger(0).unwrap();
                d.set_sndhwm(0).unwrap();
                d.set_rcvhwm(0).unwrap();
                d.connect(&ep).unwrap();
                if asynchronous {
                    for _ in 0..per {
                        d.send_multipart([&b""[..], PAYLOAD], 0).unwrap();
                    }
                    for _ in 0..per {
                        d.recv_multipart(0).unwrap();
                    }
                } else {
                    for _ in 0..per {
                        d.send_multipart([&b""[..], PAYLOAD], 0).unwrap();
                        d.recv_multipart(0).unwrap();
                    }
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let rate = (per * clients) as f64 / t0.elapsed().as_secs_f64();
    stop.store(true, Ordering::Relaxed);
    server.join().unwrap();
    rate
}

fn broker_case(ctx: &zmq::Context, clients: usize, n: usize, asynchronous: bool) -> f64 {
    let stop = Arc::new(AtomicBool::new(false));
    let (tx, rx) = std::sync::mpsc::channel();
    let (c, s) = (ctx.clone(), Arc::clone(&stop));
    let broker = std::thread::spawn(move || {
        run_broker(
            &tickbox_auth::Gate::open(&c),
            "tcp://127.0.0.1:*",
            BrokerConfig::default(),
            &s,
            Some(tx),
        )
        .unwrap();
    });
    let ep = rx.recv().unwrap();
    let (c, e, s) = (ctx.clone(), ep.clone(), Arc::clone(&stop));
    let worker = std::thread::spawn(move || {
        let mut w = MdpWorker::connect(&c, &e, "echo", MdpWorkerConfig::default()).unwrap();
        w.serve(&s, |b| b.clone()).unwrap();
    });
    // Wait for the worker to register.
    let mut probe = Client::new(
        ctx,
        &ep,
        ClientConfig {
            timeout: Duration::from_millis(1000).into(),
            attempts: 5,
        },
    );
    while probe.request("mmi.service", &[b"echo".to_vec()]).unwrap()[0] != b"200" {
        std::thread::sleep(Duration::from_millis(5));
    }
    let per = n / clients;
    let t0 = Instant::now();
    let threads: Vec<_> = (0..clients)
        .map(|_| {
            let (c, ep) = (ctx.clone(), ep.clone());
            std::thread::spawn(move || {
                let body = [PAYLOAD.to_vec()];
                if asynchronous {
                    let mut a = AsyncClient::connect(&c, &ep).unwrap();
                    for _ in 0..per {
                        a.send("echo", &body).unwrap();
                    }
                    for _ in 0..per {
                        a.recv(Duration::from_secs(30)).unwrap().expect("reply");
                    }
                } else {
                    let mut cl = Client::new(
                        &c,
                        &ep,
                        ClientConfig {
                            timeout: Duration::from_millis(30_000).into(),
                            attempts: 1,
                        },
                    );
                    for _ in 0..per {
                        cl.request("echo", &body).unwrap();
                    }
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let rate = (per * clients) as f64 / t0.elapsed().as_secs_f64();
    stop.store(true, Ordering::Relaxed);
    worker.join().unwrap();
    broker.join().unwrap();
    rate
}

fn main() {
    // `cargo bench` passes `--bench`; any other argument is a filter we do not support, so ignore them all.
    let n = env("MDP_BENCH_N", 20_000);
    let runs = env("MDP_BENCH_RUNS", 3);
    let ctx = zmq::Context::new();
    println!(
        "{n} requests per case, {runs} runs, payload {} B, one echo worker",
        PAYLOAD.len()
    );
    println!(
        "{:<24} {:>12} {:>12} {:>12} {:>14} {:>8}",
        "case", "run1 req/s", "run2 req/s", "run3 req/s", "raw req/s(avg)", "ratio"
    );
    for clients in [1usize, 10] {
        for asynchronous in [false, true] {
            let mut rates = Vec::new();
            let mut raws = Vec::new();
            for _ in 0..runs {
                raws.push(raw(&ctx, clients, n, asynchronous));
                rates.push(broker_case(&ctx, clients, n, asynchronous));
            }
            let avg = |v: &[f64]| v.iter().sum::<f64>() / v.len() as f64;
            let name = format!(
                "{clients} client(s) {}",
                if asynchronous { "async" } else { "sync" }
            );
            let cols: Vec<String> = rates.iter().map(|r| format!("{r:>12.0}")).collect();
            println!(
                "{:<24} {} {:>14.0} {:>8.3}",
                name,
                cols.join(" "),
                avg(&raws),
                avg(&rates) / avg(&raws)
            );
        }
    }
}
