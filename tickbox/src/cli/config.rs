//! `tickbox config`: its command-line arguments (what it parses; `cmd::config` wires them).

#[derive(Debug, clap::Args)]
pub(crate) struct Args {}
