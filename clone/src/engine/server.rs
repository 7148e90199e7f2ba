//! The Clone server engine (sans-IO). The socket loop lives in [`crate::server_loop`].
//!
//! The engine owns the map, the sequence counter, TTL expiries, the Binary Star pending list and the passive
//! mirror. It never touches sockets or clocks: events go in (`handle_kvset`, `handle_peer_kvpub`, `handle_timeout`,
//! ...) and messages to publish come out.
#![deny(clippy::disallowed_methods, clippy::disallowed_types)]

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet, VecDeque};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use tickbox_units::{ByteSize, HumanDuration};

use crate::msg::{KvMsg, HUGZ, KTHXBAI, NOPE};

/// Bytes charged per stored entry on top of its key, value and properties: the map node, the `String` and `Vec`
/// headers and the expiry index entry. Keeps a flood of tiny keys from costing far more than `max_bytes` says.
pub const ENTRY_OVERHEAD: u64 = 96;

/// Server limits and timing. Defaults follow the Guide's reference servers, except the bounds, which are sized so a
/// default server stays within a few hundred MB whatever its peers send.
///
/// **Store budget policy.** Keys under one of [`ServerConfig::reserved_prefixes`] (by default the recipes'
/// `/config/` and `/members/`) are charged to a separate, smaller budget (`reserved_max_keys`,
/// `reserved_max_bytes`); every other key is charged to the general budget (`max_keys`, `max_bytes`). A flood of
/// distinct garbage keys can therefore fill the general budget, but never locks out configuration and membership,
/// and the flood's keys can still be overwritten with smaller values or deleted (deletes are always accepted). A
/// set that would overflow its budget is refused, counted and answered with a `NOPE` notice (see [`crate::msg`]);
/// nothing already stored is evicted, so a refusal never silently destroys someone else's data. Keys with a CHP
/// `ttl` free their budget when they expire.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct ServerConfig {
    /// Interval between HUGZ heartbeats on the update PUB (≈1 s in CHP); clients fail over after
    /// [`ClientConfig::server_ttl`](crate::ClientConfig::server_ttl) of silence, so keep it well below that.
    /// Read through [`ServerConfig::hugz`], which treats anything under 1 ms as 1 ms.
    pub hugz: HumanDuration,
    /// How often keys whose CHP `ttl` has passed are deleted (and the deletes published); a key may outlive its
    /// TTL by up to this long. Read through [`ServerConfig::ttl_sweep`] (at least 1 ms).
    pub ttl_sweep: HumanDuration,
    /// Longest accepted key, in bytes.
    pub max_key_len: usize,
    /// Largest accepted value, in bytes.
    pub max_value_len: usize,
    /// Largest accepted `name=value` properties frame, in bytes.
    pub max_props_len: usize,
    /// Most keys outside the reserved prefixes; a KVSET that would add one more is refused.
    pub max_keys: usize,
    /// Most bytes (key + value + properties + [`ENTRY_OVERHEAD`] per entry) outside the reserved prefixes.
    pub max_bytes: ByteSize,
    /// Key prefixes with their own budget, so a flood elsewhere cannot lock them out (see the policy above).
    pub reserved_prefixes: Vec<String>,
    /// Most keys under the reserved prefixes, all together.
    pub reserved_max_keys: usize,
    /// Most bytes under the reserved prefixes, all together (counted like `max_bytes`).
    pub reserved_max_bytes: ByteSize,
    /// `ZMQ_MAXMSGSIZE` of the snapshot ROUTER, whose peers only send ICANHAZ (and Binary Star votes): a peer
    /// that sends a larger frame is disconnected by the ZeroMQ library. The update PUB's limit is derived from
    /// `max_subscription_len` and the collector's from the largest accepted key, value or properties frame.
    pub control_max_frame: ByteSize,
    /// Longest subscription the update PUB accepts, in bytes: its `ZMQ_MAXMSGSIZE` is this plus room for the
    /// subscribe command, so a subscriber sending a longer one is disconnected by the ZeroMQ library before the subscription
    /// is stored. No key is longer than `max_key_len`, so a longer prefix could never match anything anyway.
    pub max_subscription_len: usize,
    /// Send high-water mark of the snapshot ROUTER, per requester, in messages. With `ZMQ_ROUTER_MANDATORY` a full
    /// queue pauses that snapshot instead of queueing without bound; worst-case snapshot memory is about
    /// `max_snapshots_in_flight × snapshot_hwm × (largest entry)`.
    pub snapshot_hwm: i32,
    /// Snapshots being streamed at once (all requesters); further ICANHAZ are refused and counted. A client
    /// whose request is refused fails over after its `server_ttl` and asks again.
    pub max_snapshots_in_flight: usize,
    /// Snapshots in flight for one requester (the Clone client's Binary Star vote plus its real request).
    pub max_snapshots_per_peer: usize,
    /// A snapshot whose requester reads nothing for this long is abandoned (counted as truncated), freeing its
    /// slot; what is already queued stays in that requester's bounded queue until it reads or disconnects.
    /// When every slot is taken, a snapshot whose requester has read nothing for `min(snapshot_stall, 1 s)` is
    /// abandoned in favour of the new request, so non-readers cannot lock others out.
    pub snapshot_stall: HumanDuration,
    /// Most `NOPE` refusal notices published per second; more refusals are counted as suppressed (the client
    /// resends unacknowledged sets, so a suppressed notice is usually answered on the resend).
    pub refusal_notices_per_sec: u32,
    /// Linger of the server's receiving and requesting sockets when it stops (the collector and Binary Star SUBs,
    /// the passive's snapshot DEALER towards its peer, which may be down): never 0, short so a stop is prompt. The
    /// snapshot ROUTER and update PUB instead close with a linger of twice `stalled_peer_timeout` plus 1 s.
    /// At least 1 ms.
    pub close_linger: HumanDuration,
    /// The snapshot ROUTER and the update PUB send CHP's multipart messages; they close with a linger of twice this plus 1 s
    /// and `ZMQ_TCP_MAXRT` set to this (the teardown rule in the book's chapter on known traps), so a stop can never hit the ZeroMQ library's
    /// `clean_pipes` abort (a peer stalled mid-message that hangs up as the server stops). The price: a peer
    /// that acknowledges no TCP data for this long is disconnected at any time, and a stop with a stalled
    /// peer waits up to about this long (twice it on kernels before 5.10). At least 1 ms.
    pub stalled_peer_timeout: HumanDuration,
    /// Most client updates a passive server holds while waiting for the active's copy.
    pub max_pending: usize,
    /// How many recently applied update UUIDs are remembered for de-duplication.
    pub recent_uuids: usize,
    /// Send high-water mark of the update PUB socket (per subscriber), in messages.
    pub pub_hwm: i32,
    /// Receive high-water mark of the collector (per writer), in messages: bounds what a flooding writer can queue
    /// inside the server before the loop reads it (about `collector_hwm × (largest KVSET)` per writer); beyond
    /// it TCP pushes back and the writer's PUB drops (tickbox clients resend unacknowledged sets).
    pub collector_hwm: i32,
    /// Most concurrent connections on each of the server's three sockets; a handshake past it is refused through
    /// ZAP and counted. 0: no cap. Applied by the binary through `tickbox_auth::Security::cap_connections`.
    pub max_connections: u64,
    /// `[security]`, shared by the binary: CURVE/ZAP on the three sockets (roles `clone.snapshot`,
    /// `clone.publisher`, `clone.collector`; the Binary Star link `bstar` and `clone.peer`) and the `/config/`
    /// writers every SET and DEL is checked against. The default checks nothing.
    #[serde(skip)]
    pub security: tickbox_auth::Security,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            hugz: HumanDuration(Duration::from_secs(1)),
            ttl_sweep: HumanDuration(Duration::from_secs(1)),
            max_key_len: 1024,
            max_value_len: 1 << 20,
            max_props_len: 4096,
            max_keys: 1_000_000,
            max_bytes: ByteSize(256 << 20),
            reserved_prefixes: vec!["/config/".into(), "/members/".into()],
            reserved_max_keys: 100_000,
            reserved_max_bytes: ByteSize(64 << 20),
            control_max_frame: ByteSize(4096),
            max_subscription_len: 1024,
            snapshot_hwm: 1_000,
            max_snapshots_in_flight: 16,
            max_snapshots_per_peer: 2,
            snapshot_stall: HumanDuration(Duration::from_secs(10)),
            refusal_notices_per_sec: 1000,
            close_linger: HumanDuration(Duration::from_millis(200)),
            stalled_peer_timeout: HumanDuration(Duration::from_secs(3)),
            max_connections: 0,
            max_pending: 100_000,
            recent_uuids: 100_000,
            pub_hwm: 1_000_000,
            collector_hwm: 100_000,
            security: tickbox_auth::Security::default(),
        }
    }
}

