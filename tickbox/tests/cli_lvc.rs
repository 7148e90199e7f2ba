//! `tickbox lvc` as a real process: prints its endpoints, serves a late joiner from its cache, and prints its
//! final counters on Ctrl-C.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use tickbox_wire::{encode_to_vec, Flags, Header, Kind, MessageRef, Quote};

struct KillOnDrop(Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn quote(topic: &str, seq: u64) -> Vec<u8> {
    encode_to_vec(
        topic,
        &Header::live(Kind::Quote, 1, seq, seq),
        &Quote::default().into(),
    )
    .unwrap()
}

fn recv_for(sock: &zmq::Socket, timeout: Duration, want: usize) -> Vec<Vec<u8>> {
    let deadline = Instant::now() + timeout;
    let mut got = Vec::new();
    while got.len() < want && Instant::now() < deadline {
        if sock.poll(zmq::POLLIN, 20).unwrap() > 0 {
            while let Ok(f) = sock.recv_bytes(zmq::DONTWAIT) {
                got.push(f);
            }
        }
    }
    got
}

#[test]
fn lvc_process_serves_late_joiners_and_reports_on_ctrl_c() {
    let ctx = zmq::Context::new();
    let publisher = ctx.socket(zmq::XPUB).unwrap();
    publisher.set_linger(0).unwrap();
    let pub_ep = tickbox_zmqx::bind_resolved(&publisher, "tcp://127.0.0.1:*").unwrap();

    let child = Command::new(env!("CARGO_BIN_EXE_tickbox"))
        .args(["lvc", "--upstream", &pub_ep, "--bind", "tcp://127.0.0.1:*"])
        .args([
            "--tap",
            "tcp://127.0.0.1:*",
            "--stats-interval",
            "0s",
            "--duration",
            "20s",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut child = KillOnDrop(child);
    let (line_tx, line_rx) = mpsc::channel();
    let stdout = child.0.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = line_tx.send(line);
        }
    });
    let mut downstream = None;
    let mut tap = None;
    while downstream.is_none() || tap.is_none() {
        let line = line_rx
            .recv_timeout(Duration::from_secs(10))
            .expect("lvc printed no endpoints");
        if let Some(ep) = line.strip_prefix("lvc subscribers ") {
            downstream = Some(ep.to_owned());
        }
        if let Some(ep) = line.strip_prefix("lvc tap ") {
            tap = Some(ep.to_owned());
        }
    }
    let downstream = downstream.unwrap();
    assert!(downstream.starts_with("tcp://127.0.0.1:") && !downstream.ends_with('*'));

    // The proxy subscribes to everything upstream.
    publisher.set_rcvtimeo(5000).unwrap();
    assert_eq!(publisher.recv_bytes(0).unwrap(), b"\x01");

    // A first subscriber proves the path is up (warm-up messages until one arrives), then sees 100 topics live.
    let first = ctx.socket(zmq::SUB).unwrap();
    first.set_linger(0).unwrap();
    first.connect(&downstream).unwrap();
    first.set_subscribe(b"").unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut warm = 0;
    loop {
        warm += 1;
        publisher.send(quote("W.WARM.UP", warm), 0).unwrap();
        if !recv_for(&first, Duration::from_millis(50), 1).is_empty() {
            break;
        }
        assert!(Instant::now() < deadline, "nothing came through the proxy");
    }
    for i in 0..100u64 {
        publisher
            .send(quote(&format!("Q.XNAS.S{i:03}"), 1000 + i), 0)
            .unwrap();
    }
    let mut live_topics = 0;
    let deadline = Instant::now() + Duration::from_secs(5);
    while live_topics < 100 && Instant::now() < deadline {
        let got = recv_for(&first, Duration::from_millis(50), usize::MAX);
        live_topics += got.iter().filter(|f| f.starts_with(b"Q.XNAS.")).count();
    }
    assert_eq!(live_topics, 100);

    // The late joiner gets all 100 from the cache.
    let late = ctx.socket(zmq::SUB).unwrap();
    late.set_linger(0).unwrap();
    late.connect(&downstream).unwrap();
    late.set_subscribe(b"Q.XNAS.").unwrap();
    let cached = recv_for(&late, Duration::from_secs(5), 100);
    assert_eq!(cached.len(), 100);
    for f in &cached {
        assert!(MessageRef::decode(f)
            .unwrap()
            .header()
            .flags
            .contains(Flags::CACHED));
    }

    // Ctrl-C: clean exit with the final table.
    let pid = child.0.id().to_string();
    assert!(Command::new("kill")
        .args(["-INT", &pid])
        .status()
        .unwrap()
        .success());
    let deadline = Instant::now() + Duration::from_secs(10);
    let status = loop {
        if let Some(status) = child.0.try_wait().unwrap() {
            break status;
        }
        assert!(Instant::now() < deadline, "lvc did not stop on SIGINT");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(status.success(), "{status:?}");
    reader.join().unwrap();
    let table: Vec<String> = line_rx.try_iter().collect();
    let row = |name: &str| -> u64 {
        let line = table
            .iter()
            .find(|l| l.starts_with(name))
            .unwrap_or_else(|| panic!("no `{name}` in {table:?}"));
        line.split_whitespace().last().unwrap().parse().unwrap()
    };
    assert_eq!(row("topics cached"), 101);
    // 100 to the late joiner, plus the warm-up topic if a warm-up message beat the first subscription.
    assert!((100..=101).contains(&row("cached sent")), "{table:?}");
    assert_eq!(row("messages in"), warm + 100);
}

#[test]
fn lvc_without_upstream_is_a_clear_error() {
    let out = Command::new(env!("CARGO_BIN_EXE_tickbox"))
        .args(["lvc", "--bind", "tcp://127.0.0.1:*", "--duration", "1s"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("upstream"), "{stderr}");
}
