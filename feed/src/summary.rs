//! What `tickbox feed` prints with `--json` and publishes on its status board, as `Serialize` types built from
//! the feed's reports, and the one rule that says why messages still queued at a close were dropped (`feed`,
//! `feed --source` and `replay` all print it).

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Serialize;

use crate::runner::{FeedHandle, FeedReport, PublisherShardReport};
use crate::source::{SourceStats, SourceTotals};

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// `tickbox feed --json`: the synthetic feed's summary; every count an integer, `target_rate` null when none was
/// asked (`max`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FeedSummary {
    /// Data messages over all shards.
    pub sent: u64,
    /// The rate asked for, msg/s.
    pub target_rate: Option<u64>,
    /// Sum of the shards' achieved rates, msg/s.
    pub achieved_rate: u64,
    /// Achieved less than [`crate::RATE_SHORTFALL_RATIO`] of the target.
    pub rate_shortfall: bool,
    /// Heartbeats over all shards.
    pub heartbeats: u64,
    /// Sends refused by a full pipe, over all shards.
    pub would_block: u64,
    /// ZeroMQ messages sent (single frames and batches).
    pub frames_sent: u64,
    /// Of those, batch frames.
    pub batches_sent: u64,
    /// Batch buffers allocated because none was free.
    pub batch_buffers_allocated: u64,
    /// Single frames sent from a one-off buffer because none of the recycled ones was free.
    pub single_buffers_allocated: u64,
    /// Messages abandoned on full no-drop pipes at the end.
    pub unsent: u64,
    /// Subscribers still connected when their shard closed.
    pub subscribers_at_close: u64,
    /// Messages still queued in libzmq at the close (dropped).
    pub undelivered: u64,
    /// Messages sent while no shard ever had a subscriber, when every shard connects (a feed connected to
    /// nothing); 0 otherwise.
    pub delivered_to_nobody: u64,
    /// Per shard.
    pub shards: Vec<FeedShardSummary>,
}

/// One shard of [`FeedSummary`].
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FeedShardSummary {
    /// Shard index.
    pub shard: usize,
    /// Its publisher id.
    pub publisher_id: u32,
    /// Its endpoint (wildcards resolved).
    pub endpoint: String,
    /// Symbols it publishes.
    pub symbols: usize,
    /// Data messages.
    pub sent: u64,
    /// Quotes.
    pub quotes: u64,
    /// Trades.
    pub trades: u64,
    /// Book levels.
    pub book_levels: u64,
    /// Heartbeats.
    pub heartbeats: u64,
    /// Sends refused by a full pipe.
    pub would_block: u64,
    /// ZeroMQ messages sent.
    pub frames_sent: u64,
    /// Of those, batch frames.
    pub batches_sent: u64,
    /// Batch buffers allocated because none was free.
    pub batch_buffers_allocated: u64,
    /// Single frames sent from a one-off buffer because none of the recycled ones was free.
    pub single_buffers_allocated: u64,
    /// Last data sequence.
    pub last_sequence: u64,
    /// Time it ran, ns.
    pub duration_ns: u64,
    /// Time the pacer skipped (behind schedule), ns.
    pub skipped_ns: u64,
    /// Start of its schedule, ns.
    pub schedule_start_ns: u64,
    /// Messages abandoned on a full no-drop pipe at the end.
    pub unsent: u64,
    /// Subscribers still connected at its close.
    pub subscribers_at_close: u64,
    /// Messages still queued at its close (dropped).
    pub undelivered: u64,
    /// Achieved rate, msg/s.
    pub achieved_rate: u64,
}

