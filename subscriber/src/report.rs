//! What a subscriber run produced: per-shard and per-worker reports, and the fatal events that end a run.

use std::time::Duration;

use hdrhistogram::Histogram;
use serde::Serialize;
use tickbox_wire::{PublisherLedger, SequenceTotals};
use tickbox_workers::Dispatch;

use crate::clock::ClockOffset;
use crate::SnailMode;

/// Where a late message was caught.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Stage {
    /// On receipt by a shard's SUB socket.
    Shard,
    /// On dequeue by a worker: includes time queued behind a slow worker.
    Worker,
}

/// The message that made the snail fire.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SnailEvent {
    pub stage: Stage,
    /// Shard or worker index, per `stage`.
    pub index: usize,
    pub publisher: u32,
    pub topic: String,
    pub sequence: u64,
    pub lateness_ns: u64,
    pub threshold_ns: u64,
    pub send_time_ns: u64,
    pub received_ns: u64,
}

/// A gap that tripped the subscriber under `gap_policy = "die"`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct GapFatal {
    pub shard: usize,
    pub publisher: u32,
    pub topic: String,
    pub first_missing: u64,
    pub last_missing: u64,
}

/// Why a subscriber stopped itself.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "reason", rename_all = "snake_case")]
pub enum Fatal {
    Snail(SnailEvent),
    Gap(GapFatal),
}

impl Fatal {
    /// One line of JSON for machines (`SNAIL {…}` on stderr).
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).unwrap_or_else(|err| format!("{{\"error\":\"{err}\"}}"))
    }
}

/// A histogram for lateness in nanoseconds: 1 ns to one hour at 3 significant digits.
pub fn lateness_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 3_600_000_000_000, 3).expect("static histogram bounds are valid")
}

/// What one shard did.
#[derive(Debug, Clone)]
pub struct SubscriberShardReport {
    pub index: usize,
    pub endpoints: Vec<String>,
    /// Frames received, malformed ones included.
    pub received: u64,
    /// Decoded messages handed to the workers.
    pub forwarded: u64,
    pub malformed: u64,
    /// LVC cached values (exempt from the snail and gap checks).
    pub cached: u64,
    /// Gap notices (`Kind::Gap`: sequences a replayed journal lacks). Accounted for by the sequence tracker, exempt
    /// from the snail, and not forwarded to workers.
    pub gap_notices: u64,
    /// Messages past the snail threshold.
    pub late: u64,
    /// Gap events (this hop's own losses) and sequences missing in them.
    pub gaps: u64,
    pub missing: u64,
    pub restarts: u64,
    pub publishers: usize,
    /// The sequence tracker's totals (all zero when a topic filter makes gaps expected and tracking is off).
    pub sequence: SequenceTotals,
    /// Per-publisher accounts, in order of first appearance.
    pub ledgers: Vec<PublisherLedger>,
    /// Messages forwarded to each worker's queue (`by_topic`); with `round_robin` all go to the one shared queue
    /// (index 0) and the workers' `processed` counts say who took them.
    pub forwarded_per_worker: Vec<u64>,
    /// Receive lateness, ns.
    pub lateness: Histogram<u64>,
}

/// What one worker thread did, with its worker handed back for inspection.
#[derive(Debug)]
pub struct WorkerReport<W> {
    pub index: usize,
    pub worker: W,
    pub processed: u64,
    pub discarded: u64,
    pub malformed: u64,
    pub late: u64,
    /// Dequeue lateness, ns.
    pub lateness: Histogram<u64>,
}

/// Everything a subscriber did, returned by [`Subscriber::shutdown`].
#[derive(Debug)]
pub struct Report<W> {
    pub shards: Vec<SubscriberShardReport>,
    pub workers: Vec<WorkerReport<W>>,
    pub fatal: Option<Fatal>,
    /// Forwarded by shards but never taken by a worker (only non-zero after an abort or a drain timeout).
    pub unprocessed: u64,
    pub elapsed: Duration,
    pub dispatch: Dispatch,
    pub snail_mode: SnailMode,
    /// Estimated clock offset per publisher (minimum observed one-way delay), by publisher id.
    pub clock_offsets: Vec<ClockOffset>,
    /// Messages from publishers beyond the clock table's bound (judged strictly).
    pub clock_untracked: u64,
}

