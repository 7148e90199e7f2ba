//! Heartbeat liveness and exponential back-off: the timing rules of 6/PPP, kept in one place so every
//! heartbeating conversation follows the same clock. [`Liveness`] (with [`Backoff`]) is the client/worker side
//! (Paranoid Pirate worker, Majordomo worker); [`PeerClock`] is the server side, one per connected worker
//! (Majordomo broker, Paranoid Pirate queue).
#![deny(clippy::disallowed_methods, clippy::disallowed_types)]

use std::time::{Duration, Instant};

/// Exponential back-off: `initial`, doubling on every use up to `max`, back to `initial` after `reset`.
#[derive(Clone, Debug)]
pub struct Backoff {
    initial: Duration,
    max: Duration,
    current: Duration,
}

impl Backoff {
    /// Starts at `initial`; `max` is raised to `initial` if lower.
    pub fn new(initial: Duration, max: Duration) -> Self {
        Self {
            initial,
            max: max.max(initial),
            current: initial,
        }
    }

    /// The delay to wait now; the next one is twice as long (capped).
    pub fn next_delay(&mut self) -> Duration {
        let d = self.current;
        self.current = (self.current * 2).min(self.max);
        d
    }

    /// Back to the initial delay (the peer answered).
    pub fn reset(&mut self) {
        self.current = self.initial;
    }
}

/// What [`Liveness::handle_timeout`] says is due.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LivenessEvent {
    /// Nothing is due.
    Idle,
    /// Send a heartbeat now.
    SendHeartbeat,
    /// The peer has been silent for `liveness` intervals: drop the connection and reconnect after the delay.
    PeerDead {
        /// The back-off delay before reconnecting (doubles on every consecutive death).
        reconnect_after: Duration,
    },
}

/// Heartbeat bookkeeping for one conversation: when to send the next heartbeat and when the peer is presumed
/// dead. Sending real traffic postpones our heartbeat; hearing anything from the peer proves it alive.
#[derive(Clone, Debug)]
pub struct Liveness {
    interval: Duration,
    liveness: u32,
    expiry: Instant,
    next_heartbeat: Instant,
    backoff: Backoff,
}

impl Liveness {
    /// Heartbeat every `interval`; the peer is dead after `liveness` silent intervals; reconnect delays back off
    /// from `reconnect` to `reconnect_max`.
    pub fn new(
        interval: Duration,
        liveness: u32,
        reconnect: Duration,
        reconnect_max: Duration,
        now: Instant,
    ) -> Self {
        let interval = interval.max(Duration::from_millis(1));
        Self {
            interval,
            liveness: liveness.max(1),
            expiry: now + interval * liveness.max(1),
            next_heartbeat: now + interval,
            backoff: Backoff::new(reconnect, reconnect_max),
        }
    }

    /// A new conversation starts: the peer gets a full `liveness` allowance again (back-off is kept).
    pub fn restart(&mut self, now: Instant) {
        self.expiry = now + self.interval * self.liveness;
        self.next_heartbeat = now + self.interval;
    }

    /// Anything arrived from the peer.
    pub fn heard(&mut self, now: Instant) {
        self.expiry = now + self.interval * self.liveness;
        self.backoff.reset();
    }

    /// We sent something that the peer will take as proof of life.
    pub fn sent(&mut self, now: Instant) {
        self.next_heartbeat = now + self.interval;
    }

    /// What is due at `now`. Reports `PeerDead` once per silent period (the caller restarts the conversation).
    pub fn handle_timeout(&mut self, now: Instant) -> LivenessEvent {
        if now >= self.expiry {
            // Park the timers until the caller calls `restart`.
            self.expiry = now + Duration::from_secs(86_400 * 365);
            self.next_heartbeat = self.expiry;
            return LivenessEvent::PeerDead {
                reconnect_after: self.backoff.next_delay(),
            };
        }
        if now >= self.next_heartbeat {
            self.next_heartbeat = now + self.interval;
            return LivenessEvent::SendHeartbeat;
        }
        LivenessEvent::Idle
    }

    /// The next instant [`Liveness::handle_timeout`] may have something to report; always `Some` (a parked
    /// conversation reports a year ahead).
    pub fn poll_timeout(&self) -> Option<Instant> {
        Some(self.expiry.min(self.next_heartbeat))
    }
}

/// The server side of a heartbeat conversation: how a broker or queue times one connected worker. The peer is
/// presumed dead `interval × liveness` after it was last heard; a heartbeat to it is due `interval` after we last
/// sent it anything. The Majordomo broker and the Paranoid Pirate queue each keep one per worker.
#[derive(Clone, Debug)]
pub struct PeerClock {
    interval: Duration,
    expiry_after: Duration,
    expiry: Instant,
    next_heartbeat: Instant,
}

impl PeerClock {
    /// A peer just heard from (and just sent to) at `now`. `interval` is used as given (callers clamp it);
    /// `liveness` counts at least one interval.
    pub fn new(interval: Duration, liveness: u32, now: Instant) -> Self {
        let expiry_after = interval * liveness.max(1);
        Self {
            interval,
            expiry_after,
            expiry: now + expiry_after,
            next_heartbeat: now + interval,
        }
    }

    /// Anything arrived from the peer: it gets a full allowance again.
    pub fn heard(&mut self, now: Instant) {
        self.expiry = now + self.expiry_after;
    }

    /// We sent the peer something it takes as proof of life: the next heartbeat moves out by one interval.
    pub fn sent(&mut self, now: Instant) {
        self.next_heartbeat = now + self.interval;
    }

    /// The peer has been silent for its whole allowance.
    pub fn is_expired(&self, now: Instant) -> bool {
        self.expiry <= now
    }

    /// A heartbeat to the peer is due (call [`PeerClock::sent`] when it goes out).
    pub fn heartbeat_due(&self, now: Instant) -> bool {
        self.next_heartbeat <= now
    }
}

#[cfg(test)]
// A test reads the clock once for an origin and moves simulated time on from there; the engine never reads it.
#[allow(clippy::disallowed_methods)]
mod tests {
    use super::*;
    use crate::ms;

    #[test]
    fn backoff_doubles_to_cap_and_resets() {
        let mut b = Backoff::new(ms(1000), ms(32_000));
        let seq: Vec<_> = (0..8).map(|_| b.next_delay().as_millis()).collect();
        assert_eq!(
            seq,
            vec![1000, 2000, 4000, 8000, 16000, 32000, 32000, 32000]
        );
        b.reset();
        assert_eq!(b.next_delay(), ms(1000));
    }

    #[test]
    fn peer_clock_expires_after_liveness_intervals_and_paces_heartbeats() {
        let t0 = Instant::now();
        let mut c = PeerClock::new(ms(100), 3, t0);
        assert!(!c.heartbeat_due(t0 + ms(99)));
        assert!(c.heartbeat_due(t0 + ms(100)));
        c.sent(t0 + ms(100));
        assert!(!c.heartbeat_due(t0 + ms(199)));
        assert!(!c.is_expired(t0 + ms(299)));
        assert!(c.is_expired(t0 + ms(300)));
        c.heard(t0 + ms(250));
        assert!(!c.is_expired(t0 + ms(549)));
        assert!(c.is_expired(t0 + ms(550)));
        // Liveness 0 still allows one interval.
        assert!(!PeerClock::new(ms(100), 0, t0).is_expired(t0 + ms(99)));
    }
}
