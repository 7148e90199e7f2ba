//! In-process replay for backtests: frames from a journal (or any reader) go straight into the Black Box's shard
//! logic and worker pool, with no socket in between, at memory speed.
//!
//! The shard side is [`ShardCore`], the very code the socket receive loop runs: the same decode, snail, sequence
//! accounting, per-symbol dispatch and batch unpacking, so a local replay and a replay over sockets give every
//! worker the same records in the same per-symbol order. What differs, and why:
//!
//! - **Time** is the journal's, not the wall clock's: the caller passes each record's receive time (a journal's
//!   capture time, when the recorder took it off the wire). The shard-side snail therefore judges each record by
//!   how late it was when it was recorded, and the clock-offset table learns the recorded delays; a backtest of a
//!   day recorded on time never trips, whatever the replay speed.
//! - **No dequeue check**: there is no queue between publisher and worker to be late in, so workers are not timed
//!   (worker lateness histograms stay empty); after a trip they stop processing, as in a live run.
//! - **Everything is taken**: there is no subscription, so no topic filter applies and sequences are always
//!   accounted for.
//! - **Recorded heartbeats are skipped** (and counted), as a replay over sockets skips them: they said when the
//!   recording was quiet, which a replay at another speed does not repeat.
//! - **The hand-off is the ring** (parcels of records copied from the reader, which lends each record only until
//!   the next one), whatever `handoff` says, and its parcels are 64 times as large as a live shard's (fewer
//!   wake-ups of a worker that is faster than the shard; no latency to keep short).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tickbox_wire::{is_batch, Kind};
use tickbox_workers::{
    Delivery, DequeueHook, Record, Worker, WorkerOutcome, WorkerPool, WorkerPoolConfig,
};

use crate::clock::ClockTable;
use crate::handoff::{handoff_plan, HandoffChoice, HandoffPlan};
use crate::report::{lateness_histogram, Report, WorkerReport};
use crate::settings::{ShardSettings, BURST_RECORDS};
use crate::shard_core::ShardCore;
use crate::shared::Shared;
use crate::snail::SharedThreshold;
use crate::{Handoff, SubscriberConfig, SubscriberError, SubscriberShardConfig};

/// Records per parcel in a local replay: 64 times a live shard's. A worker that drains its queue faster than the
/// reader fills it sleeps between parcels, and each parcel then costs the reader a wake-up (a system call, and on
/// a virtual machine an interrupt between cores; see [`crate::handoff::Ring::new`]). Several workers each take a share of the
/// records, so each one sleeps between its parcels even where one worker taking them all never would: at 256
/// records a parcel, 4 workers on 2 cores cost the reader 16 ns a record in wake-ups (9 % of its time) and
/// replayed at 0.7–0.8 times 1 worker's rate. Other sizes, 4 workers over 1 on 2 cores (medians of 12 alternating
/// rounds on a 2 M-record journal): 4 times a live parcel 0.85, 16 times 0.95, 64 times 1.08; 256 times, against 64 on
/// a 10 M-record journal, ran 4 workers at 16.7–18.0 M records/s against 18.4–19.7 (8 pairs), likely because larger
/// parcels no longer fit the caches between reader and workers. A queue holds at least four parcels (see
/// [`handoff_plan`]), so up to 16,384 records (about 2 MB of 120-byte records) wait per worker.
const LOCAL_PARCEL_RECORDS: usize = 64 * tickbox_workers::PARCEL_RECORDS;

/// The worker-side hook of a local replay: no timing (see the module documentation), only the stop after a trip.
pub struct LocalHook {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for LocalHook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalHook")
            .field("tripped", &self.shared.tripped.load(Ordering::Relaxed))
            .finish()
    }
}

impl DequeueHook for LocalHook {
    #[inline]
    fn on_dequeue(&mut self, _rec: &Record<'_>, _delivery: &Delivery) -> bool {
        !self.shared.tripped.load(Ordering::Relaxed)
    }
}

