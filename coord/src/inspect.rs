//! Recognises the recipes under a path from their node names, for `tickbox coord state`: locks and their
//! holders, elections and their leaders, double barriers, queues, groups, sharded groups and their owners,
//! transactions.

use crate::logic::{self, Decision, SeqNode, Vote};
use crate::{Coord, Result};

/// One recipe found under the inspected path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RecipeState {
    /// An exclusive lock.
    Lock {
        /// Its directory.
        path: String,
        /// The holder's node (its sequence is the fencing token), and its data.
        holder: Option<(SeqNode, Vec<u8>)>,
        /// Contenders queued behind the holder.
        waiting: usize,
    },
    /// A shared (read/write) lock.
    SharedLock {
        /// Its directory.
        path: String,
        /// The holders (readers at the head, or one writer).
        holders: Vec<SeqNode>,
        /// Contenders queued behind them.
        waiting: usize,
    },
    /// A leader election.
    Election {
        /// Its directory.
        path: String,
        /// The leader's node and id.
        leader: Option<(SeqNode, Vec<u8>)>,
        /// Candidates, the leader included.
        candidates: usize,
    },
    /// A double barrier.
    DoubleBarrier {
        /// Its directory.
        path: String,
        /// Parties present.
        present: usize,
        /// Whether the `ready` flag is set.
        ready: bool,
    },
    /// A queue.
    Queue {
        /// Its directory.
        path: String,
        /// Items waiting.
        items: usize,
    },
    /// A group of ephemeral members (also a sharded group's `members`).
    Group {
        /// Its directory.
        path: String,
        /// Member names.
        members: Vec<String>,
    },
    /// A sharded group ([`crate::Shards`]): its members and each shard's owner.
    Shards {
        /// Its directory (holding `members` and `shards`).
        path: String,
        /// Member names.
        members: Vec<String>,
        /// Per shard, in index order: the owner's member name and fencing token, `None` while unowned.
        owners: Vec<(u32, Option<(String, u64)>)>,
    },
    /// A two-phase-commit transaction (recognised once its `decision` node exists).
    Transaction {
        /// The transaction node.
        path: String,
        /// Participants and their votes so far.
        votes: Vec<(String, Option<Vote>)>,
        /// The decision, once written.
        decision: Option<Decision>,
    },
}

/// Bounds of one inspection, so that a huge tree cannot make the CLI run away.
const MAX_NODES: usize = 10_000;
const MAX_DEPTH: usize = 32;

/// Walks the tree under `path` (bounded: 10,000 nodes, depth 32) and returns every recipe it recognises, in
/// path order.
pub fn inspect(coord: &Coord, path: &str) -> Result<Vec<RecipeState>> {
    crate::client::check(path)?;
    let mut out = Vec::new();
    let mut stack = vec![(path.to_owned(), 0usize)];
    let mut visited = 0usize;
    while let Some((p, depth)) = stack.pop() {
        visited += 1;
        if visited > MAX_NODES {
            tracing::warn!(path, "inspection stopped at {MAX_NODES} nodes");
            break;
        }
        let children = match coord.children(&p) {
            Ok(c) => c,
            Err(crate::CoordError::Zk(zookeeper_client::Error::NoNode)) => continue,
            Err(e) => return Err(e),
        };
        let seq = logic::sorted_nodes(&children, &[]);
        let kinds: Vec<&str> = seq.iter().map(|n| n.kind.as_str()).collect();
        let has = |k: &str| kinds.contains(&k);
        let data_of = |n: &SeqNode| -> Result<Vec<u8>> {
            Ok(coord
                .get(&logic::join(&p, &n.name))?
                .map(|(d, _)| d)
                .unwrap_or_default())
        };
        let mut recurse = true;
        let named = |n: &str| children.iter().any(|c| c == n);
        if named("members") && named("shards") {
            let shard_dir = logic::join(&p, "shards");
            let mut indices: Vec<u32> = coord
                .children(&shard_dir)?
                .iter()
                .filter_map(|c| c.parse().ok())
                .collect();
            indices.sort_unstable();
            let count = indices.last().map_or(0, |l| l + 1);
            let owners = crate::Shards::new(coord, &p, count)?.owners()?;
            out.push(RecipeState::Shards {
                path: p.clone(),
                members: coord.children(&logic::join(&p, "members"))?,
                owners: owners.into_iter().collect(),
            });
            recurse = false;
        } else if has("lock") {
            let locks = logic::sorted_nodes(&children, &["lock"]);
            let holder = match locks.first() {
                Some(h) => Some((h.clone(), data_of(h)?)),
                None => None,
            };
            out.push(RecipeState::Lock {
                path: p.clone(),
                holder,
                waiting: locks.len().saturating_sub(1),
            });
            recurse = false;
        } else if has("read") || has("write") {
            let nodes = logic::sorted_nodes(&children, &["read", "write"]);
            let holders: Vec<SeqNode> =
                logic::shared_holders(&nodes).into_iter().cloned().collect();
            let waiting = nodes.len() - holders.len();
            out.push(RecipeState::SharedLock {
                path: p.clone(),
                holders,
                waiting,
            });
            recurse = false;
        } else if has("n") {
            let nodes = logic::sorted_nodes(&children, &["n"]);
            let leader = match nodes.first() {
                Some(l) => Some((l.clone(), data_of(l)?)),
                None => None,
            };
            out.push(RecipeState::Election {
                path: p.clone(),
                leader,
                candidates: nodes.len(),
            });
            recurse = false;
        } else if has("p") || (children.iter().any(|c| c == "ready") && children.len() == 1) {
            out.push(RecipeState::DoubleBarrier {
                path: p.clone(),
                present: logic::sorted_nodes(&children, &["p"]).len(),
                ready: children.iter().any(|c| c == "ready"),
            });
            recurse = false;
        } else if !children.is_empty() && logic::queue_order(&children).len() == children.len() {
            out.push(RecipeState::Queue {
                path: p.clone(),
                items: children.len(),
            });
            recurse = false;
        } else if children.iter().any(|c| c == "decision") {
            let mut votes = Vec::new();
            for c in children.iter().filter(|c| *c != "decision") {
                let d = coord
                    .get(&logic::join(&p, c))?
                    .map(|(d, _)| d)
                    .unwrap_or_default();
                votes.push((c.clone(), Vote::parse(&d)));
            }
            let decision = coord
                .get(&logic::join(&p, "decision"))?
                .and_then(|(d, _)| Decision::parse(&d));
            out.push(RecipeState::Transaction {
                path: p.clone(),
                votes,
                decision,
            });
            recurse = false;
        } else if !children.is_empty() && seq.is_empty() {
            // A group: every child an ephemeral leaf.
            let mut all_ephemeral = true;
            for c in &children {
                match coord.get(&logic::join(&p, c))? {
                    Some((_, st)) if st.ephemeral_owner != 0 && st.num_children == 0 => {}
                    _ => {
                        all_ephemeral = false;
                        break;
                    }
                }
            }
            if all_ephemeral {
                out.push(RecipeState::Group {
                    path: p.clone(),
                    members: children.clone(),
                });
                recurse = false;
            }
        }
        if recurse && depth < MAX_DEPTH {
            for c in children.iter().rev() {
                if p == "/" && c == "zookeeper" {
                    continue;
                }
                stack.push((logic::join(&p, c), depth + 1));
            }
        }
    }
    Ok(out)
}
