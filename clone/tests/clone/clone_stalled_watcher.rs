//! The Clone server's stop with a watcher that requested a large snapshot and never reads it: the snapshot ROUTER
//! is stalled mid-multipart (the watcher's TCP window is shut), which is the state in which libzmq 4.3.4's
//! `clean_pipes` abort needs only a hang-up at the wrong moment. The server's multipart senders close with an
//! linger longer than `ZMQ_TCP_MAXRT` (`ServerConfig::stalled_peer_timeout`), so the stop and the
//! context's termination must finish within `tickbox_zmqx::teardown::termination_bound` of that bound, and the
//! watcher hanging up afterwards must not abort the process (this test would die with it).

use std::time::{Duration, Instant};

use tickbox_clone::{
    ClientConfig, CloneClient, CloneServer, ServerBind, ServerConfig, ServerOptions,
};

#[test]
fn stop_with_a_stalled_snapshot_reader_finishes_within_the_bound() {
    let bound = Duration::from_millis(500);
    let ctx = zmq::Context::new();
    let server = CloneServer::start(
        &tickbox_auth::Gate::open(&ctx),
        ServerOptions {
            bind: ServerBind::Base {
                interface: "127.0.0.1".into(),
                port: 0,
            },
            ha: None,
            config: ServerConfig {
                hugz: Duration::from_millis(100).into(),
                stalled_peer_timeout: bound.into(),
                ..ServerConfig::default()
            },
            data_dir: None,
        },
    )
    .unwrap();
    let eps = server.endpoints().clone();
    assert_eq!(
        ServerConfig::default().stalled_peer_timeout(),
        tickbox_zmqx::DEFAULT_STALLED_PEER_TIMEOUT,
        "the Clone default and the crate-wide default drifted apart"
    );

    // 48 values of 512 KiB: a 24 MiB snapshot, far more than loopback TCP buffers hold.
    {
        let writer = CloneClient::connect(
            &ctx,
            std::slice::from_ref(&eps),
            "",
            ClientConfig::default(),
        )
        .unwrap();
        writer.wait_synced(Duration::from_secs(10)).unwrap();
        let value = vec![b'v'; 512 * 1024];
        for i in 0..48 {
            writer.set(&format!("/big/{i:02}"), &value, None).unwrap();
        }
    }

    // The stalled watcher lives in its own context, so terminating the server's context cannot wait on it.
    let watcher_ctx = zmq::Context::new();
    let watcher = watcher_ctx.socket(zmq::DEALER).unwrap();
    watcher.set_linger(0).unwrap();
    watcher.set_rcvhwm(1).unwrap();
    watcher.set_rcvbuf(4096).unwrap();
    watcher.connect(&eps.snapshot).unwrap();
    watcher.send_multipart([&b"ICANHAZ?"[..], b""], 0).unwrap();
    // Readiness: the first snapshot message has arrived (and is never read). The whole snapshot fits in the
    // ROUTER's queue (snapshot_hwm 1000), so the server is done with it and only its engine is left, stalled
    // part-way through the 24 MiB behind that first message.
    tickbox_testkit::wait_for("the snapshot to start", Duration::from_secs(10), || {
        watcher.get_events().unwrap().contains(zmq::POLLIN)
    });

    let t = Instant::now();
    server.stop().unwrap();
    let stopped = t.elapsed();
    let (tx, rx) = std::sync::mpsc::channel();
    let term = std::thread::spawn(move || {
        drop(ctx);
        let _ = tx.send(());
    });
    let limit = tickbox_zmqx::teardown::termination_bound(bound);
    let finished = rx.recv_timeout(limit + Duration::from_secs(5)).is_ok();
    let took = t.elapsed();
    // Hang up only now: a hang-up that the abort could race has already happened (the kernel gave up) or not.
    drop(watcher);
    drop(watcher_ctx);
    assert!(finished, "the server's context never terminated");
    term.join().unwrap();
    println!(
        "stop {stopped:?}, stop + context termination {took:?} (bound {bound:?}, limit {limit:?})"
    );
    // The close really waited for the stalled watcher (otherwise this test did not build the trap's state).
    assert!(
        took >= bound / 2,
        "terminated after {took:?}: the watcher was not stalled"
    );
    assert!(
        took <= limit,
        "stop + termination took {took:?}, over {limit:?}"
    );
}