/// Where the caller feeds frames (see [`replay_local`]).
pub struct LocalSink<'c, 's> {
    core: &'c mut ShardCore<'s>,
    stop: &'c AtomicBool,
    since_check: u64,
    origin: Option<(u64, u64)>,
    skipped_heartbeats: u64,
    going: bool,
}

impl LocalSink<'_, '_> {
    /// Feeds one frame (a single tickbox frame or a batch) received at `received_ns` (a journal's capture time).
    /// Returns `false` once the replay must end: the snail or a gap under `die` fired, a worker failed, or the
    /// stop flag was raised; the caller then stops feeding.
    #[inline]
    pub fn push(&mut self, frame: &[u8], received_ns: u64) -> bool {
        if !self.going {
            return false;
        }
        let going = if is_batch(frame) {
            self.core.on_bytes(frame, received_ns)
        } else {
            // Matched where it lies rather than moved out (see `ShardCore::admit` on copying a header just
            // written field by field).
            match &Record::decode(frame) {
                Ok(rec) => {
                    let header = rec.header();
                    if header.kind == Kind::Heartbeat {
                        self.skipped_heartbeats += 1;
                        return true;
                    }
                    let origin = header.origin_time_ns;
                    self.origin = Some(match self.origin {
                        None => (origin, origin),
                        Some((lo, hi)) => (lo.min(origin), hi.max(origin)),
                    });
                    self.core.on_decoded(rec, received_ns)
                }
                // The shard counts it.
                Err(_) => self.core.on_bytes(frame, received_ns),
            }
        };
        if !going {
            self.going = false;
            return false;
        }
        self.since_check += 1;
        if self.since_check >= BURST_RECORDS {
            self.since_check = 0;
            // Only the flags: parcels go when full, so a local replay hands over full parcels only.
            self.core.publish();
            if self.stop.load(Ordering::Relaxed) {
                self.going = false;
            }
        }
        self.going
    }
}

/// What a local replay did: the subscriber [`Report`] (shard 0 is the replay's one shard) and the span of the
/// records' origin times, for the multiple of real time achieved.
#[derive(Debug)]
pub struct LocalReplayReport<W> {
    /// Records, gaps, snail, per-worker counts, exactly as a subscriber reports them; `elapsed` is the replay's.
    pub report: Report<W>,
    /// Smallest and largest header `origin_time_ns` fed (single frames), when any.
    pub origin_span_ns: Option<(u64, u64)>,
    /// Recorded heartbeats left out (see the module documentation).
    pub skipped_heartbeats: u64,
    /// Indices of worker threads that panicked (their outcomes are missing from `report`).
    pub panicked: Vec<usize>,
}

impl<W> LocalReplayReport<W> {
    /// Records fed per second of wall time.
    pub fn records_per_sec(&self) -> f64 {
        self.report.received() as f64 / self.report.elapsed.as_secs_f64().max(1e-9)
    }

    /// The stretch of market time the records cover, over the wall time it took: 48.0 replays a day in half an
    /// hour. `None` when fewer than two distinct origin times were fed.
    pub fn real_time_multiple(&self) -> Option<f64> {
        let (lo, hi) = self.origin_span_ns?;
        (hi > lo).then(|| (hi - lo) as f64 / 1e9 / self.report.elapsed.as_secs_f64().max(1e-9))
    }
}

