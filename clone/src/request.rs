//! How a one-shot client of the store (`tickbox ctl`) sets itself up for one request: which subtree it
//! subscribes to, and how long it gives each server of a pair. Plain functions, tested without sockets.

use std::time::Duration;

use crate::ClientConfig;

/// The subtree a request on `key` needs: the key's parent (`/config/a/b` → `/config/a/`), or the whole store for
/// a key without one.
pub fn parent_subtree(key: &str) -> String {
    match key.rfind('/') {
        Some(i) if i > 0 && key.starts_with('/') => key[..=i].to_owned(),
        _ => String::new(),
    }
}

/// `config` for one request within `timeout` to `servers` servers: with a pair, each server gets at most a third
/// of the timeout (at least 300 ms) so both can be tried; a `snapshot_only` request (get, ls) does not wait for
/// the update stream before asking for the snapshot.
pub fn one_shot_config(
    mut config: ClientConfig,
    servers: usize,
    timeout: Duration,
    snapshot_only: bool,
) -> ClientConfig {
    if servers > 1 {
        let ttl = Duration::from_millis((timeout.as_millis() as u64 / 3).max(300));
        config.server_ttl = config.server_ttl.min(ttl.into());
    }
    if snapshot_only {
        config.subscribe_wait = Duration::ZERO.into();
    }
    config
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_subtree_is_the_keys_parent() {
        assert_eq!(parent_subtree("/config/a/b"), "/config/a/");
        assert_eq!(parent_subtree("/top"), "");
        assert_eq!(parent_subtree("plain"), "");
        assert_eq!(parent_subtree("rel/key"), "");
        assert_eq!(parent_subtree("/config/"), "/config/");
    }

    #[test]
    fn a_pair_shares_the_timeout_and_a_snapshot_does_not_wait() {
        let base = ClientConfig::default();
        let one = one_shot_config(base.clone(), 1, Duration::from_secs(3), false);
        assert_eq!(one.server_ttl, base.server_ttl);
        assert_eq!(one.subscribe_wait, base.subscribe_wait);
        let pair = one_shot_config(base.clone(), 2, Duration::from_millis(600), true);
        assert_eq!(
            pair.server_ttl.0,
            base.server_ttl.0.min(Duration::from_millis(300))
        );
        assert_eq!(pair.subscribe_wait.0, Duration::ZERO);
    }
}
