//! Barriers (ZooKeeper "Recipes and Solutions"): a simple barrier (a node that holds everyone back while it
//! exists) and the double barrier (enter when `parties` have joined, leave when all have left, the lowest node
//! being the exit flag).

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use zookeeper_client as zk;

use crate::client::{self, check, create_guid_node, delete_quietly, retry_read};
use crate::logic::{self, LeaveStep};
use crate::{Coord, CoordError, Result};

/// Waits until `path` does not exist (or, with `want_exists`, until it does), or the deadline.
async fn wait_exists(
    zk: &zk::Client,
    path: &str,
    want_exists: bool,
    deadline: Option<Instant>,
    timeout: Option<Duration>,
) -> Result<()> {
    loop {
        let watcher = match zk.check_and_watch_stat(path).await {
            Ok((stat, w)) => {
                if stat.is_some() == want_exists {
                    return Ok(());
                }
                w
            }
            Err(e) if client::transient(&e) => {
                client::await_connected(zk).await?;
                continue;
            }
            Err(e) => return Err(e.into()),
        };
        let ev = match deadline {
            Some(d) => tokio::time::timeout_at(d.into(), watcher.changed())
                .await
                .map_err(|_| CoordError::Timeout(timeout.unwrap_or_default()))?,
            None => watcher.changed().await,
        };
        if ev.event_type == zk::EventType::Session && ev.session_state.is_terminated() {
            return Err(CoordError::SessionExpired);
        }
    }
}

