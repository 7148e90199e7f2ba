//! A running feed as the `feed` command's control loop drives it: the synthetic market ([`Feed`](crate::Feed)) or
//! a recording (`feed --source`, [`SourceFeed`](crate::SourceFeed)), behind one face: the start lines, the status
//! object, the live line, the warnings that come with time, and what the finished feed leaves for its summary and
//! its close.

use std::time::{Duration, Instant};

use serde::Serialize;
use tickbox_units::{format_rate, HumanDuration, RateMeter};

use crate::{
    CloseLoss, FeedConfig, FeedError, FeedHandle, FeedReport, FeedStatus, FeedSummary, ShardInfo,
    ShardStats, SourceFeedHandle, SourceStats, SourceStatus, SourceSummary, INTERRUPT_GRACE,
};

/// A running feed: the synthetic market (or the pathological pattern), or a recording.
pub enum RunningFeed {
    /// The synthetic market.
    Synthetic {
        /// The running shards.
        feed: FeedHandle,
        /// Whether each shard (by index) connects rather than binds.
        connects: Vec<bool>,
        /// When connecting shards with no subscriber are said to send into nothing; `None` once said.
        warn_at: Option<Instant>,
        /// How long after the start that is.
        warn_after: Duration,
    },
    /// `feed --source`: a recording (DBN or journal) on the feed's shards.
    Recording {
        /// The running replay of the recording.
        feed: SourceFeedHandle,
        /// The `--source` path as given, for the status and the summary.
        path: String,
        /// `dbn` or `journal`.
        form: &'static str,
    },
}

/// What the status board publishes for a running feed (`tickbox.feed.status`).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub enum RunningStatus {
    /// The synthetic market's shards.
    Synthetic(FeedStatus),
    /// A recording's progress.
    Recording(SourceStatus),
}

/// The `--json` summary of a finished feed.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub enum RunSummary {
    /// The synthetic market's.
    Synthetic(FeedSummary),
    /// A recording's.
    Recording(SourceSummary),
}

/// What a finished feed leaves for its summary and its close.
#[derive(Debug)]
pub struct FeedEnding {
    /// The shards' report (its `Display` is the summary table).
    pub report: FeedReport,
    /// The `--json` summary; `None` when a recording's report lacks its source totals.
    pub summary: Option<RunSummary>,
    /// Messages the shards still held when they closed (dropped and counted).
    pub undelivered: u64,
    /// Messages sent while no shard had a subscription all run long, when that is an error for this feed.
    pub delivered_to_nobody: Option<u64>,
}

impl RunningFeed {
    /// The synthetic market's `feed`, whose shards connect or bind as `connects` says (by index); connecting
    /// shards still without a subscriber `warn_after` the start are warned about once.
    pub fn synthetic(feed: FeedHandle, connects: Vec<bool>, warn_after: Duration) -> Self {
        RunningFeed::Synthetic {
            feed,
            connects,
            warn_at: Some(Instant::now() + warn_after),
            warn_after,
        }
    }

    /// The shards, as bound or connected.
    pub fn shards(&self) -> &[ShardInfo] {
        match self {
            RunningFeed::Synthetic { feed, .. } => feed.shards(),
            RunningFeed::Recording { feed, .. } => feed.shards(),
        }
    }

    /// One line per shard for scripts and tests: `feed shard N publisher ID symbols N endpoint EP` (`source dbn`
    /// instead of the symbols for a recording).
    pub fn start_lines(&self) -> Vec<String> {
        (self.shards().iter())
            .map(|shard| {
                let publishes = match self {
                    RunningFeed::Synthetic { .. } => format!("symbols {}", shard.symbols),
                    RunningFeed::Recording { form, .. } => format!("source {form}"),
                };
                format!(
                    "feed shard {} publisher {} {publishes} endpoint {}",
                    shard.shard, shard.publisher_id, shard.endpoint
                )
            })
            .collect()
    }

