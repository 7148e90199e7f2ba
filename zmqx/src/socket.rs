//! Small helpers every socket loop needs, kept here so the protocol crates do not each carry a copy: the
//! endpoint a socket actually bound (resolves `tcp://127.0.0.1:*` to the chosen port), the conversion of a
//! wait into the millisecond timeout `zmq::poll` takes, and the reading of a socket monitor's event.

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

/// A socket monitor's event as libzmq frames it: its first frame holds the event id (2 bytes) and its value
/// (4 bytes: a descriptor, a ZAP status code or an error number), little-endian; the second names the endpoint.
/// `None` for a first frame too short to be one.
pub fn monitor_event(frames: &[Vec<u8>]) -> Option<(zmq::SocketEvent, u32)> {
    let f = frames.first()?;
    let id = u16::from_le_bytes([*f.first()?, *f.get(1)?]);
    let value = f
        .get(2..6)
        .map_or(0, |b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]));
    Some((zmq::SocketEvent::from_raw(id), value))
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
    fn monitor_events_are_read_from_their_first_frame() {
        let mut first = (zmq::SocketEvent::HANDSHAKE_FAILED_AUTH as u16)
            .to_le_bytes()
            .to_vec();
        first.extend(400u32.to_le_bytes());
        let frames = vec![first, b"tcp://127.0.0.1:5556".to_vec()];
        assert_eq!(
            monitor_event(&frames),
            Some((zmq::SocketEvent::HANDSHAKE_FAILED_AUTH, 400))
        );
        // An id without a value reads as 0; less than an id is no event.
        let bare = vec![(zmq::SocketEvent::ACCEPTED as u16).to_le_bytes().to_vec()];
        assert_eq!(monitor_event(&bare), Some((zmq::SocketEvent::ACCEPTED, 0)));
        assert_eq!(monitor_event(&[vec![1]]), None);
        assert_eq!(monitor_event(&[]), None);
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
