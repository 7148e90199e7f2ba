//! Shard ownership for a group of workers (e.g. subscriber processes sharing a feed's shards), built from the
//! recipes: every member joins `<dir>/members` and queues on the exclusive lock `<dir>/shards/<i>` of every shard.
//! A shard's owner is its lock's holder; when an owner dies its session expires and each of its shards passes to
//! the next member queued on it (herd-free). A member that holds more than its fair share
//! (`ceil(shards / members)`) hands the surplus back: it releases and queues again at the tail, so the shard moves
//! along its queue to a member that is short.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use tokio::sync::watch;
use zookeeper_client as zk;

use crate::client::{self, check, SessionStatus};
use crate::hold::{self, HoldState, Holding, LostReason};
use crate::lock::contend;
use crate::logic;
use crate::membership::Group;
use crate::{Coord, Result};

/// What a shard member is told, in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ShardEvent {
    /// This member owns `shard` now (consume it); `token` is the fencing token of the ownership.
    Acquired {
        /// Shard index.
        shard: u32,
        /// Fencing token.
        token: u64,
    },
    /// Connection lost: ownership of `shard` is uncertain until `Resumed` or `Lost`.
    Suspended {
        /// Shard index.
        shard: u32,
    },
    /// Reconnected, still the owner of `shard`.
    Resumed {
        /// Shard index.
        shard: u32,
    },
    /// This member no longer owns `shard` (stop consuming it).
    Lost {
        /// Shard index.
        shard: u32,
        /// Why.
        reason: LostReason,
    },
}

/// A sharded group at a directory path.
#[derive(Debug, Clone)]
pub struct Shards {
    coord: Coord,
    dir: String,
    count: u32,
}

impl Shards {
    /// A group sharing `count` shards under `dir`.
    pub fn new(coord: &Coord, dir: &str, count: u32) -> Result<Shards> {
        check(dir)?;
        coord.ensure_path(&logic::join(dir, "members"))?;
        for i in 0..count {
            coord.ensure_path(&logic::join(&logic::join(dir, "shards"), &i.to_string()))?;
        }
        Ok(Shards {
            coord: coord.clone(),
            dir: dir.to_owned(),
            count,
        })
    }

    /// Joins as `member` and starts contending for every shard. Follow [`ShardMember::events`].
    pub fn join(&self, member: &str) -> Result<ShardMember> {
        let group = Group::new(&self.coord, &logic::join(&self.dir, "members"))?;
        let membership = group.join(member, b"")?;
        let (tx, rx) = crossbeam_channel::unbounded();
        let guid = client::new_guid();
        let shared = Arc::new(Shared {
            owned: AtomicUsize::new(0),
            fair: watch::Sender::new(self.count as usize),
            wakeups: AtomicU64::new(0),
        });
        let mut tasks = Vec::new();
        tasks.push(self.coord.spawn(fair_share(
            self.coord.client().clone(),
            logic::join(&self.dir, "members"),
            self.count,
            shared.clone(),
        )));
        for shard in 0..self.count {
            tasks.push(self.coord.spawn(own_shard(
                self.coord.client().clone(),
                guid.clone(),
                logic::join(&logic::join(&self.dir, "shards"), &shard.to_string()),
                shard,
                member.as_bytes().to_vec(),
                tx.clone(),
                shared.clone(),
            )));
        }
        Ok(ShardMember {
            coord: self.coord.clone(),
            dir: self.dir.clone(),
            count: self.count,
            guid,
            _membership: membership,
            events: rx,
            tasks,
            shared,
        })
    }

    /// Each shard's owner (member name from the holder node's data) and token.
    pub fn owners(&self) -> Result<BTreeMap<u32, Option<(String, u64)>>> {
        let mut out = BTreeMap::new();
        for i in 0..self.count {
            let dir = logic::join(&logic::join(&self.dir, "shards"), &i.to_string());
            let mut owner = None;
            for n in logic::sorted_nodes(&self.coord.children(&dir)?, &["lock"]) {
                if let Some((data, _)) = self.coord.get(&logic::join(&dir, &n.name))? {
                    owner = Some((String::from_utf8_lossy(&data).into_owned(), n.seq));
                    break;
                }
            }
            out.insert(i, owner);
        }
        Ok(out)
    }
}

struct Shared {
    owned: AtomicUsize,
    /// `ceil(shards / members)`, kept by the membership follower.
    fair: watch::Sender<usize>,
    wakeups: AtomicU64,
}

/// A member of a sharded group. Dropping it leaves (releases its shards to the others).
#[derive(Debug)]
pub struct ShardMember {
    coord: Coord,
    dir: String,
    count: u32,
    guid: String,
    _membership: Holding,
    events: crossbeam_channel::Receiver<ShardEvent>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
    shared: Arc<Shared>,
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shared")
            .field("owned", &self.owned.load(Ordering::Relaxed))
            .finish()
    }
}

