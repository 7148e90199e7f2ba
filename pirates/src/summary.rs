//! The end-of-run summaries of `tickbox queue` (the Paranoid Pirate queue) and `tickbox freelance-server`: what
//! each routed, refused and lost, derived from their counters so the `--json` form and the line cannot drift
//! apart.

use serde::Serialize;
use tickbox_auth::AuthSummary;

use crate::freelance::ServerStats;
use crate::PppQueueStats;

/// What a Freelance server did: its counters, and the ZAP handler's decisions only with `[security]` (without
/// it the summary stays exactly as it was).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FreelanceSummary {
    /// The counters.
    #[serde(flatten)]
    pub stats: ServerStats,
    /// What the ZAP handler decided, when anything was checked.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub auth: Option<AuthSummary>,
}

impl FreelanceSummary {
    /// The text summary: the counters on one line, then the auth line when anything was checked.
    pub fn text(&self) -> String {
        let s = &self.stats;
        let mut text = format!(
            "pings {}  requests {}  malformed {}  oversize {}  dropped_full {}  dropped_unroutable {}\n",
            s.pings, s.requests, s.malformed, s.oversize, s.dropped_full, s.dropped_unroutable
        );
        if let Some(auth) = &self.auth {
            text.push_str(&auth.line());
            text.push('\n');
        }
        text
    }
}

/// What the queue did. Fields in name order, as the `--json` object has always listed them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PppQueueSummary {
    /// The ZAP handler's decisions, only with `[security]` (without it the summary stays as it was).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub auth: Option<AuthSummary>,
    /// Requests lost because the worker holding them expired.
    pub lost_with_worker: u64,
    /// Malformed messages dropped.
    pub malformed: u64,
    /// Requests refused (backlog full, too large).
    pub refused: u64,
    /// Replies returned to clients.
    pub replies: u64,
    /// Requests received from clients.
    pub requests: u64,
    /// Requests handed to a worker.
    pub routed: u64,
    /// Workers expired for silence.
    pub workers_expired: u64,
    /// Workers refused over the worker-table bound.
    pub workers_refused: u64,
    /// Workers seen.
    pub workers_seen: u64,
}

impl PppQueueSummary {
    /// The summary of `stats`, with the ZAP handler's decisions when anything was checked.
    pub fn new(stats: &PppQueueStats, auth: Option<AuthSummary>) -> Self {
        PppQueueSummary {
            auth,
            lost_with_worker: stats.lost_with_worker,
            malformed: stats.malformed,
            refused: stats.dropped,
            replies: stats.replies,
            requests: stats.requests,
            routed: stats.routed,
            workers_expired: stats.workers_expired,
            workers_refused: stats.workers_refused,
            workers_seen: stats.workers_seen,
        }
    }

    /// The text summary: the counters on one line, then the auth line when anything was checked.
    pub fn text(&self) -> String {
        let mut text = format!(
            "requests {}  routed {}  replies {}  refused {}  lost_with_worker {}  malformed {}  workers_seen {}  \
             workers_expired {}  workers_refused {}\n",
            self.requests,
            self.routed,
            self.replies,
            self.refused,
            self.lost_with_worker,
            self.malformed,
            self.workers_seen,
            self.workers_expired,
            self.workers_refused
        );
        if let Some(auth) = &self.auth {
            text.push_str(&auth.line());
            text.push('\n');
        }
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stats() -> PppQueueStats {
        PppQueueStats {
            requests: 10,
            routed: 9,
            replies: 8,
            dropped: 1,
            lost_with_worker: 1,
            malformed: 2,
            workers_seen: 3,
            workers_expired: 1,
            workers_refused: 0,
        }
    }

    #[test]
    fn refused_is_what_the_queue_dropped_and_auth_shows_only_when_checked() {
        let summary = PppQueueSummary::new(&stats(), None);
        assert_eq!(summary.refused, 1);
        assert!(summary.text().starts_with(
            "requests 10  routed 9  replies 8  refused 1  lost_with_worker 1  malformed 2  workers_seen 3  "
        ));
        assert_eq!(summary.text().lines().count(), 1);
        let with_auth = PppQueueSummary::new(&stats(), Some(AuthSummary::default()));
        assert_eq!(with_auth.text().lines().count(), 2);
    }

    #[test]
    fn a_freelance_summary_names_every_counter_and_adds_auth_only_when_checked() {
        let summary = FreelanceSummary {
            stats: ServerStats {
                pings: 4,
                requests: 3,
                dropped_full: 1,
                ..ServerStats::default()
            },
            auth: None,
        };
        assert_eq!(
            summary.text(),
            "pings 4  requests 3  malformed 0  oversize 0  dropped_full 1  dropped_unroutable 0\n"
        );
        let json = serde_json::to_value(&summary).unwrap();
        assert_eq!(
            (json["pings"].as_u64(), json["dropped_full"].as_u64()),
            (Some(4), Some(1))
        );
        assert!(json.get("auth").is_none());
        let checked = FreelanceSummary {
            auth: Some(AuthSummary::default()),
            ..summary
        };
        assert_eq!(checked.text().lines().count(), 2);
        assert!(serde_json::to_value(&checked).unwrap()["auth"].is_object());
    }
}
