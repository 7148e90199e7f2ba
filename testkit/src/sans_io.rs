//! The grep half of the sans-IO rule for a crate's engine modules (the compiler's half is `clippy.toml`'s bans,
//! which each engine module turns on with [`LINT`]).

use std::path::{Path, PathBuf};

/// The line by which an engine module turns on the sans-IO bans of the workspace `clippy.toml`.
pub const LINT: &str = "#![deny(clippy::disallowed_methods, clippy::disallowed_types)]";

/// `extra` (files beside the engine folder, e.g. a codec) and every file of `src/engine/` of the crate at
/// `manifest_dir`; panics unless there are at least `at_least` of them (a renamed folder must not pass empty).
pub fn engine_files(manifest_dir: &str, extra: &[&str], at_least: usize) -> Vec<PathBuf> {
    let root = Path::new(manifest_dir).join("src");
    let mut files: Vec<PathBuf> = extra.iter().map(|f| root.join(f)).collect();
    for entry in std::fs::read_dir(root.join("engine")).expect("src/engine") {
        files.push(entry.expect("a directory entry").path());
    }
    assert!(
        files.len() >= at_least,
        "expected at least {at_least} engine files; found {files:?}"
    );
    files
}

/// Panics unless no file mentions `zmq` and every one but `mod.rs` denies the sans-IO lints.
pub fn assert_sans_io(files: &[PathBuf]) {
    for file in files {
        let text =
            std::fs::read_to_string(file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        assert!(!text.contains("zmq"), "{} mentions zmq", file.display());
        if !file.ends_with("mod.rs") {
            assert!(
                text.contains(LINT),
                "{} does not deny the sans-IO lints",
                file.display()
            );
        }
    }
}
