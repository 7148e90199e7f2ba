//! The Black Box subscriber: pinned SUB shard threads that decode each frame's header once, run the Suicidal Snail
//! and sequence checks, and hand the received frames (moved, or shared for the records of a batch frame) with their
//! decoded headers to a pool of worker threads, in parcels over bounded in-process channels (`handoff = "ring"`)
//! or over inproc PUSH/PULL (`handoff = "zmq"`). [`replay_local`] runs the same shard logic and workers on frames
//! read from a journal, with no socket at all (backtests).
//!
//! ```text
//!  publisher endpoints ──► shard 0 (SUB, pinned, NIC) ──┬──► queue 0 ──► worker 0 (pinned)
//!                      ──► shard 1 (SUB, pinned, NIC) ──┼──► queue 1 ──► worker 1
//!                                                       └──► queue 2 ──► worker 2
//!        dispatch = "by_topic": a shard sends each symbol to its worker's queue (stable hash of the symbol key)
//!        dispatch = "round_robin": one queue for all; whichever worker is free takes the next message
//! ```
//!
//! Lateness is checked twice: at the shard on receipt (network and publisher-side queueing) and at each worker on
//! dequeue (time spent waiting behind a slow worker). Either one past the threshold trips the subscriber; the
//! owner sees [`Subscriber::fatal`] and exits with the snail's exit code. In [`SnailMode::SkewTolerant`] lateness
//! is measured relative to the publisher's best observed delay ([`ClockTable`]), so a publisher clock that runs
//! behind or ahead of ours neither fires the snail on on-time messages nor hides real lateness.
//!
//! Sequences are accounted for by [`tickbox_wire::SequenceTracker`], the engine every hop shares: only this hop's
//! own loss (a `Gap`) can trip `gap_policy = "die"`; recorded gaps (gap notices from a replayed journal),
//! restarts, duplicates, reordered arrivals and anomalies are counted and logged at a limited rate.
//!
//! The protocol logic is sans-IO: [`Snail`], the tracker and the clock table take a header and a time and
//! return a verdict; the shard loop owns the sockets and the clock.

mod blackbox;
mod catch_up;
mod catch_up_phase;
mod clock;
mod handoff;
mod history_client;
mod hook;
mod idle;
mod local;
mod local_view;
mod logs;
mod metrics;
mod nic;
mod outcome;
mod overrides;
mod receive_clock;
mod report;
mod run_view;
mod settings;
mod shard;
mod shard_core;
mod shared;
mod snail;
mod summary;

pub use blackbox::Subscriber;
pub use catch_up::{
    CatchUp, CatchUpError, CatchUpReport, CatchUpVerdict, PublisherSession, SeamHole, SeamPosition,
};
pub use catch_up_phase::{CatchUpHandle, CatchUpSummary};
pub use clock::{
    delay_ns, ClockOffset, ClockTable, SkewWarning, MAX_CLOCK_PUBLISHERS, MAX_PLAUSIBLE_OFFSET_NS,
};
/// Re-exported so users of [`Report`] need no direct hdrhistogram dependency.
pub use handoff::{choose_handoff, HandoffChoice};
pub use hdrhistogram::Histogram;
pub use history_client::{HistoryClient, HistoryClientError, HistoryOutcome};
pub use hook::SnailHook;
pub use idle::{IdleClock, RunEnd, RunLook, RunWatch, Silence, SilenceWatch, SILENCE_WARNING};
pub use local::{replay_local, LocalHook, LocalReplayReport, LocalSink};
pub use local_view::LocalVerdict;
pub use metrics::SubscriberMetrics;
pub use nic::check_nic;
pub use overrides::SubscriberOverrides;
pub use receive_clock::ReceiveClock;
pub use report::{
    lateness_histogram, CatchUpFatal, Fatal, GapFatal, Report, SnailEvent, Stage,
    SubscriberShardReport, WorkerReport,
};
pub use run_view::{live_line, tape_lines, RunExtras, RunVerdict};
pub use shard::{LvcSnapshot, LvcSnapshotReport};
pub use shared::LiveShardCounters;
pub use snail::{lateness_ns, SharedThreshold, Snail, SnailVerdict};
pub use summary::{standard_worker, standard_worker_with_tape, StandardWorker};
/// How shards take received messages apart (`framing` in `[subscriber]`): the tap's enum, one for both readers.
pub use tickbox_lvc::tap::Framing;
pub use tickbox_units::{format_duration, parse_duration, HumanDuration, UnitsError};
pub use tickbox_wire::{PublisherLedger, SequenceEvent, SequenceTotals, SequenceTracker};
pub use tickbox_workers::Dispatch;

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

