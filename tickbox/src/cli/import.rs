//! `tickbox import`: its command-line arguments (what it parses; `cmd::import` wires them).

use std::path::PathBuf;

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// DBN files, imported in this order (`.dbn`, `.dbn.zst`, legacy `.dbz`, headerless fragments).
    #[arg(required = true, value_name = "PATH")]
    pub(crate) files: Vec<PathBuf>,
    /// The journal to write: a new archive directory (refused if it exists).
    #[arg(long, value_name = "PATH")]
    pub(crate) journal: PathBuf,
    /// Archive segment size (64MiB, 1GiB, ...).
    #[arg(long, default_value = "64MiB", value_name = "SIZE")]
    pub(crate) segment_size: String,
    /// DBN version of headerless fragments (default: `.v1.`/`.v2.`/`.v3.` in the file name, else unknown).
    #[arg(long, value_parser = clap::value_parser!(u8).range(1..=3), value_name = "N")]
    pub(crate) fragment_version: Option<u8>,
    /// Print one JSON object (the manifest, records, seconds, records/s) instead of the table.
    #[arg(long)]
    pub(crate) json: bool,
}
