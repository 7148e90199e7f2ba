//! Its own test binary: the flood test reads this process's resident set size (VmRSS), which other tests' threads
//! would move.
//!
//! The ZAP handler on real sockets: a listed key gets through; a stranger (unlisted key, no key, or the wrong
//! server key) is refused and counted; a revoked key is refused on its next handshake; an IP fence works under
//! NULL; and legitimate traffic keeps flowing through a flood of failed handshakes.

use std::path::Path;
use std::time::{Duration, Instant};

use tickbox_auth::{Allow, Certificate, Gate, MechanismName, Security, SecurityConfig};

fn keygen(dir: &Path, name: &str) -> Certificate {
    let cert = tickbox_auth::fresh_pair().unwrap();
    cert.save_pair(dir, name).unwrap();
    cert
}

struct Setup {
    _keys: tempfile::TempDir,
    keys: std::path::PathBuf,
    allow: std::path::PathBuf,
    server: Certificate,
}

fn setup() -> Setup {
    let keys = tempfile::tempdir().unwrap();
    let allow = keys.path().join("allow");
    std::fs::create_dir(&allow).unwrap();
    let server = keygen(keys.path(), "server");
    let client = keygen(keys.path(), "client");
    std::fs::write(allow.join("client"), client.public_text()).unwrap();
    Setup {
        keys: keys.path().to_path_buf(),
        _keys: keys,
        allow,
        server,
    }
}

fn curve_config(s: &Setup, certificate: &str) -> SecurityConfig {
    SecurityConfig {
        mechanism: Some(MechanismName::Curve),
        certificate: Some(s.keys.join(certificate)),
        server_key: Some(s.server.public_z85()),
        allow: Some(Allow::Dir(s.allow.clone())),
        ..SecurityConfig::default()
    }
}

/// A CURVE client that knows the server's key but has no certificate: a fresh key pair nobody listed.
fn stranger(s: &Setup) -> Security {
    Security::from_config(&SecurityConfig {
        certificate: None,
        ..curve_config(s, "client_secret")
    })
    .unwrap()
}

fn pull(gate: &Gate) -> (zmq::Socket, String) {
    let socket = gate.socket(zmq::PULL, "test.pull").unwrap();
    socket.set_linger(0).unwrap();
    let ep = tickbox_testkit::bind_loopback(&socket);
    (socket, ep)
}

fn push(ctx: &zmq::Context, security: &Security, ep: &str) -> zmq::Socket {
    let socket = ctx.socket(zmq::PUSH).unwrap();
    socket.set_linger(0).unwrap();
    socket.set_sndtimeo(0).unwrap();
    security.client(&socket, "test.push").unwrap();
    socket.connect(ep).unwrap();
    socket
}

/// Sends `body` until `pull` receives it or `wait` passes (a handshake completes asynchronously).
fn delivered(pull: &zmq::Socket, push: &zmq::Socket, body: &str, wait: Duration) -> bool {
    let deadline = Instant::now() + wait;
    let _ = push.send(body, 0);
    while Instant::now() < deadline {
        if pull.poll(zmq::POLLIN, 50).unwrap() > 0 {
            let got = pull.recv_string(0).unwrap().unwrap();
            if got == body {
                return true;
            }
        }
    }
    false
}

/// Waits (10 s at most) until `cond` holds; panics naming `what` if it does not.
fn wait_for(what: &str, cond: impl FnMut() -> bool) {
    tickbox_testkit::wait_for(what, Duration::from_secs(10), cond);
}

#[test]
fn listed_keys_get_in_and_strangers_are_refused_and_counted() {
    let s = setup();
    let server_sec = Security::from_config(&curve_config(&s, "server_secret")).unwrap();
    let ctx = zmq::Context::new();
    let gate = server_sec.gate(&ctx).unwrap();
    let (pull, ep) = pull(&gate);

    let client_ctx = zmq::Context::new();
    let client_sec = Security::from_config(&curve_config(&s, "client_secret")).unwrap();
    let listed = push(&client_ctx, &client_sec, &ep);
    assert!(delivered(&pull, &listed, "listed", Duration::from_secs(10)));
    drop(listed);

    // An unlisted key, a NULL client, and a client expecting another server key: none gets a message in.
    let unlisted_sec = stranger(&s);
    let unlisted = push(&client_ctx, &unlisted_sec, &ep);
    let null = push(&client_ctx, &Security::default(), &ep);
    let wrong_server_sec = Security::from_config(&SecurityConfig {
        server_key: Some(
            Certificate::load(&s.keys.join("client"))
                .unwrap()
                .public_z85(),
        ),
        ..curve_config(&s, "client_secret")
    })
    .unwrap();
    let wrong_server = push(&client_ctx, &wrong_server_sec, &ep);
    for (socket, name) in [
        (&unlisted, "unlisted"),
        (&null, "null"),
        (&wrong_server, "wrong server key"),
    ] {
        assert!(
            !delivered(&pull, socket, name, Duration::from_millis(300)),
            "{name} got through"
        );
    }
    // The unlisted key reaches ZAP and is refused there; the other two fail before ZAP (no CURVE hello, or a
    // hello the server cannot open), so only the first is a ZAP refusal.
    wait_for("the refusal to be counted", || {
        server_sec.summary().unwrap().auth_refused >= 1
    });
    let summary = server_sec.summary().unwrap();
    assert_eq!(summary.by_role["test.pull"].accepted, 1, "{summary:?}");
    let last = summary.last_refused.expect("the refused peer is recorded");
    assert_eq!(last.address, "127.0.0.1");
    assert_eq!(last.role, "test.pull");
}

