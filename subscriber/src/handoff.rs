//! The shard → worker hand-off, as one seam: a shard gives every admitted record to its [`Outlet`], which is one of
//! the three ways `handoff` in `[subscriber]` names, each a struct of its own, matched once per call:
//!
//! - [`Ring`] (`ring`): bounded in-process channels of parcels of decoded records (the received frames themselves,
//!   moved or shared; a record a reader only lends is copied), a parcel handed over when full and at each burst's
//!   end;
//! - [`Pushes`] (`zmq`): the Guide's inproc PUSH/PULL, a message per record (the worker decodes it again);
//! - an [`InlineSink`] (`inline`): no hand-off, the shard's own worker called on the shard's thread.
//!
//! A full queue blocks the shard (back-pressure to its SUB, then the publishers): nothing is dropped, except a
//! message a PUSH refuses although it had room (counted as `handoff_dropped`). A waiting hand-off looks at the stop
//! conditions every [`HANDOFF_CHECK`] and gives up once a worker has panicked or the subscriber has tripped
//! ([`Halt`]), so a shard never stays blocked on a queue nobody drains.
//!
//! [`choose_handoff`] resolves `handoff = "auto"` (the default) once, at start; [`handoff_plan`] builds what each
//! shard is given ([`HandoffPlan`]) and what each worker reads ([`Inbox`]).

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tickbox_workers::{Desk, Dispatch, Inbox, Meta, Parcel, Recycler, WorkerPoolConfig};

use crate::{Handoff, SubscriberConfig, SubscriberError};

/// How long a hand-off waits on a full queue before looking at the stop conditions again.
pub(crate) const HANDOFF_CHECK: Duration = Duration::from_millis(50);

/// The hand-off a run uses and why: what `handoff = "auto"` resolved to, or what was asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HandoffChoice {
    /// `ring`, `zmq` or `inline`; never `auto`.
    pub handoff: Handoff,
    /// Why, in words: the shape that allowed or ruled out `inline`, or that it was asked for.
    pub reason: String,
}

/// Resolves `config.handoff` for `workers`. An explicit `ring`, `zmq` or `inline` is kept (an `inline` that the
/// shape cannot run is refused later, at start, as before). `auto` is `inline` whenever a worker of its own per
/// shard gives every record the worker the ring would (so order per symbol and the per-symbol state a worker keeps
/// are the same): one worker per shard, and either one shard (every symbol has the one worker) or `round_robin`
/// (no symbol has a worker of its own); and no `[workers] cores` (they ask for workers on cores apart from the
/// shards), and no catch-up through the first of several shards. Anything else is `ring`.
pub fn choose_handoff(config: &SubscriberConfig, workers: &WorkerPoolConfig) -> HandoffChoice {
    let asked = |handoff: Handoff| HandoffChoice {
        handoff,
        reason: format!("asked for (handoff = {handoff})"),
    };
    let ring = |reason: String| HandoffChoice {
        handoff: Handoff::Ring,
        reason,
    };
    if config.handoff != Handoff::Auto {
        return asked(config.handoff);
    }
    let shards = config.shards.len();
    let count = workers.count_for(shards);
    if count != shards {
        return ring(format!(
            "{count} worker(s) for {shards} shard(s): inline needs one worker per shard"
        ));
    }
    if !workers.cores.is_empty() {
        return ring("[workers] cores places the workers apart from the shards".to_owned());
    }
    if shards > 1 && config.dispatch == Dispatch::ByTopic {
        return ring(
            "by_topic over several shards: a symbol's one worker takes it from every shard"
                .to_owned(),
        );
    }
    if shards > 1 && config.catch_up.is_some() {
        return ring(
            "catch-up takes the history through the first shard to every worker".to_owned(),
        );
    }
    HandoffChoice {
        handoff: Handoff::Inline,
        reason: if shards == 1 {
            "one shard, one worker".to_owned()
        } else {
            "one worker per shard, round_robin".to_owned()
        },
    }
}

/// Where a record's bytes come from, which decides how the hand-off carries them.
pub(crate) enum Bytes<'a> {
    /// A single frame received whole: moved to the worker.
    Message(zmq::Message),
    /// `len` bytes at `start` of a received batch frame: shared with the worker.
    Shared {
        frame: &'a Arc<zmq::Message>,
        start: usize,
        len: usize,
    },
    /// Bytes lent until the next record (a journal reader's, or a received frame an inline worker reads where it
    /// lies): copied by a queue.
    Borrowed(&'a [u8]),
}

