//! The Suicidal Snail check as a sans-IO engine: given a header and "now", say whether the message is on time.
//!
//! Lateness is local receive time minus the publisher's send time, so it includes network, queueing in ZeroMQ and
//! (when checked at a worker's dequeue) time spent waiting behind a slow worker. The Guide's rule: a subscriber
//! that cannot keep up should die loudly rather than process stale data quietly.
#![deny(clippy::disallowed_methods, clippy::disallowed_types)]

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tickbox_wire::{Flags, Header};

use crate::clock::delay_ns;
use crate::SnailMode;

/// The outcome of one check.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SnailVerdict {
    /// Within the threshold; `lateness_ns` is for the histogram.
    OnTime {
        /// Lateness in ns (0 for a send time in the future).
        lateness_ns: u64,
    },
    /// Past the threshold: the subscriber must die.
    Late {
        /// Lateness in ns, above the threshold.
        lateness_ns: u64,
    },
    /// Old by design (an LVC cached value): neither timed nor counted.
    Exempt,
}

/// The threshold check. `Copy` and branch-light: it runs on every message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Snail {
    threshold_ns: u64,
}

impl Snail {
    /// A zero threshold disables the guard (every message is on time) while still measuring lateness.
    pub fn new(threshold: Duration) -> Self {
        Snail {
            threshold_ns: threshold_to_ns(threshold),
        }
    }

    /// The threshold in ns; `u64::MAX` when the guard is disabled (nothing can be later than that).
    pub fn threshold_ns(&self) -> u64 {
        self.threshold_ns
    }

    /// Judges a message received at `now_ns`. A send time in the future (clock skew between hosts) counts as zero
    /// lateness rather than wrapping.
    #[inline]
    pub fn check(&self, header: &Header, now_ns: u64) -> SnailVerdict {
        if header.flags.contains(Flags::CACHED) {
            return SnailVerdict::Exempt;
        }
        let lateness_ns = now_ns.saturating_sub(header.send_time_ns);
        if lateness_ns > self.threshold_ns {
            SnailVerdict::Late { lateness_ns }
        } else {
            SnailVerdict::OnTime { lateness_ns }
        }
    }

    /// Judges a lateness measured by the caller ([`lateness_ns`]); the caller decides what is exempt.
    #[inline]
    pub fn judge(&self, lateness_ns: u64) -> SnailVerdict {
        if lateness_ns > self.threshold_ns {
            SnailVerdict::Late { lateness_ns }
        } else {
            SnailVerdict::OnTime { lateness_ns }
        }
    }
}

/// A message's lateness at `now_ns` under `mode`. `min_delay_ns` is the publisher's minimum observed delay
/// ([`crate::ClockTable`]); without one (an untracked publisher) the skew-tolerant mode falls back to strict.
#[inline]
pub fn lateness_ns(
    mode: SnailMode,
    now_ns: u64,
    send_time_ns: u64,
    min_delay_ns: Option<i64>,
) -> u64 {
    match (mode, min_delay_ns) {
        (SnailMode::SkewTolerant, Some(min)) => {
            delay_ns(now_ns, send_time_ns).saturating_sub(min).max(0) as u64
        }
        _ => now_ns.saturating_sub(send_time_ns),
    }
}

/// Zero means "disabled", stored as the largest threshold so the hot check stays a single comparison.
fn threshold_to_ns(threshold: Duration) -> u64 {
    let ns = u64::try_from(threshold.as_nanos()).unwrap_or(u64::MAX);
    if ns == 0 {
        u64::MAX
    } else {
        ns
    }
}

/// A snail threshold that can be changed while the subscriber runs (live configuration). Clones share one value:
/// the control loop writes it, every shard and worker reads it once per message with a relaxed atomic load (no
/// lock), so a change takes effect from the next message on.
#[derive(Debug, Clone)]
pub struct SharedThreshold(Arc<AtomicU64>);

impl SharedThreshold {
    /// `Duration::ZERO` disables the guard, as in [`Snail::new`].
    pub fn new(threshold: Duration) -> Self {
        SharedThreshold(Arc::new(AtomicU64::new(threshold_to_ns(threshold))))
    }

