//! Append rate of 100-byte records into a ring, beside the ceiling: a plain `memcpy` of the same records into the
//! same mapped file pages, measured in the same run. Run: `cargo bench -p tickbox-journal --bench append`.
//!
//! Two measurements:
//!
//! - criterion's, one function after the other: `append` (one publish per record), `append_batch_64` (one publish
//!   per 64 records, as the recorder appends), `append_batch_64_hooked` (the same into a second ring whose writer
//!   has an overwrite hook, as the recorder's ring has: every overwritten record is read and shown to it),
//!   `memcpy_baseline`. At the end the bench prints each append's speed as a fraction of the baseline's, from the
//!   medians of criterion's own samples (ns per record).
//! - a paired one, printed last: rounds of `memcpy` / `append` / `append_batch_64` blocks of the same records,
//!   `memcpy` / `append_batch_64_hooked` into the second ring's map, and `memcpy` / `archive_batch_64` (batches of
//!   64 into an archive of ring-sized segments, rolling into fresh segments as `tickbox record` does), interleaved,
//!   so a noisy neighbour slows them alike; it prints the median ratio over the rounds and its range. On a shared
//!   machine this is the figure to quote.
//!
//! Times are the benchmark thread's CPU time (`CLOCK_THREAD_CPUTIME_ID`), not wall time, so a machine shared with
//! builds does not inflate them with time spent waiting for a core. `TICKBOX_BENCH_WALL=1` measures wall time.
//! `TICKBOX_BENCH_RING=BYTES` sets the ring size (default 256 MiB: far larger than the caches, like a real
//! journal; a ring that fits in the caches measures the CPU work alone).

use std::cell::RefCell;
use std::hint::black_box;
use std::rc::Rc;
use std::time::Duration;

use criterion::{criterion_main, Criterion, Throughput};
use tickbox_journal::{Durability, OverwrittenRecord, Writer, WriterOptions, HEADER_SIZE};

const CAPACITY: u64 = 256 << 20;

/// The clock the measurements use: this thread's CPU time, or wall time if `TICKBOX_BENCH_WALL` is set.
fn now() -> Duration {
    if std::env::var_os("TICKBOX_BENCH_WALL").is_some() {
        static START: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
        return START.get_or_init(std::time::Instant::now).elapsed();
    }
    tickbox_testkit::cpu::thread_cpu()
}
const RECORD: usize = 100;
/// Bytes a 100-byte record takes in the journal: 24-byte header + payload, 8-aligned.
const FRAME: usize = 128;
const SAMPLES: usize = 100;

/// The three workloads, each run for `iters` records and timed.
struct Work {
    w: Writer,
    map: memmap2::MmapMut,
    slot: usize,
    payload: [u8; RECORD],
}

impl Work {
    fn append(&mut self, iters: u64) -> Duration {
        let t = now();
        for i in 0..iters {
            black_box(self.w.append(i, black_box(&self.payload)).unwrap());
        }
        now() - t
    }

    fn append_batch_64(&mut self, iters: u64) -> Duration {
        let t = now();
        let mut left = iters;
        while left > 0 {
            let n = left.min(64);
            let mut batch = self.w.batch();
            for i in 0..n {
                black_box(batch.append(i, black_box(&self.payload)).unwrap());
            }
            batch.commit().unwrap();
            left -= n;
        }
        now() - t
    }

