//! The recipes' decisions as pure functions (sans-IO): given the children of a recipe's directory and
//! one's own node, who holds, whom to watch, when to proceed. The I/O layers list children and set watches;
//! these functions decide, and are unit-tested without a server.
//!
//! Node names follow one grammar: `<kind>-<guid>-<sequence>`, where `kind` is a short lowercase word
//! (`lock`, `read`, `write`, `n`, `p`, `qn`…), `guid` identifies the creating handle (so a create whose reply
//! was lost to a connection loss is recognised afterwards, as the ZooKeeper recipes advise) and `sequence` is the
//! ten-digit (or nineteen-digit) counter ZooKeeper appends to sequential nodes.
#![deny(clippy::disallowed_methods, clippy::disallowed_types)]

use std::cmp::Ordering;

/// One sequential node of a recipe directory, parsed from its name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SeqNode {
    /// The full child name, e.g. `lock-3f2a…-0000000007`.
    pub name: String,
    /// The recipe kind before the first `-` (`lock`, `read`, `write`, `n`, `p`, `qn`, …).
    pub kind: String,
    /// The creator's GUID (empty when the name carries none, e.g. a queue item).
    pub guid: String,
    /// The sequence ZooKeeper appended: the fencing token of a lock or a leadership.
    pub seq: u64,
}

impl SeqNode {
    /// Parses `<kind>-<guid>-<seq>` (or `<kind>-<seq>`); `None` for names of another shape
    /// (e.g. a barrier's `ready` flag), which recipes ignore.
    pub fn parse(name: &str) -> Option<SeqNode> {
        let (head, digits) = name.rsplit_once('-')?;
        if digits.len() < 10 || !digits.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        let seq: u64 = digits.parse().ok()?;
        let (kind, guid) = match head.split_once('-') {
            Some((kind, guid)) => (kind, guid),
            None => (head, ""),
        };
        if kind.is_empty() {
            return None;
        }
        Some(SeqNode {
            name: name.to_owned(),
            kind: kind.to_owned(),
            guid: guid.to_owned(),
            seq,
        })
    }
}

/// Parses and sorts (by sequence) the children that are sequential nodes of one of `kinds`
/// (all kinds when `kinds` is empty); other children are ignored.
pub fn sorted_nodes<S: AsRef<str>>(children: &[S], kinds: &[&str]) -> Vec<SeqNode> {
    let mut nodes: Vec<SeqNode> = children
        .iter()
        .filter_map(|c| SeqNode::parse(c.as_ref()))
        .filter(|n| kinds.is_empty() || kinds.contains(&n.kind.as_str()))
        .collect();
    nodes.sort_by(|a, b| a.seq.cmp(&b.seq).then_with(|| a.name.cmp(&b.name)));
    nodes
}

/// Finds the node this handle created (by GUID): how a create that may have succeeded before a
/// connection loss is recognised.
pub fn find_own<'a>(nodes: &'a [SeqNode], guid: &str) -> Option<&'a SeqNode> {
    nodes.iter().find(|n| n.guid == guid)
}

/// What a contender for a lock or a leadership should do next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Turn {
    /// It holds the lock (is the leader); the token is its node's sequence.
    Holds {
        /// Fencing token: the sequence of the holder's node.
        token: u64,
    },
    /// It waits: watch (exists) this one node, its predecessor, and decide again when it changes.
    Watch {
        /// The child name to watch.
        predecessor: String,
    },
    /// Its own node is not among the children (deleted, or its session expired).
    Missing,
}

/// Exclusive lock and leader election: the lowest node holds; every other watches only the node just
/// below its own (herd-free: a release wakes exactly one waiter).
pub fn exclusive_turn(nodes: &[SeqNode], own: &str) -> Turn {
    let Some(i) = nodes.iter().position(|n| n.name == own) else {
        return Turn::Missing;
    };
    if i == 0 {
        Turn::Holds {
            token: nodes[0].seq,
        }
    } else {
        Turn::Watch {
            predecessor: nodes[i - 1].name.clone(),
        }
    }
}

/// Kind of a shared (read/write) lock request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// Shared: many readers hold together, none while a writer holds.
    Read,
    /// Exclusive: one writer, no readers.
    Write,
}

impl Access {
    /// The node kind used in names.
    pub fn kind(self) -> &'static str {
        match self {
            Access::Read => "read",
            Access::Write => "write",
        }
    }
}

