//! The worker-side Suicidal Snail: lateness measured at dequeue, where a slow worker's backlog shows.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use hdrhistogram::Histogram;
use tickbox_wire::{Flags, Kind};
use tickbox_workers::{Delivery, DequeueHook, Record};

use crate::clock::ClockTable;
use crate::report::{Fatal, SnailEvent, Stage};
use crate::shared::Shared;
use crate::snail::{lateness_ns, SharedThreshold, SnailVerdict};
use crate::SnailMode;

/// The worker-side snail: checks dequeue lateness and records it.
pub struct SnailHook {
    pub(crate) threshold: SharedThreshold,
    pub(crate) mode: SnailMode,
    pub(crate) clocks: Arc<ClockTable>,
    pub(crate) shared: Arc<Shared>,
    pub(crate) late: u64,
    pub(crate) lateness: Histogram<u64>,
}

impl std::fmt::Debug for SnailHook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SnailHook")
            .field("threshold", &self.threshold.get())
            .field("late", &self.late)
            .finish()
    }
}

impl DequeueHook for SnailHook {
    /// A Guide message has no send time to judge; after a trip it is discarded like the rest.
    #[inline]
    fn on_dequeue_guide(&mut self, _delivery: &Delivery) -> bool {
        !self.shared.tripped.load(Ordering::Relaxed)
    }

    #[inline]
    fn on_dequeue(&mut self, rec: &Record<'_>, delivery: &Delivery) -> bool {
        if self.shared.tripped.load(Ordering::Relaxed) {
            return false;
        }
        let header = rec.header();
        if header.flags.contains(Flags::CACHED) || header.kind == Kind::Gap {
            return true;
        }
        let snail = self.threshold.snail();
        let min_delay = match self.mode {
            SnailMode::Strict => None,
            SnailMode::SkewTolerant => self.clocks.min_delay(header.publisher_id),
        };
        let lateness = lateness_ns(
            self.mode,
            delivery.dequeued_ns,
            header.send_time_ns,
            min_delay,
        );
        match snail.judge(lateness) {
            SnailVerdict::OnTime { lateness_ns } => {
                self.lateness.saturating_record(lateness_ns.max(1));
                true
            }
            SnailVerdict::Exempt => true,
            SnailVerdict::Late { lateness_ns } => {
                self.late += 1;
                self.lateness.saturating_record(lateness_ns);
                self.shared.trip(Fatal::Snail(SnailEvent {
                    stage: Stage::Worker,
                    index: delivery.worker,
                    publisher: header.publisher_id,
                    topic: String::from_utf8_lossy(rec.topic_bytes()).into_owned(),
                    sequence: header.sequence,
                    lateness_ns,
                    threshold_ns: snail.threshold_ns(),
                    send_time_ns: header.send_time_ns,
                    received_ns: delivery.dequeued_ns,
                }));
                false
            }
        }
    }
}
