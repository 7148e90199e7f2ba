//! The Clone server under `[security]` on real sockets: CURVE with the ZAP handler on its three sockets, and the
//! `/config/` writers checked against each update's `User-Id`. A listed writer changes `/config/`; another
//! authenticated key is refused with the reason `unauthorised` (the existing `NOPE` path) and counted, while its
//! writes outside `/config/` are applied; a stranger never syncs; no `[security]` changes nothing.

use std::path::PathBuf;
use std::time::Duration;

use tickbox_auth::{Allow, Certificate, Gate, MechanismName, Security, SecurityConfig};
use tickbox_clone::{
    ClientConfig, CloneClient, CloneError, CloneServer, ServerBind, ServerConfig, ServerEndpoints,
    ServerOptions,
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
    server.save_pair(dir.path(), "clone").unwrap();
    for name in ["ops", "viewer"] {
        let cert = tickbox_auth::fresh_pair().unwrap();
        cert.save_pair(dir.path(), name).unwrap();
        std::fs::write(allow.join(name), cert.public_text()).unwrap();
    }
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

fn security(k: &Keys, certificate: &str) -> Security {
    Security::from_config(&SecurityConfig {
        mechanism: Some(MechanismName::Curve),
        certificate: Some(k.dir.join(format!("{certificate}_secret"))),
        server_key: Some(k.server.public_z85()),
        allow: Some(Allow::Dir(k.allow.clone())),
        config_writers: vec!["ops".into()],
        ..SecurityConfig::default()
    })
    .unwrap()
}

fn start(gate: &Gate, security: Security) -> (CloneServer, ServerEndpoints) {
    let server = CloneServer::start(
        gate,
        ServerOptions {
            bind: ServerBind::Base {
                interface: "127.0.0.1".into(),
                port: 0,
            },
            ha: None,
            config: ServerConfig {
                hugz: Duration::from_millis(100).into(),
                close_linger: Duration::from_millis(50).into(),
                stalled_peer_timeout: Duration::from_millis(200).into(),
                security,
                ..ServerConfig::default()
            },
            data_dir: None,
        },
    )
    .expect("server starts");
    let port = server.base_port().expect("base port");
    (server, ServerEndpoints::from_host_port("127.0.0.1", port))
}

fn client(ctx: &zmq::Context, eps: &ServerEndpoints, security: Security) -> CloneClient {
    let config = ClientConfig {
        server_ttl: Duration::from_millis(2000).into(),
        subscribe_wait: Duration::from_millis(300).into(),
        resend: Duration::from_millis(300).into(),
        stalled_peer_timeout: Duration::from_millis(200).into(),
        security,
        ..ClientConfig::default()
    };
    let mut c = CloneClient::connect(ctx, std::slice::from_ref(eps), "", config).unwrap();
    c.set_timeout(Duration::from_secs(5));
    c
}

/// Waits (10 s at most) until `cond` holds; panics naming `what` if it does not.
fn wait_for(what: &str, cond: impl FnMut() -> bool) {
    tickbox_testkit::wait_for(what, Duration::from_secs(10), cond);
}

#[test]
fn only_listed_writers_change_config_and_strangers_never_sync() {
    let k = keys();
    let server_sec = security(&k, "clone");
    let ctx = zmq::Context::new();
    let gate = server_sec.gate(&ctx).unwrap();
    let (server, eps) = start(&gate, server_sec.clone());

    let ops = client(&ctx, &eps, security(&k, "ops"));
    ops.wait_synced(Duration::from_secs(5)).expect("ops syncs");
    ops.set("/config/subscriber/max_lateness", b"5ms", None)
        .expect("a listed writer changes /config/");

    let viewer = client(&ctx, &eps, security(&k, "viewer"));
    viewer
        .wait_synced(Duration::from_secs(5))
        .expect("viewer syncs");
    match viewer.set("/config/subscriber/max_lateness", b"1h", None) {
        Err(CloneError::Refused(reason)) => assert_eq!(reason, "unauthorised"),
        other => panic!("expected a refusal, got {other:?}"),
    }
    match viewer.delete("/config/subscriber/max_lateness") {
        Err(CloneError::Refused(reason)) => assert_eq!(reason, "unauthorised"),
        other => panic!("expected a refusal, got {other:?}"),
    }
    viewer
        .set("/quotes/AAPL", b"1", None)
        .expect("keys outside /config/ are not guarded");
    assert_eq!(
        ops.get("/config/subscriber/max_lateness")
            .unwrap()
            .as_deref(),
        Some(&b"5ms"[..]),
        "the refused writes changed nothing"
    );
    assert_eq!(server_sec.summary().unwrap().unauthorised_refused, 2);

    // A key outside the allow directory, a NULL client and a client expecting another server key never sync.
    let unlisted = client(&ctx, &eps, security(&k, "stranger"));
    let null = client(&ctx, &eps, Security::default());
    for (name, c) in [("unlisted key", &unlisted), ("no key", &null)] {
        assert!(
            c.wait_synced(Duration::from_millis(500)).is_err(),
            "{name} synced"
        );
    }
    wait_for("the ZAP refusals", || {
        server_sec.summary().unwrap().auth_refused >= 1
    });
    let summary = server_sec.summary().unwrap();
    assert!(
        summary.last_refused.unwrap().role.starts_with("clone."),
        "counted per socket role"
    );
    drop((unlisted, null, viewer, ops));
    server.stop().unwrap();
}

#[test]
fn without_security_anyone_may_write_config() {
    let ctx = zmq::Context::new();
    let (server, eps) = start(&Gate::open(&ctx), Security::default());
    let c = client(&ctx, &eps, Security::default());
    c.wait_synced(Duration::from_secs(5)).unwrap();
    c.set("/config/subscriber/max_lateness", b"1h", None)
        .expect("no [security]: no guard");
    drop(c);
    server.stop().unwrap();
}
