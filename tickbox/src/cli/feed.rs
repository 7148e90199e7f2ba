//! `tickbox feed`: its command-line arguments (what it parses; `cmd::feed` wires them).

use crate::live::LiveArgs;
use std::time::Duration;
use tickbox_feed::{PacingMode, Pattern, Rate};

/// Command-line overrides of the `[feed]` config section.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// Endpoints to bind, one publisher shard per endpoint (e.g. `tcp://*:5556,tcp://*:5557`).
    /// Default: the config's shards, else one shard on `tcp://127.0.0.1:*`.
    #[arg(
        long,
        value_delimiter = ',',
        value_name = "EP[,EP…]",
        conflicts_with = "connect"
    )]
    pub(crate) bind: Vec<String>,
    /// Endpoints to connect to instead (e.g. an LVC proxy's frontend), one shard per endpoint.
    #[arg(long, value_delimiter = ',', value_name = "EP[,EP…]")]
    pub(crate) connect: Vec<String>,
    /// Data rate over all shards: `50000`, `100k`, `1.5m` or `max` (flat out).
    #[arg(long, value_name = "RATE")]
    pub(crate) rate: Option<Rate>,
    /// Pacing: evenly spaced, Poisson bursts, or as fast as possible.
    #[arg(long, value_name = "paced|bursty|flat-out")]
    pub(crate) mode: Option<PacingMode>,
    /// Mean burst size in bursty mode.
    #[arg(long, value_name = "N")]
    pub(crate) burst_size: Option<f64>,
    /// Number of symbols in the generated universe (at most 1000000).
    #[arg(long, value_parser = crate::bounds::symbols, value_name = "N")]
    pub(crate) symbols: Option<usize>,
    /// Venue code used in topics.
    #[arg(long, value_name = "NAME")]
    pub(crate) venue: Option<String>,
    /// Stop after this long (`10s`, `500ms`, `2m`); default: run until Ctrl-C.
    #[arg(long, value_parser = tickbox_units::parse_duration, value_name = "DURATION")]
    pub(crate) duration: Option<Duration>,
    /// Stop each shard after this many data messages.
    #[arg(long, value_name = "N")]
    pub(crate) max_messages: Option<u64>,
    /// Pin shard i's thread to the i-th core (one core per shard).
    #[arg(long, value_delimiter = ',', value_name = "CPU[,CPU…]")]
    pub(crate) cores: Vec<usize>,
    /// `synthetic` market or the Guide's `pathological` publisher (for testing an LVC): every topic once, then one
    /// update a second. Pathological waits for its first subscriber (no deadline) and never drops its burst.
    #[arg(long, value_name = "synthetic|pathological")]
    pub(crate) pattern: Option<Pattern>,
    /// With `--pattern pathological`: `guide` sends each message as the Guide's two frames, [topic][body] (the
    /// body is the tickbox frame), as the Guide's pathological publisher does for its LVC.
    #[arg(long, value_name = "tickbox|guide")]
    pub(crate) framing: Option<tickbox_feed::Framing>,
    /// Publish a recording instead of the synthetic market: a DBN file (plain or zstd) or a tickbox journal.
    /// Records go out in file order under this feed's publisher ids and sequences, their event time kept in
    /// the header's origin time; records with no tickbox equivalent are skipped and counted.
    // The generator's flags mean nothing for a recording; refusing them beats ignoring them.
    #[arg(
        long,
        value_name = "PATH",
        conflicts_with_all = [
            "pattern", "framing", "rate", "mode", "burst_size", "symbols", "venue", "seed", "max_messages",
            "cores",
        ]
    )]
    pub(crate) source: Option<std::path::PathBuf>,
    /// Pacing of `--source`: `1x` (as recorded), `10x`, `0.5x` or `max` (as fast as the sockets take it).
    #[arg(long, value_name = "SPEED", default_value = "1x", requires = "source")]
    pub(crate) speed: tickbox_units::Speed,
    /// What a slow subscriber does to the feed: `block` (XPUB with ZMQ_XPUB_NODROP: it back-pressures the feed
    /// instead of losing messages) or `drop` (the default, or `[feed] back_pressure`).
    #[arg(long, value_name = "drop|block")]
    pub(crate) back_pressure: Option<tickbox_zmqx::BackPressure>,
    /// Deprecated spelling of `--back-pressure block`.
    #[arg(long, hide = true, conflicts_with = "back_pressure")]
    pub(crate) no_drop: bool,
    /// `auto`: pack up to 64 messages (`[feed] batch_max_records`), or `N`, per ZeroMQ message (a `#B` batch
    /// frame, docs/book/src/wire.md) while every subscriber of a shard reads batches (subscribed to "" and "#B")
    /// and none holds another prefix; each pacer step's batch goes out at its end. `off` (also 0 or 1): one
    /// message each. Default `[feed] batch`, else `auto` with `--source` (as `replay` sends the same records) and
    /// `off` for the synthetic market. The same spelling as `replay --batch`.
    #[arg(long, value_name = "off|auto|N")]
    pub(crate) batch: Option<tickbox_feed::Batching>,
    /// Send-side high-water mark per subscriber (`[feed] send_hwm`).
    #[arg(long, value_name = "N")]
    pub(crate) send_hwm: Option<i32>,
    /// Deprecated spelling of `--send-hwm`.
    #[arg(long, hide = true, conflicts_with = "send_hwm", value_name = "N")]
    pub(crate) sndhwm: Option<i32>,
    /// Heartbeat after this long idle, e.g. `100ms` (`0s` disables).
    #[arg(long, value_name = "DURATION")]
    pub(crate) heartbeat: Option<tickbox_units::HumanDuration>,
    /// `--no-drop` only: a run that ends by `--duration`, `--max-messages` or the end of `--source` waits up to
    /// this long for its subscribers to leave (having read everything), then as long again for what is still
    /// queued to reach the network ([feed] drain_timeout, default 5s; `0s` closes at once). Subscribers still
    /// connected are reported; messages still queued then are dropped, counted as `undelivered`, and the feed
    /// exits 1 saying so. Ctrl-C skips it (what is queued gets 300 ms).
    #[arg(long, value_name = "DURATION")]
    pub(crate) drain_timeout: Option<tickbox_units::HumanDuration>,
    /// Random seed (equal seeds give equal streams).
    #[arg(long, value_name = "N")]
    pub(crate) seed: Option<u64>,
    /// Wait for this many subscriptions on each shard before sending data (at most 5 s; at most 100000).
    #[arg(long, value_parser = crate::bounds::wait_for_subscribers, value_name = "N")]
    pub(crate) wait_for_subscribers: Option<usize>,
    /// Majordomo broker to register `tickbox.feed.status` with.
    #[arg(long, value_name = "EP")]
    pub(crate) broker: Option<String>,
    /// Print the summary as one JSON object on stdout (the shard endpoint lines then go to stderr).
    #[arg(long)]
    pub(crate) json: bool,
    #[command(flatten)]
    pub(crate) live: LiveArgs,
    #[command(flatten)]
    pub(crate) metrics: crate::metrics::MetricsArgs,
}
