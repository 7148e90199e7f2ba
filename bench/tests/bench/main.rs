//! Integration tests of tickbox-bench.
//!
//! One test binary for the crate (one link, one process start per run): each former test file is a module.

mod injected_delay;
mod pipeline;
mod plots;
