//! Calendar days in a time zone, for date partitions: which day a capture time falls on, computed once per day
//! (a range check per row, not a time-zone conversion).

use jiff::tz::TimeZone;
use jiff::Timestamp;

/// Days in one zone, with the last day looked up remembered.
#[derive(Debug, Clone)]
pub struct Days {
    tz: TimeZone,
    /// `[start, end)` of the day last looked up, and its label.
    cached: Option<(u64, u64, String)>,
}

fn ts(ns: u64) -> Timestamp {
    Timestamp::from_nanosecond(i128::from(ns)).unwrap_or(Timestamp::UNIX_EPOCH)
}

fn ns(t: Timestamp) -> u64 {
    u64::try_from(t.as_nanosecond()).unwrap_or(0)
}

impl Days {
    /// Days in `tz` (UTC for research datasets that mix venues; a venue's zone for its trading days).
    pub fn new(tz: TimeZone) -> Days {
        Days { tz, cached: None }
    }

    /// The zone.
    pub fn zone(&self) -> &TimeZone {
        &self.tz
    }

    fn lookup(&mut self, t: u64) -> &(u64, u64, String) {
        let hit = matches!(&self.cached, Some((a, b, _)) if (*a..*b).contains(&t));
        if !hit {
            let zoned = ts(t).to_zoned(self.tz.clone());
            let date = zoned.date();
            let start = date.to_zoned(self.tz.clone()).map_or(t, |z| {
                ns(z.start_of_day().map_or(z.timestamp(), |s| s.timestamp()))
            });
            let end = date
                .tomorrow()
                .ok()
                .and_then(|d| d.to_zoned(self.tz.clone()).ok())
                .and_then(|z| z.start_of_day().ok())
                .map_or(u64::MAX, |z| ns(z.timestamp()));
            self.cached = Some((start, end.max(t + 1), date.to_string()));
        }
        // Filled just above when it did not hold `t`.
        self.cached.as_ref().unwrap_or_else(|| unreachable!())
    }

    /// The day `t` (ns since the epoch) falls on: `(start of the day in ns, end)`.
    pub fn day_of(&mut self, t: u64) -> (u64, u64) {
        let (a, b, _) = self.lookup(t);
        (*a, *b)
    }

    /// The day's label, `YYYY-MM-DD`.
    pub fn label(&mut self, t: u64) -> String {
        self.lookup(t).2.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn days_in_utc_and_new_york() {
        let t = tickbox_units::parse_rfc3339("2026-01-02T23:30:00Z").unwrap();
        let mut utc = Days::new(TimeZone::UTC);
        assert_eq!(utc.label(t), "2026-01-02");
        let (a, b) = utc.day_of(t);
        assert_eq!(b - a, 86_400_000_000_000);
        assert_eq!(utc.label(b), "2026-01-03");
        let mut ny = Days::new(TimeZone::get("America/New_York").unwrap());
        assert_eq!(ny.label(t), "2026-01-02");
        let late = tickbox_units::parse_rfc3339("2026-01-03T06:00:00Z").unwrap();
        assert_eq!(ny.label(late), "2026-01-03");
        assert_eq!(ny.label(late - 2 * 3_600_000_000_000), "2026-01-02");
    }
}
