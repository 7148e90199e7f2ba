//! Open-loop pacing and the shared bits of a latency run (stall injection, run coordination).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::sync::OnceLock;
use std::time::Duration;

use tickbox_wire::now_ns;

use crate::measure::Schedule;

/// Below this gap the pacer spins instead of sleeping: even with a 1 ns timer slack a sleep overshoots by a few
/// µs to tens of µs, which would show up as publisher lateness in the corrected histogram.
const SPIN_BELOW_NS: u64 = 40_000;

/// Waits until `deadline_ns` on the `now_ns` clock and returns the time it woke. Sleeps while the deadline is
/// far (so a 2-core machine keeps a core for the receiver), then spins. Waking late is fine: the publisher then
/// sends the overdue messages back to back and the corrected histogram charges them the delay.
#[inline]
pub fn wait_until(deadline_ns: u64) -> u64 {
    loop {
        let now = now_ns();
        if now >= deadline_ns {
            return now;
        }
        let gap = deadline_ns - now;
        if gap > SPIN_BELOW_NS {
            std::thread::sleep(Duration::from_nanos(gap - SPIN_BELOW_NS / 2));
        } else {
            std::hint::spin_loop();
        }
    }
}

/// A deliberate consumer stall: sleep `pause` on every `every`-th message. Used to prove the harness sees
/// delays (tests) and to show what a slow worker does to the tail (`--stall-every`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stall {
    /// Stall on every `every`-th message; 0 never stalls.
    pub every: u64,
    /// How long each stall sleeps.
    pub pause: Duration,
}

impl Stall {
    /// Call once per message with a running count; sleeps when due.
    #[inline]
    pub fn maybe_stall(&self, count: u64) {
        if self.every > 0 && count > 0 && count.is_multiple_of(self.every) {
            std::thread::sleep(self.pause);
        }
    }
}

/// Shared state of one latency run between the publishing side, the receivers and the coordinator.
#[derive(Debug, Default)]
pub struct RunState {
    /// Set by the publisher just before the first scheduled message; receivers read it to build recorders.
    pub schedule: OnceLock<Schedule>,
    /// Set by a receiver when it got a probe (the path is connected end to end).
    pub connected: AtomicBool,
    /// Messages of the schedule sent so far (set by the publisher when done).
    pub sent: AtomicU64,
    /// Publisher finished (`now_ns` when it did, 0 while running).
    pub publisher_done_ns: AtomicU64,
    /// Index + 1 of the last scheduled message a receiver recorded (for the drain wait).
    pub progress: AtomicU64,
    /// Set to stop everything early (error or Ctrl-C).
    pub abort: AtomicBool,
}

impl RunState {
    /// A fresh run state, shared by every thread of one run.
    pub fn new() -> Arc<Self> {
        Arc::new(RunState::default())
    }

    /// After the publisher finished: waits until receivers recorded everything it sent, at most `drain`.
    pub fn wait_drained(&self, drain: Duration) {
        let deadline = std::time::Instant::now() + drain;
        while std::time::Instant::now() < deadline && !self.abort.load(Ordering::Relaxed) {
            let sent = self.sent.load(Ordering::Acquire);
            if sent > 0 && self.progress.load(Ordering::Acquire) >= sent {
                return;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// Whether a receiver should stop: aborted, or the publisher finished more than `drain` ago.
    pub fn receiver_should_stop(&self, drain: Duration) -> bool {
        if self.abort.load(Ordering::Relaxed) {
            return true;
        }
        let done = self.publisher_done_ns.load(Ordering::Acquire);
        done != 0 && now_ns() > done + drain.as_nanos() as u64
    }
}

/// The open-loop schedule of one run: the offered rate, the unmeasured warm-up, the measured window, and how long
/// the publisher keeps its socket open for the tail after its last send.
#[derive(Debug, Clone, Copy)]
pub struct Pace {
    /// Offered rate, msg/s.
    pub rate: u64,
    /// Sent before measuring; not recorded.
    pub warmup: Duration,
    /// The measured window after the warm-up.
    pub duration: Duration,
    /// How long the tail may take to arrive after the last send.
    pub drain: Duration,
}

/// Drives the open-loop schedule from a publisher thread: waits for each message's intended send time, sends
/// every message that is due (back to back after a late wake-up, so a stall shows as delay, not as a lower
/// rate), then records what was sent and keeps the socket open until the tail has arrived. `send(k)` sends
/// message `k`; it returns `Ok(false)` to stop early (the run was aborted).
pub fn drive_schedule(
    state: &RunState,
    config: &Pace,
    mut send: impl FnMut(u64) -> Result<bool, crate::BenchError>,
) -> Result<(), crate::BenchError> {
    // A precise sleep lets the pacer sleep between messages at moderate rates instead of burning a core the
    // receiver needs.
    tickbox_zmqx::precise_sleep();
    let schedule = Schedule::new(
        now_ns() + 1_000_000,
        config.rate,
        config.warmup,
        config.duration,
    )?;
    let _ = state.schedule.set(schedule);
    let mut k = 0u64;
    'schedule: while schedule.in_schedule(k) {
        wait_until(schedule.intended_ns(k));
        if state.abort.load(Ordering::Relaxed) {
            break;
        }
        let now = now_ns();
        while schedule.in_schedule(k) && schedule.intended_ns(k) <= now {
            if !send(k)? {
                break 'schedule;
            }
            k += 1;
        }
    }
    state.sent.store(k, Ordering::Release);
    state.publisher_done_ns.store(now_ns(), Ordering::Release);
    // Closing the socket would discard what is still queued beyond its linger: keep it until the tail arrived.
    state.wait_drained(config.drain);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wait_until_does_not_return_early() {
        let target = now_ns() + 3_000_000;
        let woke = wait_until(target);
        assert!(woke >= target);
        assert!(now_ns() >= target);
        // A deadline in the past returns at once.
        assert!(wait_until(0) > 0);
    }
}
