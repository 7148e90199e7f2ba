//! Where market data enters tickbox: sources (the synthetic market) and sharded publishers. The LVC proxy and its
//! Espresso tap live in `tickbox-lvc`.
//!
//! # Feed API
//!
//! ```no_run
//! use tickbox_feed::{Feed, FeedConfig, PublisherShardConfig, Rate};
//! let ctx = zmq::Context::new();
//! // Bound shards come from the context's gate: with `[security]`, `security.gate(&ctx)` (its ZAP handler runs).
//! let gate = tickbox_auth::Gate::open(&ctx);
//! let config = FeedConfig {
//!     shards: vec![PublisherShardConfig::default(); 2],   // two shards on tcp://127.0.0.1:*
//!     rate: Rate::PerSecond(200_000),             // over all shards
//!     duration: Some(std::time::Duration::from_secs(5).into()),
//!     ..FeedConfig::default()
//! };
//! let feed = Feed::start(&gate, config)?;         // returns once every socket is bound
//! for shard in feed.shards() {
//!     println!("shard {} publisher {} on {}", shard.shard, shard.publisher_id, shard.endpoint);
//! }
//! let report = feed.join()?;                      // or feed.stop_and_join()
//! println!("{report}");                           // per-shard summary table
//! # Ok::<(), tickbox_feed::FeedError>(())
//! ```
//!
//! * [`FeedConfig`] (the `[feed]` TOML section, every field defaulted): shards (`endpoint`, `connect`, `core`),
//!   `venue`, `symbols`/`symbol_names`, `rate` (`100000`, `"100k"`, `"max"`), `mode` (`paced`, `bursty`,
//!   `flat_out`), `burst_size`, `quotes_per_trade`, `zipf_exponent`, `pattern` (`synthetic`, `pathological`),
//!   `heartbeat_interval`, `seed`, `publisher_id_base`, `send_hwm`, `back_pressure`, `duration` (`"5s"`),
//!   `max_messages_per_shard`, `wait_for_subscribers`, ...
//! * [`Feed::start`]`(&gate, config) -> Result<`[`FeedHandle`]`, `[`FeedError`]`>`: one thread per shard, pinned
//!   if a core is given, each with its own PUB socket (XPUB with `ZMQ_XPUB_NODROP` when `back_pressure = "block"`), its own
//!   publisher id (`publisher_id_base + shard`) and its own gap-free sequence starting at 1. Endpoints may be
//!   any transport; `inproc://` ones are only reachable through the same context, so in-process users
//!   (`tickbox demo`) pass their own context. `connect = true` connects instead of binding (e.g. into an LVC's
//!   XSUB frontend).
//! * [`FeedHandle`]: `shards()` (shard, publisher id, resolved endpoint, symbol count), `endpoints()`,
//!   `universe()`, `stats()` (live per-shard counters), `stop()`, `is_finished()`, `join() -> FeedReport`.
//!   Dropping the handle stops and joins.
//! * [`FeedReport`] / [`PublisherShardReport`]: per shard messages by kind, last sequence, duration, achieved rate;
//!   `Display` is the summary table.
//! * Symbol `S` on venue `V` is published by shard `tickbox_wire::shard_for(b"V.S", shards)` (see
//!   [`shard_of_symbol`]); topics are `Q.V.S` and `T.V.S`. An idle shard heartbeats on `H.<publisher id>` with the
//!   header sequence equal to its last data sequence.
//! * Building blocks, usable alone: [`SendPacer`] (sans-IO schedule, fake-clock testable), [`Universe`] and
//!   [`MarketGenerator`] (the synthetic market), and the one shard publisher every publishing component uses (the
//!   feed, `feed --source`, `tickbox_recorder::Replayer`): [`Publisher`] (stamp + encode, or restamp a ready
//!   frame in place, + send on one socket; its batches in a [`ShardBatch`]), opened by [`open_publisher_socket`]
//!   or [`shard_recipe`] + [`open_shard_socket`], several driven from one thread as [`Shards`] (subscriber tally
//!   and wait, batching decision, the drain at the end: [`Shards::close_wait`]).
//!
//! * [`RecordSource`]: a recording read in order (`tickbox-dbn` reads DBN files and journals); [`SourceFeed`]
//!   publishes it on a feed's shards at a `tickbox_units::Speed`
//!   (`1x`, `Nx`, `max`), each record under the shard's own identity and sequence with its event time as origin
//!   time; its [`FeedReport`] carries [`SourceTotals`]: read, published and skipped (by reason).
//! * [`FeedSummary`], [`SourceSummary`], [`FeedStatus`], [`SourceStatus`]: the `--json` summaries and status-board
//!   objects (`Serialize`); [`CloseLoss`]: why messages left queued at a close were dropped.
//! * [`RunningFeed`]: either kind of running feed behind one face for a control loop (start lines, status, live
//!   line, warnings, [`FeedEnding`]).
//!
//! Send time in every header is `tickbox_wire::now_ns()` taken per message just before encoding, so
//! feed-to-subscriber latency can be measured from it.

mod batch;
mod config;
mod counts;
mod error;
mod generator;
mod metrics;
mod overrides;
mod pacer;
mod publisher;
mod runner;
mod running;
mod shards;
mod source;
mod source_feed;
mod summary;

pub use batch::{Flushed, ShardBatch};
pub use config::{
    BatchMode, Batching, FeedConfig, PacingMode, Pattern, PublisherShardConfig, Rate,
    MAX_GENERATED_SYMBOLS,
};
pub use counts::PublisherCounts;
pub use error::{FeedError, SourceError};
pub use generator::{
    generated_ticker, shard_of_symbol, Generated, GeneratorParams, MarketGenerator, SymbolSpec,
    Universe,
};
pub use metrics::FeedMetrics;
pub use overrides::FeedOverrides;
pub use pacer::{paced_offset_ns, Pacing, SendPacer, Step};
pub use publisher::{
    open_publisher_socket, open_shard_socket, shard_recipe, Publisher, Sent, ShardSocketError,
    INTERRUPT_GRACE, LINGER_MS, SEND_TIMEOUT_MS,
};
pub use runner::{
    Feed, FeedHandle, FeedReport, PublisherShardReport, ShardInfo, ShardStats, CLOCK_EVERY,
    RATE_SHORTFALL_RATIO,
};
pub use running::{close_wait, EndingJson, FeedEnding, RunSummary, RunningFeed, RunningStatus};
pub use shards::{CloseLoss, Closing, Shards};
pub use source::{RecordSource, SourceItem, SourceRecord, SourceStats, SourceTotals};
pub use source_feed::{SourceFeed, SourceFeedHandle};
pub use summary::{
    FeedShardStatus, FeedShardSummary, FeedStatus, FeedSummary, SourceShardSummary, SourceStatus,
    SourceSummary,
};
pub use tickbox_wire::Framing;
