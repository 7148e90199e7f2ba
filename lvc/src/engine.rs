//! The LVC's protocol logic without sockets: what to cache, what to forward, which subscriptions go upstream.
#![deny(clippy::disallowed_methods, clippy::disallowed_types)]

use std::collections::HashSet;
use std::fmt;
use std::time::Instant;

use tickbox_wire::{batch_records, Flags, Header, Kind, MessageRef, BATCH_TOPIC};

use super::cache::{CachedValue, LastValueCache, Store};
use super::sequences::{KnownLoss, Sequences};
use super::{LvcConfig, MalformedPolicy};

/// Whether the proxy sends an upstream frame on to subscribers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Forwarding {
    /// Send it to subscribers (and the tap).
    Forward,
    /// Malformed under `malformed = "drop"`: counted, sent nowhere.
    Drop,
}

/// A frame that arrived on the XPUB (from a subscriber), interpreted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DownstreamEvent<'a> {
    /// Some subscriber subscribed to `prefix` (with `XPUB_VERBOSE`, also a second subscriber to the same prefix).
    /// The caller sends every cached value matching `prefix`; it sends the subscription upstream only when
    /// `forward_upstream` (the proxy is not already subscribed upstream to exactly this prefix).
    Subscribe {
        /// The subscribed prefix, without the leading `\x01`.
        prefix: &'a [u8],
        /// Whether the caller must send the subscription to the XSUB.
        forward_upstream: bool,
    },
    /// The last subscriber to `prefix` left (XPUB reports only that one).
    Unsubscribe {
        /// The released prefix, without the leading `\x00`.
        prefix: &'a [u8],
        /// Whether the caller must send the unsubscription to the XSUB (it was forwarded when subscribed).
        forward_upstream: bool,
    },
    /// A subscription the proxy will not act on (counted): nothing goes upstream and no cached value is sent.
    /// The subscriber still receives whatever live traffic its prefix matches.
    Refused {
        /// The refused prefix (possibly up to twice `max_subscription_bytes` long).
        prefix: &'a [u8],
        /// Which bound refused it.
        reason: Refusal,
    },
    /// Not a subscription frame; counted and not forwarded (publishers ignore upstream data anyway).
    Other,
}

/// Why a subscription was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// Longer than `max_subscription_bytes`.
    TooLong,
    /// A new prefix to forward upstream, but `max_downstream_prefixes` or `max_downstream_prefix_bytes` is
    /// reached.
    PrefixSetFull,
}

/// Counters the proxy keeps. Plain integers, updated by one thread; copied out for reporting (serialisable for
/// status services).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct LvcStats {
    /// Upstream messages received (a multipart message counts once; every record inside a batch frame counts).
    pub messages_in: u64,
    /// Live messages sent to subscribers (once per send on the XPUB, however many subscribers match; every record
    /// of a batch frame forwarded whole counts).
    pub messages_out: u64,
    /// Batch frames (`#B`) received upstream; their records are in `messages_in`.
    pub batches_in: u64,
    /// Batch frames forwarded whole to subscribers (every reader had opted in); their records are in
    /// `messages_out`. Batches not forwarded whole went out record by record.
    pub batches_out: u64,
    /// Batch frames handed whole to the tap (every tap consumer had opted in); their records are in `tap_sent`.
    pub tap_batches: u64,
    /// Cached values sent because of a subscription.
    pub cached_sent: u64,
    /// Cached values the XPUB refused (`block` mode, a matching subscriber's queue full); never waited for.
    pub cached_dropped: u64,
    /// Upstream messages that are neither one valid wire frame nor a plain multipart message.
    pub malformed: u64,
    /// Subscribe / unsubscribe events seen on the XPUB.
    pub subscribes: u64,
    /// Unsubscribe events (the XPUB reports only the last subscriber of a prefix leaving).
    pub unsubscribes: u64,
    /// Distinct prefixes some subscriber currently holds that the proxy forwards upstream (those not covered by
    /// `cache_prefixes`), bounded by `max_downstream_prefixes` and `max_downstream_prefix_bytes`.
    pub downstream_prefixes: u64,
    /// Subscriptions longer than `max_subscription_bytes`, refused (not forwarded, no cached values).
    pub subscriptions_refused: u64,
    /// New prefixes refused because the forwarded prefix set was full.
    pub prefixes_refused: u64,
    /// Subscription events whose cached burst was cut short (or skipped) by `max_cached_per_subscription` or
    /// `cached_per_second`.
    pub cached_bursts_capped: u64,
    /// Non-subscription frames from subscribers (dropped).
    pub downstream_other: u64,
    /// Keys cached now, and the bytes they hold (frames plus keys).
    pub topics_cached: u64,
    /// Bytes the cache holds (the quantity bounded by `max_bytes`).
    pub cache_bytes: u64,
    /// Keys evicted (LRU) or refused (reject-new) because of the caps; values larger than `max_entry_bytes`.
    pub cache_evicted: u64,
    /// New keys refused because the cache was full under `overflow = "reject_new"`.
    pub cache_rejected: u64,
    /// Values larger than `max_entry_bytes` (forwarded, not cached).
    pub cache_too_large: u64,
    /// Copies handed to the tap, and copies dropped because a tap consumer was slow. Drops are seen only with
    /// `tap_drop = "counted"`; in the default `per_consumer` mode libzmq drops per consumer without telling the
    /// proxy, so `tap_dropped` stays 0 and `tap_sent` counts copies offered to the consumers.
    pub tap_sent: u64,
    /// Tap copies dropped and seen by the proxy (only with `tap_drop = "counted"`).
    pub tap_dropped: u64,
    /// Subscribe events from tap consumers (how many have attached over time).
    pub tap_subscriptions: u64,
    /// Live messages a subscriber could not take within `block` mode's wait and that were therefore dropped.
    pub downstream_dropped: u64,
    /// Plain multipart messages (first part the topic, then the value parts, from any ZeroMQ publisher) sent to
    /// subscribers live; also counted in `messages_out`.
    pub multipart_forwarded: u64,
    /// Plain multipart messages stored as their topic's last value (a value over `max_entry_bytes` is not, and is
    /// counted in `cache_too_large`).
    pub multipart_cached: u64,
    /// Well-formed requests on the snapshot socket.
    pub snapshot_requests: u64,
    /// Cached values sent on the snapshot socket (each to one client only).
    pub snapshot_values: u64,
    /// Snapshot replies that ended complete.
    pub snapshot_completed: u64,
    /// Snapshot replies cut short by `snapshot_max_values` (the end marker says so).
    pub snapshot_truncated: u64,
    /// Snapshot requests refused as busy (the client already had a reply in progress, or `snapshot_max_clients`
    /// replies were).
    pub snapshot_refused: u64,
    /// Snapshot replies abandoned: the client stopped reading for `snapshot_stall_timeout`, or disconnected.
    pub snapshot_abandoned: u64,
    /// Malformed snapshot requests (answered with status malformed).
    pub snapshot_malformed: u64,
    /// Snapshot replies in progress now.
    pub snapshot_active: u64,
    /// Upstream messages refused because their publisher id is not bound to the key that sent them
    /// (`[security.publishers]`): never cached, tapped or forwarded.
    pub forged_refused: u64,
    /// Per-publisher sequence accounting, summed ([`crate::sequences`]): gaps between publishers and the proxy,
    /// and what publishers sent before the proxy first heard them.
    pub sequences: crate::sequences::SequenceTotals,
    /// Snapshot replies that ended while the cache knew it lacked values (`missed` or `dropped` in a version 2
    /// end marker; a version 1 client cannot be told, so these are also logged).
    pub snapshot_lacking: u64,
    /// Handshakes a publisher refused (ZAP) or that failed, on upstream connections the proxy makes
    /// (`upstream`); libzmq never tries those again, so the proxy connects again itself, after 1 s and then
    /// twice as long each time, up to 30 s.
    pub handshakes_refused: u64,
}

