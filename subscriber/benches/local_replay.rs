//! Records per second of a local replay (`tickbox_subscriber::replay_local`) into 1 worker and into 4, alternating
//! within each round: the shard logic (decode, snail, sequence accounting, per-symbol dispatch) and the ring
//! hand-off, without sockets. Frames come from memory, as a journal's mapping would lend them.
//!
//! Two kinds of worker: one that only touches each record (its sequence and the last byte of its payload), where
//! the one shard thread sets the pace whatever the workers; and one that also does a set amount of work per record
//! (`WORK_ROUNDS` dependent multiply steps, the same instructions on any machine, as a book builder or a strategy
//! spends CPU per record), which is what more workers are for. With that work, 4 workers can go faster than 1 as
//! long as cores are free. On 2 cores, 1 worker goes at its own pace (one record per `work`), and 4 workers share
//! both cores with the shard (two records per `shard + work`), so at most `2 × work / (shard + work)` times as
//! fast: about 1.6 on the development machine (work 137 ns, shard 37 ns a record with 4 workers).
//!
//! A third kind feeds the touching workers the same records packed 64 to a batch frame (`#B`), as `feed --batch
//! auto` and `replay --batch` send them: the shard's batch path, which can look one record ahead.
//!
//! `cargo bench -p tickbox-subscriber --bench local_replay` prints five rounds of each, then the medians and the
//! 4 ÷ 1 ratio of each round, with the CPU time the process spent per record (all threads together) and the shard
//! thread's alone: on a shared machine those are the stable figures, and the shard thread's bounds the rate when it
//! has a core of its own.

use std::sync::atomic::AtomicBool;
use std::time::Duration;

use tickbox_subscriber::{replay_local, SubscriberConfig};
use tickbox_wire::{Header, Kind};
use tickbox_workers::{Delivery, Record, Worker, WorkerPoolConfig};

const RECORDS: u64 = 4_000_000;
const SYMBOLS: u64 = 2_000;

/// Rounds of work per record for the busy worker: about 137 ns on the 2-core development machine.
const WORK_ROUNDS: u32 = 128;

/// Touches each record: reads its header and its payload's last byte, then does `.1` dependent multiply steps
/// seeded from them (none for the worker that only touches).
struct Touch(u64, u32);

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
        let mut x = rec.header().sequence ^ u64::from(last);
        for _ in 0..self.1 {
            x = (x ^ (x >> 29)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        }
        self.0 = self.0.wrapping_add(x);
        Ok(())
    }
}

/// Every frame back to back in one buffer, as a journal's mapping holds them (so the input streams through the
/// caches as a journal's would), where each one ends, and the sequence of its last record.
struct Frames {
    bytes: Vec<u8>,
    ends: Vec<usize>,
    last_seqs: Vec<u64>,
}

impl Frames {
    fn iter(&self) -> impl Iterator<Item = (&[u8], u64)> + '_ {
        let starts = std::iter::once(0).chain(self.ends.iter().copied());
        starts
            .zip(self.ends.iter())
            .zip(self.last_seqs.iter())
            .map(|((a, &b), &seq)| (&self.bytes[a..b], seq))
    }

    fn push(&mut self, frame: &[u8], last_seq: u64) {
        self.bytes.extend_from_slice(frame);
        self.ends.push(self.bytes.len());
        self.last_seqs.push(last_seq);
    }
}

/// Records per batch frame in the batched kind, as `feed --batch auto` fills them at most.
const BATCH_RECORDS: usize = 64;

/// Every record as a single frame, or (`batched`) packed [`BATCH_RECORDS`] to a batch frame.
fn frames(batched: bool) -> Frames {
    let mut all = Frames {
        bytes: Vec::new(),
        ends: Vec::with_capacity(RECORDS as usize),
        last_seqs: Vec::with_capacity(RECORDS as usize),
    };
    let singles: Vec<Vec<u8>> = each_frame().collect();
    if !batched {
        for (seq, frame) in (1..).zip(&singles) {
            all.push(frame, seq);
        }
        return all;
    }
    for (i, batch) in (1..).zip(tickbox_testkit::batches(&singles, BATCH_RECORDS)) {
        all.push(&batch, (i * BATCH_RECORDS as u64).min(RECORDS));
    }
    all
}

