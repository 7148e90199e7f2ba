//! Small coordination recipes on top of [`CloneClient`] for the data plane: membership registration and config
//! watching.

use std::time::Duration;

use crossbeam_channel::Receiver;

use crate::engine::client::Change;
use crate::{CloneClient, CloneError};

/// Prefix under which members register.
pub const MEMBERS: &str = "/members/";
/// Prefix under which configuration lives.
pub const CONFIG: &str = "/config/";

/// A member entry: `/members/{group}/{id}` = `info`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    /// The group the member joined (one path segment).
    pub group: String,
    /// The member's id within its group.
    pub id: String,
    /// Whatever the member advertises (the recipes never parse it).
    pub info: Vec<u8>,
}

fn member_key(group: &str, id: &str) -> String {
    format!("{MEMBERS}{group}/{id}")
}

/// A registration kept alive by the client's agent: the key has a server-side TTL and is refreshed every third
/// of it, so it disappears `ttl` after the process dies and at once on [`Membership::leave`] or drop.
pub struct Membership<'a> {
    client: &'a CloneClient,
    key: String,
}

impl<'a> Membership<'a> {
    /// Registers `/members/{group}/{id}` = `info` with a server-side `ttl`. Returns once the agent has the lease;
    /// the first write is not acknowledged, so a reader may see the member a moment later.
    pub fn join(
        client: &'a CloneClient,
        group: &str,
        id: &str,
        info: &[u8],
        ttl: Duration,
    ) -> Result<Self, CloneError> {
        let key = member_key(group, id);
        client.lease(&key, info, ttl)?;
        Ok(Membership { client, key })
    }

    /// The full key of the registration.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// Replace the advertised info (keeps the lease).
    pub fn update(&self, info: &[u8], ttl: Duration) -> Result<(), CloneError> {
        self.client.lease(&self.key, info, ttl)
    }

    /// Stops refreshing and deletes the key now (dropping the handle does the same, ignoring errors).
    pub fn leave(self) -> Result<(), CloneError> {
        let r = self.client.unlease(&self.key);
        std::mem::forget(self);
        r
    }
}

impl Drop for Membership<'_> {
    fn drop(&mut self) {
        let _ = self.client.unlease(&self.key);
    }
}

/// Current members of `group`.
pub fn members(client: &CloneClient, group: &str) -> Result<Vec<Member>, CloneError> {
    let prefix = format!("{MEMBERS}{group}/");
    Ok(client
        .list(&prefix)?
        .into_iter()
        .map(|(k, info)| Member {
            group: group.to_owned(),
            id: k[prefix.len()..].to_owned(),
            info,
        })
        .collect())
}

/// One configuration change, parsed.
#[derive(Debug, Clone, PartialEq)]
pub enum ConfigEvent<T> {
    /// Key (relative to the watched prefix) set to a value that parsed.
    Set {
        /// The key below the watched prefix.
        key: String,
        /// The parsed value.
        value: T,
    },
    /// Key deleted.
    Deleted {
        /// The key below the watched prefix.
        key: String,
    },
    /// Key set to a value that did not parse; the previous value stays in force.
    Invalid {
        /// The key below the watched prefix.
        key: String,
        /// The parser's error message.
        error: String,
    },
}

/// Watches `/config/{prefix}` keys and parses each value with `parse`. Current values are delivered first.
pub struct ConfigWatch<T, F> {
    rx: Receiver<Change>,
    base: String,
    parse: F,
    _marker: std::marker::PhantomData<fn() -> T>,
}

impl<T, E: std::fmt::Display, F: Fn(&[u8]) -> Result<T, E>> ConfigWatch<T, F> {
    /// Watches keys under `/config/{prefix}`; the current entries arrive first, as `Set` or `Invalid` events.
    pub fn new(client: &CloneClient, prefix: &str, parse: F) -> Result<Self, CloneError> {
        let base = format!("{CONFIG}{prefix}");
        let rx = client.watch(&base, true)?;
        Ok(ConfigWatch {
            rx,
            base,
            parse,
            _marker: std::marker::PhantomData,
        })
    }

    fn convert(&self, change: Change) -> ConfigEvent<T> {
        let key = change
            .key
            .strip_prefix(&self.base)
            .unwrap_or(&change.key)
            .to_owned();
        match change.value {
            None => ConfigEvent::Deleted { key },
            Some(v) => match (self.parse)(&v) {
                Ok(value) => ConfigEvent::Set { key, value },
                Err(e) => {
                    tracing::warn!(key = %change.key, "invalid config value: {e}");
                    ConfigEvent::Invalid {
                        key,
                        error: e.to_string(),
                    }
                }
            },
        }
    }

    /// Next change, waiting at most `timeout`.
    pub fn recv_timeout(&self, timeout: Duration) -> Option<ConfigEvent<T>> {
        self.rx.recv_timeout(timeout).ok().map(|c| self.convert(c))
    }

    /// Next change if one is queued.
    pub fn try_recv(&self) -> Option<ConfigEvent<T>> {
        self.rx.try_recv().ok().map(|c| self.convert(c))
    }
}
