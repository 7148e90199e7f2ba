//! The end-of-run summary of the standard worker pool the CLI runs, as a table and as JSON, and the live status
//! snapshot. Kept here rather than in the binary so a program embedding the Black Box prints the same figures.

use std::fmt::Write as _;
use std::sync::Arc;
use std::time::Duration;

use hdrhistogram::Histogram;
use tickbox_units::format_duration;
use tickbox_wire::Kind;
use tickbox_workers::{
    Delay, Dispatch, LastValueBook, Stats, StatsReport, Tape, TapeSink, Worker, GUIDE_TOPICS_MAX,
};

use crate::{Fatal, Handoff, Report, SharedThreshold, Subscriber, SubscriberConfig};

/// The worker `tickbox subscribe` and `tickbox demo` run on every pool thread: per-kind and per-topic statistics,
/// the last-value book, an optional artificial per-message delay (to exercise the snail), and an optional
/// [`Tape`] (`subscribe --tape`), after the delay so a line is written when its record has been handled.
pub type StandardWorker = (Stats, (LastValueBook, (Option<Delay>, Option<Tape>)));

/// A [`StandardWorker`]; a zero or absent `delay` adds none.
pub fn standard_worker(delay: Option<Duration>) -> StandardWorker {
    standard_worker_with_tape(delay, None)
}

/// A [`StandardWorker`] that also writes every record it handled to `tape` (none: no tape, no cost).
pub fn standard_worker_with_tape(
    delay: Option<Duration>,
    tape: Option<&Arc<TapeSink>>,
) -> StandardWorker {
    (
        Stats::new(),
        (
            LastValueBook::new(),
            (
                delay.filter(|d| !d.is_zero()).map(Delay),
                tape.map(|sink| Tape::new(Arc::clone(sink))),
            ),
        ),
    )
}

impl Report<StandardWorker> {
    /// Writes what every worker's tape still buffers (a no-op without a tape): call before reading the
    /// [`TapeSink`]'s counts.
    pub fn finish_tapes(&mut self) {
        for w in &mut self.workers {
            if let Some(tape) = w.worker.1 .1 .1.as_mut() {
                tape.finish();
            }
        }
    }
}

/// Where a shard ran, after its endpoints in the table: ` (nic eth1, core 3, io thread 0)`, only what was set.
fn placement(s: &crate::SubscriberShardReport) -> String {
    let parts: Vec<String> = [
        s.nic.as_ref().map(|n| format!("nic {n}")),
        s.core.map(|c| format!("core {c}")),
        s.io_thread.map(|t| format!("io thread {t}")),
    ]
    .into_iter()
    .flatten()
    .collect();
    if parts.is_empty() {
        String::new()
    } else {
        format!(" ({})", parts.join(", "))
    }
}

fn lateness_json(h: &Histogram<u64>) -> serde_json::Value {
    if h.is_empty() {
        return serde_json::Value::Null;
    }
    serde_json::json!({
        "p50": h.value_at_quantile(0.5),
        "p99": h.value_at_quantile(0.99),
        "max": h.max(),
    })
}