/// How the Suicidal Snail measures lateness.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SnailMode {
    /// Receive time minus the publisher's send time, as the clocks say: exact when clocks are synchronised, but a
    /// publisher whose clock is behind ours looks late on every message and one ahead hides real lateness.
    #[default]
    Strict,
    /// Delay minus the publisher's minimum observed delay (its estimated clock offset plus the best network
    /// delay): only lateness beyond the publisher's best is judged, whatever its clock says.
    SkewTolerant,
}

impl SnailMode {
    /// The config spelling (`strict` or `skew_tolerant`), the inverse of [`FromStr`](std::str::FromStr).
    pub fn as_str(self) -> &'static str {
        match self {
            SnailMode::Strict => "strict",
            SnailMode::SkewTolerant => "skew_tolerant",
        }
    }
}

impl std::str::FromStr for SnailMode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "strict" => Ok(SnailMode::Strict),
            "skew_tolerant" => Ok(SnailMode::SkewTolerant),
            other => Err(format!(
                "snail mode must be strict or skew_tolerant, not {other:?}"
            )),
        }
    }
}

/// How shards hand records to workers (`handoff` in `[subscriber]`, `--handoff`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Handoff {
    /// Chosen at start ([`choose_handoff`]): `inline` whenever its semantics are the ring's (one worker per shard,
    /// and a symbol's records cannot arrive on two shards' workers: one shard, or `round_robin`), `ring` otherwise.
    /// The run says which it chose and why ([`HandoffChoice`]).
    #[default]
    Auto,
    /// Bounded lock-free channels carrying parcels of decoded records, no copy and no second decode (both ends in
    /// this process). Measured faster than `zmq` (benches/handoff.rs); what `auto` runs when workers share shards.
    Ring,
    /// One inproc PUSH per worker (or one shared, `round_robin`) and a PULL per worker, as in the ZeroMQ Guide;
    /// workers decode each frame again, and batched records are copied into messages of their own.
    Zmq,
    /// No hand-off: each shard runs its own worker on its own thread (worker `i` is shard `i`'s, so `[workers]
    /// count` must equal the shard count, and a symbol's order holds per shard). Nothing waits between receipt
    /// and the worker, so latency is a single thread's; a slow worker slows its shard's reads instead of filling
    /// a queue (back-pressure to the SUB socket, then the publishers, as a full ring would).
    Inline,
}

impl Handoff {
    /// The config spelling (`auto`, `ring`, `zmq`, `inline`), which [`str::parse`] reads back.
    pub fn as_str(self) -> &'static str {
        match self {
            Handoff::Auto => "auto",
            Handoff::Ring => "ring",
            Handoff::Zmq => "zmq",
            Handoff::Inline => "inline",
        }
    }
}

impl std::fmt::Display for Handoff {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for Handoff {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "auto" => Ok(Handoff::Auto),
            "ring" => Ok(Handoff::Ring),
            "zmq" => Ok(Handoff::Zmq),
            "inline" => Ok(Handoff::Inline),
            other => Err(format!(
                "handoff must be auto, ring, zmq or inline, not {other:?}"
            )),
        }
    }
}

