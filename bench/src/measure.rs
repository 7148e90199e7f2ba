//! Latency recording with coordinated-omission correction.
//!
//! Every run is open-loop: message `k` is *meant* to leave at `start + k * interval`, whatever happened to
//! message `k - 1`. Each receipt is recorded twice:
//!
//! * **corrected** = receive time − intended send time (from the schedule). If anything stalls — the consumer,
//!   the transport, or the publisher itself because back-pressure blocked its `send` — every message that
//!   should have gone out during the stall is charged the time it waited, so a stall shows up in the tail with
//!   its real weight. This is the figure to quote.
//! * **uncorrected** = receive time − actual send time (the publisher's `send_time_ns` stamp). A stall that
//!   blocks the publisher is hidden here because the publisher simply stamped later; it is reported so the gap
//!   between the two is visible.
//!
//! We record against the intended send time instead of using `Histogram::record_correct` because the schedule
//! is known exactly, whereas `record_correct` back-fills synthetic samples from one expected interval and
//! cannot tell a late publisher from a late consumer.

use std::time::Duration;

use hdrhistogram::Histogram;

use crate::BenchError;

/// Largest latency a histogram holds; larger values are clamped to it and counted in
/// `LatencyRecorder::clamped` so a pathological stall is visible rather than a panic or a silent drop.
pub const MAX_TRACKABLE_NS: u64 = 60_000_000_000;
/// Three significant digits: 0.1 % value resolution at every magnitude.
pub const SIGNIFICANT_DIGITS: u8 = 3;

/// A fresh nanosecond histogram with the bench's bounds.
pub fn new_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, MAX_TRACKABLE_NS, SIGNIFICANT_DIGITS)
        .expect("constant histogram bounds are valid")
}

/// The open-loop send schedule shared by the publisher and the recorder.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Schedule {
    /// Intended send time of message 0 (ns since the Unix epoch, the `now_ns` clock).
    pub start_ns: u64,
    /// Offered rate, msg/s: message `k` is intended at `start_ns + ceil(k * 1e9 / rate)`, the feed pacer's own
    /// formula ([`tickbox_feed::paced_offset_ns`]), so a schedule rebuilt from a `tickbox feed`'s reported start
    /// matches the times it sent at, whatever the rate.
    pub rate: u64,
    /// Intended gap between messages (rounded down; [`Schedule::intended_ns`] is exact).
    pub interval_ns: u64,
    /// Messages intended before this time are warm-up and not recorded.
    pub measure_from_ns: u64,
    /// Messages intended at or after this time are not sent.
    pub end_ns: u64,
}

impl Schedule {
    /// A schedule at `rate` msg/s starting at `start_ns`, `warmup` of unrecorded traffic then `duration` measured.
    pub fn new(
        start_ns: u64,
        rate: u64,
        warmup: Duration,
        duration: Duration,
    ) -> Result<Self, BenchError> {
        if rate == 0 {
            return Err(BenchError::InvalidArgument("rate must be positive".into()));
        }
        if rate > 1_000_000_000 {
            return Err(BenchError::InvalidArgument(format!(
                "rate {rate} msg/s is above one message per nanosecond"
            )));
        }
        let measure_from_ns = start_ns + warmup.as_nanos() as u64;
        Ok(Schedule {
            start_ns,
            rate,
            interval_ns: 1_000_000_000 / rate,
            measure_from_ns,
            end_ns: measure_from_ns + duration.as_nanos() as u64,
        })
    }

    /// Intended send time of message `k`.
    #[inline]
    pub fn intended_ns(&self, k: u64) -> u64 {
        self.start_ns + tickbox_feed::paced_offset_ns(self.rate, k)
    }

    /// The first message intended at or after `t_ns`.
    fn first_index_at(&self, t_ns: u64) -> u64 {
        // ceil(k * 1e9 / rate) >= d  <=>  k * 1e9 > (d - 1) * rate.
        match t_ns.saturating_sub(self.start_ns) {
            0 => 0,
            d => (u128::from(d - 1) * u128::from(self.rate) / 1_000_000_000) as u64 + 1,
        }
    }

