//! Which exit codes each command can end with, and what each means there: one table, from which every command's
//! `--help` gets its `Exit codes:` line. `docs/book/src/exit-codes.md` lists the same (its `commands` column), and
//! `tickbox/tests/cli/exit_codes.rs` compares the two, so neither can drift from the other.

use crate::exit_code::*;

/// The codes every command shares.
const COMMON: &[(u8, &str)] = &[
    (OK, "ok"),
    (ERROR, "error"),
    (2, "usage error (unknown flag, bad value)"),
];

/// Per command (its path of subcommand names): the codes beyond [`COMMON`], and a more precise meaning of 1
/// where the command has one.
struct Codes {
    path: &'static str,
    error: Option<&'static str>,
    more: &'static [(u8, &'static str)],
}

/// Every long-running command serves `--metrics`.
const METRICS: (u8, &str) = (
    METRICS_BIND,
    "the --metrics address is taken or not this host's",
);

const JOURNAL_HEADER: (u8, &str) = (
    CORRUPT,
    "a journal header it cannot trust (zeroed, overwritten)",
);

const TABLE: &[Codes] = &[
    Codes {
        path: "feed",
        error: Some(
            "error, or messages published while no subscriber was there to take them (`--connect` to nothing, no \
             subscriber at all) or still queued at the close",
        ),
        more: &[JOURNAL_HEADER, METRICS],
    },
    Codes {
        path: "subscribe",
        error: Some(
            "error, or nothing received at all (never connected, or connected and nothing matched --topics), or \
             every frame malformed",
        ),
        more: &[
            (SNAIL, "Suicidal Snail fired (a message later than --max-lateness, or a gap with --gap-policy die)"),
            (WORKER_FAILED, "a worker failed (the summary covers the others)"), METRICS],
    },
    Codes {
        path: "demo",
        error: None,
        more: &[
            (SNAIL, "Suicidal Snail fired"),
            (WORKER_FAILED, "a worker failed (the summary covers the others)"),
        ],
    },
    Codes {
        path: "lvc",
        error: None,
        more: &[METRICS],
    },
    Codes {
        path: "tap",
        error: Some("error, or nothing received at all"),
        more: &[],
    },
    Codes {
        path: "record",
        error: None,
        more: &[
            JOURNAL_HEADER,
            METRICS,
            (DISK_FULL, "stopped on a full disk (journal closed, summary printed), or too little free space to start"),
        ],
    },
    Codes {
        path: "replay",
        error: Some(
            "error, or no subscriber within --wait-timeout, or a run that delivered to no subscriber",
        ),
        more: &[
            (SNAIL, "--local: Suicidal Snail fired"),
            (CORRUPT, "damaged records skipped (or met, with --stop-on-corruption), or a damaged header"),
            (WORKER_FAILED, "--local: a worker failed"),
            (EMPTY_SELECTION, "the selection holds no record (the error says what the journal holds)"), METRICS, (STORE, "the object store (s3://) could not be reached or refused")],
    },
    Codes {
        path: "journal ls",
        error: Some("error (not a history directory, unreadable)"),
        more: &[(STORE, "the object store (s3://) could not be reached or refused")],
    },
    Codes {
        path: "journal prune",
        error: Some("error (not a history directory, a journal that could not be deleted)"),
        more: &[],
    },
    Codes {
        path: "journal info",
        error: Some("error (not a journal, unreadable)"),
        more: &[(CORRUPT, "a corrupt record or header")],
    },
    Codes {
        path: "journal verify",
        error: Some("error (not a journal, unreadable)"),
        more: &[
            (CORRUPT, "a corrupt record or header (each damaged range listed)"),
            (GAPPY, "--strict: intact but incomplete (gap records, or records a ring overwrote)"),
        ],
    },
    Codes {
        path: "journal dump",
        error: Some("error (not a journal, unreadable)"),
        more: &[(CORRUPT, "a corrupt record or header")],
    },
    Codes {
        path: "journal export",
        error: Some("error (not a journal, unreadable)"),
        more: &[(CORRUPT, "damaged records passed over, or a damaged header"), (STORE, "the object store (s3://) could not be reached or refused")],
    },
    Codes {
        path: "journal compress",
        error: Some("error (not a journal, unreadable, open for writing)"),
        more: &[(CORRUPT, "the journal does not verify: left as it was")],
    },
    Codes {
        path: "journal stitch",
        error: Some("error (no leadership log, an output that exists, unreadable input)"),
        more: &[],
    },
    Codes {
        path: "import",
        error: None,
        more: &[],
    },
    Codes {
        path: "bench latency",
        error: None,
        more: &[],
    },
    Codes {
        path: "bench throughput",
        error: None,
        more: &[],
    },
    Codes {
        path: "bench replay",
        error: None,
        more: &[JOURNAL_HEADER],
    },
    Codes {
        path: "bench record",
        error: None,
        more: &[],
    },
    Codes {
        path: "bench compress",
        error: None,
        more: &[],
    },
    Codes {
        path: "bench compare",
        error: None,
        more: &[(
            REGRESSION,
            "--fail-above: a figure regressed beyond the ratio, or nothing was comparable",
        )],
    },
    Codes {
        path: "clone-server",
        error: None,
        more: &[METRICS],
    },
    Codes {
        path: "ctl get",
        error: Some("error, or the key is absent"),
        more: &[(TIMEOUT, "no server answered within --timeout")],
    },
    Codes {
        path: "ctl set",
        error: None,
        more: &[
            (TIMEOUT, "no server answered within --timeout"),
            (REFUSED, "the server refused it, saying why"),
        ],
    },
    Codes {
        path: "ctl del",
        error: None,
        more: &[
            (TIMEOUT, "no server answered within --timeout"),
            (REFUSED, "the server refused it, saying why"),
        ],
    },
    Codes {
        path: "ctl ls",
        error: None,
        more: &[(TIMEOUT, "no server answered within --timeout")],
    },
    Codes {
        path: "ctl watch",
        error: None,
        more: &[(TIMEOUT, "no server answered within --timeout")],
    },
    Codes {
        path: "coord ls",
        error: None,
        more: &[(TIMEOUT, "no ZooKeeper session within --connect-timeout")],
    },
    Codes {
        path: "coord get",
        error: Some("error, or the node is absent"),
        more: &[(TIMEOUT, "no ZooKeeper session within --connect-timeout")],
    },
    Codes {
        path: "coord watch",
        error: Some("error, or the session expired"),
        more: &[(TIMEOUT, "no ZooKeeper session within --connect-timeout")],
    },
    Codes {
        path: "coord state",
        error: None,
        more: &[(TIMEOUT, "no ZooKeeper session within --connect-timeout")],
    },
    Codes {
        path: "coord lock",
        error: Some("error, or the lock was lost while held"),
        more: &[(
            TIMEOUT,
            "no ZooKeeper session within --connect-timeout, or the lock not acquired within --timeout",
        )],
    },
    Codes {
        path: "coord elect",
        error: Some("error, or the candidacy was lost"),
        more: &[(TIMEOUT, "no ZooKeeper session within --connect-timeout")],
    },
    Codes {
        path: "broker",
        error: None,
        more: &[METRICS],
    },
    Codes {
        path: "titanic",
        error: None,
        more: &[METRICS],
    },
    Codes {
        path: "freelance-server",
        error: None,
        more: &[METRICS],
    },
    Codes {
        path: "call",
        error: None,
        more: &[
            (TIMEOUT, "no reply within --timeout after every attempt"),
            (REFUSED, "the broker answered 403 unauthorised"),
        ],
    },
    Codes {
        path: "queue",
        error: None,
        more: &[METRICS],
    },
    Codes {
        path: "keygen",
        error: None,
        more: &[],
    },
    Codes {
        path: "config",
        error: None,
        more: &[],
    },
    Codes {
        path: "completions",
        error: None,
        more: &[],
    },
    Codes {
        path: "man",
        error: None,
        more: &[],
    },
    Codes {
        path: "top",
        error: Some("error, or --once and a process did not answer"),
        more: &[],
    },
    Codes {
        path: "tune show",
        error: None,
        more: &[],
    },
    Codes {
        path: "tune check",
        error: Some("error, or a warning stands under --strict"),
        more: &[],
    },
    Codes {
        path: "tune plan",
        error: None,
        more: &[],
    },
    Codes {
        path: "tune sweep",
        error: None,
        more: &[],
    },
];