fn each_frame() -> impl Iterator<Item = Vec<u8>> {
    let t0 = 1_700_000_000_000_000_000u64;
    // One record per microsecond of market time.
    (1..=RECORDS).map(move |seq| {
        let header = Header::live(Kind::Quote, 1, seq, t0 + seq * 1_000).with_session(1);
        tickbox_testkit::market_frame(seq, SYMBOLS, header)
    })
}

/// CPU time this process has used (all threads): the machine these run on is shared, so wall-clock rates swing
/// with the load while CPU per record does not.
fn cpu_seconds() -> f64 {
    tickbox_testkit::cpu::process_cpu().as_secs_f64()
}

/// CPU time of the calling thread: the shard side of `replay_local`, which runs the feed on its caller's thread.
fn thread_cpu_seconds() -> f64 {
    tickbox_testkit::cpu::thread_cpu().as_secs_f64()
}

fn round(
    ctx: &zmq::Context,
    frames: &Frames,
    workers: usize,
    work_rounds: u32,
) -> (f64, f64, f64, f64) {
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
        |_| Touch(0, work_rounds),
        &stop,
        |sink| {
            let t0 = 1_700_000_000_000_000_000u64;
            for (f, last_seq) in frames.iter() {
                // Received as recorded: one microsecond after its last record was sent.
                sink.push(f, t0 + last_seq * 1_000 + 1_000);
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
    let singles = frames(false);
    let batches = frames(true);
    let ctx = zmq::Context::new();
    for (kind, frames, work_rounds) in [
        ("touch", &singles, 0),
        ("busy", &singles, WORK_ROUNDS),
        ("touch, batched", &batches, 0),
    ] {
        let mut rates = [Vec::new(), Vec::new()];
        let mut shards = [Vec::new(), Vec::new()];
        let mut ratios = Vec::new();
        for r in 0..5 {
            let mut this_round = [0.0; 2];
            for (i, workers) in [1, 4].into_iter().enumerate() {
                let (rate, multiple, cpu, shard) = round(&ctx, frames, workers, work_rounds);
                println!(
                    "{kind} workers {workers} round {r}: {:>12.0} records/s  ({multiple:.0}x real time)  CPU {cpu:.1} \
                     ns/record (all threads), shard thread {shard:.1} ns/record (bound with its own core: {:.1} M \
                     records/s)",
                    rate,
                    1e3 / shard.max(1e-3)
                );
                this_round[i] = rate;
                rates[i].push(rate);
                shards[i].push(shard);
                std::thread::sleep(Duration::from_millis(100));
            }
            ratios.push(this_round[1] / this_round[0]);
        }
        for (i, workers) in [1, 4].into_iter().enumerate() {
            let (rate, lo, hi) = tickbox_tuning::median_min_max(&mut rates[i]).expect("5 rounds");
            let (shard, shard_lo, shard_hi) =
                tickbox_tuning::median_min_max(&mut shards[i]).expect("5 rounds");
            println!(
                "{kind} workers {workers}: median {rate:.0} records/s, range {lo:.0} .. {hi:.0}; shard thread median \
                 {shard:.1} ns/record, range {shard_lo:.1} .. {shard_hi:.1}"
            );
        }
        ratios.sort_by(f64::total_cmp);
        println!(
            "{kind} 4 workers / 1 worker, same round: {} (median {:.2})",
            ratios
                .iter()
                .map(|r| format!("{r:.2}"))
                .collect::<Vec<_>>()
                .join(" "),
            ratios[ratios.len() / 2]
        );
    }
}
