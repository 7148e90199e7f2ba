//! CPU time per message of a publisher sending single frames flat out, beside raw libzmq sending the same bytes,
//! alternating in the same run: `cargo bench -p tickbox-feed --bench publisher_cpu -- [messages] [runs] [bytes]`.
//!
//! Throughput on a small shared machine moves with whatever else runs; the CPU a sending thread spends per
//! message moves far less, so this is the figure to compare a change of the send path by. Each case publishes
//! `messages` frames of `bytes` (default 100, as `tickbox bench throughput --sizes 100`) on a no-drop XPUB with a
//! high-water mark of 10,000 (the throughput bench's) to one SUB in its own context (as a separate process would
//! have), and reports the sending thread's CPU time and the whole process's (both contexts' I/O
//! threads and the reader included) per message, with the wall-clock rate. Medians of `runs`, the cases
//! alternating: `raw`; `tickbox`, [`Publisher::publish`] reading the clock for every message (as `tickbox bench
//! throughput`'s feed does); `step`, [`Publisher::publish_at`] with the clock read once per 32 messages (as a
//! feed shard's pacer step does). Naming cases (`raw`, `tickbox`, `step`) runs only those (to profile one).

use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use tickbox_feed::Publisher;
use tickbox_testkit::cpu::{process_cpu, thread_cpu};
use tickbox_wire::{encode_to_vec, encoded_len, Header, Kind, Payload, Side, Trade};

const HWM: i32 = 10_000;

mod common;

/// Counts data frames until `expect` arrived (or nothing came for 5 s: a stall that long is a failed run).
fn counting_sub(endpoint: String, expect: u64) -> JoinHandle<u64> {
    common::counting_sub(endpoint, expect, Some(HWM), 5_000)
}

/// A no-drop XPUB as the throughput bench's feed and raw sender use, with its reader subscribed.
fn socket(ctx: &zmq::Context, n: u64) -> (zmq::Socket, JoinHandle<u64>) {
    let mut xpub = ctx.socket(zmq::XPUB).unwrap();
    xpub.set_linger(1_000).unwrap();
    xpub.set_sndhwm(HWM).unwrap();
    xpub.set_sndtimeo(100).unwrap();
    tickbox_zmqx::set_xpub_nodrop(&mut xpub, true).unwrap();
    let sub = common::attach_reader(&xpub, |endpoint| counting_sub(endpoint, n));
    (xpub, sub)
}

struct Figures {
    rate: f64,
    thread_ns: f64,
    process_ns: f64,
}

/// Times `send` called `n` times on the calling thread; the process figure runs until the reader has them all.
fn measure(n: u64, sub: JoinHandle<u64>, mut send: impl FnMut(u64)) -> Figures {
    let (thread0, process0, start) = (thread_cpu(), process_cpu(), Instant::now());
    for k in 0..n {
        send(k);
    }
    let thread = (thread_cpu() - thread0).as_nanos();
    let received = sub.join().unwrap();
    let elapsed = start.elapsed();
    let process = (process_cpu() - process0).as_nanos();
    assert_eq!(received, n, "the reader missed messages");
    Figures {
        rate: n as f64 / elapsed.as_secs_f64(),
        thread_ns: thread as f64 / n as f64,
        process_ns: process as f64 / n as f64,
    }
}

fn trade(k: u64) -> Payload {
    Payload::Trade(Trade {
        instrument_id: 1,
        price: 100_000_000_000 + (k % 100) as i64,
        size: 100,
        aggressor: Side::Buy,
        trade_id: k,
        venue_time_ns: 0,
    })
}

fn raw(n: u64, frame: &[u8]) -> Figures {
    let ctx = zmq::Context::new();
    let (xpub, sub) = socket(&ctx, n);
    measure(n, sub, |_| {
        while let Err(e) = xpub.send(frame, 0) {
            assert_eq!(e, zmq::Error::EAGAIN, "send");
        }
    })
}

fn tickbox(n: u64, topic: &str) -> Figures {
    let ctx = zmq::Context::new();
    let (xpub, sub) = socket(&ctx, n);
    let mut publisher = Publisher::new(xpub, 0, 1, 0);
    measure(n, sub, |k| {
        while publisher.publish(topic, &trade(k)).unwrap().is_none() {}
    })
}

/// Messages stamped with one clock read, as the feed's shards do within a pacer step.
const CLOCK_EVERY: u64 = 32;

fn step(n: u64, topic: &str) -> Figures {
    let ctx = zmq::Context::new();
    let (xpub, sub) = socket(&ctx, n);
    let mut publisher = Publisher::new(xpub, 0, 1, 0);
    let mut now = 0;
    measure(n, sub, |k| {
        if k % CLOCK_EVERY == 0 {
            now = tickbox_wire::now_ns();
        }
        while publisher
            .publish_at(topic, &trade(k), now)
            .unwrap()
            .is_none()
        {}
    })
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    // `cargo bench` passes `--bench`; take the numeric arguments.
    let numbers: Vec<u64> = std::env::args().filter_map(|a| a.parse().ok()).collect();
    let n = numbers.first().copied().unwrap_or(2_000_000);
    let runs = numbers.get(1).copied().unwrap_or(5);
    let bytes = numbers.get(2).copied().unwrap_or(100) as usize;
    let named: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| ["raw", "tickbox", "step"].contains(&a.as_str()))
        .collect();
    let cases: Vec<&str> = ["raw", "tickbox", "step"]
        .into_iter()
        .filter(|c| named.is_empty() || named.iter().any(|n| n == c))
        .collect();
    let min = encoded_len("T", Kind::Trade);
    let topic = format!("T{}", "X".repeat(bytes.max(min) - min));
    let frame = encode_to_vec(&topic, &Header::live(Kind::Trade, 1, 1, 1), &trade(0)).unwrap();
    println!(
        "{n} frames of {} B per case, {runs} runs alternating; CPU ns per message",
        frame.len()
    );
    println!(
        "{:>4} {:>8} {:>12} {:>12} {:>12}",
        "run", "case", "msg/s", "sender ns", "process ns"
    );
    let mut figures: Vec<Vec<Figures>> = cases.iter().map(|_| Vec::new()).collect();
    for run in 1..=runs {
        let mut order: Vec<usize> = (0..cases.len()).collect();
        if run % 2 == 0 {
            order.reverse();
        }
        for i in order {
            let f = match cases[i] {
                "raw" => raw(n, &frame),
                "tickbox" => tickbox(n, &topic),
                _ => step(n, &topic),
            };
            println!(
                "{run:>4} {:>8} {:>12.0} {:>12.0} {:>12.0}",
                cases[i], f.rate, f.thread_ns, f.process_ns
            );
            figures[i].push(f);
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    let pick = |v: &[Figures], f: fn(&Figures) -> f64| median(v.iter().map(f).collect());
    for (name, f) in [
        ("msg/s", (|x: &Figures| x.rate) as fn(&Figures) -> f64),
        ("sender ns/msg", |x| x.thread_ns),
        ("process ns/msg", |x| x.process_ns),
    ] {
        let medians: Vec<String> = cases
            .iter()
            .zip(&figures)
            .map(|(c, v)| format!("{c} {:.0}", pick(v, f)))
            .collect();
        println!("median {name:>15}: {}", medians.join("  "));
    }
}
