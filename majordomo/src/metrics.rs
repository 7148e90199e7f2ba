//! The broker's and Titanic's metrics (`broker --metrics`, `titanic --metrics`). The broker's [`BrokerStats`] are
//! copied by its loop at most every [`tickbox_metrics::PUBLISH_EVERY`] (a lock per copy, never per message) and read when Prometheus scrapes. Names follow the
//! counters: `requests_unauthorised` (answered `403 unauthorised: SERVICE`) is
//! `tickbox_requests_unauthorised_total`.

use std::sync::Arc;

use tickbox_metrics::{Published, Scrape, Source};

use crate::BrokerStats;

/// Where a broker's loop leaves its counters (`BrokerConfig::live`): see [`Published`].
pub type LiveBrokerStats = Published<BrokerStats>;

/// A slot for a broker's counters and the [`Source`] that reads it: give the first to `BrokerConfig::live`.
pub fn broker_metrics() -> (LiveBrokerStats, BrokerMetrics) {
    let live = Published::new();
    (live.clone(), BrokerMetrics { live })
}

/// The [`Source`] of a running broker (see [`LiveBrokerStats::new`]).
#[derive(Clone)]
pub struct BrokerMetrics {
    live: LiveBrokerStats,
}

impl std::fmt::Debug for BrokerMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("BrokerMetrics")
    }
}

impl Source for BrokerMetrics {
    fn collect(&self, out: &mut Scrape) {
        let s = self.live.get();
        for (service, c) in &s.by_service {
            for (status, n) in [
                ("200", c.replied),
                ("403", c.unauthorised),
                ("404", c.not_found),
                ("refused", c.refused),
                ("expired", c.expired),
            ] {
                out.counter(
                    "tickbox_service_requests_ended",
                    "Client requests by service and how they ended: 200 replied, 403 unauthorised, 404 (mmi: no \
                     such service), refused at a queue bound, expired without a worker.",
                    &[("service", service.clone()), ("status", status.to_string())],
                    n,
                );
            }
            out.counter(
                "tickbox_service_requests",
                "Client requests received, by service.",
                &[("service", service.clone())],
                c.requests,
            );
        }
        out.counters(
            &[],
            &[
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
            ],
        );
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

/// The [`Source`] of a running Titanic: its live counters (atomics its threads already keep).
#[derive(Debug)]
pub struct TitanicMetrics(pub Arc<crate::titanic::TitanicCounters>);

impl Source for TitanicMetrics {
    fn collect(&self, out: &mut Scrape) {
        use std::sync::atomic::Ordering::Relaxed;
        let c = &self.0;
        for (name, help, value) in [
            (
                "tickbox_dispatched",
                "Requests forwarded to their service, re-sends included.",
                &c.dispatched,
            ),
            (
                "tickbox_redispatched",
                "Re-sends (attempt 2 and later).",
                &c.redispatched,
            ),
            (
                "tickbox_resumed",
                "Attempts found in flight at start-up and listened for again.",
                &c.resumed,
            ),
            (
                "tickbox_failed",
                "Requests marked failed (no reply within job_timeout, attempts exhausted).",
                &c.failed,
            ),
            (
                "tickbox_undelivered",
                "Attempts the broker reported undelivered, journaled and sent again.",
                &c.undelivered,
            ),
            (
                "tickbox_replies_stored",
                "Service replies journaled.",
                &c.replies_stored,
            ),
            (
                "tickbox_malformed_replies",
                "Replies discarded as malformed.",
                &c.malformed_replies,
            ),
            (
                "tickbox_requests_refused",
                "titanic.requests refused because max_open_requests were open.",
                &c.requests_refused,
            ),
        ] {
            out.counter(name, help, &[], value.load(Relaxed));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_loop_copies_at_most_every_period_and_the_source_reads_the_copy() {
        let (live, metrics) = broker_metrics();
        let t0 = std::time::Instant::now();
        let mut s = BrokerStats {
            requests: 3,
            requests_unauthorised: 1,
            ..Default::default()
        };
        live.publish(t0, &s);
        s.requests = 4;
        live.publish(t0 + std::time::Duration::from_millis(1), &s); // too soon: not copied
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
        let titanic = TitanicMetrics(Arc::new(crate::titanic::TitanicCounters::default()));
        titanic
            .0
            .dispatched
            .fetch_add(2, std::sync::atomic::Ordering::Relaxed);
        let text = tickbox_metrics::render("titanic", vec![Arc::new(titanic)]);
        assert!(
            text.contains("tickbox_dispatched_total{role=\"titanic\"} 2"),
            "{text}"
        );
    }
}