    /// Changes the threshold for every clone, from each reader's next message on; `Duration::ZERO` disables the
    /// guard.
    pub fn set(&self, threshold: Duration) {
        self.0.store(threshold_to_ns(threshold), Ordering::Relaxed);
    }

    /// The current threshold; `Duration::ZERO` when the guard is disabled.
    pub fn get(&self) -> Duration {
        match self.0.load(Ordering::Relaxed) {
            u64::MAX => Duration::ZERO,
            ns => Duration::from_nanos(ns),
        }
    }

    /// The engine with the threshold as of now.
    #[inline]
    pub fn snail(&self) -> Snail {
        Snail {
            threshold_ns: self.0.load(Ordering::Relaxed),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tickbox_wire::{Clock, Kind, ManualClock};

    const T0: u64 = 1_700_000_000_000_000_000;

    #[test]
    fn fires_only_past_the_threshold_on_a_fake_clock() {
        let clock = ManualClock::new(T0);
        let snail = Snail::new(Duration::from_micros(250));
        let header = Header::live(Kind::Quote, 1, 1, T0);
        clock.advance(250_000);
        assert_eq!(
            snail.check(&header, clock.now_ns()),
            SnailVerdict::OnTime {
                lateness_ns: 250_000
            }
        );
        clock.advance(1);
        assert_eq!(
            snail.check(&header, clock.now_ns()),
            SnailVerdict::Late {
                lateness_ns: 250_001
            }
        );
    }

    #[test]
    fn cached_values_are_exempt_however_old() {
        let snail = Snail::new(Duration::from_millis(1));
        let mut header = Header::live(Kind::Trade, 1, 1, T0);
        header.flags = Flags::CACHED;
        assert_eq!(
            snail.check(&header, T0 + 3_600_000_000_000),
            SnailVerdict::Exempt
        );
        // A replayed (re-stamped) message is judged on its new send time, not its origin.
        header.flags = Flags::REPLAY;
        header.origin_time_ns = T0 - 86_400_000_000_000;
        assert_eq!(
            snail.check(&header, T0 + 10),
            SnailVerdict::OnTime { lateness_ns: 10 }
        );
    }

    #[test]
    fn skew_tolerant_lateness_is_relative_to_the_best_delay() {
        const S: u64 = 1_000_000_000;
        let send = T0;
        // Publisher 1.5 s behind: strict sees 1.5 s, skew-tolerant only what exceeds the best delay.
        let now = T0 + 3 * S / 2 + 2_000;
        let min = Some(3 * S as i64 / 2 + 1_000);
        assert_eq!(
            lateness_ns(SnailMode::Strict, now, send, min),
            3 * S / 2 + 2_000
        );
        assert_eq!(lateness_ns(SnailMode::SkewTolerant, now, send, min), 1_000);
        // Publisher 10 s ahead: strict sees nothing, skew-tolerant sees the 2 s of real lateness.
        let min = Some(-10 * S as i64);
        let now = T0 - 8 * S;
        assert_eq!(lateness_ns(SnailMode::Strict, now, send, min), 0);
        assert_eq!(lateness_ns(SnailMode::SkewTolerant, now, send, min), 2 * S);
        // Better than the best (the minimum is updated by the caller first, but never negative).
        assert_eq!(lateness_ns(SnailMode::SkewTolerant, T0, send, Some(5)), 0);
        assert_eq!(lateness_ns(SnailMode::SkewTolerant, T0 + 7, send, None), 7);
        let snail = Snail::new(Duration::from_nanos(10));
        assert_eq!(snail.judge(10), SnailVerdict::OnTime { lateness_ns: 10 });
        assert_eq!(snail.judge(11), SnailVerdict::Late { lateness_ns: 11 });
    }

    #[test]
    fn clock_skew_is_zero_lateness_and_zero_threshold_disables() {
        let snail = Snail::new(Duration::from_millis(1));
        let header = Header::live(Kind::Quote, 1, 1, T0 + 5_000);
        assert_eq!(
            snail.check(&header, T0),
            SnailVerdict::OnTime { lateness_ns: 0 }
        );
        let off = Snail::new(Duration::ZERO);
        assert!(matches!(
            off.check(&header, u64::MAX),
            SnailVerdict::OnTime { .. }
        ));
    }
}
