//! The one grammar of points in time (`--from`, `--to`, `catch_up_from`, the replay controller's seeks), on `jiff`.
//!
//! A time is one of
//!
//! * RFC 3339 with `Z` or an offset (`2026-11-24T14:30:00Z`, `2026-11-24T09:30:00-05:00`);
//! * a local date-time without a zone (`2026-11-24 09:30:00`, `2026-11-24T09:30`), in the chosen zone (`--tz`);
//! * a time of day (`09:30`, `09:30:00.5`), in the chosen zone on the day of a reference (a journal's first record);
//! * ns since the Unix epoch, or `+DURATION` after that reference (`+90s`, `+1h30m`).
//!
//! A local time that a DST change skips is moved forward past the gap and one it repeats is the earlier of the two
//! (the "compatible" rule of RFC 5545 and Temporal).

use std::fmt;
use std::time::Duration;

use jiff::civil;
/// Time zones by IANA name, re-exported so callers name zones without their own `jiff` dependency.
pub use jiff::tz::TimeZone;
use jiff::Timestamp;

use crate::duration::parse_duration;
use crate::UnitsError;

/// Every form a time may take, for error messages and help texts.
pub const TIME_FORMS: &str = "RFC 3339 (2026-11-24T14:30:00Z, 2026-11-24T09:30:00-05:00), a local date-time \
                              (2026-11-24 09:30:00) or a time of day (09:30, 09:30:00.5) in --tz, ns since the \
                              epoch, or +DURATION after the first record (+90s, +1h30m)";

/// A time zone by IANA name (`America/New_York`), or `UTC`.
pub fn parse_zone(name: &str) -> Result<TimeZone, UnitsError> {
    let name = name.trim();
    if name.eq_ignore_ascii_case("utc") || name == "Z" {
        return Ok(TimeZone::UTC);
    }
    TimeZone::get(name).map_err(|_| UnitsError::Zone {
        name: name.to_owned(),
    })
}

/// A parsed time; [`When::resolve`] turns it into ns since the epoch.
#[derive(Debug, Clone, PartialEq)]
pub enum When {
    /// Already absolute (RFC 3339 with an offset, or ns since the epoch).
    At(u64),
    /// This long after the reference (a journal's first record).
    AfterFirst(Duration),
    /// A wall-clock date-time in the chosen zone.
    Local(civil::DateTime),
    /// A time of day in the chosen zone, on the reference's day there.
    TimeOfDay(civil::Time),
}

impl When {
    /// Parses every form in the module documentation; the error lists them.
    pub fn parse(input: &str) -> Result<When, UnitsError> {
        let t = input.trim();
        let err = |reason: String| UnitsError::Time {
            input: input.to_owned(),
            reason,
        };
        if let Some(rest) = t.strip_prefix('+') {
            return parse_duration(rest)
                .map(When::AfterFirst)
                .map_err(|e| err(e.to_string()));
        }
        if !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit()) {
            return t
                .parse()
                .map(When::At)
                .map_err(|_| err("out of range".into()));
        }
        if let Ok(ts) = t.parse::<Timestamp>() {
            return ns_of(ts).map(When::At).map_err(err);
        }
        // A date-time with a zone name but no offset (`...[America/New_York]`) is not accepted silently in UTC.
        if t.contains('[') {
            return Err(err("give the zone with --tz, not in brackets".into()));
        }
        if t.len() > 8 && t.as_bytes().get(4) == Some(&b'-') {
            return t
                .parse::<civil::DateTime>()
                .map(When::Local)
                .map_err(|e| err(e.to_string()));
        }
        if t.contains(':') {
            return t
                .parse::<civil::Time>()
                .map(When::TimeOfDay)
                .map_err(|e| err(e.to_string()));
        }
        Err(err("not one of the forms".into()))
    }

    /// Whether resolving needs the reference (the journal's first time).
    pub fn needs_first(&self) -> bool {
        matches!(self, When::AfterFirst(_) | When::TimeOfDay(_))
    }

    /// ns since the epoch: local forms in `tz`; `first` (the reference, `None` when there is none, e.g. an empty
    /// journal) anchors `+DURATION` and times of day.
    pub fn resolve(&self, tz: &TimeZone, first: Option<u64>) -> Result<u64, UnitsError> {
        let no_first = |what: &str| UnitsError::Time {
            input: self.to_string(),
            reason: format!("{what} needs the journal's first record, and the journal is empty"),
        };
        match self {
            When::At(ns) => Ok(*ns),
            When::AfterFirst(d) => {
                let first = first.ok_or_else(|| no_first("a +DURATION time"))?;
                Ok(first.saturating_add(u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)))
            }
            When::Local(dt) => self.local(tz, *dt),
            When::TimeOfDay(time) => {
                let first = first.ok_or_else(|| no_first("a time of day"))?;
                let day = timestamp_of(first).to_zoned(tz.clone()).date();
                self.local(tz, day.to_datetime(*time))
            }
        }
    }

    fn local(&self, tz: &TimeZone, dt: civil::DateTime) -> Result<u64, UnitsError> {
        let err = |reason: String| UnitsError::Time {
            input: self.to_string(),
            reason,
        };
        let zoned = tz
            .to_ambiguous_zoned(dt)
            .compatible()
            .map_err(|e| err(e.to_string()))?;
        ns_of(zoned.timestamp()).map_err(err)
    }
}

