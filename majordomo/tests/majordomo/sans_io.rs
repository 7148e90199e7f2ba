//! The Majordomo and Titanic engines and the MDP codec are sans-IO: none of their source files may mention
//! `zmq`. The socket layers (`broker`, `worker`, `client`, `pair`, `status`, `titanic`) live beside them.

use std::path::Path;

/// The line by which an engine module turns on the sans-IO bans of the workspace `clippy.toml`.
const LINT: &str = "#![deny(clippy::disallowed_methods, clippy::disallowed_types)]";

#[test]
fn engine_modules_never_mention_zmq() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = vec![root.join("proto.rs")];
    for entry in std::fs::read_dir(root.join("engine")).unwrap() {
        files.push(entry.unwrap().path());
    }
    assert!(
        files.len() >= 5,
        "expected proto.rs and engine/{{mod,broker,worker,titanic}}.rs; found {files:?}"
    );
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        assert!(!text.contains("zmq"), "{} mentions zmq", file.display());
        // The compiler's half of the rule: clippy.toml's clock, randomness, sleep and socket bans, denied here.
        if !file.ends_with("mod.rs") {
            assert!(
                text.contains(LINT),
                "{} does not deny the sans-IO lints",
                file.display()
            );
        }
    }
}
