//! `tickbox record` as a library: [`RecordRequest`] (what was asked) merged with the `[recorder]` defaults into
//! [`RecordSettings`], then a [`RecordSession`] that opens the journal, starts the history service, runs the
//! recording loop with its progress, status and leadership hooks, and closes everything in order. The binary
//! parses the flags, prints what the session reports, and maps its outcome to an exit code.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::Value;
use tickbox_journal::{Durability, Mode, RecoveryReport, Writer, WriterOptions};

use crate::config::{DurabilityConfig, JournalModeConfig, RecorderConfig};
use crate::error::RecorderError;
use crate::history_dir::{HistoryDir, HistoryWriter};
use crate::history_server::{HistoryServer, HistoryServerOptions, HistoryServerReport};
use crate::keeper::{AfterClose, Keeper, KeeperReport};
use crate::ledger::Ledger;
use crate::record::{record_with, RecordOptions, RecordStats, Recorder};
use crate::retention::Retention;
use crate::roll::Roll;

/// How often an elected recorder reports its progress (and looks at its leadership).
pub const ELECTED_PROGRESS_EVERY: Duration = Duration::from_millis(200);
/// How often an ordinary recording calls its progress hooks.
pub const PROGRESS_EVERY: Duration = Duration::from_secs(1);

/// What `tickbox record` was asked, flag by flag (`None`: not given, the `[recorder]` default applies).
#[derive(Debug, Clone, Default)]
pub struct RecordRequest {
    /// Endpoints to subscribe to.
    pub connect: Vec<String>,
    /// The journal: an archive directory or a ring file.
    pub journal: PathBuf,
    /// `--archive`: an archive whatever the config says.
    pub archive: bool,
    /// `--ring`: a ring whatever the config says.
    pub ring: bool,
    /// Ring capacity (implies a ring).
    pub capacity: Option<u64>,
    /// Archive segment size (implies an archive).
    pub segment_size: Option<u64>,
    /// Topic prefixes (empty: everything).
    pub topics: Vec<String>,
    /// When to msync.
    pub durability: Option<DurabilityConfig>,
    /// The interval of periodic durability.
    pub sync_interval: Option<Duration>,
    /// Stop after this long.
    pub duration: Option<Duration>,
    /// Stop after this many messages.
    pub max_messages: Option<u64>,
    /// Free text for the journal header (default: the endpoints).
    pub description: Option<String>,
    /// Serve the journal to late joiners on a ROUTER bound here (overrides `[recorder] serve`).
    pub serve: Option<String>,
    /// Write a history, one journal per period: `daily`, `hourly` or a size (overrides `[recorder] roll`).
    pub roll: Option<String>,
    /// The local time of day of a daily roll (overrides `[recorder] roll_at`).
    pub roll_at: Option<String>,
    /// The zone of a daily or hourly roll (overrides `[recorder] roll_tz`).
    pub roll_tz: Option<String>,
    /// Keep a history's journals this long (overrides `[recorder] retain`).
    pub retain: Option<Duration>,
    /// Keep at most this many bytes of a history (overrides `[recorder] retain_size`).
    pub retain_size: Option<u64>,
    /// Compress each journal of a history once it is closed (or `[recorder] compress`).
    pub compress: bool,
    /// The recorder stands in an election: progress (and leadership) is looked at more often.
    pub elected: bool,
    /// The caller wants progress at least this often (a live view).
    pub progress_every: Option<Duration>,
}

/// A [`RecordRequest`] with every default filled in from `[recorder]`: what the session does.
#[derive(Debug, Clone)]
pub struct RecordSettings {
    /// The journal.
    pub journal: PathBuf,
    /// How the journal is created (an existing one keeps its own layout).
    pub writer: WriterOptions,
    /// The recording loop's options.
    pub record: RecordOptions,
    /// Where the history service binds, if anywhere.
    pub serve: Option<String>,
    /// How the journal rolls, when it is a history (`None` with `history`: the history's own roll).
    pub roll: Option<Roll>,
    /// The journal is a history directory (asked to roll, or one already).
    pub history: bool,
    /// What of a history to keep.
    pub retention: Retention,
    /// Compress a history's closed journals.
    pub compress: bool,
    /// Run on each journal of a history once it is closed (`record --archive-to`); `None` after `settle`.
    pub after_close: Option<AfterClose>,
}

