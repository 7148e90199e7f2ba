//! Binary Star over ZeroMQ: [`BstarNode`] owns the two state sockets of one server of a pair (PUB bound at
//! `state_bind`, SUB connected to the peer) and feeds what they carry to the sans-IO
//! [`tickbox_reliable::bstar::BinaryStar`] engine. It is the one socket wrapper shared by both servers that run
//! Binary Star (the Clone server and the Majordomo broker pair), so neither family depends on the other. May
//! depend on `tickbox-reliable` (the engine), `tickbox-zmqx` and `zmq`; nothing above it.
//!
//! The server loop adds [`BstarNode::socket`] to its own `zmq::poll` set (POLLIN), calls
//! [`BstarNode::on_readable`] when it fires, [`BstarNode::handle_timeout`] on every turn, and [`BstarNode::vote`]
//! for every request on its voter socket; [`BstarNode::poll_timeout_ms`] bounds the poll.

#![warn(missing_docs)]

use std::time::Instant;

use tickbox_zmqx::socket::{PassBudget, WarnGate};

pub use tickbox_reliable::bstar::{
    BinaryStar, BstarConfig, BstarEndpoints, BstarError, Event, Role, State, Transition, Vote,
};

/// Errors of a [`BstarNode`]: the engine's protocol errors plus the sockets' own.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum BstarNodeError {
    /// Dual actives/passives or a malformed frame, exactly as the engine reports them.
    #[error(transparent)]
    Protocol(#[from] BstarError),
    /// A state socket failed.
    #[error("zmq: {0}")]
    Zmq(#[from] zmq::Error),
    /// `[security]` could not be applied to a state socket (the text of the `tickbox_auth::AuthError`).
    #[error("{0}")]
    Auth(String),
}

impl From<tickbox_auth::AuthError> for BstarNodeError {
    fn from(err: tickbox_auth::AuthError) -> Self {
        BstarNodeError::Auth(err.to_string())
    }
}

/// Thin reactor helper: the engine plus its PUB/SUB state sockets. Lives on the server loop's thread.
pub struct BstarNode {
    engine: BinaryStar,
    publisher: zmq::Socket,
    subscriber: zmq::Socket,
    bad_frames: u64,
    /// The peer (or, without `[security]`, anyone who reaches the state port) decides how many bad frames come.
    bad_frame_log: WarnGate,
}

impl BstarNode {
    /// Binds the state PUB at `endpoints.state_bind`, connects the state SUB to `endpoints.state_peer` and
    /// starts the engine in `role`. Both state sockets follow the gate's `[security]`, role `bstar`: the PUB is a
    /// CURVE server made by the gate (ZAP domain `bstar`), the SUB expects the peer's key
    /// (`[security.roles.bstar] server_key`).
    pub fn new(
        gate: &tickbox_auth::Gate,
        role: Role,
        endpoints: &BstarEndpoints,
        config: &BstarConfig,
        now: Instant,
    ) -> Result<Self, BstarNodeError> {
        let security = gate.security();
        let publisher = gate.socket(zmq::PUB, "bstar")?;
        publisher.set_linger(0)?;
        publisher.bind(&endpoints.state_bind)?;
        let subscriber = gate.context().socket(zmq::SUB)?;
        subscriber.set_linger(0)?;
        subscriber.set_subscribe(b"")?;
        security.client(&subscriber, "bstar")?;
        subscriber.connect(&endpoints.state_peer)?;
        Ok(BstarNode {
            engine: BinaryStar::new(role, config, now),
            publisher,
            subscriber,
            bad_frames: 0,
            bad_frame_log: WarnGate::new(),
        })
    }

    /// The actual endpoint the state PUB is bound to (useful with `tcp://127.0.0.1:*`).
    pub fn state_endpoint(&self) -> Result<String, BstarNodeError> {
        Ok(tickbox_zmqx::socket::last_endpoint(&self.publisher)?)
    }

    /// The engine, for its deadlines and peer state.
    pub fn engine(&self) -> &BinaryStar {
        &self.engine
    }

    /// The engine's current state.
    pub fn state(&self) -> State {
        self.engine.state()
    }

    /// Malformed state frames dropped so far.
    pub fn bad_frames(&self) -> u64 {
        self.bad_frames
    }

    /// The SUB socket to add to the loop's poll set (POLLIN).
    pub fn socket(&self) -> &zmq::Socket {
        &self.subscriber
    }

    /// Reads the state SUB, up to a pass's share ([`PassBudget`]: a flood of state messages cannot hold up the
    /// server's loop). Malformed frames are counted, logged at most once a second and dropped. Returns the last
    /// transition seen (a burst of state messages yields at most one real change in practice), or the
    /// dual-active/passive error.
    pub fn on_readable(&mut self, now: Instant) -> Result<Transition, BstarNodeError> {
        let mut result = Transition::None;
        let mut budget = PassBudget::per_socket();
        while budget.has_room() {
            let parts = match self.subscriber.recv_multipart(zmq::DONTWAIT) {
                Ok(parts) => parts,
                Err(zmq::Error::EAGAIN) => break,
                Err(err) => return Err(err.into()),
            };
            budget.take_frames(&parts);
            if parts.len() != 1 {
                self.bad_frames += 1;
                if let Some(held_back) = self.bad_frame_log.allow(now) {
                    tracing::warn!(
                        frames = parts.len(),
                        bad_frames = self.bad_frames,
                        held_back,
                        "binary star: dropped state message with wrong frame count"
                    );
                }
                continue;
            }
            match self.engine.handle_peer_frame(now, &parts[0]) {
                Ok(Transition::None) => {}
                Ok(t) => result = t,
                Err(BstarError::BadStateFrame(text)) => {
                    self.bad_frames += 1;
                    if let Some(held_back) = self.bad_frame_log.allow(now) {
                        tracing::warn!(
                            frame = %text,
                            bad_frames = self.bad_frames,
                            held_back,
                            "binary star: dropped malformed state frame"
                        );
                    }
                }
                Err(err) => return Err(err.into()),
            }
        }
        Ok(result)
    }

    /// Publish our state if a heartbeat is due. Call every loop turn.
    pub fn handle_timeout(&mut self, now: Instant) -> Result<(), BstarNodeError> {
        self.engine.handle_timeout(now);
        if let Some(frame) = self.engine.poll_output() {
            match self.publisher.send(frame, zmq::DONTWAIT) {
                Ok(()) | Err(zmq::Error::EAGAIN) => {}
                Err(err) => return Err(err.into()),
            }
        }
        Ok(())
    }

    /// A client request arrived on the voter socket.
    pub fn vote(&mut self, now: Instant) -> (Vote, Transition) {
        let result = self.engine.handle_client_request(now);
        if result.1 != Transition::None {
            // Publish the new state immediately so the peer stops waiting.
            let _ = self.handle_timeout(now);
        }
        result
    }

    /// Milliseconds until the next heartbeat, for `zmq::poll`.
    pub fn poll_timeout_ms(&self, now: Instant) -> i64 {
        match self.engine.poll_timeout() {
            Some(deadline) => tickbox_zmqx::socket::poll_ms_until(deadline, now),
            None => -1,
        }
    }
}
