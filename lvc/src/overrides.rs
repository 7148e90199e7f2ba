//! What `tickbox lvc`'s flags change in the config file's `[lvc]` section.

use tickbox_units::{override_with, HumanDuration};

use crate::{BackPressure, LateJoiners, LvcConfig, Overflow, TapDrop};

/// What `tickbox lvc`'s flags say; `None` (or an empty list) keeps the config file's value.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LvcOverrides {
    /// [`LvcConfig::upstream`].
    pub upstream: Vec<String>,
    /// [`LvcConfig::upstream_bind`].
    pub upstream_bind: Vec<String>,
    /// [`LvcConfig::bind`].
    pub bind: Option<String>,
    /// [`LvcConfig::tap`].
    pub tap: Option<String>,
    /// [`LvcConfig::snapshot`].
    pub snapshot: Option<String>,
    /// [`LvcConfig::late_joiners`].
    pub late_joiners: Option<LateJoiners>,
    /// [`LvcConfig::cache_prefixes`].
    pub cache_prefixes: Option<Vec<String>>,
    /// [`LvcConfig::max_connections`].
    pub max_connections: Option<u64>,
    /// [`LvcConfig::max_topics`].
    pub max_topics: Option<usize>,
    /// [`LvcConfig::max_bytes`].
    pub max_bytes: Option<usize>,
    /// [`LvcConfig::overflow`].
    pub overflow: Option<Overflow>,
    /// [`LvcConfig::back_pressure`].
    pub back_pressure: Option<BackPressure>,
    /// [`LvcConfig::downstream_hwm`]; also wins over the socket profile's send HWM.
    pub downstream_hwm: Option<i32>,
    /// [`LvcConfig::upstream_hwm`]; also wins over the socket profile's receive HWM.
    pub upstream_hwm: Option<i32>,
    /// [`LvcConfig::tap_hwm`]; also wins over the socket profile's send HWM.
    pub tap_hwm: Option<i32>,
    /// [`LvcConfig::tap_drop`].
    pub tap_drop: Option<TapDrop>,
    /// [`LvcConfig::tap_framing`].
    pub tap_framing: Option<crate::tap::Framing>,
    /// [`LvcConfig::max_subscription_bytes`]; also wins over the socket profile's largest message.
    pub max_subscription_bytes: Option<usize>,
    /// [`LvcConfig::max_message_bytes`]; also wins over the socket profile's largest message.
    pub max_message_bytes: Option<usize>,
    /// [`LvcConfig::max_downstream_prefixes`].
    pub max_downstream_prefixes: Option<usize>,
    /// [`LvcConfig::cached_per_second`].
    pub cached_per_second: Option<usize>,
    /// [`LvcConfig::stats_interval`].
    pub stats_interval: Option<std::time::Duration>,
    /// [`LvcConfig::core`].
    pub core: Option<usize>,
}

impl LvcOverrides {
    /// The flags applied over `config` (the flags win). A flag also wins over `[context.sockets.lvc]` for the
    /// socket option it sets (see `tickbox_zmqx::profile`), so that option is taken out of the profile.
    pub fn apply(self, mut config: LvcConfig) -> LvcConfig {
        if !self.upstream.is_empty() {
            config.upstream = self.upstream;
        }
        if !self.upstream_bind.is_empty() {
            config.upstream_bind = self.upstream_bind;
        }
        override_with(&mut config.bind, self.bind);
        if self.tap.is_some() {
            config.tap = self.tap;
        }
        if self.snapshot.is_some() {
            config.snapshot = self.snapshot;
        }
        if self.core.is_some() {
            config.core = self.core;
        }
        let p = &mut config.socket_profile;
        p.receive_hwm = p.receive_hwm.filter(|_| self.upstream_hwm.is_none());
        p.send_hwm = p
            .send_hwm
            .filter(|_| self.downstream_hwm.is_none() && self.tap_hwm.is_none());
        p.maxmsgsize = p
            .maxmsgsize
            .filter(|_| self.max_subscription_bytes.is_none() && self.max_message_bytes.is_none());
        override_with(&mut config.late_joiners, self.late_joiners);
        override_with(&mut config.cache_prefixes, self.cache_prefixes);
        override_with(&mut config.max_connections, self.max_connections);
        override_with(&mut config.max_topics, self.max_topics);
        override_with(&mut config.max_bytes, self.max_bytes);
        override_with(&mut config.overflow, self.overflow);
        override_with(&mut config.back_pressure, self.back_pressure);
        override_with(&mut config.downstream_hwm, self.downstream_hwm);
        override_with(&mut config.upstream_hwm, self.upstream_hwm);
        override_with(&mut config.tap_hwm, self.tap_hwm);
        override_with(&mut config.tap_drop, self.tap_drop);
        override_with(&mut config.tap_framing, self.tap_framing);
        override_with(
            &mut config.max_subscription_bytes,
            self.max_subscription_bytes,
        );
        override_with(&mut config.max_message_bytes, self.max_message_bytes);
        override_with(
            &mut config.max_downstream_prefixes,
            self.max_downstream_prefixes,
        );
        override_with(&mut config.cached_per_second, self.cached_per_second);
        override_with(
            &mut config.stats_interval,
            self.stats_interval.map(HumanDuration),
        );
        config
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nothing_given_keeps_the_config() {
        let config = LvcConfig {
            upstream: vec!["tcp://a:1".into()],
            max_topics: 7,
            ..LvcConfig::default()
        };
        assert_eq!(LvcOverrides::default().apply(config.clone()), config);
    }

    #[test]
    fn a_flag_wins_over_the_section_and_over_the_socket_profile_option_it_sets() {
        let mut config = LvcConfig::default();
        config.socket_profile.send_hwm = Some(10);
        config.socket_profile.receive_hwm = Some(20);
        config.socket_profile.maxmsgsize = Some(30);
        let config = LvcOverrides {
            upstream: vec!["tcp://b:2".into()],
            tap_hwm: Some(5),
            max_topics: Some(3),
            back_pressure: Some(BackPressure::Block),
            ..LvcOverrides::default()
        }
        .apply(config);
        assert_eq!(config.upstream, vec!["tcp://b:2".to_string()]);
        assert_eq!((config.tap_hwm, config.max_topics), (5, 3));
        assert_eq!(config.back_pressure, BackPressure::Block);
        assert_eq!(config.socket_profile.send_hwm, None, "--tap-hwm wins");
        assert_eq!(
            config.socket_profile.receive_hwm,
            Some(20),
            "no flag set it"
        );
        assert_eq!(config.socket_profile.maxmsgsize, Some(30), "no flag set it");
    }
}
