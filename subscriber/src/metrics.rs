//! The subscriber's metrics (`subscribe --metrics`): the same counts as the summary and its `--json`, read when
//! Prometheus scrapes.
//!
//! A shard keeps its counts in its own report, untouched by other threads. A scrape raises each shard's
//! `metrics_wanted` flag and waits (briefly) for the answer: the shard copies its counts, sequence accounts and
//! lateness buckets into a snapshot at its next burst boundary or idle wake-up: one relaxed load per burst, and a
//! lock once per scrape, never per record. A finished shard's snapshot is its final report's, so after the
//! stream ends the metrics and the summary agree to the message.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tickbox_metrics::{label, Scrape, Source};
use tickbox_wire::SequenceTotals;
use tickbox_workers::PoolCounters;

use crate::clock::ClockTable;
use crate::shared::{ShardSnapshot, Shared};
use crate::{CatchUpHandle, SharedThreshold, SubscriberShardConfig};

/// How long a scrape waits for the shards' answers before it reports their previous snapshot. A shard answers
/// within one burst or one idle wait (`poll_interval`, at most 1 s).
const ANSWER_WAIT: Duration = Duration::from_millis(1_500);

/// The [`Source`] of a running [`Subscriber`](crate::Subscriber) (see [`crate::Subscriber::metrics`]).
pub struct SubscriberMetrics {
    pub(crate) shared: Arc<Shared>,
    pub(crate) shards: Vec<SubscriberShardConfig>,
    pub(crate) pool: Option<PoolCounters>,
    pub(crate) threshold: SharedThreshold,
    pub(crate) clocks: Arc<ClockTable>,
    pub(crate) catch_up: Option<CatchUpHandle>,
}

impl std::fmt::Debug for SubscriberMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SubscriberMetrics")
            .field("shards", &self.shards.len())
            .finish()
    }
}

impl SubscriberMetrics {
    /// Asks every running shard for its counts and waits for the answers (bounded); returns the snapshots and
    /// how many shards did not answer in time (their previous snapshot stands in).
    fn snapshots(&self) -> (Vec<ShardSnapshot>, usize) {
        let live = &self.shared.live;
        let before: Vec<u64> = live
            .iter()
            .map(|l| l.metrics_answers.load(Ordering::Acquire))
            .collect();
        for l in live.iter() {
            l.metrics_wanted.store(true, Ordering::Relaxed);
        }
        let deadline = Instant::now() + ANSWER_WAIT;
        let answered = |i: usize| {
            live[i].finished.load(Ordering::Acquire)
                || live[i].metrics_answers.load(Ordering::Acquire) > before[i]
        };
        while !(0..live.len()).all(answered) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(1));
        }
        let stale = (0..live.len()).filter(|&i| !answered(i)).count();
        let snapshots = live
            .iter()
            .map(|l| l.metrics.lock().unwrap_or_else(|p| p.into_inner()).clone())
            .collect();
        (snapshots, stale)
    }
}

/// `(name, help, value)` of the per-shard counters, the `shards[]` fields of `subscribe --json`.
fn shard_counters(s: &ShardSnapshot) -> [(&'static str, &'static str, u64); 17] {
    [
        (
            "tickbox_received",
            "Records received, malformed included (a batch counts each record).",
            s.received,
        ),
        (
            "tickbox_forwarded",
            "Decoded messages handed to the workers.",
            s.forwarded,
        ),
        (
            "tickbox_malformed",
            "Frames that did not decode; dropped.",
            s.malformed,
        ),
        ("tickbox_batches", "Batch frames (#B) received.", s.batches),
        (
            "tickbox_batch_malformed",
            "Damaged batch frames and undecodable records inside batches; dropped.",
            s.batch_malformed,
        ),
        (
            "tickbox_guide",
            "Guide [topic][body] messages received.",
            s.guide,
        ),
        (
            "tickbox_guide_malformed",
            "Messages read as Guide messages with the wrong number of frames; dropped.",
            s.guide_malformed,
        ),
        (
            "tickbox_malformed_guide_like",
            "Malformed frames that look like the Guide's framing.",
            s.guide_like,
        ),
        (
            "tickbox_handoff_dropped",
            "Messages a full handoff=zmq socket did not take.",
            s.handoff_dropped,
        ),
        (
            "tickbox_run_by_shard",
            "Records a shard ran on a sleeping worker itself instead of waking it (ring hand-off).",
            s.run_by_shard,
        ),
        (
            "tickbox_run_by_shard_pauses",
            "Pauses in a shard's running of sleeping workers' records after a run longer than a wake-up costs.",
            s.run_by_shard_pauses,
        ),
        (
            "tickbox_handshakes_refused",
            "Handshakes a publisher refused (ZAP, connection cap) or that failed.",
            s.handshakes_refused,
        ),
        (
            "tickbox_cached",
            "LVC cached values received (exempt from the snail and gap checks).",
            s.cached,
        ),
        (
            "tickbox_gap_notices",
            "Gap notices received (sequences a replayed journal lacks).",
            s.gap_notices,
        ),
        (
            "tickbox_late",
            "Messages past the snail threshold on receipt.",
            s.late,
        ),
        (
            "tickbox_shard_gaps",
            "Gap events this shard saw (this hop's own losses).",
            s.gaps,
        ),
        (
            "tickbox_shard_missing",
            "Sequences missing in this shard's gap events.",
            s.sequence.missing,
        ),
    ]
}

