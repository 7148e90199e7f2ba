//! The sans-IO halves of Majordomo and Titanic: state machines fed with received frames and "now is t",
//! returning the frames to send and the next deadline. No module under `engine` may use sockets
//! (`tests/sans_io.rs`).

pub mod broker;
pub mod titanic;
pub mod worker;