/// Shared lock: a reader holds when no `write` node is below it and otherwise watches the highest write node
/// below it; a writer holds when no node at all is below it and otherwise watches the node just below it.
pub fn shared_turn(nodes: &[SeqNode], own: &str, access: Access) -> Turn {
    let Some(i) = nodes.iter().position(|n| n.name == own) else {
        return Turn::Missing;
    };
    match access {
        Access::Write => exclusive_turn(nodes, own),
        Access::Read => match nodes[..i]
            .iter()
            .rev()
            .find(|n| n.kind == Access::Write.kind())
        {
            None => Turn::Holds {
                token: nodes[i].seq,
            },
            Some(w) => Turn::Watch {
                predecessor: w.name.clone(),
            },
        },
    }
}

/// Who holds a shared lock now: the maximal prefix of readers, or the single lowest writer.
pub fn shared_holders(nodes: &[SeqNode]) -> Vec<&SeqNode> {
    match nodes.first() {
        None => Vec::new(),
        Some(first) if first.kind == Access::Write.kind() => vec![first],
        Some(_) => nodes
            .iter()
            .take_while(|n| n.kind != Access::Write.kind())
            .collect(),
    }
}

/// Double barrier, leave phase: what a party does next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LeaveStep {
    /// No party node remains: everyone has left.
    Done,
    /// Own node is the only one left: delete it (and the ready flag) and go.
    DeleteOwnAndGo,
    /// Own node is the lowest (the exit flag): wait until this node (the highest) is gone.
    WaitFor(String),
    /// Delete own node (when it still exists), then wait until this node (the lowest) is gone.
    DeleteOwnThenWaitFor(String),
}

/// The double barrier's leave rule from ZooKeeper's recipes: the lowest node is the exit flag and goes last.
pub fn leave_step(parties: &[SeqNode], own: &str) -> LeaveStep {
    if parties.is_empty() {
        return LeaveStep::Done;
    }
    let mine = parties.iter().position(|n| n.name == own);
    if parties.len() == 1 && mine == Some(0) {
        return LeaveStep::DeleteOwnAndGo;
    }
    match mine {
        Some(0) => LeaveStep::WaitFor(parties[parties.len() - 1].name.clone()),
        _ => LeaveStep::DeleteOwnThenWaitFor(parties[0].name.clone()),
    }
}

/// A queue item name prefix: `qn-<priority:3>-<guid>-` (ZooKeeper appends the sequence); lower priority values
/// are served first, then FIFO. The GUID lets a producer recognise an item it created before a connection loss.
pub fn queue_item_prefix(priority: u8, guid: &str) -> String {
    format!("qn-{priority:03}-{guid}-")
}

/// Parses a queue item's (priority, sequence); `None` for foreign names.
pub fn parse_queue_item(name: &str) -> Option<(u8, u64)> {
    let rest = name.strip_prefix("qn-")?;
    let (prio, rest) = rest.split_once('-')?;
    let seq = rest.rsplit_once('-').map_or(rest, |(_, s)| s);
    if prio.len() != 3 || seq.len() < 10 || !seq.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some((prio.parse().ok()?, seq.parse().ok()?))
}

/// Queue items in service order (priority, then sequence).
pub fn queue_order<S: AsRef<str>>(children: &[S]) -> Vec<String> {
    let mut items: Vec<(u8, u64, &str)> = children
        .iter()
        .filter_map(|c| parse_queue_item(c.as_ref()).map(|(p, s)| (p, s, c.as_ref())))
        .collect();
    items.sort_by(|a, b| match a.0.cmp(&b.0) {
        Ordering::Equal => a.1.cmp(&b.1),
        o => o,
    });
    items.into_iter().map(|(_, _, n)| n.to_owned()).collect()
}

/// A two-phase-commit vote.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Vote {
    /// The participant can commit.
    Commit,
    /// The participant refuses: the transaction aborts.
    Abort,
}

impl Vote {
    /// Bytes written into the participant's node.
    pub fn as_bytes(self) -> &'static [u8] {
        match self {
            Vote::Commit => b"commit",
            Vote::Abort => b"abort",
        }
    }

    /// Parses a participant node's data: `None` while it has not voted (empty or unknown data).
    pub fn parse(data: &[u8]) -> Option<Vote> {
        match data {
            b"commit" => Some(Vote::Commit),
            b"abort" => Some(Vote::Abort),
            _ => None,
        }
    }
}

