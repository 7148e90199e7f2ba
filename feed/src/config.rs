use std::str::FromStr;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::error::FeedError;
use crate::pacer::Pacing;
use tickbox_units::HumanDuration;
pub use tickbox_units::Rate;
use tickbox_wire::Framing;
use tickbox_zmqx::BackPressure;

/// Generated tickers are four letters, so this many fit.
pub const MAX_GENERATED_SYMBOLS: usize = 26 * 26 * 26 * 26;

/// Everything a feed needs; the `[feed]` section of the deployment TOML. Every field has a default, so
/// `FeedConfig::default()` is a working feed: one shard on `tcp://127.0.0.1:*`, 1,000 symbols at 100k msg/s.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct FeedConfig {
    /// One publisher shard (socket + thread + publisher id) per entry. Symbols are spread over shards with
    /// `tickbox_wire::shard_for`, so every process agrees which shard owns a symbol.
    pub shards: Vec<PublisherShardConfig>,
    /// Venue code in every topic (`Q.<venue>.<symbol>`). Must not contain `.` or NUL.
    pub venue: String,
    /// Size of the generated universe when `symbol_names` is empty.
    pub symbols: usize,
    /// Explicit symbol names (overrides `symbols`); empty means generated 4-letter tickers.
    pub symbol_names: Vec<String>,
    /// Target data rate in messages per second over all shards (`100000`, `"100k"`, `"1.5m"`, `"max"`).
    /// Each shard gets the share of its symbols' activity, so the shard owning the hot names runs faster.
    pub rate: Rate,
    /// How messages are spaced in time.
    pub mode: PacingMode,
    /// Mean burst size in `bursty` mode: bursts arrive as a Poisson process and their sizes are geometric
    /// with this mean, so `1` is plain Poisson arrivals. The mean rate is still `rate`.
    pub burst_size: f64,
    /// Quotes per trade on average (the quote/trade mix); real equity feeds run around 10-20.
    pub quotes_per_trade: f64,
    /// Activity skew: symbol of rank `r` gets weight `1 / r^zipf_exponent` (0 = uniform).
    pub zipf_exponent: f64,
    /// Probability that a trade sweeps through the touch instead of printing at it.
    pub trade_through_probability: f64,
    /// Data pattern: the synthetic market, or the Guide's pathological publisher for LVC testing.
    pub pattern: Pattern,
    /// `pathological` only: after one message for every topic, one message per this interval.
    pub pathological_interval: HumanDuration,
    /// `pathological` only: `tickbox` frames, or the Guide's two-frame envelope (`guide`: frame 1 the topic,
    /// frame 2 the tickbox frame as an opaque body), to exercise an LVC exactly as the Guide's publisher does.
    pub framing: Framing,
    /// A shard that has sent nothing for this long sends a heartbeat on `H.<publisher id>`. `0` disables.
    pub heartbeat_interval: HumanDuration,
    /// Seed of every random choice (universe, walk, arrivals): equal seeds give equal streams.
    pub seed: u64,
    /// Publisher id of shard 0; shard `i` is `publisher_id_base + i`.
    pub publisher_id_base: u32,
    /// `ZMQ_SNDHWM` of each publisher socket (messages per subscriber pipe).
    #[serde(alias = "sndhwm")]
    pub send_hwm: i32,
    /// Longest subscription prefix a shard accepts, in bytes; a subscriber sending a longer one is disconnected
    /// by libzmq (`ZMQ_MAXMSGSIZE`) before the prefix reaches its subscription trie.
    pub max_subscription_bytes: usize,
    /// `block`: an XPUB with `ZMQ_XPUB_NODROP`, a slow subscriber back-pressures the feed instead of losing data;
    /// `drop` (the default): it loses what its queue cannot hold. The older `no_drop = true` still reads.
    #[serde(alias = "no_drop")]
    pub back_pressure: BackPressure,
    /// `block` only: a run that ends by its duration or message limit waits this long for its subscribers to
    /// leave before closing (each shard; Ctrl-C skips it). libzmq's linger flushes the queues into the
    /// connection, but closing discards what the connection still buffers while the kernel's buffer is full, so a
    /// subscriber that is behind would lose its unread tail with nothing counting it; one that has left has read
    /// what it wanted. Subscribers still there at the timeout are reported. `0s` closes at once.
    pub drain_timeout: HumanDuration,
    /// Stop after this long; `None` runs until stopped.
    pub duration: Option<HumanDuration>,
    /// Stop each shard after it has sent this many data messages; `None` means no limit.
    pub max_messages_per_shard: Option<u64>,
    /// Before sending data, wait until this many subscriptions reached each shard (uses an XPUB socket).
    /// Avoids the slow-joiner loss in tests and benchmarks; 0 starts at once.
    pub wait_for_subscribers: usize,
    /// Upper bound on that wait; afterwards the shard starts anyway and logs a warning.
    pub subscriber_wait: HumanDuration,
    /// `auto`: a shard packs up to `batch_max_records` messages into one batch frame (`#B`, docs/book/src/wire.md) while
    /// every subscriber of it reads batches (subscribed to "" and to "#B") and none holds another prefix; a
    /// batch is sent at the end of each pacer step, so no message waits longer than one step. `off`: one message
    /// per ZeroMQ message. Unset ([`FeedConfig::batch_mode`]): `auto` for a recorded source (`feed --source`), as
    /// `replay` sends the same records, and `off` for the synthetic market. `auto` makes the shard's socket a
    /// verbose XPUB, to see subscriptions.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub batch: Option<BatchMode>,
    /// Most messages per batch frame with `batch = "auto"`.
    pub batch_max_records: u16,
    /// Largest batch frame with `batch = "auto"`, in bytes.
    pub batch_max_bytes: usize,
    /// Most messages sent per pacer step: bounds how long a shard goes without checking for stop. Within a step
    /// the wall clock is read once per 32 messages: a stamp is read before its message is sent, never after.
    pub max_batch: usize,
    /// The pacer sleeps until this close to a deadline and spins the rest, trading CPU for accuracy.
    pub spin_us: u64,
    /// A shard that falls this far behind schedule (e.g. blocked by `back_pressure = "block"`) skips ahead
    /// instead of flooding to catch up; the skipped time is reported.
    pub max_catch_up: HumanDuration,
    /// `[context.sockets.feed]`, copied here by the binary; applied to every shard's socket (see `tickbox_zmqx::profile`).
    #[serde(skip)]
    pub socket_profile: tickbox_zmqx::profile::SocketProfile,
    /// `[security]`, loaded and shared by the binary: applied to every socket this component binds or connects.
    #[serde(skip)]
    pub security: tickbox_auth::Security,
}

