//! `tickbox record --elect PATH`: a recorder standing in a ZooKeeper election with the other recorders of its
//! feed. It follows its leadership and, while leader, reports how far it recorded; every change is appended to
//! the leadership log beside its journal (`JOURNAL.leadership.jsonl`), which `tickbox journal info` reads back
//! with [`handover_line`].
//!
//! Both ends of the log live here so an entry is written and read by one module.

use std::path::{Path, PathBuf};

use serde_json::Value;
use tickbox_coord::{Coord, CoordError, HandoverLog, LostReason, Standing, StandingEvent};
use tickbox_recorder::RecordStats;

/// Why `subscribe --catch-up zk:ELECTION` found no history service to ask.
#[derive(Debug, thiserror::Error)]
pub enum ElectedHistoryError {
    /// ZooKeeper could not be read.
    #[error(transparent)]
    Coord(#[from] CoordError),
    /// Nobody stands in the election.
    #[error("no recorder leads that election")]
    NoLeader,
    /// The leader records but serves no history.
    #[error("the leading recorder ({leader}) serves no history (record --serve)")]
    NoHistory {
        /// The leader's election id.
        leader: String,
    },
}

/// The history endpoint of the recorder leading `election` (its election id names it, see
/// [`tickbox_recorder::election_id`]): where a late subscriber catches up from the canonical journal.
pub fn elected_history_endpoint(
    coord: &Coord,
    election: &str,
) -> Result<String, ElectedHistoryError> {
    let Some((_, id)) = tickbox_coord::Election::new(coord, election)?.leader()? else {
        return Err(ElectedHistoryError::NoLeader);
    };
    let leader = String::from_utf8_lossy(&id).into_owned();
    match tickbox_recorder::history_endpoint_in(&leader) {
        Some(endpoint) => Ok(endpoint.to_owned()),
        None => Err(ElectedHistoryError::NoHistory { leader }),
    }
}

/// A recorder standing in an election: follows its leadership and, while leader, reports how far it recorded.
pub struct RecorderLeadership {
    standing: Standing,
    log: HandoverLog,
    /// The journal's next sequence when this run started (before anything was recorded).
    start_seq: u64,
    /// The token this recorder leads with (connected or suspended), `None` while a candidate.
    led: Option<u64>,
    /// Where the journal was, and the wall clock (ns), when the leadership went uncertain (connection lost):
    /// its canonical part ends there if the leadership turns out lost.
    suspended_at: Option<(Value, u64)>,
    /// The journal as progress reports name it.
    journal: String,
}

impl std::fmt::Debug for RecorderLeadership {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RecorderLeadership")
            .field("election", &self.standing.election())
            .field("log", &self.log.path())
            .field("start_seq", &self.start_seq)
            .field("led", &self.led)
            .finish()
    }
}

/// Where a recorder is: its journal's last sequence, and each publisher's last sequence it recorded. What a
/// leader reports to ZooKeeper and what the leadership log's `from`, `until` and `at` hold.
pub fn progress(s: &RecordStats, journal: &str, start_seq: u64) -> Value {
    let publishers: serde_json::Map<String, Value> = s
        .publishers
        .iter()
        .map(|r| (r.publisher.to_string(), r.last_sequence.into()))
        .collect();
    serde_json::json!({
        "journal": journal,
        "last_journal_seq": s.last_seq,
        "next_journal_seq": s.last_seq.map_or(start_seq, |l| l + 1),
        "publishers": publishers,
    })
}

/// One line of `tickbox journal info` for an entry of the leadership log.
pub fn handover_line(h: &Value) -> String {
    match h["event"].as_str() {
        Some("lost") => format!(
            "leader lost   token {} ({}): canonical up to journal seq {}",
            h["token"], h["reason"], h["until"]["last_journal_seq"]
        ),
        Some("resigned") => format!(
            "leader ended  token {} (run stopped): canonical up to journal seq {}",
            h["token"], h["until"]["last_journal_seq"]
        ),
        Some("rejoined") => format!(
            "candidate     rejoined after {} ms out at journal seq {} (was leader: {})",
            h["out_ms"], h["at"]["next_journal_seq"], h["was_leader"]
        ),
        // Entries before the `event` field are all elections.
        _ => format!(
            "leader        token {} from journal seq {} (publishers {}); previous: {}",
            h["token"], h["from"]["next_journal_seq"], h["from"]["publishers"], h["previous"]
        ),
    }
}