impl ServerConfig {
    /// The HUGZ interval, at least 1 ms so the timer always advances.
    pub fn hugz(&self) -> Duration {
        self.hugz.0.max(Duration::from_millis(1))
    }
    /// The TTL sweep interval, at least 1 ms so the timer always advances.
    pub fn ttl_sweep(&self) -> Duration {
        self.ttl_sweep.0.max(Duration::from_millis(1))
    }
    /// The close linger, at least 1 ms: zero opens the ZeroMQ library's abort window at the stop itself (see the field).
    pub fn close_linger(&self) -> Duration {
        self.close_linger.0.max(Duration::from_millis(1))
    }
    /// The bound on a stalled peer, at least 1 ms (see the field).
    pub fn stalled_peer_timeout(&self) -> Duration {
        self.stalled_peer_timeout.0.max(Duration::from_millis(1))
    }
    /// `ZMQ_MAXMSGSIZE` of the collector: the largest frame an accepted KVSET can carry.
    pub fn collector_max_frame(&self) -> i64 {
        let largest = self
            .max_value_len
            .max(self.max_key_len)
            .max(self.max_props_len)
            .max(16);
        i64::try_from(largest).unwrap_or(i64::MAX)
    }
    /// `ZMQ_MAXMSGSIZE` of the update PUB: a subscription of `max_subscription_len` plus the ZMTP subscribe
    /// command's header.
    pub fn publisher_max_frame(&self) -> i64 {
        i64::try_from(self.max_subscription_len.saturating_add(16)).unwrap_or(i64::MAX)
    }
    /// `ZMQ_MAXMSGSIZE` of the snapshot ROUTER.
    pub fn router_max_frame(&self) -> i64 {
        i64::try_from(self.control_max_frame.0.max(64)).unwrap_or(i64::MAX)
    }
    fn is_reserved(&self, key: &str) -> bool {
        self.reserved_prefixes
            .iter()
            .any(|p| !p.is_empty() && key.starts_with(p.as_str()))
    }
}

/// What one stored entry costs its budget.
fn entry_cost(msg: &KvMsg) -> u64 {
    (msg.key.len() + msg.value.len() + msg.props.len()) as u64 + ENTRY_OVERHEAD
}

/// Keys and bytes charged to one budget.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Usage {
    /// Keys held.
    pub keys: u64,
    /// Bytes held, counted as for [`ServerConfig::max_bytes`].
    pub bytes: u64,
}

