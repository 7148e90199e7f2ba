//! `tickbox keygen`: its command-line arguments (what it parses; `cmd::keygen` wires them).

use std::path::PathBuf;

/// `tickbox keygen`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// Certificate to write: a NAME, or a path such as `keys/feed` (its directory must exist). Writes NAME (public:
    /// share it) and NAME_secret (secret, mode 0600).
    #[arg(value_name = "NAME|PATH")]
    pub(crate) name: PathBuf,
    /// Directory to write a plain NAME into (default: the current directory).
    #[arg(long, value_name = "DIR")]
    pub(crate) dir: Option<PathBuf>,
    /// Name the files as pyzmq's `zmq.auth.create_certificates` does, NAME.key and NAME.key_secret: pyzmq's allow
    /// directories load only `*.key` files (tickbox reads both namings).
    #[arg(long)]
    pub(crate) pyzmq: bool,
}