impl FeedSummary {
    /// The summary of `report`.
    pub fn new(report: &FeedReport) -> Self {
        let sum = |f: fn(&PublisherShardReport) -> u64| report.shards.iter().map(f).sum::<u64>();
        FeedSummary {
            sent: report.total_data(),
            target_rate: report.target_rate,
            achieved_rate: report.total_rate().round() as u64,
            rate_shortfall: report.rate_shortfall().is_some(),
            heartbeats: sum(|s| s.counts.heartbeats),
            would_block: sum(|s| s.counts.would_block),
            frames_sent: sum(|s| s.counts.frames),
            batches_sent: sum(|s| s.counts.batches),
            batch_buffers_allocated: sum(|s| s.counts.batch_buffers_allocated),
            single_buffers_allocated: sum(|s| s.counts.single_buffers_allocated),
            unsent: report.total_unsent(),
            subscribers_at_close: report.total_subscribers_at_close(),
            undelivered: report.total_undelivered(),
            delivered_to_nobody: report.delivered_to_nobody().unwrap_or(0),
            shards: report
                .shards
                .iter()
                .map(|s| FeedShardSummary {
                    shard: s.shard,
                    publisher_id: s.publisher_id,
                    endpoint: s.endpoint.clone(),
                    symbols: s.symbols,
                    sent: s.counts.data(),
                    quotes: s.counts.quotes,
                    trades: s.counts.trades,
                    book_levels: s.counts.book_levels,
                    heartbeats: s.counts.heartbeats,
                    would_block: s.counts.would_block,
                    frames_sent: s.counts.frames,
                    batches_sent: s.counts.batches,
                    batch_buffers_allocated: s.counts.batch_buffers_allocated,
                    single_buffers_allocated: s.counts.single_buffers_allocated,
                    last_sequence: s.last_sequence,
                    duration_ns: nanos(s.duration),
                    skipped_ns: nanos(s.skipped),
                    schedule_start_ns: s.schedule_start_ns,
                    unsent: s.unsent,
                    subscribers_at_close: s.subscribers_at_close,
                    undelivered: s.undelivered,
                    achieved_rate: s.rate().round() as u64,
                })
                .collect(),
        }
    }
}

/// `tickbox feed --source --json`: what a replay of a recording did.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SourceSummary {
    /// The recording's path.
    pub source: String,
    /// What it is (`dbn`, `journal`).
    pub form: String,
    /// The speed asked for (`1x`, `max`).
    pub speed: String,
    /// Items read.
    pub read: u64,
    /// Records published.
    pub published: u64,
    /// Items skipped, all reasons.
    pub skipped: u64,
    /// Items skipped, by reason.
    pub skipped_by_reason: BTreeMap<String, u64>,
    /// Read to its end.
    pub complete: bool,
    /// First record sent to last, ns.
    pub elapsed_ns: u64,
    /// Records per second.
    pub achieved_rate: u64,
    /// Subscribers still connected at the close.
    pub subscribers_at_close: u64,
    /// Records still queued at the close (dropped).
    pub undelivered: u64,
    /// Per shard.
    pub shards: Vec<SourceShardSummary>,
}

/// One shard of [`SourceSummary`].
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SourceShardSummary {
    /// Shard index.
    pub shard: usize,
    /// Its publisher id.
    pub publisher_id: u32,
    /// Its endpoint (wildcards resolved).
    pub endpoint: String,
    /// Data messages.
    pub sent: u64,
    /// Quotes.
    pub quotes: u64,
    /// Trades.
    pub trades: u64,
    /// Book levels.
    pub book_levels: u64,
    /// Heartbeats.
    pub heartbeats: u64,
    /// Sends refused by a full pipe.
    pub would_block: u64,
    /// ZeroMQ messages that carried data: single frames plus batch frames.
    pub frames: u64,
    /// Of `frames`, batch frames (each carrying two or more records, to readers that opted in).
    pub batches: u64,
    /// Last data sequence.
    pub last_sequence: u64,
    /// Subscribers still connected at its close.
    pub subscribers_at_close: u64,
    /// Records still queued at its close (dropped).
    pub undelivered: u64,
}

impl SourceSummary {
    /// The summary of `report` (a report of [`crate::SourceFeed`], `None` for a synthetic one), publishing
    /// `source` (its path) of `form`.
    pub fn new(report: &FeedReport, source: &str, form: &str) -> Option<Self> {
        let totals: &SourceTotals = report.source.as_ref()?;
        Some(SourceSummary {
            source: source.to_owned(),
            form: form.to_owned(),
            speed: totals.speed.to_string(),
            read: totals.read,
            published: totals.published,
            skipped: totals.total_skipped(),
            skipped_by_reason: totals.skipped.clone(),
            complete: totals.complete,
            elapsed_ns: nanos(totals.elapsed),
            achieved_rate: totals.rate().round() as u64,
            subscribers_at_close: report.total_subscribers_at_close(),
            undelivered: report.total_undelivered(),
            shards: report
                .shards
                .iter()
                .map(|s| SourceShardSummary {
                    shard: s.shard,
                    publisher_id: s.publisher_id,
                    endpoint: s.endpoint.clone(),
                    sent: s.counts.data(),
                    quotes: s.counts.quotes,
                    trades: s.counts.trades,
                    book_levels: s.counts.book_levels,
                    heartbeats: s.counts.heartbeats,
                    would_block: s.counts.would_block,
                    frames: s.counts.frames,
                    batches: s.counts.batches,
                    last_sequence: s.last_sequence,
                    subscribers_at_close: s.subscribers_at_close,
                    undelivered: s.undelivered,
                })
                .collect(),
        })
    }
}

