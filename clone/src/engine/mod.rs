//! The sans-IO halves of Clone: state machines fed with decoded messages and "now is t", returning the
//! messages to send and the next deadline. No module under `engine` may use sockets (`tests/sans_io.rs`).

pub mod client;
pub mod server;
