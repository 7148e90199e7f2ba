//! `[context.sockets.<role>]` reaches every role's sockets: each role opens its sockets through its own code
//! (feed publisher, subscriber shards, LVC proxy, recorder, replayer) with a profile, and the options are read back
//! from those very sockets with the `zmq` getters. The roles keep their sockets inside their threads, so the
//! readings are taken by `tickbox_zmqx::profile`'s inspector, which `apply` calls on the role's own thread.

use crate::common;

use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use common::{eventually, TempDir};
use tickbox_zmqx::context::ContextConfig;
use tickbox_zmqx::profile;
use tickbox_zmqx::profile::SocketProfile;

/// What one socket carried after its role configured it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Seen {
    thread: String,
    kind: zmq::SocketType,
    send_hwm: i32,
    receive_hwm: i32,
    sndbuf: i32,
    rcvbuf: i32,
    keepalive: i32,
    keepalive_idle: i32,
    keepalive_intvl: i32,
    keepalive_cnt: i32,
    maxmsgsize: i64,
    affinity: u64,
}

fn read(socket: &zmq::Socket) -> Seen {
    Seen {
        thread: std::thread::current().name().unwrap_or("").to_owned(),
        kind: socket.get_socket_type().unwrap(),
        send_hwm: socket.get_sndhwm().unwrap(),
        receive_hwm: socket.get_rcvhwm().unwrap(),
        sndbuf: socket.get_sndbuf().unwrap(),
        rcvbuf: socket.get_rcvbuf().unwrap(),
        keepalive: socket.get_tcp_keepalive().unwrap(),
        keepalive_idle: socket.get_tcp_keepalive_idle().unwrap(),
        keepalive_intvl: socket.get_tcp_keepalive_intvl().unwrap(),
        keepalive_cnt: socket.get_tcp_keepalive_cnt().unwrap(),
        maxmsgsize: socket.get_maxmsgsize().unwrap(),
        affinity: socket.get_affinity().unwrap(),
    }
}

/// The inspector is process-wide: one test at a time installs it, and it is cleared when the guard drops.
struct Inspecting {
    seen: Arc<Mutex<Vec<Seen>>>,
    _one_at_a_time: MutexGuard<'static, ()>,
}

impl Inspecting {
    fn start() -> Self {
        static ONE: Mutex<()> = Mutex::new(());
        let guard = ONE.lock().unwrap_or_else(|e| e.into_inner());
        let seen = Arc::new(Mutex::new(Vec::new()));
        let sink = Arc::clone(&seen);
        profile::set_inspector(Some(Arc::new(move |s: &zmq::Socket| {
            sink.lock().unwrap().push(read(s));
        })));
        Inspecting {
            seen,
            _one_at_a_time: guard,
        }
    }

    fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }
}

impl Drop for Inspecting {
    fn drop(&mut self) {
        profile::set_inspector(None);
    }
}

/// Every option set, each to a value no role uses by default.
fn full_profile(affinity: Option<u64>) -> SocketProfile {
    SocketProfile {
        send_hwm: Some(4_321),
        receive_hwm: Some(5_432),
        sndbuf: Some(96 * 1024),
        rcvbuf: Some(112 * 1024),
        tcp_keepalive: Some(true),
        tcp_keepalive_idle_s: Some(41),
        tcp_keepalive_intvl_s: Some(7),
        tcp_keepalive_cnt: Some(3),
        maxmsgsize: Some(65_537),
        affinity,
    }
}

fn assert_carries(seen: &Seen, p: &SocketProfile) {
    let want = Seen {
        thread: seen.thread.clone(),
        kind: seen.kind,
        send_hwm: p.send_hwm.unwrap(),
        receive_hwm: p.receive_hwm.unwrap(),
        sndbuf: p.sndbuf.unwrap(),
        rcvbuf: p.rcvbuf.unwrap(),
        keepalive: 1,
        keepalive_idle: p.tcp_keepalive_idle_s.unwrap(),
        keepalive_intvl: p.tcp_keepalive_intvl_s.unwrap(),
        keepalive_cnt: p.tcp_keepalive_cnt.unwrap(),
        maxmsgsize: p.maxmsgsize.unwrap(),
        affinity: p.affinity.unwrap_or(0),
    };
    assert_eq!(seen, &want);
}

fn context(io_threads: usize) -> zmq::Context {
    tickbox_zmqx::context::build(&ContextConfig {
        io_threads,
        ..ContextConfig::default()
    })
    .unwrap()
}

