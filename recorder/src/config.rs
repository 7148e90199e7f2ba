//! The `[recorder]` section of the deployment TOML: defaults for `tickbox record` and `tickbox replay`.

use serde::{Deserialize, Serialize};

/// Durability policy of recorded journals.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DurabilityConfig {
    /// Kernel writeback only (a killed recorder loses nothing; a power cut may lose the last seconds).
    #[default]
    None,
    /// msync every `sync_interval_ms` from a background thread.
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
    /// Ring capacity in bytes (data region) when `tickbox record` creates a ring.
    pub capacity: u64,
    /// Segment size in bytes for archive journals.
    pub segment_size: u64,
    pub durability: DurabilityConfig,
    pub sync_interval_ms: u64,
    /// Most frames per journal batch.
    pub batch_max: usize,
    /// SUB receive high-water mark of the recorder.
    pub rcvhwm: i32,
    /// Send high-water mark of each replay shard.
    pub sndhwm: i32,
    /// With `replay --restamp`, shard `i` publishes as `publisher_id_base + i`.
    pub publisher_id_base: u32,
    /// Replay pacing burst window, microseconds.
    pub pacing_window_us: u64,
    /// Idle replay shards send a heartbeat this often, milliseconds (0 = never).
    pub heartbeat_interval_ms: u64,
    /// Replay blocks on slow subscribers instead of dropping (XPUB_NODROP).
    pub lossless: bool,
    /// Replay waits for this many subscriptions per shard before sending (0 = start at once).
    pub wait_subscribers: u64,
    /// ... for at most this long, milliseconds; then it fails (exit 1).
    pub wait_timeout_ms: u64,
}

impl Default for RecorderConfig {
    fn default() -> Self {
        RecorderConfig {
            mode: JournalModeConfig::Archive,
            capacity: 1 << 30,
            segment_size: 1 << 30,
            durability: DurabilityConfig::None,
            sync_interval_ms: 100,
            batch_max: 1024,
            rcvhwm: 1_000_000,
            sndhwm: 100_000,
            publisher_id_base: 9000,
            pacing_window_us: 200,
            heartbeat_interval_ms: 1000,
            lossless: true,
            wait_subscribers: 1,
            wait_timeout_ms: 60_000,
        }
    }
}

impl RecorderConfig {
    pub fn durability(&self) -> tickbox_journal::Durability {
        match self.durability {
            DurabilityConfig::None => tickbox_journal::Durability::None,
            DurabilityConfig::Batch => tickbox_journal::Durability::PerBatch,
            DurabilityConfig::Periodic => tickbox_journal::Durability::Periodic(
                std::time::Duration::from_millis(self.sync_interval_ms.max(1)),
            ),
        }
    }
}