/// One shard: one SUB socket connected to `connect`, optionally from a NIC, optionally pinned.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SubscriberShardConfig {
    /// Publisher endpoints (`tcp://host:port`, `ipc://…`, `inproc://…`).
    pub connect: Vec<String>,
    /// Connect from this network interface (`tcp://IFACE:0;host:port`); tcp endpoints only.
    pub nic: Option<String>,
    /// OS CPU id for the shard thread (and thus the libzmq I/O work it triggers is close by).
    pub core: Option<usize>,
    /// libzmq I/O thread `n` (`ZMQbg/IO/n`) this shard's SUB uses (`ZMQ_AFFINITY` bit `n`): the one
    /// `tickbox tune plan` pinned near this shard's NIC. Unset lets libzmq choose (and the `affinity` of
    /// `[context.sockets.subscriber]`, if any, apply).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub io_thread: Option<usize>,
}

/// The `[subscriber]` section of the deployment config.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SubscriberConfig {
    /// One SUB socket and thread per entry; at least one is required.
    pub shards: Vec<SubscriberShardConfig>,
    /// Topic prefixes to subscribe to; empty means everything (and only then are gaps detected).
    pub topics: Vec<String>,
    /// Suicidal Snail threshold: receive time minus send time. `0` disables the guard.
    pub max_lateness: HumanDuration,
    /// How lateness is measured: `strict` (against the publisher's clock) or `skew_tolerant` (relative to the
    /// publisher's best observed delay).
    pub snail_mode: SnailMode,
    /// Warn (once per publisher each time it crosses) when a publisher's estimated clock offset exceeds this
    /// either way; `0` never warns.
    pub clock_skew_warn: HumanDuration,
    /// Only this hop's own losses trip `die`; recorded gaps, restarts, duplicates and anomalies never do.
    pub gap_policy: GapPolicy,
    /// How shards hand messages to workers: `by_topic` (one worker per symbol, in order) or `round_robin`.
    pub dispatch: Dispatch,
    /// How a shard reads what its SUB receives: `tickbox` (every frame a tickbox frame or batch; default), `guide`
    /// (every message the ZeroMQ Guide's `[topic][body]`, handed to [`Worker::on_guide`](tickbox_workers::Worker)
    /// with no snail or sequence check, since it has no header; a message of one frame or of more than two is
    /// counted malformed), or `auto` (per message: multipart whose first frame is not a tickbox frame is a Guide
    /// message, anything else tickbox frames).
    pub framing: Framing,
    /// Receive high-water mark of each SUB socket, in messages. Every buffered message adds 1/rate of
    /// lateness when the subscriber is the bottleneck, so deep buffers turn a busy subscriber into a snail.
    #[serde(alias = "rcv_hwm")]
    pub receive_hwm: i32,
    /// How shards hand records to workers: `auto` (default: `inline` when there is one worker per shard and either
    /// one shard or `round_robin`, else `ring`; the summary says which and why), `ring` (in-process channels of
    /// parcels), `zmq` (inproc PUSH/PULL) or `inline` (each shard runs its own worker: as many workers as shards,
    /// no hand-off).
    pub handoff: Handoff,
    /// Capacity of each worker's hand-off queue, in records (`round_robin`: of the one shared queue, times the
    /// worker count); the ring holds it as `handoff_hwm / 64` parcels of up to 64 records (at least 4 parcels). A
    /// full queue blocks the shards (back-pressure to the SUB sockets, then the publishers): nothing is dropped.
    pub handoff_hwm: i32,
    /// How often idle threads check for shutdown (clamped to 1 ms ..= 1 s).
    pub poll_interval: HumanDuration,
    /// How long a clean shutdown waits for workers to finish what the shards forwarded.
    pub drain_timeout: HumanDuration,
    /// Clone key-value servers (`tcp://host:port`; two for a Binary Star pair) for live settings, membership and
    /// alerts; empty means none. Carried here for `tickbox subscribe`; the subscriber engine does not use them.
    pub clone: Vec<String>,
    /// Identity under `/members/subscribers/` and `/alerts/subscribers/`; default hostname-pid.
    pub member_id: Option<String>,
    /// Membership lease: the entry disappears this long after the subscriber dies.
    pub member_ttl: HumanDuration,
    /// An LVC's snapshot endpoint (`tickbox lvc --snapshot`). Once the first shard's SUB has completed its
    /// handshake with each of its endpoints (so its subscriptions are in place and nothing published after the
    /// snapshot is missed), that shard asks it for the cached values of `topics` and feeds them through the same
    /// path as CACHED frames. Its outcome is in [`Subscriber::lvc_snapshot`] and the summaries.
    pub lvc_snapshot: Option<String>,
    /// How long the snapshot may take, from the request to its end marker; past it the snapshot is reported as
    /// timed out (the values received so far are kept).
    pub lvc_snapshot_timeout: HumanDuration,
    /// A recorder's history service (`tickbox record --serve`): the subscriber holds its live records, fetches the
    /// history of `topics` from `catch_up_from` through its first shard, then hands the held records over without
    /// those the history delivered, so every publisher's sequence reaches the workers once and in order across
    /// the seam. Its outcome is in [`Subscriber::catch_up`] and the summaries. Not with `lvc_snapshot` (the history
    /// holds every value), nor with `handoff = "inline"` and several shards (the history goes through the first).
    pub catch_up: Option<String>,
    /// Where the history starts: `start` (the journal's oldest record), an RFC 3339 time or ns since the epoch
    /// (origin time, as `replay --from`).
    pub catch_up_from: String,
    /// The most bytes of live records held while catching up; past it the subscriber stops with an error that
    /// names this budget (nothing held is delivered out of order).
    pub catch_up_budget: tickbox_units::ByteSize,
    /// How long the history service may stay silent (and how long the SUB's handshakes are awaited before
    /// asking); past it the catch-up fails.
    pub catch_up_timeout: HumanDuration,
    /// `[context.sockets.subscriber]`, copied here by the binary; applied to every shard's SUB (see `tickbox_zmqx::profile`).
    #[serde(skip)]
    pub socket_profile: tickbox_zmqx::profile::SocketProfile,
    /// `[security]`, loaded and shared by the binary: applied to every socket this component binds or connects.
    #[serde(skip)]
    pub security: tickbox_auth::Security,
}

