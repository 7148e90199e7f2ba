//! The shard thread: one pinned SUB socket, read in bursts. A burst is what the socket holds when the shard
//! looks (at most [`BURST_RECORDS`] records): the clock is read once at its start, every record of it is judged by
//! [`ShardCore`] against that time, and at its end the workers' parcels are handed over and the live counters
//! published, once.
//!
//! Precision of the snail: a record is judged against its burst's receive time, which is when the burst's first
//! frame was taken off the socket. Later records of the burst were taken off up to the burst's processing time
//! later (at most [`BURST_RECORDS`] records, some tens of microseconds), so their lateness reads low by at most
//! that; a batch frame's records all arrive at once, so within one batch nothing is lost. The dequeue check at the
//! worker reads its own clock, so a backlog behind a slow worker is measured there in full.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::Duration;

use tickbox_wire::{now_ns, SequenceEvent, SequenceTotals, BATCH_TOPIC};
use tickbox_workers::{Dispatch, Parcel, Recycler};

use crate::blackbox::endpoint_via_nic;
use crate::clock::ClockTable;
use crate::core::{Out, ShardCore};
use crate::report::{lateness_histogram, SubscriberShardReport};
use crate::shared::Shared;
use crate::snail::SharedThreshold;
use crate::{GapPolicy, SnailMode, SubscriberError, SubscriberShardConfig};
use tickbox_units::format_duration;

/// Records taken off the socket before a burst ends (parcels handed over, counters published, clock read again).
pub(crate) const BURST_RECORDS: u64 = 256;

/// How a shard reaches the workers (built by the owner; the zmq variant's sockets are bound by the shard).
pub(crate) enum HandoffPlan {
    /// Parcels over bounded channels.
    Ring {
        senders: Vec<crossbeam_channel::Sender<Parcel>>,
        recycler: Recycler,
    },
    /// One PUSH bound at each endpoint, high-water mark `hwm`.
    Zmq { endpoints: Vec<String>, hwm: i32 },
}

pub(crate) struct ShardSettings {
    pub(crate) index: usize,
    pub(crate) shard: SubscriberShardConfig,
    /// One queue per worker (by_topic) or one shared queue (round_robin).
    pub(crate) handoff: Option<HandoffPlan>,
    pub(crate) topics: Vec<String>,
    pub(crate) gaps: bool,
    pub(crate) gap_policy: GapPolicy,
    pub(crate) threshold: SharedThreshold,
    pub(crate) snail_mode: SnailMode,
    pub(crate) clocks: Arc<ClockTable>,
    pub(crate) dispatch: Dispatch,
    pub(crate) workers: usize,
    pub(crate) rcv_hwm: i32,
    /// The subscriber's socket profile with this shard's `io_thread` folded in as its affinity.
    pub(crate) profile: tickbox_zmqx::profile::SocketProfile,
    pub(crate) poll_ms: i64,
    /// Set by the worker pool when a worker panics: its queue may never drain again, so the shard stops.
    pub(crate) workers_failed: Arc<AtomicBool>,
}

pub(crate) type Ready = mpsc::Sender<Result<usize, SubscriberError>>;

fn open_shard_socket(
    ctx: &zmq::Context,
    s: &ShardSettings,
) -> Result<zmq::Socket, SubscriberError> {
    let shard = s.index;
    let zerr = |what| {
        move |source| SubscriberError::Zmq {
            shard,
            what,
            source,
        }
    };
    let sub = ctx.socket(zmq::SUB).map_err(zerr("create SUB"))?;
    sub.set_linger(0).map_err(zerr("set linger"))?;
    sub.set_rcvhwm(s.rcv_hwm).map_err(zerr("set rcvhwm"))?;
    tickbox_zmqx::profile::apply(&sub, &s.profile).map_err(zerr("apply socket profile"))?;
    if s.topics.is_empty() {
        // Redundant for matching (the empty prefix takes everything) but tells a publisher that this reader
        // unpacks batch frames, so it may send them. Sent before "", which is what a publisher counts as a
        // subscriber: by the time it sees this reader, it already knows the reader takes batches.
        sub.set_subscribe(BATCH_TOPIC.as_bytes())
            .map_err(zerr("subscribe"))?;
        sub.set_subscribe(b"").map_err(zerr("subscribe"))?;
    } else {
        for topic in &s.topics {
            sub.set_subscribe(topic.as_bytes())
                .map_err(zerr("subscribe"))?;
        }
        // Heartbeats tell silence from death, whatever the data filter.
        if !s.topics.iter().any(|t| "H.".starts_with(t.as_str())) {
            sub.set_subscribe(b"H.").map_err(zerr("subscribe"))?;
        }
    }
    for endpoint in &s.shard.connect {
        let target = match &s.shard.nic {
            Some(nic) => endpoint_via_nic(endpoint, nic)?,
            None => endpoint.clone(),
        };
        sub.connect(&target)
            .map_err(|source| SubscriberError::Connect {
                shard,
                endpoint: target.clone(),
                source,
            })?;
    }
    Ok(sub)
}

