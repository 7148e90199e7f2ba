//! `tickbox import FILE... --journal PATH`: DBN files (v1-v3, plain or zstd, legacy DBZ, headerless fragments)
//! into a new archive journal of vendor frames. The work is `tickbox_dbn::import_files`; this file parses
//! arguments and prints the outcome.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use tickbox_dbn::{import_files, ImportOptions};

use crate::config::TickboxConfig;
use crate::out::outln;

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// DBN files, imported in this order (`.dbn`, `.dbn.zst`, legacy `.dbz`, headerless fragments).
    #[arg(required = true)]
    files: Vec<PathBuf>,
    /// The journal to write: a new archive directory (refused if it exists).
    #[arg(long, value_name = "PATH")]
    journal: PathBuf,
    /// Archive segment size (64MiB, 1GiB, ...).
    #[arg(long, default_value = "64MiB", value_name = "SIZE")]
    segment_size: String,
    /// DBN version of headerless fragments (default: `.v1.`/`.v2.`/`.v3.` in the file name, else unknown).
    #[arg(long, value_parser = clap::value_parser!(u8).range(1..=3), value_name = "N")]
    fragment_version: Option<u8>,
    /// Print one JSON object (the manifest, records, seconds, records/s) instead of the table.
    #[arg(long)]
    json: bool,
}

pub(crate) fn run(args: Args, _config: &TickboxConfig) -> anyhow::Result<ExitCode> {
    let opts = ImportOptions {
        segment_size: tickbox_units::parse_size(&args.segment_size)
            .with_context(|| format!("--segment-size {}", args.segment_size))?,
        fragment_version: args.fragment_version,
        ..ImportOptions::default()
    };
    let summary = import_files(&args.journal, &args.files, &opts)?.summary(&args.journal);
    if args.json {
        crate::out::json(&summary)?;
    } else {
        outln!("{summary}");
    }
    Ok(ExitCode::SUCCESS)
}
