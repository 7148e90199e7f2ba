//! Majordomo (7/MDP 0.1, 18/MDP 0.2 draft) with the management interface (8/MMI), the broker as a Binary Star
//! pair, and Titanic (9/TSP) durable request-reply on top. The protocol engines ([`proto`], [`engine`]) never
//! touch a socket (`tests/sans_io.rs` enforces it); the socket layers sit beside them. May depend on
//! `tickbox-reliable` (timers, Binary Star engine), `tickbox-bstar` (the pair's state sockets),
//! `tickbox-journal` (Titanic's durable store), `tickbox-zmqx` and `zmq`; never on the data plane.
//!
//! * [`engine::broker`]: the sans-IO broker ([`Broker`]); [`broker::run_broker`] is its socket loop.
//! * [`client`]: synchronous ([`client::Client`]) and asynchronous ([`client::AsyncClient`]) client APIs.
//! * [`engine::worker`]: the worker's liveness engine; [`worker::MdpWorker`] is the API a service author uses.
//! * [`pair`]: the broker as one half of a Binary Star pair ([`pair::run_broker_pair`]).
//! * [`status`]: a tiny `tickbox.<component>.status` worker for data-plane components.
//! * [`engine::titanic`]: the Titanic index and rules; [`titanic`] couples them to the journal and the broker.
//!
//! Frame layouts follow docs/book/src/protocols.md §2–§4 byte for byte; [`proto`] holds the constants and the parsers.

pub mod board;
pub mod broker;
pub mod client;
pub mod engine;
pub mod metrics;
pub mod overrides;
pub mod pair;
pub mod proto;
pub mod reply_text;
pub mod status;
pub mod summary;
pub mod titanic;
pub mod worker;

pub use broker::{run_broker, run_broker_gated};
pub use client::{AsyncClient, Client, ClientConfig};
pub use engine::broker::{Broker, BrokerConfig, BrokerStats, OpenGate, RequestGate};
pub use pair::{run_broker_pair, PairError, PairOptions};
pub use proto::{Frames, Version};
pub use status::{spawn_status_worker, StatusWorker};
pub use worker::{MdpWorker, MdpWorkerConfig, Request};

/// Errors of the Majordomo client and worker APIs.
#[derive(Debug, thiserror::Error)]
pub enum MdpError {
    /// A socket operation failed.
    #[error("zmq: {0}")]
    Zmq(#[from] zmq::Error),
    /// Every attempt timed out: broker or service absent, or too slow for the configured timeout.
    #[error("no reply from {service:?} after {attempts} attempt(s)")]
    Timeout {
        /// The service asked.
        service: String,
        /// Attempts made, each waiting the full timeout.
        attempts: u32,
    },
    /// The reply did not parse as MDP or answered another service; the socket is reset.
    #[error("malformed reply: {0}")]
    Malformed(&'static str),
    /// The call itself was wrong (empty body, no endpoint, reserved service name, …); nothing was sent.
    #[error("invalid argument: {0}")]
    Invalid(&'static str),
    /// The stop flag was raised while waiting.
    #[error("interrupted by the stop flag")]
    Interrupted,
    /// `[security]` could not be applied to a socket.
    #[error(transparent)]
    Auth(#[from] tickbox_auth::AuthError),
}
