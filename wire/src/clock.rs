use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

/// Nanoseconds since the Unix epoch from the system's real-time clock.
///
/// Real time (not monotonic) because lateness compares a publisher's clock with a subscriber's, possibly on
/// different machines; both must be synchronised (PTP/NTP) for cross-host lateness to mean anything.
#[inline]
pub fn now_ns() -> u64 {
    match SystemTime::now().duration_since(UNIX_EPOCH) {
        Ok(d) => d.as_nanos() as u64,
        // A clock set before 1970 is a broken machine; report time zero rather than panic.
        Err(_) => 0,
    }
}

/// A source of "now" so time-driven logic (pacers, snail, heartbeats) can be tested with a fake clock.
pub trait Clock: Send + Sync {
    /// Nanoseconds since the Unix epoch, as [`now_ns`] reports them for the real clock.
    fn now_ns(&self) -> u64;
}

/// The real-time clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    #[inline]
    fn now_ns(&self) -> u64 {
        now_ns()
    }
}

/// A clock that only moves when told to; clones share the same time.
#[derive(Debug, Clone, Default)]
pub struct ManualClock(Arc<AtomicU64>);

impl ManualClock {
    /// A clock stopped at `start_ns` (ns since the Unix epoch).
    pub fn new(start_ns: u64) -> Self {
        Self(Arc::new(AtomicU64::new(start_ns)))
    }
    /// Moves every clone to `now_ns`; it may go backwards, as a real-time clock can when stepped.
    pub fn set(&self, now_ns: u64) {
        self.0.store(now_ns, Ordering::SeqCst);
    }
    /// Moves every clone forward by `by_ns` nanoseconds.
    pub fn advance(&self, by_ns: u64) {
        self.0.fetch_add(by_ns, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now_ns(&self) -> u64 {
        self.0.load(Ordering::SeqCst)
    }
}
