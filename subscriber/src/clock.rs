//! Per-publisher clock offsets: the minimum one-way delay (receive time − publisher send time) seen so far.
//!
//! Lateness is measured against the publisher's clock, so a publisher whose clock runs behind ours looks late on
//! every message and one whose clock runs ahead hides real lateness. The smallest delay observed from a publisher
//! is the best estimate of "network delay + clock offset" we can make without a time protocol: it is an upper
//! bound on the offset that tightens as the run goes on. The skew-tolerant snail measures lateness relative to it
//! (`delay − min_delay`), so only the part of a delay above the publisher's best is judged.
//!
//! The table is shared by the shard threads (which learn) and the worker threads (which read, to judge dequeue
//! lateness the same way). It is a fixed-size open-addressing table of atomics: no lock, no allocation after
//! start, and a bounded number of publishers (a flood of forged publisher ids fills it once, then is counted).
#![deny(clippy::disallowed_methods, clippy::disallowed_types)]

use std::sync::atomic::{AtomicI64, AtomicU64, AtomicU8, AtomicUsize, Ordering};

use serde::Serialize;

/// Publishers tracked at most (a deployment has a handful; the bound only stops a flood of forged ids).
pub const MAX_CLOCK_PUBLISHERS: usize = 4096;
/// Delays beyond a day either way are not clock skew but a forged or corrupt send time: not learned from.
pub const MAX_PLAUSIBLE_OFFSET_NS: i64 = 86_400_000_000_000;

const SLOTS: usize = MAX_CLOCK_PUBLISHERS * 2;
const EMPTY: u64 = 0;
const UNKNOWN: i64 = i64::MAX;

/// Which side of the warning bound a publisher's offset is on.
const INSIDE: u8 = 0;
const BEHIND: u8 = 1;
const AHEAD: u8 = 2;

struct Slot {
    /// `publisher + 1`, or [`EMPTY`].
    key: AtomicU64,
    min_delay_ns: AtomicI64,
    /// The region last warned about ([`INSIDE`] until a warning).
    warned: AtomicU8,
}

/// One publisher's estimated clock offset, for reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct ClockOffset {
    /// The publisher's id.
    pub publisher: u32,
    /// Minimum observed `receive − send` in ns: about our clock minus the publisher's (plus the network's best
    /// one-way delay). Positive: the publisher's clock is behind ours; negative: ahead.
    pub offset_ns: i64,
}

/// A bound crossed by a publisher's offset, to be logged once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SkewWarning {
    /// The publisher's id.
    pub publisher: u32,
    /// Its estimated offset, ns, as in [`ClockOffset::offset_ns`]: positive when its clock is behind ours.
    pub offset_ns: i64,
}

/// The shared table (see the module docs).
pub struct ClockTable {
    slots: Box<[Slot]>,
    used: AtomicUsize,
    untracked: AtomicU64,
    warn_ns: i64,
}

impl std::fmt::Debug for ClockTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClockTable")
            .field("publishers", &self.used.load(Ordering::Relaxed))
            .field("warn_ns", &self.warn_ns)
            .finish()
    }
}

/// Signed `now − send`, saturating instead of wrapping on absurd send times.
#[inline]
pub fn delay_ns(now_ns: u64, send_time_ns: u64) -> i64 {
    let d = i128::from(now_ns) - i128::from(send_time_ns);
    d.clamp(i128::from(i64::MIN), i128::from(i64::MAX)) as i64
}

#[inline]
fn home(publisher: u32) -> usize {
    // Fibonacci hashing: publisher ids are often consecutive, this spreads them over the table.
    (u64::from(publisher).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32) as usize & (SLOTS - 1)
}

impl ClockTable {
    /// A table that warns when a publisher's offset exceeds `warn_ns` either way (0 never warns).
    pub fn new(warn_ns: u64) -> Self {
        ClockTable {
            slots: (0..SLOTS)
                .map(|_| Slot {
                    key: AtomicU64::new(EMPTY),
                    min_delay_ns: AtomicI64::new(UNKNOWN),
                    warned: AtomicU8::new(INSIDE),
                })
                .collect(),
            used: AtomicUsize::new(0),
            untracked: AtomicU64::new(0),
            warn_ns: i64::try_from(warn_ns).unwrap_or(i64::MAX),
        }
    }

    fn find(&self, publisher: u32) -> Option<&Slot> {
        let key = u64::from(publisher) + 1;
        let mut i = home(publisher);
        for _ in 0..SLOTS {
            let slot = &self.slots[i];
            match slot.key.load(Ordering::Acquire) {
                k if k == key => return Some(slot),
                EMPTY => return None,
                _ => i = (i + 1) & (SLOTS - 1),
            }
        }
        None
    }

