//! `tickbox lvc`: its command-line arguments (what it parses; `cmd::lvc` wires them).

use std::time::Duration;
use tickbox_lvc::{BackPressure, LateJoiners, Overflow, TapDrop};

/// Command-line overrides of the `[lvc]` config section.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// Publisher endpoints to connect to (one per shard).
    #[arg(long, value_delimiter = ',', value_name = "EP[,EP…]")]
    pub(crate) upstream: Vec<String>,
    /// Endpoints to bind for publishers that connect (`tickbox feed --connect`).
    #[arg(long, value_delimiter = ',', value_name = "EP[,EP…]")]
    pub(crate) upstream_bind: Vec<String>,
    /// Where subscribers connect. Default: the config's, else `tcp://127.0.0.1:5558` (loopback; `tcp://*:5558`
    /// for every interface).
    #[arg(long, value_name = "EP")]
    pub(crate) bind: Option<String>,
    /// Bind the Espresso tap here.
    #[arg(long, value_name = "EP")]
    pub(crate) tap: Option<String>,
    /// Bind the snapshot ROUTER here: a late joiner (`tickbox subscribe --lvc-snapshot`) asks it for the cached
    /// values of its prefixes and gets them alone, followed by an end marker with their count.
    #[arg(long, value_name = "EP")]
    pub(crate) snapshot: Option<String>,
    /// How late joiners get cached values: `broadcast` (a burst on the subscriber socket, which every matching
    /// subscriber receives; for plain SUB clients), `snapshot` (no burst; clients ask --snapshot), or `auto`
    /// (default: snapshot when --snapshot is given, else broadcast).
    #[arg(long, value_name = "auto|broadcast|snapshot", value_parser = parse_late_joiners)]
    pub(crate) late_joiners: Option<LateJoiners>,
    /// Prefixes to cache (subscribed upstream for the proxy's life); default everything.
    #[arg(long, value_delimiter = ',', value_name = "PREFIX[,PREFIX…]")]
    pub(crate) cache_prefixes: Option<Vec<String>>,
    /// At most this many cached topics.
    #[arg(long, value_name = "N")]
    pub(crate) max_topics: Option<usize>,
    /// At most this many cached bytes.
    #[arg(long, value_name = "BYTES")]
    pub(crate) max_bytes: Option<usize>,
    /// When the cache is full: evict the least recently updated topic, or refuse new topics.
    #[arg(long, value_name = "evict-lru|reject-new", value_parser = parse_overflow)]
    pub(crate) overflow: Option<Overflow>,
    /// When a subscriber is slow: `drop` for that subscriber alone (default), or `block` (back-pressure the
    /// publishers).
    #[arg(long, value_name = "drop|block", value_parser = parse_back_pressure)]
    pub(crate) back_pressure: Option<BackPressure>,
    /// Deprecated spelling of `--back-pressure`.
    #[arg(long, hide = true, value_parser = parse_back_pressure, conflicts_with = "back_pressure")]
    pub(crate) slow_subscriber: Option<BackPressure>,
    /// Send high-water mark per subscriber.
    #[arg(long, value_name = "N")]
    pub(crate) downstream_hwm: Option<i32>,
    /// Receive high-water mark per publisher.
    #[arg(long, value_name = "N")]
    pub(crate) upstream_hwm: Option<i32>,
    /// Send high-water mark per tap consumer (beyond it that consumer's copies are dropped).
    #[arg(long, value_name = "N")]
    pub(crate) tap_hwm: Option<i32>,
    /// A slow tap consumer loses copies alone, silently (`per-consumer`, default: a stalled inspector never costs
    /// the recorder), or with every other tap consumer, counted by the proxy (`counted`).
    #[arg(long, value_name = "per-consumer|counted", value_parser = parse_tap_drop)]
    pub(crate) tap_drop: Option<TapDrop>,
    /// How the tap frames what it emits: `tickbox` (default) or `guide`, the Guide's two-frame capture
    /// `[topic][value]` (value: the whole tickbox frame; events under the topic `\0`) for plain ZeroMQ SUBs.
    #[arg(long, value_name = "tickbox|guide")]
    pub(crate) tap_framing: Option<tickbox_lvc::tap::Framing>,
    /// Longest subscription prefix (bytes) acted on; longer ones are refused and counted, and much longer ones
    /// make libzmq drop the subscriber's connection.
    #[arg(long, value_name = "BYTES")]
    pub(crate) max_subscription_bytes: Option<usize>,
    /// Largest frame accepted from a publisher; a publisher sending a larger one is disconnected.
    #[arg(long, value_name = "BYTES")]
    pub(crate) max_message_bytes: Option<usize>,
    /// At most this many distinct subscriber prefixes forwarded upstream at once.
    #[arg(long, value_name = "N")]
    pub(crate) max_downstream_prefixes: Option<usize>,
    /// At most this many cached values sent per second for subscriptions, over all subscribers.
    #[arg(long, value_name = "N")]
    pub(crate) cached_per_second: Option<usize>,
    /// Print a stats line this often on stderr (`10s`, `500ms`; `0s` disables; default from config, 10s): redrawn
    /// in place on a terminal, plain lines otherwise.
    #[arg(long, value_parser = tickbox_units::parse_duration, value_name = "DURATION")]
    pub(crate) stats_interval: Option<Duration>,
    /// Stop after this long (`10s`, `500ms`, `2m`); default: until Ctrl-C.
    #[arg(long, value_parser = tickbox_units::parse_duration, value_name = "DURATION")]
    pub(crate) duration: Option<Duration>,
    /// Pin the proxy thread to this core.
    #[arg(long, value_name = "CPU")]
    pub(crate) core: Option<usize>,
    /// Most concurrent connections on each socket the proxy binds; a handshake past it is refused and counted
    /// (overrides [lvc] max_connections; 0: no cap; at most 1000000).
    #[arg(long, value_name = "N", value_parser = crate::bounds::max_connections)]
    pub(crate) max_connections: Option<u64>,
    /// Majordomo broker to register `tickbox.lvc.status` with.
    #[arg(long, value_name = "EP")]
    pub(crate) broker: Option<String>,
    #[command(flatten)]
    pub(crate) metrics: crate::metrics::MetricsArgs,
    /// Print the final counters and every publisher's account as one JSON object on stdout instead of the tables
    /// (the endpoint lines then go to stderr).
    #[arg(long)]
    pub(crate) json: bool,
}