    /// Whether every shard has ended.
    pub fn is_finished(&self) -> bool {
        match self {
            RunningFeed::Synthetic { feed, .. } => feed.is_finished(),
            RunningFeed::Recording { feed, .. } => feed.is_finished(),
        }
    }

    /// Asks every shard to stop.
    pub fn stop(&self) {
        match self {
            RunningFeed::Synthetic { feed, .. } => feed.stop(),
            RunningFeed::Recording { feed, .. } => feed.stop(),
        }
    }

    /// The object for the status board.
    pub fn status(&self) -> RunningStatus {
        match self {
            RunningFeed::Synthetic { feed, .. } => RunningStatus::Synthetic(FeedStatus::of(feed)),
            RunningFeed::Recording { feed, path, .. } => {
                RunningStatus::Recording(SourceStatus::of(feed.stats(), path))
            }
        }
    }

    /// The live status line, from the shards' published counters (summed here, never on their threads).
    pub fn live_line(&self, rate: &mut RateMeter) -> String {
        match self {
            RunningFeed::Synthetic { feed, .. } => synthetic_line(&feed.stats(), rate),
            RunningFeed::Recording { feed, .. } => recording_line(&feed.stats(), rate),
        }
    }

    /// The warnings due by `now`: once, the connecting shards nothing has subscribed to.
    pub fn warnings(&mut self, now: Instant) -> Vec<String> {
        let RunningFeed::Synthetic {
            feed,
            connects,
            warn_at,
            warn_after,
        } = self
        else {
            return Vec::new();
        };
        if warn_at.is_none_or(|at| now < at) {
            return Vec::new();
        }
        *warn_at = None;
        unsubscribed_warnings(feed.shards(), &feed.stats(), connects, *warn_after)
    }

    /// What an error of the shards is said under: `feed shard failed`, `feed --source PATH`.
    pub fn failure_context(&self) -> String {
        match self {
            RunningFeed::Synthetic { .. } => "feed shard failed".to_owned(),
            RunningFeed::Recording { path, .. } => format!("feed --source {path}"),
        }
    }

    /// Waits for the shards and gives what their close needs; a synthetic feed that fell short of its rate says
    /// so in the log.
    pub fn finish(self) -> Result<FeedEnding, FeedError> {
        match self {
            RunningFeed::Synthetic { feed, .. } => {
                let report = feed.join()?;
                if let Some((target, achieved)) = report.rate_shortfall() {
                    tracing::warn!(
                        target_rate = target,
                        achieved_rate = achieved.round() as u64,
                        "the feed achieved {:.0} % of the rate asked",
                        100.0 * achieved / target.max(1) as f64
                    );
                }
                Ok(FeedEnding {
                    summary: Some(RunSummary::Synthetic(FeedSummary::new(&report))),
                    undelivered: report.total_undelivered(),
                    delivered_to_nobody: report.delivered_to_nobody(),
                    report,
                })
            }
            RunningFeed::Recording { feed, path, form } => {
                let report = feed.join()?;
                Ok(FeedEnding {
                    summary: SourceSummary::new(&report, &path, form).map(RunSummary::Recording),
                    undelivered: report.total_undelivered(),
                    delivered_to_nobody: None,
                    report,
                })
            }
        }
    }
}

/// The `--json` summary of a finished feed: its totals, and what `[security]` decided when anything was checked.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EndingJson<'a> {
    /// The totals.
    #[serde(flatten)]
    pub summary: &'a RunSummary,
    /// What the ZAP handler decided.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub auth: Option<tickbox_auth::AuthSummary>,
}

