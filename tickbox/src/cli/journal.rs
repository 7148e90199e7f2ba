//! `tickbox journal`: its command-line arguments (what it parses; `cmd::journal` wires them).

use super::{parse_tz, JournalArg};
use std::path::PathBuf;

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    #[command(subcommand)]
    pub(crate) action: Action,
}

#[derive(Debug, clap::Subcommand)]
pub(crate) enum Action {
    /// The journals of a history (a directory `record --roll` writes): period, first and last capture time,
    /// records, first sequence, publishers, bytes on disk, stored plain or compressed, and the verdict of the last
    /// verify while the journal is unchanged since. Reads each journal's header, first and last records and ledger
    /// (cached beside a closed journal as NAME.summary.json), never a scan.
    Ls {
        #[command(flatten)]
        journal: JournalArg,
        /// Verify every journal now (checksums and sequences, a scan) and keep the verdicts.
        #[arg(long)]
        verify: bool,
        /// Time zone of the capture times shown: an IANA name (America/New_York).
        #[arg(long, default_value = "UTC", value_name = "ZONE")]
        tz: String,
        /// Print one JSON object on stdout (integer counts) instead of the table.
        #[arg(long)]
        json: bool,
    },
    /// Apply retention to a history now: delete its oldest journals, by age (--retain) and by total size
    /// (--retain-size), oldest first, never the newest, one a writer has open or one a reader holds (replay,
    /// the history service): retention stops at the first journal it must keep, so the history never gets a hole.
    Prune {
        #[command(flatten)]
        journal: JournalArg,
        /// Delete journals whose last record is older than this (e.g. 30d).
        #[arg(long, value_parser = tickbox_units::parse_duration, value_name = "DURATION", required_unless_present = "retain_size")]
        retain: Option<std::time::Duration>,
        /// Delete the oldest journals while the history takes more than this on disk (e.g. 2TiB).
        #[arg(long, value_parser = tickbox_units::parse_size, value_name = "SIZE")]
        retain_size: Option<u64>,
        /// Say what would be deleted, delete nothing.
        #[arg(long)]
        dry_run: bool,
        /// Print one JSON object on stdout instead of the lines.
        #[arg(long)]
        json: bool,
    },
    /// The canonical day from the journals of recorders elected one after another (`record --elect`), read with
    /// the leadership log beside each (JOURNAL.leadership.jsonl): every data record (publisher, session,
    /// sequence) once, from the journal that led when it was recorded, else from the first journal holding it (a
    /// leader's gap filled from the other); what no journal holds is listed, and written into the stitched
    /// journal as gap records. Each publisher's records keep their sequence order.
    Stitch {
        /// The journals (or histories) of the elected recorders.
        #[arg(
            long = "journal",
            required = true,
            value_delimiter = ',',
            value_name = "PATH[,PATH…]"
        )]
        journals: Vec<PathBuf>,
        /// The stitched journal to create (an archive; must not exist).
        #[arg(long, value_name = "PATH")]
        out: PathBuf,
        /// Segment size of the stitched journal.
        #[arg(long, default_value = "1GiB", value_parser = tickbox_units::parse_size, value_name = "SIZE")]
        segment_size: u64,
        /// Print the report as one JSON object on stdout.
        #[arg(long)]
        json: bool,
    },
    /// Header, record count, sequence and capture-time range, and per publisher recorded / missing / overwritten
    /// (structure checked, checksums not).
    Info {
        #[command(flatten)]
        journal: JournalArg,
        /// Print one JSON object on stdout (integer counts) instead of the table.
        #[arg(long)]
        json: bool,
    },
    /// Check every record's checksum and the sequence chain; exit 5 naming the first bad record's offset. An
    /// intact journal with gap records or overwritten records is reported GAPPY (exit 0, or 6 with --strict).
    Verify {
        #[command(flatten)]
        journal: JournalArg,
        /// Exit 6 when the journal is intact but incomplete (gap records, or records overwritten by ring laps).
        #[arg(long)]
        strict: bool,
        /// Print one JSON object on stdout (integer counts) instead of the table.
        #[arg(long)]
        json: bool,
    },
    /// Print records: sequence, capture time, size, topic, wire header and the decoded fields (prices as
    /// decimals, times RFC 3339). Exits quietly when its output pipe closes (`| head`).
    Dump {
        #[command(flatten)]
        journal: JournalArg,
        /// Start at this journal sequence.
        #[arg(long, conflicts_with = "from", value_name = "N")]
        from_seq: Option<u64>,
        /// Start at this capture time, in the time grammar of every --from: RFC 3339 (2026-01-02T14:30:00Z), a
        /// local date-time (2026-01-02 09:30) or a time of day (10:55:50) in --tz (a time of day falls on the
        /// journal's first day there), ns since the epoch, or +DURATION after the first record (+90s, +1h30m).
        #[arg(long, value_name = "TIME")]
        from: Option<String>,
        /// Stop after this capture time (same forms as --from); records past it are skipped.
        #[arg(long, value_name = "TIME")]
        to: Option<String>,
        /// The zone of local times and times of day in --from/--to (an IANA name).
        #[arg(long, default_value = "UTC", value_name = "ZONE", value_parser = parse_tz)]
        tz: tickbox_units::TimeZone,
        /// Print at most this many records (0 = all).
        #[arg(long, default_value_t = 20, value_name = "N")]
        limit: u64,
        /// Only records whose topic starts with one of these prefixes (comma-separated: `Q.,V.GLBX.`).
        #[arg(long, value_delimiter = ',', value_name = "PREFIX[,PREFIX…]")]
        topics: Vec<String>,
        /// Only records of these kinds (comma-separated: quote, trade, heartbeat, book_level, gap, vendor).
        #[arg(long, value_delimiter = ',', value_name = "KIND[,KIND…]")]
        kind: Vec<String>,
        /// Show only the header columns, not the decoded fields.
        #[arg(long)]
        no_fields: bool,
        /// One JSON object per record (journal sequence, capture time, size, topic, kind, header, fields), then a
        /// closing summary object (`"summary": {"records": N, "corrupt": null or why}`), instead of the table.
        #[arg(long)]
        json: bool,
    },
    /// Write the records as a Parquet dataset (partitioned by date and kind), CSV (one file per kind), JSON lines
    /// or DBN, to a path or an object store (s3://bucket/prefix), with --kind, --topics and --from/--to. Exit 5
    /// when a damaged range was passed over (every intact record is exported), 13 when the object store cannot
    /// be reached or refuses; a failed export leaves nothing at the destination.
    Export(super::export::ExportArgs),
    /// Compress a closed journal in place (zstd frames with an index, same path); every command reads it as
    /// before. Refused while a writer has it open; one that does not verify is left alone (exit 5).
    Compress {
        #[command(flatten)]
        journal: JournalArg,
        /// zstd level: 1 (fastest) to 19.
        #[arg(long, default_value_t = 3, value_name = "N")]
        level: i32,
        /// Print what was done as one JSON object on stdout.
        #[arg(long)]
        json: bool,
    },
}