impl LvcStats {
    /// Every drop the proxy itself can see, summed.
    pub fn drops(&self) -> u64 {
        self.cache_evicted
            + self.cache_rejected
            + self.cache_too_large
            + self.tap_dropped
            + self.downstream_dropped
            + self.cached_dropped
            + self.malformed
            + self.cached_bursts_capped
            + self.snapshot_truncated
            + self.snapshot_refused
            + self.snapshot_abandoned
            + self.snapshot_malformed
    }

    /// Fills in the snapshot channel's counters.
    pub(crate) fn merge_snapshot(&mut self, c: &crate::snapshot::SnapshotCounters) {
        self.snapshot_requests = c.requests;
        self.snapshot_values = c.values;
        self.snapshot_completed = c.completed;
        self.snapshot_truncated = c.truncated;
        self.snapshot_refused = c.refused;
        self.snapshot_abandoned = c.abandoned;
        self.snapshot_malformed = c.malformed;
        self.snapshot_active = c.active;
        self.snapshot_lacking = c.lacking;
    }
}

impl fmt::Display for LvcStats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "in={} out={} cached_sent={} cached_dropped={} malformed={} subs={} unsubs={} prefixes={} topics_cached={} \
             cache_bytes={} evicted={} rejected={} too_large={} tap_sent={} tap_dropped={} downstream_dropped={} \
             downstream_other={} tap_subscriptions={} subs_refused={} prefixes_refused={} bursts_capped={} \
             multipart_forwarded={} multipart_cached={} snapshot_requests={} snapshot_values={} \
             snapshot_completed={} snapshot_truncated={} snapshot_refused={} snapshot_abandoned={} \
             snapshot_malformed={} forged_refused={} batches_in={} batches_out={} tap_batches={} publishers={} \
             sequences_missing={} gaps={} missed_before_join={} snapshot_lacking={}",
            self.messages_in,
            self.messages_out,
            self.cached_sent,
            self.cached_dropped,
            self.malformed,
            self.subscribes,
            self.unsubscribes,
            self.downstream_prefixes,
            self.topics_cached,
            self.cache_bytes,
            self.cache_evicted,
            self.cache_rejected,
            self.cache_too_large,
            self.tap_sent,
            self.tap_dropped,
            self.downstream_dropped,
            self.downstream_other,
            self.tap_subscriptions,
            self.subscriptions_refused,
            self.prefixes_refused,
            self.cached_bursts_capped,
            self.multipart_forwarded,
            self.multipart_cached,
            self.snapshot_requests,
            self.snapshot_values,
            self.snapshot_completed,
            self.snapshot_truncated,
            self.snapshot_refused,
            self.snapshot_abandoned,
            self.snapshot_malformed,
            self.forged_refused,
            self.batches_in,
            self.batches_out,
            self.tap_batches,
            self.sequences.publishers,
            self.sequences.missing,
            self.sequences.gap_events,
            self.sequences.missed_before_join,
            self.snapshot_lacking,
        )
    }
}

/// Whether a value for one key, carrying `incoming`, should replace what a consumer already holds (`held`).
///
/// This is the rule for every last-value consumer of an LVC stream (and for the LVC itself when it sits behind
/// another LVC):
/// - a live value (no [`Flags::CACHED`]) always replaces: the live stream arrives in order, and replacing by
///   arrival is what makes a restarted publisher (sequences back at 1) take effect;
/// - a cached value only fills in: it applies when nothing is held, or when it is strictly newer by origin time,
///   with the per-publisher sequence breaking a tie between two values of the same publisher. An equal or older
///   cached value (the usual case: the proxy re-sends what a subscriber already has, because a subscribe on an
///   XPUB reaches every matching subscriber) is ignored.
///
/// Origin times of different publishers are compared only through their clocks, which must be synchronised for
/// that comparison to mean anything; when in doubt the held value is kept, since the next live update corrects it.
pub fn supersedes(incoming: &Header, held: Option<&Header>) -> bool {
    if !incoming.flags.contains(Flags::CACHED) {
        return true;
    }
    let Some(held) = held else { return true };
    incoming.origin_time_ns > held.origin_time_ns
        || (incoming.origin_time_ns == held.origin_time_ns
            && incoming.publisher_id == held.publisher_id
            && incoming.sequence > held.sequence)
}

/// The cache key of a decoded frame, or `None` for kinds that are not cached.
///
/// A topic carries one value per kind, except book levels: `B.XNAS.AAPL` carries every level of both sides, so
/// a book level's key is the topic plus `\0`, side and level (the NUL keeps it sorting with its topic and keeps
/// prefix matching by topic exact).
fn cache_key(msg: &MessageRef<'_>, key: &mut Vec<u8>) -> bool {
    key.clear();
    match msg.kind() {
        // A stale heartbeat tells a late joiner nothing: liveness is only meaningful live.
        // Nor does a journal's gap notice: it belongs to a replayed timeline, not to a topic's last value.
        Kind::Heartbeat | Kind::Gap => false,
        Kind::Quote | Kind::Trade => {
            key.extend_from_slice(msg.topic().as_bytes());
            true
        }
        Kind::BookLevel => {
            key.extend_from_slice(msg.topic().as_bytes());
            // Payload layout: instrument_id u32, side u8, level u8, ...
            let payload = msg.payload_bytes();
            key.push(0);
            key.extend_from_slice(&payload[4..6]);
            true
        }
    }
}

