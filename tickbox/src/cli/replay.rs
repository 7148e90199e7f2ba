//! `tickbox replay`: its command-line arguments (what it parses; `cmd::replay` wires them).

use super::{parse_tz, parse_when};
use crate::live::LiveArgs;
use std::path::PathBuf;
use std::time::Duration;
use tickbox_recorder::{Speed, TimeZone, When};

#[derive(Debug, clap::Args)]
#[command(
    after_help = "Records go out under their original publisher id, session and sequence (send time re-stamped, REPLAY flag set, origin time kept); gap notices are re-published so a subscriber counts the journal's holes as recorded gaps, apart from its own loss; LVC cached values consume no sequence. Recorded heartbeats are dropped: the replay sends its own per original publisher while idle and once at the end."
)]
pub(crate) struct Args {
    /// Journal to replay: a ring file, an archive directory, a history (a directory `record --roll` writes,
    /// replayed as one journal), or one in an object store (s3://bucket/prefix, as `record --archive-to` leaves it;
    /// fetched to a temporary directory first). Several, comma-separated, are merged into one stream by capture
    /// time, each record under its own publisher's identity and sequence (a window by sequence then needs one).
    #[arg(
        long,
        value_delimiter = ',',
        required = true,
        value_name = "PATH[,PATH…]"
    )]
    pub(crate) journal: Vec<PathBuf>,
    /// Publisher shard endpoints to bind, comma-separated. Each original publisher is carried whole by shard
    /// `publisher_id % N` (with --restamp, symbols are spread over them by stable hash).
    #[arg(
        long,
        value_delimiter = ',',
        required_unless_present = "local",
        value_name = "EP[,EP…]"
    )]
    pub(crate) bind: Vec<String>,
    /// Backtest: feed the journal straight into the Black Box (shard logic and workers of `[subscriber]` and
    /// `[workers]`: snail, gap detection, per-symbol dispatch) in this process, no sockets, as fast as the workers
    /// go, and print `subscribe`'s summary with records/s and the multiple of real time achieved. The whole
    /// journal is replayed; the receive time of each record is its capture time.
    #[arg(long, conflicts_with_all = ["bind", "broker", "await_start"])]
    pub(crate) local: bool,
    /// With --local: worker threads (default `[workers] count`, one where that is unset); at most 256.
    #[arg(long, value_name = "N", requires = "local", value_parser = crate::bounds::workers)]
    pub(crate) workers: Option<usize>,
    /// 1 = original pacing, N = N times faster (0.5 = half speed), max = as fast as subscribers take it.
    #[arg(long, default_value = "1", value_parser = parse_speed, value_name = "SPEED")]
    pub(crate) speed: Speed,
    /// Replay the records whose origin time is at or after this: RFC 3339 (2026-11-24T14:30:00Z,
    /// 2026-11-24T09:30:00-05:00), a local date-time (2026-11-24 09:30:00) or a time of day (09:30, 09:30:00.5)
    /// in --tz (a time of day falls on the journal's first day there), ns since the epoch, or +DURATION after
    /// the first record.
    #[arg(long, conflicts_with = "from_seq", value_parser = parse_when, value_name = "TIME")]
    pub(crate) from: Option<When>,
    /// Start at this journal sequence.
    #[arg(long, value_name = "N")]
    pub(crate) from_seq: Option<u64>,
    /// Replay the records whose origin time is before this (same forms as --from).
    #[arg(long, conflicts_with = "to_seq", value_parser = parse_when, value_name = "TIME")]
    pub(crate) to: Option<When>,
    /// Stop before this journal sequence.
    #[arg(long, value_name = "N")]
    pub(crate) to_seq: Option<u64>,
    /// Most records per batch frame (one ZeroMQ message carrying several records), used on a shard only while
    /// every subscriber of it reads batches (subscribed to "" and to "#B"; see docs/book/src/wire.md): `N`, or
    /// `auto` for the config's (`replay_batch_records`, 64; the default); `off`, 0 or 1 sends one record per
    /// message. The same spelling as `feed --batch`.
    #[arg(long, value_name = "off|auto|N")]
    pub(crate) batch: Option<tickbox_feed::Batching>,
    /// Replay only records whose topic starts with one of these prefixes, comma-separated (`Q.XNAS.,T.`). Gap
    /// notices go out only if a prefix selects them (`G.`); recorded heartbeats never do (the replay sends its
    /// own). A topic subset has holes in each publisher's sequence: subscribe with the same --topics, or --restamp.
    #[arg(long, value_delimiter = ',', value_name = "PREFIX[,PREFIX…]")]
    pub(crate) topics: Vec<String>,
    /// Time zone of local --from/--to times and of the times in messages: an IANA name (America/New_York).
    #[arg(long, default_value = "UTC", value_parser = parse_tz, value_name = "ZONE")]
    pub(crate) tz: TimeZone,
    /// Before starting, wait until every shard has N subscriptions (counted on XPUB; 0 = start at once). Default
    /// from config (1).
    #[arg(
        long = "wait-for-subscribers",
        alias = "wait-subscribers",
        value_name = "N"
    )]
    pub(crate) wait_subscribers: Option<u64>,
    /// At the end, wait up to this long for subscribers to leave (having read everything), then as long again
    /// for what is still queued to reach the network. Subscribers still connected are named in a warning; a
    /// queue that did not drain means records were dropped, and the replay exits 1 saying so. Ctrl-C skips it.
    #[arg(long, default_value = "5s", value_parser = tickbox_units::parse_duration, value_name = "DURATION")]
    pub(crate) drain_timeout: Duration,
    /// Give up waiting for subscribers after this long: exit 1 saying so (default from config, 60s).
    #[arg(long, value_parser = tickbox_units::parse_duration, value_name = "DURATION")]
    pub(crate) wait_timeout: Option<Duration>,
    /// At the end of the journal keep tailing it (replay a recording in progress).
    #[arg(long)]
    pub(crate) follow: bool,
    /// What a slow subscriber does to the replay: `block` (wait for it; the default, or `[recorder]
    /// back_pressure`) or `drop` (drop its messages like a live PUB).
    #[arg(long, value_name = "drop|block")]
    pub(crate) back_pressure: Option<tickbox_zmqx::BackPressure>,
    /// Deprecated spelling of `--back-pressure drop`.
    #[arg(long, hide = true, conflicts_with = "back_pressure")]
    pub(crate) allow_drop: bool,
    /// End the replay (exit 1) at the first corrupt record or damaged segment header. By default the replay
    /// skips to the next record that verifies, counts what it skipped (`corrupt` in the summary), sends gap
    /// notices for the skipped sequences, and exits 5 at the end.
    #[arg(long)]
    pub(crate) stop_on_corruption: bool,
    /// Re-publish under per-shard identities (shard i is --publisher-id + i, fresh gap-free sequences, symbols
    /// spread over shards by hash) instead of the original publishers'. Gap notices are not re-published then.
    #[arg(long)]
    pub(crate) restamp: bool,
    /// With --restamp: publisher id of shard 0. Default from config (9000).
    #[arg(long, requires = "restamp", value_name = "N")]
    pub(crate) publisher_id: Option<u32>,
    /// Print each run's summary as one JSON object on stdout (integer counts) instead of the table.
    #[arg(long)]
    pub(crate) json: bool,
    #[command(flatten)]
    pub(crate) live: LiveArgs,
    #[command(flatten)]
    pub(crate) metrics: crate::metrics::MetricsArgs,
    /// Majordomo broker to register `tickbox.replay.status`, `tickbox.replay.start` and `tickbox.replay.stop` with.
    #[arg(long, value_name = "EP")]
    pub(crate) broker: Option<String>,
    /// Bind the shards, then wait idle for `tickbox.replay.start` (and again after each replay ends) until Ctrl-C.
    #[arg(long, requires = "broker")]
    pub(crate) await_start: bool,
    /// ZooKeeper ensemble for --start-barrier: HOST:PORT[,HOST:PORT…]. Default: `[coord] zk` from the config.
    #[arg(long, value_name = "HOST:PORT[,HOST:PORT…]")]
    pub(crate) zk: Option<String>,
    /// Double barrier (ZooKeeper path) shared with --parties subscribers started with the same
    /// `--start-barrier PATH --parties N`: the replay sends nothing until all have entered and every shard has N
    /// subscriptions (`--wait-for-subscribers` overrides N), and exits only once all have left.
    #[arg(
        long,
        value_name = "PATH",
        requires = "parties",
        conflicts_with = "await_start"
    )]
    pub(crate) start_barrier: Option<String>,
    /// Subscribers in --start-barrier (the replay is one more party).
    #[arg(long, value_name = "N", requires = "start_barrier", value_parser = clap::value_parser!(u32).range(1..))]
    pub(crate) parties: Option<u32>,
}

pub(crate) fn parse_speed(s: &str) -> Result<Speed, String> {
    s.parse()
        .map_err(|e: tickbox_units::UnitsError| e.to_string())
}
