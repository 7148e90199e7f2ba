//! `tickbox-fleet`: data-plane components joined to the control plane, usable without the CLI.
//!
//! It sits above both planes (it may depend on data-plane crates and on control-plane clients; neither depends on
//! it), so the subscriber and workers stay free of control-plane code and the control crates stay free of market
//! data. Today it holds the subscriber's Clone side:
//!
//! - **live configuration**: `/config/subscriber/max_lateness` applied to a running subscriber's snail threshold
//!   without a restart (a delete reverts to the configured value, an invalid value is ignored and logged);
//! - **membership**: a TTL lease under `/members/subscribers/<id>` while it runs;
//! - **alerts**: the snail's squawk written under `/alerts/subscribers/<id>` before the process dies;
//!
//! and the replay's remote control over Majordomo ([`replay_control`]), driving `tickbox-recorder`'s sans-IO
//! controller; the ZooKeeper shard group of subscribers ([`group`]); and a recorder's `--elect` leadership and its
//! handover log ([`leadership`]).
//!
//! The decisions ([`apply_live`], [`parse_live_value`], [`check_member_id`]) are plain functions tested without
//! sockets; [`SubscriberLive`] owns the Clone client.

#![deny(missing_docs)]

pub mod group;
pub mod leadership;
pub mod member;
mod recorder_run;
pub mod replay_control;
pub mod start_barrier;
mod subscriber_run;

pub use recorder_run::ShownLeadership;

pub use subscriber_run::{catch_up_election, join_members, resolve_elected_catch_up};

use std::time::Duration;

use tickbox_clone::recipes::{ConfigEvent, ConfigWatch, Membership};
use tickbox_clone::{ClientConfig, CloneClient, CloneError, ServerEndpoints};
use tickbox_subscriber::{format_duration, parse_duration, Fatal, SharedThreshold, UnitsError};

/// Group under `/members/` and `/alerts/`.
pub const GROUP: &str = "subscribers";
/// Prefix (under `/config/`) of the subscriber's live settings.
pub const LIVE_PREFIX: &str = "subscriber/";
/// How long writing a fatal alert may delay the exit.
pub const ALERT_TIMEOUT: Duration = Duration::from_secs(1);
/// How long [`SubscriberLive::connect`] waits for the first snapshot before running on configured values.
pub const SYNC_WAIT: Duration = Duration::from_secs(5);

/// Why the subscriber could not join the control plane.
#[derive(Debug, thiserror::Error)]
pub enum FleetError {
    /// No Clone server was given.
    #[error("no Clone server endpoint given")]
    NoServers,
    /// A Clone endpoint could not be parsed or reached.
    #[error("Clone server {endpoint:?}: {source}")]
    Endpoint {
        /// The endpoint as given.
        endpoint: String,
        /// Why.
        source: CloneError,
    },
    /// The Clone client failed.
    #[error("Clone: {0}")]
    Clone(#[from] CloneError),
    /// A member id that cannot be a key segment.
    #[error("member id {0:?} must be non-empty, without '/' or whitespace")]
    MemberId(String),
}

/// `host-pid`: unique on a host, readable in `/members/`.
pub fn default_member_id() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .or_else(|_| std::fs::read_to_string("/etc/hostname"))
        .ok()
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_else(|| "host".to_owned());
    format!("{host}-{}", std::process::id())
}

/// A member id becomes one key segment: non-empty, no `/`, no whitespace.
pub fn check_member_id(id: &str) -> Result<(), FleetError> {
    if id.is_empty() || id.contains(['/', ' ', '\t', '\n']) {
        return Err(FleetError::MemberId(id.to_owned()));
    }
    Ok(())
}

/// Live settings under `/config/subscriber/`: every one is a duration today.
pub fn parse_live_value(raw: &[u8]) -> Result<Duration, UnitsError> {
    parse_duration(String::from_utf8_lossy(raw).trim())
}

/// Applies one live-configuration change to the snail threshold; `base` is the command-line/config value a delete
/// reverts to. Keys that are not live settings of the subscriber are ignored.
pub fn apply_live(event: ConfigEvent<Duration>, threshold: &SharedThreshold, base: Duration) {
    match event {
        ConfigEvent::Set { key, value } if key == "max_lateness" => {
            if threshold.get() != value {
                tracing::info!(
                    max_lateness = %format_duration(value),
                    "live config: snail threshold changed"
                );
            }
            threshold.set(value);
        }
        ConfigEvent::Deleted { key } if key == "max_lateness" => {
            tracing::info!(
                max_lateness = %format_duration(base),
                "live config: max_lateness deleted, back to the configured threshold"
            );
            threshold.set(base);
        }
        ConfigEvent::Invalid { key, error } if key == "max_lateness" => {
            tracing::warn!(
                current = %format_duration(threshold.get()),
                "live config: invalid max_lateness ignored ({error}); keeping the current threshold"
            );
        }
        ConfigEvent::Set { key, .. }
        | ConfigEvent::Deleted { key }
        | ConfigEvent::Invalid { key, .. } => {
            tracing::debug!(
                key,
                "live config: not a live setting of the subscriber, ignored"
            );
        }
    }
}

