//! A late joiner's catch-up (`catch_up` in `[subscriber]`, `subscribe --catch-up`): every shard holds its live
//! records from the start; the first shard, once its SUB's handshakes are done (its subscriptions on their way
//! ahead of anything published later), asks the recorder's history service ([`tickbox_recorder::HistoryClient`])
//! and feeds the history through its own shard path between live bursts; at the history's end every shard crosses
//! the seam ([`CatchUp`]): held records the history already delivered are dropped and counted, the rest go to the
//! workers in arrival order, then the shard runs live.
//!
//! Times: a history record is judged by the snail against its capture time (how late it was when the recorder
//! took it, as `replay --local` judges), a held live record against the time it left this subscriber's socket.
//! Both are handed over re-stamped like a replay's copies ([`Flags::REPLAY`], send time moved by how long the
//! record was held or how long ago it was captured), so the worker's dequeue check measures only the time spent
//! in the worker's queue on top.
//!
//! Order across shards: the first shard's history is in the workers' queues before the end marker is published to
//! the other shards, which release their held records only then; a worker's queue is first in, first out, so a
//! symbol's history reaches its worker before its live records.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::Serialize;
use tickbox_wire::history::{HistoryRequest, ServiceMessage, StartPoint};
use tickbox_wire::{
    batch_records, batch_spans, is_batch, now_ns, stamp_send_time_in_place, write_send_fields_at,
    BatchBuilder, Flags, MessageRef,
};

use tickbox_workers::Record;

use crate::catch_up::{CatchUp, CatchUpReport, CatchUpVerdict, PublisherSession, SeamPosition};
use crate::history_client::{HistoryClient, HistoryOutcome};
use crate::report::{CatchUpFatal, Fatal};

/// Sessions one catch-up judges at most (the table is fed from the network).
const MAX_SESSIONS: usize = 4096;
/// History batches taken between two live bursts: live traffic never waits behind more than this.
const HISTORY_BATCHES_PER_STEP: usize = 8;
/// Held records handed over between two live bursts once the seam is crossed: the socket keeps being read while
/// a large backlog drains, so the live stream is never left to overflow its queues.
const RELEASE_PER_STEP: usize = 2048;
/// The history's credit window: batches on their way at once.
const WINDOW: u32 = 64;
/// Re-asks for a hole between a session's history and its first held live record before going live with it.
const MAX_REASKS: u32 = 3;
/// A batch frame's size for re-stamped copies: room for the largest record a batch can hold.
const COPY_BATCH_BYTES: usize = 128 * 1024;

/// What a catch-up is asked to do.
#[derive(Debug, Clone)]
pub(crate) struct CatchUpPlan {
    pub(crate) endpoint: String,
    pub(crate) start: StartPoint,
    pub(crate) budget_bytes: u64,
    pub(crate) timeout: Duration,
    pub(crate) security: tickbox_auth::Security,
}

/// What a subscriber's catch-up did, for the summary and its `--json`.
#[derive(Debug, Clone, Default, Serialize)]
pub struct CatchUpSummary {
    /// The history service asked.
    pub endpoint: String,
    /// True once every shard crossed the seam and runs live.
    pub live: bool,
    /// How the history ended (`None` while it runs).
    pub outcome: Option<HistoryOutcome>,
    /// Times a hole between history and live was asked for again.
    pub reasks: u32,
    /// History batches received, over every answer.
    pub history_batches: u64,
    /// Messages from the history service that did not decode: skipped and counted, never delivered.
    pub undecodable_messages: u64,
    /// From the history request to its end marker (the last answer's, after any re-ask): the history's own pace.
    pub history_ns: Option<u64>,
    /// From the start of the subscriber until the last shard went live (its held backlog handed over).
    pub took_ns: Option<u64>,
    /// The seam, summed over shards (seam positions and holes of every shard).
    #[serde(flatten)]
    pub seam: CatchUpReport,
}

/// A catch-up's shared state: the plan, the history's end for the other shards, and the results.
#[derive(Debug)]
struct CatchUpState {
    plan: CatchUpPlan,
    started: Instant,
    shards: usize,
    /// Set by the first shard once the history is in the workers' queues: each session's last sequence.
    history_end: Mutex<Option<Vec<(PublisherSession, u64)>>>,
    live_shards: AtomicUsize,
    results: Mutex<CatchUpSummary>,
    per_shard: Mutex<Vec<CatchUpReport>>,
}

/// A handle on a subscriber's catch-up, readable while it runs and after.
#[derive(Debug, Clone)]
pub struct CatchUpHandle {
    state: Arc<CatchUpState>,
}

impl CatchUpHandle {
    pub(crate) fn new(plan: CatchUpPlan, shards: usize) -> Self {
        let endpoint = plan.endpoint.clone();
        CatchUpHandle {
            state: Arc::new(CatchUpState {
                plan,
                started: Instant::now(),
                shards,
                history_end: Mutex::new(None),
                live_shards: AtomicUsize::new(0),
                results: Mutex::new(CatchUpSummary {
                    endpoint,
                    ..CatchUpSummary::default()
                }),
                per_shard: Mutex::new(vec![CatchUpReport::default(); shards]),
            }),
        }
    }

    /// True once every shard runs live.
    pub fn is_live(&self) -> bool {
        self.state.live_shards.load(Ordering::Acquire) >= self.state.shards
    }