/// Why a KVSET was not applied.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DropReason {
    /// The key is longer than [`ServerConfig::max_key_len`].
    KeyTooLong,
    /// The value is larger than [`ServerConfig::max_value_len`].
    ValueTooLarge,
    /// The properties frame is larger than [`ServerConfig::max_props_len`].
    PropsTooLong,
    /// The key's budget already holds its most keys ([`ServerConfig::max_keys`] or `reserved_max_keys`) and this
    /// update would add one.
    TooManyKeys,
    /// The key's budget would exceed its bytes ([`ServerConfig::max_bytes`] or `reserved_max_bytes`).
    TooManyBytes,
    /// A reserved key (`HUGZ`, `KTHXBAI`) or an empty key.
    ReservedKey,
    /// A non-serving server cannot match an update without UUID against the active's copy.
    NoUuidWhilePassive,
    /// The sender's key may not write this key (`[security] config_writers` guards `/config/`).
    Unauthorised,
}

impl DropReason {
    /// The stable code carried in a `NOPE` notice's `reason` property and printed by `tickbox ctl`.
    pub fn code(self) -> &'static str {
        match self {
            DropReason::KeyTooLong => "key-too-long",
            DropReason::ValueTooLarge => "value-too-large",
            DropReason::PropsTooLong => "props-too-long",
            DropReason::TooManyKeys => "too-many-keys",
            DropReason::TooManyBytes => "too-many-bytes",
            DropReason::ReservedKey => "reserved-key",
            DropReason::NoUuidWhilePassive => "no-uuid-while-passive",
            DropReason::Unauthorised => "unauthorised",
        }
    }
}

/// Result of a client KVSET.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KvsetOutcome {
    /// Applied; publish this KVPUB.
    Published(KvMsg),
    /// Held on the pending list (not serving).
    Pending,
    /// Same UUID already applied (client resend, or the active's copy already mirrored).
    Duplicate,
    /// Rejected and counted in [`ServerStats`]; nothing is published.
    Dropped(DropReason),
}

/// Counters, all monotonic.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ServerStats {
    /// Updates given a sequence number and published: client sets and deletes, TTL deletes, applied pending.
    pub published: u64,
    /// Updates recognised by UUID as already applied or already pending, and not applied again.
    pub duplicates: u64,
    /// Updates dropped for [`DropReason::KeyTooLong`].
    pub dropped_key_too_long: u64,
    /// Updates dropped for [`DropReason::ValueTooLarge`].
    pub dropped_value_too_large: u64,
    /// Updates dropped for [`DropReason::PropsTooLong`].
    pub dropped_props_too_long: u64,
    /// Updates dropped for [`DropReason::TooManyKeys`].
    pub dropped_too_many_keys: u64,
    /// Updates dropped for [`DropReason::TooManyBytes`].
    pub dropped_too_many_bytes: u64,
    /// Updates dropped for [`DropReason::ReservedKey`].
    pub dropped_reserved_key: u64,
    /// Updates dropped for [`DropReason::NoUuidWhilePassive`].
    pub dropped_no_uuid_passive: u64,
    /// Updates dropped for [`DropReason::Unauthorised`].
    pub dropped_unauthorised: u64,
    /// Oldest pending updates discarded because the list exceeded [`ServerConfig::max_pending`].
    pub pending_overflow: u64,
    /// Keys deleted because their CHP `ttl` ran out.
    pub ttl_expired: u64,
    /// Pending updates applied on becoming active (also counted in `published`).
    pub pending_applied: u64,
    /// Updates copied from the active peer's stream while passive.
    pub mirrored: u64,
}

#[derive(Debug, Clone)]
struct Stored {
    msg: KvMsg,
    expires: Option<Instant>,
}

/// Insertion-ordered set with a capacity: the oldest entry falls out first.
#[derive(Debug, Default)]
struct RecentSet {
    set: HashSet<[u8; 16]>,
    order: VecDeque<[u8; 16]>,
    cap: usize,
}

impl RecentSet {
    fn new(cap: usize) -> Self {
        RecentSet {
            set: HashSet::new(),
            order: VecDeque::new(),
            cap: cap.max(1),
        }
    }
    fn contains(&self, u: &[u8; 16]) -> bool {
        self.set.contains(u)
    }
    fn insert(&mut self, u: [u8; 16]) {
        if self.set.insert(u) {
            self.order.push_back(u);
            while self.order.len() > self.cap {
                if let Some(old) = self.order.pop_front() {
                    self.set.remove(&old);
                }
            }
        }
    }
}

/// Client updates a non-serving server holds, by UUID, in arrival order.
#[derive(Debug, Default)]
struct Pending {
    by_order: BTreeMap<u64, KvMsg>,
    by_uuid: HashMap<[u8; 16], u64>,
    next: u64,
}

impl Pending {
    fn len(&self) -> usize {
        self.by_order.len()
    }
    fn push(&mut self, uuid: [u8; 16], msg: KvMsg) {
        self.next += 1;
        self.by_order.insert(self.next, msg);
        self.by_uuid.insert(uuid, self.next);
    }
    fn remove(&mut self, uuid: &[u8; 16]) -> bool {
        match self.by_uuid.remove(uuid) {
            Some(order) => self.by_order.remove(&order).is_some(),
            None => false,
        }
    }
    fn pop_oldest(&mut self) -> Option<KvMsg> {
        let (_, msg) = self.by_order.pop_first()?;
        if let Some(u) = msg.uuid {
            self.by_uuid.remove(&u);
        }
        Some(msg)
    }
}

/// Whether (and how) the engine follows an active peer's stream.
#[derive(Debug)]
enum Mirror {
    Off,
    Syncing {
        snapshot: Vec<KvMsg>,
        buffered: Vec<KvMsg>,
    },
    Live,
}

