//! What every holder (of a lock, a leadership, a membership) is told about what it holds: held, suspended
//! (connection lost: maybe still held, maybe not — act as if not), revocation requested, or lost (session
//! expired, node deleted, released). A monitor task per holding keeps this current from the session state and a
//! watch on the holder's own node, so a holder never goes on believing it holds what it lost.

use std::time::{Duration, Instant};

use tokio::sync::watch;
use zookeeper_client as zk;

use crate::client::{self, SessionStatus};
use crate::Coord;

/// Why a holding ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LostReason {
    /// The session expired: the server deleted every ephemeral node of the session.
    SessionExpired,
    /// The holder's node was deleted by someone else (an operator, or a revocation honoured elsewhere).
    NodeDeleted,
    /// The handle was closed.
    Closed,
    /// The holder released it.
    Released,
}

/// The state of a holding.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HoldState {
    /// Held, and the session is connected.
    Held,
    /// The connection was lost; the session may still be alive (and the holding with it) or may expire. Stop
    /// acting as holder until it is `Held` again: the server can expire the session before this client knows.
    Suspended,
    /// Still held, but someone asked (revocable lock) that it be released.
    RevokeRequested,
    /// Lost for good.
    Lost(LostReason),
}

impl HoldState {
    /// True while the holder may act as holder (`Held` or `RevokeRequested`).
    pub fn is_held(self) -> bool {
        matches!(self, HoldState::Held | HoldState::RevokeRequested)
    }
}

/// A holding's live state: the holder's node, its fencing token and a view of [`HoldState`].
#[derive(Debug)]
pub struct Holding {
    pub(crate) coord: Coord,
    pub(crate) path: String,
    pub(crate) token: u64,
    pub(crate) rx: watch::Receiver<HoldState>,
    pub(crate) tx: std::sync::Arc<watch::Sender<HoldState>>,
    pub(crate) monitor: tokio::task::JoinHandle<()>,
}

impl Holding {
    /// Starts monitoring `path` (the holder's node, which exists now).
    pub(crate) fn start(coord: &Coord, path: String, token: u64) -> Holding {
        let (tx, rx) = watch::channel(HoldState::Held);
        let tx = std::sync::Arc::new(tx);
        let monitor = coord.spawn(monitor(coord.client(), path.clone(), tx.clone()));
        Holding {
            coord: coord.clone(),
            path,
            token,
            rx,
            tx,
            monitor,
        }
    }

    /// The fencing token: the sequence of the holder's node. Tokens of successive holders of one lock (or
    /// leaders of one election) strictly increase; a resource guarded by the lock should refuse writes carrying
    /// a token lower than the highest it has seen.
    pub fn token(&self) -> u64 {
        self.token
    }

    /// The holder's node.
    pub fn path(&self) -> &str {
        &self.path
    }

    /// The current state.
    pub fn state(&self) -> HoldState {
        *self.rx.borrow()
    }

    /// True while held (see [`HoldState::is_held`]).
    pub fn is_held(&self) -> bool {
        self.state().is_held()
    }

    /// Blocks until the state differs from `seen` or `timeout` passes; returns the current state.
    pub fn wait_change(&self, seen: HoldState, timeout: Duration) -> HoldState {
        let mut rx = self.rx.clone();
        let deadline = Instant::now() + timeout;
        self.coord.block_on(async move {
            loop {
                let now = *rx.borrow_and_update();
                if now != seen {
                    return now;
                }
                match tokio::time::timeout_at(deadline.into(), rx.changed()).await {
                    Ok(Ok(())) => continue,
                    _ => return *rx.borrow(),
                }
            }
        })
    }

    /// A receiver of state changes, for callers that run their own async code or poll.
    pub fn subscribe(&self) -> watch::Receiver<HoldState> {
        self.rx.clone()
    }

    /// Stops monitoring and deletes the node (idempotent).
    pub(crate) fn release_now(&mut self) -> crate::Result<()> {
        if matches!(self.state(), HoldState::Lost(_)) {
            self.monitor.abort();
            return Ok(());
        }
        self.monitor.abort();
        self.tx.send_replace(HoldState::Lost(LostReason::Released));
        let client = self.coord.client();
        let path = self.path.clone();
        self.coord
            .block_on(async move { crate::client::delete_quietly(&client, &path).await })
    }
}

impl Drop for Holding {
    fn drop(&mut self) {
        if let Err(e) = self.release_now() {
            tracing::debug!(path = %self.path, error = %e, "release on drop");
        }
    }
}

/// Keeps `tx` current: watches the node's data (which fires on deletion too) and the session state; after a
/// reconnection re-reads the node, as the recipes require, before saying `Held` again.
pub(crate) async fn monitor(
    client: zk::Client,
    path: String,
    tx: std::sync::Arc<watch::Sender<HoldState>>,
) {
    let mut states = client.state_watcher();
    let set = |s: HoldState| {
        if *tx.borrow() != s {
            tracing::debug!(path = %path, state = ?s, "holding");
            tx.send_replace(s);
        }
    };
    loop {
        match client.get_and_watch_data(&path).await {
            Ok((data, _, watcher)) => {
                set(if data == b"unlock" {
                    HoldState::RevokeRequested
                } else {
                    HoldState::Held
                });
                let fired = watcher.changed();
                tokio::pin!(fired);
                loop {
                    tokio::select! {
                        ev = &mut fired => {
                            match ev.event_type {
                                zk::EventType::NodeDeleted => return set(HoldState::Lost(LostReason::NodeDeleted)),
                                zk::EventType::Session => return set(lost_for(SessionStatus::from_zk(ev.session_state))),
                                _ => break, // data changed: read again (and re-arm the watch)
                            }
                        }
                        st = states.changed() => match SessionStatus::from_zk(st) {
                            SessionStatus::Disconnected => set(HoldState::Suspended),
                            // Reconnected with the same session: check our own node again.
                            SessionStatus::Connected => break,
                            other => return set(lost_for(other)),
                        },
                    }
                }
            }
            Err(zk::Error::NoNode) => return set(HoldState::Lost(LostReason::NodeDeleted)),
            Err(e) if client::transient(&e) => {
                set(HoldState::Suspended);
                if crate::client::await_connected(&client).await.is_err() {
                    return set(lost_for(SessionStatus::from_zk(client.state())));
                }
            }
            Err(zk::Error::SessionExpired) => {
                return set(HoldState::Lost(LostReason::SessionExpired))
            }
            Err(e) => {
                tracing::warn!(path = %path, error = %e, "holding monitor");
                return set(lost_for(SessionStatus::from_zk(client.state())));
            }
        }
    }
}

fn lost_for(status: SessionStatus) -> HoldState {
    match status {
        SessionStatus::Expired => HoldState::Lost(LostReason::SessionExpired),
        _ => HoldState::Lost(LostReason::Closed),
    }
}
