//! The fake upstream every subscriber-side test needs: an XPUB that shows subscriptions and never drops.

use std::time::{Duration, Instant};

use tickbox_wire::{encode_to_vec, Header, Payload};

/// A publisher that sees subscriptions (XPUB, verbose) and never drops (NODROP, blocking sends, no send HWM), so
/// tests can wait for a subscriber's subscription and count on every message reaching it.
pub struct FakePublisher {
    /// The socket, for tests that need an option or a multipart send of their own.
    pub socket: zmq::Socket,
    /// Where it is bound, read back from the socket.
    pub endpoint: String,
}

impl FakePublisher {
    /// Bound to a free loopback TCP port.
    pub fn bind(ctx: &zmq::Context) -> Self {
        Self::bind_at(ctx, "tcp://127.0.0.1:*")
    }

    /// Bound to `endpoint` (an `ipc://` path, an interface); panics if it cannot bind.
    pub fn bind_at(ctx: &zmq::Context, endpoint: &str) -> Self {
        Self::try_bind_at(ctx, endpoint).unwrap()
    }

    /// Bound to `endpoint`, or the bind error (tests of what a bad endpoint does).
    pub fn try_bind_at(
        ctx: &zmq::Context,
        endpoint: &str,
    ) -> Result<Self, tickbox_zmqx::ZmqxError> {
        let mut socket = ctx.socket(zmq::XPUB).unwrap();
        // Long enough for a last burst to leave when a test drops the publisher right after sending.
        socket.set_linger(100).unwrap();
        socket.set_xpub_verbose(true).unwrap();
        socket.set_sndhwm(0).unwrap();
        tickbox_zmqx::set_xpub_nodrop(&mut socket, true).unwrap();
        let endpoint = tickbox_zmqx::bind_resolved(&socket, endpoint)?;
        Ok(FakePublisher { socket, endpoint })
    }

    /// The next subscription frame (`1` + prefix, or `0` + prefix for an unsubscribe), or `None` after `timeout`.
    pub fn next_subscription(&self, timeout: Duration) -> Option<Vec<u8>> {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if self.socket.poll(zmq::POLLIN, 50).unwrap() > 0 {
                return Some(self.socket.recv_bytes(0).unwrap());
            }
        }
        None
    }

    /// Waits for a subscription: nothing sent before one arrives would reach the subscriber.
    #[track_caller]
    pub fn await_subscription(&self, timeout: Duration) -> Vec<u8> {
        self.next_subscription(timeout)
            .unwrap_or_else(|| panic!("no subscription within {timeout:?}"))
    }

    /// Sends one frame.
    pub fn send(&self, frame: &[u8]) {
        self.socket.send(frame, 0).unwrap();
    }

    /// Encodes and sends one message.
    pub fn send_message(&self, topic: &str, header: &Header, payload: &Payload) {
        self.send(&encode_to_vec(topic, header, payload).unwrap());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_subscriber_gets_every_frame_sent_after_its_subscription_is_seen() {
        let ctx = zmq::Context::new();
        let publisher = FakePublisher::bind(&ctx);
        assert!(publisher.endpoint.starts_with("tcp://127.0.0.1:"));
        assert!(!publisher.endpoint.ends_with(":*"));
        let sub = ctx.socket(zmq::SUB).unwrap();
        sub.set_linger(0).unwrap();
        sub.set_rcvtimeo(5_000).unwrap();
        sub.connect(&publisher.endpoint).unwrap();
        sub.set_subscribe(b"Q.").unwrap();
        assert_eq!(
            publisher.await_subscription(Duration::from_secs(5)),
            b"\x01Q."
        );
        for seq in 1..=100 {
            publisher.send(&crate::quote("Q.X", 1, seq).frame());
        }
        for seq in 1..=100 {
            let frame = sub.recv_bytes(0).unwrap();
            let m = tickbox_wire::MessageRef::decode(&frame).unwrap();
            assert_eq!(m.header().sequence, seq);
        }
    }
}
