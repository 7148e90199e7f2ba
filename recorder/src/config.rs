//! The `[recorder]` section of the deployment TOML: defaults for `tickbox record` and `tickbox replay`.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use tickbox_units::{ByteSize, HumanDuration};
use tickbox_zmqx::BackPressure;

/// Durability policy of recorded journals.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DurabilityConfig {
    /// Kernel writeback only (a killed recorder loses nothing; a power cut may lose the last seconds).
    #[default]
    None,
    /// msync every `sync_interval` from a background thread.
    Periodic,
    /// msync every batch before taking the next one.
    Batch,
}

/// What `tickbox record` creates when the journal does not exist yet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum JournalModeConfig {
    /// A directory of `segment_size` segments, rolled when full, never overwritten: records a whole day.
    #[default]
    Archive,
    /// One file of `capacity` bytes; the oldest records are overwritten when full (a warning is logged each lap).
    Ring,
}

/// Recorder and replayer defaults; command-line flags override them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RecorderConfig {
    /// Journal layout `tickbox record` creates: `archive` (default) or `ring`.
    pub mode: JournalModeConfig,
    /// Ring capacity (data region) when `tickbox record` creates a ring: bytes, or a size such as `"4GiB"`.
    pub capacity: ByteSize,
    /// Segment size of archive journals: bytes, or a size such as `"1GiB"`.
    pub segment_size: ByteSize,
    /// When recorded data is forced to disk: `none` (default), `periodic` or `batch`.
    pub durability: DurabilityConfig,
    /// With `durability = "periodic"`, how often the journal is flushed to disk.
    pub sync_interval: HumanDuration,
    /// Most frames per journal batch.
    pub batch_max: usize,
    /// SUB receive high-water mark of the recorder.
    #[serde(alias = "rcvhwm")]
    pub receive_hwm: i32,
    /// `tickbox record` of several endpoints reads each on its own thread; reader `i` is pinned to
    /// `reader_cores[i]` (empty, the default: unpinned).
    pub reader_cores: Vec<usize>,
    /// Send high-water mark of each replay shard.
    #[serde(alias = "sndhwm")]
    pub send_hwm: i32,
    /// With `replay --restamp`, shard `i` publishes as `publisher_id_base + i`.
    pub publisher_id_base: u32,
    /// Replay pacing burst window: records due within it are sent together.
    pub pacing_window: HumanDuration,
    /// Idle replay shards send a heartbeat this often (`0s` = never).
    pub heartbeat_interval: HumanDuration,
    /// `block` (the default): replay blocks on slow subscribers instead of dropping (XPUB_NODROP); `drop`: a
    /// slow subscriber loses what its queue cannot hold. The older `lossless = true` still reads.
    #[serde(alias = "lossless")]
    pub back_pressure: BackPressure,
    /// Replay waits for this many subscriptions per shard before sending (0 = start at once).
    pub wait_subscribers: u64,
    /// ... for at most this long; then it fails (exit 1).
    pub wait_timeout: HumanDuration,
    /// Longest subscription prefix a replay shard accepts, in bytes; a subscriber sending a longer one is
    /// disconnected by libzmq (`ZMQ_MAXMSGSIZE`) before the prefix reaches its subscription trie.
    pub max_subscription_bytes: usize,
    /// Most records per replay batch frame (several records in one ZeroMQ message, sent only while every
    /// subscriber of a shard takes everything); 0 or 1 sends each record alone.
    pub replay_batch_records: u16,
    /// Largest replay batch frame: bytes, or a size such as `"8KiB"` (at most 64 KiB is useful per record).
    pub replay_batch_bytes: ByteSize,
    /// Where `tickbox record` serves the journal it writes to late joiners (`subscribe --catch-up`): a ROUTER
    /// endpoint such as `tcp://*:6100`; none by default.
    pub serve: Option<String>,
    /// `tickbox record` writes a history, one journal per period: `daily`, `hourly` or a size such as `"64MiB"`;
    /// unset by default (one journal).
    pub roll: Option<String>,
    /// The local time of day a daily roll starts a new journal at (`"17:00"`).
    pub roll_at: String,
    /// The IANA zone of `roll_at` and of hourly rolls (`"America/New_York"`).
    pub roll_tz: String,
    /// A history keeps its journals this long (`"30d"`): older ones are deleted, oldest first; unset by default
    /// (keep everything).
    pub retain: Option<HumanDuration>,
    /// A history keeps at most this many bytes on disk (`"2TiB"`): the oldest journals go first; unset by default.
    pub retain_size: Option<ByteSize>,
    /// `tickbox record` into a history compresses each journal it closes (seekable zstd frames, read
    /// transparently by every reader), off the recording thread.
    pub compress: bool,
}

impl Default for RecorderConfig {
    fn default() -> Self {
        RecorderConfig {
            mode: JournalModeConfig::Archive,
            capacity: ByteSize(1 << 30),
            segment_size: ByteSize(1 << 30),
            durability: DurabilityConfig::None,
            sync_interval: HumanDuration(Duration::from_millis(100)),
            batch_max: 1024,
            receive_hwm: 1_000_000,
            reader_cores: Vec::new(),
            send_hwm: 100_000,
            publisher_id_base: 9000,
            pacing_window: HumanDuration(Duration::from_micros(200)),
            heartbeat_interval: HumanDuration(Duration::from_secs(1)),
            back_pressure: BackPressure::Block,
            wait_subscribers: 1,
            wait_timeout: HumanDuration(Duration::from_secs(60)),
            max_subscription_bytes: tickbox_zmqx::DEFAULT_MAX_SUBSCRIPTION_BYTES,
            replay_batch_records: crate::replay::DEFAULT_BATCH_RECORDS,
            replay_batch_bytes: ByteSize(crate::replay::DEFAULT_BATCH_BYTES as u64),
            serve: None,
            roll: None,
            roll_at: "00:00".into(),
            roll_tz: "UTC".into(),
            retain: None,
            retain_size: None,
            compress: false,
        }
    }
}

impl RecorderConfig {
    /// The journal durability these settings ask for; a periodic `sync_interval` under 1 ms is raised to 1 ms.
    pub fn durability(&self) -> tickbox_journal::Durability {
        match self.durability {
            DurabilityConfig::None => tickbox_journal::Durability::None,
            DurabilityConfig::Batch => tickbox_journal::Durability::PerBatch,
            DurabilityConfig::Periodic => tickbox_journal::Durability::Periodic(
                self.sync_interval.0.max(Duration::from_millis(1)),
            ),
        }
    }
}