impl Default for SubscriberConfig {
    fn default() -> Self {
        Self {
            shards: Vec::new(),
            topics: Vec::new(),
            max_lateness: HumanDuration(Duration::from_secs(1)),
            snail_mode: SnailMode::Strict,
            clock_skew_warn: HumanDuration(Duration::from_millis(100)),
            gap_policy: GapPolicy::Warn,
            dispatch: Dispatch::ByTopic,
            framing: Framing::Tickbox,
            receive_hwm: 10_000,
            handoff: Handoff::Auto,
            handoff_hwm: 1_000,
            poll_interval: HumanDuration(Duration::from_millis(50)),
            drain_timeout: HumanDuration(Duration::from_secs(5)),
            clone: Vec::new(),
            member_id: None,
            member_ttl: HumanDuration(Duration::from_secs(3)),
            lvc_snapshot: None,
            lvc_snapshot_timeout: HumanDuration(Duration::from_secs(5)),
            catch_up: None,
            catch_up_from: "start".to_owned(),
            catch_up_budget: tickbox_units::ByteSize(256 << 20),
            catch_up_timeout: HumanDuration(Duration::from_secs(10)),
            socket_profile: tickbox_zmqx::profile::SocketProfile::default(),
            security: tickbox_auth::Security::default(),
        }
    }
}

