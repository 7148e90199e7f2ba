//! Flat-out publish rate of one feed shard over tcp loopback, beside a raw libzmq send loop of same-size
//! frames, in the same run. `cargo bench -p tickbox-feed --bench generator_publish -- [messages] [runs]`.
//!
//! Both sides wait for the subscriber's subscription before timing (XPUB), publish to one SUB in a separate
//! context (as a separate process would have its own I/O thread), and are timed from the first to the last
//! send. "default" is a lossy socket with the default HWM (1000): the publisher may outrun the subscriber and
//! libzmq drops; "no-drop" sets ZMQ_XPUB_NODROP, so the rate is what the subscriber actually takes.

use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use tickbox_feed::{Feed, FeedConfig, PacingMode, PublisherShardConfig};
use tickbox_wire::{encode_to_vec, Header, Kind, Quote};

mod common;

/// Counts frames until `expect` arrived or the stream went quiet for half a second.
fn counting_sub(endpoint: String, expect: u64) -> JoinHandle<u64> {
    common::counting_sub(endpoint, expect, None, 500)
}

enum RawPath {
    Slice,
    Message,
}

fn raw(no_drop: bool, n: u64, frame: &[u8], path: RawPath) -> (f64, u64) {
    let ctx = zmq::Context::new();
    let mut xpub = ctx.socket(zmq::XPUB).unwrap();
    xpub.set_linger(100).unwrap();
    xpub.set_sndtimeo(100).unwrap();
    tickbox_zmqx::set_xpub_nodrop(&mut xpub, no_drop).unwrap();
    let sub = common::attach_reader(&xpub, |endpoint| counting_sub(endpoint, n));
    let start = Instant::now();
    for _ in 0..n {
        loop {
            let sent = match path {
                RawPath::Slice => xpub.send(frame, 0),
                RawPath::Message => {
                    let mut msg = zmq::Message::with_size(frame.len());
                    msg.copy_from_slice(frame);
                    xpub.send(msg, 0)
                }
            };
            match sent {
                Ok(()) => break,
                Err(zmq::Error::EAGAIN) => continue,
                Err(err) => panic!("send: {err}"),
            }
        }
    }
    let rate = n as f64 / start.elapsed().as_secs_f64();
    (rate, sub.join().unwrap())
}

fn feed(no_drop: bool, n: u64) -> (f64, u64) {
    let ctx = zmq::Context::new();
    let handle = Feed::start(
        &tickbox_auth::Gate::open(&ctx),
        FeedConfig {
            shards: vec![PublisherShardConfig::default()],
            mode: PacingMode::FlatOut,
            max_messages_per_shard: Some(n),
            back_pressure: tickbox_zmqx::BackPressure::from_blocks(no_drop),
            drain_timeout: Duration::ZERO.into(),
            wait_for_subscribers: 1,
            heartbeat_interval: Duration::from_millis(0).into(),
            ..FeedConfig::default()
        },
    )
    .unwrap();
    let sub = counting_sub(handle.endpoints()[0].clone(), n);
    let report = handle.join().unwrap();
    (report.shards[0].rate(), sub.join().unwrap())
}

/// Achieved rate of a paced shard for `secs`, as a fraction of the target (pacing accuracy under load).
fn paced(target: u64, secs: u64) -> (f64, u64, std::time::Duration) {
    let ctx = zmq::Context::new();
    let handle = Feed::start(
        &tickbox_auth::Gate::open(&ctx),
        FeedConfig {
            rate: tickbox_feed::Rate::PerSecond(target),
            duration: Some(Duration::from_secs(secs).into()),
            wait_for_subscribers: 1,
            ..FeedConfig::default()
        },
    )
    .unwrap();
    let sub = counting_sub(handle.endpoints()[0].clone(), u64::MAX);
    let report = handle.join().unwrap();
    let received = sub.join().unwrap();
    let shard = &report.shards[0];
    (shard.rate() / target as f64, received, shard.skipped)
}

fn main() {
    // `cargo bench` passes `--bench`; take the first two numeric arguments.
    let numbers: Vec<u64> = std::env::args().filter_map(|a| a.parse().ok()).collect();
    let n = numbers.first().copied().unwrap_or(1_000_000);
    let runs = numbers.get(1).copied().unwrap_or(3);
    let quote = Quote {
        instrument_id: 1,
        bid_px: 100_000_000_000,
        ask_px: 100_010_000_000,
        bid_size: 300,
        ask_size: 500,
        bid_orders: 2,
        ask_orders: 3,
        venue_time_ns: 1,
    };
    let frame = encode_to_vec(
        "Q.XNAS.ABCD",
        &Header::live(Kind::Quote, 1, 1, 1),
        &quote.into(),
    )
    .unwrap();
    println!(
        "{n} messages per case; raw frame {} bytes (feed: quotes {} B / trades {} B)",
        frame.len(),
        frame.len(),
        tickbox_wire::encoded_len("T.XNAS.ABCD", Kind::Trade)
    );
    println!(
        "{:>3} {:>8} {:>14} {:>14} {:>14} {:>10} {:>10} {:>10} {:>10}",
        "run",
        "hwm",
        "raw slice/s",
        "raw msg/s",
        "feed msg/s",
        "feed/raw",
        "raw recv",
        "msg recv",
        "feed recv"
    );
    for run in 1..=runs {
        for no_drop in [false, true] {
            let (raw_rate, raw_recv) = raw(no_drop, n, &frame, RawPath::Slice);
            let (msg_rate, msg_recv) = raw(no_drop, n, &frame, RawPath::Message);
            let (feed_rate, feed_recv) = feed(no_drop, n);
            println!(
                "{run:>3} {:>8} {raw_rate:>14.0} {msg_rate:>14.0} {feed_rate:>14.0} {:>10.2} {raw_recv:>10} {msg_recv:>10} {feed_recv:>10}",
                if no_drop { "no-drop" } else { "default" },
                feed_rate / raw_rate,
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }
    for target in [100_000, 1_000_000] {
        let (fraction, received, skipped) = paced(target, 2);
        println!(
            "paced {target}/s for 2 s: achieved {:.4} of target, subscriber received {received}, skipped {skipped:?}",
            fraction
        );
    }
}