/// Binds the zmq hand-off's PUSH sockets (before the workers connect).
fn open_pushes(
    ctx: &zmq::Context,
    index: usize,
    endpoints: &[String],
    hwm: i32,
) -> Result<Vec<zmq::Socket>, SubscriberError> {
    let zerr = |what| {
        move |source| SubscriberError::Zmq {
            shard: index,
            what,
            source,
        }
    };
    let mut pushes = Vec::with_capacity(endpoints.len());
    for endpoint in endpoints {
        let push = ctx.socket(zmq::PUSH).map_err(zerr("create PUSH"))?;
        // Closed only once the workers have taken everything (see `run_shard`), so nothing is left to linger.
        push.set_linger(0).map_err(zerr("set linger"))?;
        push.set_sndhwm(hwm).map_err(zerr("set sndhwm"))?;
        push.bind(endpoint).map_err(zerr("bind hand-off"))?;
        pushes.push(push);
    }
    Ok(pushes)
}

/// Logs at most once a second, counting what it held back.
pub(crate) struct RateLimited {
    next_ns: u64,
    suppressed: u64,
}

impl RateLimited {
    pub(crate) fn new() -> Self {
        RateLimited {
            next_ns: 0,
            suppressed: 0,
        }
    }
    /// `Some(suppressed since last time)` when a line may be written now.
    pub(crate) fn allow(&mut self, now_ns: u64) -> Option<u64> {
        if now_ns >= self.next_ns {
            self.next_ns = now_ns + 1_000_000_000;
            Some(std::mem::take(&mut self.suppressed))
        } else {
            self.suppressed += 1;
            None
        }
    }
}

/// An empty report for shard `index` of `s`.
pub(crate) fn empty_report(s: &ShardSettings) -> SubscriberShardReport {
    SubscriberShardReport {
        index: s.index,
        endpoints: s.shard.connect.clone(),
        received: 0,
        batches: 0,
        batch_malformed: 0,
        handoff_dropped: 0,
        forwarded: 0,
        malformed: 0,
        cached: 0,
        gap_notices: 0,
        late: 0,
        gaps: 0,
        missing: 0,
        restarts: 0,
        publishers: 0,
        sequence: SequenceTotals::default(),
        ledgers: Vec::new(),
        forwarded_per_worker: vec![0; s.workers.max(1)],
        lateness: lateness_histogram(),
    }
}

pub(crate) fn run_shard(
    ctx: zmq::Context,
    mut s: ShardSettings,
    shared: Arc<Shared>,
    ready: Ready,
) -> SubscriberShardReport {
    let index = s.index;
    tickbox_zmqx::pin_if_configured(s.shard.core, &format!("shard {index}"));
    let report = empty_report(&s);
    let opened = open_shard_socket(&ctx, &s).and_then(|sub| {
        let out = match s.handoff.take() {
            Some(HandoffPlan::Ring { senders, recycler }) => Out::ring(senders, recycler),
            Some(HandoffPlan::Zmq { endpoints, hwm }) => Out::Zmq {
                pushes: open_pushes(&ctx, index, &endpoints, hwm)?,
            },
            None => return Err(SubscriberError::Config("shard without a hand-off".into())),
        };
        Ok((sub, out))
    });
    let (sub, out) = match opened {
        Ok(opened) => {
            let _ = ready.send(Ok(index));
            opened
        }
        Err(err) => {
            let _ = ready.send(Err(err));
            shared.shards_done.fetch_add(1, Ordering::AcqRel);
            return report;
        }
    };
    drop(ready);
    while !shared.go.load(Ordering::Acquire) && !shared.stop.load(Ordering::Acquire) {
        std::thread::sleep(Duration::from_millis(1));
    }
    let mut core = ShardCore::new(&s, &shared, report, out);
    receive_loop(&s, &shared, &sub, &mut core);
    let (report, out) = core.finish();
    shared.shards_done.fetch_add(1, Ordering::AcqRel);
    // Closing a PUSH with linger 0 would drop what the workers have not taken yet: wait for the release. (The
    // ring's senders may go at once: their parcels stay queued for the workers.)
    if matches!(out, Out::Ring { .. }) {
        drop(out);
    } else {
        while !shared.release.load(Ordering::Acquire) {
            std::thread::sleep(Duration::from_millis(1));
        }
        drop(out);
    }
    drop(sub);
    report
}

/// Rate-limited logs of the sequence events that are counted, not fatal.
pub(crate) struct SequenceLogs {
    gap: RateLimited,
    recorded: RateLimited,
    restart: RateLimited,
    duplicate: RateLimited,
    reordered: RateLimited,
    anomaly: RateLimited,
    untracked: RateLimited,
}

impl SequenceLogs {
    pub(crate) fn new() -> Self {
        SequenceLogs {
            gap: RateLimited::new(),
            recorded: RateLimited::new(),
            restart: RateLimited::new(),
            duplicate: RateLimited::new(),
            reordered: RateLimited::new(),
            anomaly: RateLimited::new(),
            untracked: RateLimited::new(),
        }
    }
}

