//! The metrics of `queue --metrics` and `freelance-server --metrics`: the counters their loops already keep,
//! copied into a [`Published`] slot at most every [`tickbox_metrics::PUBLISH_EVERY`] and read at each scrape.

use tickbox_metrics::{Published, Scrape, Source};

use crate::engine::ppp::PppQueueStats;
use crate::freelance::ServerStats;

/// A slot for a Paranoid Pirate queue's counters (give it to `PppConfig::live`) and its [`Source`].
pub fn queue_metrics() -> (Published<PppQueueStats>, impl Source) {
    let live = Published::new();
    let read = live.clone();
    (live, move |out: &mut Scrape| {
        let s = read.get();
        out.counters(
            &[],
            &[
                (
                    "tickbox_requests",
                    "Well-formed client requests received (those then dropped included).",
                    s.requests,
                ),
                (
                    "tickbox_replies",
                    "Worker replies forwarded to clients.",
                    s.replies,
                ),
                (
                    "tickbox_malformed",
                    "Messages too short or with an unknown command; dropped.",
                    s.malformed,
                ),
                (
                    "tickbox_dropped",
                    "Client requests dropped because max_queued were waiting.",
                    s.dropped,
                ),
                ("tickbox_routed", "Requests handed to a worker.", s.routed),
                (
                    "tickbox_lost_with_worker",
                    "Requests lost with a busy worker that expired before replying.",
                    s.lost_with_worker,
                ),
                (
                    "tickbox_workers_seen",
                    "READYs accepted (a reconnected worker counts again).",
                    s.workers_seen,
                ),
                (
                    "tickbox_workers_expired",
                    "Workers removed after heartbeat_liveness silent intervals.",
                    s.workers_expired,
                ),
                (
                    "tickbox_workers_refused",
                    "READYs refused because max_workers were known.",
                    s.workers_refused,
                ),
            ],
        );
    })
}

/// A slot for a Freelance server's counters (give it to `FreelanceServerConfig::live`) and its [`Source`].
pub fn freelance_metrics() -> (Published<ServerStats>, impl Source) {
    let live = Published::new();
    let read = live.clone();
    (live, move |out: &mut Scrape| {
        let s = read.get();
        out.counters(
            &[],
            &[
                ("tickbox_pings", "PINGs answered with PONG.", s.pings),
                ("tickbox_requests", "Requests answered.", s.requests),
                (
                    "tickbox_malformed",
                    "Messages that were neither a PING nor a request; dropped.",
                    s.malformed,
                ),
                (
                    "tickbox_oversize",
                    "Requests or replies above max_message_size; dropped.",
                    s.oversize,
                ),
                (
                    "tickbox_dropped_full",
                    "Replies dropped because the peer's queue was full.",
                    s.dropped_full,
                ),
                (
                    "tickbox_dropped_unroutable",
                    "Replies dropped because the peer had gone.",
                    s.dropped_unroutable,
                ),
            ],
        );
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn the_sources_read_what_the_loops_published() {
        let (live, source) = queue_metrics();
        live.publish_now(&PppQueueStats {
            dropped: 3,
            ..Default::default()
        });
        let text = tickbox_metrics::render("queue", vec![Arc::new(source)]);
        assert!(
            text.contains("tickbox_dropped_total{role=\"queue\"} 3"),
            "{text}"
        );
        let (live, source) = freelance_metrics();
        live.publish_now(&ServerStats {
            dropped_full: 2,
            ..Default::default()
        });
        let text = tickbox_metrics::render("freelance-server", vec![Arc::new(source)]);
        assert!(
            text.contains("tickbox_dropped_full_total{role=\"freelance-server\"} 2"),
            "{text}"
        );
    }
}
