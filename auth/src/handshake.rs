//! The client side of a refused handshake: what a connecting socket's handshakes came to, read from its monitor,
//! and connecting again to a publisher that refused it.
//!
//! A publisher refuses a handshake through ZAP (a key it does not list, an address it denies, a connection cap
//! that is full) by sending a ZMTP `ERROR`, and libzmq takes that as final: it never reconnects to that endpoint
//! (docs/book/src/libzmq-traps.md). Left alone, a refused reader (a subscriber's shard, a recorder) would sit
//! connected to nothing and say nothing. [`HandshakeWatch`] counts each refusal, says so at most once a second, and
//! connects again after a delay that doubles up to [`REDIAL_MAX`], so the reader gets in once the publisher lets
//! it.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::policy::client_refusal;
use tickbox_zmqx::socket::WarnGate;

/// The first wait before connecting again to an endpoint that refused the handshake.
pub const REDIAL_FIRST: Duration = Duration::from_secs(1);
/// The longest wait between two attempts at an endpoint that keeps refusing.
pub const REDIAL_MAX: Duration = Duration::from_secs(30);

/// The monitor events a watch asks for.
const EVENTS: i32 = zmq::SocketEvent::HANDSHAKE_SUCCEEDED as i32
    | zmq::SocketEvent::HANDSHAKE_FAILED_AUTH as i32
    | zmq::SocketEvent::HANDSHAKE_FAILED_PROTOCOL as i32
    | zmq::SocketEvent::HANDSHAKE_FAILED_NO_DETAIL as i32;

/// Numbers the monitor endpoints of this process, which must not collide within a context.
static MONITORS: AtomicU64 = AtomicU64::new(0);

/// An endpoint that refused the socket: the wait of its last (or pending) redial, and when that redial is due
/// (`None` once it was made). Kept after the redial so the next refusal waits twice as long; dropped once a
/// handshake with it succeeds.
struct Refused {
    endpoint: String,
    wait: Duration,
    due: Option<Instant>,
}

/// A connecting socket's monitor and what it has reported.
pub struct HandshakeWatch {
    monitor: zmq::Socket,
    /// At most one entry per endpoint of the socket (the monitor names no other).
    refused: Vec<Refused>,
    /// Refusals are logged at most once a second: a publisher decides how many come.
    refusal_log: WarnGate,
    /// This process's public key under CURVE, named in refusals (it is what the publisher's allow list needs).
    public_key: Option<String>,
    /// What the socket is, in log lines (`subscriber shard 2`, `recorder`, `LVC upstream`).
    who: String,
}

/// What one read of the monitor found.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Handshakes {
    /// Handshakes completed.
    pub succeeded: usize,
    /// Handshakes a publisher refused, or that failed.
    pub refused: u64,
}

impl HandshakeWatch {
    /// Watches `socket`'s handshakes; call it before `socket` connects, so that none is missed. `who` names the
    /// socket in log lines; `public_key` is this process's CURVE key, if any.
    pub fn start(
        ctx: &zmq::Context,
        socket: &zmq::Socket,
        public_key: Option<String>,
        who: impl Into<String>,
    ) -> zmq::Result<Self> {
        let addr = format!(
            "inproc://tickbox-handshakes-{}-{}",
            std::process::id(),
            MONITORS.fetch_add(1, Ordering::Relaxed)
        );
        socket.monitor(&addr, EVENTS)?;
        let monitor = ctx.socket(zmq::PAIR)?;
        monitor.set_linger(0)?;
        monitor.connect(&addr)?;
        Ok(HandshakeWatch {
            monitor,
            refused: Vec::new(),
            refusal_log: WarnGate::new(),
            public_key,
            who: who.into(),
        })
    }

    /// Reads what the monitor reported ([`Self::read`]) and connects `socket` again where a wait is over
    /// ([`Self::redial`]): what a socket loop calls whenever it looks.
    pub fn look(&mut self, socket: &zmq::Socket, now: Instant) -> Handshakes {
        let found = self.read(now);
        self.redial(socket, now);
        found
    }

