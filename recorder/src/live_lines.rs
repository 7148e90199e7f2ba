//! The live status lines of `tickbox record` and `tickbox replay`, from the counters their progress reports
//! carry (never read on a hot path).

use tickbox_units::{format_in_zone, format_rate, format_size_approx, TimeZone};

use crate::{RecordStats, ReplayProgress, ReplayStats};

/// `record`'s line: messages, bytes, rate, and everything missing, overwritten or invalid.
pub fn record_line(s: &RecordStats, rate: f64) -> String {
    format!(
        "{} msgs, {}, {}, missing {} in {} gap(s), overwritten {}, invalid {}",
        s.messages,
        format_size_approx(s.bytes),
        format_rate(rate),
        s.missing,
        s.gap_events,
        s.overwritten.records,
        s.invalid_frames
    )
}

/// `replay`'s line: rate, pace, what was sent and left out, the worst lateness, where in the journal (in `tz`)
/// and when it will be done.
pub fn replay_line(s: &ReplayStats, rate: f64, p: &ReplayProgress, tz: &TimeZone) -> String {
    let eta = p
        .eta
        .map_or_else(|| "-".into(), |eta| format!("{:.1}s", eta.as_secs_f64()));
    format!(
        "{}, {:.1}x real time, sent {}, not selected {}, max late {:.1}ms, at {}, ETA {eta}",
        format_rate(rate),
        p.multiple,
        s.sent,
        s.not_selected,
        s.max_late_ns as f64 / 1e6,
        s.last_capture_ns
            .map(|t| format_in_zone(t, tz))
            .unwrap_or_else(|| "-".into()),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_record_line_names_every_loss() {
        let mut s = RecordStats {
            messages: 1200,
            missing: 3,
            gap_events: 1,
            invalid_frames: 2,
            ..RecordStats::default()
        };
        s.overwritten.records = 4;
        assert_eq!(
            record_line(&s, 1500.0),
            format!(
                "1200 msgs, {}, 1.5k/s, missing 3 in 1 gap(s), overwritten 4, invalid 2",
                format_size_approx(0)
            )
        );
    }

    #[test]
    fn the_replay_line_says_dashes_before_it_knows() {
        let s = ReplayStats {
            sent: 10,
            max_late_ns: 2_500_000,
            ..ReplayStats::default()
        };
        let p = ReplayProgress {
            done: 10,
            total: 100,
            multiple: 2.0,
            eta: None,
        };
        let utc = tickbox_units::parse_zone("UTC").unwrap();
        let line = replay_line(&s, 10.0, &p, &utc);
        assert_eq!(
            line,
            "10/s, 2.0x real time, sent 10, not selected 0, max late 2.5ms, at -, ETA -"
        );
    }
}