impl Bytes<'_> {
    /// The record's bytes, wherever they are.
    #[inline]
    fn as_slice(&self) -> &[u8] {
        match self {
            Bytes::Message(msg) => msg,
            Bytes::Shared { frame, start, len } => &frame[*start..*start + *len],
            Bytes::Borrowed(b) => b,
        }
    }
}

/// A worker run on the shard's thread (`handoff = "inline"`), behind a trait object so the shard stays free of
/// the worker's type; the subscriber collects its outcome once the shard is done with it.
pub(crate) trait InlineSink: Send {
    /// One admitted record (`frame`, header decoded as `meta`), received at `now`.
    fn deliver(&mut self, frame: &[u8], meta: Meta, now: u64);
    /// One Guide message.
    fn deliver_guide(&mut self, topic: &[u8], body: &[u8], now: u64);
    /// The socket ran dry (or a burst ended): the worker flushes.
    fn idle(&mut self);
    /// The shard is done: final flush, outcome handed to the subscriber.
    fn finish(self: Box<Self>);
}

/// The longest a shard's run of a sleeping worker's records may take before the shard stops doing that for a
/// while ([`RunHere`]): about the most a wake-up costs on a machine whose cores are busy (a scheduler's time
/// slice), which is what running them spares. Past it, the shard is doing the worker's work instead of reading its
/// socket and, under `by_topic`, instead of handing the other workers theirs: two workers taking 5 ms a record,
/// fed 300 records a second, found asleep at every record, ran one after the other on the shard's thread, and the
/// records' lateness at the shard reached a p99 of 242-350 ms, against under 2 ms with the pauses. Not less: at
/// 100 µs, a worker that stalled 1 ms in every 1,000 records (`bench latency --handoff ring --stall-every 1000
/// --stall 1ms`) paused the runs often enough that the wake-ups put its p99 at 40k msg/s at 2.5-2.6 ms against
/// 0.9 ms without the pauses.
const RUN_HERE_BUDGET: Duration = Duration::from_millis(2);
/// The pause after a second run in a row over [`RUN_HERE_BUDGET`]; it doubles while runs after a pause are still
/// over budget, up to [`RUN_HERE_MAX_PAUSE`], and a run within budget ends the doubling.
const RUN_HERE_FIRST_PAUSE: Duration = Duration::from_millis(10);
const RUN_HERE_MAX_PAUSE: Duration = Duration::from_secs(1);

/// Whether a shard may run a queue's last records of a burst on its sleeping worker itself now (see [`Desk`]): yes,
/// unless runs took longer than [`RUN_HERE_BUDGET`] and the pause that earned has not passed, so a slow worker's
/// records go to its own thread and the shard goes back to its socket. One slow run alone earns nothing: a shard
/// taken off its core in the middle of a quick run looks just as slow, and on a busy 2-core machine that happened
/// 7-29 times in a 10 s `tickbox demo`; a slow worker is slow every time. The caller reads the clock.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RunHere {
    paused_until: Option<Instant>,
    pause: Duration,
    /// The last run was over budget (and earned no pause).
    slow_once: bool,
}

impl RunHere {
    pub(crate) fn new() -> RunHere {
        RunHere {
            paused_until: None,
            pause: RUN_HERE_FIRST_PAUSE,
            slow_once: false,
        }
    }

    /// Whether a run may start at `now`.
    pub(crate) fn allowed(&self, now: Instant) -> bool {
        self.paused_until.is_none_or(|until| now >= until)
    }

    /// A run that started at `started` ended at `now`; returns whether it earned a pause.
    pub(crate) fn ran(&mut self, started: Instant, now: Instant) -> bool {
        if self
            .paused_until
            .is_some_and(|until| started.saturating_duration_since(until) > self.pause)
        {
            // The last pause ended long before this run: it says nothing about the worker now.
            *self = RunHere::new();
        }
        if now.saturating_duration_since(started) <= RUN_HERE_BUDGET {
            *self = RunHere::new();
            return false;
        }
        if self.paused_until.is_some() {
            // Over budget again after a pause: the worker is still slow.
            self.pause = (self.pause * 2).min(RUN_HERE_MAX_PAUSE);
        } else if !self.slow_once {
            self.slow_once = true;
            return false;
        }
        self.slow_once = false;
        self.paused_until = Some(now + self.pause);
        true
    }
}

/// What a shard's ring ran on sleeping workers itself: records, and the pauses after runs over budget.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct RunCounts {
    pub(crate) records: u64,
    pub(crate) pauses: u64,
}

