//! Clone: a replicated key-value store over 12/CHP (docs/book/src/protocols.md §7) with Binary Star failover (§8). This crate
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
//!
//! ## Refusals (a tickbox extension of CHP)
//!
//! CHP has no way for the server to reject a KVSET: a refused update simply never appears on the stream, which
//! a writer cannot tell from a dead server. When the tickbox server refuses a KVSET that carries a UUID (key or
//! value or properties too long, reserved key, key or byte budget full, or a `/config/` write from a key that
//! `[security] config_writers` does not list: its `User-Id`, read by the socket loop), it publishes a **`NOPE` notice** on the
//! update publisher: `["NOPE"][current seq][uuid of the refused update][reason=CODE\n][CODE]`, with the reason
//! codes of [`engine::server::DropReason::code`] (`key-too-long`, `value-too-large`, `props-too-long`,
//! `too-many-keys`, `too-many-bytes`, `reserved-key`, `unauthorised`). The sequence is the server's current one and is not
//! incremented, as for HUGZ, so a Guide client (which only applies sequences above its own, and which with a
//! subtree does not even receive the key) ignores it; the tickbox client subscribes to `NOPE` and fails the
//! waiting [`CloneClient::set`] with [`CloneError::Refused`]. Notices are rate-limited
//! ([`ServerConfig::refusal_notices_per_sec`]); a suppressed one is normally answered when the client resends.
//! See [`ServerConfig`] for the budget policy that decides which sets are refused.
//!
//! ## Bounds on what peers can make the server hold
//!
//! * the map: two budgets of keys and bytes ([`ServerConfig`]), refusals answered as above;
//! * snapshots: per-requester send queue (`snapshot_hwm`, with `ZMQ_ROUTER_MANDATORY`), snapshots in flight
//!   (`max_snapshots_in_flight`, `max_snapshots_per_peer`) and a stall timeout; refusals counted;
//! * frames: `ZMQ_MAXMSGSIZE` on every bound socket — ROUTER and XPUB get `control_max_frame`, the collector the
//!   largest accepted key/value/properties frame; subscriptions above `max_subscription_len` are refused;
//! * logs: warnings a peer can trigger repeatedly are rate-limited, with the suppressed count in the next line.

pub mod client;
pub mod engine;
pub mod io;
pub mod metrics;
pub mod msg;
pub mod overrides;
pub mod pair;
pub mod recipes;
pub mod request;
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
    /// A socket call failed.
    #[error("zmq: {0}")]
    Zmq(#[from] zmq::Error),
    /// `[security]` could not be applied to a socket.
    #[error(transparent)]
    Auth(#[from] tickbox_auth::AuthError),
    /// Reading or writing the persistence files (or spawning a thread) failed.
    #[error("I/O: {0}")]
    Io(#[from] std::io::Error),
    /// The Binary Star pair failed: dual actives/passives, or a state socket error.
    #[error("binary star: {0}")]
    Bstar(#[from] tickbox_bstar::BstarNodeError),
    /// An endpoint that is not `tcp://HOST:PORT` (or a port too high for the P..P+2 triple), or an empty list.
    #[error("bad endpoint {0:?} (expected tcp://HOST:PORT)")]
    BadEndpoint(String),
    /// The server thread could not bind its sockets or load its store; the text is the underlying error.
    #[error("server setup failed: {0}")]
    Setup(String),
    /// The client agent, or the server behind it, did not answer within the caller's timeout.
    #[error("no answer in time")]
    Timeout,
    /// The agent (or server) thread has exited, so the request can never be answered.
    #[error("the client agent thread is gone")]
    AgentGone,
    /// An acknowledged set of a key the client does not subscribe to: the echo that acknowledges it never arrives.
    #[error("key {0:?} is outside this client's subtree, so its update cannot be acknowledged")]
    OutsideSubtree(String),
    /// The server refused the update and said why; the text is the reason code (see the crate docs on `NOPE`).
    #[error("refused by the server: {0}")]
    Refused(String),
    /// The snapshot file is damaged (short header, bad magic or a bad record); a torn log tail is cut off instead.
    #[error("store corrupt: {0}")]
    Corrupt(String),
}

/// The `[clone]` section of the deployment config: server limits/timing, client timing, Binary Star timing.
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct CloneConfig {
    /// `[clone.server]`: limits and timers of `tickbox clone-server`.
    pub server: ServerConfig,
    /// `[clone.client]`: timing of every Clone client the binary starts (`tickbox ctl`, subscribers' config watch).
    pub client: ClientConfig,
    /// `[clone.bstar]`: Binary Star heartbeat of a server pair; both servers must use the same values.
    pub bstar: tickbox_reliable::bstar::BstarConfig,
}