    /// The ceiling: the same bytes copied into the same mapped file, one record after another, with the journal's
    /// footprint (one 128-byte frame per record), wrapping at the end of the data region. Each copy lands where a
    /// frame's payload sits (24 bytes into the frame; 100-byte records fill the ring in whole 128-byte frames), so
    /// frame headers stay intact and the interleaved rounds can go on appending to the same ring.
    fn memcpy(&mut self, iters: u64) -> Duration {
        let data = &mut self.map[HEADER_SIZE as usize..];
        let slots = data.len() / FRAME;
        let t = now();
        for _ in 0..iters {
            let at = self.slot * FRAME + 24;
            let dst = &mut data[at..at + RECORD];
            dst.copy_from_slice(black_box(&self.payload));
            black_box(&dst[0]);
            self.slot += 1;
            if self.slot == slots {
                self.slot = 0;
            }
        }
        now() - t
    }
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// ns per record of each of criterion's measurement samples (the last `SAMPLES` calls: warm-up calls come first).
fn per_record(calls: &[(u64, Duration)]) -> Vec<f64> {
    calls[calls.len().saturating_sub(SAMPLES)..]
        .iter()
        .map(|(iters, d)| d.as_nanos() as f64 / *iters as f64)
        .collect()
}

/// A lapped ring of `capacity` bytes at `path`, its pages resident, and a map of the same file for the baseline.
/// `hooked`: the writer gets an overwrite hook that reads each overwritten record's first payload byte, as the
/// recorder's reads the publisher out of each.
#[allow(unsafe_code)] // maps the journal file itself for the memcpy baseline.
fn lapped_ring(path: &std::path::Path, capacity: u64, hooked: bool) -> Work {
    let mut w = Writer::open(
        path,
        &WriterOptions::ring(capacity).durability(Durability::None),
    )
    .unwrap();
    if hooked {
        let mut seen = [0u64; 256];
        w.set_on_overwrite(move |rec: OverwrittenRecord<'_>| {
            let first = rec.payload.first().copied().unwrap_or(0);
            seen[first as usize] += 1;
            black_box(&seen);
        });
    }
    let payload = [0x5au8; RECORD];
    // Fault every page in (and wrap once) so both measurements hit resident page-cache pages.
    for i in 0..(capacity / FRAME as u64 + 10) {
        w.append(i, &payload).unwrap();
    }
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .unwrap();
    // SAFETY: the bench owns the file; the baseline only writes bytes the writer is not using at the same time.
    let map = unsafe { memmap2::MmapMut::map_mut(&file).unwrap() };
    let mut work = Work {
        w,
        map,
        slot: 0,
        payload,
    };
    // And every page of the baseline's own mapping, so its first round does not pay the page faults.
    work.memcpy(capacity / FRAME as u64);
    work
}

/// An archive of `segment`-byte segments at `path` (nothing written yet: its appends fault in fresh pages of each
/// new segment, as a recording does), with a second map of the ring file at `ring` for the baseline: the ceiling
/// is a copy at memory speed into resident pages, whatever the archive pays for its fresh ones.
#[allow(unsafe_code)] // maps the ring file for the memcpy baseline.
fn archive(path: &std::path::Path, segment: u64, ring: &std::path::Path) -> Work {
    let w = Writer::open(
        path,
        &WriterOptions::archive(segment).durability(Durability::None),
    )
    .unwrap();
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(ring)
        .unwrap();
    // SAFETY: the bench owns the file; the baseline writes only payload bytes of frames, as the ring's own does.
    let map = unsafe { memmap2::MmapMut::map_mut(&file).unwrap() };
    Work {
        w,
        map,
        slot: 0,
        payload: [0x5au8; RECORD],
    }
}

fn bench_append(c: &mut Criterion) {
    let dir = tempfile::tempdir().unwrap();
    let bench_mode = std::env::args().any(|a| a == "--bench");
    let capacity = match std::env::var("TICKBOX_BENCH_RING") {
        Ok(v) => v
            .parse()
            .expect("TICKBOX_BENCH_RING is a size in bytes, e.g. 1048576"),
        // `cargo test --benches` runs each bench once as a smoke test: a small ring is enough there.
        Err(_) if bench_mode => CAPACITY,
        Err(_) => 16 << 20,
    };
    let work = Rc::new(RefCell::new(lapped_ring(
        &dir.path().join("bench.tbj"),
        capacity,
        false,
    )));
    let hooked = Rc::new(RefCell::new(lapped_ring(
        &dir.path().join("hooked.tbj"),
        capacity,
        true,
    )));

    type Run = fn(&mut Work, u64) -> Duration;
    let runs: [(&str, Run, &Rc<RefCell<Work>>); 4] = [
        ("append", Work::append, &work),
        ("append_batch_64", Work::append_batch_64, &work),
        ("append_batch_64_hooked", Work::append_batch_64, &hooked),
        ("memcpy_baseline", Work::memcpy, &work),
    ];
    let mut calls: Vec<Vec<(u64, Duration)>> = vec![Vec::new(); runs.len()];
    let mut g = c.benchmark_group("journal_append_100B");
    g.throughput(Throughput::Bytes(RECORD as u64));
    g.sample_size(SAMPLES);
    g.measurement_time(Duration::from_secs(4));
    for ((name, run, work), calls) in runs.iter().zip(calls.iter_mut()) {
        let work = Rc::clone(work);
        g.bench_function(*name, |b| {
            b.iter_custom(|iters| {
                let d = run(&mut work.borrow_mut(), iters);
                calls.push((iters, d));
                d
            })
        });
    }
    g.finish();
    if !bench_mode {
        return;
    }

    let mut medians: Vec<f64> = calls.iter().map(|c| median(&mut per_record(c))).collect();
    let base = medians[3];
    println!("\nratio to memcpy into the same map (criterion samples, median ns/record; speed = memcpy / append):");
    for (i, (name, _, _)) in runs.iter().enumerate().take(3) {
        println!(
            "  {name:<16} {:>7.2} ns  memcpy {:>6.2} ns  speed {:.3}x memcpy",
            medians[i],
            base,
            base / medians[i]
        );
    }
    medians.clear();

    // Paired rounds: each round times a block of every workload back to back.
    let rounds = 31;
    let block = 200_000u64;
    let mut ratios = [Vec::new(), Vec::new(), Vec::new(), Vec::new()];
    let mut w = work.borrow_mut();
    let mut h = hooked.borrow_mut();
    let mut a = archive(
        &dir.path().join("archive"),
        capacity,
        &dir.path().join("bench.tbj"),
    );
    for _ in 0..rounds {
        let m = a.memcpy(block).as_nanos() as f64;
        let ab = a.append_batch_64(block).as_nanos() as f64;
        let hm = h.memcpy(block).as_nanos() as f64;
        let hb = h.append_batch_64(block).as_nanos() as f64;
        let m2 = a.memcpy(block).as_nanos() as f64;
        let r1 = w.append(block).as_nanos() as f64;
        let r64 = w.append_batch_64(block).as_nanos() as f64;
        ratios[0].push(m / r1);
        ratios[1].push(m2 / r64);
        ratios[2].push(hm / hb);
        ratios[3].push(m / ab);
    }
    println!("paired rounds ({rounds} x {block} records each, interleaved; speed = memcpy time / append time):");
    for (name, r) in [
        "append",
        "append_batch_64",
        "append_batch_64_hooked",
        "archive_batch_64",
    ]
    .iter()
    .zip(ratios.iter_mut())
    {
        let med = median(r);
        println!(
            "  {name:<22} speed {med:.3}x memcpy (median of {rounds}; min {:.3}, max {:.3})",
            r[0],
            r[r.len() - 1]
        );
    }
}

