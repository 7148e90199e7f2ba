//! Replay `--speed max` into a subscriber, beside raw libzmq: the same pre-encoded frames sent by a plain loop over
//! the same socket setup (XPUB, no-drop, same high-water marks) to the same kind of subscriber, in the same run.
//! Run: `cargo bench -p tickbox-recorder --bench replay` (prints a table; RUNS rounds, alternating).

use std::sync::atomic::AtomicBool;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use tickbox_journal::{Reader, Writer, WriterOptions};
use tickbox_recorder::{ReplayOptions, Replayer, Speed};
use tickbox_wire::{encode_to_vec, Header, Kind, Quote, SystemClock};

const N: u64 = 1_000_000;
const RUNS: usize = 5;
const HWM: i32 = 100_000;

fn frames() -> Vec<Vec<u8>> {
    (0..N)
        .map(|i| {
            let topic = format!("Q.XNAS.S{:03}", i % 500);
            let q = Quote {
                instrument_id: i as u32,
                ..Quote::default()
            };
            encode_to_vec(&topic, &Header::live(Kind::Quote, 1, i + 1, i), &q.into()).unwrap()
        })
        .collect()
}

/// Subscriber thread: connects, receives `N` messages, returns the time from the first to the last.
fn subscriber(
    ctx: zmq::Context,
    ep: String,
    ready: mpsc::Sender<()>,
) -> std::thread::JoinHandle<Duration> {
    std::thread::spawn(move || {
        let s = ctx.socket(zmq::SUB).unwrap();
        s.set_linger(0).unwrap();
        s.set_rcvhwm(HWM).unwrap();
        s.set_subscribe(b"").unwrap();
        s.set_rcvtimeo(10_000).unwrap();
        s.connect(&ep).unwrap();
        ready.send(()).unwrap();
        let mut msg = zmq::Message::new();
        let mut n = 0;
        let mut first = None;
        while n < N {
            if s.recv(&mut msg, 0).is_err() {
                panic!("subscriber starved after {n} messages");
            }
            if msg.first() == Some(&b'H') {
                continue; // heartbeat
            }
            first.get_or_insert_with(Instant::now);
            n += 1;
        }
        first.unwrap().elapsed()
    })
}

fn xpub(ctx: &zmq::Context) -> (zmq::Socket, String) {
    let mut s = ctx.socket(zmq::XPUB).unwrap();
    s.set_linger(100).unwrap();
    s.set_sndhwm(HWM).unwrap();
    s.set_xpub_verbose(true).unwrap();
    tickbox_zmqx::set_xpub_nodrop(&mut s, true).unwrap();
    s.bind("tcp://127.0.0.1:*").unwrap();
    let ep = s.get_last_endpoint().unwrap().unwrap();
    (s, ep)
}

fn raw_run(ctx: &zmq::Context, frames: &[Vec<u8>]) -> Duration {
    let (s, ep) = xpub(ctx);
    let (tx, rx) = mpsc::channel();
    let sub = subscriber(ctx.clone(), ep, tx);
    rx.recv().unwrap();
    assert_eq!(s.recv_bytes(0).unwrap()[0], 1, "subscription");
    for f in frames {
        while s.send(&f[..], 0).is_err() {}
    }
    sub.join().unwrap()
}

fn replay_run(ctx: &zmq::Context, journal: &std::path::Path) -> Duration {
    let mut reader = Reader::open(journal).unwrap();
    reader.set_verify(true);
    let opts = ReplayOptions {
        bind: vec!["tcp://127.0.0.1:*".into()],
        speed: Speed::Max,
        send_hwm: HWM,
        ..ReplayOptions::default()
    };
    let mut r = Replayer::bind(&tickbox_auth::Gate::open(ctx), opts).unwrap();
    let (tx, rx) = mpsc::channel();
    let sub = subscriber(ctx.clone(), r.endpoints()[0].clone(), tx);
    rx.recv().unwrap();
    let stop = AtomicBool::new(false);
    assert!(r
        .wait_subscribers(1, Some(Duration::from_secs(10)), &stop)
        .unwrap());
    let stats = r.run(&mut reader, &SystemClock, &stop, |_| {}).unwrap();
    assert_eq!(stats.sent, N);
    sub.join().unwrap()
}

fn main() {
    // `cargo bench` passes --bench; `cargo test --benches` runs this too: keep that quick.
    let quick = !std::env::args().any(|a| a == "--bench");
    let dir = tempfile::tempdir().unwrap();
    let journal = dir.path().join("bench.tbj");
    let frames = frames();
    {
        let capacity = if quick { 1 << 20 } else { 512 << 20 };
        let mut w = Writer::open(&journal, &WriterOptions::ring(capacity)).unwrap();
        for (i, f) in frames
            .iter()
            .enumerate()
            .take(if quick { 1000 } else { usize::MAX })
        {
            w.append(i as u64, f).unwrap();
        }
    }
    if quick {
        return;
    }
    let ctx = zmq::Context::new();
    let rate = |d: Duration| N as f64 / d.as_secs_f64();
    println!(
        "{:>5}  {:>16}  {:>16}  {:>7}",
        "run", "raw PUB->SUB/s", "replay max/s", "ratio"
    );
    let mut ratios = Vec::new();
    for run in 1..=RUNS {
        let raw = rate(raw_run(&ctx, &frames));
        let rep = rate(replay_run(&ctx, &journal));
        ratios.push(rep / raw);
        println!(
            "{run:>5}  {raw:>16.0}  {rep:>16.0}  {:>6.1}%",
            100.0 * rep / raw
        );
    }
    ratios.sort_by(f64::total_cmp);
    println!(
        "median ratio {:.1}% ({} messages of {} bytes, tcp loopback)",
        100.0 * ratios[RUNS / 2],
        N,
        frames[0].len()
    );
}
