//! State shared by the shard threads, the worker hooks and the owning [`Subscriber`](crate::Subscriber).

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use serde::Serialize;
use tickbox_metrics::Buckets;
use tickbox_units::format_duration;
use tickbox_wire::{PublisherLedger, SequenceTotals, SequenceTracker};

use crate::report::{Fatal, Stage, SubscriberShardReport};

/// One shard's live counters, written only by that shard (a relaxed store of its own running total) and read by
/// the owner for status. One cache line per shard so shards never share a line.
#[repr(align(64))]
pub(crate) struct LiveShard {
    pub(crate) received: AtomicU64,
    /// Handshakes the shard's SUB completed (its monitor, read when the SUB runs dry).
    pub(crate) handshakes: AtomicU64,
    pub(crate) forwarded: AtomicU64,
    pub(crate) gaps: AtomicU64,
    pub(crate) late: AtomicU64,
    /// Set by the owner to ask for fresh lateness percentiles; the shard answers at its next burst boundary
    /// (one relaxed load per burst; the histogram is read only when asked).
    pub(crate) lateness_wanted: AtomicBool,
    pub(crate) lateness_p50_ns: AtomicU64,
    pub(crate) lateness_p99_ns: AtomicU64,
    pub(crate) lateness_max_ns: AtomicU64,
    /// Set by a metrics scrape; the shard answers at its next burst boundary or idle wake-up by copying its
    /// counters into `metrics` (the lock is taken once per request, never per record) and counting the answer.
    pub(crate) metrics_wanted: AtomicBool,
    pub(crate) metrics_answers: AtomicU64,
    pub(crate) metrics: Mutex<ShardSnapshot>,
    /// The core the shard thread is pinned to (`u64::MAX`: not pinned).
    pub(crate) pinned_core: AtomicU64,
    /// The shard has handed in its final counts (its last snapshot is its report's).
    pub(crate) finished: AtomicBool,
}

impl Default for LiveShard {
    fn default() -> Self {
        LiveShard {
            received: AtomicU64::new(0),
            handshakes: AtomicU64::new(0),
            forwarded: AtomicU64::new(0),
            gaps: AtomicU64::new(0),
            late: AtomicU64::new(0),
            lateness_wanted: AtomicBool::new(false),
            lateness_p50_ns: AtomicU64::new(0),
            lateness_p99_ns: AtomicU64::new(0),
            lateness_max_ns: AtomicU64::new(0),
            metrics_wanted: AtomicBool::new(false),
            metrics_answers: AtomicU64::new(0),
            metrics: Mutex::new(Default::default()),
            pinned_core: AtomicU64::new(u64::MAX),
            finished: AtomicBool::new(false),
        }
    }
}

/// A shard's counts as of its last answer to a metrics scrape (see `crate::metrics`).
#[derive(Debug, Clone, Default)]
pub(crate) struct ShardSnapshot {
    pub(crate) received: u64,
    pub(crate) batches: u64,
    pub(crate) batch_malformed: u64,
    pub(crate) handoff_dropped: u64,
    pub(crate) run_by_shard: u64,
    pub(crate) run_by_shard_pauses: u64,
    pub(crate) handshakes_refused: u64,
    pub(crate) forwarded: u64,
    pub(crate) malformed: u64,
    pub(crate) guide: u64,
    pub(crate) guide_malformed: u64,
    pub(crate) guide_like: u64,
    pub(crate) cached: u64,
    pub(crate) gap_notices: u64,
    pub(crate) late: u64,
    pub(crate) gaps: u64,
    pub(crate) sequence: SequenceTotals,
    pub(crate) ledgers: Vec<PublisherLedger>,
    pub(crate) lateness: Buckets,
}

impl ShardSnapshot {
    pub(crate) fn of(r: &SubscriberShardReport, tracker: &SequenceTracker) -> ShardSnapshot {
        ShardSnapshot {
            received: r.received,
            batches: r.batches,
            batch_malformed: r.batch_malformed,
            handoff_dropped: r.handoff_dropped,
            run_by_shard: r.run_by_shard,
            run_by_shard_pauses: r.run_by_shard_pauses,
            handshakes_refused: r.handshakes_refused,
            forwarded: r.forwarded,
            malformed: r.malformed,
            guide: r.guide,
            guide_malformed: r.guide_malformed,
            guide_like: r.guide_like,
            cached: r.cached,
            gap_notices: r.gap_notices,
            late: r.late,
            gaps: r.gaps,
            sequence: tracker.totals(),
            ledgers: tracker.ledgers().copied().collect(),
            lateness: Buckets::from_hdr(&r.lateness),
        }
    }
}

