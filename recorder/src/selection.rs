//! What a replay selects: topic prefixes and an origin-time window, and the time grammar of `replay --from/--to`.
//!
//! Times are origin times (the publisher's `origin_time_ns`, kept by the recorder and by replays), not capture
//! times: "the 09:30 open" means what the exchange stamped, however late it was recorded. A time is one of
//!
//! * RFC 3339 with `Z` or an offset (`2026-11-24T14:30:00Z`, `2026-11-24T09:30:00-05:00`);
//! * a local date-time without a zone (`2026-11-24 09:30:00`, `2026-11-24T09:30`), in the `--tz` zone;
//! * a time of day (`09:30`, `09:30:00.5`), in the `--tz` zone on the journal's first day there;
//! * ns since the Unix epoch, or `+DURATION` after the journal's first record.
//!
//! A local time that a DST change skips is moved forward past the gap and one it repeats is the earlier of the
//! two (the "compatible" rule of RFC 5545 and Temporal).
//!
//! The journal is ordered by capture time, so a replay seeks by capture time to a little before `from`
//! ([`CLOCK_SLACK`] earlier, for publisher clocks ahead of the recorder's) and stops a little after `to`; records
//! read in between that fall outside the selection are skipped before pacing and counted, never sent.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use tickbox_journal::JournalError;
/// The time grammar lives in `tickbox_units` (one grammar for every `--from/--to`); re-exported here, where the
/// replay's selection uses it.
pub use tickbox_units::{format_in_zone, parse_zone, TimeZone, When};

use crate::error::SelectionError;
use crate::history_reader::HistoryReader;
use tickbox_wire::{Header, Kind, MessageRef};

/// How far a record's origin time may lie ahead of its capture time (a publisher clock ahead of the recorder's)
/// and still be found: the replay seeks this much before `from` by capture time and reads this much past `to`.
pub const CLOCK_SLACK: Duration = Duration::from_secs(5);

/// Which records a replay sends: by topic prefix and by origin time. Checked once per record, allocation-free.
///
/// * **Topics**: a data record or cached value is selected when its topic starts with one of the prefixes. A gap
///   notice (`G.<publisher>`) is selected only when a prefix names it (`G.`): a topic subset has holes in every
///   publisher's sequence that no notice describes, so its subscriber should subscribe to the same prefixes
///   (which turns its gap tracking off) or the replay should `--restamp` (gap-free per shard).
/// * **Time**: origin time in `[from, to)`, gap notices included (their origin time is when the loss was noticed).
/// * Recorded heartbeats are never replayed whatever the selection; the replay's own heartbeats go to the
///   publishers it replayed records of.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReplaySelection {
    topics: Vec<String>,
    from_ns: Option<u64>,
    to_ns: Option<u64>,
}

impl ReplaySelection {
    /// A selection of topic prefixes (empty: every topic) and an origin-time window (`to` exclusive).
    pub fn new(
        topics: Vec<String>,
        from_ns: Option<u64>,
        to_ns: Option<u64>,
        tz: &TimeZone,
    ) -> Result<ReplaySelection, SelectionError> {
        if topics.iter().any(|t| t.is_empty()) {
            return Err(SelectionError::EmptyPrefix);
        }
        if let (Some(a), Some(b)) = (from_ns, to_ns) {
            if a >= b {
                return Err(SelectionError::EmptyRange {
                    from: format_in_zone(a, tz),
                    to: format_in_zone(b, tz),
                });
            }
        }
        Ok(ReplaySelection {
            topics,
            from_ns,
            to_ns,
        })
    }

    /// True when it selects every record (no prefix, no window).
    pub fn is_all(&self) -> bool {
        self.topics.is_empty() && self.from_ns.is_none() && self.to_ns.is_none()
    }

    /// The topic prefixes (empty: every topic).
    pub fn topics(&self) -> &[String] {
        &self.topics
    }

    /// Origin-time window, ns since the epoch (`to` exclusive).
    pub fn window(&self) -> (Option<u64>, Option<u64>) {
        (self.from_ns, self.to_ns)
    }

    /// Capture time to seek to: [`CLOCK_SLACK`] before `from`.
    pub fn seek_capture_ns(&self) -> Option<u64> {
        self.from_ns
            .map(|t| t.saturating_sub(CLOCK_SLACK.as_nanos() as u64))
    }

