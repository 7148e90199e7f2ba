//! Flag spellings that changed, so one concept has one spelling across every command (`--repeats` as `tune
//! sweep` had it, `--connect` for every client, `--nic` for a NIC list, `--max-message-bytes`). The old spelling
//! stays accepted for one release, as a hidden alias of the new one, and using it says so, as `--no-drop` does.

/// An old spelling of `command`'s flag, and the one to write now.
pub(crate) struct Renamed {
    /// The command (first words of the command line) that took the old spelling.
    pub(crate) command: &'static str,
    pub(crate) old: &'static str,
    pub(crate) new: &'static str,
}

/// Every rename still accepted.
pub(crate) const RENAMED: &[Renamed] = &[
    Renamed {
        command: "ctl",
        old: "--server",
        new: "--connect",
    },
    Renamed {
        command: "bench",
        old: "--repeat",
        new: "--repeats",
    },
    Renamed {
        command: "tune plan",
        old: "--nics",
        new: "--nic",
    },
    Renamed {
        command: "freelance-server",
        old: "--max-message-size",
        new: "--max-message-bytes",
    },
    Renamed {
        command: "queue",
        old: "--max-message-size",
        new: "--max-message-bytes",
    },
];

/// The renamed flags `args` (the command line, program name first) uses in their old spelling.
pub(crate) fn old_spellings(args: &[String]) -> Vec<&'static Renamed> {
    let words: Vec<&str> = args
        .iter()
        .skip(1)
        .map(String::as_str)
        .filter(|a| !a.starts_with('-'))
        .collect();
    RENAMED
        .iter()
        .filter(|r| {
            let command: Vec<&str> = r.command.split(' ').collect();
            words
                .windows(command.len())
                .any(|w| w == command.as_slice())
                && args
                    .iter()
                    .any(|a| a == r.old || a.starts_with(&format!("{}=", r.old)))
        })
        .collect()
}

/// Warns once per old spelling used.
pub(crate) fn warn_old_spellings() {
    let args: Vec<String> = std::env::args().collect();
    for r in old_spellings(&args) {
        tracing::warn!(
            "{} is deprecated for `{}`: write {} (the old spelling is accepted until the next release)",
            r.old,
            r.command,
            r.new
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(s: &str) -> Vec<String> {
        std::iter::once("tickbox")
            .chain(s.split(' '))
            .map(str::to_owned)
            .collect()
    }

    #[test]
    fn old_spellings_are_found_under_their_command_only() {
        let found = old_spellings(&line("ctl --server tcp://a:1 get /x"));
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].new, "--connect");
        assert!(old_spellings(&line("bench latency --repeat=3")).len() == 1);
        assert!(old_spellings(&line("tune plan --nics eth0")).len() == 1);
        assert!(old_spellings(&line("ctl --connect tcp://a:1 get /x")).is_empty());
        assert!(
            old_spellings(&line("feed --repeat 3")).is_empty(),
            "not a bench"
        );
    }

    #[test]
    fn every_rename_is_an_alias_the_parser_takes() {
        let cli = crate::command();
        for r in RENAMED {
            let mut cmd = &cli;
            for word in r.command.split(' ') {
                cmd = cmd.find_subcommand(word).expect("the command exists");
            }
            let owners: Vec<&clap::Command> = if cmd.get_subcommands().next().is_some() {
                cmd.get_subcommands().chain(std::iter::once(cmd)).collect()
            } else {
                vec![cmd]
            };
            let new = r.new.trim_start_matches("--");
            let old = r.old.trim_start_matches("--");
            let arg = owners
                .iter()
                .flat_map(|c| c.get_arguments())
                .find(|a| a.get_long() == Some(new))
                .unwrap_or_else(|| panic!("`{}` has no {}", r.command, r.new));
            assert!(
                arg.get_all_aliases()
                    .is_some_and(|aliases| aliases.contains(&old)),
                "{} does not accept {}",
                r.new,
                r.old
            );
        }
    }
}
