//! The Clone client engine (sans-IO): snapshot synchronisation, update stream, silence detection and failover.
//! The agent thread in [`crate::client`] owns the sockets and drives this engine.
#![deny(clippy::disallowed_methods, clippy::disallowed_types)]

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use tickbox_units::HumanDuration;

use crate::msg::{KvMsg, HUGZ, KTHXBAI, NOPE};

/// Subtree of the client's "vote" ICANHAZ. A passive Binary Star server stays silent on its PUB until a client
/// request makes it active, so waiting for the first SUB message before the real ICANHAZ would always cost the full
/// subscribe wait after a failover. The client therefore sends, shortly after connecting, an ICANHAZ for this
/// (normally empty) subtree: it is the Binary Star vote, its tiny reply is ignored, and the promoted server's
/// immediate HUGZ then releases the real ICANHAZ. Keys under this prefix are reserved.
pub const VOTE_SUBTREE: &str = "/.tickbox-vote/";
/// Delay between connecting and the vote, so our SUB is subscribed before the promoted server's first HUGZ.
const VOTE_DELAY: Duration = Duration::from_millis(50);

/// Client timing.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct ClientConfig {
    /// Silence (no HUGZ, update or snapshot message) after which the server is declared dead and the client fails
    /// over to the next server (CHP reference: 5 s). Must exceed the server HUGZ interval and, in a Binary Star
    /// pair, the peer expiry. Read through [`ClientConfig::server_ttl`] (at least 1 ms).
    pub server_ttl: HumanDuration,
    /// Before sending ICANHAZ the client waits for its SUB to deliver one message (proof that its subscription
    /// reached the server, so nothing published after the snapshot can be missed), at most this long. Zero asks
    /// at once, for callers that only want the snapshot.
    pub subscribe_wait: HumanDuration,
    /// Resend interval for unacknowledged updates (same UUID; the server de-duplicates). Read through
    /// [`ClientConfig::resend`] (at least 1 ms).
    pub resend: HumanDuration,
    /// Receive/send high-water marks of the client sockets, in messages.
    pub hwm: i32,
    /// The update PUB sends CHP's multipart KVSETs to the servers' collectors; it closes with a linger of twice this plus 1 s,
    /// `ZMQ_IMMEDIATE` and `ZMQ_TCP_MAXRT` set to this (the teardown rule in the book's chapter on known traps), so dropping a client can never
    /// hit the ZeroMQ library's `clean_pipes` abort. The price: a server that acknowledges no TCP data for this long is
    /// disconnected, and dropping a client whose server stalled waits up to about this long. At least 1 ms.
    pub stalled_peer_timeout: HumanDuration,
    /// `[security]`, shared by the binary: every socket connects as a client of role `clone` (CURVE with the
    /// server's key, `[security.roles.clone] server_key`, when configured).
    #[serde(skip)]
    pub security: tickbox_auth::Security,
}

impl Default for ClientConfig {
    fn default() -> Self {
        ClientConfig {
            server_ttl: HumanDuration(Duration::from_millis(5000)),
            subscribe_wait: HumanDuration(Duration::from_millis(1500)),
            resend: HumanDuration(Duration::from_millis(1000)),
            hwm: 1_000_000,
            stalled_peer_timeout: HumanDuration(Duration::from_secs(3)),
            security: tickbox_auth::Security::default(),
        }
    }
}

impl ClientConfig {
    /// The silence after which the server is declared dead, at least 1 ms.
    pub fn server_ttl(&self) -> Duration {
        self.server_ttl.0.max(Duration::from_millis(1))
    }
    /// The longest wait for the first SUB message before ICANHAZ goes out anyway.
    pub fn subscribe_wait(&self) -> Duration {
        self.subscribe_wait.0
    }
    /// The resend interval for unacknowledged updates, at least 1 ms.
    pub fn resend(&self) -> Duration {
        self.resend.0.max(Duration::from_millis(1))
    }
    /// The bound on a stalled server, at least 1 ms (see the field).
    pub fn stalled_peer_timeout(&self) -> Duration {
        self.stalled_peer_timeout.0.max(Duration::from_millis(1))
    }
}

