//! What a shard's SUB handshakes came to, from the socket's monitor: the ones that succeeded (the LVC snapshot and
//! the catch-up ask once they are done) and the ones a publisher refused.
//!
//! A publisher refuses a handshake through ZAP (a key it does not list, an address it denies, a connection cap
//! that is full) by sending a ZMTP `ERROR`, and libzmq takes that as final: it never reconnects to that endpoint
//! (docs/book/src/libzmq-traps.md). Left alone, a refused subscriber would sit connected to nothing and say
//! nothing. The shard counts each refusal (`handshakes_refused`), says so at a limited rate, and connects again
//! itself after a delay that doubles up to [`REDIAL_MAX`], so it gets in once the publisher lets it.

use std::time::{Duration, Instant};

use crate::shard::RateLimited;

/// The first wait before connecting again to an endpoint that refused the handshake.
const REDIAL_FIRST: Duration = Duration::from_secs(1);
/// The longest wait between two attempts at an endpoint that keeps refusing.
const REDIAL_MAX: Duration = Duration::from_secs(30);

/// The monitor events a shard asks for.
pub(crate) const EVENTS: i32 = zmq::SocketEvent::HANDSHAKE_SUCCEEDED as i32
    | zmq::SocketEvent::HANDSHAKE_FAILED_AUTH as i32
    | zmq::SocketEvent::HANDSHAKE_FAILED_PROTOCOL as i32
    | zmq::SocketEvent::HANDSHAKE_FAILED_NO_DETAIL as i32;

/// One endpoint that refused this shard: when to connect to it again, and how long to wait after the next refusal.
struct Redial {
    endpoint: String,
    due: Instant,
    next_wait: Duration,
}

/// A shard SUB's monitor and what it has reported.
pub(crate) struct HandshakeWatch {
    monitor: zmq::Socket,
    /// Endpoints refused and not yet connected again (at most one entry per endpoint of the shard).
    redials: Vec<Redial>,
    /// The wait each endpoint gets after its next refusal (kept across attempts so it keeps doubling).
    waits: Vec<(String, Duration)>,
    log: RateLimited,
}

/// What one read of the monitor found.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Handshakes {
    pub(crate) succeeded: usize,
    pub(crate) refused: u64,
}

impl HandshakeWatch {
    pub(crate) fn new(monitor: zmq::Socket) -> Self {
        HandshakeWatch {
            monitor,
            redials: Vec::new(),
            waits: Vec::new(),
            log: RateLimited::new(),
        }
    }

    /// Reads what the monitor reported (without waiting): handshakes done, and refusals, each logged (at most once
    /// a second) and scheduled for a new connection.
    pub(crate) fn read(&mut self, shard: usize, now: Instant, now_ns: u64) -> Handshakes {
        let mut found = Handshakes::default();
        while let Ok(frames) = self.monitor.recv_multipart(zmq::DONTWAIT) {
            let Some((event, value)) = frames.first().and_then(|f| {
                let id = u16::from_le_bytes([*f.first()?, *f.get(1)?]);
                let value = f
                    .get(2..6)
                    .map_or(0, |b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]));
                Some((zmq::SocketEvent::from_raw(id), value))
            }) else {
                continue;
            };
            let endpoint = frames
                .get(1)
                .map(|e| String::from_utf8_lossy(e).into_owned())
                .unwrap_or_default();
            if event == zmq::SocketEvent::HANDSHAKE_SUCCEEDED {
                found.succeeded += 1;
                // Let in: the next refusal of this endpoint starts the waits again.
                self.waits.retain(|(e, _)| *e != endpoint);
                continue;
            }
            found.refused += 1;
            let wait = match self.waits.iter_mut().find(|(e, _)| *e == endpoint) {
                Some((_, w)) => {
                    let now_wait = *w;
                    *w = (*w * 2).min(REDIAL_MAX);
                    now_wait
                }
                None => {
                    self.waits.push((endpoint.clone(), REDIAL_FIRST * 2));
                    REDIAL_FIRST
                }
            };
            if let Some(suppressed) = self.log.allow(now_ns) {
                let reason = match event {
                    // The ZAP status code (RFC 27): 300 temporary, 400 refused, 500 the handler failed.
                    zmq::SocketEvent::HANDSHAKE_FAILED_AUTH => {
                        format!("refused by its ZAP handler (status {value})")
                    }
                    zmq::SocketEvent::HANDSHAKE_FAILED_PROTOCOL => {
                        format!("failed: protocol error {value:#x} (a security mechanism that does not match, or a refusal)")
                    }
                    _ => "failed".to_string(),
                };
                tracing::warn!(
                    shard,
                    endpoint = %endpoint,
                    suppressed,
                    "the handshake with the publisher was {reason}; libzmq will not try again, so this shard \
                     connects again in {wait:?}"
                );
            }
            if !self.redials.iter().any(|r| r.endpoint == endpoint) {
                self.redials.push(Redial {
                    endpoint,
                    due: now + wait,
                    next_wait: wait,
                });
            }
        }
        found
    }

    /// Connects `sub` again to every refused endpoint whose wait is over. A failed reconnect is logged and tried
    /// again after the same wait.
    pub(crate) fn redial(&mut self, sub: &zmq::Socket, shard: usize, now: Instant) {
        for r in &mut self.redials {
            if now < r.due {
                continue;
            }
            // libzmq keeps the refused endpoint as connected (with no live connection): it must be let go before a
            // new connect creates a fresh session.
            let _ = sub.disconnect(&r.endpoint);
            match sub.connect(&r.endpoint) {
                Ok(()) => r.endpoint.clear(),
                Err(err) => {
                    tracing::warn!(shard, endpoint = %r.endpoint, "connecting again failed: {err}");
                    r.due = now + r.next_wait;
                }
            }
        }
        self.redials.retain(|r| !r.endpoint.is_empty());
    }

    /// When the next redial is due, if any: the shard's idle wait must not sleep past it.
    pub(crate) fn next_due(&self) -> Option<Instant> {
        self.redials.iter().map(|r| r.due).min()
    }
}
