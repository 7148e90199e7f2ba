//! One grammar for the quantities people type into tickbox flags and config files, so `--timeout 1h`, `--duration
//! 1h` and `max_lateness = "1h"` all mean the same thing and fail the same way.
//!
//! | quantity | accepted | examples |
//! |---|---|---|
//! | [duration](parse_duration) | a number (fraction allowed) and a unit `ns us µs ms s m min h d`, or several largest first; a bare `0` | `250us`, `1.5s`, `2m`, `1h30m` |
//! | [rate](Rate) | messages per second, with optional `k m g` (×1e3, ×1e6, ×1e9), `_` separators and `/s`; or `max` | `50000`, `100k`, `1.5m`, `200k/s`, `max` |
//! | [size](parse_size) | bytes, with optional `k m g t` / `KiB MiB GiB TiB` (all powers of 1024) | `4096`, `64k`, `512MiB`, `4G` |
//! | [speed](Speed) | `max`, or a positive factor of the recorded pacing, with an optional `x` | `1`, `10x`, `0.5`, `max` |
//! | [time](When) | RFC 3339, a local date-time or a time of day in a zone, ns since the Unix epoch, or `+DURATION` after a reference | `2026-01-02T14:30:00.5Z`, `2026-01-02 09:30`, `09:30`, `+90s` |
//!
//! A bare number is refused as a duration (except `0`): `--max-lateness 5` is more likely a typo for `5ms` than a
//! wish for five seconds, so it is an error with a hint instead of a guess.

#![deny(missing_docs)]

mod duration;
mod live_text;
mod pace;
mod rate;
mod size;
mod time;

pub use duration::{format_duration, parse_duration, HumanDuration};
pub use live_text::{format_ns_short, format_rate, RateMeter};
pub use pace::{Pace, ReplayPacer, Speed};
pub use rate::Rate;
pub use size::{format_size, format_size_approx, parse_size, ByteSize};
pub use time::{
    days_from_civil, format_in_zone, format_rfc3339, parse_rfc3339, parse_time, parse_time_in,
    parse_zone, TimeZone, When, TIME_FORMS,
};

/// A flag given on the command line wins over its config key: `field` takes `flag`'s value when there is one and
/// keeps the config's otherwise. Every component's flags-over-config step uses it, so "given" means the same
/// everywhere.
#[inline]
pub fn override_with<T>(field: &mut T, flag: Option<T>) {
    if let Some(value) = flag {
        *field = value;
    }
}

/// Why a quantity was rejected. Each message names the input and shows what would have been accepted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UnitsError {
    /// Not a duration.
    #[error("invalid duration {input:?}: {reason} (e.g. 250us, 5ms, 1.5s, 2m, 1h)")]
    Duration {
        /// What was given.
        input: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// Not a rate.
    #[error("invalid rate {input:?}: {reason} (e.g. 50000, 100k, 1.5m, max)")]
    Rate {
        /// What was given.
        input: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// Not a size.
    #[error("invalid size {input:?}: {reason} (e.g. 4096, 64k, 512MiB, 4G)")]
    Size {
        /// What was given.
        input: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// Not a replay speed.
    #[error("invalid speed {input:?}: {reason} (e.g. max, 1, 10x, 0.5)")]
    Speed {
        /// What was given.
        input: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// Not a time.
    #[error("{input:?} is not a time: {reason}")]
    Time {
        /// What was given.
        input: String,
        /// What is wrong with it.
        reason: String,
    },
    /// Not a time zone of the time-zone database.
    #[error("{name:?} is not a time zone: use an IANA name such as America/New_York, Europe/London or UTC")]
    Zone {
        /// The name as given.
        name: String,
    },
}