impl RecordRequest {
    /// Checks the request and fills in `[recorder]` defaults; `profile` and `security` go to the SUB sockets.
    /// Everything is checked before the journal (up to a segment preallocated) exists, so a typo leaves nothing
    /// behind.
    pub fn settle(
        &self,
        cfg: &RecorderConfig,
        profile: tickbox_zmqx::profile::SocketProfile,
        security: tickbox_auth::Security,
    ) -> Result<RecordSettings, RecorderError> {
        if self.max_messages == Some(0) {
            return Err(RecorderError::Settings(
                "--max-messages 0 would record nothing; leave it out to record until stopped"
                    .into(),
            ));
        }
        if self.capacity == Some(0) || self.segment_size == Some(0) {
            return Err(RecorderError::Settings(
                "--capacity and --segment-size must be more than 0 bytes".into(),
            ));
        }
        let description = self
            .description
            .clone()
            .unwrap_or_else(|| format!("tickbox record {}", self.connect.join(",")));
        let writer = if self.ring_mode(cfg) {
            WriterOptions::ring(self.capacity.unwrap_or(cfg.capacity.0))
        } else {
            WriterOptions::archive(self.segment_size.unwrap_or(cfg.segment_size.0))
        }
        .durability(self.durability(cfg))
        .description(description);
        let roll = self.roll(cfg)?;
        let history = roll.is_some() || HistoryDir::is_history(&self.journal);
        let retention = Retention {
            max_age: self.retain.or(cfg.retain.map(|d| d.0)),
            max_bytes: self.retain_size.or(cfg.retain_size.map(|b| b.0)),
        };
        if !history && (self.retain.is_some() || self.retain_size.is_some()) {
            return Err(RecorderError::Settings(
                "--retain and --retain-size keep a history: record with --roll (or into a history)"
                    .into(),
            ));
        }
        if history && (self.ring || self.capacity.is_some()) {
            return Err(RecorderError::Settings(
                "a history (--roll) is a directory of archive journals: --ring and --capacity do not apply".into(),
            ));
        }
        let base = if self.elected {
            ELECTED_PROGRESS_EVERY
        } else {
            PROGRESS_EVERY
        };
        Ok(RecordSettings {
            journal: self.journal.clone(),
            writer,
            record: RecordOptions {
                connect: self.connect.clone(),
                topics: self.topics.clone(),
                batch_max: cfg.batch_max,
                receive_hwm: cfg.receive_hwm,
                max_messages: self.max_messages,
                duration: self.duration,
                // Leadership changes and progress reports ride on the progress callback: the successor's view
                // of where this leader got is at most this old; a live view may want it sooner.
                progress_every: self.progress_every.map_or(base, |every| every.min(base)),
                socket_profile: profile,
                security,
                reader_cores: cfg.reader_cores.clone(),
            },
            serve: self.serve.clone().or_else(|| cfg.serve.clone()),
            roll,
            history,
            retention,
            compress: self.compress || cfg.compress,
            after_close: None,
        })
    }

    /// The roll asked for: the flags, else `[recorder] roll` (its `roll_at` and `roll_tz` where they apply).
    fn roll(&self, cfg: &RecorderConfig) -> Result<Option<Roll>, RecorderError> {
        let Some(spec) = self.roll.as_deref().or(cfg.roll.as_deref()) else {
            if self.roll_at.is_some() || self.roll_tz.is_some() {
                return Err(RecorderError::Settings(
                    "--roll-at and --roll-tz need --roll (or [recorder] roll)".into(),
                ));
            }
            return Ok(None);
        };
        let timed = matches!(
            spec.trim().to_ascii_lowercase().as_str(),
            "daily" | "hourly"
        );
        let daily = spec.trim().eq_ignore_ascii_case("daily");
        let at = self
            .roll_at
            .as_deref()
            .or_else(|| daily.then_some(cfg.roll_at.as_str()));
        let tz = self
            .roll_tz
            .as_deref()
            .or_else(|| timed.then_some(cfg.roll_tz.as_str()));
        Roll::parse(spec, at, tz)
            .map(Some)
            .map_err(|e| RecorderError::Settings(e.to_string()))
    }

