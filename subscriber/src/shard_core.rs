//! The shard's per-record logic, shared by the socket receive loop ([`crate::shard`]) and the in-process replay
//! ([`crate::local`]) so the two cannot judge a record differently: decode the header once (no UTF-8 check: dispatch
//! hashes bytes), the Suicidal Snail, sequence accounting, per-symbol dispatch, and the hand-off to the workers
//! through the shard's [`Outlet`].
//!
//! Batch frames (`#B`, [`tickbox_wire::batch_records`]) are unpacked here without copying: each record is judged,
//! accounted and dispatched exactly as if it had arrived alone, in batch order, and the parcels of the workers that
//! get records from one batch share the received message. A malformed batch, or a malformed record inside one, is
//! counted (`batch_malformed`) and skipped.
//!
//! Time is read by the caller and passed in: the socket loop reads it after each frame leaves the socket (see
//! [`crate::shard`]), a local replay gives each record its capture time.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use tickbox_wire::{
    batch_records, is_batch, shard_key_of_topic, DecodeError, Flags, Kind, Payload, SequenceEvent,
    SequenceTracker, ShortKeyCache,
};
use tickbox_workers::{worker_for_key, Dispatch, Meta, Record};

use crate::clock::delay_ns;
use crate::handoff::{Bytes, Halt, Handed, Outlet};
use crate::logs::{format_signed, log_sequence_event, RateLimited, SequenceLogs};
use crate::report::{Fatal, GapFatal, SnailEvent, Stage, SubscriberShardReport};
use crate::settings::ShardSettings;
use crate::shared::{ShardSnapshot, Shared};
use crate::snail::{lateness_ns, SnailVerdict};
use crate::{GapPolicy, SnailMode};

/// Entries in a [`WorkerCache`]: a power of two eight times the symbols of a typical feed (a couple of thousand),
/// so few symbols share an entry with another (of the synthetic feed's 2,000, 13 %; with 4,096 places, 43 %, and
/// those evicted each other on every turn), and small enough (384 KiB) to stay in a server core's L2 cache. Measured
/// against 4,096 in a local replay of 2,000 symbols in turn into 4 workers: the shard thread 28.4-30.0 ns a
/// record down to 26.7-26.9; on a recorded day's journal, where a few symbols carry most records, no worse.
const WORKER_CACHE_ENTRIES: usize = 16384;

/// Which worker owns a symbol, remembered in front of [`worker_for_key`]: that rule hashes the key a byte at a
/// time (FNV-1a, then a finaliser; 17-20 ns a record in a shard's profile) and must not change, since it decides
/// which worker a symbol goes to. A hit is the rule's own answer for that exact key; keys longer than
/// [`ShortKeyCache::MAX_KEY`] always ask the rule.
pub(crate) struct WorkerCache {
    cache: ShortKeyCache<u32>,
    workers: usize,
}

impl WorkerCache {
    pub(crate) fn new(workers: usize) -> Self {
        WorkerCache {
            cache: ShortKeyCache::new(WORKER_CACHE_ENTRIES),
            workers,
        }
    }

    /// The worker that owns `topic`'s symbol: `worker_for_topic(topic, workers)`.
    #[inline]
    pub(crate) fn worker_for_topic(&mut self, topic: &[u8]) -> usize {
        let key = shard_key_of_topic(topic);
        if let Some(worker) = self.cache.get(key) {
            return worker as usize;
        }
        let worker = worker_for_key(key, self.workers);
        self.cache.insert(key, worker as u32);
        worker
    }
}

/// What the checks decided for one record.
enum Admit {
    Forward(usize),
    Skip,
    Stop,
}