impl std::str::FromStr for When {
    type Err = UnitsError;
    fn from_str(s: &str) -> Result<Self, UnitsError> {
        When::parse(s)
    }
}

impl fmt::Display for When {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            When::At(ns) => write!(f, "{ns}"),
            When::AfterFirst(d) => write!(f, "+{}", crate::format_duration(*d)),
            When::Local(dt) => write!(f, "{dt}"),
            When::TimeOfDay(t) => write!(f, "{t}"),
        }
    }
}

fn ns_of(ts: Timestamp) -> Result<u64, String> {
    u64::try_from(ts.as_nanosecond()).map_err(|_| "before 1970 or after 2554".to_owned())
}

fn timestamp_of(ns: u64) -> Timestamp {
    // Every u64 of ns (up to 2554) is inside jiff's range, so this never falls back.
    Timestamp::from_nanosecond(i128::from(ns)).unwrap_or(Timestamp::UNIX_EPOCH)
}

/// `ns` as a readable time in `tz`, to the millisecond, with the zone's abbreviation (`2026-11-24 09:30:00.000
/// EST`).
pub fn format_in_zone(ns: u64, tz: &TimeZone) -> String {
    timestamp_of(ns)
        .to_zoned(tz.clone())
        .strftime("%Y-%m-%d %H:%M:%S%.3f %Z")
        .to_string()
}

/// A point in time in UTC, as ns since the Unix epoch: any form of [`When`], with `reference` (called only for
/// `+DURATION` and a time of day) as the first record's time.
pub fn parse_time<E: From<UnitsError>>(
    input: &str,
    reference: impl FnOnce() -> Result<u64, E>,
) -> Result<u64, E> {
    parse_time_in(input, &TimeZone::UTC, reference)
}

/// [`parse_time`] with local date-times and times of day in `tz`.
pub fn parse_time_in<E: From<UnitsError>>(
    input: &str,
    tz: &TimeZone,
    reference: impl FnOnce() -> Result<u64, E>,
) -> Result<u64, E> {
    let when = When::parse(input)?;
    let first = if when.needs_first() {
        Some(reference()?)
    } else {
        None
    };
    Ok(when.resolve(tz, first)?)
}

/// Parses RFC 3339 (`2026-01-02T14:30:00Z`, a `.fraction` of up to nine digits, `Z` or `±HH:MM`) into ns since the
/// Unix epoch. The error says what is wrong.
pub fn parse_rfc3339(s: &str) -> Result<u64, String> {
    let ts = s.trim().parse::<Timestamp>().map_err(|e| e.to_string())?;
    ns_of(ts)
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's civil-from-days inverse).
pub fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

fn civil_from_days(z: i64) -> (i64, i64, i64) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (
        if m <= 2 {
            yoe + era * 400 + 1
        } else {
            yoe + era * 400
        },
        m,
        d,
    )
}