impl FeedEnding {
    /// The `--json` summary, with `auth` (`[security]`'s decisions, `None` when nothing was checked: every feed,
    /// synthetic or `--source`, reports them); `None` when a recording's report lacks its source totals.
    pub fn summary_json(&self, auth: Option<tickbox_auth::AuthSummary>) -> Option<EndingJson<'_>> {
        Some(EndingJson {
            summary: self.summary.as_ref()?,
            auth,
        })
    }

    /// The text summary: the report's table, then `auth_line` (`[security]`'s, when anything was checked).
    pub fn summary_text(&self, auth_line: Option<String>) -> String {
        let mut text = format!("{}\n", self.report);
        if let Some(line) = auth_line {
            text.push_str(&line);
            text.push('\n');
        }
        text
    }

    /// What the shards still held at their close (dropped there, and counted in the summary), said for stderr;
    /// `None` when nothing was. The close waited at most `drain_timeout`, less when `interrupted`.
    pub fn close_loss(&self, interrupted: bool, drain_timeout: Duration) -> Option<String> {
        let n = self.undelivered;
        CloseLoss::after_close(n, interrupted, drain_timeout, INTERRUPT_GRACE).map(|loss| {
            let hint = "--back-pressure block with --drain-timeout waits for it";
            loss.message("feed", n, "message", hint)
        })
    }
}

/// How long the shards' close may wait: their drain at the end of a run that blocks rather than drops; nothing
/// otherwise.
pub fn close_wait(config: &FeedConfig) -> Duration {
    if config.back_pressure.blocks() {
        config.drain_timeout.0
    } else {
        Duration::ZERO
    }
}

/// The synthetic market's live line: messages sent over all shards, by kind.
fn synthetic_line(stats: &[ShardStats], rate: &mut RateMeter) -> String {
    let (quotes, trades, heartbeats) = stats.iter().fold((0, 0, 0), |(q, t, h), s| {
        (
            q + s.counts.quotes,
            t + s.counts.trades,
            h + s.counts.heartbeats,
        )
    });
    let sent = quotes + trades;
    format!(
        "sent {sent} ({}), quotes {quotes}, trades {trades}, heartbeats {heartbeats}, {} shard(s)",
        format_rate(rate.per_sec(sent)),
        stats.len()
    )
}

/// A recording's live line.
fn recording_line(s: &SourceStats, rate: &mut RateMeter) -> String {
    format!(
        "read {}, published {} ({}), skipped {}",
        s.read,
        s.published,
        format_rate(rate.per_sec(s.published)),
        s.skipped
    )
}