/// Runs a local replay: starts `workers.count` workers (one where unset: the replay is one shard) built by `make`,
/// calls `feed` with a [`LocalSink`] to push every frame through the shard logic, waits until the workers have
/// processed everything, and reports.
///
/// From `config` it uses the snail (`max_lateness`, `snail_mode`, `clock_skew_warn`), `gap_policy`, `dispatch`
/// and `handoff_hwm`; shards, topics and `handoff` do not apply (see the module documentation). `stop` ends the
/// replay early (Ctrl-C); what was fed is still processed and reported.
pub fn replay_local<W: Worker>(
    ctx: &zmq::Context,
    config: &SubscriberConfig,
    workers: &WorkerPoolConfig,
    make: impl FnMut(usize) -> W,
    stop: &AtomicBool,
    feed: impl FnOnce(&mut LocalSink<'_, '_>),
) -> Result<LocalReplayReport<W>, SubscriberError> {
    let count = workers.count_for(1);
    if count == 0 {
        return Err(SubscriberError::Workers(
            tickbox_workers::WorkerError::NoWorkers,
        ));
    }
    let one_shard = SubscriberConfig {
        shards: vec![SubscriberShardConfig::default()],
        handoff: Handoff::Ring,
        ..config.clone()
    };
    let (mut plans, inboxes) = handoff_plan(
        &one_shard,
        Handoff::Ring,
        count,
        workers.shard_runs_asleep,
        LOCAL_PARCEL_RECORDS,
    );
    let Some(plan @ HandoffPlan::Ring { .. }) = plans.pop() else {
        return Err(SubscriberError::Config(
            "local replay needs the ring hand-off".into(),
        ));
    };
    let shared = Arc::new(Shared::new(1, true));
    let clocks = Arc::new(ClockTable::new(
        u64::try_from(config.clock_skew_warn.0.as_nanos()).unwrap_or(u64::MAX),
    ));
    let workers_failed = Arc::new(AtomicBool::new(false));
    let settings = ShardSettings {
        index: 0,
        shard: SubscriberShardConfig::default(),
        topics: Vec::new(),
        gaps: true,
        gap_policy: config.gap_policy,
        threshold: SharedThreshold::new(config.max_lateness.0),
        snail_mode: config.snail_mode,
        clocks: Arc::clone(&clocks),
        dispatch: config.dispatch,
        // A journal holds tickbox frames only.
        framing: crate::Framing::Tickbox,
        workers: count,
        receive_hwm: config.receive_hwm,
        profile: Default::default(),
        // In-process replay: no socket is opened, so nothing to secure.
        security: Default::default(),
        poll_ms: config.poll_interval.0.as_millis().clamp(1, 1_000) as i64,
        workers_failed: Arc::clone(&workers_failed),
    };
    let mut make = make;
    let pool = WorkerPool::spawn(ctx, inboxes, workers, Arc::clone(&workers_failed), |i| {
        (
            make(i),
            LocalHook {
                shared: Arc::clone(&shared),
            },
        )
    })?;
    let started = Instant::now();
    // A ring opens no socket: this only builds the shard's side of the queues.
    let outlet = plan.open(ctx, 0)?;
    let mut core = ShardCore::new(&settings, &shared, settings.empty_report(), outlet);
    let (origin_span_ns, skipped_heartbeats) = {
        let mut sink = LocalSink {
            core: &mut core,
            stop,
            since_check: 0,
            origin: None,
            skipped_heartbeats: 0,
            going: true,
        };
        feed(&mut sink);
        (sink.origin, sink.skipped_heartbeats)
    };
    // Handing over the last parcels and dropping the senders lets each worker end once it has drained its queue.
    let (shard_report, outlet) = core.finish();
    drop(outlet);
    if shared.tripped.load(Ordering::Acquire) {
        pool.abort();
    }
    // Workers end by themselves when their queues are drained and closed; `stop` is the backstop for a
    // round-robin queue that other workers still hold.
    let forwarded = shard_report.forwarded;
    let deadline = Instant::now() + config.drain_timeout.0 + Duration::from_secs(5);
    while pool.taken() < forwarded && !pool.failed() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_micros(200));
    }
    pool.stop();
    let (outcomes, panicked) = pool.join_partial();
    let elapsed = started.elapsed();
    let taken: u64 = outcomes.iter().map(|o| o.taken).sum();
    let fatal = shared
        .fatal
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .clone();
    let report = Report {
        shards: vec![shard_report],
        workers: outcomes.into_iter().map(local_worker_report).collect(),
        fatal,
        unprocessed: forwarded.saturating_sub(taken),
        elapsed,
        dispatch: config.dispatch,
        handoff: HandoffChoice {
            handoff: Handoff::Ring,
            reason: "a local replay hands parcels to its workers".to_owned(),
        },
        snail_mode: config.snail_mode,
        clock_offsets: clocks.offsets(),
        clock_untracked: clocks.untracked(),
    };
    Ok(LocalReplayReport {
        report,
        origin_span_ns,
        skipped_heartbeats,
        panicked,
    })
}

