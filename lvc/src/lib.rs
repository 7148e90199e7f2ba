//! The Last Value Cache proxy, with its Espresso tap.
//!
//! ```text
//!  publisher shards ──PUB──► XSUB ┐            ┌ XPUB (verbose) ──► subscribers
//!                                 │ LvcEngine  │
//!                                 └─ cache ────┘──► tap XPUB (lossy per consumer) ──► recorder, `tickbox tap`
//! ```
//!
//! One thread owns the three sockets ([`spawn`]); the decisions are made by [`LvcEngine`], a plain struct that
//! is tested without sockets.
//!
//! **Filling the cache.** The proxy subscribes upstream to `cache_prefixes` (default: everything) for its whole
//! life, so it knows every topic's last value before anyone asks. Subscribers' own subscriptions are forwarded
//! upstream too (once per distinct prefix, see below), unless a `cache_prefixes` entry already covers them.
//!
//! **Serving a late joiner.** The XPUB is verbose, so every subscribe reaches the proxy, including a second
//! subscriber's identical one. For each, the proxy sends the cached last value of every key matching the prefix
//! (ZeroMQ's raw prefix rule: `Q.` gets every cached quote, `Q.XNAS.AAPL\0` exactly one topic), marked with
//! [`Flags::CACHED`](tickbox_wire::Flags::CACHED), then the live stream continues. Heartbeats are not cached;
//! book levels are cached per (topic, side, level).
//!
//! **Late joiners, two ways (`late_joiners`).** The burst above is `late_joiners = "broadcast"`: it works with any
//! plain SUB client, at the cost described next (bystanders receive copies). `"snapshot"` sends no burst at all on
//! the XPUB, so bystanders receive zero cached copies; a late joiner subscribes, then asks the snapshot ROUTER
//! (`snapshot`, `tickbox lvc --snapshot`) for the cached values of its prefixes and gets them, sent to it alone,
//! followed by an end marker carrying how many were sent and whether the reply was complete (the protocol is in
//! [`snapshot`] and `docs/book/src/lvc-snapshot.md`). The default, `"auto"`, is `snapshot` when a snapshot endpoint is
//! configured and `broadcast` otherwise, so a proxy without one serves plain Guide SUB clients exactly as before.
//! Snapshot replies are served a slice (`snapshot_slice`) per poll wake-up after live traffic, never block on a
//! client that does not read (`ROUTER_MANDATORY`, `snapshot_hwm`; such a reply is abandoned after
//! `snapshot_stall_timeout`), are one per client and at most `snapshot_max_clients` at once, and every refusal,
//! abandonment and malformed request is counted in [`LvcStats`].
//!
//! **Why existing subscribers are not harmed (broadcast).** A message sent on an XPUB reaches every subscriber whose
//! subscription matches, so existing subscribers also receive the burst meant for the newcomer. We accept that
//! instead of a separate snapshot channel, because it keeps the subscriber side a plain SUB socket, and the burst
//! is harmless to their state by construction: every copy carries `CACHED` and its original publisher id,
//! sequence and origin time. The gap detector and the Suicidal Snail skip `CACHED` frames (they are old by design and their
//! sequences are not part of the live stream), so no false gap and no false lateness; statistics count them
//! apart from live messages; and a last-value consumer applies a cached value only under [`supersedes`], which
//! never lets it replace a value that is as new or newer. The cost is bandwidth: a subscribe to `""` sends the
//! whole cache to every subscriber matching each key, and a peer repeating a short subscription could make the
//! proxy send the cache again and again to everyone. That is bounded (see **Hostile peers**), not prevented.
//!
//! **Why the XPUB burst cannot go to the newcomer alone** (hence the separate snapshot socket). libzmq 4.3.4 (bundled) accepts `ZMQ_XPUB_MANUAL_LAST_VALUE`
//! (option 98) even though it is a DRAFT option, but it restricts only the *first* send after a received
//! subscription to the subscriber that sent it (libzmq clears its "last pipe" on that send); every later send
//! goes to all matching subscribers again (`tests/hostile.rs` shows it). That serves one exact topic, not a
//! prefix's burst. Manual mode also makes the proxy apply every subscription itself, pairing each one with the
//! pipe libzmq queued for it, and libzmq queues a pipe only for subscription frames: a peer that sends a plain
//! data frame shifts that pairing, so another subscriber's subscription would be applied to the attacker's
//! connection and the victim would receive nothing. We therefore keep the plain verbose XPUB and bound the damage.
//!
//! **A late joiner never applies a cached value over a newer live one.** The proxy is one thread: it updates the
//! cache before forwarding, so a cached value is the newest the proxy had when it sent it, and every live message
//! after it on the same connection is newer. A subscriber can still see a live value and then the same value
//! again as cached (libzmq attaches the subscription before the proxy reads it), or get cached values from a
//! second path (two proxies, a proxy behind a proxy). [`supersedes`] covers all of these: cached values apply only
//! when strictly newer by origin time (per-publisher sequence breaks ties); live values always apply.
//!
//! **Upstream subscriptions.** With `XPUB_VERBOSE`, duplicate subscribes are reported but an unsubscribe only
//! when the last subscriber of a prefix leaves. The XSUB reference-counts what we send it, so forwarding every
//! duplicate would leave the count above zero forever. The engine forwards a prefix upstream only when it first
//! appears, and the unsubscribe when it goes; the proxy's own `cache_prefixes` are never released, and a prefix
//! they cover (`Q.XNAS` under `Q.`) is never forwarded at all. Subscriptions
//! are replayed by the XSUB to publishers that (re)connect, and the cache replaces values by arrival, not by
//! sequence, so a restarted publisher's new sequences are accepted.
//!
//! **Bounds.** At most `max_topics` keys and `max_bytes` bytes (frames plus keys; multipart values as above); a new key beyond that evicts
//! the least recently updated key or is refused ([`Overflow`]), counted either way; live forwarding is never
//! affected. `upstream_hwm`, `downstream_hwm`, `tap_hwm` bound the queues. Updating an existing key copies into
//! its existing buffer, so the steady state does not allocate.
//!
//! **Hostile peers.** Nothing a subscriber, tap consumer or publisher sends can crash the proxy or grow it without
//! bound:
//! - a subscription longer than `max_subscription_bytes` (default 1 KiB) is refused before it reaches libzmq's
//!   XSUB trie (which recurses once per byte: a 32 KiB prefix overflowed the stack), gets no cached values and is
//!   counted (`subscriptions_refused`); anything more than twice as long is cut off by libzmq itself
//!   (`ZMQ_MAXMSGSIZE` on the XPUB and the tap disconnects the peer), so libzmq stores no long subscription;
//! - publishers' frames are bounded by `max_message_bytes` (`ZMQ_MAXMSGSIZE` on the XSUB; a publisher we connect
//!   to is not reconnected after such a cut-off, see the field's docs);
//! - prefixes forwarded upstream are bounded by `max_downstream_prefixes` and `max_downstream_prefix_bytes`
//!   (`prefixes_refused`); prefixes covered by `cache_prefixes` are never forwarded, so with the default `[""]`
//!   nothing is;
//! - cached bursts are bounded per subscription event (`max_cached_per_subscription`) and per second over all
//!   events (`cached_per_second`), counted in `cached_bursts_capped`; a flood of subscriptions therefore costs
//!   bystanders at most `cached_per_second` extra cached copies a second, at the price that a late joiner arriving
//!   during such a flood (or asking for more than the cap) gets a partial snapshot and fills in from live traffic;
//! - the cache's hash is keyed per process (SipHash), so topics cannot be crafted to collide; the cache itself is
//!   bounded as below;
//! - each poll wake-up handles at most `batch` subscription events, so a subscription flood delays live traffic by
//!   one batch at most.
//!
//! Not bounded by the proxy: how many subscriptions one connection holds inside libzmq. The XPUB stores every
//! subscription (each at most ~2 × `max_subscription_bytes`, around 32 bytes of trie per byte) before the proxy
//! sees it, and a bound XPUB cannot disconnect one peer: measured, one connection holding 10,000 distinct
//! 1,000-byte subscriptions costs the proxy about 320 MB. Deployments exposed to untrusted subscribers should
//! authenticate them (ZAP/CURVE) or keep `max_subscription_bytes` small.
//!
//! **Slow subscribers.** `back_pressure = "drop"` (default): libzmq drops for that subscriber alone when its
//! queue is full; the proxy cannot see these drops, the subscriber's gap detector does. `"block"`: the XPUB
//! pushes back (`XPUB_NODROP`) and the proxy waits up to `block_timeout` for the slowest matching subscriber,
//! then drops the message for all (counted in `downstream_dropped`); back-pressure reaches publishers' HWMs.
//! A cached burst never waits: in `block` mode a cached value a full subscriber cannot take is dropped and
//! counted (`cached_dropped`).
//!
//! **Any ZeroMQ publisher.** Besides tickbox frames, the proxy serves the usual ZeroMQ convention, as the Guide's
//! LVC does: a multipart message whose first frame is the topic and whose other frames are the value. It is
//! forwarded unchanged, cached by its first frame (under the same `cache_prefixes`, matched against that frame),
//! and a late joiner's subscription gets the last such message of every matching topic, sent again as the same
//! multipart message (`cached_sent`; live ones are counted in `multipart_forwarded`, stored ones in
//! `multipart_cached`). Such a value carries no sequence or `CACHED` mark, so it replaces by arrival and a
//! subscriber cannot tell a cached copy from a repeated live one (the Guide's LVC behaves the same); tickbox
//! frames keep `CACHED` and [`supersedes`]. A multipart value counts against the cache's bounds with every
//! frame's bytes plus 4 bytes per frame plus its topic as key, so a message of many tiny frames is bounded too; one
//! over `max_entry_bytes` is forwarded, not cached (`cache_too_large`), and removes its topic's older cached value,
//! which is no longer the last. The proxy streams a multipart message frame by frame and keeps at most
//! `max_entry_bytes` of it. A topic frame that is itself a tickbox frame and a key shared by both forms follow
//! arrival order: the last message on the key is its value.
//!
//! **Malformed upstream frames** (a single frame `MessageRef::decode` rejects, and a multipart message whose first
//! frame is a tickbox frame: a tickbox message is one frame) are counted and logged (at the 1st, 2nd, 4th, 8th...
//! occurrence), never cached, and by default dropped (`malformed = "drop"`). `malformed = "forward"` passes them
//! unchanged to subscribers and the tap, for a mixed deployment where a newer wire version must cross an older
//! proxy. A single frame that is not a tickbox frame is deliberately not cached by its whole content as topic: a
//! lone frame has no topic/value boundary, so every distinct value (`Q.AAPL 101.5`, `Q.AAPL 101.6`) would be a new
//! key that is never replaced, filling the cache with stale values and evicting live topics; the Guide's LVC too
//! reads a topic frame and a value frame. Such a publisher's messages therefore cross the proxy only under
//! `malformed = "forward"`, uncached.
//!
//! **Statistics**: [`LvcHandle::stats`] in process, a log line every `stats_interval`, and the final counters
//! returned by [`LvcHandle::join`] (and logged) on exit.
//!
//! **The tap** never slows the proxy or live subscribers. With `tap_drop = "per_consumer"` (default) each tap
//! consumer has its own queue of `tap_hwm` copies and loses only what its own queue cannot hold, so a slow
//! `tickbox tap` printing to a terminal never costs the recorder reading the same tap a message; those drops
//! are invisible to the proxy, and each consumer detects its own loss from the per-publisher sequence numbers.
//! `tap_drop = "counted"` makes the proxy count tap drops exactly, at the price that one stalled consumer makes
//! all of them lose the same copies. Framing details in [`tickbox_wire::tap`].