    /// Reads what the monitor reported (without waiting): handshakes done, and refusals, each logged (at most once
    /// a second) and scheduled for a new connection.
    pub fn read(&mut self, now: Instant) -> Handshakes {
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
            let Some(suppressed) = self.refusal_log.allow(now) else {
                continue;
            };
            // The ZAP status code (RFC 27) or the protocol error, worded as what it is: a refusal.
            let reason = client_refusal(
                (event == zmq::SocketEvent::HANDSHAKE_FAILED_AUTH).then_some(value),
                (event == zmq::SocketEvent::HANDSHAKE_FAILED_PROTOCOL).then_some(value),
            );
            let key = self
                .public_key
                .as_deref()
                .map(|k| format!(" (this process's public key: {k})"))
                .unwrap_or_default();
            tracing::warn!(
                who = %self.who,
                endpoint = %endpoint,
                suppressed,
                "the handshake with the publisher was {reason}{key}; libzmq will not try again, so the {} connects \
                 again in {wait:?}",
                self.who
            );
        }
        found
    }

    /// Connects `socket` again to every refused endpoint whose wait is over. A failed reconnect is logged and
    /// tried again after the same wait.
    pub fn redial(&mut self, socket: &zmq::Socket, now: Instant) {
        for r in &mut self.refused {
            if r.due.is_none_or(|due| now < due) {
                continue;
            }
            // libzmq keeps the refused endpoint as connected (with no live connection): it must be let go before a
            // new connect creates a fresh session.
            let _ = socket.disconnect(&r.endpoint);
            r.due = match socket.connect(&r.endpoint) {
                Ok(()) => None,
                Err(err) => {
                    tracing::warn!(who = %self.who, endpoint = %r.endpoint, "connecting again failed: {err}");
                    Some(now + r.wait)
                }
            };
        }
    }

    /// When the next redial is due, if any: an idle wait must not sleep past it.
    pub fn next_due(&self) -> Option<Instant> {
        self.refused.iter().filter_map(|r| r.due).min()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A SUB refused by a ZAP handler that denies everyone: the watch counts the refusal, and its redial makes a
    /// second attempt (which libzmq alone never would), refused and counted again.
    #[test]
    fn a_refused_handshake_is_counted_and_tried_again() {
        let ctx = zmq::Context::new();
        // A ZAP handler that refuses every request.
        let _zap = tickbox_testkit::ScriptedZap::start(&ctx, |_| 400);
        let publisher = ctx.socket(zmq::XPUB).unwrap();
        publisher.set_linger(0).unwrap();
        publisher.set_zap_domain("test").unwrap();
        publisher.bind("tcp://127.0.0.1:*").unwrap();
        let endpoint = tickbox_zmqx::socket::last_endpoint(&publisher).unwrap();

        let sub = ctx.socket(zmq::SUB).unwrap();
        sub.set_linger(0).unwrap();
        let mut watch = HandshakeWatch::start(&ctx, &sub, None, "test reader").unwrap();
        sub.connect(&endpoint).unwrap();
        let refusals = |watch: &mut HandshakeWatch, at: Instant| {
            let deadline = Instant::now() + Duration::from_secs(10);
            let mut found = Handshakes::default();
            while found.refused == 0 {
                assert!(Instant::now() < deadline, "no refusal seen");
                found = watch.read(at);
                std::thread::sleep(Duration::from_millis(5));
            }
            found
        };
        let t0 = Instant::now();
        assert_eq!(refusals(&mut watch, t0).succeeded, 0);
        let due = watch.next_due().expect("a redial is due");
        assert_eq!(due, t0 + REDIAL_FIRST);
        // Not before its wait; then the second attempt is refused too, and waits twice as long.
        watch.redial(&sub, t0);
        assert_eq!(watch.next_due(), Some(due));
        watch.redial(&sub, due);
        assert_eq!(watch.next_due(), None);
        refusals(&mut watch, due);
        assert_eq!(watch.next_due(), Some(due + 2 * REDIAL_FIRST));
    }
}