    /// Capture time at which reading can stop: [`CLOCK_SLACK`] after `to`.
    pub fn stop_capture_ns(&self) -> Option<u64> {
        self.to_ns
            .map(|t| t.saturating_add(CLOCK_SLACK.as_nanos() as u64))
    }

    /// Whether the record with this topic and header is selected.
    #[inline]
    pub fn selects(&self, topic: &str, header: &Header) -> bool {
        let t = header.origin_time_ns;
        if self.from_ns.is_some_and(|from| t < from) || self.to_ns.is_some_and(|to| t >= to) {
            return false;
        }
        self.topics.is_empty() || self.topics.iter().any(|p| topic.starts_with(p.as_str()))
    }

    /// The selection as a phrase for messages, times in `tz`.
    pub fn describe(&self, tz: &TimeZone) -> String {
        let mut parts = Vec::new();
        if !self.topics.is_empty() {
            parts.push(format!("topics {}", self.topics.join(",")));
        }
        if let Some(a) = self.from_ns {
            parts.push(format!("from {}", format_in_zone(a, tz)));
        }
        if let Some(b) = self.to_ns {
            parts.push(format!("to {}", format_in_zone(b, tz)));
        }
        if parts.is_empty() {
            "everything".to_owned()
        } else {
            parts.join(" ")
        }
    }
}

/// What a journal holds, for resolving times of day and for saying why a selection came out empty: bounded work
/// (the first [`JournalOverview::SAMPLE`] records and the last one), whatever the journal's size.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct JournalOverview {
    /// Records in the journal (its sequence range).
    pub records: u64,
    /// Origin time of the first tickbox frame.
    pub first_origin_ns: Option<u64>,
    /// Origin time of the last record, when it is a tickbox frame.
    pub last_origin_ns: Option<u64>,
    /// Topic prefixes up to the first `.` (`Q.`, `T.`, `G.`) among the sampled records, with their counts.
    pub prefixes: BTreeMap<String, u64>,
    /// The first few distinct topics sampled.
    pub examples: Vec<String>,
    /// Records sampled for `prefixes` (all of them for a small journal).
    pub sampled: u64,
}

impl JournalOverview {
    /// Records read from the start for topic prefixes.
    pub const SAMPLE: u64 = 100_000;
    const EXAMPLES: usize = 5;

    /// Reads the start and the end of the journal at `path`, sampling the first [`SAMPLE`](Self::SAMPLE)
    /// records for topic prefixes.
    pub fn scan(path: &Path) -> Result<JournalOverview, SelectionError> {
        Self::read(path, Self::SAMPLE)
    }

    /// Only what a replay plans with: the record count and the first and last origin times. Reads from the start
    /// only as far as the first data record (at most [`SAMPLE`](Self::SAMPLE) records), so a window of a long
    /// history in an object store fetches its first and last frames, not its first hundred thousand records;
    /// no topic is sampled ([`scan`](Self::scan) does that, for the message that says nothing matched).
    pub fn ends(path: &Path) -> Result<JournalOverview, SelectionError> {
        Self::read(path, 0)
    }

    fn read(path: &Path, sample: u64) -> Result<JournalOverview, SelectionError> {
        let mut reader = HistoryReader::open(path)?;
        let mut o = JournalOverview::default();
        reader.seek_oldest()?;
        let mut first_seq = None;
        let mut read = 0;
        while read < Self::SAMPLE && (read < sample || o.first_origin_ns.is_none()) {
            let rec = match reader.next() {
                Ok(Some(rec)) => rec,
                Ok(None) => break,
                // A ring overwritten under us: the reader moved to the oldest record, go on from there.
                Err(JournalError::Lapped { .. }) => continue,
                Err(e) => return Err(e.into()),
            };
            first_seq.get_or_insert(rec.seq);
            read += 1;
            let sampling = read <= sample;
            if sampling {
                o.sampled = read;
            }
            let Ok(m) = MessageRef::decode(rec.payload) else {
                continue;
            };
            if m.kind() == Kind::Heartbeat {
                continue;
            }
            o.first_origin_ns.get_or_insert(m.header().origin_time_ns);
            if !sampling {
                continue;
            }
            let topic = m.topic();
            let prefix = topic.find('.').map_or(topic, |i| &topic[..=i]);
            if let Some(n) = o.prefixes.get_mut(prefix) {
                *n += 1;
            } else {
                o.prefixes.insert(prefix.to_owned(), 1);
            }
            if o.examples.len() < Self::EXAMPLES && !o.examples.iter().any(|e| e == topic) {
                o.examples.push(topic.to_owned());
            }
        }
        let Some(first_seq) = first_seq else {
            return Ok(o);
        };
        // The end of the last segment (an archive's head is in its newest file).
        reader.seek_end()?;
        let end = reader.end_seq();
        o.records = end.saturating_sub(first_seq);
        if end > first_seq {
            reader.seek_seq(end - 1)?;
            if let Ok(Some(rec)) = reader.next() {
                if let Ok(m) = MessageRef::decode(rec.payload) {
                    o.last_origin_ns = Some(m.header().origin_time_ns);
                }
            }
        }
        Ok(o)
    }