impl Default for FeedConfig {
    fn default() -> Self {
        FeedConfig {
            shards: vec![PublisherShardConfig::default()],
            venue: "XNAS".to_string(),
            symbols: 1_000,
            symbol_names: Vec::new(),
            rate: Rate::PerSecond(100_000),
            mode: PacingMode::Paced,
            burst_size: 20.0,
            quotes_per_trade: 10.0,
            zipf_exponent: 1.0,
            trade_through_probability: 0.05,
            pattern: Pattern::Synthetic,
            pathological_interval: HumanDuration(Duration::from_millis(1_000)),
            framing: Framing::Tickbox,
            heartbeat_interval: HumanDuration(Duration::from_millis(100)),
            seed: seed_default(),
            publisher_id_base: 1,
            send_hwm: 1_000,
            max_subscription_bytes: tickbox_zmqx::DEFAULT_MAX_SUBSCRIPTION_BYTES,
            back_pressure: BackPressure::Drop,
            drain_timeout: HumanDuration(Duration::from_secs(5)),
            duration: None,
            max_messages_per_shard: None,
            wait_for_subscribers: 0,
            subscriber_wait: HumanDuration(Duration::from_millis(5_000)),
            batch: None,
            batch_max_records: 64,
            batch_max_bytes: 8192,
            max_batch: 256,
            spin_us: 20,
            max_catch_up: HumanDuration(Duration::from_millis(1_000)),
            socket_profile: tickbox_zmqx::profile::SocketProfile::default(),
            security: tickbox_auth::Security::default(),
        }
    }
}

