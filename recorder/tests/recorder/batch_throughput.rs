//! Throughput of a replay into one SUB over loopback TCP: batched (`--batch 64`) against one record per message
//! (`--batch 1`) against a raw XPUB_NODROP → SUB loop sending the same frames one per message from memory. A
//! measurement, not a check: run it quietly, in release, and read the ratios it prints.
//!
//! ```sh
//! cargo test --release -p tickbox-recorder --test recorder batch_throughput:: -- --ignored --nocapture
//! ```
//! `TICKBOX_BATCH_RECORDS` (default 400000) and `TICKBOX_BATCH_REPEATS` (default 5) size the run. Repeats are
//! interleaved (A B C A B C …) so a noisy neighbour hits every variant alike; the spread is printed.

use std::sync::atomic::AtomicBool;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use tickbox_journal::{Reader, Writer, WriterOptions};
use tickbox_recorder::{Recorder, ReplayOptions, Replayer, Speed};
use tickbox_wire::{
    batch_records, encode_to_vec, is_batch, Header, Kind, MessageRef, Quote, SystemClock, Trade,
    BATCH_TOPIC,
};

fn env(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The synthetic stream's shape: quotes (96 bytes) and trades (85 bytes), 10 quotes per trade, 100 symbols.
fn frames(n: u64) -> Vec<Vec<u8>> {
    (1..=n)
        .map(|seq| {
            let sym = seq % 100;
            if seq % 11 == 0 {
                encode_to_vec(
                    &format!("T.XNAS.S{sym:03}"),
                    &Header::live(Kind::Trade, 1, seq, 1_767_364_200_000_000_000 + seq),
                    &Trade::default().into(),
                )
            } else {
                encode_to_vec(
                    &format!("Q.XNAS.S{sym:03}"),
                    &Header::live(Kind::Quote, 1, seq, 1_767_364_200_000_000_000 + seq),
                    &Quote::default().into(),
                )
            }
            .unwrap()
        })
        .collect()
}

/// A SUB thread that reads (and decodes) `n` records, unpacking batches. Sends `()` once connected and
/// subscribed, then the time from its first message to its last.
fn subscriber(
    ctx: zmq::Context,
    ep: String,
    n: u64,
    ready: mpsc::Sender<()>,
) -> std::thread::JoinHandle<Duration> {
    std::thread::spawn(move || {
        let s = ctx.socket(zmq::SUB).unwrap();
        s.set_linger(0).unwrap();
        s.set_rcvhwm(100_000).unwrap();
        s.set_subscribe(b"").unwrap();
        s.set_subscribe(BATCH_TOPIC.as_bytes()).unwrap();
        s.connect(&ep).unwrap();
        ready.send(()).unwrap();
        let mut msg = zmq::Message::new();
        let (mut got, mut first) = (0u64, None);
        let deadline = Instant::now() + Duration::from_secs(120);
        while got < n && Instant::now() < deadline {
            if s.poll(zmq::POLLIN, 100).unwrap() == 0 {
                continue;
            }
            s.recv(&mut msg, 0).unwrap();
            first.get_or_insert_with(Instant::now);
            if is_batch(&msg) {
                for r in batch_records(&msg).unwrap() {
                    let m = MessageRef::decode(r.unwrap()).unwrap();
                    got += u64::from(m.kind() != Kind::Heartbeat);
                }
            } else {
                let m = MessageRef::decode(&msg).unwrap();
                got += u64::from(m.kind() != Kind::Heartbeat);
            }
        }
        assert_eq!(got, n, "subscriber timed out");
        first.map_or(Duration::ZERO, |t| t.elapsed())
    })
}

/// Records per second of one replay of the journal at `--batch batch`, as the subscriber saw it.
fn replay_rate(ctx: &zmq::Context, journal: &std::path::Path, n: u64, batch: u16) -> f64 {
    let mut replayer = Replayer::bind(
        &tickbox_auth::Gate::open(ctx),
        ReplayOptions {
            bind: vec!["tcp://127.0.0.1:*".into()],
            speed: Speed::Max,
            heartbeat_interval: Duration::ZERO,
            batch_max_records: batch,
            ..ReplayOptions::default()
        },
    )
    .unwrap();
    let (tx, rx) = mpsc::channel();
    let sub = subscriber(ctx.clone(), replayer.endpoints()[0].clone(), n, tx);
    rx.recv().unwrap();
    let stop = AtomicBool::new(false);
    assert!(replayer
        .wait_subscribers(1, Some(Duration::from_secs(10)), &stop)
        .unwrap());
    let mut reader = Reader::open(journal).unwrap();
    // The transport is measured, not the journal's checksums (the raw loop has none to pay).
    reader.set_verify(false);
    let stats = replayer
        .run(&mut reader, &SystemClock, &stop, |_| {})
        .unwrap();
    assert_eq!(stats.sent, n);
    assert_eq!(stats.batches_sent > 0, batch > 1, "{stats:?}");
    let took = sub.join().unwrap();
    n as f64 / took.as_secs_f64()
}

/// Records per second of a raw XPUB_NODROP → SUB loop sending `frames` one per message.
fn raw_rate(ctx: &zmq::Context, frames: &[Vec<u8>]) -> f64 {
    let mut xpub = ctx.socket(zmq::XPUB).unwrap();
    xpub.set_linger(100).unwrap();
    xpub.set_sndhwm(100_000).unwrap();
    xpub.set_xpub_verbose(true).unwrap();
    tickbox_zmqx::set_xpub_nodrop(&mut xpub, true).unwrap();
    xpub.bind("tcp://127.0.0.1:*").unwrap();
    let ep = tickbox_zmqx::last_endpoint(&xpub).unwrap();
    let (tx, rx) = mpsc::channel();
    let sub = subscriber(ctx.clone(), ep, frames.len() as u64, tx);
    rx.recv().unwrap();
    // Both subscriptions in: the subscriber is attached.
    for _ in 0..2 {
        xpub.recv_bytes(0).unwrap();
    }
    for f in frames {
        loop {
            match xpub.send(&f[..], 0) {
                Ok(()) => break,
                Err(zmq::Error::EAGAIN) => continue,
                Err(e) => panic!("{e}"),
            }
        }
    }
    let took = sub.join().unwrap();
    frames.len() as f64 / took.as_secs_f64()
}

fn summary(name: &str, rates: &[f64], base: &[f64]) {
    let mut sorted = rates.to_vec();
    sorted.sort_by(f64::total_cmp);
    let median = sorted[sorted.len() / 2];
    let mut b = base.to_vec();
    b.sort_by(f64::total_cmp);
    let base_median = b[b.len() / 2];
    let ratios: Vec<String> = rates
        .iter()
        .zip(base)
        .map(|(r, b)| format!("{:.2}", r / b))
        .collect();
    println!(
        "{name:<22} median {:>10.0} rec/s  min {:>10.0}  max {:>10.0}  spread {:>5.1} %  x{:.2} of --batch 1 (per repeat: {})",
        median,
        sorted[0],
        sorted[sorted.len() - 1],
        100.0 * (sorted[sorted.len() - 1] - sorted[0]) / median,
        median / base_median,
        ratios.join(" ")
    );
}

#[test]
#[ignore = "a measurement: run in release with --ignored --nocapture"]
fn replay_to_sub_throughput_batched_vs_single_vs_raw() {
    let n = env("TICKBOX_BATCH_RECORDS", 400_000);
    let repeats = env("TICKBOX_BATCH_REPEATS", 5) as usize;
    let frames = frames(n);
    let dir = tempfile::tempdir().unwrap();
    let journal = dir.path().join("j.tbj");
    {
        let mut w = Writer::open(&journal, &WriterOptions::ring(256 << 20)).unwrap();
        let mut rec = Recorder::new(&mut w).unwrap();
        for chunk in frames.chunks(1024) {
            let mut batch = w.batch();
            for (i, f) in chunk.iter().enumerate() {
                rec.on_frame(&mut batch, 1_767_364_200_000_000_000 + i as u64, f)
                    .unwrap();
            }
            batch.commit().unwrap();
            rec.after_commit(&mut w).unwrap();
        }
    }
    let ctx = zmq::Context::new();
    let (mut batched, mut single, mut raw) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..repeats {
        batched.push(replay_rate(&ctx, &journal, n, 64));
        single.push(replay_rate(&ctx, &journal, n, 1));
        raw.push(raw_rate(&ctx, &frames));
    }
    println!("{n} records, {repeats} interleaved repeats, one SUB over loopback TCP, decoding every record");
    summary("replay --batch 64", &batched, &single);
    summary("replay --batch 1", &single, &single);
    summary("raw XPUB_NODROP->SUB", &raw, &single);
    let rb: Vec<f64> = batched.iter().zip(&raw).map(|(b, r)| b / r).collect();
    println!(
        "replay --batch 64 / raw, per repeat: {}",
        rb.iter()
            .map(|r| format!("{r:.2}"))
            .collect::<Vec<_>>()
            .join(" ")
    );
}