    /// What the catch-up did so far.
    pub fn summary(&self) -> CatchUpSummary {
        let mut summary = lock(&self.state.results).clone();
        summary.live = self.is_live();
        let mut seam = CatchUpReport::default();
        for shard in lock(&self.state.per_shard).iter() {
            seam.history_records += shard.history_records;
            seam.history_overlaps += shard.history_overlaps;
            seam.live_records += shard.live_records;
            seam.duplicates_at_seam += shard.duplicates_at_seam;
            seam.peak_held_bytes += shard.peak_held_bytes;
            seam.untracked_records += shard.untracked_records;
            seam.seam.extend(shard.seam.iter().copied());
            seam.holes.extend(shard.holes.iter().copied());
        }
        seam.seam = merge_seams(seam.seam);
        seam.holes.sort_by_key(|h| h.session);
        summary.seam = seam;
        summary
    }
}

/// One seam per session out of every shard's: each shard reports every session the history held, but a
/// publisher's live stream arrives on one shard only, so the others saw no live record of it. The history's end
/// is the furthest any shard reports, the first live record the one the shard that carries it saw.
fn merge_seams(mut seams: Vec<SeamPosition>) -> Vec<SeamPosition> {
    seams.sort_by_key(|p| p.session);
    let mut merged: Vec<SeamPosition> = Vec::with_capacity(seams.len());
    for p in seams {
        match merged.last_mut() {
            Some(m) if m.session == p.session => {
                m.last_history = m.last_history.max(p.last_history);
                m.first_live = match (m.first_live, p.first_live) {
                    (Some(a), Some(b)) => Some(a.min(b)),
                    (a, b) => a.or(b),
                };
            }
            _ => merged.push(p),
        }
    }
    merged
}

impl CatchUpSummary {
    /// One line for the summary table.
    pub fn summary_line(&self) -> String {
        let history = self
            .history_ns
            .map(|ns| {
                format!(
                    " in {}",
                    tickbox_units::format_duration(Duration::from_nanos(ns))
                )
            })
            .unwrap_or_default();
        let took = self
            .took_ns
            .map(|ns| {
                format!(
                    "live after {}",
                    tickbox_units::format_duration(Duration::from_nanos(ns))
                )
            })
            .unwrap_or_else(|| "never went live".to_owned());
        let outcome = match &self.outcome {
            Some(HistoryOutcome::Complete { sessions }) => {
                format!("history complete ({} sessions)", sessions.len())
            }
            Some(HistoryOutcome::Refused { refusal }) => format!("history refused ({refusal:?})"),
            Some(HistoryOutcome::TimedOut) => "history timed out".to_owned(),
            None => "history unfinished".to_owned(),
        };
        let seam: Vec<String> = self
            .seam
            .seam
            .iter()
            .take(4)
            .map(|p| {
                let history = p.last_history.map_or("-".to_owned(), |s| s.to_string());
                let live = p.first_live.map_or("-".to_owned(), |s| s.to_string());
                format!(
                    "publisher {} history ..={history} live {live}..",
                    p.session.publisher
                )
            })
            .collect();
        let more = self.seam.seam.len().saturating_sub(4);
        format!(
            "catch-up from {}: {outcome}, {} history records{history} ({} undecodable messages), {} live, {} duplicates dropped at the seam, {} holes, \
             {} re-asks, peak held {}, {took}; seam: {}{}",
            self.endpoint,
            self.seam.history_records,
            self.undecodable_messages,
            self.seam.live_records,
            self.seam.duplicates_at_seam,
            self.seam.holes.len(),
            self.reasks,
            tickbox_units::format_size_approx(self.seam.peak_held_bytes),
            if seam.is_empty() { "none".to_owned() } else { seam.join(", ") },
            if more > 0 { format!(" and {more} more") } else { String::new() },
        )
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|p| p.into_inner())
}

/// What the catch-up asks of its shard, one decision at a time (see [`CatchUpPhase::next_decision`]).
#[derive(Debug)]
pub(crate) enum Decision {
    /// Judge `msg` and hand it to the workers as a message received at `now` (a held live message, re-stamped by
    /// how long it was held, or a copy of history records).
    Deliver { msg: zmq::Message, now: u64 },
    /// The same for the batch frame that is the tail of `msg` from byte `frame_at` (a history message re-stamped
    /// where it arrived, handed on with no copy).
    DeliverTail {
        msg: zmq::Message,
        frame_at: usize,
        now: u64,
    },
    /// Hand over what the workers' parcels hold: a history step or a release ends here.
    EndBurst,
    /// The catch-up failed: trip the subscriber with this; the shard stops.
    Fail(Fatal),
}

/// Work the phase has taken on and not yet turned into decisions, in order. Each is carried out when the shard
/// asks for its next decision, so nothing is judged, re-stamped or reported past a decision that stopped the
/// shard, just as if the phase had handed each record over itself.
#[derive(Debug)]
enum Job {
    /// A live message taken off the SUB at this time, to judge at the seam.
    Live(zmq::Message, u64),
    /// A history message, to re-stamp and deliver.
    History(zmq::Message),
    /// A history step's deliveries are over.
    EndHistoryStep,
    /// The history ended (after its last batches were delivered), with the client's totals.
    HistoryEnded {
        outcome: HistoryOutcome,
        batches: u64,
        undecodable: u64,
    },
    /// Up to this many more held records to hand over, then the release's burst ends.
    Release(usize),
    /// A release's burst has ended: with the backlog empty, the shard is live.
    Released,
    /// The catch-up failed for this reason.
    Fail(String),
}