/// Cache plus subscription bookkeeping; the proxy loop feeds it frames and acts on the answers.
pub struct LvcEngine {
    cache: LastValueCache,
    /// Prefixes the proxy itself subscribes to upstream, for the life of the proxy, to fill the cache.
    own: Vec<Box<[u8]>>,
    cache_everything: bool,
    /// `max_topics = 0` or no `cache_prefixes`: a plain verbose proxy.
    cache_disabled: bool,
    /// Prefixes some subscriber holds that are forwarded upstream, as the XPUB reports them; `downstream_bytes`
    /// is their total length. Bounded, because each one also lives in the XSUB's trie and every publisher's.
    downstream: HashSet<Box<[u8]>>,
    downstream_bytes: usize,
    max_subscription_bytes: usize,
    max_downstream_prefixes: usize,
    max_downstream_prefix_bytes: usize,
    budget: CachedBudget,
    malformed: MalformedPolicy,
    key: Vec<u8>,
    /// The multipart message being received, when it is to be cached.
    pending: PendingMultipart,
    max_entry_bytes: usize,
    /// Who of the XPUB's subscribers reads batch frames.
    readers: BatchReaders,
    /// Every publisher's sequence, as every hop accounts it.
    sequences: Sequences,
    stats: LvcStats,
}

/// A plain multipart value being assembled part by part, never beyond `max_entry_bytes`.
#[derive(Debug, Default)]
struct PendingMultipart {
    /// Whether the message in progress is a plain multipart message (not a malformed tickbox one).
    plain: bool,
    /// Whether the message in progress is to be cached (a plain multipart message under a cache prefix).
    active: bool,
    /// It outgrew `max_entry_bytes`: no more parts are kept and it will not be cached.
    too_large: bool,
    data: Vec<u8>,
    ends: Vec<u32>,
}

impl LvcEngine {
    /// An engine with an empty cache and the bounds of `config`.
    pub fn new(config: &LvcConfig) -> Self {
        let own: Vec<Box<[u8]>> = config
            .cache_prefixes
            .iter()
            .map(|p| p.as_bytes().into())
            .collect();
        Self {
            cache: LastValueCache::new(
                config.max_topics,
                config.max_bytes,
                config.max_entry_bytes,
                config.overflow,
            ),
            cache_everything: own.iter().any(|p| p.is_empty()),
            cache_disabled: own.is_empty() || config.max_topics == 0,
            own,
            downstream: HashSet::new(),
            downstream_bytes: 0,
            max_subscription_bytes: config.max_subscription_bytes,
            max_downstream_prefixes: config.max_downstream_prefixes,
            max_downstream_prefix_bytes: config.max_downstream_prefix_bytes,
            budget: CachedBudget::new(config.max_cached_per_subscription, config.cached_per_second),
            malformed: config.malformed,
            key: Vec::with_capacity(256),
            pending: PendingMultipart::default(),
            max_entry_bytes: config.max_entry_bytes,
            readers: BatchReaders::new(config.max_downstream_prefixes),
            sequences: Sequences::new(),
            stats: LvcStats::default(),
        }
    }

    /// The subscriptions to send upstream at start (and that stay for the proxy's life).
    pub fn own_subscriptions(&self) -> impl Iterator<Item = &[u8]> {
        self.own.iter().map(|p| &p[..])
    }

    /// Whether the proxy asks its publishers for batch frames (a subscription to [`BATCH_TOPIC`] beside its
    /// own ""): only when it takes everything, since a publisher batches only for readers that all do.
    pub fn reads_upstream_batches(&self) -> bool {
        self.cache_everything
    }

    /// Whether a batch frame may go to the XPUB whole: every subscriber there opted in (see [`BatchReaders`]).
    pub fn downstream_reads_batches(&self) -> bool {
        self.readers.all_read_batches()
    }

    /// One upstream batch frame: every record in it is cached and counted as if it had come alone. Returns
    /// whether the frame is intact (every record a valid frame): only an intact batch may be forwarded whole.
    /// A malformed record is counted under [`MalformedPolicy`] like a malformed single frame; the records
    /// before it stay cached, and the records after it cannot be found (the batch's framing is broken there).
    pub fn handle_upstream_batch(&mut self, frame: &[u8]) -> BatchVerdict {
        self.stats.batches_in += 1;
        let records = match batch_records(frame) {
            Ok(records) => records,
            Err(err) => {
                self.stats.messages_in += 1;
                return BatchVerdict {
                    intact: false,
                    forwarding: self.malformed(&err),
                };
            }
        };
        let mut verdict = BatchVerdict {
            intact: true,
            forwarding: Forwarding::Forward,
        };
        for record in records {
            let forwarding = match record {
                Ok(record) => self.handle_upstream(record),
                Err(err) => {
                    self.stats.messages_in += 1;
                    self.malformed(&err)
                }
            };
            if forwarding == Forwarding::Drop {
                verdict = BatchVerdict {
                    intact: false,
                    forwarding,
                };
            }
        }
        verdict
    }

    /// One upstream frame. Valid data frames update the cache (by arrival) and are forwarded; malformed ones are
    /// counted and follow [`MalformedPolicy`].
    #[inline]
    pub fn handle_upstream(&mut self, frame: &[u8]) -> Forwarding {
        self.stats.messages_in += 1;
        let msg = match MessageRef::decode(frame) {
            Ok(msg) => msg,
            Err(err) => return self.malformed(&err),
        };
        self.sequences.on_message(&msg);
        if self.cache_disabled
            || (!self.cache_everything && !self.own.iter().any(|p| frame.starts_with(p)))
        {
            return Forwarding::Forward;
        }
        if !cache_key(&msg, &mut self.key) {
            return Forwarding::Forward;
        }
        if msg.header().flags.contains(Flags::CACHED) {
            // From an LVC upstream of us: only fill in, never overwrite something newer.
            let held = self
                .cache
                .get(&self.key)
                .and_then(|f| MessageRef::decode(f).ok())
                .map(|m| *m.header());
            if !supersedes(msg.header(), held.as_ref()) {
                return Forwarding::Forward;
            }
        }
        match self.cache.store(&self.key, frame) {
            Store::Updated => {}
            Store::Inserted { evicted } => self.stats.cache_evicted += evicted as u64,
            Store::Rejected => self.stats.cache_rejected += 1,
            Store::TooLarge => self.stats.cache_too_large += 1,
        }
        Forwarding::Forward
    }

