//! The one TOML file that describes a deployment. Each section is the owning crate's own config type, and every
//! field has a default, so an empty file (or none) is a valid config. Unknown keys are rejected so a typo is an
//! error, not a silently ignored setting.

use std::path::Path;

use anyhow::Context;
use serde::Deserialize;

#[derive(Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TickboxConfig {
    // Sections are added by the crates that own them, e.g.
    // pub feed: tickbox_feed::FeedConfig,
    pub feed: tickbox_feed::FeedConfig,
    pub lvc: tickbox_feed::lvc::LvcConfig,
    pub subscriber: tickbox_subscriber::SubscriberConfig,
    pub workers: tickbox_workers::WorkersConfig,
    pub clone: tickbox_control::clone::CloneConfig,
    pub broker: tickbox_control::mdp::BrokerConfig,
    pub titanic: tickbox_control::titanic::TitanicConfig,
    pub recorder: tickbox_recorder::RecorderConfig,
}

impl TickboxConfig {
    pub fn load(path: Option<&Path>) -> anyhow::Result<Self> {
        let Some(path) = path else {
            return Ok(Self::default());
        };
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("reading config {}", path.display()))?;
        toml::from_str(&text).with_context(|| format!("parsing config {}", path.display()))
    }
}