impl ShardMember {
    /// Ownership changes, in order.
    pub fn events(&self) -> &crossbeam_channel::Receiver<ShardEvent> {
        &self.events
    }

    /// Shards owned now (count).
    pub fn owned(&self) -> usize {
        self.shared.owned.load(Ordering::SeqCst)
    }
}

impl Drop for ShardMember {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
        // Delete every node of this member, held or queued: a queued node left behind would receive a shard
        // that nobody consumes until the session ends.
        for shard in 0..self.count {
            let dir = logic::join(&logic::join(&self.dir, "shards"), &shard.to_string());
            let Ok(children) = self.coord.children(&dir) else {
                continue;
            };
            for n in logic::sorted_nodes(&children, &["lock"]) {
                if n.guid == self.guid {
                    let _ = self.coord.delete(&logic::join(&dir, &n.name));
                }
            }
        }
    }
}

/// Follows the membership and publishes the fair share; wakes owners to hand back surplus.
async fn fair_share(zk: zk::Client, members_dir: String, count: u32, shared: Arc<Shared>) {
    loop {
        let (children, watcher) = match zk.list_and_watch_children(&members_dir).await {
            Ok(r) => r,
            Err(e) if client::transient(&e) => {
                if client::await_connected(&zk).await.is_err() {
                    return;
                }
                continue;
            }
            Err(_) => return,
        };
        let n = children.len().max(1);
        let fair = (count as usize).div_ceil(n);
        shared.fair.send_replace(fair);
        let ev = watcher.changed().await;
        if ev.event_type == zk::EventType::Session && ev.session_state.is_terminated() {
            return;
        }
    }
}

/// Owns one shard: queue on its lock, hold it while held, hand it back when over the fair share, queue again.
async fn own_shard(
    zk: zk::Client,
    guid: String,
    dir: String,
    shard: u32,
    member: Vec<u8>,
    events: crossbeam_channel::Sender<ShardEvent>,
    shared: Arc<Shared>,
) {
    loop {
        let (own, token) = match contend(
            &zk,
            &guid,
            &dir,
            "lock",
            &["lock"],
            &member,
            logic::exclusive_turn,
            None,
            &shared.wakeups,
        )
        .await
        {
            Ok(r) => r,
            Err(_) => return,
        };
        let path = logic::join(&dir, &own);
        shared.owned.fetch_add(1, Ordering::SeqCst);
        let _ = events.send(ShardEvent::Acquired { shard, token });
        let (tx, mut rx) = watch::channel(HoldState::Held);
        let tx = Arc::new(tx);
        let mon = hold::monitor(zk.clone(), path.clone(), tx.clone());
        tokio::pin!(mon);
        let mut last = HoldState::Held;
        let mut fair_rx = shared.fair.subscribe();
        let end = loop {
            // Hand back a surplus shard: decrement only if still over the fair share, atomically, so that
            // several shard tasks woken together do not all hand theirs back.
            let fair = *fair_rx.borrow_and_update();
            if shared
                .owned
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |o| {
                    (o > fair).then(|| o - 1)
                })
                .is_ok()
            {
                break LostReason::Released;
            }
            tokio::select! {
                _ = &mut mon => {
                    let now = *rx.borrow();
                    if let HoldState::Lost(r) = now { break r; }
                    break LostReason::Closed;
                }
                r = rx.changed() => {
                    if r.is_err() { break LostReason::Closed; }
                    let now = *rx.borrow_and_update();
                    match now {
                        HoldState::Suspended => { let _ = events.send(ShardEvent::Suspended { shard }); },
                        HoldState::Held | HoldState::RevokeRequested if last == HoldState::Suspended => {
                            let _ = events.send(ShardEvent::Resumed { shard });
                        },
                        HoldState::Lost(r) => break r,
                        _ => {},
                    }
                    last = now;
                }
                r = fair_rx.changed() => {
                    if r.is_err() { break LostReason::Closed; }
                }
            }
        };
        if end != LostReason::Released {
            shared.owned.fetch_sub(1, Ordering::SeqCst);
        }
        let _ = events.send(ShardEvent::Lost { shard, reason: end });
        match end {
            LostReason::Released => {
                tracing::debug!(shard, "handing a surplus shard back");
                if client::delete_quietly(&zk, &path).await.is_err() {
                    return;
                }
            }
            LostReason::NodeDeleted => {}
            _ => return,
        }
        if SessionStatus::from_zk(zk.state()) != SessionStatus::Connected
            && client::await_connected(&zk).await.is_err()
        {
            return;
        }
        // Queue again, at the tail.
    }
}
