//! `tickbox clone-server` stopped by SIGTERM while a watcher that asked for a large snapshot never reads it: the
//! snapshot ROUTER is stalled mid-multipart, the state in which libzmq 4.3.4's `clean_pipes` abort needs only a
//! hang-up at the wrong moment. The server's multipart senders close with a linger longer than their TCP timeout,
//! `[clone.server] stalled_peer_timeout`, so the process must exit 0, promptly (within the teardown bound), and
//! not abort when the watcher hangs up afterwards.

use crate::common;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{KillOnDrop, TempDir, TICKBOX};

fn ctl_get_succeeds(port: u16, key: &str) -> bool {
    let child = Command::new(TICKBOX)
        .args(["ctl", "--connect", &format!("tcp://127.0.0.1:{port}")])
        .args(["--timeout", "5s", "get", key])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("run ctl");
    KillOnDrop(child)
        .wait_output(Duration::from_secs(15))
        .status
        .success()
}

#[test]
fn sigterm_with_a_stalled_snapshot_reader_exits_0_within_the_bound() {
    let dir = TempDir::new("cli_clone_stop");
    let config = dir.0.join("tickbox.toml");
    std::fs::write(
        &config,
        "[clone.server]\nstalled_peer_timeout = \"500ms\"\n",
    )
    .unwrap();
    let mut child = Command::new(TICKBOX)
        .args(["--config", config.to_str().unwrap()])
        .args(["clone-server", "--port", "0", "--interface", "127.0.0.1"])
        .args(["--hugz", "200ms", "--max-value", "1048576"])
        .env("RUST_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn clone-server");
    let stdout = child.stdout.take().unwrap();
    let mut server = KillOnDrop(child);
    let mut line = String::new();
    BufReader::new(stdout).read_line(&mut line).unwrap();
    let port: u16 = line
        .split_whitespace()
        .find_map(|f| f.strip_prefix("port="))
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("no port in ready line {line:?}"));

    // 48 values of 512 KiB through a raw collector PUB: a 24 MiB snapshot, far beyond loopback TCP buffers.
    let ctx = zmq::Context::new();
    let writer = ctx.socket(zmq::PUB).unwrap();
    writer.set_linger(1000).unwrap();
    writer.set_sndhwm(0).unwrap();
    writer
        .connect(&format!("tcp://127.0.0.1:{}", port + 2))
        .unwrap();
    let kvset = |key: &[u8], value: &[u8]| {
        writer
            .send_multipart([key, &0u64.to_be_bytes()[..], b"", b"", value], 0)
            .unwrap();
    };
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        kvset(b"/probe", b"1");
        if ctl_get_succeeds(port, "/probe") {
            break;
        }
        assert!(Instant::now() < deadline, "collector never connected");
    }
    let value = vec![b'v'; 512 * 1024];
    for i in 0..48 {
        kvset(format!("/big/{i:02}").as_bytes(), &value);
    }
    while !ctl_get_succeeds(port, "/big/47") {
        assert!(Instant::now() < deadline, "load did not finish");
        std::thread::sleep(Duration::from_millis(100));
    }

    let watcher = ctx.socket(zmq::DEALER).unwrap();
    watcher.set_linger(0).unwrap();
    watcher.set_rcvhwm(1).unwrap();
    watcher.set_rcvbuf(4096).unwrap();
    watcher.connect(&format!("tcp://127.0.0.1:{port}")).unwrap();
    watcher.send_multipart([&b"ICANHAZ?"[..], b""], 0).unwrap();
    // Readiness: the first snapshot message has arrived and is never read; the rest is stuck behind it.
    while !watcher.get_events().unwrap().contains(zmq::POLLIN) {
        assert!(Instant::now() < deadline, "the snapshot never started");
        std::thread::sleep(Duration::from_millis(10));
    }

    let t = Instant::now();
    common::send_signal(server.0.id(), libc::SIGTERM);
    // 2 x 500 ms + 1 s (tickbox_zmqx::teardown::termination_bound), plus a second for the process itself.
    let status = server.wait_exit(
        Duration::from_secs(3),
        "clone-server did not exit within the stalled-peer bound",
    );
    let took = t.elapsed();
    drop(watcher);
    let mut err = String::new();
    if let Some(mut e) = server.0.stderr.take() {
        let _ = std::io::Read::read_to_string(&mut e, &mut err);
    }
    println!("clone-server exited {status} {took:?} after SIGTERM with a stalled snapshot reader");
    assert_eq!(status.code(), Some(0), "exit status {status}\n{err}");
    assert!(!err.contains("session_base.cpp"), "{err}");
}
