//! How the recipe state under a path and a node's metadata are shown: one tab-separated line per recipe (for
//! people and `cut`), or one JSON object per recipe. Used by `tickbox coord state` and `get --stat`; kept here so
//! any program inspecting a fleet prints the same.

use serde_json::json;

use crate::client::NodeStat;
use crate::inspect::RecipeState;

/// Node data as text (invalid UTF-8 replaced).
fn text(d: &[u8]) -> String {
    String::from_utf8_lossy(d).into_owned()
}

impl RecipeState {
    /// One line: `PATH<TAB>RECIPE<TAB>details`, e.g. `/locks/a\tlock\tholder=lock-0000000003 token=3 data="x" waiting=1`.
    pub fn line(&self) -> String {
        match self {
            RecipeState::Lock {
                path,
                holder,
                waiting,
            } => match holder {
                Some((n, d)) => format!(
                    "{path}\tlock\tholder={} token={} data={:?} waiting={waiting}",
                    n.name,
                    n.seq,
                    text(d)
                ),
                None => format!("{path}\tlock\tfree"),
            },
            RecipeState::SharedLock {
                path,
                holders,
                waiting,
            } => {
                let hs: Vec<String> = holders
                    .iter()
                    .map(|h| format!("{}:{}", h.kind, h.seq))
                    .collect();
                format!(
                    "{path}\tshared-lock\tholders={} waiting={waiting}",
                    hs.join(",")
                )
            }
            RecipeState::Election {
                path,
                leader,
                candidates,
            } => match leader {
                Some((n, d)) => format!(
                    "{path}\telection\tleader={:?} token={} candidates={candidates}",
                    text(d),
                    n.seq
                ),
                None => format!("{path}\telection\tno-leader"),
            },
            RecipeState::DoubleBarrier {
                path,
                present,
                ready,
            } => {
                format!("{path}\tdouble-barrier\tpresent={present} ready={ready}")
            }
            RecipeState::Queue { path, items } => format!("{path}\tqueue\titems={items}"),
            RecipeState::Group { path, members } => {
                format!("{path}\tgroup\tmembers={}", members.join(","))
            }
            RecipeState::Shards {
                path,
                members,
                owners,
            } => {
                let os: Vec<String> = owners
                    .iter()
                    .map(|(i, o)| match o {
                        Some((m, t)) => format!("{i}:{m}/{t}"),
                        None => format!("{i}:-"),
                    })
                    .collect();
                format!(
                    "{path}\tshards\tmembers={} owners={}",
                    members.join(","),
                    os.join(",")
                )
            }
            RecipeState::Transaction {
                path,
                votes,
                decision,
            } => {
                let vs: Vec<String> = votes.iter().map(|(n, v)| format!("{n}:{v:?}")).collect();
                format!(
                    "{path}\ttransaction\tdecision={decision:?} votes={}",
                    vs.join(",")
                )
            }
        }
    }

    /// One JSON object with `path`, `recipe` and the recipe's fields (node data as text, decisions and votes in
    /// lower case, `null` when absent).
    pub fn to_json(&self) -> serde_json::Value {
        match self {
            RecipeState::Lock {
                path,
                holder,
                waiting,
            } => json!({
                "path": path, "recipe": "lock", "waiting": waiting,
                "holder": holder.as_ref().map(|(n, d)| json!({"node": n.name, "token": n.seq, "data": text(d)})),
            }),
            RecipeState::SharedLock {
                path,
                holders,
                waiting,
            } => json!({
                "path": path, "recipe": "shared-lock", "waiting": waiting,
                "holders": holders.iter().map(|h| json!({"node": h.name, "kind": h.kind, "token": h.seq})).collect::<Vec<_>>(),
            }),
            RecipeState::Election {
                path,
                leader,
                candidates,
            } => json!({
                "path": path, "recipe": "election", "candidates": candidates,
                "leader": leader.as_ref().map(|(n, d)| json!({"node": n.name, "token": n.seq, "id": text(d)})),
            }),
            RecipeState::DoubleBarrier {
                path,
                present,
                ready,
            } => {
                json!({"path": path, "recipe": "double-barrier", "present": present, "ready": ready})
            }
            RecipeState::Queue { path, items } => {
                json!({"path": path, "recipe": "queue", "items": items})
            }
            RecipeState::Group { path, members } => {
                json!({"path": path, "recipe": "group", "members": members})
            }
            RecipeState::Shards {
                path,
                members,
                owners,
            } => json!({
                "path": path, "recipe": "shards", "members": members,
                "owners": owners.iter().map(|(i, o)| json!({
                    "shard": i,
                    "owner": o.as_ref().map(|(m, _)| m),
                    "token": o.as_ref().map(|(_, t)| t),
                })).collect::<Vec<_>>(),
            }),
            RecipeState::Transaction {
                path,
                votes,
                decision,
            } => json!({
                "path": path, "recipe": "transaction",
                "decision": decision.map(|d| format!("{d:?}").to_lowercase()),
                "votes": votes.iter().map(|(n, v)| json!({"participant": n, "vote": v.map(|v| format!("{v:?}").to_lowercase())})).collect::<Vec<_>>(),
            }),
        }
    }
}

impl NodeStat {
    /// One line of the metadata worth showing: `version=… children=… ephemeral_owner=0x… czxid=0x… mtime_ms=…`.
    pub fn summary_line(&self) -> String {
        format!(
            "version={} children={} ephemeral_owner={:#x} czxid={:#x} mtime_ms={}",
            self.version, self.num_children, self.ephemeral_owner, self.czxid, self.mtime_ms
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::logic::SeqNode;

    #[test]
    fn lines_and_json() {
        let free = RecipeState::Lock {
            path: "/l".into(),
            holder: None,
            waiting: 0,
        };
        assert_eq!(free.line(), "/l\tlock\tfree");
        assert_eq!(free.to_json()["holder"], serde_json::Value::Null);
        assert_eq!(free.to_json()["recipe"], "lock");
        let queue = RecipeState::Queue {
            path: "/q".into(),
            items: 3,
        };
        assert_eq!(queue.line(), "/q\tqueue\titems=3");
        assert_eq!(queue.to_json()["items"], 3);
        let held = RecipeState::Lock {
            path: "/l".into(),
            holder: Some((SeqNode::parse("lock-g-0000000007").unwrap(), b"me".to_vec())),
            waiting: 2,
        };
        assert_eq!(
            held.line(),
            "/l\tlock\tholder=lock-g-0000000007 token=7 data=\"me\" waiting=2"
        );
        assert_eq!(held.to_json()["holder"]["token"], 7);
        let shards = RecipeState::Shards {
            path: "/g".into(),
            members: vec!["a".into(), "b".into()],
            owners: vec![(0, Some(("a".into(), 3))), (1, None)],
        };
        assert_eq!(shards.line(), "/g\tshards\tmembers=a,b owners=0:a/3,1:-");
        assert_eq!(shards.to_json()["owners"][0]["owner"], "a");
        assert_eq!(
            shards.to_json()["owners"][1]["token"],
            serde_json::Value::Null
        );
    }
}
