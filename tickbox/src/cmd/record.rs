//! `tickbox record`: subscribe to a tap (or any tickbox PUB endpoint) and append every frame to a journal,
//! accounting for every publisher sequence (gap notices for losses, a per-publisher ledger in the journal).
//!
//! The journal is an archive (a directory of rolled segments, never overwritten) unless asked for a ring
//! (`--ring`, or `--capacity`, or `[recorder] mode = "ring"`), or unless the path already holds a ring file.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use tickbox_fleet::leadership::RecorderLeadership;
use tickbox_recorder::{
    DurabilityConfig, RecordObserver, RecordRequest, RecordSession, RecordStats, RecorderError,
};

use crate::config::TickboxConfig;
use crate::live::{fmt_rate, LiveArgs, LiveView};
use crate::out::{out, outln};
use crate::status::StatusBoard;
use tickbox_units::format_size_approx as fmt_bytes;

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
    connect: Vec<String>,
    /// Journal to append to: an archive directory (default) or, with --ring, a ring file. Created if missing,
    /// recovered and appended to if it exists (an existing journal keeps its own layout).
    #[arg(long, value_name = "PATH")]
    journal: PathBuf,
    /// Archive journal (the default): a directory of segments, rolled when full, never overwritten.
    #[arg(long, conflicts_with = "ring")]
    archive: bool,
    /// Ring journal: one file of --capacity bytes; the oldest records are overwritten when full (a warning is
    /// logged once per lap and every summary counts what was overwritten).
    #[arg(long)]
    ring: bool,
    /// Ring capacity (e.g. 512MiB, 4G); implies --ring. Default from config (1 GiB).
    #[arg(long, conflicts_with = "archive", value_parser = tickbox_units::parse_size, value_name = "SIZE")]
    capacity: Option<u64>,
    /// Archive segment size (default from config, 1 GiB).
    #[arg(long, conflicts_with = "ring", value_parser = tickbox_units::parse_size, value_name = "SIZE")]
    segment_size: Option<u64>,
    /// Write a history into --journal (a directory): one journal per period, `daily` (at --roll-at in
    /// --roll-tz), `hourly`, or by size (`64MiB`: a new journal once the current holds that much). Each journal
    /// continues the last one's sequence and every publisher's; `replay`, `journal ls`, `info` and `verify` read
    /// the directory as one history. An existing history keeps its roll unless this says otherwise. Default from
    /// `[recorder] roll` (none: one journal).
    #[arg(long, value_name = "daily|hourly|SIZE", conflicts_with_all = ["ring", "capacity"])]
    roll: Option<String>,
    /// The local time of day a daily roll starts the next journal at (default `[recorder] roll_at`, 00:00).
    #[arg(long, value_name = "HH:MM")]
    roll_at: Option<String>,
    /// The IANA zone of --roll-at and of hourly rolls (default `[recorder] roll_tz`, UTC).
    #[arg(long, value_name = "ZONE")]
    roll_tz: Option<String>,
    /// Keep a history's journals this long (e.g. 30d): older ones are deleted, oldest first, at the start and
    /// after every roll; never the journal being written, one a writer has open, or one being read (replay,
    /// history service). Default from `[recorder] retain` (keep everything).
    #[arg(long, value_parser = tickbox_units::parse_duration, value_name = "DURATION")]
    retain: Option<Duration>,
    /// Keep at most this many bytes of a history on disk (e.g. 2TiB): the oldest journals go first, with the same
    /// care as --retain. Default from `[recorder] retain_size`.
    #[arg(long, value_parser = tickbox_units::parse_size, value_name = "SIZE")]
    retain_size: Option<u64>,
    /// Compress each journal of the history once it is closed (a roll, or the end of the run), off the recording
    /// thread: seekable zstd frames that every reader reads as it reads a plain journal. Also compresses closed
    /// journals an earlier run left plain. Default `[recorder] compress`.
    #[arg(long)]
    compress: bool,
    /// Archive each journal of the history to this object store location once it closes (s3://bucket/prefix;
    /// credentials and endpoint from the AWS_* environment), before retention may delete it: the prefix is laid
    /// out as the history directory is, and `journal export`, `journal ls` read it back. Needs a history (--roll).
    #[arg(long, value_name = "URL")]
    archive_to: Option<String>,
    /// What --archive-to keeps of each journal: `journal` (its files), `parquet` (an export into the dataset
    /// under PREFIX/parquet/), or both, comma-separated.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "journal",
        requires = "archive_to"
    )]
    archive_as: Vec<ArchiveAsArg>,
    /// Topic prefixes to record, comma-separated (default: everything).
    #[arg(long, value_delimiter = ',', value_name = "PREFIX[,PREFIX…]")]
    topics: Vec<String>,
    /// When to msync: none (kernel writeback), batch (every batch), periodic (every --sync-interval).
    #[arg(long, value_enum)]
    durability: Option<DurabilityArg>,
    /// Interval for --durability periodic (e.g. 100ms).
    #[arg(long, value_parser = tickbox_units::parse_duration, value_name = "DURATION")]
    sync_interval: Option<Duration>,
    /// Stop after this long (e.g. 30s, 8h). Default: until Ctrl-C.
    #[arg(long, value_parser = tickbox_units::parse_duration, value_name = "DURATION")]
    duration: Option<Duration>,
    /// Stop after this many messages.
    #[arg(long, value_name = "N")]
    max_messages: Option<u64>,
    /// Free text stored in the journal header (default: the endpoints).
    #[arg(long, value_name = "TEXT")]
    description: Option<String>,
    /// Print the summary as one JSON object on stdout (integer counts) instead of the table.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    live: LiveArgs,
    #[command(flatten)]
    metrics: crate::metrics::MetricsArgs,
    /// Majordomo broker to register `tickbox.record.status` with.
    #[arg(long, value_name = "EP")]
    broker: Option<String>,
    /// ZooKeeper ensemble for --elect: HOST:PORT[,HOST:PORT…]. Default: `[coord] zk` from the config.
    #[arg(long, value_name = "HOST:PORT[,HOST:PORT…]")]
    zk: Option<String>,
    /// Stand in the election at PATH (ZooKeeper) with the other recorders of this feed. Every recorder records
    /// into its own --journal; the leader's is the canonical one. On becoming leader a recorder logs one line
    /// `became leader …` with the handover point (the previous leader's last reported journal sequence and
    /// publisher sequences, its own next journal sequence and publisher sequences) and appends it to
    /// `JOURNAL.leadership.jsonl`, which `tickbox journal info` shows.
    #[arg(long, value_name = "PATH")]
    elect: Option<String>,
    /// Serve the journal being written to late joiners (`tickbox subscribe --catch-up EP`) on a ROUTER bound
    /// here: records of the prefixes they ask for from the time they ask, up to the live head, paced by their
    /// credit. Prints `record history service endpoint EP` once bound. Overrides `[recorder] serve`.
    #[arg(long, value_name = "EP")]
    serve: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum ArchiveAsArg {
    Journal,
    Parquet,
}

