//! `tickbox record` and `tickbox replay` as real processes: round trip through a journal, pacing, and a recorder
//! killed with SIGKILL mid-stream.

use crate::common;

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use common::{KillOnDrop, TempDir, TICKBOX};
use tickbox_journal::{Reader, Writer, WriterOptions};
use tickbox_wire::{encode_to_vec, Flags, Header, Kind, MessageRef, Quote, Trade};

fn spawn(args: &[&str]) -> KillOnDrop {
    KillOnDrop(
        Command::new(TICKBOX)
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    )
}

const SYMBOLS: [&str; 6] = ["AAPL", "MSFT", "NVDA", "AMZN", "META", "GOOG"];

/// Original message `i`: alternating quote/trade over six symbols, publisher 7, sequence i, distinct payload.
fn original(i: u64, send_ns: u64) -> Vec<u8> {
    let sym = SYMBOLS[(i as usize / 2) % SYMBOLS.len()];
    if i & 1 == 0 {
        let q = Quote {
            instrument_id: i as u32,
            bid_px: i as i64,
            ..Quote::default()
        };
        encode_to_vec(
            &format!("Q.XNAS.{sym}"),
            &Header::live(Kind::Quote, 7, i, send_ns),
            &q.into(),
        )
        .unwrap()
    } else {
        let t = Trade {
            instrument_id: i as u32,
            size: i as u32,
            trade_id: i,
            ..Trade::default()
        };
        encode_to_vec(
            &format!("T.XNAS.{sym}"),
            &Header::live(Kind::Trade, 7, i, send_ns),
            &t.into(),
        )
        .unwrap()
    }
}

fn instrument(frame: &[u8]) -> u64 {
    match MessageRef::decode(frame).unwrap().payload().unwrap() {
        tickbox_wire::Payload::Quote(q) => q.instrument_id as u64,
        tickbox_wire::Payload::Trade(t) => t.instrument_id as u64,
        other => panic!("unexpected {other:?}"),
    }
}

/// Receives data frames (heartbeats skipped) from SUB sockets connected to `endpoints` until `n` arrived or the
/// deadline; returns (shard index, arrival instant, frame).
fn receive(
    ctx: &zmq::Context,
    endpoints: &[String],
    n: usize,
    limit: Duration,
    ready: mpsc::Sender<()>,
) -> Vec<(usize, Instant, Vec<u8>)> {
    let subs: Vec<zmq::Socket> = endpoints
        .iter()
        .map(|ep| {
            let s = ctx.socket(zmq::SUB).unwrap();
            s.set_linger(0).unwrap();
            s.set_rcvhwm(0).unwrap();
            s.set_subscribe(b"").unwrap();
            s.connect(ep).unwrap();
            s
        })
        .collect();
    ready.send(()).unwrap();
    let mut got = Vec::new();
    let deadline = Instant::now() + limit;
    while got.len() < n && Instant::now() < deadline {
        let mut items: Vec<zmq::PollItem> =
            subs.iter().map(|s| s.as_poll_item(zmq::POLLIN)).collect();
        zmq::poll(&mut items, 50).unwrap();
        for (i, s) in subs.iter().enumerate() {
            while let Ok(frame) = s.recv_bytes(zmq::DONTWAIT) {
                if MessageRef::decode(&frame).unwrap().kind() != Kind::Heartbeat {
                    got.push((i, Instant::now(), frame));
                }
            }
        }
    }
    got
}

/// Replays `journal` onto `shards` ipc endpoints with `speed`, collecting what a subscriber on every shard gets.
fn replay(
    dir: &Path,
    journal: &Path,
    shards: usize,
    speed: &str,
    n: usize,
    extra: &[&str],
) -> (Output, Vec<(usize, Instant, Vec<u8>)>) {
    let endpoints: Vec<String> = (0..shards)
        .map(|i| format!("ipc://{}/replay-{speed}-{i}.sock", dir.display()))
        .collect();
    let bind = endpoints.join(",");
    let mut args = vec![
        "replay",
        "--journal",
        journal.to_str().unwrap(),
        "--bind",
        &bind,
        "--speed",
        speed,
    ];
    args.extend_from_slice(&[
        "--wait-for-subscribers",
        "1",
        "--wait-timeout",
        "10s",
        "--quiet",
    ]);
    args.extend_from_slice(extra);
    let child = spawn(&args);
    // Give the replayer a moment to bind the ipc endpoints before connecting (connect retries anyway).
    let ctx = zmq::Context::new();
    let (tx, _rx) = mpsc::channel();
    let got = receive(&ctx, &endpoints, n, Duration::from_secs(15), tx);
    let out = child.wait_output(Duration::from_secs(15));
    (out, got)
}

