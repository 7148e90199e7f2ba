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
    /// Whether a shard (on receipt) or a worker (on dequeue) caught it.
    pub stage: Stage,
    /// Shard or worker index, per `stage`.
    pub index: usize,
    /// The sending publisher's id, from the message header.
    pub publisher: u32,
    /// The message's topic, e.g. `Q.XNAS.AAPL`.
    pub topic: String,
    /// The message's sequence number in its publisher's stream.
    pub sequence: u64,
    /// How late it was, ns, as measured under the run's [`SnailMode`].
    pub lateness_ns: u64,
    /// The threshold it exceeded, ns.
    pub threshold_ns: u64,
    /// The publisher's send time, ns since the Unix epoch on the publisher's clock.
    pub send_time_ns: u64,
    /// When the shard received it or the worker dequeued it (per `stage`), ns since the Unix epoch on our clock.
    pub received_ns: u64,
}

/// A gap that tripped the subscriber under `gap_policy = "die"`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct GapFatal {
    /// Index of the shard that saw the gap.
    pub shard: usize,
    /// The publisher whose messages are missing.
    pub publisher: u32,
    /// Topic of the message that revealed the gap (the first one after it).
    pub topic: String,
    /// First sequence number missing, inclusive.
    pub first_missing: u64,
    /// Last sequence number missing, inclusive.
    pub last_missing: u64,
}

/// Why a subscriber stopped itself.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "reason", rename_all = "snake_case")]
pub enum Fatal {
    /// A message past the lateness threshold (`"reason": "snail"` in JSON).
    Snail(SnailEvent),
    /// This hop lost messages under `gap_policy = "die"` (`"reason": "gap"` in JSON).
    Gap(GapFatal),
    /// A catch-up could not deliver history and live without a gap (`"reason": "catch_up"` in JSON): its live
    /// buffer ran past its budget, or the history service refused, failed or fell silent.
    CatchUp(CatchUpFatal),
}

/// Why a catch-up stopped the subscriber.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CatchUpFatal {
    /// The shard that failed.
    pub shard: usize,
    /// What went wrong, naming the budget or the service.
    pub reason: String,
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
    /// Index of the shard in `SubscriberConfig::shards`.
    pub index: usize,
    /// The publisher endpoints it connected to, as configured (before any NIC rewrite).
    pub endpoints: Vec<String>,
    /// The network interface it connected from (`--nic`), if any.
    pub nic: Option<String>,
    /// The core its thread ran on: the one asked for, once pinning succeeded (`None`: not pinned).
    pub core: Option<usize>,
    /// The libzmq I/O thread its socket used (`io_thread`), if one was set.
    pub io_thread: Option<usize>,
    /// Records received, malformed ones included: a single frame is one record, a batch frame counts each record
    /// it carries (its records that could not be framed are counted in `batch_malformed` instead).
    pub received: u64,
    /// Batch frames received (`#B`: several records in one message).
    pub batches: u64,
    /// Batch frames whose header is damaged, records inside a batch that could not be framed or decoded, and
    /// trailing bytes after a batch's last record; each dropped and counted once.
    pub batch_malformed: u64,
    /// Messages a full-then-refusing `handoff = "zmq"` socket did not take (the ring never drops: it waits).
    pub handoff_dropped: u64,
    /// Records this shard ran on a sleeping worker's state itself at the end of a burst (ring hand-off,
    /// `[workers] shard_runs_asleep`) instead of waking the worker.
    pub run_by_shard: u64,
    /// Times this shard stopped doing so for a while because a run took longer than a wake-up costs (a slow
    /// worker; see the Black Box chapter).
    pub run_by_shard_pauses: u64,
    /// Handshakes a publisher refused (ZAP: a key it does not list, a full connection cap) or that failed; each
    /// endpoint is connected again after a wait, since libzmq does not try again on its own.
    pub handshakes_refused: u64,
    /// Decoded messages handed to the workers.
    pub forwarded: u64,
    /// Frames that did not decode as a tickbox message, and messages that are not a `[topic][body]` Guide message
    /// under `framing = "guide"` (counted once per message; also in `guide_malformed`); dropped.
    pub malformed: u64,
    /// Guide messages (`[topic][body]`, read under `framing = "guide"` or `"auto"`) received whole; each is also
    /// one of `received`, and forwarded to the workers like a record.
    pub guide: u64,
    /// Messages read as Guide messages that had one frame or more than two; dropped (also in `malformed`).
    pub guide_malformed: u64,
    /// Of `malformed` under the tickbox framing: frames that look like the Guide's framing (parts of a multipart
    /// message, or plain text), the hint that `framing = "guide"` was meant.
    pub guide_like: u64,
    /// LVC cached values (exempt from the snail and gap checks).
    pub cached: u64,
    /// Gap notices (`Kind::Gap`: sequences a replayed journal lacks). Accounted for by the sequence tracker, exempt
    /// from the snail, and not forwarded to workers.
    pub gap_notices: u64,
    /// Messages past the snail threshold.
    pub late: u64,
    /// Gap events (this hop's own losses) and sequences missing in them.
    pub gaps: u64,
    /// Sequences missing in those gap events (and not since filled by a reordered arrival).
    pub missing: u64,
    /// Publisher restarts seen (a new session; counting starts again).
    pub restarts: u64,
    /// Distinct publishers this shard tracked sequences for.
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