#[derive(Debug, Clone, Copy, clap::ValueEnum)]
enum DurabilityArg {
    None,
    Batch,
    Periodic,
}

impl Args {
    /// The request the recorder library settles against `[recorder]`.
    fn request(&self, progress_every: Option<Duration>) -> RecordRequest {
        RecordRequest {
            connect: self.connect.clone(),
            journal: self.journal.clone(),
            archive: self.archive,
            ring: self.ring,
            capacity: self.capacity,
            segment_size: self.segment_size,
            topics: self.topics.clone(),
            durability: self.durability.map(|d| match d {
                DurabilityArg::None => DurabilityConfig::None,
                DurabilityArg::Batch => DurabilityConfig::Batch,
                DurabilityArg::Periodic => DurabilityConfig::Periodic,
            }),
            sync_interval: self.sync_interval,
            duration: self.duration,
            max_messages: self.max_messages,
            description: self.description.clone(),
            serve: self.serve.clone(),
            roll: self.roll.clone(),
            roll_at: self.roll_at.clone(),
            roll_tz: self.roll_tz.clone(),
            retain: self.retain,
            retain_size: self.retain_size,
            compress: self.compress,
            elected: self.elect.is_some(),
            progress_every,
        }
    }
}

pub(crate) fn run(args: Args, config: &TickboxConfig) -> anyhow::Result<ExitCode> {
    // Every input is checked before the journal (up to a GiB preallocated) exists, so a typo leaves nothing behind.
    crate::flags::check_connect_all("--connect", &args.connect)?;
    if let Some(broker) = &args.broker {
        crate::flags::check_connect("--broker", broker)?;
    }
    if let Some(endpoint) = &args.serve {
        crate::flags::check_bind("--serve", endpoint)?;
    }
    let mut live = LiveView::new("record", &args.live, None);
    let metrics = std::sync::Arc::new(tickbox_recorder::RecordMetrics::new(&args.journal));
    let metrics_sources: Vec<std::sync::Arc<dyn tickbox_metrics::Source>> = vec![metrics.clone()];
    let endpoint = args.metrics.start(config, "record", metrics_sources)?;
    // A scrape reads the counts of the last progress report: report often enough that they are fresh.
    let every = match (&endpoint, live.every()) {
        (Some(_), every) => Some(every.map_or(METRICS_EVERY, |e| e.min(METRICS_EVERY))),
        (None, every) => every,
    };
    let settings = args.request(every).settle(
        &config.recorder,
        config.context.sockets.recorder.clone(),
        config.auth.clone(),
    )?;
    let mut settings = settings;
    if let Some(url) = &args.archive_to {
        settings.after_close = Some(archiver(url, &args.archive_as, settings.history)?);
    }
    let stop = crate::shutdown::flag();
    let ctx = tickbox_zmqx::context::build(&config.context)?;
    let status = StatusBoard::start(&ctx, args.broker.as_deref(), "record", config.auth.clone())?;
    // The history service's ROUTER comes from the gate: its ZAP handler refuses strangers and reads the
    // socket's monitor, which would otherwise stall libzmq's I/O thread and with it the recording SUB.
    let gate = config.auth.gate(&ctx)?;
    let session = match RecordSession::open(&gate, settings) {
        Ok(session) => session,
        Err(RecorderError::NoRoom(line)) => {
            eprintln!("error: {line}");
            return Ok(ExitCode::from(crate::exit_code::DISK_FULL));
        }
        // No room for the journal's first reserve: nothing recorded, and the same exit as a disk that fills.
        Err(e) if e.is_disk_full() => {
            eprintln!("error: {}", crate::error_line(&anyhow::Error::new(e)));
            return Ok(ExitCode::from(crate::exit_code::DISK_FULL));
        }
        Err(e) => return Err(e.into()),
    };
    // Said as a log line: a warning when less than the reserve is free, so -q still shows it.
    match session.disk_check() {
        Some(check) if check.free < check.ahead_max => tracing::warn!("{}", check.line()),
        Some(check) => tracing::info!("{}", check.line()),
        None => {}
    }
    if let Some(bound) = session.history_endpoint() {
        outln!("record history service endpoint {bound}");
    }
    let mut elected = match &args.elect {
        Some(path) => {
            let coord = crate::zk::connect(args.zk.as_deref(), config, "--elect")?;
            // Late joiners find the leader's history service through its election id.
            let id = tickbox_recorder::election_id(
                &tickbox_fleet::default_member_id(),
                &session.journal_name(),
                session.history_endpoint(),
            );
            Some(
                RecorderLeadership::campaign(
                    &coord,
                    path,
                    &id,
                    &args.journal,
                    session.recovery().next_seq,
                )
                .with_context(|| format!("--elect {path}"))?,
            )
        }
        None => None,
    };
    let mut show = |s: &RecordStats, rate: f64| {
        if live.due() {
            live.show(&progress_line(s, rate), None);
        }
    };
    let mut counts = |s: &RecordStats, _rate: f64| metrics.update(s);
    let mut observers: Vec<&mut dyn RecordObserver> = vec![&mut show, &mut counts];
    let mut leading = elected.as_mut().map(|leadership| Leading {
        leadership,
        metrics: &metrics,
    });
    if let Some(l) = leading.as_mut() {
        observers.push(l);
    }
    let outcome = session.run(&ctx, &stop, &mut |v| status.publish(v), &mut observers)?;
    // The status line goes before the summary, never under it.
    live.finish();
    if args.json {
        crate::out::json(&outcome.summary_json(&args.journal)?)?;
    } else {
        out!("{}", outcome.summary_table(&args.journal));
        if outcome.history.is_some() {
            for line in config
                .auth
                .summary_line()
                .into_iter()
                .chain(config.auth.connections_line())
            {
                outln!("{line}");
            }
        }
    }
    if outcome.stats.disk_full.is_some() {
        return Ok(ExitCode::from(crate::exit_code::DISK_FULL));
    }
    Ok(ExitCode::SUCCESS)
}

