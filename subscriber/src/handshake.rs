//! What a shard's SUB handshakes came to, from the socket's monitor: the ones that succeeded (the LVC snapshot and
//! the catch-up ask once they are done) and the ones a publisher refused.
//!
//! A publisher refuses a handshake through ZAP (a key it does not list, an address it denies, a connection cap
//! that is full) by sending a ZMTP `ERROR`, and libzmq takes that as final: it never reconnects to that endpoint
//! (docs/book/src/libzmq-traps.md). Left alone, a refused subscriber would sit connected to nothing and say
//! nothing. The shard counts each refusal (`handshakes_refused`), says so at a limited rate, and connects again
//! itself after a delay that doubles up to [`REDIAL_MAX`], so it gets in once the publisher lets it.

use std::time::{Duration, Instant};

use crate::logs::RateLimited;

/// The first wait before connecting again to an endpoint that refused the handshake.
const REDIAL_FIRST: Duration = Duration::from_secs(1);
/// The longest wait between two attempts at an endpoint that keeps refusing.
const REDIAL_MAX: Duration = Duration::from_secs(30);

/// The monitor events a shard asks for.
pub(crate) const EVENTS: i32 = zmq::SocketEvent::HANDSHAKE_SUCCEEDED as i32
    | zmq::SocketEvent::HANDSHAKE_FAILED_AUTH as i32
    | zmq::SocketEvent::HANDSHAKE_FAILED_PROTOCOL as i32
    | zmq::SocketEvent::HANDSHAKE_FAILED_NO_DETAIL as i32;

/// An endpoint that refused this shard: the wait of its last (or pending) redial, and when that redial is due
/// (`None` once it was made). Kept after the redial so the next refusal waits twice as long; dropped once a
/// handshake with it succeeds.
struct Refused {
    endpoint: String,
    wait: Duration,
    due: Option<Instant>,
}

/// A shard SUB's monitor and what it has reported.
pub(crate) struct HandshakeWatch {
    monitor: zmq::Socket,
    /// At most one entry per endpoint of the shard (the monitor names no other).
    refused: Vec<Refused>,
    log: RateLimited,
    /// This process's public key under CURVE, named in refusals (it is what the publisher's allow list needs).
    public_key: Option<String>,
}

/// What one read of the monitor found.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Handshakes {
    pub(crate) succeeded: usize,
    pub(crate) refused: u64,
}

impl HandshakeWatch {
    pub(crate) fn new(monitor: zmq::Socket, public_key: Option<String>) -> Self {
        HandshakeWatch {
            monitor,
            refused: Vec::new(),
            log: RateLimited::new(),
            public_key,
        }
    }

    /// Reads what the monitor reported (without waiting): handshakes done, and refusals, each logged (at most once
    /// a second) and scheduled for a new connection.
    pub(crate) fn read(&mut self, shard: usize, now: Instant, now_ns: u64) -> Handshakes {
        let mut found = Handshakes::default();
        while let Ok(frames) = self.monitor.recv_multipart(zmq::DONTWAIT) {
            let Some((event, value)) = tickbox_zmqx::socket::monitor_event(&frames) else {
                continue;
            };
            let endpoint = frames
                .get(1)
                .map(|e| String::from_utf8_lossy(e).into_owned())
                .unwrap_or_default();
            if event == zmq::SocketEvent::HANDSHAKE_SUCCEEDED {
                found.succeeded += 1;
                // Let in: the next refusal of this endpoint starts the waits again.
                self.refused.retain(|r| r.endpoint != endpoint);
                continue;
            }
            found.refused += 1;
            let wait = match self.refused.iter_mut().find(|r| r.endpoint == endpoint) {
                Some(r) => {
                    // A redial still pending keeps its wait; one already made is answered twice as slowly.
                    if r.due.is_none() {
                        r.wait = (r.wait * 2).min(REDIAL_MAX);
                        r.due = Some(now + r.wait);
                    }
                    r.wait
                }
                None => {
                    self.refused.push(Refused {
                        endpoint: endpoint.clone(),
                        wait: REDIAL_FIRST,
                        due: Some(now + REDIAL_FIRST),
                    });
                    REDIAL_FIRST
                }
            };
            if let Some(suppressed) = self.log.allow(now_ns) {
                // The ZAP status code (RFC 27) or the protocol error, worded as what it is: a refusal.
                let reason = tickbox_auth::policy::client_refusal(
                    (event == zmq::SocketEvent::HANDSHAKE_FAILED_AUTH).then_some(value),
                    (event == zmq::SocketEvent::HANDSHAKE_FAILED_PROTOCOL).then_some(value),
                );
                let key = self
                    .public_key
                    .as_deref()
                    .map(|k| format!(" (this subscriber's public key: {k})"))
                    .unwrap_or_default();
                tracing::warn!(
                    shard,
                    endpoint = %endpoint,
                    suppressed,
                    "the handshake with the publisher was {reason}{key}; libzmq will not try again, so this shard \
                     connects again in {wait:?}"
                );
            }
        }
        found
    }

    /// Connects `sub` again to every refused endpoint whose wait is over. A failed reconnect is logged and tried
    /// again after the same wait.
    pub(crate) fn redial(&mut self, sub: &zmq::Socket, shard: usize, now: Instant) {
        for r in &mut self.refused {
            if r.due.is_none_or(|due| now < due) {
                continue;
            }
            // libzmq keeps the refused endpoint as connected (with no live connection): it must be let go before a
            // new connect creates a fresh session.
            let _ = sub.disconnect(&r.endpoint);
            r.due = match sub.connect(&r.endpoint) {
                Ok(()) => None,
                Err(err) => {
                    tracing::warn!(shard, endpoint = %r.endpoint, "connecting again failed: {err}");
                    Some(now + r.wait)
                }
            };
        }
    }

    /// When the next redial is due, if any: the shard's idle wait must not sleep past it.
    pub(crate) fn next_due(&self) -> Option<Instant> {
        self.refused.iter().filter_map(|r| r.due).min()
    }
}