/// One shard's state and per-record logic (see the module documentation).
pub(crate) struct ShardCore<'s> {
    s: &'s ShardSettings,
    shared: &'s Shared,
    pub(crate) report: SubscriberShardReport,
    tracker: SequenceTracker,
    logs: SequenceLogs,
    malformed_log: RateLimited,
    batch_log: RateLimited,
    drop_log: RateLimited,
    by_topic: bool,
    /// Which worker owns a symbol, remembered (the dispatch rule's answers, see [`WorkerCache`]).
    worker_cache: WorkerCache,
    skew_tolerant: bool,
    outlet: Outlet,
    /// What a hand-off waiting on a full queue watches.
    halt: Halt<'s>,
    /// The worker each queue feeds is this one (an inline shard's own worker, whose index is the shard's), not
    /// the queue's.
    inline_worker: Option<usize>,
    stopped: bool,
}

impl<'s> ShardCore<'s> {
    pub(crate) fn new(
        s: &'s ShardSettings,
        shared: &'s Shared,
        report: SubscriberShardReport,
        outlet: Outlet,
    ) -> Self {
        ShardCore {
            s,
            shared,
            report,
            tracker: SequenceTracker::new(),
            logs: SequenceLogs::new(),
            malformed_log: RateLimited::new(),
            batch_log: RateLimited::new(),
            drop_log: RateLimited::new(),
            by_topic: s.dispatch == Dispatch::ByTopic && outlet.targets() > 1,
            worker_cache: WorkerCache::new(outlet.targets()),
            skew_tolerant: s.snail_mode == SnailMode::SkewTolerant,
            inline_worker: outlet.is_inline().then_some(s.index),
            outlet,
            halt: Halt {
                shard: s.index,
                workers_failed: &s.workers_failed,
                tripped: &shared.tripped,
            },
            stopped: false,
        }
    }

    /// One received message: a single frame or a batch. Returns `false` when the shard must stop.
    #[inline]
    pub(crate) fn on_message(&mut self, mut msg: zmq::Message, now: u64) -> bool {
        self.on_received(&mut msg, now)
    }

    /// [`Self::on_message`] for a message the caller receives into again: it is taken (left empty) only where
    /// the hand-off keeps it (a queue, a batch shared with the workers); an inline worker reads it where it lies,
    /// so the next receive reuses it, as a plain SUB loop does, instead of a fresh message per frame.
    #[inline]
    pub(crate) fn on_received(&mut self, msg: &mut zmq::Message, now: u64) -> bool {
        if is_batch(msg) {
            let frame = Arc::new(std::mem::replace(msg, zmq::Message::new()));
            return self.on_batch(&frame[..], now, Some(&frame));
        }
        self.report.received += 1;
        let (target, meta) = match &Record::decode(msg) {
            Ok(rec) => match self.admit(rec, now) {
                Admit::Forward(t) => (t, *rec.meta()),
                Admit::Skip => return true,
                Admit::Stop => return false,
            },
            Err(err) => {
                if msg.get_more() || looks_like_text(msg) {
                    self.report.guide_like += 1;
                }
                self.malformed(err, msg.len(), now);
                return true;
            }
        };
        if self.inline_worker.is_some() {
            return self.forward(target, Bytes::Borrowed(msg), &meta, now);
        }
        let msg = std::mem::replace(msg, zmq::Message::new());
        self.forward(target, Bytes::Message(msg), &meta, now)
    }

    /// One message read as the Guide's `[topic][body]` (see [`crate::Framing`]): `parts` frames arrived, of which
    /// `topic` and `body` are the first two (`body` is `None` for a single frame). Two frames go to the worker
    /// that owns the topic (the dispatch rule, applied to the topic frame), moved there with no copy; any other
    /// count is malformed. No snail, clock or sequence check: the message has no header. Returns `false` when
    /// the shard must stop.
    #[inline]
    pub(crate) fn on_guide(
        &mut self,
        topic: zmq::Message,
        body: Option<zmq::Message>,
        parts: usize,
        now: u64,
    ) -> bool {
        self.report.received += 1;
        let body = match body {
            Some(body) if parts == 2 => body,
            _ => {
                self.report.guide_malformed += 1;
                self.report.malformed += 1;
                if let Some(suppressed) = self.malformed_log.allow(now) {
                    tracing::warn!(
                        shard = self.s.index,
                        malformed_total = self.report.malformed,
                        suppressed,
                        parts,
                        "malformed Guide message dropped: {parts} frame(s), not [topic][body]"
                    );
                }
                return true;
            }
        };
        self.report.guide += 1;
        let target = if self.by_topic {
            self.worker_cache.worker_for_topic(&topic)
        } else {
            0
        };
        let handed = self.outlet.guide(target, topic, body, now, self.halt);
        self.handed(target, handed, now)
    }

