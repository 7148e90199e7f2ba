//! The hostile test's rows, each through real processes and real CURVE handshakes: a stranger (a NULL client, an
//! unlisted key, a client expecting the wrong server key) is refused and counted by reason while the command goes
//! on working; a listed publisher key cannot forge another publisher's id inside a multipart message; a caller's
//! key cannot pose as a service's worker; a keyless TCP flood does not lock a listed reader out of a capped LVC; a
//! section that names keys without a mechanism, or a misspelt role, is an error; a key removed from the allow
//! directory loses its live session; a client with a broken CURVE config fails at once. The strangers are
//! test-side sockets: they do what tickbox itself never would.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use common::{endpoint_in, output_within, signal, KillOnDrop, TempDir, TICKBOX};
use tickbox_auth::{Allow, Certificate, MechanismName, Security, SecurityConfig};
use tickbox_wire::{Flags, MessageRef};

/// Keys of one deployment: `server` is every tickbox process's own key (listed, so processes also reach each
/// other); `reader` is a listed client; `stranger` is a key nobody listed; `other` is a server key nobody runs.
struct Deployment {
    dir: TempDir,
    server: Certificate,
    other: Certificate,
}

impl Deployment {
    fn new(name: &str) -> Deployment {
        let dir = TempDir::new(name);
        for key in ["server", "reader", "stranger", "other", "pubkey", "viewer"] {
            keygen(dir.path(), key);
        }
        let allow = dir.path().join("allow");
        std::fs::create_dir(&allow).unwrap();
        for key in ["server", "reader", "pubkey", "viewer"] {
            std::fs::copy(dir.path().join(key), allow.join(key)).unwrap();
        }
        let load = |n: &str| Certificate::load(&dir.path().join(format!("{n}_secret"))).unwrap();
        Deployment {
            server: load("server"),
            other: load("other"),
            dir,
        }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    /// The deployment's config with `extra` TOML appended after the `[security]` keys.
    fn config(&self, file: &str, extra: &str) -> PathBuf {
        let d = self.path().display();
        let path = self.path().join(file);
        std::fs::write(
            &path,
            format!(
                "[security]\nmechanism = \"curve\"\ncertificate = \"{d}/server_secret\"\nserver_key = \"{d}/server\"\n\
                 allow = \"{d}/allow\"\n{extra}"
            ),
        )
        .unwrap();
        path
    }

    /// A test-side CURVE client socket holding `key`, expecting `server_key`.
    fn curve_client(
        &self,
        ctx: &zmq::Context,
        kind: zmq::SocketType,
        key: &str,
        server_key: &Certificate,
    ) -> zmq::Socket {
        let socket = ctx.socket(kind).unwrap();
        socket.set_linger(0).unwrap();
        Security::from_config(&SecurityConfig {
            mechanism: Some(MechanismName::Curve),
            certificate: Some(self.path().join(format!("{key}_secret"))),
            server_key: Some(server_key.public_z85()),
            ..SecurityConfig::default()
        })
        .unwrap()
        .client(&socket, "test")
        .unwrap();
        socket
    }

    /// The three strangers of the hostile test, connected to `ep`: no CURVE at all, a key nobody listed, and a
    /// listed key expecting a server key nobody runs.
    fn strangers(&self, ctx: &zmq::Context, kind: zmq::SocketType, ep: &str) -> Vec<zmq::Socket> {
        let null = ctx.socket(kind).unwrap();
        null.set_linger(0).unwrap();
        let strangers = vec![
            null,
            self.curve_client(ctx, kind, "stranger", &self.server),
            self.curve_client(ctx, kind, "reader", &self.other),
        ];
        for s in &strangers {
            if kind == zmq::SUB {
                s.set_subscribe(b"").unwrap();
            }
            s.connect(ep).unwrap();
        }
        strangers
    }
}

fn keygen(dir: &Path, name: &str) {
    let out = output_within(
        {
            let mut c = Command::new(TICKBOX);
            c.args(["keygen", name, "--dir"]).arg(dir);
            c
        },
        Duration::from_secs(15),
    );
    assert!(out.status.success(), "keygen {name}: {out:?}");
}

/// `tickbox ARGS` with the auth crate's debug lines on stderr (one per refusal), stdout and stderr read as they
/// come.
fn spawn(args: &[&str]) -> (KillOnDrop, mpsc::Receiver<String>, mpsc::Receiver<String>) {
    let mut cmd = Command::new(TICKBOX);
    cmd.args(args)
        .env("RUST_LOG", "info,tickbox_auth=debug")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    common::spawn_piped(&mut cmd)
}

/// Waits (15 s at most) for a line of `lines` containing `needle`; returns it. Every line read is kept in `seen`.
fn wait_line(lines: &mpsc::Receiver<String>, needle: &str, seen: &mut Vec<String>) -> String {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match lines.recv_timeout(left) {
            Ok(line) => {
                seen.push(line.clone());
                if line.contains(needle) {
                    return line;
                }
            }
            Err(_) => panic!("no line with `{needle}`; saw:\n{}", seen.join("\n")),
        }
    }
}