/// What a waiting hand-off watches: it gives up once a worker has panicked (its queue may never drain again) or
/// the subscriber has tripped.
#[derive(Clone, Copy)]
pub(crate) struct Halt<'a> {
    /// The shard, for the logs.
    pub(crate) shard: usize,
    pub(crate) workers_failed: &'a AtomicBool,
    pub(crate) tripped: &'a AtomicBool,
}

impl Halt<'_> {
    fn due(self) -> bool {
        self.workers_failed.load(Ordering::Acquire) || self.tripped.load(Ordering::Acquire)
    }

    /// Says why the shard stops (a trip was said where it happened).
    fn gave_up(self) {
        if self.workers_failed.load(Ordering::Acquire) {
            tracing::error!(shard = self.shard, "a worker panicked, shard stops");
        } else if !self.tripped.load(Ordering::Acquire) {
            tracing::error!(shard = self.shard, "workers are gone, shard stops");
        }
    }
}

/// What became of one record at the hand-off.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Handed {
    /// Queued, sent, or delivered: the shard goes on.
    Taken,
    /// Refused by a PUSH that had room a moment before (counted as dropped); the shard goes on.
    Refused(zmq::Error),
    /// Taken, but its parcel could not be handed over (the queue's workers are gone or failed): the shard stops.
    TakenLast,
    /// Not taken: the shard stops.
    Stop,
}

/// How a shard reaches the workers, as the owner builds it; the shard opens it on its own thread.
pub(crate) enum HandoffPlan {
    /// Parcels over bounded channels.
    Ring {
        senders: Vec<crossbeam_channel::Sender<Parcel>>,
        recycler: Recycler,
        /// Per queue, the desks of the workers that take from it (see [`Desk`]).
        desks: Vec<Vec<Arc<Desk>>>,
        /// Records a parcel holds before it is handed over.
        parcel_records: usize,
    },
    /// One PUSH bound at each endpoint, high-water mark `hwm`.
    Zmq { endpoints: Vec<String>, hwm: i32 },
    /// The shard's own worker, run on its thread.
    Inline(Box<dyn InlineSink>),
}

impl HandoffPlan {
    /// The outlet of shard `shard`: PUSH sockets are bound here, before the workers connect to them.
    pub(crate) fn open(self, ctx: &zmq::Context, shard: usize) -> Result<Outlet, SubscriberError> {
        Ok(match self {
            HandoffPlan::Ring {
                senders,
                recycler,
                desks,
                parcel_records,
            } => Outlet::Ring(Ring::new(senders, recycler, desks, parcel_records)),
            HandoffPlan::Zmq { endpoints, hwm } => {
                Outlet::Zmq(Pushes::bind(ctx, shard, &endpoints, hwm)?)
            }
            HandoffPlan::Inline(sink) => Outlet::Inline(sink),
        })
    }
}

/// A shard's way to its workers (see the module documentation).
pub(crate) enum Outlet {
    Ring(Ring),
    Zmq(Pushes),
    Inline(Box<dyn InlineSink>),
}

impl Outlet {
    /// Queues: one per worker (`by_topic`), or one the workers share; an inline worker is the one queue.
    pub(crate) fn targets(&self) -> usize {
        match self {
            Outlet::Ring(ring) => ring.senders.len(),
            Outlet::Zmq(pushes) => pushes.sockets.len(),
            Outlet::Inline(_) => 1,
        }
    }

    /// What the shard ran on sleeping workers itself so far (a ring's; nothing for the others).
    pub(crate) fn run_counts(&self) -> RunCounts {
        match self {
            Outlet::Ring(ring) => ring.run_counts,
            Outlet::Zmq(_) | Outlet::Inline(_) => RunCounts::default(),
        }
    }

    /// Whether the one queue is the shard's own worker.
    pub(crate) fn is_inline(&self) -> bool {
        matches!(self, Outlet::Inline(_))
    }

    /// Hands one admitted record (header decoded as `meta`, received at `now`) to queue `target`.
    #[inline]
    pub(crate) fn record(
        &mut self,
        target: usize,
        bytes: Bytes<'_>,
        meta: &Meta,
        now: u64,
        halt: Halt<'_>,
    ) -> Handed {
        match self {
            Outlet::Ring(ring) => ring.record(target, bytes, meta, halt),
            Outlet::Zmq(pushes) => pushes.record(target, bytes, halt),
            Outlet::Inline(sink) => {
                sink.deliver(bytes.as_slice(), *meta, now);
                Handed::Taken
            }
        }
    }

