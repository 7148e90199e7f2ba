//! Leader election (ZooKeeper "Recipes and Solutions"): each candidate creates an ephemeral sequential node;
//! the lowest is the leader; every other watches only the next lower node and, when it goes, checks whether it
//! is now the lowest. After a reconnection a candidate re-reads its own node before believing anything.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::watch;
use zookeeper_client as zk;

use crate::client::{
    self, check, create_guid_node, delete_quietly, retry_read, Session, SessionStatus,
};
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
    /// No longer leader (or candidate). After `Lost(SessionExpired)` the candidate stands again by itself as
    /// soon as a new session is established (`Rejoined` follows); any other reason (node deleted, closed,
    /// resigned) is for good.
    Lost(LostReason),
    /// Back in the election as a candidate on a new session, after `Lost(SessionExpired)`; `Elected` follows
    /// when its turn comes. `was_leader` carries the token it led with when the expired session was leading.
    Rejoined {
        /// The token of the leadership the expired session held, if it was leading.
        was_leader: Option<u64>,
        /// How long the candidate was out (from the loss being noticed to the new node).
        out_for: Duration,
    },
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
        let session = self.coord.session();
        let (generation, zk) = session.current()?;
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
        let path = Arc::new(std::sync::Mutex::new(logic::join(&self.dir, &own)));
        let task = self.coord.spawn(campaign(
            Place {
                session,
                generation,
                zk,
                dir,
                own,
                id: id.to_vec(),
                path: path.clone(),
            },
            ev_tx,
            st_tx,
        ));
        Ok(Candidate {
            coord: self.coord.clone(),
            path,
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
    /// The current node (a new one after each rejoin).
    path: Arc<std::sync::Mutex<String>>,
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

    /// True while leading with a connected session. The session state is read from the client itself as well
    /// as from the leadership's monitor, so that a dropped connection ends the claim at once, not when the
    /// monitor task gets to run.
    pub fn is_leader(&self) -> bool {
        matches!(self.leadership(), Leadership::Leader { state, .. } if state.is_held())
            && self.coord.status() == SessionStatus::Connected
    }

    /// This candidate's node (a new one after each rejoin).
    pub fn path(&self) -> String {
        self.path.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Blocks until this candidate leads (returns its token) or `timeout` passes; consumes events up to then.
    pub fn wait_elected(&self, timeout: Duration) -> Result<u64> {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.events.recv_timeout(left) {
                Ok(ElectionEvent::Elected { token }) => return Ok(token),
                // An expired session stands again by itself: keep waiting.
                Ok(ElectionEvent::Lost(LostReason::SessionExpired)) => continue,
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
        let zk = self.coord.client();
        let path = self.path();
        self.coord
            .block_on(async move { delete_quietly(&zk, &path).await })
    }
}

impl Drop for Candidate {
    fn drop(&mut self) {
        if let Err(e) = self.resign_inner() {
            tracing::debug!(path = %self.path(), error = %e, "resign on drop");
        }
    }
}

/// One candidacy's place: the session it stands on and its node.
struct Place {
    session: Arc<Session>,
    generation: u64,
    zk: zk::Client,
    dir: String,
    own: String,
    id: Vec<u8>,
    path: Arc<std::sync::Mutex<String>>,
}

async fn campaign(
    mut place: Place,
    events: crossbeam_channel::Sender<ElectionEvent>,
    state: watch::Sender<Leadership>,
) {
    loop {
        let (reason, led) = candidacy(&place, &events, &state).await;
        state.send_replace(Leadership::Lost(reason));
        let _ = events.send(ElectionEvent::Lost(reason));
        if reason != LostReason::SessionExpired {
            return;
        }
        let out_since = Instant::now();
        tracing::warn!(election = %place.dir, node = %place.own, was_leader = ?led, "session expired: out of the election until a new session is established");
        let old = logic::join(&place.dir, &place.own);
        if !rejoin(&mut place).await {
            return;
        }
        // The old node may outlive its session by up to one session timeout (a restarted ensemble gives every
        // session it recovers a fresh timeout). This candidate stopped acting on it when the connection
        // dropped, so deleting it is safe, and it no longer holds up everyone queued behind it.
        if let Err(e) = delete_quietly(&place.zk, &old).await {
            tracing::debug!(node = %old, error = %e, "deleting the expired session's node");
        }
        *place.path.lock().unwrap_or_else(|p| p.into_inner()) = logic::join(&place.dir, &place.own);
        state.send_replace(Leadership::Follower);
        let out_for = out_since.elapsed();
        tracing::info!(election = %place.dir, node = %place.own, was_leader = ?led, out_ms = out_for.as_millis() as u64, "back in the election as a candidate");
        let _ = events.send(ElectionEvent::Rejoined {
            was_leader: led,
            out_for,
        });
    }
}

/// Stands again on a renewed session (retrying through further expiries); false when the handle was closed.
async fn rejoin(place: &mut Place) -> bool {
    loop {
        let (generation, zk) = match place.session.renew(place.generation).await {
            Ok(s) => s,
            Err(_) => return false,
        };
        (place.generation, place.zk) = (generation, zk);
        let guid = client::new_guid();
        match create_guid_node(
            &place.zk,
            &place.dir,
            "n",
            &guid,
            &place.id,
            zk::CreateMode::EphemeralSequential,
        )
        .await
        {
            Ok(own) => {
                place.own = own;
                return true;
            }
            Err(CoordError::SessionExpired) => continue,
            Err(CoordError::Closed) => return false,
            Err(e) => {
                tracing::warn!(election = %place.dir, error = %e, "standing again");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    }
}

/// Runs one candidacy (one node on one session) to its end: the reason, and the token when it was leading.
async fn candidacy(
    place: &Place,
    events: &crossbeam_channel::Sender<ElectionEvent>,
    state: &watch::Sender<Leadership>,
) -> (LostReason, Option<u64>) {
    let (zk, dir, own) = (&place.zk, &place.dir, &place.own);
    let token = match wait_turn(zk, dir, own).await {
        Ok(token) => token,
        Err(r) => return (r, None),
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
    let mon = hold::monitor(zk.clone(), logic::join(dir, own), tx.clone());
    drop(tx);
    let forward = async {
        let mut last = HoldState::Held;
        while rx.changed().await.is_ok() {
            let now = *rx.borrow_and_update();
            if now == last {
                continue;
            }
            if let HoldState::Lost(r) = now {
                return r;
            }
            state.send_replace(Leadership::Leader { token, state: now });
            let ev = match now {
                HoldState::Held | HoldState::RevokeRequested if last == HoldState::Suspended => {
                    Some(ElectionEvent::Resumed)
                }
                HoldState::Suspended => Some(ElectionEvent::Suspended),
                _ => None,
            };
            if let Some(ev) = ev {
                let _ = events.send(ev);
            }
            last = now;
        }
        // The monitor ended without a verdict: judge by the session.
        match SessionStatus::from_zk(zk.state()) {
            SessionStatus::Expired => LostReason::SessionExpired,
            _ => LostReason::Closed,
        }
    };
    let (_, reason) = tokio::join!(mon, forward);
    (reason, Some(token))
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