/// Waits until the process has counted one refusal for each stranger, each for its own reason.
fn wait_three_refusals(stderr: &mpsc::Receiver<String>) {
    let deadline = Instant::now() + Duration::from_secs(15);
    let mut reasons = std::collections::BTreeSet::new();
    let mut seen = Vec::new();
    while reasons.len() < 3 {
        let left = deadline.saturating_duration_since(Instant::now());
        let Ok(line) = stderr.recv_timeout(left) else {
            panic!("refusals counted: {reasons:?}; saw:\n{}", seen.join("\n"));
        };
        if line.contains("handshake refused") {
            for (reason, counted_as) in NULL_REASONS.iter().map(|r| (*r, "no_curve")).chain([
                ("unknown_key", "unknown_key"),
                ("wrong_server_key", "wrong_server_key"),
            ]) {
                if line.contains(&format!("\"{reason}\"")) || line.contains(&format!("={reason}")) {
                    reasons.insert(counted_as);
                }
            }
        }
        seen.push(line);
    }
}

/// The `auth:` summary line of a stopped process's stdout.
fn auth_line(stdout: &mpsc::Receiver<String>) -> String {
    let mut seen = Vec::new();
    wait_line(stdout, "auth: ", &mut seen)
}

/// How a NULL client's refusal at a CURVE server is counted: `no_curve` when the server reads its greeting first,
/// `handshake` (closed during the handshake) when the client, seeing CURVE, hangs up first.
const NULL_REASONS: [&str; 2] = ["no_curve", "handshake"];

/// Each stranger's refusal is counted under its reason (a NULL client and a wrong-key one retry, so they may be
/// counted more than once; an unlisted key is told no and never retries).
fn assert_refused_by_reason(auth: &str) {
    let count = |reason: &str| -> u64 {
        auth.split(&format!(" {reason} "))
            .nth(1)
            .and_then(|rest| rest.split(|c: char| !c.is_ascii_digit()).next())
            .and_then(|n| n.parse().ok())
            .unwrap_or(0)
    };
    assert!(
        NULL_REASONS.iter().map(|r| count(r)).sum::<u64>() >= 1,
        "the NULL client not counted: {auth}"
    );
    assert!(
        count("wrong_server_key") >= 1,
        "wrong_server_key not counted: {auth}"
    );
    assert_eq!(count("unknown_key"), 1, "unknown_key: {auth}");
}

