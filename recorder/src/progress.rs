//! A running replay's progress, from its counters: how far through the records it will read, how fast against
//! the recorded pace, and how long is left. The CLI's live view shows it; the arithmetic lives here, where it
//! can be tested without a terminal.

use std::time::Duration;

use crate::history_reader::HistoryReader;

use crate::input::Position;
use crate::replay::ReplayStats;

/// Where a run is, in journal records, and how fast it goes.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ReplayProgress {
    /// Journal records passed since the run began (selected or not).
    pub done: u64,
    /// Journal records from where the run began to where it stops.
    pub total: u64,
    /// Recorded time covered per wall-clock time spent: 1.0 is the original pace.
    pub multiple: f64,
    /// Time left at `rate`; `None` before anything was sent.
    pub eta: Option<Duration>,
}

impl ReplayProgress {
    /// The progress of a run whose counters are `stats`, sending `rate` records per second now, which began at
    /// journal sequence `start_seq` (the reader's position, when known) and stops before `stop_seq` (`None`: the
    /// journal's end as the stats last saw it).
    pub fn of(
        stats: &ReplayStats,
        rate: f64,
        start_seq: Option<u64>,
        stop_seq: Option<u64>,
    ) -> Self {
        let pos = stats.last_seq.unwrap_or(0);
        let begin = stats.first_seq.or(start_seq).unwrap_or(1);
        let end = stop_seq.unwrap_or(stats.end_seq).max(pos + 1);
        let eta = (rate > 0.0)
            .then(|| Duration::from_secs_f64(end.saturating_sub(pos + 1) as f64 / rate));
        let span = match (stats.first_capture_ns, stats.last_capture_ns) {
            (Some(a), Some(b)) => b.saturating_sub(a),
            _ => 0,
        };
        ReplayProgress {
            done: (pos + 1).saturating_sub(begin),
            total: end.saturating_sub(begin),
            multiple: span as f64 / stats.elapsed.as_nanos().max(1) as f64,
            eta,
        }
    }
}

/// The journal sequence a run stopping at `to` stops before, for the progress bar (`None`: the journal's end).
/// A time is found by the journal's own seek; a journal that cannot be read leaves the bar open-ended.
pub fn stop_seq_of(journal: &std::path::Path, to: Option<Position>) -> Option<u64> {
    match to? {
        Position::Seq(s) => Some(s),
        Position::Time(t) => {
            let mut reader = HistoryReader::open(journal).ok()?;
            reader.seek_time(t).ok()?;
            let seq = reader.next().ok()??.seq;
            Some(seq)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stats(first: u64, last: u64, end: u64, span_ns: u64, elapsed: Duration) -> ReplayStats {
        ReplayStats {
            first_seq: Some(first),
            last_seq: Some(last),
            end_seq: end,
            first_capture_ns: Some(1_000),
            last_capture_ns: Some(1_000 + span_ns),
            elapsed,
            ..ReplayStats::default()
        }
    }

    #[test]
    fn a_run_halfway_through_its_records_says_so_with_the_time_left_at_its_rate() {
        // Sequences 101..=200 of a journal whose writer is at 301: 100 of 200 passed, 100 left at 50/s.
        let s = stats(101, 200, 301, 10_000_000_000, Duration::from_secs(2));
        let p = ReplayProgress::of(&s, 50.0, Some(101), None);
        assert_eq!((p.done, p.total), (100, 200));
        assert_eq!(p.eta, Some(Duration::from_secs(2)));
        assert!((p.multiple - 5.0).abs() < 1e-9, "10 s recorded in 2 s");
    }

    #[test]
    fn a_stop_position_ends_the_bar_there_and_nothing_sent_has_no_eta() {
        let s = stats(1, 10, 1_000, 0, Duration::from_secs(1));
        let p = ReplayProgress::of(&s, 0.0, None, Some(21));
        assert_eq!((p.done, p.total), (10, 20));
        assert_eq!(p.eta, None);
        // A stop before the position reached never makes the bar run backwards.
        let p = ReplayProgress::of(&s, 10.0, None, Some(5));
        assert_eq!((p.done, p.total), (10, 10));
        assert_eq!(p.eta, Some(Duration::ZERO));
    }
}