pub(crate) fn parse_overflow(text: &str) -> Result<Overflow, String> {
    match text {
        "evict-lru" | "evict_lru" | "lru" => Ok(Overflow::EvictLru),
        "reject-new" | "reject_new" | "reject" => Ok(Overflow::RejectNew),
        other => Err(format!("`{other}`: expected evict-lru or reject-new")),
    }
}

pub(crate) fn parse_tap_drop(text: &str) -> Result<TapDrop, String> {
    match text {
        "per-consumer" | "per_consumer" => Ok(TapDrop::PerConsumer),
        "counted" => Ok(TapDrop::Counted),
        other => Err(format!("`{other}`: expected per-consumer or counted")),
    }
}

pub(crate) fn parse_late_joiners(text: &str) -> Result<LateJoiners, String> {
    match text {
        "auto" => Ok(LateJoiners::Auto),
        "broadcast" => Ok(LateJoiners::Broadcast),
        "snapshot" => Ok(LateJoiners::Snapshot),
        other => Err(format!("`{other}`: expected auto, broadcast or snapshot")),
    }
}

pub(crate) fn parse_back_pressure(text: &str) -> Result<BackPressure, String> {
    match text {
        "drop" => Ok(BackPressure::Drop),
        "block" => Ok(BackPressure::Block),
        other => Err(format!("`{other}`: expected drop or block")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flag_values_parse_and_reject_what_no_one_meant() {
        assert_eq!(parse_tap_drop("per-consumer"), Ok(TapDrop::PerConsumer));
        assert!(parse_tap_drop("all").is_err());
        assert_eq!(parse_back_pressure("block"), Ok(BackPressure::Block));
        assert!(parse_back_pressure("lossless").is_err());
    }
}
