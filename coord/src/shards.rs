//! Shard ownership for a group of workers (e.g. subscriber processes sharing a feed's shards), built from the
//! recipes: every member joins `<dir>/members` and queues on the exclusive lock `<dir>/shards/<i>` of every shard.
//! A shard's owner is its lock's holder; when an owner dies its session expires and each of its shards passes to
//! the next member queued on it (herd-free). A member that holds more than its fair share
//! (`ceil(shards / members)`) hands the surplus back: it releases and queues again at the tail, so the shard moves
//! along its queue to a member that is short.
//!
//! A member whose session expires (an outage longer than the session timeout) loses every shard it owned
//! (`Lost { reason: SessionExpired }`: stop consuming), then takes its place again on a new session: it joins
//! `members` again and queues on every shard again, deleting the nodes its expired session left (a restarted
//! ensemble keeps them for up to a session timeout) so that they hold up nobody.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use tokio::sync::watch;
use zookeeper_client as zk;

use std::time::Duration;

use crate::client::{self, check, Session, SessionStatus};
use crate::hold::{self, HoldState, LostReason};
use crate::lock::contend;
use crate::logic;
use crate::membership::{create_member, Group};
use crate::{Coord, CoordError, Result};

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
        let member_path = logic::join(group.dir(), member);
        check(&member_path)?;
        if member.contains('/') {
            return Err(CoordError::InvalidPath {
                path: member_path,
                reason: "member name contains '/'",
            });
        }
        let session = self.coord.session();
        let (generation, zk) = session.current()?;
        self.coord
            .block_on(create_member(&zk, &member_path, b"", &[]))?;
        let (tx, rx) = crossbeam_channel::unbounded();
        let guid = client::new_guid();
        let shared = Arc::new(Shared {
            owned: AtomicUsize::new(0),
            fair: watch::Sender::new(self.count as usize),
            wakeups: AtomicU64::new(0),
        });
        let mut tasks = Vec::new();
        tasks.push(self.coord.spawn(keep_member(
            Renewal::new(session.clone(), generation, zk.clone()),
            member_path.clone(),
        )));
        tasks.push(self.coord.spawn(fair_share(
            Renewal::new(session.clone(), generation, zk.clone()),
            logic::join(&self.dir, "members"),
            self.count,
            shared.clone(),
        )));
        for shard in 0..self.count {
            tasks.push(self.coord.spawn(own_shard(
                Renewal::new(session.clone(), generation, zk.clone()),
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
            member_path,
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
    member_path: String,
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
        let _ = self.coord.delete(&self.member_path);
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

/// A task's session, renewed when it expires.
struct Renewal {
    session: Arc<Session>,
    generation: u64,
    zk: zk::Client,
    /// This task's own expired sessions, whose leftover nodes it may delete.
    expired: Vec<i64>,
}

impl Renewal {
    fn new(session: Arc<Session>, generation: u64, zk: zk::Client) -> Renewal {
        Renewal {
            session,
            generation,
            zk,
            expired: Vec::new(),
        }
    }

    fn expired_now(&self) -> bool {
        SessionStatus::from_zk(self.zk.state()) == SessionStatus::Expired
    }

    /// Moves to a live session after this one expired; false when the handle was closed.
    async fn renew(&mut self) -> bool {
        self.expired.push(self.zk.session_id().0);
        match self.session.renew(self.generation).await {
            Ok((generation, zk)) => {
                (self.generation, self.zk) = (generation, zk);
                true
            }
            Err(_) => false,
        }
    }
}

/// Keeps the member node while the member lives: created again on a new session after an expiry.
async fn keep_member(mut r: Renewal, path: String) {
    loop {
        let (tx, rx) = watch::channel(HoldState::Held);
        hold::monitor(r.zk.clone(), path.clone(), Arc::new(tx)).await;
        let lost = *rx.borrow();
        match lost {
            HoldState::Lost(LostReason::SessionExpired) => {
                tracing::warn!(member = %path, "group membership lost with the session: rejoining on a new one");
                if !r.renew().await {
                    return;
                }
            }
            // Deleted by someone else: this member is still alive, so it is a member again.
            HoldState::Lost(LostReason::NodeDeleted) => {}
            _ => return,
        }
        loop {
            match create_member(&r.zk, &path, b"", &r.expired).await {
                Ok(_) => {
                    tracing::info!(member = %path, "back in the group");
                    break;
                }
                Err(_) if r.expired_now() => {
                    if !r.renew().await {
                        return;
                    }
                }
                Err(CoordError::Closed) => return,
                Err(e) => {
                    // Most likely a node of an older expired session not yet gone: the server removes it
                    // within a session timeout.
                    tracing::debug!(member = %path, error = %e, "joining the group again");
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
            }
        }
    }
}

/// Follows the membership and publishes the fair share; wakes owners to hand back surplus.
async fn fair_share(mut r: Renewal, members_dir: String, count: u32, shared: Arc<Shared>) {
    loop {
        let zk = r.zk.clone();
        let (children, watcher) = match zk.list_and_watch_children(&members_dir).await {
            Ok(r) => r,
            Err(e) if client::transient(&e) => {
                if client::await_connected(&zk).await.is_err()
                    && !(r.expired_now() && r.renew().await)
                {
                    return;
                }
                continue;
            }
            Err(_) if r.expired_now() => {
                if !r.renew().await {
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
        if ev.event_type == zk::EventType::Session
            && ev.session_state.is_terminated()
            && !(r.expired_now() && r.renew().await)
        {
            return;
        }
    }
}

/// After an expiry: a live session, and none of this member's nodes of the expired one left in the shard's queue
/// (this member stopped consuming the shard when it was told `Lost`, so they stand for nothing).
async fn resume_shard(r: &mut Renewal, dir: &str, guid: &str, shard: u32) -> bool {
    if !r.renew().await {
        return false;
    }
    let zk = r.zk.clone();
    if let Ok(children) = client::retry_read(&zk, || zk.list_children(dir)).await {
        for n in logic::sorted_nodes(&children, &["lock"]) {
            if n.guid == guid {
                let _ = client::delete_quietly(&zk, &logic::join(dir, &n.name)).await;
            }
        }
    }
    tracing::info!(shard, "queued for the shard again on a new session");
    true
}

/// Owns one shard: queue on its lock, hold it while held, hand it back when over the fair share, queue again.
#[allow(clippy::too_many_arguments)]
async fn own_shard(
    mut r: Renewal,
    guid: String,
    dir: String,
    shard: u32,
    member: Vec<u8>,
    events: crossbeam_channel::Sender<ShardEvent>,
    shared: Arc<Shared>,
) {
    loop {
        let zk = r.zk.clone();
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
            Err(_) if r.expired_now() => {
                if !resume_shard(&mut r, &dir, &guid, shard).await {
                    return;
                }
                continue;
            }
            Err(CoordError::NodeVanished(_)) => continue,
            Err(CoordError::Closed) => return,
            Err(e) => {
                // Not a lost connection or session (both are retried): this member stops contending for the
                // shard, which whoever runs it must hear about.
                tracing::error!(shard, error = %e, "no longer queuing for the shard");
                return;
            }
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
                if client::delete_quietly(&zk, &path).await.is_err() && !r.expired_now() {
                    return;
                }
            }
            LostReason::NodeDeleted => {}
            LostReason::SessionExpired => {
                tracing::warn!(shard, token, "shard lost with the session");
                if !resume_shard(&mut r, &dir, &guid, shard).await {
                    return;
                }
                continue;
            }
            _ => return,
        }
        if SessionStatus::from_zk(zk.state()) != SessionStatus::Connected
            && client::await_connected(&zk).await.is_err()
        {
            // The session expired while handing back: queue again on a new one.
            if !(r.expired_now() && resume_shard(&mut r, &dir, &guid, shard).await) {
                return;
            }
        }
        // Queue again, at the tail.
    }
}
