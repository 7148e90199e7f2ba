//! Integration tests of tickbox-tuning.
//!
//! One test binary for the crate (one link, one process start per run): each former test file is a module.

mod check;
mod common;
mod planner;
mod sweep;
mod topology;
