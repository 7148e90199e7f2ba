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

/// Sends ICANHAZ on a DEALER.
pub fn send_icanhaz(socket: &zmq::Socket, subtree: &str) -> zmq::Result<()> {
    socket.send(ICANHAZ, zmq::SNDMORE)?;
    socket.send(subtree.as_bytes(), 0)
}
