//! Leader election (ZooKeeper "Recipes and Solutions"): each candidate creates an ephemeral sequential node;
//! the lowest is the leader; every other watches only the next lower node and, when it goes, checks whether it
//! is now the lowest. After a reconnection a candidate re-reads its own node before believing anything.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::watch;
use zookeeper_client as zk;

use crate::client::{self, check, create_guid_node, delete_quietly, retry_read, SessionStatus};
use crate::hold::{self, HoldState, LostReason};
use crate::logic::{self, SeqNode, Turn};
use crate::{Coord, CoordError, Result};

/// What a candidate is told, in order, on [`Candidate::events`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ElectionEvent {
    /// This candidate is the leader; `token` (its node's sequence) is its fencing token, strictly greater than
    /// every earlier leader's in this election.
    Elected {
        /// The fencing token.
        token: u64,
    },
    /// The connection was lost while leading: stop acting as leader until `Resumed` (the session may expire).
    Suspended,
    /// Reconnected within the session, own node re-checked: still the leader.
    Resumed,
    /// No longer leader (or candidate), for good: the session expired, the node was deleted, or it resigned.
    /// To stand again, campaign again (on a new [`Coord`] after a session expiry).
    Lost(LostReason),
}

/// The leadership state as last known, readable without consuming events.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Leadership {
    /// Waiting behind a lower candidate.
    Follower,
    /// Leading (or suspended, see `state`) with this token.
    Leader {
        /// The fencing token.
        token: u64,
        /// Held, suspended, or lost.
        state: HoldState,
    },
    /// Out of the election for good.
    Lost(LostReason),
}

/// An election at a directory path.
#[derive(Debug, Clone)]
pub struct Election {
    coord: Coord,
    dir: String,
}

impl Election {
    /// An election whose candidates queue under `dir` (created when missing, persistent, never deleted so that
    /// tokens keep increasing).
    pub fn new(coord: &Coord, dir: &str) -> Result<Election> {
        check(dir)?;
        coord.ensure_path(dir)?;
        Ok(Election {
            coord: coord.clone(),
            dir: dir.to_owned(),
        })
    }

    /// Stands as a candidate; `id` (e.g. host and pid, or an endpoint) is stored in the node for
    /// [`Election::leader`] to show. Returns at once; follow [`Candidate::events`].
    pub fn campaign(&self, id: &[u8]) -> Result<Candidate> {
        let zk = self.coord.client().clone();
        let guid = client::new_guid();
        let dir = self.dir.clone();
        let own = self.coord.block_on(async {
            create_guid_node(
                &zk,
                &dir,
                "n",
                &guid,
                id,
                zk::CreateMode::EphemeralSequential,
            )
            .await
        })?;
        let (ev_tx, ev_rx) = crossbeam_channel::unbounded();
        let (st_tx, st_rx) = watch::channel(Leadership::Follower);
        let task = self
            .coord
            .spawn(campaign(zk, dir, own.clone(), ev_tx, st_tx));
        Ok(Candidate {
            coord: self.coord.clone(),
            path: logic::join(&self.dir, &own),
            events: ev_rx,
            state: st_rx,
            task,
        })
    }

    /// The current leader's node and id, if any.
    pub fn leader(&self) -> Result<Option<(SeqNode, Vec<u8>)>> {
        for node in logic::sorted_nodes(&self.coord.children(&self.dir)?, &["n"]) {
            if let Some((data, _)) = self.coord.get(&logic::join(&self.dir, &node.name))? {
                return Ok(Some((node, data)));
            }
        }
        Ok(None)
    }

    /// The directory.
    pub fn dir(&self) -> &str {
        &self.dir
    }
}

/// One candidacy. Dropping it resigns (deletes its node).
#[derive(Debug)]
pub struct Candidate {
    coord: Coord,
    path: String,
    events: crossbeam_channel::Receiver<ElectionEvent>,
    state: watch::Receiver<Leadership>,
    task: tokio::task::JoinHandle<()>,
}

impl Candidate {
    /// Leadership changes, in order (a recorder runs `for ev in candidate.events().try_iter()` in its loop, or
    /// blocks on `recv_timeout`).
    pub fn events(&self) -> &crossbeam_channel::Receiver<ElectionEvent> {
        &self.events
    }

    /// The leadership as last known.
    pub fn leadership(&self) -> Leadership {
        *self.state.borrow()
    }

    /// True while leading with a connected session.
    pub fn is_leader(&self) -> bool {
        matches!(self.leadership(), Leadership::Leader { state, .. } if state.is_held())
    }

    /// This candidate's node.
    pub fn path(&self) -> &str {
        &self.path
    }

