//! The broker under `[security]` on real sockets: CURVE on the ROUTER with the ZAP handler, and the service
//! grants checked against each request's `User-Id`. A listed key is served; a key the grants do not name for a
//! restricted service gets `403 unauthorised: SERVICE` (in its own MDP revision) and is counted; a stranger (no
//! key, an unlisted key, the wrong server key) never reaches the broker and its refused handshake is counted.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use tickbox_auth::{
    Allow, Certificate, Gate, MechanismName, Security, SecurityConfig, ServiceGrant,
};
use tickbox_majordomo::{
    run_broker, AsyncClient, BrokerConfig, BrokerStats, Client, ClientConfig, MdpError, MdpWorker,
    MdpWorkerConfig, Version,
};

struct Keys {
    _dir: tempfile::TempDir,
    dir: PathBuf,
    allow: PathBuf,
    server: Certificate,
}

fn keys() -> Keys {
    let dir = tempfile::tempdir().unwrap();
    let allow = dir.path().join("allow");
    std::fs::create_dir(&allow).unwrap();
    let server = tickbox_auth::fresh_pair().unwrap();
    server.save_pair(dir.path(), "broker").unwrap();
    for name in ["ops", "viewer", "worker"] {
        let cert = tickbox_auth::fresh_pair().unwrap();
        cert.save_pair(dir.path(), name).unwrap();
        std::fs::write(allow.join(name), cert.public_text()).unwrap();
    }
    // Holds a valid pair, but is not in the allow directory.
    tickbox_auth::fresh_pair()
        .unwrap()
        .save_pair(dir.path(), "stranger")
        .unwrap();
    Keys {
        dir: dir.path().to_path_buf(),
        _dir: dir,
        allow,
        server,
    }
}

/// The one config every process of the deployment shares, but for its own certificate.
fn config(k: &Keys, certificate: &str) -> SecurityConfig {
    SecurityConfig {
        mechanism: Some(MechanismName::Curve),
        certificate: Some(k.dir.join(format!("{certificate}_secret"))),
        server_key: Some(k.server.public_z85()),
        allow: Some(Allow::Dir(k.allow.clone())),
        services: [
            ("tickbox.replay.*", grant(&["ops"], &["worker"])),
            (
                "tickbox.replay.status",
                grant(&["ops", "viewer"], &["worker"]),
            ),
            ("mmi.*", grant(&["ops"], &[])),
        ]
        .into_iter()
        .map(|(service, grant)| (service.to_string(), grant))
        .collect(),
        ..SecurityConfig::default()
    }
}

fn grant(call: &[&str], serve: &[&str]) -> ServiceGrant {
    ServiceGrant {
        call: call.iter().map(|k| k.to_string()).collect(),
        serve: serve.iter().map(|k| k.to_string()).collect(),
    }
}

fn security(k: &Keys, certificate: &str) -> Security {
    Security::from_config(&config(k, certificate)).unwrap()
}

struct Broker {
    ep: String,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<Result<BrokerStats, MdpError>>>,
    _gate: Gate,
}

impl Broker {
    fn start(security: Security) -> Broker {
        let ctx = zmq::Context::new();
        let gate = security.gate(&ctx).unwrap();
        let cfg = BrokerConfig {
            heartbeat_interval: Duration::from_millis(100).into(),
            stalled_peer_timeout: Duration::from_millis(200).into(),
            security,
            ..Default::default()
        };
        let stop = Arc::new(AtomicBool::new(false));
        let (tx, rx) = std::sync::mpsc::channel();
        let (g, s) = (gate.clone(), Arc::clone(&stop));
        let thread =
            std::thread::spawn(move || run_broker(&g, "tcp://127.0.0.1:*", cfg, &s, Some(tx)));
        let ep = rx
            .recv_timeout(Duration::from_secs(10))
            .expect("broker bound");
        Broker {
            ep,
            stop,
            thread: Some(thread),
            _gate: gate,
        }
    }

