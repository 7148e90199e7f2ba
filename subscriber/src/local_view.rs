//! What `tickbox replay --local` shows of a backtest: `subscribe`'s summary plus records/s and the multiple of
//! real time achieved, and how the run ends given what the journal reader met (its own report, in
//! `tickbox-recorder`, says what that was).

use crate::{LocalReplayReport, StandardWorker, SubscriberConfig};

/// How a backtest ends, judged after its summary, first reason first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LocalVerdict {
    /// Worker threads panicked (their indices): the run is incomplete.
    WorkersPanicked(Vec<usize>),
    /// Judged by the run's own outcome: its fatal event, if any.
    Outcome,
    /// The journal could not be read to its end (no fatal event).
    ReadError,
    /// Damaged ranges were skipped (no fatal event): every intact record was processed.
    Damaged,
}

impl LocalReplayReport<StandardWorker> {
    /// Why the backtest ended: its fatal event, a signal (`signalled`), or the end of the journal.
    pub fn stopped_by_local(&self, signalled: bool) -> &'static str {
        if self.report.fatal.is_some() {
            "fatal"
        } else if signalled {
            "signal"
        } else {
            "end of journal"
        }
    }

    /// The summary as one JSON object: `subscribe`'s, as `replay-local`, with the speed achieved.
    pub fn local_summary_json(
        &self,
        config: &SubscriberConfig,
        stopped_by: &str,
    ) -> serde_json::Value {
        let mut v = self.report.summary_json(config, stopped_by);
        v["component"] = "replay-local".into();
        v["records_per_sec"] = (self.records_per_sec().round() as u64).into();
        v["real_time_multiple"] = (self.real_time_multiple())
            .map(|m| (m * 100.0).round() / 100.0)
            .into();
        v["origin_first_ns"] = self.origin_span_ns.map(|s| s.0).into();
        v["origin_last_ns"] = self.origin_span_ns.map(|s| s.1).into();
        v["skipped_heartbeats"] = self.skipped_heartbeats.into();
        v
    }

    /// The summary as text: `subscribe`'s table and a line on the speed achieved.
    pub fn local_summary_text(&self, stopped_by: &str) -> String {
        let report = &self.report;
        format!(
            "{}local replay: {} records in {:.3} s = {:.0} records/s, {} of market time ({}), {} recorded \
             heartbeats skipped\n",
            report.summary_table(None, stopped_by),
            report.received(),
            report.elapsed.as_secs_f64(),
            self.records_per_sec(),
            (self.origin_span_ns)
                .map(|(lo, hi)| format!("{:.3} s", (hi - lo) as f64 / 1e9))
                .unwrap_or_else(|| "-".into()),
            (self.real_time_multiple())
                .map(|m| format!("{m:.1}x real time"))
                .unwrap_or_else(|| "multiple unknown".into()),
            self.skipped_heartbeats
        )
    }
}

impl<W> LocalReplayReport<W> {
    /// The verdict, given whether the reader could not read the journal to its end (`read_failed`) and whether
    /// it skipped damage (`damaged`).
    pub fn local_verdict(&self, read_failed: bool, damaged: bool) -> LocalVerdict {
        if !self.panicked.is_empty() {
            return LocalVerdict::WorkersPanicked(self.panicked.clone());
        }
        match (&self.report.fatal, read_failed, damaged) {
            (Some(_), _, _) => LocalVerdict::Outcome,
            (None, true, _) => LocalVerdict::ReadError,
            (None, false, true) => LocalVerdict::Damaged,
            (None, false, false) => LocalVerdict::Outcome,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_backtest_is_judged_by_panics_then_its_outcome_then_what_the_reader_met() {
        let mut run = LocalReplayReport {
            report: crate::run_view::tests::empty_run(10),
            origin_span_ns: None,
            skipped_heartbeats: 0,
            panicked: vec![1],
        };
        assert_eq!(
            run.local_verdict(true, true),
            LocalVerdict::WorkersPanicked(vec![1])
        );
        run.panicked.clear();
        assert_eq!(run.local_verdict(false, true), LocalVerdict::Damaged);
        assert_eq!(run.local_verdict(true, true), LocalVerdict::ReadError);
        assert_eq!(run.local_verdict(false, false), LocalVerdict::Outcome);
    }
}