/// The outcome of a two-phase commit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// Every participant voted commit.
    Commit,
    /// Some participant voted abort, or a vote did not arrive in time.
    Abort,
}

impl Decision {
    /// Bytes written into the transaction's `decision` node.
    pub fn as_bytes(self) -> &'static [u8] {
        match self {
            Decision::Commit => b"commit",
            Decision::Abort => b"abort",
        }
    }

    /// Parses the `decision` node's data.
    pub fn parse(data: &[u8]) -> Option<Decision> {
        match data {
            b"commit" => Some(Decision::Commit),
            b"abort" => Some(Decision::Abort),
            _ => None,
        }
    }
}

/// The coordinator's rule: abort on any abort vote; commit when all voted commit; otherwise undecided (wait,
/// until the timeout turns it into an abort).
pub fn decide(votes: &[Option<Vote>]) -> Option<Decision> {
    if votes.contains(&Some(Vote::Abort)) {
        Some(Decision::Abort)
    } else if votes.iter().all(|v| *v == Some(Vote::Commit)) {
        Some(Decision::Commit)
    } else {
        None
    }
}

/// Joins a directory and a child name into a path.
pub fn join(dir: &str, child: &str) -> String {
    if dir == "/" {
        format!("/{child}")
    } else {
        format!("{dir}/{child}")
    }
}

