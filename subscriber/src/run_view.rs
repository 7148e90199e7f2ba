//! What `subscribe` shows of a run: the live status line while it runs, the summary (with the LVC snapshot and
//! the catch-up, when the run had them) and the verdict that picks its exit code.

use std::time::Duration;

use tickbox_units::{format_duration, format_ns_short, format_rate, RateMeter};
use tickbox_workers::{TapeSink, WorkerError};

use crate::{
    CatchUpSummary, LiveShardCounters, LvcSnapshotReport, Report, StandardWorker, SubscriberConfig,
};

/// The live status line of the shards' counters (relaxed atomics they already keep, summed here, off the hot
/// path); `threshold` is the snail's lateness threshold now.
pub fn live_line(
    shards: &[LiveShardCounters],
    threshold: Duration,
    rate: &mut RateMeter,
) -> String {
    let sum = |f: fn(&LiveShardCounters) -> u64| shards.iter().map(f).sum::<u64>();
    let received = sum(|s| s.received);
    // Percentiles of the busiest shard (histograms are per shard; merging them is end-of-run work), shown once a
    // shard has answered (all zero before it has measured anything).
    let busiest = shards.iter().max_by_key(|s| s.received).copied();
    let busiest = busiest.filter(|s| s.lateness_max_ns > 0);
    let lateness = busiest.map_or_else(String::new, |s| {
        format!(
            ", lateness p50 {} p99 {} max {}",
            format_ns_short(s.lateness_p50_ns),
            format_ns_short(s.lateness_p99_ns),
            format_ns_short(s.lateness_max_ns)
        )
    });
    format!(
        "received {received} ({}), to workers {}, gaps {}, late {} (past {}){lateness}",
        format_rate(rate.per_sec(received)),
        sum(|s| s.forwarded),
        sum(|s| s.gaps),
        sum(|s| s.late),
        format_duration(threshold),
    )
}

/// What a run had beside its shards: the LVC snapshot and the catch-up from history.
#[derive(Debug, Default)]
pub struct RunExtras {
    /// The LVC snapshot fetched before the first message (`--lvc-snapshot`).
    pub lvc_snapshot: Option<LvcSnapshotReport>,
    /// The catch-up from a recorder's history (`--catch-up`).
    pub catch_up: Option<CatchUpSummary>,
}

impl Report<StandardWorker> {
    /// The summary as one JSON object: [`Report::summary_json`] with `lvc_snapshot` and `catch_up` when the run
    /// had them.
    pub fn run_summary_json(
        &self,
        config: &SubscriberConfig,
        stopped_by: &str,
        extras: &RunExtras,
    ) -> serde_json::Result<serde_json::Value> {
        let mut summary = self.summary_json(config, stopped_by);
        if let Some(snapshot) = &extras.lvc_snapshot {
            summary["lvc_snapshot"] = snapshot.to_json();
        }
        if let Some(catch_up) = &extras.catch_up {
            summary["catch_up"] = serde_json::to_value(catch_up)?;
        }
        Ok(summary)
    }

    /// The summary as text: the table, then a line each for the LVC snapshot and the catch-up.
    pub fn run_summary_text(&self, stopped_by: &str, extras: &RunExtras) -> String {
        let mut text = self.summary_table(None, stopped_by);
        let lines = (extras
            .lvc_snapshot
            .iter()
            .map(LvcSnapshotReport::summary_line))
        .chain(extras.catch_up.iter().map(CatchUpSummary::summary_line));
        for line in lines {
            text.push_str(&line);
            text.push('\n');
        }
        text
    }
}

/// What `--tape` holds, for stderr: a line on what was written, and an `error:` line when records were lost to a
/// write error (the tape is then incomplete).
pub fn tape_lines(sink: &TapeSink) -> (String, Option<String>) {
    let written = format!(
        "tape {}: {} records written",
        sink.path().display(),
        sink.written()
    );
    let lost = (sink.lost() > 0).then(|| {
        format!(
            "error: --tape {}: {} records not written ({}); the tape is incomplete",
            sink.path().display(),
            sink.lost(),
            sink.error().unwrap_or_default()
        )
    });
    (written, lost)
}

/// How a finished run ends, judged after its summary was printed, first reason first.
#[derive(Debug)]
pub enum RunVerdict {
    /// A worker failed: the run is incomplete.
    WorkerFailed(WorkerError),
    /// The tape lost records (said when the tape was reported).
    TapeIncomplete,
    /// Nothing was received: the line says why (every handshake refused, or nothing at all).
    ReceivedNothing(String),
    /// Frames arrived but none was usable: the line says what was probably meant.
    NothingUsable(String),
    /// Judged by the run's own outcome: its fatal event, if any.
    Outcome,
}

