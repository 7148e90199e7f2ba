//! Integration tests of tickbox-auth (the whole-process RSS check is tests/zap.rs, its own binary).
//!
//! One test binary for the crate (one link, one process start per run): each former test file is a module.

mod sans_io;