impl SubscriberShardReport {
    /// Shard `index`'s report before anything was received: every count zero, one per-worker slot for each of
    /// `workers` (at least one).
    pub fn before_receiving(index: usize, endpoints: Vec<String>, workers: usize) -> Self {
        SubscriberShardReport {
            index,
            endpoints,
            nic: None,
            core: None,
            io_thread: None,
            received: 0,
            batches: 0,
            batch_malformed: 0,
            handoff_dropped: 0,
            run_by_shard: 0,
            run_by_shard_pauses: 0,
            handshakes_refused: 0,
            forwarded: 0,
            malformed: 0,
            guide: 0,
            guide_malformed: 0,
            guide_like: 0,
            cached: 0,
            gap_notices: 0,
            late: 0,
            gaps: 0,
            missing: 0,
            restarts: 0,
            publishers: 0,
            sequence: SequenceTotals::default(),
            ledgers: Vec::new(),
            forwarded_per_worker: vec![0; workers.max(1)],
            lateness: lateness_histogram(),
        }
    }
}

/// What one worker thread did, with its worker handed back for inspection.
#[derive(Debug)]
pub struct WorkerReport<W> {
    /// Index of the worker thread (the `index` of a worker-stage [`SnailEvent`]).
    pub index: usize,
    /// The worker, with whatever state it built (a book, statistics).
    pub worker: W,
    /// Messages given to the worker.
    pub processed: u64,
    /// Messages dequeued but dropped unprocessed: after an abort, or from the moment the subscriber tripped.
    pub discarded: u64,
    /// Frames that did not decode (0 unless something other than a shard feeds the queue).
    pub malformed: u64,
    /// Messages past the snail threshold on dequeue (at most 1: the first one trips the subscriber).
    pub late: u64,
    /// Dequeue lateness, ns.
    pub lateness: Histogram<u64>,
}

/// Everything a subscriber did, returned by [`crate::Subscriber::shutdown`].
#[derive(Debug)]
pub struct Report<W> {
    /// One report per shard, in config order.
    pub shards: Vec<SubscriberShardReport>,
    /// One report per worker thread, by index.
    pub workers: Vec<WorkerReport<W>>,
    /// The event that stopped the run, if the subscriber tripped; `None` after a clean shutdown.
    pub fatal: Option<Fatal>,
    /// Forwarded by shards but never taken by a worker (only non-zero after an abort or a drain timeout).
    pub unprocessed: u64,
    /// Wall time from start (workers connected) to shutdown.
    pub elapsed: Duration,
    /// How shards handed messages to workers in this run.
    pub dispatch: Dispatch,
    /// The hand-off this run used, and why.
    pub handoff: crate::HandoffChoice,
    /// How lateness was measured in this run.
    pub snail_mode: SnailMode,
    /// Estimated clock offset per publisher (minimum observed one-way delay), by publisher id.
    pub clock_offsets: Vec<ClockOffset>,
    /// Messages from publishers beyond the clock table's bound (judged strictly).
    pub clock_untracked: u64,
}

