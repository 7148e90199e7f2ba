//! The sans-IO pacer: told "now is t", it says how many messages are due or until when to wait.
//!
//! Every deadline is computed from the start time and the message index, never by adding an interval to the
//! previous send, so rounding and late wake-ups never accumulate into drift: a shard that wakes up late sends
//! everything that became due meanwhile in one batch and is back on schedule.

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

const NS_PER_SEC: u128 = 1_000_000_000;

/// When message `k` of a [`Pacing::Paced`] schedule at `per_second` is due, in ns after the schedule's start:
/// `ceil(k * 1e9 / per_second)`. Public so a reader of the feed (the latency bench) can rebuild each message's
/// intended send time from its sequence and the start the feed reports, exactly as the pacer computed it.
pub fn paced_offset_ns(per_second: u64, k: u64) -> u64 {
    (u128::from(k) * NS_PER_SEC).div_ceil(u128::from(per_second.max(1))) as u64
}

/// A schedule of message send times.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Pacing {
    /// Message `k` is due at `start + k / per_second`.
    Paced {
        /// Messages per second, at least 1.
        per_second: u64,
    },
    /// Bursts arrive as a Poisson process at `per_second / mean_burst`; burst sizes are geometric with mean
    /// `mean_burst` (so `1.0` is plain Poisson arrivals). The long-run rate is `per_second`.
    Bursty {
        /// Long-run messages per second, at least 1.
        per_second: u64,
        /// Mean burst size, at least 1.
        mean_burst: f64,
    },
    /// Always due: as fast as the caller can send.
    FlatOut,
    /// `initial` messages due at once, then one every `interval_ns` (the Guide's pathological publisher).
    Pathological {
        /// Messages due at the start (one per topic).
        initial: u64,
        /// Gap between the later messages, nanoseconds.
        interval_ns: u64,
    },
}

/// What the caller should do now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// Send this many messages now (at least one, at most the batch limit).
    Send(usize),
    /// Nothing is due before this time (same clock as `poll`'s `now_ns`).
    WaitUntil(u64),
}

/// The pacing state machine. Time is any monotonic nanosecond count chosen by the caller.
#[derive(Debug, Clone)]
pub struct SendPacer {
    pacing: Pacing,
    max_batch: usize,
    max_lag_ns: u64,
    /// Start of the current schedule (moves only when the pacer skips ahead after a long stall).
    base_ns: u64,
    /// Messages handed out since `base_ns`.
    issued_since_base: u64,
    issued_total: u64,
    skipped_ns: u64,
    // Bursty state: the next burst's arrival (ns after base, fractional) and messages due but not yet issued.
    next_burst_at: f64,
    pending: u64,
    rng: SmallRng,
}

impl SendPacer {
    /// A schedule starting at `start_ns`. `max_batch` caps one `Send`; `max_lag_ns` is how far behind the
    /// pacer may fall before it skips ahead instead of catching up (0 = always catch up).
    pub fn new(
        pacing: Pacing,
        start_ns: u64,
        seed: u64,
        max_batch: usize,
        max_lag_ns: u64,
    ) -> Self {
        let mut pacer = SendPacer {
            pacing,
            max_batch: max_batch.max(1),
            max_lag_ns,
            base_ns: start_ns,
            issued_since_base: 0,
            issued_total: 0,
            skipped_ns: 0,
            next_burst_at: 0.0,
            pending: 0,
            rng: SmallRng::seed_from_u64(seed),
        };
        if let Pacing::Bursty { .. } = pacing {
            pacer.next_burst_at = pacer.burst_gap_ns();
        }
        pacer
    }

    /// The schedule this pacer follows.
    pub fn pacing(&self) -> Pacing {
        self.pacing
    }

    /// Messages handed out so far by `Send` steps.
    pub fn issued(&self) -> u64 {
        self.issued_total
    }

    /// Schedule time given up by skipping ahead after stalls longer than `max_lag_ns`.
    pub fn skipped_ns(&self) -> u64 {
        self.skipped_ns
    }

