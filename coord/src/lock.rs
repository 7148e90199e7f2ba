//! Locks: exclusive, shared read/write, and revocable shared (ZooKeeper "Recipes and Solutions").
//!
//! Each contender creates one ephemeral sequential node `<kind>-<guid>-<seq>` under the lock's directory and
//! watches only the node it must wait for (its predecessor), so a release wakes exactly one waiter (for readers
//! queued behind one writer, all of those readers, which is the point). No polling; the only timer is the
//! caller's optional acquire timeout.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use zookeeper_client as zk;

use crate::client::{self, check, create_guid_node, delete_quietly, retry_read, SessionStatus};
use crate::hold::Holding;
use crate::logic::{self, Access, SeqNode, Turn};
use crate::{Coord, CoordError, Result};

/// A held lock (or shared lock): its fencing token, its live [`crate::HoldState`], released on drop.
pub type LockGuard = Holding;

impl Holding {
    /// Releases now (deletes the holder's node); dropping the guard does the same.
    pub fn release(mut self) -> Result<()> {
        self.release_now()
    }
}

/// Contends for a turn under `dir` and returns the own node's name and token once `turn` says it holds.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn contend(
    zk: &zk::Client,
    guid: &str,
    dir: &str,
    kind: &str,
    kinds: &[&str],
    data: &[u8],
    turn: impl Fn(&[SeqNode], &str) -> Turn,
    timeout: Option<Duration>,
    wakeups: &AtomicU64,
) -> Result<(String, u64)> {
    let deadline = timeout.map(|t| Instant::now() + t);
    let own = create_guid_node(
        zk,
        dir,
        kind,
        guid,
        data,
        zk::CreateMode::EphemeralSequential,
    )
    .await?;
    let res = async {
        loop {
            let children = retry_read(zk, || zk.list_children(dir)).await?;
            let nodes = logic::sorted_nodes(&children, kinds);
            match turn(&nodes, &own) {
                Turn::Holds { token } => return Ok(token),
                Turn::Missing => {
                    return Err(match SessionStatus::from_zk(zk.state()) {
                        SessionStatus::Expired => CoordError::SessionExpired,
                        _ => CoordError::NodeVanished(logic::join(dir, &own)),
                    })
                }
                Turn::Watch { predecessor } => {
                    let pred = logic::join(dir, &predecessor);
                    let watcher = match zk.check_and_watch_stat(&pred).await {
                        Ok((None, _)) => continue,
                        Ok((Some(_), w)) => w,
                        Err(e) if client::transient(&e) => {
                            client::await_connected(zk).await?;
                            continue;
                        }
                        Err(e) => return Err(e.into()),
                    };
                    tracing::trace!(own = %own, watching = %predecessor, "waiting for predecessor");
                    let ev = match deadline {
                        Some(d) => match tokio::time::timeout_at(d.into(), watcher.changed()).await
                        {
                            Ok(ev) => ev,
                            Err(_) => return Err(CoordError::Timeout(timeout.unwrap_or_default())),
                        },
                        None => watcher.changed().await,
                    };
                    wakeups.fetch_add(1, Ordering::Relaxed);
                    if ev.event_type == zk::EventType::Session && ev.session_state.is_terminated() {
                        return Err(match SessionStatus::from_zk(ev.session_state) {
                            SessionStatus::Expired => CoordError::SessionExpired,
                            _ => CoordError::Closed,
                        });
                    }
                }
            }
        }
    }
    .await;
    match res {
        Ok(token) => Ok((own, token)),
        Err(e) => {
            // Leave the queue so that nobody waits behind an abandoned node.
            let _ = delete_quietly(zk, &logic::join(dir, &own)).await;
            Err(e)
        }
    }
}

/// An exclusive lock at a directory path.
#[derive(Debug, Clone)]
pub struct Lock {
    coord: Coord,
    dir: String,
    wakeups: Arc<AtomicU64>,
}

impl Lock {
    /// A lock whose contenders queue under `dir` (created when missing, persistent, never deleted so that
    /// fencing tokens keep increasing).
    pub fn new(coord: &Coord, dir: &str) -> Result<Lock> {
        check(dir)?;
        coord.ensure_path(dir)?;
        Ok(Lock {
            coord: coord.clone(),
            dir: dir.to_owned(),
            wakeups: Arc::new(AtomicU64::new(0)),
        })
    }