/// What a roll costs the recording thread: an archive of 32 MiB segments filled with 100-byte records, one
/// publish per record, each append timed on the wall clock (a roll waits on the file system, which a thread's
/// CPU time would not show). The appends that start a new segment are the rolls; printed: their median and
/// worst, beside the median of all other appends.
fn bench_roll() {
    const SEGMENT: u64 = 32 << 20;
    const ROLLS: usize = 12;
    let dir = tempfile::tempdir().unwrap();
    let mut w = Writer::open(
        dir.path().join("archive"),
        &WriterOptions::archive(SEGMENT).durability(Durability::None),
    )
    .unwrap();
    let payload = [0x5au8; RECORD];
    let per_segment = (SEGMENT / FRAME as u64) as usize;
    let appends = per_segment * ROLLS + per_segment / 2;
    let mut times = Vec::with_capacity(appends);
    for i in 0..appends {
        let t = std::time::Instant::now();
        black_box(w.append(i as u64, black_box(&payload)).unwrap());
        times.push(t.elapsed().as_nanos() as f64);
    }
    // Segment k's first record is append k * per_segment (records fill segments exactly): those appends rolled.
    let mut rolls: Vec<f64> = (1..=ROLLS).map(|k| times[k * per_segment]).collect();
    let worst_roll = rolls.iter().copied().fold(0.0, f64::max);
    let mut rest: Vec<f64> = times
        .iter()
        .enumerate()
        .filter(|(i, _)| *i == 0 || i % per_segment != 0)
        .map(|(_, t)| *t)
        .collect();
    let worst_other = rest.iter().copied().fold(0.0, f64::max);
    println!(
        "archive roll ({ROLLS} rolls of {} MiB segments, wall clock): roll median {:.1} us, worst {:.1} us; \
         other appends median {:.0} ns, worst {:.1} us; the writer reserved disk itself {} time(s)",
        SEGMENT >> 20,
        median(&mut rolls) / 1000.0,
        worst_roll / 1000.0,
        median(&mut rest),
        worst_other / 1000.0,
        w.reserve_stalls()
    );
}

// What `criterion_group!` would generate, written out because the macro's `pub fn` cannot carry a doc comment.
fn benches() {
    let mut criterion = Criterion::default().configure_from_args();
    if std::env::var_os("TICKBOX_BENCH_ROLL_ONLY").is_none() {
        bench_append(&mut criterion);
    }
    if std::env::args().any(|a| a == "--bench") {
        bench_roll();
    }
}
criterion_main!(benches);
