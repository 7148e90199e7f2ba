//! The reliable request-reply commands as real processes: `broker`, `call`, `titanic` (killed with SIGKILL and
//! restarted), `freelance-server`.

use crate::common;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{KillOnDrop, TempDir, TICKBOX};
use tickbox_majordomo::{MdpWorker, MdpWorkerConfig};

fn spawn(args: &[&str]) -> KillOnDrop {
    KillOnDrop(
        Command::new(TICKBOX)
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn tickbox"),
    )
}

fn first_line(p: &mut KillOnDrop) -> String {
    let mut line = String::new();
    BufReader::new(p.0.stdout.as_mut().unwrap())
        .read_line(&mut line)
        .unwrap();
    line.trim().to_string()
}

fn start_broker() -> (KillOnDrop, String) {
    let mut b = spawn(&[
        "broker",
        "--bind",
        "tcp://127.0.0.1:*",
        "--heartbeat",
        "100ms",
    ]);
    let line = first_line(&mut b);
    let ep = line
        .strip_prefix("broker listening on ")
        .unwrap_or_else(|| panic!("unexpected: {line}"))
        .to_string();
    (b, ep)
}

fn call(ep: &str, args: &[&str]) -> (Option<i32>, Vec<String>) {
    let mut full = vec![
        "call",
        "--broker",
        ep,
        "--timeout",
        "500ms",
        "--attempts",
        "4",
    ];
    full.extend_from_slice(args);
    let out = Command::new(TICKBOX)
        .args(&full)
        .stderr(Stdio::null())
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(str::to_string)
            .collect(),
    )
}

#[test]
fn call_prints_reply_frames_and_answers_an_unknown_service_with_404() {
    let (_broker, ep) = start_broker();
    assert_eq!(
        call(&ep, &["mmi.service", "echo"]),
        (Some(0), vec!["404".to_string()])
    );
    assert_eq!(
        call(&ep, &["mmi.nope", "x"]),
        (Some(0), vec!["501".to_string()])
    );
    let out = Command::new(TICKBOX)
        .args([
            "call",
            "--broker",
            &ep,
            "--timeout",
            "100ms",
            "--attempts",
            "2",
            "nobody",
            "x",
        ])
        .stderr(Stdio::null())
        .output()
        .unwrap();
    // A service no worker serves is answered by MMI at once: 404, exit 1 (no broker at all is exit 4, errors.rs).
    assert_eq!(out.status.code(), Some(1), "unknown service exit code");
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "404");
}

#[test]
fn titanic_process_killed_between_request_and_reply_loses_nothing() {
    let dir = TempDir::new("cli-rr");
    let jdir = dir.path().join("titanic");
    let jdir = jdir.to_str().unwrap();
    let (_broker, ep) = start_broker();
    let titanic_args = [
        "titanic",
        "--broker",
        ep.as_str(),
        "--dir",
        jdir,
        "--heartbeat",
        "100ms",
        "--scan",
        "50ms",
    ];
    let mut titanic = spawn(&titanic_args);
    assert!(first_line(&mut titanic).starts_with("titanic ready"));
    let (code, lines) = call(&ep, &["titanic.request", "work", "payload-1"]);
    assert_eq!(code, Some(0));
    assert_eq!(lines[0], "200");
    let uuid = lines[1].clone();
    assert_eq!(uuid.len(), 32);
    assert_eq!(call(&ep, &["titanic.reply", &uuid]).1, vec!["300"]);

    // SIGKILL: no clean shutdown of the journal, no DISCONNECT to the broker.
    titanic.0.kill().unwrap();
    titanic.0.wait().unwrap();

    let executed = Arc::new(AtomicU32::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let (e, n, s) = (ep.clone(), Arc::clone(&executed), Arc::clone(&stop));
    let worker = std::thread::spawn(move || {
        let ctx = zmq::Context::new();
        let cfg = MdpWorkerConfig {
            heartbeat_interval: Duration::from_millis(100).into(),
            reconnect: Duration::from_millis(100).into(),
            ..Default::default()
        };
        let mut w = MdpWorker::connect(&ctx, &e, "work", cfg).unwrap();
        w.serve(&s, |b| {
            n.fetch_add(1, Ordering::SeqCst);
            vec![[b"done:".as_slice(), &b[0]].concat()]
        })
        .unwrap();
    });
    let mut titanic = spawn(&titanic_args);
    let ready = first_line(&mut titanic);
    assert!(
        ready.contains("1 open requests (1 awaiting a reply)"),
        "{ready}"
    );
    let end = Instant::now() + Duration::from_secs(15);
    let reply = loop {
        let (_, lines) = call(&ep, &["titanic.reply", &uuid]);
        if lines.first().map(String::as_str) == Some("200") {
            break lines;
        }
        assert!(Instant::now() < end, "no reply after restart: {lines:?}");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(reply, vec!["200", "done:payload-1"]);
    assert_eq!(call(&ep, &["titanic.close", &uuid]).1, vec!["200"]);
    assert_eq!(call(&ep, &["titanic.reply", &uuid]).1, vec!["400"]);
    assert_eq!(executed.load(Ordering::SeqCst), 1);
    stop.store(true, Ordering::Relaxed);
    worker.join().unwrap();
}

#[test]
fn freelance_server_process_answers_ping_and_requests() {
    let dir = TempDir::new("cli-rr");
    let ep = format!("ipc://{}/fl.sock", dir.path().display());
    let mut server = spawn(&["freelance-server", "--bind", &ep]);
    assert!(first_line(&mut server).starts_with("freelance server"));
    let ctx = zmq::Context::new();
    let r = ctx.socket(zmq::ROUTER).unwrap();
    r.set_linger(0).unwrap();
    r.set_router_mandatory(true).unwrap();
    r.connect(&ep).unwrap();
    tickbox_testkit::wait_for(
        "the server to be reachable under its endpoint identity",
        Duration::from_secs(5),
        || r.send_multipart([ep.as_bytes(), b"PING"], 0).is_ok(),
    );
    assert!(r.poll(zmq::POLLIN, 3000).unwrap() > 0);
    assert_eq!(
        r.recv_multipart(0).unwrap(),
        vec![ep.as_bytes().to_vec(), b"PONG".to_vec()]
    );
    r.send_multipart([ep.as_bytes(), b"1", b"hello"], 0)
        .unwrap();
    assert!(r.poll(zmq::POLLIN, 3000).unwrap() > 0);
    assert_eq!(
        r.recv_multipart(0).unwrap(),
        vec![ep.as_bytes().to_vec(), b"1".to_vec(), b"OK".to_vec()]
    );
}
