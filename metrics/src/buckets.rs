//! Fixed latency buckets, microseconds to seconds, filled from the HDR histograms the components keep.

use hdrhistogram::Histogram;

use crate::HistogramSnapshot;

/// Upper bounds, ns: 1, 2.5, 5 steps from 1 µs to 10 s. Every lateness and latency histogram uses these, so
/// alerts and dashboards can compare roles bucket by bucket.
pub const BUCKET_BOUNDS_NS: [u64; 22] = [
    1_000,
    2_500,
    5_000,
    10_000,
    25_000,
    50_000,
    100_000,
    250_000,
    500_000,
    1_000_000,
    2_500_000,
    5_000_000,
    10_000_000,
    25_000_000,
    50_000_000,
    100_000_000,
    250_000_000,
    500_000_000,
    1_000_000_000,
    2_500_000_000,
    5_000_000_000,
    10_000_000_000,
];

/// Counts per bucket of [`BUCKET_BOUNDS_NS`] plus the `+Inf` one, and the sum; plain integers, so a component
/// can keep them in atomics and a scrape can add several up.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Buckets {
    /// Per bucket (not cumulative); the last is past the highest bound.
    pub counts: [u64; BUCKET_BOUNDS_NS.len() + 1],
    /// Sum of the values, ns (each value as its HDR bucket's median: three significant digits).
    pub sum_ns: u64,
}

impl Buckets {
    /// The bucket a value of `ns` falls in.
    pub fn index(ns: u64) -> usize {
        BUCKET_BOUNDS_NS.partition_point(|&bound| bound < ns)
    }

    /// `h` (values in ns) sorted into the buckets. Costs one pass over the histogram's recorded values, so a
    /// component calls it when a scrape asks, never per message.
    pub fn from_hdr(h: &Histogram<u64>) -> Buckets {
        let mut b = Buckets::default();
        for v in h.iter_recorded() {
            let n = v.count_since_last_iteration();
            let value = h.median_equivalent(v.value_iterated_to());
            b.counts[Self::index(value)] += n;
            b.sum_ns = b.sum_ns.saturating_add(value.saturating_mul(n));
        }
        b
    }

    /// Adds `other` (another shard's, another worker's).
    pub fn add(&mut self, other: &Buckets) {
        for (a, b) in self.counts.iter_mut().zip(other.counts) {
            *a += b;
        }
        self.sum_ns = self.sum_ns.saturating_add(other.sum_ns);
    }

    /// Values counted.
    pub fn count(&self) -> u64 {
        self.counts.iter().sum()
    }

    /// As a histogram in seconds, the unit Prometheus wants.
    pub fn seconds(&self) -> HistogramSnapshot {
        let mut buckets: Vec<(f64, u64)> = BUCKET_BOUNDS_NS
            .iter()
            .zip(self.counts)
            .map(|(&bound, n)| (bound as f64 / 1e9, n))
            .collect();
        buckets.push((f64::INFINITY, self.counts[BUCKET_BOUNDS_NS.len()]));
        HistogramSnapshot {
            buckets,
            sum: self.sum_ns as f64 / 1e9,
            count: self.count(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_land_in_the_first_bucket_at_or_above_them() {
        assert_eq!(Buckets::index(0), 0);
        assert_eq!(Buckets::index(1_000), 0);
        assert_eq!(Buckets::index(1_001), 1);
        assert_eq!(Buckets::index(10_000_000_000), 21);
        assert_eq!(Buckets::index(10_000_000_001), 22);
    }

    #[test]
    fn an_hdr_histogram_is_bucketed_with_its_count_and_sum_kept() {
        let mut h = Histogram::<u64>::new_with_bounds(1, 3_600_000_000_000, 3).unwrap();
        h.record_n(800, 3).unwrap(); // 0.8 us
        h.record(40_000).unwrap(); // 40 us
        h.record(2_000_000_000).unwrap(); // 2 s
        h.record(20_000_000_000).unwrap(); // 20 s: past the last bound
        let b = Buckets::from_hdr(&h);
        assert_eq!(b.count(), h.len());
        assert_eq!(b.counts[0], 3);
        assert_eq!(b.counts[Buckets::index(40_000)], 1);
        assert_eq!(b.counts[Buckets::index(2_000_000_000)], 1);
        assert_eq!(b.counts[22], 1);
        let exact = 3 * 800 + 40_000 + 2_000_000_000 + 20_000_000_000u64;
        assert!((b.sum_ns as f64 - exact as f64).abs() / (exact as f64) < 0.001);
        let s = b.seconds();
        assert_eq!(s.count, 6);
        assert_eq!(s.buckets.len(), 23);
        assert_eq!(s.buckets[0], (1e-6, 3));
        assert!(s.buckets[22].0.is_infinite());
        let mut twice = b;
        twice.add(&b);
        assert_eq!(twice.count(), 12);
    }
}