/// The codes `path` (subcommand names joined by spaces) can end with, in order, with their meaning there; a
/// command that groups others (`journal`, `ctl`) gets every code of its members. `None` for an unknown path.
pub(crate) fn codes(path: &str) -> Option<Vec<(u8, &'static str)>> {
    let members: Vec<&Codes> = TABLE
        .iter()
        .filter(|c| c.path == path || c.path.starts_with(&format!("{path} ")) || path.is_empty())
        .collect();
    if members.is_empty() {
        return None;
    }
    let mut out: Vec<(u8, &'static str)> = COMMON.to_vec();
    if let [only] = members.as_slice() {
        if let Some(error) = only.error {
            out[1].1 = error;
        }
    }
    for c in &members {
        for &(code, meaning) in c.more {
            match out.iter_mut().find(|(have, _)| *have == code) {
                // Members of a group that share a code: its plain meaning.
                Some(slot) if slot.1 != meaning => slot.1 = general(code),
                Some(_) => {}
                None => out.push((code, meaning)),
            }
        }
    }
    if members.len() > 1 {
        for slot in out.iter_mut().skip(3) {
            slot.1 = general(slot.0);
        }
    }
    out.sort_by_key(|(code, _)| *code);
    Some(out)
}

/// A code's meaning in general (the book's table has the details).
fn general(code: u8) -> &'static str {
    match code {
        SNAIL => "Suicidal Snail fired",
        TIMEOUT => "no reply in time",
        CORRUPT => "journal corrupt",
        GAPPY => "journal intact but incomplete (verify --strict)",
        REFUSED => "refused by the server",
        WORKER_FAILED => "a worker failed",
        EMPTY_SELECTION => "replay selected no record",
        REGRESSION => "bench compare found a regression, or nothing comparable",
        METRICS_BIND => "the --metrics address is taken or not this host's",
        _ => "error",
    }
}

