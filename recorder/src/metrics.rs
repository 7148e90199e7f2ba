//! The recorder's metrics (`record --metrics`): its [`RecordStats`] as of the last progress report (the record
//! loop hands them over at each report, never per message), the disk under the journal, and its leadership.
//! Names follow `record --json`: `recorded` is `tickbox_recorded_total`.

use std::path::PathBuf;
use std::sync::atomic::{AtomicI64, Ordering};

use tickbox_metrics::{label, Published, Scrape, Source};

use crate::RecordStats;

/// The [`Source`] of a running recorder: the record loop's progress callback calls [`RecordMetrics::update`].
#[derive(Debug)]
pub struct RecordMetrics {
    latest: Published<RecordStats>,
    journal: PathBuf,
    /// -1: not in an election; 0: a candidate, not leading; 1: leading.
    leading: AtomicI64,
}

impl RecordMetrics {
    /// Metrics of a recorder writing `journal` (a ring file or an archive directory).
    pub fn new(journal: impl Into<PathBuf>) -> RecordMetrics {
        RecordMetrics {
            latest: Published::new(),
            journal: journal.into(),
            leading: AtomicI64::new(-1),
        }
    }

    /// The counts as of now (called from the progress callback and once with the final counts).
    pub fn update(&self, stats: &RecordStats) {
        self.latest.publish_now(stats);
    }

    /// Whether this recorder leads its election (`record --elect`).
    pub fn set_leading(&self, leading: bool) {
        self.leading.store(i64::from(leading), Ordering::Relaxed);
    }
}

impl Source for RecordMetrics {
    fn collect(&self, out: &mut Scrape) {
        let s = self.latest.get();
        out.counters(
            &[],
            &[
                (
                    "tickbox_messages",
                    "Frames appended (data, heartbeats, cached values, upstream gap notices).",
                    s.messages,
                ),
                ("tickbox_recorded", "Data records appended.", s.recorded),
                (
                    "tickbox_missing",
                    "Publisher sequences the journal lacks (named by its gap notices).",
                    s.missing,
                ),
                (
                    "tickbox_gap_events",
                    "Gap notices the recorder wrote (losses it detected).",
                    s.gap_events,
                ),
                (
                    "tickbox_upstream_gap_notices",
                    "Gap notices received from upstream and recorded.",
                    s.upstream_gap_notices,
                ),
                (
                    "tickbox_heartbeats",
                    "Publisher heartbeats appended.",
                    s.heartbeats,
                ),
                ("tickbox_cached", "LVC cached values recorded.", s.cached),
                ("tickbox_bytes", "Payload bytes appended.", s.bytes),
                ("tickbox_batches", "Journal batches committed.", s.batches),
                (
                    "tickbox_invalid",
                    "Frames that are not tickbox messages (not recorded).",
                    s.invalid_frames,
                ),
                (
                    "tickbox_tap_events",
                    "Espresso tap subscription events (not recorded).",
                    s.tap_events,
                ),
                (
                    "tickbox_batch_frames",
                    "Batch frames (#B) received.",
                    s.batch_frames,
                ),
                (
                    "tickbox_multipart",
                    "Multipart messages dropped (the wire format is single-frame).",
                    s.multipart_messages,
                ),
                (
                    "tickbox_handshakes_refused",
                    "Handshakes a publisher refused or that failed; the recorder connects again by itself.",
                    s.handshakes_refused,
                ),
                (
                    "tickbox_duplicates",
                    "Sequences received twice (not recorded again).",
                    s.duplicates,
                ),
                (
                    "tickbox_reordered",
                    "Late arrivals inside a gap already noticed.",
                    s.reordered,
                ),
                ("tickbox_restarts", "Publisher restarts seen.", s.restarts),
                (
                    "tickbox_anomalies",
                    "Implausible sequence jumps.",
                    s.anomalies,
                ),
                (
                    "tickbox_untracked",
                    "Messages of publishers beyond the tracker's bound.",
                    s.untracked,
                ),
                (
                    "tickbox_overwritten",
                    "Records ring laps overwrote (journal-wide).",
                    s.overwritten.records,
                ),
                (
                    "tickbox_overwritten_bytes",
                    "Bytes ring laps overwrote (journal-wide).",
                    s.overwritten.bytes,
                ),
                (
                    "tickbox_laps",
                    "Ring laps (journal-wide).",
                    s.overwritten.laps,
                ),
                (
                    "tickbox_reserve_stalls",
                    "Times the recording thread reserved an archive's disk itself because the preparer had not.",
                    s.reserve_stalls,
                ),
            ],
        );
        let seq = |v: Option<u64>| v.map_or(-1, |v| i64::try_from(v).unwrap_or(i64::MAX));
        out.gauge(
            "tickbox_first_seq",
            "Journal sequence of the first record this run appended (-1: none yet).",
            &[],
            seq(s.first_seq),
        );
        out.gauge(
            "tickbox_last_seq",
            "Journal sequence of the last record this run appended (-1: none yet).",
            &[],
            seq(s.last_seq),
        );
        for row in &s.publishers {
            let publisher = [(label::PUBLISHER, row.publisher.to_string())];
            out.counters(
                &publisher,
                &[
                    (
                        "tickbox_publisher_recorded",
                        "Data records of this publisher appended.",
                        row.recorded,
                    ),
                    (
                        "tickbox_publisher_missing",
                        "Sequences of this publisher the journal lacks.",
                        row.missing,
                    ),
                    (
                        "tickbox_publisher_gaps",
                        "Gap events of this publisher.",
                        row.gap_events,
                    ),
                ],
            );
            out.gauge(
                "tickbox_publisher_last_sequence",
                "The last sequence recorded of this publisher.",
                &publisher,
                i64::try_from(row.last_sequence).unwrap_or(i64::MAX),
            );
        }
        let leading = self.leading.load(Ordering::Relaxed);
        if leading >= 0 {
            out.gauge(
                "tickbox_recorder_leading",
                "1 while this recorder leads its election (record --elect): its journal is the canonical one.",
                &[],
                leading,
            );
        }
        // The directory a ring file lives in, or the archive directory itself.
        let dir = if self.journal.is_dir() {
            self.journal.clone()
        } else {
            self.journal
                .parent()
                .filter(|p| !p.as_os_str().is_empty())
                .map_or_else(|| PathBuf::from("."), PathBuf::from)
        };
        if let Some((free, total)) = tickbox_metrics::disk_space(&dir) {
            let path = [("path", dir.display().to_string())];
            out.gauge(
                "tickbox_disk_free_bytes",
                "Bytes free on the journal's filesystem.",
                &path,
                free as i64,
            );
            out.gauge(
                "tickbox_disk_size_bytes",
                "Size of the journal's filesystem.",
                &path,
                total as i64,
            );
        }
    }
}

