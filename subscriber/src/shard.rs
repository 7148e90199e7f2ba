//! The shard thread: one pinned SUB socket, read in bursts. A burst is what the socket holds when the shard
//! looks (at most [`BURST_RECORDS`] records): every frame is judged by [`ShardCore`] against the clock read just
//! after that frame was taken off the socket, and at the burst's end the workers' parcels are handed over and the
//! live counters published, once.
//!
//! Precision of the snail: no record is judged against a time read before it was received. A burst can last
//! (a hand-off blocked on a full queue, a long batch), and frames taken off later in it may have been sent after
//! the burst began: judged against the burst's first clock read, they would seem to arrive before they were sent
//! (a negative delay, which skew-tolerant mode would then learn as the publisher's clock offset). A batch frame's
//! records arrived together and share its time. The clock is a [`ReceiveClock`] (the TSC, anchored to the wall
//! clock every millisecond): ~13 ns a frame where the vDSO's `clock_gettime` takes ~50 (`cargo bench -p
//! tickbox-subscriber --bench snail` times both beside a record's path).
//! The dequeue check at the worker reads its own clock, so a backlog behind a slow worker is measured there in
//! full.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

use tickbox_lvc::snapshot::{FetchStatus, SnapshotOutcome, SnapshotRequester};

use tickbox_wire::{now_ns, SequenceEvent, SequenceTotals, BATCH_TOPIC};
use tickbox_workers::{Dispatch, Parcel, Recycler};

use crate::blackbox::endpoint_via_nic;
use crate::catch_up_phase::{CatchUpHandle, CatchUpPhase};
use crate::clock::ClockTable;
use crate::core::{InlineSink, Out, ShardCore};
use crate::handshake::{self, HandshakeWatch};
use crate::receive_clock::ReceiveClock;
use crate::report::{lateness_histogram, SubscriberShardReport};
use crate::shared::Shared;
use crate::snail::SharedThreshold;
use crate::{Framing, GapPolicy, SnailMode, SubscriberError, SubscriberShardConfig};
use tickbox_units::format_duration;

/// Records taken off the socket before a burst ends (parcels handed over, counters published).
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
    /// The shard's own worker, run on its thread.
    Inline(Box<dyn InlineSink>),
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
    /// How received messages are taken apart (tickbox frames, Guide `[topic][body]`, or per message).
    pub(crate) framing: Framing,
    pub(crate) workers: usize,
    pub(crate) rcv_hwm: i32,
    /// The subscriber's socket profile with this shard's `io_thread` folded in as its affinity.
    pub(crate) profile: tickbox_zmqx::profile::SocketProfile,
    /// `[security]`: applied to the SUB before it connects.
    pub(crate) security: tickbox_auth::Security,
    pub(crate) poll_ms: i64,
    /// Set by the worker pool when a worker panics: its queue may never drain again, so the shard stops.
    pub(crate) workers_failed: Arc<AtomicBool>,
}

/// An LVC snapshot requested by a subscriber: where from, and how it ended (shared with the owner).
#[derive(Debug, Clone)]
pub struct LvcSnapshot {
    endpoint: String,
    timeout: Duration,
    security: tickbox_auth::Security,
    outcome: Arc<Mutex<Option<SnapshotOutcome>>>,
}

/// What a subscriber's LVC snapshot did, for its summaries.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct LvcSnapshotReport {
    /// The snapshot endpoint asked.
    pub endpoint: String,
    /// How the reply ended; `None`: the subscriber stopped before it did.
    pub outcome: Option<SnapshotOutcome>,
}

impl LvcSnapshotReport {
    /// Whether every value asked for arrived.
    pub fn is_complete(&self) -> bool {
        self.outcome.is_some_and(|o| o.is_complete())
    }
}

impl LvcSnapshot {
    pub(crate) fn new(
        endpoint: String,
        timeout: Duration,
        security: tickbox_auth::Security,
    ) -> Self {
        Self {
            endpoint,
            timeout,
            security,
            outcome: Arc::new(Mutex::new(None)),
        }
    }

    /// The outcome so far.
    pub fn report(&self) -> LvcSnapshotReport {
        LvcSnapshotReport {
            endpoint: self.endpoint.clone(),
            outcome: *self.outcome.lock().unwrap_or_else(|p| p.into_inner()),
        }
    }
}

/// The shard's side of an LVC snapshot: wait until the SUB's handshakes are done (its subscriptions are then on
/// their way ahead of anything published later), send the request, feed the reply to the shard core between live
/// bursts, and record the outcome.
struct SnapshotPhase {
    snapshot: LvcSnapshot,
    prefixes: Vec<String>,
    /// The SUB's handshakes done so far, as the shard's watch reports them; the request waits for all of them.
    handshakes_needed: usize,
    handshakes: usize,
    wait_until: Instant,
    requester: Option<SnapshotRequester>,
}

