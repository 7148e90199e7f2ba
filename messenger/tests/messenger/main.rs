//! Integration tests of tickbox-messenger.
//!
//! One test binary for the crate (one link, one process start per run): each former test file is a module.

mod messenger_bounds;
mod messenger_dedup_prop;
mod messenger_faults;
mod sans_io;