#[test]
fn publisher_record_replay_subscriber_round_trip() {
    let dir = TempDir::new("cli-record-roundtrip");
    let journal = dir.0.join("j.tbj");
    const N: u64 = 3000;
    let ctx = zmq::Context::new();
    let publisher = ctx.socket(zmq::XPUB).unwrap();
    publisher.set_linger(100).unwrap();
    // Unbounded, so the burst below is not dropped at the high-water mark while the recorder starts up.
    publisher.set_sndhwm(0).unwrap();
    let ep = tickbox_testkit::bind_loopback(&publisher);
    let n = N.to_string();
    let recorder = spawn(&[
        "record",
        "--connect",
        &ep,
        "--journal",
        journal.to_str().unwrap(),
        "--capacity",
        "8MiB",
        "--max-messages",
        &n,
        "--quiet",
    ]);
    publisher.set_rcvtimeo(10_000).unwrap();
    assert_eq!(
        publisher.recv_bytes(0).unwrap(),
        b"\x01",
        "recorder subscribed"
    );
    // Some junk the recorder must count and skip, not record.
    publisher.send(&b"not a tickbox frame"[..], 0).unwrap();
    let mut originals = Vec::new();
    for i in 1..=N {
        let f = original(i, 1_000_000 + i);
        publisher.send(&f, 0).unwrap();
        originals.push(f);
    }
    let out = recorder.wait_output(Duration::from_secs(15));
    assert!(out.status.success(), "{out:?}");
    let summary = String::from_utf8_lossy(&out.stdout);
    assert!(summary.contains(&format!("messages      {N}")), "{summary}");
    assert!(summary.contains("invalid       1"), "{summary}");

    // The journal holds exactly the frames, in order, with increasing capture times.
    let mut r = Reader::open(&journal).unwrap();
    let mut last_t = 0;
    for (i, orig) in originals.iter().enumerate() {
        let rec = r.next().unwrap().unwrap();
        assert_eq!(rec.seq, i as u64 + 1);
        assert_eq!(rec.payload, &orig[..]);
        assert!(rec.capture_time_ns >= last_t);
        last_t = rec.capture_time_ns;
    }
    assert!(r.next().unwrap().is_none());

    // One shard: the subscriber sees every topic and payload in the original order.
    let (out, got) = replay(&dir.0, &journal, 1, "max", N as usize, &[]);
    assert!(out.status.success(), "{out:?}");
    assert_eq!(got.len(), N as usize, "{out:?}");
    for (k, ((_, _, frame), orig)) in got.iter().zip(&originals).enumerate() {
        let (m, o) = (
            MessageRef::decode(frame).unwrap(),
            MessageRef::decode(orig).unwrap(),
        );
        assert_eq!(
            (m.topic(), m.payload_bytes()),
            (o.topic(), o.payload_bytes()),
            "message {k}"
        );
        let h = m.header();
        assert_eq!(
            (h.publisher_id, h.sequence),
            (7, k as u64 + 1),
            "the original publisher and sequence"
        );
        assert!(h.flags.contains(Flags::REPLAY));
        assert_eq!(
            h.origin_time_ns,
            o.header().origin_time_ns,
            "origin time kept"
        );
        assert!(
            h.send_time_ns > 1_600_000_000_000_000_000,
            "re-stamped with the replay's clock"
        );
    }

    // Three shards, identities kept: the one publisher is carried whole by shard 7 % 3.
    let (out, got) = replay(&dir.0, &journal, 3, "max", N as usize, &[]);
    assert!(out.status.success(), "{out:?}");
    assert_eq!(got.len(), N as usize);
    assert!(got.iter().all(|(shard, _, _)| *shard == 1), "one shard");

    // Three shards restamped: each symbol stays on one shard, each shard is its own gap-free publisher, and per
    // shard the original order is kept.
    let (out, got) = replay(
        &dir.0,
        &journal,
        3,
        "max",
        N as usize,
        &["--restamp", "--publisher-id", "500"],
    );
    assert!(out.status.success(), "{out:?}");
    assert_eq!(got.len(), N as usize);
    let mut per_shard: Vec<Vec<&Vec<u8>>> = vec![Vec::new(); 3];
    for (shard, _, frame) in &got {
        per_shard[*shard].push(frame);
    }
    for (shard, frames) in per_shard.iter().enumerate() {
        let owns_symbols = SYMBOLS
            .iter()
            .any(|sym| tickbox_wire::shard_for(format!("XNAS.{sym}").as_bytes(), 3) == shard);
        assert_eq!(!frames.is_empty(), owns_symbols, "shard {shard}");
        let mut prev_instrument = 0;
        for (k, f) in frames.iter().enumerate() {
            let m = MessageRef::decode(f).unwrap();
            assert_eq!(
                (m.header().publisher_id, m.header().sequence),
                (500 + shard as u32, k as u64 + 1)
            );
            let key = tickbox_wire::shard_key_of_topic(m.topic().as_bytes());
            assert_eq!(tickbox_wire::shard_for(key, 3), shard);
            let inst = instrument(f);
            assert!(inst > prev_instrument, "order kept within shard {shard}");
            prev_instrument = inst;
        }
    }

    // A window by sequence: [100, 200).
    let (out, got) = replay(
        &dir.0,
        &journal,
        1,
        "max",
        100,
        &["--from-seq", "100", "--to-seq", "200"],
    );
    assert!(out.status.success(), "{out:?}");
    let insts: Vec<u64> = got.iter().map(|(_, _, f)| instrument(f)).collect();
    assert_eq!(insts, (100..200).collect::<Vec<_>>());
}

