//! `tickbox-dbn`: Databento Binary Encoding (DBN) in and out of tickbox journals, through the `dbn` crate.
//!
//! **Import** ([`import_files`]) reads DBN files (versions 1 to 3, plain or zstd), legacy DBZ files and
//! headerless record fragments, and writes an archive journal whose records are tickbox frames of kind 6,
//! `vendor` (docs/book/src/wire.md section 6): topic `V.<venue>.<symbol>` (venue: the dataset's first component; symbol:
//! from the file's symbology, else the instrument id), the 40-byte wire header (publisher id = the record's,
//! per-publisher sequence from 1, `send_time_ns` = `ts_recv`, `origin_time_ns` = `ts_event`, session = the
//! import run), then an 8-byte prefix (vendor, DBN version, rtype, source index) and the DBN record exactly as
//! the file held it. Journal capture time is `ts_recv`. One DBN record gives exactly one journal record: nothing
//! is dropped and nothing is added. The file's metadata (its own bytes) goes to the import manifest,
//! `dbn-sources.json`, beside the segments ([`Manifest`]).
//!
//! Natural tickbox equivalents (a trade print → `trade`, a top of book → `quote`) are **derived on read**, not
//! stored twice: [`derive_wire`] turns a vendor frame into the tickbox payload a publisher would send.
//!
//! **Export** ([`export_dbn`]) writes one imported file back: metadata bytes then records, so DBN → journal →
//! DBN is byte-identical to the original's decompressed stream. (JSON, CSV, Parquet, and DBN of a recording are
//! the `tickbox-export` crate's.)
//!
//! **Damaged input** is refused with an error naming the file and the record, never a panic inside the `dbn`
//! crate, which trusts what it reads in several places: a record whose rtype the crate's version-3 views cannot
//! hold or whose bytes are too short for it ([`record_fits`]), a record length that is not a whole number of
//! 8-byte words (the crate would view every later record misaligned), legacy DBZ metadata whose compressed
//! symbols are too short or decompress past 64 MiB, a metadata length the file does not hold (read as it arrives,
//! never allocated up front). The `dbn_vendor` fuzz target drives all of these paths.
//!
//! **Replay** ([`ReplaySource`]) reads a DBN file or a journal as the tickbox messages a publisher would send
//! (`tickbox feed --source`), each with its receive time (pacing) and event time; records with no tickbox
//! equivalent are skipped with a reason. It is a `tickbox_feed::RecordSource`: the feed publishes it as it is.

/// The `dbn` crate this one is built on, for callers that construct or decode DBN themselves (tests, tools).
pub use dbn;

mod derive;
mod describe;
mod dump;
mod error;
mod export;
mod frame;
// Legacy DBZ files are read through the dbn crate's deprecated DBZ decoder on purpose.
#[allow(deprecated)]
mod import;
mod manifest;
mod replay;

pub use derive::derive_wire;
pub use describe::{
    decode_frame, flatten, format_dump_columns, format_fields, format_price, record_json, Decoded,
    DumpFilter, DUMP_KINDS,
};
pub use dump::{dump, DumpError, DumpRequest, Dumped};
pub use error::{DbnError, FrameError};
pub use export::{export_dbn, pick_source, ExportReport};
pub use frame::{
    encode_vendor_frame, min_record_len, record_fits, VendorFrame, VendorHeader, PREFIX_LEN,
    VENDOR_DBN, VENDOR_KIND, VENDOR_TOPIC_LETTER,
};
pub use import::{
    import_files, open_source, ImportOptions, ImportReport, ImportSummary, OpenedSource,
};
pub use manifest::{Manifest, Source, SourceForm, MANIFEST_FILE, MANIFEST_FORMAT};
pub use replay::{ReplayForm, ReplaySource};
