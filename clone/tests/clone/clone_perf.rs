//! Measurements, not assertions (ignored by default). Run:
//! `CARGO_TARGET_DIR=... cargo test --release -p tickbox-clone --test clone clone_perf:: -- --ignored --nocapture --test-threads 1`
//!
//! Each figure is printed with a raw-libzmq baseline measured in the same run.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use tickbox_bstar::{BstarConfig, BstarEndpoints, Role, State};
use tickbox_clone::{
    ClientConfig, CloneClient, CloneServer, HaOptions, ServerBind, ServerConfig, ServerEndpoints,
    ServerOptions,
};

const RUNS: usize = 3;

fn start(ctx: &zmq::Context) -> (CloneServer, ServerEndpoints) {
    let server = CloneServer::start(
        &tickbox_auth::Gate::open(ctx),
        ServerOptions {
            bind: ServerBind::Base {
                interface: "127.0.0.1".into(),
                port: 0,
            },
            ha: None,
            config: ServerConfig {
                hugz: Duration::from_millis(100).into(),
                ..ServerConfig::default()
            },
            data_dir: None,
        },
    )
    .unwrap();
    let eps = ServerEndpoints::from_host_port("127.0.0.1", server.base_port().unwrap());
    (server, eps)
}

fn client_config() -> ClientConfig {
    ClientConfig {
        subscribe_wait: Duration::from_millis(200).into(),
        ..ClientConfig::default()
    }
}

fn raw_pub(ctx: &zmq::Context, ep: &str) -> zmq::Socket {
    let s = ctx.socket(zmq::PUB).unwrap();
    s.set_linger(1000).unwrap();
    s.set_sndhwm(0).unwrap();
    s.connect(ep).unwrap();
    s
}

/// Raw KVSET frames, each with a fresh UUID.
fn send_kvset(s: &zmq::Socket, key: &[u8], value: &[u8]) {
    let uuid = *uuid::Uuid::new_v4().as_bytes();
    s.send_multipart([key, &[0u8; 8][..], &uuid[..], b"", value], 0)
        .unwrap();
}

/// Wait until the collector is connected: send probes until the server's sequence moves.
fn prime(server: &CloneServer, s: &zmq::Socket) {
    let start = server.stats().sequence.load(Ordering::Relaxed);
    let deadline = Instant::now() + Duration::from_secs(5);
    while server.stats().sequence.load(Ordering::Relaxed) == start {
        send_kvset(s, b"/prime", b"1");
        std::thread::sleep(Duration::from_millis(20));
        assert!(Instant::now() < deadline);
    }
    std::thread::sleep(Duration::from_millis(100));
}

/// Raw baseline: SUB(collector) → PUB forwarder thread, N raw SUB receivers, same 5-frame messages.
fn raw_forward_rate(ctx: &zmq::Context, n_subs: usize, count: u64) -> f64 {
    let stop_ep = format!("inproc://fwd-stop-{n_subs}-{count}");
    let col = ctx.socket(zmq::SUB).unwrap();
    col.set_linger(0).unwrap();
    col.set_rcvhwm(0).unwrap();
    col.set_subscribe(b"").unwrap();
    let col_ep = tickbox_testkit::bind_loopback(&col);
    let publ = ctx.socket(zmq::PUB).unwrap();
    publ.set_linger(0).unwrap();
    publ.set_sndhwm(0).unwrap();
    let pub_ep = tickbox_testkit::bind_loopback(&publ);
    let ctl = ctx.socket(zmq::PAIR).unwrap();
    ctl.bind(&stop_ep).unwrap();
    let fwd = {
        let ctx = ctx.clone();
        std::thread::spawn(move || {
            let stop = ctx.socket(zmq::PAIR).unwrap();
            stop.connect(&stop_ep).unwrap();
            loop {
                let mut items = [
                    col.as_poll_item(zmq::POLLIN),
                    stop.as_poll_item(zmq::POLLIN),
                ];
                zmq::poll(&mut items, 100).unwrap();
                if items[1].is_readable() {
                    break;
                }
                while let Ok(m) = col.recv_multipart(zmq::DONTWAIT) {
                    publ.send_multipart(m, 0).unwrap();
                }
            }
        })
    };
    let subs: Vec<_> = (0..n_subs)
        .map(|_| {
            let ctx = ctx.clone();
            let ep = pub_ep.clone();
            let (tx, rx) = std::sync::mpsc::channel();
            let h = std::thread::spawn(move || {
                let s = ctx.socket(zmq::SUB).unwrap();
                s.set_linger(0).unwrap();
                s.set_rcvhwm(0).unwrap();
                s.set_subscribe(b"").unwrap();
                s.connect(&ep).unwrap();
                tx.send(()).unwrap();
                let mut got = 0u64;
                loop {
                    let m = s.recv_multipart(0).unwrap();
                    if m[0] == b"/end" {
                        return got;
                    }
                    got += 1;
                }
            });
            rx.recv().unwrap();
            h
        })
        .collect();
    let w = raw_pub(ctx, &col_ep);
    std::thread::sleep(Duration::from_millis(300));
    let t = Instant::now();
    for i in 0..count {
        send_kvset(
            &w,
            format!("/k/{}", i % 10_000).as_bytes(),
            b"some-value-64-bytes-0123456789012345678901234567890123456789",
        );
    }
    // Repeated end markers: PUB/SUB may not drop, but be safe against a late subscriber.
    let mut done = 0;
    let mut subs = subs;
    while done < n_subs {
        send_kvset(&w, b"/end", b"x");
        std::thread::sleep(Duration::from_millis(1));
        let (finished, rest): (Vec<_>, Vec<_>) = subs.into_iter().partition(|h| h.is_finished());
        done += finished.len();
        for h in finished {
            let got = h.join().unwrap();
            assert!(got >= count, "raw sub lost messages: {got}/{count}");
        }
        subs = rest;
    }
    let rate = count as f64 / t.elapsed().as_secs_f64();
    ctl.send("stop", 0).unwrap();
    fwd.join().unwrap();
    rate
}

