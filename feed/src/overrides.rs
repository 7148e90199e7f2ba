//! A command line's overrides of the `[feed]` config section, merged here rather than in the binary so the rules
//! (which flag wins, what a flag implies, which combinations are refused) are unit-tested.

use tickbox_units::{override_with, HumanDuration};
use tickbox_wire::Framing;
use tickbox_zmqx::BackPressure;

use crate::config::{Batching, FeedConfig, PacingMode, Pattern, PublisherShardConfig, Rate};
use crate::error::FeedError;

/// What `tickbox feed`'s flags say; `None` (or an empty list) keeps the config file's value.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FeedOverrides {
    /// Endpoints to bind, one shard each (replaces the config's shards).
    pub bind: Vec<String>,
    /// Endpoints to connect to, one shard each (replaces the config's shards; wins over `bind`).
    pub connect: Vec<String>,
    /// One core per shard.
    pub cores: Vec<usize>,
    /// The data rate; `max` also means flat-out pacing unless `mode` says otherwise.
    pub rate: Option<Rate>,
    /// [`FeedConfig::mode`].
    pub mode: Option<PacingMode>,
    /// [`FeedConfig::burst_size`].
    pub burst_size: Option<f64>,
    /// The generated universe's size (clears the config's explicit symbol names).
    pub symbols: Option<usize>,
    /// [`FeedConfig::venue`].
    pub venue: Option<String>,
    /// [`FeedConfig::duration`].
    pub duration: Option<std::time::Duration>,
    /// Data messages per shard.
    pub max_messages: Option<u64>,
    /// [`FeedConfig::pattern`].
    pub pattern: Option<Pattern>,
    /// [`FeedConfig::framing`].
    pub framing: Option<Framing>,
    /// Refused as `drop` with the pathological pattern, which never drops.
    pub back_pressure: Option<BackPressure>,
    /// [`FeedConfig::drain_timeout`].
    pub drain_timeout: Option<HumanDuration>,
    /// [`FeedConfig::batch`] (and for a number, [`FeedConfig::batch_max_records`]).
    pub batch: Option<Batching>,
    /// Wins over `[context.sockets.feed] send_hwm` too.
    pub send_hwm: Option<i32>,
    /// [`FeedConfig::heartbeat_interval`].
    pub heartbeat: Option<HumanDuration>,
    /// [`FeedConfig::seed`].
    pub seed: Option<u64>,
    /// [`FeedConfig::wait_for_subscribers`].
    pub wait_for_subscribers: Option<usize>,
}

