//! `tickbox keygen NAME`: a CURVE key pair as czmq-format certificates, `NAME` (public, shareable) and
//! `NAME_secret` (mode 0600), readable by pyzmq's `zmq.auth.load_certificate` and czmq.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;

use crate::config::TickboxConfig;
use crate::out::outln;

/// `tickbox keygen`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// Certificate name: writes NAME (public) and NAME_secret (secret, mode 0600).
    name: String,
    /// Directory to write into (default: the current directory).
    #[arg(long, default_value = ".", value_name = "DIR")]
    dir: PathBuf,
}

pub(crate) fn run(args: Args, _config: &TickboxConfig) -> anyhow::Result<ExitCode> {
    anyhow::ensure!(
        !args.name.is_empty() && !args.name.contains('/') && !args.name.ends_with("_secret"),
        "keygen: NAME must be a plain file name not ending in _secret (got {:?})",
        args.name
    );
    let mut cert = tickbox_auth::fresh_pair()?;
    cert.metadata.push(("name".into(), args.name.clone()));
    let (public, secret) = cert
        .save_pair(&args.dir, &args.name)
        .with_context(|| format!("keygen {}", args.name))?;
    outln!("public key {}", cert.public_z85());
    outln!(
        "wrote {} (public: share it) and {} (secret: keep it)",
        public.display(),
        secret.display()
    );
    Ok(ExitCode::SUCCESS)
}
