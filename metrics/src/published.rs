//! [`Published`]: where a component's loop leaves a copy of its counters for a scrape, at most every
//! [`PUBLISH_EVERY`], so the loop pays a relaxed load per turn and a lock per copy, never per message.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How often a loop copies its counters out: a scrape sees them at most this old (and exact once the loop is
/// idle or done, with [`Published::publish_now`]).
pub const PUBLISH_EVERY: Duration = Duration::from_millis(50);

struct Slot<T> {
    value: Mutex<T>,
    /// When the loop last copied, µs after `origin` (`u64::MAX`: never).
    last_us: AtomicU64,
    origin: Instant,
}

/// A slot a loop copies its counters into (`publish`) and a [`crate::Source`] reads (`get`). The default is no
/// slot: publishing does nothing. It is plumbing carried in a component's config, not configuration: two always
/// compare equal, and it is never serialised.
pub struct Published<T>(Option<Arc<Slot<T>>>);

impl<T> Clone for Published<T> {
    fn clone(&self) -> Self {
        Published(self.0.clone())
    }
}

impl<T> Default for Published<T> {
    fn default() -> Self {
        Published(None)
    }
}

impl<T> std::fmt::Debug for Published<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() {
            "Published(on)"
        } else {
            "Published(off)"
        })
    }
}

impl<T> PartialEq for Published<T> {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl<T> Eq for Published<T> {}

impl<T: Clone + Default> Published<T> {
    /// A slot (its two ends share it: give one to the loop, keep one for the source).
    pub fn new() -> Published<T> {
        Published(Some(Arc::new(Slot {
            value: Mutex::new(T::default()),
            last_us: AtomicU64::new(u64::MAX),
            origin: Instant::now(),
        })))
    }

    /// Copies `value` in if the last copy is older than [`PUBLISH_EVERY`] (a loop calls it on every turn).
    pub fn publish(&self, now: Instant, value: &T) {
        let Some(slot) = &self.0 else { return };
        let at = u64::try_from(now.saturating_duration_since(slot.origin).as_micros())
            .unwrap_or(u64::MAX - 1);
        let last = slot.last_us.load(Ordering::Relaxed);
        if last != u64::MAX && at.saturating_sub(last) < PUBLISH_EVERY.as_micros() as u64 {
            return;
        }
        slot.last_us.store(at, Ordering::Relaxed);
        *slot.value.lock().unwrap_or_else(|p| p.into_inner()) = value.clone();
    }

    /// Copies `value` in now (the final counts).
    pub fn publish_now(&self, value: &T) {
        if let Some(slot) = &self.0 {
            *slot.value.lock().unwrap_or_else(|p| p.into_inner()) = value.clone();
        }
    }

    /// The last copy (the default before the first, or without a slot).
    pub fn get(&self) -> T {
        self.0.as_ref().map_or_else(T::default, |slot| {
            slot.value.lock().unwrap_or_else(|p| p.into_inner()).clone()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copies_are_throttled_and_the_final_one_always_lands() {
        let p: Published<u64> = Published::new();
        let t0 = Instant::now();
        p.publish(t0, &3);
        p.publish(t0 + Duration::from_millis(1), &4); // too soon
        assert_eq!(p.get(), 3);
        p.publish(t0 + PUBLISH_EVERY, &5);
        assert_eq!(p.get(), 5);
        p.publish_now(&6);
        assert_eq!(p.clone().get(), 6);
        let off: Published<u64> = Published::default();
        off.publish_now(&9);
        assert_eq!(off.get(), 0);
        assert_eq!(off, p);
    }
}
