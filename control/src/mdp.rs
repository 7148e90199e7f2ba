//! Majordomo (7/MDP 0.1, 18/MDP 0.2 draft) with the management interface (8/MMI).
//!
//! * [`broker`]: the sans-IO broker engine ([`broker::Broker`]) and its socket loop ([`broker::run_broker`]).
//! * [`client`]: synchronous ([`client::Client`]) and asynchronous ([`client::AsyncClient`]) client APIs.
//! * [`worker`]: the worker API ([`worker::Worker`]) driven by a sans-IO liveness engine.
//! * [`pair`]: the broker as one half of a Binary Star pair ([`pair::run_broker_pair`]).
//! * [`status`]: a tiny `tickbox.<component>.status` worker for data-plane components.
//!
//! Frame layouts follow PROTOCOLS.md §2–§4 byte for byte; [`proto`] holds the constants and the parsers.

pub mod broker;
pub mod client;
pub mod pair;
pub mod proto;
pub mod status;
pub mod worker;

pub use broker::{run_broker, run_broker_gated, Broker, BrokerConfig, BrokerStats, RequestGate};
pub use client::{AsyncClient, Client, ClientConfig};
pub use pair::{run_broker_pair, PairError, PairOptions};
pub use proto::{Frames, Version};
pub use status::{spawn_status_worker, StatusWorker};
pub use worker::{Request, Worker, WorkerConfig};

/// Errors of the Majordomo client and worker APIs.
#[derive(Debug, thiserror::Error)]
pub enum MdpError {
    #[error("zmq: {0}")]
    Zmq(#[from] zmq::Error),
    #[error("no reply from {service:?} after {attempts} attempt(s)")]
    Timeout { service: String, attempts: u32 },
    #[error("malformed reply: {0}")]
    Malformed(&'static str),
    #[error("invalid argument: {0}")]
    Invalid(&'static str),
    #[error("interrupted by the stop flag")]
    Interrupted,
}

/// Milliseconds as a `Duration`, for config fields kept in ms so TOML stays readable.
pub(crate) fn ms(v: u64) -> std::time::Duration {
    std::time::Duration::from_millis(v)
}
