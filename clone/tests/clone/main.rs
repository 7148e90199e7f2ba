//! Integration tests of tickbox-clone: Clone, Binary Star failover, security, teardown.
//!
//! One test binary for the crate (one link, one process start per run): each former test file is a module.

mod bstar_failover;
mod clone_e2e;
mod clone_perf;
mod clone_security;
mod clone_stalled_watcher;
mod clone_teardown;
mod clone_wire;
mod sans_io;
