//! Clone: a replicated key-value store over 12/CHP (PROTOCOLS.md §7) with Binary Star failover (§8). This crate
//! is the whole family: the sans-IO engines ([`msg`] codec, [`engine::server`], [`engine::client`]) that never
//! touch a socket (`tests/sans_io.rs` enforces it), and beside them the thin socket layers ([`server_loop`],
//! [`client`], [`io`]), persistence ([`store`]) and the [`recipes`]. May depend on `tickbox-reliable` (Binary
//! Star engine), `tickbox-bstar` (its state sockets), `tickbox-zmqx` and `zmq`; never on the data plane.
//!
//! * [`msg`] — the CHP frames ([`KvMsg`], ICANHAZ); [`io`] puts them on a socket.
//! * [`engine::server::ServerEngine`] — sans-IO server: map, strictly increasing sequence, subtree snapshots,
//!   HUGZ, TTL expiry, bounds, the Binary Star pending list and the passive mirror. [`CloneServer`] runs it on a
//!   thread with ROUTER (P, snapshots; also the Binary Star voter), PUB (P+1), SUB collector (P+2).
//! * [`engine::client::ClientEngine`] — sans-IO client: ICANHAZ after the subscription is live, KTHXBAI, stream,
//!   gap and silence detection, failover. [`CloneClient`] is the Guide's agent-thread client with an inproc PAIR
//!   pipe.
//! * [`recipes`] — membership leases under `/members/...` and config watching under `/config/...`.
//! * [`store`] — optional persistence (snapshot + CRC-checked append-only log).

pub mod client;
pub mod engine;
pub mod io;
pub mod msg;
pub mod recipes;
pub mod server_loop;
pub mod store;

pub use client::{ClientStatus, CloneClient};
pub use engine::client::{Change, ClientConfig};
pub use engine::server::ServerConfig;
pub use msg::KvMsg;
pub use server_loop::{CloneServer, HaOptions, ServerBind, ServerEndpoints, ServerOptions};

/// Errors of the Clone client and server.
#[derive(Debug, thiserror::Error)]
pub enum CloneError {
    #[error("zmq: {0}")]
    Zmq(#[from] zmq::Error),
    #[error("I/O: {0}")]
    Io(#[from] std::io::Error),
    #[error("binary star: {0}")]
    Bstar(#[from] tickbox_bstar::BstarNodeError),
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
    pub bstar: tickbox_reliable::bstar::BstarConfig,
}