/// One shard's side of the catch-up (see the module docs): fed the SUB's live messages and its handshakes, and
/// stepped between live bursts, it decides what goes to the shard's core and when ([`Decision`]); it never calls
/// into the core itself.
pub(crate) struct CatchUpPhase {
    ctx: zmq::Context,
    handle: CatchUpHandle,
    index: usize,
    topics: Vec<String>,
    seam: CatchUp<(zmq::Message, u64)>,
    /// The first shard's history request, once its handshakes are done.
    client: Option<HistoryClient>,
    /// The first shard's SUB handshakes done so far (the shard's watch reports them); the request waits for all.
    handshakes_needed: usize,
    handshakes: usize,
    ask_by: Instant,
    asked: bool,
    reasks: u32,
    /// The origin time of each session's last history record: where a re-ask starts.
    last_origin: HashMap<PublisherSession, u64>,
    copy: BatchBuilder,
    /// When the first shard asked for the history.
    asked_at: Option<Instant>,
    /// Held records already judged at the seam, handed over a step at a time; live arrivals queue behind them
    /// until it is empty (order), and the shard reports itself live only then.
    backlog: VecDeque<CatchUpVerdict<(zmq::Message, u64)>>,
    backlog_bytes: u64,
    /// After the seam: live records are still judged until this time, for copies the history also delivered
    /// that were still on their way to this socket.
    judge_until: Option<Instant>,
    /// What was taken on and not yet decided (see [`Job`]); empty whenever the shard is not asking.
    jobs: VecDeque<Job>,
}

impl CatchUpPhase {
    pub(crate) fn new(
        ctx: &zmq::Context,
        handle: CatchUpHandle,
        index: usize,
        topics: Vec<String>,
        handshakes_needed: usize,
    ) -> Self {
        let budget = handle.state.plan.budget_bytes;
        let ask_by = Instant::now() + handle.state.plan.timeout;
        CatchUpPhase {
            ctx: ctx.clone(),
            handle,
            index,
            topics,
            seam: CatchUp::new(budget, MAX_SESSIONS),
            client: None,
            handshakes_needed,
            handshakes: 0,
            ask_by,
            asked: index != 0,
            reasks: 0,
            last_origin: HashMap::new(),
            copy: BatchBuilder::new(COPY_BATCH_BYTES, u16::MAX),
            asked_at: None,
            backlog: VecDeque::new(),
            backlog_bytes: 0,
            judge_until: None,
            jobs: VecDeque::new(),
        }
    }

    /// The socket to poll beside the SUB while catching up.
    pub(crate) fn socket(&self) -> Option<&zmq::Socket> {
        self.client.as_ref().map(|c| c.socket())
    }

    /// Whether the history request still waits for the SUB's handshakes.
    pub(crate) fn awaits_handshakes(&self) -> bool {
        !self.asked
    }

    /// `n` more of the SUB's handshakes are done.
    pub(crate) fn on_handshakes(&mut self, n: usize) {
        self.handshakes += n;
    }

    /// True while live records must go through [`CatchUpPhase::on_live`] rather than straight to the core.
    pub(crate) fn judging(&self) -> bool {
        !self.seam.is_live()
            || !self.backlog.is_empty()
            || self.judge_until.is_some_and(|t| Instant::now() < t)
    }

    /// One live message taken off the SUB at `now`: held, or (after the seam) handed on whole, in part or not at
    /// all, as the next decisions say.
    pub(crate) fn on_live(&mut self, msg: zmq::Message, now: u64) {
        self.jobs.push_back(Job::Live(msg, now));
    }

    /// Advances the catch-up between live bursts: asks for the history once the handshakes are done, takes the
    /// history's next batches, or hands over the next part of the backlog. What it means for the shard comes
    /// out of [`CatchUpPhase::next_decision`].
    pub(crate) fn step(&mut self) {
        if self.seam.is_live() {
            if !self.backlog.is_empty() {
                self.jobs.push_back(Job::Release(RELEASE_PER_STEP));
            } else if self.judge_until.is_some_and(|t| Instant::now() >= t) {
                self.judge_until = None;
            }
            return;
        }
        if !self.asked {
            if self.handshakes < self.handshakes_needed && Instant::now() < self.ask_by {
                return;
            }
            self.asked = true;
            if let Err(reason) = self.ask(self.handle.state.plan.start) {
                self.jobs.push_back(Job::Fail(reason));
                return;
            }
        }
        if let Some(mut client) = self.client.take() {
            let jobs = &mut self.jobs;
            let polled = client.poll(HISTORY_BATCHES_PER_STEP, |msg| {
                jobs.push_back(Job::History(msg));
                true
            });
            self.jobs.push_back(Job::EndHistoryStep);
            match polled {
                Ok(None) => self.client = Some(client),
                Ok(Some(outcome)) => self.jobs.push_back(Job::HistoryEnded {
                    outcome,
                    batches: client.batches(),
                    undecodable: client.undecodable(),
                }),
                Err(error) => self.jobs.push_back(Job::Fail(format!("history: {error}"))),
            }
            return;
        }
        // Not the first shard: wait for the history's end.
        let end = lock(&self.handle.state.history_end).clone();
        if let Some(end) = end {
            self.seam.apply_history_end(end);
            self.go_live();
        }
    }