/// The Clone server state machine.
#[derive(Debug)]
pub struct ServerEngine {
    config: ServerConfig,
    map: BTreeMap<String, Stored>,
    seq: u64,
    expiries: BTreeSet<(Instant, String)>,
    serving: bool,
    pending: Pending,
    recent: RecentSet,
    mirror: Mirror,
    next_hugz: Instant,
    next_sweep: Instant,
    stats: ServerStats,
    general: Usage,
    reserved: Usage,
    /// Messages the timers and a takeover produced, in sequence order, until `poll_output` hands them out.
    out: VecDeque<KvMsg>,
}

impl ServerEngine {
    /// `serving` is true for a stand-alone server; a Binary Star server starts not serving.
    pub fn new(config: ServerConfig, serving: bool, now: Instant) -> Self {
        let recent = RecentSet::new(config.recent_uuids);
        ServerEngine {
            next_hugz: now + config.hugz(),
            next_sweep: now + config.ttl_sweep(),
            config,
            map: BTreeMap::new(),
            seq: 0,
            expiries: BTreeSet::new(),
            serving,
            pending: Pending::default(),
            recent,
            mirror: Mirror::Off,
            stats: ServerStats::default(),
            general: Usage::default(),
            reserved: Usage::default(),
            out: VecDeque::new(),
        }
    }

    /// What the general budget holds now.
    pub fn usage(&self) -> Usage {
        self.general
    }
    /// What the reserved-prefix budget holds now.
    pub fn reserved_usage(&self) -> Usage {
        self.reserved
    }
    /// Total dropped client updates, all reasons, plus pending-list overflow.
    pub fn dropped_total(&self) -> u64 {
        let s = &self.stats;
        s.dropped_key_too_long
            + s.dropped_value_too_large
            + s.dropped_props_too_long
            + s.dropped_too_many_keys
            + s.dropped_too_many_bytes
            + s.dropped_reserved_key
            + s.dropped_no_uuid_passive
            + s.dropped_unauthorised
            + s.pending_overflow
    }

    fn budget_mut(&mut self, key: &str) -> &mut Usage {
        if self.config.is_reserved(key) {
            &mut self.reserved
        } else {
            &mut self.general
        }
    }

    /// The configuration the engine was built with.
    pub fn config(&self) -> &ServerConfig {
        &self.config
    }
    /// Counters since the engine was created.
    pub fn stats(&self) -> &ServerStats {
        &self.stats
    }
    /// The sequence of the last update applied (published, mirrored or restored); 0 before any.
    pub fn sequence(&self) -> u64 {
        self.seq
    }
    /// Keys in the map.
    pub fn len(&self) -> usize {
        self.map.len()
    }
    /// True when the map holds no key.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }
    /// True while the server applies client updates and sends HUGZ (stand-alone, or Binary Star active).
    pub fn is_serving(&self) -> bool {
        self.serving
    }
    /// Client updates held while not serving, waiting for the active's copy or a takeover.
    pub fn pending_len(&self) -> usize {
        self.pending.len()
    }
    /// The stored message for `key` (as published, with its sequence), if present.
    pub fn get(&self, key: &str) -> Option<&KvMsg> {
        self.map.get(key).map(|s| &s.msg)
    }
    /// True while a passive server is still loading the active's snapshot.
    pub fn is_mirror_syncing(&self) -> bool {
        matches!(self.mirror, Mirror::Syncing { .. })
    }

    fn validate(&self, msg: &KvMsg) -> Result<(), DropReason> {
        if msg.key.is_empty() || msg.key == HUGZ || msg.key == KTHXBAI || msg.key == NOPE {
            return Err(DropReason::ReservedKey);
        }
        if msg.key.len() > self.config.max_key_len {
            return Err(DropReason::KeyTooLong);
        }
        if msg.value.len() > self.config.max_value_len {
            return Err(DropReason::ValueTooLarge);
        }
        if msg.props.len() > self.config.max_props_len {
            return Err(DropReason::PropsTooLong);
        }
        if msg.value.is_empty() {
            // Deletes only ever free budget.
            return Ok(());
        }
        let (usage, max_keys, max_bytes) = if self.config.is_reserved(&msg.key) {
            (
                self.reserved,
                self.config.reserved_max_keys,
                self.config.reserved_max_bytes.0,
            )
        } else {
            (self.general, self.config.max_keys, self.config.max_bytes.0)
        };
        let old = self.map.get(&msg.key).map(|s| entry_cost(&s.msg));
        if old.is_none() && usage.keys >= max_keys as u64 {
            return Err(DropReason::TooManyKeys);
        }
        let after = usage.bytes - old.unwrap_or(0) + entry_cost(msg);
        if after > max_bytes {
            return Err(DropReason::TooManyBytes);
        }
        Ok(())
    }

    fn count_drop(&mut self, reason: DropReason) {
        let s = &mut self.stats;
        match reason {
            DropReason::KeyTooLong => s.dropped_key_too_long += 1,
            DropReason::ValueTooLarge => s.dropped_value_too_large += 1,
            DropReason::PropsTooLong => s.dropped_props_too_long += 1,
            DropReason::TooManyKeys => s.dropped_too_many_keys += 1,
            DropReason::TooManyBytes => s.dropped_too_many_bytes += 1,
            DropReason::ReservedKey => s.dropped_reserved_key += 1,
            DropReason::NoUuidWhilePassive => s.dropped_no_uuid_passive += 1,
            DropReason::Unauthorised => s.dropped_unauthorised += 1,
        }
    }

