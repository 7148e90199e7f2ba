//! Small helpers every socket loop needs, kept here so the protocol crates do not each carry a copy: the
//! endpoint a socket actually bound (resolves `tcp://127.0.0.1:*` to the chosen port) and the conversion of a
//! wait into the millisecond timeout `zmq::poll` takes.

use std::time::{Duration, Instant};

/// The endpoint `socket` last bound or connected, as text. libzmq endpoints are ASCII, so a non-UTF-8 answer
/// cannot happen in practice; if it did, the bytes are kept lossily rather than failing a running server.
/// (The crate-root `last_endpoint` is the strict variant returning `ZmqxError`.)
pub fn last_endpoint(socket: &zmq::Socket) -> zmq::Result<String> {
    Ok(socket
        .get_last_endpoint()?
        .unwrap_or_else(|raw| String::from_utf8_lossy(&raw).into_owned()))
}

/// `wait` as a `zmq::poll` timeout in milliseconds, saturating at `i64::MAX` (a negative timeout would mean
/// "forever" to libzmq, so an overflow must never wrap).
pub fn poll_ms(wait: Duration) -> i64 {
    i64::try_from(wait.as_millis()).unwrap_or(i64::MAX)
}

/// Milliseconds from `now` until `deadline` as a `zmq::poll` timeout; 0 once the deadline has passed.
pub fn poll_ms_until(deadline: Instant, now: Instant) -> i64 {
    poll_ms(deadline.saturating_duration_since(now))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn poll_timeouts_saturate_and_never_go_negative() {
        assert_eq!(poll_ms(Duration::from_millis(250)), 250);
        assert_eq!(poll_ms(Duration::from_micros(999)), 0);
        assert_eq!(poll_ms(Duration::MAX), i64::MAX);
        let now = Instant::now();
        assert_eq!(poll_ms_until(now, now + Duration::from_secs(1)), 0);
        assert_eq!(poll_ms_until(now + Duration::from_millis(40), now), 40);
    }

    #[test]
    fn last_endpoint_resolves_the_wildcard_port() {
        let ctx = zmq::Context::new();
        let s = ctx.socket(zmq::ROUTER).unwrap();
        s.set_linger(0).unwrap();
        s.bind("tcp://127.0.0.1:*").unwrap();
        let ep = last_endpoint(&s).unwrap();
        assert!(
            ep.starts_with("tcp://127.0.0.1:") && !ep.ends_with(":*"),
            "{ep}"
        );
    }
}