/// A stored entry on the client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// The current value (never empty: a delete removes the entry).
    pub value: Vec<u8>,
    /// The server sequence of the update that set it.
    pub seq: u64,
    /// The UUID of that update, if its writer gave one.
    pub uuid: Option<[u8; 16]>,
}

/// A change to the client's map. `value == None` means the key was deleted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    /// The full key.
    pub key: String,
    /// The new value, or `None` when the key was deleted.
    pub value: Option<Vec<u8>>,
    /// Server sequence of the update (0 for changes found by diffing a re-synchronisation snapshot whose entry had
    /// been deleted).
    pub seq: u64,
    /// The UUID of the update, which lets its writer recognise the acknowledgement of its own set.
    pub uuid: Option<[u8; 16]>,
    /// True when the change comes from loading a snapshot (first sync, or re-sync after failover/gap) rather than
    /// from the live update stream.
    pub from_snapshot: bool,
}

/// What the loop must do next with the sockets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientAction {
    /// (Re)create SUB and snapshot DEALER connected to server `index` (the update PUB stays connected to all).
    Connect(usize),
    /// Send ICANHAZ with the engine's subtree on the snapshot DEALER.
    SendIcanhaz,
    /// Send ICANHAZ for [`VOTE_SUBTREE`] on the snapshot DEALER (Binary Star client vote).
    Vote,
}

#[derive(Debug)]
enum Phase {
    /// Sockets connected at `since`; waiting for the first SUB message before asking for the snapshot.
    Subscribing {
        since: Instant,
        buffered: Vec<KvMsg>,
        vote_at: Option<Instant>,
    },
    /// ICANHAZ sent; collecting KVSYNCs and buffering the stream.
    Syncing {
        snapshot: BTreeMap<String, Entry>,
        buffered: Vec<KvMsg>,
    },
    Live,
}

/// Counters, all monotonic.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClientStats {
    /// Snapshots loaded (first sync and every re-sync).
    pub syncs: u64,
    /// Times the current server was declared dead after `server_ttl` of silence and the next one tried.
    pub failovers: u64,
    /// Sequence gaps seen on the whole-map stream (lost updates), each answered with a re-sync.
    pub gaps: u64,
    /// Updates ignored because their sequence was not above the last applied one.
    pub stale_updates: u64,
    /// Undecodable messages. The engine only ever sees decoded ones, so nothing here increments it; the agent
    /// thread in [`crate::client`] keeps its own count.
    pub malformed: u64,
}

/// The Clone client state machine: which server to use, the snapshot/stream handshake, the local copy of the map
/// (or of one subtree) and failover on silence. The socket loop executes its [`ClientAction`]s.
#[derive(Debug)]
pub struct ClientEngine {
    config: ClientConfig,
    servers: usize,
    current: usize,
    subtree: String,
    phase: Phase,
    map: BTreeMap<String, Entry>,
    last_seq: u64,
    snapshot_seq: u64,
    expiry: Instant,
    actions: Vec<ClientAction>,
    stats: ClientStats,
}

impl ClientEngine {
    /// `servers` is the number of server endpoints (1 or 2 for a Binary Star pair). The first action is
    /// `Connect(0)`.
    pub fn new(config: ClientConfig, servers: usize, subtree: &str, now: Instant) -> Self {
        let mut e = ClientEngine {
            expiry: now + config.server_ttl(),
            config,
            servers: servers.max(1),
            current: 0,
            subtree: subtree.to_owned(),
            phase: Phase::Live,
            map: BTreeMap::new(),
            last_seq: 0,
            snapshot_seq: 0,
            actions: Vec::new(),
            stats: ClientStats::default(),
        };
        e.connect(0, now);
        e
    }

    /// The subtree this client follows (`""` = the whole map).
    pub fn subtree(&self) -> &str {
        &self.subtree
    }
    /// Index of the server in use, into the endpoint list the client was given.
    pub fn current_server(&self) -> usize {
        self.current
    }
    /// True once a snapshot is loaded and the update stream is being applied.
    pub fn is_live(&self) -> bool {
        matches!(self.phase, Phase::Live)
    }
    /// Sequence of the last update applied (from the snapshot or the stream).
    pub fn last_seq(&self) -> u64 {
        self.last_seq
    }
    /// Sequence of the last snapshot's KTHXBAI.
    pub fn snapshot_seq(&self) -> u64 {
        self.snapshot_seq
    }
    /// Counters since the engine was created.
    pub fn stats(&self) -> &ClientStats {
        &self.stats
    }
    /// The local copy of the map (only keys under the subtree).
    pub fn map(&self) -> &BTreeMap<String, Entry> {
        &self.map
    }
    /// The local entry for `key`, if present.
    pub fn get(&self, key: &str) -> Option<&Entry> {
        self.map.get(key)
    }

