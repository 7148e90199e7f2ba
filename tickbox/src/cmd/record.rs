//! `tickbox record`: subscribe to a tap (or any tickbox PUB endpoint) and append every frame to a journal.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::Ordering;
use std::time::Duration;

use anyhow::Context;
use tickbox_journal::{Durability, Writer, WriterOptions};
use tickbox_recorder::{record, DurabilityConfig, RecordOptions, RecordStats};

use super::journal::{fmt_bytes, parse_duration, parse_size};
use crate::config::TickboxConfig;
use crate::status::StatusBoard;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Endpoint(s) to subscribe to, comma-separated (an Espresso tap, a publisher shard, an LVC).
    #[arg(long, value_delimiter = ',', required = true)]
    connect: Vec<String>,
    /// Journal to append to: a ring file, or a directory with --archive. Created if missing, recovered if it exists.
    #[arg(long)]
    journal: PathBuf,
    /// Ring capacity (e.g. 512MiB, 4G); the oldest records are overwritten when full. Default from config (1 GiB).
    #[arg(long, conflicts_with = "archive", value_parser = parse_size_arg)]
    capacity: Option<u64>,
    /// Archive journal: a directory of segments, rolled when full, never overwritten.
    #[arg(long)]
    archive: bool,
    /// Archive segment size (default from config, 1 GiB).
    #[arg(long, requires = "archive", value_parser = parse_size_arg)]
    segment_size: Option<u64>,
    /// Topic prefixes to record, comma-separated (default: everything).
    #[arg(long, value_delimiter = ',')]
    topics: Vec<String>,
    /// When to msync: none (kernel writeback), batch (every batch), periodic (every --sync-interval).
    #[arg(long, value_enum)]
    durability: Option<DurabilityArg>,
    /// Interval for --durability periodic (e.g. 100ms).
    #[arg(long, value_parser = parse_duration_arg)]
    sync_interval: Option<Duration>,
    /// Stop after this long (e.g. 30s, 8h). Default: until Ctrl-C.
    #[arg(long, value_parser = parse_duration_arg)]
    duration: Option<Duration>,
    /// Stop after this many messages.
    #[arg(long)]
    max_messages: Option<u64>,
    /// Free text stored in the journal header (default: the endpoints).
    #[arg(long)]
    description: Option<String>,
    /// No progress line on stderr.
    #[arg(long)]
    quiet: bool,
    /// Majordomo broker to register `tickbox.record.status` with.
    #[arg(long, value_name = "EP")]
    broker: Option<String>,
}

#[derive(Debug, Clone, Copy, clap::ValueEnum)]
enum DurabilityArg {
    None,
    Batch,
    Periodic,
}

fn parse_size_arg(s: &str) -> Result<u64, String> {
    parse_size(s).map_err(|e| format!("{e:#}"))
}

fn parse_duration_arg(s: &str) -> Result<Duration, String> {
    parse_duration(s).map_err(|e| format!("{e:#}"))
}

pub fn run(args: Args, config: &TickboxConfig) -> anyhow::Result<ExitCode> {
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
                .unwrap_or(Duration::from_millis(cfg.sync_interval_ms.max(1))),
        ),
    };
    let description = args
        .description
        .clone()
        .unwrap_or_else(|| format!("tickbox record {}", args.connect.join(",")));
    let opts = if args.archive {
        WriterOptions::archive(args.segment_size.unwrap_or(cfg.segment_size))
    } else {
        WriterOptions::ring(args.capacity.unwrap_or(cfg.capacity))
    }
    .durability(durability)
    .description(description);
    let mut writer = Writer::open(&args.journal, &opts)
        .with_context(|| format!("opening {}", args.journal.display()))?;
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
    let stop = crate::shutdown::flag();
    let ctx = zmq::Context::new();
    let ropts = RecordOptions {
        connect: args.connect.clone(),
        topics: args.topics.clone(),
        batch_max: cfg.batch_max,
        rcvhwm: cfg.rcvhwm,
        max_messages: args.max_messages,
        duration: args.duration,
        progress_every: Duration::from_secs(1),
    };
    let status = StatusBoard::start(&ctx, args.broker.as_deref(), "record")?;
    let journal = args.journal.display().to_string();
    status.publish(record_status(
        &journal,
        &args.connect,
        "recording",
        &RecordStats::default(),
        0.0,
    ));
    let quiet = args.quiet;
    let mut last = (0u64, std::time::Instant::now());
    let stats = record(&ctx, &mut writer, &ropts, &stop, |s: &RecordStats| {
        let dt = last.1.elapsed().as_secs_f64().max(1e-9);
        let rate = (s.messages - last.0) as f64 / dt;
        last = (s.messages, std::time::Instant::now());
        status.publish(record_status(&journal, &args.connect, "recording", s, rate));
        if quiet {
            return;
        }
        eprint!(
            "\rrecording: {} msgs, {}, {:.0} msg/s, invalid {}      ",
            s.messages,
            fmt_bytes(s.bytes),
            rate,
            s.invalid_frames
        );
    })?;
    status.publish(record_status(
        &journal,
        &args.connect,
        "done",
        &stats,
        stats.rate(),
    ));
    if !quiet {
        eprintln!();
    }
    let next_seq = writer.next_seq();
    writer.close().context("closing journal")?;
    print_summary(&args, &stats, next_seq, stop.load(Ordering::Relaxed));
    Ok(ExitCode::SUCCESS)
}

/// The `tickbox.record.status` snapshot; `rate` is msg/s since the previous one (the whole run's when done).
fn record_status(
    journal: &str,
    connect: &[String],
    state: &str,
    s: &RecordStats,
    rate: f64,
) -> serde_json::Value {
    serde_json::json!({
        "component": "record",
        "state": state,
        "journal": journal,
        "connect": connect,
        "messages": s.messages,
        "bytes": s.bytes,
        "batches": s.batches,
        "rate": rate.round(),
        "first_seq": s.first_seq,
        "last_seq": s.last_seq,
        "invalid_frames": s.invalid_frames,
        "multipart_messages": s.multipart_messages,
        "elapsed_s": s.elapsed.as_secs_f64(),
    })
}

fn print_summary(args: &Args, s: &RecordStats, next_seq: u64, interrupted: bool) {
    println!("journal       {}", args.journal.display());
    println!("messages      {}", s.messages);
    println!("bytes         {}", fmt_bytes(s.bytes));
    println!("batches       {}", s.batches);
    println!(
        "duration      {:.3} s{}",
        s.elapsed.as_secs_f64(),
        if interrupted { " (interrupted)" } else { "" }
    );
    println!("rate          {:.0} msg/s", s.rate());
    match (s.first_seq, s.last_seq) {
        (Some(a), Some(b)) => println!("journal seqs  {a} ..= {b}"),
        _ => println!("journal seqs  (none recorded; next is {next_seq})"),
    }
    println!("invalid       {}", s.invalid_frames);
    println!("multipart     {}", s.multipart_messages);
}