/// How often a recorder serving metrics hands its counts over (a scrape reads them).
const METRICS_EVERY: std::time::Duration = std::time::Duration::from_millis(250);

/// The recorder's leadership, ticked with each progress report, its state shown as a metric.
struct Leading<'a> {
    leadership: &'a mut RecorderLeadership,
    metrics: &'a tickbox_recorder::RecordMetrics,
}

impl RecordObserver for Leading<'_> {
    fn progress(&mut self, stats: &RecordStats, rate: f64) {
        self.leadership.progress(stats, rate);
        self.metrics.set_leading(self.leadership.is_leading());
    }

    fn finished(&mut self, stats: &RecordStats) {
        self.leadership.finished(stats);
        self.metrics.update(stats);
    }
}

/// The live view's line.
fn progress_line(s: &RecordStats, rate: f64) -> String {
    format!(
        "{} msgs, {}, {}, missing {} in {} gap(s), overwritten {}, invalid {}",
        s.messages,
        fmt_bytes(s.bytes),
        fmt_rate(rate),
        s.missing,
        s.gap_events,
        s.overwritten.records,
        s.invalid_frames
    )
}

/// The hook that archives each closed journal of the history to `url` (connected now: an unreachable store or a
/// refused key stops `record` before it records anything).
fn archiver(
    url: &str,
    what: &[ArchiveAsArg],
    history: bool,
) -> anyhow::Result<tickbox_recorder::AfterClose> {
    if !history {
        anyhow::bail!("--archive-to archives the journals of a history as they close: give --roll");
    }
    let tickbox_export::Location::Store(url) = tickbox_export::Location::parse(url)? else {
        anyhow::bail!("--archive-to takes an object store URL (s3://bucket/prefix)");
    };
    let archiver = tickbox_export::Archiver::connect(
        &url,
        tickbox_export::ArchiveAs {
            journal: what.contains(&ArchiveAsArg::Journal),
            parquet: what.contains(&ArchiveAsArg::Parquet),
        },
    )?;
    Ok(tickbox_recorder::AfterClose(std::sync::Arc::new(
        move |journal: &std::path::Path| archiver.archive(journal).map_err(|e| e.to_string()),
    )))
}