#[test]
fn a_revoked_key_is_refused_on_its_next_handshake() {
    let s = setup();
    let server_sec = Security::from_config(&curve_config(&s, "server_secret")).unwrap();
    let ctx = zmq::Context::new();
    let gate = server_sec.gate(&ctx).unwrap();
    let (pull, ep) = pull(&gate);
    let client_sec = Security::from_config(&curve_config(&s, "client_secret")).unwrap();
    let first = push(&ctx, &client_sec, &ep);
    assert!(delivered(&pull, &first, "before", Duration::from_secs(10)));
    drop(first);

    std::fs::remove_file(s.allow.join("client")).unwrap();
    let second = push(&ctx, &client_sec, &ep);
    assert!(
        !delivered(&pull, &second, "after", Duration::from_millis(500)),
        "a revoked key got in"
    );
    wait_for("the refusal", || {
        server_sec.summary().unwrap().auth_refused == 1
    });
}

#[test]
fn null_with_an_ip_fence_refuses_addresses_outside_it() {
    let ctx = zmq::Context::new();
    let deny = Security::from_config(&SecurityConfig {
        deny_ips: vec!["127.0.0.0/8".into()],
        ..SecurityConfig::default()
    })
    .unwrap();
    assert!(!deny.is_curve() && deny.is_active());
    let gate = deny.gate(&ctx).unwrap();
    let (pull, ep) = pull(&gate);
    let client = push(&ctx, &Security::default(), &ep);
    assert!(!delivered(
        &pull,
        &client,
        "fenced",
        Duration::from_millis(500)
    ));
    wait_for("the refusal", || deny.summary().unwrap().auth_refused >= 1);
    assert_eq!(
        deny.summary().unwrap().last_refused.unwrap().reason,
        tickbox_auth::policy::Refusal::IpDenied
    );
}

#[test]
fn traffic_keeps_flowing_through_a_flood_of_failed_handshakes() {
    let s = setup();
    let server_sec = Security::from_config(&curve_config(&s, "server_secret")).unwrap();
    let ctx = zmq::Context::new();
    let gate = server_sec.gate(&ctx).unwrap();
    let (pull, ep) = pull(&gate);
    let client_sec = Security::from_config(&curve_config(&s, "client_secret")).unwrap();
    let legit = push(&ctx, &client_sec, &ep);
    assert!(delivered(&pull, &legit, "warm", Duration::from_secs(10)));

    // 200 strangers, each with its own fresh key, handshaking at once (and retrying every 100 ms).
    let rss_before = rss_kib();
    let flood_ctx = zmq::Context::new();
    let strangers: Vec<zmq::Socket> = (0..200)
        .map(|_| {
            let sec = stranger(&s);
            push(&flood_ctx, &sec, &ep)
        })
        .collect();
    for i in 0..100 {
        assert!(
            delivered(
                &pull,
                &legit,
                &format!("during {i}"),
                Duration::from_secs(5)
            ),
            "legitimate message {i} stalled during the flood"
        );
    }
    wait_for("every stranger refused", || {
        server_sec.summary().unwrap().auth_refused >= 200
    });
    // The strangers' sockets live in this process too, so this bounds both sides together: refused handshakes
    // leave nothing behind in the server beyond the counters.
    let grown = rss_kib().saturating_sub(rss_before);
    println!(
        "flood: {} handshakes refused, resident memory grew {grown} KiB",
        server_sec.summary().unwrap().auth_refused
    );
    assert!(
        grown < 64 * 1024,
        "memory grew {grown} KiB during the flood"
    );
    drop(strangers);
}

#[test]
fn rules_naming_keys_without_curve_are_a_config_error() {
    let err = Security::from_config(&SecurityConfig {
        config_writers: vec!["ops".into()],
        ..SecurityConfig::default()
    })
    .unwrap_err();
    assert!(
        err.to_string().contains("add mechanism = \"curve\""),
        "{err}"
    );
    let err = Security::from_config(&SecurityConfig {
        mechanism: Some(MechanismName::Null),
        config_writers: vec!["ops".into()],
        ..SecurityConfig::default()
    })
    .unwrap_err();
    assert!(err.to_string().contains("carries no keys"), "{err}");
}

/// This process's resident set size, KiB (Linux).
fn rss_kib() -> u64 {
    tickbox_testkit::memory::resident_kib(tickbox_testkit::memory::Process::This).unwrap_or(0)
}