#[test]
fn feed_publisher_sockets_carry_the_feed_profile_over_the_feed_section() {
    let inspecting = Inspecting::start();
    let ctx = context(2);
    let p = full_profile(Some(0b10));
    let config = tickbox_feed::FeedConfig {
        // The section says 777; the profile wins for the socket (documented precedence).
        send_hwm: 777,
        socket_profile: p.clone(),
        ..tickbox_feed::FeedConfig::default()
    };
    let shard = tickbox_feed::PublisherShardConfig {
        endpoint: "tcp://127.0.0.1:*".into(),
        ..tickbox_feed::PublisherShardConfig::default()
    };
    let (socket, endpoint) =
        tickbox_feed::open_publisher_socket(&tickbox_auth::Gate::open(&ctx), 0, &shard, &config)
            .unwrap();
    assert!(endpoint.starts_with("tcp://127.0.0.1:"), "{endpoint}");
    let seen = read(&socket);
    assert_eq!(seen.kind, zmq::PUB);
    assert_carries(&seen, &p);
    // Without a profile the section's value stands.
    let (plain, _) = tickbox_feed::open_publisher_socket(
        &tickbox_auth::Gate::open(&ctx),
        1,
        &shard,
        &tickbox_feed::FeedConfig {
            send_hwm: 777,
            ..tickbox_feed::FeedConfig::default()
        },
    )
    .unwrap();
    assert_eq!(plain.get_sndhwm().unwrap(), 777);
    assert_eq!(plain.get_affinity().unwrap(), 0);
    // The inspector saw the same two sockets, on this thread.
    assert_eq!(inspecting.seen(), vec![seen, read(&plain)]);
}

/// Two shards on a context with two I/O threads, each shard planned onto a different one: each SUB carries the
/// subscriber profile and the affinity bit of its own shard's `io_thread`, which wins over the profile's.
#[test]
fn subscriber_shards_carry_the_profile_and_their_io_thread_bit() {
    let inspecting = Inspecting::start();
    let ctx = context(2);
    let publisher = ctx.socket(zmq::PUB).unwrap();
    publisher.set_linger(0).unwrap();
    let endpoint = tickbox_zmqx::bind_resolved(&publisher, "tcp://127.0.0.1:*").unwrap();
    let p = full_profile(Some(0b100));
    let config = tickbox_subscriber::SubscriberConfig {
        shards: [1usize, 0]
            .iter()
            .map(|&n| tickbox_subscriber::SubscriberShardConfig {
                connect: vec![endpoint.clone()],
                io_thread: Some(n),
                ..tickbox_subscriber::SubscriberShardConfig::default()
            })
            .collect(),
        receive_hwm: 999,
        socket_profile: p.clone(),
        ..tickbox_subscriber::SubscriberConfig::default()
    };
    let workers = tickbox_workers::WorkerPoolConfig {
        count: Some(1),
        ..tickbox_workers::WorkerPoolConfig::default()
    };
    let sub = tickbox_subscriber::Subscriber::start(&ctx, &config, &workers, |_| {
        tickbox_subscriber::standard_worker(None)
    })
    .unwrap();
    let mut seen: Vec<Seen> = inspecting
        .seen()
        .into_iter()
        .filter(|s| s.kind == zmq::SUB)
        .collect();
    sub.shutdown().unwrap();
    seen.sort_by(|a, b| a.thread.cmp(&b.thread));
    assert_eq!(seen.len(), 2, "{seen:?}");
    assert_eq!(seen[0].thread, "tickbox-shard-0");
    assert_eq!(seen[1].thread, "tickbox-shard-1");
    // Shard 0 asked for I/O thread 1, shard 1 for I/O thread 0.
    for (s, bit) in seen.iter().zip([0b10u64, 0b01]) {
        assert_carries(
            s,
            &SocketProfile {
                affinity: Some(bit),
                ..p.clone()
            },
        );
    }
}

