use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::UnitsError;

/// Parses `<number><unit>`: units `ns`, `us` (or `µs`), `ms`, `s`, `m` (or `min`), `h`, `d`; the number may have a
/// fraction of up to nine digits (`1.5ms`), computed exactly in integers. Several such parts in a row, largest
/// unit first and each unit once, add up: `1h30m`, `2m30s`, `1s500ms`. A bare `0` is accepted; any other bare
/// number is an error that suggests a unit.
pub fn parse_duration(input: &str) -> Result<Duration, UnitsError> {
    let err = |reason| UnitsError::Duration {
        input: input.to_owned(),
        reason,
    };
    let s = input.trim();
    if !s.is_empty() && s.bytes().all(|c| c == b'0' || c == b'.') {
        return parse_part(s, "", &err).map(|_| Duration::ZERO);
    }
    let mut rest = s;
    let mut total: u128 = 0;
    // The unit of the previous part: each part must use a smaller one (`1h30m`, never `30m1h` or `1m1m`).
    let mut previous: Option<u128> = None;
    loop {
        let split = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let (number, after) = rest.split_at(split);
        let unit_len = after
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(after.len());
        let (unit, next) = after.split_at(unit_len);
        if unit.trim().is_empty() && !number.is_empty() {
            return Err(err("a unit is needed (ns, us, ms, s, m, h, d)"));
        }
        let (nanos, unit_ns) = parse_part(number, unit.trim(), &err)?;
        if previous.is_some_and(|p| unit_ns >= p) {
            return Err(err(
                "in a compound duration each unit comes once, largest first (1h30m)",
            ));
        }
        previous = Some(unit_ns);
        total = total
            .checked_add(nanos)
            .ok_or_else(|| err("out of range"))?;
        if next.is_empty() {
            break;
        }
        rest = next;
    }
    u64::try_from(total)
        .map(Duration::from_nanos)
        .map_err(|_| err("out of range (at most about 584 years)"))
}

