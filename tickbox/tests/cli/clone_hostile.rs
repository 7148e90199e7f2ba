//! `tickbox clone-server` against hostile or careless peers, as a real process: its resident memory stays bounded,
//! legitimate traffic keeps flowing, and refusals are answered.

use crate::common;

use std::io::{BufRead, BufReader};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::{KillOnDrop, TempDir, TICKBOX};

/// Starts `tickbox clone-server --port 0 --interface 127.0.0.1 ARGS`, stderr to `log` when given.
fn spawn_server(args: &[&str], log: Option<&std::path::Path>) -> (KillOnDrop, u16) {
    let stderr = match log {
        Some(p) => Stdio::from(std::fs::File::create(p).unwrap()),
        None => Stdio::null(),
    };
    let mut child = Command::new(TICKBOX)
        .args(["clone-server", "--port", "0", "--interface", "127.0.0.1"])
        .args(["--hugz", "200ms"])
        .args(args)
        .env("RUST_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(stderr)
        .spawn()
        .expect("spawn clone-server");
    let stdout = child.stdout.take().unwrap();
    let proc = KillOnDrop(child);
    let mut line = String::new();
    BufReader::new(stdout).read_line(&mut line).unwrap();
    let port = line
        .split_whitespace()
        .find_map(|f| f.strip_prefix("port="))
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("no port in ready line {line:?}"));
    (proc, port)
}

fn ctl(port: u16, args: &[&str]) -> Output {
    let child = Command::new(TICKBOX)
        .args(["ctl", "--connect", &format!("tcp://127.0.0.1:{port}")])
        .args(["--timeout", "5s"])
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run ctl");
    KillOnDrop(child).wait_output(Duration::from_secs(15))
}

fn rss_kib(pid: u32) -> u64 {
    tickbox_testkit::memory::resident_kib(tickbox_testkit::memory::Process::Pid(pid))
        .expect("server alive")
}

fn raw(ctx: &zmq::Context, kind: zmq::SocketType, ep: String) -> zmq::Socket {
    let s = ctx.socket(kind).unwrap();
    s.set_linger(100).unwrap();
    s.connect(&ep).unwrap();
    s
}

fn kvset(s: &zmq::Socket, key: &[u8], value: &[u8]) {
    s.send_multipart([key, &0u64.to_be_bytes()[..], b"", b"", value], 0)
        .unwrap();
}

