//! How fast a recording is replayed ([`Speed`]) and the one pacer that holds a replay to it ([`ReplayPacer`]),
//! for `tickbox replay` (a journal) and `tickbox feed --source` (a DBN file or journal) alike.
//!
//! The pacer is sans-IO: given a record's capture time and "now", it says send now or wait until a deadline.
//! Deadlines are computed from one anchor (the first record's capture time and the wall time it was sent), so
//! errors never accumulate, and everything due within one time window is sent as a burst: at high multiples the
//! loop sleeps once per window, not once per message.

use std::str::FromStr;

use crate::UnitsError;

/// How fast to replay: `max`, or a factor like `1`, `4`, `0.5` or `10x`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Speed {
    /// As fast as the sockets accept.
    Max,
    /// Original pacing divided by this factor (1.0 = real time, 4.0 = four times faster, 0.5 = half speed).
    Times(f64),
}

impl FromStr for Speed {
    type Err = UnitsError;
    fn from_str(s: &str) -> Result<Self, UnitsError> {
        let t = s.trim();
        if t.eq_ignore_ascii_case("max") {
            return Ok(Speed::Max);
        }
        let num = t.strip_suffix(['x', 'X']).unwrap_or(t);
        match num.parse::<f64>() {
            Ok(k) if k.is_finite() && k > 0.0 => Ok(Speed::Times(k)),
            _ => Err(UnitsError::Speed {
                input: s.to_string(),
                reason: "not `max` or a positive factor",
            }),
        }
    }
}

impl std::fmt::Display for Speed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Speed::Max => write!(f, "max"),
            Speed::Times(k) => write!(f, "{k}x"),
        }
    }
}

/// What to do with the next record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pace {
    /// Send it now.
    Now,
    /// Not yet: ask again at (or shortly before) this wall time, ns.
    WaitUntil(u64),
}

/// Maps capture time to wall time at a given speed.
#[derive(Debug, Clone)]
pub struct ReplayPacer {
    speed: Speed,
    window_ns: u64,
    anchor: Option<(u64, u64)>,
}

impl ReplayPacer {
    /// A pacer that sends every record as soon as it is due, to the nanosecond (no burst window).
    pub fn exact(speed: Speed) -> Self {
        ReplayPacer::new(speed, 0)
    }

    /// `window_ns`: records due within this much of now are sent now (the burst granularity).
    pub fn new(speed: Speed, window_ns: u64) -> Self {
        ReplayPacer {
            speed,
            window_ns,
            anchor: None,
        }
    }

    /// The speed this pacer was built with.
    pub fn speed(&self) -> Speed {
        self.speed
    }

    /// Wall time (ns) at which a record captured at `capture_ns` is due, once anchored.
    pub fn due_ns(&self, capture_ns: u64) -> Option<u64> {
        let Speed::Times(k) = self.speed else {
            return None;
        };
        let (c0, w0) = self.anchor?;
        // Records captured before the anchor (clock steps in the source) are due at the anchor.
        Some(w0 + (capture_ns.saturating_sub(c0) as f64 / k) as u64)
    }

    /// Decides for the next record. The first record anchors the timeline and is always due now.
    pub fn on_record(&mut self, capture_ns: u64, now_ns: u64) -> Pace {
        if self.speed == Speed::Max {
            return Pace::Now;
        }
        if self.anchor.is_none() {
            self.anchor = Some((capture_ns, now_ns));
        }
        match self.due_ns(capture_ns) {
            Some(due) if due > now_ns.saturating_add(self.window_ns) => Pace::WaitUntil(due),
            _ => Pace::Now,
        }
    }

    /// How late a record sent now is against its due time (0 if early or unpaced).
    pub fn lateness_ns(&self, capture_ns: u64, now_ns: u64) -> u64 {
        self.due_ns(capture_ns)
            .map_or(0, |due| now_ns.saturating_sub(due))
    }

    /// How long to wait, from `now_ns`, before a record captured at `capture_ns` is due (zero: send it now).
    /// The first record anchors the timeline.
    pub fn wait_ns(&mut self, capture_ns: u64, now_ns: u64) -> u64 {
        match self.on_record(capture_ns, now_ns) {
            Pace::Now => 0,
            Pace::WaitUntil(due) => due - now_ns,
        }
    }

