//! Integration tests of tickbox-reliable.
//!
//! One test binary for the crate (one link, one process start per run): each former test file is a module.

mod sans_io;
