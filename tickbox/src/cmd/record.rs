//! `tickbox record`: subscribe to a tap (or any tickbox PUB endpoint) and append every frame to a journal,
//! accounting for every publisher sequence (gap notices for losses, a per-publisher ledger in the journal).
//!
//! The journal is an archive (a directory of rolled segments, never overwritten) unless asked for a ring
//! (`--ring`, or `--capacity`, or `[recorder] mode = "ring"`), or unless the path already holds a ring file.

use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use tickbox_fleet::leadership::RecorderLeadership;
use tickbox_fleet::ShownLeadership;
use tickbox_recorder::{
    DurabilityConfig, RecordObserver, RecordRequest, RecordSession, RecordStats, RecorderError,
};

use crate::cli::record::{ArchiveAsArg, Args, DurabilityArg};
use crate::config::TickboxConfig;
use crate::live::LiveView;
use crate::out::{errln, out, outln};
use crate::status::StatusBoard;

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
            errln!("error: {line}");
            return Ok(ExitCode::from(crate::exit_code::DISK_FULL));
        }
        // No room for the journal's first reserve: nothing recorded, and the same exit as a disk that fills.
        Err(e) if e.is_disk_full() => {
            errln!("error: {}", crate::error_line(&anyhow::Error::new(e)));
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
            Some(
                RecorderLeadership::for_session(&coord, path, &session, &args.journal)
                    .with_context(|| format!("--elect {path}"))?,
            )
        }
        None => None,
    };
    let mut show = |s: &RecordStats, rate: f64| {
        if live.due() {
            live.show(&tickbox_recorder::record_line(s, rate), None);
        }
    };
    let mut counts = |s: &RecordStats, _rate: f64| metrics.update(s);
    let mut observers: Vec<&mut dyn RecordObserver> = vec![&mut show, &mut counts];
    let mut leading = elected.as_mut().map(|leadership| ShownLeadership {
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