/// RFC 3339 in UTC with nanoseconds: `2026-01-02T14:30:00.500000000Z`.
pub fn format_rfc3339(ns: u64) -> String {
    let secs = (ns / 1_000_000_000) as i64;
    let (y, m, d) = civil_from_days(secs.div_euclid(86_400));
    let rem = secs.rem_euclid(86_400);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{:09}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60,
        ns % 1_000_000_000
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const NY: &str = "America/New_York";
    /// 2026-11-24T14:30:00Z (09:30 in New York, EST).
    const OPEN_UTC: u64 = 1_795_530_600_000_000_000;

    fn t(s: &str) -> Result<u64, UnitsError> {
        parse_time(s, || Ok::<u64, UnitsError>(1_000))
    }

    fn resolve(s: &str, tz: &str, first: Option<u64>) -> Result<u64, UnitsError> {
        When::parse(s)?.resolve(&parse_zone(tz)?, first)
    }

    #[test]
    fn parses_every_documented_form() {
        assert_eq!(t("1700000000000000000"), Ok(1_700_000_000_000_000_000));
        assert_eq!(t("1970-01-01T00:00:01Z"), Ok(1_000_000_000));
        assert_eq!(t("1970-01-01T01:00:01.5+01:00"), Ok(1_500_000_000));
        assert_eq!(t("2026-01-02T14:30:00Z"), Ok(1_767_364_200_000_000_000));
        assert_eq!(t("+1s"), Ok(1_000_001_000));
        assert_eq!(t("+1h30m"), Ok(1_000 + 5_400_000_000_000));
        // A local date-time and a time of day, in UTC for parse_time.
        assert_eq!(t("2026-01-02 14:30:00"), Ok(1_767_364_200_000_000_000));
        assert_eq!(t("00:00:01"), Ok(1_000_000_000), "on the reference's day");
    }

    #[test]
    fn every_form_resolves_in_a_zone() {
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
        let first = OPEN_UTC - 90 * 60 * 1_000_000_000;
        assert_eq!(resolve("09:30", NY, Some(first)).unwrap(), OPEN_UTC);
        assert_eq!(
            resolve("09:30:00.5", NY, Some(first)).unwrap(),
            OPEN_UTC + 500_000_000
        );
        assert_eq!(resolve("+90m", NY, Some(first)).unwrap(), OPEN_UTC);
        assert_eq!(resolve("+1h30m", NY, Some(first)).unwrap(), OPEN_UTC);
        assert_eq!(
            parse_time_in(
                "10:55:50",
                &parse_zone(NY).unwrap(),
                || Ok::<u64, UnitsError>(first)
            )
            .unwrap(),
            OPEN_UTC + (85 * 60 + 50) * 1_000_000_000
        );
    }

    #[test]
    fn errors_name_what_is_wrong() {
        assert!(t("2026-13-01T00:00:00Z").is_err());
        assert!(t("+5").is_err());
        assert!(t("1969-12-31T23:59:59Z").is_err());
        assert!(t("yesterday").is_err());
        let msg = t("2026-11-24T09:30[America/New_York]")
            .unwrap_err()
            .to_string();
        assert!(msg.contains("--tz"), "{msg}");
        assert!(parse_zone("Mars/Olympus")
            .unwrap_err()
            .to_string()
            .contains("IANA"));
        let none = When::parse("09:30").unwrap().resolve(&TimeZone::UTC, None);
        assert!(none.unwrap_err().to_string().contains("first record"));
    }

    proptest! {
        #[test]
        fn format_then_parse_is_exact(ns in 0u64..4_000_000_000_000_000_000) {
            prop_assert_eq!(parse_rfc3339(&format_rfc3339(ns)), Ok(ns));
        }

        #[test]
        fn arbitrary_text_never_panics(s in "\\PC{0,40}") {
            let _ = t(&s);
        }
    }
}
