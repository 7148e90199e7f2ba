//! The shard thread: one pinned SUB socket that decodes each frame's header once, runs the snail and the sequence
//! accounting, and hands the frame to its worker's queue.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::Duration;

use tickbox_wire::{
    now_ns, Flags, Header, Kind, MessageRef, SequenceEvent, SequenceTotals, SequenceTracker,
};
use tickbox_workers::{worker_for_topic, Dispatch};

use crate::blackbox::endpoint_via_nic;
use crate::clock::{delay_ns, ClockTable};
use crate::report::{
    lateness_histogram, Fatal, GapFatal, SnailEvent, Stage, SubscriberShardReport,
};
use crate::shared::Shared;
use crate::snail::{lateness_ns, SharedThreshold, SnailVerdict};
use crate::{GapPolicy, SnailMode, SubscriberError, SubscriberShardConfig};
use tickbox_units::format_duration;

pub(crate) struct ShardSettings {
    pub(crate) index: usize,
    pub(crate) shard: SubscriberShardConfig,
    /// One sender per worker (by_topic) or one shared queue (round_robin).
    pub(crate) handoff: Vec<crossbeam_channel::Sender<zmq::Message>>,
    pub(crate) topics: Vec<String>,
    pub(crate) gaps: bool,
    pub(crate) gap_policy: GapPolicy,
    pub(crate) threshold: SharedThreshold,
    pub(crate) snail_mode: SnailMode,
    pub(crate) clocks: Arc<ClockTable>,
    pub(crate) dispatch: Dispatch,
    pub(crate) workers: usize,
    pub(crate) rcv_hwm: i32,
    pub(crate) poll_ms: i64,
    /// Set by the worker pool when a worker panics: its queue may never drain again, so the shard stops.
    pub(crate) workers_failed: Arc<AtomicBool>,
}