fn local_worker_report<W>(o: WorkerOutcome<W, LocalHook>) -> WorkerReport<W> {
    WorkerReport {
        index: o.index,
        worker: o.worker,
        processed: o.processed,
        discarded: o.discarded,
        malformed: o.malformed,
        late: 0,
        lateness: lateness_histogram(),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use tickbox_wire::{encode_to_vec, Header, MessageRef, Quote};

    use super::*;

    /// Keeps what it was given, with when its parcel was taken.
    #[derive(Default)]
    struct Keep(Vec<(Vec<u8>, u64, u64)>);

    impl Worker for Keep {
        fn on_message(&mut self, msg: &MessageRef<'_>, d: &Delivery) {
            self.0.push((
                msg.topic().as_bytes().to_vec(),
                msg.header().sequence,
                d.dequeued_ns,
            ));
        }
    }

    #[test]
    fn larger_parcels_keep_every_record_and_each_symbols_order() {
        // Several full parcels per worker, then the part-filled ones handed over at the end.
        const N: u64 = 20_000;
        const T0: u64 = 1_700_000_000_000_000_000;
        let frames: Vec<Vec<u8>> = (1..=N)
            .map(|seq| {
                let header = Header::live(Kind::Quote, 1, seq, T0 + seq * 1_000).with_session(1);
                encode_to_vec(
                    &format!("Q.XNAS.S{}", seq % 7),
                    &header,
                    &Quote::default().into(),
                )
                .unwrap()
            })
            .collect();
        let pool = WorkerPoolConfig {
            count: Some(2),
            ..WorkerPoolConfig::default()
        };
        let stop = AtomicBool::new(false);
        let out = replay_local(
            &zmq::Context::new(),
            &SubscriberConfig::default(),
            &pool,
            |_| Keep::default(),
            &stop,
            |sink| {
                for (i, f) in frames.iter().enumerate() {
                    assert!(sink.push(f, T0 + (i as u64 + 1) * 1_000 + 500));
                }
            },
        )
        .unwrap();
        assert!(out.panicked.is_empty());
        assert_eq!(out.report.shards[0].forwarded, N);
        assert_eq!(out.report.shards[0].gaps, 0);
        let mut owner: HashMap<Vec<u8>, usize> = HashMap::new();
        let mut seen = Vec::new();
        let mut longest_parcel = 0;
        for w in &out.report.workers {
            assert_eq!(w.processed as usize, w.worker.0.len());
            let mut last: HashMap<&[u8], u64> = HashMap::new();
            let mut run = 0;
            let mut previous_ns = None;
            for (topic, seq, ns) in &w.worker.0 {
                // A symbol belongs to one worker, which gets its records in order.
                assert_eq!(*owner.entry(topic.clone()).or_insert(w.index), w.index);
                let before = last.insert(topic, *seq).unwrap_or(0);
                assert!(*seq > before, "{topic:?}: {seq} after {before}");
                seen.push(*seq);
                // Records of one parcel are taken together, so they share their dequeue time.
                run = if previous_ns == Some(*ns) { run + 1 } else { 1 };
                previous_ns = Some(*ns);
                longest_parcel = longest_parcel.max(run);
            }
        }
        seen.sort_unstable();
        assert_eq!(seen, (1..=N).collect::<Vec<_>>());
        assert!(
            longest_parcel > tickbox_workers::PARCEL_RECORDS,
            "parcels of at most {longest_parcel} records"
        );
    }
}