/// The journal-sequence spans a recorder led, from its leadership log's entries (oldest first): from each
/// election's `from` to the `until` of the loss or resignation after it, or to the end of the journal when none
/// follows (the recorder was killed while leader). What `tickbox journal stitch` takes from each journal.
pub fn leader_spans(entries: &[Value]) -> Vec<tickbox_recorder::LeaderSpan> {
    let mut spans = Vec::new();
    let mut open: Option<u64> = None;
    for e in entries {
        match e["event"].as_str() {
            Some("lost") | Some("resigned") => {
                if let Some(from) = open.take() {
                    // Nothing recorded while leading (`last_journal_seq` null): an empty span.
                    let until = e["until"]["last_journal_seq"]
                        .as_u64()
                        .unwrap_or(from.saturating_sub(1));
                    if until >= from {
                        spans.push(tickbox_recorder::LeaderSpan {
                            from,
                            until: Some(until),
                        });
                    }
                }
            }
            Some("rejoined") => {}
            // Entries before the `event` field are all elections.
            _ => {
                if let Some(from) = e["from"]["next_journal_seq"].as_u64() {
                    open = Some(from);
                }
            }
        }
    }
    if let Some(from) = open {
        spans.push(tickbox_recorder::LeaderSpan { from, until: None });
    }
    spans
}

/// A leadership log that could not be read (or has a line that is not JSON).
#[derive(Debug, thiserror::Error)]
#[error("reading the leadership log of {}", journal.display())]
pub struct LogError {
    /// The journal the log is beside.
    pub journal: PathBuf,
    /// Why.
    source: std::io::Error,
}

/// The leadership log beside `journal`, oldest entry first; none when it has no log (it never stood).
pub fn read_log(journal: &Path) -> Result<Vec<Value>, LogError> {
    HandoverLog::beside(journal)
        .read()
        .map_err(|source| LogError {
            journal: journal.to_path_buf(),
            source,
        })
}

/// Why `tickbox journal stitch` has nothing to stitch.
#[derive(Debug, thiserror::Error)]
pub enum StitchInputError {
    /// A log could not be read.
    #[error(transparent)]
    Log(#[from] LogError),
    /// No journal ever led.
    #[error("no journal has a leadership log with an election (record --elect writes JOURNAL.leadership.jsonl)")]
    NoElection,
}

/// What `tickbox journal stitch` takes from each journal: the spans it led, from its leadership log. A journal
/// without a log never led (said in the log, not an error: its records only fill the leaders' gaps); when none
/// ever led there is nothing to stitch.
pub fn stitch_inputs(
    journals: &[PathBuf],
) -> Result<Vec<tickbox_recorder::StitchInput>, StitchInputError> {
    let mut inputs = Vec::with_capacity(journals.len());
    for path in journals {
        let log = read_log(path)?;
        if log.is_empty() {
            tracing::warn!(
                journal = %path.display(),
                "no leadership log beside it: it never led, its records only fill the leaders' gaps"
            );
        }
        inputs.push(tickbox_recorder::StitchInput {
            path: path.clone(),
            spans: leader_spans(&log),
        });
    }
    if inputs.iter().all(|i| i.spans.is_empty()) {
        return Err(StitchInputError::NoElection);
    }
    Ok(inputs)
}

impl RecorderLeadership {
    /// Stands as `id` in the election at `path`, logging beside `journal`, whose next sequence is `start_seq`.
    pub fn campaign(
        coord: &Coord,
        path: &str,
        id: &str,
        journal: &Path,
        start_seq: u64,
    ) -> Result<Self, CoordError> {
        let standing = Standing::campaign(coord, path, id)?;
        tracing::info!(election = %path, id, "standing for leadership of the recording");
        Ok(RecorderLeadership {
            standing,
            log: HandoverLog::beside(journal),
            start_seq,
            led: None,
            suspended_at: None,
            journal: journal.display().to_string(),
        })
    }

    fn progress(&self, s: &RecordStats, journal: &str) -> Value {
        progress(s, journal, self.start_seq)
    }

    fn append(&self, mut entry: Value) {
        entry["at_ns"] = tickbox_wire::now_ns().into();
        if let Err(e) = self.log.append(&entry) {
            tracing::error!("cannot append to {}: {e}", self.log.path().display());
        }
    }

