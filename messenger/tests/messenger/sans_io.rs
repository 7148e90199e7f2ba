//! The messenger engine is sans-IO: its source file may not mention `zmq`. The I/O thread (`io`) lives beside
//! it.

use std::path::Path;

/// The line by which an engine module turns on the sans-IO bans of the workspace `clippy.toml`.
const LINT: &str = "#![deny(clippy::disallowed_methods, clippy::disallowed_types)]";

#[test]
fn engine_module_never_mentions_zmq() {
    let file = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/engine.rs");
    let text = std::fs::read_to_string(&file).unwrap();
    assert!(
        text.contains("pub struct MessengerEngine"),
        "the engine moved: update this test"
    );
    assert!(!text.contains("zmq"), "{} mentions zmq", file.display());
    // The compiler's half of the rule: clippy.toml's clock, randomness, sleep and socket bans, denied here.
    assert!(
        text.contains(LINT),
        "{} does not deny the sans-IO lints",
        file.display()
    );
}