    /// [`scan`](Self::scan) of several recordings, as they hold together (`replay --journal a,b`).
    pub fn scan_all(paths: &[impl AsRef<Path>]) -> Result<JournalOverview, SelectionError> {
        Self::read_all(paths, Self::SAMPLE)
    }

    /// [`ends`](Self::ends) of several recordings, as they hold together.
    pub fn ends_all(paths: &[impl AsRef<Path>]) -> Result<JournalOverview, SelectionError> {
        Self::read_all(paths, 0)
    }

    fn read_all(
        paths: &[impl AsRef<Path>],
        sample: u64,
    ) -> Result<JournalOverview, SelectionError> {
        let mut all = JournalOverview::default();
        for p in paths {
            let o = Self::read(p.as_ref(), sample)?;
            all.records += o.records;
            all.sampled += o.sampled;
            all.first_origin_ns = match (all.first_origin_ns, o.first_origin_ns) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            all.last_origin_ns = all.last_origin_ns.max(o.last_origin_ns);
            for (prefix, n) in o.prefixes {
                *all.prefixes.entry(prefix).or_insert(0) += n;
            }
            for e in o.examples {
                if all.examples.len() < Self::EXAMPLES && !all.examples.contains(&e) {
                    all.examples.push(e);
                }
            }
        }
        Ok(all)
    }

    /// One phrase: how many records, from when to when in `tz`, which topics.
    pub fn describe(&self, tz: &TimeZone) -> String {
        if self.records == 0 {
            return "the journal holds no records".to_owned();
        }
        let when = |t: Option<u64>| t.map_or_else(|| "?".to_owned(), |t| format_in_zone(t, tz));
        let prefixes: Vec<String> = self
            .prefixes
            .iter()
            .map(|(p, n)| format!("{p} ({n})"))
            .collect();
        if self.sampled == 0 {
            return format!(
                "the journal holds {} records with origin times {} .. {}",
                self.records,
                when(self.first_origin_ns),
                when(self.last_origin_ns)
            );
        }
        let sampled = if self.sampled < self.records {
            format!(" in its first {} records", self.sampled)
        } else {
            String::new()
        };
        format!(
            "the journal holds {} records with origin times {} .. {}; topic prefixes{sampled}: {}; e.g. {}",
            self.records,
            when(self.first_origin_ns),
            when(self.last_origin_ns),
            if prefixes.is_empty() {
                "none".to_owned()
            } else {
                prefixes.join(", ")
            },
            if self.examples.is_empty() {
                "-".to_owned()
            } else {
                self.examples.join(", ")
            }
        )
    }
}

/// What a replay was asked to select: topic prefixes, an origin-time window (`--from`/`--to`) or a journal
/// sequence range (`--from-seq`/`--to-seq`, used when no time is given).
#[derive(Debug, Clone, Default)]
pub struct ReplayAsk {
    /// Topic prefixes (empty: every topic).
    pub topics: Vec<String>,
    /// First origin time (inclusive).
    pub from: Option<When>,
    /// Origin time to stop before.
    pub to: Option<When>,
    /// First journal sequence.
    pub from_seq: Option<u64>,
    /// Journal sequence to stop before.
    pub to_seq: Option<u64>,
}

impl ReplayAsk {
    /// Whether it selects by topic or origin time (which needs the journal's [`JournalOverview`]).
    pub fn selects(&self) -> bool {
        self.from.is_some() || self.to.is_some() || !self.topics.is_empty()
    }
}

/// A replay's selection resolved against its journal: which records go out, where the run seeks to and stops,
/// and how to say what was asked when nothing matches.
#[derive(Debug, Clone)]
pub struct ReplayPlan {
    /// Which records go out.
    pub selection: ReplaySelection,
    /// What the journal holds (read only when selecting by topic or time).
    pub overview: Option<JournalOverview>,
    /// Where the run starts.
    pub from: Option<crate::Position>,
    /// Where it stops (exclusive).
    pub to: Option<crate::Position>,
    /// What was asked, for the empty-selection error (empty: everything).
    pub asked: String,
}