    /// An upstream message with more than one part whose first part is a tickbox wire frame: a tickbox message
    /// is one frame, so this is a broken tickbox publisher, counted as malformed and handled under
    /// [`MalformedPolicy`]. `parts` is how many parts it had. (A plain multipart message goes through
    /// [`Self::begin_multipart`] instead.)
    pub fn handle_upstream_multipart(&mut self, parts: usize) -> Forwarding {
        self.stats.messages_in += 1;
        self.stats.malformed += 1;
        if self.stats.malformed.is_power_of_two() {
            tracing::warn!(
                parts,
                total = self.stats.malformed,
                "malformed upstream message: a wire message is one frame"
            );
        }
        match self.malformed {
            MalformedPolicy::Drop => Forwarding::Drop,
            MalformedPolicy::Forward => Forwarding::Forward,
        }
    }

    /// The first part of an upstream multipart message. A plain ZeroMQ publisher's message (first part the
    /// topic, then the value parts) is forwarded and, under a cache prefix, cached by its topic: feed every
    /// further part to [`Self::multipart_part`], then call [`Self::end_multipart`]. A first part that is itself a
    /// tickbox wire frame makes the message malformed ([`Self::handle_upstream_multipart`]); then the answer is
    /// final and the other two calls do nothing.
    pub fn begin_multipart(&mut self, first: &[u8]) -> Forwarding {
        self.pending.active = false;
        self.pending.plain = false;
        if MessageRef::decode(first).is_ok() {
            return self.handle_upstream_multipart(2);
        }
        self.pending.plain = true;
        self.stats.messages_in += 1;
        if self.cache_disabled
            || (!self.cache_everything && !self.own.iter().any(|p| first.starts_with(p)))
        {
            return Forwarding::Forward;
        }
        let pending = &mut self.pending;
        pending.active = true;
        pending.too_large = false;
        pending.data.clear();
        pending.ends.clear();
        self.key.clear();
        self.key.extend_from_slice(first);
        self.push_part(first);
        Forwarding::Forward
    }

    /// Whether the multipart message last begun is a plain one (forwarded, cacheable), not a malformed tickbox one.
    pub fn multipart_is_plain(&self) -> bool {
        self.pending.plain
    }

    /// The next part of the multipart message begun by [`Self::begin_multipart`]. Kept only while the value
    /// (every part, 4 bytes per part, the topic twice as key) stays within `max_entry_bytes`, so a message of
    /// any size or part count costs the engine at most that much.
    pub fn multipart_part(&mut self, part: &[u8]) {
        if self.pending.active && !self.pending.too_large {
            self.push_part(part);
        }
    }

    fn push_part(&mut self, part: &[u8]) {
        let pending = &mut self.pending;
        let data = pending.data.len() + part.len();
        let cost = data + 4 * (pending.ends.len() + 1) + 2 * self.key.len();
        match u32::try_from(data) {
            Ok(end) if cost <= self.max_entry_bytes => {
                let start = pending.data.len();
                pending.data.extend_from_slice(part);
                pending.ends.push(end);
                // A part that is itself a tickbox frame (the Guide's envelope, `[topic][frame]`) is a cached value
                // like any other: the copy kept for late joiners carries the CACHED flag, so a snapshot or a burst
                // never hands out a tickbox frame that looks live. The forwarded live copy is untouched.
                let _ = mark_cached(&mut pending.data[start..]);
            }
            _ => {
                pending.too_large = true;
                pending.data.clear();
                pending.ends.clear();
            }
        }
    }

    /// The multipart message begun by [`Self::begin_multipart`] is complete: cache it as its topic's last value,
    /// or, if it outgrew `max_entry_bytes`, count it (`cache_too_large`) and drop the topic's older cached value,
    /// which is no longer the last one.
    pub fn end_multipart(&mut self) {
        if !std::mem::take(&mut self.pending.active) {
            return;
        }
        let stored = if self.pending.too_large {
            self.cache.remove(&self.key);
            Store::TooLarge
        } else {
            self.cache
                .store_parts(&self.key, &self.pending.data, &self.pending.ends)
        };
        match stored {
            Store::Updated => self.stats.multipart_cached += 1,
            Store::Inserted { evicted } => {
                self.stats.multipart_cached += 1;
                self.stats.cache_evicted += evicted as u64;
            }
            Store::Rejected => self.stats.cache_rejected += 1,
            Store::TooLarge => self.stats.cache_too_large += 1,
        }
    }

    /// A whole upstream multipart message at once (for tests and tools; the proxy streams it through
    /// [`Self::begin_multipart`]).
    pub fn handle_upstream_parts(&mut self, parts: &[&[u8]]) -> Forwarding {
        let Some((first, rest)) = parts.split_first() else {
            return self.handle_upstream(&[]);
        };
        if rest.is_empty() {
            return self.handle_upstream(first);
        }
        let forwarding = self.begin_multipart(first);
        for part in rest {
            self.multipart_part(part);
        }
        self.end_multipart();
        forwarding
    }

    fn malformed(&mut self, err: &tickbox_wire::DecodeError) -> Forwarding {
        self.stats.malformed += 1;
        // Logged at 1, 2, 4, 8, ...: a broken publisher is visible without flooding the log.
        if self.stats.malformed.is_power_of_two() {
            tracing::warn!(
                total = self.stats.malformed,
                "malformed upstream frame: {err}"
            );
        }
        match self.malformed {
            MalformedPolicy::Drop => Forwarding::Drop,
            MalformedPolicy::Forward => Forwarding::Forward,
        }
    }

