//! Integration tests of tickbox-recorder.
//!
//! One test binary for the crate (one link, one process start per run): each former test file is a module.

mod accounting;
mod batch;
mod batch_throughput;
mod batched;
mod live;
mod overview;
mod shards;
