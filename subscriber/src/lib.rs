//! The Black Box subscriber: pinned SUB shard threads that decode each frame's header, run the Suicidal Snail and
//! gap checks, and hand the very same `zmq::Message` to a pool of worker threads over `inproc` PUSH/PULL.
//!
//! ```text
//!  publisher endpoints ──► shard 0 (SUB, pinned, NIC) ── PUSH inproc ──┬──► worker 0 (PULL, pinned)
//!                      ──► shard 1 (SUB, pinned, NIC) ── PUSH inproc ──┼──► worker 1
//!                                                                      └──► worker 2   (every worker pulls from
//!                                                                                       every shard)
//! ```
//!
//! Lateness is checked twice: at the shard on receipt (network and publisher-side queueing) and at each worker on
//! dequeue (time spent waiting behind a slow worker). Either one past the threshold trips the subscriber; the
//! owner sees [`Subscriber::fatal`] and exits with the snail's exit code.
//!
//! The protocol logic is sans-IO: [`Snail`] and [`GapDetector`] take a header and a time and return a verdict;
//! the shard loop owns the sockets and the clock.

mod blackbox;
mod duration;
mod gap;
mod snail;

pub use blackbox::{
    endpoint_via_nic, lateness_histogram, Fatal, GapFatal, LiveShardCounters, Report, ShardReport,
    SnailEvent, SnailHook, Stage, Subscriber, WorkerReport,
};
pub use duration::{format_duration, parse_duration, DurationError, HumanDuration};
pub use gap::{GapDetector, GapEvent};
/// Re-exported so users of [`Report`] need no direct hdrhistogram dependency.
pub use hdrhistogram::Histogram;
pub use snail::{SharedThreshold, Snail, Verdict};

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// What to do when a sequence gap is detected.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GapPolicy {
    /// Log and count, keep running.
    #[default]
    Warn,
    /// Trip the subscriber like the snail does.
    Die,
}

impl std::str::FromStr for GapPolicy {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "warn" => Ok(GapPolicy::Warn),
            "die" => Ok(GapPolicy::Die),
            other => Err(format!("gap policy must be warn or die, not {other:?}")),
        }
    }
}

/// One shard: one SUB socket connected to `connect`, optionally from a NIC, optionally pinned.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ShardConfig {
    /// Publisher endpoints (`tcp://host:port`, `ipc://…`, `inproc://…`).
    pub connect: Vec<String>,
    /// Connect from this network interface (`tcp://IFACE:0;host:port`); tcp endpoints only.
    pub nic: Option<String>,
    /// OS CPU id for the shard thread (and thus the libzmq I/O work it triggers is close by).
    pub core: Option<usize>,
}

/// The `[subscriber]` section of the deployment config.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SubscriberConfig {
    pub shards: Vec<ShardConfig>,
    /// Topic prefixes to subscribe to; empty means everything (and only then are gaps detected).
    pub topics: Vec<String>,
    /// Suicidal Snail threshold: receive time minus send time. `0` disables the guard.
    pub max_lateness: HumanDuration,
    pub gap_policy: GapPolicy,
    /// Receive high-water mark of each SUB socket, in messages. Every buffered message adds 1/rate of
    /// lateness when the subscriber is the bottleneck, so deep buffers turn a busy subscriber into a snail.
    pub rcv_hwm: i32,
    /// Send high-water mark of each shard's inproc PUSH, in messages.
    pub handoff_hwm: i32,
    /// How often idle threads check for shutdown, in milliseconds.
    pub poll_ms: u64,
    /// How long a clean shutdown waits for workers to finish what the shards forwarded.
    pub drain_timeout: HumanDuration,
    /// Clone key-value servers (`tcp://host:port`; two for a Binary Star pair) for live settings, membership and
    /// alerts; empty means none. Carried here for `tickbox subscribe`; the subscriber engine does not use them.
    pub clone: Vec<String>,
    /// Identity under `/members/subscribers/` and `/alerts/subscribers/`; default hostname-pid.
    pub member_id: Option<String>,
    /// Membership lease: the entry disappears this long after the subscriber dies.
    pub member_ttl: HumanDuration,
}

impl Default for SubscriberConfig {
    fn default() -> Self {
        Self {
            shards: Vec::new(),
            topics: Vec::new(),
            max_lateness: HumanDuration(Duration::from_secs(1)),
            gap_policy: GapPolicy::Warn,
            rcv_hwm: 10_000,
            handoff_hwm: 1_000,
            poll_ms: 50,
            drain_timeout: HumanDuration(Duration::from_secs(5)),
            clone: Vec::new(),
            member_id: None,
            member_ttl: HumanDuration(Duration::from_secs(3)),
        }
    }
}

/// Errors starting or stopping a subscriber. Runtime events (late messages, gaps, malformed frames) are not
/// errors: they are counted in the [`Report`] and, when fatal, returned as [`Fatal`].
#[derive(Debug, thiserror::Error)]
pub enum SubscriberError {
    #[error("invalid subscriber config: {0}")]
    Config(String),
    #[error("shard {shard}: {what}: {source}")]
    Zmq {
        shard: usize,
        what: &'static str,
        #[source]
        source: zmq::Error,
    },
    #[error("shard {shard}: cannot connect to {endpoint}: {source}")]
    Connect {
        shard: usize,
        endpoint: String,
        #[source]
        source: zmq::Error,
    },
    #[error("cannot spawn shard thread: {0}")]
    Spawn(#[source] std::io::Error),
    #[error("shard {0} did not start")]
    NotStarted(usize),
    #[error("shard thread {0} panicked")]
    ShardPanicked(usize),
    #[error(transparent)]
    Workers(#[from] tickbox_workers::WorkerError),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_reads_from_toml_with_defaults_and_rejects_typos() {
        let config: SubscriberConfig = toml::from_str(
            r#"
            max_lateness = "250us"
            gap_policy = "die"
            topics = ["Q.XNAS."]
            clone = ["tcp://10.0.0.9:5556", "tcp://10.0.0.10:5556"]
            member_ttl = "10s"
            [[shards]]
            connect = ["tcp://10.0.0.1:5556"]
            nic = "eth1"
            core = 2
            "#,
        )
        .unwrap();
        assert_eq!(config.max_lateness.0, Duration::from_micros(250));
        assert_eq!(config.gap_policy, GapPolicy::Die);
        assert_eq!(config.shards[0].nic.as_deref(), Some("eth1"));
        assert_eq!(config.rcv_hwm, SubscriberConfig::default().rcv_hwm);
        assert_eq!(config.clone.len(), 2);
        assert_eq!(config.member_ttl.0, Duration::from_secs(10));
        assert_eq!(config.member_id, None);
        assert!(toml::from_str::<SubscriberConfig>("max_latenes = \"1s\"").is_err());
        assert!(toml::from_str::<SubscriberConfig>("max_lateness = \"soon\"").is_err());
        assert!(toml::from_str::<SubscriberConfig>("gap_policy = \"panic\"").is_err());
        assert_eq!(
            toml::from_str::<SubscriberConfig>("").unwrap(),
            SubscriberConfig::default()
        );
    }
}
