//! Group membership: each member is an ephemeral node `<dir>/<member>` carrying its data; it disappears when
//! the member leaves or its session ends. Watchers list the children with a watch.

use std::time::{Duration, Instant};

use zookeeper_client as zk;

use crate::client::{self, check, SessionStatus};
use crate::hold::Holding;
use crate::logic;
use crate::{Coord, CoordError, Result};

/// A group at a directory path.
#[derive(Debug, Clone)]
pub struct Group {
    coord: Coord,
    dir: String,
}

impl Group {
    /// A group at `dir` (created when missing).
    pub fn new(coord: &Coord, dir: &str) -> Result<Group> {
        check(dir)?;
        coord.ensure_path(dir)?;
        Ok(Group {
            coord: coord.clone(),
            dir: dir.to_owned(),
        })
    }

    /// Joins as `member` (a node name: no `/`). The returned holding says when membership is lost (session
    /// expiry); dropping it leaves. A node of the same name left by this very session (a create whose reply was
    /// lost) is adopted; one owned by another session is an error ([`CoordError::MemberExists`]).
    pub fn join(&self, member: &str, data: &[u8]) -> Result<Holding> {
        let path = logic::join(&self.dir, member);
        check(&path)?;
        if member.contains('/') {
            return Err(CoordError::InvalidPath {
                path,
                reason: "member name contains '/'",
            });
        }
        let zk = self.coord.client();
        let p = path.clone();
        let czxid = self
            .coord
            .block_on(async move { create_member(&zk, &p, data, &[]).await })?;
        Ok(Holding::start(&self.coord, path, czxid as u64))
    }

    /// The directory.
    pub fn dir(&self) -> &str {
        &self.dir
    }

    /// Current members, sorted.
    pub fn members(&self) -> Result<Vec<String>> {
        self.coord.children(&self.dir)
    }

    /// Blocks until the membership differs from `known` (or `timeout` passes) and returns it.
    pub fn wait_change(&self, known: &[String], timeout: Duration) -> Result<Vec<String>> {
        let zk = self.coord.client();
        let deadline = Instant::now() + timeout;
        let dir = self.dir.clone();
        self.coord.block_on(async move {
            loop {
                let (mut now, watcher) = match zk.list_and_watch_children(&dir).await {
                    Ok(r) => r,
                    Err(e) if client::transient(&e) => {
                        client::await_connected(&zk).await?;
                        continue;
                    }
                    Err(e) => return Err(CoordError::from(e)),
                };
                now.sort();
                if now != known {
                    return Ok(now);
                }
                if tokio::time::timeout_at(deadline.into(), watcher.changed())
                    .await
                    .is_err()
                {
                    return Ok(now);
                }
            }
        })
    }
}

/// Creates the ephemeral member node `path` on `zk`'s session and returns its creation zxid. A node of that name
/// left by this very session (a create whose reply was lost) is adopted; one left by a session in `stale` (this
/// member's own expired sessions, which a restarted ensemble keeps for up to a session timeout) is deleted and
/// created again; one owned by any other session is [`CoordError::MemberExists`].
pub(crate) async fn create_member(
    zk: &zk::Client,
    path: &str,
    data: &[u8],
    stale: &[i64],
) -> Result<i64> {
    let me = zk.session_id().0;
    let opts = zk::CreateMode::Ephemeral.with_acls(zk::Acls::anyone_all());
    loop {
        match zk.create(path, data, &opts).await {
            Ok((stat, _)) => return Ok(stat.czxid),
            Err(e) if e == zk::Error::NodeExists || client::transient(&e) => {
                if SessionStatus::from_zk(zk.state()) != SessionStatus::Connected {
                    client::await_connected(zk).await?;
                }
                match zk.check_stat(path).await {
                    Ok(Some(stat)) if stat.ephemeral_owner == me => return Ok(stat.czxid),
                    Ok(Some(stat)) if stale.contains(&stat.ephemeral_owner) => {
                        tracing::debug!(member = %path, "deleting the node of this member's expired session");
                        client::delete_quietly(zk, path).await?;
                    }
                    Ok(Some(_)) => return Err(CoordError::MemberExists(path.to_owned())),
                    Ok(None) => continue,
                    Err(e) if client::transient(&e) => continue,
                    Err(e) => return Err(e.into()),
                }
            }
            Err(e) => return Err(e.into()),
        }
    }
}
