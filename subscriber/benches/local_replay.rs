//! Records per second of a local replay (`tickbox_subscriber::replay_local`) into one worker that touches every
//! record (its sequence and the last byte of its payload), and into two: the shard logic (decode, snail, sequence
//! accounting, per-symbol dispatch) and the ring hand-off, without sockets. Frames come from memory, as a journal's
//! mapping would lend them.
//!
//! `cargo bench -p tickbox-subscriber --bench local_replay` prints five rounds of each, then the medians, with the
//! CPU time the process spent per record (all threads together) and the shard thread's alone: on a shared machine
//! those are the stable figures, and the shard thread's bounds the rate when it has a core of its own.

use std::sync::atomic::AtomicBool;
use std::time::Duration;

use tickbox_subscriber::{replay_local, SubscriberConfig};
use tickbox_wire::{encode_to_vec, Header, Kind, Quote, Trade};
use tickbox_workers::{Delivery, Record, Worker, WorkerPoolConfig};

const RECORDS: u64 = 4_000_000;
const SYMBOLS: u64 = 2_000;

/// Touches each record: reads its header and its payload's last byte.
#[derive(Default)]
struct Touch(u64);

impl Worker for Touch {
    fn on_message(&mut self, msg: &tickbox_wire::MessageRef<'_>, _d: &Delivery) {
        self.0 = self.0.wrapping_add(msg.header().sequence);
    }

    #[inline]
    fn on_record(
        &mut self,
        rec: &Record<'_>,
        _d: &Delivery,
    ) -> Result<(), tickbox_wire::DecodeError> {
        let last = rec.payload_bytes().last().copied().unwrap_or(0);
        self.0 = self.0.wrapping_add(rec.header().sequence ^ u64::from(last));
        Ok(())
    }
}

/// Every frame back to back in one buffer, as a journal's mapping holds them (so the input streams through the
/// caches as a journal's would), and where each one ends.
struct Frames {
    bytes: Vec<u8>,
    ends: Vec<usize>,
}

impl Frames {
    fn iter(&self) -> impl Iterator<Item = &[u8]> + '_ {
        let starts = std::iter::once(0).chain(self.ends.iter().copied());
        starts
            .zip(self.ends.iter())
            .map(|(a, &b)| &self.bytes[a..b])
    }
}

fn frames() -> Frames {
    let mut all = Frames {
        bytes: Vec::new(),
        ends: Vec::with_capacity(RECORDS as usize),
    };
    for frame in each_frame() {
        all.bytes.extend_from_slice(&frame);
        all.ends.push(all.bytes.len());
    }
    all
}

fn each_frame() -> impl Iterator<Item = Vec<u8>> {
    let t0 = 1_700_000_000_000_000_000u64;
    (1..=RECORDS).map(move |seq| {
        let sym = seq % SYMBOLS;
        // One record per microsecond of market time.
        let h = |kind| Header::live(kind, 1, seq, t0 + seq * 1_000).with_session(1);
        if seq % 8 == 0 {
            encode_to_vec(
                &format!("T.XNAS.S{sym}"),
                &h(Kind::Trade),
                &Trade::default().into(),
            )
            .unwrap()
        } else {
            encode_to_vec(
                &format!("Q.XNAS.S{sym}"),
                &h(Kind::Quote),
                &Quote::default().into(),
            )
            .unwrap()
        }
    })
}

/// CPU time this process has used (all threads): the machine these run on is shared, so wall-clock rates swing
/// with the load while CPU per record does not.
fn cpu_seconds() -> f64 {
    cpu_clock(libc::CLOCK_PROCESS_CPUTIME_ID)
}

/// CPU time of the calling thread: the shard side of `replay_local`, which runs the feed on its caller's thread.
fn thread_cpu_seconds() -> f64 {
    cpu_clock(libc::CLOCK_THREAD_CPUTIME_ID)
}

/// Reads a CPU-time clock to the nanosecond (`/proc`'s figures come in 10 ms ticks, too coarse for a round).
#[allow(unsafe_code)] // clock_gettime: std has no CPU-time clock.
fn cpu_clock(clock: libc::clockid_t) -> f64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one `timespec` through the pointer, which is a live local.
    unsafe { libc::clock_gettime(clock, &mut ts) };
    ts.tv_sec as f64 + ts.tv_nsec as f64 / 1e9
}

fn round(ctx: &zmq::Context, frames: &Frames, workers: usize) -> (f64, f64, f64, f64) {
    let cpu0 = cpu_seconds();
    let shard0 = thread_cpu_seconds();
    let stop = AtomicBool::new(false);
    let pool = WorkerPoolConfig {
        count: Some(workers),
        ..WorkerPoolConfig::default()
    };
    let out = replay_local(
        ctx,
        &SubscriberConfig::default(),
        &pool,
        |_| Touch::default(),
        &stop,
        |sink| {
            let t0 = 1_700_000_000_000_000_000u64;
            for (i, f) in frames.iter().enumerate() {
                // Received as recorded: one microsecond after it was sent.
                sink.push(f, t0 + (i as u64 + 1) * 1_000 + 1_000);
            }
        },
    )
    .unwrap();
    let processed: u64 = out.report.workers.iter().map(|w| w.processed).sum();
    assert_eq!(processed, RECORDS);
    let shard_ns_per_record = (thread_cpu_seconds() - shard0) * 1e9 / RECORDS as f64;
    let cpu_ns_per_record = (cpu_seconds() - cpu0) * 1e9 / RECORDS as f64;
    (
        out.records_per_sec(),
        out.real_time_multiple().unwrap_or(0.0),
        cpu_ns_per_record,
        shard_ns_per_record,
    )
}

fn main() {
    let frames = frames();
    let ctx = zmq::Context::new();
    for workers in [1, 2] {
        let mut rates = Vec::new();
        let mut shards = Vec::new();
        for r in 0..5 {
            let (rate, multiple, cpu, shard) = round(&ctx, &frames, workers);
            println!(
                "workers {workers} round {r}: {:>12.0} records/s  ({multiple:.0}x real time)  CPU {cpu:.1} ns/record \
                 (all threads), shard thread {shard:.1} ns/record (bound with its own core: {:.1} M records/s)",
                rate,
                1e3 / shard.max(1e-3)
            );
            rates.push(rate);
            shards.push(shard);
            std::thread::sleep(Duration::from_millis(100));
        }
        rates.sort_by(f64::total_cmp);
        shards.sort_by(f64::total_cmp);
        println!(
            "workers {workers}: median {:.0} records/s, range {:.0} .. {:.0}; shard thread median {:.1} ns/record, \
             range {:.1} .. {:.1}",
            rates[2], rates[0], rates[4], shards[2], shards[0], shards[4]
        );
    }
}