    /// The flags' durability, else the config's (a `--sync-interval` alone adjusts a periodic config).
    fn durability(&self, cfg: &RecorderConfig) -> Durability {
        match self.durability {
            None => match (cfg.durability, self.sync_interval) {
                (DurabilityConfig::Periodic, Some(d)) => Durability::Periodic(d),
                _ => cfg.durability(),
            },
            Some(DurabilityConfig::None) => Durability::None,
            Some(DurabilityConfig::Batch) => Durability::PerBatch,
            Some(DurabilityConfig::Periodic) => Durability::Periodic(
                self.sync_interval
                    .unwrap_or(cfg.sync_interval.0.max(Duration::from_millis(1))),
            ),
        }
    }

    /// Ring or archive: an explicit flag wins, then what already exists at the path, then the config (archive).
    fn ring_mode(&self, cfg: &RecorderConfig) -> bool {
        if self.ring || self.capacity.is_some() {
            return true;
        }
        if self.archive || self.segment_size.is_some() {
            return false;
        }
        if self.journal.is_file() {
            return true;
        }
        if self.journal.is_dir() {
            return false;
        }
        cfg.mode == JournalModeConfig::Ring
    }
}

/// Told about a recording as it goes: progress, and the end of the run (before the journal closes). An elected
/// recorder's leadership is one (`tickbox_fleet`); the binary's live view another.
pub trait RecordObserver {
    /// About every `progress_every`: this run's counters, and the message rate since the last call.
    fn progress(&mut self, stats: &RecordStats, rate: f64);
    /// The run ended with `stats` (the last word before the journal closes).
    fn finished(&mut self, _stats: &RecordStats) {}
}

impl<F: FnMut(&RecordStats, f64)> RecordObserver for F {
    fn progress(&mut self, stats: &RecordStats, rate: f64) {
        self(stats, rate)
    }
}

/// Free space on the journal's file system against what the journal will reserve, checked before anything is
/// created.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DiskCheck {
    /// Bytes free (for an unprivileged writer).
    pub free: u64,
    /// What the journal reserves when it opens.
    pub at_open: u64,
    /// The most it holds reserved beyond its records while recording (a ring: its whole file).
    pub ahead_max: u64,
    /// A ring: it never takes more than `at_open`.
    pub bounded: bool,
}

impl DiskCheck {
    /// Whether the journal can open at all.
    pub fn enough_to_open(&self) -> bool {
        self.free >= self.at_open
    }

    /// The line `record` says before it starts.
    pub fn line(&self) -> String {
        let size = tickbox_units::format_size_approx;
        let reserve = if self.bounded {
            format!("the ring takes {} at once", size(self.at_open))
        } else {
            format!(
                "the journal reserves {} when it opens and up to {} ahead of its records while recording, then takes \
                 what it records",
                size(self.at_open),
                size(self.ahead_max)
            )
        };
        let warning = if !self.enough_to_open() {
            ": not enough to start".to_owned()
        } else if self.free < self.ahead_max {
            ": less than the reserve, the disk may fill soon (the recording then stops cleanly, with its summary)"
                .to_owned()
        } else {
            String::new()
        };
        format!(
            "record: {} free on the journal's file system; {reserve}{warning}",
            size(self.free)
        )
    }
}

/// What a recording reports at its end.
#[derive(Debug, Clone)]
pub struct RecordOutcome {
    /// This run's counters.
    pub stats: RecordStats,
    /// `ring` or `archive`.
    pub mode: &'static str,
    /// The journal sequence the writer would assign next.
    pub next_seq: u64,
    /// Ctrl-C (or SIGTERM) ended the run, rather than its limits.
    pub interrupted: bool,
    /// The history service's report, when it served (`None` when it failed: logged as an error).
    pub history: Option<HistoryServerReport>,
    /// What a recording into a history wrote (`None` for one journal).
    pub journals: Option<HistoryRun>,
}

