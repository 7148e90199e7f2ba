//! A Majordomo broker as one half of a Binary Star pair (docs/book/src/protocols.md §8). The broker ROUTER is the voter
//! socket: a client request is served only while this broker is active, and a passive broker takes over only
//! when its peer has been silent for the expiry *and* a client request arrives (the reactor rule). Rejected
//! requests are dropped silently; the client times out and tries the other broker.
//!
//! Workers may register with both brokers; only client requests are gated.

use std::sync::atomic::AtomicBool;
use std::time::Instant;

use crate::broker::run_broker_gated;
use crate::engine::broker::{BrokerConfig, BrokerStats, RequestGate};
use crate::MdpError;
use tickbox_bstar::{
    BstarConfig, BstarEndpoints, BstarNode, BstarNodeError, Role, State, Transition, Vote,
};

struct BstarGate {
    node: BstarNode,
    fatal: Option<BstarNodeError>,
}

impl BstarGate {
    fn log(&self, t: Transition) {
        match t {
            Transition::BecameActive => tracing::info!("binary star: broker is now ACTIVE"),
            Transition::BecamePassive => tracing::info!("binary star: broker is now PASSIVE"),
            Transition::None => {}
        }
    }
}

impl RequestGate for BstarGate {
    fn allow(&mut self, now: Instant) -> bool {
        let (vote, t) = self.node.vote(now);
        self.log(t);
        vote == Vote::Accept
    }

    fn service(&mut self, now: Instant) -> bool {
        match self.node.on_readable(now) {
            Ok(t) => self.log(t),
            Err(e) => {
                tracing::error!("binary star: {e}; stopping this broker");
                self.fatal = Some(e);
                return false;
            }
        }
        if let Err(e) = self.node.handle_timeout(now) {
            tracing::error!("binary star: {e}; stopping this broker");
            self.fatal = Some(e);
            return false;
        }
        true
    }

    fn poll_timeout(&self) -> Option<Instant> {
        self.node.engine().poll_timeout()
    }
}

/// Errors of a broker pair member.
#[derive(Debug, thiserror::Error)]
pub enum PairError {
    /// The broker's own socket loop failed.
    #[error(transparent)]
    Mdp(#[from] MdpError),
    /// The Binary Star state exchange failed or hit a fatal dual-active / dual-passive condition.
    #[error("binary star: {0}")]
    Bstar(#[from] BstarNodeError),
}

/// Which half of the pair this broker is and where the state sockets live.
#[derive(Clone, Debug)]
pub struct PairOptions {
    /// Primary or backup: the primary is active first when both start together.
    pub role: Role,
    /// Where this broker publishes its state and where the peer's state is read.
    pub state: BstarEndpoints,
    /// State heartbeat and peer expiry.
    pub bstar: BstarConfig,
}

/// Run a broker at `endpoint` as one half of a Binary Star pair until `stop` (or a fatal dual-active /
/// dual-passive condition, returned as an error). Returns the broker statistics and the final pair state.
pub fn run_broker_pair(
    auth_gate: &tickbox_auth::Gate,
    endpoint: &str,
    cfg: BrokerConfig,
    pair: &PairOptions,
    stop: &AtomicBool,
    bound: Option<std::sync::mpsc::Sender<String>>,
) -> Result<(BrokerStats, State), PairError> {
    let node = BstarNode::new(
        auth_gate,
        pair.role,
        &pair.state,
        &pair.bstar,
        Instant::now(),
    )?;
    let mut gate = BstarGate { node, fatal: None };
    let stats = run_broker_gated(auth_gate, endpoint, cfg, stop, bound, &mut gate)?;
    if let Some(e) = gate.fatal {
        return Err(e.into());
    }
    Ok((stats, gate.node.state()))
}