    /// Entries whose key starts with `prefix`, in key order.
    pub fn range<'a>(
        &'a self,
        prefix: &'a str,
    ) -> impl Iterator<Item = (&'a String, &'a Entry)> + 'a {
        self.map
            .range::<str, _>((
                std::ops::Bound::Included(prefix),
                std::ops::Bound::Unbounded,
            ))
            .take_while(move |(k, _)| k.starts_with(prefix))
    }

    /// Next socket action for the loop, if any.
    pub fn poll_output(&mut self) -> Option<ClientAction> {
        if self.actions.is_empty() {
            None
        } else {
            Some(self.actions.remove(0))
        }
    }

    /// When the engine next needs `handle_timeout`.
    pub fn poll_timeout(&self) -> Option<Instant> {
        Some(match &self.phase {
            Phase::Subscribing { since, vote_at, .. } => {
                let d = (*since + self.config.subscribe_wait()).min(self.expiry);
                vote_at.map_or(d, |v| d.min(v))
            }
            _ => self.expiry,
        })
    }

    fn connect(&mut self, index: usize, now: Instant) {
        self.current = index % self.servers;
        self.phase = Phase::Subscribing {
            since: now,
            buffered: Vec::new(),
            vote_at: Some(now + VOTE_DELAY),
        };
        self.expiry = now + self.config.server_ttl();
        self.actions.push(ClientAction::Connect(self.current));
    }

    fn send_icanhaz(&mut self, buffered: Vec<KvMsg>) {
        self.phase = Phase::Syncing {
            snapshot: BTreeMap::new(),
            buffered,
        };
        self.actions.push(ClientAction::SendIcanhaz);
    }

    fn in_subtree(&self, key: &str) -> bool {
        key.starts_with(&self.subtree)
    }

    /// Timers: the subscribe wait and server silence.
    pub fn handle_timeout(&mut self, now: Instant) {
        if now >= self.expiry {
            self.stats.failovers += 1;
            let next = self.current + 1;
            tracing::warn!(
                server = self.current,
                next = next % self.servers,
                "clone server silent for {:?}; failing over",
                self.config.server_ttl()
            );
            self.connect(next, now);
            return;
        }
        if let Phase::Subscribing {
            since,
            buffered,
            vote_at,
        } = &mut self.phase
        {
            if vote_at.is_some_and(|v| now >= v) {
                *vote_at = None;
                self.actions.push(ClientAction::Vote);
            }
            if now >= *since + self.config.subscribe_wait() {
                let buffered = std::mem::take(buffered);
                self.send_icanhaz(buffered);
            }
        }
    }

    /// A message on the SUB socket of the current server. Changes to the map are appended to `changes`.
    /// A `NOPE` refusal notice proves the server alive and the subscription live, but is never an update (its
    /// sequence is the server's current one, and the agent matches it to the refused set by UUID).
    pub fn handle_update(&mut self, now: Instant, msg: KvMsg, changes: &mut Vec<Change>) {
        self.expiry = now + self.config.server_ttl();
        let control = msg.key == HUGZ || msg.key == NOPE;
        match &mut self.phase {
            Phase::Subscribing { buffered, .. } => {
                if !control {
                    buffered.push(msg);
                }
                let buffered = std::mem::take(buffered);
                self.send_icanhaz(buffered);
            }
            Phase::Syncing { buffered, .. } => {
                if !control {
                    buffered.push(msg);
                }
            }
            Phase::Live if msg.key == NOPE => {}
            Phase::Live => {
                if msg.key == HUGZ {
                    // HUGZ carries the server's current sequence: with the whole map subscribed, a larger one means
                    // we lost updates (HWM overflow).
                    if self.subtree.is_empty() && msg.seq > self.last_seq {
                        self.gap(now, msg.seq);
                    }
                    return;
                }
                if self.subtree.is_empty() && msg.seq > self.last_seq + 1 {
                    self.gap(now, msg.seq);
                    return;
                }
                self.apply(msg, changes);
            }
        }
    }

    fn gap(&mut self, now: Instant, seen: u64) {
        self.stats.gaps += 1;
        tracing::warn!(
            expected = self.last_seq + 1,
            seen,
            "clone update stream gap; re-synchronising"
        );
        self.phase = Phase::Subscribing {
            since: now,
            buffered: Vec::new(),
            vote_at: None,
        };
        // The SUB is already subscribed: ask at once.
        self.send_icanhaz(Vec::new());
    }

    fn apply(&mut self, msg: KvMsg, changes: &mut Vec<Change>) {
        if msg.seq <= self.last_seq {
            self.stats.stale_updates += 1;
            return;
        }
        self.last_seq = msg.seq;
        if !self.in_subtree(&msg.key) {
            return;
        }
        let change = if msg.is_delete() {
            if self.map.remove(&msg.key).is_none() {
                // Deleting an absent key changes nothing visible, but report it so watchers see every update.
            }
            Change {
                key: msg.key,
                value: None,
                seq: msg.seq,
                uuid: msg.uuid,
                from_snapshot: false,
            }
        } else {
            self.map.insert(
                msg.key.clone(),
                Entry {
                    value: msg.value.clone(),
                    seq: msg.seq,
                    uuid: msg.uuid,
                },
            );
            Change {
                key: msg.key,
                value: Some(msg.value),
                seq: msg.seq,
                uuid: msg.uuid,
                from_snapshot: false,
            }
        };
        changes.push(change);
    }

    /// A message on the snapshot DEALER (KVSYNC or KTHXBAI).
    pub fn handle_snapshot(&mut self, now: Instant, msg: KvMsg, changes: &mut Vec<Change>) {
        self.expiry = now + self.config.server_ttl();
        let Phase::Syncing { snapshot, buffered } = &mut self.phase else {
            // A late reply to an ICANHAZ we have given up on.
            return;
        };
        if msg.key == KTHXBAI && msg.value != self.subtree.as_bytes() {
            // The reply to our vote (or to some other subtree): not the snapshot we asked for.
            return;
        }
        if msg.key != KTHXBAI {
            if !msg.is_delete()
                && msg.key.starts_with(&self.subtree)
                && !msg.key.starts_with(VOTE_SUBTREE)
            {
                snapshot.insert(
                    msg.key,
                    Entry {
                        value: msg.value,
                        seq: msg.seq,
                        uuid: msg.uuid,
                    },
                );
            }
            return;
        }
        let snapshot = std::mem::take(snapshot);
        let buffered = std::mem::take(buffered);
        self.stats.syncs += 1;
        // Report the difference between what we had and the new snapshot, so watchers of a re-synchronised client
        // see each real change once.
        let old = std::mem::replace(&mut self.map, snapshot);
        for (key, entry) in &self.map {
            if old.get(key).map(|e| &e.value) != Some(&entry.value) {
                changes.push(Change {
                    key: key.clone(),
                    value: Some(entry.value.clone()),
                    seq: entry.seq,
                    uuid: entry.uuid,
                    from_snapshot: true,
                });
            }
        }
        for (key, entry) in old {
            if !self.map.contains_key(&key) {
                changes.push(Change {
                    key,
                    value: None,
                    seq: 0,
                    uuid: entry.uuid,
                    from_snapshot: true,
                });
            }
        }
        // KTHXBAI's sequence is authoritative even when lower than before (a new server after failover).
        self.last_seq = msg.seq;
        self.snapshot_seq = msg.seq;
        self.phase = Phase::Live;
        tracing::debug!(
            keys = self.map.len(),
            seq = self.last_seq,
            server = self.current,
            "clone snapshot loaded"
        );
        for update in buffered {
            // The server streams a snapshot over several turns, so an entry may be newer than buffered updates
            // of the same key: applying those would show watchers the key going back in time.
            if self
                .map
                .get(&update.key)
                .is_some_and(|e| e.seq >= update.seq)
            {
                self.stats.stale_updates += 1;
                continue;
            }
            self.apply(update, changes);
        }
    }
}

