//! Distributed queue and priority queue (ZooKeeper "Recipes and Solutions"): items are persistent sequential
//! nodes `qn-<priority>-<guid>-<seq>`; a consumer takes the first item in (priority, sequence) order by
//! deleting it (the delete is the claim: of two consumers reading one item, one delete succeeds), and watches the
//! children only when the queue is empty.

use std::time::{Duration, Instant};

use zookeeper_client as zk;

use crate::client::{self, check, retry_read};
use crate::logic;
use crate::{Coord, CoordError, Result};

/// Priority of [`Queue::put`]: the middle of the range, so callers can go either way.
pub const DEFAULT_PRIORITY: u8 = 100;

/// A FIFO queue with optional priorities (lower values first).
#[derive(Debug, Clone)]
pub struct Queue {
    coord: Coord,
    dir: String,
}

impl Queue {
    /// A queue at `dir` (created when missing).
    pub fn new(coord: &Coord, dir: &str) -> Result<Queue> {
        check(dir)?;
        coord.ensure_path(dir)?;
        Ok(Queue {
            coord: coord.clone(),
            dir: dir.to_owned(),
        })
    }

    /// Appends an item at [`DEFAULT_PRIORITY`]; returns its node name.
    pub fn put(&self, data: &[u8]) -> Result<String> {
        self.put_with_priority(data, DEFAULT_PRIORITY)
    }

    /// Appends an item with a priority (0 is served first). Across a connection loss the item is created
    /// exactly once: its GUID finds it if the lost create had succeeded.
    pub fn put_with_priority(&self, data: &[u8], priority: u8) -> Result<String> {
        let zk = self.coord.client();
        let guid = client::new_guid();
        let prefix = logic::join(&self.dir, &logic::queue_item_prefix(priority, &guid));
        let dir = self.dir.clone();
        self.coord.block_on(async move {
            let opts = zk::CreateMode::PersistentSequential.with_acls(zk::Acls::anyone_all());
            let mut retried = false;
            loop {
                if retried {
                    let children = retry_read(&zk, || zk.list_children(&dir)).await?;
                    if let Some(c) = children.into_iter().find(|c| c.contains(&guid)) {
                        return Ok(c);
                    }
                }
                match zk.create(&prefix, data, &opts).await {
                    Ok((_, seq)) => {
                        return Ok(format!(
                            "{}{seq}",
                            logic::queue_item_prefix(priority, &guid)
                        ))
                    }
                    Err(e) if client::transient(&e) => {
                        client::await_connected(&zk).await?;
                        retried = true;
                    }
                    Err(e) => return Err(e.into()),
                }
            }
        })
    }

    /// Takes the first item, waiting up to `timeout` (forever with `None`) when the queue is empty;
    /// `Ok(None)` on timeout.
    ///
    /// A connection loss during the claiming delete leaves it unknown whether the claim succeeded; the item is
    /// then returned (at-least-once: another consumer may have taken it too).
    pub fn take(&self, timeout: Option<Duration>) -> Result<Option<Vec<u8>>> {
        let zk = self.coord.client();
        let deadline = timeout.map(|t| Instant::now() + t);
        let dir = self.dir.clone();
        self.coord.block_on(async move {
            loop {
                let (children, watcher) = match zk.list_and_watch_children(&dir).await {
                    Ok(r) => r,
                    Err(e) if client::transient(&e) => {
                        client::await_connected(&zk).await?;
                        continue;
                    }
                    Err(e) => return Err(CoordError::from(e)),
                };
                for item in logic::queue_order(&children) {
                    let path = logic::join(&dir, &item);
                    let data = match retry_read(&zk, || zk.get_data(&path)).await {
                        Ok((d, _)) => d,
                        Err(CoordError::Zk(zk::Error::NoNode)) => continue,
                        Err(e) => return Err(e),
                    };
                    match zk.delete(&path, None).await {
                        Ok(()) => return Ok(Some(data)),
                        Err(zk::Error::NoNode) => continue,
                        Err(e) if client::transient(&e) => {
                            client::await_connected(&zk).await?;
                            return Ok(Some(data));
                        }
                        Err(e) => return Err(e.into()),
                    }
                }
                match deadline {
                    Some(d) => {
                        if tokio::time::timeout_at(d.into(), watcher.changed())
                            .await
                            .is_err()
                        {
                            return Ok(None);
                        }
                    }
                    None => {
                        watcher.changed().await;
                    }
                }
            }
        })
    }

    /// Items waiting.
    pub fn len(&self) -> Result<usize> {
        Ok(logic::queue_order(&self.coord.children(&self.dir)?).len())
    }

    /// True when no item waits.
    pub fn is_empty(&self) -> Result<bool> {
        Ok(self.len()? == 0)
    }
}
