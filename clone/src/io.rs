//! The CHP frames on a socket: the only place a [`KvMsg`] or an ICANHAZ meets `zmq`. The codec itself
//! ([`crate::msg`]) stays sans-IO.

use crate::msg::{KvMsg, ICANHAZ};

impl KvMsg {
    /// Sends the five frames, optionally after a routing identity.
    pub fn send(&self, socket: &zmq::Socket, identity: Option<&[u8]>) -> zmq::Result<()> {
        self.send_with(socket, identity, 0)
    }

    /// [`Self::send`] with extra flags on the first frame only (e.g. `DONTWAIT`). On a ROUTER with
    /// `ZMQ_ROUTER_MANDATORY` a full or vanished peer is reported on that first frame, so a message is either sent
    /// whole or not started: never left half-written.
    pub fn send_with(
        &self,
        socket: &zmq::Socket,
        identity: Option<&[u8]>,
        first_flags: i32,
    ) -> zmq::Result<()> {
        match identity {
            Some(id) => {
                socket.send(id, zmq::SNDMORE | first_flags)?;
                socket.send(self.key.as_bytes(), zmq::SNDMORE)?;
            }
            None => socket.send(self.key.as_bytes(), zmq::SNDMORE | first_flags)?,
        }
        socket.send(&self.seq.to_be_bytes()[..], zmq::SNDMORE)?;
        match &self.uuid {
            Some(u) => socket.send(&u[..], zmq::SNDMORE)?,
            None => socket.send(&[][..], zmq::SNDMORE)?,
        }
        socket.send(&self.props[..], zmq::SNDMORE)?;
        socket.send(&self.value[..], 0)
    }
}

/// Sends ICANHAZ on a DEALER without blocking: `Ok(false)` when the DEALER has no connection to queue it on.
/// A blocking send would wait for ever when the server never completes the handshake (a CURVE server that
/// refuses this key, or expects another), and the loop would stop answering its caller; the caller's own
/// timeout and retry (the client's failover, the passive server's snapshot retry) send it again.
pub fn send_icanhaz(socket: &zmq::Socket, subtree: &str) -> zmq::Result<bool> {
    match socket.send(ICANHAZ, zmq::SNDMORE | zmq::DONTWAIT) {
        Ok(()) => {}
        Err(zmq::Error::EAGAIN) => return Ok(false),
        Err(err) => return Err(err),
    }
    // The first frame went out, so the rest of the message is queued with it.
    socket.send(subtree.as_bytes(), 0)?;
    Ok(true)
}