#[test]
fn record_serve_refuses_strangers_counts_them_and_never_stops_recording() {
    let d = Deployment::new("hostile-record");
    let config = d.config("curve.toml", "");
    let config = config.to_str().unwrap();
    let (_feed, feed_eps) = common::spawn_feed_with_endpoints(
        &[
            "--config",
            config,
            "--bind",
            "tcp://127.0.0.1:*",
            "--rate",
            "5k",
            "--duration",
            "30s",
            "--json",
        ],
        1,
    );
    let journal = d.path().join("day");
    let journal = journal.to_str().unwrap();
    const N: &str = "6000";
    let (mut record, out, err) = spawn(&[
        "--config",
        config,
        "record",
        "--connect",
        &feed_eps[0],
        "--journal",
        journal,
        "--segment-size",
        "16MiB",
        "--serve",
        "tcp://127.0.0.1:*",
        "--max-messages",
        N,
    ]);
    let mut seen = Vec::new();
    let serve = endpoint_in(&wait_line(&out, "history service endpoint", &mut seen)).unwrap();
    let ctx = zmq::Context::new();
    let strangers = d.strangers(&ctx, zmq::DEALER, &serve);
    wait_three_refusals(&err);
    // The recorder goes on to its last message (the freeze stopped it at a third of the feed, forever).
    let status = record.wait_exit(Duration::from_secs(20), "record did not finish");
    assert!(status.success(), "record exited {status:?}");
    let lines: Vec<String> = out.try_iter().collect();
    let text = lines.join("\n");
    assert!(
        text.contains(&format!("messages      {N}")) || text.contains(&format!("{N} messages")),
        "record did not record all {N}:\n{text}"
    );
    let auth = lines
        .iter()
        .find(|l| l.starts_with("auth: "))
        .unwrap_or_else(|| panic!("no auth line:\n{text}"));
    assert_refused_by_reason(auth);
    drop(strangers);
}

#[test]
fn a_listed_publisher_cannot_forge_another_id_inside_a_multipart_message() {
    let d = Deployment::new("hostile-forgery");
    let pubkey = Certificate::load(&d.path().join("pubkey")).unwrap();
    let config = d.config(
        "lvc.toml",
        &format!(
            "[security.publishers]\n\"{}\" = [12]\n",
            pubkey.public_z85()
        ),
    );
    let (mut lvc, out, _err) = spawn(&[
        "--config",
        config.to_str().unwrap(),
        "lvc",
        "--upstream-bind",
        "tcp://127.0.0.1:*",
        "--bind",
        "tcp://127.0.0.1:*",
    ]);
    let mut seen = Vec::new();
    let downstream = endpoint_in(&wait_line(&out, "lvc subscribers", &mut seen)).unwrap();
    let upstream = endpoint_in(&wait_line(&out, "lvc publishers", &mut seen)).unwrap();

    let ctx = zmq::Context::new();
    let publisher = d.curve_client(&ctx, zmq::XPUB, "pubkey", &d.server);
    publisher.connect(&upstream).unwrap();
    publisher.set_rcvtimeo(10_000).unwrap();
    // The proxy subscribes upstream once the handshake is done.
    assert!(publisher.recv_bytes(0).is_ok(), "the LVC never subscribed");
    let own = tickbox_testkit::quote("Q.XNAS.AAPL", 12, 1)
        .bid(100)
        .frame();
    let forged = tickbox_testkit::quote("Q.XNAS.MSFT", 11, 1)
        .bid(666)
        .frame();
    let own_guide = tickbox_testkit::quote("Q.XNAS.IBM", 12, 2).bid(101).frame();
    publisher.send(own.as_slice(), 0).unwrap();
    publisher
        .send_multipart([b"Q.XNAS.MSFT".as_slice(), forged.as_slice()], 0)
        .unwrap();
    publisher
        .send_multipart([b"Q.XNAS.IBM".as_slice(), own_guide.as_slice()], 0)
        .unwrap();
    // The last message is the marker that everything before it was handled.
    let marker = tickbox_testkit::quote("Q.XNAS.ZZZZ", 12, 3).bid(1).frame();
    publisher.send(marker.as_slice(), 0).unwrap();
    // The late joiner comes only once the proxy has handled all of it (on a loaded machine it may still be
    // forwarding, and a value passed on live is not CACHED): a watcher of the marker's topic gets the marker, from
    // the cache or live, only after everything sent before it.
    let watcher = d.curve_client(&ctx, zmq::SUB, "reader", &d.server);
    watcher.set_subscribe(b"Q.XNAS.ZZZZ").unwrap();
    watcher.set_rcvtimeo(10_000).unwrap();
    watcher.connect(&downstream).unwrap();
    assert!(
        watcher.recv_multipart(0).is_ok(),
        "the proxy never handled the marker"
    );

    // A late joiner: every value it gets is publisher 12's and marked CACHED.
    let reader = d.curve_client(&ctx, zmq::SUB, "reader", &d.server);
    reader.set_subscribe(b"").unwrap();
    reader.connect(&downstream).unwrap();
    let mut publishers = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    while publishers.len() < 3 && Instant::now() < deadline {
        if reader.poll(zmq::POLLIN, 50).unwrap() == 0 {
            continue;
        }
        let parts = reader.recv_multipart(0).unwrap();
        let frame = parts.last().unwrap();
        let m = MessageRef::decode(frame).expect("a tickbox frame");
        assert!(
            m.header().flags.contains(Flags::CACHED),
            "a value served to a late joiner without CACHED: {parts:?}"
        );
        publishers.push(m.header().publisher_id);
    }
    assert_eq!(
        publishers,
        [12, 12, 12],
        "the late joiner got a forged value or missed one"
    );
    signal(lvc.0.id(), "INT");
    lvc.wait_exit(Duration::from_secs(10), "lvc did not stop");
    let lines: Vec<String> = out.try_iter().collect();
    let auth = lines
        .iter()
        .find(|l| l.starts_with("auth: "))
        .unwrap_or_else(|| panic!("no auth line: {lines:?}"));
    assert!(
        auth.contains("1 forged messages refused"),
        "the forgery is not counted: {auth}"
    );
}