impl Report<StandardWorker> {
    /// The end-of-run summary as one JSON object (`subscribe --json`). Every count is an integer.
    pub fn summary_json(&self, config: &SubscriberConfig, stopped_by: &str) -> serde_json::Value {
        let report = self;
        let totals = report.sequence_totals();
        let offsets = &report.clock_offsets;
        let offset_of = |p: u32| {
            offsets
                .iter()
                .find(|o| o.publisher == p)
                .map(|o| o.offset_ns)
        };
        let mut publishers: Vec<serde_json::Value> = report
            .ledgers()
            .iter()
            .map(|l| {
                serde_json::json!({
                    "publisher": l.publisher,
                    "session": l.session,
                    "first_sequence": l.first_sequence,
                    "last_sequence": l.last_sequence,
                    "received": l.received,
                    "missing": l.missing,
                    "recorded_gaps": l.recorded_missing,
                    "duplicates": l.duplicates,
                    "reordered": l.reordered,
                    "restarts": l.restarts,
                    "anomalies": l.anomalies,
                    "clock_offset_ns": offset_of(l.publisher),
                })
            })
            .collect();
        // Publishers timed but not sequence-tracked (a topic filter is on): still show their clocks.
        for o in offsets {
            if !report.ledgers().iter().any(|l| l.publisher == o.publisher) {
                publishers.push(serde_json::json!({
                    "publisher": o.publisher,
                    "clock_offset_ns": o.offset_ns,
                }));
            }
        }
        let per_worker_forwarded = |w: usize| -> u64 {
            report
                .shards
                .iter()
                .filter_map(|s| s.forwarded_per_worker.get(w))
                .sum()
        };
        let workers: Vec<serde_json::Value> = report
            .workers
            .iter()
            .map(|w| {
                let mut v = serde_json::json!({
                    "index": w.index,
                    "processed": w.processed,
                    "discarded": w.discarded,
                    "late": w.late,
                    "lateness_ns": lateness_json(&w.lateness),
                });
                if report.dispatch == Dispatch::ByTopic {
                    v["forwarded"] = per_worker_forwarded(w.index).into();
                }
                v
            })
            .collect();
        let shards: Vec<serde_json::Value> = report
            .shards
            .iter()
            .map(|s| {
                serde_json::json!({
                    "index": s.index,
                    "endpoints": s.endpoints,
                    "nic": s.nic,
                    "core": s.core,
                    "io_thread": s.io_thread,
                    "received": s.received,
                    "forwarded": s.forwarded,
                    "malformed": s.malformed,
                    "batches": s.batches,
                    "batch_malformed": s.batch_malformed,
                    "guide": s.guide,
                    "guide_malformed": s.guide_malformed,
                    "handoff_dropped": s.handoff_dropped,
                    "run_by_shard": s.run_by_shard,
                    "run_by_shard_pauses": s.run_by_shard_pauses,
                    "handshakes_refused": s.handshakes_refused,
                    "cached": s.cached,
                    "gap_notices": s.gap_notices,
                    "late": s.late,
                    "gaps": s.gaps,
                    "missing": s.missing,
                    "lateness_ns": lateness_json(&s.lateness),
                })
            })
            .collect();
        let stats = report.merged_stats();
        let mut summary = serde_json::json!({
            "component": "subscribe",
            "stopped_by": stopped_by,
            "fatal": report.fatal,
            "elapsed_ms": u64::try_from(report.elapsed.as_millis()).unwrap_or(u64::MAX),
            "received": report.received(),
            "forwarded": report.forwarded(),
            "processed": report.processed(),
            "unprocessed": report.unprocessed,
            "malformed": report.malformed(),
            "cached": report.shards.iter().map(|s| s.cached).sum::<u64>(),
            "gap_notices": report.gap_notices(),
            "late": report.late(),
            "sequence_tracking": config.topics.is_empty() || config.topics.iter().any(|t| t.is_empty()),
            "data_received": totals.received,
            "missing": totals.missing,
            "gaps": totals.gap_events,
            "recorded_gaps": totals.recorded_missing,
            "recorded_gap_events": totals.recorded_gap_events,
            "duplicates": totals.duplicates,
            "reordered": totals.reordered,
            "restarts": totals.restarts,
            "anomalies": totals.anomalies,
            "untracked": totals.untracked,
            "quotes": stats.count(Kind::Quote),
            "trades": stats.count(Kind::Trade),
            "heartbeats": stats.count(Kind::Heartbeat),
            "distinct_topics": stats.distinct_topics(),
            "dispatch": report.dispatch.as_str(),
            "snail_mode": report.snail_mode.as_str(),
            "max_lateness_ns": u64::try_from(config.max_lateness.0.as_nanos()).unwrap_or(u64::MAX),
            "clock_skew_warn_ns": u64::try_from(config.clock_skew_warn.0.as_nanos()).unwrap_or(u64::MAX),
            "clock_offsets": offsets,
            "clock_untracked": report.clock_untracked,
            "publishers": publishers,
            "workers": workers,
            "shards": shards,
            "lateness_ns": {
                "receive": lateness_json(&report.receive_lateness()),
                "dequeue": lateness_json(&report.dequeue_lateness()),
            },
        });
        // Set apart: one more field inside `json!` exceeds its macro recursion limit.
        summary["batches"] = report.batches().into();
        summary["batch_malformed"] = report.batch_malformed().into();
        summary["handoff"] = report.handoff.handoff.as_str().into();
        summary["handoff_reason"] = report.handoff.reason.as_str().into();
        summary["handoff_dropped"] = report.handoff_dropped().into();
        summary["run_by_shard"] = report.run_by_shard().into();
        summary["run_by_shard_pauses"] = report.run_by_shard_pauses().into();
        summary["handshakes_refused"] = report.handshakes_refused().into();
        summary["framing"] = config.framing.as_str().into();
        summary["malformed_guide_like"] = report.guide_like().into();
        summary["guide"] = report.guide_json(&stats);
        summary
    }