#[cfg(test)]
// A test reads the clock once for an origin and moves simulated time on from there; the engine never reads it.
#[allow(clippy::disallowed_methods)]
mod tests {
    use super::*;

    fn cfg() -> ClientConfig {
        ClientConfig {
            server_ttl: Duration::from_millis(5000).into(),
            subscribe_wait: Duration::from_millis(1500).into(),
            ..ClientConfig::default()
        }
    }

    fn upd(key: &str, seq: u64, value: &str) -> KvMsg {
        KvMsg::new(key, seq, value.as_bytes().to_vec())
    }

    fn live(subtree: &str, t: Instant) -> ClientEngine {
        let mut e = ClientEngine::new(cfg(), 2, subtree, t);
        assert_eq!(e.poll_output(), Some(ClientAction::Connect(0)));
        let mut ch = Vec::new();
        e.handle_update(t, KvMsg::new(HUGZ, 0, Vec::new()), &mut ch);
        assert_eq!(e.poll_output(), Some(ClientAction::SendIcanhaz));
        e.handle_snapshot(
            t,
            KvMsg::new(KTHXBAI, 0, subtree.as_bytes().to_vec()),
            &mut ch,
        );
        assert!(e.is_live());
        e
    }

    #[test]
    fn icanhaz_waits_for_first_sub_message_or_timeout() {
        let t = Instant::now();
        let mut e = ClientEngine::new(cfg(), 1, "", t);
        assert_eq!(e.poll_output(), Some(ClientAction::Connect(0)));
        assert_eq!(e.poll_timeout(), Some(t + VOTE_DELAY));
        e.handle_timeout(t + VOTE_DELAY);
        assert_eq!(e.poll_output(), Some(ClientAction::Vote));
        e.handle_timeout(t + Duration::from_millis(1000));
        assert_eq!(e.poll_output(), None);
        e.handle_timeout(t + Duration::from_millis(1500));
        assert_eq!(e.poll_output(), Some(ClientAction::SendIcanhaz));
    }

