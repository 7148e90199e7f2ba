//! What `tickbox subscribe`'s flags change in the config file's `[subscriber]` and `[workers]` sections: the
//! merge, with the checks that must pass before any socket is made.

use tickbox_lvc::tap::Framing;
use tickbox_units::{override_with, ByteSize, HumanDuration};
use tickbox_workers::{Dispatch, WorkerPoolConfig};

use crate::{
    check_nic, GapPolicy, Handoff, SnailMode, SubscriberConfig, SubscriberError,
    SubscriberShardConfig,
};

/// What `tickbox subscribe`'s flags say; `None` (or an empty list) keeps the config file's value.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SubscriberOverrides {
    /// Publisher endpoints, one shard each (replaces the config's shards).
    pub connect: Vec<String>,
    /// One interface for every shard, or one per shard.
    pub nic: Vec<String>,
    /// One CPU per shard first, then one per worker in order.
    pub cores: Vec<usize>,
    /// [`WorkerPoolConfig::count`].
    pub workers: Option<usize>,
    /// [`SubscriberConfig::max_lateness`].
    pub max_lateness: Option<HumanDuration>,
    /// [`SubscriberConfig::topics`].
    pub topics: Vec<String>,
    /// [`SubscriberConfig::gap_policy`].
    pub gap_policy: Option<GapPolicy>,
    /// [`SubscriberConfig::handoff`].
    pub handoff: Option<Handoff>,
    /// [`SubscriberConfig::dispatch`].
    pub dispatch: Option<Dispatch>,
    /// [`SubscriberConfig::framing`].
    pub framing: Option<Framing>,
    /// [`SubscriberConfig::snail_mode`].
    pub snail_mode: Option<SnailMode>,
    /// [`SubscriberConfig::clock_skew_warn`].
    pub clock_skew_warn: Option<HumanDuration>,
    /// [`SubscriberConfig::clone`].
    pub clone: Vec<String>,
    /// [`SubscriberConfig::lvc_snapshot`].
    pub lvc_snapshot: Option<String>,
    /// [`SubscriberConfig::lvc_snapshot_timeout`].
    pub lvc_snapshot_timeout: Option<HumanDuration>,
    /// [`SubscriberConfig::catch_up`].
    pub catch_up: Option<String>,
    /// [`SubscriberConfig::catch_up_from`].
    pub catch_up_from: Option<String>,
    /// [`SubscriberConfig::catch_up_budget`].
    pub catch_up_budget: Option<ByteSize>,
    /// [`SubscriberConfig::member_id`].
    pub member_id: Option<String>,
    /// [`SubscriberConfig::member_ttl`].
    pub member_ttl: Option<HumanDuration>,
}