/// Logs one non-fatal sequence event (at most one line per kind of event per second).
pub(crate) fn log_sequence_event(
    shard: usize,
    event: &SequenceEvent,
    logs: &mut SequenceLogs,
    now: u64,
) {
    match *event {
        SequenceEvent::InOrder | SequenceEvent::Exempt => {}
        SequenceEvent::First {
            publisher,
            session,
            sequence,
        } => tracing::debug!(
            shard,
            publisher,
            session,
            sequence,
            "first message from publisher"
        ),
        SequenceEvent::Gap {
            publisher,
            first_missing,
            last_missing,
            ..
        } => {
            if let Some(suppressed) = logs.gap.allow(now) {
                tracing::warn!(
                    shard,
                    publisher,
                    first_missing,
                    last_missing,
                    suppressed,
                    "sequence gap: messages lost before this subscriber"
                );
            }
        }
        SequenceEvent::RecordedGap {
            publisher,
            first_missing,
            last_missing,
            ..
        } => {
            if let Some(suppressed) = logs.recorded.allow(now) {
                tracing::info!(
                    shard,
                    publisher,
                    first_missing,
                    last_missing,
                    suppressed,
                    "recorded gap: the journal this stream is replayed from lacks these sequences"
                );
            }
        }
        SequenceEvent::Restart {
            publisher,
            previous_session,
            previous,
            session,
            sequence,
        } => {
            if let Some(suppressed) = logs.restart.allow(now) {
                tracing::info!(
                    shard,
                    publisher,
                    previous_session,
                    previous,
                    session,
                    sequence,
                    suppressed,
                    "publisher restarted; counting starts again"
                );
            }
        }
        SequenceEvent::Duplicate {
            publisher,
            sequence,
        } => {
            if let Some(suppressed) = logs.duplicate.allow(now) {
                tracing::warn!(shard, publisher, sequence, suppressed, "duplicate sequence");
            }
        }
        SequenceEvent::Reordered {
            publisher,
            sequence,
        } => {
            if let Some(suppressed) = logs.reordered.allow(now) {
                tracing::info!(
                    shard,
                    publisher,
                    sequence,
                    suppressed,
                    "late arrival inside an earlier gap: no longer missing"
                );
            }
        }
        SequenceEvent::Anomaly {
            publisher,
            last,
            sequence,
        } => {
            if let Some(suppressed) = logs.anomaly.allow(now) {
                tracing::warn!(
                    shard,
                    publisher,
                    last,
                    sequence,
                    suppressed,
                    "implausible sequence jump (forged or corrupt header): counted as an anomaly, ignored"
                );
            }
        }
        SequenceEvent::Untracked { publisher } => {
            if let Some(suppressed) = logs.untracked.allow(now) {
                tracing::warn!(
                    shard,
                    publisher,
                    suppressed,
                    "too many publishers: this one's sequences are not tracked"
                );
            }
        }
    }
}

fn receive_loop(s: &ShardSettings, shared: &Shared, sub: &zmq::Socket, core: &mut ShardCore<'_>) {
    let index = s.index;
    let mut msg = zmq::Message::new();
    loop {
        if shared.stop.load(Ordering::Relaxed)
            || shared.tripped.load(Ordering::Relaxed)
            || s.workers_failed.load(Ordering::Relaxed)
        {
            break;
        }
        match sub.recv(&mut msg, zmq::DONTWAIT) {
            Ok(()) => {}
            Err(zmq::Error::EAGAIN) => {
                let _ = sub.poll(zmq::POLLIN, s.poll_ms);
                continue;
            }
            Err(zmq::Error::EINTR) => continue,
            Err(err) => {
                tracing::error!(shard = index, "receive failed, shard stops: {err}");
                break;
            }
        }
        // One clock read for the whole burst (see the module documentation).
        let now = now_ns();
        let start = core.report.received;
        let mut going = true;
        loop {
            let frame = std::mem::replace(&mut msg, zmq::Message::new());
            if !core.on_message(frame, now) {
                going = false;
                break;
            }
            if core.report.received - start >= BURST_RECORDS {
                break;
            }
            // EAGAIN ends the burst; any other error is seen again by the next burst's receive.
            if sub.recv(&mut msg, zmq::DONTWAIT).is_err() {
                break;
            }
        }
        if !core.end_burst() || !going {
            break;
        }
    }
}

/// A signed duration for logs: `+1.5s` (publisher behind) or `-10s` (ahead).
pub(crate) fn format_signed(ns: i64) -> String {
    let d = format_duration(Duration::from_nanos(ns.unsigned_abs()));
    if ns < 0 {
        format!("-{d}")
    } else {
        format!("+{d}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rate_limited_log_counts_what_it_suppresses() {
        let mut log = RateLimited::new();
        assert_eq!(log.allow(5), Some(0));
        assert_eq!(log.allow(6), None);
        assert_eq!(log.allow(7), None);
        assert_eq!(log.allow(1_000_000_005), Some(2));
    }
}
