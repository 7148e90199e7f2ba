//! `tickbox record`: subscribe to a tap (or any tickbox PUB endpoint) and append every frame to a journal,
//! accounting for every publisher sequence (gap notices for losses, a per-publisher ledger in the journal).
//!
//! The journal is an archive (a directory of rolled segments, never overwritten) unless asked for a ring
//! (`--ring`, or `--capacity`, or `[recorder] mode = "ring"`), or unless the path already holds a ring file.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::Ordering;
use std::time::Duration;

use anyhow::Context;
use tickbox_fleet::leadership::RecorderLeadership;
use tickbox_journal::{Durability, Writer, WriterOptions};
use tickbox_recorder::{
    record, DurabilityConfig, JournalModeConfig, RecordOptions, RecordStats, RecorderConfig,
};

use crate::config::TickboxConfig;
use crate::live::{fmt_rate, LiveArgs, LiveView};
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
    #[arg(long, value_delimiter = ',', required = true)]
    connect: Vec<String>,
    /// Journal to append to: an archive directory (default) or, with --ring, a ring file. Created if missing,
    /// recovered and appended to if it exists (an existing journal keeps its own layout).
    #[arg(long)]
    journal: PathBuf,
    /// Archive journal (the default): a directory of segments, rolled when full, never overwritten.
    #[arg(long, conflicts_with = "ring")]
    archive: bool,
    /// Ring journal: one file of --capacity bytes; the oldest records are overwritten when full (a warning is
    /// logged once per lap and every summary counts what was overwritten).
    #[arg(long)]
    ring: bool,
    /// Ring capacity (e.g. 512MiB, 4G); implies --ring. Default from config (1 GiB).
    #[arg(long, conflicts_with = "archive", value_parser = tickbox_units::parse_size)]
    capacity: Option<u64>,
    /// Archive segment size (default from config, 1 GiB).
    #[arg(long, conflicts_with = "ring", value_parser = tickbox_units::parse_size)]
    segment_size: Option<u64>,
    /// Topic prefixes to record, comma-separated (default: everything).
    #[arg(long, value_delimiter = ',')]
    topics: Vec<String>,
    /// When to msync: none (kernel writeback), batch (every batch), periodic (every --sync-interval).
    #[arg(long, value_enum)]
    durability: Option<DurabilityArg>,
    /// Interval for --durability periodic (e.g. 100ms).
    #[arg(long, value_parser = tickbox_units::parse_duration)]
    sync_interval: Option<Duration>,
    /// Stop after this long (e.g. 30s, 8h). Default: until Ctrl-C.
    #[arg(long, value_parser = tickbox_units::parse_duration)]
    duration: Option<Duration>,
    /// Stop after this many messages.
    #[arg(long)]
    max_messages: Option<u64>,
    /// Free text stored in the journal header (default: the endpoints).
    #[arg(long)]
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
    #[arg(long, value_name = "HOSTS")]
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

