//! `tickbox record --elect PATH` set up: the recording session stands in the election under an id that names its
//! history service (so late joiners find it), and its leadership is followed with each progress report and shown
//! on the recorder's metrics.

use std::path::Path;

use tickbox_coord::{Coord, CoordError};
use tickbox_recorder::{RecordMetrics, RecordObserver, RecordSession, RecordStats};

use crate::leadership::RecorderLeadership;

impl RecorderLeadership {
    /// Stands in the election at `path` for `session`, recording into `journal`, as this member (its id names
    /// the journal and the history service, see [`tickbox_recorder::election_id`]).
    pub fn for_session(
        coord: &Coord,
        path: &str,
        session: &RecordSession,
        journal: &Path,
    ) -> Result<Self, CoordError> {
        let member = crate::default_member_id();
        let id = tickbox_recorder::election_id(
            &member,
            &session.journal_name(),
            session.history_endpoint(),
        );
        RecorderLeadership::campaign(coord, path, &id, journal, session.recovery().next_seq)
    }
}

/// A recorder's leadership, ticked with each progress report, its state shown as a metric.
pub struct ShownLeadership<'a> {
    /// The leadership followed.
    pub leadership: &'a mut RecorderLeadership,
    /// Where it is shown.
    pub metrics: &'a RecordMetrics,
}

impl RecordObserver for ShownLeadership<'_> {
    fn progress(&mut self, stats: &RecordStats, rate: f64) {
        self.leadership.progress(stats, rate);
        self.metrics.set_leading(self.leadership.is_leading());
    }

    fn finished(&mut self, stats: &RecordStats) {
        self.leadership.finished(stats);
        self.metrics.update(stats);
    }
}