    /// One frame from the XPUB.
    ///
    /// Prefixes covered by one of the proxy's own `cache_prefixes` are never forwarded (the proxy already gets
    /// everything they match) and are not tracked, so with the default `[""]` subscribers cannot grow the
    /// upstream subscription set at all.
    pub fn handle_downstream<'a>(&mut self, frame: &'a [u8]) -> DownstreamEvent<'a> {
        self.readers.on_message(frame);
        let Some((&first, prefix)) = frame.split_first() else {
            self.stats.downstream_other += 1;
            return DownstreamEvent::Other;
        };
        let covered = self.own.iter().any(|p| prefix.starts_with(p));
        match first {
            1 => {
                self.stats.subscribes += 1;
                if prefix.len() > self.max_subscription_bytes {
                    self.stats.subscriptions_refused += 1;
                    // A peer can repeat this at will: 1st, 2nd, 4th, 8th... occurrence only.
                    if self.stats.subscriptions_refused.is_power_of_two() {
                        tracing::warn!(
                            bytes = prefix.len(),
                            max = self.max_subscription_bytes,
                            total = self.stats.subscriptions_refused,
                            "subscription refused: longer than max_subscription_bytes"
                        );
                    }
                    return DownstreamEvent::Refused {
                        prefix,
                        reason: Refusal::TooLong,
                    };
                }
                if covered || self.downstream.contains(prefix) {
                    return DownstreamEvent::Subscribe {
                        prefix,
                        forward_upstream: false,
                    };
                }
                if self.downstream.len() >= self.max_downstream_prefixes
                    || self.downstream_bytes + prefix.len() > self.max_downstream_prefix_bytes
                {
                    self.stats.prefixes_refused += 1;
                    if self.stats.prefixes_refused.is_power_of_two() {
                        tracing::warn!(
                            prefixes = self.downstream.len(),
                            bytes = self.downstream_bytes,
                            total = self.stats.prefixes_refused,
                            "subscription refused: the forwarded prefix set is full"
                        );
                    }
                    return DownstreamEvent::Refused {
                        prefix,
                        reason: Refusal::PrefixSetFull,
                    };
                }
                self.downstream.insert(prefix.into());
                self.downstream_bytes += prefix.len();
                self.stats.downstream_prefixes = self.downstream.len() as u64;
                DownstreamEvent::Subscribe {
                    prefix,
                    forward_upstream: true,
                }
            }
            0 => {
                self.stats.unsubscribes += 1;
                // A refused (too long) prefix was never inserted; skip even hashing it.
                let removed = !covered
                    && prefix.len() <= self.max_subscription_bytes
                    && self.downstream.remove(prefix);
                if removed {
                    self.downstream_bytes -= prefix.len();
                }
                self.stats.downstream_prefixes = self.downstream.len() as u64;
                DownstreamEvent::Unsubscribe {
                    prefix,
                    forward_upstream: removed,
                }
            }
            _ => {
                self.stats.downstream_other += 1;
                DownstreamEvent::Other
            }
        }
    }

    /// How many cached values the burst for one subscription event may send now: the per-subscription cap,
    /// further limited by what is left of this second's budget. Report what was sent with [`Self::end_burst`].
    pub fn begin_burst(&mut self, now: Instant) -> usize {
        self.budget.allowance(now)
    }

    /// Charges `sent` cached values to the budget; `cut_short` means the burst had more to send than its
    /// allowance (counted in `cached_bursts_capped`, logged at a limited rate).
    pub fn end_burst(&mut self, sent: usize, cut_short: bool) {
        self.budget.spend(sent);
        if cut_short {
            self.stats.cached_bursts_capped += 1;
            if self.stats.cached_bursts_capped.is_power_of_two() {
                tracing::warn!(
                    total = self.stats.cached_bursts_capped,
                    "cached burst cut short by max_cached_per_subscription or cached_per_second"
                );
            }
        }
    }

    /// Every cached tickbox frame a subscription to `prefix` matches, as received (the sender marks them
    /// [`Flags::CACHED`] on the way out). Multipart values are left out; [`Self::cached_values`] has both.
    pub fn cached_matching<'a>(&'a self, prefix: &'a [u8]) -> impl Iterator<Item = &'a [u8]> + 'a {
        self.cache.matching(prefix)
    }

    /// Every cached value a subscription to `prefix` matches, tickbox frames and plain multipart messages, in
    /// key order: what a cached burst sends.
    pub fn cached_values<'a>(
        &'a self,
        prefix: &'a [u8],
    ) -> impl Iterator<Item = CachedValue<'a>> + 'a {
        self.cache.values_matching(prefix)
    }

    /// The cache, read-only (for benches and diagnostics).
    pub fn cache(&self) -> &LastValueCache {
        &self.cache
    }

    /// A snapshot of the counters, with the cache gauges filled in.
    pub fn stats(&self) -> LvcStats {
        let mut stats = self.stats;
        stats.topics_cached = self.cache.len() as u64;
        stats.cache_bytes = self.cache.bytes() as u64;
        stats.sequences = self.sequences.totals();
        stats
    }

    /// The per-publisher sequence accounts.
    pub fn sequences(&self) -> &Sequences {
        &self.sequences
    }

    /// What the cache knows it lacks now: messages it never received, values it let go.
    pub fn known_loss(&self) -> KnownLoss {
        KnownLoss {
            missed: self.sequences.missed(),
            dropped: self.stats.cache_evicted
                + self.stats.cache_rejected
                + self.stats.cache_too_large,
        }
    }

    pub(crate) fn stats_mut(&mut self) -> &mut LvcStats {
        &mut self.stats
    }
}

/// What the engine made of an upstream batch frame ([`LvcEngine::handle_upstream_batch`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchVerdict {
    /// The batch may be forwarded whole: every record is a valid frame (or `malformed = "forward"` passes the
    /// invalid ones on too).
    pub intact: bool,
    /// For a batch that is not intact: `Drop` sends only its valid records (one by one), `Forward` the frame as
    /// it came (`malformed = "forward"`).
    pub forwarding: Forwarding,
}

/// Which subscribers of a *verbose* XPUB read batch frames, judged from the subscription events it reports: a
/// publisher may send a batch whole only when everyone who takes everything ("") also asked for [`BATCH_TOPIC`],
/// and nobody holds another prefix (a batch's topic would match none of theirs).
///
/// This is [`tickbox_wire::SubscriptionTally`]'s rule for a socket that reports differently: a verbose XPUB
/// (which the proxy keeps, because its upstream de-duplication relies on it) reports every subscribe but an
/// unsubscribe only when the last holder of a prefix leaves. So a count is "subscribes since nobody held it",
/// which is never below the real number of holders; a reader that leaves while others stay is still counted,
/// which can only stop batching (single frames for all), never send a batch to a reader that did not ask.
/// Other prefixes are held as a set (exact under that reporting), bounded by `max_prefixes`; past it batching
/// stops for good, the safe side.
#[derive(Debug)]
pub struct BatchReaders {
    all: u64,
    batch: u64,
    prefixes: HashSet<Box<[u8]>>,
    max_prefixes: usize,
    overflowed: bool,
}