    /// The `guide` object of the JSON summary: Guide messages received, malformed and handled by the workers,
    /// and the workers' per-topic counts (`topic` as text, or as hex with `"hex": true` when it is not UTF-8),
    /// bounded by [`GUIDE_TOPICS_MAX`]: `topics_overflow` counts the messages of topics beyond it.
    fn guide_json(&self, stats: &StatsReport) -> serde_json::Value {
        let topics: Vec<serde_json::Value> = stats
            .guide
            .sorted()
            .into_iter()
            .map(|(topic, n)| match std::str::from_utf8(topic) {
                Ok(text) => serde_json::json!({ "topic": text, "messages": n }),
                Err(_) => serde_json::json!({ "topic": hex(topic), "hex": true, "messages": n }),
            })
            .collect();
        serde_json::json!({
            "messages": self.guide(),
            "malformed": self.guide_malformed(),
            "processed": stats.guide.messages(),
            "body_bytes": stats.guide.body_bytes(),
            "topics": topics,
            "topics_overflow": stats.guide.overflow(),
            "topics_max": GUIDE_TOPICS_MAX,
        })
    }
}

impl<W: Worker> Subscriber<W> {
    /// A snapshot of the running subscriber for status requests: state, live threshold, live shard counters, clocks.
    /// `id` names this member; `tripped` is what the owner last read from [`Subscriber::is_tripped`].
    pub fn status_json(
        &self,
        threshold: &SharedThreshold,
        id: &str,
        tripped: bool,
    ) -> serde_json::Value {
        let subscriber = self;
        let state = match subscriber.fatal() {
            Some(Fatal::Snail(_)) => "snail",
            Some(Fatal::Gap(_)) => "gap",
            Some(Fatal::CatchUp(_)) => "catch_up",
            None if tripped => "tripped",
            None => "running",
        };
        let current = threshold.get();
        serde_json::json!({
            "component": "subscribe",
            "id": id,
            "state": state,
            "max_lateness": format_duration(current),
            "max_lateness_ns": u64::try_from(current.as_nanos()).unwrap_or(u64::MAX),
            "shards": subscriber.live_shards(),
            "dispatch": subscriber.dispatch().as_str(),
            "snail_mode": subscriber.snail_mode().as_str(),
            "clock_offsets": subscriber.clock_offsets(),
        })
    }
}

impl<W> Report<W> {
    /// Why the run ended, for the summary: the fatal event if any, else a signal, else the end of the run.
    pub fn stopped_by(&self, signalled: bool) -> &'static str {
        match (&self.fatal, signalled) {
            (Some(Fatal::Snail(_)), _) => "Suicidal Snail",
            (Some(Fatal::Gap(_)), _) => "sequence gap (gap_policy=die)",
            (Some(Fatal::CatchUp(_)), _) => "catch-up failed",
            (None, true) => "signal",
            (None, false) => "end of run",
        }
    }
}

impl Report<StandardWorker> {
    /// Worker statistics merged over the pool.
    pub fn merged_stats(&self) -> StatsReport {
        let report = self;
        let mut stats = StatsReport::default();
        for w in &report.workers {
            stats.merge(&w.worker.0.report());
        }
        stats
    }

