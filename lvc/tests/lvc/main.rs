//! Integration tests of tickbox-lvc (tests/lvc_alloc.rs and tests/snapshot.rs own their process and stay apart).
//!
//! One test binary for the crate (one link, one process start per run): each former test file is a module.

mod batches;
mod hostile;
mod lvc;
mod lvc_util;
mod plain_publisher;
mod snapshot_golden;
mod snapshot_measure;
mod tap;