    /// What the shard does next, or `None` once everything taken on is decided. The shard carries out each
    /// decision before it asks again, and stops asking when one stops it.
    pub(crate) fn next_decision(&mut self) -> Option<Decision> {
        while let Some(job) = self.jobs.pop_front() {
            let decision = match job {
                Job::Live(msg, now) => self.judge_live(msg, now),
                Job::History(msg) => self.deliver_history(msg),
                Job::EndHistoryStep => Some(Decision::EndBurst),
                Job::HistoryEnded {
                    outcome,
                    batches,
                    undecodable,
                } => self.history_ended(outcome, batches, undecodable),
                Job::Release(left) => Some(self.release(left)),
                Job::Released => {
                    if self.backlog.is_empty() {
                        self.went_live();
                    }
                    None
                }
                Job::Fail(reason) => Some(self.fail(reason)),
            };
            if decision.is_some() {
                return decision;
            }
        }
        None
    }

    /// Judges one live message at the seam.
    fn judge_live(&mut self, msg: zmq::Message, now: u64) -> Option<Decision> {
        let span = if is_batch(&msg) {
            batch_span(&msg)
        } else {
            match Record::decode(&msg) {
                Ok(m) if !m.header().flags.contains(Flags::CACHED) => {
                    let h = m.header();
                    Some((session_of(h), h.sequence, h.sequence))
                }
                // A malformed frame is counted by the core; a cached value is exempt from sequences and is
                // applied under the last-value rule whenever it comes.
                _ => None,
            }
        };
        let Some((session, first, last)) = span else {
            if is_batch(&msg) {
                return self.split(msg, now);
            }
            return Some(Decision::Deliver { msg, now });
        };
        let bytes = msg.len() as u64;
        match self
            .seam
            .handle_live(session, first, last, bytes, (msg, now))
        {
            Ok(CatchUpVerdict::Held) | Ok(CatchUpVerdict::Duplicate) => None,
            Ok(verdict) if !self.backlog.is_empty() => {
                // The backlog is still draining: this arrival waits behind it, under the same budget.
                let budget = self.handle.state.plan.budget_bytes;
                if self.backlog_bytes.saturating_add(bytes) > budget {
                    let error = crate::catch_up::CatchUpError::BudgetExceeded {
                        budget_bytes: budget,
                        held_records: self.backlog.len() as u64,
                        record_bytes: bytes,
                    };
                    return Some(self.fail(error.to_string()));
                }
                self.backlog_bytes += bytes;
                self.backlog.push_back(verdict);
                None
            }
            Ok(verdict) => self.hand_over(verdict),
            Err(error) => Some(self.fail(error.to_string())),
        }
    }

    /// A live batch of several sessions (or with cached values): each record judged on its own, in order, ahead
    /// of anything taken on after it.
    fn split(&mut self, msg: zmq::Message, now: u64) -> Option<Decision> {
        let Ok(records) = batch_records(&msg) else {
            return Some(Decision::Deliver { msg, now });
        };
        let singles: Vec<zmq::Message> = records
            .filter_map(Result::ok)
            .map(zmq::Message::from)
            .collect();
        for single in singles.into_iter().rev() {
            self.jobs.push_front(Job::Live(single, now));
        }
        None
    }
    fn after(&mut self, msg: &[u8], end: u64, shift_ns: u64) -> Option<zmq::Message> {
        self.copy.clear();
        for record in batch_records(msg).ok()?.filter_map(Result::ok) {
            let Ok(m) = MessageRef::decode(record) else {
                continue;
            };
            if m.header().sequence <= end {
                continue;
            }
            let send = m.header().send_time_ns.saturating_add(shift_ns);
            if let Some(slot) = self.copy.push_with(record.len()) {
                slot.copy_from_slice(record);
                if shift_ns > 0 {
                    let _ = stamp_send_time_in_place(slot, send, Flags::REPLAY);
                }
            }
        }
        (!self.copy.is_empty()).then(|| zmq::Message::from(self.copy.frame()))
    }

    /// Asks the history service for the history from `start`; the error says why it could not.
    fn ask(&mut self, start: StartPoint) -> Result<(), String> {
        let plan = &self.handle.state.plan;
        let mut prefixes: Vec<Vec<u8>> =
            self.topics.iter().map(|t| t.as_bytes().to_vec()).collect();
        // Gap notices of the journal belong to the history whatever the topics: they are holes the recorder saw.
        if !prefixes.is_empty() {
            prefixes.push(b"G.".to_vec());
        }
        let request = HistoryRequest {
            prefixes,
            start,
            credit: WINDOW,
        };
        match HistoryClient::start(
            &self.ctx,
            &plan.security,
            &plan.endpoint,
            request,
            plan.timeout,
        ) {
            Ok(client) => {
                self.asked_at.get_or_insert_with(Instant::now);
                tracing::info!(shard = self.index, endpoint = %plan.endpoint, ?start, "catch-up: asking for history");
                self.client = Some(client);
                Ok(())
            }
            Err(error) => Err(format!(
                "cannot ask the history service at {}: {error}",
                plan.endpoint
            )),
        }
    }

