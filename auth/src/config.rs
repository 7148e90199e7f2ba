//! `[security]`: the one section every command reads from `--config`. With no section (or `mechanism = "null"`
//! and no IP lists) everything runs as it always has.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// The ZeroMQ security mechanism on every socket the process binds or connects.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum MechanismName {
    /// No encryption, no keys. ZAP still runs (and can fence by IP) when `allow_ips` or `deny_ips` is set.
    #[default]
    Null,
    /// CurveZMQ: every connection encrypted, every client authenticated by its public key.
    Curve,
}

/// `[security]`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SecurityConfig {
    /// `"null"` (the default) or `"curve"`.
    pub mechanism: MechanismName,
    /// This process's own secret certificate (`NAME_secret`, or `NAME` when its `_secret` sibling exists). Needed
    /// by every process that binds with CURVE; a client without one uses a fresh key pair per run (which an
    /// `allow` list then refuses).
    pub certificate: Option<PathBuf>,
    /// The public key a client expects of the servers it connects to: a certificate path or 40 characters of Z85.
    pub server_key: Option<String>,
    /// A directory of public certificates whose holders may connect (re-read when it changes, so a removed file
    /// is refused on its next handshake). Absent: any CURVE client may connect, as czmq's `zauth` does.
    pub allow: Option<PathBuf>,
    /// Peer addresses (IPs or CIDR blocks) that may connect; empty allows any. Applies to every mechanism, so a
    /// deployment without keys can still fence a port. Local transports (ipc, inproc) carry no address and pass.
    pub allow_ips: Vec<String>,
    /// Peer addresses (IPs or CIDR blocks) always refused, checked before `allow_ips`.
    pub deny_ips: Vec<String>,
    /// Control-plane authorisation: a Majordomo service name (or a prefix ending in `*`, such as
    /// `tickbox.replay.*`) to the keys that may call it (certificate names in `allow`, certificate paths or Z85).
    /// A service no entry names is open to every authenticated client.
    pub services: BTreeMap<String, Vec<String>>,
    /// Keys that may change the Clone server's `/config/` subtree; empty lets any authenticated client.
    pub config_writers: Vec<String>,
    /// Data-plane authorisation: a publisher key to the publisher ids it may publish. When any key is listed, a
    /// message whose publisher id is not bound to the key that sent it is refused and counted.
    pub publishers: BTreeMap<String, Vec<u32>>,
    /// Per-component overrides, by role (`feed`, `lvc`, `lvc.upstream`, `subscriber`, `broker`, ...): the most
    /// specific role (`lvc.upstream`, then `lvc`) wins over the fields above.
    pub roles: BTreeMap<String, RoleOverride>,
}

/// `[security.roles.<role>]`: what differs for one component.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RoleOverride {
    /// The server key this role's connecting sockets expect.
    pub server_key: Option<String>,
    /// The certificate this role's sockets present.
    pub certificate: Option<PathBuf>,
    /// The allow directory for this role's bound sockets.
    pub allow: Option<PathBuf>,
}

impl SecurityConfig {
    /// True when the section asks for anything at all: CURVE, or IP fencing.
    pub fn is_active(&self) -> bool {
        self.mechanism == MechanismName::Curve
            || !self.allow_ips.is_empty()
            || !self.deny_ips.is_empty()
    }

    /// The override for `role` or its closest parent (`lvc` for `lvc.upstream`), if any.
    pub fn role(&self, role: &str) -> Option<&RoleOverride> {
        most_specific(&self.roles, role)
    }
}

/// The entry of `map` for `role` or, failing that, for its closest parent role (`lvc.upstream`, then `lvc`): the
/// one lookup rule for every per-role setting (overrides, certificates, server keys, allow directories).
pub(crate) fn most_specific<'a, T>(map: &'a BTreeMap<String, T>, role: &str) -> Option<&'a T> {
    let mut name = role;
    loop {
        if let Some(found) = map.get(name) {
            return Some(found);
        }
        name = name.rsplit_once('.')?.0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_absent_section_is_null_and_inactive() {
        let cfg: SecurityConfig = toml::from_str("").unwrap();
        assert_eq!(cfg.mechanism, MechanismName::Null);
        assert!(!cfg.is_active());
    }

    #[test]
    fn a_full_section_parses_and_roles_fall_back_to_their_parent() {
        let cfg: SecurityConfig = toml::from_str(
            r#"
mechanism = "curve"
certificate = "keys/lvc_secret"
server_key = "keys/feed"
allow = "keys/allowed"
deny_ips = ["10.9.0.0/16"]
config_writers = ["ops"]
[services]
"tickbox.replay.*" = ["ops"]
[publishers]
feed = [1, 2]
[roles.lvc]
server_key = "keys/feed"
"#,
        )
        .unwrap();
        assert!(cfg.is_active());
        assert_eq!(
            cfg.role("lvc.upstream").unwrap().server_key.as_deref(),
            Some("keys/feed")
        );
        assert!(cfg.role("subscriber").is_none());
        assert!(toml::from_str::<SecurityConfig>("mechanism = \"plain\"").is_err());
        assert!(
            toml::from_str::<SecurityConfig>("allowed = \"x\"").is_err(),
            "unknown keys are errors"
        );
    }
}