mod cache;
mod engine;
mod forgery;
pub mod inspect;
mod overrides;
mod proxy;
#[allow(unsafe_code)] // FFI to libzmq's zmq_msg_t; each block states its invariant.
mod raw;
pub mod report;
pub mod sequences;
pub mod snapshot;
pub mod tap;

use std::time::Duration;

use serde::{Deserialize, Serialize};
use tickbox_units::HumanDuration;

pub use cache::{CachedValue, LastValueCache, Overflow, Parts, Store};
pub use engine::{
    mark_cached, supersedes, BatchReaders, BatchVerdict, DownstreamEvent, Forwarding, LvcEngine,
    LvcStats, Refusal,
};
pub use overrides::LvcOverrides;
pub use proxy::{spawn, LvcEndpoints, LvcHandle, LvcMetrics};

/// What happens to upstream messages that are neither valid wire frames nor plain `[topic][value...]` multipart
/// messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MalformedPolicy {
    /// Count, log (rate-limited) and drop them.
    #[default]
    Drop,
    /// Count, log and pass them on unchanged (never cached), for a newer wire version crossing this proxy.
    Forward,
}

/// What the proxy does when a subscriber cannot keep up (`[lvc] back_pressure`): `drop` (the default) for that
/// subscriber alone, or `block`, waiting up to `block_timeout` per message. One enum with the feed and replay.
pub use tickbox_zmqx::BackPressure;