    /// Forgets the anchor: the next record is due immediately and the timeline restarts from it.
    pub fn reanchor(&mut self) {
        self.anchor = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    /// Drives a pacer the way the replay loop does, with a fake clock that jumps to each deadline (plus a fixed
    /// oversleep). Returns (total wall time, number of waits, worst |send - due|).
    fn simulate(speed: Speed, captures: &[u64], window: u64, oversleep: u64) -> (u64, usize, u64) {
        let mut p = ReplayPacer::new(speed, window);
        let mut now = 5_000 * MS;
        let start = now;
        let (mut waits, mut worst) = (0, 0u64);
        for &c in captures {
            loop {
                match p.on_record(c, now) {
                    Pace::Now => break,
                    Pace::WaitUntil(d) => {
                        assert!(d > now);
                        waits += 1;
                        now = d + oversleep;
                    }
                }
            }
            if let Some(due) = p.due_ns(c) {
                worst = worst.max(due.abs_diff(now));
            }
        }
        (now - start, waits, worst)
    }

    fn stream(duration_ms: u64, every_us: u64) -> Vec<u64> {
        (0..duration_ms * 1000 / every_us)
            .map(|i| 1_000 * MS + i * every_us * 1_000)
            .collect()
    }

    #[test]
    fn real_time_takes_the_recorded_duration() {
        let s = stream(2_000, 1_000); // 2 s, one record per ms
        let (wall, waits, worst) = simulate(Speed::Times(1.0), &s, 200_000, 50_000);
        assert!((1_999 * MS..=2_001 * MS).contains(&wall), "{wall}");
        assert!(waits >= 1_900, "paced per record at 1x: {waits}");
        assert!(worst <= 200_000, "{worst}");
    }

    #[test]
    fn multiples_scale_time_and_batch_by_window() {
        let s = stream(2_000, 10); // 2 s at 100 k records/s
        let (wall, waits, worst) = simulate(Speed::Times(4.0), &s, 200_000, 50_000);
        assert!((499 * MS..=501 * MS).contains(&wall), "{wall}");
        // 500 ms of wall time in 200 us windows: at most ~2500 sleeps for 200 000 records.
        assert!(waits <= 2_600, "{waits} waits");
        assert!(worst <= 200_000, "{worst}");
        let (wall, waits, _) = simulate(Speed::Times(100.0), &s, 200_000, 50_000);
        assert!((19 * MS..=21 * MS).contains(&wall), "{wall}");
        assert!(waits <= 110, "{waits} waits");
        // Half speed: the last record, captured 99 ms after the first, goes out 198 ms after it.
        let (wall, _, _) = simulate(Speed::Times(0.5), &stream(100, 1_000), 200_000, 0);
        assert!((197 * MS..=199 * MS).contains(&wall), "{wall}");
    }

    #[test]
    fn max_never_waits() {
        let s = stream(2_000, 10);
        assert_eq!(simulate(Speed::Max, &s, 200_000, 0), (0, 0, 0));
    }

    #[test]
    fn oversleeping_does_not_accumulate_drift() {
        // Each wait overshoots by 1 ms, yet the end lands on schedule: deadlines come from the anchor.
        let s = stream(1_000, 5_000);
        let (wall, _, worst) = simulate(Speed::Times(1.0), &s, 0, MS);
        assert!(wall <= 1_001 * MS, "{wall}");
        assert!(worst <= MS);
    }

    #[test]
    fn backwards_capture_time_is_sent_immediately() {
        let mut p = ReplayPacer::new(Speed::Times(1.0), 0);
        assert_eq!(p.on_record(10 * MS, 100 * MS), Pace::Now);
        assert_eq!(p.on_record(20 * MS, 100 * MS), Pace::WaitUntil(110 * MS));
        assert_eq!(p.on_record(5 * MS, 111 * MS), Pace::Now);
        p.reanchor();
        assert_eq!(p.on_record(50 * MS, 200 * MS), Pace::Now);
        assert_eq!(p.lateness_ns(50 * MS, 203 * MS), 3 * MS);
    }

    #[test]
    fn speed_parsing() {
        assert_eq!("max".parse::<Speed>(), Ok(Speed::Max));
        assert_eq!("4".parse::<Speed>(), Ok(Speed::Times(4.0)));
        assert_eq!("10x".parse::<Speed>(), Ok(Speed::Times(10.0)));
        assert_eq!("10X".parse::<Speed>(), Ok(Speed::Times(10.0)));
        assert_eq!("0.5".parse::<Speed>(), Ok(Speed::Times(0.5)));
        for bad in ["0", "0x", "-1", "-2", "fast", "", "inf", "infx", "NaN"] {
            assert!(bad.parse::<Speed>().is_err(), "{bad}");
        }
        let err = "fast".parse::<Speed>().unwrap_err().to_string();
        assert!(err.contains("speed") && err.contains("\"fast\""), "{err}");
        for speed in [Speed::Max, Speed::Times(10.0), Speed::Times(0.5)] {
            assert_eq!(speed.to_string().parse::<Speed>(), Ok(speed));
        }
    }

    #[test]
    fn exact_pacing_keeps_spacing_divided_by_speed_and_never_waits_for_the_past() {
        // What `feed --source` asks of the pacer: no burst window, a wait to the nanosecond.
        let w0 = 7_000 * MS;
        let mut s = ReplayPacer::exact(Speed::Times(10.0));
        assert_eq!(s.wait_ns(1_000 * MS, w0), 0);
        // One second of recording later is 100 ms of wall time at 10x.
        assert_eq!(s.wait_ns(2_000 * MS, w0), 100 * MS);
        assert_eq!(s.wait_ns(2_000 * MS, w0 + 40 * MS), 60 * MS);
        // Earlier than the anchor (an out-of-order recording): now.
        assert_eq!(s.wait_ns(5, w0), 0);
        let mut max = ReplayPacer::exact(Speed::Max);
        assert_eq!(max.wait_ns(1, w0), 0);
        assert_eq!(max.wait_ns(u64::MAX, w0), 0);
    }
}