/// What a recording into a history wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HistoryRun {
    /// Journals it started (a roll, or a new period at the start).
    pub created: u64,
    /// Rolls during the run.
    pub rolls: u64,
    /// The journal it ended in.
    pub current: PathBuf,
    /// Cards cached and retention applied behind the recording.
    pub housekeeping: KeeperReport,
}

impl RecordOutcome {
    /// The end-of-run summary as one JSON object (`record --json`).
    pub fn summary_json(&self, journal: &Path) -> Result<Value, RecorderError> {
        let mut summary = self
            .stats
            .summary_json(journal, self.mode, self.interrupted);
        if let Some(report) = &self.history {
            summary["history_service"] = serde_json::to_value(report)
                .map_err(|e| RecorderError::Settings(format!("history report: {e}")))?;
        }
        summary["disk_full"] = self.stats.disk_full.clone().into();
        if let Some(j) = &self.journals {
            summary["journals_created"] = j.created.into();
            summary["rolls"] = j.rolls.into();
            summary["current_journal"] = j.current.display().to_string().into();
            summary["housekeeping"] = serde_json::to_value(&j.housekeeping)
                .map_err(|e| RecorderError::Settings(format!("housekeeping report: {e}")))?;
        }
        Ok(summary)
    }

    /// The end-of-run summary table, with the history service's line when it served.
    pub fn summary_table(&self, journal: &Path) -> String {
        let mut out = self
            .stats
            .summary_table(journal, self.mode, self.next_seq, self.interrupted);
        if let Some(why) = &self.stats.disk_full {
            out.push_str(&format!(
                "stopped       the disk is full ({why}): every record before it is in the journal, which is closed \
                 and verifies\n"
            ));
        }
        if let Some(j) = &self.journals {
            out.push_str(&format!(
                "history       {} journal(s) started, {} roll(s); now in {}\n",
                j.created,
                j.rolls,
                j.current.display()
            ));
            let h = &j.housekeeping;
            if h.compressed > 0 {
                out.push_str(&format!(
                    "compressed    {} closed journal(s): {} -> {} on disk\n",
                    h.compressed,
                    tickbox_units::format_size_approx(h.compressed_from_bytes),
                    tickbox_units::format_size_approx(h.compressed_to_bytes)
                ));
            }
            if !h.archived.is_empty() || h.archive_failures > 0 {
                out.push_str(&format!(
                    "archive       {} journal(s) archived{}{}\n",
                    h.archived.len(),
                    h.archived
                        .last()
                        .map_or(String::new(), |a| format!(", the last: {a}")),
                    if h.archive_failures > 0 {
                        format!("; {} FAILED (see the log)", h.archive_failures)
                    } else {
                        String::new()
                    }
                ));
            }
            if !h.deleted.is_empty() || h.kept.is_some() || h.errors > 0 {
                out.push_str(&format!(
                    "retention     deleted {} journal(s) ({}){}{}\n",
                    h.deleted.len(),
                    tickbox_units::format_size_approx(h.freed_bytes),
                    h.kept.as_ref().map_or(String::new(), |(name, why)| format!(
                        "; kept {name} ({why})"
                    )),
                    if h.errors > 0 {
                        format!("; {} housekeeping error(s), see the log", h.errors)
                    } else {
                        String::new()
                    }
                ));
            }
        }
        if let Some(r) = &self.history {
            out.push_str(&r.summary_line());
            out.push('\n');
        }
        out
    }
}

/// The history service's thread: its report when it stops.
type HistoryThread = std::thread::JoinHandle<Result<HistoryServerReport, RecorderError>>;

/// Where a session appends: one journal, or a history of journals.
// One per recording, never moved on a hot path: the size of a variant does not matter.
#[allow(clippy::large_enum_variant)]
enum Target {
    Journal(Writer),
    History {
        writer: HistoryWriter,
        /// The ledger of the journal before a new one (where each publisher was).
        previous: Option<Ledger>,
        /// This run made the history directory.
        made_dir: bool,
        /// Caches the cards of closed journals and applies retention, off the recording thread.
        keeper: Keeper,
    },
}

