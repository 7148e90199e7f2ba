//! The broker's metrics (`broker --metrics`): its [`BrokerStats`], copied by the broker's loop at most every
//! [`PUBLISH_EVERY`] (a lock per copy, never per message) and read when Prometheus scrapes. Names follow the
//! counters: `requests_unauthorised` (answered `403 unauthorised: SERVICE`) is
//! `tickbox_requests_unauthorised_total`.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tickbox_metrics::{Scrape, Source};

use crate::BrokerStats;

/// How often the loop copies its counters out: a scrape sees them at most this old (and exact once idle).
pub const PUBLISH_EVERY: Duration = Duration::from_millis(50);

#[derive(Default)]
struct Cell {
    stats: BrokerStats,
    last: Option<Instant>,
}

/// Where a broker's loop leaves its counters (`BrokerConfig::live`); [`LiveBrokerStats::default`] is nowhere.
/// It is plumbing, not configuration: two of them always compare equal.
#[derive(Clone, Default)]
pub struct LiveBrokerStats(Option<Arc<Mutex<Cell>>>);

impl std::fmt::Debug for LiveBrokerStats {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() {
            "LiveBrokerStats(on)"
        } else {
            "LiveBrokerStats(off)"
        })
    }
}

impl PartialEq for LiveBrokerStats {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl Eq for LiveBrokerStats {}

impl LiveBrokerStats {
    /// A slot the broker fills, with the [`Source`] that reads it.
    pub fn new() -> (LiveBrokerStats, BrokerMetrics) {
        let cell = Arc::new(Mutex::new(Cell::default()));
        (
            LiveBrokerStats(Some(Arc::clone(&cell))),
            BrokerMetrics { cell },
        )
    }

    /// Copies `stats` out if the last copy is older than [`PUBLISH_EVERY`] (called by the loop on each turn).
    pub fn publish(&self, now: Instant, stats: &BrokerStats) {
        let Some(cell) = &self.0 else { return };
        let mut c = cell.lock().unwrap_or_else(|p| p.into_inner());
        if c.last
            .is_none_or(|t| now.duration_since(t) >= PUBLISH_EVERY)
        {
            c.stats = stats.clone();
            c.last = Some(now);
        }
    }

    /// Copies `stats` out now (the final counts).
    pub fn publish_now(&self, stats: &BrokerStats) {
        if let Some(cell) = &self.0 {
            cell.lock().unwrap_or_else(|p| p.into_inner()).stats = stats.clone();
        }
    }
}

/// The [`Source`] of a running broker (see [`LiveBrokerStats::new`]).
#[derive(Clone)]
pub struct BrokerMetrics {
    cell: Arc<Mutex<Cell>>,
}

impl std::fmt::Debug for BrokerMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("BrokerMetrics")
    }
}

impl Source for BrokerMetrics {
    fn collect(&self, out: &mut Scrape) {
        let s = self
            .cell
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .stats
            .clone();
        for (name, help, value) in [
            (
                "tickbox_requests",
                "Client requests received, MMI queries included.",
                s.requests,
            ),
            (
                "tickbox_replies",
                "Final replies forwarded to clients.",
                s.replies,
            ),
            (
                "tickbox_partials",
                "Partial replies from MDP 0.2 workers.",
                s.partials,
            ),
            (
                "tickbox_mmi",
                "mmi.* queries answered by the broker.",
                s.mmi,
            ),
            (
                "tickbox_malformed",
                "Messages dropped as malformed.",
                s.malformed,
            ),
            (
                "tickbox_disconnects_sent",
                "DISCONNECTs sent (protocol violations, dead busy workers).",
                s.disconnects_sent,
            ),
            (
                "tickbox_workers_registered",
                "Workers that sent READY.",
                s.workers_registered,
            ),
            (
                "tickbox_workers_expired",
                "Workers forgotten (silent, too long busy, or gone).",
                s.workers_expired,
            ),
            (
                "tickbox_workers_refused",
                "READYs refused because max_workers were registered.",
                s.workers_refused,
            ),
            (
                "tickbox_requests_requeued",
                "Requests put back because their worker's connection was gone.",
                s.requests_requeued,
            ),
            (
                "tickbox_unroutable",
                "Messages for a peer whose connection was gone; dropped.",
                s.unroutable,
            ),
            (
                "tickbox_undelivered_notices",
                "Undelivered notices sent to clients.",
                s.undelivered_notices,
            ),
            (
                "tickbox_requests_expired",
                "Queued requests dropped after request_expiry without a worker.",
                s.requests_expired,
            ),
            (
                "tickbox_requests_refused",
                "Requests refused by a queue bound (max_queued_per_service, max_queued_bytes).",
                s.requests_refused,
            ),
            (
                "tickbox_requests_unauthorised",
                "Requests answered 403 unauthorised: SERVICE ([security] services).",
                s.requests_unauthorised,
            ),
        ] {
            out.counter(name, help, &[], value);
        }
        out.gauge(
            "tickbox_queued_bytes",
            "Bytes charged to queued requests now.",
            &[],
            i64::try_from(s.queued_bytes).unwrap_or(i64::MAX),
        );
        out.gauge(
            "tickbox_queued_bytes_peak",
            "The most bytes queued requests have held.",
            &[],
            i64::try_from(s.queued_bytes_peak).unwrap_or(i64::MAX),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_loop_copies_at_most_every_period_and_the_source_reads_the_copy() {
        let (live, metrics) = LiveBrokerStats::new();
        let t0 = Instant::now();
        let mut s = BrokerStats {
            requests: 3,
            requests_unauthorised: 1,
            ..Default::default()
        };
        live.publish(t0, &s);
        s.requests = 4;
        live.publish(t0 + Duration::from_millis(1), &s); // too soon: not copied
        let text = tickbox_metrics::render("broker", vec![Arc::new(metrics.clone())]);
        assert!(
            text.contains("tickbox_requests_total{role=\"broker\"} 3"),
            "{text}"
        );
        assert!(
            text.contains("tickbox_requests_unauthorised_total{role=\"broker\"} 1"),
            "{text}"
        );
        live.publish_now(&s);
        let text = tickbox_metrics::render("broker", vec![Arc::new(metrics)]);
        assert!(
            text.contains("tickbox_requests_total{role=\"broker\"} 4"),
            "{text}"
        );
        assert_eq!(LiveBrokerStats::default(), live);
    }
}