    /// The history ended, its batches delivered: a complete history is the seam (once any hole is asked for
    /// again), anything else fails the catch-up.
    fn history_ended(
        &mut self,
        outcome: HistoryOutcome,
        batches: u64,
        undecodable: u64,
    ) -> Option<Decision> {
        {
            let mut results = lock(&self.handle.state.results);
            results.outcome = Some(outcome.clone());
            results.history_batches += batches;
            results.undecodable_messages += undecodable;
        }
        let HistoryOutcome::Complete { sessions } = outcome else {
            return Some(self.fail(format!(
                "the history service at {} ended the history: {outcome:?}",
                self.handle.state.plan.endpoint
            )));
        };
        self.seam.apply_history_end(sessions.iter().map(|s| {
            (
                PublisherSession {
                    publisher: s.publisher,
                    session: s.session,
                },
                s.last_sequence,
            )
        }));
        // A session whose history stops short of its first held live record: the recorder was behind this
        // subscriber when it answered. Ask again from that session's last history record.
        let holes = self.seam.holes();
        if !holes.is_empty() && self.reasks < MAX_REASKS {
            let from = holes
                .iter()
                .filter_map(|h| self.last_origin.get(&h.session))
                .min()
                .copied();
            if let Some(from) = from {
                self.reasks += 1;
                lock(&self.handle.state.results).reasks = self.reasks;
                tracing::info!(
                    shard = self.index,
                    holes = holes.len(),
                    "catch-up: the history ended before the live stream began; asking again"
                );
                return self.ask(StartPoint::Time(from)).err().map(|r| self.fail(r));
            }
        }
        let end: Vec<(PublisherSession, u64)> = self
            .seam
            .report()
            .seam
            .iter()
            .filter_map(|p| p.last_history.map(|last| (p.session, last)))
            .collect();
        *lock(&self.handle.state.history_end) = Some(end);
        if let Some(asked) = self.asked_at {
            lock(&self.handle.state.results).history_ns =
                Some(u64::try_from(asked.elapsed().as_nanos()).unwrap_or(u64::MAX));
        }
        self.go_live();
        None
    }

    /// One history batch into the shard's path, re-stamped by its capture times (see the module docs). The
    /// records are re-stamped where they arrived and the message itself goes to the workers; only a batch holding
    /// records an earlier answer already delivered (after a re-ask) is copied, without them.
    fn deliver_history(&mut self, mut msg: zmq::Message) -> Option<Decision> {
        let now = now_ns();
        match self.restamp_history(&mut msg, now) {
            HistoryDelivery::InPlace { frame_at } => {
                Some(Decision::DeliverTail { msg, frame_at, now })
            }
            HistoryDelivery::Copied => Some(Decision::Deliver {
                msg: zmq::Message::from(self.copy.frame()),
                now,
            }),
            HistoryDelivery::Nothing => None,
        }
    }

    /// Judges a history message's records against the seam and re-stamps them (see
    /// [`CatchUpPhase::deliver_history`]), in `msg` itself or, when it holds records an earlier answer delivered,
    /// in a copy without them.
    fn restamp_history(&mut self, msg: &mut [u8], now: u64) -> HistoryDelivery {
        // The client hands over only messages that decode as a batch; the frame is the message's tail, after the
        // capture times.
        let (frame_at, count) = match ServiceMessage::decode(msg) {
            Ok(ServiceMessage::Batch(batch)) => (
                batch.frame().as_ptr() as usize - msg.as_ptr() as usize,
                batch.len(),
            ),
            _ => return HistoryDelivery::Nothing,
        };
        let (head, frame) = msg.split_at_mut(frame_at);
        let captures = &head[frame_at - 8 * count..];
        let capture_ns = |i: usize| {
            captures
                .get(i * 8..i * 8 + 8)
                .and_then(|b| b.try_into().ok())
                .map(u64::from_le_bytes)
        };
        let Ok(mut spans) = batch_spans(frame) else {
            return HistoryDelivery::Nothing;
        };
        // Consecutive records of one session are a run: the seam's table is read once at its start and written
        // once at its end, not once per record.
        let mut run: Option<HistoryRun> = None;
        let mut overlaps = 0;
        // Set at the first record an earlier answer delivered: from then on records go into `self.copy`.
        let mut copying = false;
        let mut i = 0;
        while let Some(span) = spans.next_in(frame) {
            let index = i;
            i += 1;
            // A record that does not frame or decode stays in the batch: the core counts it as malformed.
            let Ok(span) = span else {
                continue;
            };
            // Read as the core reads it (no UTF-8 check of the topic, which the core leaves to the workers).
            let Ok(m) = Record::decode(&frame[span.clone()]) else {
                if copying {
                    self.copy.try_push(&frame[span]);
                }
                continue;
            };
            let header = *m.header();
            let header_at = m.topic_bytes().len() + 1;
            let session = session_of(&header);
            if run.as_ref().is_none_or(|r| r.session != session) {
                if let Some(done) = run.take() {
                    self.end_run(done);
                }
                run = Some(HistoryRun {
                    session,
                    last: self.seam.last_history(session),
                    count: 0,
                    origin_ns: 0,
                });
            }
            let current = run.as_mut().expect("a run was started above");
            if current.last.is_some_and(|last| header.sequence <= last) {
                overlaps += 1;
                if !copying {
                    copying = true;
                    self.copy.clear();
                    copy_records_before(frame, span.start, &mut self.copy);
                }
                continue;
            }
            current.last = Some(header.sequence);
            current.count += 1;
            current.origin_ns = header.origin_time_ns;
            let capture = capture_ns(index).unwrap_or(now);
            let lateness_at_capture = capture.saturating_sub(header.send_time_ns);
            let restamped = tickbox_wire::Header {
                send_time_ns: now.saturating_sub(lateness_at_capture),
                flags: header.flags.with(Flags::REPLAY),
                ..header
            };
            if copying {
                if let Some(slot) = self.copy.push_with(span.len()) {
                    slot.copy_from_slice(&frame[span]);
                    write_send_fields_at(slot, header_at, &restamped);
                }
            } else {
                write_send_fields_at(&mut frame[span], header_at, &restamped);
            }
        }
        if let Some(done) = run.take() {
            self.end_run(done);
        }
        self.seam.count_history_overlaps(overlaps);
        if !copying {
            HistoryDelivery::InPlace { frame_at }
        } else if self.copy.is_empty() {
            HistoryDelivery::Nothing
        } else {
            HistoryDelivery::Copied
        }
    }