/// Loads `n` keys of `size` bytes through a raw collector PUB and waits (bounded) until `ctl` sees the last one.
fn load(ctx: &zmq::Context, port: u16, n: usize, size: usize) {
    let w = raw(ctx, zmq::PUB, format!("tcp://127.0.0.1:{}", port + 2));
    // PUB drops above its HWM instead of blocking: no limit, so the whole load arrives.
    w.set_sndhwm(0).unwrap();
    let value = vec![b'v'; size];
    let deadline = Instant::now() + Duration::from_secs(25);
    // PUB drops until connected: resend a probe until it lands.
    loop {
        kvset(&w, b"/load/probe", b"1");
        if ctl(port, &["get", "/load/probe"]).status.success() {
            break;
        }
        assert!(Instant::now() < deadline, "collector never connected");
    }
    for i in 0..n {
        kvset(&w, format!("/load/{i:08}").as_bytes(), &value);
    }
    let last = format!("/load/{:08}", n - 1);
    while !ctl(port, &["get", &last]).status.success() {
        assert!(Instant::now() < deadline, "load did not finish");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn snapshot_requests_from_readers_that_never_read_stay_bounded() {
    let (server, port) = spawn_server(&["--max-value", "4096"], None);
    let ctx = zmq::Context::new();
    // 10 000 keys of 4000 bytes: each whole snapshot is ~40 MB, 40 of them would be 1.6 GB.
    load(&ctx, port, 10_000, 4000);
    let before = rss_kib(server.0.id());
    let mut dealers = Vec::new();
    for _ in 0..40 {
        let d = ctx.socket(zmq::DEALER).unwrap();
        d.set_linger(0).unwrap();
        d.set_rcvhwm(1).unwrap();
        d.set_rcvbuf(4096).unwrap();
        d.connect(&format!("tcp://127.0.0.1:{port}")).unwrap();
        d.send_multipart([&b"ICANHAZ?"[..], b""], 0).unwrap();
        dealers.push(d);
    }
    // Give the server time to fill every queue it is willing to fill.
    let mut peak = before;
    let until = Instant::now() + Duration::from_secs(4);
    while Instant::now() < until {
        peak = peak.max(rss_kib(server.0.id()));
        std::thread::sleep(Duration::from_millis(100));
    }
    println!(
        "server VmRSS before {before} KiB, peak with 40 non-reading snapshot requesters {peak} KiB"
    );
    assert!(
        peak < before + 150 * 1024,
        "server grew from {before} KiB to {peak} KiB for 40 non-reading snapshot requesters"
    );
    // Legitimate snapshots are still served while the hogs hold their slots or have been refused.
    let o = ctl(port, &["get", "/load/00000007"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    drop(dealers);
}

#[test]
fn distinct_key_flood_is_bounded_and_does_not_lock_out_reserved_prefixes() {
    let (server, port) = spawn_server(&["--max-keys", "20000", "--max-bytes", "8MiB"], None);
    let ctx = zmq::Context::new();
    let before = rss_kib(server.0.id());
    let w = raw(&ctx, zmq::PUB, format!("tcp://127.0.0.1:{}", port + 2));
    std::thread::sleep(Duration::from_millis(300));
    let value = vec![b'g'; 200];
    let t = Instant::now();
    let mut sent = 0u64;
    while t.elapsed() < Duration::from_secs(4) {
        for _ in 0..1000 {
            kvset(&w, format!("/garbage/{sent:012}").as_bytes(), &value);
            sent += 1;
        }
    }
    std::thread::sleep(Duration::from_millis(500));
    let after = rss_kib(server.0.id());
    println!("flooded {sent} distinct keys: server VmRSS {before} KiB -> {after} KiB");
    assert!(sent > 100_000, "flood too small to prove anything: {sent}");
    assert!(
        after < before + 200 * 1024,
        "server grew from {before} KiB to {after} KiB under a distinct-key flood"
    );
    // The general budget is full: a new garbage key is refused, with the reason, exit 7.
    let o = ctl(port, &["set", "/garbage/new", "v"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(7), "{err}");
    assert!(
        err.contains("too-many-keys") || err.contains("too-many-bytes"),
        "{err}"
    );
    // Configuration keys have their own budget and still work.
    let o = ctl(port, &["set", "/config/app/level", "3"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let o = ctl(port, &["get", "/config/app/level"]);
    assert_eq!(String::from_utf8_lossy(&o.stdout), "3\n");
}

#[test]
fn refused_set_is_answered_with_its_reason_and_exit_code_7() {
    let (_server, port) = spawn_server(&["--max-value", "16"], None);
    let t = Instant::now();
    let o = ctl(
        port,
        &["set", "/app/big", "this value is longer than sixteen bytes"],
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(7), "{err}");
    assert!(err.contains("value-too-large"), "{err}");
    assert!(
        t.elapsed() < Duration::from_secs(4),
        "the refusal must come from the server, not the 5 s timeout: {:?}",
        t.elapsed()
    );
    let o = ctl(port, &["set", "/app/small", "ok"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}

#[test]
fn malformed_flood_is_logged_rate_limited() {
    let dir = TempDir::new("clone-malformed");
    let log = dir.path().join("server.log");
    let (server, port) = spawn_server(&[], Some(&log));
    let ctx = zmq::Context::new();
    let w = raw(&ctx, zmq::PUB, format!("tcp://127.0.0.1:{}", port + 2));
    let r = raw(&ctx, zmq::DEALER, format!("tcp://127.0.0.1:{port}"));
    std::thread::sleep(Duration::from_millis(300));
    for i in 0..10_000u32 {
        w.send_multipart([&b"bad"[..], &i.to_be_bytes()[..]], 0)
            .unwrap();
        r.send_multipart([&b"NOT-ICANHAZ"[..]], 0).unwrap();
    }
    std::thread::sleep(Duration::from_millis(1500));
    // Still serving.
    assert!(ctl(port, &["set", "/ok/k", "v"]).status.success());
    drop(server);
    let text = std::fs::read_to_string(&log).unwrap();
    let lines = text.lines().filter(|l| l.contains("malformed")).count();
    println!("20000 malformed messages produced {lines} log lines");
    assert!(
        lines >= 1,
        "malformed input must still be reported:\n{text}"
    );
    assert!(lines < 40, "{lines} lines for 20000 malformed messages");
}

#[test]
fn oversized_subscription_leaves_the_server_serving() {
    let (mut server, port) = spawn_server(&[], None);
    let ctx = zmq::Context::new();
    // libzmq's subscription trie recurses once per byte, so the *test's* SUB needs a big stack for a 32 KiB
    // prefix (the server refuses the frame before storing it).
    let publisher = format!("tcp://127.0.0.1:{}", port + 1);
    let c = ctx.clone();
    std::thread::Builder::new()
        .stack_size(512 << 20)
        .spawn(move || {
            let sub = raw(&c, zmq::SUB, publisher);
            let long = vec![b'/'; 32 * 1024];
            sub.set_subscribe(&long).unwrap();
            std::thread::sleep(Duration::from_millis(300));
            sub.set_unsubscribe(&long).unwrap();
            std::thread::sleep(Duration::from_millis(300));
        })
        .unwrap()
        .join()
        .unwrap();
    assert!(server.0.try_wait().unwrap().is_none(), "server died");
    let o = ctl(port, &["set", "/sub/k", "v"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(
        String::from_utf8_lossy(&ctl(port, &["get", "/sub/k"]).stdout),
        "v\n"
    );
    assert!(server.0.try_wait().unwrap().is_none(), "server died");
}

#[test]
fn base_port_that_would_wrap_is_rejected_with_a_clear_message() {
    for port in ["65535", "65534"] {
        let child = Command::new(TICKBOX)
            .args(["clone-server", "--interface", "127.0.0.1", "--port", port])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let o = KillOnDrop(child).wait_output(Duration::from_secs(10));
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success(), "--port {port} must fail");
        assert!(err.contains("65533"), "--port {port}: {err}");
        assert!(
            o.stdout.is_empty(),
            "nothing may be bound: {}",
            String::from_utf8_lossy(&o.stdout)
        );
    }
}
