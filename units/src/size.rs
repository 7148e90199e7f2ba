use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::UnitsError;

/// Parses a byte count: `1073741824`, `64k`, `512MiB`, `1GiB`, `4G`. `k m g t`, `kb mb gb tb` and `KiB MiB GiB
/// TiB` (any case) are all powers of 1024: journals and buffers are sized in pages, never in powers of ten.
pub fn parse_size(input: &str) -> Result<u64, UnitsError> {
    let err = |reason| UnitsError::Size {
        input: input.to_owned(),
        reason,
    };
    let t = input.trim().replace('_', "");
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (number, unit) = t.split_at(split);
    if number.is_empty() {
        return Err(err("expected a whole number first"));
    }
    let n: u64 = number.parse().map_err(|_| err("number too large"))?;
    let shift = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 0,
        "k" | "kb" | "kib" => 10,
        "m" | "mb" | "mib" => 20,
        "g" | "gb" | "gib" => 30,
        "t" | "tb" | "tib" => 40,
        _ => return Err(err("unknown unit (k, M, G, T or KiB, MiB, GiB, TiB)")),
    };
    n.checked_mul(1u64 << shift)
        .ok_or_else(|| err("out of range"))
}

/// Formats with the largest binary unit that divides it exactly: `4096` → `4KiB`, `1073741824` → `1GiB`.
pub fn format_size(bytes: u64) -> String {
    for (shift, unit) in [(40, "TiB"), (30, "GiB"), (20, "MiB"), (10, "KiB")] {
        if bytes != 0 && bytes.is_multiple_of(1u64 << shift) {
            return format!("{}{unit}", bytes >> shift);
        }
    }
    bytes.to_string()
}

/// Formats for people, rounded to two decimals in the largest binary unit not above it: `1536` → `1.50 KiB`,
/// `512` → `512 B`. Lossy; use [`format_size`] where the text must parse back.
pub fn format_size_approx(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = bytes as f64;
    let mut u = 0;
    while v >= 1024.0 && u < UNITS.len() - 1 {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{bytes} B")
    } else {
        format!("{v:.2} {}", UNITS[u])
    }
}

/// A byte count that reads as an integer or a [`parse_size`] string and writes as an integer (TOML-friendly).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct ByteSize(pub u64);

impl FromStr for ByteSize {
    type Err = UnitsError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        parse_size(s).map(ByteSize)
    }
}

impl fmt::Display for ByteSize {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&format_size(self.0))
    }
}

impl Serialize for ByteSize {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_u64(self.0)
    }
}

impl<'de> Deserialize<'de> for ByteSize {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Repr {
            Int(u64),
            Text(String),
        }
        match Repr::deserialize(deserializer)? {
            Repr::Int(n) => Ok(ByteSize(n)),
            Repr::Text(s) => s.parse().map_err(serde::de::Error::custom),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_documented_form() {
        assert_eq!(parse_size("1073741824"), Ok(1 << 30));
        assert_eq!(parse_size("64k"), Ok(64 << 10));
        assert_eq!(parse_size("512MiB"), Ok(512 << 20));
        assert_eq!(parse_size("1GiB"), Ok(1 << 30));
        assert_eq!(parse_size("4G"), Ok(4 << 30));
        assert_eq!(parse_size("2tb"), Ok(2 << 40));
        assert_eq!(parse_size("1_024"), Ok(1024));
    }

    #[test]
    fn refuses_garbage_and_overflow() {
        for bad in [
            "",
            "k",
            "1.5G",
            "-1",
            "12 parsecs",
            "99999999999T",
            "18446744073709551616",
        ] {
            assert!(parse_size(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn formats_with_the_largest_exact_unit() {
        assert_eq!(format_size(4096), "4KiB");
        assert_eq!(format_size(1 << 30), "1GiB");
        assert_eq!(format_size(1000), "1000");
        assert_eq!(format_size(0), "0");
        for n in [0, 1, 4096, 3 << 20, (1 << 40) + 1024] {
            assert_eq!(parse_size(&format_size(n)), Ok(n));
        }
    }
}