/// How a late joiner gets the cached values of its subscription (`late_joiners` in `[lvc]`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LateJoiners {
    /// `snapshot` when a snapshot endpoint is configured, else `broadcast`: a proxy without one serves plain
    /// Guide SUB clients exactly as before, and configuring one says its clients fetch snapshots.
    #[default]
    Auto,
    /// Every subscription on the XPUB triggers a cached burst on the XPUB, which every matching subscriber
    /// receives (marked CACHED; bounded by `max_cached_per_subscription` and `cached_per_second`). Works with any
    /// plain SUB client.
    Broadcast,
    /// Subscriptions trigger no cached burst: bystanders receive zero cached copies. Late joiners ask the
    /// snapshot socket (`snapshot`, required) and get the values sent to them alone.
    Snapshot,
}

/// How the Espresso tap behaves when a tap consumer cannot keep up (see [`crate::tap`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TapDrop {
    /// Each consumer loses only what its own queue (`tap_hwm`) cannot hold; a stalled consumer never costs
    /// another one anything. libzmq drops silently per consumer, so the proxy cannot count these drops
    /// (`tap_dropped` stays 0); each consumer sees its own loss as a gap in the per-publisher sequences.
    #[default]
    PerConsumer,
    /// `XPUB_NODROP`: a copy that does not fit in every matching consumer's queue is dropped for all of them and
    /// counted in `tap_dropped`. One stalled consumer makes every other consumer lose the same copies.
    Counted,
}

