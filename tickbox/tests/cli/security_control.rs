//! The control plane under `[security]` as real processes, with keys made by `tickbox keygen`: `tickbox broker`
//! serves a listed key, answers an authenticated key without the grant `403 unauthorised: SERVICE` (and `tickbox
//! call` exits 7), never lets a stranger in, and shows the counts in its summary; `tickbox clone-server` refuses a
//! `ctl set /config/...` from a key that is not a config writer (exit 7, reason `unauthorised`). Interop: a pyzmq
//! client with tickbox's keys talks MDP to the broker under CURVE, and pyzmq's keys load into tickbox.

use crate::common;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::{eventually, output_within, signal, KillOnDrop, TempDir, TICKBOX};
use tickbox_majordomo::{MdpWorker, MdpWorkerConfig};

fn tickbox(args: &[&str]) -> Output {
    let mut cmd = Command::new(TICKBOX);
    cmd.args(args);
    output_within(cmd, Duration::from_secs(15))
}

fn keygen(dir: &Path, name: &str) {
    let out = tickbox(&["keygen", name, "--dir", dir.to_str().unwrap()]);
    assert!(out.status.success(), "keygen {name}: {out:?}");
}

/// A deployment: `tickbox keygen` keys for the servers and three clients, `ops` and `viewer` listed in `allow/`.
fn deployment(dir: &Path) {
    for name in ["broker", "clone", "ops", "viewer", "stranger"] {
        keygen(dir, name);
    }
    let allow = dir.join("allow");
    std::fs::create_dir(&allow).unwrap();
    for name in ["ops", "viewer"] {
        std::fs::copy(dir.join(name), allow.join(name)).unwrap();
    }
}

/// A config for one process: its own certificate, the server's public certificate, the shared allow-list and
/// grants (every process may carry them; only the servers use them).
fn write_config(dir: &Path, me: &str, server: &str) -> String {
    let path = dir.join(format!("{me}-to-{server}.toml"));
    let d = dir.display();
    std::fs::write(
        &path,
        format!(
            r#"[security]
mechanism = "curve"
certificate = "{d}/{me}_secret"
server_key = "{d}/{server}"
allow = "{d}/allow"
config_writers = ["ops"]

[security.services]
"tickbox.replay.*" = {{ call = ["ops"], serve = ["ops"] }}
"#
        ),
    )
    .unwrap();
    path.to_str().unwrap().to_string()
}

fn spawn_first_line(args: &[&str]) -> (KillOnDrop, String, std::process::ChildStdout) {
    let mut child = Command::new(TICKBOX)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn tickbox");
    let mut stdout = child.stdout.take().unwrap();
    let child = KillOnDrop(child);
    // One byte at a time, so nothing after the first line is buffered away from the caller.
    let mut line = Vec::new();
    let mut byte = [0u8; 1];
    while std::io::Read::read(&mut stdout, &mut byte).unwrap_or(0) == 1 && byte[0] != b'\n' {
        line.push(byte[0]);
    }
    (child, String::from_utf8_lossy(&line).into_owned(), stdout)
}

fn start_broker(config: &str) -> (KillOnDrop, String, std::process::ChildStdout) {
    let (child, line, rest) = spawn_first_line(&[
        "broker",
        "--config",
        config,
        "--bind",
        "tcp://127.0.0.1:*",
        "--heartbeat",
        "100ms",
    ]);
    let ep = line
        .strip_prefix("broker listening on ")
        .unwrap_or_else(|| panic!("unexpected: {line}"))
        .to_string();
    (child, ep, rest)
}

fn call(ep: &str, config: Option<&str>, timeout: &str, args: &[&str]) -> (Option<i32>, String) {
    let mut full = vec![
        "call",
        "--broker",
        ep,
        "--timeout",
        timeout,
        "--attempts",
        "1",
    ];
    if let Some(c) = config {
        full.extend(["--config", c]);
    }
    full.extend_from_slice(args);
    let out = tickbox(&full);
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).trim().to_string(),
    )
}

/// An MDP worker for `service` with the ops key, answering `served:BODY`, until the flag is raised.
fn worker(
    ep: &str,
    config: &str,
    service: &'static str,
) -> (Arc<AtomicBool>, std::thread::JoinHandle<()>) {
    let text = std::fs::read_to_string(config).unwrap();
    let section: toml::Table = toml::from_str(&text).unwrap();
    let security: tickbox_auth::SecurityConfig = section["security"].clone().try_into().unwrap();
    let security = tickbox_auth::Security::from_config(&security).unwrap();
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
    (stop, thread)
}