    /// One frame lent by a reader (a journal record): a single frame or a batch, copied to the workers.
    #[inline]
    pub(crate) fn on_bytes(&mut self, frame: &[u8], now: u64) -> bool {
        if is_batch(frame) {
            return self.on_batch(frame, now, None);
        }
        match &Record::decode(frame) {
            Ok(rec) => self.on_decoded(rec, now),
            Err(err) => {
                self.report.received += 1;
                self.malformed(err, frame.len(), now);
                true
            }
        }
    }

    /// One single frame lent by a reader, already decoded by the caller: copied to the workers.
    #[inline]
    pub(crate) fn on_decoded(&mut self, rec: &Record<'_>, now: u64) -> bool {
        self.report.received += 1;
        match self.admit(rec, now) {
            Admit::Forward(t) => self.forward(t, Bytes::Borrowed(rec.frame()), rec.meta(), now),
            Admit::Skip => true,
            Admit::Stop => false,
        }
    }

    /// A batch frame that is the tail of `msg` from byte `frame_at` (a history message: capture times, then the
    /// batch), handed on as [`Self::on_message`] hands a batch: the records stay in `msg`, shared with the
    /// workers, with no copy.
    pub(crate) fn on_batch_in(&mut self, msg: zmq::Message, frame_at: usize, now: u64) -> bool {
        let message = Arc::new(msg);
        let frame = message.get(frame_at..).unwrap_or_default();
        self.on_batch(frame, now, Some(&message))
    }

    /// `frame` is `shared`'s bytes or a tail of them: the records' offsets are taken from `shared`'s start.
    fn on_batch(&mut self, frame: &[u8], now: u64, shared: Option<&Arc<zmq::Message>>) -> bool {
        self.report.batches += 1;
        let records = match batch_records(frame) {
            Ok(records) => records,
            Err(err) => {
                self.batch_malformed(&err, now);
                return true;
            }
        };
        let base = shared.map_or(frame.as_ptr(), |m| m.as_ptr()) as usize;
        for item in records {
            let bytes = match item {
                Ok(bytes) => bytes,
                Err(err) => {
                    // The iterator stops after a damaged record: the rest of the batch cannot be framed.
                    self.batch_malformed(&err, now);
                    continue;
                }
            };
            self.report.received += 1;
            // Matched where it lies rather than moved out, as `LocalSink::push` does: the move copied the record
            // in wide loads over the decoder's narrower stores, which waited for them (a fifth of this function's
            // samples).
            let decoded = Record::decode(bytes);
            let rec = match &decoded {
                Ok(rec) => rec,
                Err(err) => {
                    self.batch_malformed(err, now);
                    continue;
                }
            };
            let target = match self.admit(rec, now) {
                Admit::Forward(t) => t,
                Admit::Skip => continue,
                Admit::Stop => return false,
            };
            let carried = match shared {
                Some(frame) => Bytes::Shared {
                    frame,
                    start: bytes.as_ptr() as usize - base,
                    len: bytes.len(),
                },
                None => Bytes::Borrowed(bytes),
            };
            if !self.forward(target, carried, rec.meta(), now) {
                return false;
            }
        }
        true
    }