impl Target {
    fn writer(&self) -> &Writer {
        match self {
            Target::Journal(w) => w,
            Target::History { writer, .. } => writer_of(writer),
        }
    }
}

/// The current journal's writer of a history (read-only).
fn writer_of(h: &HistoryWriter) -> &Writer {
    h.current_writer()
}

/// A recording: the journal open, the history service (if asked) bound and serving.
pub struct RecordSession {
    settings: RecordSettings,
    target: Target,
    /// The journal existed before this run (a failed run never removes what it did not create).
    existed: bool,
    history: Option<(HistoryThread, String)>,
    serve_stop: Arc<AtomicBool>,
    disk: Option<DiskCheck>,
}

impl RecordSession {
    /// Opens (creating or recovering) the journal and, when asked, binds the history service on its own thread,
    /// its ROUTER made by `gate` (whose ZAP handler applies `[security]` and reads the socket's monitor).
    pub fn open(
        gate: &tickbox_auth::Gate,
        settings: RecordSettings,
    ) -> Result<Self, RecorderError> {
        gate.check_serves(&settings.record.security)?;
        let existed = settings.journal.exists();
        // Free space against what the journal will reserve, before anything is created. A ring that exists
        // already holds its whole file: reopening it (a recorder restarted after a crash) takes nothing new, so
        // it is not checked (a restart on a nearly full disk was refused for the default capacity's room).
        let reserves = settings.writer.disk_reservation();
        let disk = tickbox_journal::disk_free(&settings.journal)
            .ok()
            .filter(|_| !(existed && reserves.bounded))
            .map(|free| DiskCheck {
                free,
                at_open: reserves.at_open,
                ahead_max: reserves.ahead_max,
                bounded: reserves.bounded,
            });
        if let Some(check) = disk.filter(|c| !c.enough_to_open()) {
            return Err(RecorderError::NoRoom(format!(
                "{}: {}",
                settings.journal.display(),
                check.line()
            )));
        }
        let target = if settings.history {
            let (mut writer, previous) = HistoryWriter::open(
                &settings.journal,
                settings.roll.as_ref(),
                &settings.writer,
                tickbox_wire::now_ns(),
            )?;
            let keeper = Keeper::start(
                settings.journal.clone(),
                settings.retention,
                settings.compress,
                settings.after_close.clone(),
            )?;
            writer.on_closed(keeper.sender());
            Target::History {
                writer,
                previous,
                made_dir: !existed,
                keeper,
            }
        } else {
            Target::Journal(Writer::open(&settings.journal, &settings.writer).map_err(
                |source| RecorderError::Open {
                    path: settings.journal.clone(),
                    source,
                },
            )?)
        };
        let writer = target.writer();
        let rec = writer.recovery();
        if rec.created {
            tracing::info!(journal = %settings.journal.display(), "created journal ({} per file)", tickbox_units::format_size_approx(writer.header().capacity));
        } else {
            tracing::info!(
                journal = %settings.journal.display(),
                records = rec.records,
                next_seq = rec.next_seq,
                clean = rec.clean_shutdown,
                discarded_bytes = rec.discarded_bytes,
                "appending to existing journal"
            );
        }
        let serve_stop = Arc::new(AtomicBool::new(false));
        let history = match &settings.serve {
            Some(endpoint) => Some(serve_history(
                gate,
                &settings.journal,
                endpoint,
                &serve_stop,
            )?),
            None => None,
        };
        Ok(RecordSession {
            settings,
            target,
            existed,
            history,
            serve_stop,
            disk,
        })
    }

    /// What the writer found when it opened the journal.
    pub fn recovery(&self) -> &RecoveryReport {
        self.target.writer().recovery()
    }

    /// Free space against the journal's reservation, as checked before it opened (`None`: the file system
    /// could not say).
    pub fn disk_check(&self) -> Option<DiskCheck> {
        self.disk
    }

