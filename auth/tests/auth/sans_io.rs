//! The policy engine, the grants and the certificate format decide without sockets: none of those modules may use
//! the `zmq` crate (the loop in `zap.rs` and `security.rs` are the only socket code).

/// The line by which an engine module turns on the sans-IO bans of the workspace `clippy.toml`.
const LINT: &str = "#![deny(clippy::disallowed_methods, clippy::disallowed_types)]";

#[test]
fn engine_modules_do_not_use_zmq() {
    let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    for module in [
        "policy.rs",
        "grants.rs",
        "cert.rs",
        "config.rs",
        "z85.rs",
        "stats.rs",
    ] {
        let text = std::fs::read_to_string(src.join(module)).unwrap();
        assert!(
            !text.contains("zmq::") && !text.contains("use zmq"),
            "{module} uses the zmq crate"
        );
    }
    // The compiler's half of the rule for the decision engines: clippy.toml's clock, randomness, sleep and socket
    // bans, denied in the module.
    for module in ["policy.rs", "cap.rs"] {
        let text = std::fs::read_to_string(src.join(module)).unwrap();
        assert!(
            text.contains(LINT),
            "{module} does not deny the sans-IO lints"
        );
    }
}