    fn malformed(&mut self, err: &DecodeError, len: usize, now: u64) {
        self.report.malformed += 1;
        if let Some(suppressed) = self.malformed_log.allow(now) {
            tracing::warn!(
                shard = self.s.index,
                malformed_total = self.report.malformed,
                suppressed,
                len,
                "malformed frame dropped: {err}"
            );
        }
    }

    fn batch_malformed(&mut self, err: &DecodeError, now: u64) {
        self.report.batch_malformed += 1;
        if let Some(suppressed) = self.batch_log.allow(now) {
            tracing::warn!(
                shard = self.s.index,
                batch_malformed_total = self.report.batch_malformed,
                suppressed,
                "malformed batch or batched record dropped: {err}"
            );
        }
    }

    /// The snail, sequence accounting and dispatch for one decoded record.
    #[inline]
    fn admit(&mut self, rec: &Record<'_>, now: u64) -> Admit {
        let s = self.s;
        let index = s.index;
        // Asked first, though only a forwarded record needs it: the worker cache is larger than a core's L2 cache,
        // and records streaming through that cache push its entries out, so most lookups wait for memory. Asked
        // here, that wait overlaps the clock, snail and sequence checks below instead of following them.
        let target = if self.by_topic {
            self.worker_cache.worker_for_topic(rec.topic_bytes())
        } else {
            0
        };
        // Read in place, a field at a time: the caller has just written this header field by field, and copying
        // it whole loads words that span several of those stores, which the core cannot forward, so each copy
        // waited for the stores to reach the cache (3-4 % of a local replay's samples sat on that load).
        let header = rec.header();
        let notice = header.kind == Kind::Gap;
        // Cached values are old by design; a gap notice's send time says when a journal was replayed, not how
        // late market data is. Neither is timed, nor teaches the clock table anything.
        if header.flags.contains(Flags::CACHED) {
            self.report.cached += 1;
        } else if notice {
            self.report.gap_notices += 1;
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
                    if self.skew_tolerant { "" } else { "; snail_mode = \"skew_tolerant\" judges lateness relative to it" }
                );
            }
            let lateness = lateness_ns(
                s.snail_mode,
                now,
                header.send_time_ns,
                if self.skew_tolerant { min_delay } else { None },
            );
            let snail = s.threshold.snail();
            match snail.judge(lateness) {
                SnailVerdict::OnTime { lateness_ns } => {
                    self.report.lateness.saturating_record(lateness_ns.max(1));
                }
                SnailVerdict::Exempt => {}
                SnailVerdict::Late { lateness_ns } => {
                    self.report.late += 1;
                    self.report.lateness.saturating_record(lateness_ns);
                    self.shared.trip(Fatal::Snail(SnailEvent {
                        stage: Stage::Shard,
                        index,
                        publisher: header.publisher_id,
                        topic: String::from_utf8_lossy(rec.topic_bytes()).into_owned(),
                        sequence: header.sequence,
                        lateness_ns,
                        threshold_ns: snail.threshold_ns(),
                        send_time_ns: header.send_time_ns,
                        received_ns: now,
                    }));
                    self.stopped = true;
                    return Admit::Stop;
                }
            }
        }
        if s.gaps {
            let notice_first = if notice {
                // As the tracker reads a notice: one whose payload does not decode is an anomaly.
                match rec.payload() {
                    Ok(Payload::Gap(n)) => Some(n.first_missing),
                    _ => Some(u64::MAX),
                }
            } else {
                None
            };
            let event = self.tracker.on_header(header, notice_first);
            if let SequenceEvent::Gap {
                publisher,
                first_missing,
                last_missing,
                ..
            } = event
            {
                self.report.gaps += 1;
                if s.gap_policy == GapPolicy::Die {
                    self.shared.trip(Fatal::Gap(GapFatal {
                        shard: index,
                        publisher,
                        topic: String::from_utf8_lossy(rec.topic_bytes()).into_owned(),
                        first_missing,
                        last_missing,
                    }));
                    self.stopped = true;
                    return Admit::Stop;
                }
            }
            if !matches!(event, SequenceEvent::InOrder | SequenceEvent::Exempt) {
                log_sequence_event(index, &event, &mut self.logs, now);
            }
        }
        if notice {
            // Accounted for above; workers get market data only (see `tickbox_workers::Worker`).
            return Admit::Skip;
        }
        Admit::Forward(target)
    }

    /// Hands one admitted record to queue `target`. Returns `false` when the shard must stop.
    #[inline]
    fn forward(&mut self, target: usize, bytes: Bytes<'_>, meta: &Meta, now: u64) -> bool {
        let handed = self.outlet.record(target, bytes, meta, now, self.halt);
        self.handed(target, handed, now)
    }

    /// Counts what the hand-off did with one record for queue `target`. Returns `false` when the shard must stop.
    #[inline]
    fn handed(&mut self, target: usize, handed: Handed, now: u64) -> bool {
        match handed {
            Handed::Stop => {
                self.stopped = true;
                return false;
            }
            Handed::Refused(err) => self.handoff_refused(err, now),
            Handed::Taken | Handed::TakenLast => {}
        }
        self.report.forwarded += 1;
        let worker = self.inline_worker.unwrap_or(target);
        if let Some(n) = self.report.forwarded_per_worker.get_mut(worker) {
            *n += 1;
        }
        if handed == Handed::TakenLast {
            self.stopped = true;
            return false;
        }
        true
    }

    fn handoff_refused(&mut self, err: zmq::Error, now: u64) {
        self.report.handoff_dropped += 1;
        if let Some(suppressed) = self.drop_log.allow(now) {
            tracing::warn!(
                shard = self.s.index,
                dropped_total = self.report.handoff_dropped,
                suppressed,
                "hand-off refused a message: {err}"
            );
        }
    }

    /// Ends a burst: hands over every parcel that holds records and publishes the live counters (one store each
    /// per burst, not per record). Returns `false` when the shard must stop.
    pub(crate) fn end_burst(&mut self) -> bool {
        if !self.outlet.flush(self.halt) {
            self.stopped = true;
        }
        self.note_run_counts();
        self.publish();
        !self.stopped
    }

    /// Copies what the hand-off has run on sleeping workers into the report.
    fn note_run_counts(&mut self) {
        let ran = self.outlet.run_counts();
        self.report.run_by_shard = ran.records;
        self.report.run_by_shard_pauses = ran.pauses;
    }

    /// Stores the running totals where the owner reads them.
    pub(crate) fn publish(&self) {
        let live = &self.shared.live[self.s.index];
        live.received.store(self.report.received, Ordering::Relaxed);
        live.gaps.store(self.report.gaps, Ordering::Relaxed);
        live.late.store(self.report.late, Ordering::Relaxed);
        if live.lateness_wanted.load(Ordering::Relaxed) {
            // Asked for by the owner's reporter (once per its interval), never per record.
            live.lateness_wanted.store(false, Ordering::Relaxed);
            let h = &self.report.lateness;
            let (p50, p99) = if h.is_empty() {
                (0, 0)
            } else {
                (h.value_at_quantile(0.5), h.value_at_quantile(0.99))
            };
            live.lateness_p50_ns.store(p50, Ordering::Relaxed);
            live.lateness_p99_ns.store(p99, Ordering::Relaxed);
            live.lateness_max_ns.store(h.max(), Ordering::Relaxed);
        }
        live.forwarded
            .store(self.report.forwarded, Ordering::Release);
        if live.metrics_wanted.load(Ordering::Relaxed) {
            live.metrics_wanted.store(false, Ordering::Relaxed);
            self.answer_metrics();
        }
    }

    /// Copies every count of the report, the sequence accounts and the lateness buckets where a metrics scrape
    /// reads them: asked for by a scrape (once per scrape, never per record), and once more at the end.
    fn answer_metrics(&self) {
        let live = &self.shared.live[self.s.index];
        let snapshot = ShardSnapshot::of(&self.report, &self.tracker);
        *live.metrics.lock().unwrap_or_else(|p| p.into_inner()) = snapshot;
        live.metrics_answers.fetch_add(1, Ordering::Release);
    }

    /// Hands over what is pending and fills in the sequence figures; returns the report and the outlet (whose
    /// sockets the caller keeps open until the workers are done).
    pub(crate) fn finish(mut self) -> (SubscriberShardReport, Outlet) {
        if !self.stopped {
            self.end_burst();
        } else {
            self.note_run_counts();
            self.publish();
        }
        self.answer_metrics();
        self.shared.live[self.s.index]
            .finished
            .store(true, Ordering::Release);
        let mut report = self.report;
        report.sequence = self.tracker.totals();
        report.ledgers = self.tracker.ledgers().copied().collect();
        report.missing = report.sequence.missing;
        report.restarts = report.sequence.restarts;
        report.publishers = self.tracker.publisher_count();
        (report, self.outlet)
    }
}