    /// Hands one Guide message `[topic][body]` to queue `target`.
    #[inline]
    pub(crate) fn guide(
        &mut self,
        target: usize,
        topic: zmq::Message,
        body: zmq::Message,
        now: u64,
        halt: Halt<'_>,
    ) -> Handed {
        match self {
            Outlet::Ring(ring) => ring.guide(target, topic, body, halt),
            Outlet::Zmq(pushes) => pushes.guide(target, topic, body, halt),
            Outlet::Inline(sink) => {
                sink.deliver_guide(&topic, &body, now);
                Handed::Taken
            }
        }
    }

    /// A burst ended: every parcel that holds records goes (a ring), the worker flushes (inline). `false`: the
    /// shard stops.
    pub(crate) fn flush(&mut self, halt: Halt<'_>) -> bool {
        match self {
            Outlet::Ring(ring) => ring.flush(halt),
            Outlet::Zmq(_) => true,
            Outlet::Inline(sink) => {
                sink.idle();
                true
            }
        }
    }

    /// The shard is done with its outlet: an inline worker's final flush hands its outcome over (`None`); the
    /// rest is returned, to be kept while the workers may still read from it.
    pub(crate) fn finish(self) -> Option<Outlet> {
        match self {
            Outlet::Inline(sink) => {
                sink.finish();
                None
            }
            other => Some(other),
        }
    }

    /// Whether closing now would drop what the workers have not taken yet (PUSH sockets close with linger 0;
    /// a ring's parcels stay queued after its senders are gone).
    pub(crate) fn holds_undelivered(&self) -> bool {
        matches!(self, Outlet::Zmq(_))
    }
}

/// Parcels over bounded crossbeam channels: one per worker (`by_topic`) or one the workers share.
pub(crate) struct Ring {
    senders: Vec<crossbeam_channel::Sender<Parcel>>,
    recycler: Recycler,
    /// The parcel being filled for each queue.
    pending: Vec<Parcel>,
    /// Per queue, the desks of the workers that take from it: one (`by_topic`), all (`round_robin`'s one queue),
    /// or none (the workers sleep on their queues).
    desks: Vec<Vec<Arc<Desk>>>,
    /// Per queue, whether the shard may run its records on a sleeping worker now.
    run_here: Vec<RunHere>,
    /// Records run on sleeping workers here, and the pauses in that (see [`RunHere`]).
    run_counts: RunCounts,
    /// Where the next look for a sleeping worker starts among a queue's desks. `round_robin`'s workers share one
    /// queue: looked at from the first each time, the first worker asleep took every burst's end and every
    /// wake-up, and on a machine busy enough that all of them slept between bursts one worker took everything.
    /// Turn about instead.
    next_desk: usize,
    /// Records a parcel holds before it is handed over.
    parcel_records: usize,
}

impl Ring {
    /// Parcels of up to `parcel_records` records (at least one). A local replay fills larger ones than a live
    /// shard's [`tickbox_workers::PARCEL_RECORDS`]: each hand-off to a worker that has gone to sleep costs a
    /// wake-up (a system call, and on a virtual machine an interrupt between cores), and a backtest has no latency
    /// to keep short.
    /// `desks`: per queue, the desks of the workers that take from it (empty: none).
    pub(crate) fn new(
        senders: Vec<crossbeam_channel::Sender<Parcel>>,
        recycler: Recycler,
        desks: Vec<Vec<Arc<Desk>>>,
        parcel_records: usize,
    ) -> Ring {
        debug_assert!(desks.is_empty() || desks.len() == senders.len());
        let pending = senders.iter().map(|_| recycler.take()).collect();
        Ring {
            run_here: vec![RunHere::new(); senders.len()],
            run_counts: RunCounts::default(),
            senders,
            recycler,
            pending,
            desks,
            next_desk: 0,
            parcel_records: parcel_records.max(1),
        }
    }

    /// Whether `act` holds for one of `desks`, tried in turn from [`Ring::next_desk`], which moves on a place.
    fn any_desk(next_desk: &mut usize, desks: &[Arc<Desk>], act: impl Fn(&Desk) -> bool) -> bool {
        let start = *next_desk;
        *next_desk = next_desk.wrapping_add(1);
        (0..desks.len()).any(|i| act(&desks[start.wrapping_add(i) % desks.len()]))
    }

