//! The end-of-run lines of `tickbox broker` and `tickbox titanic`: what each routed, stored and refused. Beside
//! the counters so a counter added there is shown from here.

use std::sync::atomic::{AtomicU64, Ordering};

use tickbox_bstar::Role;

use crate::titanic::TitanicCounters;
use crate::BrokerStats;

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
    fn a_pair_binds_its_state_on_the_guides_ports() {
        assert_eq!(default_state_bind(Role::Primary), "tcp://127.0.0.1:5003");
        assert_eq!(default_state_bind(Role::Backup), "tcp://127.0.0.1:5004");
    }
}
