//! `--idle-exit`: stop once frames have stopped arriving for a while, after the first one. The clock is a plain
//! value fed the received count and the time, so every loop that runs subscribers (one subscriber, a shard group)
//! applies the same rule and the rule is tested without sockets.

use std::time::{Duration, Instant};

/// When frames last arrived, judged against an idle limit.
#[derive(Debug, Clone, Copy)]
pub struct IdleClock {
    limit: Duration,
    /// Frames received so far, as last seen.
    received: u64,
    /// When `received` last changed (or the clock was made).
    since: Instant,
}

impl IdleClock {
    /// A clock that trips `limit` after the last new frame; it cannot trip before the first frame.
    pub fn new(limit: Duration, now: Instant) -> Self {
        IdleClock {
            limit,
            received: 0,
            since: now,
        }
    }

    /// The idle limit.
    pub fn limit(&self) -> Duration {
        self.limit
    }

    /// Feeds the total frames received so far; true once at least one frame arrived and none has for `limit`.
    pub fn is_idle(&mut self, received: u64, now: Instant) -> bool {
        if received != self.received {
            self.received = received;
            self.since = now;
            return false;
        }
        received > 0 && now.saturating_duration_since(self.since) >= self.limit
    }

    /// Frames are arriving that the count does not show yet (live records held while catching up): not idle, and
    /// the limit counts from now.
    pub fn hold(&mut self, now: Instant) {
        self.since = now;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn a_held_stream_is_not_idle() {
        let t0 = Instant::now();
        let mut idle = IdleClock::new(10 * MS, t0);
        assert!(!idle.is_idle(5, t0));
        idle.hold(t0 + 15 * MS);
        assert!(!idle.is_idle(5, t0 + 20 * MS));
        assert!(idle.is_idle(5, t0 + 25 * MS));
    }

    #[test]
    fn never_idle_before_the_first_frame() {
        let t0 = Instant::now();
        let mut idle = IdleClock::new(10 * MS, t0);
        assert!(!idle.is_idle(0, t0 + 1000 * MS));
    }

    #[test]
    fn idle_once_the_count_stops_moving_for_the_limit() {
        let t0 = Instant::now();
        let mut idle = IdleClock::new(10 * MS, t0);
        assert!(!idle.is_idle(5, t0 + 20 * MS));
        assert!(!idle.is_idle(5, t0 + 29 * MS));
        assert!(idle.is_idle(5, t0 + 30 * MS));
    }

    #[test]
    fn a_new_frame_restarts_the_clock() {
        let t0 = Instant::now();
        let mut idle = IdleClock::new(10 * MS, t0);
        assert!(!idle.is_idle(1, t0));
        assert!(!idle.is_idle(2, t0 + 9 * MS));
        assert!(!idle.is_idle(2, t0 + 18 * MS));
        assert!(idle.is_idle(2, t0 + 19 * MS));
        assert_eq!(idle.limit(), 10 * MS);
    }
}