/// The `Exit codes: …` line of `path`'s help.
pub(crate) fn help_line(path: &str) -> Option<String> {
    let codes = codes(path)?;
    let list: Vec<String> = codes.iter().map(|(c, m)| format!("{c} {m}")).collect();
    Some(format!("Exit codes: {}.", list.join("; ")))
}

/// Puts the `Exit codes:` line under every command's help (replacing one written by hand in an `after_help`).
pub(crate) fn annotate(command: clap::Command) -> clap::Command {
    annotate_at(command, "")
}

fn annotate_at(mut command: clap::Command, path: &str) -> clap::Command {
    let names: Vec<String> = command
        .get_subcommands()
        .map(|c| c.get_name().to_owned())
        .collect();
    for name in names {
        let child = if path.is_empty() {
            name.clone()
        } else {
            format!("{path} {name}")
        };
        command = command.mut_subcommand(&name, |c| annotate_at(c, &child));
    }
    let Some(line) = help_line(path) else {
        return command;
    };
    let before = command
        .get_after_help()
        .map(|h| h.to_string())
        .unwrap_or_default();
    // A hand-written `Exit codes: …` sentence (up to the end of its line) gives way to the table's.
    let kept: Vec<&str> = before
        .lines()
        .map(|l| match l.find("Exit codes:") {
            Some(at) => l[..at].trim_end(),
            None => l,
        })
        .filter(|l| !l.is_empty())
        .collect();
    let text = if kept.is_empty() {
        line
    } else {
        format!("{}\n{line}", kept.join("\n"))
    };
    command.after_help(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_command_has_its_codes_and_every_code_in_the_table_is_defined() {
        let cli = <crate::Cli as clap::CommandFactory>::command();
        fn walk(c: &clap::Command, path: &str, out: &mut Vec<String>) {
            for s in c
                .get_subcommands()
                .filter(|s| s.get_name() != "help" && !s.is_hide_set())
            {
                let p = if path.is_empty() {
                    s.get_name().to_owned()
                } else {
                    format!("{path} {}", s.get_name())
                };
                walk(s, &p, out);
                out.push(p);
            }
        }
        let mut paths = Vec::new();
        walk(&cli, "", &mut paths);
        for p in &paths {
            assert!(codes(p).is_some(), "no exit codes for `{p}`");
        }
        for c in TABLE {
            assert!(
                paths.iter().any(|p| p == c.path),
                "`{}` is no command",
                c.path
            );
        }
        for c in TABLE {
            for meaning in c.error.iter().chain(c.more.iter().map(|(_, m)| m)) {
                assert!(
                    !meaning.contains(';'),
                    "`;` separates the codes of a help line: {meaning:?}"
                );
            }
        }
        let group = codes("journal").unwrap();
        assert!(group.iter().any(|(c, _)| *c == GAPPY));
        assert_eq!(codes("").unwrap().len(), ALL.len());
    }

    #[test]
    fn a_hand_written_exit_code_sentence_gives_way() {
        let cmd = clap::Command::new("t").subcommand(
            clap::Command::new("man").after_help("Something first.\nExit codes: 0 old; 9 wrong."),
        );
        let mut cmd = annotate(cmd);
        let help = cmd
            .find_subcommand_mut("man")
            .unwrap()
            .render_long_help()
            .to_string();
        assert!(help.contains("Something first."), "{help}");
        assert!(!help.contains("9 wrong"), "{help}");
        assert!(
            help.contains("Exit codes: 0 ok; 1 error; 2 usage error (unknown flag, bad value)."),
            "{help}"
        );
    }
}