    /// Blocks until this candidate leads (returns its token) or `timeout` passes; consumes events up to then.
    pub fn wait_elected(&self, timeout: Duration) -> Result<u64> {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.events.recv_timeout(left) {
                Ok(ElectionEvent::Elected { token }) => return Ok(token),
                Ok(ElectionEvent::Lost(r)) => return Err(CoordError::Lost(r)),
                Ok(_) => continue,
                Err(crossbeam_channel::RecvTimeoutError::Timeout) => {
                    return Err(CoordError::Timeout(timeout))
                }
                Err(crossbeam_channel::RecvTimeoutError::Disconnected) => {
                    return Err(CoordError::Closed)
                }
            }
        }
    }

    /// Leaves the election (deletes the node); dropping does the same.
    pub fn resign(mut self) -> Result<()> {
        self.resign_inner()
    }

    fn resign_inner(&mut self) -> Result<()> {
        if self.task.is_finished() && matches!(self.leadership(), Leadership::Lost(_)) {
            return Ok(());
        }
        self.task.abort();
        let zk = self.coord.client().clone();
        let path = self.path.clone();
        self.coord
            .block_on(async move { delete_quietly(&zk, &path).await })
    }
}

impl Drop for Candidate {
    fn drop(&mut self) {
        if let Err(e) = self.resign_inner() {
            tracing::debug!(path = %self.path, error = %e, "resign on drop");
        }
    }
}

async fn campaign(
    zk: zk::Client,
    dir: String,
    own: String,
    events: crossbeam_channel::Sender<ElectionEvent>,
    state: watch::Sender<Leadership>,
) {
    let lost = |r: LostReason| {
        state.send_replace(Leadership::Lost(r));
        let _ = events.send(ElectionEvent::Lost(r));
    };
    let token = match wait_turn(&zk, &dir, &own).await {
        Ok(token) => token,
        Err(r) => return lost(r),
    };
    tracing::info!(election = %dir, token, "elected leader");
    state.send_replace(Leadership::Leader {
        token,
        state: HoldState::Held,
    });
    let _ = events.send(ElectionEvent::Elected { token });
    // Leading: follow the own node and the session exactly as any holder does.
    let (tx, mut rx) = watch::channel(HoldState::Held);
    let tx = Arc::new(tx);
    let mon = hold::monitor(zk.clone(), logic::join(&dir, &own), tx.clone());
    drop(tx);
    let forward = async {
        let mut last = HoldState::Held;
        while rx.changed().await.is_ok() {
            let now = *rx.borrow_and_update();
            if now == last {
                continue;
            }
            state.send_replace(match now {
                HoldState::Lost(r) => Leadership::Lost(r),
                s => Leadership::Leader { token, state: s },
            });
            let ev = match now {
                HoldState::Held | HoldState::RevokeRequested if last == HoldState::Suspended => {
                    Some(ElectionEvent::Resumed)
                }
                HoldState::Suspended => Some(ElectionEvent::Suspended),
                HoldState::Lost(r) => Some(ElectionEvent::Lost(r)),
                _ => None,
            };
            if let Some(ev) = ev {
                let _ = events.send(ev);
            }
            last = now;
            if matches!(now, HoldState::Lost(_)) {
                break;
            }
        }
    };
    tokio::join!(mon, forward);
}

/// Waits until `own` is the lowest node. Errors say why the candidacy ended.
async fn wait_turn(zk: &zk::Client, dir: &str, own: &str) -> std::result::Result<u64, LostReason> {
    let ended = |zk: &zk::Client| match SessionStatus::from_zk(zk.state()) {
        SessionStatus::Expired => LostReason::SessionExpired,
        SessionStatus::Closed => LostReason::Closed,
        _ => LostReason::NodeDeleted,
    };
    let mut states = zk.state_watcher();
    loop {
        let children = match retry_read(zk, || zk.list_children(dir)).await {
            Ok(c) => c,
            Err(_) => return Err(ended(zk)),
        };
        let nodes = logic::sorted_nodes(&children, &["n"]);
        let pred = match logic::exclusive_turn(&nodes, own) {
            Turn::Holds { token } => return Ok(token),
            Turn::Missing => return Err(ended(zk)),
            Turn::Watch { predecessor } => logic::join(dir, &predecessor),
        };
        let watcher = match zk.check_and_watch_stat(&pred).await {
            Ok((None, _)) => continue,
            Ok((Some(_), w)) => w,
            Err(e) if client::transient(&e) => {
                if client::await_connected(zk).await.is_err() {
                    return Err(ended(zk));
                }
                continue;
            }
            Err(_) => return Err(ended(zk)),
        };
        let fired = watcher.changed();
        tokio::pin!(fired);
        loop {
            tokio::select! {
                _ = &mut fired => break,
                st = states.changed() => match SessionStatus::from_zk(st) {
                    // After a reconnection, check one's own node again (the recipe's rule).
                    SessionStatus::Connected => break,
                    SessionStatus::Disconnected => continue,
                    _ => return Err(ended(zk)),
                },
            }
        }
    }
}