    /// Waits for the lock (forever when `timeout` is `None`).
    /// A session that expires while it waits is replaced and the wait goes on (queued again at the tail).
    pub fn acquire(&self, timeout: Option<Duration>) -> Result<LockGuard> {
        let (own, token) = self.coord.on_live_session(&self.dir, timeout, |left| {
            let zk = self.coord.client();
            self.coord.block_on(contend(
                &zk,
                &client::new_guid(),
                &self.dir,
                "lock",
                &["lock"],
                b"",
                logic::exclusive_turn,
                left,
                &self.wakeups,
            ))
        })?;
        tracing::debug!(dir = %self.dir, token, "lock acquired");
        Ok(Holding::start(
            &self.coord,
            logic::join(&self.dir, &own),
            token,
        ))
    }

    /// Takes the lock only if it is free now.
    pub fn try_acquire(&self) -> Result<Option<LockGuard>> {
        match self.acquire(Some(Duration::ZERO)) {
            Ok(g) => Ok(Some(g)),
            Err(CoordError::Timeout(_)) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// How many watch notifications this handle's contenders have received (the no-herd test counts them).
    pub fn wakeups(&self) -> u64 {
        self.wakeups.load(Ordering::Relaxed)
    }

    /// The directory.
    pub fn dir(&self) -> &str {
        &self.dir
    }

    /// The current holder's node and token, if any.
    pub fn holder(&self) -> Result<Option<SeqNode>> {
        let children = self.coord.children(&self.dir)?;
        Ok(logic::sorted_nodes(&children, &["lock"]).into_iter().next())
    }
}

/// A shared (read/write) lock, revocable: any holder can be asked to release through [`SharedLock::revoke`],
/// which its guard reports as [`crate::HoldState::RevokeRequested`].
#[derive(Debug, Clone)]
pub struct SharedLock {
    coord: Coord,
    dir: String,
    wakeups: Arc<AtomicU64>,
}

impl SharedLock {
    /// A shared lock queued under `dir` (created when missing).
    pub fn new(coord: &Coord, dir: &str) -> Result<SharedLock> {
        check(dir)?;
        coord.ensure_path(dir)?;
        Ok(SharedLock {
            coord: coord.clone(),
            dir: dir.to_owned(),
            wakeups: Arc::new(AtomicU64::new(0)),
        })
    }

    /// Waits for a read (shared) hold.
    pub fn read(&self, timeout: Option<Duration>) -> Result<LockGuard> {
        self.acquire(Access::Read, timeout)
    }

    /// Waits for a write (exclusive) hold.
    pub fn write(&self, timeout: Option<Duration>) -> Result<LockGuard> {
        self.acquire(Access::Write, timeout)
    }

    /// Waits for a hold of the given access.
    pub fn acquire(&self, access: Access, timeout: Option<Duration>) -> Result<LockGuard> {
        let (own, token) = self.coord.on_live_session(&self.dir, timeout, |left| {
            let zk = self.coord.client();
            self.coord.block_on(contend(
                &zk,
                &client::new_guid(),
                &self.dir,
                access.kind(),
                &["read", "write"],
                b"",
                |nodes, own| logic::shared_turn(nodes, own, access),
                left,
                &self.wakeups,
            ))
        })?;
        Ok(Holding::start(
            &self.coord,
            logic::join(&self.dir, &own),
            token,
        ))
    }

    /// The current holders (the readers at the head of the queue, or the one writer there).
    pub fn holders(&self) -> Result<Vec<SeqNode>> {
        let children = self.coord.children(&self.dir)?;
        let nodes = logic::sorted_nodes(&children, &["read", "write"]);
        Ok(logic::shared_holders(&nodes).into_iter().cloned().collect())
    }

    /// Asks every current holder to release (writes `unlock` into their nodes, as the recipe prescribes);
    /// returns how many were asked. Holders see [`crate::HoldState::RevokeRequested`].
    pub fn revoke(&self) -> Result<usize> {
        let holders = self.holders()?;
        let mut asked = 0;
        for h in &holders {
            match self.coord.block_on(self.coord.client().set_data(
                &logic::join(&self.dir, &h.name),
                b"unlock",
                None,
            )) {
                Ok(_) => asked += 1,
                Err(zk::Error::NoNode) => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(asked)
    }

    /// Watch notifications received by this handle's contenders.
    pub fn wakeups(&self) -> u64 {
        self.wakeups.load(Ordering::Relaxed)
    }
}