#[derive(Debug, Clone, Copy, clap::ValueEnum)]
enum DurabilityArg {
    None,
    Batch,
    Periodic,
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
    if args.max_messages == Some(0) {
        anyhow::bail!(
            "--max-messages 0 would record nothing; leave it out to record until stopped"
        );
    }
    if args.capacity == Some(0) || args.segment_size == Some(0) {
        anyhow::bail!("--capacity and --segment-size must be more than 0 bytes");
    }
    let cfg = &config.recorder;
    let durability = match args.durability {
        None => match (cfg.durability, args.sync_interval) {
            (DurabilityConfig::Periodic, Some(d)) => Durability::Periodic(d),
            _ => cfg.durability(),
        },
        Some(DurabilityArg::None) => Durability::None,
        Some(DurabilityArg::Batch) => Durability::PerBatch,
        Some(DurabilityArg::Periodic) => Durability::Periodic(
            args.sync_interval
                .unwrap_or(cfg.sync_interval.0.max(Duration::from_millis(1))),
        ),
    };
    let description = args
        .description
        .clone()
        .unwrap_or_else(|| format!("tickbox record {}", args.connect.join(",")));
    let opts = if ring_mode(&args, cfg) {
        WriterOptions::ring(args.capacity.unwrap_or(cfg.capacity.0))
    } else {
        WriterOptions::archive(args.segment_size.unwrap_or(cfg.segment_size.0))
    }
    .durability(durability)
    .description(description);
    let stop = crate::shutdown::flag();
    let ctx = tickbox_zmqx::context::build(&config.context)?;
    let status = StatusBoard::start(&ctx, args.broker.as_deref(), "record", config.auth.clone())?;
    let metrics = std::sync::Arc::new(tickbox_recorder::RecordMetrics::new(&args.journal));
    let metrics_sources: Vec<std::sync::Arc<dyn tickbox_metrics::Source>> = vec![metrics.clone()];
    let endpoint = args.metrics.start(config, "record", metrics_sources)?;
    let existed = args.journal.exists();
    let mut writer = Writer::open(&args.journal, &opts)
        .with_context(|| format!("opening {}", args.journal.display()))?;
    let mode = if writer.header().mode == tickbox_journal::Mode::Ring {
        "ring"
    } else {
        "archive"
    };
    let rec = writer.recovery().clone();
    if rec.created {
        tracing::info!(journal = %args.journal.display(), "created journal ({} per file)", fmt_bytes(writer.header().capacity));
    } else {
        tracing::info!(
            journal = %args.journal.display(),
            records = rec.records,
            next_seq = rec.next_seq,
            clean = rec.clean_shutdown,
            discarded_bytes = rec.discarded_bytes,
            "appending to existing journal"
        );
    }
    let ropts = RecordOptions {
        connect: args.connect.clone(),
        topics: args.topics.clone(),
        batch_max: cfg.batch_max,
        rcvhwm: cfg.rcvhwm,
        max_messages: args.max_messages,
        duration: args.duration,
        progress_every: Duration::from_secs(1),
        socket_profile: config.context.sockets.recorder.clone(),
        security: config.auth.clone(),
        reader_cores: cfg.reader_cores.clone(),
    };
    let serve_stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let history = match args.serve.as_ref().or(cfg.serve.as_ref()) {
        Some(endpoint) => Some(serve_history(
            &ctx,
            config,
            &args.journal,
            endpoint,
            &serve_stop,
        )?),
        None => None,
    };
    let journal = args.journal.display().to_string();
    let mut elected = match &args.elect {
        Some(path) => {
            let coord = crate::zk::connect(args.zk.as_deref(), config, "--elect")?;
            // Late joiners find the leader's history service through its election id.
            let id = tickbox_recorder::election_id(
                &tickbox_fleet::default_member_id(),
                &journal,
                history.as_ref().map(|(_, endpoint)| endpoint.as_str()),
            );
            Some(
                RecorderLeadership::campaign(&coord, path, &id, &args.journal, rec.next_seq)
                    .with_context(|| format!("--elect {path}"))?,
            )
        }
        None => None,
    };
    // Leadership changes and progress reports ride on the progress callback: the successor's view of where this
    // leader got is at most this old.
    let ropts = RecordOptions {
        progress_every: if elected.is_some() {
            ELECTED_PROGRESS_EVERY
        } else {
            ropts.progress_every
        },
        ..ropts
    };
    status.publish(RecordStats::default().status_json(&journal, &args.connect, "recording", 0.0));
    let mut live = LiveView::new("record", &args.live, None);
    // The live view reads the progress callback's counters: ask for them at least as often as it reports.
    let ropts = RecordOptions {
        progress_every: live.every().map_or(ropts.progress_every, |every| {
            every.min(ropts.progress_every)
        }),
        ..ropts
    };
    // A scrape reads the counts of the last progress report: report often enough that they are fresh.
    let ropts = RecordOptions {
        progress_every: endpoint.as_ref().map_or(ropts.progress_every, |_| {
            ropts.progress_every.min(METRICS_EVERY)
        }),
        ..ropts
    };
    let mut last = (0u64, std::time::Instant::now());
    let recorded = record(&ctx, &mut writer, &ropts, &stop, |s: &RecordStats| {
        let dt = last.1.elapsed().as_secs_f64().max(1e-9);
        let rate = (s.messages - last.0) as f64 / dt;
        last = (s.messages, std::time::Instant::now());
        status.publish(s.status_json(&journal, &args.connect, "recording", rate));
        metrics.update(s);
        if let Some(e) = elected.as_mut() {
            e.tick(s, &journal);
            metrics.set_leading(e.is_leading());
        }
        if !live.due() {
            return;
        }
        live.show(
            &format!(
                "{} msgs, {}, {}, missing {} in {} gap(s), overwritten {}, invalid {}",
                s.messages,
                fmt_bytes(s.bytes),
                fmt_rate(rate),
                s.missing,
                s.gap_events,
                s.overwritten.records,
                s.invalid_frames
            ),
            None,
        );
    });
    serve_stop.store(true, Ordering::Relaxed);
    let history = history.map(|(thread, _)| thread.join());
    let stats = match recorded {
        Ok(stats) => stats,
        Err(err) => {
            // A journal this run created and never wrote to is start-up debris, not data: remove it.
            if !existed && writer.next_seq() == rec.next_seq {
                drop(writer);
                remove_journal(&args.journal);
            }
            return Err(err.into());
        }
    };
    if let Some(e) = elected.as_mut() {
        // The final position, so a successor starts from exactly where this leader stopped.
        e.tick(&stats, &journal);
        e.resign(&stats, &journal);
    }
    status.publish(stats.status_json(&journal, &args.connect, "done", stats.rate()));
    metrics.update(&stats);
    // The status line goes before the summary, never under it.
    live.finish();
    let next_seq = writer.next_seq();
    writer.close().context("closing journal")?;
    let interrupted = stop.load(Ordering::Relaxed);
    let history = match history {
        Some(Ok(Ok(report))) => Some(report),
        Some(Ok(Err(err))) => {
            tracing::error!("history service failed: {err}");
            None
        }
        Some(Err(_)) => anyhow::bail!("the history service thread panicked"),
        None => None,
    };
    if args.json {
        let mut summary = stats.summary_json(&args.journal, mode, interrupted);
        if let Some(report) = &history {
            summary["history_service"] = serde_json::to_value(report)?;
        }
        println!("{summary}");
    } else {
        print!(
            "{}",
            stats.summary_table(&args.journal, mode, next_seq, interrupted)
        );
        if let Some(r) = &history {
            println!(
                "history service: {} askers served ({} completed, {} cancelled, {} abandoned), {} refused busy, \
                 {} refused malformed, {} records in {} batches; journal: {} undecodable, {} damaged stretches, {} \
                 lapped readers, {} askers gone",
                r.service.askers_accepted,
                r.service.askers_completed,
                r.service.askers_cancelled,
                r.service.askers_abandoned,
                r.service.refused_busy,
                r.service.refused_malformed,
                r.service.records_sent,
                r.service.batches_sent,
                r.undecodable_records,
                r.damaged_stretches,
                r.readers_lapped,
                r.askers_unreachable
            );
            for line in config
                .auth
                .summary_line()
                .into_iter()
                .chain(config.auth.connections_line())
            {
                println!("{line}");
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Removes a journal this run created and never wrote to, saying so.
fn remove_journal(path: &std::path::Path) {
    match tickbox_journal::remove_journal(path) {
        Ok(()) => {
            tracing::info!(journal = %path.display(), "removed the journal created for this failed run")
        }
        Err(err) => {
            tracing::warn!(journal = %path.display(), "could not remove the journal created for this failed run: {err}")
        }
    }
}

/// Ring or archive: an explicit flag wins, then what already exists at the path, then the config (archive).
fn ring_mode(args: &Args, cfg: &RecorderConfig) -> bool {
    if args.ring || args.capacity.is_some() {
        return true;
    }
    if args.archive || args.segment_size.is_some() {
        return false;
    }
    if args.journal.is_file() {
        return true;
    }
    if args.journal.is_dir() {
        return false;
    }
    cfg.mode == JournalModeConfig::Ring
}

/// How often a recorder serving metrics hands its counts over (a scrape reads them).
const METRICS_EVERY: Duration = Duration::from_millis(250);

/// How often an elected recorder reports its progress (and looks at its leadership).
const ELECTED_PROGRESS_EVERY: Duration = Duration::from_millis(200);

/// The history service's thread: its report when it stops.
type HistoryThread = std::thread::JoinHandle<
    Result<tickbox_recorder::HistoryServerReport, tickbox_recorder::RecorderError>,
>;

/// Starts the history service on its own thread (its socket lives there), prints where it is bound, and returns
/// the thread, which serves until `stop`.
fn serve_history(
    ctx: &zmq::Context,
    config: &TickboxConfig,
    journal: &std::path::Path,
    endpoint: &str,
    stop: &std::sync::Arc<std::sync::atomic::AtomicBool>,
) -> anyhow::Result<(HistoryThread, String)> {
    let options = tickbox_recorder::HistoryServerOptions {
        endpoint: endpoint.to_owned(),
        ..Default::default()
    };
    let (bound_tx, bound_rx) = std::sync::mpsc::channel();
    let (ctx, security, journal, stop) = (
        ctx.clone(),
        config.auth.clone(),
        journal.to_path_buf(),
        std::sync::Arc::clone(stop),
    );
    let thread = std::thread::Builder::new()
        .name("tickbox-history".into())
        .spawn(move || {
            let server =
                match tickbox_recorder::HistoryServer::bind(&ctx, &security, &journal, &options) {
                    Ok(server) => server,
                    Err(err) => {
                        let _ = bound_tx.send(Err(err.to_string()));
                        return Ok(Default::default());
                    }
                };
            let _ = bound_tx.send(Ok(server.endpoint().to_owned()));
            server.run(&stop)
        })?;
    match bound_rx.recv() {
        Ok(Ok(bound)) => {
            println!("record history service endpoint {bound}");
            Ok((thread, bound))
        }
        Ok(Err(err)) => anyhow::bail!("--serve {endpoint}: {err}"),
        Err(_) => {
            anyhow::bail!("--serve {endpoint}: the history service thread ended before binding")
        }
    }
}
