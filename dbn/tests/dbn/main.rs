//! Integration tests of tickbox-dbn.
//!
//! One test binary for the crate (one link, one process start per run): each former test file is a module.

mod conformance;
mod dbz;
mod frame_props;
mod import_rate;
mod replay;
mod roundtrip;
mod wire_spec;
