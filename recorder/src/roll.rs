//! When a recording starts a new journal of its history, and what that journal is called.
//!
//! A [`Roll`] cuts the stream into trading periods by capture time: `daily` at a local time of day in an IANA zone
//! (a period runs from one day's roll time to the next day's: 17:00 New York to 17:00 New York, 23 or 25 hours
//! across a daylight-saving change), `hourly` at the top of each local hour, or by size (a new journal once the
//! current one holds that many bytes of records). A period is named by its start, in its zone, so names sort in
//! time order and say what they hold: `2026-11-24` (daily), `2026-11-24T09-0500` (hourly: the UTC offset tells
//! the two 01:00 hours of a November night apart), `2026-11-24T143005.123456Z` (size: the first record's capture
//! time, UTC).
//!
//! Everything here is a pure function of a capture time, so rolls are tested with made-up times (a test clock).

use std::fmt;

use jiff::civil;
use jiff::{Timestamp, ToSpan, Zoned};

use tickbox_units::{parse_zone, TimeZone};

/// How a history is cut into journals.
#[derive(Debug, Clone, PartialEq)]
pub enum Roll {
    /// One journal per day, from `at` (local time in `tz`) to the same time the next day.
    Daily {
        /// The local time of day a period starts at.
        at: civil::Time,
        /// The zone `at` is in.
        tz: TimeZone,
    },
    /// One journal per local hour of `tz`.
    Hourly {
        /// The zone whose hours cut the periods.
        tz: TimeZone,
    },
    /// A new journal once the current one holds this many bytes of records.
    Size(u64),
}

/// Why a roll specification does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RollError {
    /// Not `daily`, `hourly` or a size.
    #[error("--roll {0:?}: use daily, hourly or a size such as 64MiB")]
    Kind(String),
    /// A roll size too small to hold a record.
    #[error("--roll {0}: a size roll needs at least 64KiB")]
    TooSmall(String),
    /// `--roll-at` is not a time of day.
    #[error("--roll-at {0:?} is not a time of day (17:00, 09:30:00)")]
    At(String),
    /// `--roll-tz` names no zone.
    #[error(
        "--roll-tz {0:?} is not a time zone: use an IANA name such as America/New_York, or UTC"
    )]
    Zone(String),
    /// `--roll-at` or `--roll-tz` given with a size roll, which has neither.
    #[error("--roll-at and --roll-tz apply to daily and hourly rolls, not to --roll {0}")]
    NotTimed(String),
}

/// The smallest size roll: a journal must hold at least a few records.
pub const MIN_ROLL_SIZE: u64 = 64 << 10;

/// One period of a history.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Period {
    /// The journal's name in the history directory.
    pub name: String,
    /// When the period starts, ns since the epoch (a size period: its first record's capture time).
    pub start_ns: u64,
    /// When the next period starts (`None`: a size period ends when it is full).
    pub end_ns: Option<u64>,
}

impl Roll {
    /// Parses `--roll` (`daily`, `hourly`, a size) with `--roll-at` (default midnight) and `--roll-tz` (default
    /// UTC).
    pub fn parse(spec: &str, at: Option<&str>, tz: Option<&str>) -> Result<Roll, RollError> {
        let spec = spec.trim();
        let zone = || match tz {
            None => Ok(TimeZone::UTC),
            Some(name) => parse_zone(name).map_err(|_| RollError::Zone(name.to_owned())),
        };
        match spec.to_ascii_lowercase().as_str() {
            "daily" => {
                let at = match at {
                    None => civil::Time::midnight(),
                    Some(text) => text
                        .trim()
                        .parse::<civil::Time>()
                        .map_err(|_| RollError::At(text.to_owned()))?,
                };
                Ok(Roll::Daily { at, tz: zone()? })
            }
            "hourly" => {
                if let Some(text) = at {
                    return Err(RollError::At(format!(
                        "{text} (an hourly roll is at the top of each hour)"
                    )));
                }
                Ok(Roll::Hourly { tz: zone()? })
            }
            _ => {
                let bytes = tickbox_units::parse_size(spec)
                    .map_err(|_| RollError::Kind(spec.to_owned()))?;
                if at.is_some() || tz.is_some() {
                    return Err(RollError::NotTimed(spec.to_owned()));
                }
                if bytes < MIN_ROLL_SIZE {
                    return Err(RollError::TooSmall(spec.to_owned()));
                }
                Ok(Roll::Size(bytes))
            }
        }
    }