/// How often a shard whose SUB runs dry reads its handshake monitor (refusals, redials due).
const LOOK_EVERY: Duration = Duration::from_millis(100);

/// Distinct monitor addresses for several subscribers in one process.
static MONITORS: AtomicU64 = AtomicU64::new(0);

impl SnapshotPhase {
    /// The socket to poll beside the SUB.
    fn socket(&self) -> Option<&zmq::Socket> {
        self.requester.as_ref().map(|r| r.socket())
    }

    /// Whether the request still waits for handshakes.
    fn awaits_handshakes(&self) -> bool {
        self.requester.is_none()
    }

    /// `n` more of the SUB's handshakes are done.
    fn on_handshakes(&mut self, n: usize) {
        self.handshakes += n;
    }

    /// Advances the snapshot; returns `Some(going)` once it is over (`going`: the core wants more input), `None`
    /// while it runs.
    fn step(&mut self, ctx: &zmq::Context, index: usize, core: &mut ShardCore<'_>) -> Option<bool> {
        if self.requester.is_none() {
            let now = Instant::now();
            if self.handshakes < self.handshakes_needed && now < self.wait_until {
                return None;
            }
            if self.handshakes < self.handshakes_needed {
                tracing::warn!(
                    shard = index,
                    handshakes = self.handshakes,
                    endpoints = self.handshakes_needed,
                    "LVC snapshot: not every SUB connection is up yet; asking anyway (values published before                      the connection completes may be missed until their next update)"
                );
            }
            let started = SnapshotRequester::start(
                ctx,
                &self.snapshot.security,
                &self.snapshot.endpoint,
                &self.prefixes,
                self.snapshot.timeout,
            );
            match started {
                Ok(r) => self.requester = Some(r),
                Err(err) => {
                    tracing::error!(shard = index, endpoint = %self.snapshot.endpoint, "LVC snapshot: {err}");
                    self.finish(index, failed_outcome());
                    return Some(true);
                }
            }
        }
        let requester = self.requester.as_mut()?;
        let mut going = true;
        let outcome = requester.poll_reply(BURST_RECORDS as usize, |parts| {
            // The same path as a CACHED frame from the SUB: the snail and the gap detector skip it, workers apply
            // it under the last-value rule.
            let now = now_ns();
            for part in parts {
                if going && !core.on_message(part, now) {
                    going = false;
                }
            }
        });
        if !core.end_burst() {
            going = false;
        }
        match outcome {
            Some(outcome) => {
                self.finish(index, outcome);
                Some(going)
            }
            None if going => None,
            None => Some(false),
        }
    }

    fn finish(&mut self, index: usize, outcome: SnapshotOutcome) {
        self.requester = None;
        *self
            .snapshot
            .outcome
            .lock()
            .unwrap_or_else(|p| p.into_inner()) = Some(outcome);
        if outcome.is_complete() {
            tracing::info!(
                shard = index,
                values = outcome.received,
                ms = outcome.elapsed_ns / 1_000_000,
                "LVC snapshot complete"
            );
        } else {
            tracing::warn!(
                shard = index,
                status = ?outcome.status,
                received = outcome.received,
                sent = ?outcome.sent,
                proxy_missed = outcome.loss.map(|l| l.missed),
                proxy_dropped = outcome.loss.map(|l| l.dropped),
                "LVC snapshot incomplete: the last values of some topics arrive only with their next update"
            );
        }
    }
}

fn failed_outcome() -> SnapshotOutcome {
    SnapshotOutcome {
        status: FetchStatus::Failed,
        received: 0,
        sent: None,
        elapsed_ns: 0,
        loss: None,
    }
}

pub(crate) type Ready = mpsc::Sender<Result<usize, SubscriberError>>;

/// A shard's SUB and the watch on its handshakes.
struct ShardSub {
    socket: zmq::Socket,
    watch: HandshakeWatch,
}

fn open_shard_socket(ctx: &zmq::Context, s: &ShardSettings) -> Result<ShardSub, SubscriberError> {
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
    s.security.client(&sub, "subscriber")?;
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
    // Watched before connecting, so no handshake is missed: the snapshot and the catch-up are asked for once they
    // are done, and a refused one is counted and connected again (see `handshake`).
    let addr = format!(
        "inproc://tickbox-shard-handshakes-{}-{}",
        std::process::id(),
        MONITORS.fetch_add(1, Ordering::Relaxed)
    );
    sub.monitor(&addr, handshake::EVENTS)
        .map_err(zerr("monitor"))?;
    let monitor = ctx.socket(zmq::PAIR).map_err(zerr("monitor socket"))?;
    monitor.set_linger(0).map_err(zerr("set linger"))?;
    monitor.connect(&addr).map_err(zerr("monitor connect"))?;
    let watch = HandshakeWatch::new(monitor, s.security.public_key());
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
    Ok(ShardSub { socket: sub, watch })
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
        nic: s.shard.nic.clone(),
        core: None,
        io_thread: s.shard.io_thread,
        received: 0,
        batches: 0,
        batch_malformed: 0,
        handoff_dropped: 0,
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
        forwarded_per_worker: vec![0; s.workers.max(1)],
        lateness: lateness_histogram(),
    }
}

