//! Authorisation by the ZAP user id (the client's Z85 public key, the `User-Id` property of each message): which
//! keys may call which control services, change the Clone `/config/` subtree, or publish as which publisher ids.
//! Sans-IO: the names in `[security]` are resolved to keys when the config is loaded.

use std::collections::{BTreeMap, BTreeSet};

/// Resolved authorisation rules. The default grants everything (no `[security]` rules).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Grants {
    /// Service name or prefix (ending in `*`) to the keys allowed to call it.
    pub services: Vec<(String, BTreeSet<String>)>,
    /// Service name or prefix to the keys allowed to serve it (register as its worker, answer for it).
    pub servers: Vec<(String, BTreeSet<String>)>,
    /// True once `[security.services]` has any entry: then a key serves only what a `serve` grant names.
    pub workers_restricted: bool,
    /// Keys that may write `/config/`; `None` lets any authenticated client.
    pub config_writers: Option<BTreeSet<String>>,
    /// Publisher key to the publisher ids it may use; empty means no binding is enforced.
    pub publishers: BTreeMap<String, BTreeSet<u32>>,
}

/// The answer to "may this caller do that?"; a refusal names the rule so the error reply can say why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Access {
    /// Allowed.
    Granted,
    /// Refused by the rule for `rule`.
    Refused {
        /// The service pattern, `/config/`, or `publisher N` that refused it.
        rule: String,
    },
}

impl Access {
    /// True when granted.
    pub fn is_granted(&self) -> bool {
        matches!(self, Access::Granted)
    }
}

impl Grants {
    /// May `user` (None: an unauthenticated peer) call `service`? The most specific rule that matches decides: an
    /// exact name beats the longest `prefix*`. A service no rule names is open.
    pub fn may_call(&self, user: Option<&str>, service: &str) -> Access {
        let rule = self
            .services
            .iter()
            .filter(|(pattern, _)| matches(pattern, service))
            .max_by_key(|(pattern, _)| (!pattern.ends_with('*'), pattern.len()));
        match rule {
            None => Access::Granted,
            Some((pattern, keys)) => granted_if(user.is_some_and(|u| keys.contains(u)), pattern),
        }
    }

    /// May `user` serve `service` (an MDP worker's `READY`, a queue backend's worker)? Without
    /// `[security.services]` every authenticated key may; with it, only a key that the most specific `serve`
    /// grant matching the service names, so a key granted to call (or a stranger's listed key) cannot pose as the
    /// service and read its requests.
    pub fn may_serve(&self, user: Option<&str>, service: &str) -> Access {
        if !self.workers_restricted {
            return Access::Granted;
        }
        let rule = self
            .servers
            .iter()
            .filter(|(pattern, _)| matches(pattern, service))
            .max_by_key(|(pattern, _)| (!pattern.ends_with('*'), pattern.len()));
        match rule {
            None => Access::Refused {
                rule: format!("serve {service}"),
            },
            Some((pattern, keys)) => granted_if(
                user.is_some_and(|u| keys.contains(u)),
                &format!("serve {pattern}"),
            ),
        }
    }

    /// May `user` set or delete `key` in the Clone store? Only `/config/...` keys are guarded.
    pub fn may_write(&self, user: Option<&str>, key: &str) -> Access {
        match &self.config_writers {
            Some(writers) if key.starts_with("/config/") => {
                granted_if(user.is_some_and(|u| writers.contains(u)), "/config/")
            }
            _ => Access::Granted,
        }
    }

    /// May `user` publish as `publisher`? When bindings exist, the id must be bound to exactly this key.
    pub fn may_publish(&self, user: Option<&str>, publisher: u32) -> bool {
        if self.publishers.is_empty() {
            return true;
        }
        user.and_then(|u| self.publishers.get(u))
            .is_some_and(|ids| ids.contains(&publisher))
    }

    /// True when publisher ids are bound to keys (the data path then checks every message's sender).
    pub fn binds_publishers(&self) -> bool {
        !self.publishers.is_empty()
    }
}

fn matches(pattern: &str, service: &str) -> bool {
    match pattern.strip_suffix('*') {
        Some(prefix) => service.starts_with(prefix),
        None => pattern == service,
    }
}

fn granted_if(ok: bool, rule: &str) -> Access {
    if ok {
        Access::Granted
    } else {
        Access::Refused {
            rule: rule.to_string(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(keys: &[&str]) -> BTreeSet<String> {
        keys.iter().map(|k| k.to_string()).collect()
    }

    #[test]
    fn the_most_specific_service_rule_decides() {
        let grants = Grants {
            services: vec![
                ("tickbox.replay.*".into(), set(&["ops"])),
                ("tickbox.replay.status".into(), set(&["ops", "viewer"])),
            ],
            ..Grants::default()
        };
        assert!(grants
            .may_call(Some("ops"), "tickbox.replay.stop")
            .is_granted());
        assert_eq!(
            grants.may_call(Some("viewer"), "tickbox.replay.stop"),
            Access::Refused {
                rule: "tickbox.replay.*".into()
            }
        );
        assert!(grants
            .may_call(Some("viewer"), "tickbox.replay.status")
            .is_granted());
        assert!(!grants.may_call(None, "tickbox.replay.stop").is_granted());
        assert!(
            grants.may_call(None, "echo").is_granted(),
            "unnamed services stay open"
        );
    }

    #[test]
    fn once_services_are_listed_only_a_serve_grant_lets_a_key_serve() {
        assert!(Grants::default()
            .may_serve(Some("any"), "echo")
            .is_granted());
        let grants = Grants {
            services: vec![("tickbox.replay.status".into(), set(&["viewer"]))],
            servers: vec![
                ("tickbox.replay.*".into(), set(&["replayer"])),
                ("titanic.*".into(), set(&["titanic"])),
            ],
            workers_restricted: true,
            ..Grants::default()
        };
        assert!(grants
            .may_serve(Some("replayer"), "tickbox.replay.start")
            .is_granted());
        assert_eq!(
            grants.may_serve(Some("viewer"), "tickbox.replay.start"),
            Access::Refused {
                rule: "serve tickbox.replay.*".into()
            },
            "a caller's key cannot pose as the worker"
        );
        assert!(!grants
            .may_serve(Some("replayer"), "titanic.request")
            .is_granted());
        assert!(
            !grants.may_serve(Some("replayer"), "echo").is_granted(),
            "a service no grant names has no worker"
        );
        assert!(!grants.may_serve(None, "titanic.request").is_granted());
    }

    #[test]
    fn config_writes_and_publisher_ids_are_bound_to_keys() {
        let grants = Grants {
            config_writers: Some(set(&["ops"])),
            publishers: BTreeMap::from([("feed".to_string(), BTreeSet::from([1, 2]))]),
            ..Grants::default()
        };
        assert!(grants
            .may_write(Some("ops"), "/config/subscriber/max_lateness")
            .is_granted());
        assert!(!grants
            .may_write(Some("viewer"), "/config/subscriber/max_lateness")
            .is_granted());
        assert!(grants
            .may_write(Some("viewer"), "/quotes/AAPL")
            .is_granted());
        assert!(grants.may_publish(Some("feed"), 2));
        assert!(!grants.may_publish(Some("feed"), 3));
        assert!(!grants.may_publish(Some("stranger"), 1));
        assert!(!grants.may_publish(None, 1));
        assert!(
            Grants::default().may_publish(None, 9),
            "no bindings: no check"
        );
    }
}
