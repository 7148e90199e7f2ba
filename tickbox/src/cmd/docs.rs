//! `tickbox completions SHELL` and `tickbox man`: shell completion scripts and a man page, both generated from the
//! CLI definition itself so they can never list a flag the program does not take.

use std::process::ExitCode;

use crate::config::TickboxConfig;

#[derive(Debug, clap::Args)]
pub(crate) struct CompletionsArgs {
    /// The shell to write a completion script for: `source <(tickbox completions bash)`.
    shell: clap_complete::Shell,
}

pub(crate) fn completions(
    args: CompletionsArgs,
    _config: &TickboxConfig,
) -> anyhow::Result<ExitCode> {
    let mut command = crate::command();
    clap_complete::generate(args.shell, &mut command, "tickbox", &mut std::io::stdout());
    Ok(ExitCode::from(crate::exit_code::OK))
}

#[derive(Debug, clap::Args)]
pub(crate) struct ManArgs {}

pub(crate) fn man(_args: ManArgs, _config: &TickboxConfig) -> anyhow::Result<ExitCode> {
    clap_mangen::Man::new(crate::command()).render(&mut std::io::stdout())?;
    Ok(ExitCode::from(crate::exit_code::OK))
}