fn clone_rate(ctx: &zmq::Context, n_watchers: usize, count: u64) -> f64 {
    let (server, eps) = start(ctx);
    let watchers: Vec<CloneClient> = (0..n_watchers)
        .map(|_| {
            let c =
                CloneClient::connect(ctx, std::slice::from_ref(&eps), "", client_config()).unwrap();
            c.wait_synced(Duration::from_secs(5)).unwrap();
            c
        })
        .collect();
    let w = raw_pub(ctx, &eps.collector);
    prime(&server, &w);
    let base = server.stats().sequence.load(Ordering::Relaxed);
    let t = Instant::now();
    for i in 0..count {
        send_kvset(
            &w,
            format!("/k/{}", i % 10_000).as_bytes(),
            b"some-value-64-bytes-0123456789012345678901234567890123456789",
        );
    }
    let target = base + count;
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let server_done = server.stats().sequence.load(Ordering::Relaxed) >= target;
        let clients_done = watchers
            .iter()
            .all(|c| c.status().unwrap().last_seq >= target);
        if server_done && clients_done {
            break;
        }
        assert!(Instant::now() < deadline, "clone run did not finish");
        std::thread::sleep(Duration::from_millis(2));
    }
    let rate = count as f64 / t.elapsed().as_secs_f64();
    for c in &watchers {
        assert_eq!(
            c.status().unwrap().syncs,
            1,
            "a watcher lost updates and re-synced"
        );
    }
    rate
}

#[test]
#[ignore]
fn perf_updates_per_second_with_n_watchers() {
    let ctx = zmq::Context::new();
    let count = 200_000;
    let ns: Vec<usize> = match std::env::var("CLONE_PERF_N") {
        Ok(v) => v.split(',').filter_map(|x| x.parse().ok()).collect(),
        Err(_) => vec![1, 4, 8],
    };
    for n in ns {
        for run in 0..RUNS {
            let raw = raw_forward_rate(&ctx, n, count);
            let clone = clone_rate(&ctx, n, count);
            println!(
                "updates/s N={n} run={run}: clone {clone:.0}/s, raw SUB->PUB forwarder {raw:.0}/s, ratio {:.2}",
                clone / raw
            );
        }
    }
}