impl FeedOverrides {
    /// `config` with every override given applied.
    pub fn apply(self, mut config: FeedConfig) -> Result<FeedConfig, FeedError> {
        let (endpoints, connect) = if !self.connect.is_empty() {
            (self.connect, true)
        } else {
            (self.bind, false)
        };
        if !endpoints.is_empty() {
            config.shards = endpoints
                .into_iter()
                .map(|endpoint| PublisherShardConfig {
                    endpoint: endpoint.trim().to_string(),
                    connect,
                    core: None,
                })
                .collect();
        }
        if !self.cores.is_empty() {
            if self.cores.len() != config.shards.len() {
                return Err(FeedError::Override(format!(
                    "--cores lists {} cores for {} shards; give one core per shard",
                    self.cores.len(),
                    config.shards.len()
                )));
            }
            for (shard, core) in config.shards.iter_mut().zip(self.cores) {
                shard.core = Some(core);
            }
        }
        if let Some(rate) = self.rate {
            config.rate = rate;
            if rate == Rate::Max && self.mode.is_none() {
                config.mode = PacingMode::FlatOut;
            }
        }
        override_with(&mut config.mode, self.mode);
        override_with(&mut config.burst_size, self.burst_size);
        if let Some(symbols) = self.symbols {
            config.symbols = symbols;
            config.symbol_names.clear();
        }
        override_with(&mut config.venue, self.venue);
        if let Some(duration) = self.duration {
            config.duration = Some(duration.into());
        }
        if let Some(max) = self.max_messages {
            config.max_messages_per_shard = Some(max);
        }
        override_with(&mut config.pattern, self.pattern);
        override_with(&mut config.framing, self.framing);
        if let Some(back_pressure) = self.back_pressure {
            if !back_pressure.blocks() && config.pattern == Pattern::Pathological {
                return Err(FeedError::Override(
                    "--back-pressure drop: the pathological pattern never drops (its one burst of every topic is \
                     the point; it waits for a subscriber and blocks); leave --back-pressure out"
                        .to_owned(),
                ));
            }
            config.back_pressure = back_pressure;
        }
        override_with(&mut config.drain_timeout, self.drain_timeout);
        if let Some(batch) = self.batch {
            batch.apply_to(&mut config);
        }
        if let Some(send_hwm) = self.send_hwm {
            config.send_hwm = send_hwm;
            config.socket_profile.send_hwm = None; // the flag wins over [context.sockets.feed]
        }
        override_with(&mut config.heartbeat_interval, self.heartbeat);
        override_with(&mut config.seed, self.seed);
        override_with(&mut config.wait_for_subscribers, self.wait_for_subscribers);
        Ok(config)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nothing_given_keeps_the_config() {
        let config = FeedConfig {
            venue: "XNAS".into(),
            seed: 7,
            ..FeedConfig::default()
        };
        assert_eq!(
            FeedOverrides::default().apply(config.clone()).unwrap(),
            config
        );
    }

    #[test]
    fn connect_wins_over_bind_and_each_endpoint_is_a_shard_with_its_core() {
        let overrides = FeedOverrides {
            bind: vec!["tcp://*:1".into()],
            connect: vec![" tcp://h:1".into(), "tcp://h:2".into()],
            cores: vec![3, 4],
            ..FeedOverrides::default()
        };
        let config = overrides.apply(FeedConfig::default()).unwrap();
        let shards: Vec<_> = (config.shards.iter())
            .map(|s| (s.endpoint.as_str(), s.connect, s.core))
            .collect();
        assert_eq!(
            shards,
            [("tcp://h:1", true, Some(3)), ("tcp://h:2", true, Some(4))]
        );
    }

    #[test]
    fn cores_must_match_the_shards() {
        let overrides = FeedOverrides {
            bind: vec!["tcp://*:1".into()],
            cores: vec![1, 2],
            ..FeedOverrides::default()
        };
        let err = overrides.apply(FeedConfig::default()).unwrap_err();
        assert_eq!(
            err.to_string(),
            "--cores lists 2 cores for 1 shards; give one core per shard"
        );
    }

    #[test]
    fn rate_max_means_flat_out_unless_a_mode_is_given() {
        let max = |mode| FeedOverrides {
            rate: Some(Rate::Max),
            mode,
            ..FeedOverrides::default()
        };
        let config = max(None).apply(FeedConfig::default()).unwrap();
        assert_eq!(config.mode, PacingMode::FlatOut);
        let config = (max(Some(PacingMode::Paced)))
            .apply(FeedConfig::default())
            .unwrap();
        assert_eq!(config.mode, PacingMode::Paced);
    }

    #[test]
    fn symbols_replace_the_named_universe() {
        let config = FeedConfig {
            symbol_names: vec!["AAPL".into()],
            ..FeedConfig::default()
        };
        let overrides = FeedOverrides {
            symbols: Some(5),
            ..FeedOverrides::default()
        };
        let config = overrides.apply(config).unwrap();
        assert_eq!((config.symbols, config.symbol_names.len()), (5, 0));
    }

    #[test]
    fn the_pathological_pattern_refuses_to_drop_but_takes_block() {
        let with = |back_pressure| FeedOverrides {
            pattern: Some(Pattern::Pathological),
            back_pressure: Some(back_pressure),
            ..FeedOverrides::default()
        };
        let err = (with(BackPressure::Drop))
            .apply(FeedConfig::default())
            .unwrap_err();
        assert!(err
            .to_string()
            .starts_with("--back-pressure drop: the pathological pattern never drops"));
        let config = (with(BackPressure::Block))
            .apply(FeedConfig::default())
            .unwrap();
        assert_eq!(config.back_pressure, BackPressure::Block);
    }

    #[test]
    fn send_hwm_wins_over_the_socket_profile() {
        let mut config = FeedConfig::default();
        config.socket_profile.send_hwm = Some(10);
        let overrides = FeedOverrides {
            send_hwm: Some(99),
            ..FeedOverrides::default()
        };
        let config = overrides.apply(config).unwrap();
        assert_eq!(
            (config.send_hwm, config.socket_profile.send_hwm),
            (99, None)
        );
    }
}
