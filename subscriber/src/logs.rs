//! The shard's logs: what is counted and not fatal is said at a limited rate (a line per kind a second, with how
//! many were held back), so a stream of bad input costs a counter, not a flood of lines.

use std::time::Duration;

use tickbox_units::format_duration;
use tickbox_wire::SequenceEvent;

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