/// One publisher shard.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PublisherShardConfig {
    /// Any ZeroMQ endpoint: `tcp://127.0.0.1:*` (port chosen by the OS, read it back from the handle),
    /// `ipc:///path`, or `inproc://name` (only reachable through the same `zmq::Context` given to `Feed::start`).
    pub endpoint: String,
    /// Connect to `endpoint` instead of binding it, e.g. to push into an LVC proxy's XSUB frontend.
    pub connect: bool,
    /// Pin this shard's thread to this CPU; `None` leaves it to the scheduler.
    pub core: Option<usize>,
}

impl Default for PublisherShardConfig {
    fn default() -> Self {
        PublisherShardConfig {
            endpoint: "tcp://127.0.0.1:*".to_string(),
            connect: false,
            core: None,
        }
    }
}

/// How data messages are spaced.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum PacingMode {
    /// Evenly spaced at `rate`, by absolute deadline (no drift).
    #[default]
    Paced,
    /// Poisson-arriving bursts with mean rate `rate`.
    Bursty,
    /// As fast as the socket takes them; `rate` is ignored.
    FlatOut,
}

impl FromStr for PacingMode {
    type Err = FeedError;
    fn from_str(s: &str) -> Result<Self, FeedError> {
        match s.to_ascii_lowercase().replace('-', "_").as_str() {
            "paced" => Ok(PacingMode::Paced),
            "bursty" => Ok(PacingMode::Bursty),
            "flat_out" | "flatout" | "max" => Ok(PacingMode::FlatOut),
            _ => Err(FeedError::InvalidConfig {
                field: "mode",
                reason: format!("{s:?} is not one of paced, bursty, flat-out"),
            }),
        }
    }
}

/// What the feed publishes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum Pattern {
    /// The synthetic market: random-walk quotes and trades with a Zipf-skewed activity.
    #[default]
    Synthetic,
    /// The Guide's pathological publisher: one message for every topic (each symbol's quote and trade), then
    /// one message every `pathological_interval` to a random topic. Late joiners see almost nothing
    /// unless an LVC serves them the cached values.
    ///
    /// Its burst is the point of the pattern, so it is never lost on the publisher's side: each shard waits for
    /// at least one subscriber (`wait_for_subscribers` of at least 1, with no deadline: until the LVC, or
    /// whoever, subscribes, or the feed is stopped) and sends under `back_pressure = "block"`, whatever those
    /// fields say. A burst sent before anyone listens, or into a full queue, would leave the cache without
    /// most topics and test nothing.
    Pathological,
}

impl FromStr for Pattern {
    type Err = FeedError;
    fn from_str(s: &str) -> Result<Self, FeedError> {
        match s.to_ascii_lowercase().as_str() {
            "synthetic" => Ok(Pattern::Synthetic),
            "pathological" => Ok(Pattern::Pathological),
            _ => Err(FeedError::InvalidConfig {
                field: "pattern",
                reason: format!("{s:?} is not one of synthetic, pathological"),
            }),
        }
    }
}

/// Whether feed shards pack messages into batch frames.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum BatchMode {
    /// One message per ZeroMQ message, whoever subscribes.
    #[default]
    Off,
    /// Batch frames while every subscriber of a shard reads them and takes everything; single frames otherwise.
    Auto,
}

impl FromStr for BatchMode {
    type Err = FeedError;
    fn from_str(s: &str) -> Result<Self, FeedError> {
        match s.to_ascii_lowercase().as_str() {
            "off" => Ok(BatchMode::Off),
            "auto" => Ok(BatchMode::Auto),
            _ => Err(FeedError::InvalidConfig {
                field: "batch",
                reason: format!("{s:?} is not one of off, auto"),
            }),
        }
    }
}

/// What `--batch` asks for, one spelling on `feed` and `replay`: `off` (one message each), `auto` (batch frames of
/// the configured size, `[feed] batch_max_records` or `[recorder] replay_batch_records`), or a number `N` (batch
/// frames of at most `N` records; 0 and 1 are `off`). Either way a shard batches only while every subscriber of
/// it reads batches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Batching {
    /// One record per ZeroMQ message.
    Off,
    /// Batch frames of the configured size.
    Auto,
    /// Batch frames of at most this many records.
    Records(u16),
}