/// Runs shard `s` until stopped; with `snapshot`, it also fetches that LVC snapshot once subscribed; with
/// `catch_up`, it holds live records until the history is delivered (see [`crate::catch_up_phase`]).
pub(crate) fn run_shard(
    ctx: zmq::Context,
    mut s: ShardSettings,
    shared: Arc<Shared>,
    ready: Ready,
    snapshot: Option<LvcSnapshot>,
    catch_up: Option<CatchUpHandle>,
) -> SubscriberShardReport {
    let index = s.index;
    let pinned = tickbox_zmqx::pin_if_configured(s.shard.core, &format!("shard {index}"));
    shared.live[index]
        .pinned_core
        .store(pinned.map_or(u64::MAX, |c| c as u64), Ordering::Relaxed);
    let mut report = empty_report(&s);
    report.core = pinned;
    let opened = open_shard_socket(&ctx, &s).and_then(|sub| {
        let out = match s.handoff.take() {
            Some(HandoffPlan::Ring { senders, recycler }) => Out::ring(senders, recycler),
            Some(HandoffPlan::Zmq { endpoints, hwm }) => Out::Zmq {
                pushes: open_pushes(&ctx, index, &endpoints, hwm)?,
            },
            Some(HandoffPlan::Inline(sink)) => Out::Inline(sink),
            None => return Err(SubscriberError::Config("shard without a hand-off".into())),
        };
        Ok((sub, out))
    });
    let (mut sub, out) = match opened {
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
    let mut snapshot = snapshot.map(|snapshot| SnapshotPhase {
        wait_until: Instant::now() + snapshot.timeout,
        snapshot,
        prefixes: if s.topics.is_empty() {
            vec![String::new()]
        } else {
            s.topics.clone()
        },
        handshakes_needed: s.shard.connect.len(),
        handshakes: 0,
        requester: None,
    });
    let mut catch_up = catch_up
        .map(|handle| CatchUpPhase::new(handle, index, s.topics.clone(), s.shard.connect.len()));
    let mut core = ShardCore::new(&s, &shared, report, out);
    receive_loop(
        &ctx,
        &s,
        &shared,
        &mut sub,
        &mut core,
        &mut snapshot,
        &mut catch_up,
    );
    if let Some(phase) = catch_up.as_mut() {
        phase.finish();
    }
    let (report, out) = core.finish();
    // An inline worker has taken everything already: its outcome goes to the subscriber before the shard counts
    // itself done.
    let out = match out {
        Out::Inline(sink) => {
            sink.finish();
            None
        }
        other => Some(other),
    };
    shared.shards_done.fetch_add(1, Ordering::AcqRel);
    // Closing a PUSH with linger 0 would drop what the workers have not taken yet: wait for the release. (The
    // ring's senders may go at once: their parcels stay queued for the workers.)
    if matches!(out, Some(Out::Zmq { .. })) {
        while !shared.release.load(Ordering::Acquire) {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    drop(out);
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

fn receive_loop(
    ctx: &zmq::Context,
    s: &ShardSettings,
    shared: &Shared,
    shard_sub: &mut ShardSub,
    core: &mut ShardCore<'_>,
    snapshot: &mut Option<SnapshotPhase>,
    catch_up: &mut Option<CatchUpPhase>,
) {
    let index = s.index;
    let sub = &shard_sub.socket;
    let watch = &mut shard_sub.watch;
    // Reads the SUB's monitor: handshakes done go to a phase that waits for them, refusals are counted and
    // connected again once their wait is over.
    let look = |watch: &mut HandshakeWatch,
                core: &mut ShardCore<'_>,
                snapshot: &mut Option<SnapshotPhase>,
                catch_up: &mut Option<CatchUpPhase>| {
        let now = Instant::now();
        let found = watch.read(index, now, now_ns());
        core.report.handshakes_refused += found.refused;
        if found.succeeded > 0 {
            shared.live[index]
                .handshakes
                .fetch_add(found.succeeded as u64, Ordering::Relaxed);
            if let Some(phase) = snapshot.as_mut() {
                phase.on_handshakes(found.succeeded);
            }
            if let Some(phase) = catch_up.as_mut() {
                phase.on_handshakes(found.succeeded);
            }
        }
        watch.redial(sub, index, now);
    };
    let mut msg = zmq::Message::new();
    // Parts past a Guide message's second, received and dropped (overwritten each time: nothing allocated).
    let mut spare = zmq::Message::new();
    let guide = s.framing != Framing::Tickbox;
    let mut clock = ReceiveClock::new();
    let mut next_look = Instant::now();
    loop {
        if shared.stop.load(Ordering::Relaxed)
            || shared.tripped.load(Ordering::Relaxed)
            || s.workers_failed.load(Ordering::Relaxed)
        {
            break;
        }
        // While a phase waits for handshakes, they are looked at every turn: a busy endpoint of the shard must not
        // keep the request waiting for the idle moments below.
        if snapshot
            .as_ref()
            .is_some_and(SnapshotPhase::awaits_handshakes)
            || catch_up
                .as_ref()
                .is_some_and(CatchUpPhase::awaits_handshakes)
        {
            look(watch, core, snapshot, catch_up);
        }
        // The snapshot advances between live bursts, so live traffic never waits behind it for more than one
        // burst of cached values (and the snail keeps judging live frames on time).
        if let Some(phase) = snapshot.as_mut() {
            match phase.step(ctx, index, core) {
                None => {}
                Some(true) => *snapshot = None,
                Some(false) => break,
            }
        }
        // The catch-up advances between live bursts too: the history never holds live frames on the socket for
        // more than one step, so each is judged on time when it is taken off.
        if let Some(phase) = catch_up.as_mut() {
            if !phase.step(ctx, core, shared) {
                break;
            }
            if !phase.judging() {
                // Its report keeps what it judged after the seam too.
                phase.finish();
                *catch_up = None;
            }
        }
        match sub.recv(&mut msg, zmq::DONTWAIT) {
            Ok(()) => {}
            Err(zmq::Error::EAGAIN) => {
                // Refusals are rare and a redial waits a second anyway: the monitor is read at most every
                // `LOOK_EVERY` when the SUB runs dry, not polled beside it, so an idle wake-up costs what it did.
                // Idle: a metrics scrape waiting for this shard's counts is answered here too.
                core.publish();
                let now = Instant::now();
                if now >= next_look {
                    next_look = now + LOOK_EVERY;
                    look(watch, core, snapshot, catch_up);
                }
                let other = snapshot
                    .as_ref()
                    .and_then(|p| p.socket())
                    .or_else(|| catch_up.as_ref().and_then(|p| p.socket()));
                // A phase waiting for handshakes has its own deadline: wake at least every 10 ms to look at it.
                // A pending redial is made at the first look after it is due, so within `LOOK_EVERY` of it.
                let mut wait_ms = s.poll_ms;
                if snapshot.is_some() || catch_up.is_some() {
                    wait_ms = wait_ms.min(10);
                }
                if watch.next_due().is_some() {
                    wait_ms = wait_ms.min(tickbox_zmqx::socket::poll_ms(LOOK_EVERY));
                }
                match other {
                    Some(other) => {
                        let mut items = [
                            sub.as_poll_item(zmq::POLLIN),
                            other.as_poll_item(zmq::POLLIN),
                        ];
                        let _ = zmq::poll(&mut items, wait_ms);
                    }
                    None => {
                        let _ = sub.poll(zmq::POLLIN, wait_ms);
                    }
                }
                continue;
            }
            Err(zmq::Error::EINTR) => continue,
            Err(err) => {
                tracing::error!(shard = index, "receive failed, shard stops: {err}");
                break;
            }
        }
        let start = core.report.received;
        let mut going = true;
        loop {
            // Read after this frame left the socket, never before (see the module documentation).
            let now = clock.now_ns();
            let frame = std::mem::replace(&mut msg, zmq::Message::new());
            let more = guide && frame.get_more();
            let ok = if guide && s.framing.reads_as_guide(&frame, more) {
                let (body, parts) = recv_guide_rest(sub, more, &mut spare);
                core.on_guide(frame, body, parts, now)
            } else if let Some(phase) = catch_up.as_mut() {
                phase.on_live(frame, now, core, shared)
            } else {
                core.on_message(frame, now)
            };
            if !ok {
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

/// The rest of a message read as the Guide's `[topic][body]` whose first frame was just received (`more`: it
/// has further parts): the second frame, if any, and how many frames the message had. The parts of a multipart
/// message arrive together, so these receives never wait; parts past the second go into `spare`, overwritten.
fn recv_guide_rest(
    sub: &zmq::Socket,
    more: bool,
    spare: &mut zmq::Message,
) -> (Option<zmq::Message>, usize) {
    if !more {
        return (None, 1);
    }
    let mut body = zmq::Message::new();
    if sub.recv(&mut body, 0).is_err() {
        return (None, 1);
    }
    let mut parts = 2;
    let mut more = body.get_more();
    while more && sub.recv(spare, 0).is_ok() {
        parts += 1;
        more = spare.get_more();
    }
    (Some(body), parts)
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
