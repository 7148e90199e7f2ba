//! What one shard runs by: its place among the shards, its endpoints, the checks it makes and the limits it keeps,
//! copied out of [`SubscriberConfig`](crate::SubscriberConfig) once by the owner and read by the shard's receive
//! loop and its core (or by a local replay's core).

use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use tickbox_workers::Dispatch;

use crate::clock::ClockTable;
use crate::report::SubscriberShardReport;
use crate::snail::SharedThreshold;
use crate::{Framing, GapPolicy, SnailMode, SubscriberShardConfig};

/// Records taken off the socket before a burst ends (parcels handed over, counters published).
pub(crate) const BURST_RECORDS: u64 = 256;

/// One shard's settings (see the module documentation).
pub(crate) struct ShardSettings {
    pub(crate) index: usize,
    pub(crate) shard: SubscriberShardConfig,
    pub(crate) topics: Vec<String>,
    pub(crate) gaps: bool,
    pub(crate) gap_policy: GapPolicy,
    pub(crate) threshold: SharedThreshold,
    pub(crate) snail_mode: SnailMode,
    pub(crate) clocks: Arc<ClockTable>,
    pub(crate) dispatch: Dispatch,
    /// How received messages are taken apart (tickbox frames, Guide `[topic][body]`, or per message).
    pub(crate) framing: Framing,
    pub(crate) workers: usize,
    pub(crate) receive_hwm: i32,
    /// The subscriber's socket profile with this shard's `io_thread` folded in as its affinity.
    pub(crate) profile: tickbox_zmqx::profile::SocketProfile,
    /// `[security]`: applied to the SUB before it connects.
    pub(crate) security: tickbox_auth::Security,
    pub(crate) poll_ms: i64,
    /// Set by the worker pool when a worker panics: its queue may never drain again, so the shard stops.
    pub(crate) workers_failed: Arc<AtomicBool>,
}

impl ShardSettings {
    /// This shard's report before anything was received.
    pub(crate) fn empty_report(&self) -> SubscriberShardReport {
        SubscriberShardReport {
            nic: self.shard.nic.clone(),
            io_thread: self.shard.io_thread,
            ..SubscriberShardReport::before_receiving(
                self.index,
                self.shard.connect.clone(),
                self.workers,
            )
        }
    }
}