    fn find_or_insert(&self, publisher: u32) -> Option<&Slot> {
        let key = u64::from(publisher) + 1;
        let mut i = home(publisher);
        for _ in 0..SLOTS {
            let slot = &self.slots[i];
            match slot.key.load(Ordering::Acquire) {
                k if k == key => return Some(slot),
                EMPTY => {
                    // Claim the bound first, so at most MAX_CLOCK_PUBLISHERS slots are ever used (the table then
                    // stays half empty and every probe ends quickly).
                    if self.used.fetch_add(1, Ordering::AcqRel) >= MAX_CLOCK_PUBLISHERS {
                        self.used.fetch_sub(1, Ordering::AcqRel);
                        return None;
                    }
                    match slot
                        .key
                        .compare_exchange(EMPTY, key, Ordering::AcqRel, Ordering::Acquire)
                    {
                        Ok(_) => return Some(slot),
                        Err(k) if k == key => {
                            self.used.fetch_sub(1, Ordering::AcqRel);
                            return Some(slot);
                        }
                        Err(_) => {
                            self.used.fetch_sub(1, Ordering::AcqRel);
                            i = (i + 1) & (SLOTS - 1);
                        }
                    }
                }
                _ => i = (i + 1) & (SLOTS - 1),
            }
        }
        None
    }

    /// Learns from one message: returns the publisher's minimum delay including this one (`None` if the
    /// publisher is untracked or the delay implausible and nothing was learned yet), and a warning when the
    /// offset just crossed the bound. One atomic load per message in the steady state.
    #[inline]
    pub fn observe(&self, publisher: u32, delay_ns: i64) -> (Option<i64>, Option<SkewWarning>) {
        let Some(slot) = self.find_or_insert(publisher) else {
            self.untracked.fetch_add(1, Ordering::Relaxed);
            return (None, None);
        };
        let current = slot.min_delay_ns.load(Ordering::Relaxed);
        if delay_ns >= current || delay_ns.unsigned_abs() > MAX_PLAUSIBLE_OFFSET_NS as u64 {
            return ((current != UNKNOWN).then_some(current), None);
        }
        let previous = slot.min_delay_ns.fetch_min(delay_ns, Ordering::Relaxed);
        let min = previous.min(delay_ns);
        let region = if self.warn_ns == 0 {
            INSIDE
        } else if min > self.warn_ns {
            BEHIND
        } else if min < -self.warn_ns {
            AHEAD
        } else {
            INSIDE
        };
        let warning = (region != INSIDE && slot.warned.swap(region, Ordering::Relaxed) != region)
            .then_some(SkewWarning {
                publisher,
                offset_ns: min,
            });
        (Some(min), warning)
    }

    /// The publisher's minimum delay so far, without learning (worker side).
    #[inline]
    pub fn min_delay(&self, publisher: u32) -> Option<i64> {
        let v = self.find(publisher)?.min_delay_ns.load(Ordering::Relaxed);
        (v != UNKNOWN).then_some(v)
    }

    /// Every publisher's offset, by publisher id.
    pub fn offsets(&self) -> Vec<ClockOffset> {
        let mut out: Vec<ClockOffset> = self
            .slots
            .iter()
            .filter_map(|s| {
                let key = s.key.load(Ordering::Acquire);
                let min = s.min_delay_ns.load(Ordering::Relaxed);
                (key != EMPTY && min != UNKNOWN).then(|| ClockOffset {
                    publisher: (key - 1) as u32,
                    offset_ns: min,
                })
            })
            .collect();
        out.sort_by_key(|o| o.publisher);
        out
    }

    /// Messages from publishers beyond the table's bound.
    pub fn untracked(&self) -> u64 {
        self.untracked.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: i64 = 1_000_000;

    #[test]
    fn offset_is_the_minimum_delay_and_warns_once_per_crossing() {
        let t = ClockTable::new(100 * MS as u64);
        // A publisher 1.5 s behind: every delay is 1.5 s + network.
        let (min, warn) = t.observe(7, 1_500 * MS + 3 * MS);
        assert_eq!(min, Some(1_503 * MS));
        assert_eq!(warn.map(|w| w.publisher), Some(7));
        assert_eq!(t.observe(7, 1_500 * MS + MS), (Some(1_501 * MS), None));
        assert_eq!(t.observe(7, 1_600 * MS), (Some(1_501 * MS), None));
        // It crosses to 10 s ahead (clock stepped): one more warning, then silence.
        assert!(t.observe(7, -10_000 * MS).1.is_some());
        assert!(t.observe(7, -10_001 * MS).1.is_none());
        // Inside the bound: never a warning.
        assert_eq!(t.observe(8, 2 * MS), (Some(2 * MS), None));
        assert_eq!(t.min_delay(8), Some(2 * MS));
        assert_eq!(t.min_delay(9), None);
        let offsets = t.offsets();
        assert_eq!(
            offsets,
            vec![
                ClockOffset {
                    publisher: 7,
                    offset_ns: -10_001 * MS
                },
                ClockOffset {
                    publisher: 8,
                    offset_ns: 2 * MS
                }
            ]
        );
    }

    #[test]
    fn forged_send_times_are_not_learned_and_the_table_is_bounded() {
        let t = ClockTable::new(0);
        assert_eq!(t.observe(1, delay_ns(1_000, u64::MAX)), (None, None));
        assert_eq!(t.observe(1, 5), (Some(5), None));
        assert_eq!(t.observe(1, i64::MIN), (Some(5), None));
        for p in 0..MAX_CLOCK_PUBLISHERS as u32 + 10 {
            t.observe(p, 1);
        }
        assert_eq!(t.offsets().len(), MAX_CLOCK_PUBLISHERS);
        assert_eq!(t.untracked(), 10);
        assert_eq!(delay_ns(5, 10), -5);
        assert_eq!(delay_ns(u64::MAX, 0), i64::MAX);
    }
}
