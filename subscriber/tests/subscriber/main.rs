//! Integration tests of tickbox-subscriber (the Black Box).
//!
//! One test binary for the crate (one link, one process start per run): each former test file is a module.

mod batches;
mod blackbox;
mod dispatch;
mod guide;
mod latency;
mod sequences;
mod threshold;
mod with_feed;
mod worker_panic;