    /// The caller must send every message a `Send(n)` step hands out before polling again.
    pub fn poll(&mut self, now_ns: u64) -> Step {
        let elapsed = now_ns.saturating_sub(self.base_ns);
        let (due, next) = match self.pacing {
            Pacing::FlatOut => (self.max_batch as u64, now_ns),
            Pacing::Paced { per_second } => {
                let rate = u128::from(per_second.max(1));
                // Messages 0..=k are due when k * 1e9 <= elapsed * rate.
                let due_total = (u128::from(elapsed) * rate / NS_PER_SEC) as u64 + 1;
                if self.max_lag_ns > 0 && elapsed > self.max_lag_ns {
                    let behind = due_total.saturating_sub(self.issued_since_base);
                    let lag_ns = (u128::from(behind) * NS_PER_SEC / rate) as u64;
                    if lag_ns > self.max_lag_ns {
                        return self.skip_ahead(now_ns, lag_ns);
                    }
                }
                let k = self.issued_since_base;
                let next = self.base_ns + paced_offset_ns(per_second, k);
                (due_total.saturating_sub(k), next)
            }
            Pacing::Bursty { .. } => {
                let behind = elapsed as f64 - self.next_burst_at;
                if self.max_lag_ns > 0 && behind > self.max_lag_ns as f64 {
                    // The bursts that arrived during a long stall are dropped, not flooded out late.
                    self.skipped_ns += behind as u64;
                    self.next_burst_at = elapsed as f64;
                }
                while self.next_burst_at <= elapsed as f64 {
                    self.pending += self.burst_size();
                    self.next_burst_at += self.burst_gap_ns();
                }
                let next = self.base_ns + self.next_burst_at.ceil() as u64;
                (self.pending, next)
            }
            Pacing::Pathological {
                initial,
                interval_ns,
            } => {
                let interval = u128::from(interval_ns.max(1));
                let due_total =
                    initial + (u128::from(elapsed) / interval).min(u128::from(u64::MAX / 2)) as u64;
                let k = self.issued_since_base;
                let next = if k < initial {
                    self.base_ns
                } else {
                    self.base_ns + ((u128::from(k - initial) + 1) * interval) as u64
                };
                (due_total.saturating_sub(k), next)
            }
        };
        if due == 0 {
            return Step::WaitUntil(next.max(now_ns + 1));
        }
        let n = due.min(self.max_batch as u64);
        self.issued_since_base += n;
        self.issued_total += n;
        if let Pacing::Bursty { .. } = self.pacing {
            self.pending -= n;
        }
        Step::Send(n as usize)
    }

    fn skip_ahead(&mut self, now_ns: u64, lag_ns: u64) -> Step {
        self.skipped_ns += lag_ns;
        self.base_ns = now_ns;
        self.issued_since_base = 0;
        self.poll(now_ns)
    }

    fn burst_gap_ns(&mut self) -> f64 {
        let Pacing::Bursty {
            per_second,
            mean_burst,
        } = self.pacing
        else {
            return 0.0;
        };
        let bursts_per_ns = per_second.max(1) as f64 / mean_burst.max(1.0) / 1e9;
        // Exponential inter-arrival time by inversion; `1 - u` is in (0, 1] so the log is finite.
        let u: f64 = self.rng.gen();
        -(1.0 - u).ln() / bursts_per_ns
    }