/// The [`Source`] of a running replay: its [`ReplayStats`](crate::ReplayStats) as of the last progress report
/// (the replay hands them over at each report), under the names of `replay --json`.
#[derive(Debug)]
pub struct ReplayMetrics {
    latest: Published<crate::ReplayStats>,
    speed: tickbox_units::Speed,
    /// 1 while a run replays, 0 between runs (`--await-start`) and once done.
    running: AtomicI64,
}

impl ReplayMetrics {
    /// Metrics of a replay at `speed`.
    pub fn new(speed: tickbox_units::Speed) -> ReplayMetrics {
        ReplayMetrics {
            latest: Published::new(),
            speed,
            running: AtomicI64::new(0),
        }
    }

    /// The counts as of now (called from the progress callback and once with a run's final counts).
    pub fn update(&self, stats: &crate::ReplayStats) {
        self.latest.publish_now(stats);
    }

    /// Whether a run is replaying now.
    pub fn set_running(&self, running: bool) {
        self.running.store(i64::from(running), Ordering::Relaxed);
    }
}

impl Source for ReplayMetrics {
    fn collect(&self, out: &mut Scrape) {
        let s = self.latest.get();
        out.fields(
            &s.summary_json(self.speed, "", false),
            &[
                "subscribers",
                "rate",
                "publishers",
                "duration_ns",
                "first_seq",
                "last_seq",
                "first_capture_ns",
                "last_capture_ns",
                "max_late_ns",
            ],
            "`replay --json` (this run)",
            &[],
        );
        out.gauge(
            "tickbox_replay_running",
            "1 while a replay run sends; 0 between runs and once done.",
            &[],
            self.running.load(Ordering::Relaxed),
        );
        if let Some(t) = s.last_capture_ns {
            out.gauge_seconds(
                "tickbox_replay_position",
                "Capture time of the last record replayed (seconds since the Unix epoch).",
                &[],
                t as f64 / 1e9,
            );
        }
    }
}