    /// Where the history service is bound (its `*` port resolved), when it serves.
    pub fn history_endpoint(&self) -> Option<&str> {
        self.history.as_ref().map(|(_, endpoint)| endpoint.as_str())
    }

    /// The settings the session runs with.
    pub fn settings(&self) -> &RecordSettings {
        &self.settings
    }

    /// The journal as status snapshots and leadership logs name it.
    pub fn journal_name(&self) -> String {
        self.settings.journal.display().to_string()
    }

    /// Records until `stop`, the duration or the message limit; publishes status snapshots through `status`
    /// (`recording` at the start and at every progress call, `done` at the end), tells every observer, then
    /// stops the history service and closes the journal.
    pub fn run(
        mut self,
        ctx: &zmq::Context,
        stop: &AtomicBool,
        status: &mut dyn FnMut(Value),
        observers: &mut [&mut dyn RecordObserver],
    ) -> Result<RecordOutcome, RecorderError> {
        let journal = self.journal_name();
        let connect = self.settings.record.connect.clone();
        let start_seq = self.target.writer().recovery().next_seq;
        status(RecordStats::default().status_json(&journal, &connect, "recording", 0.0));
        let mut last = (0u64, Instant::now());
        let opts = &self.settings.record;
        let mut progress = |s: &RecordStats| {
            let dt = last.1.elapsed().as_secs_f64().max(1e-9);
            let rate = (s.messages - last.0) as f64 / dt;
            last = (s.messages, Instant::now());
            status(s.status_json(&journal, &connect, "recording", rate));
            for o in observers.iter_mut() {
                o.progress(s, rate);
            }
        };
        let recorded = match &mut self.target {
            Target::Journal(writer) => Recorder::new(writer)
                .and_then(|mut rec| record_with(ctx, writer, &mut rec, opts, stop, &mut progress)),
            Target::History {
                writer, previous, ..
            } => Recorder::new_after(writer.writer_mut(), previous.as_ref())
                .and_then(|mut rec| record_with(ctx, writer, &mut rec, opts, stop, &mut progress)),
        };
        self.serve_stop.store(true, Ordering::Relaxed);
        let history = self.history.take().map(|(thread, _)| thread.join());
        let stats = match recorded {
            Ok(stats) => stats,
            Err(err) => {
                self.remove_debris(start_seq);
                return Err(err);
            }
        };
        for o in observers.iter_mut() {
            o.finished(&stats);
        }
        status(stats.status_json(&journal, &connect, "done", stats.rate()));
        let next_seq = self.target.writer().next_seq();
        let (mode, journals) = match self.target {
            Target::Journal(writer) => {
                let mode = if writer.header().mode == Mode::Ring {
                    "ring"
                } else {
                    "archive"
                };
                writer
                    .close()
                    .map_err(|source| RecorderError::Close { source })?;
                (mode, None)
            }
            Target::History { writer, keeper, .. } => {
                let mut written = HistoryRun {
                    created: writer.created().len() as u64,
                    rolls: writer.rolls(),
                    current: writer.current().to_path_buf(),
                    housekeeping: KeeperReport::default(),
                };
                writer
                    .close()
                    .map_err(|source| RecorderError::Close { source })?;
                written.housekeeping = keeper.finish();
                ("history", Some(written))
            }
        };
        let history = match history {
            Some(Ok(Ok(report))) => Some(report),
            Some(Ok(Err(err))) => {
                tracing::error!("history service failed: {err}");
                None
            }
            Some(Err(_)) => {
                return Err(RecorderError::Thread(
                    "the history service thread panicked".into(),
                ))
            }
            None => None,
        };
        Ok(RecordOutcome {
            stats,
            mode,
            next_seq,
            interrupted: stop.load(Ordering::Relaxed),
            history,
            journals,
        })
    }

