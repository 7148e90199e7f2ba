//! Human durations for thresholds and run lengths: `250us`, `5ms`, `1s`, `1.5s`, `2m`.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// Why a duration string was rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid duration {input:?}: expected a number and a unit (ns, us, ms, s, m), e.g. 250us, 5ms, 1s")]
pub struct DurationError {
    pub input: String,
}

/// Parses `<number><unit>` where the unit is `ns`, `us` (or `µs`), `ms`, `s` or `m`; the number may have a
/// fraction (`1.5ms`). A bare `0` is accepted.
pub fn parse_duration(input: &str) -> Result<Duration, DurationError> {
    let err = || DurationError {
        input: input.to_owned(),
    };
    let s = input.trim();
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (number, unit) = s.split_at(split);
    let unit_ns: u128 = match unit.trim() {
        "ns" => 1,
        "us" | "µs" => 1_000,
        "ms" => 1_000_000,
        "s" => 1_000_000_000,
        "m" => 60_000_000_000,
        "" if number.chars().all(|c| c == '0') && !number.is_empty() => 1,
        _ => return Err(err()),
    };
    let (whole, frac) = match number.split_once('.') {
        Some((w, f)) => (w, f),
        None => (number, ""),
    };
    if (whole.is_empty() && frac.is_empty()) || frac.contains('.') || frac.len() > 9 {
        return Err(err());
    }
    let whole: u128 = if whole.is_empty() {
        0
    } else {
        whole.parse().map_err(|_| err())?
    };
    let mut nanos = whole.checked_mul(unit_ns).ok_or_else(err)?;
    if !frac.is_empty() {
        let digits: u128 = frac.parse().map_err(|_| err())?;
        let scale = 10u128.pow(frac.len() as u32);
        nanos = nanos
            .checked_add(digits * unit_ns / scale)
            .ok_or_else(err)?;
    }
    u64::try_from(nanos)
        .map(Duration::from_nanos)
        .map_err(|_| err())
}

/// Formats with the largest unit that keeps it exact-ish: `250us`, `5ms`, `1s`, `1.5s`.
pub fn format_duration(d: Duration) -> String {
    let ns = d.as_nanos();
    let (value, unit) = if ns >= 1_000_000_000 {
        (ns as f64 / 1e9, "s")
    } else if ns >= 1_000_000 {
        (ns as f64 / 1e6, "ms")
    } else if ns >= 1_000 {
        (ns as f64 / 1e3, "us")
    } else {
        (ns as f64, "ns")
    };
    let text = format!("{value:.3}");
    let text = text.trim_end_matches('0').trim_end_matches('.');
    format!("{text}{unit}")
}

/// A [`Duration`] that reads and writes as a human string in config files and on the command line.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize, Deserialize,
)]
#[serde(try_from = "String", into = "String")]
pub struct HumanDuration(pub Duration);

impl FromStr for HumanDuration {
    type Err = DurationError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        parse_duration(s).map(HumanDuration)
    }
}

impl TryFrom<String> for HumanDuration {
    type Error = DurationError;
    fn try_from(s: String) -> Result<Self, Self::Error> {
        s.parse()
    }
}

impl From<HumanDuration> for String {
    fn from(d: HumanDuration) -> String {
        format_duration(d.0)
    }
}

impl fmt::Display for HumanDuration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&format_duration(self.0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_documented_forms() {
        assert_eq!(parse_duration("250us"), Ok(Duration::from_micros(250)));
        assert_eq!(parse_duration("250µs"), Ok(Duration::from_micros(250)));
        assert_eq!(parse_duration("5ms"), Ok(Duration::from_millis(5)));
        assert_eq!(parse_duration("1s"), Ok(Duration::from_secs(1)));
        assert_eq!(parse_duration("1.5ms"), Ok(Duration::from_micros(1500)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("700ns"), Ok(Duration::from_nanos(700)));
        assert_eq!(parse_duration("0"), Ok(Duration::ZERO));
    }

    #[test]
    fn rejects_garbage() {
        for bad in [
            "",
            "ms",
            "5",
            "5 parsecs",
            "1..2s",
            "-1s",
            "1.2.3s",
            "99999999999999999999s",
            "s5",
        ] {
            assert!(parse_duration(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn round_trips_through_text() {
        for text in ["250us", "5ms", "1s", "1.5s", "700ns"] {
            let d: HumanDuration = text.parse().unwrap();
            assert_eq!(d.to_string(), text);
        }
    }
}
