//! Every command's `--help` lists its exit codes, and the book's table (docs/book/src/exit-codes.md) names, for
//! each code, exactly the commands whose help lists it; the mismatches a newcomer met are pinned here too
//! (`demo --rate 0` is a usage error like `feed --rate 0`, `coord` without ZooKeeper exits 4, `coord get` of a
//! missing node says `error:`).

use crate::common;

use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;
use std::time::Duration;

use common::{output_within, TICKBOX};

fn help(path: &[&str]) -> String {
    let mut cmd = Command::new(TICKBOX);
    cmd.args(path).arg("--help");
    let out = output_within(cmd, Duration::from_secs(10));
    assert!(out.status.success(), "{path:?} --help failed");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The subcommands a help text lists (its `Commands:` section, `help` left out).
fn subcommands(help: &str) -> Vec<String> {
    help.lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .filter_map(|l| l.split_whitespace().next())
        .filter(|name| *name != "help")
        .map(str::to_owned)
        .collect()
}

/// The codes of a help text's `Exit codes:` line.
fn codes(help: &str, path: &str) -> BTreeSet<u8> {
    let line = help
        .lines()
        .find_map(|l| l.split("Exit codes: ").nth(1))
        .unwrap_or_else(|| panic!("`{path} --help` has no Exit codes line"));
    line.split("; ")
        .map(|item| {
            item.split_whitespace()
                .next()
                .and_then(|c| c.parse().ok())
                .unwrap_or_else(|| panic!("`{path}`: {item:?} is not `CODE meaning`"))
        })
        .collect()
}

/// Every leaf command, with the codes its help lists.
fn every_command() -> BTreeMap<String, BTreeSet<u8>> {
    let mut out = BTreeMap::new();
    let mut todo: Vec<Vec<String>> = vec![Vec::new()];
    while let Some(path) = todo.pop() {
        let args: Vec<&str> = path.iter().map(String::as_str).collect();
        let text = help(&args);
        let subs = subcommands(&text);
        let name = path.join(" ");
        // Groups list their members' codes too; leaves are what the book names.
        codes(&text, &name);
        if subs.is_empty() {
            out.insert(name.clone(), codes(&text, &name));
        }
        for s in subs {
            let mut child = path.clone();
            child.push(s);
            todo.push(child);
        }
    }
    out
}

/// The book's table: code → the commands it names (`None` for "every command").
fn book() -> BTreeMap<u8, Option<BTreeSet<String>>> {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let chapter = std::fs::read_to_string(root.join("docs/book/src/exit-codes.md")).unwrap();
    chapter
        .lines()
        .filter(|l| l.starts_with('|'))
        .filter_map(|l| {
            let cells: Vec<&str> = l.trim_matches('|').split('|').map(str::trim).collect();
            let code: u8 = cells.first()?.parse().ok()?;
            let who = cells.get(2)?;
            let commands = (*who != "every command").then(|| {
                who.split('`')
                    .skip(1)
                    .step_by(2)
                    // A flag in brackets says when (`replay` (`--local`)); commands are the rest.
                    .filter(|name| !name.starts_with('-'))
                    .map(str::to_owned)
                    .collect::<BTreeSet<String>>()
            });
            Some((code, commands))
        })
        .collect()
}

#[test]
fn every_help_lists_its_exit_codes_and_the_book_names_the_same_commands() {
    let commands = every_command();
    assert!(commands.len() > 30, "{commands:?}");
    let book = book();
    let mut listed: BTreeMap<u8, BTreeSet<String>> = BTreeMap::new();
    for (name, codes) in &commands {
        for code in [0, 1, 2] {
            assert!(codes.contains(&code), "`{name}` does not list {code}");
        }
        for &code in codes {
            listed.entry(code).or_default().insert(name.clone());
        }
    }
    for (code, names) in &listed {
        let Some(documented) = book.get(code) else {
            panic!("code {code} (listed by {names:?}) is not in the book's table");
        };
        match documented {
            None => assert_eq!(names.len(), commands.len(), "code {code} is not listed by every command"),
            Some(documented) => assert_eq!(
                documented, names,
                "the book's commands for exit code {code} differ from the commands whose --help lists it"
            ),
        }
    }
    for code in book.keys() {
        assert!(
            listed.contains_key(code),
            "the book lists {code}, no command's help does"
        );
    }
}

fn run(args: &[&str]) -> std::process::Output {
    let mut cmd = Command::new(TICKBOX);
    cmd.args(args).env_remove("RUST_LOG");
    output_within(cmd, Duration::from_secs(20))
}

#[test]
fn the_mismatches_a_newcomer_met_are_gone() {
    // A rate of 0 is a usage error in both commands that take one.
    for cmd in ["demo", "feed"] {
        let out = run(&[cmd, "--rate", "0", "--duration", "1s"]);
        assert_eq!(out.status.code(), Some(2), "{cmd} --rate 0");
    }
    // No ZooKeeper: no answer in time (4), said as an error line, whichever timeout gives up first.
    let out = run(&[
        "coord",
        "--zk",
        "127.0.0.1:1",
        "--connect-timeout",
        "1s",
        "get",
        "/x",
    ]);
    assert_eq!(out.status.code(), Some(4));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.starts_with("error: no ZooKeeper session with 127.0.0.1:1"),
        "{err}"
    );
}

#[test]
fn a_run_that_never_connects_says_so_within_seconds_and_ends() {
    // Port 1 of loopback: nothing listens there (a privileged port no test binds).
    let feed = std::thread::spawn(|| {
        run(&[
            "feed",
            "--connect",
            "tcp://127.0.0.1:1",
            "--rate",
            "1k",
            "--duration",
            "4s",
        ])
    });
    let started = std::time::Instant::now();
    let sub = run(&[
        "subscribe",
        "--connect",
        "tcp://127.0.0.1:1",
        "--idle-exit",
        "4s",
    ]);
    assert!(
        started.elapsed() < Duration::from_secs(15),
        "--idle-exit ended a silent run"
    );
    assert_eq!(sub.status.code(), Some(1), "received nothing at all");
    let err = String::from_utf8_lossy(&sub.stderr);
    assert!(
        err.contains("warning: nothing received in 3s: not connected: shard 0 (tcp://127.0.0.1:1)"),
        "{err}"
    );
    let feed = feed.join().unwrap();
    assert_eq!(
        feed.status.code(),
        Some(1),
        "a feed connected to nothing behaves like replay"
    );
    let err = String::from_utf8_lossy(&feed.stderr);
    assert!(err.contains("nothing has subscribed in 3s"), "{err}");
    assert!(
        err.contains("error: feed: delivered to no subscriber"),
        "{err}"
    );
}

#[test]
fn an_old_spelling_still_works_for_a_release_and_says_so() {
    let out = run(&[
        "ctl",
        "--server",
        "tcp://127.0.0.1:1",
        "--timeout",
        "300ms",
        "get",
        "/x",
    ]);
    assert_eq!(
        out.status.code(),
        Some(4),
        "parsed as --connect: no server answered"
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--server is deprecated for `ctl`: write --connect"),
        "{err}"
    );
}
