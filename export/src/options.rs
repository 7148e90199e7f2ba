//! What an export is asked to do: the format, the selection and where it writes.

use crate::days::Days;
use crate::parquet_out::ParquetOptions;
use crate::store::Location;
use crate::vocab::{PriceType, RecordKind, Row};

/// Output formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// A hive-partitioned Parquet dataset.
    Parquet,
    /// CSV, one file per kind.
    Csv,
    /// JSON lines.
    Json,
    /// DBN (an imported file rebuilt, or trades / top of book of a recording).
    Dbn,
}

impl Format {
    /// Its `--format` name.
    pub fn name(self) -> &'static str {
        match self {
            Format::Parquet => "parquet",
            Format::Csv => "csv",
            Format::Json => "json",
            Format::Dbn => "dbn",
        }
    }
}

/// Which records an export takes. Times are capture times, `from` inclusive and `to` exclusive (as the replay's
/// `--from`/`--to`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Filter {
    /// Kinds; empty: every kind.
    pub kinds: Vec<RecordKind>,
    /// Topic prefixes; empty: every topic.
    pub topics: Vec<String>,
    /// Records captured before this are left out.
    pub from_ns: Option<u64>,
    /// Records captured at or after this are left out.
    pub to_ns: Option<u64>,
}

/// Reading stops this long (of capture time) past `--to`: a recorder's capture clock may step back a little
/// (NTP), never by this much, and a history of weeks is not read to its end for an hour's export.
pub(crate) const READ_PAST_TO_NS: u64 = 60_000_000_000;

impl Filter {
    /// Whether `row` is selected (its capture time was checked by the reader).
    #[inline]
    pub fn selects(&self, row: &Row<'_>) -> bool {
        (self.kinds.is_empty() || self.kinds.contains(&row.kind))
            && (self.topics.is_empty()
                || self
                    .topics
                    .iter()
                    .any(|p| row.topic.starts_with(p.as_str())))
    }

    #[inline]
    pub(crate) fn in_window(&self, t: u64) -> bool {
        self.from_ns.is_none_or(|f| t >= f) && self.to_ns.is_none_or(|e| t < e)
    }
}

/// Everything an export needs besides its input and output.
#[derive(Debug, Clone)]
pub struct ExportOptions {
    /// Format.
    pub format: Format,
    /// Selection.
    pub filter: Filter,
    /// Prices exact or float (Parquet, CSV, JSON).
    pub price: PriceType,
    /// Zone of the date partitions (Parquet).
    pub days: Days,
    /// Parquet's file size bound and compression.
    pub parquet: ParquetOptions,
    /// For a DBN export of an import: which imported file.
    pub dbn_source: Option<u32>,
    /// For a DBN export: zstd-compress.
    pub dbn_zstd: bool,
}

/// Where an export writes: a location, or stdout (CSV of one kind, JSON, DBN).
#[derive(Debug, Clone)]
pub enum Dest {
    /// Standard output.
    Stdout,
    /// A path or URL.
    At(Location),
}