/// A journal of `n` frames whose capture times span `span` evenly.
fn paced_journal(path: &Path, n: u64, span: Duration) {
    let mut w = Writer::open(path, &WriterOptions::ring(4 << 20)).unwrap();
    let t0 = 1_767_364_200_000_000_000u64;
    let step = span.as_nanos() as u64 / (n - 1);
    for i in 0..n {
        let t = t0 + i * step;
        w.append(t, &original(i + 1, t)).unwrap();
    }
}

/// A recording of several publishers whose records alternate one by one (as one SUB reading several feed shards
/// records them) replays onto as many shards as it has publishers: each publisher whole, in order, on shard
/// `publisher_id % N`, alone there, so a subscriber reads each on its own pinned shard thread instead of one thread
/// taking all of them.
#[test]
fn a_recording_of_four_publishers_replays_onto_four_shards_one_publisher_each() {
    let dir = TempDir::new("cli-replay-four-publishers");
    let journal = dir.0.join("j.tbj");
    const PER_PUBLISHER: u64 = 500;
    const PUBLISHERS: [u32; 4] = [1, 2, 3, 4];
    {
        let mut w = Writer::open(&journal, &WriterOptions::ring(8 << 20)).unwrap();
        for seq in 1..=PER_PUBLISHER {
            for p in PUBLISHERS {
                let frame = tickbox_testkit::quote(&format!("Q.XNAS.P{p}"), p, seq)
                    .sent_at(1_000_000 + seq)
                    .instrument(seq as u32)
                    .frame();
                w.append(1_000_000 + seq, &frame).unwrap();
            }
        }
    }
    let n = PER_PUBLISHER as usize * PUBLISHERS.len();
    let (out, got) = replay(&dir.0, &journal, PUBLISHERS.len(), "max", n, &[]);
    assert!(out.status.success(), "{out:?}");
    assert_eq!(got.len(), n, "every record once");
    let mut per_shard: Vec<Vec<(u32, u64)>> = vec![Vec::new(); PUBLISHERS.len()];
    for (shard, _, frame) in &got {
        let h = *MessageRef::decode(frame).unwrap().header();
        per_shard[*shard].push((h.publisher_id, h.sequence));
    }
    for (shard, records) in per_shard.iter().enumerate() {
        let owner = PUBLISHERS
            .into_iter()
            .find(|p| *p as usize % PUBLISHERS.len() == shard)
            .unwrap();
        let want: Vec<(u32, u64)> = (1..=PER_PUBLISHER).map(|seq| (owner, seq)).collect();
        assert_eq!(
            records, &want,
            "shard {shard}: publisher {owner} whole and in order, alone"
        );
    }
}