impl<W> Report<W> {
    pub fn received(&self) -> u64 {
        self.shards.iter().map(|s| s.received).sum()
    }
    pub fn forwarded(&self) -> u64 {
        self.shards.iter().map(|s| s.forwarded).sum()
    }
    pub fn processed(&self) -> u64 {
        self.workers.iter().map(|w| w.processed).sum()
    }
    pub fn malformed(&self) -> u64 {
        self.shards.iter().map(|s| s.malformed).sum::<u64>()
            + self.workers.iter().map(|w| w.malformed).sum::<u64>()
    }
    pub fn gaps(&self) -> u64 {
        self.shards.iter().map(|s| s.gaps).sum()
    }
    pub fn missing(&self) -> u64 {
        self.shards.iter().map(|s| s.missing).sum()
    }
    pub fn late(&self) -> u64 {
        self.shards.iter().map(|s| s.late).sum::<u64>()
            + self.workers.iter().map(|w| w.late).sum::<u64>()
    }
    /// Sequence totals over all shards.
    pub fn sequence_totals(&self) -> SequenceTotals {
        let mut t = SequenceTotals::default();
        for s in &self.shards {
            let q = &s.sequence;
            t.publishers += q.publishers;
            t.received += q.received;
            t.missing += q.missing;
            t.recorded_missing += q.recorded_missing;
            t.duplicates += q.duplicates;
            t.reordered += q.reordered;
            t.restarts += q.restarts;
            t.anomalies += q.anomalies;
            t.gap_events += q.gap_events;
            t.recorded_gap_events += q.recorded_gap_events;
            t.untracked += q.untracked;
            t.cached += q.cached;
        }
        t
    }
    /// Gap notices received over all shards.
    pub fn gap_notices(&self) -> u64 {
        self.shards.iter().map(|s| s.gap_notices).sum()
    }
    /// Per-publisher accounts over all shards (a publisher seen by two shards is summed), by publisher id.
    pub fn ledgers(&self) -> Vec<PublisherLedger> {
        let mut out: Vec<PublisherLedger> = Vec::new();
        for l in self.shards.iter().flat_map(|s| &s.ledgers) {
            match out.iter_mut().find(|m| m.publisher == l.publisher) {
                None => out.push(*l),
                Some(m) => {
                    m.last_sequence = m.last_sequence.max(l.last_sequence);
                    m.received += l.received;
                    m.missing += l.missing;
                    m.recorded_missing += l.recorded_missing;
                    m.duplicates += l.duplicates;
                    m.reordered += l.reordered;
                    m.restarts += l.restarts;
                    m.anomalies += l.anomalies;
                    m.gap_events += l.gap_events;
                    m.recorded_gap_events += l.recorded_gap_events;
                }
            }
        }
        out.sort_by_key(|l| l.publisher);
        out
    }
    /// Receive lateness over all shards.
    pub fn receive_lateness(&self) -> Histogram<u64> {
        let mut h = lateness_histogram();
        for s in &self.shards {
            let _ = h.add(&s.lateness);
        }
        h
    }
    /// Dequeue lateness over all workers.
    pub fn dequeue_lateness(&self) -> Histogram<u64> {
        let mut h = lateness_histogram();
        for w in &self.workers {
            let _ = h.add(&w.lateness);
        }
        h
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn snail_json_names_everything_a_pager_needs() {
        let fatal = Fatal::Snail(SnailEvent {
            stage: Stage::Worker,
            index: 2,
            publisher: 7,
            topic: "Q.XNAS.AAPL".into(),
            sequence: 42,
            lateness_ns: 6_000_000,
            threshold_ns: 5_000_000,
            send_time_ns: 1,
            received_ns: 6_000_001,
        });
        let v: serde_json::Value = serde_json::from_str(&fatal.to_json()).unwrap();
        assert_eq!(v["reason"], "snail");
        assert_eq!(v["stage"], "worker");
        assert_eq!(v["topic"], "Q.XNAS.AAPL");
        assert_eq!(v["lateness_ns"], 6_000_000);
    }
}
