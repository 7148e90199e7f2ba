//! The policy engine, the grants and the certificate format decide without sockets: none of those modules may use
//! the `zmq` crate (the loop in `zap.rs` and `security.rs` are the only socket code).

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
}
