//! Clone: a replicated key-value store over 12/CHP (PROTOCOLS.md §7) with Binary Star failover (§8).
//!
//! * [`msg`] — the CHP frames ([`KvMsg`], ICANHAZ).
//! * [`server::ServerEngine`] — sans-IO server: map, strictly increasing sequence, subtree snapshots, HUGZ, TTL
//!   expiry, bounds, the Binary Star pending list and the passive mirror. [`CloneServer`] runs it on a thread with
//!   ROUTER (P, snapshots; also the Binary Star voter), PUB (P+1), SUB collector (P+2).
//! * [`engine::ClientEngine`] — sans-IO client: ICANHAZ after the subscription is live, KTHXBAI, stream, gap and
//!   silence detection, failover. [`CloneClient`] is the Guide's agent-thread client with an inproc PAIR pipe.
//! * [`recipes`] — membership leases under `/members/...` and config watching under `/config/...`.
//! * [`store`] — optional persistence (snapshot + CRC-checked append-only log).

pub mod client;
pub mod engine;
pub mod msg;
pub mod recipes;
pub mod server;
pub mod server_loop;
pub mod store;

pub use client::{ClientStatus, CloneClient};
pub use engine::{Change, ClientConfig};
pub use msg::KvMsg;
pub use server::ServerConfig;
pub use server_loop::{CloneServer, HaOptions, ServerBind, ServerEndpoints, ServerOptions};

/// Errors of the Clone client and server.
#[derive(Debug, thiserror::Error)]
pub enum CloneError {
    #[error("zmq: {0}")]
    Zmq(#[from] zmq::Error),
    #[error("I/O: {0}")]
    Io(#[from] std::io::Error),
    #[error("binary star: {0}")]
    Bstar(#[from] crate::bstar::BstarError),
    #[error("bad endpoint {0:?} (expected tcp://HOST:PORT)")]
    BadEndpoint(String),
    #[error("server setup failed: {0}")]
    Setup(String),
    #[error("no answer in time")]
    Timeout,
    #[error("the client agent thread is gone")]
    AgentGone,
    #[error("key {0:?} is outside this client's subtree, so its update cannot be acknowledged")]
    OutsideSubtree(String),
    #[error("store corrupt: {0}")]
    Corrupt(String),
}

/// The `[clone]` section of the deployment config: server limits/timing, client timing, Binary Star timing.
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct CloneConfig {
    pub server: ServerConfig,
    pub client: ClientConfig,
    pub bstar: crate::bstar::BstarConfig,
}
