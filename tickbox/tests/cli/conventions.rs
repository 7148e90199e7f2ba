//! The conventions operators expect: shell completions and a man page generated from the CLI definition, and the
//! commented example configurations in `examples/` load as they are and say what they claim.

use crate::common;

use std::process::{Command, Output, Stdio};
use std::time::Duration;

use common::{output_within, TICKBOX};

fn run(args: &[&str]) -> Output {
    let mut cmd = Command::new(TICKBOX);
    cmd.args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    output_within(cmd, Duration::from_secs(20))
}

fn stdout_of(args: &[&str]) -> String {
    let out = run(args);
    assert_eq!(
        out.status.code(),
        Some(0),
        "tickbox {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn completions_cover_every_subcommand_for_each_shell() {
    for shell in ["bash", "zsh", "fish"] {
        let script = stdout_of(&["completions", shell]);
        for subcommand in [
            "feed",
            "subscribe",
            "replay",
            "journal",
            "completions",
            "man",
        ] {
            assert!(
                script.contains(subcommand),
                "{shell} completions lack {subcommand}"
            );
        }
        assert!(
            script.contains("max-lateness"),
            "{shell} completions lack subscribe's flags"
        );
    }
    assert_eq!(run(&["completions", "tcsh"]).status.code(), Some(2));
}

#[test]
fn the_man_page_is_roff_with_every_subcommand() {
    let page = stdout_of(&["man"]);
    assert!(
        page.starts_with(".ie") || page.contains(".TH tickbox"),
        "not roff:\n{}",
        &page[..page.len().min(200)]
    );
    for subcommand in [
        "feed",
        "subscribe",
        "lvc",
        "record",
        "replay",
        "journal",
        "tune",
    ] {
        assert!(page.contains(subcommand), "man page lacks {subcommand}");
    }
    assert!(page.contains("Exit codes"), "man page lacks the exit codes");
}

/// Loads `examples/NAME` through `tickbox --config … config` and returns the effective configuration.
fn example(name: &str) -> toml::Value {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../examples")
        .join(name);
    assert!(path.is_file(), "{} is missing", path.display());
    let text = stdout_of(&["--config", path.to_str().unwrap(), "config"]);
    text.parse().unwrap()
}

#[test]
fn the_example_configurations_load_and_say_what_they_claim() {
    let single = example("single-box.toml");
    assert_eq!(single["lvc"]["bind"].as_str(), Some("tcp://127.0.0.1:5558"));
    assert_eq!(
        single["subscriber"]["shards"][0]["connect"][0].as_str(),
        Some("tcp://127.0.0.1:5558"),
        "the subscriber reads the proxy"
    );
    assert_eq!(single["feed"]["shards"].as_array().unwrap().len(), 2);
    assert_eq!(single["recorder"]["mode"].as_str(), Some("ring"));

    let publisher = example("two-boxes-publisher.toml");
    let subscriber = example("two-boxes-subscriber.toml");
    assert_eq!(
        publisher["lvc"]["bind"].as_str(),
        subscriber["subscriber"]["shards"][0]["connect"][0].as_str(),
        "box B connects where box A's proxy binds"
    );
    assert_eq!(
        subscriber["subscriber"]["snail_mode"].as_str(),
        Some("skew_tolerant")
    );

    let per_nic = example("per-nic.toml");
    let shards = per_nic["subscriber"]["shards"].as_array().unwrap();
    let nics: Vec<_> = shards.iter().map(|s| s["nic"].as_str().unwrap()).collect();
    assert_eq!(nics, ["eth1", "eth2"], "one shard per NIC");
    assert_eq!(per_nic["context"]["io_threads"].as_integer(), Some(2));
}
