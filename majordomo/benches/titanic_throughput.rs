//! Titanic durable `titanic.request` acknowledgements per second under each fsync policy, beside plain MDP
//! echo requests through the same broker in the same run (the non-durable baseline) and raw journal appends.
//!
//! Run: `cargo bench -p tickbox-majordomo --bench titanic_throughput` (env `TITANIC_BENCH_N`, default 2000;
//! `TITANIC_BENCH_RUNS`, default 3; `TITANIC_BENCH_DIR` for the journal location, default the system temp dir).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tickbox_majordomo::titanic::{FsyncPolicy, Titanic, TitanicConfig};
use tickbox_majordomo::{
    run_broker, BrokerConfig, Client, ClientConfig, MdpWorker, MdpWorkerConfig,
};

fn env(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn wait_service(c: &mut Client, name: &str) {
    while c
        .request("mmi.service", &[name.as_bytes().to_vec()])
        .unwrap()[0]
        != b"200"
    {
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn main() {
    let n = env("TITANIC_BENCH_N", 2000);
    let runs = env("TITANIC_BENCH_RUNS", 3);
    let root = std::env::var("TITANIC_BENCH_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|_| std::env::temp_dir());
    let ctx = zmq::Context::new();
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
    let echo = std::thread::spawn(move || {
        let mut w = MdpWorker::connect(&c, &e, "echo", MdpWorkerConfig::default()).unwrap();
        w.serve(&s, |b| b.clone()).unwrap();
    });
    let mut client = Client::new(
        &ctx,
        &ep,
        ClientConfig {
            timeout: Duration::from_millis(30_000).into(),
            attempts: 1,
        },
    );
    wait_service(&mut client, "echo");
    let body = vec![b"work".to_vec(), vec![7u8; 100]];
    println!(
        "{n} sync requests per case, {runs} runs, journal under {}",
        root.display()
    );
    println!(
        "{:<34} {:>10} {:>10} {:>10} {:>8}",
        "case", "run1 /s", "run2 /s", "run3 /s", "ratio"
    );
    let mut echo_rates = Vec::new();
    for _ in 0..runs {
        let t0 = Instant::now();
        for _ in 0..n {
            client.request("echo", &body[1..]).unwrap();
        }
        echo_rates.push(n as f64 / t0.elapsed().as_secs_f64());
    }
    let avg = |v: &[f64]| v.iter().sum::<f64>() / v.len() as f64;
    let base = avg(&echo_rates);
    let fmt = |v: &[f64]| {
        v.iter()
            .map(|r| format!("{r:>10.0}"))
            .collect::<Vec<_>>()
            .join(" ")
    };
    println!(
        "{:<34} {} {:>8.3}",
        "MDP echo (baseline, not durable)",
        fmt(&echo_rates),
        1.0
    );
    for (name, policy) in [
        ("titanic.request fsync per request", FsyncPolicy::PerRequest),
        ("titanic.request fsync every 10 ms", FsyncPolicy::Periodic),
        ("titanic.request no fsync", FsyncPolicy::None),
    ] {
        let mut rates = Vec::new();
        for _ in 0..runs {
            let dir = tempfile::tempdir_in(&root).unwrap();
            // A long scan interval keeps the dispatcher out of the measurement (no "work" worker exists anyway).
            let cfg = TitanicConfig {
                fsync: policy,
                fsync_interval: Duration::from_millis(10).into(),
                scan: Duration::from_millis(3_600_000).into(),
                ..Default::default()
            };
            let titanic = Titanic::start(&ctx, &ep, dir.path(), cfg).unwrap();
            wait_service(&mut client, "titanic.request");
            let t0 = Instant::now();
            for _ in 0..n {
                let r = client.request("titanic.request", &body).unwrap();
                assert_eq!(r[0], b"200");
            }
            rates.push(n as f64 / t0.elapsed().as_secs_f64());
            titanic.stop().unwrap();
            // Let the broker forget the stopped Titanic's workers before the next run registers new ones.
            while client
                .request("mmi.service", &[b"titanic.request".to_vec()])
                .unwrap()[0]
                == b"200"
            {
                std::thread::sleep(Duration::from_millis(5));
            }
        }
        println!("{:<34} {} {:>8.3}", name, fmt(&rates), avg(&rates) / base);
    }
    // The journal alone, to show where the time goes: appends of the same event size, msync each vs none.
    for (name, durability) in [
        (
            "journal append+msync (no network)",
            tickbox_journal::Durability::PerBatch,
        ),
        (
            "journal append (no network)",
            tickbox_journal::Durability::None,
        ),
    ] {
        let mut rates = Vec::new();
        for _ in 0..runs {
            let dir = tempfile::tempdir_in(&root).unwrap();
            let opts = tickbox_journal::WriterOptions::archive(64 << 20).durability(durability);
            let mut w = tickbox_journal::Writer::open(dir.path(), &opts).unwrap();
            let rec = vec![1u8; 150];
            let t0 = Instant::now();
            for i in 0..n {
                w.append(i as u64, &rec).unwrap();
            }
            rates.push(n as f64 / t0.elapsed().as_secs_f64());
        }
        println!("{:<34} {} {:>8.3}", name, fmt(&rates), avg(&rates) / base);
    }
    stop.store(true, Ordering::Relaxed);
    echo.join().unwrap();
    broker.join().unwrap();
}
