//! The end-of-run lines of `tickbox broker` and `tickbox titanic`: what each routed, stored and refused. Beside
//! the counters so a counter added there is shown from here.

use std::sync::atomic::{AtomicU64, Ordering};

use serde::Serialize;
use tickbox_auth::AuthSummary;
use tickbox_bstar::Role;

use crate::titanic::{StoreRecovery, TitanicCounters};
use crate::BrokerStats;

/// What a broker run reports: its counters, a pair's final Binary Star state, and the ZAP handler's decisions
/// (only with `[security]`: without it the summary stays exactly as it was). Its `--json` object is the counters'
/// fields beside `binary_star_state` and `auth`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct BrokerSummary {
    /// The counters.
    #[serde(flatten)]
    pub stats: BrokerStats,
    /// The pair's state when the broker stopped (`None` for a broker alone).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub binary_star_state: Option<String>,
    /// What the ZAP handler decided, when anything was checked.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub auth: Option<AuthSummary>,
}

impl BrokerSummary {
    /// The text summary: a pair's final state, the counters' line, then the auth line.
    pub fn text(&self) -> String {
        let mut text = String::new();
        if let Some(state) = &self.binary_star_state {
            text.push_str(&format!("final binary star state: {state}\n"));
        }
        text.push_str(&self.stats.summary_line());
        text.push('\n');
        if let Some(auth) = &self.auth {
            text.push_str(&auth.line());
            text.push('\n');
        }
        text
    }
}

impl BrokerStats {
    /// One line of every counter a broker run reports.
    pub fn summary_line(&self) -> String {
        format!(
            "requests {}  replies {}  mmi {}  malformed {}  disconnects {}  workers registered {}  expired {} (at dispatch {})  requests expired {}  refused {}  requeued {}  unroutable {}  undelivered notices {}  workers refused {}  unauthorised {}  workers unauthorised {}  peak queued bytes {}",
            self.requests,
            self.replies,
            self.mmi,
            self.malformed,
            self.disconnects_sent,
            self.workers_registered,
            self.workers_expired,
            self.workers_expired_at_dispatch,
            self.requests_expired,
            self.requests_refused,
            self.requests_requeued,
            self.unroutable,
            self.undelivered_notices,
            self.workers_refused,
            self.requests_unauthorised,
            self.workers_unauthorised,
            self.queued_bytes_peak
        )
    }
}

/// Where a Binary Star broker binds its state socket when not told: loopback, the primary on 5003, the backup on
/// 5004 (the Guide's pair; a pair on two hosts says where with `--state-bind`).
pub fn default_state_bind(role: Role) -> &'static str {
    if role == Role::Primary {
        "tcp://127.0.0.1:5003"
    } else {
        "tcp://127.0.0.1:5004"
    }
}

impl TitanicCounters {
    /// One line of every counter, as read now.
    /// The counters now, for `titanic --json` (names as the fields'; integers).
    pub fn totals(&self) -> std::collections::BTreeMap<&'static str, u64> {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        std::collections::BTreeMap::from([
            ("dispatched", get(&self.dispatched)),
            ("redispatched", get(&self.redispatched)),
            ("undelivered", get(&self.undelivered)),
            ("resumed", get(&self.resumed)),
            ("failed", get(&self.failed)),
            ("replies_stored", get(&self.replies_stored)),
            ("malformed_replies", get(&self.malformed_replies)),
            ("requests_refused", get(&self.requests_refused)),
        ])
    }

    /// One line of every counter.
    pub fn summary_line(&self) -> String {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        format!(
            "dispatched {}  redispatched {}  undelivered (sent again) {}  resumed {}  failed {}  replies stored {}  malformed replies {}  requests refused {}",
            get(&self.dispatched),
            get(&self.redispatched),
            get(&self.undelivered),
            get(&self.resumed),
            get(&self.failed),
            get(&self.replies_stored),
            get(&self.malformed_replies),
            get(&self.requests_refused)
        )
    }
}

impl StoreRecovery {
    /// The line `tickbox titanic` says once it serves: what it recovered from the journal in `dir`.
    pub fn ready_line(&self, dir: &std::path::Path) -> String {
        format!(
            "titanic ready: {} open requests ({} awaiting a reply) recovered from {}; {} of them were dispatched \
             before the restart",
            self.open_requests,
            self.pending_requests,
            dir.display(),
            self.dispatched_requests
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_broker_line_names_each_counter_once() {
        let stats = BrokerStats {
            requests: 5,
            workers_expired: 2,
            workers_expired_at_dispatch: 1,
            queued_bytes_peak: 640,
            ..BrokerStats::default()
        };
        let line = stats.summary_line();
        assert!(line.starts_with("requests 5  replies 0  "));
        assert!(line.contains("expired 2 (at dispatch 1)"));
        assert!(line.ends_with("peak queued bytes 640"));
    }

    #[test]
    fn the_titanic_line_reads_the_counters_now() {
        let counters = TitanicCounters::default();
        counters.dispatched.store(3, Ordering::Relaxed);
        counters.requests_refused.store(1, Ordering::Relaxed);
        let line = counters.summary_line();
        assert!(line.starts_with("dispatched 3  redispatched 0  "));
        assert!(line.ends_with("requests refused 1"));
    }

    #[test]
    fn a_brokers_summary_shows_its_pair_state_first_and_its_auth_only_when_checked() {
        let summary = BrokerSummary {
            stats: BrokerStats {
                requests: 5,
                ..BrokerStats::default()
            },
            binary_star_state: Some("Active".into()),
            auth: None,
        };
        let text = summary.text();
        assert!(
            text.starts_with("final binary star state: Active\nrequests 5  "),
            "{text}"
        );
        assert_eq!(text.lines().count(), 2);
        let json = serde_json::to_value(&summary).unwrap();
        assert_eq!(json["requests"], 5);
        assert_eq!(json["binary_star_state"], "Active");
        assert!(json.get("auth").is_none());
        let alone = BrokerSummary {
            binary_star_state: None,
            auth: Some(AuthSummary::default()),
            ..summary
        };
        assert!(alone.text().starts_with("requests 5  "));
        assert_eq!(
            alone.text().lines().count(),
            2,
            "the counters and the auth line"
        );
        let json = serde_json::to_value(&alone).unwrap();
        assert!(json.get("binary_star_state").is_none());
        assert!(json["auth"].is_object());
    }

    #[test]
    fn titanic_says_what_it_recovered() {
        let rec = StoreRecovery {
            open_requests: 4,
            pending_requests: 3,
            dispatched_requests: 1,
            ..StoreRecovery::default()
        };
        assert_eq!(
            rec.ready_line(std::path::Path::new("/var/titanic")),
            "titanic ready: 4 open requests (3 awaiting a reply) recovered from /var/titanic; 1 of them were \
             dispatched before the restart"
        );
    }

    #[test]
    fn a_pair_binds_its_state_on_the_guides_ports() {
        assert_eq!(default_state_bind(Role::Primary), "tcp://127.0.0.1:5003");
        assert_eq!(default_state_bind(Role::Backup), "tcp://127.0.0.1:5004");
    }
}
