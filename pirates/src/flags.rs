//! The flags of `tickbox queue` and `tickbox freelance-server`, checked and made into their configs: each error
//! names its flag.

use std::time::Duration;

use tickbox_units::{ByteSize, HumanDuration};

use crate::freelance::FreelanceServerConfig;
use crate::PppConfig;

/// What `tickbox queue`'s flags say (each has a default on the command line).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueFlags {
    /// `--heartbeat`: [`PppConfig::heartbeat_interval`], at least 1 ms.
    pub heartbeat: HumanDuration,
    /// `--liveness`: [`PppConfig::heartbeat_liveness`], at least 1.
    pub liveness: u32,
    /// `--max-queued`: [`PppConfig::max_queued`], at least 1.
    pub max_queued: usize,
    /// `--max-workers`: [`PppConfig::max_workers`], at least 1.
    pub max_workers: usize,
    /// `--max-message-bytes`: [`PppConfig::max_message_bytes`], above 0.
    pub max_message_bytes: u64,
}

impl QueueFlags {
    /// The queue's config under `security`, the rest as [`PppConfig::default`]; the first flag out of range is
    /// the error.
    pub fn config(self, security: tickbox_auth::Security) -> Result<PppConfig, &'static str> {
        let problem = [
            (self.liveness == 0, "--liveness must be at least 1"),
            (self.max_queued == 0, "--max-queued must be at least 1"),
            (self.max_workers == 0, "--max-workers must be at least 1"),
            (
                self.max_message_bytes == 0,
                "--max-message-size must be above 0",
            ),
            (
                self.heartbeat.0 < Duration::from_millis(1),
                "--heartbeat must be at least 1ms",
            ),
        ];
        if let Some((_, why)) = problem.iter().find(|(bad, _)| *bad) {
            return Err(why);
        }
        Ok(PppConfig {
            heartbeat_interval: self.heartbeat,
            heartbeat_liveness: self.liveness,
            max_queued: self.max_queued,
            max_workers: self.max_workers,
            max_message_bytes: self.max_message_bytes,
            security,
            ..PppConfig::default()
        })
    }
}

/// What `tickbox freelance-server`'s limit flags say; `None` keeps the default.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FreelanceFlags {
    /// `--max-message-bytes`: [`FreelanceServerConfig::max_message_size`], above 0.
    pub max_message_bytes: Option<u64>,
    /// `--max-queued-replies`: [`FreelanceServerConfig::max_queued_replies`].
    pub max_queued_replies: Option<u32>,
    /// `--max-queued-bytes`: [`FreelanceServerConfig::max_queued_bytes`].
    pub max_queued_bytes: Option<u64>,
}

impl FreelanceFlags {
    /// The server's limits under `security`, the rest as [`FreelanceServerConfig::default`].
    pub fn config(
        self,
        security: tickbox_auth::Security,
    ) -> Result<FreelanceServerConfig, &'static str> {
        let mut c = FreelanceServerConfig {
            security,
            ..FreelanceServerConfig::default()
        };
        if let Some(v) = self.max_message_bytes {
            if v == 0 {
                return Err("--max-message-size must be above 0");
            }
            c.max_message_size = ByteSize(v);
        }
        if let Some(v) = self.max_queued_replies {
            c.max_queued_replies = v;
        }
        if let Some(v) = self.max_queued_bytes {
            c.max_queued_bytes = ByteSize(v);
        }
        Ok(c)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn flags() -> QueueFlags {
        QueueFlags {
            heartbeat: HumanDuration(Duration::from_millis(250)),
            liveness: 5,
            max_queued: 7,
            max_workers: 2,
            max_message_bytes: 4096,
        }
    }

    #[test]
    fn the_flags_make_the_config_and_keep_its_other_defaults() {
        let c = flags().config(tickbox_auth::Security::default()).unwrap();
        assert_eq!(c.heartbeat_interval.0, Duration::from_millis(250));
        assert_eq!(
            (
                c.heartbeat_liveness,
                c.max_queued,
                c.max_workers,
                c.max_message_bytes
            ),
            (5, 7, 2, 4096)
        );
        assert_eq!(c.reconnect_max, PppConfig::default().reconnect_max);
    }

    #[test]
    fn the_first_value_out_of_range_names_its_flag() {
        let bad = |f: QueueFlags| f.config(tickbox_auth::Security::default()).unwrap_err();
        let zero_workers = QueueFlags {
            max_workers: 0,
            max_message_bytes: 0,
            ..flags()
        };
        assert_eq!(bad(zero_workers), "--max-workers must be at least 1");
        let fast = QueueFlags {
            heartbeat: HumanDuration(Duration::from_micros(500)),
            ..flags()
        };
        assert_eq!(bad(fast), "--heartbeat must be at least 1ms");
        let no_liveness = QueueFlags {
            liveness: 0,
            ..flags()
        };
        assert_eq!(bad(no_liveness), "--liveness must be at least 1");
    }

    #[test]
    fn freelance_limits_take_the_flags_given_and_refuse_an_empty_message() {
        let none = FreelanceFlags::default().config(tickbox_auth::Security::default());
        let defaults = FreelanceServerConfig::default();
        assert_eq!(none.unwrap().max_queued_bytes, defaults.max_queued_bytes);
        let c = FreelanceFlags {
            max_message_bytes: Some(2048),
            max_queued_replies: Some(3),
            ..FreelanceFlags::default()
        }
        .config(tickbox_auth::Security::default())
        .unwrap();
        assert_eq!(
            (c.max_message_size, c.max_queued_replies),
            (ByteSize(2048), 3)
        );
        assert_eq!(c.max_queued_bytes, defaults.max_queued_bytes);
        let empty = FreelanceFlags {
            max_message_bytes: Some(0),
            ..FreelanceFlags::default()
        };
        assert_eq!(
            empty.config(tickbox_auth::Security::default()).unwrap_err(),
            "--max-message-size must be above 0"
        );
    }
}