/// What a running synthetic feed publishes on the status board.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FeedStatus {
    /// Always `feed`.
    pub component: &'static str,
    /// Always `running`.
    pub state: &'static str,
    /// Per shard.
    pub shards: Vec<FeedShardStatus>,
}

/// One shard of [`FeedStatus`].
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FeedShardStatus {
    /// Shard index.
    pub shard: usize,
    /// Its publisher id.
    pub publisher_id: u32,
    /// Its endpoint.
    pub endpoint: String,
    /// Symbols it publishes.
    pub symbols: usize,
    /// Quotes so far.
    pub quotes: u64,
    /// Trades so far.
    pub trades: u64,
    /// Heartbeats so far.
    pub heartbeats: u64,
    /// Last data sequence.
    pub last_sequence: u64,
    /// The shard has ended.
    pub finished: bool,
}

impl FeedStatus {
    /// The live state of `feed`.
    pub fn of(feed: &FeedHandle) -> Self {
        FeedStatus {
            component: "feed",
            state: "running",
            shards: feed
                .shards()
                .iter()
                .zip(feed.stats())
                .map(|(info, stats)| FeedShardStatus {
                    shard: info.shard,
                    publisher_id: info.publisher_id,
                    endpoint: info.endpoint.clone(),
                    symbols: info.symbols,
                    quotes: stats.counts.quotes,
                    trades: stats.counts.trades,
                    heartbeats: stats.counts.heartbeats,
                    last_sequence: stats.last_sequence,
                    finished: stats.finished,
                })
                .collect(),
        }
    }
}

/// What a running `feed --source` publishes on the status board.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SourceStatus {
    /// Always `feed`.
    pub component: &'static str,
    /// Always `running`.
    pub state: &'static str,
    /// The recording's path.
    pub source: String,
    /// Items read so far.
    pub read: u64,
    /// Records published so far.
    pub published: u64,
    /// Items skipped so far.
    pub skipped: u64,
}

impl SourceStatus {
    /// The live state of a `feed --source` run whose counters are `s`, publishing `source` (its path).
    pub fn of(s: SourceStats, source: &str) -> Self {
        SourceStatus {
            component: "feed",
            state: "running",
            source: source.to_owned(),
            read: s.read,
            published: s.published,
            skipped: s.skipped,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shard(shard: usize, undelivered: u64) -> PublisherShardReport {
        PublisherShardReport {
            shard,
            publisher_id: 100 + shard as u32,
            endpoint: format!("tcp://127.0.0.1:{}", 5000 + shard),
            symbols: 3,
            counts: crate::PublisherCounts {
                quotes: 10,
                trades: 5,
                heartbeats: 2,
                ..crate::PublisherCounts::default()
            },
            last_sequence: 15,
            duration: Duration::from_secs(1),
            skipped: Duration::ZERO,
            schedule_start_ns: 0,
            unsent: 0,
            subscribers_at_close: 1,
            undelivered,
            subscribed: None,
        }
    }

    #[test]
    fn summaries_add_up_the_shards() {
        let report = FeedReport {
            shards: vec![shard(0, 1), shard(1, 2)],
            target_rate: Some(1000),
            source: None,
        };
        let s = FeedSummary::new(&report);
        assert_eq!((s.sent, s.heartbeats, s.undelivered), (30, 4, 3));
        assert_eq!((s.achieved_rate, s.rate_shortfall), (30, true));
        assert_eq!(s.shards[1].sent, 15);
        assert_eq!(s.shards[1].duration_ns, 1_000_000_000);
        assert!(SourceSummary::new(&report, "x.dbn", "dbn").is_none());
        let report = FeedReport {
            source: Some(SourceTotals {
                speed: tickbox_units::Speed::Max,
                read: 40,
                published: 30,
                skipped: BTreeMap::from([("DBN mbo: no tickbox equivalent".to_owned(), 10)]),
                elapsed: Duration::from_secs(2),
                complete: true,
            }),
            target_rate: None,
            ..report
        };
        let s = SourceSummary::new(&report, "x.dbn", "dbn").unwrap();
        assert_eq!(
            (s.read, s.published, s.skipped, s.undelivered),
            (40, 30, 10, 3)
        );
        assert_eq!(
            (s.speed.as_str(), s.achieved_rate, s.elapsed_ns),
            ("max", 15, 2_000_000_000)
        );
        assert_eq!(s.shards[0].subscribers_at_close, 1);
    }
}