    /// Records a finished run of one session's history records with the seam and the re-ask point.
    fn end_run(&mut self, run: HistoryRun) {
        let Some(last) = run.last.filter(|_| run.count > 0) else {
            return;
        };
        self.seam.handle_history_run(run.session, last, run.count);
        if self.last_origin.len() < MAX_SESSIONS || self.last_origin.contains_key(&run.session) {
            self.last_origin.insert(run.session, run.origin_ns);
        }
    }

    /// Crosses the seam: the held records the history lacks become the backlog, handed over a step at a time
    /// (the first step at once).
    fn go_live(&mut self) {
        self.backlog = self.seam.go_live().into();
        self.backlog_bytes = self.backlog.iter().map(held_bytes).sum();
        lock(&self.handle.state.per_shard)[self.index] = self.seam.report();
        self.jobs.push_front(Job::Release(RELEASE_PER_STEP));
    }

    /// Hands over the next backlog record (`left` more in this step), or ends the step's burst once the backlog
    /// is empty or the step has handed over its share; once the backlog is empty the shard is live.
    fn release(&mut self, mut left: usize) -> Decision {
        while left > 0 {
            let Some(verdict) = self.backlog.pop_front() else {
                break;
            };
            left -= 1;
            self.backlog_bytes = self.backlog_bytes.saturating_sub(held_bytes(&verdict));
            if let Some(decision) = self.hand_over(verdict) {
                self.jobs.push_front(Job::Release(left));
                return decision;
            }
        }
        self.jobs.push_front(Job::Released);
        Decision::EndBurst
    }

    /// One judged live message, re-stamped by how long it was held.
    fn hand_over(&mut self, verdict: CatchUpVerdict<(zmq::Message, u64)>) -> Option<Decision> {
        let now = now_ns();
        match verdict {
            CatchUpVerdict::Deliver((mut msg, received)) => {
                restamp_held(&mut msg, now.saturating_sub(received));
                Some(Decision::Deliver { msg, now })
            }
            CatchUpVerdict::DeliverAfter((msg, received), end) => self
                .after(&msg, end, now.saturating_sub(received))
                .map(|msg| Decision::Deliver { msg, now }),
            CatchUpVerdict::Held | CatchUpVerdict::Duplicate => None,
        }
    }

    /// The backlog is empty: the shard runs live (the last shard to get here completes the catch-up).
    fn went_live(&mut self) {
        self.judge_until = Some(Instant::now() + self.handle.state.plan.timeout);
        lock(&self.handle.state.per_shard)[self.index] = self.seam.report();
        let live = self.handle.state.live_shards.fetch_add(1, Ordering::AcqRel) + 1;
        if live >= self.handle.state.shards {
            let took = self.handle.state.started.elapsed();
            lock(&self.handle.state.results).took_ns =
                Some(u64::try_from(took.as_nanos()).unwrap_or(u64::MAX));
            let summary = self.handle.summary();
            tracing::info!(
                history = summary.seam.history_records,
                live = summary.seam.live_records,
                duplicates = summary.seam.duplicates_at_seam,
                holes = summary.seam.holes.len(),
                ms = took.as_millis() as u64,
                "catch-up complete: live"
            );
        }
    }

    /// The shard is done: its seam report is kept in the handle (so records judged after the seam are counted
    /// too), and a history still on its way is called off.
    pub(crate) fn finish(&mut self) {
        if let Some(client) = self.client.as_mut() {
            client.cancel();
        }
        lock(&self.handle.state.per_shard)[self.index] = self.seam.report();
    }

    /// The catch-up failed: nothing taken on is decided any more, the seam report is kept, and the shard trips
    /// the subscriber.
    fn fail(&mut self, reason: String) -> Decision {
        self.jobs.clear();
        lock(&self.handle.state.per_shard)[self.index] = self.seam.report();
        Decision::Fail(Fatal::CatchUp(CatchUpFatal {
            shard: self.index,
            reason,
        }))
    }
}

/// Where a history message's records went once judged and re-stamped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum HistoryDelivery {
    /// Re-stamped in the message: its batch frame starts at this byte.
    InPlace { frame_at: usize },
    /// Copied, re-stamped, into the phase's copy batch, without the records an earlier answer delivered.
    Copied,
    /// Nothing to deliver.
    Nothing,
}

/// Consecutive history records of one session within a batch.
struct HistoryRun {
    session: PublisherSession,
    /// The session's last history sequence so far (the seam's, then this run's).
    last: Option<u64>,
    /// Records of the run delivered.
    count: u64,
    /// The origin time of the run's last delivered record.
    origin_ns: u64,
}

/// The bytes a judged held message takes.
fn held_bytes(verdict: &CatchUpVerdict<(zmq::Message, u64)>) -> u64 {
    match verdict {
        CatchUpVerdict::Deliver((msg, _)) | CatchUpVerdict::DeliverAfter((msg, _), _) => {
            msg.len() as u64
        }
        CatchUpVerdict::Held | CatchUpVerdict::Duplicate => 0,
    }
}