/// How long a hand-off waits on a full queue before looking at the stop conditions again.
const HANDOFF_CHECK: Duration = Duration::from_millis(50);

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
    if s.topics.is_empty() {
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

/// Logs at most once a second, counting what it held back.
struct RateLimited {
    next_ns: u64,
    suppressed: u64,
}

impl RateLimited {
    fn new() -> Self {
        RateLimited {
            next_ns: 0,
            suppressed: 0,
        }
    }
    /// `Some(suppressed since last time)` when a line may be written now.
    fn allow(&mut self, now_ns: u64) -> Option<u64> {
        if now_ns >= self.next_ns {
            self.next_ns = now_ns + 1_000_000_000;
            Some(std::mem::take(&mut self.suppressed))
        } else {
            self.suppressed += 1;
            None
        }
    }
}

pub(crate) fn run_shard(
    ctx: zmq::Context,
    s: ShardSettings,
    shared: Arc<Shared>,
    ready: Ready,
) -> SubscriberShardReport {
    let index = s.index;
    tickbox_zmqx::pin_if_configured(s.shard.core, &format!("shard {index}"));
    let mut report = SubscriberShardReport {
        index,
        endpoints: s.shard.connect.clone(),
        received: 0,
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
    };
    let sub = match open_shard_socket(&ctx, &s) {
        Ok(sub) => {
            let _ = ready.send(Ok(index));
            sub
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
    receive_loop(&s, &shared, &sub, &mut report);
    shared.shards_done.fetch_add(1, Ordering::AcqRel);
    // Closing the PUSH with linger 0 would drop what the workers have not taken yet: wait for the release.
    while !shared.release.load(Ordering::Acquire) {
        std::thread::sleep(Duration::from_millis(1));
    }
    drop(sub);
    report
}

/// Rate-limited logs of the sequence events that are counted, not fatal.
struct SequenceLogs {
    gap: RateLimited,
    recorded: RateLimited,
    restart: RateLimited,
    duplicate: RateLimited,
    reordered: RateLimited,
    anomaly: RateLimited,
    untracked: RateLimited,
}

impl SequenceLogs {
    fn new() -> Self {
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
fn log_sequence_event(shard: usize, event: &SequenceEvent, logs: &mut SequenceLogs, now: u64) {
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

fn receive_loop(
    s: &ShardSettings,
    shared: &Shared,
    sub: &zmq::Socket,
    report: &mut SubscriberShardReport,
) {
    let pushes = &s.handoff;
    let index = s.index;
    let live = &shared.live[index];
    let mut tracker = SequenceTracker::new();
    let mut malformed_log = RateLimited::new();
    let mut logs = SequenceLogs::new();
    let by_topic = s.dispatch == Dispatch::ByTopic && pushes.len() > 1;
    let skew_tolerant = s.snail_mode == SnailMode::SkewTolerant;
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
        report.received += 1;
        live.received.store(report.received, Ordering::Relaxed);
        let now = now_ns();
        let view = match MessageRef::decode(&msg) {
            Ok(view) => view,
            Err(err) => {
                report.malformed += 1;
                if let Some(suppressed) = malformed_log.allow(now) {
                    tracing::warn!(
                        shard = index,
                        malformed_total = report.malformed,
                        suppressed,
                        len = msg.len(),
                        "malformed frame dropped: {err}"
                    );
                }
                continue;
            }
        };
        let header: Header = *view.header();
        let notice = header.kind == Kind::Gap;
        // Cached values are old by design; a gap notice's send time says when a journal was replayed, not how
        // late market data is. Neither is timed, nor teaches the clock table anything.
        if header.flags.contains(Flags::CACHED) {
            report.cached += 1;
        } else if notice {
            report.gap_notices += 1;
        } else {
            let (min_delay, warning) = s
                .clocks
                .observe(header.publisher_id, delay_ns(now, header.send_time_ns));
            if let Some(w) = warning {
                tracing::warn!(
                    shard = index,
                    publisher = w.publisher,
                    offset = %format_signed(w.offset_ns),
                    "publisher clock offset beyond clock_skew_warn (minimum observed delay; positive: its clock \
                     is behind ours){}",
                    if skew_tolerant { "" } else { "; snail_mode = \"skew_tolerant\" judges lateness relative to it" }
                );
            }
            let lateness = lateness_ns(
                s.snail_mode,
                now,
                header.send_time_ns,
                if skew_tolerant { min_delay } else { None },
            );
            let snail = s.threshold.snail();
            match snail.judge(lateness) {
                SnailVerdict::OnTime { lateness_ns } => {
                    report.lateness.saturating_record(lateness_ns.max(1));
                }
                SnailVerdict::Exempt => {}
                SnailVerdict::Late { lateness_ns } => {
                    report.late += 1;
                    live.late.store(report.late, Ordering::Relaxed);
                    report.lateness.saturating_record(lateness_ns);
                    shared.trip(Fatal::Snail(SnailEvent {
                        stage: Stage::Shard,
                        index,
                        publisher: header.publisher_id,
                        topic: view.topic().to_owned(),
                        sequence: header.sequence,
                        lateness_ns,
                        threshold_ns: snail.threshold_ns(),
                        send_time_ns: header.send_time_ns,
                        received_ns: now,
                    }));
                    break;
                }
            }
        }
        if s.gaps {
            let event = tracker.on_message(&view);
            if let SequenceEvent::Gap {
                publisher,
                first_missing,
                last_missing,
                ..
            } = event
            {
                report.gaps += 1;
                live.gaps.store(report.gaps, Ordering::Relaxed);
                if s.gap_policy == GapPolicy::Die {
                    shared.trip(Fatal::Gap(GapFatal {
                        shard: index,
                        publisher,
                        topic: view.topic().to_owned(),
                        first_missing,
                        last_missing,
                    }));
                    break;
                }
            }
            log_sequence_event(index, &event, &mut logs, now);
        }
        if notice {
            // Accounted for above; workers get market data only (see `tickbox_workers::Worker`).
            continue;
        }
        let target = if by_topic {
            worker_for_topic(view.topic().as_bytes(), pushes.len())
        } else {
            0
        };
        // Hand the received message itself to a worker: no copy. A full queue blocks (back-pressure), but only
        // while its worker can still drain it: workers that are gone (an abort), a panicked worker or a trip end
        // the shard instead of leaving it blocked for good.
        let mut out = std::mem::replace(&mut msg, zmq::Message::new());
        // The common case first: room in the queue, no deadline computed (`send_timeout` reads the clock).
        let handed = loop {
            out = match pushes[target].try_send(out) {
                Ok(()) => break true,
                Err(crossbeam_channel::TrySendError::Disconnected(_)) => break false,
                Err(crossbeam_channel::TrySendError::Full(back)) => back,
            };
            match pushes[target].send_timeout(out, HANDOFF_CHECK) {
                Ok(()) => break true,
                Err(crossbeam_channel::SendTimeoutError::Disconnected(_)) => break false,
                Err(crossbeam_channel::SendTimeoutError::Timeout(back)) => {
                    if s.workers_failed.load(Ordering::Acquire)
                        || shared.tripped.load(Ordering::Acquire)
                    {
                        break false;
                    }
                    out = back;
                }
            }
        };
        if !handed {
            if s.workers_failed.load(Ordering::Acquire) {
                tracing::error!(shard = index, "a worker panicked, shard stops");
            } else if !shared.tripped.load(Ordering::Acquire) {
                tracing::error!(shard = index, "workers are gone, shard stops");
            }
            break;
        }
        report.forwarded += 1;
        report.forwarded_per_worker[target] += 1;
        live.forwarded.store(report.forwarded, Ordering::Release);
    }
    report.sequence = tracker.totals();
    report.ledgers = tracker.ledgers().copied().collect();
    report.missing = report.sequence.missing;
    report.restarts = report.sequence.restarts;
    report.publishers = tracker.publisher_count();
}

/// A signed duration for logs: `+1.5s` (publisher behind) or `-10s` (ahead).
fn format_signed(ns: i64) -> String {
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
