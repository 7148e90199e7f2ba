//! Teardown stress: many CHP watchers receiving five-frame updates while the server and the clients shut down at
//! the same time. libzmq 4.3.4 can abort the whole process here (`session_base.cpp:260`, `clean_pipes`) when a
//! pipe is dropped at once mid-multipart; the server's ROUTER and PUB and the client's PUB therefore close with an
//! linger longer than `ZMQ_TCP_MAXRT` (`tickbox_zmqx::teardown`), the other sockets never with zero linger.
//! Each round runs in a child process (this test binary re-executed) so an abort is observed, not suffered.
//! `CLONE_TEARDOWN_RUNS` sets the number of rounds (default 12, about 13 s on a loaded 2-core box).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tickbox_clone::{
    ClientConfig, CloneClient, CloneServer, ServerBind, ServerConfig, ServerOptions,
};

const CHILD_ENV: &str = "CLONE_TEARDOWN_CHILD";

fn one_round() {
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
                hugz: Duration::from_millis(50).into(),
                ..ServerConfig::default()
            },
            data_dir: None,
        },
    )
    .unwrap();
    let eps = server.endpoints().clone();
    let config = ClientConfig {
        subscribe_wait: Duration::from_millis(300).into(),
        ..ClientConfig::default()
    };
    let watchers: Vec<CloneClient> = (0..8)
        .map(|_| {
            CloneClient::connect(&ctx, std::slice::from_ref(&eps), "", config.clone()).unwrap()
        })
        .collect();
    for w in &watchers {
        w.wait_synced(Duration::from_secs(10)).unwrap();
    }
    // A writer streams large values so many sessions are part-way through a five-frame message at teardown.
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let ctx = ctx.clone();
        let eps = eps.clone();
        let stop = stop.clone();
        std::thread::spawn(move || {
            let w = CloneClient::connect(&ctx, &[eps], "", ClientConfig::default()).unwrap();
            let value = vec![b'x'; 256 * 1024];
            let mut i = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let _ = w.set_nowait(&format!("/t/{}", i % 64), &value, None);
                i += 1;
            }
        })
    };
    tickbox_testkit::wait_for("the stream to flow", Duration::from_secs(10), || {
        server.stats().published.load(Ordering::Relaxed) >= 64
    });
    // Everything goes down at once: the server on its thread, each watcher on its own.
    let handles: Vec<_> = watchers
        .into_iter()
        .map(|w| std::thread::spawn(move || drop(w)))
        .collect();
    drop(server);
    stop.store(true, Ordering::Relaxed);
    for h in handles {
        h.join().unwrap();
    }
    writer.join().unwrap();
}

#[test]
fn teardown_with_eight_watchers_mid_stream_never_aborts() {
    if std::env::var_os(CHILD_ENV).is_some() {
        one_round();
        return;
    }
    let runs: u32 = std::env::var("CLONE_TEARDOWN_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(12);
    let t = Instant::now();
    for run in 0..runs {
        let mut child = tickbox_testkit::ChildGuard(
            tickbox_testkit::self_test_command(
                module_path!(),
                "teardown_with_eight_watchers_mid_stream_never_aborts",
            )
            // Its panic message to the stderr read below, rather than to libtest's capture.
            .arg("--nocapture")
            .env(CHILD_ENV, "1")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap(),
        );
        let status = child.wait_exit(Duration::from_secs(30), &format!("round {run} hung"));
        let mut err = String::new();
        if let Some(mut e) = child.0.stderr.take() {
            let _ = std::io::Read::read_to_string(&mut e, &mut err);
        }
        assert!(status.success(), "round {run} failed ({status}):\n{err}");
    }
    println!("{runs} teardown rounds clean in {:?}", t.elapsed());
}