#[test]
fn broker_serves_listed_keys_refuses_unlisted_callers_with_403_and_counts_strangers() {
    let dir = TempDir::new("cli-security-broker");
    let d = dir.path();
    deployment(d);
    let (mut broker, ep, rest) = start_broker(&write_config(d, "broker", "broker"));
    let ops = write_config(d, "ops", "broker");
    let viewer = write_config(d, "viewer", "broker");
    let stranger = write_config(d, "stranger", "broker");
    let (stop, worker) = worker(&ep, &ops, "tickbox.replay.stop");

    assert!(
        eventually(Duration::from_secs(10), Duration::from_millis(50), || {
            call(&ep, Some(&ops), "500ms", &["tickbox.replay.stop", "now"])
                == (Some(0), "served:now".to_string())
        }),
        "a listed key's tickbox.replay.stop is served"
    );
    assert_eq!(
        call(&ep, Some(&viewer), "5s", &["tickbox.replay.stop", "now"]),
        (Some(7), "403 unauthorised: tickbox.replay.stop".to_string()),
        "an authenticated key without the grant gets an error reply and exit 7"
    );
    assert_eq!(
        call(
            &ep,
            Some(&viewer),
            "5s",
            &["mmi.service", "tickbox.replay.stop"]
        ),
        (Some(0), "200".to_string()),
        "services no rule names stay open to authenticated keys"
    );
    for (name, config) in [
        ("unlisted key", Some(stranger.as_str())),
        ("no [security]", None),
    ] {
        assert_eq!(
            call(&ep, config, "300ms", &["mmi.service", "echo"]).0,
            Some(4),
            "{name}: never answered"
        );
    }
    stop.store(true, Ordering::Relaxed);
    worker.join().unwrap();

    signal(broker.0.id(), "INT");
    broker.wait_exit(Duration::from_secs(10), "broker did not stop on SIGINT");
    let summary: Vec<String> = BufReader::new(rest).lines().map_while(Result::ok).collect();
    let auth = summary
        .iter()
        .find(|l| l.starts_with("auth: "))
        .unwrap_or_else(|| panic!("no auth line in {summary:?}"));
    assert!(auth.contains("1 unauthorised requests refused"), "{auth}");
    assert!(auth.contains("(last: 127.0.0.1 on broker, "), "{auth}");
    assert!(
        !auth.contains(", 0 refused"),
        "the stranger is counted: {auth}"
    );
}

#[test]
fn broker_without_security_prints_no_auth_line() {
    let (mut broker, ep, rest) = {
        let (c, line, rest) = spawn_first_line(&["broker", "--bind", "tcp://127.0.0.1:*"]);
        (
            c,
            line.strip_prefix("broker listening on ")
                .unwrap()
                .to_string(),
            rest,
        )
    };
    assert_eq!(
        call(&ep, None, "5s", &["mmi.service", "echo"]),
        (Some(0), "404".to_string())
    );
    signal(broker.0.id(), "INT");
    broker.wait_exit(Duration::from_secs(10), "broker did not stop on SIGINT");
    let summary: Vec<String> = BufReader::new(rest).lines().map_while(Result::ok).collect();
    assert!(
        summary.iter().any(|l| l.starts_with("requests 1 ")),
        "{summary:?}"
    );
    assert!(
        !summary.iter().any(|l| l.starts_with("auth")),
        "{summary:?}"
    );
}

#[test]
fn ctl_set_config_from_a_key_that_is_not_a_writer_is_refused_with_exit_7() {
    let dir = TempDir::new("cli-security-clone");
    let d = dir.path();
    deployment(d);
    let (_server, line, _rest) = spawn_first_line(&[
        "clone-server",
        "--config",
        &write_config(d, "clone", "clone"),
        "--port",
        "0",
        "--interface",
        "127.0.0.1",
        "--hugz",
        "100ms",
    ]);
    let port: u16 = line
        .split_whitespace()
        .find_map(|f| f.strip_prefix("port="))
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("no port in {line:?}"));
    let server = format!("tcp://127.0.0.1:{port}");
    let ctl = |me: &str, args: &[&str]| {
        let config = write_config(d, me, "clone");
        let mut full = vec![
            "ctl",
            "--config",
            &config,
            "--connect",
            &server,
            "--timeout",
            "5s",
        ];
        full.extend_from_slice(args);
        tickbox(&full)
    };
    let o = ctl("ops", &["set", "/config/subscriber/max_lateness", "5ms"]);
    assert!(o.status.success(), "ops may write /config/: {o:?}");
    let o = ctl("viewer", &["set", "/config/subscriber/max_lateness", "1h"]);
    assert_eq!(o.status.code(), Some(7), "{o:?}");
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("refused by the server: unauthorised"),
        "{o:?}"
    );
    let o = ctl("viewer", &["get", "/config/subscriber/max_lateness"]);
    assert_eq!(
        String::from_utf8_lossy(&o.stdout),
        "5ms\n",
        "the refused set changed nothing"
    );
}

// ---- interop with pyzmq --------------------------------------------------------------------------------------