impl FromStr for Batching {
    type Err = FeedError;
    fn from_str(s: &str) -> Result<Self, FeedError> {
        match s.to_ascii_lowercase().as_str() {
            "off" => Ok(Batching::Off),
            "auto" => Ok(Batching::Auto),
            n => match n.parse::<u16>() {
                Ok(0 | 1) => Ok(Batching::Off),
                Ok(n) => Ok(Batching::Records(n)),
                Err(_) => Err(FeedError::InvalidConfig {
                    field: "batch",
                    reason: format!(
                        "{s:?} is not off, auto or a number of records (at most 65535)"
                    ),
                }),
            },
        }
    }
}

impl Batching {
    /// The most records per batch frame this asks for: `Some(1)` for off, `None` for the configured size.
    pub fn max_records(self) -> Option<u16> {
        match self {
            Batching::Off => Some(1),
            Batching::Auto => None,
            Batching::Records(n) => Some(n),
        }
    }

    /// Applied to a feed's settings: its [`BatchMode`], and for `N` its `batch_max_records`.
    pub fn apply_to(self, config: &mut FeedConfig) {
        config.batch = Some(match self {
            Batching::Off => BatchMode::Off,
            Batching::Auto | Batching::Records(_) => BatchMode::Auto,
        });
        if let Batching::Records(n) = self {
            config.batch_max_records = n;
        }
    }
}

/// `d` in nanoseconds, saturating at `u64::MAX` (about 584 years), as the pacer and publisher count time.
pub(crate) fn saturating_nanos(d: HumanDuration) -> u64 {
    u64::try_from(d.0.as_nanos()).unwrap_or(u64::MAX)
}

const fn seed_default() -> u64 {
    0x7_1c_b0_c5
}

impl FeedConfig {
    /// Checks ranges and consistency; `Feed::start` calls it, so a bad config never reaches a thread.
    pub fn validate(&self) -> Result<(), FeedError> {
        let bad =
            |field: &'static str, reason: String| Err(FeedError::InvalidConfig { field, reason });
        if self.shards.is_empty() {
            return bad("shards", "at least one shard is needed".into());
        }
        for (i, shard) in self.shards.iter().enumerate() {
            if shard.endpoint.trim().is_empty() {
                return bad(
                    "shards.endpoint",
                    format!("shard {i} has an empty endpoint"),
                );
            }
            // libzmq would truncate an out-of-range port into some other one; refuse it before any socket exists.
            let direction = if shard.connect {
                tickbox_zmqx::endpoint::Direction::Connect
            } else {
                tickbox_zmqx::endpoint::Direction::Bind
            };
            if let Err(source) = tickbox_zmqx::endpoint::check(shard.endpoint.trim(), direction) {
                return Err(FeedError::Endpoint {
                    shard: i,
                    verb: if shard.connect { "connect to" } else { "bind" },
                    endpoint: shard.endpoint.clone(),
                    source,
                });
            }
        }
        if self.venue.is_empty() || self.venue.contains(['.', '\0']) {
            return bad(
                "venue",
                format!("{:?} must be non-empty without '.' or NUL", self.venue),
            );
        }
        if self.symbol_names.is_empty() && self.symbols == 0 {
            return bad("symbols", "the universe needs at least one symbol".into());
        }
        if self.symbol_names.is_empty() && self.symbols > MAX_GENERATED_SYMBOLS {
            return bad(
                "symbols",
                format!("at most {} generated symbols", MAX_GENERATED_SYMBOLS),
            );
        }
        let mut seen = std::collections::HashSet::new();
        for name in &self.symbol_names {
            if name.is_empty() || name.contains('\0') {
                return bad(
                    "symbol_names",
                    format!("{name:?} must be non-empty without NUL"),
                );
            }
            if !seen.insert(name.as_str()) {
                return bad("symbol_names", format!("{name:?} appears twice"));
            }
        }
        if !(self.burst_size.is_finite() && self.burst_size >= 1.0) {
            return bad("burst_size", format!("{} must be >= 1", self.burst_size));
        }
        if !(self.quotes_per_trade.is_finite() && self.quotes_per_trade >= 0.0) {
            return bad(
                "quotes_per_trade",
                format!("{} must be >= 0", self.quotes_per_trade),
            );
        }
        if !(self.zipf_exponent.is_finite() && (0.0..=10.0).contains(&self.zipf_exponent)) {
            return bad(
                "zipf_exponent",
                format!("{} must be in 0..=10", self.zipf_exponent),
            );
        }
        if !(0.0..=1.0).contains(&self.trade_through_probability) {
            return bad(
                "trade_through_probability",
                format!("{} must be in 0..=1", self.trade_through_probability),
            );
        }
        if self.pattern == Pattern::Pathological && self.pathological_interval.0.is_zero() {
            return bad("pathological_interval", "must be > 0".into());
        }
        if let Err(reason) = self.framing.for_writer() {
            return bad("framing", reason);
        }
        // Only the LVC test pattern speaks the Guide's envelope: tickbox subscribers read one frame per message.
        if self.framing == Framing::Guide && self.pattern != Pattern::Pathological {
            return bad(
                "framing",
                "`guide` is for the pathological pattern (pattern = \"pathological\")".into(),
            );
        }
        if self.send_hwm < 0 {
            return bad(
                "send_hwm",
                format!("{} must be >= 0 (0 = unlimited)", self.send_hwm),
            );
        }
        if self.max_batch == 0 {
            return bad("max_batch", "must be > 0".into());
        }
        Ok(())
    }