    /// Stores `msg` (already sequenced) and maintains the expiry index.
    fn store(&mut self, msg: KvMsg, now: Instant) {
        self.remove(&msg.key);
        if msg.is_delete() {
            return;
        }
        let expires = msg.ttl().map(|ttl| now + ttl);
        if let Some(at) = expires {
            self.expiries.insert((at, msg.key.clone()));
        }
        let cost = entry_cost(&msg);
        let budget = self.budget_mut(&msg.key);
        budget.keys += 1;
        budget.bytes += cost;
        self.map.insert(msg.key.clone(), Stored { msg, expires });
    }

    /// Removes `key` with its expiry and gives its cost back to its budget.
    fn remove(&mut self, key: &str) -> bool {
        let Some(old) = self.map.remove(key) else {
            return false;
        };
        if let Some(at) = old.expires {
            self.expiries.remove(&(at, old.msg.key.clone()));
        }
        let cost = entry_cost(&old.msg);
        let budget = self.budget_mut(key);
        budget.keys = budget.keys.saturating_sub(1);
        budget.bytes = budget.bytes.saturating_sub(cost);
        true
    }

    /// Applies a client update while serving: sequence it, store it, return the KVPUB.
    fn apply(&mut self, mut msg: KvMsg, now: Instant) -> KvMsg {
        self.seq += 1;
        msg.seq = self.seq;
        if let Some(u) = msg.uuid {
            self.recent.insert(u);
        }
        self.stats.published += 1;
        self.store(msg.clone(), now);
        msg
    }

    /// A KVSET arrived on the collector from an unauthenticated writer (see [`ServerEngine::handle_kvset_from`]).
    pub fn handle_kvset(&mut self, now: Instant, msg: KvMsg) -> KvsetOutcome {
        self.handle_kvset_from(now, msg, None)
    }

    /// A KVSET arrived on the collector from `user`, the writer's ZAP user id (its Z85 public key under CURVE,
    /// read by the socket loop; `None` under NULL). A set or delete the `[security]` grants refuse `user` is
    /// dropped as [`DropReason::Unauthorised`], counted, and answered with a `NOPE` notice like any refusal.
    pub fn handle_kvset_from(
        &mut self,
        now: Instant,
        msg: KvMsg,
        user: Option<&str>,
    ) -> KvsetOutcome {
        if let tickbox_auth::Access::Refused { rule } =
            self.config.security.grants().may_write(user, &msg.key)
        {
            tracing::debug!(key = %msg.key, rule, "refused an unauthorised write");
            self.config.security.stats().record_unauthorised();
            self.count_drop(DropReason::Unauthorised);
            return KvsetOutcome::Dropped(DropReason::Unauthorised);
        }
        if let Err(reason) = self.validate(&msg) {
            self.count_drop(reason);
            return KvsetOutcome::Dropped(reason);
        }
        if let Some(u) = &msg.uuid {
            if self.recent.contains(u) {
                self.stats.duplicates += 1;
                return KvsetOutcome::Duplicate;
            }
        }
        if self.serving {
            return KvsetOutcome::Published(self.apply(msg, now));
        }
        let Some(u) = msg.uuid else {
            self.count_drop(DropReason::NoUuidWhilePassive);
            return KvsetOutcome::Dropped(DropReason::NoUuidWhilePassive);
        };
        if self.pending.by_uuid.contains_key(&u) {
            self.stats.duplicates += 1;
            return KvsetOutcome::Duplicate;
        }
        self.pending.push(u, msg);
        while self.pending.len() > self.config.max_pending {
            self.pending.pop_oldest();
            self.stats.pending_overflow += 1;
        }
        KvsetOutcome::Pending
    }

