//! The ZooKeeper shard group of Black Box subscribers (`tickbox subscribe --group PATH`): this process joins the
//! group at PATH and consumes only the feed shards whose lock it holds, each with its own subscriber, started
//! when the shard is acquired and shut down when it is lost (a dead member's shards come here after its session
//! timeout; a surplus shard is handed back when another member joins).
//!
//! Lives here rather than in `tickbox-subscriber` or `tickbox-coord` because it joins the data plane to the
//! control plane, and neither of those may depend on the other.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use tickbox_coord::{Coord, CoordError, ShardEvent, Shards};
use tickbox_subscriber::{
    standard_worker, Report, RunEnd, RunLook, RunWatch, StandardWorker, Subscriber,
    SubscriberConfig, SubscriberError,
};
use tickbox_workers::{WorkerError, WorkerPoolConfig};

/// How often the group loop looks at ownership changes, the stop flag and the idle clock.
const GROUP_TICK: Duration = Duration::from_millis(20);

/// How one member of a subscriber group runs.
#[derive(Debug, Clone)]
pub struct GroupOptions {
    /// The group's ZooKeeper path.
    pub path: String,
    /// This member's id (see [`crate::check_member_id`]).
    pub id: String,
    /// Stop once no frame has arrived for this long (after the first one).
    pub idle_exit: Option<Duration>,
    /// Stop after this long.
    pub duration: Option<Duration>,
    /// Testing aid: every worker sleeps this long per message.
    pub worker_delay: Option<Duration>,
}

/// What the member did with one shard it owned (once per ownership: a shard lost and taken again reports twice).
#[derive(Debug)]
pub struct GroupShard {
    /// Index of the shard in the group's shard list.
    pub shard: u32,
    /// The one-shard subscriber config it ran with.
    pub config: SubscriberConfig,
    /// What its subscriber did.
    pub report: Report<StandardWorker>,
}

impl GroupShard {
    /// The subscriber's `--json` summary of this shard, with `group_shard` naming it.
    pub fn summary_json(&self, stopped_by: &str) -> serde_json::Value {
        let mut v = self.report.summary_json(&self.config, stopped_by);
        if let Some(object) = v.as_object_mut() {
            object.insert("group_shard".into(), self.shard.into());
        }
        v
    }
}

/// The end of a member's run.
#[derive(Debug)]
pub struct GroupOutcome {
    /// One entry per shard owned, in the order they were given up.
    pub shards: Vec<GroupShard>,
    /// The first worker failure of any shard's subscriber (each is also logged).
    pub worker_failure: Option<WorkerError>,
}

