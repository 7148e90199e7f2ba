//! How a worker fed through a ring waits once its queue runs dry: it keeps looking while it has a core to itself,
//! and goes to sleep at once while it does not.
//!
//! A sleeping worker costs every parcel its producer's wake-up system call and the time the OS takes to run the
//! woken thread: on a virtual machine an interrupt between cores, tens of µs even on an idle machine. Looking
//! for the next parcel instead of sleeping avoids both while records arrive closer together than `window`. But
//! a worker that looks while other threads wait for its core (the shard that fills its queue, the sockets' I/O
//! threads, anything else on the machine) takes their time: the previous measurement of a plain spin found the
//! ring at 12–14× raw libzmq under load. So the spinner watches for the one sign of a busy core it can see
//! without a system call, being taken off the CPU: two clock reads a few hundred ns apart that are tens of µs
//! apart. When it sees that it stops looking and sleeps, and sleeps at once for a while after
//! ([`IdleSpin::REST`]), since a core that was busy a moment ago is likely busy still.

use std::time::{Duration, Instant};

/// One worker's idle spinning: the configured window and what it has learnt about its core.
#[derive(Debug)]
pub(crate) struct IdleSpin {
    window: Duration,
    /// Until then the worker sleeps at once: it was taken off its core while it looked.
    resting_until: Option<Instant>,
}

/// What one look found.
pub(crate) enum Look<T> {
    /// Something to hand on: a parcel, or the news that every producer is gone.
    Found(T),
    /// Nothing yet.
    Nothing,
}

impl IdleSpin {
    /// Between two clock reads a look-and-pause loop takes well under 1 µs; a gap this long means the thread was
    /// not running.
    const TAKEN_OFF: Duration = Duration::from_micros(20);
    /// How long the worker sleeps at once after it was taken off its core while looking.
    const REST: Duration = Duration::from_millis(20);
    /// Looks between two clock reads: a look costs a few ns, a clock read about 20.
    const LOOKS_PER_READ: u32 = 16;

    /// Looks for up to `window` (zero: never looks).
    pub(crate) fn new(window: Duration) -> IdleSpin {
        IdleSpin {
            window,
            resting_until: None,
        }
    }

    /// Calls `look` until it finds something, `window` has passed, or the thread was taken off its core;
    /// `None` means the caller should sleep until woken.
    pub(crate) fn spin<T>(&mut self, look: impl FnMut() -> Look<T>) -> Option<T> {
        self.spin_with(look, Instant::now, std::hint::spin_loop)
    }

    /// [`spin`](Self::spin) with its clock and its pause given (tests drive both).
    fn spin_with<T>(
        &mut self,
        mut look: impl FnMut() -> Look<T>,
        mut now: impl FnMut() -> Instant,
        mut pause: impl FnMut(),
    ) -> Option<T> {
        if self.window.is_zero() {
            return None;
        }
        let start = now();
        if let Some(until) = self.resting_until {
            if start < until {
                return None;
            }
            self.resting_until = None;
        }
        let mut last = start;
        let mut looks = 0u32;
        loop {
            if let Look::Found(found) = look() {
                return Some(found);
            }
            pause();
            looks = looks.wrapping_add(1);
            if looks.is_multiple_of(Self::LOOKS_PER_READ) {
                let read = now();
                if read.saturating_duration_since(last) > Self::TAKEN_OFF {
                    self.resting_until = Some(read + Self::REST);
                    return None;
                }
                if read.saturating_duration_since(start) >= self.window {
                    return None;
                }
                last = read;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;

    /// A clock that moves `step` at every read, and `jump` instead at read number `jump_at`.
    fn clock(
        base: Instant,
        step: Duration,
        jump_at: Option<(u32, Duration)>,
    ) -> impl FnMut() -> Instant {
        let (reads, at) = (Cell::new(0u32), Cell::new(base));
        move || {
            reads.set(reads.get() + 1);
            let d = match jump_at {
                Some((n, jump)) if reads.get() == n => jump,
                _ => step,
            };
            at.set(at.get() + d);
            at.get()
        }
    }

    #[test]
    fn a_zero_window_never_looks() {
        let mut spin = IdleSpin::new(Duration::ZERO);
        let mut looks = 0;
        let found: Option<()> = spin.spin(|| {
            looks += 1;
            Look::Found(())
        });
        assert_eq!((found, looks), (None, 0));
    }

    #[test]
    fn what_arrives_within_the_window_is_taken_without_sleeping() {
        let mut spin = IdleSpin::new(Duration::from_micros(200));
        let mut looks = 0;
        let base = Instant::now();
        let found = spin.spin_with(
            || {
                looks += 1;
                if looks == 100 {
                    Look::Found(looks)
                } else {
                    Look::Nothing
                }
            },
            clock(base, Duration::from_nanos(500), None),
            || {},
        );
        assert_eq!(found, Some(100));
    }

    #[test]
    fn nothing_within_the_window_means_sleep_and_the_next_wait_looks_again() {
        let mut spin = IdleSpin::new(Duration::from_micros(10));
        let base = Instant::now();
        let mut looks = 0u32;
        let found: Option<()> = spin.spin_with(
            || {
                looks += 1;
                Look::Nothing
            },
            clock(base, Duration::from_micros(1), None),
            || {},
        );
        assert_eq!(found, None);
        // 10 µs at 1 µs a read, 16 looks a read: about 160 looks, bounded.
        assert!((100..400).contains(&looks), "{looks} looks");
        assert_eq!(spin.resting_until, None);
        let again = spin.spin_with(
            || Look::Found(7),
            clock(base, Duration::from_micros(1), None),
            || {},
        );
        assert_eq!(
            again,
            Some(7),
            "a window that ran out does not stop the next look"
        );
    }

    #[test]
    fn taken_off_the_core_it_sleeps_at_once_and_rests_before_looking_again() {
        let mut spin = IdleSpin::new(Duration::from_millis(5));
        let base = Instant::now();
        // The third read comes 1 ms after the second: the thread was not running in between.
        let found: Option<()> = spin.spin_with(
            || Look::Nothing,
            clock(
                base,
                Duration::from_nanos(300),
                Some((3, Duration::from_millis(1))),
            ),
            || {},
        );
        assert_eq!(found, None);
        assert!(spin.resting_until.is_some());
        // Within the rest the next idle wait does not look at all.
        let mut looked = false;
        let found: Option<()> = spin.spin_with(
            || {
                looked = true;
                Look::Found(())
            },
            clock(
                base + Duration::from_millis(2),
                Duration::from_nanos(300),
                None,
            ),
            || {},
        );
        assert_eq!((found, looked), (None, false));
        // After it, looking resumes.
        let found = spin.spin_with(
            || Look::Found(3),
            clock(
                base + Duration::from_millis(30),
                Duration::from_nanos(300),
                None,
            ),
            || {},
        );
        assert_eq!(found, Some(3));
    }
}