/// A warning for each connecting shard (`connects`, by index) with no subscription `after` the start: what it
/// sends goes nowhere.
fn unsubscribed_warnings(
    shards: &[ShardInfo],
    stats: &[ShardStats],
    connects: &[bool],
    after: Duration,
) -> Vec<String> {
    (shards.iter())
        .filter(|shard| connects.get(shard.shard).copied().unwrap_or(false))
        .filter(|shard| stats.get(shard.shard).map_or(0, |s| s.subscriptions) == 0)
        .map(|shard| {
            format!(
                "warning: feed shard {} is connected to {} but nothing has subscribed in {}: is anything bound \
                 there (an LVC's --upstream-bind)? What it sends meanwhile goes nowhere",
                shard.shard,
                shard.endpoint,
                HumanDuration(after)
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::PublisherCounts;

    fn shard(n: usize) -> ShardInfo {
        ShardInfo {
            shard: n,
            publisher_id: 100 + n as u32,
            endpoint: format!("tcp://127.0.0.1:{}", 5000 + n),
            symbols: 3,
        }
    }

    fn ending(undelivered: u64) -> FeedEnding {
        let report = FeedReport {
            shards: Vec::new(),
            target_rate: None,
            source: None,
        };
        FeedEnding {
            summary: Some(RunSummary::Synthetic(FeedSummary::new(&report))),
            report,
            undelivered,
            delivered_to_nobody: None,
        }
    }

    #[test]
    fn the_summary_carries_the_auth_decisions_when_anything_was_checked() {
        let auth = || Some(tickbox_auth::AuthSummary::default());
        let fed = ending(0);
        let json = serde_json::to_value(fed.summary_json(auth()).unwrap()).unwrap();
        assert!(json["auth"].is_object(), "{json}");
        assert!(
            json.get("sent").is_some() || json.as_object().unwrap().len() > 1,
            "{json}"
        );
        let text = fed.summary_text(Some("auth: 1 refused".into()));
        assert!(text.ends_with("\nauth: 1 refused\n"), "{text}");
        assert!(text.starts_with(&fed.report.to_string()));
        let json = serde_json::to_value(fed.summary_json(None).unwrap()).unwrap();
        assert!(json.get("auth").is_none(), "{json}");
        assert_eq!(fed.summary_text(None), format!("{}\n", fed.report));
        let lacking = FeedEnding {
            summary: None,
            ..ending(0)
        };
        assert!(lacking.summary_json(None).is_none());
    }

    #[test]
    fn messages_left_at_the_close_are_said_and_nothing_left_is_silent() {
        assert_eq!(ending(0).close_loss(true, Duration::ZERO), None);
        let line = ending(7).close_loss(false, Duration::ZERO).unwrap();
        assert!(
            line.starts_with("feed: 7 message(s) were still queued"),
            "{line}"
        );
        assert!(
            line.contains("--back-pressure block with --drain-timeout waits for it"),
            "{line}"
        );
        let line = ending(7).close_loss(true, Duration::from_secs(1)).unwrap();
        assert!(
            line.starts_with("feed: interrupted: 7 message(s)"),
            "{line}"
        );
    }

    #[test]
    fn only_connecting_shards_without_a_subscriber_are_warned_about() {
        let shards = [shard(0), shard(1), shard(2)];
        let subscribed = ShardStats {
            subscriptions: 1,
            ..ShardStats::default()
        };
        let stats = [ShardStats::default(), subscribed, ShardStats::default()];
        // Shard 0 binds, shard 1 connects and has a subscriber, shard 2 connects into nothing.
        let lines = unsubscribed_warnings(
            &shards,
            &stats,
            &[false, true, true],
            Duration::from_secs(3),
        );
        assert_eq!(lines.len(), 1, "{lines:?}");
        assert!(
            lines[0].starts_with("warning: feed shard 2 is connected to tcp://127.0.0.1:5002"),
            "{}",
            lines[0]
        );
        assert!(
            lines[0].contains("nothing has subscribed in 3s"),
            "{}",
            lines[0]
        );
    }

    #[test]
    fn the_live_lines_sum_the_shards() {
        let one = ShardStats {
            counts: PublisherCounts {
                quotes: 10,
                trades: 2,
                heartbeats: 1,
                ..PublisherCounts::default()
            },
            ..ShardStats::default()
        };
        let line = synthetic_line(&[one, one], &mut RateMeter::default());
        assert!(
            line.starts_with("sent 24 ("),
            "quotes and trades are sent, heartbeats apart: {line}"
        );
        assert!(
            line.ends_with("quotes 20, trades 4, heartbeats 2, 2 shard(s)"),
            "{line}"
        );
        let s = SourceStats {
            read: 7,
            published: 5,
            skipped: 2,
            finished: false,
        };
        let line = recording_line(&s, &mut RateMeter::default());
        assert!(line.starts_with("read 7, published 5 ("), "{line}");
        assert!(line.ends_with("), skipped 2"), "{line}");
    }

    #[test]
    fn only_a_blocking_feed_waits_to_drain_at_its_close() {
        let mut config = FeedConfig {
            drain_timeout: HumanDuration(Duration::from_secs(4)),
            ..FeedConfig::default()
        };
        config.back_pressure = tickbox_zmqx::BackPressure::Drop;
        assert_eq!(close_wait(&config), Duration::ZERO);
        config.back_pressure = tickbox_zmqx::BackPressure::Block;
        assert_eq!(close_wait(&config), Duration::from_secs(4));
    }
}
