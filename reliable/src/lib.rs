//! Sans-IO building blocks shared by several control-plane protocol families: the Binary Star state machine
//! ([`bstar`], used by the Clone server and the Majordomo broker pair) and the heartbeat liveness and
//! exponential back-off timers ([`timers`], used by Paranoid Pirate and the Majordomo worker). Everything here
//! is a plain state machine driven by "a message arrived" and "now is t"; this crate may depend on std, serde,
//! thiserror and tracing only, never on a socket library or any other I/O crate (`tests/sans_io.rs` enforces
//! it), so the socket crates above it can share one implementation of each rule.

#![warn(missing_docs)]

pub mod bstar;
pub mod timers;

pub use timers::{Backoff, Liveness, LivenessEvent, PeerClock};

/// One multipart message, one `Vec<u8>` per frame: the unit every engine consumes and produces.
pub type Frames = Vec<Vec<u8>>;

/// Milliseconds as a `Duration`, for config fields kept in ms so TOML stays readable.
pub fn ms(v: u64) -> std::time::Duration {
    std::time::Duration::from_millis(v)
}