    #[inline]
    fn record(&mut self, target: usize, bytes: Bytes<'_>, meta: &Meta, halt: Halt<'_>) -> Handed {
        let parcel = &mut self.pending[target];
        match bytes {
            Bytes::Message(msg) => parcel.push_message(msg, *meta),
            Bytes::Shared { frame, start, len } => parcel.push_shared(frame, start, len, *meta),
            Bytes::Borrowed(b) => parcel.push_copy(b, meta),
        }
        self.taken(target, halt)
    }

    #[inline]
    fn guide(
        &mut self,
        target: usize,
        topic: zmq::Message,
        body: zmq::Message,
        halt: Halt<'_>,
    ) -> Handed {
        self.pending[target].push_guide(topic, body);
        self.taken(target, halt)
    }

    /// A record went into queue `target`'s parcel, which goes once it is full.
    #[inline]
    fn taken(&mut self, target: usize, halt: Halt<'_>) -> Handed {
        if self.pending[target].len() < self.parcel_records || self.send(target, halt) {
            Handed::Taken
        } else {
            Handed::TakenLast
        }
    }

    /// The end of a burst: each queue's parcel is run here if its worker sleeps with nothing queued (see
    /// [`Desk`]: no wake-up, so no free core, is needed), else sent.
    fn flush(&mut self, halt: Halt<'_>) -> bool {
        (0..self.pending.len()).all(|target| {
            self.pending[target].is_empty() || self.run_here(target) || self.send(target, halt)
        })
    }

    /// Runs queue `target`'s parcel on a worker of that queue that sleeps at its desk with nothing queued, unless
    /// such runs have been taking too long ([`RunHere`]).
    fn run_here(&mut self, target: usize) -> bool {
        let Some(desks) = self.desks.get(target) else {
            return false;
        };
        // The clock only where a run may follow: no worker asleep, no run.
        if !desks.iter().any(|desk| desk.is_asleep()) {
            return false;
        }
        let started = Instant::now();
        if !self.run_here[target].allowed(started) {
            return false;
        }
        let (parcel, queue) = (&self.pending[target], &self.senders[target]);
        if !Self::any_desk(&mut self.next_desk, desks, |desk| {
            desk.try_run(parcel, queue)
        }) {
            return false;
        }
        self.run_counts.records += self.pending[target].len() as u64;
        if self.run_here[target].ran(started, Instant::now()) {
            self.run_counts.pauses += 1;
        }
        self.pending[target].clear();
        true
    }

    /// Sends queue `target`'s parcel, waiting while the queue is full (back-pressure), but only while its worker
    /// can still drain it: workers that are gone, a panicked worker or a trip stop the shard instead.
    fn send(&mut self, target: usize, halt: Halt<'_>) -> bool {
        let mut out = std::mem::replace(&mut self.pending[target], self.recycler.take());
        let sender = &self.senders[target];
        // The common case first: room in the queue, no deadline computed (`send_timeout` reads the clock).
        let handed = loop {
            out = match sender.try_send(out) {
                Ok(()) => break true,
                Err(crossbeam_channel::TrySendError::Disconnected(_)) => break false,
                Err(crossbeam_channel::TrySendError::Full(back)) => back,
            };
            match sender.send_timeout(out, HANDOFF_CHECK) {
                Ok(()) => break true,
                Err(crossbeam_channel::SendTimeoutError::Disconnected(_)) => break false,
                Err(crossbeam_channel::SendTimeoutError::Timeout(back)) => {
                    if halt.due() {
                        break false;
                    }
                    out = back;
                }
            }
        };
        if !handed {
            halt.gave_up();
        } else if let Some(desks) = self.desks.get(target) {
            // One parcel: one sleeping worker to wake.
            let _ = Self::any_desk(&mut self.next_desk, desks, Desk::ring);
        }
        handed
    }
}

impl Drop for Ring {
    /// The senders go first, then each sleeping worker is woken to find its queue closed (or still fed by other
    /// shards) rather than at its next poll.
    fn drop(&mut self) {
        self.senders.clear();
        for desk in self.desks.iter().flatten() {
            desk.ring();
        }
    }
}

/// The Guide's PUSH/PULL: one PUSH per worker (`by_topic`) or one the workers share; the worker decodes.
pub(crate) struct Pushes {
    sockets: Vec<zmq::Socket>,
}

