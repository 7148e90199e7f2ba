//! How the live status lines of long-running commands spell rates and short durations, and the per-second rate
//! of a counter sampled at each report. One spelling for every component's line, so `12.3k/s` and `850us` read
//! the same in `feed`, `subscribe`, `record`, `replay` and `lvc`.

use std::time::Instant;

/// A per-second rate from a counter sampled at each report.
#[derive(Debug)]
pub struct RateMeter {
    last: (Instant, u64),
}

impl Default for RateMeter {
    /// Counting from zero now, so the first report is the rate since the start.
    fn default() -> Self {
        RateMeter {
            last: (Instant::now(), 0),
        }
    }
}

impl RateMeter {
    /// Counts per second since the previous call (since creation for the first).
    pub fn per_sec(&mut self, count: u64) -> f64 {
        self.per_sec_at(count, Instant::now())
    }

    /// [`RateMeter::per_sec`] at `now` (a counter that went backwards counts as no progress).
    pub fn per_sec_at(&mut self, count: u64, now: Instant) -> f64 {
        let (t, c) = self.last;
        self.last = (now, count);
        count.saturating_sub(c) as f64 / now.duration_since(t).as_secs_f64().max(1e-9)
    }
}

/// A rate as `950/s`, `12.3k/s`, `2.50M/s`.
pub fn format_rate(per_sec: f64) -> String {
    if per_sec >= 1e6 {
        format!("{:.2}M/s", per_sec / 1e6)
    } else if per_sec >= 1e3 {
        format!("{:.1}k/s", per_sec / 1e3)
    } else {
        format!("{per_sec:.0}/s")
    }
}

/// A duration in ns as `850us`, `12.3ms`, `1.20s`.
pub fn format_ns_short(ns: u64) -> String {
    if ns >= 1_000_000_000 {
        format!("{:.2}s", ns as f64 / 1e9)
    } else if ns >= 1_000_000 {
        format!("{:.1}ms", ns as f64 / 1e6)
    } else {
        format!("{}us", ns / 1_000)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn rates_and_durations_read_plainly() {
        assert_eq!(format_rate(0.0), "0/s");
        assert_eq!(format_rate(12_345.0), "12.3k/s");
        assert_eq!(format_rate(2_500_000.0), "2.50M/s");
        assert_eq!(format_ns_short(850_000), "850us");
        assert_eq!(format_ns_short(12_345_678), "12.3ms");
        assert_eq!(format_ns_short(1_200_000_000), "1.20s");
    }

    #[test]
    fn a_meter_gives_the_rate_since_its_last_sample() {
        let start = Instant::now();
        let mut meter = RateMeter { last: (start, 0) };
        let rate = meter.per_sec_at(500, start + Duration::from_millis(500));
        assert!((rate - 1000.0).abs() < 1e-6, "{rate}");
        let rate = meter.per_sec_at(800, start + Duration::from_secs(1));
        assert!((rate - 600.0).abs() < 1e-6, "{rate}");
        assert_eq!(
            meter.per_sec_at(100, start + Duration::from_secs(2)),
            0.0,
            "a reset counter is no progress"
        );
    }
}