    /// Whether message `k` is inside the schedule at all.
    #[inline]
    pub fn in_schedule(&self, k: u64) -> bool {
        self.intended_ns(k) < self.end_ns
    }

    /// Whether message `k` falls in the measured window.
    #[inline]
    pub fn is_measured(&self, k: u64) -> bool {
        let t = self.intended_ns(k);
        t >= self.measure_from_ns && t < self.end_ns
    }

    /// How many messages the measured window holds.
    pub fn measured_messages(&self) -> u64 {
        self.first_index_at(self.end_ns)
            .saturating_sub(self.first_index_at(self.measure_from_ns))
    }

    /// Length of the measured window.
    pub fn measured_duration(&self) -> Duration {
        Duration::from_nanos(self.end_ns - self.measure_from_ns)
    }
}

/// One interval's histograms, for the `.hlog` interval log.
#[derive(Debug, Clone)]
pub struct IntervalSample {
    /// Start of the interval, ns since the Unix epoch (receive clock).
    pub start_ns: u64,
    /// End of the interval (exclusive), same clock.
    pub end_ns: u64,
    /// Latencies from the intended send time (coordinated omission corrected), ns.
    pub corrected: Histogram<u64>,
    /// Latencies from the publisher's actual send stamp, ns.
    pub uncorrected: Histogram<u64>,
}

/// Records one-way latencies on the receiving thread. One recorder per receiving thread; no locks, and no
/// allocation per message (only when an interval closes, which copies its histograms).
#[derive(Debug)]
pub struct LatencyRecorder {
    schedule: Schedule,
    interval_ns: u64,
    current_start_ns: u64,
    corrected: Histogram<u64>,
    uncorrected: Histogram<u64>,
    intervals: Vec<IntervalSample>,
    received: u64,
    measured: u64,
    clamped: u64,
    negative: u64,
    first_measured_recv_ns: u64,
    last_measured_recv_ns: u64,
}

impl LatencyRecorder {
    /// `log_interval` is the length of each interval-log histogram (1 s is the HdrHistogram convention).
    pub fn new(schedule: Schedule, log_interval: Duration) -> Self {
        LatencyRecorder {
            schedule,
            interval_ns: (log_interval.as_nanos() as u64).max(1_000_000),
            current_start_ns: schedule.measure_from_ns,
            corrected: new_histogram(),
            uncorrected: new_histogram(),
            intervals: Vec::new(),
            received: 0,
            measured: 0,
            clamped: 0,
            negative: 0,
            first_measured_recv_ns: 0,
            last_measured_recv_ns: 0,
        }
    }

    /// The schedule the latencies are charged against.
    pub fn schedule(&self) -> &Schedule {
        &self.schedule
    }

    /// Records message `index` (its position in the schedule), stamped `sent_ns` by the publisher and received
    /// at `recv_ns`. Warm-up messages are counted but not recorded.
    #[inline]
    pub fn record(&mut self, index: u64, sent_ns: u64, recv_ns: u64) {
        self.received += 1;
        if !self.schedule.is_measured(index) {
            return;
        }
        if recv_ns >= self.current_start_ns + self.interval_ns {
            self.rotate(recv_ns);
        }
        if self.measured == 0 {
            self.first_measured_recv_ns = recv_ns;
        }
        self.measured += 1;
        self.last_measured_recv_ns = self.last_measured_recv_ns.max(recv_ns);
        let intended = self.schedule.intended_ns(index);
        self.record_value(recv_ns.checked_sub(intended), true);
        self.record_value(recv_ns.checked_sub(sent_ns), false);
    }

