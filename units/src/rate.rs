use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::UnitsError;

/// A message rate: so many per second, or as fast as possible.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Rate {
    /// Messages per second (at least 1).
    PerSecond(u64),
    /// No pacing: as fast as the path takes them.
    Max,
}

/// Largest accepted rate: far above any real link, low enough that pacing arithmetic in ns cannot overflow.
const MAX_PER_SECOND: f64 = 1e12;

impl Rate {
    /// Messages per second, `None` for [`Rate::Max`].
    pub fn per_second(self) -> Option<u64> {
        match self {
            Rate::PerSecond(n) => Some(n),
            Rate::Max => None,
        }
    }
}

impl FromStr for Rate {
    type Err = UnitsError;
    /// Accepts `50000`, `100k`, `1.5m`, `2M`, `1g`, `1_000_000`, `200k/s`, `max`.
    fn from_str(input: &str) -> Result<Self, UnitsError> {
        let err = |reason| UnitsError::Rate {
            input: input.to_owned(),
            reason,
        };
        let t = input.trim().replace('_', "").to_ascii_lowercase();
        if t == "max" {
            return Ok(Rate::Max);
        }
        let t = t.strip_suffix("/s").unwrap_or(&t);
        let (number, scale) = match t.chars().last() {
            Some('k') => (&t[..t.len() - 1], 1e3),
            Some('m') => (&t[..t.len() - 1], 1e6),
            Some('g') => (&t[..t.len() - 1], 1e9),
            _ => (t, 1.0),
        };
        if number.is_empty() || !number.bytes().all(|b| b.is_ascii_digit() || b == b'.') {
            return Err(err("expected a number with optional k, m or g"));
        }
        let value: f64 = number.parse().map_err(|_| err("malformed number"))?;
        let per_second = (value * scale).round();
        if !(1.0..=MAX_PER_SECOND).contains(&per_second) {
            return Err(err("out of range (1 to 1e12 per second)"));
        }
        Ok(Rate::PerSecond(per_second as u64))
    }
}

impl fmt::Display for Rate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Rate::Max => f.write_str("max"),
            Rate::PerSecond(n) => write!(f, "{n}"),
        }
    }
}

impl Serialize for Rate {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            Rate::PerSecond(n) => serializer.serialize_u64(*n),
            Rate::Max => serializer.serialize_str("max"),
        }
    }
}

impl<'de> Deserialize<'de> for Rate {
    /// A TOML integer, float or string in the [`FromStr`] grammar.
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Repr {
            Int(u64),
            Float(f64),
            Text(String),
        }
        let text = match Repr::deserialize(deserializer)? {
            Repr::Int(n) => n.to_string(),
            Repr::Float(x) => x.to_string(),
            Repr::Text(s) => s,
        };
        text.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_documented_form() {
        let ok = |s: &str| s.parse::<Rate>().unwrap();
        assert_eq!(ok("50000"), Rate::PerSecond(50_000));
        assert_eq!(ok("100k"), Rate::PerSecond(100_000));
        assert_eq!(ok("1.5m"), Rate::PerSecond(1_500_000));
        assert_eq!(ok("2M"), Rate::PerSecond(2_000_000));
        assert_eq!(ok("1g"), Rate::PerSecond(1_000_000_000));
        assert_eq!(ok("1_000_000"), Rate::PerSecond(1_000_000));
        assert_eq!(ok("200k/s"), Rate::PerSecond(200_000));
        assert_eq!(ok("MAX"), Rate::Max);
        assert_eq!(ok("max").per_second(), None);
    }

    #[test]
    fn refuses_garbage() {
        for bad in [
            "", "k", "0", "-5", "1e3", "fast", "2t", "1.5.5k", "1e13", "0.4",
        ] {
            assert!(bad.parse::<Rate>().is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn toml_takes_numbers_and_strings() {
        #[derive(Deserialize, Serialize)]
        struct C {
            rate: Rate,
        }
        assert_eq!(
            toml::from_str::<C>("rate = 100000").unwrap().rate,
            Rate::PerSecond(100_000)
        );
        assert_eq!(
            toml::from_str::<C>("rate = \"1.5m\"").unwrap().rate,
            Rate::PerSecond(1_500_000)
        );
        assert_eq!(
            toml::from_str::<C>("rate = \"max\"").unwrap().rate,
            Rate::Max
        );
        assert!(toml::from_str::<C>("rate = \"soon\"").is_err());
    }
}