/// Errors starting or stopping a subscriber. Runtime events (late messages, gaps, malformed frames) are not
/// errors: they are counted in the [`Report`] and, when fatal, returned as [`Fatal`].
#[derive(Debug, thiserror::Error)]
pub enum SubscriberError {
    /// A command-line flag cannot apply over the config ([`SubscriberOverrides`]); the text names the flag.
    #[error("{0}")]
    Override(String),
    /// The config cannot run (no shards, a shard without endpoints, an endpoint a NIC cannot be applied to); the
    /// text says which setting.
    #[error("invalid subscriber config: {0}")]
    Config(String),
    /// A shard's `nic` cannot be used (see [`check_nic`]).
    #[error("interface {nic:?}: {reason}")]
    Nic {
        /// The interface name as configured.
        nic: String,
        /// Why it was rejected: malformed, absent, or without an IPv4 address.
        reason: String,
    },
    /// Creating or configuring a shard's SUB socket failed.
    #[error("shard {shard}: {what}: {source}")]
    Zmq {
        /// Index of the shard in `SubscriberConfig::shards`.
        shard: usize,
        /// The step that failed (`create SUB`, `set rcvhwm`, `subscribe`, …).
        what: &'static str,
        /// libzmq's error.
        #[source]
        source: zmq::Error,
    },
    /// A shard's SUB socket rejected an endpoint (malformed address or unsupported transport).
    #[error("shard {shard}: cannot connect to {endpoint}: {source}")]
    Connect {
        /// Index of the shard in `SubscriberConfig::shards`.
        shard: usize,
        /// The endpoint as connected, after any NIC rewrite.
        endpoint: String,
        /// libzmq's error.
        #[source]
        source: zmq::Error,
    },
    /// The OS refused a shard thread.
    #[error("cannot spawn shard thread: {0}")]
    Spawn(#[source] std::io::Error),
    /// Not every shard reported its socket ready within 10 s; the number is how many shard threads were spawned,
    /// not which one stalled.
    #[error("shard {0} did not start")]
    NotStarted(usize),
    /// The shard thread with this index panicked, so its report is lost.
    #[error("shard thread {0} panicked")]
    ShardPanicked(usize),
    /// The worker pool could not start or stop.
    #[error(transparent)]
    Workers(#[from] tickbox_workers::WorkerError),
    /// `[security]` could not be applied to a shard's socket.
    #[error(transparent)]
    Auth(#[from] tickbox_auth::AuthError),
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
        assert_eq!(config.receive_hwm, SubscriberConfig::default().receive_hwm);
        assert_eq!(config.clone.len(), 2);
        assert_eq!(config.member_ttl.0, Duration::from_secs(10));
        assert_eq!(config.member_id, None);
        assert_eq!(config.dispatch, Dispatch::ByTopic);
        assert_eq!(config.framing, Framing::Tickbox);
        assert_eq!(config.snail_mode, SnailMode::Strict);
        assert_eq!(config.clock_skew_warn.0, Duration::from_millis(100));
        let config: SubscriberConfig = toml::from_str(
            "dispatch = \"round_robin\"\nsnail_mode = \"skew_tolerant\"\nclock_skew_warn = \"2s\"",
        )
        .unwrap();
        assert_eq!(
            (config.dispatch, config.snail_mode, config.clock_skew_warn.0),
            (
                Dispatch::RoundRobin,
                SnailMode::SkewTolerant,
                Duration::from_secs(2)
            )
        );
        assert!(toml::from_str::<SubscriberConfig>("dispatch = \"random\"").is_err());
        assert_eq!(
            toml::from_str::<SubscriberConfig>("framing = \"guide\"")
                .unwrap()
                .framing,
            Framing::Guide
        );
        assert!(toml::from_str::<SubscriberConfig>("framing = \"espresso\"").is_err());
        assert!(toml::from_str::<SubscriberConfig>("snail_mode = \"lax\"").is_err());
        assert!(toml::from_str::<SubscriberConfig>("max_latenes = \"1s\"").is_err());
        assert!(toml::from_str::<SubscriberConfig>("max_lateness = \"soon\"").is_err());
        assert!(toml::from_str::<SubscriberConfig>("gap_policy = \"panic\"").is_err());
        assert_eq!(
            toml::from_str::<SubscriberConfig>("").unwrap(),
            SubscriberConfig::default()
        );
    }
}