    #[test]
    fn snapshot_then_buffered_updates_above_kthxbai_exactly_once() {
        let t = Instant::now();
        let mut e = ClientEngine::new(cfg(), 1, "", t);
        e.poll_output();
        let mut ch = Vec::new();
        e.handle_update(t, upd("/a", 10, "a10"), &mut ch);
        assert_eq!(e.poll_output(), Some(ClientAction::SendIcanhaz));
        e.handle_update(t, upd("/b", 11, "b11"), &mut ch);
        e.handle_update(t, upd("/a", 12, "a12"), &mut ch);
        assert!(ch.is_empty(), "nothing applied before KTHXBAI");
        e.handle_snapshot(t, upd("/a", 10, "a10"), &mut ch);
        e.handle_snapshot(t, upd("/b", 11, "b11"), &mut ch);
        e.handle_snapshot(t, KvMsg::new(KTHXBAI, 11, Vec::new()), &mut ch);
        let seqs: Vec<u64> = ch.iter().map(|c| c.seq).collect();
        // Snapshot entries (10, 11) then only the buffered update above 11.
        assert_eq!(seqs, [10, 11, 12]);
        assert_eq!(e.get("/a").unwrap().value, b"a12");
        assert_eq!(e.last_seq(), 12);
        ch.clear();
        e.handle_update(t, upd("/a", 12, "dup"), &mut ch);
        assert!(ch.is_empty());
        // Buffered 10 and 11 (covered by the snapshot) plus this duplicate.
        assert_eq!(e.stats().stale_updates, 3);
        e.handle_update(t, upd("/a", 13, ""), &mut ch);
        assert_eq!(
            ch,
            [Change {
                key: "/a".into(),
                value: None,
                seq: 13,
                uuid: None,
                from_snapshot: false
            }]
        );
        assert!(e.get("/a").is_none());
    }

    #[test]
    fn hugz_is_never_stored_even_with_subtree() {
        let t = Instant::now();
        let mut e = live("/x/", t);
        let mut ch = Vec::new();
        e.handle_update(t, KvMsg::new(HUGZ, 999, Vec::new()), &mut ch);
        assert!(ch.is_empty());
        assert!(e.map().is_empty());
        assert_eq!(
            e.stats().gaps,
            0,
            "with a subtree a larger HUGZ sequence is normal"
        );
        // Sequences jump with a subtree: no gap.
        e.handle_update(t, upd("/x/a", 50, "v"), &mut ch);
        assert_eq!(ch.len(), 1);
        // Keys outside the subtree that slip through the prefix filter are ignored.
        e.handle_update(t, upd("HUGZzz", 51, "v"), &mut ch);
        assert_eq!(ch.len(), 1);
    }