#[test]
fn replay_pacing_follows_capture_times() {
    let dir = TempDir::new("cli-record-pacing");
    let journal = dir.0.join("j.tbj");
    paced_journal(&journal, 400, Duration::from_secs(2));
    for (speed, lo, hi) in [("1", 1.7, 3.0), ("4", 0.4, 1.0)] {
        let (out, got) = replay(&dir.0, &journal, 2, speed, 400, &[]);
        assert!(out.status.success(), "{out:?}");
        assert_eq!(got.len(), 400, "speed {speed}");
        let mut arrivals: Vec<Instant> = got.iter().map(|(_, t, _)| *t).collect();
        arrivals.sort();
        let took = (arrivals[399] - arrivals[0]).as_secs_f64();
        assert!(
            (lo..hi).contains(&took),
            "speed {speed}: 2 s of capture replayed in {took:.3} s"
        );
        // Halfway through the capture, about halfway through the replay.
        let mid = (arrivals[200] - arrivals[0]).as_secs_f64() / took;
        assert!(
            (0.35..0.65).contains(&mid),
            "speed {speed}: midpoint at {mid:.2}"
        );
    }
    let (out, got) = replay(&dir.0, &journal, 1, "max", 400, &[]);
    assert!(out.status.success(), "{out:?}");
    let insts: Vec<u64> = got.iter().map(|(_, _, f)| instrument(f)).collect();
    assert_eq!(
        insts,
        (1..=400).collect::<Vec<_>>(),
        "max speed: everything, in order"
    );
    // Replaying a window by time: the second second only.
    // Capture times are t0 + i * 2 s / 399, so records 201..=400 are at or past t0 + 1 s.
    let (out, got) = replay(&dir.0, &journal, 1, "max", 200, &["--from", "+1s"]);
    assert!(out.status.success(), "{out:?}");
    let insts: Vec<u64> = got.iter().map(|(_, _, f)| instrument(f)).collect();
    assert_eq!(insts, (201..=400).collect::<Vec<_>>());
}