/// One `<number><unit>` part: its nanoseconds and the unit's.
fn parse_part(
    number: &str,
    unit: &str,
    err: &impl Fn(&'static str) -> UnitsError,
) -> Result<(u128, u128), UnitsError> {
    if number.is_empty() {
        return Err(err("expected a number first"));
    }
    let unit_ns: u128 = match unit {
        "ns" => 1,
        "us" | "µs" => 1_000,
        "ms" => 1_000_000,
        "s" => 1_000_000_000,
        "m" | "min" => 60_000_000_000,
        "h" => 3_600_000_000_000,
        "d" => 86_400_000_000_000,
        "" if number.bytes().all(|c| c == b'0' || c == b'.') => 1,
        "" => return Err(err("a unit is needed (ns, us, ms, s, m, h, d)")),
        _ => return Err(err("unknown unit")),
    };
    let (whole, frac) = number.split_once('.').unwrap_or((number, ""));
    if (whole.is_empty() && frac.is_empty()) || frac.contains('.') {
        return Err(err("malformed number"));
    }
    if frac.len() > 9 {
        return Err(err("at most nine fraction digits"));
    }
    let whole: u128 = if whole.is_empty() {
        0
    } else {
        whole.parse().map_err(|_| err("number too large"))?
    };
    let mut nanos = whole
        .checked_mul(unit_ns)
        .ok_or_else(|| err("out of range"))?;
    if !frac.is_empty() {
        let digits: u128 = frac.parse().map_err(|_| err("malformed number"))?;
        nanos = nanos
            .checked_add(digits * unit_ns / 10u128.pow(frac.len() as u32))
            .ok_or_else(|| err("out of range"))?;
    }
    Ok((nanos, unit_ns))
}

/// Formats with the largest unit that keeps three decimals: `250us`, `5ms`, `1.5s`, `2m`, `8h`. The output parses
/// back with [`parse_duration`] to within a thousandth of its unit.
pub fn format_duration(d: Duration) -> String {
    let ns = d.as_nanos();
    let (value, unit) = if ns == 0 {
        return "0s".to_owned();
    } else if ns >= 3_600_000_000_000 && ns.is_multiple_of(60_000_000_000) {
        (ns as f64 / 3.6e12, "h")
    } else if ns >= 60_000_000_000 && ns.is_multiple_of(1_000_000_000) {
        (ns as f64 / 6e10, "m")
    } else if ns >= 1_000_000_000 {
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
    type Err = UnitsError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        parse_duration(s).map(HumanDuration)
    }
}

impl TryFrom<String> for HumanDuration {
    type Error = UnitsError;
    fn try_from(s: String) -> Result<Self, Self::Error> {
        s.parse()
    }
}

impl From<HumanDuration> for String {
    fn from(d: HumanDuration) -> String {
        format_duration(d.0)
    }
}

impl From<Duration> for HumanDuration {
    fn from(d: Duration) -> Self {
        HumanDuration(d)
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
    use proptest::prelude::*;

    #[test]
    fn parses_every_documented_form() {
        let ok = |s: &str| parse_duration(s).unwrap();
        assert_eq!(ok("250us"), Duration::from_micros(250));
        assert_eq!(ok("250µs"), Duration::from_micros(250));
        assert_eq!(ok("5ms"), Duration::from_millis(5));
        assert_eq!(ok("1.5ms"), Duration::from_micros(1500));
        assert_eq!(ok(" 1s "), Duration::from_secs(1));
        assert_eq!(ok("2m"), Duration::from_secs(120));
        assert_eq!(ok("2min"), Duration::from_secs(120));
        assert_eq!(ok("1h"), Duration::from_secs(3600));
        assert_eq!(ok("8h"), Duration::from_secs(8 * 3600));
        assert_eq!(ok("1d"), Duration::from_secs(86_400));
        assert_eq!(ok("700ns"), Duration::from_nanos(700));
        assert_eq!(ok(".5s"), Duration::from_millis(500));
        assert_eq!(ok("0"), Duration::ZERO);
        assert_eq!(ok("1h30m"), Duration::from_secs(5400));
        assert_eq!(ok("2m30s"), Duration::from_secs(150));
        assert_eq!(ok("1d2h"), Duration::from_secs(93_600));
        assert_eq!(ok("1s500ms"), Duration::from_millis(1500));
        assert_eq!(ok("1h0.5m"), Duration::from_secs(3630));
        assert_eq!(ok("1min30s"), Duration::from_secs(90));
        assert_eq!(ok("1h 30m"), Duration::from_secs(5400));
    }

    #[test]
    fn refuses_garbage_and_bare_numbers_with_a_reason() {
        for bad in [
            "",
            "ms",
            "5",
            "10",
            "5 parsecs",
            "1..2s",
            "-1s",
            "1.2.3s",
            "s5",
            "1.0000000001s",
            "99999999999999999999s",
            "600000d",
            "30m1h",
            "1m1m",
            "1h30",
            "1hm",
        ] {
            assert!(parse_duration(bad).is_err(), "{bad:?} accepted");
        }
        let msg = parse_duration("5").unwrap_err().to_string();
        assert!(msg.contains("a unit is needed"), "{msg}");
        let msg = parse_duration("30m1h").unwrap_err().to_string();
        assert!(msg.contains("largest first"), "{msg}");
    }

    #[test]
    fn formats_readably() {
        assert_eq!(format_duration(Duration::from_micros(250)), "250us");
        assert_eq!(format_duration(Duration::from_millis(1500)), "1.5s");
        assert_eq!(format_duration(Duration::from_secs(120)), "2m");
        assert_eq!(format_duration(Duration::from_secs(7200)), "2h");
        assert_eq!(format_duration(Duration::ZERO), "0s");
    }

    #[test]
    fn serde_round_trip_in_toml() {
        #[derive(Serialize, Deserialize, PartialEq, Debug)]
        struct C {
            d: HumanDuration,
        }
        let c: C = toml::from_str("d = \"250us\"").unwrap();
        assert_eq!(c.d.0, Duration::from_micros(250));
        assert_eq!(toml::to_string(&c).unwrap().trim(), "d = \"250us\"");
        assert!(toml::from_str::<C>("d = \"5\"").is_err());
    }

    proptest! {
        #[test]
        fn format_then_parse_is_close(ns in 0u64..(1u64 << 62)) {
            let d = Duration::from_nanos(ns);
            let back = parse_duration(&format_duration(d)).unwrap();
            let diff = back.as_nanos().abs_diff(d.as_nanos());
            // Three decimals of the unit chosen: at most 0.05 % of the value (or 1 ns).
            prop_assert!(diff <= (d.as_nanos() / 2000).max(1), "{d:?} -> {back:?}");
        }

        #[test]
        fn arbitrary_text_never_panics(s in "\\PC{0,24}") {
            let _ = parse_duration(&s);
        }
    }
}
