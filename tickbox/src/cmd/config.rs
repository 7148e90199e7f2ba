//! `tickbox config`: print the effective configuration (defaults merged with `--config`) as TOML, so the
//! reference for every field is the program itself and can never drift from it.

use std::process::ExitCode;

use crate::cli::config::Args;
use crate::config::TickboxConfig;
use crate::out::out;

pub(crate) fn run(_args: Args, config: &TickboxConfig) -> anyhow::Result<ExitCode> {
    out!("{}", config.to_toml()?);
    Ok(ExitCode::from(crate::exit_code::OK))
}
