// PLACEHOLDER: owned by the helper implementing this command; replaced before landing.
use std::process::ExitCode;

use crate::config::TickboxConfig;

#[derive(Debug, clap::Args)]
pub struct Args {}

pub fn run(_args: Args, _config: &TickboxConfig) -> anyhow::Result<ExitCode> {
    anyhow::bail!("not implemented yet")
}
