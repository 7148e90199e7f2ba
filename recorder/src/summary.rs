//! End-of-run summaries (a table and one JSON object) and live status snapshots of a recording and of a replay.
//! Kept here rather than in the binary so a program embedding the recorder reports the same figures.

use std::fmt::Write as _;
use std::path::Path;

use tickbox_units::{format_rfc3339, format_size_approx};

use crate::control::{fmt_position, ReplayController};
use crate::record::RecordStats;
use crate::replay::ReplayStats;
use tickbox_units::Speed;

impl RecordStats {
    /// This run's per-publisher ledger rows as a JSON array (every count an integer).
    pub fn publishers_json(&self) -> serde_json::Value {
        let rows: Vec<serde_json::Value> = self
            .publishers
            .iter()
            .map(|r| {
                serde_json::json!({
                    "publisher": r.publisher,
                    "session": r.session,
                    "last_sequence": r.last_sequence,
                    "recorded": r.recorded,
                    "missing": r.missing,
                    "gap_events": r.gap_events,
                    "overwritten": r.overwritten,
                })
            })
            .collect();
        serde_json::Value::Array(rows)
    }

    /// The end-of-run summary as one JSON object (`record --json`), every count an integer; `mode` is `ring` or
    /// `archive`, `interrupted` whether the run was stopped (Ctrl-C) rather than reaching its limit.
    pub fn summary_json(&self, journal: &Path, mode: &str, interrupted: bool) -> serde_json::Value {
        let s = self;
        let o = &s.publishers_overflow;
        serde_json::json!({
            "journal": journal.display().to_string(),
            "mode": mode,
            "recorded": s.recorded,
            "missing": s.missing,
            "overwritten": s.overwritten.records,
            "overwritten_bytes": s.overwritten.bytes,
            "laps": s.overwritten.laps,
            "reserve_stalls": s.reserve_stalls,
            "gap_events": s.gap_events,
            "upstream_gap_notices": s.upstream_gap_notices,
            "invalid": s.invalid_frames,
            "tap_events": s.tap_events,
            "batch_frames": s.batch_frames,
            "duplicates": s.duplicates,
            "restarts": s.restarts,
            "anomalies": s.anomalies,
            "reordered": s.reordered,
            "untracked": s.untracked,
            "cached": s.cached,
            "heartbeats": s.heartbeats,
            "multipart": s.multipart_messages,
            "handshakes_refused": s.handshakes_refused,
            "messages": s.messages,
            "bytes": s.bytes,
            "batches": s.batches,
            "first_seq": s.first_seq,
            "last_seq": s.last_seq,
            "duration_ns": s.elapsed.as_nanos() as u64,
            "rate": s.rate().round() as u64,
            "interrupted": interrupted,
            "sequences_checked": s.sequences_checked,
            "publishers": s.publishers_json(),
            "publishers_overflow": {
                "publishers": o.publishers,
                "recorded": o.recorded,
                "missing": o.missing,
                "gap_events": o.gap_events,
                "overwritten": o.overwritten,
            },
        })
    }

    /// The `tickbox.record.status` snapshot; `state` is e.g. `recording` or `done`, `rate` is msg/s since the
    /// previous snapshot (the whole run's when done).
    pub fn status_json(
        &self,
        journal: &str,
        connect: &[String],
        state: &str,
        rate: f64,
    ) -> serde_json::Value {
        let s = self;
        serde_json::json!({
            "component": "record",
            "state": state,
            "journal": journal,
            "connect": connect,
            "messages": s.messages,
            "recorded": s.recorded,
            "missing": s.missing,
            "overwritten": s.overwritten.records,
            "bytes": s.bytes,
            "batches": s.batches,
            "rate": rate.round(),
            "first_seq": s.first_seq,
            "last_seq": s.last_seq,
            "invalid_frames": s.invalid_frames,
            "multipart_messages": s.multipart_messages,
            "handshakes_refused": s.handshakes_refused,
            "elapsed_s": s.elapsed.as_secs_f64(),
        })
    }