/// Checks a ZooKeeper path: absolute, no trailing or doubled `/`, no `.`/`..` segments, no control bytes.
pub fn validate_path(path: &str) -> Result<(), &'static str> {
    if !path.starts_with('/') {
        return Err("must start with '/'");
    }
    if path == "/" {
        return Ok(());
    }
    if path.ends_with('/') {
        return Err("must not end with '/'");
    }
    for seg in path[1..].split('/') {
        if seg.is_empty() {
            return Err("empty segment");
        }
        if seg == "." || seg == ".." {
            return Err("relative segment");
        }
    }
    if path.chars().any(|c| c.is_control()) {
        return Err("control character");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nodes(names: &[&str]) -> Vec<SeqNode> {
        sorted_nodes(names, &[])
    }

    #[test]
    fn parses_names() {
        let n = SeqNode::parse("lock-abcd-0000000012").unwrap();
        assert_eq!(
            (n.kind.as_str(), n.guid.as_str(), n.seq),
            ("lock", "abcd", 12)
        );
        let n = SeqNode::parse("p-0000000003").unwrap();
        assert_eq!((n.kind.as_str(), n.guid.as_str(), n.seq), ("p", "", 3));
        assert!(SeqNode::parse("ready").is_none());
        assert!(SeqNode::parse("lock-abcd-12").is_none());
        assert!(SeqNode::parse("-0000000001").is_none());
        assert!(SeqNode::parse("lock-abcd-00000000x2").is_none());
        // 64-bit sequences print in 19 digits.
        assert_eq!(
            SeqNode::parse("n-g-0000000002147483648").unwrap().seq,
            2_147_483_648
        );
    }

    #[test]
    fn sorts_by_sequence_not_name() {
        let ns = nodes(&[
            "lock-zz-0000000002",
            "lock-aa-0000000010",
            "ready",
            "lock-mm-0000000001",
        ]);
        let seqs: Vec<u64> = ns.iter().map(|n| n.seq).collect();
        assert_eq!(seqs, vec![1, 2, 10]);
        assert_eq!(find_own(&ns, "aa").unwrap().seq, 10);
        assert!(find_own(&ns, "qq").is_none());
    }

    #[test]
    fn exclusive_watches_only_predecessor() {
        let ns = nodes(&[
            "lock-a-0000000001",
            "lock-b-0000000002",
            "lock-c-0000000003",
        ]);
        assert_eq!(
            exclusive_turn(&ns, "lock-a-0000000001"),
            Turn::Holds { token: 1 }
        );
        assert_eq!(
            exclusive_turn(&ns, "lock-c-0000000003"),
            Turn::Watch {
                predecessor: "lock-b-0000000002".into()
            }
        );
        assert_eq!(
            exclusive_turn(&ns, "lock-b-0000000002"),
            Turn::Watch {
                predecessor: "lock-a-0000000001".into()
            }
        );
        assert_eq!(exclusive_turn(&ns, "lock-d-0000000004"), Turn::Missing);
        // Each waiter watches a distinct node: no herd.
        let watched: std::collections::HashSet<_> = ns[1..]
            .iter()
            .map(|n| match exclusive_turn(&ns, &n.name) {
                Turn::Watch { predecessor } => predecessor,
                t => panic!("{t:?}"),
            })
            .collect();
        assert_eq!(watched.len(), ns.len() - 1);
    }

    #[test]
    fn shared_lock_rules() {
        let ns = nodes(&[
            "read-a-0000000001",
            "read-b-0000000002",
            "write-c-0000000003",
            "read-d-0000000004",
            "write-e-0000000005",
        ]);
        assert_eq!(
            shared_turn(&ns, "read-b-0000000002", Access::Read),
            Turn::Holds { token: 2 }
        );
        assert_eq!(
            shared_turn(&ns, "write-c-0000000003", Access::Write),
            Turn::Watch {
                predecessor: "read-b-0000000002".into()
            }
        );
        assert_eq!(
            shared_turn(&ns, "read-d-0000000004", Access::Read),
            Turn::Watch {
                predecessor: "write-c-0000000003".into()
            }
        );
        assert_eq!(
            shared_turn(&ns, "write-e-0000000005", Access::Write),
            Turn::Watch {
                predecessor: "read-d-0000000004".into()
            }
        );
        let holders: Vec<u64> = shared_holders(&ns).iter().map(|n| n.seq).collect();
        assert_eq!(holders, vec![1, 2]);
        let ns = nodes(&["write-c-0000000003", "read-d-0000000004"]);
        let holders: Vec<u64> = shared_holders(&ns).iter().map(|n| n.seq).collect();
        assert_eq!(holders, vec![3]);
    }

    #[test]
    fn double_barrier_leave_rule() {
        let ns = nodes(&["p-a-0000000001", "p-b-0000000002", "p-c-0000000003"]);
        assert_eq!(
            leave_step(&ns, "p-a-0000000001"),
            LeaveStep::WaitFor("p-c-0000000003".into())
        );
        assert_eq!(
            leave_step(&ns, "p-b-0000000002"),
            LeaveStep::DeleteOwnThenWaitFor("p-a-0000000001".into())
        );
        // Already deleted own node: keep waiting on the lowest.
        assert_eq!(
            leave_step(&ns, "p-z-0000000009"),
            LeaveStep::DeleteOwnThenWaitFor("p-a-0000000001".into())
        );
        let one = nodes(&["p-a-0000000001"]);
        assert_eq!(
            leave_step(&one, "p-a-0000000001"),
            LeaveStep::DeleteOwnAndGo
        );
        assert_eq!(leave_step(&[], "p-a-0000000001"), LeaveStep::Done);
    }

    #[test]
    fn priority_queue_order() {
        let order = queue_order(&[
            "qn-005-g-0000000001",
            "qn-001-g-0000000003",
            "qn-001-h-0000000002",
            "junk",
        ]);
        assert_eq!(
            order,
            vec![
                "qn-001-h-0000000002",
                "qn-001-g-0000000003",
                "qn-005-g-0000000001"
            ]
        );
        assert_eq!(queue_item_prefix(7, "ab"), "qn-007-ab-");
        assert_eq!(parse_queue_item("qn-007-0000000004"), Some((7, 4)));
        assert_eq!(parse_queue_item("qn-1-0000000001"), None);
    }

    #[test]
    fn two_phase_commit_rule() {
        assert_eq!(
            decide(&[Some(Vote::Commit), Some(Vote::Commit)]),
            Some(Decision::Commit)
        );
        assert_eq!(decide(&[Some(Vote::Commit), None]), None);
        assert_eq!(decide(&[None, Some(Vote::Abort)]), Some(Decision::Abort));
        assert_eq!(decide(&[]), Some(Decision::Commit));
        assert_eq!(Vote::parse(b""), None);
        assert_eq!(Decision::parse(b"abort"), Some(Decision::Abort));
    }

    #[test]
    fn paths() {
        assert!(validate_path("/a/b").is_ok());
        assert!(validate_path("/").is_ok());
        assert!(validate_path("a").is_err());
        assert!(validate_path("/a/").is_err());
        assert!(validate_path("/a//b").is_err());
        assert!(validate_path("/a/../b").is_err());
        assert_eq!(join("/", "x"), "/x");
        assert_eq!(join("/a", "x"), "/a/x");
    }
}