#[test]
fn lvc_xsub_xpub_and_tap_carry_the_lvc_profile() {
    let inspecting = Inspecting::start();
    let ctx = context(1);
    let p = full_profile(None);
    let config = tickbox_lvc::LvcConfig {
        upstream_bind: vec!["tcp://127.0.0.1:*".into()],
        bind: "tcp://127.0.0.1:*".into(),
        tap: Some("tcp://127.0.0.1:*".into()),
        stats_interval: tickbox_units::HumanDuration(Duration::ZERO),
        socket_profile: p.clone(),
        ..tickbox_lvc::LvcConfig::default()
    };
    let lvc = tickbox_lvc::spawn(&tickbox_auth::Gate::open(&ctx), config).unwrap();
    let mut seen = Vec::new();
    // The proxy opens its sockets on its own thread; spawn returns once they are bound, bounded wait anyway.
    let all = eventually(Duration::from_secs(5), Duration::from_millis(10), || {
        seen = inspecting.seen();
        seen.len() >= 3
    });
    lvc.stop();
    lvc.join().unwrap();
    assert!(all, "{seen:?}");
    let mut kinds: Vec<String> = seen.iter().map(|s| format!("{:?}", s.kind)).collect();
    kinds.sort();
    assert_eq!(kinds, vec!["XPUB", "XPUB", "XSUB"], "{seen:?}");
    for s in &seen {
        assert_carries(s, &p);
    }
}

#[test]
fn recorder_sub_carries_the_recorder_profile() {
    let inspecting = Inspecting::start();
    let dir = TempDir::new("profile-record");
    let ctx = context(1);
    let publisher = ctx.socket(zmq::PUB).unwrap();
    publisher.set_linger(0).unwrap();
    let endpoint = tickbox_zmqx::bind_resolved(&publisher, "tcp://127.0.0.1:*").unwrap();
    let mut writer = tickbox_journal::Writer::open(
        dir.path().join("p.tbj"),
        &tickbox_journal::WriterOptions::ring(1 << 20),
    )
    .unwrap();
    let p = full_profile(None);
    let opts = tickbox_recorder::RecordOptions {
        connect: vec![endpoint],
        receive_hwm: 888,
        duration: Some(Duration::from_millis(50)),
        socket_profile: p.clone(),
        ..tickbox_recorder::RecordOptions::default()
    };
    tickbox_recorder::record(&ctx, &mut writer, &opts, &AtomicBool::new(false), |_| {}).unwrap();
    let seen = inspecting.seen();
    assert_eq!(seen.len(), 1, "{seen:?}");
    assert_eq!(seen[0].kind, zmq::SUB);
    assert_carries(&seen[0], &p);
}

#[test]
fn replay_xpubs_carry_the_replay_profile() {
    let inspecting = Inspecting::start();
    let ctx = context(1);
    let p = full_profile(Some(1));
    let replayer = tickbox_recorder::Replayer::bind(
        &tickbox_auth::Gate::open(&ctx),
        tickbox_recorder::ReplayOptions {
            bind: vec!["tcp://127.0.0.1:*".into(), "tcp://127.0.0.1:*".into()],
            send_hwm: 321,
            socket_profile: p.clone(),
            ..tickbox_recorder::ReplayOptions::default()
        },
    )
    .unwrap();
    assert_eq!(replayer.endpoints().len(), 2);
    drop(replayer);
    let seen = inspecting.seen();
    assert_eq!(seen.len(), 2, "{seen:?}");
    for s in &seen {
        assert_eq!(s.kind, zmq::XPUB);
        assert_carries(s, &p);
    }
}

#[test]
fn worker_pulls_carry_the_workers_profile() {
    let inspecting = Inspecting::start();
    let ctx = context(1);
    let push = ctx.socket(zmq::PUSH).unwrap();
    push.set_linger(0).unwrap();
    push.bind("inproc://profile-workers").unwrap();
    let p = full_profile(None);
    let config = tickbox_workers::WorkerPoolConfig {
        count: Some(2),
        socket_profile: p.clone(),
        ..tickbox_workers::WorkerPoolConfig::default()
    };
    let pool = tickbox_workers::WorkerPool::spawn(
        &ctx,
        tickbox_workers::Inbox::everyone(&["inproc://profile-workers".to_owned()], 2),
        &config,
        Default::default(),
        |_| (tickbox_workers::Stats::new(), tickbox_workers::NoHook),
    )
    .unwrap();
    // Each worker opens its PULL on its own thread; both are up once spawn returns, but wait rather than assume.
    assert!(eventually(
        Duration::from_secs(5),
        Duration::from_millis(10),
        || inspecting.seen().len() >= 2
    ));
    pool.stop();
    pool.join().unwrap();
    let seen = inspecting.seen();
    assert_eq!(seen.len(), 2, "{seen:?}");
    for s in &seen {
        assert_eq!(s.kind, zmq::PULL);
        assert!(s.thread.starts_with("tickbox-worker-"), "{s:?}");
        assert_carries(s, &p);
    }
}