/// A shard's counters while the subscriber runs (see [`crate::Subscriber::live_shards`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct LiveShardCounters {
    /// Index of the shard in `SubscriberConfig::shards`.
    pub index: usize,
    /// Frames received so far, malformed ones included.
    pub received: u64,
    /// Handshakes completed with its publishers so far (0: it has never been connected to anything). Read from
    /// the SUB's monitor when the SUB runs dry, so it may lag a busy shard.
    pub handshakes: u64,
    /// Decoded messages handed to workers so far.
    pub forwarded: u64,
    /// Gap events (this hop's own losses) so far.
    pub gaps: u64,
    /// Messages past the snail threshold on receipt so far.
    pub late: u64,
    /// Lateness on receipt since the start, median, as of the last [`Subscriber::request_lateness`] answered
    /// (0 before).
    ///
    /// [`Subscriber::request_lateness`]: crate::Subscriber::request_lateness
    pub lateness_p50_ns: u64,
    /// Lateness on receipt since the start, 99th percentile (same snapshot as `lateness_p50_ns`).
    pub lateness_p99_ns: u64,
    /// Worst lateness on receipt since the start (same snapshot as `lateness_p50_ns`).
    pub lateness_max_ns: u64,
}

/// State shared by the shard threads, the worker hooks and the owner.
pub(crate) struct Shared {
    /// Shards may start receiving (set once the workers are connected).
    pub(crate) go: AtomicBool,
    pub(crate) stop: AtomicBool,
    /// Shards may close their sockets (set once the workers are done with them).
    pub(crate) release: AtomicBool,
    pub(crate) tripped: AtomicBool,
    pub(crate) fatal: Mutex<Option<Fatal>>,
    pub(crate) live: Vec<LiveShard>,
    pub(crate) shards_done: AtomicUsize,
}

impl Shared {
    /// The state of `shards` shards, none started; `go` already set where nothing waits for workers to connect.
    pub(crate) fn new(shards: usize, go: bool) -> Shared {
        Shared {
            go: AtomicBool::new(go),
            stop: AtomicBool::new(false),
            release: AtomicBool::new(false),
            tripped: AtomicBool::new(false),
            fatal: Mutex::new(None),
            live: (0..shards).map(|_| LiveShard::default()).collect(),
            shards_done: AtomicUsize::new(0),
        }
    }

    /// Records the first fatal event and logs it once; later ones (other threads racing) are dropped.
    pub(crate) fn trip(&self, fatal: Fatal) {
        let mut slot = self.fatal.lock().unwrap_or_else(|p| p.into_inner());
        if slot.is_none() {
            match &fatal {
                Fatal::Snail(e) => tracing::error!(
                    "Suicidal Snail: {stage} {index} got publisher {publisher} topic {topic} sequence {seq} \
                     {late} late (threshold {threshold}); subscriber exits",
                    stage = match e.stage {
                        Stage::Shard => "shard",
                        Stage::Worker => "worker",
                    },
                    index = e.index,
                    publisher = e.publisher,
                    topic = e.topic,
                    seq = e.sequence,
                    late = format_duration(Duration::from_nanos(e.lateness_ns)),
                    threshold = format_duration(Duration::from_nanos(e.threshold_ns)),
                ),
                Fatal::Gap(g) => tracing::error!(
                    "sequence gap with gap_policy=die: shard {} publisher {} missed {}..={} (at topic {}); \
                     subscriber exits",
                    g.shard,
                    g.publisher,
                    g.first_missing,
                    g.last_missing,
                    g.topic
                ),
                Fatal::CatchUp(c) => tracing::error!("catch-up failed on shard {}: {}; subscriber exits", c.shard, c.reason),
            }
            *slot = Some(fatal);
        }
        self.tripped.store(true, Ordering::Release);
    }
}