/// Why a member could not run.
#[derive(Debug, thiserror::Error)]
pub enum GroupError {
    /// More shards than a group can number.
    #[error("too many shards")]
    TooManyShards,
    /// Joining the group failed.
    #[error("--group {path}: joining as {id}: {source}")]
    Join {
        /// The group's path.
        path: String,
        /// This member's id.
        id: String,
        /// Why.
        source: CoordError,
    },
    /// A shard's subscriber could not start.
    #[error("starting the subscriber for shard {shard}: {source}")]
    Start {
        /// The shard acquired.
        shard: u32,
        /// Why.
        source: SubscriberError,
    },
    /// A shard's subscriber could not stop.
    #[error(transparent)]
    Subscriber(#[from] SubscriberError),
}

/// The one-shard config of shard `shard` of `config`.
pub fn shard_config(config: &SubscriberConfig, shard: u32) -> SubscriberConfig {
    let mut one = config.clone();
    one.shards = config
        .shards
        .get(shard as usize)
        .cloned()
        .into_iter()
        .collect();
    one
}

/// Joins the group as `opts.id` on `coord` and runs a subscriber for each shard owned (the shards are
/// `config.shards`, in order) until `stop`, `opts.duration`, `opts.idle_exit`, a tripped subscriber or a failed
/// worker; leaves the group before returning, so the shards move on at once rather than after a session timeout.
pub fn run_group(
    coord: &Coord,
    ctx: &zmq::Context,
    config: &SubscriberConfig,
    workers: &WorkerPoolConfig,
    opts: &GroupOptions,
    stop: &AtomicBool,
) -> Result<GroupOutcome, GroupError> {
    let (path, id) = (opts.path.as_str(), opts.id.as_str());
    let count = u32::try_from(config.shards.len()).map_err(|_| GroupError::TooManyShards)?;
    let member = Shards::new(coord, path, count)
        .and_then(|s| s.join(id))
        .map_err(|source| GroupError::Join {
            path: path.to_owned(),
            id: id.to_owned(),
            source,
        })?;
    tracing::info!(group = %path, member = %id, shards = count, "joined the subscriber group");
    let delay = opts.worker_delay;
    let mut running: BTreeMap<u32, Subscriber<StandardWorker>> = BTreeMap::new();
    let mut done: Vec<GroupShard> = Vec::new();
    let mut worker_failure = None;
    let mut finish = |shard: u32,
                      sub: Subscriber<StandardWorker>,
                      done: &mut Vec<GroupShard>|
     -> Result<(), GroupError> {
        let (report, failed) = sub.shutdown_partial()?;
        if let Some(e) = failed {
            tracing::error!(shard, "{e}");
            worker_failure.get_or_insert(e);
        }
        done.push(GroupShard {
            shard,
            config: shard_config(config, shard),
            report,
        });
        Ok(())
    };
    let mut watch = RunWatch::new(opts.idle_exit, opts.duration, Instant::now());
    loop {
        let mut changed = false;
        while let Ok(ev) = member.events().try_recv() {
            match ev {
                ShardEvent::Acquired { shard, token } => {
                    let one = shard_config(config, shard);
                    let sub = Subscriber::start(ctx, &one, workers, |_| standard_worker(delay))
                        .map_err(|source| GroupError::Start { shard, source })?;
                    tracing::info!(shard, token, endpoint = %one.endpoint_list(), "acquired shard");
                    running.insert(shard, sub);
                    changed = true;
                }
                ShardEvent::Lost { shard, reason } => {
                    if let Some(sub) = running.remove(&shard) {
                        finish(shard, sub, &mut done)?;
                    }
                    tracing::info!(shard, ?reason, "released shard");
                    changed = true;
                }
                ShardEvent::Suspended { shard } => {
                    tracing::warn!(shard, "ZooKeeper connection lost: ownership uncertain")
                }
                ShardEvent::Resumed { shard } => {
                    tracing::info!(shard, "ZooKeeper connection back: still owner")
                }
            }
        }
        if changed {
            // One line with the whole picture, for operators and tests.
            tracing::info!(
                "group {path}: {id} owns shards {:?}",
                running.keys().collect::<Vec<_>>()
            );
        }
        let received: u64 = running
            .values()
            .flat_map(|s| s.live_shards())
            .map(|s| s.received)
            .sum::<u64>()
            + done.iter().map(|d| d.report.received()).sum::<u64>();
        let look = RunLook {
            tripped: running.values().any(|s| s.is_tripped()),
            workers_failed: running.values().any(|s| s.workers_failed()),
            stop: stop.load(Ordering::Relaxed),
            received,
            catching_up: false,
        };
        if let Some(end) = watch.check(look, Instant::now()) {
            if end == RunEnd::Idle {
                tracing::info!(
                    idle = %tickbox_subscriber::format_duration(opts.idle_exit.unwrap_or_default()),
                    "no frame for the idle limit: stopping"
                );
            }
            break;
        }
        std::thread::sleep(GROUP_TICK);
    }
    for (shard, sub) in std::mem::take(&mut running) {
        finish(shard, sub, &mut done)?;
    }
    drop(member);
    Ok(GroupOutcome {
        shards: done,
        worker_failure,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use tickbox_subscriber::SubscriberShardConfig;

    fn shard(ep: &str) -> SubscriberShardConfig {
        SubscriberShardConfig {
            connect: vec![ep.into()],
            ..SubscriberShardConfig::default()
        }
    }

    #[test]
    fn a_shard_config_keeps_only_its_shard_and_every_other_setting() {
        let config = SubscriberConfig {
            shards: vec![shard("tcp://a:1"), shard("tcp://b:2"), shard("tcp://c:3")],
            topics: vec!["Q.".into()],
            ..SubscriberConfig::default()
        };
        let one = shard_config(&config, 1);
        assert_eq!(one.shards, vec![shard("tcp://b:2")]);
        assert_eq!(one.topics, config.topics);
        assert!(shard_config(&config, 7).shards.is_empty());
    }
}
