//! A Majordomo broker pair under Binary Star: the backup serves only after the primary is gone and a client
//! asks; a client with both endpoints fails over with one timeout.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use tickbox_bstar::{BstarConfig, BstarEndpoints, Role, State};
use tickbox_majordomo::{
    run_broker_pair, BrokerConfig, Client, ClientConfig, MdpWorker, MdpWorkerConfig, PairOptions,
};

type Member = (Arc<AtomicBool>, JoinHandle<State>);

fn member(ctx: &zmq::Context, ep: &str, role: Role, state_bind: &str, state_peer: &str) -> Member {
    let stop = Arc::new(AtomicBool::new(false));
    let pair = PairOptions {
        role,
        state: BstarEndpoints {
            state_bind: state_bind.into(),
            state_peer: state_peer.into(),
        },
        bstar: BstarConfig {
            heartbeat: std::time::Duration::from_millis(100).into(),
            expiry_heartbeats: 2,
        },
    };
    let cfg = BrokerConfig {
        heartbeat_interval: Duration::from_millis(100).into(),
        ..Default::default()
    };
    let (c, e, s) = (ctx.clone(), ep.to_string(), Arc::clone(&stop));
    let (tx, rx) = std::sync::mpsc::channel();
    let h =
        std::thread::spawn(move || run_broker_pair(&c, &e, cfg, &pair, &s, Some(tx)).unwrap().1);
    rx.recv_timeout(Duration::from_secs(5)).unwrap();
    (stop, h)
}

fn worker(
    ctx: &zmq::Context,
    ep: &str,
    tag: &'static str,
    stop: &Arc<AtomicBool>,
) -> JoinHandle<()> {
    let (c, e, s) = (ctx.clone(), ep.to_string(), Arc::clone(stop));
    let cfg = MdpWorkerConfig {
        heartbeat_interval: Duration::from_millis(100).into(),
        reconnect: Duration::from_millis(100).into(),
        ..Default::default()
    };
    std::thread::spawn(move || {
        let mut w = MdpWorker::connect(&c, &e, "echo", cfg).unwrap();
        w.serve(&s, |b| vec![tag.as_bytes().to_vec(), b[0].clone()])
            .unwrap();
    })
}

#[test]
fn backup_takes_over_after_primary_dies_on_client_vote() {
    let ctx = zmq::Context::new();
    let dir = tempfile::tempdir().unwrap();
    let p = |n: &str| format!("ipc://{}/{n}", dir.path().display());
    let (primary_ep, backup_ep) = (p("primary"), p("backup"));
    let primary = member(
        &ctx,
        &primary_ep,
        Role::Primary,
        &p("p-state"),
        &p("b-state"),
    );
    let backup = member(&ctx, &backup_ep, Role::Backup, &p("b-state"), &p("p-state"));
    let wstop = Arc::new(AtomicBool::new(false));
    let workers = [
        worker(&ctx, &primary_ep, "P", &wstop),
        worker(&ctx, &backup_ep, "B", &wstop),
    ];

    // The passive backup never serves while the primary is alive, even when asked directly.
    std::thread::sleep(Duration::from_millis(300));
    let mut direct = Client::new(
        &ctx,
        &backup_ep,
        ClientConfig {
            timeout: Duration::from_millis(300).into(),
            attempts: 1,
        },
    );
    assert!(
        direct.request("echo", &[b"x".to_vec()]).is_err(),
        "passive backup must drop requests"
    );

    let eps = vec![primary_ep.clone(), backup_ep.clone()];
    let mut client = Client::with_failover(
        &ctx,
        &eps,
        ClientConfig {
            timeout: Duration::from_millis(500).into(),
            attempts: 4,
        },
    );
    assert_eq!(
        client.request("echo", &[b"1".to_vec()]).unwrap(),
        vec![b"P".to_vec(), b"1".to_vec()]
    );

    primary.0.store(true, Ordering::Relaxed);
    assert_eq!(primary.1.join().unwrap(), State::Active);
    let r = client.request("echo", &[b"2".to_vec()]).unwrap();
    assert_eq!(
        r,
        vec![b"B".to_vec(), b"2".to_vec()],
        "served by the backup after failover"
    );
    assert_eq!(client.resends, 1, "exactly one timeout");
    assert_eq!(client.request("echo", &[b"3".to_vec()]).unwrap()[0], b"B");

    wstop.store(true, Ordering::Relaxed);
    for w in workers {
        w.join().unwrap();
    }
    backup.0.store(true, Ordering::Relaxed);
    assert_eq!(backup.1.join().unwrap(), State::Active);
}