    /// The end-of-run summary as the table `tickbox record` prints (newline-terminated lines); `next_seq` is the
    /// journal sequence the writer would assign next (shown when nothing was recorded).
    pub fn summary_table(
        &self,
        journal: &Path,
        mode: &str,
        next_seq: u64,
        interrupted: bool,
    ) -> String {
        let s = self;
        let mut out = String::new();
        let _ = writeln!(out, "journal       {} ({mode})", journal.display());
        let _ = writeln!(out, "messages      {}", s.messages);
        let _ = writeln!(
            out,
            "recorded      {} data records, missing {} (in {} gap notices written), overwritten {}",
            s.recorded, s.missing, s.gap_events, s.overwritten.records
        );
        let _ = writeln!(out, "bytes         {}", format_size_approx(s.bytes));
        let _ = writeln!(out, "batches       {}", s.batches);
        let _ = writeln!(
            out,
            "duration      {:.3} s{}",
            s.elapsed.as_secs_f64(),
            if interrupted { " (interrupted)" } else { "" }
        );
        let _ = writeln!(out, "rate          {:.0} msg/s", s.rate());
        match (s.first_seq, s.last_seq) {
            (Some(a), Some(b)) => {
                let _ = writeln!(out, "journal seqs  {a} ..= {b}");
            }
            _ => {
                let _ = writeln!(out, "journal seqs  (none recorded; next is {next_seq})");
            }
        }
        if mode == "ring" || s.overwritten.records > 0 {
            let _ = writeln!(
                out,
                "overwritten   {} records ({}) in {} ring lap(s){}",
                s.overwritten.records,
                format_size_approx(s.overwritten.bytes),
                s.overwritten.laps,
                if s.overwritten.records > 0 {
                    ": the ring no longer holds them"
                } else {
                    ""
                }
            );
        }
        if mode == "archive" {
            let _ = writeln!(
                out,
                "disk          reserved ahead by the journal's preparer; the recording thread reserved it itself {} \
                 time(s)",
                s.reserve_stalls
            );
        }
        if s.sequences_checked {
            let _ = writeln!(
                out,
                "sequences     duplicates {}, restarts {}, anomalies {}, reordered {}, upstream gap notices {}",
                s.duplicates, s.restarts, s.anomalies, s.reordered, s.upstream_gap_notices
            );
        } else {
            let _ = writeln!(
                out,
                "sequences     not checked (a topic subset has holes by design)"
            );
        }
        let _ = writeln!(
            out,
            "other         heartbeats {}, cached {}, tap events {}, batch frames {}",
            s.heartbeats, s.cached, s.tap_events, s.batch_frames
        );
        let _ = writeln!(out, "invalid       {}", s.invalid_frames);
        let _ = writeln!(out, "multipart     {}", s.multipart_messages);
        let _ = writeln!(
            out,
            "handshakes    {} refused{}",
            s.handshakes_refused,
            if s.handshakes_refused > 0 {
                " (the publisher's key list, address rules or connection cap; the recorder connects again by itself)"
            } else {
                ""
            }
        );
        if !s.publishers.is_empty() {
            let _ = writeln!(
                out,
                "{:>12}  {:>12}  {:>10}  {:>6}  {:>11}",
                "publisher", "recorded", "missing", "gaps", "overwritten"
            );
            for r in &s.publishers {
                let _ = writeln!(
                    out,
                    "{:>12}  {:>12}  {:>10}  {:>6}  {:>11}",
                    r.publisher, r.recorded, r.missing, r.gap_events, r.overwritten
                );
            }
            let o = &s.publishers_overflow;
            if o.publishers > 0 || o.recorded > 0 {
                let _ = writeln!(
                    out,
                    "{:>12}  {:>12}  {:>10}  {:>6}  {:>11}",
                    format!("+{} more", o.publishers),
                    o.recorded,
                    o.missing,
                    o.gap_events,
                    o.overwritten
                );
            }
        }
        out
    }
}