#[test]
#[ignore]
fn perf_snapshot_1m_keys_to_late_joiner() {
    let ctx = zmq::Context::new();
    let (server, eps) = start(&ctx);
    let w = raw_pub(&ctx, &eps.collector);
    prime(&server, &w);
    let n: u64 = std::env::var("CLONE_PERF_KEYS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000_000);
    let t = Instant::now();
    for i in 0..n {
        send_kvset(
            &w,
            format!("/snap/{i:08}").as_bytes(),
            b"value-0123456789012345678901234567890123",
        );
    }
    while server.stats().keys.load(Ordering::Relaxed) < n {
        std::thread::sleep(Duration::from_millis(10));
    }
    println!("loaded {n} keys in {:?}", t.elapsed());
    for run in 0..RUNS {
        // Raw baseline: a bare DEALER asks the same server for the snapshot and only counts frames (no map, no
        // decoding), so the ratio is the cost of the CloneClient agent on top of server + transport.
        let dealer = ctx.socket(zmq::DEALER).unwrap();
        dealer.set_linger(0).unwrap();
        dealer.set_rcvhwm(0).unwrap();
        dealer.connect(&eps.snapshot).unwrap();
        let t = Instant::now();
        dealer.send_multipart([&b"ICANHAZ?"[..], b""], 0).unwrap();
        let mut got = 0u64;
        let raw = loop {
            let m = dealer.recv_multipart(0).unwrap();
            if m[0] == b"KTHXBAI" {
                break t.elapsed();
            }
            got += 1;
        };
        assert_eq!(got, n + 1);
        drop(dealer);
        println!("raw snapshot done in {raw:?}");
        // Clone late joiner (snapshot only: no subscribe wait).
        let config = ClientConfig {
            subscribe_wait: Duration::from_millis(0).into(),
            ..ClientConfig::default()
        };
        let t = Instant::now();
        let c = CloneClient::connect(&ctx, std::slice::from_ref(&eps), "", config).unwrap();
        let status = c.wait_synced(Duration::from_secs(120)).unwrap();
        let clone = t.elapsed();
        assert_eq!(status.keys, n + 1);
        println!("clone snapshot done in {clone:?}");
        drop(c);
        println!(
            "snapshot {n} keys run={run}: clone late joiner {clone:?}, raw DEALER receive {raw:?}, ratio {:.2}",
            clone.as_secs_f64() / raw.as_secs_f64()
        );
    }
}

#[test]
#[ignore]
fn perf_failover_time() {
    for run in 0..RUNS {
        let dir = tempfile::tempdir().unwrap();
        let ep = |n: &str| format!("ipc://{}/{n}", dir.path().display());
        let p_eps = ServerEndpoints {
            snapshot: ep("p-snap"),
            publisher: ep("p-pub"),
            collector: ep("p-col"),
        };
        let b_eps = ServerEndpoints {
            snapshot: ep("b-snap"),
            publisher: ep("b-pub"),
            collector: ep("b-col"),
        };
        let bstar = BstarConfig::default();
        let opts =
            |role: Role, me: &ServerEndpoints, peer: &ServerEndpoints, mine: &str, theirs: &str| {
                ServerOptions {
                    bind: ServerBind::Explicit(me.clone()),
                    ha: Some(HaOptions {
                        role,
                        state: BstarEndpoints {
                            state_bind: ep(mine),
                            state_peer: ep(theirs),
                        },
                        peer: peer.clone(),
                        bstar: bstar.clone(),
                    }),
                    config: ServerConfig::default(),
                    data_dir: None,
                }
            };
        let ctx = zmq::Context::new();
        let primary = CloneServer::start(
            &tickbox_auth::Gate::open(&ctx),
            opts(Role::Primary, &p_eps, &b_eps, "p-st", "b-st"),
        )
        .unwrap();
        let backup = CloneServer::start(
            &tickbox_auth::Gate::open(&ctx),
            opts(Role::Backup, &b_eps, &p_eps, "b-st", "p-st"),
        )
        .unwrap();
        while !(primary.state() == State::Active && backup.state() == State::Passive) {
            std::thread::sleep(Duration::from_millis(10));
        }
        // Guide defaults: heartbeat 1 s (peer expiry 2 s), HUGZ 1 s; the client's server TTL is 3 s here (must exceed
        // the peer expiry so the backup accepts the vote).
        let config = ClientConfig {
            server_ttl: Duration::from_millis(3000).into(),
            subscribe_wait: Duration::from_millis(1500).into(),
            ..ClientConfig::default()
        };
        let c = CloneClient::connect(&ctx, &[p_eps.clone(), b_eps.clone()], "", config).unwrap();
        c.wait_synced(Duration::from_secs(10)).unwrap();
        c.set("/f/warm", b"1", None).unwrap();
        let killed = Instant::now();
        primary.stop().unwrap();
        let mut i = 0;
        let served = loop {
            i += 1;
            if c.set_with_timeout(&format!("/f/{i}"), b"1", None, Duration::from_secs(20))
                .is_ok()
            {
                break killed.elapsed();
            }
        };
        println!(
            "failover run={run}: primary stopped -> first update served by backup after {served:?} \
             (client server TTL 3 s, heartbeat 1 s, HUGZ 1 s)"
        );
        drop(c);
        backup.stop().unwrap();
    }
}
