//! A connection cap per bound socket (docs/book/src/bounds.md): `tickbox lvc --max-connections 3` admits three
//! subscribers, refuses (at the handshake, through ZAP) and counts every connection past them, and admits a
//! legitimate subscriber again once others leave, which then gets the live stream. Before the cap, idle
//! connections were bounded only by the file descriptors, and once those were gone a new subscriber got nothing.

use crate::common;

use std::process::Command;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use common::{first_line_where, line_after, remaining_lines, signal, spawn_piped, KillOnDrop};

const CAP: usize = 3;
const OVER: usize = 2;

fn quote(seq: u64) -> Vec<u8> {
    tickbox_testkit::quote("Q.XNAS.CAP", 1, seq).frame()
}

fn sub(ctx: &zmq::Context, endpoint: &str, reconnect: bool) -> zmq::Socket {
    let s = ctx.socket(zmq::SUB).unwrap();
    s.set_linger(0).unwrap();
    if !reconnect {
        // One attempt only, so each over-the-cap socket is refused exactly once.
        s.set_reconnect_ivl(-1).unwrap();
    }
    s.set_subscribe(b"").unwrap();
    s.connect(endpoint).unwrap();
    s
}

/// Publishes quotes until every socket in `want` has received one (bounded); returns the next sequence.
fn publish_until(publisher: &zmq::Socket, want: &[&zmq::Socket], mut seq: u64, what: &str) -> u64 {
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut got = vec![false; want.len()];
    while got.iter().any(|g| !g) {
        assert!(Instant::now() < deadline, "{what}: got {got:?}");
        publisher.send(quote(seq), 0).unwrap();
        seq += 1;
        for (i, s) in want.iter().enumerate() {
            while s.poll(zmq::POLLIN, 0).unwrap() > 0 {
                s.recv_bytes(0).unwrap();
                got[i] = true;
            }
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    seq
}

/// An LVC whose subscriber socket is capped at `cap` connections, fed by the test's own XPUB, with its stdout
/// lines and its debug log of connection counts; it runs at most 30 s.
struct CappedLvc {
    child: KillOnDrop,
    lines: mpsc::Receiver<String>,
    log: mpsc::Receiver<String>,
    publisher: zmq::Socket,
    downstream: String,
}

impl CappedLvc {
    fn start(ctx: &zmq::Context, cap: usize) -> Self {
        let publisher = ctx.socket(zmq::XPUB).unwrap();
        publisher.set_linger(0).unwrap();
        let pub_ep = tickbox_zmqx::bind_resolved(&publisher, "tcp://127.0.0.1:*").unwrap();
        let cap = cap.to_string();
        let (child, lines, log) = spawn_counting(&[
            "lvc",
            "--upstream",
            &pub_ep,
            "--bind",
            "tcp://127.0.0.1:*",
            "--max-connections",
            &cap,
            "--stats-interval",
            "0s",
            "--duration",
            "30s",
        ]);
        let downstream = line_after(&lines, "lvc subscribers ");
        publisher.set_rcvtimeo(10_000).unwrap();
        assert_eq!(
            publisher.recv_bytes(0).unwrap(),
            b"\x01",
            "the proxy subscribes upstream"
        );
        CappedLvc {
            child,
            lines,
            log,
            publisher,
            downstream,
        }
    }
}

#[test]
fn the_lvc_refuses_and_counts_connections_past_its_cap_and_admits_again_when_some_leave() {
    let ctx = zmq::Context::new();
    let CappedLvc {
        mut child,
        lines,
        log,
        publisher,
        downstream,
    } = CappedLvc::start(&ctx, CAP);

    // Three subscribers fill the cap; each gets the stream.
    let hogs: Vec<zmq::Socket> = (0..CAP).map(|_| sub(&ctx, &downstream, true)).collect();
    let mut seq = publish_until(&publisher, &hogs.iter().collect::<Vec<_>>(), 1, "admitted");

    // Two more are refused at their handshake: they get nothing while the admitted ones go on receiving.
    let over: Vec<zmq::Socket> = (0..OVER).map(|_| sub(&ctx, &downstream, false)).collect();
    for _ in 0..3 {
        seq = publish_until(
            &publisher,
            &hogs.iter().collect::<Vec<_>>(),
            seq,
            "still admitted",
        );
    }
    for s in &over {
        assert_eq!(
            s.poll(zmq::POLLIN, 0).unwrap(),
            0,
            "a refused peer got data"
        );
    }

    // Two of the admitted leave: a legitimate subscriber is admitted and gets the live stream.
    let mut hogs = hogs;
    hogs.truncate(CAP - 2);
    // Until the proxy has seen both go, a fresh peer would be refused (and counted) as one too many.
    await_open_after_close(&log, "lvc.downstream", CAP - 2);
    let fresh = sub(&ctx, &downstream, true);
    publish_until(
        &publisher,
        &[&fresh],
        seq,
        "a subscriber within the cap once others left",
    );
    for s in &over {
        assert_eq!(
            s.poll(zmq::POLLIN, 0).unwrap(),
            0,
            "a refused peer got data"
        );
    }

    signal(child.0.id(), "INT");
    let status = child.wait_exit(Duration::from_secs(10), "the LVC did not stop on Ctrl-C");
    assert!(status.success(), "{status:?}");
    // The process has exited: its stdout ends, and the channel with it.
    let summary: Vec<String> =
        std::iter::from_fn(|| lines.recv_timeout(Duration::from_secs(2)).ok()).collect();
    let connections = summary
        .iter()
        .find(|l| l.starts_with("connections: "))
        .unwrap_or_else(|| panic!("no connections line: {summary:?}"));
    // Open at the end: the admitted one left over and the fresh one; refused: exactly the two past the cap.
    assert!(
        connections.contains("lvc.downstream 2 open (peak "),
        "{connections}"
    );
    assert!(
        connections.contains(&format!("max {CAP}), {OVER} refused over the cap")),
        "{connections}"
    );
}

/// Spawns `tickbox ARGS` with its stdout lines and its debug log of connection counts (stderr lines): after each
/// accept or close the server logs how many connections of the role it counts open, which is what a test waits
/// on, not time, before it expects a freed slot to admit someone.
fn spawn_counting(args: &[&str]) -> (KillOnDrop, mpsc::Receiver<String>, mpsc::Receiver<String>) {
    spawn_piped(
        Command::new(common::TICKBOX)
            .args(args)
            .env("RUST_LOG", "warn,tickbox_auth=debug"),
    )
}

/// Waits (bounded) until the capped LVC logs that it refused a connection (the `who` the test started), then
/// closes `hog`, the subscriber holding the only slot, and waits until the LVC has seen it go.
fn refused_then_freed(log: &mpsc::Receiver<String>, hog: zmq::Socket, who: &str) {
    first_line_where(
        log,
        Duration::from_secs(10),
        &format!("the LVC never refused the {who}"),
        |line| line.contains("too many connections").then_some(()),
    );
    drop(hog);
    await_open_after_close(log, "lvc.downstream", 0);
}

/// Waits (bounded by `within`) for the `who` the test started to leave, checks that it succeeded and that its JSON
/// summary counts the refused handshake, and returns that summary with its stderr. Each stream is read to its
/// end: right after the exit, the reader threads may still hold the last lines.
fn summary_after_refusal(
    child: &mut KillOnDrop,
    out: &mpsc::Receiver<String>,
    err: &mpsc::Receiver<String>,
    within: Duration,
    who: &str,
) -> (serde_json::Value, Vec<String>) {
    let status = child.wait_exit(within, &format!("the {who} did not leave"));
    let stderr = remaining_lines(err);
    assert!(status.success(), "{status:?}: {stderr:#?}");
    let summary: serde_json::Value =
        serde_json::from_str(&remaining_lines(out).join("\n")).expect("one JSON summary");
    assert!(
        summary["handshakes_refused"].as_u64().unwrap() >= 1,
        "the refusal is counted: {summary}"
    );
    (summary, stderr)
}

/// Waits (bounded) for the first close of a `role` connection after which `open` are left. The tests call it when
/// every close so far left more than `open`, so that line is the departure they caused.
fn await_open_after_close(log: &mpsc::Receiver<String>, role: &str, open: usize) {
    let deadline = Instant::now() + Duration::from_secs(10);
    let want = format!("open={open}");
    let mut seen = Vec::new();
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let Ok(line) = log.recv_timeout(left) else {
            panic!("no close leaving {open} open on {role}: {seen:#?}");
        };
        if line.contains("connection count")
            && line.contains(role)
            && !line.contains("ACCEPTED")
            && line.ends_with(&want)
        {
            return;
        }
        seen.push(line);
    }
}

/// Waits (bounded) until `s` receives something (the Clone server's HUGZ heartbeats, every 100 ms here).
fn hears(s: &zmq::Socket, within: Duration) -> bool {
    let deadline = Instant::now() + within;
    while Instant::now() < deadline {
        if s.poll(zmq::POLLIN, 50).unwrap() > 0 {
            while s.poll(zmq::POLLIN, 0).unwrap() > 0 {
                s.recv_bytes(0).unwrap();
            }
            return true;
        }
    }
    false
}

#[test]
fn the_clone_server_refuses_and_counts_connections_past_its_cap() {
    let ctx = zmq::Context::new();
    let (mut child, lines, log) = spawn_counting(&[
        "clone-server",
        "--port",
        "0",
        "--interface",
        "127.0.0.1",
        "--hugz",
        "100ms",
        "--max-connections",
        "2",
    ]);
    let ready = line_after(&lines, "clone-server ");
    let publisher = ready
        .split_whitespace()
        .find_map(|f| f.strip_prefix("publisher="))
        .expect("publisher endpoint")
        .to_owned();
    let admitted: Vec<zmq::Socket> = (0..2).map(|_| sub(&ctx, &publisher, true)).collect();
    for s in &admitted {
        assert!(
            hears(s, Duration::from_secs(10)),
            "an admitted subscriber hears HUGZ"
        );
    }
    let over: Vec<zmq::Socket> = (0..OVER).map(|_| sub(&ctx, &publisher, false)).collect();
    for s in &admitted {
        assert!(hears(s, Duration::from_secs(5)));
    }
    for s in &over {
        assert!(
            !hears(s, Duration::from_millis(500)),
            "a refused peer got data"
        );
    }
    // The refused peers keep reconnecting: one of them, not the fresh one, could take the slot that frees up.
    // They have shown what they had to (refused, nothing heard), so they go first.
    drop(over);
    let mut admitted = admitted;
    admitted.pop();
    // Until the server has seen that one go, a fresh peer would be refused (and counted) as one too many.
    await_open_after_close(&log, "clone.publisher", 1);
    let fresh = sub(&ctx, &publisher, true);
    assert!(
        hears(&fresh, Duration::from_secs(10)),
        "admitted once one left"
    );

    signal(child.0.id(), "INT");
    let status = child.wait_exit(
        Duration::from_secs(10),
        "the Clone server did not stop on Ctrl-C",
    );
    assert!(status.success(), "{status:?}");
    let summary: Vec<String> =
        std::iter::from_fn(|| lines.recv_timeout(Duration::from_secs(2)).ok()).collect();
    let connections = summary
        .iter()
        .find(|l| l.starts_with("connections: "))
        .unwrap_or_else(|| panic!("no connections line: {summary:?}"));
    let publisher_counts = connections
        .split("; ")
        .find(|p| p.contains("clone.publisher "))
        .unwrap_or_else(|| panic!("{connections}"));
    assert!(
        publisher_counts.contains("clone.publisher 2 open"),
        "{connections}"
    );
    assert!(
        publisher_counts.ends_with(&format!("max 2), {OVER} refused over the cap")),
        "{connections}"
    );
}

/// A `tickbox subscribe` that arrives while the LVC's cap is full is refused at its handshake, and libzmq would
/// never try again for it: the subscriber counts the refusal, says so, connects again on its own, and gets the
/// live stream once a slot is free.
#[test]
fn a_subscriber_refused_at_the_cap_counts_it_and_gets_in_once_a_slot_frees() {
    let ctx = zmq::Context::new();
    let CappedLvc {
        child: _lvc,
        log,
        publisher,
        downstream,
        ..
    } = CappedLvc::start(&ctx, 1);
    let hog = sub(&ctx, &downstream, true);
    let mut seq = publish_until(&publisher, &[&hog], 1, "the first subscriber admitted");

    let (mut subscriber, out, err) = spawn_piped(Command::new(common::TICKBOX).args([
        "subscribe",
        "--connect",
        &downstream,
        "--workers",
        "1",
        // The test's quotes carry their sequence as send time: the snail is not what is checked here.
        "--max-lateness",
        "0",
        // Counted from the start too while nothing has arrived: long enough to outlast the refusal and redial.
        "--idle-exit",
        "6s",
        "--duration",
        "20s",
        "--json",
    ]));
    // The LVC refuses it (and says so), then the slot frees.
    refused_then_freed(&log, hog, "subscriber");
    // The subscriber connects again after a second; it gets what is published from then on. Publishing stops after
    // 4 s, and the subscriber leaves 6 s after its last message.
    let until = Instant::now() + Duration::from_secs(4);
    while Instant::now() < until {
        publisher.send(quote(seq), 0).unwrap();
        seq += 1;
        std::thread::sleep(Duration::from_millis(5));
    }
    let (summary, stderr) = summary_after_refusal(
        &mut subscriber,
        &out,
        &err,
        Duration::from_secs(15),
        "subscriber",
    );
    assert!(
        summary["data_received"].as_u64().unwrap() > 0,
        "it got in once a slot was free: {summary}"
    );
    assert!(
        stderr.iter().any(|l| l.contains("connects again")),
        "it said why it connects again: {stderr:#?}"
    );
}

/// A `tickbox record` that arrives while the LVC's cap is full is refused at its handshake, which libzmq would
/// never try again: the recorder counts the refusal, says so, connects again on its own, and records the live
/// stream once a slot is free, instead of sitting connected to nothing with an empty journal.
#[test]
fn a_recorder_refused_at_the_cap_counts_it_and_records_once_a_slot_frees() {
    const WANT: u64 = 50;
    let ctx = zmq::Context::new();
    let CappedLvc {
        child: _lvc,
        log,
        publisher,
        downstream,
        ..
    } = CappedLvc::start(&ctx, 1);
    let hog = sub(&ctx, &downstream, true);
    let mut seq = publish_until(&publisher, &[&hog], 1, "the first subscriber admitted");

    let dir = common::TempDir::new("cli-cap-record");
    let journal = dir.path().join("capped.tbj");
    let (mut recorder, out, err) = spawn_piped(Command::new(common::TICKBOX).args([
        "record",
        "--connect",
        &downstream,
        "--journal",
        journal.to_str().unwrap(),
        "--max-messages",
        &WANT.to_string(),
        "--duration",
        "20s",
        "--json",
    ]));
    // The LVC refuses it (and says so), then the slot frees.
    refused_then_freed(&log, hog, "recorder");
    // The recorder connects again after a second; it records what is published from then on and stops at WANT.
    let until = Instant::now() + Duration::from_secs(12);
    while recorder.0.try_wait().unwrap().is_none() {
        assert!(
            Instant::now() < until,
            "the recorder never got in: {:#?}",
            err.try_iter().collect::<Vec<_>>()
        );
        publisher.send(quote(seq), 0).unwrap();
        seq += 1;
        std::thread::sleep(Duration::from_millis(5));
    }
    let (summary, stderr) = summary_after_refusal(
        &mut recorder,
        &out,
        &err,
        Duration::from_secs(5),
        "recorder",
    );
    assert_eq!(
        summary["messages"].as_u64().unwrap(),
        WANT,
        "it got in once a slot was free: {summary}"
    );
    assert!(
        stderr.iter().any(|l| l.contains("recorder connects again")),
        "it said why it connects again: {stderr:#?}"
    );
}
