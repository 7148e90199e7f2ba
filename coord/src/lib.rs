//! ZooKeeper recipes on a real ZooKeeper, as ZooKeeper's "Recipes and Solutions" describes them: group
//! membership, barrier, double barrier, queue and priority queue, exclusive lock, shared (read/write) lock with
//! revocation, two-phase commit and leader election.
//!
//! Every recipe is herd-free where the recipe is (each waiter watches only the node it waits for), uses
//! ephemeral sequential nodes named `<kind>-<guid>-<seq>` (so a create hidden by a connection loss is recognised
//! afterwards), never polls, and has no timer but the caller's timeout. Every lock and leadership carries a
//! fencing token (its node's sequence) and a live [`HoldState`] that turns `Suspended` on connection loss and
//! `Lost` on session expiry, so a holder never goes on believing it holds what it lost.
//!
//! The API is blocking (tickbox's commands are synchronous threads): a [`Coord`] owns one session and a
//! one-thread runtime that drives it. The decisions themselves are pure functions in [`logic`].
#![warn(missing_docs)]

mod barrier;
mod client;
mod election;
pub mod follow;
mod hold;
mod inspect;
pub mod listing;
mod lock;
pub mod logic;
mod membership;
mod queue;
mod render;
pub mod script_lines;
mod shards;
mod standing;
#[cfg(feature = "testing")]
pub mod testing;
mod twopc;

use std::time::Duration;

pub use barrier::{Barrier, DoubleBarrier, DoubleBarrierState, Entered, StartBarrier};
pub use client::{Coord, CoordOptions, NodeStat, SessionStatus, TreeEvent, TreeWatch};
pub use election::{Candidate, Election, ElectionEvent, Leadership};
pub use hold::{HoldState, Holding, LostReason};
pub use inspect::{inspect, RecipeState};
pub use lock::{Lock, LockGuard, SharedLock};
pub use logic::{Access, Decision, SeqNode, Vote};
pub use membership::Group;
pub use queue::{Queue, DEFAULT_PRIORITY};
pub use shards::{ShardEvent, ShardMember, Shards};
pub use standing::{
    last_progress, Handover, HandoverLog, PreviousLeader, Standing, StandingEvent, PROGRESS_NODE,
};
pub use twopc::{TxCoordinator, TxOutcome, TxParticipant};
pub use zookeeper_client;

/// Errors of the coordination layer.
#[derive(Debug, thiserror::Error)]
pub enum CoordError {
    /// The ZooKeeper client reported an error.
    #[error("zookeeper: {0}")]
    Zk(#[from] zookeeper_client::Error),
    /// The caller's timeout passed.
    #[error("timed out after {0:?}")]
    Timeout(Duration),
    /// The session expired: every ephemeral node of it is gone; connect again.
    #[error("zookeeper session expired")]
    SessionExpired,
    /// The handle was closed.
    #[error("zookeeper handle closed")]
    Closed,
    /// A holding or candidacy ended.
    #[error("lost: {0:?}")]
    Lost(LostReason),
    /// The contender's own node disappeared while it waited (deleted by someone else).
    #[error("own node {0} vanished while waiting")]
    NodeVanished(String),
    /// A member of that name exists, owned by another session.
    #[error("member {0} already exists (another session)")]
    MemberExists(String),
    /// A path is not a valid ZooKeeper path.
    #[error("invalid path {path:?}: {reason}")]
    InvalidPath {
        /// The path.
        path: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// A node's data is not what the recipe wrote.
    #[error("unexpected data at {path}: {reason}")]
    BadData {
        /// The node.
        path: String,
        /// What is wrong.
        reason: &'static str,
    },
    /// The caller's stop flag was set while waiting (e.g. Ctrl-C).
    #[error("interrupted")]
    Interrupted,
    /// The runtime driving the session could not start.
    #[error("cannot start the coordination runtime: {0}")]
    Runtime(std::io::Error),
}

/// Result of the coordination layer.
pub type Result<T, E = CoordError> = std::result::Result<T, E>;