    #[test]
    fn gap_in_whole_map_stream_triggers_resync() {
        let t = Instant::now();
        let mut e = live("", t);
        let mut ch = Vec::new();
        e.handle_update(t, upd("/a", 1, "1"), &mut ch);
        e.handle_update(t, upd("/a", 3, "3"), &mut ch);
        assert_eq!(e.stats().gaps, 1);
        assert_eq!(e.poll_output(), Some(ClientAction::SendIcanhaz));
        assert!(!e.is_live());
    }

    #[test]
    fn silence_fails_over_to_the_other_server_and_resync_reports_only_differences() {
        let t = Instant::now();
        let mut e = live("", t);
        let mut ch = Vec::new();
        e.handle_update(t, upd("/a", 1, "1"), &mut ch);
        e.handle_update(t, upd("/b", 2, "2"), &mut ch);
        ch.clear();
        e.handle_timeout(t + Duration::from_millis(4999));
        assert_eq!(e.poll_output(), None);
        let t2 = t + Duration::from_millis(5000);
        e.handle_timeout(t2);
        assert_eq!(e.poll_output(), Some(ClientAction::Connect(1)));
        assert_eq!(e.current_server(), 1);
        assert_eq!(e.stats().failovers, 1);
        // The backup's snapshot: /a unchanged, /b deleted, /c new; its sequence is lower than ours was.
        e.handle_update(t2, KvMsg::new(HUGZ, 1, Vec::new()), &mut ch);
        assert_eq!(e.poll_output(), Some(ClientAction::SendIcanhaz));
        e.handle_snapshot(t2, upd("/a", 1, "1"), &mut ch);
        e.handle_snapshot(t2, upd("/c", 1, "c"), &mut ch);
        e.handle_snapshot(t2, KvMsg::new(KTHXBAI, 1, Vec::new()), &mut ch);
        assert_eq!(ch.len(), 2);
        assert_eq!(ch[0].key, "/c");
        assert_eq!((ch[1].key.as_str(), ch[1].value.as_ref()), ("/b", None));
        assert_eq!(e.last_seq(), 1);
        e.handle_update(t2, upd("/d", 2, "d"), &mut ch);
        assert!(
            e.get("/d").is_some(),
            "updates after the new server's KTHXBAI apply"
        );
        // Silence again: back to server 0.
        e.handle_timeout(t2 + Duration::from_secs(6));
        assert_eq!(e.poll_output(), Some(ClientAction::Connect(0)));
    }

    #[test]
    fn vote_reply_is_not_taken_for_the_snapshot() {
        let t = Instant::now();
        let mut e = ClientEngine::new(cfg(), 1, "", t);
        e.poll_output();
        let mut ch = Vec::new();
        e.handle_update(t, KvMsg::new(HUGZ, 3, Vec::new()), &mut ch);
        assert_eq!(e.poll_output(), Some(ClientAction::SendIcanhaz));
        // The vote's reply arrives first on the same DEALER.
        e.handle_snapshot(t, upd("/.tickbox-vote/x", 1, "stale"), &mut ch);
        e.handle_snapshot(
            t,
            KvMsg::new(KTHXBAI, 3, VOTE_SUBTREE.as_bytes().to_vec()),
            &mut ch,
        );
        assert!(!e.is_live());
        e.handle_snapshot(t, upd("/a", 2, "a"), &mut ch);
        e.handle_snapshot(t, KvMsg::new(KTHXBAI, 3, Vec::new()), &mut ch);
        assert!(e.is_live());
        assert_eq!(e.map().keys().collect::<Vec<_>>(), ["/a"]);
    }

    #[test]
    fn late_snapshot_reply_is_ignored() {
        let t = Instant::now();
        let mut e = live("", t);
        let mut ch = Vec::new();
        e.handle_snapshot(t, upd("/z", 5, "z"), &mut ch);
        assert!(ch.is_empty());
        assert!(e.get("/z").is_none());
    }
}
