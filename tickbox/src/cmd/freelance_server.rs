//! `tickbox freelance-server`: a Freelance (10/FLP) server. Its routing identity is its public endpoint.

use std::process::ExitCode;

use anyhow::Context;
use tickbox_pirates::freelance::run_freelance_server;

use crate::config::TickboxConfig;

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// Endpoint to bind, e.g. `tcp://*:5555` or `ipc:///tmp/fl.sock`.
    #[arg(long)]
    bind: String,
    /// The exact endpoint string clients connect to; it becomes the server identity [default: --bind].
    #[arg(long)]
    endpoint: Option<String>,
    /// Echo the request body instead of answering `OK` (the Guide's flserver3 answers `OK`).
    #[arg(long)]
    echo: bool,
}

pub(crate) fn run(args: Args, _config: &TickboxConfig) -> anyhow::Result<ExitCode> {
    let public = args.endpoint.clone().unwrap_or_else(|| args.bind.clone());
    let stop = crate::shutdown::flag();
    let ctx = zmq::Context::new();
    println!("freelance server {public} listening on {}", args.bind);
    let echo = args.echo;
    let stats = run_freelance_server(&ctx, &args.bind, &public, &stop, |body| {
        if echo {
            body.to_vec()
        } else {
            vec![b"OK".to_vec()]
        }
    })
    .context("freelance server")?;
    println!(
        "pings {}  requests {}  malformed {}",
        stats.pings, stats.requests, stats.malformed
    );
    Ok(ExitCode::SUCCESS)
}
