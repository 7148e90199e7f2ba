//! Integration tests of tickbox-coord on a real ZooKeeper.
//!
//! One test binary for the crate (one link, one process start per run): each former test file is a module.

mod common;
mod kill;
mod locks;
mod outage;
mod recipes;
mod roles;