impl Pushes {
    /// Binds a PUSH at each of `endpoints` (before the workers connect).
    fn bind(
        ctx: &zmq::Context,
        shard: usize,
        endpoints: &[String],
        hwm: i32,
    ) -> Result<Pushes, SubscriberError> {
        let zerr = |what| {
            move |source| SubscriberError::Zmq {
                shard,
                what,
                source,
            }
        };
        let mut sockets = Vec::with_capacity(endpoints.len());
        for endpoint in endpoints {
            let push = ctx.socket(zmq::PUSH).map_err(zerr("create PUSH"))?;
            // Closed only once the workers have taken everything (see `Outlet::holds_undelivered`), so nothing
            // is left to linger.
            push.set_linger(0).map_err(zerr("set linger"))?;
            push.set_sndhwm(hwm).map_err(zerr("set sndhwm"))?;
            push.bind(endpoint).map_err(zerr("bind hand-off"))?;
            sockets.push(push);
        }
        Ok(Pushes { sockets })
    }

    /// Sends one record as a message of its own (a batched or borrowed record is copied into one), once the
    /// PUSH has room.
    fn record(&mut self, target: usize, bytes: Bytes<'_>, halt: Halt<'_>) -> Handed {
        if !self.wait_for_room(target, halt) {
            return Handed::Stop;
        }
        let msg = match bytes {
            Bytes::Message(msg) => msg,
            other => zmq::Message::from(other.as_slice()),
        };
        match self.sockets[target].send(msg, zmq::DONTWAIT) {
            Ok(()) => Handed::Taken,
            Err(err) => Handed::Refused(err),
        }
    }

    /// A Guide message as one two-part message (libzmq takes a multipart message whole or not at all), refused
    /// at most once.
    fn guide(
        &mut self,
        target: usize,
        topic: zmq::Message,
        body: zmq::Message,
        halt: Halt<'_>,
    ) -> Handed {
        if !self.wait_for_room(target, halt) {
            return Handed::Stop;
        }
        let push = &self.sockets[target];
        let sent = push
            .send(topic, zmq::SNDMORE | zmq::DONTWAIT)
            .and_then(|()| push.send(body, zmq::DONTWAIT));
        match sent {
            Ok(()) => Handed::Taken,
            Err(err) => Handed::Refused(err),
        }
    }

    /// Waits (bounded, re-checking the stop conditions) until PUSH `target` has room; a refused send would
    /// consume the message. `false`: the shard stops.
    fn wait_for_room(&self, target: usize, halt: Halt<'_>) -> bool {
        let push = &self.sockets[target];
        loop {
            match push.get_events() {
                Ok(ev) if ev.contains(zmq::POLLOUT) => return true,
                Ok(_) | Err(zmq::Error::EINTR) => {}
                Err(err) => {
                    tracing::error!(shard = halt.shard, "hand-off socket failed: {err}");
                    return false;
                }
            }
            let _ = push.poll(zmq::POLLOUT, HANDOFF_CHECK.as_millis() as i64);
            if halt.due() {
                halt.gave_up();
                return false;
            }
        }
    }
}

/// Tells apart the inproc endpoints of subscribers started in one process.
static INSTANCE: AtomicUsize = AtomicUsize::new(0);

