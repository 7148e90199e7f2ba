//! What tickbox's integration tests share, in one place instead of a copy per test file: a fake publisher
//! ([`FakePublisher`]), frame builders ([`quote`]), a child-process guard that kills and reaps on every path
//! ([`ChildGuard`]), re-running one test of the current binary in a child process ([`self_test_command`]),
//! private scratch directories ([`TempDir`]), the sans-IO check of a crate's engine files ([`sans_io`]), bounded
//! waits on a condition ([`wait_until`], [`wait_for`]), deliberate damage to files ([`damage`]), the memory a
//! process holds ([`memory`]) and the CPU time it spends ([`cpu`]), simulated time for sans-IO engines ([`sim`])
//! and a ZAP handler whose answers a test scripts ([`ScriptedZap`]).
//!
//! A dev-dependency only: the workspace test in this crate fails if any crate names it under `[dependencies]`.

pub mod cpu;
pub mod damage;
mod frames;
pub mod memory;
mod process;
mod publisher;
pub mod sans_io;
pub mod sim;
mod temp;
mod wait;
mod zap;

pub use frames::{batches, market_frame, quote, QuoteFrame};
pub use process::{self_test_command, self_test_name, ChildGuard};
pub use publisher::FakePublisher;
pub use temp::TempDir;
pub use wait::{await_published, poll_until, retry_while, wait_for, wait_until};
pub use zap::ScriptedZap;

/// Binds `socket` to a free loopback TCP port and returns the endpoint it got (never a fixed port).
pub fn bind_loopback(socket: &zmq::Socket) -> String {
    tickbox_zmqx::bind_resolved(socket, "tcp://127.0.0.1:*").expect("bind tcp://127.0.0.1:*")
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    /// A `[dependencies]` (or `[build-dependencies]`, or target-specific) entry on the kit would ship test fakes
    /// in a product crate; only `[dev-dependencies]` may name it. Reads every workspace member's manifest.
    #[test]
    fn no_crate_depends_on_the_kit_outside_dev_dependencies() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
        let workspace = std::fs::read_to_string(root.join("Cargo.toml")).unwrap();
        let members: Vec<&str> = workspace
            .split("members = [")
            .nth(1)
            .and_then(|s| s.split(']').next())
            .expect("a members list in the workspace manifest")
            .split(',')
            .map(|m| m.trim().trim_matches('"'))
            .filter(|m| !m.is_empty())
            .collect();
        assert!(members.len() > 10, "read only {members:?}");
        let mut users = 0;
        for member in members {
            let manifest = std::fs::read_to_string(root.join(member).join("Cargo.toml")).unwrap();
            let mut section = String::new();
            for line in manifest.lines() {
                let line = line.trim();
                if line.starts_with('[') {
                    section = line.to_owned();
                } else if line.starts_with("tickbox-testkit") {
                    assert!(
                        section.ends_with("dev-dependencies]"),
                        "{member} names tickbox-testkit under {section}: the kit is for tests only"
                    );
                    users += 1;
                }
            }
        }
        assert!(
            users > 0,
            "no crate uses the kit: is the check reading the right section names?"
        );
    }
}