    fn burst_size(&mut self) -> u64 {
        let Pacing::Bursty { mean_burst, .. } = self.pacing else {
            return 1;
        };
        if mean_burst <= 1.0 {
            return 1;
        }
        // Geometric on {1, 2, ...} with mean `mean_burst`, by inversion.
        let p = 1.0 / mean_burst;
        let u: f64 = self.rng.gen();
        let k = ((1.0 - u).ln() / (1.0 - p).ln()).floor();
        1 + k.min(1e9) as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SEC: u64 = 1_000_000_000;

    /// Drives a pacer the way the shard loop does: jump to each deadline, then poll until it says wait.
    fn run_until(pacer: &mut SendPacer, end_ns: u64, late_by_ns: u64) -> Vec<(u64, usize)> {
        let mut now = 0;
        let mut sends = Vec::new();
        while now < end_ns {
            match pacer.poll(now) {
                Step::Send(n) => sends.push((now, n)),
                Step::WaitUntil(t) => {
                    assert!(t > now, "deadline {t} not after now {now}");
                    now = t + late_by_ns;
                }
            }
        }
        sends
    }

    #[test]
    fn paced_sends_exactly_on_schedule() {
        let mut pacer = SendPacer::new(Pacing::Paced { per_second: 1_000 }, 0, 1, 64, 0);
        let sends = run_until(&mut pacer, SEC, 0);
        assert_eq!(sends.len(), 1_000);
        for (k, &(t, n)) in sends.iter().enumerate() {
            assert_eq!(n, 1);
            assert_eq!(t, k as u64 * 1_000_000);
        }
    }

    #[test]
    fn late_wakeups_batch_without_drift() {
        // Waking 3.7 ms late every time (a sleepy OS) still sends exactly the scheduled count, in batches.
        let mut pacer = SendPacer::new(Pacing::Paced { per_second: 10_000 }, 0, 1, 1_000, 0);
        let sends = run_until(&mut pacer, 10 * SEC, 3_700_000);
        let total: usize = sends.iter().map(|s| s.1).sum();
        let end = sends.last().unwrap().0;
        let expected = (end as u128 * 10_000 / SEC as u128) as usize + 1;
        assert_eq!(total, expected);
        assert!(sends.iter().any(|s| s.1 > 30), "late wake-ups should batch");
        assert!((99_000..=100_100).contains(&total), "{total}");
    }

    #[test]
    fn odd_rates_do_not_drift() {
        // 3 msg/s does not divide 1e9; over an hour the count is still exact.
        let mut pacer = SendPacer::new(Pacing::Paced { per_second: 3 }, 5, 1, 8, 0);
        let mut sent = 0usize;
        let mut now = 5;
        while now < 5 + 3_600 * SEC {
            match pacer.poll(now) {
                Step::Send(n) => sent += n,
                Step::WaitUntil(t) => now = t,
            }
        }
        assert_eq!(sent, 3 * 3_600);
    }

    #[test]
    fn batches_are_capped() {
        let mut pacer = SendPacer::new(
            Pacing::Paced {
                per_second: 1_000_000,
            },
            0,
            1,
            100,
            0,
        );
        assert_eq!(pacer.poll(0), Step::Send(1));
        assert_eq!(pacer.poll(SEC / 1_000), Step::Send(100));
        assert_eq!(pacer.poll(SEC / 1_000), Step::Send(100));
        assert_eq!(pacer.issued(), 201);
    }

    #[test]
    fn long_stall_skips_ahead_instead_of_flooding() {
        let mut pacer = SendPacer::new(
            Pacing::Paced { per_second: 1_000 },
            0,
            1,
            10_000,
            100_000_000,
        );
        assert_eq!(pacer.poll(0), Step::Send(1));
        // Stalled for 5 s: the pacer skips the backlog rather than sending 5,000 at once.
        let step = pacer.poll(5 * SEC);
        assert_eq!(step, Step::Send(1));
        assert!(pacer.skipped_ns() >= 4 * SEC, "{}", pacer.skipped_ns());
        // And is on a fresh schedule from there.
        assert_eq!(
            pacer.poll(5 * SEC + 1),
            Step::WaitUntil(5 * SEC + 1_000_000)
        );
    }

    #[test]
    fn flat_out_always_sends_a_full_batch() {
        let mut pacer = SendPacer::new(Pacing::FlatOut, 0, 1, 64, 0);
        for t in [0, 0, 1, 1_000] {
            assert_eq!(pacer.poll(t), Step::Send(64));
        }
    }

    #[test]
    fn bursty_holds_the_mean_rate_and_is_overdispersed() {
        let mut pacer = SendPacer::new(
            Pacing::Bursty {
                per_second: 50_000,
                mean_burst: 20.0,
            },
            0,
            42,
            1_000_000,
            0,
        );
        let sends = run_until(&mut pacer, 20 * SEC, 0);
        let total: usize = sends.iter().map(|s| s.1).sum();
        let rate = total as f64 / 20.0;
        assert!((47_500.0..52_500.0).contains(&rate), "rate {rate}");
        // Count per 1 ms window: bursts make the variance far above the mean (Poisson would be ~1).
        let mut windows = vec![0f64; 20_000];
        for &(t, n) in &sends {
            windows[(t / 1_000_000).min(19_999) as usize] += n as f64;
        }
        let mean = windows.iter().sum::<f64>() / windows.len() as f64;
        let var = windows.iter().map(|w| (w - mean).powi(2)).sum::<f64>() / windows.len() as f64;
        assert!(var / mean > 10.0, "index of dispersion {}", var / mean);
        let mean_batch = total as f64 / sends.len() as f64;
        assert!(
            (15.0..25.0).contains(&mean_batch),
            "mean burst {mean_batch}"
        );
    }

    #[test]
    fn bursty_with_unit_bursts_is_poisson() {
        let mut pacer = SendPacer::new(
            Pacing::Bursty {
                per_second: 10_000,
                mean_burst: 1.0,
            },
            0,
            7,
            1_000,
            0,
        );
        let sends = run_until(&mut pacer, 20 * SEC, 0);
        let mut windows = vec![0f64; 20_000];
        for &(t, n) in &sends {
            windows[(t / 1_000_000).min(19_999) as usize] += n as f64;
        }
        let mean = windows.iter().sum::<f64>() / windows.len() as f64;
        let var = windows.iter().map(|w| (w - mean).powi(2)).sum::<f64>() / windows.len() as f64;
        assert!((9.0..11.0).contains(&mean), "mean {mean}");
        assert!(
            (0.85..1.15).contains(&(var / mean)),
            "dispersion {}",
            var / mean
        );
    }

    #[test]
    fn bursty_is_deterministic_per_seed() {
        let pacing = Pacing::Bursty {
            per_second: 10_000,
            mean_burst: 5.0,
        };
        let a = run_until(&mut SendPacer::new(pacing, 0, 9, 100, 0), SEC, 0);
        let b = run_until(&mut SendPacer::new(pacing, 0, 9, 100, 0), SEC, 0);
        let c = run_until(&mut SendPacer::new(pacing, 0, 10, 100, 0), SEC, 0);
        assert_eq!(a, b);
        assert_ne!(a, c);
    }

    #[test]
    fn pathological_sends_every_topic_then_one_per_interval() {
        let mut pacer = SendPacer::new(
            Pacing::Pathological {
                initial: 500,
                interval_ns: SEC,
            },
            0,
            1,
            128,
            0,
        );
        let mut first = 0;
        while let Step::Send(n) = pacer.poll(0) {
            first += n;
        }
        assert_eq!(first, 500);
        assert_eq!(pacer.poll(10), Step::WaitUntil(SEC));
        assert_eq!(pacer.poll(SEC), Step::Send(1));
        assert_eq!(pacer.poll(SEC + 5), Step::WaitUntil(2 * SEC));
        assert_eq!(pacer.poll(3 * SEC), Step::Send(2));
    }
}
