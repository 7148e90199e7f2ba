//! Append rate of 100-byte records into a ring, beside the ceiling: a plain `memcpy` of the same records into the
//! same mapped file pages, measured in the same run. Run: `cargo bench -p tickbox-journal --bench append`.
//!
//! Times are the benchmark thread's CPU time (`CLOCK_THREAD_CPUTIME_ID`), not wall time, so a machine shared with
//! builds does not inflate them with time spent waiting for a core. `TICKBOX_BENCH_WALL=1` measures wall time.

use std::hint::black_box;
use std::time::Duration;

use criterion::{criterion_main, Criterion, Throughput};
use tickbox_journal::{Durability, Writer, WriterOptions, HEADER_SIZE};

const CAPACITY: u64 = 256 << 20;

/// The clock the measurements use: this thread's CPU time, or wall time if `TICKBOX_BENCH_WALL` is set.
#[allow(unsafe_code)] // clock_gettime: std has no per-thread CPU clock.
fn now() -> Duration {
    if std::env::var_os("TICKBOX_BENCH_WALL").is_some() {
        static START: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
        return START.get_or_init(std::time::Instant::now).elapsed();
    }
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one `timespec` through the pointer, which is a live local.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}
const RECORD: usize = 100;

#[allow(unsafe_code)] // maps the journal file itself for the memcpy baseline.
fn bench_append(c: &mut Criterion) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bench.tbj");
    // `cargo test --benches` runs each bench once as a smoke test: a small ring is enough there.
    let capacity = if std::env::args().any(|a| a == "--bench") {
        CAPACITY
    } else {
        16 << 20
    };
    let mut w = Writer::open(
        &path,
        &WriterOptions::ring(capacity).durability(Durability::None),
    )
    .unwrap();
    let payload = [0x5au8; RECORD];
    // Fault every page in (and wrap once) so both measurements hit resident page-cache pages.
    for i in 0..(capacity / 128 + 10) {
        w.append(i, &payload).unwrap();
    }
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&path)
        .unwrap();
    // SAFETY: the bench owns the file; the baseline only writes bytes the writer is not using at the same time.
    let mut map = unsafe { memmap2::MmapMut::map_mut(&file).unwrap() };

    let mut g = c.benchmark_group("journal_append_100B");
    g.throughput(Throughput::Bytes(RECORD as u64));
    g.measurement_time(Duration::from_secs(4));
    g.bench_function("append", |b| {
        b.iter_custom(|iters| {
            let t = now();
            for i in 0..iters {
                black_box(w.append(i, black_box(&payload)).unwrap());
            }
            now() - t
        })
    });
    g.bench_function("append_batch_64", |b| {
        b.iter_custom(|iters| {
            let t = now();
            let mut left = iters;
            while left > 0 {
                let n = left.min(64);
                let mut batch = w.batch();
                for i in 0..n {
                    black_box(batch.append(i, black_box(&payload)).unwrap());
                }
                batch.commit().unwrap();
                left -= n;
            }
            now() - t
        })
    });
    let data = &mut map[HEADER_SIZE as usize..];
    let slots = data.len() / 128;
    let mut slot = 0usize;
    g.bench_function("memcpy_baseline", |b| {
        b.iter_custom(|iters| {
            let t = now();
            for _ in 0..iters {
                // Same footprint as a journal frame: 24-byte header + 100 bytes, 8-byte aligned = 128 bytes.
                let dst = &mut data[slot * 128..slot * 128 + RECORD];
                dst.copy_from_slice(black_box(&payload));
                black_box(&dst[0]);
                slot += 1;
                if slot == slots {
                    slot = 0;
                }
            }
            now() - t
        })
    });
    g.finish();
}

// What `criterion_group!` would generate, written out because the macro's `pub fn` cannot carry a doc comment.
fn benches() {
    let mut criterion = Criterion::default().configure_from_args();
    bench_append(&mut criterion);
}
criterion_main!(benches);
