//! Integration tests of tickbox-wire.
//!
//! One test binary for the crate (one link, one process start per run): each former test file is a module.

mod batch_properties;
mod golden;
mod properties;
mod sequence_flood;