    #[inline]
    fn record_value(&mut self, latency: Option<u64>, corrected: bool) {
        let value = match latency {
            // Receive before send means the clocks disagree (another host, or a clock step); it cannot be a
            // latency, so count it and record the smallest value instead of inventing one.
            None => {
                self.negative += 1;
                1
            }
            Some(v) if v > MAX_TRACKABLE_NS => {
                self.clamped += 1;
                MAX_TRACKABLE_NS
            }
            Some(v) => v.max(1),
        };
        let hist = if corrected {
            &mut self.corrected
        } else {
            &mut self.uncorrected
        };
        // Cannot fail: the value is within the bounds checked above.
        let _ = hist.record(value);
    }

    #[cold]
    fn rotate(&mut self, now_ns: u64) {
        let end = self.current_start_ns + self.interval_ns;
        self.intervals.push(IntervalSample {
            start_ns: self.current_start_ns,
            end_ns: end,
            corrected: self.corrected.clone(),
            uncorrected: self.uncorrected.clone(),
        });
        self.corrected.reset();
        self.uncorrected.reset();
        // Skip empty intervals after a long stall rather than writing a run of zero histograms.
        let behind = (now_ns - end) / self.interval_ns;
        self.current_start_ns = end + behind * self.interval_ns;
    }

    /// Closes the last interval and returns the totals.
    pub fn finish(mut self) -> LatencySamples {
        if !self.corrected.is_empty() {
            let end = self.last_measured_recv_ns.max(self.current_start_ns + 1);
            self.intervals.push(IntervalSample {
                start_ns: self.current_start_ns,
                end_ns: end,
                corrected: self.corrected.clone(),
                uncorrected: self.uncorrected.clone(),
            });
        }
        let mut corrected = new_histogram();
        let mut uncorrected = new_histogram();
        for interval in &self.intervals {
            // Same bounds on both sides, so adding cannot fail.
            let _ = corrected.add(&interval.corrected);
            let _ = uncorrected.add(&interval.uncorrected);
        }
        LatencySamples {
            schedule: self.schedule,
            corrected,
            uncorrected,
            intervals: self.intervals,
            received: self.received,
            measured: self.measured,
            clamped: self.clamped,
            negative: self.negative,
            first_measured_recv_ns: self.first_measured_recv_ns,
            last_measured_recv_ns: self.last_measured_recv_ns,
        }
    }
}

/// Everything one receiving thread measured.
#[derive(Debug, Clone)]
pub struct LatencySamples {
    /// The schedule the latencies were charged against.
    pub schedule: Schedule,
    /// Measured-window latencies from the intended send time (coordinated omission corrected), ns.
    pub corrected: Histogram<u64>,
    /// Measured-window latencies from the publisher's actual send stamp, ns.
    pub uncorrected: Histogram<u64>,
    /// Per-interval histograms for the `.hlog`, in start order.
    pub intervals: Vec<IntervalSample>,
    /// Messages received, warm-up included.
    pub received: u64,
    /// Messages received from the measured window.
    pub measured: u64,
    /// Latencies above [`MAX_TRACKABLE_NS`], recorded as that value.
    pub clamped: u64,
    /// Receipts stamped before they were sent (clock disagreement).
    pub negative: u64,
    /// Receive time of the first measured message, ns since the Unix epoch (0 if none).
    pub first_measured_recv_ns: u64,
    /// Receive time of the last measured message, ns since the Unix epoch (0 if none).
    pub last_measured_recv_ns: u64,
}

impl LatencySamples {
    /// Merges the samples of several receiving threads (e.g. one per worker) that shared one schedule.
    pub fn merge(parts: Vec<LatencySamples>) -> Option<LatencySamples> {
        let mut iter = parts.into_iter();
        let mut total = iter.next()?;
        for part in iter {
            let _ = total.corrected.add(&part.corrected);
            let _ = total.uncorrected.add(&part.uncorrected);
            total.received += part.received;
            total.measured += part.measured;
            total.clamped += part.clamped;
            total.negative += part.negative;
            if part.measured > 0 {
                total.first_measured_recv_ns = if total.first_measured_recv_ns == 0 {
                    part.first_measured_recv_ns
                } else {
                    total
                        .first_measured_recv_ns
                        .min(part.first_measured_recv_ns)
                };
            }
            total.last_measured_recv_ns =
                total.last_measured_recv_ns.max(part.last_measured_recv_ns);
            merge_intervals(&mut total.intervals, part.intervals);
        }
        Some(total)
    }
}

