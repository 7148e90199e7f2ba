//! Reliable request-reply from the Guide's chapter 4, without Majordomo: the Lazy Pirate client ([`lazy`]), the
//! Paranoid Pirate queue and worker (6/PPP: engines in [`engine::ppp`], sockets in [`ppp`]) and Freelance
//! (10/FLP: engines in [`engine::freelance`], sockets in [`freelance`]). The engines never touch a socket
//! (`tests/sans_io.rs` enforces it); their heartbeat/back-off timers come from `tickbox-reliable`, shared with
//! Majordomo. May depend on `tickbox-reliable`, `tickbox-zmqx` and `zmq`; never on the data plane.

pub mod engine;
pub mod flags;
pub mod freelance;
pub mod lazy;
pub mod metrics;
pub mod ppp;
pub mod summary;

pub use engine::ppp::{
    Frames, PppConfig, PppQueue, PppQueueStats, PppWorkerAction, PppWorkerEngine, QueueOut,
    PPP_HEARTBEAT, PPP_READY,
};
pub use lazy::{LazyPirate, LazyPirateConfig};
pub use ppp::{run_ppp_queue, PppWorker};

/// Errors of the Pirate socket layers.
#[derive(Debug, thiserror::Error)]
pub enum PirateError {
    /// A socket call failed.
    #[error("zmq: {0}")]
    Zmq(#[from] zmq::Error),
    /// `[security]` could not be applied to a socket.
    #[error(transparent)]
    Auth(#[from] tickbox_auth::AuthError),
    /// Every attempt timed out; the number of attempts made.
    #[error("no reply after {0} attempt(s); giving up")]
    Exhausted(u32),
    /// The request had no frame.
    #[error("a request needs at least one frame")]
    EmptyRequest,
    /// The caller's stop flag was set while waiting.
    #[error("interrupted by the stop flag")]
    Interrupted,
}