    /// The run ends: a leader's journal is canonical up to here, logged before the candidacy is dropped (which
    /// gives the leadership up), so the successor's election always comes after this entry.
    pub fn resign(&mut self, s: &RecordStats, journal: &str) {
        let Some(token) = self.led.take() else {
            return;
        };
        let (until, until_ns) = self
            .suspended_at
            .take()
            .unwrap_or_else(|| (self.progress(s, journal), tickbox_wire::now_ns()));
        tracing::info!("giving up the leadership (token {token}) as the run ends: this journal is canonical up to {until}");
        self.append(serde_json::json!({
            "event": "resigned",
            "election": self.standing.election(),
            "token": token,
            "until": until,
            "until_ns": until_ns,
        }));
    }

    /// Whether this recorder leads now (elected, and its ZooKeeper session not in doubt).
    pub fn is_leading(&self) -> bool {
        self.led.is_some() && self.suspended_at.is_none()
    }

    /// Follows the leadership changes since the last call, and reports `s` while leader.
    pub fn tick(&mut self, s: &RecordStats, journal: &str) {
        loop {
            match self.standing.poll() {
                Ok(None) => break,
                Ok(Some(StandingEvent::Elected(h))) => {
                    let here = self.progress(s, journal);
                    let mut entry = h.to_json();
                    entry["event"] = "elected".into();
                    entry["from"] = here.clone();
                    tracing::info!("{}; canonical from here: {here}", h.line());
                    self.append(entry);
                    self.led = Some(h.token);
                    self.suspended_at = None;
                }
                Ok(Some(StandingEvent::Suspended)) => {
                    self.suspended_at = Some((self.progress(s, journal), tickbox_wire::now_ns()));
                    tracing::warn!("ZooKeeper connection lost: leadership uncertain until it comes back; not canonical meanwhile")
                }
                Ok(Some(StandingEvent::Resumed)) => {
                    self.suspended_at = None;
                    tracing::info!("ZooKeeper connection back: still leader")
                }
                Ok(Some(StandingEvent::Lost(r))) => {
                    let here = self.progress(s, journal);
                    match self.led.take() {
                        Some(token) => {
                            let (until, until_ns) = self
                                .suspended_at
                                .take()
                                .unwrap_or_else(|| (here, tickbox_wire::now_ns()));
                            tracing::error!(
                                "lost the leadership (token {token}, {r:?}): this journal is canonical up to {until}; \
                                 recording on, standing again as a candidate once ZooKeeper is back"
                            );
                            self.append(serde_json::json!({
                                "event": "lost",
                                "election": self.standing.election(),
                                "token": token,
                                "reason": format!("{r:?}"),
                                "until": until,
                                "until_ns": until_ns,
                            }));
                        }
                        None if r == LostReason::SessionExpired => tracing::warn!(
                            "out of the recorder election (session expired): standing again as a candidate once ZooKeeper is back"
                        ),
                        None => tracing::error!(
                            "out of the recorder election ({r:?}): recording on into this journal, which is not canonical"
                        ),
                    }
                }
                Ok(Some(StandingEvent::Rejoined {
                    was_leader,
                    out_for,
                })) => {
                    tracing::info!(
                        "back in the recorder election as a candidate after {} ms out{}",
                        out_for.as_millis(),
                        was_leader
                            .map_or(String::new(), |t| format!(" (was leader with token {t})"))
                    );
                    self.append(serde_json::json!({
                        "event": "rejoined",
                        "election": self.standing.election(),
                        "was_leader": was_leader,
                        "out_ms": out_for.as_millis() as u64,
                        "at": self.progress(s, journal),
                    }));
                }
                Err(e) => {
                    tracing::warn!("reading the leadership: {e}");
                    break;
                }
            }
        }
        if self.standing.is_leader() {
            match self.standing.report(&self.progress(s, journal)) {
                Ok(true) => {}
                Ok(false) => {
                    tracing::warn!("a newer leader has reported: this recorder is deposed")
                }
                Err(e) => tracing::warn!("reporting progress to ZooKeeper: {e}"),
            }
        }
    }
}

/// A recording session tells its leadership how far it got at every progress call, and at its end reports the
/// final position (so a successor starts from exactly where this leader stopped) and resigns.
impl tickbox_recorder::RecordObserver for RecorderLeadership {
    fn progress(&mut self, stats: &RecordStats, _rate: f64) {
        let journal = std::mem::take(&mut self.journal);
        self.tick(stats, &journal);
        self.journal = journal;
    }

