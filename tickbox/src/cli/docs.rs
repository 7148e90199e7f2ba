//! `tickbox docs`: its command-line arguments (what it parses; `cmd::docs` wires them).

use std::path::PathBuf;

#[derive(Debug, clap::Args)]
pub(crate) struct CompletionsArgs {
    /// The shell to write a completion script for: `source <(tickbox completions bash)`.
    pub(crate) shell: clap_complete::Shell,
}

#[derive(Debug, clap::Args)]
pub(crate) struct ManArgs {
    /// The command whose page to print, as on the command line (`journal verify`); none: tickbox's own page.
    #[arg(value_name = "COMMAND")]
    pub(crate) command: Vec<String>,
    /// Write every page (tickbox.1, tickbox-feed.1, tickbox-journal-verify.1, ...) into this directory instead,
    /// and list them.
    #[arg(long, value_name = "DIR", conflicts_with = "command")]
    pub(crate) dir: Option<PathBuf>,
}
