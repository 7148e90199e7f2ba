//! Two-phase commit (ZooKeeper "Recipes and Solutions"): the coordinator creates the transaction node (its data
//! is the proposal) with one child per participant, atomically; each participant writes its vote into its child;
//! the coordinator, watching the transaction's subtree, decides abort on the first abort vote or when the timeout
//! passes, commit when every vote is commit, and writes the decision into `<tx>/decision`, which participants
//! watch.

use std::time::{Duration, Instant};

use zookeeper_client as zk;

use crate::client::{self, check, retry_read};
use crate::logic::{self, Decision, Vote};
use crate::{Coord, CoordError, Result};

/// The coordinator's view of a finished transaction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TxOutcome {
    /// The decision written for the participants.
    pub decision: Decision,
    /// Each participant's vote, `None` when it had not voted by the timeout.
    pub votes: Vec<(String, Option<Vote>)>,
    /// True when the decision was forced by the timeout.
    pub timed_out: bool,
}

/// The coordinator of one transaction.
#[derive(Debug, Clone)]
pub struct TxCoordinator {
    coord: Coord,
    path: String,
    participants: Vec<String>,
}

impl TxCoordinator {
    /// Creates the transaction at `path` (its parent is created when missing) with the proposal `payload` and
    /// one child per participant, in one atomic multi-op.
    pub fn begin(
        coord: &Coord,
        path: &str,
        participants: &[&str],
        payload: &[u8],
    ) -> Result<TxCoordinator> {
        check(path)?;
        for p in participants {
            if p.is_empty() || p.contains('/') || *p == "decision" {
                return Err(CoordError::InvalidPath {
                    path: logic::join(path, p),
                    reason: "bad participant name",
                });
            }
        }
        if let Some((parent, _)) = path.rsplit_once('/') {
            if !parent.is_empty() {
                coord.ensure_path(parent)?;
            }
        }
        let zk = coord.client();
        coord.block_on(async {
            let opts = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
            let mut w = zk.new_multi_writer();
            w.add_create(path, payload, &opts)?;
            for p in participants {
                w.add_create(&logic::join(path, p), b"", &opts)?;
            }
            w.commit().await.map_err(|e| CoordError::Zk(e.into()))?;
            Ok::<_, CoordError>(())
        })?;
        Ok(TxCoordinator {
            coord: coord.clone(),
            path: path.to_owned(),
            participants: participants.iter().map(|p| (*p).to_owned()).collect(),
        })
    }

    /// Collects the votes (watching the transaction's subtree, no polling) and decides: abort on any abort vote
    /// or when `timeout` passes, commit when all voted commit. Writes the decision for the participants.
    pub fn decide(&self, timeout: Duration) -> Result<TxOutcome> {
        let zk = self.coord.client();
        let deadline = Instant::now() + timeout;
        let (path, names) = (self.path.clone(), self.participants.clone());
        self.coord.block_on(async move {
            let mut watcher = zk
                .watch(&path, zk::AddWatchMode::PersistentRecursive)
                .await?;
            let (decision, votes, timed_out) = loop {
                let mut votes = Vec::with_capacity(names.len());
                for n in &names {
                    let p = logic::join(&path, n);
                    let v = match retry_read(&zk, || zk.get_data(&p)).await {
                        Ok((d, _)) => Vote::parse(&d),
                        // A participant node deleted is a refusal.
                        Err(CoordError::Zk(zk::Error::NoNode)) => Some(Vote::Abort),
                        Err(e) => return Err(e),
                    };
                    votes.push(v);
                }
                if let Some(d) = logic::decide(&votes) {
                    break (d, votes, false);
                }
                match tokio::time::timeout_at(deadline.into(), watcher.changed()).await {
                    Ok(ev)
                        if ev.event_type == zk::EventType::Session
                            && ev.session_state.is_terminated() =>
                    {
                        return Err(CoordError::SessionExpired)
                    }
                    Ok(_) => continue,
                    Err(_) => break (Decision::Abort, votes, true),
                }
            };
            let opts = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
            let dpath = logic::join(&path, "decision");
            loop {
                match zk.create(&dpath, decision.as_bytes(), &opts).await {
                    Ok(_) | Err(zk::Error::NodeExists) => break,
                    Err(e) if client::transient(&e) => client::await_connected(&zk).await?,
                    Err(e) => return Err(e.into()),
                }
            }
            tracing::debug!(tx = %path, ?decision, timed_out, "two-phase commit decided");
            Ok(TxOutcome {
                decision,
                votes: names.into_iter().zip(votes).collect(),
                timed_out,
            })
        })
    }

    /// The transaction's path.
    pub fn path(&self) -> &str {
        &self.path
    }
}

/// One participant of a transaction.
#[derive(Debug, Clone)]
pub struct TxParticipant {
    coord: Coord,
    path: String,
    name: String,
}

impl TxParticipant {
    /// Participant `name` of the transaction at `tx_path`.
    pub fn new(coord: &Coord, tx_path: &str, name: &str) -> Result<TxParticipant> {
        check(&logic::join(tx_path, name))?;
        Ok(TxParticipant {
            coord: coord.clone(),
            path: tx_path.to_owned(),
            name: name.to_owned(),
        })
    }

    /// Waits for the transaction to exist and returns its proposal.
    pub fn proposal(&self, timeout: Duration) -> Result<Vec<u8>> {
        let zk = self.coord.client();
        let deadline = Instant::now() + timeout;
        let path = self.path.clone();
        self.coord.block_on(async move {
            loop {
                match zk.check_and_watch_stat(&path).await {
                    Ok((Some(_), _)) => return Ok(retry_read(&zk, || zk.get_data(&path)).await?.0),
                    Ok((None, w)) => {
                        tokio::time::timeout_at(deadline.into(), w.changed())
                            .await
                            .map_err(|_| CoordError::Timeout(timeout))?;
                    }
                    Err(e) if client::transient(&e) => client::await_connected(&zk).await?,
                    Err(e) => return Err(e.into()),
                }
            }
        })
    }

    /// Votes (writes the vote into this participant's node; idempotent).
    pub fn vote(&self, vote: Vote) -> Result<()> {
        let zk = self.coord.client();
        let p = logic::join(&self.path, &self.name);
        self.coord.block_on(async move {
            retry_read(&zk, || zk.set_data(&p, vote.as_bytes(), None))
                .await
                .map(|_| ())
        })
    }

    /// Waits for the coordinator's decision.
    pub fn outcome(&self, timeout: Duration) -> Result<Decision> {
        let zk = self.coord.client();
        let deadline = Instant::now() + timeout;
        let dpath = logic::join(&self.path, "decision");
        self.coord.block_on(async move {
            loop {
                match zk.check_and_watch_stat(&dpath).await {
                    Ok((Some(_), _)) => {
                        let (d, _) = retry_read(&zk, || zk.get_data(&dpath)).await?;
                        return Decision::parse(&d).ok_or_else(|| CoordError::BadData {
                            path: dpath.clone(),
                            reason: "not commit/abort",
                        });
                    }
                    Ok((None, w)) => {
                        tokio::time::timeout_at(deadline.into(), w.changed())
                            .await
                            .map_err(|_| CoordError::Timeout(timeout))?;
                    }
                    Err(e) if client::transient(&e) => client::await_connected(&zk).await?,
                    Err(e) => return Err(e.into()),
                }
            }
        })
    }
}