    /// Keys under `subtree` in key order (what KVSYNC replays).
    pub fn snapshot<'a>(&'a self, subtree: &'a str) -> impl Iterator<Item = &'a KvMsg> + 'a {
        self.map
            .range::<str, _>((
                std::ops::Bound::Included(subtree),
                std::ops::Bound::Unbounded,
            ))
            .take_while(move |(k, _)| k.starts_with(subtree))
            .map(|(_, s)| &s.msg)
    }

    /// Up to `max` keys under `subtree` strictly after `after` (or from the start), in key order: one slice of a
    /// snapshot streamed over several loop turns.
    pub fn snapshot_after<'a>(
        &'a self,
        subtree: &'a str,
        after: Option<&'a str>,
    ) -> impl Iterator<Item = &'a KvMsg> + 'a {
        let lower = match after {
            Some(k) => std::ops::Bound::Excluded(k),
            None => std::ops::Bound::Included(subtree),
        };
        self.map
            .range::<str, _>((lower, std::ops::Bound::Unbounded))
            .take_while(move |(k, _)| k.starts_with(subtree))
            .map(|(_, s)| &s.msg)
    }

    /// A `NOPE` notice answering a refused KVSET (see [`crate::msg::NOPE`]); `None` when the update carries no
    /// UUID, since nobody could match the notice to it.
    pub fn refusal(&self, uuid: Option<[u8; 16]>, reason: DropReason) -> Option<KvMsg> {
        let uuid = uuid?;
        let mut m = KvMsg::new(NOPE, self.seq, reason.code().as_bytes().to_vec());
        m.uuid = Some(uuid);
        m.set_prop("reason", reason.code());
        Some(m)
    }

    /// The message that ends a snapshot: `["KTHXBAI"][seq][""][""][subtree]`.
    pub fn kthxbai(&self, subtree: &str) -> KvMsg {
        KvMsg::new(KTHXBAI, self.seq, subtree.as_bytes().to_vec())
    }

    /// Timers: HUGZ and TTL expiry, both only while serving. Messages to publish come out of
    /// [`Self::poll_output`].
    pub fn handle_timeout(&mut self, now: Instant) {
        if now >= self.next_sweep {
            self.next_sweep = now + self.config.ttl_sweep();
            if self.serving {
                self.expire(now);
            }
        }
        if now >= self.next_hugz {
            self.next_hugz = now + self.config.hugz();
            if self.serving {
                self.out.push_back(KvMsg::new(HUGZ, self.seq, Vec::new()));
            }
        }
    }

    fn expire(&mut self, now: Instant) {
        while let Some((at, _)) = self.expiries.first() {
            if *at > now {
                break;
            }
            let Some((_, key)) = self.expiries.pop_first() else {
                break;
            };
            if self.remove(&key) {
                self.seq += 1;
                self.stats.ttl_expired += 1;
                self.stats.published += 1;
                self.out.push_back(KvMsg::new(key, self.seq, Vec::new()));
            }
        }
    }

    /// The next message to publish (from [`Self::handle_timeout`] or [`Self::become_active`]), in sequence order;
    /// call until `None` after each of them.
    pub fn poll_output(&mut self) -> Option<KvMsg> {
        self.out.pop_front()
    }

    /// Earliest instant `handle_timeout` has work.
    pub fn poll_timeout(&self) -> Option<Instant> {
        Some(self.next_hugz.min(self.next_sweep))
    }

    /// Binary Star made us active: stop mirroring, apply the pending list (each published with a new sequence,
    /// keeping the client's UUID so the client sees its acknowledgement).
    pub fn become_active(&mut self, now: Instant) {
        if self.is_mirror_syncing() {
            tracing::warn!(
                "became active before the peer snapshot completed; serving what we have"
            );
        }
        self.mirror = Mirror::Off;
        self.serving = true;
        while let Some(msg) = self.pending.pop_oldest() {
            if let Err(reason) = self.validate(&msg) {
                self.count_drop(reason);
                continue;
            }
            self.stats.pending_applied += 1;
            let published = self.apply(msg, now);
            self.out.push_back(published);
        }
        // Expired keys the old active would have deleted are deleted now.
        self.next_sweep = now;
        self.next_hugz = now;
    }

    /// Binary Star made us passive: drop our own map and start mirroring the active peer. The loop must then
    /// send ICANHAZ with an empty subtree to the peer and feed the reply to [`Self::handle_peer_snapshot`].
    pub fn become_passive(&mut self) {
        self.serving = false;
        self.map.clear();
        self.expiries.clear();
        self.general = Usage::default();
        self.reserved = Usage::default();
        self.seq = 0;
        self.mirror = Mirror::Syncing {
            snapshot: Vec::new(),
            buffered: Vec::new(),
        };
    }

    /// Restart the mirror sync (e.g. the peer did not answer in time).
    pub fn restart_mirror_sync(&mut self) {
        if !self.serving {
            self.become_passive();
        }
    }

    /// One message of the active peer's snapshot (KVSYNC or KTHXBAI).
    pub fn handle_peer_snapshot(&mut self, now: Instant, msg: KvMsg) {
        let Mirror::Syncing { snapshot, buffered } = &mut self.mirror else {
            return;
        };
        if msg.key != KTHXBAI {
            snapshot.push(msg);
            return;
        }
        let snapshot = std::mem::take(snapshot);
        let buffered = std::mem::take(buffered);
        self.mirror = Mirror::Live;
        self.seq = msg.seq;
        for entry in snapshot {
            self.store(entry, now);
        }
        for update in buffered {
            self.mirror_apply(update, now);
        }
        tracing::info!(
            keys = self.map.len(),
            seq = self.seq,
            "passive mirror synchronised with active peer"
        );
    }

    /// A KVPUB (or HUGZ) from the active peer's publisher.
    pub fn handle_peer_kvpub(&mut self, now: Instant, msg: KvMsg) {
        if msg.key == HUGZ {
            return;
        }
        // Pending reconciliation works in both orders: the client's copy first (remove it now), or the active's
        // copy first (remember the UUID so the late client copy is recognised as a duplicate).
        if let Some(u) = msg.uuid {
            self.pending.remove(&u);
            self.recent.insert(u);
        }
        match &mut self.mirror {
            Mirror::Off => {}
            Mirror::Syncing { buffered, .. } => buffered.push(msg),
            Mirror::Live => self.mirror_apply(msg, now),
        }
    }

    fn mirror_apply(&mut self, msg: KvMsg, now: Instant) {
        if msg.seq <= self.seq {
            return;
        }
        self.seq = msg.seq;
        self.stats.mirrored += 1;
        self.store(msg, now);
    }

    /// Restores state loaded from disk (before serving).
    pub fn restore(&mut self, entries: impl IntoIterator<Item = KvMsg>, seq: u64, now: Instant) {
        for e in entries {
            self.store(e, now);
        }
        self.seq = self.seq.max(seq);
    }

    /// Every stored entry (persistence compaction).
    pub fn entries(&self) -> impl Iterator<Item = &KvMsg> {
        self.map.values().map(|s| &s.msg)
    }
}

#[cfg(test)]
// A test reads the clock once for an origin and moves simulated time on from there; the engine never reads it.
#[allow(clippy::disallowed_methods)]
mod tests {
    use super::*;

    /// Appends everything the engine has to publish to `out`, as the server loop does.
    fn drain(e: &mut ServerEngine, out: &mut Vec<KvMsg>) {
        out.extend(std::iter::from_fn(|| e.poll_output()));
    }

    fn set(key: &str, value: &str, uuid: u8) -> KvMsg {
        let mut m = KvMsg::new(key, 0, value.as_bytes().to_vec());
        m.uuid = Some([uuid; 16]);
        m
    }

    fn published(o: KvsetOutcome) -> KvMsg {
        match o {
            KvsetOutcome::Published(m) => m,
            other => panic!("expected Published, got {other:?}"),
        }
    }