impl ReplayStats {
    /// The `tickbox.replay.status` snapshot: the controller's state and run spec with these counters (pass
    /// `ReplayStats::default()` before a run has reported any); `rate` is msg/s since the previous snapshot.
    pub fn status_json(
        &self,
        journal: &Path,
        endpoints: &[String],
        control: &ReplayController,
        rate: f64,
    ) -> serde_json::Value {
        let spec = control.current();
        let s = self;
        serde_json::json!({
            "component": "replay",
            "state": control.state().name(),
            "journal": journal.display().to_string(),
            "endpoints": endpoints,
            "runs": control.runs(),
            "stopped": control.stopped(),
            "speed": spec.map(|s| s.speed.to_string()),
            "from": spec.map(|s| fmt_position(s.from, "start")),
            "to": spec.map(|s| fmt_position(s.to, "end")),
            "sent": s.sent,
            "frames_sent": s.frames_sent,
            "batches_sent": s.batches_sent,
            "bytes": s.bytes,
            "position_seq": s.last_seq,
            "position_time": s.last_capture_ns.map(format_rfc3339),
            "end_seq": s.end_seq,
            "rate": rate.round(),
            "elapsed_s": s.elapsed.as_secs_f64(),
            "heartbeats_sent": s.heartbeats_sent,
            "skipped_invalid": s.skipped_invalid,
            "not_selected": s.not_selected,
            "lapped": s.lapped,
            "gap_notices": s.gap_notices,
            "cached": s.cached,
            "subscribers": s.subscribers,
        })
    }

    /// One run's summary as one JSON object (`replay --json`), every count an integer; `identity` is `preserve`
    /// or `restamp`.
    pub fn summary_json(
        &self,
        speed: Speed,
        identity: &str,
        interrupted: bool,
    ) -> serde_json::Value {
        let s = self;
        serde_json::json!({
            "sent": s.sent,
            "frames_sent": s.frames_sent,
            "batches_sent": s.batches_sent,
            "batch_buffers_allocated": s.batch_buffers_allocated,
            "single_buffers_allocated": s.single_buffers_allocated,
            "subscribers": s.subscribers,
            "delivered": s.subscribers > 0 || s.sent == 0,
            "rate": s.rate().round() as u64,
            "gap_notices": s.gap_notices,
            "cached": s.cached,
            "duration_ns": s.elapsed.as_nanos() as u64,
            "speed": speed.to_string(),
            "identity": identity,
            "publishers": s.publishers,
            "bytes": s.bytes,
            "per_shard": s.per_shard,
            "subscriptions": s.subscriptions,
            "heartbeats_sent": s.heartbeats_sent,
            "skipped_heartbeats": s.skipped_heartbeats,
            "skipped_gap_notices": s.skipped_gap_notices,
            "skipped_invalid": s.skipped_invalid,
            "not_selected": s.not_selected,
            "lapped": s.lapped,
            "damaged_ranges": s.damaged_ranges,
            "corrupt_records": s.corrupt_records,
            "corrupt_bytes": s.corrupt_bytes,
            "damage_gap_notices": s.damage_gap_notices,
            "first_seq": s.first_seq,
            "last_seq": s.last_seq,
            "first_capture_ns": s.first_capture_ns,
            "last_capture_ns": s.last_capture_ns,
            "max_late_ns": s.max_late_ns,
            "interrupted": interrupted,
        })
    }