    fn finished(&mut self, stats: &RecordStats) {
        let journal = std::mem::take(&mut self.journal);
        self.tick(stats, &journal);
        self.resign(stats, &journal);
        self.journal = journal;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tickbox_recorder::LedgerRow;

    #[test]
    fn a_leadership_log_gives_the_spans_led_and_an_unended_one_runs_to_the_end() {
        let log = [
            serde_json::json!({"event": "elected", "token": 1, "from": {"next_journal_seq": 1}}),
            serde_json::json!({"event": "lost", "token": 1, "until": {"last_journal_seq": 500}}),
            serde_json::json!({"event": "rejoined", "at": {"next_journal_seq": 700}}),
            // An election logged before the `event` field existed.
            serde_json::json!({"token": 3, "from": {"next_journal_seq": 900}}),
        ];
        assert_eq!(
            leader_spans(&log),
            [
                tickbox_recorder::LeaderSpan {
                    from: 1,
                    until: Some(500)
                },
                tickbox_recorder::LeaderSpan {
                    from: 900,
                    until: None
                },
            ]
        );
        // Resigned before recording anything as leader: no span.
        let log = [
            serde_json::json!({"event": "elected", "from": {"next_journal_seq": 10}}),
            serde_json::json!({"event": "resigned", "until": {"last_journal_seq": null}}),
        ];
        assert!(leader_spans(&log).is_empty());
    }

    #[test]
    fn stitching_takes_each_journals_spans_and_needs_one_that_led() {
        let dir = tempfile::tempdir().unwrap();
        let (led, never) = (dir.path().join("a.tbj"), dir.path().join("b.tbj"));
        let elected = serde_json::json!({"event": "elected", "from": {"next_journal_seq": 5}});
        HandoverLog::beside(&led).append(&elected).unwrap();
        let inputs = stitch_inputs(&[led.clone(), never.clone()]).unwrap();
        assert_eq!(inputs.len(), 2);
        assert_eq!(
            inputs[0].spans,
            [tickbox_recorder::LeaderSpan {
                from: 5,
                until: None
            }]
        );
        assert!(inputs[1].spans.is_empty(), "no log: it never led");
        let none = stitch_inputs(std::slice::from_ref(&never)).unwrap_err();
        assert!(matches!(none, StitchInputError::NoElection), "{none}");
        std::fs::write(HandoverLog::beside(&never).path(), "not json\n").unwrap();
        let bad = stitch_inputs(&[led, never.clone()]).unwrap_err();
        assert_eq!(
            bad.to_string(),
            format!("reading the leadership log of {}", never.display())
        );
        assert!(
            std::error::Error::source(&bad).is_some(),
            "the parse error stays in the chain"
        );
    }

    #[test]
    fn progress_names_the_next_sequence_and_each_publisher() {
        let mut s = RecordStats::default();
        assert_eq!(
            progress(&s, "j", 7),
            serde_json::json!({"journal": "j", "last_journal_seq": null, "next_journal_seq": 7, "publishers": {}})
        );
        s.last_seq = Some(41);
        s.publishers = vec![
            LedgerRow {
                publisher: 3,
                last_sequence: 90,
                ..LedgerRow::default()
            },
            LedgerRow {
                publisher: 1,
                last_sequence: 12,
                ..LedgerRow::default()
            },
        ];
        let p = progress(&s, "j", 7);
        assert_eq!(p["next_journal_seq"], 42);
        assert_eq!(p["publishers"], serde_json::json!({"1": 12, "3": 90}));
    }

    #[test]
    fn each_log_entry_reads_back_as_one_line() {
        let lost = serde_json::json!({"event": "lost", "token": 4, "reason": "SessionExpired",
            "until": {"last_journal_seq": 99}});
        assert_eq!(
            handover_line(&lost),
            "leader lost   token 4 (\"SessionExpired\"): canonical up to journal seq 99"
        );
        let resigned =
            serde_json::json!({"event": "resigned", "token": 5, "until": {"last_journal_seq": 10}});
        assert_eq!(
            handover_line(&resigned),
            "leader ended  token 5 (run stopped): canonical up to journal seq 10"
        );
        let rejoined = serde_json::json!({"event": "rejoined", "out_ms": 250, "was_leader": null,
            "at": {"next_journal_seq": 11}});
        assert_eq!(
            handover_line(&rejoined),
            "candidate     rejoined after 250 ms out at journal seq 11 (was leader: null)"
        );
        // An entry without `event` is an election (logs written before the field existed).
        let elected = serde_json::json!({"token": 6, "from": {"next_journal_seq": 3, "publishers": {"1": 2}},
            "previous": null});
        assert_eq!(
            handover_line(&elected),
            "leader        token 6 from journal seq 3 (publishers {\"1\":2}); previous: null"
        );
    }
}