    fn stop(mut self) -> BrokerStats {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.take().unwrap().join().unwrap().unwrap()
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// A worker serving `service` (echoing `served:BODY`) from its own thread until dropped.
struct Worker {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Worker {
    fn start(ep: &str, service: &'static str, security: Security) -> Worker {
        let stop = Arc::new(AtomicBool::new(false));
        let (ep, s) = (ep.to_string(), Arc::clone(&stop));
        let thread = std::thread::spawn(move || {
            let ctx = zmq::Context::new();
            let cfg = MdpWorkerConfig {
                heartbeat_interval: Duration::from_millis(100).into(),
                reconnect: Duration::from_millis(100).into(),
                security,
                ..Default::default()
            };
            let mut w = MdpWorker::connect(&ctx, &ep, service, cfg).unwrap();
            w.serve(&s, |b| vec![[b"served:".as_slice(), &b[0]].concat()])
                .unwrap();
        });
        Worker {
            stop,
            thread: Some(thread),
        }
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn client(ctx: &zmq::Context, ep: &str, security: Security, timeout_ms: u64) -> Client {
    Client::new(
        ctx,
        ep,
        ClientConfig {
            timeout: Duration::from_millis(timeout_ms).into(),
            attempts: 1,
        },
    )
    .with_security(security)
}

/// Calls until the service answers (a worker registers asynchronously), at most 10 s.
fn call_until_served(c: &mut Client, service: &str, body: &str) -> Vec<Vec<u8>> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match c.request(service, &[body.as_bytes().to_vec()]) {
            Ok(reply) => return reply,
            Err(MdpError::Timeout { .. }) if Instant::now() < deadline => {}
            Err(e) => panic!("{service}: {e}"),
        }
    }
}

/// Waits (10 s at most) until `cond` holds; panics naming `what` if it does not.
fn wait_for(what: &str, cond: impl FnMut() -> bool) {
    tickbox_testkit::wait_for(what, Duration::from_secs(10), cond);
}

fn text(frames: &[Vec<u8>]) -> Vec<String> {
    frames
        .iter()
        .map(|f| String::from_utf8_lossy(f).into_owned())
        .collect()
}

#[test]
fn a_listed_key_is_served_and_an_unlisted_caller_of_a_restricted_service_gets_403() {
    let k = keys();
    let broker_sec = security(&k, "broker");
    let broker = Broker::start(broker_sec.clone());
    let _stop = Worker::start(&broker.ep, "tickbox.replay.stop", security(&k, "worker"));
    let _status = Worker::start(&broker.ep, "tickbox.replay.status", security(&k, "worker"));
    let ctx = zmq::Context::new();

    let mut ops = client(&ctx, &broker.ep, security(&k, "ops"), 500);
    assert_eq!(
        text(&call_until_served(&mut ops, "tickbox.replay.stop", "now")),
        ["served:now"]
    );
    assert_eq!(
        text(
            &ops.request("mmi.service", &[b"tickbox.replay.stop".to_vec()])
                .unwrap()
        ),
        ["200"],
        "MMI is a service like any other: ops may ask"
    );

    // The viewer is authenticated (its key is in the allow directory) but not granted the replay controls.
    let mut viewer = client(&ctx, &broker.ep, security(&k, "viewer"), 2000);
    assert_eq!(
        text(
            &viewer
                .request("tickbox.replay.stop", &[b"now".to_vec()])
                .unwrap()
        ),
        ["403 unauthorised: tickbox.replay.stop"]
    );
    assert_eq!(
        text(&viewer.request("mmi.service", &[b"echo".to_vec()]).unwrap()),
        ["403 unauthorised: mmi.service"]
    );
    assert_eq!(
        text(&call_until_served(
            &mut viewer,
            "tickbox.replay.status",
            "?"
        )),
        ["served:?"],
        "the exact rule for status beats the replay prefix"
    );

    // An 18/MDP 0.2 client gets the refusal as a FINAL in its own revision.
    let mut v02 =
        AsyncClient::connect_secured(&ctx, &broker.ep, Version::V02, &security(&k, "viewer"))
            .unwrap();
    v02.send("tickbox.replay.start", &[b"speed=1".to_vec()])
        .unwrap();
    let reply = v02
        .recv(Duration::from_secs(5))
        .unwrap()
        .expect("a 0.2 reply");
    assert!(!reply.partial);
    assert_eq!(reply.service, b"tickbox.replay.start");
    assert_eq!(
        text(&reply.body),
        ["403 unauthorised: tickbox.replay.start"]
    );

    let summary = broker_sec.summary().unwrap();
    assert_eq!(summary.unauthorised_refused, 3, "{summary:?}");
    assert!(summary.line().contains("3 unauthorised requests refused"));
    let stats = broker.stop();
    assert_eq!(stats.requests_unauthorised, 3);
}

#[test]
fn strangers_never_reach_the_broker_and_are_counted() {
    let k = keys();
    let broker_sec = security(&k, "broker");
    let broker = Broker::start(broker_sec.clone());
    let ctx = zmq::Context::new();
    // Any answer at all (even a 404 from MMI) would prove the request got in; ops is allowed MMI.
    let mut ops = client(&ctx, &broker.ep, security(&k, "ops"), 2000);
    assert_eq!(
        text(&ops.request("mmi.service", &[b"echo".to_vec()]).unwrap()),
        ["404"]
    );

    let unlisted = security(&k, "stranger");
    let null = Security::default();
    let wrong_server = Security::from_config(&SecurityConfig {
        server_key: Some(Certificate::load(&k.dir.join("ops")).unwrap().public_z85()),
        ..config(&k, "ops")
    })
    .unwrap();
    for (name, sec) in [
        ("unlisted key", unlisted),
        ("no key", null),
        ("wrong server key", wrong_server),
    ] {
        let mut c = client(&ctx, &broker.ep, sec, 300);
        match c.request("echo", &[b"x".to_vec()]) {
            Err(MdpError::Timeout { .. }) => {}
            other => panic!("{name}: expected no answer, got {other:?}"),
        }
    }
    // The unlisted key reaches ZAP and is refused there (the others fail in the CURVE handshake itself).
    wait_for("the ZAP refusal", || {
        broker_sec.summary().unwrap().auth_refused >= 1
    });
    let summary = broker_sec.summary().unwrap();
    assert_eq!(summary.by_role["broker"].accepted, 1, "{summary:?}");
    let last = summary.last_refused.expect("the refused peer is recorded");
    assert_eq!(
        (last.role.as_str(), last.address.as_str()),
        ("broker", "127.0.0.1")
    );
    let stats = broker.stop();
    assert_eq!(stats.requests, 1, "only ops's request reached the broker");
}

#[test]
fn without_security_every_service_stays_open() {
    let broker = Broker::start(Security::default());
    let _w = Worker::start(&broker.ep, "tickbox.replay.stop", Security::default());
    let ctx = zmq::Context::new();
    let mut c = client(&ctx, &broker.ep, Security::default(), 500);
    assert_eq!(
        text(&call_until_served(&mut c, "tickbox.replay.stop", "now")),
        ["served:now"]
    );
    assert_eq!(broker.stop().requests_unauthorised, 0);
}
