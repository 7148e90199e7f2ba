//! `tickbox export`: its command-line arguments (what it parses; `cmd::export` wires them).

use super::{parse_tz, parse_when};
use std::path::PathBuf;
use tickbox_recorder::{TimeZone, When};

#[derive(Debug, clap::Args)]
pub(crate) struct ExportArgs {
    /// The journal: a ring file or archive directory, plain or compressed, or a history directory; or one in an
    /// object store (`--journal s3://bucket/prefix`, as `record --archive-to` leaves it), fetched to a temporary
    /// directory first.
    #[command(flatten)]
    pub(crate) journal: super::JournalArg,
    /// What `journal` names, once read (a local copy's for a store).
    #[arg(skip)]
    pub(crate) path: PathBuf,
    /// Output format: `parquet` (a dataset partitioned by date and kind), `csv` (one file per kind), `json`
    /// (one object per line), `dbn` (an import given back, or a recording's trades or quotes).
    #[arg(long, value_enum)]
    pub(crate) format: ExportFormat,
    /// Where to write: a path, file:///path or s3://bucket/prefix (credentials and endpoint from the AWS_*
    /// environment). Parquet and a CSV of several kinds write a directory (prefix); json, dbn and a CSV file
    /// ending in .csv write one file. Default: stdout (json, dbn, csv of one --kind). Never overwrites.
    #[arg(long, value_name = "PATH|URL")]
    pub(crate) out: Option<String>,
    /// Only these kinds (comma-separated: quote, trade, heartbeat, book_level, gap, vendor).
    #[arg(long, value_delimiter = ',', value_name = "KIND[,KIND…]")]
    pub(crate) kind: Vec<String>,
    /// Only records whose topic starts with one of these prefixes (comma-separated: `Q.XNAS.,T.XNAS.AAPL`).
    #[arg(long, value_delimiter = ',', value_name = "PREFIX[,PREFIX…]")]
    pub(crate) topics: Vec<String>,
    /// Only records captured at or after this: RFC 3339, a local date-time or time of day in --tz, ns since the
    /// epoch, or +DURATION after the first record (the replay's forms).
    #[arg(long, value_parser = parse_when, value_name = "TIME")]
    pub(crate) from: Option<When>,
    /// Only records captured before this (same forms as --from).
    #[arg(long, value_parser = parse_when, value_name = "TIME")]
    pub(crate) to: Option<When>,
    /// Time zone of local --from/--to times and of Parquet's date partitions: an IANA name.
    #[arg(long, default_value = "UTC", value_parser = parse_tz, value_name = "ZONE")]
    pub(crate) tz: TimeZone,
    /// Prices as exact integers of 1e-9 in `<name>_e9` columns (`fixed`), or as floats in `<name>` (`float`).
    #[arg(long, value_enum, default_value = "fixed")]
    pub(crate) price: PriceArg,
    /// Parquet: a partition's file is closed and the next begun at this size.
    #[arg(long, value_parser = tickbox_units::parse_size, default_value = "512MiB", value_name = "SIZE")]
    pub(crate) max_file_size: u64,
    /// DBN of an import: which imported file (0-based, as `tickbox import` listed them); needed when there are
    /// several.
    #[arg(long, value_name = "N")]
    pub(crate) source: Option<u32>,
    /// Print the summary as one JSON object (on stdout; on stderr when the data goes to stdout).
    #[arg(long)]
    pub(crate) json: bool,
}

#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub(crate) enum ExportFormat {
    Parquet,
    Csv,
    Json,
    Dbn,
}

#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub(crate) enum PriceArg {
    Fixed,
    Float,
}