impl BatchReaders {
    /// No subscriber yet; at most `max_prefixes` distinct other prefixes are remembered.
    pub fn new(max_prefixes: usize) -> Self {
        BatchReaders {
            all: 0,
            batch: 0,
            prefixes: HashSet::new(),
            max_prefixes,
            overflowed: false,
        }
    }

    /// One subscription event as the XPUB reports it (`\x01prefix` or `\x00prefix`); anything else is ignored.
    pub fn on_message(&mut self, msg: &[u8]) {
        let Some((&op, prefix)) = msg.split_first() else {
            return;
        };
        let count = if prefix.is_empty() {
            &mut self.all
        } else if prefix == BATCH_TOPIC.as_bytes() {
            &mut self.batch
        } else {
            match op {
                1 if !self.prefixes.contains(prefix) => {
                    if self.prefixes.len() < self.max_prefixes {
                        self.prefixes.insert(prefix.into());
                    } else if !self.overflowed {
                        self.overflowed = true;
                        tracing::warn!(
                            max = self.max_prefixes,
                            "too many distinct subscription prefixes to follow: batch frames are sent record \
                             by record from now on"
                        );
                    }
                }
                0 => {
                    self.prefixes.remove(prefix);
                }
                _ => {}
            }
            return;
        };
        match op {
            1 => *count += 1,
            // The last holder left.
            0 => *count = 0,
            _ => {}
        }
    }

    /// Whether a batch frame may be sent whole.
    pub fn all_read_batches(&self) -> bool {
        self.all > 0 && self.batch >= self.all && self.prefixes.is_empty() && !self.overflowed
    }
}

/// A token bucket of cached values: refills at `per_second`, holds at most one second's worth, and never grants
/// more than `per_subscription` to one burst.
#[derive(Debug)]
struct CachedBudget {
    per_subscription: usize,
    per_second: usize,
    tokens: f64,
    last: Option<Instant>,
}

impl CachedBudget {
    fn new(per_subscription: usize, per_second: usize) -> Self {
        Self {
            per_subscription,
            per_second,
            tokens: per_second as f64,
            last: None,
        }
    }

    fn allowance(&mut self, now: Instant) -> usize {
        if let Some(last) = self.last {
            let refill = now.saturating_duration_since(last).as_secs_f64() * self.per_second as f64;
            self.tokens = (self.tokens + refill).min(self.per_second as f64);
        }
        self.last = Some(now);
        (self.tokens as usize).min(self.per_subscription)
    }

    fn spend(&mut self, sent: usize) {
        self.tokens = (self.tokens - sent as f64).max(0.0);
    }
}

/// Builds the frame the proxy sends for a cached value: the stored frame with [`Flags::CACHED`] added.
pub fn mark_cached(frame: &mut [u8]) -> Result<Header, tickbox_wire::DecodeError> {
    let header = *MessageRef::decode(frame)?.header();
    tickbox_wire::set_flags_in_place(frame, header.flags.with(Flags::CACHED))
}

#[cfg(test)]
// A test reads the clock once for an origin and moves simulated time on from there; the engine never reads it.
#[allow(clippy::disallowed_methods)]
mod tests {
    use super::*;
    use tickbox_wire::{encode_to_vec, BookLevel, Payload, Quote, Side};

    fn quote(topic: &str, publisher: u32, seq: u64, t: u64, bid: i64) -> Vec<u8> {
        let q = Quote {
            bid_px: bid,
            ..Quote::default()
        };
        encode_to_vec(
            topic,
            &Header::live(Kind::Quote, publisher, seq, t),
            &q.into(),
        )
        .unwrap()
    }

    fn engine() -> LvcEngine {
        LvcEngine::new(&LvcConfig::default())
    }

    #[test]
    fn caches_last_value_and_serves_prefix() {
        let mut e = engine();
        assert_eq!(
            e.handle_upstream(&quote("Q.X.A", 1, 1, 10, 1)),
            Forwarding::Forward
        );
        assert_eq!(
            e.handle_upstream(&quote("Q.X.A", 1, 2, 11, 2)),
            Forwarding::Forward
        );
        assert_eq!(
            e.handle_upstream(&quote("Q.X.B", 1, 3, 12, 3)),
            Forwarding::Forward
        );
        let got: Vec<_> = e.cached_matching(b"Q.X.A").map(|f| f.to_vec()).collect();
        assert_eq!(got, vec![quote("Q.X.A", 1, 2, 11, 2)]);
        assert_eq!(e.cached_matching(b"Q.").count(), 2);
        assert_eq!(e.cached_matching(b"T.").count(), 0);
        assert_eq!(e.stats().messages_in, 3);
        assert_eq!(e.stats().topics_cached, 2);
    }

    #[test]
    fn restarted_publisher_replaces_by_arrival() {
        let mut e = engine();
        e.handle_upstream(&quote("Q.X.A", 1, 1000, 10, 1));
        e.handle_upstream(&quote("Q.X.A", 1, 1, 20, 2)); // restart: sequence back to 1
        let frame = e.cached_matching(b"Q.X.A").next().unwrap();
        assert_eq!(MessageRef::decode(frame).unwrap().header().sequence, 1);
    }

    #[test]
    fn heartbeats_are_forwarded_not_cached_and_book_levels_keyed_by_level() {
        let mut e = engine();
        let hb = encode_to_vec(
            "H.7",
            &Header::live(Kind::Heartbeat, 7, 5, 1),
            &Payload::Heartbeat(Default::default()),
        )
        .unwrap();
        assert_eq!(e.handle_upstream(&hb), Forwarding::Forward);
        assert_eq!(e.stats().topics_cached, 0);
        for (side, level) in [
            (Side::Buy, 0),
            (Side::Buy, 1),
            (Side::Sell, 0),
            (Side::Buy, 0),
        ] {
            let b = BookLevel {
                side,
                level,
                ..BookLevel::default()
            };
            let frame =
                encode_to_vec("B.X.A", &Header::live(Kind::BookLevel, 1, 1, 1), &b.into()).unwrap();
            e.handle_upstream(&frame);
        }
        assert_eq!(e.cached_matching(b"B.X.A").count(), 3);
        assert_eq!(e.cached_matching(b"B.X.A\0").count(), 3);
    }

