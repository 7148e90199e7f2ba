//! `tickbox keygen NAME`: a CURVE key pair as czmq-format certificates, `NAME` (public, shareable) and
//! `NAME_secret` (mode 0600), readable by pyzmq's `zmq.auth.load_certificate` and czmq.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;

use crate::cli::keygen::Args;
use crate::config::TickboxConfig;
use crate::out::outln;

pub(crate) fn run(args: Args, _config: &TickboxConfig) -> anyhow::Result<ExitCode> {
    let (dir, name) = split(&args)?;
    let mut cert = tickbox_auth::fresh_pair()?;
    cert.metadata.push(("name".into(), name.clone()));
    let file = if args.pyzmq {
        format!("{name}.key")
    } else {
        name.clone()
    };
    let (public, secret) = cert
        .save_pair(&dir, &file)
        .with_context(|| format!("keygen {}", dir.join(&file).display()))?;
    outln!("public key {}", cert.public_z85());
    outln!(
        "wrote {} (public: share it) and {} (secret: keep it)",
        public.display(),
        secret.display()
    );
    Ok(ExitCode::SUCCESS)
}

/// The directory and the certificate's name, from a NAME with `--dir` or a path.
fn split(args: &Args) -> anyhow::Result<(PathBuf, String)> {
    let name = args
        .name
        .file_name()
        .and_then(|n| n.to_str())
        .filter(|n| !n.is_empty() && !n.ends_with("_secret") && !n.ends_with(".key"))
        .ok_or_else(|| {
            anyhow::anyhow!(
                "keygen: {} must name a certificate: a file name not ending in _secret or .key (use --pyzmq for \
                 pyzmq's NAME.key)",
                args.name.display()
            )
        })?
        .to_owned();
    let parent = args
        .name
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .map(PathBuf::from);
    let dir = match (parent, &args.dir) {
        (Some(_), Some(_)) => anyhow::bail!(
            "keygen: give a path ({}) or a NAME with --dir, not both",
            args.name.display()
        ),
        (Some(parent), None) => parent,
        (None, Some(dir)) => dir.clone(),
        (None, None) => PathBuf::from("."),
    };
    anyhow::ensure!(
        dir.is_dir(),
        "keygen: {} is not a directory (create it first)",
        dir.display()
    );
    Ok((dir, name))
}
