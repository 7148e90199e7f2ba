//! Integration tests of tickbox-journal.
//!
//! One test binary for the crate (one link, one process start per run): each former test file is a module.

mod compress;
mod disk;
mod hardening;
mod journal;