    /// The end-of-run table. `sent` is what the feed published per publisher shard, when known (demo).
    pub fn summary_table(&self, sent: Option<&[(u32, u64)]>, stopped_by: &str) -> String {
        let report = self;
        let mut out = String::new();
        let stats = report.merged_stats();
        let mut book = LastValueBook::new();
        for w in &report.workers {
            book.merge(&w.worker.1 .0);
        }
        // Rates are over the span from the first to the last message a worker saw, so waiting for a feed to
        // start (or for Ctrl-C after it ended) does not dilute them.
        let span = stats.span();
        let secs = if span.is_zero() { report.elapsed } else { span }
            .as_secs_f64()
            .max(1e-9);
        let _ = writeln!(
        out,
        "subscriber: {} shards, {} workers, ran {:.2} s, messages over {:.2} s, stopped by {stopped_by}",
        report.shards.len(),
        report.workers.len(),
        report.elapsed.as_secs_f64(),
        secs
    );
        if let Some(sent) = sent {
            let total: u64 = sent.iter().map(|(_, n)| n).sum();
            let per: Vec<String> = sent
                .iter()
                .map(|(p, n)| format!("publisher {p}: {n}"))
                .collect();
            let _ = writeln!(out, "sent: {total} messages ({})", per.join(", "));
        }
        let _ = writeln!(
            out,
            "{:>5} {:>12} {:>12} {:>9} {:>6} {:>5} {:>8} {:>5} {:>9} {:>9} {:>9}  endpoints",
            "shard",
            "received",
            "msg/s",
            "malformed",
            "cached",
            "gaps",
            "missing",
            "late",
            "lat p50",
            "lat p99",
            "lat max"
        );
        for s in &report.shards {
            let [p50, p99, max] = lat(&s.lateness);
            let _ = writeln!(
                out,
                "{:>5} {:>12} {:>12.0} {:>9} {:>6} {:>5} {:>8} {:>5} {:>9} {:>9} {:>9}  {}",
                s.index,
                s.received,
                s.received as f64 / secs,
                s.malformed,
                s.cached,
                s.gaps,
                s.missing,
                s.late,
                p50,
                p99,
                max,
                s.endpoints.join(",") + &placement(s)
            );
        }
        let [p50, p99, max] = lat(&report.receive_lateness());
        let _ = writeln!(
            out,
            "{:>5} {:>12} {:>12.0} {:>9} {:>6} {:>5} {:>8} {:>5} {:>9} {:>9} {:>9}",
            "all",
            report.received(),
            report.received() as f64 / secs,
            report.malformed(),
            report.shards.iter().map(|s| s.cached).sum::<u64>(),
            report.gaps(),
            report.missing(),
            report.shards.iter().map(|s| s.late).sum::<u64>(),
            p50,
            p99,
            max
        );
        let _ = write!(
            out,
            "hand-off: {} ({})",
            report.handoff.handoff, report.handoff.reason
        );
        if report.handoff.handoff == Handoff::Ring {
            let _ = write!(
                out,
                "   run by the shard: {} records, {} pauses",
                report.run_by_shard(),
                report.run_by_shard_pauses()
            );
        }
        let _ = writeln!(out);
        let _ = writeln!(
            out,
            "batch frames: {}   malformed batches/batched records: {}   hand-off dropped: {}   handshakes refused: {}",
            report.batches(),
            report.batch_malformed(),
            report.handoff_dropped(),
            report.handshakes_refused()
        );
        let _ = writeln!(
        out,
        "{:>6} {:>12} {:>10} {:>5} {:>9} {:>9} {:>9}   (lateness at dequeue: includes hand-off queueing)",
        "worker", "processed", "discarded", "late", "lat p50", "lat p99", "lat max"
    );
        for w in &report.workers {
            let [p50, p99, max] = lat(&w.lateness);
            let _ = writeln!(
                out,
                "{:>6} {:>12} {:>10} {:>5} {:>9} {:>9} {:>9}",
                w.index, w.processed, w.discarded, w.late, p50, p99, max
            );
        }
        let _ = writeln!(
        out,
        "distinct topics: {}   instruments in book: {}   quotes {}  trades {}  book levels {}  heartbeats {}   \
         unprocessed: {}",
        stats.distinct_topics(),
        book.len(),
        stats.count(Kind::Quote),
        stats.count(Kind::Trade),
        stats.count(Kind::BookLevel),
        stats.count(Kind::Heartbeat),
        report.unprocessed
    );
        let prefixes = stats.per_prefix(2);
        if !prefixes.is_empty() {
            let shown: Vec<String> = prefixes
                .iter()
                .take(8)
                .map(|(p, n)| format!("{p} {n} ({:.0}/s)", stats.rate(*n)))
                .collect();
            let _ = writeln!(out, "per prefix: {}", shown.join(", "));
        }
        if report.guide() + report.guide_malformed() > 0 {
            let topics = stats.guide.sorted();
            let shown: Vec<String> = topics
                .iter()
                .take(16)
                .map(|(topic, n)| match std::str::from_utf8(topic) {
                    Ok(text) => format!("{text:?} {n}"),
                    Err(_) => format!("0x{} {n}", hex(topic)),
                })
                .collect();
            let more = match topics.len() {
                n if n > 16 => format!(" and {} more topics", n - 16),
                _ => String::new(),
            };
            let _ = writeln!(
                out,
                "guide messages: {} received, {} malformed, {} processed ({} body bytes)   per topic: {}{more}{}",
                report.guide(),
                report.guide_malformed(),
                stats.guide.messages(),
                stats.guide.body_bytes(),
                if shown.is_empty() { "-".to_owned() } else { shown.join(", ") },
                match stats.guide.overflow() {
                    0 => String::new(),
                    n => format!("   beyond the {GUIDE_TOPICS_MAX}-topic cap: {n} messages"),
                }
            );
        }
        let t = report.sequence_totals();
        let _ = writeln!(
        out,
        "sequences: publishers {}  data received {}  missing {}  recorded gaps {}  duplicates {}  reordered {}  \
         restarts {}  anomalies {}  gap notices {}",
        t.publishers,
        t.received,
        t.missing,
        t.recorded_missing,
        t.duplicates,
        t.reordered,
        t.restarts,
        t.anomalies,
        report.gap_notices()
    );
        let per_worker: Vec<String> = report
            .workers
            .iter()
            .map(|w| format!("{} {}", w.index, w.processed))
            .collect();
        let _ = writeln!(
            out,
            "dispatch: {}   snail mode: {}   processed per worker: {}",
            report.dispatch,
            report.snail_mode.as_str(),
            per_worker.join(", ")
        );
        if !report.clock_offsets.is_empty() {
            let shown: Vec<String> = report
                .clock_offsets
                .iter()
                .take(16)
                .map(|o| {
                    let d = format_duration(Duration::from_nanos(o.offset_ns.unsigned_abs()));
                    format!(
                        "publisher {} {}{d}",
                        o.publisher,
                        if o.offset_ns < 0 { "-" } else { "+" }
                    )
                })
                .collect();
            let _ = writeln!(
                out,
                "clock offsets (min delay; + publisher behind, - ahead): {}{}",
                shown.join(", "),
                if report.clock_offsets.len() > 16 {
                    format!(" and {} more", report.clock_offsets.len() - 16)
                } else {
                    String::new()
                }
            );
        }
        out
    }
}

