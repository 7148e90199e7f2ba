//! Integration tests of tickbox-pirates.
//!
//! One test binary for the crate (one link, one process start per run): each former test file is a module.

mod freelance_conformance;
mod pirate_faults;
mod sans_io;
