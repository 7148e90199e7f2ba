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

use std::sync::atomic::Ordering;
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

use tickbox_lvc::snapshot::{FetchStatus, SnapshotOutcome, SnapshotRequester};

use tickbox_wire::{now_ns, BATCH_TOPIC};

use crate::catch_up_phase::{CatchUpHandle, CatchUpPhase, Decision};
use crate::handoff::HandoffPlan;
use crate::nic::endpoint_via_nic;
use crate::receive_clock::ReceiveClock;
use crate::report::SubscriberShardReport;
use crate::settings::{ShardSettings, BURST_RECORDS};
use crate::shard_core::ShardCore;
use crate::shared::Shared;
use crate::{Framing, SubscriberError};
use tickbox_auth::handshake::HandshakeWatch;

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
    sub.set_rcvhwm(s.receive_hwm).map_err(zerr("set rcvhwm"))?;
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
    // are done, and a refused one is counted and connected again (`tickbox_auth::handshake`).
    let watch = HandshakeWatch::start(
        ctx,
        &sub,
        s.security.public_key(),
        format!("subscriber shard {shard}"),
    )
    .map_err(zerr("monitor"))?;
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

/// Runs shard `s` until stopped, handing what it admits over as `plan` says; with `snapshot`, it also fetches
/// that LVC snapshot once subscribed; with `catch_up`, it holds live records until the history is delivered (see
/// [`crate::catch_up_phase`]).
pub(crate) fn run_shard(
    ctx: zmq::Context,
    s: ShardSettings,
    plan: HandoffPlan,
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
    let mut report = s.empty_report();
    report.core = pinned;
    let opened = open_shard_socket(&ctx, &s).and_then(|sub| Ok((sub, plan.open(&ctx, index)?)));
    let (mut sub, outlet) = match opened {
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
    let mut catch_up = catch_up.map(|handle| {
        CatchUpPhase::new(&ctx, handle, index, s.topics.clone(), s.shard.connect.len())
    });
    let mut core = ShardCore::new(&s, &shared, report, outlet);
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
    let (report, outlet) = core.finish();
    // An inline worker has taken everything already: its outcome goes to the subscriber before the shard counts
    // itself done.
    let outlet = outlet.finish();
    shared.shards_done.fetch_add(1, Ordering::AcqRel);
    // What the workers have not taken yet would be dropped by a close now: wait for the release.
    if outlet.as_ref().is_some_and(|o| o.holds_undelivered()) {
        while !shared.release.load(Ordering::Acquire) {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    drop(outlet);
    drop(sub);
    report
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
    // Reads the SUB's monitor and connects again where a refusal's wait is over: handshakes done go to a phase
    // that waits for them, refusals are counted.
    let look = |watch: &mut HandshakeWatch,
                core: &mut ShardCore<'_>,
                snapshot: &mut Option<SnapshotPhase>,
                catch_up: &mut Option<CatchUpPhase>| {
        let now = Instant::now();
        let found = watch.look(sub, now);
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
            phase.step();
            if !apply(phase, core, shared) {
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
            let more = guide && msg.get_more();
            let ok = if guide && s.framing.reads_as_guide(&msg, more) {
                let frame = std::mem::replace(&mut msg, zmq::Message::new());
                let (body, parts) = recv_guide_rest(sub, more, &mut spare);
                core.on_guide(frame, body, parts, now)
            } else if let Some(phase) = catch_up.as_mut() {
                phase.on_live(std::mem::replace(&mut msg, zmq::Message::new()), now);
                apply(phase, core, shared)
            } else {
                // Taken from `msg` only if the hand-off keeps it; otherwise the next receive reuses it.
                core.on_received(&mut msg, now)
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

/// Carries out what the catch-up decided, in order, asking for the next decision only while the shard goes on.
/// Returns `false` when the shard must stop.
fn apply(phase: &mut CatchUpPhase, core: &mut ShardCore<'_>, shared: &Shared) -> bool {
    while let Some(decision) = phase.next_decision() {
        let going = match decision {
            Decision::Deliver { msg, now } => core.on_message(msg, now),
            Decision::DeliverTail { msg, frame_at, now } => core.on_batch_in(msg, frame_at, now),
            Decision::EndBurst => core.end_burst(),
            Decision::Fail(fatal) => {
                shared.trip(fatal);
                false
            }
        };
        if !going {
            return false;
        }
    }
    true
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
