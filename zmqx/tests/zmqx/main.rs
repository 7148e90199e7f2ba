//! Integration tests of tickbox-zmqx.
//!
//! One test binary for the crate (one link, one process start per run): each former test file is a module.

mod clean_pipes;
mod context;
mod libzmq_build;
