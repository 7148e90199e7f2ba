//! The shard's receive clock: wall-clock nanoseconds since the Unix epoch (the clock publishers stamp with), read
//! once per frame at the cost of the CPU's time-stamp counter instead of a `clock_gettime` call.
//!
//! Every frame is judged against a time read after it left the socket, so the clock is read per frame; measured
//! here, the vDSO `clock_gettime` behind [`tickbox_wire::now_ns`] takes ~50 ns on a virtual machine, a tenth of a
//! shard's per-record time for single frames, while the TSC through `quanta` takes ~13 ns. The TSC counts ticks,
//! not wall time, so the clock keeps an anchor (a TSC reading and the wall clock read just after it) and adds the
//! ticks since, converted by `quanta`'s calibration; it takes a fresh anchor at least every millisecond, so a
//! calibration error of a few parts per million costs nanoseconds and a stepped wall clock is followed within a
//! millisecond. The wall clock is read after the TSC, so a time is never earlier than the moment it stands for.
//! Where the TSC is not usable, `quanta` falls back to the OS's monotonic clock and this stays correct, only slower.

use tickbox_wire::now_ns;

/// The longest the clock extrapolates from one wall-clock reading.
const REANCHOR_NS: u64 = 1_000_000;

/// A per-thread receive clock (see the module documentation).
pub struct ReceiveClock {
    tsc: quanta::Clock,
    anchor_raw: u64,
    anchor_ns: u64,
}

impl std::fmt::Debug for ReceiveClock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReceiveClock")
            .field("anchor_ns", &self.anchor_ns)
            .finish()
    }
}

impl Default for ReceiveClock {
    fn default() -> Self {
        Self::new()
    }
}

/// Tries at taking an anchor whose wall-clock read is bracketed tightly by two counter reads.
const ANCHOR_TRIES: usize = 4;
/// A bracket this narrow (in ns) is good enough: the anchor is then at most this late.
const ANCHOR_BRACKET_NS: u64 = 1_000;

impl ReceiveClock {
    /// A clock anchored now.
    pub fn new() -> Self {
        let tsc = quanta::Clock::new();
        let (anchor_raw, anchor_ns) = anchor(&tsc);
        ReceiveClock {
            tsc,
            anchor_raw,
            anchor_ns,
        }
    }

    /// Nanoseconds since the Unix epoch, now.
    #[inline]
    pub fn now_ns(&mut self) -> u64 {
        let raw = self.tsc.raw();
        // A counter read below the anchor (another core's TSC, on a machine whose counters disagree) is not
        // extrapolated from: the wall clock is read instead.
        if raw >= self.anchor_raw {
            let since = self.tsc.delta_as_nanos(self.anchor_raw, raw);
            if since < REANCHOR_NS {
                return self.anchor_ns + since;
            }
        }
        (self.anchor_raw, self.anchor_ns) = anchor(&self.tsc);
        let raw = self.tsc.raw();
        self.anchor_ns
            + self
                .tsc
                .delta_as_nanos(self.anchor_raw, raw.max(self.anchor_raw))
    }
}

/// A counter reading paired with the wall clock read just after it. A thread preempted between the two reads
/// would pair an old count with a later time and read every time until the next anchor that much late, so the
/// wall-clock read is bracketed by two counter reads and retried (a few times) until the bracket is narrow. The
/// earlier count is kept: the anchor may be late by the bracket, never early.
fn anchor(tsc: &quanta::Clock) -> (u64, u64) {
    let mut best = bracketed_read(tsc);
    for _ in 1..ANCHOR_TRIES {
        if best.2 <= ANCHOR_BRACKET_NS {
            break;
        }
        let next = bracketed_read(tsc);
        if next.2 < best.2 {
            best = next;
        }
    }
    (best.0, best.1)
}

/// A counter reading, the wall clock read after it, and how long (ns) until the counter was read again.
fn bracketed_read(tsc: &quanta::Clock) -> (u64, u64, u64) {
    let before = tsc.raw();
    let wall = now_ns();
    let after = tsc.raw();
    let bracket = if after >= before {
        tsc.delta_as_nanos(before, after)
    } else {
        u64::MAX
    };
    (before, wall, bracket)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn follows_the_wall_clock_and_never_reads_before_it() {
        let mut clock = ReceiveClock::new();
        let deadline = std::time::Instant::now() + std::time::Duration::from_millis(50);
        let (mut reads, mut late, mut last) = (0u64, 0u64, 0u64);
        while std::time::Instant::now() < deadline {
            let before = now_ns();
            let t = clock.now_ns();
            let after = now_ns();
            // Never early, beyond the TSC's calibration error over one anchor period (a few ppm of a
            // millisecond: a microsecond covers it many times over). Never going back either.
            assert!(t + 1_000 >= before, "{t} read before {before}");
            assert!(t + 1_000 >= last, "went back from {last} to {t}");
            // Late only when this thread was preempted while taking every try at an anchor: rare.
            if t > after + 1_000 {
                late += 1;
            }
            reads += 1;
            last = t;
        }
        assert!(late * 100 <= reads, "{late} of {reads} reads were late");
    }
}