impl<W> Report<W> {
    /// The same report with each worker replaced by `f(worker)`, every count kept: for an owner that ran a
    /// composite worker and reports its parts apart.
    pub fn map_workers<V>(self, mut f: impl FnMut(W) -> V) -> Report<V> {
        Report {
            shards: self.shards,
            workers: self
                .workers
                .into_iter()
                .map(|w| WorkerReport {
                    index: w.index,
                    worker: f(w.worker),
                    processed: w.processed,
                    discarded: w.discarded,
                    malformed: w.malformed,
                    late: w.late,
                    lateness: w.lateness,
                })
                .collect(),
            fatal: self.fatal,
            unprocessed: self.unprocessed,
            elapsed: self.elapsed,
            dispatch: self.dispatch,
            handoff: self.handoff,
            snail_mode: self.snail_mode,
            clock_offsets: self.clock_offsets,
            clock_untracked: self.clock_untracked,
        }
    }

    /// Records received over all shards, malformed ones included (see [`SubscriberShardReport::received`]).
    pub fn received(&self) -> u64 {
        self.shards.iter().map(|s| s.received).sum()
    }
    /// Decoded messages handed to workers over all shards.
    pub fn forwarded(&self) -> u64 {
        self.shards.iter().map(|s| s.forwarded).sum()
    }
    /// Messages processed over all workers.
    pub fn processed(&self) -> u64 {
        self.workers.iter().map(|w| w.processed).sum()
    }
    /// Batch frames received over all shards.
    pub fn batches(&self) -> u64 {
        self.shards.iter().map(|s| s.batches).sum()
    }
    /// Malformed batches and batched records over all shards.
    pub fn batch_malformed(&self) -> u64 {
        self.shards.iter().map(|s| s.batch_malformed).sum()
    }
    /// Guide messages received whole over all shards.
    pub fn guide(&self) -> u64 {
        self.shards.iter().map(|s| s.guide).sum()
    }
    /// Malformed Guide messages over all shards.
    pub fn guide_malformed(&self) -> u64 {
        self.shards.iter().map(|s| s.guide_malformed).sum()
    }
    /// Malformed frames that look like the Guide's framing, over all shards.
    pub fn guide_like(&self) -> u64 {
        self.shards.iter().map(|s| s.guide_like).sum()
    }
    /// Messages the zmq hand-off refused over all shards.
    pub fn handoff_dropped(&self) -> u64 {
        self.shards.iter().map(|s| s.handoff_dropped).sum()
    }
    /// Records the shards ran on sleeping workers themselves, over all shards.
    pub fn run_by_shard(&self) -> u64 {
        self.shards.iter().map(|s| s.run_by_shard).sum()
    }
    /// Pauses in the shards' running of sleeping workers' records, over all shards.
    pub fn run_by_shard_pauses(&self) -> u64 {
        self.shards.iter().map(|s| s.run_by_shard_pauses).sum()
    }
    /// Handshakes refused or failed over all shards.
    pub fn handshakes_refused(&self) -> u64 {
        self.shards.iter().map(|s| s.handshakes_refused).sum()
    }
    /// Undecodable frames, shards and workers together.
    pub fn malformed(&self) -> u64 {
        self.shards.iter().map(|s| s.malformed).sum::<u64>()
            + self.workers.iter().map(|w| w.malformed).sum::<u64>()
    }
    /// Gap events (this hop's own losses) over all shards.
    pub fn gaps(&self) -> u64 {
        self.shards.iter().map(|s| s.gaps).sum()
    }
    /// Sequences missing in gap events over all shards.
    pub fn missing(&self) -> u64 {
        self.shards.iter().map(|s| s.missing).sum()
    }
    /// Messages past the snail threshold, on receipt and on dequeue together.
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