/// Resolves once `stop` is set, never without one. The flag is a plain atomic (set by a signal handler), so it
/// is looked at every 50 ms.
async fn stopped(stop: Option<&AtomicBool>) {
    let Some(stop) = stop else {
        return std::future::pending().await;
    };
    while !stop.load(Ordering::Relaxed) {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A simple barrier: while its node exists, [`Barrier::wait`] blocks.
#[derive(Debug, Clone)]
pub struct Barrier {
    coord: Coord,
    path: String,
}

impl Barrier {
    /// A barrier at `path` (the node itself is the barrier).
    pub fn new(coord: &Coord, path: &str) -> Result<Barrier> {
        check(path)?;
        Ok(Barrier {
            coord: coord.clone(),
            path: path.to_owned(),
        })
    }

    /// Sets the barrier (creates the node, and its parents).
    pub fn raise(&self) -> Result<()> {
        self.coord.ensure_path(&self.path)
    }

    /// Removes the barrier: every waiter proceeds.
    pub fn lower(&self) -> Result<()> {
        self.coord.delete(&self.path).map(|_| ())
    }

    /// Blocks while the barrier stands (returns at once when it is not raised).
    /// A session that expires meanwhile is replaced and the wait goes on.
    pub fn wait(&self, timeout: Option<Duration>) -> Result<()> {
        self.coord.on_live_session(&self.path, timeout, |left| {
            let zk = self.coord.client();
            let deadline = left.map(|t| Instant::now() + t);
            self.coord
                .block_on(wait_exists(&zk, &self.path, false, deadline, timeout))
        })
    }
}

/// A double barrier for `parties` processes at a directory path.
#[derive(Debug, Clone)]
pub struct DoubleBarrier {
    coord: Coord,
    dir: String,
    parties: usize,
}

/// Counts of a double barrier, for `tickbox coord state`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DoubleBarrierState {
    /// Party nodes present.
    pub present: usize,
    /// Whether the `ready` flag is set (everyone may proceed).
    pub ready: bool,
}

impl DoubleBarrier {
    /// A double barrier at `dir` for `parties` processes (created when missing).
    pub fn new(coord: &Coord, dir: &str, parties: usize) -> Result<DoubleBarrier> {
        check(dir)?;
        coord.ensure_path(dir)?;
        Ok(DoubleBarrier {
            coord: coord.clone(),
            dir: dir.to_owned(),
            parties: parties.max(1),
        })
    }

    fn ready_path(&self) -> String {
        logic::join(&self.dir, "ready")
    }

    /// Enters: joins, and blocks until `parties` have joined (the one completing the count sets `ready`).
    pub fn enter(&self, id: &[u8], timeout: Option<Duration>) -> Result<Entered> {
        self.enter_inner(id, timeout, None)
    }

    /// [`DoubleBarrier::enter`] that also gives up (with [`CoordError::Interrupted`], own node deleted) once
    /// `stop` is set: a command waiting for its parties still honours Ctrl-C.
    pub fn enter_until(
        &self,
        id: &[u8],
        timeout: Option<Duration>,
        stop: &AtomicBool,
    ) -> Result<Entered> {
        self.enter_inner(id, timeout, Some(stop))
    }

    /// Entering again on a new session after an expiry (the expired session's party node went with it).
    fn enter_inner(
        &self,
        id: &[u8],
        timeout: Option<Duration>,
        stop: Option<&AtomicBool>,
    ) -> Result<Entered> {
        self.coord.on_live_session(&self.dir, timeout, |left| {
            self.enter_once(id, left, timeout, stop)
        })
    }

    fn enter_once(
        &self,
        id: &[u8],
        left: Option<Duration>,
        timeout: Option<Duration>,
        stop: Option<&AtomicBool>,
    ) -> Result<Entered> {
        let zk = self.coord.client();
        let deadline = left.map(|t| Instant::now() + t);
        let guid = client::new_guid();
        let (dir, ready, parties) = (self.dir.clone(), self.ready_path(), self.parties);
        let own = self.coord.block_on(async {
            let own = create_guid_node(
                &zk,
                &dir,
                "p",
                &guid,
                id,
                zk::CreateMode::EphemeralSequential,
            )
            .await?;
            let waiting = async {
                loop {
                    // Watch the ready flag first, then count: a party completing the count in between still
                    // fires the watch.
                    let watcher = match zk.check_and_watch_stat(&ready).await {
                        Ok((Some(_), _)) => return Ok(()),
                        Ok((None, w)) => w,
                        Err(e) if client::transient(&e) => {
                            client::await_connected(&zk).await?;
                            continue;
                        }
                        Err(e) => return Err(e.into()),
                    };
                    let children = retry_read(&zk, || zk.list_children(&dir)).await?;
                    if logic::sorted_nodes(&children, &["p"]).len() >= parties {
                        let opts = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
                        match zk.create(&ready, b"", &opts).await {
                            Ok(_) | Err(zk::Error::NodeExists) => return Ok(()),
                            Err(e) if client::transient(&e) => continue,
                            Err(e) => return Err(e.into()),
                        }
                    }
                    match deadline {
                        Some(d) => {
                            tokio::time::timeout_at(d.into(), watcher.changed())
                                .await
                                .map_err(|_| CoordError::Timeout(timeout.unwrap_or_default()))?;
                        }
                        None => {
                            watcher.changed().await;
                        }
                    }
                }
            };
            let res: Result<()> = tokio::select! {
                r = waiting => r,
                _ = stopped(stop) => Err(CoordError::Interrupted),
            };
            match res {
                Ok(()) => Ok(own),
                Err(e) => {
                    let _ = delete_quietly(&zk, &logic::join(&dir, &own)).await;
                    Err(e)
                }
            }
        })?;
        Ok(Entered {
            barrier: self.clone(),
            own,
            left: false,
        })
    }

    /// The barrier's current counts.
    pub fn state(&self) -> Result<DoubleBarrierState> {
        let children = self.coord.children(&self.dir)?;
        Ok(DoubleBarrierState {
            present: logic::sorted_nodes(&children, &["p"]).len(),
            ready: children.iter().any(|c| c == "ready"),
        })
    }
}

/// A party inside a double barrier. Dropping it without [`Entered::leave`] deletes its node without waiting.
#[derive(Debug)]
pub struct Entered {
    barrier: DoubleBarrier,
    own: String,
    left: bool,
}

impl Entered {
    /// This party's node name.
    pub fn node(&self) -> &str {
        &self.own
    }

    /// Leaves: blocks until every party has left (the recipe's leave protocol, herd-free).
    pub fn leave(self, timeout: Option<Duration>) -> Result<()> {
        self.leave_inner(timeout, None)
    }

    /// [`Entered::leave`] that stops waiting for the others (with [`CoordError::Interrupted`]) once `stop` is
    /// set; its own node is deleted all the same, so the others are not held back by it.
    pub fn leave_until(self, timeout: Option<Duration>, stop: &AtomicBool) -> Result<()> {
        self.leave_inner(timeout, Some(stop))
    }

    /// After a session expiry the leave goes on on a new session: this party's node went with the old one, which
    /// the leave rule treats as already deleted.
    fn leave_inner(mut self, timeout: Option<Duration>, stop: Option<&AtomicBool>) -> Result<()> {
        self.left = true;
        let b = self.barrier.clone();
        let res = b
            .coord
            .on_live_session(&b.dir, timeout, |left| self.leave_once(left, timeout, stop));
        // Given up (timeout, interrupted): a lowest node left behind would hold every other party back.
        if res.is_err() {
            let _ = b.coord.delete(&logic::join(&b.dir, &self.own));
        }
        res
    }

    fn leave_once(
        &self,
        left: Option<Duration>,
        timeout: Option<Duration>,
        stop: Option<&AtomicBool>,
    ) -> Result<()> {
        let b = &self.barrier;
        let zk = b.coord.client();
        let deadline = left.map(|t| Instant::now() + t);
        let (dir, ready, own) = (b.dir.clone(), b.ready_path(), self.own.clone());
        let waiting = async move {
            loop {
                let children = retry_read(&zk, || zk.list_children(&dir)).await?;
                let parties = logic::sorted_nodes(&children, &["p"]);
                match logic::leave_step(&parties, &own) {
                    LeaveStep::Done => return Ok(()),
                    LeaveStep::DeleteOwnAndGo => {
                        delete_quietly(&zk, &logic::join(&dir, &own)).await?;
                        // The run is over: clear the flag so the directory can host the next run.
                        delete_quietly(&zk, &ready).await?;
                        return Ok(());
                    }
                    LeaveStep::WaitFor(other) => {
                        wait_exists(&zk, &logic::join(&dir, &other), false, deadline, timeout)
                            .await?;
                    }
                    LeaveStep::DeleteOwnThenWaitFor(lowest) => {
                        delete_quietly(&zk, &logic::join(&dir, &own)).await?;
                        wait_exists(&zk, &logic::join(&dir, &lowest), false, deadline, timeout)
                            .await?;
                    }
                }
            }
        };
        b.coord.block_on(async {
            tokio::select! {
                r = waiting => r,
                _ = stopped(stop) => Err(CoordError::Interrupted),
            }
        })
    }
}

impl Drop for Entered {
    fn drop(&mut self) {
        if !self.left {
            let _ = self
                .barrier
                .coord
                .delete(&logic::join(&self.barrier.dir, &self.own));
        }
    }
}

/// A run's start barrier: one producer (e.g. `tickbox replay`) and `consumers` consumers (subscribers) meet in a
/// double barrier at a path; the run starts once all `consumers + 1` have entered, and each side returns from
/// [`StartBarrier::leave`] once every party has left, so nobody exits while another still runs.
#[derive(Debug)]
pub struct StartBarrier {
    entered: Entered,
    path: String,
}

impl StartBarrier {
    /// Enters the barrier at `path` for `consumers` consumers plus the producer, as `id` (stored in the party
    /// node), blocking until all are in, `timeout` passes ([`CoordError::Timeout`]) or `stop` is set
    /// ([`CoordError::Interrupted`]). Either way out, this party's node is gone.
    pub fn enter(
        coord: &Coord,
        path: &str,
        consumers: u32,
        id: &str,
        timeout: Duration,
        stop: &AtomicBool,
    ) -> Result<StartBarrier> {
        let parties = consumers as usize + 1;
        let barrier = DoubleBarrier::new(coord, path, parties)?;
        let started = Instant::now();
        let entered = barrier.enter_until(id.as_bytes(), Some(timeout), stop)?;
        tracing::info!(
            barrier = path,
            parties,
            waited_ms = started.elapsed().as_millis() as u64,
            "every party entered the start barrier"
        );
        Ok(StartBarrier {
            entered,
            path: path.to_owned(),
        })
    }

    /// Leaves and blocks until every party has left: `Ok(true)`. `Ok(false)` when `stop` is (or gets) set
    /// first: this party is out without waiting for the others (a Ctrl-C'd process should not hang).
    pub fn leave(self, timeout: Duration, stop: &AtomicBool) -> Result<bool> {
        let started = Instant::now();
        match self.entered.leave_until(Some(timeout), stop) {
            Ok(()) => {
                tracing::info!(
                    barrier = %self.path,
                    waited_ms = started.elapsed().as_millis() as u64,
                    "every party left the start barrier"
                );
                Ok(true)
            }
            Err(CoordError::Interrupted) => {
                tracing::info!(barrier = %self.path, "left the start barrier without waiting for the others (stopped)");
                Ok(false)
            }
            Err(e) => Err(e),
        }
    }
}
