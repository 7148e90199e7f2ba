//! Per-message cost of [`SequenceTracker`] as the publisher table grows: 1, 4, 1k and 100k publishers.
//!
//! `tracked/N`: a table bound large enough to track all N publishers; messages cycle through them in order, so
//! every lookup misses the last-hit fast path (the worst case for a lookup). `flood/100000`: the default bound
//! (4096) with 100k distinct ids, as a flood of forged publisher ids produces: most messages are untracked and
//! must still be refused cheaply. `one_among/N`: one real publisher's in-order stream after N other ids were
//! seen once (the last-hit fast path).

use std::hint::black_box;

use criterion::{criterion_main, BenchmarkId, Criterion, Throughput};
use tickbox_wire::sequence::{SequenceTracker, DEFAULT_MAX_PLAUSIBLE_JUMP};
use tickbox_wire::{Header, Kind};

fn headers(n: u32) -> Vec<Header> {
    (0..n)
        .map(|p| Header::live(Kind::Quote, 1_000 + p, 1, 1).with_session(7))
        .collect()
}

fn cycle(c: &mut Criterion, name: &str, n: u32, tracker: impl Fn() -> SequenceTracker) {
    let mut group = c.benchmark_group("sequence");
    group.throughput(Throughput::Elements(1));
    group.bench_function(BenchmarkId::new(name, n), |b| {
        let mut t = tracker();
        let mut hs = headers(n);
        for h in &hs {
            t.on_header(h, None);
        }
        let len = hs.len();
        let mut i = 0usize;
        b.iter(|| {
            let h = &mut hs[i];
            i = if i + 1 == len { 0 } else { i + 1 };
            h.sequence += 1;
            black_box(t.on_header(black_box(h), None))
        })
    });
    group.finish();
}

fn one_among(c: &mut Criterion, n: u32) {
    let mut group = c.benchmark_group("sequence");
    group.throughput(Throughput::Elements(1));
    group.bench_function(BenchmarkId::new("one_among", n), |b| {
        let mut t = SequenceTracker::new();
        let mut real = Header::live(Kind::Quote, 1, 1, 1).with_session(7);
        t.on_header(&real, None);
        for h in headers(n) {
            t.on_header(&h, None);
        }
        b.iter(|| {
            real.sequence += 1;
            black_box(t.on_header(black_box(&real), None))
        })
    });
    group.finish();
}

fn sequence(c: &mut Criterion) {
    for n in [1u32, 4, 1_000, 100_000] {
        cycle(c, "tracked", n, || {
            SequenceTracker::with_bounds(n as usize, DEFAULT_MAX_PLAUSIBLE_JUMP)
        });
    }
    cycle(c, "flood", 100_000, SequenceTracker::new);
    for n in [1_000u32, 100_000] {
        one_among(c, n);
    }
}

fn benches() {
    let mut c = Criterion::default()
        .configure_from_args()
        .warm_up_time(std::time::Duration::from_millis(300))
        .measurement_time(std::time::Duration::from_secs(1))
        .sample_size(20);
    sequence(&mut c);
}

criterion_main!(benches);
