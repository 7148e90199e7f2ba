// Shared by the integration tests (each includes it with `mod common;`).
#![allow(dead_code)]

use std::path::PathBuf;

use tickbox_tuning::topology::{self, Topology};

pub fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

pub fn read(name: &str) -> Topology {
    topology::read(&fixture(name)).unwrap()
}