/// Whether a frame that is not a tickbox frame reads as plain text (UTF-8 without control characters other than
/// whitespace, judged on its first 256 bytes), as the Guide's example publishers send: a hint, not a decoder.
fn looks_like_text(frame: &[u8]) -> bool {
    let head = &frame[..frame.len().min(256)];
    let text = match std::str::from_utf8(head) {
        Ok(text) => text,
        // Cut inside a character at 256 bytes: judge what came before.
        Err(e) if e.error_len().is_none() => {
            std::str::from_utf8(&head[..e.valid_up_to()]).unwrap_or("")
        }
        Err(_) => return false,
    };
    !text.is_empty() && text.chars().all(|c| !c.is_control() || c.is_whitespace())
}

#[cfg(test)]
mod tests {
    use super::*;
    use tickbox_workers::worker_for_topic;

    /// The cache answers exactly as the dispatch rule does, for keys of every length class of its compare (below
    /// 4, 4..8, 8..=16 with overlapping words, longer than 16 and uncached), for keys that share their first and
    /// last words or differ only in length, and when far more symbols than entries evict one another, asked
    /// in turn several times.
    #[test]
    fn plain_text_frames_look_like_guide_frames_and_tickbox_frames_do_not() {
        assert!(looks_like_text(b"10001 23 45"));
        assert!(looks_like_text("Zürich 12\n".repeat(40).as_bytes()));
        assert!(!looks_like_text(b""));
        assert!(!looks_like_text(b"Q.XNAS.AAPL\0\x02\x01"));
        assert!(!looks_like_text(&[0xff, 0xfe, 0x41]));
    }

    #[test]
    fn worker_cache_gives_the_dispatch_rules_answer() {
        let mut topics: Vec<String> = Vec::new();
        for len in 0..30 {
            topics.push(format!("Q.{}", "x".repeat(len)));
            topics.push(format!("T.{}y", "x".repeat(len)));
        }
        for i in 0..20_000 {
            topics.push(format!("Q.XNAS.S{i}"));
            topics.push(format!("T.XNAS.S{i}"));
        }
        topics.push("Q.ABCDEFGH-one-12345678".to_owned());
        topics.push("Q.ABCDEFGH-two-12345678".to_owned());
        topics.push("NODOT".to_owned());
        topics.push(String::new());
        for workers in [1, 2, 3, 7] {
            let mut cache = WorkerCache::new(workers);
            for round in 0..3 {
                for t in &topics {
                    assert_eq!(
                        cache.worker_for_topic(t.as_bytes()),
                        worker_for_topic(t.as_bytes(), workers),
                        "{t} with {workers} workers, round {round}"
                    );
                }
            }
        }
    }
}