fn session_of(header: &tickbox_wire::Header) -> PublisherSession {
    PublisherSession {
        publisher: header.publisher_id,
        session: header.session,
    }
}

/// The session and sequence span of a batch whose records are all one session's and none cached (`None`
/// otherwise: the batch is judged record by record).
fn batch_span(frame: &[u8]) -> Option<(PublisherSession, u64, u64)> {
    let mut span: Option<(PublisherSession, u64, u64)> = None;
    for record in batch_records(frame).ok()? {
        let m = Record::decode(record.ok()?).ok()?;
        let header = m.header();
        if header.flags.contains(Flags::CACHED) {
            return None;
        }
        let session = session_of(header);
        span = match span {
            None => Some((session, header.sequence, header.sequence)),
            Some((s, first, last)) if s == session => {
                Some((s, first.min(header.sequence), last.max(header.sequence)))
            }
            Some(_) => return None,
        };
    }
    span
}

/// The records of batch `frame` that start before byte `end`, copied as they are into `copy`.
fn copy_records_before(frame: &[u8], end: usize, copy: &mut BatchBuilder) {
    let Ok(mut spans) = batch_spans(frame) else {
        return;
    };
    while let Some(Ok(span)) = spans.next_in(frame) {
        if span.start >= end {
            break;
        }
        copy.try_push(&frame[span]);
    }
}

/// Moves every record's send time in a held message `shift_ns` later and marks it a replayed copy.
fn restamp_held(msg: &mut zmq::Message, shift_ns: u64) {
    if shift_ns == 0 {
        return;
    }
    let frame: &mut [u8] = msg;
    if !is_batch(frame) {
        restamp_record(frame, shift_ns);
        return;
    }
    let Ok(mut spans) = batch_spans(frame) else {
        return;
    };
    while let Some(Ok(span)) = spans.next_in(frame) {
        restamp_record(&mut frame[span], shift_ns);
    }
}

/// One record's send time moved `shift_ns` later, marked a replayed copy (left alone when it does not decode:
/// the core counts it).
fn restamp_record(record: &mut [u8], shift_ns: u64) {
    let Ok(m) = Record::decode(record) else {
        return;
    };
    let header = *m.header();
    let header_at = m.topic_bytes().len() + 1;
    let restamped = tickbox_wire::Header {
        send_time_ns: header.send_time_ns.saturating_add(shift_ns),
        flags: header.flags.with(Flags::REPLAY),
        ..header
    };
    write_send_fields_at(record, header_at, &restamped);
}

#[cfg(test)]
mod tests {
    use super::*;
    use tickbox_wire::{encode_to_vec, Header, Kind, Quote};

    fn phase() -> CatchUpPhase {
        let plan = CatchUpPlan {
            endpoint: "tcp://127.0.0.1:1".to_owned(),
            start: StartPoint::Start,
            budget_bytes: 1 << 20,
            timeout: Duration::from_secs(1),
            security: tickbox_auth::Security::default(),
        };
        CatchUpPhase::new(
            &zmq::Context::new(),
            CatchUpHandle::new(plan, 1),
            0,
            Vec::new(),
            0,
        )
    }

    /// A history message of publisher 1's quotes `sequences` (session 7), each sent at 1000 + sequence and
    /// captured 4 µs later; `junk` adds a record that does not decode after the first.
    fn history(sequences: std::ops::RangeInclusive<u64>, junk: bool) -> Vec<u8> {
        let mut builder = BatchBuilder::new(COPY_BATCH_BYTES, u16::MAX);
        let mut captures = Vec::new();
        for (i, sequence) in sequences.enumerate() {
            let header = Header::live(Kind::Quote, 1, sequence, 1000 + sequence).with_session(7);
            let frame = encode_to_vec("Q.A", &header, &Quote::default().into()).unwrap();
            assert!(builder.try_push(&frame));
            captures.push(5000 + sequence);
            if junk && i == 0 {
                assert!(builder.try_push(b"Q.A\0junk"));
                captures.push(0);
            }
        }
        let mut message = Vec::new();
        ServiceMessage::encode_batch(&captures, builder.frame(), &mut message);
        message
    }

    /// (sequence, send time, replay flag) of each record that decodes, in order.
    fn records(frame: &[u8]) -> Vec<(u64, u64, bool)> {
        batch_records(frame)
            .unwrap()
            .filter_map(|r| MessageRef::decode(r.unwrap()).ok())
            .map(|m| {
                let h = m.header();
                (h.sequence, h.send_time_ns, h.flags.contains(Flags::REPLAY))
            })
            .collect()
    }

    #[test]
    fn history_is_restamped_in_place_and_an_overlapping_answer_is_copied_without_the_overlap() {
        let mut phase = phase();
        let now = 1_000_000;
        // Captured 4 µs after it was sent: handed over 4 µs late as of now.
        let restamped = now - 4000;
        let session = PublisherSession {
            publisher: 1,
            session: 7,
        };

        let mut first = history(1..=4, true);
        let HistoryDelivery::InPlace { frame_at } = phase.restamp_history(&mut first, now) else {
            panic!("a fresh batch is delivered in place");
        };
        assert_eq!(
            records(&first[frame_at..]),
            (1..=4).map(|s| (s, restamped, true)).collect::<Vec<_>>()
        );
        // The record that does not decode stays for the core to count.
        assert_eq!(batch_records(&first[frame_at..]).unwrap().count(), 5);
        assert_eq!(phase.seam.last_history(session), Some(4));

        // A re-ask's answer starting before the end of the last one: only 5 and 6 go on, in a copy.
        let mut second = history(3..=6, false);
        let original = second.clone();
        assert_eq!(
            phase.restamp_history(&mut second, now),
            HistoryDelivery::Copied
        );
        assert_eq!(
            records(phase.copy.frame()),
            vec![(5, restamped, true), (6, restamped, true)]
        );
        assert_eq!(second, original, "the message itself is left as it came");
        assert_eq!(phase.seam.last_history(session), Some(6));

        // Wholly delivered before: nothing goes on.
        let mut third = history(2..=3, false);
        assert_eq!(
            phase.restamp_history(&mut third, now),
            HistoryDelivery::Nothing
        );
        let report = phase.seam.report();
        assert_eq!((report.history_records, report.history_overlaps), (6, 4));
    }

