//! What `tickbox titanic`'s flags say, merged over the `[titanic]` section: the flags win.

use tickbox_units::{override_with, HumanDuration};

use crate::titanic::{FsyncPolicy, Redispatch, TitanicConfig};

/// `tickbox titanic`'s flags; `None` keeps the config file's value.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TitanicOverrides {
    /// [`TitanicConfig::fsync`].
    pub fsync: Option<FsyncPolicy>,
    /// The worker's heartbeat toward the broker (`[titanic.worker] heartbeat_interval`).
    pub heartbeat: Option<HumanDuration>,
    /// [`TitanicConfig::scan`].
    pub scan: Option<HumanDuration>,
    /// [`TitanicConfig::dispatch_timeout`].
    pub dispatch_timeout: Option<HumanDuration>,
    /// [`TitanicConfig::job_timeout`].
    pub job_timeout: Option<HumanDuration>,
    /// [`TitanicConfig::redispatch`].
    pub redispatch: Option<Redispatch>,
    /// [`TitanicConfig::max_attempts`].
    pub max_attempts: Option<u32>,
}

impl TitanicOverrides {
    /// These flags over `config`.
    pub fn apply(self, mut config: TitanicConfig) -> TitanicConfig {
        override_with(&mut config.fsync, self.fsync);
        override_with(&mut config.worker.heartbeat_interval, self.heartbeat);
        override_with(&mut config.scan, self.scan);
        override_with(&mut config.dispatch_timeout, self.dispatch_timeout);
        override_with(&mut config.job_timeout, self.job_timeout);
        override_with(&mut config.redispatch, self.redispatch);
        override_with(&mut config.max_attempts, self.max_attempts);
        config
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn flags_win_and_the_rest_of_the_section_is_kept() {
        let config = TitanicConfig {
            max_attempts: 7,
            max_in_flight: 9,
            ..TitanicConfig::default()
        };
        let flags = TitanicOverrides {
            fsync: Some(FsyncPolicy::Periodic),
            heartbeat: Some(HumanDuration(Duration::from_millis(900))),
            redispatch: Some(Redispatch::AfterTimeout),
            ..TitanicOverrides::default()
        };
        let merged = flags.apply(config.clone());
        assert_eq!(merged.fsync, FsyncPolicy::Periodic);
        assert_eq!(
            merged.worker.heartbeat_interval.0,
            Duration::from_millis(900)
        );
        assert_eq!(merged.redispatch, Redispatch::AfterTimeout);
        assert_eq!((merged.max_attempts, merged.max_in_flight), (7, 9));
        assert_eq!(merged.scan, config.scan);
        assert_eq!(TitanicOverrides::default().apply(config.clone()), config);
    }
}
