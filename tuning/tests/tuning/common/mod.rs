//! Fixture helpers shared by the integration tests (each includes this module with `mod common;`).
#![allow(dead_code)]

use std::path::PathBuf;

use tickbox_tuning::topology::{self, Topology};

/// Path of the fixture host tree `name` under `tests/fixtures`.
pub(crate) fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

/// The topology of fixture host `name`; panics if the tree cannot be read.
pub(crate) fn read(name: &str) -> Topology {
    topology::read(&fixture(name)).unwrap()
}