impl<W> Report<W> {
    /// The verdict on this run of `config`, given a worker's failure and whether the tape lost records.
    pub fn verdict(
        &self,
        config: &SubscriberConfig,
        worker_failure: Option<WorkerError>,
        tape_failed: bool,
    ) -> RunVerdict {
        if let Some(err) = worker_failure {
            return RunVerdict::WorkerFailed(err);
        }
        if self.fatal.is_some() {
            return RunVerdict::Outcome;
        }
        if tape_failed {
            return RunVerdict::TapeIncomplete;
        }
        let elapsed = self.elapsed.as_secs_f64();
        if self.received() == 0 && self.handshakes_refused() > 0 {
            return RunVerdict::ReceivedNothing(format!(
                "received nothing from {} in {elapsed:.1} s: the publisher refused every handshake ({} refused; \
                 the warnings above say why)",
                config.endpoint_list(),
                self.handshakes_refused()
            ));
        }
        if self.received() == 0 {
            return RunVerdict::ReceivedNothing(format!(
                "received nothing at all from {} in {elapsed:.1} s: check the endpoints, --nic and --topics, and \
                 that the publishers are running",
                config.endpoint_list(),
            ));
        }
        if self.nothing_usable() {
            return RunVerdict::NothingUsable(self.all_malformed_line(&config.endpoint_list()));
        }
        RunVerdict::Outcome
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    #[test]
    fn the_live_line_sums_the_shards_and_shows_the_busiest_ones_lateness() {
        let quiet = LiveShardCounters {
            received: 10,
            forwarded: 9,
            gaps: 1,
            late: 2,
            lateness_max_ns: 9_000_000_000,
            ..LiveShardCounters::default()
        };
        let busy = LiveShardCounters {
            index: 1,
            received: 100,
            forwarded: 100,
            lateness_p50_ns: 85_000,
            lateness_p99_ns: 1_200_000,
            lateness_max_ns: 3_400_000,
            ..LiveShardCounters::default()
        };
        let line = live_line(
            &[quiet, busy],
            Duration::from_secs(1),
            &mut RateMeter::default(),
        );
        assert!(line.starts_with("received 110 ("), "{line}");
        assert!(
            line.ends_with(
                "to workers 109, gaps 1, late 2 (past 1s), lateness p50 85us p99 1.2ms max 3.4ms"
            ),
            "{line}"
        );
        let unmeasured = LiveShardCounters {
            lateness_max_ns: 0,
            ..busy
        };
        let line = live_line(
            &[unmeasured],
            Duration::from_secs(1),
            &mut RateMeter::default(),
        );
        assert!(
            line.ends_with("(past 1s)"),
            "no lateness before a shard has measured it: {line}"
        );
    }

    #[test]
    fn a_tape_says_what_it_holds() {
        let dir = tickbox_testkit::TempDir::new("run-view-tape");
        let path = dir.path().join("tape.txt");
        let sink = TapeSink::create(&path).unwrap();
        let (written, lost) = tape_lines(&sink);
        assert_eq!(
            written,
            format!("tape {}: 0 records written", path.display())
        );
        assert_eq!(lost, None, "nothing lost, no error line");
    }

    /// A run of one shard that received `received` records, nothing else happening.
    pub(crate) fn empty_run(received: u64) -> Report<()> {
        let shard = crate::SubscriberShardReport {
            received,
            forwarded: received,
            publishers: 1,
            forwarded_per_worker: Vec::new(),
            ..crate::SubscriberShardReport::before_receiving(
                0,
                vec!["tcp://127.0.0.1:5556".into()],
                1,
            )
        };
        Report {
            shards: vec![shard],
            workers: Vec::new(),
            fatal: None,
            unprocessed: 0,
            elapsed: Duration::from_secs(2),
            dispatch: tickbox_workers::Dispatch::default(),
            handoff: crate::HandoffChoice {
                handoff: crate::Handoff::Ring,
                reason: "asked".into(),
            },
            snail_mode: crate::SnailMode::default(),
            clock_offsets: Vec::new(),
            clock_untracked: 0,
        }
    }

    #[test]
    fn a_run_is_judged_by_its_first_failure() {
        let config = SubscriberConfig::default();
        let nothing = empty_run(0);
        assert!(matches!(
            nothing.verdict(&config, Some(WorkerError::Panicked(1)), true),
            RunVerdict::WorkerFailed(WorkerError::Panicked(1))
        ));
        assert!(matches!(
            nothing.verdict(&config, None, true),
            RunVerdict::TapeIncomplete
        ));
        match nothing.verdict(&config, None, false) {
            RunVerdict::ReceivedNothing(line) => {
                assert!(line.starts_with("received nothing at all from "), "{line}");
                assert!(line.contains(" in 2.0 s: check the endpoints"), "{line}");
            }
            other => panic!("{other:?}"),
        }
        let mut received = empty_run(5);
        assert!(matches!(
            received.verdict(&config, None, false),
            RunVerdict::Outcome
        ));
        received.shards[0].malformed = 5;
        assert!(matches!(
            received.verdict(&config, None, false),
            RunVerdict::NothingUsable(_)
        ));
        received.shards[0].handshakes_refused = 1;
        received.shards[0].received = 0;
        match received.verdict(&config, None, false) {
            RunVerdict::ReceivedNothing(line) => {
                assert!(
                    line.contains("the publisher refused every handshake (1 refused;"),
                    "{line}"
                )
            }
            other => panic!("{other:?}"),
        }
    }
}