#[test]
fn recorder_killed_mid_stream_leaves_a_recoverable_prefix() {
    let dir = TempDir::new("cli-record-crash");
    let journal = dir.0.join("j.tbj");
    let stop = Arc::new(AtomicBool::new(false));
    let (ep_tx, ep_rx) = mpsc::channel();
    let pub_stop = Arc::clone(&stop);
    // The feed: one publisher thread sending gap-free sequences until told to stop.
    let feeder = std::thread::spawn(move || {
        let ctx = zmq::Context::new();
        let s = ctx.socket(zmq::XPUB).unwrap();
        s.set_linger(0).unwrap();
        s.set_sndhwm(0).unwrap();
        ep_tx.send(tickbox_testkit::bind_loopback(&s)).unwrap();
        s.set_rcvtimeo(10_000).unwrap();
        if s.recv_bytes(0).is_err() {
            return 0;
        }
        let mut i = 0u64;
        let deadline = Instant::now() + Duration::from_secs(15);
        while !pub_stop.load(Ordering::Relaxed) && Instant::now() < deadline {
            i += 1;
            s.send(original(i, i), 0).unwrap();
            if i % 200 == 199 {
                std::thread::sleep(Duration::from_millis(1));
            }
        }
        i
    });
    let ep = ep_rx.recv_timeout(Duration::from_secs(5)).unwrap();
    let mut recorder = spawn(&[
        "record",
        "--connect",
        &ep,
        "--journal",
        journal.to_str().unwrap(),
        "--capacity",
        "64MiB",
        "--quiet",
    ]);
    // Let it record a while, then SIGKILL it in the middle of the stream.
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut seen = 0;
    while Instant::now() < deadline && seen < 20_000 {
        std::thread::sleep(Duration::from_millis(20));
        if let Ok(mut r) = Reader::open(&journal) {
            seen = 0;
            while let Ok(Some(_)) = r.next() {
                seen += 1;
            }
        }
    }
    recorder.0.kill().unwrap(); // SIGKILL
    recorder.0.wait().unwrap();
    stop.store(true, Ordering::Relaxed);
    let sent = feeder.join().unwrap();
    assert!(seen >= 20_000, "recorder recorded {seen}");

    // Verify before recovery: what was published is intact.
    let o = Command::new(TICKBOX)
        .args(["journal", "verify", "--journal", journal.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(o.status.success(), "{o:?}");

    // Restarting the recorder recovers the journal and appends after it.
    let ctx = zmq::Context::new();
    let publisher = ctx.socket(zmq::XPUB).unwrap();
    publisher.set_linger(100).unwrap();
    let ep2 = tickbox_testkit::bind_loopback(&publisher);
    let again = spawn(&[
        "record",
        "--connect",
        &ep2,
        "--journal",
        journal.to_str().unwrap(),
        "--max-messages",
        "5",
        "--quiet",
    ]);
    publisher.set_rcvtimeo(10_000).unwrap();
    assert_eq!(publisher.recv_bytes(0).unwrap(), b"\x01");
    for i in 0..5 {
        publisher.send(original(1_000_000 + i, 0), 0).unwrap();
    }
    let out = again.wait_output(Duration::from_secs(10));
    assert!(out.status.success(), "{out:?}");

    // The journal: a gap-free prefix of the feed (publisher sequences 1..=k), then a gap notice for what
    // publisher 7 sent while no recorder ran (the second recorder resumed its sequence from the journal's
    // ledger), then the 5 new frames.
    let mut r = Reader::open(&journal).unwrap();
    let mut k = 0u64;
    let mut after = Vec::new();
    let mut notices = Vec::new();
    let mut n = 0u64;
    while let Some(rec) = r.next().unwrap() {
        n += 1;
        assert_eq!(rec.seq, n, "journal sequence gap-free");
        let m = MessageRef::decode(rec.payload).unwrap();
        let seq = m.header().sequence;
        if let Ok(tickbox_wire::Payload::Gap(g)) = m.payload() {
            assert!(after.is_empty(), "the notice comes before the new frames");
            notices.push((g.first_missing, g.last_missing));
        } else if after.is_empty() && notices.is_empty() && seq == k + 1 {
            k += 1;
        } else {
            after.push(instrument(rec.payload));
        }
    }
    assert!(
        k >= seen && k <= sent,
        "kept {k}, saw {seen} before the kill, {sent} sent"
    );
    assert_eq!(
        notices,
        vec![(k + 1, 999_999)],
        "the downtime is a recorded gap"
    );
    assert_eq!(after, (1_000_000..1_000_005).collect::<Vec<_>>());
    let o = Command::new(TICKBOX)
        .args(["journal", "verify", "--journal", journal.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(o.status.success(), "{o:?}");
    assert!(String::from_utf8_lossy(&o.stdout).contains("closed cleanly"));
}

#[test]
fn ctrl_c_stops_record_and_replay_cleanly() {
    let dir = TempDir::new("cli-record-sigint");
    let archive = dir.0.join("arch");
    let ctx = zmq::Context::new();
    let publisher = ctx.socket(zmq::XPUB).unwrap();
    publisher.set_linger(100).unwrap();
    publisher.set_sndhwm(0).unwrap();
    let ep = tickbox_testkit::bind_loopback(&publisher);
    // An archive with 64 KiB segments, so a few hundred KiB roll over several files.
    let recorder = spawn(&[
        "record",
        "--connect",
        &ep,
        "--journal",
        archive.to_str().unwrap(),
        "--archive",
        "--segment-size",
        "64k",
        "--durability",
        "batch",
        "--quiet",
    ]);
    publisher.set_rcvtimeo(10_000).unwrap();
    assert_eq!(publisher.recv_bytes(0).unwrap(), b"\x01");
    for i in 1..=5000 {
        publisher
            .send(original(i, 1_767_364_200_000_000_000 + i * 1_000_000), 0)
            .unwrap();
    }
    // Wait until all 5000 are in the journal, then interrupt.
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut n = 0;
    while n < 5000 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
        if let Ok(mut r) = Reader::open(&archive) {
            n = 0;
            while let Ok(Some(_)) = r.next() {
                n += 1;
            }
        }
    }
    assert_eq!(n, 5000);
    common::send_signal(recorder.0.id(), libc::SIGINT);
    let out = recorder.wait_output(Duration::from_secs(10));
    assert!(out.status.success(), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("(interrupted)"),
        "{out:?}"
    );
    assert!(
        std::fs::read_dir(&archive).unwrap().count() > 3,
        "segments rolled"
    );
    let o = Command::new(TICKBOX)
        .args(["journal", "verify", "--journal", archive.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(o.status.success(), "{o:?}");
    let s = String::from_utf8_lossy(&o.stdout);
    assert!(
        s.contains("records       5000") && s.contains("closed cleanly"),
        "{s}"
    );

    // A real-time replay of 5 s of capture, interrupted once it is under way, stops early and still reports.
    let paced = dir.0.join("paced.tbj");
    paced_journal(&paced, 500, Duration::from_secs(5));
    let ep = format!("ipc://{}/sigint.sock", dir.0.display());
    let replay = spawn(&[
        "replay",
        "--journal",
        paced.to_str().unwrap(),
        "--bind",
        &ep,
        "--speed",
        "1",
        "--quiet",
    ]);
    // The replay waits for a subscriber by default: be one, and interrupt once the first messages arrived.
    let (tx, _rx) = mpsc::channel();
    let got = receive(
        &ctx,
        std::slice::from_ref(&ep),
        3,
        Duration::from_secs(10),
        tx,
    );
    // `receive` drains what is queued once it polls, so it may hold more than it waited for.
    assert!(got.len() >= 3, "{} messages", got.len());
    common::send_signal(replay.0.id(), libc::SIGINT);
    let started = Instant::now();
    let out = replay.wait_output(Duration::from_secs(5));
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "stopped promptly"
    );
    assert!(out.status.success(), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("(interrupted)"),
        "{out:?}"
    );
}

/// A ring that exists already holds its whole file: a recorder restarted on it takes no new space, so it starts
/// however little the disk has free (a `--capacity` far beyond the disk stands in for a nearly full one: the
/// ring keeps its own capacity).
#[test]
fn a_recorder_restarted_on_an_existing_ring_needs_no_new_room() {
    let dir = TempDir::new("cli-record-ring-room");
    let journal = dir.0.join("ring.tbj");
    let journal = journal.to_str().unwrap();
    let ctx = zmq::Context::new();
    for (run, capacity) in [(0u64, "1MiB"), (1, "100TiB")] {
        let publisher = ctx.socket(zmq::XPUB).unwrap();
        publisher.set_linger(100).unwrap();
        publisher.set_rcvtimeo(10_000).unwrap();
        let ep = tickbox_testkit::bind_loopback(&publisher);
        let recorder = spawn(&[
            "record",
            "--connect",
            &ep,
            "--ring",
            "--journal",
            journal,
            "--capacity",
            capacity,
            "--max-messages",
            "5",
            "--quiet",
        ]);
        assert_eq!(
            publisher.recv_bytes(0).unwrap(),
            b"\x01",
            "run {run} ({capacity}) never subscribed"
        );
        for i in 1..=5 {
            publisher.send(original(5 * run + i, 0), 0).unwrap();
        }
        let out = recorder.wait_output(Duration::from_secs(10));
        assert!(out.status.success(), "run {run} ({capacity}): {out:?}");
    }
    assert!(
        std::fs::metadata(journal).unwrap().len() < 2 << 20,
        "the ring kept its 1 MiB"
    );
}