fn pyzmq() -> bool {
    let ok = Command::new("python3")
        .args(["-c", "import zmq, zmq.auth; assert zmq.has('curve')"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        eprintln!("skipping: python3 with pyzmq (and CURVE) is not available");
    }
    ok
}

/// One MDP/0.1 request from pyzmq under CURVE; prints the reply body frames, one per line, or `TIMEOUT`.
const PY_MDP_CALL: &str = r#"
import sys, zmq, zmq.auth
ep, client_secret, server_public, service, body = sys.argv[1:6]
ctx = zmq.Context()
s = ctx.socket(zmq.REQ)
s.linger = 0
pub, sec = zmq.auth.load_certificate(client_secret)
s.curve_publickey, s.curve_secretkey = pub, sec
s.curve_serverkey, _ = zmq.auth.load_certificate(server_public)
s.connect(ep)
s.send_multipart([b"MDPC01", service.encode(), body.encode()])
if s.poll(5000) == 0:
    print("TIMEOUT")
    sys.exit(3)
reply = s.recv_multipart()
assert reply[0] == b"MDPC01" and reply[1] == service.encode(), reply
for f in reply[2:]:
    print(f.decode())
s.close()
ctx.term()
"#;

fn py_call(
    ep: &str,
    client_secret: &Path,
    server_public: &Path,
    service: &str,
    body: &str,
) -> String {
    let mut cmd = Command::new("python3");
    cmd.args([
        "-c",
        PY_MDP_CALL,
        ep,
        client_secret.to_str().unwrap(),
        server_public.to_str().unwrap(),
        service,
        body,
    ]);
    let out = output_within(cmd, Duration::from_secs(15));
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout).trim(),
        if out.status.success() {
            String::new()
        } else {
            format!(
                " (exit {:?}: {})",
                out.status.code(),
                String::from_utf8_lossy(&out.stderr)
            )
        }
    )
}

#[test]
fn pyzmq_talks_mdp_to_the_broker_under_curve_with_tickbox_keys() {
    if !pyzmq() {
        return;
    }
    let dir = TempDir::new("cli-security-pyzmq");
    let d = dir.path();
    deployment(d);
    let (_broker, ep, _rest) = start_broker(&write_config(d, "broker", "broker"));
    let (stop, worker) = worker(
        &ep,
        &write_config(d, "ops", "broker"),
        "tickbox.replay.stop",
    );
    let broker_public = d.join("broker");
    assert!(
        eventually(Duration::from_secs(10), Duration::from_millis(50), || {
            py_call(
                &ep,
                &d.join("ops_secret"),
                &broker_public,
                "tickbox.replay.stop",
                "py",
            ) == "served:py"
        }),
        "pyzmq with the ops key is served"
    );
    assert_eq!(
        py_call(
            &ep,
            &d.join("viewer_secret"),
            &broker_public,
            "tickbox.replay.stop",
            "py"
        ),
        "403 unauthorised: tickbox.replay.stop"
    );
    assert!(
        py_call(
            &ep,
            &d.join("stranger_secret"),
            &broker_public,
            "mmi.service",
            "echo"
        )
        .starts_with("TIMEOUT"),
        "an unlisted pyzmq key is not let in"
    );
    stop.store(true, Ordering::Relaxed);
    worker.join().unwrap();
}

#[test]
fn keys_made_by_pyzmq_load_into_tickbox() {
    if !pyzmq() {
        return;
    }
    let dir = TempDir::new("cli-security-pyzmq-keys");
    let d = dir.path();
    let allow = d.join("allow");
    std::fs::create_dir(&allow).unwrap();
    let mut cmd = Command::new("python3");
    cmd.args([
        "-c",
        "import os, sys, zmq.auth\n\
         d = sys.argv[1]\n\
         for name in ('broker', 'ops'):\n    zmq.auth.create_certificates(d, name)\n\
         os.chmod(os.path.join(d, 'broker.key_secret'), 0o600)\n\
         os.chmod(os.path.join(d, 'ops.key_secret'), 0o600)\n\
         os.rename(os.path.join(d, 'ops.key'), os.path.join(d, 'allow', 'ops.key'))\n",
        d.to_str().unwrap(),
    ]);
    let out = output_within(cmd, Duration::from_secs(15));
    assert!(out.status.success(), "pyzmq create_certificates: {out:?}");
    let config = |me: &str| {
        let path = d.join(format!("{me}.toml"));
        let dd = d.display();
        std::fs::write(
            &path,
            format!(
                "[security]\nmechanism = \"curve\"\ncertificate = \"{dd}/{me}.key_secret\"\nserver_key = \"{dd}/broker.key\"\nallow = \"{dd}/allow\"\n"
            ),
        )
        .unwrap();
        path.to_str().unwrap().to_string()
    };
    let (_broker, ep, _rest) = start_broker(&config("broker"));
    assert_eq!(
        call(&ep, Some(&config("ops")), "5s", &["mmi.service", "echo"]),
        (Some(0), "404".to_string()),
        "tickbox call with pyzmq's keys reaches tickbox broker with pyzmq's keys"
    );
}