/// MDP worker frames from a test-side DEALER.
fn mdp_ready(worker: &zmq::Socket, service: &str) {
    worker
        .send_multipart([b"".as_slice(), b"MDPW01", &[0x01], service.as_bytes()], 0)
        .unwrap();
}

#[test]
fn a_callers_key_cannot_serve_and_the_operators_calls_reach_the_real_worker() {
    let d = Deployment::new("hostile-worker");
    let grants = "[security.services]\n\"tickbox.replay.*\" = { call = [\"reader\"], serve = [\"server\"] }\n\
                  \"tickbox.replay.status\" = { call = [\"reader\", \"viewer\"], serve = [\"server\"] }\n";
    let config = d.config("broker.toml", grants);
    let config = config.to_str().unwrap();
    let (mut broker, out, _err) = spawn(&[
        "--config",
        config,
        "broker",
        "--bind",
        "tcp://127.0.0.1:*",
        "--heartbeat",
        "100ms",
    ]);
    let mut seen = Vec::new();
    let ep = endpoint_in(&wait_line(&out, "broker listening on", &mut seen)).unwrap();

    // The viewer, allowed to call the status service only, registers as the start service's worker.
    let ctx = zmq::Context::new();
    let impostor = d.curve_client(&ctx, zmq::DEALER, "viewer", &d.server);
    impostor.connect(&ep).unwrap();
    mdp_ready(&impostor, "tickbox.replay.start");
    assert!(
        impostor.poll(zmq::POLLIN, 10_000).unwrap() > 0,
        "the impostor got no answer"
    );
    let answer = impostor.recv_multipart(0).unwrap();
    assert_eq!(
        answer,
        [b"".to_vec(), b"MDPW01".to_vec(), vec![0x05]],
        "the impostor's READY is answered with DISCONNECT"
    );

    // The real worker (the deployment's key holds the serve grant) answers every call of the operator.
    let (stop, worker) = real_worker(config, &ep, "tickbox.replay.start");
    let reader_config = d.path().join("reader.toml");
    let dd = d.path().display();
    std::fs::write(
        &reader_config,
        format!(
            "[security]\nmechanism = \"curve\"\ncertificate = \"{dd}/reader_secret\"\nserver_key = \"{dd}/server\"\n"
        ),
    )
    .unwrap();
    for _ in 0..4 {
        let out = output_within(
            {
                let mut c = Command::new(TICKBOX);
                c.args(["call", "--broker", &ep, "--timeout", "5s", "--config"])
                    .arg(&reader_config)
                    .args(["tickbox.replay.start", "go"]);
                c
            },
            Duration::from_secs(15),
        );
        assert_eq!(
            String::from_utf8_lossy(&out.stdout).trim(),
            "real:go",
            "{out:?}"
        );
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    worker.join().unwrap();
    signal(broker.0.id(), "INT");
    broker.wait_exit(Duration::from_secs(10), "broker did not stop");
    let lines: Vec<String> = out.try_iter().collect();
    let text = lines.join("\n");
    assert!(text.contains("workers unauthorised 1"), "{text}");
    assert!(
        text.contains("1 workers refused (no serve grant)"),
        "{text}"
    );
}

/// An MDP worker for `service` holding the config's key, answering `real:BODY`, until the flag is raised.
fn real_worker(
    config: &str,
    ep: &str,
    service: &'static str,
) -> (
    std::sync::Arc<std::sync::atomic::AtomicBool>,
    std::thread::JoinHandle<()>,
) {
    let section: toml::Table = toml::from_str(&std::fs::read_to_string(config).unwrap()).unwrap();
    let security: SecurityConfig = section["security"].clone().try_into().unwrap();
    let security = Security::from_config(&security).unwrap();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let (ep, s) = (ep.to_string(), std::sync::Arc::clone(&stop));
    let thread = std::thread::spawn(move || {
        let ctx = zmq::Context::new();
        let cfg = tickbox_majordomo::MdpWorkerConfig {
            heartbeat_interval: Duration::from_millis(100).into(),
            reconnect: Duration::from_millis(100).into(),
            security,
            ..Default::default()
        };
        let mut w = tickbox_majordomo::MdpWorker::connect(&ctx, &ep, service, cfg).unwrap();
        w.serve(&s, |b| vec![[b"real:".as_slice(), &b[0]].concat()])
            .unwrap();
    });
    (stop, thread)
}

/// A CURVE publisher in the test (the deployment's key, so the LVC connects to it) sending a quote every 10 ms
/// until dropped.
struct TestFeed {
    ep: String,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl TestFeed {
    fn start(d: &Deployment) -> TestFeed {
        let security = Security::from_config(&SecurityConfig {
            mechanism: Some(MechanismName::Curve),
            certificate: Some(d.path().join("server_secret")),
            allow: Some(Allow::Any),
            ..SecurityConfig::default()
        })
        .unwrap();
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (tx, rx) = mpsc::channel();
        let flag = std::sync::Arc::clone(&stop);
        let thread = std::thread::spawn(move || {
            let ctx = zmq::Context::new();
            let gate = security.gate(&ctx).unwrap();
            let publisher = gate.socket(zmq::PUB, "test.feed").unwrap();
            publisher.set_linger(0).unwrap();
            tx.send(tickbox_testkit::bind_loopback(&publisher)).unwrap();
            let mut seq = 0;
            while !flag.load(std::sync::atomic::Ordering::Relaxed) {
                seq += 1;
                let q = tickbox_testkit::quote("Q.XNAS.AAPL", 1, seq).bid(seq as i64);
                let _ = publisher.send(q.frame().as_slice(), zmq::DONTWAIT);
                // Paced like a quiet feed; nothing waits on this.
                std::thread::sleep(Duration::from_millis(10));
            }
        });
        TestFeed {
            ep: rx.recv_timeout(Duration::from_secs(10)).unwrap(),
            stop,
            thread: Some(thread),
        }
    }
}

impl Drop for TestFeed {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Spawns `tickbox --config CONFIG lvc --upstream FEED --bind tcp://127.0.0.1:* EXTRA` and returns it with its
/// downstream endpoint and its output lines.
fn spawn_lvc(
    config: &Path,
    feed: &str,
    extra: &[&str],
) -> (
    KillOnDrop,
    String,
    mpsc::Receiver<String>,
    mpsc::Receiver<String>,
) {
    let mut args = vec![
        "--config",
        config.to_str().unwrap(),
        "lvc",
        "--upstream",
        feed,
        "--bind",
        "tcp://127.0.0.1:*",
    ];
    args.extend_from_slice(extra);
    let (lvc, out, err) = spawn(&args);
    let mut seen = Vec::new();
    let downstream = endpoint_in(&wait_line(&out, "lvc subscribers", &mut seen)).unwrap();
    (lvc, downstream, out, err)
}

/// True once `reader` has received a live (not cached) quote, within `limit`.
fn reads_live(reader: &zmq::Socket, limit: Duration) -> bool {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        if reader.poll(zmq::POLLIN, 20).unwrap() == 0 {
            continue;
        }
        while let Ok(frame) = reader.recv_bytes(zmq::DONTWAIT) {
            if MessageRef::decode(&frame).is_ok_and(|m| !m.header().flags.contains(Flags::CACHED)) {
                return true;
            }
        }
    }
    false
}

#[test]
fn lvc_strangers_are_refused_and_a_keyless_flood_does_not_lock_a_listed_reader_out() {
    let d = Deployment::new("hostile-flood");
    let feed = TestFeed::start(&d);
    let config = d.config("lvc.toml", "");
    let (mut lvc, downstream, out, err) = spawn_lvc(&config, &feed.ep, &["--max-connections", "2"]);
    let ctx = zmq::Context::new();
    let strangers = d.strangers(&ctx, zmq::SUB, &downstream);
    wait_three_refusals(&err);
    // Sixty plain TCP connections that never say a word: they hold no place under the cap.
    let port: u16 = downstream.rsplit(':').next().unwrap().parse().unwrap();
    let flood: Vec<std::net::TcpStream> = (0..60)
        .map(|_| std::net::TcpStream::connect(("127.0.0.1", port)).unwrap())
        .collect();
    let reader = d.curve_client(&ctx, zmq::SUB, "reader", &d.server);
    reader.set_subscribe(b"").unwrap();
    reader.connect(&downstream).unwrap();
    // libzmq's own handshake timeout (30 s) is what the flood used to hold readers off for; the reader is in long
    // before the capped sockets' 5 s timeout has cleared a single flood connection.
    assert!(
        reads_live(&reader, Duration::from_secs(4)),
        "the listed reader was locked out by the flood"
    );
    drop(flood);
    drop(strangers);
    signal(lvc.0.id(), "INT");
    lvc.wait_exit(Duration::from_secs(10), "lvc did not stop");
    assert_refused_by_reason(&auth_line(&out));
}

#[test]
fn a_key_removed_from_the_allow_directory_loses_its_live_lvc_session() {
    let d = Deployment::new("hostile-revoke");
    let feed = TestFeed::start(&d);
    let config = d.config("lvc.toml", "");
    let (mut lvc, downstream, out, _err) = spawn_lvc(&config, &feed.ep, &[]);
    let ctx = zmq::Context::new();
    let reader = d.curve_client(&ctx, zmq::SUB, "reader", &d.server);
    reader.set_subscribe(b"").unwrap();
    reader
        .monitor(
            "inproc://revoked-reader",
            zmq::SocketEvent::HANDSHAKE_FAILED_AUTH as i32,
        )
        .unwrap();
    let monitor = ctx.socket(zmq::PAIR).unwrap();
    monitor.set_linger(0).unwrap();
    monitor.connect("inproc://revoked-reader").unwrap();
    reader.connect(&downstream).unwrap();
    assert!(reads_live(&reader, Duration::from_secs(10)), "never served");

    let revoked_at = Instant::now();
    std::fs::remove_file(d.path().join("allow").join("reader")).unwrap();
    // The session is closed and the reader's reconnect refused at its handshake.
    assert!(
        monitor.poll(zmq::POLLIN, 10_000).unwrap() > 0,
        "the revoked reader was never refused"
    );
    let took = revoked_at.elapsed();
    while reader.recv_bytes(zmq::DONTWAIT).is_ok() {}
    assert!(
        !reads_live(&reader, Duration::from_millis(500)),
        "the revoked reader still receives"
    );
    println!("revocation reached the live session in {took:?}");
    signal(lvc.0.id(), "INT");
    lvc.wait_exit(Duration::from_secs(10), "lvc did not stop");
    let auth = auth_line(&out);
    assert!(
        auth.contains("live sessions closed 1 time(s) after a revocation"),
        "{auth}"
    );
    assert!(auth.contains("unknown_key"), "{auth}");
}

/// `tickbox ARGS` with `config`, to completion within 15 s.
fn run_with(config: &Path, args: &[&str]) -> std::process::Output {
    let mut c = Command::new(TICKBOX);
    c.arg("--config").arg(config).args(args);
    output_within(c, Duration::from_secs(15))
}

#[test]
fn keys_without_a_mechanism_a_misspelt_role_and_curve_without_allow_are_errors() {
    let dir = TempDir::new("hostile-config");
    keygen(dir.path(), "server");
    let d = dir.path().display();
    let cases = [
        (
            format!("[security]\ncertificate = \"{d}/server_secret\"\nallow = \"{d}\"\n"),
            "no `mechanism`",
        ),
        (
            format!("[security.roles.lvc]\nallow = \"{d}\"\n"),
            "no `mechanism`",
        ),
        (
            format!(
                "[security]\nmechanism = \"curve\"\ncertificate = \"{d}/server_secret\"\nallow = \"any\"\n\
                 [security.roles.\"lvc.dowstream\"]\nallow = \"{d}\"\n"
            ),
            "did you mean \"lvc.downstream\"",
        ),
        (
            format!(
                "[security]\nmechanism = \"curve\"\ncertificate = \"{d}/server_secret\"\nserver_key = \"{d}/server\"\n"
            ),
            "needs `allow`",
        ),
    ];
    for (i, (text, want)) in cases.iter().enumerate() {
        let path = dir.path().join(format!("case{i}.toml"));
        std::fs::write(&path, text).unwrap();
        let out = run_with(
            &path,
            &[
                "lvc",
                "--upstream",
                "tcp://127.0.0.1:1",
                "--bind",
                "tcp://127.0.0.1:*",
                "--duration",
                "1s",
            ],
        );
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "case {i}: {err}");
        assert!(err.contains(want), "case {i}: `{want}` not in {err}");
    }
}

#[test]
fn clients_with_a_broken_curve_config_fail_at_once_with_one_line() {
    let dir = TempDir::new("hostile-client");
    keygen(dir.path(), "me");
    let path = dir.path().join("client.toml");
    std::fs::write(
        &path,
        format!(
            "[security]\nmechanism = \"curve\"\ncertificate = \"{}/me_secret\"\n",
            dir.path().display()
        ),
    )
    .unwrap();
    for args in [
        &[
            "ctl",
            "--server",
            "tcp://127.0.0.1:1",
            "--timeout",
            "1s",
            "get",
            "/x",
        ][..],
        &[
            "subscribe",
            "--connect",
            "tcp://127.0.0.1:1",
            "--clone",
            "tcp://127.0.0.1:1",
        ][..],
    ] {
        let started = Instant::now();
        let out = run_with(&path, args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
        assert!(err.contains("needs `server_key`"), "{args:?}: {err}");
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "{args:?} took {:?}",
            started.elapsed()
        );
    }
}

#[test]
fn servers_bind_loopback_unless_told_otherwise() {
    for (cmd, default) in [
        ("broker", "tcp://127.0.0.1:5555"),
        ("queue", "tcp://127.0.0.1:5555"),
        ("clone-server", "127.0.0.1"),
    ] {
        let out = output_within(
            {
                let mut c = Command::new(TICKBOX);
                c.args([cmd, "--help"]);
                c
            },
            Duration::from_secs(15),
        );
        let help = String::from_utf8_lossy(&out.stdout);
        assert!(
            help.contains(&format!("[default: {default}]")),
            "{cmd}: {help}"
        );
    }
    let out = output_within(
        {
            let mut c = Command::new(TICKBOX);
            c.arg("config");
            c
        },
        Duration::from_secs(15),
    );
    let reference = String::from_utf8_lossy(&out.stdout);
    assert!(
        reference.contains("bind = \"tcp://127.0.0.1:5558\""),
        "the LVC's default bind: {reference}"
    );
}

/// One binding command of the table: how it is started, where its strangers connect, and a check that it still
/// serves a listed client once they have been refused.
struct Binding {
    name: &'static str,
    args: Vec<String>,
    /// The stdout line (by prefix) that names the endpoint the strangers connect to.
    endpoint_line: &'static str,
    /// Which endpoint of that line, when it names several (`snapshot=` of the Clone server's).
    endpoint_key: Option<&'static str>,
    stranger: zmq::SocketType,
}

/// A free loopback port, for the one command that must be told a concrete endpoint (the Freelance server's
/// endpoint is its identity).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

#[test]
fn every_control_binding_refuses_a_null_an_unlisted_and_a_wrong_key_client_and_goes_on_serving() {
    let d = Deployment::new("hostile-bindings");
    let config = d.config("server.toml", "");
    let config = config.to_str().unwrap().to_owned();
    let reader = d.path().join("reader.toml");
    let dd = d.path().display();
    std::fs::write(
        &reader,
        format!(
            "[security]\nmechanism = \"curve\"\ncertificate = \"{dd}/reader_secret\"\nserver_key = \"{dd}/server\"\n"
        ),
    )
    .unwrap();
    let freelance = format!("tcp://127.0.0.1:{}", free_port());
    let bindings = [
        Binding {
            name: "broker",
            args: ["broker", "--bind", "tcp://127.0.0.1:*"]
                .map(String::from)
                .to_vec(),
            endpoint_line: "broker listening on",
            endpoint_key: None,
            stranger: zmq::DEALER,
        },
        Binding {
            name: "queue",
            args: [
                "queue",
                "--frontend",
                "tcp://127.0.0.1:*",
                "--backend",
                "tcp://127.0.0.1:*",
            ]
            .map(String::from)
            .to_vec(),
            endpoint_line: "queue frontend",
            endpoint_key: None,
            stranger: zmq::DEALER,
        },
        Binding {
            name: "clone-server",
            args: ["clone-server", "--port", "0"].map(String::from).to_vec(),
            endpoint_line: "clone-server port=",
            endpoint_key: Some("snapshot="),
            stranger: zmq::DEALER,
        },
        Binding {
            name: "freelance-server",
            args: vec![
                "freelance-server".into(),
                "--bind".into(),
                freelance.clone(),
            ],
            endpoint_line: "freelance server",
            endpoint_key: None,
            stranger: zmq::DEALER,
        },
    ];
    let ctx = zmq::Context::new();
    for b in bindings {
        let mut args = vec!["--config".to_string(), config.clone()];
        args.extend(b.args.iter().cloned());
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let (mut child, out, err) = spawn(&args);
        let mut seen = Vec::new();
        let line = wait_line(&out, b.endpoint_line, &mut seen);
        let ep = match b.endpoint_key {
            Some(key) => line
                .split_whitespace()
                .find_map(|w| w.strip_prefix(key))
                .unwrap()
                .to_owned(),
            None => endpoint_in(&line).unwrap(),
        };
        let strangers = d.strangers(&ctx, b.stranger, &ep);
        wait_three_refusals(&err);
        // Still serving a listed client.
        match b.name {
            "broker" => {
                let out = run_with(
                    &reader,
                    &[
                        "call",
                        "--broker",
                        &ep,
                        "--timeout",
                        "5s",
                        "mmi.service",
                        "echo",
                    ],
                );
                assert!(
                    !out.stdout.is_empty(),
                    "the broker did not answer a listed client: {out:?}"
                );
            }
            "clone-server" => {
                let port = line
                    .split_whitespace()
                    .find_map(|w| w.strip_prefix("port="))
                    .unwrap();
                let base = format!("tcp://127.0.0.1:{port}");
                let out = run_with(
                    &reader,
                    &["ctl", "--connect", &base, "--timeout", "5s", "get", "/none"],
                );
                // An absent key is exit 1 (a timeout would be 4): the server answered.
                assert_eq!(out.status.code(), Some(1), "{out:?}");
            }
            _ => assert!(child.0.try_wait().unwrap().is_none(), "{} died", b.name),
        }
        drop(strangers);
        signal(child.0.id(), "INT");
        child.wait_exit(Duration::from_secs(10), "did not stop");
        let auth = auth_line(&out);
        assert_refused_by_reason(&auth);
        println!("{}: {auth}", b.name);
    }
}
