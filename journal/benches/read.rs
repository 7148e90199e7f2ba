//! Read rate of 100-byte records: a ring (every record copied out of the map with word-wise atomic loads, then
//! checksummed on the copy) beside a sealed archive segment (borrowed from the map, no copy) and the same segment
//! compressed (`compress`: inflated a frame at a time, then checksummed), in the same run.
//! Run: `cargo bench -p tickbox-journal --bench read`.
//!
//! Times are the benchmark thread's CPU time (`CLOCK_THREAD_CPUTIME_ID`), as in the append bench, so a machine
//! shared with builds does not inflate them. `TICKBOX_BENCH_WALL=1` measures wall time.

use std::hint::black_box;
use std::time::Duration;

use criterion::{criterion_main, Criterion, Throughput};
use tickbox_journal::{compress, CompressOptions, Durability, Reader, Writer, WriterOptions};

const RECORD: usize = 100;

/// The clock the measurements use: this thread's CPU time, or wall time if `TICKBOX_BENCH_WALL` is set.
fn now() -> Duration {
    if std::env::var_os("TICKBOX_BENCH_WALL").is_some() {
        static START: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
        return START.get_or_init(std::time::Instant::now).elapsed();
    }
    tickbox_testkit::cpu::thread_cpu()
}

/// Reads `iters` records, rewinding to the oldest whenever the reader catches up.
fn read_n(r: &mut Reader, iters: u64) -> Duration {
    let t = now();
    let mut left = iters;
    while left > 0 {
        match r.next().unwrap() {
            Some(rec) => {
                black_box(rec.payload);
                left -= 1;
            }
            None => r.seek_oldest(),
        }
    }
    now() - t
}

fn bench_read(c: &mut Criterion) {
    let dir = tempfile::tempdir().unwrap();
    // `cargo test --benches` runs each bench once as a smoke test: a small journal is enough there.
    let size: u64 = if std::env::args().any(|a| a == "--bench") {
        64 << 20
    } else {
        4 << 20
    };
    let payload = [0x5au8; RECORD];
    let records = size / 128 - 64;

    let ring = dir.path().join("ring.tbj");
    let mut w = Writer::open(
        &ring,
        &WriterOptions::ring(size).durability(Durability::None),
    )
    .unwrap();
    for i in 0..records {
        w.append(i, &payload).unwrap();
    }
    drop(w);

    // More than a segment's worth, so the first rolls and is sealed (never rewritten) when it is read.
    let archive = dir.path().join("archive");
    let mut w = Writer::open(
        &archive,
        &WriterOptions::archive(size).durability(Durability::None),
    )
    .unwrap();
    for i in 0..size / 128 + 1_000 {
        w.append(i, &payload).unwrap();
    }
    drop(w);
    // The same records compressed. The payloads are all alike, so they compress far better than market data; the
    // row measures the inflate-and-check path, not the ratio (`tickbox bench compress` measures both on real
    // records).
    let packed = dir.path().join("packed");
    std::fs::create_dir(&packed).unwrap();
    for name in ["0000000000.tbj", "0000000001.tbj"] {
        std::fs::copy(archive.join(name), packed.join(name)).unwrap();
    }
    compress(&packed, &CompressOptions::default()).unwrap();

    let mut g = c.benchmark_group("journal_read_100B");
    g.throughput(Throughput::Bytes(RECORD as u64));
    g.measurement_time(Duration::from_secs(4));
    let mut r = Reader::open(&ring).unwrap();
    g.bench_function("ring", |b| b.iter_custom(|iters| read_n(&mut r, iters)));
    let mut r = Reader::open(&ring).unwrap();
    r.set_verify(false);
    g.bench_function("ring_no_verify", |b| {
        b.iter_custom(|iters| read_n(&mut r, iters))
    });
    let mut r = Reader::open(tickbox_journal::segment_path(&archive, 0)).unwrap();
    g.bench_function("sealed_archive_segment", |b| {
        b.iter_custom(|iters| read_n(&mut r, iters))
    });
    let mut r = Reader::open(tickbox_journal::segment_path(&packed, 0)).unwrap();
    g.bench_function("compressed_archive_segment", |b| {
        b.iter_custom(|iters| read_n(&mut r, iters))
    });
    g.finish();
}

// What `criterion_group!` would generate, written out because the macro's `pub fn` cannot carry a doc comment.
fn benches() {
    let mut criterion = Criterion::default().configure_from_args();
    bench_read(&mut criterion);
}
criterion_main!(benches);