    /// The period a record captured at `capture_ns` belongs to.
    pub fn period_of(&self, capture_ns: u64) -> Period {
        let at = zoned(capture_ns, &TimeZone::UTC);
        match self {
            Roll::Daily { at: time, tz } => {
                let here = at.with_time_zone(tz.clone());
                let today = start_on(here.date(), *time, tz);
                let start = if here < today {
                    start_on(here.date().yesterday().unwrap_or(here.date()), *time, tz)
                } else {
                    today
                };
                let end = start_on(start.date().tomorrow().unwrap_or(start.date()), *time, tz);
                Period {
                    name: start.strftime("%Y-%m-%d").to_string(),
                    start_ns: ns_of(&start),
                    end_ns: Some(ns_of(&end)),
                }
            }
            Roll::Hourly { tz } => {
                let here = at.with_time_zone(tz.clone());
                // The start of the local hour: minutes, seconds and fractions off (an offset of a whole number of
                // minutes that is not hours, as in India, still starts local hours where the zone says).
                let into_hour = i64::from(here.minute()) * 60_000_000_000
                    + i64::from(here.second()) * 1_000_000_000
                    + i64::from(here.subsec_nanosecond());
                let start = here
                    .checked_sub(into_hour.nanoseconds())
                    .unwrap_or_else(|_| here.clone());
                let end = start
                    .checked_add(1.hour())
                    .unwrap_or_else(|_| start.clone());
                Period {
                    name: start.strftime("%Y-%m-%dT%H%z").to_string(),
                    start_ns: ns_of(&start),
                    end_ns: Some(ns_of(&end)),
                }
            }
            Roll::Size(_) => Period {
                name: at.strftime("%Y-%m-%dT%H%M%S%.6fZ").to_string(),
                start_ns: capture_ns,
                end_ns: None,
            },
        }
    }

    /// Whether a record captured at `capture_ns`, arriving in `current` which holds `bytes` of records, starts a
    /// new journal.
    pub fn due(&self, current: &Period, capture_ns: u64, bytes: u64) -> bool {
        match (self, current.end_ns) {
            (Roll::Size(limit), _) => bytes >= *limit,
            (_, Some(end)) => capture_ns >= end,
            // A timed period always has an end; a clock set back never rolls backwards.
            (_, None) => false,
        }
    }

    /// The byte limit of a size roll.
    pub fn size(&self) -> Option<u64> {
        match self {
            Roll::Size(n) => Some(*n),
            _ => None,
        }
    }
}

impl fmt::Display for Roll {
    /// The form [`Roll::parse`] reads back: `daily at 17:00 America/New_York`, `hourly UTC`, `size 64MiB`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let zone = |tz: &TimeZone| tz.iana_name().unwrap_or("UTC").to_owned();
        match self {
            Roll::Daily { at, tz } => {
                write!(f, "daily at {} {}", at.strftime("%H:%M:%S"), zone(tz))
            }
            Roll::Hourly { tz } => write!(f, "hourly {}", zone(tz)),
            Roll::Size(n) => write!(f, "size {n}"),
        }
    }
}

impl Roll {
    /// Reads back what [`fmt::Display`] wrote (the history directory keeps its roll that way).
    pub fn from_description(text: &str) -> Result<Roll, RollError> {
        let words: Vec<&str> = text.split_whitespace().collect();
        match words.as_slice() {
            ["daily", "at", at, tz] => Roll::parse("daily", Some(at), Some(tz)),
            ["hourly", tz] => Roll::parse("hourly", None, Some(tz)),
            ["size", size] => Roll::parse(size, None, None),
            _ => Err(RollError::Kind(text.to_owned())),
        }
    }
}

fn zoned(ns: u64, tz: &TimeZone) -> Zoned {
    // Every u64 of ns (up to 2554) is inside jiff's range, so this never falls back.
    Timestamp::from_nanosecond(i128::from(ns))
        .unwrap_or(Timestamp::UNIX_EPOCH)
        .to_zoned(tz.clone())
}

fn ns_of(z: &Zoned) -> u64 {
    u64::try_from(z.timestamp().as_nanosecond()).unwrap_or(0)
}

