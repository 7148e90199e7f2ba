//! A lookup in [`ShortKeyCache`] in front of a slower rule, as a shard's dispatch does it: a feed's symbols
//! (`XNAS.ABCD`), looked up in a fixed pseudo-random order, the slower rule ([`stable_hash`], FNV-1a a byte at a
//! time) computed and cached on each miss. `uniform/N`: every one of N symbols as likely as the next; `skewed/N`:
//! the k-th symbol 1/k as likely as the first, as trading is spread over a universe. The cache has 4,096 places,
//! as the dispatch's has.

use std::hint::black_box;

use criterion::{criterion_main, BenchmarkId, Criterion, Throughput};
use tickbox_wire::{stable_hash, ShortKeyCache};

const PLACES: usize = 4096;
const LOOKUPS: usize = 1 << 20;

/// Symbol `i` of a universe: four letters spread over the alphabet, behind a venue.
fn symbol(i: usize) -> Vec<u8> {
    let mut v = (i as u64 * 7_919 + 104_729) % (26 * 26 * 26 * 26);
    let mut key = b"XNAS.AAAA".to_vec();
    for slot in key[5..].iter_mut().rev() {
        *slot = b'A' + (v % 26) as u8;
        v /= 26;
    }
    key
}

/// `LOOKUPS` symbol indices below `n`, each drawn with weight `weight(rank)`, from a fixed xorshift sequence.
fn order(n: usize, weight: impl Fn(usize) -> f64) -> Vec<u32> {
    let mut cumulative = Vec::with_capacity(n);
    let mut total = 0.0;
    for rank in 0..n {
        total += weight(rank);
        cumulative.push(total);
    }
    let mut x = 0x2545_f491_4f6c_dd1d_u64;
    (0..LOOKUPS)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let draw = (x >> 11) as f64 / (1u64 << 53) as f64 * total;
            cumulative.partition_point(|&c| c <= draw).min(n - 1) as u32
        })
        .collect()
}

fn lookups(c: &mut Criterion, name: &str, n: usize, weight: impl Fn(usize) -> f64) {
    let keys: Vec<Vec<u8>> = (0..n).map(symbol).collect();
    let order = order(n, weight);
    let mut group = c.benchmark_group("short_keys");
    group.throughput(Throughput::Elements(1));
    group.bench_function(BenchmarkId::new(name, n), |b| {
        let mut cache = ShortKeyCache::<u32>::new(PLACES);
        let mut i = 0usize;
        b.iter(|| {
            let key = &keys[order[i] as usize];
            i = (i + 1) & (LOOKUPS - 1);
            let worker = match cache.get(black_box(key)) {
                Some(worker) => worker,
                None => {
                    let worker = (stable_hash(key) % 4) as u32;
                    cache.insert(key, worker);
                    worker
                }
            };
            black_box(worker)
        })
    });
    group.finish();
}

fn benches() {
    let mut c = Criterion::default()
        .configure_from_args()
        .warm_up_time(std::time::Duration::from_millis(300))
        .measurement_time(std::time::Duration::from_secs(1))
        .sample_size(20);
    for n in [2_000, 10_000] {
        lookups(&mut c, "uniform", n, |_| 1.0);
        lookups(&mut c, "skewed", n, |rank| 1.0 / (rank + 1) as f64);
    }
}

criterion_main!(benches);