    #[test]
    fn malformed_is_counted_and_dropped_by_default() {
        let mut e = engine();
        assert_eq!(e.handle_upstream(b"garbage"), Forwarding::Drop);
        assert_eq!(e.handle_upstream(b""), Forwarding::Drop);
        let mut bad_version = quote("Q.X.A", 1, 1, 1, 1);
        bad_version[6] = 99;
        assert_eq!(e.handle_upstream(&bad_version), Forwarding::Drop);
        assert_eq!(e.handle_upstream_multipart(2), Forwarding::Drop);
        assert_eq!(e.stats().malformed, 4);
        assert_eq!(e.stats().topics_cached, 0);
        let mut fwd = LvcEngine::new(&LvcConfig {
            malformed: MalformedPolicy::Forward,
            ..LvcConfig::default()
        });
        assert_eq!(fwd.handle_upstream(b"garbage"), Forwarding::Forward);
        assert_eq!(fwd.stats().topics_cached, 0);
    }

    #[test]
    fn plain_multipart_messages_are_cached_by_topic_within_the_bounds() {
        let mut e = LvcEngine::new(&LvcConfig {
            cache_prefixes: vec!["Q.".into()],
            max_entry_bytes: 64,
            ..LvcConfig::default()
        });
        let parts = |value: Option<CachedValue<'_>>| -> Vec<Vec<u8>> {
            match value {
                Some(CachedValue::Multipart(p)) => p.iter().map(<[u8]>::to_vec).collect(),
                other => panic!("not a multipart value: {other:?}"),
            }
        };
        assert_eq!(
            e.handle_upstream_parts(&[b"Q.A", b"1"]),
            Forwarding::Forward
        );
        assert_eq!(
            e.handle_upstream_parts(&[b"Q.A", b"2", b"x"]),
            Forwarding::Forward
        );
        assert_eq!(
            e.handle_upstream_parts(&[b"T.A", b"1"]),
            Forwarding::Forward
        );
        assert_eq!(
            parts(e.cached_values(b"Q.").next()),
            vec![b"Q.A".to_vec(), b"2".to_vec(), b"x".to_vec()]
        );
        // Tickbox-only views leave multipart values out.
        assert_eq!(e.cached_matching(b"Q.").count(), 0);
        // The subscription matches the topic part, as a SUB would.
        assert_eq!(e.cached_values(b"Q.A").count(), 1);
        assert_eq!(e.cached_values(b"Q.AB").count(), 0);
        // Over max_entry_bytes by bytes, or by part count (4 bytes each): forwarded, not cached, and the stale
        // value is gone.
        assert_eq!(
            e.handle_upstream_parts(&[b"Q.A", &[7; 64]]),
            Forwarding::Forward
        );
        assert_eq!(e.cached_values(b"Q.A").count(), 0);
        let empty: Vec<&[u8]> = std::iter::once(&b"Q.B"[..])
            .chain(std::iter::repeat_n(&b""[..], 16))
            .collect();
        assert_eq!(e.handle_upstream_parts(&empty), Forwarding::Forward);
        assert_eq!(e.cached_values(b"Q.B").count(), 0);
        let s = e.stats();
        assert_eq!(
            (
                s.messages_in,
                s.malformed,
                s.multipart_cached,
                s.cache_too_large
            ),
            (5, 0, 2, 2)
        );
        assert_eq!((s.topics_cached, s.cache_bytes), (0, 0));
    }

    #[test]
    fn a_multipart_tickbox_frame_and_a_single_plain_frame_stay_malformed() {
        let mut e = engine();
        let frame = quote("Q.X.A", 1, 1, 1, 1);
        assert_eq!(e.handle_upstream_parts(&[&frame, &frame]), Forwarding::Drop);
        assert!(!e.multipart_is_plain());
        // The Guide's LVC has no single-frame form either: a lone frame has no topic/value boundary.
        assert_eq!(e.handle_upstream_parts(&[b"Q.X.A 101.5"]), Forwarding::Drop);
        let s = e.stats();
        assert_eq!(
            (s.malformed, s.topics_cached, s.multipart_cached),
            (2, 0, 0)
        );
    }

    #[test]
    fn only_cache_prefixes_are_cached() {
        let mut e = LvcEngine::new(&LvcConfig {
            cache_prefixes: vec!["Q.".into()],
            ..LvcConfig::default()
        });
        let t = encode_to_vec(
            "T.X.A",
            &Header::live(Kind::Trade, 1, 1, 1),
            &Payload::Trade(Default::default()),
        )
        .unwrap();
        assert_eq!(e.handle_upstream(&t), Forwarding::Forward);
        e.handle_upstream(&quote("Q.X.A", 1, 2, 1, 1));
        assert_eq!(e.stats().topics_cached, 1);
        assert_eq!(
            e.own_subscriptions().collect::<Vec<_>>(),
            vec![b"Q.".as_slice()]
        );
    }

    #[test]
    fn upstream_subscriptions_are_deduplicated() {
        let mut e = LvcEngine::new(&LvcConfig {
            cache_prefixes: vec!["Q.".into()],
            ..LvcConfig::default()
        });
        // First subscriber to T.: goes upstream. Second (verbose duplicate): served from cache, not forwarded,
        // so the XSUB's own reference count stays at one and the single final unsubscribe releases it.
        assert_eq!(
            e.handle_downstream(b"\x01T."),
            DownstreamEvent::Subscribe {
                prefix: b"T.",
                forward_upstream: true
            }
        );
        assert_eq!(
            e.handle_downstream(b"\x01T."),
            DownstreamEvent::Subscribe {
                prefix: b"T.",
                forward_upstream: false
            }
        );
        assert_eq!(
            e.handle_downstream(b"\x00T."),
            DownstreamEvent::Unsubscribe {
                prefix: b"T.",
                forward_upstream: true
            }
        );
        // The proxy's own prefix is never released by a subscriber leaving.
        assert_eq!(
            e.handle_downstream(b"\x01Q."),
            DownstreamEvent::Subscribe {
                prefix: b"Q.",
                forward_upstream: false
            }
        );
        assert_eq!(
            e.handle_downstream(b"\x00Q."),
            DownstreamEvent::Unsubscribe {
                prefix: b"Q.",
                forward_upstream: false
            }
        );
        assert_eq!(e.handle_downstream(b"\x07x"), DownstreamEvent::Other);
        assert_eq!(e.handle_downstream(b""), DownstreamEvent::Other);
        let s = e.stats();
        assert_eq!(
            (s.subscribes, s.unsubscribes, s.downstream_other),
            (3, 2, 2)
        );
    }

    #[test]
    fn cached_value_never_overwrites_a_newer_one() {
        let live = |p: u32, s: u64, t: u64| Header::live(Kind::Quote, p, s, t);
        let cached = |h: Header| Header {
            flags: h.flags.with(Flags::CACHED),
            ..h
        };
        let held = live(1, 10, 1_000);
        // Live always applies, even with a lower sequence (publisher restart).
        assert!(supersedes(&live(1, 1, 500), Some(&held)));
        // Nothing held: the cached value fills in.
        assert!(supersedes(&cached(live(1, 3, 100)), None));
        // The proxy re-sent what we already have (same publisher, same sequence): ignored.
        assert!(!supersedes(&cached(held), Some(&held)));
        // Older cached value, arriving after a newer live one: ignored.
        assert!(!supersedes(&cached(live(1, 9, 900)), Some(&held)));
        // Newer cached value (we missed an update): applies.
        assert!(supersedes(&cached(live(1, 11, 1_100)), Some(&held)));
        // Same origin time, same publisher: the sequence decides.
        assert!(supersedes(&cached(live(1, 11, 1_000)), Some(&held)));
        // Same origin time, other publisher: keep what we hold.
        assert!(!supersedes(&cached(live(2, 99, 1_000)), Some(&held)));
    }

    #[test]
    fn lvc_behind_lvc_does_not_let_cached_overwrite_live() {
        let mut e = engine();
        e.handle_upstream(&quote("Q.X.A", 1, 10, 1_000, 5));
        let mut old = quote("Q.X.A", 1, 9, 900, 4);
        mark_cached(&mut old).unwrap();
        assert_eq!(e.handle_upstream(&old), Forwarding::Forward);
        let held = MessageRef::decode(e.cached_matching(b"Q.X.A").next().unwrap()).unwrap();
        assert_eq!(held.header().sequence, 10);
        let mut fresh = quote("Q.X.B", 1, 8, 800, 4);
        mark_cached(&mut fresh).unwrap();
        e.handle_upstream(&fresh);
        assert_eq!(e.cached_matching(b"Q.X.B").count(), 1);
    }

    #[test]
    fn long_subscriptions_are_refused_and_never_forwarded() {
        let mut e = LvcEngine::new(&LvcConfig {
            cache_prefixes: vec!["Q.".into()],
            max_subscription_bytes: 8,
            ..LvcConfig::default()
        });
        let long = b"\x01T.123456789";
        assert_eq!(
            e.handle_downstream(long),
            DownstreamEvent::Refused {
                prefix: &long[1..],
                reason: Refusal::TooLong
            }
        );
        assert_eq!(
            e.handle_downstream(b"\x00T.123456789"),
            DownstreamEvent::Unsubscribe {
                prefix: b"T.123456789",
                forward_upstream: false
            }
        );
        // Exactly at the bound is fine.
        assert_eq!(
            e.handle_downstream(b"\x01T.345678"),
            DownstreamEvent::Subscribe {
                prefix: b"T.345678",
                forward_upstream: true
            }
        );
        let s = e.stats();
        assert_eq!((s.subscriptions_refused, s.downstream_prefixes), (1, 1));
    }

    #[test]
    fn the_forwarded_prefix_set_is_bounded_in_count_and_bytes() {
        let mut e = LvcEngine::new(&LvcConfig {
            cache_prefixes: vec!["Q.".into()],
            max_downstream_prefixes: 3,
            max_downstream_prefix_bytes: 9,
            ..LvcConfig::default()
        });
        for p in [&b"\x01T.a"[..], b"\x01T.b", b"\x01T.c"] {
            assert!(matches!(
                e.handle_downstream(p),
                DownstreamEvent::Subscribe {
                    forward_upstream: true,
                    ..
                }
            ));
        }
        assert!(matches!(
            e.handle_downstream(b"\x01T.d"),
            DownstreamEvent::Refused {
                reason: Refusal::PrefixSetFull,
                ..
            }
        ));
        // Covered by an own prefix: never forwarded, never tracked, so never refused.
        assert!(matches!(
            e.handle_downstream(b"\x01Q.XNAS"),
            DownstreamEvent::Subscribe {
                forward_upstream: false,
                ..
            }
        ));
        // A duplicate of a held prefix is served, not refused.
        assert!(matches!(
            e.handle_downstream(b"\x01T.a"),
            DownstreamEvent::Subscribe {
                forward_upstream: false,
                ..
            }
        ));
        e.handle_downstream(b"\x00T.a");
        // Room for one more by count, but 6 held bytes + 4 exceed the 9-byte cap.
        assert!(matches!(
            e.handle_downstream(b"\x01T.dd"),
            DownstreamEvent::Refused {
                reason: Refusal::PrefixSetFull,
                ..
            }
        ));
        assert!(matches!(
            e.handle_downstream(b"\x01T.d"),
            DownstreamEvent::Subscribe {
                forward_upstream: true,
                ..
            }
        ));
        let s = e.stats();
        assert_eq!((s.prefixes_refused, s.downstream_prefixes), (2, 3));
    }

    #[test]
    fn cached_bursts_are_capped_per_subscription_and_per_second() {
        let mut e = LvcEngine::new(&LvcConfig {
            max_cached_per_subscription: 10,
            cached_per_second: 25,
            ..LvcConfig::default()
        });
        let t0 = Instant::now();
        assert_eq!(e.begin_burst(t0), 10);
        e.end_burst(10, true);
        assert_eq!(e.begin_burst(t0), 10);
        e.end_burst(10, false);
        assert_eq!(e.begin_burst(t0), 5);
        e.end_burst(5, true);
        assert_eq!(e.begin_burst(t0), 0);
        e.end_burst(0, true);
        // 200 ms refill 5 values; a full second refills the bucket, never beyond one second's worth.
        assert_eq!(e.begin_burst(t0 + std::time::Duration::from_millis(200)), 5);
        assert_eq!(e.begin_burst(t0 + std::time::Duration::from_secs(10)), 10);
        assert_eq!(e.stats().cached_bursts_capped, 3);
    }
}