    /// After a failed run: a journal it created and never wrote to is start-up debris, not data (and so is a
    /// history directory it made that holds nothing else).
    fn remove_debris(self, start_seq: u64) {
        match self.target {
            Target::Journal(writer) => {
                if !self.existed && writer.next_seq() == start_seq {
                    drop(writer);
                    remove_journal(&self.settings.journal);
                }
            }
            Target::History {
                writer, made_dir, ..
            } => {
                let current = writer.current().to_path_buf();
                let empty = writer.created().last() == Some(&current)
                    && writer_of(&writer).next_seq() == start_seq;
                drop(writer);
                if empty {
                    remove_journal(&current);
                }
                if made_dir {
                    let dir = &self.settings.journal;
                    let _ = std::fs::remove_file(dir.join(crate::catalog::HISTORY_FILE));
                    // Only an empty directory goes; anything else in it stays.
                    let _ = std::fs::remove_dir(dir);
                }
            }
        }
    }
}

/// Removes a journal this run created and never wrote to, saying so.
fn remove_journal(path: &Path) {
    match tickbox_journal::remove_journal(path) {
        Ok(()) => {
            tracing::info!(journal = %path.display(), "removed the journal created for this failed run")
        }
        Err(err) => {
            tracing::warn!(journal = %path.display(), "could not remove the journal created for this failed run: {err}")
        }
    }
}