/// `(name, help, value)` of the sequence accounts, the top-level fields of `subscribe --json` of the same names.
fn sequence_counters(t: &SequenceTotals) -> [(&'static str, &'static str, u64); 10] {
    [
        (
            "tickbox_data_received",
            "Data records sequence-checked.",
            t.received,
        ),
        ("tickbox_missing", "Sequences this hop lost.", t.missing),
        (
            "tickbox_gaps",
            "Gap events (this hop's own losses).",
            t.gap_events,
        ),
        (
            "tickbox_recorded_gaps",
            "Sequences lost before the journal this stream replays (gap notices).",
            t.recorded_missing,
        ),
        (
            "tickbox_recorded_gap_events",
            "Gap notices' events.",
            t.recorded_gap_events,
        ),
        (
            "tickbox_duplicates",
            "Sequences received twice.",
            t.duplicates,
        ),
        (
            "tickbox_reordered",
            "Late arrivals that filled a gap.",
            t.reordered,
        ),
        (
            "tickbox_restarts",
            "Publisher restarts (a new session).",
            t.restarts,
        ),
        (
            "tickbox_anomalies",
            "Implausible sequence jumps.",
            t.anomalies,
        ),
        (
            "tickbox_untracked",
            "Messages of publishers beyond the tracker's bound.",
            t.untracked,
        ),
    ]
}

impl Source for SubscriberMetrics {
    fn collect(&self, out: &mut Scrape) {
        let (snapshots, stale) = self.snapshots();
        out.gauge(
            "tickbox_metrics_stale_shards",
            "Shards that did not answer this scrape in time (their previous counts are shown).",
            &[],
            stale as i64,
        );
        for (i, (s, config)) in snapshots.iter().zip(&self.shards).enumerate() {
            let shard = [(label::SHARD, i.to_string())];
            for (name, help, value) in shard_counters(s) {
                out.counter(name, help, &shard, value);
            }
            for (name, help, value) in sequence_counters(&s.sequence) {
                out.counter(name, help, &shard, value);
            }
            out.histogram_seconds(
                "tickbox_lateness",
                "Lateness on receipt (receive time - publisher send time), by shard.",
                &shard,
                s.lateness.seconds(),
            );
            let pinned = self.shared.live[i].pinned_core.load(Ordering::Relaxed);
            out.info(
                "tickbox_shard_placement",
                "Where a shard runs: its endpoints, the NIC it connects from, the core its thread is pinned to and \
                 the libzmq I/O thread its socket uses (empty: none).",
                &[
                    (label::SHARD, i.to_string()),
                    (label::ENDPOINT, config.connect.join(",")),
                    (label::NIC, config.nic.clone().unwrap_or_default()),
                    (
                        label::CORE,
                        if pinned == u64::MAX { String::new() } else { pinned.to_string() },
                    ),
                    (
                        label::IO_THREAD,
                        config.io_thread.map(|t| t.to_string()).unwrap_or_default(),
                    ),
                ],
            );
            for l in &s.ledgers {
                let labels = [
                    (label::SHARD, i.to_string()),
                    (label::PUBLISHER, l.publisher.to_string()),
                ];
                out.counters(
                    &labels,
                    &[
                        (
                            "tickbox_publisher_received",
                            "Data records from this publisher.",
                            l.received,
                        ),
                        (
                            "tickbox_publisher_missing",
                            "Sequences of this publisher this hop lost.",
                            l.missing,
                        ),
                        (
                            "tickbox_publisher_recorded_gaps",
                            "Sequences of this publisher a replayed journal lacks.",
                            l.recorded_missing,
                        ),
                        (
                            "tickbox_publisher_duplicates",
                            "Sequences of this publisher received twice.",
                            l.duplicates,
                        ),
                        (
                            "tickbox_publisher_gaps",
                            "Gap events of this publisher.",
                            l.gap_events,
                        ),
                    ],
                );
                out.gauge(
                    "tickbox_publisher_last_sequence",
                    "The last sequence received from this publisher.",
                    &labels,
                    i64::try_from(l.last_sequence).unwrap_or(i64::MAX),
                );
            }
        }
        if let Some(pool) = &self.pool {
            for w in pool.read() {
                let worker = [(label::WORKER, w.index.to_string())];
                out.counter(
                    "tickbox_processed",
                    "Messages given to a worker.",
                    &worker,
                    w.processed,
                );
                out.counter(
                    "tickbox_discarded",
                    "Messages a worker dropped unprocessed (after an abort or the subscriber tripped).",
                    &worker,
                    w.discarded,
                );
                out.counter(
                    "tickbox_malformed",
                    "Frames that did not decode; dropped.",
                    &worker,
                    w.malformed,
                );
                out.counter(
                    "tickbox_worker_taken",
                    "Messages a worker took off its queue.",
                    &worker,
                    w.taken,
                );
            }
        }
        out.gauge_seconds(
            "tickbox_max_lateness",
            "The Suicidal Snail's threshold now (0: off).",
            &[],
            self.threshold.get().as_secs_f64(),
        );
        out.gauge(
            "tickbox_tripped",
            "1 once the snail (or a gap under gap_policy=die, or a failed catch-up) has stopped the subscriber.",
            &[],
            i64::from(self.shared.tripped.load(Ordering::Acquire)),
        );
        for o in self.clocks.offsets() {
            out.gauge_seconds(
                "tickbox_clock_offset",
                "A publisher's estimated clock offset (its minimum observed one-way delay).",
                &[(label::PUBLISHER, o.publisher.to_string())],
                o.offset_ns as f64 / 1e9,
            );
        }
        if let Some(c) = &self.catch_up {
            out.gauge(
                "tickbox_catch_up_live",
                "1 once the catch-up has handed over to the live stream; 0 while the history is delivered.",
                &[],
                i64::from(c.is_live()),
            );
        }
    }
}
