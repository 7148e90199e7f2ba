//! Integration tests of tickbox-feed.
//!
//! One test binary for the crate (one link, one process start per run): each former test file is a module.

mod batch;
mod generator;
mod guide_framing;
mod publisher;
mod source;