/// Starts the history service on its own thread (its socket lives there) and returns the thread, which serves
/// until `stop`, with the endpoint it bound.
fn serve_history(
    gate: &tickbox_auth::Gate,
    journal: &Path,
    endpoint: &str,
    stop: &Arc<AtomicBool>,
) -> Result<(HistoryThread, String), RecorderError> {
    let options = HistoryServerOptions {
        endpoint: endpoint.to_owned(),
        ..Default::default()
    };
    let (bound_tx, bound_rx) = std::sync::mpsc::channel();
    let (gate, journal, stop) = (gate.clone(), journal.to_path_buf(), Arc::clone(stop));
    let thread = std::thread::Builder::new()
        .name("tickbox-history".into())
        .spawn(move || {
            let server = match HistoryServer::bind(&gate, &journal, &options) {
                Ok(server) => server,
                Err(err) => {
                    let _ = bound_tx.send(Err(err.to_string()));
                    return Ok(Default::default());
                }
            };
            let _ = bound_tx.send(Ok(server.endpoint().to_owned()));
            server.run(&stop)
        })
        .map_err(|e| RecorderError::Thread(format!("cannot start the history service: {e}")))?;
    match bound_rx.recv() {
        Ok(Ok(bound)) => Ok((thread, bound)),
        Ok(Err(err)) => Err(RecorderError::Settings(format!(
            "--serve {endpoint}: {err}"
        ))),
        Err(_) => Err(RecorderError::Settings(format!(
            "--serve {endpoint}: the history service thread ended before binding"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(journal: &Path) -> RecordRequest {
        RecordRequest {
            connect: vec!["tcp://127.0.0.1:1".into()],
            journal: journal.to_path_buf(),
            ..RecordRequest::default()
        }
    }

    fn settle(r: &RecordRequest, cfg: &RecorderConfig) -> Result<RecordSettings, RecorderError> {
        r.settle(cfg, Default::default(), Default::default())
    }

    #[test]
    fn flags_win_over_the_config_and_the_config_fills_the_rest() {
        let dir = tempfile::tempdir().unwrap();
        let cfg = RecorderConfig {
            mode: JournalModeConfig::Ring,
            durability: DurabilityConfig::Periodic,
            serve: Some("tcp://127.0.0.1:*".into()),
            ..RecorderConfig::default()
        };
        // The config asks for a ring, periodic durability and a history service.
        let s = settle(&request(&dir.path().join("j")), &cfg).unwrap();
        assert!(matches!(
            s.writer.layout,
            tickbox_journal::Layout::Ring { .. }
        ));
        assert_eq!(
            s.writer.durability,
            Durability::Periodic(Duration::from_millis(100))
        );
        assert_eq!(s.serve.as_deref(), Some("tcp://127.0.0.1:*"));
        assert_eq!(s.writer.description, "tickbox record tcp://127.0.0.1:1");
        // A segment size asks for an archive; a sync interval alone adjusts the periodic config.
        let r = RecordRequest {
            segment_size: Some(1 << 20),
            sync_interval: Some(Duration::from_millis(7)),
            serve: Some("tcp://127.0.0.1:5".into()),
            ..request(&dir.path().join("j"))
        };
        let s = settle(&r, &cfg).unwrap();
        assert_eq!(
            s.writer.layout,
            tickbox_journal::Layout::Archive {
                segment_size: 1 << 20
            }
        );
        assert_eq!(
            s.writer.durability,
            Durability::Periodic(Duration::from_millis(7))
        );
        assert_eq!(s.serve.as_deref(), Some("tcp://127.0.0.1:5"));
    }

    #[test]
    fn an_existing_journal_keeps_its_layout_and_nonsense_limits_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let ring = dir.path().join("ring.tbj");
        std::fs::write(&ring, b"").unwrap();
        let s = settle(&request(&ring), &RecorderConfig::default()).unwrap();
        assert!(matches!(
            s.writer.layout,
            tickbox_journal::Layout::Ring { .. }
        ));
        let r = RecordRequest {
            max_messages: Some(0),
            ..request(&ring)
        };
        let err = settle(&r, &RecorderConfig::default()).unwrap_err();
        assert!(err.to_string().starts_with("--max-messages 0"), "{err}");
        let r = RecordRequest {
            segment_size: Some(0),
            ..request(&ring)
        };
        assert!(settle(&r, &RecorderConfig::default()).is_err());
    }

    #[test]
    fn an_elected_recorder_and_a_live_view_ask_for_progress_sooner() {
        let dir = tempfile::tempdir().unwrap();
        let cfg = RecorderConfig::default();
        let plain = settle(&request(dir.path()), &cfg).unwrap();
        assert_eq!(plain.record.progress_every, PROGRESS_EVERY);
        let r = RecordRequest {
            elected: true,
            ..request(dir.path())
        };
        assert_eq!(
            settle(&r, &cfg).unwrap().record.progress_every,
            ELECTED_PROGRESS_EVERY
        );
        let r = RecordRequest {
            progress_every: Some(Duration::from_millis(50)),
            ..request(dir.path())
        };
        assert_eq!(
            settle(&r, &cfg).unwrap().record.progress_every,
            Duration::from_millis(50)
        );
    }

    #[test]
    fn the_disk_check_says_whether_the_journal_can_start_and_how_much_it_reserves() {
        let archive = DiskCheck {
            free: 100 << 20,
            at_open: (4 << 20) + 4096,
            ahead_max: 260 << 20,
            bounded: false,
        };
        assert!(archive.enough_to_open());
        let line = archive.line();
        assert!(line.contains("100.00 MiB free"), "{line}");
        assert!(line.contains("less than the reserve"), "{line}");
        let short = DiskCheck {
            free: 1 << 20,
            ..archive
        };
        assert!(!short.enough_to_open());
        assert!(
            short.line().ends_with("not enough to start"),
            "{}",
            short.line()
        );
        let ring = DiskCheck {
            free: 10 << 30,
            at_open: 1 << 30,
            ahead_max: 1 << 30,
            bounded: true,
        };
        assert!(
            ring.line().contains("the ring takes 1.00 GiB at once"),
            "{}",
            ring.line()
        );
        assert!(!ring.line().contains("less than"));
    }

    #[test]
    fn a_run_that_cannot_connect_removes_the_journal_it_created() {
        let dir = tempfile::tempdir().unwrap();
        let journal = dir.path().join("debris");
        let r = RecordRequest {
            connect: vec!["nonsense://x".into()],
            segment_size: Some(1 << 20),
            ..request(&journal)
        };
        let settings = settle(&r, &RecorderConfig::default()).unwrap();
        let ctx = zmq::Context::new();
        let session = RecordSession::open(&tickbox_auth::Gate::open(&ctx), settings).unwrap();
        assert!(journal.exists());
        let stop = AtomicBool::new(false);
        let err = session.run(&ctx, &stop, &mut |_| {}, &mut []).unwrap_err();
        assert!(matches!(err, RecorderError::Endpoint { .. }), "{err}");
        assert!(!journal.exists(), "the journal this run created is gone");
    }
}