/// `time` on `date` in `tz` (a time a spring-forward skips is taken as the first instant after the gap).
fn start_on(date: civil::Date, time: civil::Time, tz: &TimeZone) -> Zoned {
    tz.to_ambiguous_zoned(date.to_datetime(time))
        .compatible()
        .unwrap_or_else(|_| zoned(0, tz))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ns(rfc3339: &str) -> u64 {
        u64::try_from(rfc3339.parse::<Timestamp>().unwrap().as_nanosecond()).unwrap()
    }

    #[test]
    fn a_daily_roll_at_five_pm_in_new_york_names_each_session_by_its_start() {
        let roll = Roll::parse("daily", Some("17:00"), Some("America/New_York")).unwrap();
        // 16:59:59.999 EST on the 24th is the session that started at 17:00 on the 23rd.
        let p = roll.period_of(ns("2026-11-24T21:59:59.999Z"));
        assert_eq!(p.name, "2026-11-23");
        assert_eq!(p.end_ns, Some(ns("2026-11-24T22:00:00Z")));
        assert!(!roll.due(&p, ns("2026-11-24T21:59:59.999999999Z"), 0));
        assert!(roll.due(&p, ns("2026-11-24T22:00:00Z"), 0));
        let next = roll.period_of(ns("2026-11-24T22:00:00Z"));
        assert_eq!(
            (next.name.as_str(), next.start_ns),
            ("2026-11-24", ns("2026-11-24T22:00:00Z"))
        );
        // Across the end of daylight saving (1 November 2026) the session is 25 hours long.
        let p = roll.period_of(ns("2026-10-31T22:00:00Z"));
        assert_eq!(p.name, "2026-10-31");
        assert_eq!(
            p.end_ns.unwrap() - p.start_ns,
            25 * 3_600_000_000_000,
            "17:00 EDT to 17:00 EST"
        );
    }

    #[test]
    fn an_hourly_roll_tells_the_two_one_oclocks_of_a_november_night_apart() {
        let roll = Roll::parse("hourly", None, Some("America/New_York")).unwrap();
        let first = roll.period_of(ns("2026-11-01T05:30:00Z"));
        let second = roll.period_of(ns("2026-11-01T06:30:00Z"));
        assert_eq!(first.name, "2026-11-01T01-0400");
        assert_eq!(second.name, "2026-11-01T01-0500");
        assert_eq!(first.end_ns, Some(second.start_ns));
        assert!(first.name < second.name, "names sort in time order");
        // UTC by default; minutes and seconds are cut off.
        let roll = Roll::parse("hourly", None, None).unwrap();
        let p = roll.period_of(ns("2026-11-24T14:59:59.5Z"));
        assert_eq!(p.name, "2026-11-24T14+0000");
        assert_eq!(p.start_ns, ns("2026-11-24T14:00:00Z"));
    }

    #[test]
    fn a_size_roll_cuts_when_full_and_is_named_by_its_first_record() {
        let roll = Roll::parse("64MiB", None, None).unwrap();
        let p = roll.period_of(ns("2026-11-24T14:30:05.123456789Z"));
        assert_eq!(p.name, "2026-11-24T143005.123456Z");
        assert_eq!(p.end_ns, None);
        assert!(!roll.due(&p, u64::MAX, (64 << 20) - 1));
        assert!(roll.due(&p, 0, 64 << 20));
    }

    #[test]
    fn bad_specifications_say_what_is_wrong_and_the_description_reads_back() {
        assert!(matches!(
            Roll::parse("weekly", None, None),
            Err(RollError::Kind(_))
        ));
        assert!(matches!(
            Roll::parse("1KiB", None, None),
            Err(RollError::TooSmall(_))
        ));
        assert!(matches!(
            Roll::parse("daily", Some("25:00"), None),
            Err(RollError::At(_))
        ));
        assert!(matches!(
            Roll::parse("daily", None, Some("Mars/Olympus")),
            Err(RollError::Zone(_))
        ));
        assert!(matches!(
            Roll::parse("1GiB", Some("17:00"), None),
            Err(RollError::NotTimed(_))
        ));
        for roll in [
            Roll::parse("daily", Some("17:00"), Some("America/New_York")).unwrap(),
            Roll::parse("hourly", None, Some("Asia/Kolkata")).unwrap(),
            Roll::parse("64MiB", None, None).unwrap(),
        ] {
            assert_eq!(
                Roll::from_description(&roll.to_string()).unwrap(),
                roll,
                "{roll}"
            );
        }
    }
}