type ParseLive = fn(&[u8]) -> Result<Duration, UnitsError>;

/// The Clone side of a subscriber: the client, the live-config watch and the member id.
pub struct SubscriberLive {
    client: CloneClient,
    watch: ConfigWatch<Duration, ParseLive>,
    id: String,
}

impl SubscriberLive {
    /// Connects to one Clone server or a Binary Star pair (`tcp://host:port` bases) and watches
    /// `/config/subscriber/`. An unreachable control plane is not fatal: the agent keeps trying in the background
    /// and the subscriber runs on its configured values meanwhile.
    pub fn connect(
        ctx: &zmq::Context,
        servers: &[String],
        id: String,
        config: ClientConfig,
    ) -> Result<Self, FleetError> {
        check_member_id(&id)?;
        let servers = servers
            .iter()
            .map(|s| {
                ServerEndpoints::from_base(s.trim()).map_err(|source| FleetError::Endpoint {
                    endpoint: s.clone(),
                    source,
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        if servers.is_empty() {
            return Err(FleetError::NoServers);
        }
        let client = CloneClient::connect(ctx, &servers, "", config)?;
        if let Err(err) = client.wait_synced(SYNC_WAIT) {
            // The data plane does not wait for the control plane.
            tracing::warn!("Clone servers not reachable yet ({err}); running on configured values");
        }
        let parse: ParseLive = parse_live_value;
        let watch = ConfigWatch::new(&client, LIVE_PREFIX, parse)?;
        Ok(SubscriberLive { client, watch, id })
    }

    /// The member id used under `/members/` and `/alerts/`.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// Applies every live-configuration change received so far.
    pub fn drain(&self, threshold: &SharedThreshold, base: Duration) {
        while let Some(event) = self.watch.try_recv() {
            apply_live(event, threshold, base);
        }
    }

    /// Registers the subscriber under `/members/subscribers/<id>` with `info` for as long as the returned lease
    /// lives (renewed by the agent; it expires `ttl` after the process dies).
    pub fn join(&self, info: &[u8], ttl: Duration) -> Result<Membership<'_>, FleetError> {
        Ok(Membership::join(&self.client, GROUP, &self.id, info, ttl)?)
    }

    /// Best effort: a pager should learn why the subscriber died, but a dead control plane must not keep it alive.
    pub fn alert(&self, fatal: &Fatal) {
        let key = format!("/alerts/{GROUP}/{}", self.id);
        match self
            .client
            .set_with_timeout(&key, fatal.to_json().as_bytes(), None, ALERT_TIMEOUT)
        {
            Ok(_) => tracing::info!(key, "alert written"),
            Err(err) => tracing::warn!(key, "alert not written: {err}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(value: Duration) -> ConfigEvent<Duration> {
        ConfigEvent::Set {
            key: "max_lateness".into(),
            value,
        }
    }

    #[test]
    fn live_max_lateness_sets_ignores_garbage_and_reverts_on_delete() {
        let base = Duration::from_secs(1);
        let threshold = SharedThreshold::new(base);
        apply_live(set(Duration::from_micros(250)), &threshold, base);
        assert_eq!(threshold.get(), Duration::from_micros(250));
        apply_live(
            ConfigEvent::Invalid {
                key: "max_lateness".into(),
                error: "bad".into(),
            },
            &threshold,
            base,
        );
        assert_eq!(threshold.get(), Duration::from_micros(250), "invalid keeps");
        apply_live(set(Duration::from_millis(7)), &threshold, base);
        // Other keys under the prefix are not the threshold.
        apply_live(
            ConfigEvent::Set {
                key: "other".into(),
                value: Duration::from_nanos(1),
            },
            &threshold,
            base,
        );
        assert_eq!(threshold.get(), Duration::from_millis(7));
        apply_live(
            ConfigEvent::Deleted {
                key: "max_lateness".into(),
            },
            &threshold,
            base,
        );
        assert_eq!(
            threshold.get(),
            base,
            "delete reverts to the configured value"
        );
    }

    #[test]
    fn live_values_parse_with_the_subscriber_duration_syntax() {
        assert_eq!(
            parse_live_value(b" 250us\n").unwrap(),
            Duration::from_micros(250)
        );
        assert_eq!(parse_live_value(b"5ms").unwrap(), Duration::from_millis(5));
        assert!(parse_live_value(b"soon").is_err());
        assert!(check_member_id("host-12").is_ok());
        assert!(check_member_id("a/b").is_err());
        assert!(check_member_id("").is_err());
    }
}
