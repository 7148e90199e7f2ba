//! `tickbox-export`: the history leaves the box. A journal or a history of journals (plain or compressed, read
//! through the recorder's `HistoryReader`) is written as
//!
//! - a **Parquet** dataset partitioned by date and record kind (`date=2026-01-02/kind=quote/part-….parquet`,
//!   hive style), with typed columns, zstd, row groups bounded in rows and bytes, statistics and a bloom filter
//!   on the symbol ([`parquet_out`]);
//! - **CSV**, one file per kind, or **JSON lines**, with numbers as numbers (`text`);
//! - **DBN**: an imported file given back, or a recording's trades (`trades`) or quotes (`mbp-1`) with a symbol
//!   map ([`dbn_out`]);
//!
//! to a local path or an object store URL (`s3://bucket/prefix`, [`store`]). Every format writes the same field
//! vocabulary ([`vocab`]), takes the same filters (kinds, topic prefixes, a capture-time window: [`Filter`]), and
//! leaves nothing partial when it fails ([`dest`]). A damaged range of the journal is passed over and reported;
//! every intact record is exported.
//!
//! This crate is the only one that compiles arrow, parquet and the object store client: nothing on the data
//! plane depends on it.

pub mod archive;
pub mod days;
pub mod dbn_out;
pub mod dest;
mod error;
mod from_store;
pub mod mirror;
mod options;
pub mod parquet_out;
mod read_window;
mod run;
pub mod store;
mod summary;
mod text;
pub mod vocab;

pub use archive::{ArchiveAs, Archiver};
pub use days::Days;
pub use dest::{OutFile, Output, Shape};
pub use error::ExportError;
pub use from_store::{parse_kinds, window_ns};
pub use mirror::{replay_copies, Mirror, ReplayWindow};
pub use options::{Dest, ExportOptions, Filter, Format};
pub use parquet_out::{schema_of, ParquetOptions};
pub use run::export;
pub use store::{Location, Store, StoreUrl};
pub use summary::{Damage, ExportSummary, Progress};
pub use vocab::{columns_of, fields_of, FieldDef, FieldType, PriceType, RecordKind, Row, COMMON};