/// The `[lvc]` section of the tickbox config.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LvcConfig {
    /// Publisher endpoints the XSUB connects to.
    pub upstream: Vec<String>,
    /// Endpoints the XSUB binds for publishers to connect to.
    pub upstream_bind: Vec<String>,
    /// Where subscribers connect (the XPUB).
    pub bind: String,
    /// Where the Espresso tap is bound; none disables it.
    pub tap: Option<String>,
    /// Prefixes the proxy subscribes to upstream for its whole life and caches. `[""]`: everything.
    pub cache_prefixes: Vec<String>,
    /// At most this many cached keys.
    pub max_topics: usize,
    /// At most this many cached bytes (frames plus keys).
    pub max_bytes: usize,
    /// A single value larger than this (frame plus key twice; for a multipart message every frame plus 4 bytes
    /// per frame plus key twice) is forwarded but not cached, and removes the key's older cached value.
    pub max_entry_bytes: usize,
    /// What a new key does when the cache is full: evict the least recently updated key, or be refused.
    pub overflow: Overflow,
    /// Receive high-water mark of the XSUB (per publisher connection).
    pub upstream_hwm: i32,
    /// Send high-water mark of the XPUB (per subscriber). Large by default so a late joiner's cached burst fits.
    pub downstream_hwm: i32,
    /// Send high-water mark of the tap (per tap consumer); beyond it tap copies are dropped (see `tap_drop`).
    pub tap_hwm: i32,
    /// Whether a slow tap consumer loses copies alone (`per_consumer`, default) or with all the others,
    /// counted (`counted`).
    pub tap_drop: TapDrop,
    /// Drop for a slow subscriber alone (default), or push back on publishers up to `block_timeout`.
    #[serde(alias = "slow_subscriber")]
    pub back_pressure: BackPressure,
    /// In `block` mode, how long one message may wait for a slow subscriber before it is dropped (counted).
    pub block_timeout: HumanDuration,
    /// What happens to upstream messages that are neither one valid wire frame nor a plain multipart message
    /// (first frame the topic, not itself a wire frame).
    pub malformed: MalformedPolicy,
    /// Also copy cached values to the tap. Off by default: a recorder wants the live stream, and a cached burst
    /// is implied by the subscription event the tap does carry.
    pub tap_cached: bool,
    /// How the tap frames what it emits: `tickbox` (default: one frame per message, events as `0x00` frames) or
    /// `guide`: the Guide's two-frame capture `[topic][value]` for every message and event, readable by a plain
    /// ZeroMQ SUB (see [`tap::Framing`]).
    pub tap_framing: tap::Framing,
    /// Period of the stats log line; `0s` disables it (stats are still logged on exit).
    pub stats_interval: HumanDuration,
    /// Upstream messages handled per poll wake-up before subscription events are looked at again.
    pub batch: usize,
    /// Pin the proxy thread to this core.
    pub core: Option<usize>,
    /// Longest subscription prefix (bytes) a subscriber may hold. A longer one is refused: not forwarded upstream
    /// (libzmq's XSUB trie recurses once per byte, so a 32 KiB prefix overflows the proxy's stack), no cached
    /// values, counted in `subscriptions_refused`. The XPUB and the tap also refuse, at the protocol level
    /// (`ZMQ_MAXMSGSIZE`, the peer is disconnected), any inbound frame longer than twice this plus 64 bytes, so
    /// libzmq never stores a subscription much larger than the bound.
    pub max_subscription_bytes: usize,
    /// Largest frame (bytes) accepted from a publisher (`ZMQ_MAXMSGSIZE` on the XSUB): a publisher sending a
    /// larger one is disconnected by libzmq before the frame is buffered (without a bound, a frame header
    /// claiming a huge size makes libzmq try to allocate it). Wire frames are a few hundred bytes. A publisher
    /// that connects to us (`upstream_bind`) reconnects by itself; one we connect to (`upstream`) is not
    /// reconnected, because libzmq treats the cut-off as a protocol error: that upstream stays silent until the
    /// proxy restarts.
    pub max_message_bytes: usize,
    /// At most this many distinct subscriber prefixes are forwarded upstream at once (prefixes covered by
    /// `cache_prefixes` are never forwarded and do not count). Beyond it a new prefix is refused (no upstream
    /// subscription, no cached values), counted in `prefixes_refused`.
    pub max_downstream_prefixes: usize,
    /// At most this many bytes of such forwarded prefixes at once; beyond it as `max_downstream_prefixes`.
    /// Bounds the XSUB's trie and every publisher's (roughly 32 bytes of trie per prefix byte).
    pub max_downstream_prefix_bytes: usize,
    /// At most this many cached values sent for one subscription event; the rest of that burst is skipped,
    /// counted in `cached_bursts_capped`.
    pub max_cached_per_subscription: usize,
    /// At most this many cached values sent per second over all subscription events (a token bucket holding one
    /// second's worth). A cached burst goes to every matching subscriber, not only to the one that asked (see
    /// the module docs), so this bounds what a flood of subscriptions can make the proxy send to bystanders.
    /// A burst cut short is counted in `cached_bursts_capped`.
    pub cached_per_second: usize,
    /// Where the snapshot ROUTER is bound (late joiners ask it for the cached values of their prefixes and get
    /// them alone, see [`snapshot`]); none disables it.
    pub snapshot: Option<String>,
    /// How late joiners get cached values: `broadcast` (a burst on the XPUB, to every matching subscriber),
    /// `snapshot` (no burst; clients ask the snapshot socket), or `auto` (default: `snapshot` when `snapshot` is
    /// set, else `broadcast`).
    pub late_joiners: LateJoiners,
    /// At most this many prefixes in one snapshot request (each at most `max_subscription_bytes`); a longer
    /// request is answered malformed and counted.
    pub snapshot_max_prefixes: usize,
    /// At most this many snapshot replies in progress at once, one per client; another request is answered busy
    /// and counted (`snapshot_refused`).
    pub snapshot_max_clients: usize,
    /// At most this many values in one snapshot reply; beyond it the reply ends `truncated` (counted).
    pub snapshot_max_values: u64,
    /// Send high-water mark of the snapshot socket, per client, in messages.
    pub snapshot_hwm: i32,
    /// Snapshot messages sent per poll wake-up over all replies in progress, so a reply delays live forwarding
    /// by at most one slice.
    pub snapshot_slice: usize,
    /// A reply whose client has taken nothing for this long (its queue stays full) is abandoned and counted
    /// (`snapshot_abandoned`): a client that does not read never holds the proxy.
    pub snapshot_stall_timeout: HumanDuration,
    /// The subscriber XPUB, the tap and the snapshot ROUTER send multipart messages to peers that may stall: a
    /// peer that acknowledges nothing for this long is disconnected (`ZMQ_TCP_MAXRT`), and closing waits at most
    /// twice this plus 1 s for stalled peers, so the proxy's close can never hit libzmq's `clean_pipes` abort
    /// (`tickbox_zmqx::teardown`, docs/book/src/libzmq-traps.md). It bounds how long a stalled subscriber can hold the
    /// proxy's stop.
    pub stalled_peer_timeout: HumanDuration,
    /// Most concurrent connections on each socket the proxy binds (subscribers, tap, snapshot, bound upstream);
    /// a handshake past it is refused through ZAP and counted. 0: no cap. Applied by the binary through
    /// `tickbox_auth::Security::cap_connections`.
    pub max_connections: u64,
    /// `[context.sockets.lvc]`, copied here by the binary; applied to the XSUB, the XPUB and the tap (see `tickbox_zmqx::profile`).
    #[serde(skip)]
    pub socket_profile: tickbox_zmqx::profile::SocketProfile,
    /// `[security]`, loaded and shared by the binary: applied to every socket this component binds or connects.
    #[serde(skip)]
    pub security: tickbox_auth::Security,
}

