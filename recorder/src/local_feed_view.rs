//! What the journal reader of a backtest (`tickbox replay --local`) met, for its summary: laps, a read error,
//! damaged ranges skipped and the gap notices given for them.

use serde_json::Value;

use crate::LocalFeedReport;

impl LocalFeedReport {
    /// Adds what the reader met to a summary object.
    pub fn add_to_json(&self, v: &mut Value) {
        v["lapped"] = self.lapped.into();
        v["read_error"] = self.read_error.clone().into();
        v["damaged_ranges"] = self.damaged_ranges.into();
        v["corrupt_records"] = self.corrupt_records.into();
        v["corrupt_bytes"] = self.corrupt_bytes.into();
        v["damage_gap_notices"] = self.damage_gap_notices.into();
    }

    /// The stderr line on the damage skipped, when there was any.
    pub fn damage_line(&self) -> Option<String> {
        (self.damaged_ranges > 0).then(|| {
            format!(
                "replay: the journal is damaged: {} record(s) ({} bytes) in {} damaged range(s) were skipped, {} \
                 gap notice(s) given the Black Box for them; every intact record was processed (tickbox journal \
                 verify lists the ranges)",
                self.corrupt_records,
                self.corrupt_bytes,
                self.damaged_ranges,
                self.damage_gap_notices
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn damage_is_said_only_when_there_was_some() {
        assert_eq!(LocalFeedReport::default().damage_line(), None);
        let read = LocalFeedReport {
            damaged_ranges: 2,
            corrupt_records: 5,
            corrupt_bytes: 640,
            damage_gap_notices: 3,
            read_error: Some("gone".into()),
            ..LocalFeedReport::default()
        };
        let line = read.damage_line().unwrap();
        assert!(
            line.starts_with(
                "replay: the journal is damaged: 5 record(s) (640 bytes) in 2 damaged range(s)"
            ),
            "{line}"
        );
        let mut v = serde_json::json!({});
        read.add_to_json(&mut v);
        assert_eq!(v["damaged_ranges"], 2);
        assert_eq!(v["read_error"], "gone");
        assert_eq!(v["lapped"], 0);
    }
}
