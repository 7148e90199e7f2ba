//! `[security]` end to end through real processes: `tickbox keygen` writes czmq-format certificates; a CURVE
//! `tickbox lvc` lets a listed publisher key publish its own publisher id and a listed reader read, and refuses
//! (and counts) a forged publisher id, an unlisted key and a client without keys. A stranger's quote never reaches
//! a subscriber or the cache.

use crate::common;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{forward_lines, line_after, signal, KillOnDrop, TempDir, TICKBOX};
use tickbox_auth::{Certificate, MechanismName, Security, SecurityConfig};
use tickbox_wire::{MessageRef, Payload};

const TOPIC: &str = "Q.XNAS.AAPL";

fn keygen(dir: &Path, name: &str) -> Certificate {
    let out = Command::new(TICKBOX)
        .args(["keygen", name, "--dir"])
        .arg(dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    Certificate::load(&dir.join(format!("{name}_secret"))).unwrap()
}

fn quote(publisher: u32, seq: u64, bid: i64) -> Vec<u8> {
    tickbox_testkit::quote(TOPIC, publisher, seq)
        .bid(bid)
        .frame()
}

fn bid_of(frame: &[u8]) -> Option<(u32, i64)> {
    let msg = MessageRef::decode(frame).ok()?;
    match msg.payload().ok()? {
        Payload::Quote(q) => Some((msg.header().publisher_id, q.bid_px)),
        _ => None,
    }
}

/// A test-side socket with `cert` as its key, expecting `server` as the server's.
fn client(
    ctx: &zmq::Context,
    kind: zmq::SocketType,
    keys: &Path,
    cert: Option<&str>,
    server: &Certificate,
) -> zmq::Socket {
    let socket = ctx.socket(kind).unwrap();
    socket.set_linger(0).unwrap();
    let security = match cert {
        None => Security::default(),
        Some(name) => Security::from_config(&SecurityConfig {
            mechanism: Some(MechanismName::Curve),
            certificate: Some(keys.join(format!("{name}_secret"))),
            server_key: Some(server.public_z85()),
            ..SecurityConfig::default()
        })
        .unwrap(),
    };
    security.client(&socket, "test").unwrap();
    socket
}

#[test]
fn a_curve_lvc_admits_listed_keys_and_refuses_forgers_and_strangers() {
    let dir = TempDir::new("security-lvc");
    let keys = dir.path();
    let lvc = keygen(keys, "lvc");
    keygen(keys, "feed");
    keygen(keys, "reader");
    keygen(keys, "stranger");
    let secret_mode = {
        use std::os::unix::fs::PermissionsExt;
        std::fs::metadata(keys.join("lvc_secret"))
            .unwrap()
            .permissions()
            .mode()
            & 0o777
    };
    assert_eq!(secret_mode, 0o600);
    let refused = Command::new(TICKBOX)
        .args(["keygen", "lvc", "--dir"])
        .arg(keys)
        .output()
        .unwrap();
    assert!(!refused.status.success(), "keygen overwrote a certificate");

    for (allow, who) in [("publishers", "feed"), ("readers", "reader")] {
        std::fs::create_dir(keys.join(allow)).unwrap();
        std::fs::copy(keys.join(who), keys.join(allow).join(who)).unwrap();
    }
    let config = keys.join("lvc.toml");
    std::fs::write(
        &config,
        format!(
            r#"[security]
mechanism = "curve"
certificate = "{k}/lvc_secret"
[security.roles."lvc.upstream"]
allow = "{k}/publishers"
[security.roles."lvc.downstream"]
allow = "{k}/readers"
[security.publishers]
"{k}/feed" = [1]
"#,
            k = keys.display()
        ),
    )
    .unwrap();

    let mut child = KillOnDrop(
        Command::new(TICKBOX)
            .arg("--config")
            .arg(&config)
            .args([
                "lvc",
                "--upstream-bind",
                "tcp://127.0.0.1:*",
                "--bind",
                "tcp://127.0.0.1:*",
            ])
            .args(["--stats-interval", "0s", "--duration", "30s"])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let lines = forward_lines(child.0.stdout.take().unwrap());
    let downstream = line_after(&lines, "lvc subscribers ");
    let upstream = line_after(&lines, "lvc publishers ");

    let ctx = zmq::Context::new();
    let reader = client(&ctx, zmq::SUB, keys, Some("reader"), &lvc);
    reader.set_subscribe(b"").unwrap();
    reader.connect(&downstream).unwrap();
    let eavesdropper = client(&ctx, zmq::SUB, keys, Some("stranger"), &lvc);
    eavesdropper.set_subscribe(b"").unwrap();
    eavesdropper.connect(&downstream).unwrap();

    let feed = client(&ctx, zmq::PUB, keys, Some("feed"), &lvc);
    let forger = client(&ctx, zmq::PUB, keys, Some("feed"), &lvc);
    let stranger = client(&ctx, zmq::PUB, keys, Some("stranger"), &lvc);
    let keyless = client(&ctx, zmq::PUB, keys, None, &lvc);
    for socket in [&feed, &forger, &stranger, &keyless] {
        socket.connect(&upstream).unwrap();
    }

    // Publish until the reader has 20 of the feed's quotes; everyone else publishes the same topic each round.
    let deadline = Instant::now() + Duration::from_secs(15);
    let mut legit = 0;
    let mut seq = 0;
    while legit < 20 {
        if Instant::now() >= deadline {
            // What the proxy saw says which side failed: its summary follows a Ctrl-C.
            signal(child.0.id(), "INT");
            let mut said = Vec::new();
            while let Ok(line) = lines.recv_timeout(Duration::from_secs(3)) {
                said.push(line);
            }
            panic!(
                "the listed feed's quotes never reached the listed reader ({legit} did); the LVC said:\n{}",
                said.join("\n")
            );
        }
        seq += 1;
        feed.send(quote(1, seq, 100), zmq::DONTWAIT).ok();
        forger.send(quote(2, seq, 666), zmq::DONTWAIT).ok();
        stranger.send(quote(1, seq, 777), zmq::DONTWAIT).ok();
        keyless.send(quote(1, seq, 888), zmq::DONTWAIT).ok();
        if reader.poll(zmq::POLLIN, 20).unwrap() > 0 {
            while let Ok(frame) = reader.recv_bytes(zmq::DONTWAIT) {
                match bid_of(&frame) {
                    Some((1, 100)) => legit += 1,
                    Some(other) => {
                        panic!("a forged or stranger's quote reached the reader: {other:?}")
                    }
                    None => {}
                }
            }
        }
    }
    assert!(
        eavesdropper.recv_bytes(zmq::DONTWAIT).is_err(),
        "an unlisted reader read the feed"
    );

    // A late joiner gets the cached value: the feed's, never a forger's.
    let late = client(&ctx, zmq::SUB, keys, Some("reader"), &lvc);
    late.set_subscribe(TOPIC.as_bytes()).unwrap();
    late.connect(&downstream).unwrap();
    assert!(
        late.poll(zmq::POLLIN, 10_000).unwrap() > 0,
        "no cached value for the late joiner"
    );
    assert_eq!(bid_of(&late.recv_bytes(0).unwrap()), Some((1, 100)));

    signal(child.0.id(), "INT");
    let mut summary = String::new();
    let stop = Instant::now() + Duration::from_secs(10);
    while Instant::now() < stop {
        match lines.recv_timeout(Duration::from_millis(200)) {
            Ok(line) => {
                summary.push_str(&line);
                summary.push('\n');
            }
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => break,
            Err(_) => {}
        }
    }
    child.wait_exit(Duration::from_secs(10), "lvc did not stop on SIGINT");
    let forged: u64 = summary
        .lines()
        .find_map(|l| l.strip_prefix("forged refused"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no forged count in:\n{summary}"));
    assert!(
        forged > 0,
        "the forger's quotes were not counted:\n{summary}"
    );
    let auth = summary
        .lines()
        .find(|l| l.starts_with("auth: "))
        .unwrap_or_else(|| panic!("no auth line:\n{summary}"));
    let refused: u64 = auth
        .split(", ")
        .nth(1)
        .and_then(|p| p.strip_suffix(" refused").or_else(|| p.split(' ').next()))
        .and_then(|n| n.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("unreadable auth line: {auth}"));
    assert!(
        refused >= 2,
        "the stranger publisher and reader were not both counted: {auth}"
    );
    assert!(
        auth.contains("127.0.0.1"),
        "the refused peer's address is not shown: {auth}"
    );
}

#[test]
fn keys_made_by_pyzmq_load_and_a_pyzmq_curve_client_reads_a_tickbox_lvc() {
    let probe = Command::new("python3")
        .args(["-c", "import zmq, zmq.auth"])
        .output();
    if !probe.is_ok_and(|o| o.status.success()) {
        eprintln!("skipping: python3 with pyzmq is not installed (.ci/run installs it)");
        return;
    }
    let dir = TempDir::new("security-pyzmq");
    let keys = dir.path();
    // pyzmq writes NAME.key and NAME.key_secret; tickbox reads both as certificates.
    let made = Command::new("python3")
        .args([
            "-c",
            "import sys, zmq.auth; zmq.auth.create_certificates(sys.argv[1], 'py')",
        ])
        .arg(keys)
        .output()
        .unwrap();
    assert!(
        made.status.success(),
        "{}",
        String::from_utf8_lossy(&made.stderr)
    );
    std::fs::set_permissions(
        keys.join("py.key_secret"),
        std::os::unix::fs::PermissionsExt::from_mode(0o600),
    )
    .unwrap();
    let py =
        Certificate::load(&keys.join("py.key_secret")).expect("a pyzmq secret certificate loads");
    assert_eq!(
        Certificate::load(&keys.join("py.key")).unwrap().public,
        py.public
    );

    keygen(keys, "lvc");
    let feed = keygen(keys, "feed");
    std::fs::create_dir(keys.join("allow")).unwrap();
    std::fs::copy(keys.join("py.key"), keys.join("allow").join("py.key")).unwrap();
    // The LVC's upstream is a test-side CURVE XPUB holding the feed's key; the LVC expects that key.
    let ctx = zmq::Context::new();
    let feed_sec = Security::from_config(&SecurityConfig {
        mechanism: Some(MechanismName::Curve),
        certificate: Some(keys.join("feed_secret")),
        allow: Some(tickbox_auth::Allow::Any),
        ..SecurityConfig::default()
    })
    .unwrap();
    let gate = feed_sec.gate(&ctx).unwrap();
    let publisher = gate.socket(zmq::XPUB, "test.feed").unwrap();
    publisher.set_linger(0).unwrap();
    let pub_ep = tickbox_zmqx::bind_resolved(&publisher, "tcp://127.0.0.1:*").unwrap();
    let config = keys.join("lvc.toml");
    std::fs::write(
        &config,
        format!(
            "[security]\nmechanism = \"curve\"\ncertificate = \"{k}/lvc_secret\"\nallow = \"{k}/allow\"\nserver_key = \"{z}\"\n",
            k = keys.display(),
            z = feed.public_z85()
        ),
    )
    .unwrap();
    let mut child = KillOnDrop(
        Command::new(TICKBOX)
            .arg("--config")
            .arg(&config)
            .args(["lvc", "--upstream", &pub_ep, "--bind", "tcp://127.0.0.1:*"])
            .args(["--stats-interval", "0s", "--duration", "30s"])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let lines = forward_lines(child.0.stdout.take().unwrap());
    let downstream = line_after(&lines, "lvc subscribers ");
    // The LVC's subscription reaching the test XPUB proves the CURVE client side (LVC to feed) works.
    publisher.set_rcvtimeo(10_000).unwrap();
    publisher
        .recv_bytes(0)
        .expect("the LVC never subscribed upstream over CURVE");

    let script = r#"
import sys, zmq, zmq.auth
keys, ep = sys.argv[1], sys.argv[2]
pub, sec = zmq.auth.load_certificate(keys + '/py.key_secret')
server, _ = zmq.auth.load_certificate(keys + '/lvc')
s = zmq.Context.instance().socket(zmq.SUB)
s.curve_publickey, s.curve_secretkey, s.curve_serverkey = pub, sec, server
s.linger = 0
s.setsockopt(zmq.SUBSCRIBE, b'')
s.connect(ep)
s.rcvtimeo = 15000
print('got', len(s.recv()), flush=True)
"#;
    let mut py_child = KillOnDrop(
        Command::new("python3")
            .args(["-c", script])
            .arg(keys)
            .arg(&downstream)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let deadline = Instant::now() + Duration::from_secs(15);
    let mut seq = 0;
    let status = loop {
        if let Some(status) = py_child.0.try_wait().unwrap() {
            break status;
        }
        assert!(
            Instant::now() < deadline,
            "the pyzmq client received nothing"
        );
        seq += 1;
        publisher.send(quote(1, seq, 100), zmq::DONTWAIT).ok();
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut err = String::new();
    std::io::Read::read_to_string(py_child.0.stderr.as_mut().unwrap(), &mut err).unwrap();
    assert!(status.success(), "pyzmq client failed: {err}");
    signal(child.0.id(), "INT");
    child.wait_exit(Duration::from_secs(10), "lvc did not stop on SIGINT");
}

/// Writes `[security]` for a CURVE process holding `cert`, expecting `server` (if any), allowing `allow` (if any).
fn curve_toml(
    keys: &Path,
    file: &str,
    cert: &str,
    server: Option<&str>,
    allow: Option<&str>,
) -> std::path::PathBuf {
    let mut text = format!(
        "[security]\nmechanism = \"curve\"\ncertificate = \"{}\"\n",
        keys.join(format!("{cert}_secret")).display()
    );
    if let Some(server) = server {
        text.push_str(&format!(
            "server_key = \"{}\"\n",
            keys.join(server).display()
        ));
    }
    if let Some(dir) = allow {
        text.push_str(&format!("allow = \"{}\"\n", keys.join(dir).display()));
    }
    let path = keys.join(file);
    std::fs::write(&path, text).unwrap();
    path
}

#[test]
fn record_and_replay_run_over_curve_and_replay_refuses_a_stranger() {
    let dir = TempDir::new("security-record");
    let keys = dir.path();
    let source = keygen(keys, "source");
    keygen(keys, "recorder");
    let replayer = keygen(keys, "replayer");
    keygen(keys, "reader");
    keygen(keys, "stranger");
    std::fs::create_dir(keys.join("readers")).unwrap();
    std::fs::copy(keys.join("reader"), keys.join("readers").join("reader")).unwrap();

    // The source is a test-side CURVE XPUB; the recorder is a CURVE client expecting its key.
    let ctx = zmq::Context::new();
    let source_sec = Security::from_config(&SecurityConfig {
        mechanism: Some(MechanismName::Curve),
        certificate: Some(keys.join("source_secret")),
        allow: Some(tickbox_auth::Allow::Any),
        ..SecurityConfig::default()
    })
    .unwrap();
    let gate = source_sec.gate(&ctx).unwrap();
    let publisher = gate.socket(zmq::XPUB, "test.source").unwrap();
    publisher.set_linger(100).unwrap();
    publisher.set_sndhwm(0).unwrap();
    let ep = tickbox_zmqx::bind_resolved(&publisher, "tcp://127.0.0.1:*").unwrap();
    assert_eq!(
        source.public,
        Certificate::load(&keys.join("source")).unwrap().public
    );

    const N: u64 = 200;
    let journal = keys.join("j.tbj");
    let record_cfg = curve_toml(keys, "record.toml", "recorder", Some("source"), None);
    let recorder = Command::new(TICKBOX)
        .arg("--config")
        .arg(&record_cfg)
        .args(["record", "--connect", &ep, "--journal"])
        .arg(&journal)
        .args([
            "--capacity",
            "8MiB",
            "--max-messages",
            &N.to_string(),
            "--quiet",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let recorder = KillOnDrop(recorder);
    publisher.set_rcvtimeo(10_000).unwrap();
    assert_eq!(
        publisher.recv_bytes(0).unwrap(),
        b"\x01",
        "the recorder never subscribed over CURVE"
    );
    for i in 1..=N {
        publisher.send(quote(1, i, 100 + i as i64), 0).unwrap();
    }
    let out = recorder.wait_output(Duration::from_secs(15));
    assert!(out.status.success(), "{out:?}");

    // Replay over CURVE: the listed reader gets every record; a stranger's key gets none.
    let replay_cfg = curve_toml(keys, "replay.toml", "replayer", None, Some("readers"));
    let replay_ep = format!("ipc://{}/replay.sock", keys.display());
    let replay = Command::new(TICKBOX)
        .arg("--config")
        .arg(&replay_cfg)
        .args(["replay", "--journal"])
        .arg(&journal)
        .args([
            "--bind",
            &replay_ep,
            "--speed",
            "max",
            "--wait-for-subscribers",
            "1",
            "--wait-timeout",
            "10s",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let replay = KillOnDrop(replay);
    a_stranger_is_refused_and_counted_and_the_reader_gets_all(
        &ctx, keys, &replayer, &replay_ep, replay, N, "replay",
    );

    // `feed --source` of the same journal under the same `[security]`: the same refusal, counted in its summary.
    let feed_ep = format!("ipc://{}/feed.sock", keys.display());
    let feed = Command::new(TICKBOX)
        .arg("--config")
        .arg(&replay_cfg)
        .args(["feed", "--source"])
        .arg(&journal)
        .args([
            "--bind",
            &feed_ep,
            "--speed",
            "max",
            "--wait-for-subscribers",
            "1",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let feed = KillOnDrop(feed);
    a_stranger_is_refused_and_counted_and_the_reader_gets_all(
        &ctx, keys, &replayer, &feed_ep, feed, N, "feed",
    );
}

/// Against a CURVE server (`server`, whose key is `server_cert`) bound at `ep` that publishes `n` quotes once a
/// subscriber comes: a stranger's key is refused first (its own monitor sees the refusal, so the refusal is
/// counted before the server can finish), then the listed reader gets every quote, the stranger none, and the
/// server's summary has its auth line with the refusal counted.
fn a_stranger_is_refused_and_counted_and_the_reader_gets_all(
    ctx: &zmq::Context,
    keys: &Path,
    server_cert: &Certificate,
    ep: &str,
    server: KillOnDrop,
    n: u64,
    who: &str,
) {
    let stranger = client(ctx, zmq::SUB, keys, Some("stranger"), server_cert);
    stranger.set_subscribe(b"").unwrap();
    let monitor_ep = format!("inproc://stranger-monitor-{who}");
    stranger
        .monitor(&monitor_ep, zmq::SocketEvent::HANDSHAKE_FAILED_AUTH as i32)
        .unwrap();
    let monitor = ctx.socket(zmq::PAIR).unwrap();
    monitor.set_linger(0).unwrap();
    monitor.connect(&monitor_ep).unwrap();
    stranger.connect(ep).unwrap();
    assert!(
        monitor.poll(zmq::POLLIN, 10_000).unwrap() > 0,
        "the {who} never refused the stranger's key"
    );
    let reader = client(ctx, zmq::SUB, keys, Some("reader"), server_cert);
    reader.set_subscribe(b"").unwrap();
    reader.connect(ep).unwrap();
    let mut got = 0;
    let deadline = Instant::now() + Duration::from_secs(15);
    while got < n && Instant::now() < deadline {
        if reader.poll(zmq::POLLIN, 50).unwrap() > 0 {
            while let Ok(frame) = reader.recv_bytes(zmq::DONTWAIT) {
                if bid_of(&frame).is_some() {
                    got += 1;
                }
            }
        }
    }
    assert_eq!(
        got, n,
        "the listed reader did not get every record from the {who}"
    );
    assert!(
        stranger.recv_bytes(zmq::DONTWAIT).is_err(),
        "a stranger read the {who}"
    );
    let out = server.wait_output(Duration::from_secs(15));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("auth: "),
        "no auth line in the {who} summary:\n{text}"
    );
    assert!(
        !text.contains(" 0 refused"),
        "the stranger was not counted by the {who}:\n{text}"
    );
}