/// The hand-off of every shard (in config order) and the inbox of every worker.
///
/// `ring`: both ends are in this process, so bounded channels carry parcels of decoded records (the received
/// frames themselves, no copy; measured against inproc PUSH/PULL in benches/handoff.rs). `by_topic` gets one FIFO
/// per worker that every shard feeds, `round_robin` one queue all workers take from. Parcels go when they hold
/// `parcel_records` records ([`tickbox_workers::PARCEL_RECORDS`] for a live shard) and a channel holds
/// `handoff_hwm / parcel_records` of them (at least 4), so a loaded queue holds about `handoff_hwm` records, or
/// four parcels where those are more.
///
/// `zmq`: each shard binds one inproc PUSH per worker (`by_topic`) or one the workers share (`round_robin`), each
/// with `handoff_hwm` as its high-water mark, and the workers connect PULL sockets: the Guide's pattern, for
/// comparison and for code that expects sockets.
///
/// `inline`: nothing here; the subscriber, which owns the workers' type, builds each shard's plan.
pub(crate) fn handoff_plan(
    config: &SubscriberConfig,
    handoff: Handoff,
    workers: usize,
    shard_runs_asleep: bool,
    parcel_records: usize,
) -> (Vec<HandoffPlan>, Vec<Inbox>) {
    let shards = config.shards.len().max(1);
    let hwm = usize::try_from(config.handoff_hwm).unwrap_or(0).max(1);
    match handoff {
        Handoff::Ring => {
            let parcel_records = parcel_records.max(1);
            let depth = (hwm / parcel_records).max(4);
            let recycler = Recycler::new(depth * workers.max(1) + 4 * shards * workers.max(1));
            // One desk per worker, or none when every worker is to be woken.
            let desks: Vec<Arc<Desk>> = if shard_runs_asleep {
                (0..workers).map(|_| Arc::new(Desk::new())).collect()
            } else {
                Vec::new()
            };
            // Each worker's queue, and per queue the desks of the workers that take from it.
            let (senders, receivers, queue_desks): (Vec<_>, Vec<_>, Vec<Vec<Arc<Desk>>>) =
                match config.dispatch {
                    Dispatch::ByTopic => {
                        let (tx, rx) = (0..workers)
                            .map(|_| crossbeam_channel::bounded::<Parcel>(depth))
                            .unzip();
                        (tx, rx, desks.iter().map(|d| vec![Arc::clone(d)]).collect())
                    }
                    Dispatch::RoundRobin => {
                        let (tx, rx) = crossbeam_channel::bounded::<Parcel>(depth * workers.max(1));
                        let shared = if desks.is_empty() {
                            Vec::new()
                        } else {
                            vec![desks.clone()]
                        };
                        (vec![tx], vec![rx; workers], shared)
                    }
                };
            let inboxes = receivers
                .into_iter()
                .enumerate()
                .map(|(w, rx)| Inbox::Parcels {
                    rx,
                    recycler: recycler.clone(),
                    desk: desks.get(w).cloned(),
                })
                .collect();
            // Only the shards hold senders: when they are all gone, the workers see the end.
            let plans = (0..shards)
                .map(|_| HandoffPlan::Ring {
                    senders: senders.clone(),
                    recycler: recycler.clone(),
                    desks: queue_desks.clone(),
                    parcel_records,
                })
                .collect();
            (plans, inboxes)
        }
        // `auto` is resolved before (see `choose_handoff`); read as inline's nothing-here, never reached.
        Handoff::Inline | Handoff::Auto => (Vec::new(), Vec::new()),
        Handoff::Zmq => {
            let tag = format!(
                "{}-{}",
                std::process::id(),
                INSTANCE.fetch_add(1, Ordering::Relaxed)
            );
            let queues = match config.dispatch {
                Dispatch::ByTopic => workers,
                Dispatch::RoundRobin => 1,
            };
            let endpoint = |shard: usize, queue: usize| {
                format!("inproc://tickbox-handoff-{tag}-{shard}-{queue}")
            };
            let plans = (0..shards)
                .map(|shard| HandoffPlan::Zmq {
                    endpoints: (0..queues).map(|q| endpoint(shard, q)).collect(),
                    hwm: config.handoff_hwm.max(1),
                })
                .collect();
            let inboxes = (0..workers)
                .map(|w| {
                    let queue = if queues == 1 { 0 } else { w };
                    Inbox::Endpoints((0..shards).map(|shard| endpoint(shard, queue)).collect())
                })
                .collect();
            (plans, inboxes)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::SubscriberShardConfig;

    fn shape(shards: usize, dispatch: Dispatch) -> SubscriberConfig {
        SubscriberConfig {
            shards: vec![SubscriberShardConfig::default(); shards],
            dispatch,
            ..SubscriberConfig::default()
        }
    }

    fn workers(count: usize) -> WorkerPoolConfig {
        WorkerPoolConfig {
            count: Some(count),
            ..WorkerPoolConfig::default()
        }
    }

    #[test]
    fn auto_is_inline_where_a_worker_per_shard_gives_every_record_the_same_worker() {
        let chosen = |config: &SubscriberConfig, pool: &WorkerPoolConfig| {
            let c = choose_handoff(config, pool);
            (c.handoff, c.reason)
        };
        let by_topic = Dispatch::ByTopic;
        let round_robin = Dispatch::RoundRobin;
        assert_eq!(
            chosen(&shape(1, by_topic), &workers(1)),
            (Handoff::Inline, "one shard, one worker".to_owned())
        );
        assert_eq!(
            chosen(&shape(3, round_robin), &workers(3)),
            (
                Handoff::Inline,
                "one worker per shard, round_robin".to_owned()
            )
        );
        // Workers share a shard: only a queue can spread it.
        assert_eq!(chosen(&shape(1, by_topic), &workers(2)).0, Handoff::Ring);
        assert_eq!(chosen(&shape(2, round_robin), &workers(1)).0, Handoff::Ring);
        // A symbol arriving on two shards must reach its one worker.
        let (handoff, reason) = chosen(&shape(2, by_topic), &workers(2));
        assert_eq!(handoff, Handoff::Ring);
        assert!(reason.contains("by_topic"), "{reason}");
        // Workers asked onto cores of their own.
        let pinned = WorkerPoolConfig {
            cores: vec![1],
            ..workers(1)
        };
        assert_eq!(chosen(&shape(1, by_topic), &pinned).0, Handoff::Ring);
        // A catch-up through the first of several shards.
        let catching_up = SubscriberConfig {
            catch_up: Some("tcp://127.0.0.1:1".to_owned()),
            ..shape(2, round_robin)
        };
        assert_eq!(chosen(&catching_up, &workers(2)).0, Handoff::Ring);
        // Asked for: kept, whatever the shape.
        for asked in [Handoff::Ring, Handoff::Zmq, Handoff::Inline] {
            let config = SubscriberConfig {
                handoff: asked,
                ..shape(1, by_topic)
            };
            assert_eq!(
                chosen(&config, &workers(1)),
                (asked, format!("asked for (handoff = {asked})"))
            );
        }
    }

    #[test]
    fn a_shard_stops_running_a_slow_workers_records_for_a_pause_that_doubles_while_it_stays_slow() {
        let t0 = Instant::now();
        let ms = |n: u64| t0 + Duration::from_millis(n);
        let mut run_here = RunHere::new();
        assert!(run_here.allowed(t0));
        // Quick runs never pause, and one slow run among quick ones neither (a shard taken off its core).
        assert!(!run_here.ran(t0, t0 + RUN_HERE_BUDGET));
        assert!(!run_here.ran(ms(0), ms(5)));
        assert!(!run_here.ran(ms(5), ms(5)));
        assert!(!run_here.ran(ms(5), ms(10)));
        assert!(run_here.allowed(ms(10)));
        // Two slow runs in a row (5 ms each): 10 ms without runs from the second's end.
        assert!(run_here.ran(ms(10), ms(15)));
        assert!(!run_here.allowed(ms(16)));
        assert!(!run_here.allowed(ms(24)));
        assert!(run_here.allowed(ms(25)));
        // Still slow after the pause: 20 ms at once, then 40 ms.
        assert!(run_here.ran(ms(25), ms(30)));
        assert!(!run_here.allowed(ms(49)));
        assert!(run_here.allowed(ms(50)));
        assert!(run_here.ran(ms(50), ms(55)));
        assert!(!run_here.allowed(ms(94)));
        assert!(run_here.allowed(ms(95)));
        // Each slow run at a pause's end doubles it, up to its cap.
        let (mut at, mut pause) = (95, 80);
        for _ in 0..12 {
            assert!(run_here.ran(ms(at), ms(at + 5)));
            at += 5 + pause;
            assert!(!run_here.allowed(ms(at - 1)), "{pause} ms");
            assert!(run_here.allowed(ms(at)), "{pause} ms");
            pause = (pause * 2).min(RUN_HERE_MAX_PAUSE.as_millis() as u64);
        }
        assert_eq!(pause, 1_000);
        // A quick run ends the pauses: it takes two slow runs again, then the pause is 10 ms again.
        assert!(!run_here.ran(ms(at), ms(at)));
        assert!(run_here.allowed(ms(at)));
        assert!(!run_here.ran(ms(at), ms(at + 5)));
        assert!(run_here.ran(ms(at + 5), ms(at + 10)));
        assert!(!run_here.allowed(ms(at + 19)));
        assert!(run_here.allowed(ms(at + 20)));
        // A slow run long after the last pause ended (no run in between) is a first slow run again, not a sign
        // that the worker is still slow.
        assert!(!run_here.ran(ms(at + 1_000), ms(at + 1_005)));
        assert!(run_here.allowed(ms(at + 1_005)));
    }

    #[test]
    fn the_default_worker_count_is_one_per_shard_so_one_shard_runs_inline() {
        let default = WorkerPoolConfig::default();
        assert_eq!(default.count, None);
        assert_eq!(
            choose_handoff(&shape(1, Dispatch::ByTopic), &default).handoff,
            Handoff::Inline
        );
        assert_eq!(
            choose_handoff(&shape(3, Dispatch::RoundRobin), &default).handoff,
            Handoff::Inline
        );
        // by_topic over several shards still needs the ring; the pool is one worker per shard all the same.
        assert_eq!(
            choose_handoff(&shape(3, Dispatch::ByTopic), &default).handoff,
            Handoff::Ring
        );
        assert_eq!(default.count_for(3), 3);
        assert_eq!(workers(2).count_for(3), 2);
    }
}