    /// One run's summary as the table `tickbox replay` prints (newline-terminated lines).
    pub fn summary_table(&self, speed: Speed, interrupted: bool) -> String {
        let s = self;
        let mut out = String::new();
        let _ = writeln!(out, "speed         {speed}");
        let _ = writeln!(
            out,
            "sent          {} (gap notices {}, cached values {}) for {} publisher(s)",
            s.sent, s.gap_notices, s.cached, s.publishers
        );
        let _ = writeln!(
            out,
            "messages      {} ({} of them batches)",
            s.frames_sent, s.batches_sent
        );
        let _ = writeln!(out, "bytes         {}", format_size_approx(s.bytes));
        let _ = writeln!(out, "per shard     {:?}", s.per_shard);
        let _ = writeln!(
            out,
            "duration      {:.3} s{}",
            s.elapsed.as_secs_f64(),
            if interrupted { " (interrupted)" } else { "" }
        );
        let _ = writeln!(out, "rate          {:.0} msg/s", s.rate());
        if let (Some(a), Some(b)) = (s.first_seq, s.last_seq) {
            let _ = writeln!(out, "journal seqs  {a} ..= {b}");
        }
        if let (Some(a), Some(b)) = (s.first_capture_ns, s.last_capture_ns) {
            let _ = writeln!(
                out,
                "captured      {} .. {} ({:.3} s)",
                format_rfc3339(a),
                format_rfc3339(b),
                b.saturating_sub(a) as f64 / 1e9
            );
        }
        let _ = writeln!(out, "max late      {:.3} ms", s.max_late_ns as f64 / 1e6);
        let _ = writeln!(
            out,
            "heartbeats    {} sent, {} recorded ones skipped",
            s.heartbeats_sent, s.skipped_heartbeats
        );
        let _ = writeln!(out, "invalid       {}", s.skipped_invalid);
        if s.not_selected > 0 {
            let _ = writeln!(
                out,
                "not selected  {} (read, outside --topics/--from/--to; not drops)",
                s.not_selected
            );
        }
        if s.lapped > 0 {
            let _ = writeln!(
                out,
                "lapped        {} (the recorder overwrote records before they were replayed)",
                s.lapped
            );
        }
        if s.damaged_ranges > 0 {
            let _ = writeln!(
                out,
                "corrupt       {} records ({} bytes) skipped in {} damaged range(s); {} gap notice(s) sent for them",
                s.corrupt_records, s.corrupt_bytes, s.damaged_ranges, s.damage_gap_notices
            );
        }
        let _ = writeln!(
            out,
            "subscribers   {} at most (subscriptions per shard at the end {:?})",
            s.subscribers, s.subscriptions
        );
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_recording_says_what_comes_next() {
        let s = RecordStats::default();
        let table = s.summary_table(Path::new("j"), "ring", 7, true);
        assert!(table.starts_with("journal       j (ring)\n"), "{table}");
        assert!(table.contains("\njournal seqs  (none recorded; next is 7)\n"));
        assert!(table.contains(" s (interrupted)\n"));
        assert!(
            table.contains("\noverwritten   0 records"),
            "a ring always shows its overwrites"
        );
        assert!(
            !table.contains("publisher"),
            "no per-publisher rows without publishers"
        );
        let json = s.summary_json(Path::new("j"), "ring", true);
        assert_eq!(json["mode"], "ring");
        assert_eq!(json["interrupted"], true);
        assert_eq!(json["publishers"], serde_json::json!([]));
        assert!(!table.contains("reserved ahead"), "a ring has no preparer");
    }

    #[test]
    fn an_archive_says_how_often_the_recording_thread_reserved_disk_itself() {
        let s = RecordStats {
            reserve_stalls: 2,
            ..RecordStats::default()
        };
        let table = s.summary_table(Path::new("j"), "archive", 1, false);
        assert!(
            table.contains(
                "\ndisk          reserved ahead by the journal's preparer; the recording thread reserved it itself 2 \
                 time(s)\n"
            ),
            "{table}"
        );
        let json = s.summary_json(Path::new("j"), "archive", false);
        assert_eq!(json["reserve_stalls"], 2);
    }

    #[test]
    fn replay_that_sent_nothing_counts_as_delivered() {
        let s = ReplayStats::default();
        let json = s.summary_json(Speed::Max, "preserve", false);
        assert_eq!(json["delivered"], true);
        assert_eq!(json["identity"], "preserve");
        assert_eq!(json["frames_sent"], 0);
        assert_eq!(json["batches_sent"], 0);
        let table = s.summary_table(Speed::Max, false);
        assert!(
            table.contains("\nmessages      0 (0 of them batches)\n"),
            "{table}"
        );
        assert!(
            table.ends_with("subscribers   0 at most (subscriptions per shard at the end [])\n")
        );
        assert!(!table.contains("journal seqs"));
        let status = s.status_json(Path::new("j"), &[], &ReplayController::new(), 0.0);
        assert_eq!(status["component"], "replay");
        assert_eq!(status["speed"], serde_json::Value::Null);
    }
}
