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

/// Runs `op` again every 10 ms while `busy` calls its result a passing refusal, for up to `limit`; returns the first
/// result `busy` accepts, or the last one. Made for a lock this process has just released: a process another
/// thread is starting holds a copy of every descriptor from its fork to its exec (close-on-exec closes it only
/// then), so for that moment a released `flock` still reads as held; loaded 2-core machines have shown it.
pub fn retry_while<T>(limit: Duration, mut op: impl FnMut() -> T, busy: impl Fn(&T) -> bool) -> T {
    let deadline = Instant::now() + limit;
    loop {
        let result = op();
        if !busy(&result) || Instant::now() >= deadline {
            return result;
        }
        std::thread::sleep(EVERY);
    }
}

/// Subscribes to the PUB at `endpoint` and hands each message it publishes (its first frame) to `until`, until
/// that says `true` or `limit` has passed (`false`). A state a server announces, such as a Binary Star state
/// frame, is then something a test waits for instead of a guessed time; messages published before the
/// subscription took hold are not seen.
pub fn await_published(
    ctx: &zmq::Context,
    endpoint: &str,
    limit: Duration,
    mut until: impl FnMut(&[u8]) -> bool,
) -> bool {
    let sub = ctx.socket(zmq::SUB).expect("SUB socket");
    sub.set_linger(0).expect("linger");
    sub.set_subscribe(b"").expect("subscribe");
    sub.connect(endpoint).expect("connect");
    let deadline = Instant::now() + limit;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero()
            || sub
                .poll(zmq::POLLIN, left.as_millis().max(1) as i64)
                .unwrap_or(0)
                == 0
        {
            return false;
        }
        while let Ok(frames) = sub.recv_multipart(zmq::DONTWAIT) {
            if until(frames.first().map_or(&[][..], |f| f.as_slice())) {
                return true;
            }
        }
    }
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
    fn await_published_sees_what_a_publisher_says_and_gives_up_past_the_limit() {
        let ctx = zmq::Context::new();
        let publisher = ctx.socket(zmq::PUB).unwrap();
        publisher.set_linger(0).unwrap();
        let endpoint = crate::bind_loopback(&publisher);
        let sender = std::thread::spawn(move || {
            for i in 0..500u32 {
                publisher.send(&i.to_be_bytes()[..], 0).unwrap();
                std::thread::sleep(Duration::from_millis(2));
            }
        });
        let mut seen = 0;
        assert!(await_published(
            &ctx,
            &endpoint,
            Duration::from_secs(5),
            |m| {
                seen += 1;
                u32::from_be_bytes(m.try_into().unwrap()) >= 100
            }
        ));
        assert!(seen >= 1);
        sender.join().unwrap();
        assert!(!await_published(
            &ctx,
            &endpoint,
            Duration::from_millis(30),
            |_| true
        ));
    }

    #[test]
    #[should_panic(expected = "waiting for the impossible")]
    fn wait_for_names_what_never_happened() {
        wait_for("the impossible", Duration::from_millis(20), || false);
    }
}
