//! The one TOML file that describes a deployment. Each section is the owning crate's own config type, and every
//! field has a default, so an empty file (or none) is a valid config. Unknown keys are rejected so a typo is an
//! error, not a silently ignored setting.

use std::path::Path;

use anyhow::Context;
use serde::{Deserialize, Serialize};

#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub(crate) struct TickboxConfig {
    pub feed: tickbox_feed::FeedConfig,
    pub lvc: tickbox_lvc::LvcConfig,
    pub subscriber: tickbox_subscriber::SubscriberConfig,
    pub workers: tickbox_workers::WorkerPoolConfig,
    pub clone: tickbox_clone::CloneConfig,
    pub broker: tickbox_majordomo::BrokerConfig,
    pub titanic: tickbox_majordomo::titanic::TitanicConfig,
    pub recorder: tickbox_recorder::RecorderConfig,
    /// ZooKeeper ensemble and timings for the coordinating flags (`--start-barrier`, `--elect`, `--group`) and
    /// `tickbox coord`.
    pub coord: CoordConfig,
    /// libzmq context tuning (`io_threads`, I/O-thread CPUs, names, scheduling); see `tickbox_zmqx::context`.
    pub context: tickbox_zmqx::context::ContextConfig,
    /// CURVE keys, allow-lists, IP fences and per-key authorisation for every socket; absent = NULL, as before.
    pub security: tickbox_auth::SecurityConfig,
    /// Where every long-running command serves Prometheus metrics (`--metrics` wins); empty = nowhere.
    pub metrics: tickbox_metrics::MetricsConfig,
    /// `security`, loaded (certificates read, key names resolved) and shared with every component's config.
    #[serde(skip)]
    pub auth: tickbox_auth::Security,
}

/// `[coord]`: where ZooKeeper is and how long to wait for it. Every coordinating command takes `--zk` instead.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub(crate) struct CoordConfig {
    /// Ensemble `HOST:PORT[,HOST:PORT...]`; empty means none configured (then `--zk` must say).
    pub zk: String,
    /// Session timeout asked of the server: a dead process's barrier place, leadership or shards move after it.
    pub session_timeout: tickbox_units::HumanDuration,
    /// Give up establishing the first session after this long.
    pub connect_timeout: tickbox_units::HumanDuration,
    /// Longest wait for the other parties of a `--start-barrier`, entering and again leaving.
    pub barrier_timeout: tickbox_units::HumanDuration,
}

impl Default for CoordConfig {
    fn default() -> Self {
        use std::time::Duration;
        CoordConfig {
            zk: String::new(),
            session_timeout: tickbox_units::HumanDuration(Duration::from_secs(6)),
            connect_timeout: tickbox_units::HumanDuration(Duration::from_secs(10)),
            barrier_timeout: tickbox_units::HumanDuration(Duration::from_secs(60)),
        }
    }
}

impl TickboxConfig {
    pub(crate) fn load(path: Option<&Path>) -> anyhow::Result<Self> {
        let Some(path) = path else {
            return Ok(Self::default());
        };
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("reading config {}", path.display()))?;
        // Old key spellings still read (serde aliases); say which to write instead.
        tickbox_zmqx::naming::warn_renamed_keys(&text);
        let mut config: Self =
            toml::from_str(&text).with_context(|| format!("parsing config {}", path.display()))?;
        // Key and certificate paths mean the same whatever directory the command runs in.
        if let Some(dir) = path.parent() {
            config.security.resolve_paths(dir);
        }
        config.share_socket_profiles()?;
        config.share_security()?;
        Ok(config)
    }

    /// Hands each role its `[context.sockets.<role>]` profile (the role crates apply it to every socket they open;
    /// record and replay take theirs from here too), and refuses a shard `io_thread` the context does not have
    /// (libzmq would fail the connect with a bare EMTHREAD).
    fn share_socket_profiles(&mut self) -> anyhow::Result<()> {
        let sockets = &self.context.sockets;
        self.feed.socket_profile = sockets.feed.clone();
        self.lvc.socket_profile = sockets.lvc.clone();
        self.subscriber.socket_profile = sockets.subscriber.clone();
        self.workers.socket_profile = sockets.workers.clone();
        // The same maxima as the command-line flags (docs/book/src/bounds.md).
        if let Some(count) = self.workers.count {
            anyhow::ensure!(
                (1..=crate::bounds::MAX_WORKERS).contains(&count),
                "[workers] count = {count}: 1 to {} worker threads (docs/book/src/bounds.md)",
                crate::bounds::MAX_WORKERS
            );
        }
        anyhow::ensure!(
            self.subscriber.shards.len() <= crate::bounds::MAX_SHARDS,
            "[[subscriber.shards]]: {} shards, at most {} (docs/book/src/bounds.md)",
            self.subscriber.shards.len(),
            crate::bounds::MAX_SHARDS
        );
        for (key, n) in [
            ("[lvc] max_connections", self.lvc.max_connections),
            (
                "[clone.server] max_connections",
                self.clone.server.max_connections,
            ),
        ] {
            anyhow::ensure!(
                n <= crate::bounds::MAX_CONNECTIONS,
                "{key} = {n}: at most {} (docs/book/src/bounds.md)",
                crate::bounds::MAX_CONNECTIONS
            );
        }
        let io_threads = self.context.io_threads;
        for (i, shard) in self.subscriber.shards.iter().enumerate() {
            if let Some(n) = shard.io_thread {
                anyhow::ensure!(
                    n < io_threads.min(tickbox_zmqx::profile::MAX_AFFINITY_IO_THREADS),
                    "[[subscriber.shards]] {i}: io_thread = {n}, but [context] io_threads = {io_threads} (threads 0..{io_threads})"
                );
            }
        }
        Ok(())
    }

    /// Loads `[security]` once and hands it to every component, so each applies it to the sockets it opens.
    fn share_security(&mut self) -> anyhow::Result<()> {
        let security =
            tickbox_auth::Security::from_config(&self.security).context("loading [security]")?;
        self.feed.security = security.clone();
        self.lvc.security = security.clone();
        self.subscriber.security = security.clone();
        self.broker.security = security.clone();
        self.titanic.worker.security = security.clone();
        self.clone.server.security = security.clone();
        self.clone.client.security = security.clone();
        self.auth = security;
        Ok(())
    }

    /// The config as TOML: every section, every field, defaults filled in.
    pub(crate) fn to_toml(&self) -> anyhow::Result<String> {
        toml::to_string_pretty(self).context("rendering config as TOML")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn printed_defaults_parse_back_to_the_defaults() {
        let text = TickboxConfig::default().to_toml().unwrap();
        let parsed: TickboxConfig = toml::from_str(&text).unwrap();
        assert_eq!(parsed.to_toml().unwrap(), text);
    }

    #[test]
    fn book_reference_is_the_default_config() {
        let reference = include_str!("../../docs/book/src/config.md");
        let defaults = TickboxConfig::default().to_toml().unwrap();
        assert!(
            reference.contains(&format!("```toml\n{defaults}```")),
            "the book's config reference (docs/book/src/config.md) is stale: paste the output of `tickbox config`"
        );
    }

    #[test]
    fn unknown_keys_are_errors() {
        let err = toml::from_str::<TickboxConfig>(
            "[feed]
rat = 5
",
        )
        .unwrap_err();
        assert!(err.to_string().contains("rat"), "{err}");
        assert!(toml::from_str::<TickboxConfig>(
            "[nosuchsection]
"
        )
        .is_err());
    }
}
