//! Waiting for a condition instead of sleeping a guessed time: a loaded machine makes every guess wrong
//! sometimes, and a bound keeps a condition that never holds from hanging the run.

use std::time::{Duration, Instant};

/// How often [`wait_until`] and [`wait_for`] look again: short against any bound a test sets, long enough not to
/// spin a core of a two-core machine.
const EVERY: Duration = Duration::from_millis(10);

/// Polls `cond` every `every` until it holds (`true`) or `limit` has passed (`false`, after one last look).
pub fn poll_until(limit: Duration, every: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + limit;
    loop {
        if cond() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(every);
    }
}

/// [`poll_until`] every 10 ms.
pub fn wait_until(limit: Duration, cond: impl FnMut() -> bool) -> bool {
    poll_until(limit, EVERY, cond)
}

/// Waits (bounded by `limit`) until `cond` holds; panics naming `what` if it does not.
#[track_caller]
pub fn wait_for(what: &str, limit: Duration, cond: impl FnMut() -> bool) {
    assert!(
        wait_until(limit, cond),
        "timed out after {limit:?} waiting for {what}"
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn returns_as_soon_as_the_condition_holds_and_false_past_the_limit() {
        let mut calls = 0;
        assert!(wait_until(Duration::from_secs(5), || {
            calls += 1;
            calls == 3
        }));
        assert_eq!(calls, 3);
        let started = Instant::now();
        assert!(!wait_until(Duration::from_millis(30), || false));
        assert!(started.elapsed() >= Duration::from_millis(30));
    }

    #[test]
    #[should_panic(expected = "waiting for the impossible")]
    fn wait_for_names_what_never_happened() {
        wait_for("the impossible", Duration::from_millis(20), || false);
    }
}
