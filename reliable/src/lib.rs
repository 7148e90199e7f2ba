//! Sans-IO building blocks shared by several control-plane protocol families: the Binary Star state machine
//! ([`bstar`], used by the Clone server and the Majordomo broker pair) and the heartbeat liveness and
//! exponential back-off timers ([`timers`], used by Paranoid Pirate and the Majordomo worker). Everything here
//! is a plain state machine driven by "a message arrived" and "now is t"; this crate may depend on std, serde,
//! thiserror and tracing only, never on a socket library or any other I/O crate (`tests/sans_io.rs` enforces
//! it), so the socket crates above it can share one implementation of each rule.
//!
//! # One vocabulary for every engine
//!
//! Every protocol engine of the workspace (Binary Star here; the Clone server and client, the Majordomo broker and
//! worker, the Paranoid Pirate queue and worker, the Freelance agent and the messenger above) has the same shape,
//! after `quinn-proto`, and spells it the same way:
//!
//! * **input**: `handle_input(now, input)` when something arrived on the engine's one input; an engine fed by
//!   several sockets names each input `handle_<source>(now, …)` (`handle_frontend`/`handle_backend` of the
//!   Paranoid Pirate queue, `handle_update`/`handle_snapshot` of the Clone client, `handle_peer_state` and
//!   `handle_client_request` of Binary Star). `now` comes first. The data-plane engines follow the same names
//!   where they take input (`handle_upstream`/`handle_downstream` of the LVC engine, `handle_input` of the
//!   recorder's history service, `handle_live`/`handle_history` of the subscriber's catch-up); those that count
//!   frames on the hot path and keep no timers (the sequence tracker, the snail) are fed by plain calls.
//! * **timers**: `handle_timeout(now)` when the deadline passed; calling it early, or on every loop turn, is
//!   harmless.
//! * **output**: `poll_output() -> Option<…>`: the next message to send or action to take; the loop calls it until
//!   `None` after every `handle_*` call.
//! * **deadlines**: `poll_timeout() -> Option<Instant>`: when `handle_timeout` is next due; `None` when the engine
//!   waits for nothing but input.
//!
//! Commands from the application (`request`, `reply`, `connect`, `send`, `become_active`) are plain methods beside
//! these. An engine never reads the clock, makes random ids, sleeps or touches a socket: its module says
//! `#![deny(clippy::disallowed_methods, clippy::disallowed_types)]` and the workspace `clippy.toml` lists what is
//! banned, so a leak fails `cargo clippy`. The thin loop beside each engine owns the sockets and the clock, and
//! tests drive engines on simulated time.

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