/// Lowercase hex of `bytes`.
fn hex(bytes: &[u8]) -> String {
    bytes
        .iter()
        .fold(String::with_capacity(bytes.len() * 2), |mut s, b| {
            let _ = write!(s, "{b:02x}");
            s
        })
}

fn lat(h: &Histogram<u64>) -> [String; 3] {
    if h.is_empty() {
        return ["-".into(), "-".into(), "-".into()];
    }
    let f = |ns: u64| format_duration(Duration::from_nanos(ns));
    [
        f(h.value_at_quantile(0.5)),
        f(h.value_at_quantile(0.99)),
        f(h.max()),
    ]
}

impl crate::LvcSnapshotReport {
    /// The `lvc_snapshot` object of the JSON summary: `status` is `complete`, `cache_incomplete` (every cached
    /// value arrived, but the proxy said its cache lacks values: `proxy_missed` publisher messages it never
    /// received, `proxy_dropped` values it let go), `truncated`, `busy`, `malformed`, `count_mismatch`,
    /// `timed_out`, `failed`, or `pending` (the subscriber stopped before the reply ended). `proxy_missed` and
    /// `proxy_dropped` are null when the proxy could not say (snapshot protocol version 1).
    pub fn to_json(&self) -> serde_json::Value {
        match &self.outcome {
            Some(o) => serde_json::json!({
                "endpoint": self.endpoint,
                "status": o.status,
                "complete": o.is_complete(),
                "received": o.received,
                "sent": o.sent,
                "elapsed_ms": o.elapsed_ns / 1_000_000,
                "proxy_missed": o.loss.map(|l| l.missed),
                "proxy_dropped": o.loss.map(|l| l.dropped),
            }),
            None => serde_json::json!({
                "endpoint": self.endpoint,
                "status": "pending",
                "complete": false,
                "received": serde_json::Value::Null,
                "sent": serde_json::Value::Null,
                "elapsed_ms": serde_json::Value::Null,
                "proxy_missed": serde_json::Value::Null,
                "proxy_dropped": serde_json::Value::Null,
            }),
        }
    }

    /// One line for the summary table.
    pub fn summary_line(&self) -> String {
        match &self.outcome {
            Some(o) if o.is_complete() => format!(
                "lvc snapshot: complete, {} values in {} ms from {}",
                o.received,
                o.elapsed_ns / 1_000_000,
                self.endpoint
            ),
            Some(o) if o.status == tickbox_lvc::snapshot::FetchStatus::CacheIncomplete => {
                let loss = o.loss.unwrap_or_default();
                format!(
                    "lvc snapshot: INCOMPLETE, {} values received from {}, every one the proxy held, but its cache \
                     lacks values: it never received {} publisher messages and let {} values go",
                    o.received, self.endpoint, loss.missed, loss.dropped
                )
            }
            Some(o) => format!(
                "lvc snapshot: INCOMPLETE ({:?}), {} values received{} from {}",
                o.status,
                o.received,
                o.sent.map_or_else(String::new, |s| format!(" of {s} sent")),
                self.endpoint
            ),
            None => format!(
                "lvc snapshot: INCOMPLETE (stopped before the reply ended) from {}",
                self.endpoint
            ),
        }
    }
}
