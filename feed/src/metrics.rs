//! The feed's metrics (`feed --metrics`): the shards' live counters (the relaxed stores each shard makes of its
//! own totals after each send step), read when Prometheus scrapes. Names follow `feed --json`: `sent` is
//! `tickbox_sent_total`, per shard.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use tickbox_metrics::{label, Scrape, Source};

use crate::runner::{LiveCounters, ShardInfo};

/// The [`Source`] of a running feed (see [`crate::FeedHandle::metrics`]).
#[derive(Debug)]
pub struct FeedMetrics {
    pub(crate) shards: Vec<ShardInfo>,
    pub(crate) live: Vec<Arc<LiveCounters>>,
}

impl Source for FeedMetrics {
    fn collect(&self, out: &mut Scrape) {
        for (info, live) in self.shards.iter().zip(&self.live) {
            let s = live.snapshot();
            let c = &s.counts;
            let shard = [
                (label::SHARD, info.shard.to_string()),
                (label::PUBLISHER, info.publisher_id.to_string()),
            ];
            out.counters(
                &shard,
                &[
                    (
                        "tickbox_sent",
                        "Data messages sent (quotes, trades, book levels).",
                        c.data(),
                    ),
                    ("tickbox_quotes", "Quotes sent.", c.quotes),
                    ("tickbox_trades", "Trades sent.", c.trades),
                    (
                        "tickbox_book_levels",
                        "Book-level updates sent.",
                        c.book_levels,
                    ),
                    ("tickbox_heartbeats", "Heartbeats sent.", c.heartbeats),
                    (
                        "tickbox_would_block",
                        "Sends refused by a full pipe (back-pressure block) and retried.",
                        c.would_block,
                    ),
                    (
                        "tickbox_frames_sent",
                        "ZeroMQ messages sent (single frames and batches).",
                        c.frames,
                    ),
                    ("tickbox_batches_sent", "Batch frames sent.", c.batches),
                    (
                        "tickbox_batch_buffers_allocated",
                        "Batch buffers allocated because none was free.",
                        c.batch_buffers_allocated,
                    ),
                    (
                        "tickbox_single_buffers_allocated",
                        "Single frames sent from a one-off buffer because no recycled one was free.",
                        c.single_buffers_allocated,
                    ),
                ],
            );
            out.gauge(
                "tickbox_last_sequence",
                "Sequence of the last data message a shard sent.",
                &shard,
                i64::try_from(s.last_sequence).unwrap_or(i64::MAX),
            );
            out.gauge(
                "tickbox_subscriptions",
                "Net subscriptions a shard's XPUB has seen (back-pressure block or wait-for-subscribers only).",
                &shard,
                i64::try_from(s.subscriptions).unwrap_or(i64::MAX),
            );
            out.gauge(
                "tickbox_shard_finished",
                "1 once a shard has ended (limit, duration, stop or error).",
                &shard,
                i64::from(s.finished),
            );
            let pinned = live.pinned_core.load(Ordering::Relaxed);
            out.info(
                "tickbox_shard_placement",
                "Where a shard runs: its endpoint and the core its thread is pinned to (empty: not pinned).",
                &[
                    (label::SHARD, info.shard.to_string()),
                    (label::PUBLISHER, info.publisher_id.to_string()),
                    (label::ENDPOINT, info.endpoint.clone()),
                    (label::NIC, String::new()),
                    (
                        label::CORE,
                        pinned.checked_sub(1).map(|c| c.to_string()).unwrap_or_default(),
                    ),
                ],
            );
        }
    }
}