impl SubscriberOverrides {
    /// The flags applied over the config file's sections (the flags win). Refused, with the flag's name: a
    /// `--nic` list that is neither one name nor one per shard, a zero member TTL with Clone, no shard at all,
    /// and an interface that does not exist or has no IPv4 address (before any socket: a missing interface
    /// would otherwise receive nothing, silently).
    pub fn apply(
        self,
        mut sub: SubscriberConfig,
        mut workers: WorkerPoolConfig,
    ) -> Result<(SubscriberConfig, WorkerPoolConfig), SubscriberError> {
        let refuse = |text: String| SubscriberError::Override(text);
        if !self.connect.is_empty() {
            sub.shards = self
                .connect
                .into_iter()
                .map(|endpoint| SubscriberShardConfig {
                    connect: vec![endpoint],
                    ..SubscriberShardConfig::default()
                })
                .collect();
        }
        if !self.nic.is_empty() {
            let n = sub.shards.len();
            if self.nic.len() != 1 && self.nic.len() != n {
                return Err(refuse(format!(
                    "--nic has {} names for {n} shards: give one, or one per shard",
                    self.nic.len()
                )));
            }
            for (i, shard) in sub.shards.iter_mut().enumerate() {
                shard.nic = Some(self.nic[if self.nic.len() == 1 { 0 } else { i }].clone());
            }
        }
        if !self.cores.is_empty() {
            let n = sub.shards.len();
            for (shard, core) in sub.shards.iter_mut().zip(&self.cores) {
                shard.core = Some(*core);
            }
            workers.cores = self.cores.iter().skip(n).copied().collect();
        }
        if self.workers.is_some() {
            workers.count = self.workers;
        }
        override_with(&mut sub.max_lateness, self.max_lateness);
        if !self.topics.is_empty() {
            sub.topics = self.topics;
        }
        override_with(&mut sub.gap_policy, self.gap_policy);
        override_with(&mut sub.handoff, self.handoff);
        override_with(&mut sub.dispatch, self.dispatch);
        override_with(&mut sub.framing, self.framing);
        override_with(&mut sub.snail_mode, self.snail_mode);
        override_with(&mut sub.clock_skew_warn, self.clock_skew_warn);
        if !self.clone.is_empty() {
            sub.clone = self.clone;
        }
        if self.lvc_snapshot.is_some() {
            sub.lvc_snapshot = self.lvc_snapshot;
        }
        override_with(&mut sub.lvc_snapshot_timeout, self.lvc_snapshot_timeout);
        if self.catch_up.is_some() {
            sub.catch_up = self.catch_up;
        }
        override_with(&mut sub.catch_up_from, self.catch_up_from);
        override_with(&mut sub.catch_up_budget, self.catch_up_budget);
        if self.member_id.is_some() {
            sub.member_id = self.member_id;
        }
        override_with(&mut sub.member_ttl, self.member_ttl);
        if !sub.clone.is_empty() && sub.member_ttl.0.is_zero() {
            return Err(refuse("--member-ttl must be more than 0".into()));
        }
        if sub.shards.is_empty() {
            return Err(refuse(
                "nothing to subscribe to: give --connect EP[,EP...] or [[subscriber.shards]] in the config"
                    .into(),
            ));
        }
        for nic in sub.shards.iter().filter_map(|s| s.nic.as_deref()) {
            check_nic(nic).map_err(|err| refuse(format!("--nic: {err}")))?;
        }
        Ok((sub, workers))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config_with_shards(n: usize) -> SubscriberConfig {
        SubscriberConfig {
            shards: (0..n)
                .map(|i| SubscriberShardConfig {
                    connect: vec![format!("tcp://127.0.0.1:{}", 5000 + i)],
                    ..SubscriberShardConfig::default()
                })
                .collect(),
            ..SubscriberConfig::default()
        }
    }

    #[test]
    fn nothing_given_keeps_the_config() {
        let config = config_with_shards(2);
        let (sub, workers) = SubscriberOverrides::default()
            .apply(config.clone(), WorkerPoolConfig::default())
            .unwrap();
        assert_eq!(sub.shards.len(), 2);
        assert_eq!(sub.max_lateness, config.max_lateness);
        assert_eq!(workers.count, WorkerPoolConfig::default().count);
    }

    #[test]
    fn connect_replaces_the_shards_and_cores_pin_shards_before_workers() {
        let (sub, workers) = SubscriberOverrides {
            connect: vec!["tcp://a:1".into(), "tcp://b:2".into()],
            cores: vec![3, 4, 5, 6],
            workers: Some(2),
            ..SubscriberOverrides::default()
        }
        .apply(config_with_shards(5), WorkerPoolConfig::default())
        .unwrap();
        assert_eq!(sub.shards.len(), 2);
        assert_eq!(sub.shards[1].connect, vec!["tcp://b:2".to_string()]);
        assert_eq!((sub.shards[0].core, sub.shards[1].core), (Some(3), Some(4)));
        assert_eq!(workers.cores, vec![5, 6]);
        assert_eq!(workers.count, Some(2));
    }

    #[test]
    fn a_nic_list_is_one_name_or_one_per_shard() {
        let err = SubscriberOverrides {
            nic: vec!["lo".into(), "lo".into()],
            ..SubscriberOverrides::default()
        }
        .apply(config_with_shards(3), WorkerPoolConfig::default())
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            "--nic has 2 names for 3 shards: give one, or one per shard"
        );
        let err = SubscriberOverrides {
            nic: vec!["no-such-nic0".into()],
            ..SubscriberOverrides::default()
        }
        .apply(config_with_shards(3), WorkerPoolConfig::default())
        .unwrap_err();
        assert!(err.to_string().starts_with("--nic: "), "{err}");
    }

    #[test]
    fn no_shard_and_a_zero_member_ttl_with_clone_are_refused() {
        let err = SubscriberOverrides::default()
            .apply(SubscriberConfig::default(), WorkerPoolConfig::default())
            .unwrap_err();
        assert!(
            err.to_string().starts_with("nothing to subscribe to"),
            "{err}"
        );
        let err = SubscriberOverrides {
            clone: vec!["tcp://127.0.0.1:1".into()],
            member_ttl: Some(HumanDuration(std::time::Duration::ZERO)),
            ..SubscriberOverrides::default()
        }
        .apply(config_with_shards(1), WorkerPoolConfig::default())
        .unwrap_err();
        assert_eq!(err.to_string(), "--member-ttl must be more than 0");
    }
}
