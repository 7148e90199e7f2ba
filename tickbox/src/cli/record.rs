//! `tickbox record`: its command-line arguments (what it parses; `cmd::record` wires them).

use crate::live::LiveArgs;
use std::path::PathBuf;
use std::time::Duration;

#[derive(Debug, clap::Args)]
#[command(
    after_help = "Every publisher sequence is accounted for: a loss (a jump in a publisher's sequence, or a heartbeat \
    naming a sequence never received) is written into the journal as a gap record (topic G.<publisher>) where it was \
    noticed, and the per-publisher ledger (recorded, missing, overwritten) is kept in the journal's metadata; \
    `tickbox journal info` reports it. Espresso tap subscription events are skipped and counted, never invalid. \
    With --topics, sequences are not checked (a topic subset has holes by design).\n\
    An archive (the default) records a whole day; a ring keeps only its capacity and logs a warning each lap."
)]
pub(crate) struct Args {
    /// Endpoint(s) to subscribe to, comma-separated (an Espresso tap, a publisher shard, an LVC).
    #[arg(long, value_delimiter = ',', required = true, value_name = "EP[,EP…]")]
    pub(crate) connect: Vec<String>,
    /// Journal to append to: an archive directory (default) or, with --ring, a ring file. Created if missing,
    /// recovered and appended to if it exists (an existing journal keeps its own layout).
    #[arg(long, value_name = "PATH")]
    pub(crate) journal: PathBuf,
    /// Archive journal (the default): a directory of segments, rolled when full, never overwritten.
    #[arg(long, conflicts_with = "ring")]
    pub(crate) archive: bool,
    /// Ring journal: one file of --capacity bytes; the oldest records are overwritten when full (a warning is
    /// logged once per lap and every summary counts what was overwritten).
    #[arg(long)]
    pub(crate) ring: bool,
    /// Ring capacity (e.g. 512MiB, 4G); implies --ring. Default from config (1 GiB).
    #[arg(long, conflicts_with = "archive", value_parser = tickbox_units::parse_size, value_name = "SIZE")]
    pub(crate) capacity: Option<u64>,
    /// Archive segment size (default from config, 1 GiB).
    #[arg(long, conflicts_with = "ring", value_parser = tickbox_units::parse_size, value_name = "SIZE")]
    pub(crate) segment_size: Option<u64>,
    /// Write a history into --journal (a directory): one journal per period, `daily` (at --roll-at in
    /// --roll-tz), `hourly`, or by size (`64MiB`: a new journal once the current holds that much). Each journal
    /// continues the last one's sequence and every publisher's; `replay`, `journal ls`, `info` and `verify` read
    /// the directory as one history. An existing history keeps its roll unless this says otherwise. Default from
    /// `[recorder] roll` (none: one journal).
    #[arg(long, value_name = "daily|hourly|SIZE", conflicts_with_all = ["ring", "capacity"])]
    pub(crate) roll: Option<String>,
    /// The local time of day a daily roll starts the next journal at (default `[recorder] roll_at`, 00:00).
    #[arg(long, value_name = "HH:MM")]
    pub(crate) roll_at: Option<String>,
    /// The IANA zone of --roll-at and of hourly rolls (default `[recorder] roll_tz`, UTC).
    #[arg(long, value_name = "ZONE")]
    pub(crate) roll_tz: Option<String>,
    /// Keep a history's journals this long (e.g. 30d): older ones are deleted, oldest first, at the start and
    /// after every roll; never the journal being written, one a writer has open, or one being read (replay,
    /// history service). Default from `[recorder] retain` (keep everything).
    #[arg(long, value_parser = tickbox_units::parse_duration, value_name = "DURATION")]
    pub(crate) retain: Option<Duration>,
    /// Keep at most this many bytes of a history on disk (e.g. 2TiB): the oldest journals go first, with the same
    /// care as --retain. Default from `[recorder] retain_size`.
    #[arg(long, value_parser = tickbox_units::parse_size, value_name = "SIZE")]
    pub(crate) retain_size: Option<u64>,
    /// Compress each journal of the history once it is closed (a roll, or the end of the run), off the recording
    /// thread: seekable zstd frames that every reader reads as it reads a plain journal. Also compresses closed
    /// journals an earlier run left plain. Default `[recorder] compress`.
    #[arg(long)]
    pub(crate) compress: bool,
    /// Archive each journal of the history to this object store location once it closes (s3://bucket/prefix;
    /// credentials and endpoint from the AWS_* environment), before retention may delete it: the prefix is laid
    /// out as the history directory is, and `journal export`, `journal ls` read it back. Needs a history (--roll).
    #[arg(long, value_name = "URL")]
    pub(crate) archive_to: Option<String>,
    /// What --archive-to keeps of each journal: `journal` (its files), `parquet` (an export into the dataset
    /// under PREFIX/parquet/), or both, comma-separated.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "journal",
        requires = "archive_to"
    )]
    pub(crate) archive_as: Vec<ArchiveAsArg>,
    /// Topic prefixes to record, comma-separated (default: everything).
    #[arg(long, value_delimiter = ',', value_name = "PREFIX[,PREFIX…]")]
    pub(crate) topics: Vec<String>,
    /// When to msync: none (kernel writeback), batch (every batch), periodic (every --sync-interval).
    #[arg(long, value_enum)]
    pub(crate) durability: Option<DurabilityArg>,
    /// Interval for --durability periodic (e.g. 100ms).
    #[arg(long, value_parser = tickbox_units::parse_duration, value_name = "DURATION")]
    pub(crate) sync_interval: Option<Duration>,
    /// Stop after this long (e.g. 30s, 8h). Default: until Ctrl-C.
    #[arg(long, value_parser = tickbox_units::parse_duration, value_name = "DURATION")]
    pub(crate) duration: Option<Duration>,
    /// Stop after this many messages.
    #[arg(long, value_name = "N")]
    pub(crate) max_messages: Option<u64>,
    /// Free text stored in the journal header (default: the endpoints).
    #[arg(long, value_name = "TEXT")]
    pub(crate) description: Option<String>,
    /// Print the summary as one JSON object on stdout (integer counts) instead of the table.
    #[arg(long)]
    pub(crate) json: bool,
    #[command(flatten)]
    pub(crate) live: LiveArgs,
    #[command(flatten)]
    pub(crate) metrics: crate::metrics::MetricsArgs,
    /// Majordomo broker to register `tickbox.record.status` with.
    #[arg(long, value_name = "EP")]
    pub(crate) broker: Option<String>,
    /// ZooKeeper ensemble for --elect: HOST:PORT[,HOST:PORT…]. Default: `[coord] zk` from the config.
    #[arg(long, value_name = "HOST:PORT[,HOST:PORT…]")]
    pub(crate) zk: Option<String>,
    /// Stand in the election at PATH (ZooKeeper) with the other recorders of this feed. Every recorder records
    /// into its own --journal; the leader's is the canonical one. On becoming leader a recorder logs one line
    /// `became leader …` with the handover point (the previous leader's last reported journal sequence and
    /// publisher sequences, its own next journal sequence and publisher sequences) and appends it to
    /// `JOURNAL.leadership.jsonl`, which `tickbox journal info` shows.
    #[arg(long, value_name = "PATH")]
    pub(crate) elect: Option<String>,
    /// Serve the journal being written to late joiners (`tickbox subscribe --catch-up EP`) on a ROUTER bound
    /// here: records of the prefixes they ask for from the time they ask, up to the live head, paced by their
    /// credit. Prints `record history service endpoint EP` once bound. Overrides `[recorder] serve`.
    #[arg(long, value_name = "EP")]
    pub(crate) serve: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum ArchiveAsArg {
    Journal,
    Parquet,
}

#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub(crate) enum DurabilityArg {
    None,
    Batch,
    Periodic,
}