    #[test]
    fn held_records_are_restamped_later_by_the_time_they_were_held() {
        let mut builder = BatchBuilder::new(COPY_BATCH_BYTES, 16);
        for sequence in 1..=3u64 {
            let header = Header::live(Kind::Quote, 1, sequence, 1000).with_session(7);
            let frame = encode_to_vec("Q.A", &header, &Quote::default().into()).unwrap();
            assert!(builder.try_push(&frame));
        }
        let mut batch = zmq::Message::from(builder.frame());
        restamp_held(&mut batch, 250);
        assert_eq!(
            records(&batch),
            (1..=3).map(|s| (s, 1250, true)).collect::<Vec<_>>()
        );
        let header = Header::live(Kind::Quote, 1, 9, 1000).with_session(7);
        let mut single = zmq::Message::from(
            &encode_to_vec("Q.A", &header, &Quote::default().into()).unwrap()[..],
        );
        restamp_held(&mut single, 250);
        let m = MessageRef::decode(&single).unwrap();
        assert_eq!(m.header().send_time_ns, 1250);
        assert!(m.header().flags.contains(Flags::REPLAY));
    }

    /// The decisions of a shard that is not the first: it holds live records until the first shard publishes the
    /// history's end, then releases what the history lacks, re-stamped, ends the burst, and only then is live.
    /// A shard that stops asking midway (its core stopped it) never counts itself live.
    #[test]
    fn another_shard_holds_then_decides_the_release_and_goes_live_only_when_asked_on() {
        let session = PublisherSession {
            publisher: 1,
            session: 7,
        };
        let live = |sequence: u64| {
            let header = Header::live(Kind::Quote, 1, sequence, 1000).with_session(7);
            zmq::Message::from(
                &encode_to_vec("Q.A", &header, &Quote::default().into()).unwrap()[..],
            )
        };
        let sequence_of = |msg: &zmq::Message| MessageRef::decode(msg).unwrap().header().sequence;
        for stop_after_first in [false, true] {
            let plan = CatchUpPlan {
                endpoint: "tcp://127.0.0.1:1".to_owned(),
                start: StartPoint::Start,
                budget_bytes: 1 << 20,
                timeout: Duration::from_secs(1),
                security: tickbox_auth::Security::default(),
            };
            let handle = CatchUpHandle::new(plan, 2);
            let mut phase =
                CatchUpPhase::new(&zmq::Context::new(), handle.clone(), 1, Vec::new(), 0);
            for sequence in 1..=3 {
                phase.on_live(live(sequence), 5_000 + sequence);
                assert!(phase.next_decision().is_none(), "{sequence} is held");
            }
            phase.step();
            assert!(
                phase.next_decision().is_none(),
                "no history end yet: nothing to do"
            );
            // The first shard's history ended at sequence 1.
            *lock(&handle.state.history_end) = Some(vec![(session, 1)]);
            phase.step();
            let mut decided = Vec::new();
            while let Some(decision) = phase.next_decision() {
                decided.push(match decision {
                    Decision::Deliver { msg, .. } => {
                        let m = MessageRef::decode(&msg).unwrap();
                        assert!(
                            m.header().flags.contains(Flags::REPLAY),
                            "re-stamped as held"
                        );
                        sequence_of(&msg).to_string()
                    }
                    Decision::EndBurst => "end of burst".to_owned(),
                    other => panic!("{other:?}"),
                });
                if stop_after_first {
                    break;
                }
            }
            if stop_after_first {
                assert_eq!(decided, ["2"]);
                assert_eq!(handle.state.live_shards.load(Ordering::Acquire), 0);
            } else {
                assert_eq!(decided, ["2", "3", "end of burst"]);
                assert_eq!(handle.state.live_shards.load(Ordering::Acquire), 1);
                assert!(phase.judging(), "late copies are still judged for a while");
            }
            phase.finish();
            let report = handle.summary().seam;
            assert_eq!(report.duplicates_at_seam, 1, "the history delivered 1");
        }
    }

    #[test]
    fn seams_of_several_shards_are_one_per_session() {
        let a = PublisherSession {
            publisher: 1,
            session: 7,
        };
        let b = PublisherSession {
            publisher: 2,
            session: 8,
        };
        let seam = |session, last_history, first_live| SeamPosition {
            session,
            last_history,
            first_live,
        };
        let merged = merge_seams(vec![
            seam(b, Some(99), None),
            seam(a, Some(10), Some(11)),
            seam(a, Some(10), None),
            seam(b, Some(99), Some(100)),
        ]);
        assert_eq!(
            merged,
            vec![seam(a, Some(10), Some(11)), seam(b, Some(99), Some(100))]
        );
    }
}