impl Default for LvcConfig {
    fn default() -> Self {
        Self {
            upstream: Vec::new(),
            upstream_bind: Vec::new(),
            bind: "tcp://127.0.0.1:5558".into(),
            tap: None,
            cache_prefixes: vec![String::new()],
            max_topics: 1_000_000,
            max_bytes: 256 << 20,
            max_entry_bytes: 4096,
            overflow: Overflow::EvictLru,
            upstream_hwm: 100_000,
            downstream_hwm: 100_000,
            tap_hwm: 100_000,
            tap_drop: TapDrop::PerConsumer,
            back_pressure: BackPressure::Drop,
            block_timeout: HumanDuration(Duration::from_secs(5)),
            malformed: MalformedPolicy::Drop,
            tap_cached: false,
            tap_framing: tap::Framing::Tickbox,
            stats_interval: HumanDuration(Duration::from_secs(10)),
            batch: 1024,
            core: None,
            max_subscription_bytes: tickbox_zmqx::DEFAULT_MAX_SUBSCRIPTION_BYTES,
            max_message_bytes: 1 << 20,
            max_downstream_prefixes: 10_000,
            max_downstream_prefix_bytes: 1 << 20,
            max_cached_per_subscription: 100_000,
            cached_per_second: 200_000,
            snapshot: None,
            late_joiners: LateJoiners::Auto,
            snapshot_max_prefixes: 64,
            snapshot_max_clients: 64,
            snapshot_max_values: 1_000_000,
            snapshot_hwm: 10_000,
            snapshot_slice: 1024,
            snapshot_stall_timeout: HumanDuration(Duration::from_secs(5)),
            stalled_peer_timeout: HumanDuration(tickbox_zmqx::DEFAULT_STALLED_PEER_TIMEOUT),
            max_connections: 0,
            socket_profile: tickbox_zmqx::profile::SocketProfile::default(),
            security: tickbox_auth::Security::default(),
        }
    }
}

