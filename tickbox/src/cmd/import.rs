//! `tickbox import FILE... --journal PATH`: DBN files (v1-v3, plain or zstd, legacy DBZ, headerless fragments)
//! into a new archive journal of vendor frames. The work is `tickbox_dbn::import_files`; this file parses
//! arguments and prints the outcome.

use std::process::ExitCode;

use anyhow::Context;
use tickbox_dbn::{import_files, ImportOptions};

use crate::cli::import::Args;
use crate::config::TickboxConfig;
use crate::out::outln;

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