/// Merges interval lists from different threads: intervals with the same start add up.
fn merge_intervals(into: &mut Vec<IntervalSample>, from: Vec<IntervalSample>) {
    for sample in from {
        match into.iter_mut().find(|s| s.start_ns == sample.start_ns) {
            Some(existing) => {
                let _ = existing.corrected.add(&sample.corrected);
                let _ = existing.uncorrected.add(&sample.uncorrected);
                existing.end_ns = existing.end_ns.max(sample.end_ns);
            }
            None => into.push(sample),
        }
    }
    into.sort_by_key(|s| s.start_ns);
}

/// The percentiles every report shows, in ns.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Percentiles {
    /// Median.
    pub p50: u64,
    /// 90th percentile.
    pub p90: u64,
    /// 99th percentile.
    pub p99: u64,
    /// 99.9th percentile.
    pub p999: u64,
    /// 99.99th percentile.
    pub p9999: u64,
    /// Largest value recorded (histogram precision).
    pub max: u64,
    /// Arithmetic mean.
    pub mean: f64,
    /// Values recorded.
    pub count: u64,
}

impl Percentiles {
    /// Reads the report percentiles, mean and count of `hist`.
    pub fn of(hist: &Histogram<u64>) -> Self {
        Percentiles {
            p50: hist.value_at_quantile(0.50),
            p90: hist.value_at_quantile(0.90),
            p99: hist.value_at_quantile(0.99),
            p999: hist.value_at_quantile(0.999),
            p9999: hist.value_at_quantile(0.9999),
            max: hist.max(),
            mean: hist.mean(),
            count: hist.len(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;
    const US: u64 = 1_000;

    fn schedule(rate: u64, measured_ms: u64) -> Schedule {
        Schedule::new(
            1_000 * MS,
            rate,
            Duration::ZERO,
            Duration::from_millis(measured_ms),
        )
        .unwrap()
    }

    /// A publisher that is blocked for `stall` every `every` messages (back-pressure from a stalled consumer):
    /// messages due during the stall leave late, all at once, with late stamps.
    fn simulate_blocked_publisher(rec: &mut LatencyRecorder, n: u64, every: u64, stall: u64) {
        let s = *rec.schedule();
        let transit = 20 * US;
        let mut publisher_free_at = 0;
        for k in 0..n {
            let intended = s.intended_ns(k);
            if k > 0 && k % every == 0 {
                publisher_free_at = intended + stall;
            }
            let sent = intended.max(publisher_free_at);
            rec.record(k, sent, sent + transit);
        }
    }

    #[test]
    fn correction_exposes_a_stall_the_publisher_absorbed() {
        // 10k msg/s, 10 ms stall every 1000 messages (10 % of the time stalled).
        let s = schedule(10_000, 1_000);
        let mut rec = LatencyRecorder::new(s, Duration::from_millis(100));
        simulate_blocked_publisher(&mut rec, s.measured_messages(), 1_000, 10 * MS);
        let out = rec.finish();
        let corrected = Percentiles::of(&out.corrected);
        let uncorrected = Percentiles::of(&out.uncorrected);
        // Uncorrected sees only transit time: the stall is invisible.
        assert!(uncorrected.max < 21 * US, "{uncorrected:?}");
        // Corrected: ~10 % of messages waited up to 10 ms, so p90 is still transit but p99 is several ms.
        assert!(corrected.p50 < 21 * US, "{corrected:?}");
        assert!(corrected.p99 > 8 * MS, "{corrected:?}");
        assert!(corrected.max >= 10 * MS, "{corrected:?}");
        assert_eq!(corrected.count, s.measured_messages());
    }

    #[test]
    fn warmup_is_excluded_and_intervals_add_up() {
        let s =
            Schedule::new(0, 1_000, Duration::from_millis(500), Duration::from_secs(2)).unwrap();
        assert_eq!(s.measured_messages(), 2_000);
        let mut rec = LatencyRecorder::new(s, Duration::from_millis(500));
        let mut k = 0;
        while s.in_schedule(k) {
            let intended = s.intended_ns(k);
            // Warm-up messages are slow; measured ones take 50 µs.
            let latency = if s.is_measured(k) { 50 * US } else { 900 * MS };
            rec.record(k, intended, intended + latency);
            k += 1;
        }
        let out = rec.finish();
        assert_eq!(out.received, 2_500);
        assert_eq!(out.measured, 2_000);
        assert_eq!(out.corrected.len(), 2_000);
        assert!(out.corrected.max() < 51 * US);
        assert_eq!(out.intervals.len(), 4);
        let total: u64 = out.intervals.iter().map(|i| i.corrected.len()).sum();
        assert_eq!(total, 2_000);
    }

    #[test]
    fn schedule_counts_match_the_intended_times_at_any_rate() {
        // 3k msg/s does not divide a second: the count must agree with intended_ns one by one (the feed pacer's
        // rounding), not with a rounded interval.
        for rate in [3_000, 7, 1_000, 333_333] {
            let s = Schedule::new(
                5,
                rate,
                Duration::from_millis(137),
                Duration::from_millis(211),
            )
            .unwrap();
            let brute = (0..)
                .take_while(|&k| s.in_schedule(k))
                .filter(|&k| s.is_measured(k))
                .count() as u64;
            assert_eq!(s.measured_messages(), brute, "rate {rate}");
            assert_eq!(s.intended_ns(rate), s.start_ns + 1_000_000_000);
        }
    }

    #[test]
    fn clock_disagreement_and_huge_values_are_counted() {
        let s = schedule(1_000, 100);
        let mut rec = LatencyRecorder::new(s, Duration::from_secs(1));
        let t = s.intended_ns(0);
        rec.record(0, t + 10, t + 5);
        rec.record(1, s.intended_ns(1), s.intended_ns(1) + 2 * MAX_TRACKABLE_NS);
        let out = rec.finish();
        assert_eq!(out.negative, 1);
        assert_eq!(out.clamped, 2);
        assert_eq!(out.corrected.len(), 2);
    }

    #[test]
    fn merge_adds_threads() {
        let s = schedule(1_000, 100);
        let mut a = LatencyRecorder::new(s, Duration::from_secs(1));
        let mut b = LatencyRecorder::new(s, Duration::from_secs(1));
        for k in 0..50 {
            a.record(2 * k, s.intended_ns(2 * k), s.intended_ns(2 * k) + 10 * US);
            b.record(
                2 * k + 1,
                s.intended_ns(2 * k + 1),
                s.intended_ns(2 * k + 1) + 30 * US,
            );
        }
        let m = LatencySamples::merge(vec![a.finish(), b.finish()]).unwrap();
        assert_eq!(m.measured, 100);
        assert_eq!(m.corrected.len(), 100);
        assert_eq!(m.intervals.len(), 1);
        assert!(m.corrected.value_at_quantile(0.25) < 11 * US);
        assert!(m.corrected.value_at_quantile(0.75) >= 29 * US);
    }

    #[test]
    fn bad_rates_are_rejected() {
        assert!(Schedule::new(0, 0, Duration::ZERO, Duration::from_secs(1)).is_err());
        assert!(Schedule::new(0, 2_000_000_000, Duration::ZERO, Duration::from_secs(1)).is_err());
    }
}
