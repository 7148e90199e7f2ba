//! Every module of this crate is a protocol engine or timer: none may mention `zmq`, so no socket type can leak
//! into the shared sans-IO layer.

use std::path::Path;

fn rust_files(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The line by which an engine module turns on the sans-IO bans of the workspace `clippy.toml`.
const LINT: &str = "#![deny(clippy::disallowed_methods, clippy::disallowed_types)]";

#[test]
fn no_module_mentions_zmq() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    assert!(
        files.len() >= 3,
        "expected lib.rs, bstar.rs, timers.rs; found {files:?}"
    );
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        assert!(!text.contains("zmq"), "{} mentions zmq", file.display());
        // The compiler's half of the rule: clippy.toml's clock, randomness, sleep and socket bans, denied here.
        if !file.ends_with("lib.rs") {
            assert!(
                text.contains(LINT),
                "{} does not deny the sans-IO lints",
                file.display()
            );
        }
    }
    let manifest =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("Cargo.toml")).unwrap();
    assert!(!manifest.contains("zmq"), "Cargo.toml depends on zmq");
}