    /// Number of symbols in the universe.
    pub fn universe_size(&self) -> usize {
        if self.symbol_names.is_empty() {
            self.symbols
        } else {
            self.symbol_names.len()
        }
    }

    /// The configuration a shard runs with: the pathological pattern's rules applied (it waits for a subscriber
    /// and never drops, see [`Pattern::Pathological`]).
    pub fn resolved(mut self) -> Self {
        if self.pattern == Pattern::Pathological {
            self.wait_for_subscribers = self.wait_for_subscribers.max(1);
            self.back_pressure = BackPressure::Block;
        }
        self
    }

    /// Whether the wait for subscribers before the first message has a deadline (`subscriber_wait`): every
    /// pattern but the pathological one, which waits until someone subscribes.
    pub fn subscriber_wait_deadline(&self) -> Option<std::time::Duration> {
        (self.pattern != Pattern::Pathological).then_some(self.subscriber_wait.0)
    }

    /// Whether the shards batch: `batch` where set; unset, a recorded source (`recorded`) batches, as `replay`
    /// sends the same records, and the synthetic market sends one message each (a paced feed's latency figures
    /// are taken on single frames).
    pub fn batch_mode(&self, recorded: bool) -> BatchMode {
        self.batch.unwrap_or(if recorded {
            BatchMode::Auto
        } else {
            BatchMode::Off
        })
    }

    /// Whether the synthetic feed's shard sockets are XPUBs (which see subscriptions): for `back_pressure = "block"`,
    /// `wait_for_subscribers`,
    /// `batch = "auto"`, and shards that connect (so a feed connected to nothing knows it delivered to no one).
    pub fn uses_xpub(&self) -> bool {
        self.back_pressure.blocks()
            || self.wait_for_subscribers > 0
            || self.batch_mode(false) == BatchMode::Auto
            || self.shards.iter().any(|s| s.connect)
    }