    #[test]
    fn sequences_strictly_increase_and_empty_value_deletes() {
        let t = Instant::now();
        let mut e = ServerEngine::new(ServerConfig::default(), true, t);
        let a = published(e.handle_kvset(t, set("/a", "1", 1)));
        let b = published(e.handle_kvset(t, set("/b", "2", 2)));
        let d = published(e.handle_kvset(t, set("/a", "", 3)));
        assert_eq!((a.seq, b.seq, d.seq), (1, 2, 3));
        assert!(d.is_delete());
        assert!(e.get("/a").is_none());
        assert_eq!(e.get("/b").unwrap().value, b"2");
        assert_eq!(e.kthxbai("").seq, 3);
    }

    #[test]
    fn snapshot_is_filtered_by_subtree() {
        let t = Instant::now();
        let mut e = ServerEngine::new(ServerConfig::default(), true, t);
        for (i, k) in ["/x/1", "/x/2", "/xy/1", "/y/1", "/x/"].iter().enumerate() {
            e.handle_kvset(t, set(k, "v", i as u8 + 1));
        }
        let keys: Vec<_> = e.snapshot("/x/").map(|m| m.key.as_str()).collect();
        assert_eq!(keys, ["/x/", "/x/1", "/x/2"]);
        assert_eq!(e.snapshot("").count(), 5);
        let k = e.kthxbai("/x/");
        assert_eq!(
            (k.key.as_str(), k.seq, k.value.as_slice()),
            ("KTHXBAI", 5, &b"/x/"[..])
        );
    }

    #[test]
    fn ttl_expiry_publishes_delete_and_refresh_extends() {
        let t = Instant::now();
        let cfg = ServerConfig {
            ttl_sweep: Duration::from_millis(100).into(),
            ..ServerConfig::default()
        };
        let mut e = ServerEngine::new(cfg, true, t);
        let mut m = set("/m/a", "up", 1);
        m.set_prop("ttl", "1");
        e.handle_kvset(t, m);
        let mut m = set("/m/b", "up", 2);
        m.set_prop("ttl", "1");
        e.handle_kvset(t, m);
        // Refresh b at 0.5 s.
        let mut m = set("/m/b", "up", 3);
        m.set_prop("ttl", "1");
        e.handle_kvset(t + Duration::from_millis(500), m);
        let mut out = Vec::new();
        e.handle_timeout(t + Duration::from_millis(900));
        drain(&mut e, &mut out);
        assert!(out.iter().all(|m| m.key == HUGZ));
        out.clear();
        e.handle_timeout(t + Duration::from_millis(1100));
        drain(&mut e, &mut out);
        let deletes: Vec<_> = out.iter().filter(|m| m.key != HUGZ).collect();
        assert_eq!(deletes.len(), 1);
        assert_eq!(deletes[0].key, "/m/a");
        assert!(deletes[0].is_delete());
        assert_eq!(deletes[0].seq, 4);
        out.clear();
        e.handle_timeout(t + Duration::from_millis(1600));
        drain(&mut e, &mut out);
        assert!(out.iter().any(|m| m.key == "/m/b" && m.is_delete()));
        assert_eq!(e.stats().ttl_expired, 2);
        assert!(e.is_empty());
    }

    #[test]
    fn deleting_a_ttl_key_cancels_its_expiry() {
        let t = Instant::now();
        let mut e = ServerEngine::new(ServerConfig::default(), true, t);
        let mut m = set("/k", "v", 1);
        m.set_prop("ttl", "1");
        e.handle_kvset(t, m);
        e.handle_kvset(t, set("/k", "", 2));
        let mut out = Vec::new();
        e.handle_timeout(t + Duration::from_secs(5));
        drain(&mut e, &mut out);
        assert!(out.iter().all(|m| m.key == HUGZ));
        assert_eq!(e.stats().ttl_expired, 0);
    }

    #[test]
    fn hugz_every_interval_with_current_sequence_only_while_serving() {
        let t = Instant::now();
        let mut e = ServerEngine::new(ServerConfig::default(), false, t);
        let mut out = Vec::new();
        e.handle_timeout(t + Duration::from_secs(1));
        drain(&mut e, &mut out);
        assert!(out.is_empty(), "a non-serving server must stay silent");
        let mut e = ServerEngine::new(ServerConfig::default(), true, t);
        e.handle_kvset(t, set("/a", "1", 1));
        e.handle_timeout(t + Duration::from_millis(999));
        drain(&mut e, &mut out);
        assert!(out.is_empty());
        e.handle_timeout(t + Duration::from_secs(1));
        drain(&mut e, &mut out);
        assert_eq!(out.len(), 1);
        assert_eq!((out[0].key.as_str(), out[0].seq), (HUGZ, 1));
        assert_eq!(
            e.poll_timeout(),
            Some(t + Duration::from_secs(1) + Duration::from_secs(1))
        );
    }