/// Why the proxy could not start or stopped.
#[derive(Debug, thiserror::Error)]
pub enum LvcError {
    /// A libzmq call failed.
    #[error("{what}: {source}")]
    Zmq {
        /// What the proxy was doing (names the socket or endpoint).
        what: String,
        /// libzmq's error.
        #[source]
        source: zmq::Error,
    },
    /// The configuration cannot work (missing endpoint, unresolvable bind).
    #[error("invalid LVC config: {0}")]
    Config(String),
    /// The proxy thread panicked; its counters are lost.
    #[error("the LVC proxy thread panicked")]
    Panicked,
    /// The proxy thread ended before binding (the reason was reported by [`spawn`] or logged).
    #[error("the LVC proxy thread stopped before reporting its endpoints")]
    StartFailed,
    /// `[security]` could not be applied to a socket.
    #[error(transparent)]
    Auth(#[from] tickbox_auth::AuthError),
}

impl LvcConfig {
    /// Whether subscriptions on the XPUB trigger a cached burst ([`LateJoiners::Auto`] resolved).
    pub fn broadcasts_cached(&self) -> bool {
        match self.late_joiners {
            LateJoiners::Broadcast => true,
            LateJoiners::Snapshot => false,
            LateJoiners::Auto => self.snapshot.is_none(),
        }
    }
}

impl LvcError {
    pub(crate) fn zmq(what: impl Into<String>) -> impl FnOnce(zmq::Error) -> LvcError {
        let what = what.into();
        move |source| LvcError::Zmq { what, source }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_section_parses_and_rejects_typos() {
        let c: LvcConfig = toml::from_str(
            "upstream = [\"tcp://a:1\"]\nmax_topics = 5\noverflow = \"reject_new\"\nslow_subscriber = \"block\"\n",
        )
        .unwrap();
        assert_eq!(c.max_topics, 5);
        assert_eq!(c.overflow, Overflow::RejectNew);
        assert_eq!(c.back_pressure, BackPressure::Block);
        assert_eq!(c.tap_drop, TapDrop::PerConsumer);
        let c: LvcConfig = toml::from_str("tap_drop = \"counted\"\n").unwrap();
        assert_eq!(c.tap_drop, TapDrop::Counted);
        assert!(toml::from_str::<LvcConfig>("tap_drop = \"sometimes\"\n").is_err());
        assert!(toml::from_str::<LvcConfig>("max_topic = 5\n").is_err());
    }
}