impl ReplayPlan {
    /// Reads the ends of the journal at `journal` ([`JournalOverview::ends`]) when `ask` selects by topic or time
    /// (bounded work), then plans.
    pub fn for_journal(
        journal: &Path,
        ask: &ReplayAsk,
        tz: &TimeZone,
    ) -> Result<ReplayPlan, SelectionError> {
        Self::for_journals(&[journal], ask, tz)
    }

    /// [`ReplayPlan::for_journal`] for several recordings replayed as one stream.
    pub fn for_journals(
        journals: &[impl AsRef<Path>],
        ask: &ReplayAsk,
        tz: &TimeZone,
    ) -> Result<ReplayPlan, SelectionError> {
        let overview = if ask.selects() {
            Some(JournalOverview::ends_all(journals)?)
        } else {
            None
        };
        ReplayPlan::new(ask, overview, tz)
    }

    /// Plans `ask` against `overview` (`None` when it does not select by topic or time): times of day and
    /// +DURATION are anchored on the journal's first origin time; the journal is in capture order, so a time
    /// window seeks [`CLOCK_SLACK`] before `from` and reads as far past `to`.
    pub fn new(
        ask: &ReplayAsk,
        overview: Option<JournalOverview>,
        tz: &TimeZone,
    ) -> Result<ReplayPlan, SelectionError> {
        let first = overview.as_ref().and_then(|o| o.first_origin_ns);
        let resolve = |when: &Option<When>, flag: &'static str| {
            when.as_ref()
                .map(|w| w.resolve(tz, first))
                .transpose()
                .map_err(|e| SelectionError::Flag {
                    flag,
                    source: Box::new(e.into()),
                })
        };
        let selection = ReplaySelection::new(
            ask.topics.clone(),
            resolve(&ask.from, "--from")?,
            resolve(&ask.to, "--to")?,
            tz,
        )?;
        let from = match (selection.seek_capture_ns(), ask.from_seq) {
            (Some(t), _) => Some(crate::Position::Time(t)),
            (None, Some(s)) => Some(crate::Position::Seq(s)),
            _ => None,
        };
        let to = match (selection.stop_capture_ns(), ask.to_seq) {
            (Some(t), _) => Some(crate::Position::Time(t)),
            (None, Some(s)) => Some(crate::Position::Seq(s)),
            _ => None,
        };
        let asked = match (ask.from_seq, ask.to_seq) {
            _ if ask.selects() => selection.describe(tz),
            (None, None) => String::new(),
            (a, b) => format!(
                "journal seqs {} .. {}",
                a.map_or("start".into(), |s| s.to_string()),
                b.map_or("end".into(), |s| format!("before {s}"))
            ),
        };
        Ok(ReplayPlan {
            selection,
            overview,
            from,
            to,
            asked,
        })
    }

    /// The error line when the selection cannot match anything, known before binding or waiting for
    /// subscribers: an empty journal, or a window wholly outside its origin times (give or take [`CLOCK_SLACK`]).
    pub fn outside_journal(&self, tz: &TimeZone) -> Option<String> {
        let o = self.overview.as_ref()?;
        let slack = CLOCK_SLACK.as_nanos() as u64;
        let (from_ns, to_ns) = self.selection.window();
        let after = matches!((from_ns, o.last_origin_ns), (Some(f), Some(l)) if f > l.saturating_add(slack));
        let before = matches!((to_ns, o.first_origin_ns), (Some(t), Some(f)) if t <= f.saturating_sub(slack));
        (o.records == 0 || after || before)
            .then(|| empty_selection(&self.selection.describe(tz), o, tz))
    }

    /// What the journals hold with their topics sampled ([`JournalOverview::scan_all`]), for a message that says
    /// nothing matched: planning reads only the ends, so the topics are read now unless they already were (or
    /// there are none to read).
    pub fn overview_with_topics(
        &self,
        journals: &[impl AsRef<Path>],
    ) -> Result<JournalOverview, SelectionError> {
        match &self.overview {
            Some(o) if o.sampled > 0 || o.records == 0 => Ok(o.clone()),
            _ => JournalOverview::scan_all(journals),
        }
    }

    /// [`overview_with_topics`](Self::overview_with_topics), kept as the plan's overview.
    pub fn sample_topics(&mut self, journals: &[impl AsRef<Path>]) -> Result<(), SelectionError> {
        self.overview = Some(self.overview_with_topics(journals)?);
        Ok(())
    }
}