    /// The pacing of one shard that carries `share` (0..=1) of the total activity.
    pub fn shard_pacing(&self, share: f64, topics_in_shard: u64) -> Pacing {
        if self.pattern == Pattern::Pathological {
            return Pacing::Pathological {
                initial: topics_in_shard,
                interval_ns: saturating_nanos(self.pathological_interval),
            };
        }
        let total = match (self.mode, self.rate) {
            (PacingMode::FlatOut, _) | (_, Rate::Max) => return Pacing::FlatOut,
            (_, Rate::PerSecond(n)) => n,
        };
        // Every shard keeps at least 1 msg/s so a shard of cold names still shows it is alive with data.
        let per_second = ((total as f64) * share).round().max(1.0) as u64;
        match self.mode {
            PacingMode::Paced => Pacing::Paced { per_second },
            PacingMode::Bursty => Pacing::Bursty {
                per_second,
                mean_burst: self.burst_size,
            },
            PacingMode::FlatOut => Pacing::FlatOut,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_batch_spelling_reads_off_auto_and_a_record_count() {
        let parse = |s: &str| s.parse::<Batching>().unwrap();
        assert_eq!(parse("off"), Batching::Off);
        assert_eq!(parse("AUTO"), Batching::Auto);
        assert_eq!((parse("0"), parse("1")), (Batching::Off, Batching::Off));
        assert_eq!(parse("32"), Batching::Records(32));
        assert!("sometimes".parse::<Batching>().is_err());
        assert!("70000".parse::<Batching>().is_err());
        assert_eq!(
            [Batching::Off, Batching::Auto, Batching::Records(32)].map(Batching::max_records),
            [Some(1), None, Some(32)]
        );
        let mut config = FeedConfig::default();
        Batching::Records(32).apply_to(&mut config);
        assert_eq!(
            (config.batch, config.batch_max_records),
            (Some(BatchMode::Auto), 32)
        );
        Batching::Off.apply_to(&mut config);
        assert_eq!(config.batch, Some(BatchMode::Off));
        assert_eq!(config.batch_mode(true), BatchMode::Off, "asked for: kept");
        let unset = FeedConfig::default();
        assert_eq!(
            (unset.batch_mode(false), unset.batch_mode(true)),
            (BatchMode::Off, BatchMode::Auto)
        );
    }

    #[test]
    fn rates_parse() {
        assert_eq!("100k".parse::<Rate>().unwrap(), Rate::PerSecond(100_000));
        assert_eq!("1.5M".parse::<Rate>().unwrap(), Rate::PerSecond(1_500_000));
        assert_eq!("2_000".parse::<Rate>().unwrap(), Rate::PerSecond(2_000));
        assert_eq!("max".parse::<Rate>().unwrap(), Rate::Max);
        for bad in ["", "k", "fast", "-5", "0", "1e99"] {
            assert!(bad.parse::<Rate>().is_err(), "{bad}");
        }
    }

    #[test]
    fn shard_ports_are_checked_before_any_socket() {
        let with = |endpoint: &str, connect: bool| FeedConfig {
            shards: vec![PublisherShardConfig {
                endpoint: endpoint.into(),
                connect,
                core: None,
            }],
            ..FeedConfig::default()
        };
        with("tcp://127.0.0.1:*", false).validate().unwrap();
        with("tcp://127.0.0.1:5556", true).validate().unwrap();
        for (endpoint, connect) in [
            ("tcp://127.0.0.1:70000", false),
            ("tcp://127.0.0.1:*", true),
            ("tcp://127.0.0.1:0", true),
        ] {
            let err = with(endpoint, connect).validate().unwrap_err();
            assert!(
                matches!(&err, FeedError::Endpoint { shard: 0, endpoint: e, .. } if e == endpoint),
                "{endpoint}: {err}"
            );
        }
    }

    #[test]
    fn empty_toml_is_the_default_and_typos_are_rejected() {
        let config: FeedConfig = toml::from_str("").unwrap();
        assert_eq!(config, FeedConfig::default());
        config.validate().unwrap();
        let config: FeedConfig = toml::from_str(
            "rate = \"250k\"\nmode = \"bursty\"\n[[shards]]\nendpoint = \"ipc:///tmp/x\"\ncore = 1\n",
        )
        .unwrap();
        assert_eq!(config.rate, Rate::PerSecond(250_000));
        assert_eq!(config.mode, PacingMode::Bursty);
        assert_eq!(config.shards[0].core, Some(1));
        assert!(toml::from_str::<FeedConfig>("rat = 5").is_err());
        assert!(toml::from_str::<FeedConfig>("rate = \"lots\"").is_err());
        assert!(toml::from_str::<FeedConfig>("mode = \"warp\"").is_err());
    }

    #[test]
    fn validation_names_the_field() {
        let mut config = FeedConfig {
            venue: "X.Y".into(),
            ..FeedConfig::default()
        };
        assert!(matches!(
            config.validate(),
            Err(FeedError::InvalidConfig { field: "venue", .. })
        ));
        config.venue = "XNAS".into();
        config.shards.clear();
        assert!(matches!(
            config.validate(),
            Err(FeedError::InvalidConfig {
                field: "shards",
                ..
            })
        ));
        config.shards.push(PublisherShardConfig::default());
        config.symbol_names = vec!["A".into(), "A".into()];
        assert!(matches!(
            config.validate(),
            Err(FeedError::InvalidConfig {
                field: "symbol_names",
                ..
            })
        ));
    }
}