    #[test]
    fn limits_drop_and_count() {
        let t = Instant::now();
        let cfg = ServerConfig {
            max_key_len: 8,
            max_value_len: 4,
            max_keys: 2,
            ..ServerConfig::default()
        };
        let mut e = ServerEngine::new(cfg, true, t);
        assert_eq!(
            e.handle_kvset(t, set("/toolongkey", "v", 1)),
            KvsetOutcome::Dropped(DropReason::KeyTooLong)
        );
        assert_eq!(
            e.handle_kvset(t, set("/k", "12345", 2)),
            KvsetOutcome::Dropped(DropReason::ValueTooLarge)
        );
        assert_eq!(
            e.handle_kvset(t, set("HUGZ", "x", 3)),
            KvsetOutcome::Dropped(DropReason::ReservedKey)
        );
        assert_eq!(
            e.handle_kvset(t, set("", "x", 4)),
            KvsetOutcome::Dropped(DropReason::ReservedKey)
        );
        published(e.handle_kvset(t, set("/a", "1", 5)));
        published(e.handle_kvset(t, set("/b", "1", 6)));
        assert_eq!(
            e.handle_kvset(t, set("/c", "1", 7)),
            KvsetOutcome::Dropped(DropReason::TooManyKeys)
        );
        // Overwriting and deleting still work at the limit.
        published(e.handle_kvset(t, set("/a", "2", 8)));
        published(e.handle_kvset(t, set("/a", "", 9)));
        published(e.handle_kvset(t, set("/c", "1", 10)));
        let s = e.stats();
        assert_eq!(
            (
                s.dropped_key_too_long,
                s.dropped_value_too_large,
                s.dropped_reserved_key,
                s.dropped_too_many_keys
            ),
            (1, 1, 2, 1)
        );
        assert_eq!(e.sequence(), 5);
    }

    #[test]
    fn resent_uuid_is_applied_once() {
        let t = Instant::now();
        let mut e = ServerEngine::new(ServerConfig::default(), true, t);
        published(e.handle_kvset(t, set("/a", "1", 1)));
        assert_eq!(
            e.handle_kvset(t, set("/a", "1", 1)),
            KvsetOutcome::Duplicate
        );
        assert_eq!(e.sequence(), 1);
    }

    #[test]
    fn passive_pending_list_reconciles_in_both_orders_and_applies_on_takeover() {
        let t = Instant::now();
        let mut active = ServerEngine::new(ServerConfig::default(), true, t);
        let mut passive = ServerEngine::new(ServerConfig::default(), false, t);
        passive.become_passive();
        passive.handle_peer_snapshot(t, active.kthxbai(""));

        // u1: client copy reaches passive first, then the active's.
        assert_eq!(
            passive.handle_kvset(t, set("/a", "1", 1)),
            KvsetOutcome::Pending
        );
        let p1 = published(active.handle_kvset(t, set("/a", "1", 1)));
        passive.handle_peer_kvpub(t, p1);
        assert_eq!(passive.pending_len(), 0);
        // u2: active's copy first, then the client's (must not re-enter pending).
        let p2 = published(active.handle_kvset(t, set("/b", "2", 2)));
        passive.handle_peer_kvpub(t, p2);
        assert_eq!(
            passive.handle_kvset(t, set("/b", "2", 2)),
            KvsetOutcome::Duplicate
        );
        assert_eq!(passive.pending_len(), 0);
        // u3, u4: the active dies before publishing them; only the passive got them.
        assert_eq!(
            passive.handle_kvset(t, set("/c", "3", 3)),
            KvsetOutcome::Pending
        );
        assert_eq!(
            passive.handle_kvset(t, set("/d", "4", 4)),
            KvsetOutcome::Pending
        );
        assert_eq!(
            passive.handle_kvset(t, set("/d", "4", 4)),
            KvsetOutcome::Duplicate
        );
        // Updates without UUID cannot be reconciled: dropped and counted.
        let mut anon = set("/e", "5", 0);
        anon.uuid = None;
        assert_eq!(
            passive.handle_kvset(t, anon),
            KvsetOutcome::Dropped(DropReason::NoUuidWhilePassive)
        );

        let mut out = Vec::new();
        passive.become_active(t);
        drain(&mut passive, &mut out);
        let applied: Vec<_> = out
            .iter()
            .map(|m| (m.key.as_str(), m.seq, m.uuid))
            .collect();
        assert_eq!(
            applied,
            [("/c", 3, Some([3; 16])), ("/d", 4, Some([4; 16]))]
        );
        let keys: Vec<_> = passive.snapshot("").map(|m| m.key.clone()).collect();
        assert_eq!(keys, ["/a", "/b", "/c", "/d"]);
        assert_eq!(passive.stats().pending_applied, 2);
    }

    #[test]
    fn mirror_buffers_during_sync_and_skips_old_sequences() {
        let t = Instant::now();
        let mut active = ServerEngine::new(ServerConfig::default(), true, t);
        for i in 0..5u8 {
            active.handle_kvset(t, set(&format!("/k{i}"), "v", i + 1));
        }
        let mut passive = ServerEngine::new(ServerConfig::default(), false, t);
        passive.become_passive();
        // Stream arrives before the snapshot finishes: one old (seq 5) and one new update.
        let old = KvMsg {
            seq: 5,
            ..set("/k4", "v", 5)
        };
        passive.handle_peer_kvpub(t, old);
        let new = published(active.handle_kvset(t, set("/k9", "v", 9)));
        let snap: Vec<KvMsg> = active.snapshot("").cloned().collect();
        let kthx = KvMsg::new(KTHXBAI, 5, Vec::new());
        passive.handle_peer_kvpub(t, new);
        for m in snap.into_iter().filter(|m| m.key != "/k9") {
            passive.handle_peer_snapshot(t, m);
        }
        assert!(passive.is_mirror_syncing());
        passive.handle_peer_snapshot(t, kthx);
        assert_eq!(passive.sequence(), 6);
        assert_eq!(passive.len(), 6);
        assert!(!passive.is_mirror_syncing());
    }

    #[test]
    fn become_passive_discards_local_state() {
        let t = Instant::now();
        let mut e = ServerEngine::new(ServerConfig::default(), false, t);
        e.restore(vec![KvMsg::new("/stale", 7, b"x".to_vec())], 7, t);
        e.become_passive();
        assert!(e.is_empty());
        assert!(e.is_mirror_syncing());
    }
}