/// The one error line of a selection that matched nothing: what was asked and what the journal holds.
pub fn empty_selection(asked: &str, overview: &JournalOverview, tz: &TimeZone) -> String {
    format!(
        "error: replay selected no record ({asked}): {}",
        overview.describe(tz)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const NY: &str = "America/New_York";
    /// 2026-11-24T14:30:00Z (09:30 in New York, EST).
    const OPEN_UTC: u64 = 1_795_530_600_000_000_000;

    fn resolve(s: &str, tz: &str, first: Option<u64>) -> Result<u64, SelectionError> {
        Ok(When::parse(s)?.resolve(&parse_zone(tz)?, first)?)
    }

    #[test]
    fn every_form_resolves() {
        assert_eq!(
            resolve("2026-11-24T14:30:00Z", "UTC", None).unwrap(),
            OPEN_UTC
        );
        assert_eq!(
            resolve("2026-11-24T09:30:00-05:00", "UTC", None).unwrap(),
            OPEN_UTC
        );
        assert_eq!(resolve("2026-11-24 09:30:00", NY, None).unwrap(), OPEN_UTC);
        assert_eq!(resolve("2026-11-24T09:30", NY, None).unwrap(), OPEN_UTC);
        assert_eq!(
            resolve("2026-11-24 14:30:00", "UTC", None).unwrap(),
            OPEN_UTC
        );
        // The journal's first record at 08:00 New York time: 09:30 is that day's open.
        let first = OPEN_UTC - 90 * 60 * 1_000_000_000;
        assert_eq!(resolve("09:30", NY, Some(first)).unwrap(), OPEN_UTC);
        assert_eq!(
            resolve("09:30:00.5", NY, Some(first)).unwrap(),
            OPEN_UTC + 500_000_000
        );
        assert_eq!(resolve("+90m", NY, Some(first)).unwrap(), OPEN_UTC);
        assert_eq!(resolve("1795530600000000000", NY, None).unwrap(), OPEN_UTC);
    }

    #[test]
    fn a_time_of_day_takes_the_first_day_in_the_zone_not_in_utc() {
        // 2026-11-25T02:00Z is still the 24th in New York (21:00 EST).
        let first = OPEN_UTC + (11 * 60 + 30) * 60 * 1_000_000_000;
        assert_eq!(resolve("09:30", NY, Some(first)).unwrap(), OPEN_UTC);
        assert_eq!(
            resolve("09:30", "UTC", Some(first)).unwrap(),
            OPEN_UTC + (19 * 60) * 60 * 1_000_000_000,
            "in UTC the first day is the 25th"
        );
    }

    #[test]
    fn dst_gaps_move_forward_and_repeated_times_take_the_earlier() {
        let s = |t: &str| resolve(t, NY, None).unwrap() / 1_000_000_000;
        // 2026-03-08 02:30 does not exist in New York (02:00 EST -> 03:00 EDT): it is read as 03:30 EDT.
        assert_eq!(s("2026-03-08 02:30"), s("2026-03-08T07:30:00Z"));
        // 2026-11-01 01:30 happens twice (EDT, then EST): the first one.
        assert_eq!(s("2026-11-01 01:30"), s("2026-11-01T05:30:00Z"));
    }

    #[test]
    fn bad_input_says_what_is_accepted() {
        for bad in [
            "09:3x",
            "tomorrow",
            "2026-11-24 25:00",
            "",
            "2026-11-24T09:30[America/New_York]",
        ] {
            let e = When::parse(bad).unwrap_err().to_string();
            assert!(e.contains("is not a time"), "{bad}: {e}");
        }
        let e = When::parse("noon").unwrap_err().to_string();
        assert!(e.contains("a time of day (09:30, 09:30:00.5)"), "{e}");
        let e = parse_zone("Mars/Olympus").unwrap_err().to_string();
        assert!(e.contains("\"Mars/Olympus\" is not a time zone"), "{e}");
        let e = resolve("09:30", NY, None).unwrap_err().to_string();
        assert!(e.contains("the journal is empty"), "{e}");
    }

    #[test]
    fn selection_by_prefix_and_origin_time() {
        let tz = TimeZone::UTC;
        let sel = ReplaySelection::new(
            vec!["Q.XNAS.".into(), "T.".into()],
            Some(100),
            Some(200),
            &tz,
        )
        .unwrap();
        let h = |origin: u64| Header {
            origin_time_ns: origin,
            ..Header::live(Kind::Quote, 1, 1, origin)
        };
        assert!(sel.selects("Q.XNAS.AAPL", &h(100)));
        assert!(sel.selects("T.XNYS.IBM", &h(199)));
        assert!(!sel.selects("Q.XNYS.IBM", &h(150)), "prefix not selected");
        assert!(!sel.selects("Q.XNAS.AAPL", &h(99)), "before from");
        assert!(!sel.selects("Q.XNAS.AAPL", &h(200)), "to is exclusive");
        assert!(!sel.selects("G.7", &h(150)), "gap notices need G.");
        assert!(!sel.is_all());
        assert!(ReplaySelection::default().is_all());
        assert!(ReplaySelection::default().selects("anything", &h(0)));
        assert!(matches!(
            ReplaySelection::new(vec![], Some(5), Some(5), &tz),
            Err(SelectionError::EmptyRange { .. })
        ));
        assert!(matches!(
            ReplaySelection::new(vec![String::new()], None, None, &tz),
            Err(SelectionError::EmptyPrefix)
        ));
    }

    #[test]
    fn formats_in_the_zone() {
        let ny = parse_zone(NY).unwrap();
        assert_eq!(format_in_zone(OPEN_UTC, &ny), "2026-11-24 09:30:00.000 EST");
        assert_eq!(
            format_in_zone(OPEN_UTC + 5_000_000, &TimeZone::UTC),
            "2026-11-24 14:30:00.005 UTC"
        );
    }

    #[test]
    fn a_plan_seeks_a_slack_early_and_refuses_windows_outside_the_journal() {
        let utc = parse_zone("UTC").unwrap();
        let overview = JournalOverview {
            records: 10,
            first_origin_ns: Some(OPEN_UTC),
            last_origin_ns: Some(OPEN_UTC + 60_000_000_000),
            ..JournalOverview::default()
        };
        let ask = ReplayAsk {
            from: Some(When::parse("+10s").unwrap()),
            to: Some(When::parse("+20s").unwrap()),
            ..ReplayAsk::default()
        };
        let plan = ReplayPlan::new(&ask, Some(overview.clone()), &utc).unwrap();
        let slack = CLOCK_SLACK.as_nanos() as u64;
        assert_eq!(
            plan.from,
            Some(crate::Position::Time(OPEN_UTC + 10_000_000_000 - slack))
        );
        assert!(plan.outside_journal(&utc).is_none());
        assert!(!plan.asked.is_empty());
        // Past the last record by more than the slack: known empty before binding.
        let late = ReplayAsk {
            from: Some(When::parse("+2m").unwrap()),
            ..ReplayAsk::default()
        };
        let plan = ReplayPlan::new(&late, Some(overview.clone()), &utc).unwrap();
        let line = plan.outside_journal(&utc).unwrap();
        assert!(
            line.starts_with("error: replay selected no record ("),
            "{line}"
        );
        // An empty journal matches nothing either; and +DURATION has no first record to count from there.
        let empty = JournalOverview::default();
        let err = ReplayPlan::new(&ask, Some(empty.clone()), &utc).unwrap_err();
        assert!(err.to_string().starts_with("--from: "), "{err}");
        let topics = ReplayAsk {
            topics: vec!["Q.".into()],
            ..ReplayAsk::default()
        };
        let plan = ReplayPlan::new(&topics, Some(empty), &utc).unwrap();
        assert!(plan.outside_journal(&utc).is_some());
        // Sequences alone: no overview needed, described as a sequence range.
        let seqs = ReplayAsk {
            from_seq: Some(5),
            to_seq: None,
            ..ReplayAsk::default()
        };
        assert!(!seqs.selects());
        let plan = ReplayPlan::new(&seqs, None, &utc).unwrap();
        assert_eq!(plan.from, Some(crate::Position::Seq(5)));
        assert_eq!(plan.to, None);
        assert_eq!(plan.asked, "journal seqs 5 .. end");
        assert!(plan.outside_journal(&utc).is_none());
        assert!(ReplayPlan::new(&ReplayAsk::default(), None, &utc)
            .unwrap()
            .asked
            .is_empty());
    }
}
