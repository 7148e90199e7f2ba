//! `[security]`: the one section every command reads from `--config`. With no section everything runs as it always
//! has (NULL, nothing checked). A section that names keys must say which mechanism they are for, and every role
//! it names must exist: a typo or a missing line is an error at start, never a silent downgrade to NULL.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::AuthError;

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

/// Who may connect to a CURVE server socket: the keys of a directory of public certificates, or, said explicitly,
/// any key at all (encryption without authentication, as czmq's `zauth` does with no allow-list).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Allow {
    /// The public certificates in this directory (re-read when it changes).
    Dir(PathBuf),
    /// `allow = "any"`: every CURVE key. Said at start, and flagged by `tune check`.
    Any,
}

impl Allow {
    /// The directory, when this names one.
    pub fn dir(&self) -> Option<&Path> {
        match self {
            Allow::Dir(dir) => Some(dir),
            Allow::Any => None,
        }
    }
}

/// The spelling of [`Allow::Any`] in the config. A directory with this name is written `./any`.
pub const ALLOW_ANY: &str = "any";

impl Serialize for Allow {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Allow::Dir(dir) => dir.serialize(s),
            Allow::Any => s.serialize_str(ALLOW_ANY),
        }
    }
}

impl<'de> Deserialize<'de> for Allow {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        Ok(if text == ALLOW_ANY {
            Allow::Any
        } else {
            Allow::Dir(PathBuf::from(text))
        })
    }
}

/// One `[security.services]` entry: the keys that may call a service and the keys that may serve it. The short
/// form, a list, names callers only (and then no key may serve the service: see [`SecurityConfig::services`]).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "ServiceGrantForm", into = "ServiceGrantTable")]
pub struct ServiceGrant {
    /// Keys that may send requests to the service.
    pub call: Vec<String>,
    /// Keys that may register as its worker (MDP `READY`), answer for it on a queue backend, or host it.
    pub serve: Vec<String>,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum ServiceGrantForm {
    Callers(Vec<String>),
    Table(ServiceGrantTable),
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct ServiceGrantTable {
    #[serde(default)]
    call: Vec<String>,
    #[serde(default)]
    serve: Vec<String>,
}

impl From<ServiceGrantForm> for ServiceGrant {
    fn from(form: ServiceGrantForm) -> Self {
        match form {
            ServiceGrantForm::Callers(call) => ServiceGrant {
                call,
                serve: Vec::new(),
            },
            ServiceGrantForm::Table(t) => ServiceGrant {
                call: t.call,
                serve: t.serve,
            },
        }
    }
}

impl From<ServiceGrant> for ServiceGrantTable {
    fn from(g: ServiceGrant) -> Self {
        ServiceGrantTable {
            call: g.call,
            serve: g.serve,
        }
    }
}

/// `[security]`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SecurityConfig {
    /// `"null"` or `"curve"`. Required as soon as the section names a key, a certificate, an allow directory, a
    /// grant or a role: without it such a section is an error (it would otherwise run NULL and check nothing).
    pub mechanism: Option<MechanismName>,
    /// This process's own secret certificate (`NAME_secret`, or `NAME` when its `_secret` sibling exists). Needed
    /// by every process that binds with CURVE; a client without one uses a fresh key pair per run (which an
    /// `allow` list then refuses). A relative path is read from the config file's directory.
    pub certificate: Option<PathBuf>,
    /// The public key a client expects of the servers it connects to: a certificate path or 40 characters of Z85.
    pub server_key: Option<String>,
    /// Who may connect to this process's CURVE server sockets: a directory of public certificates (re-read when
    /// it changes: a removed file is refused on its next handshake, and live sessions of a removed key end, see
    /// the security chapter), or `"any"` to admit every CURVE key, said explicitly. A process that binds under
    /// CURVE needs one of the two.
    pub allow: Option<Allow>,
    /// Peer addresses (IPs or CIDR blocks) that may connect; empty allows any. Applies to every mechanism, so a
    /// deployment without keys can still fence a port. Local transports (ipc, inproc) carry no address and pass.
    pub allow_ips: Vec<String>,
    /// Peer addresses (IPs or CIDR blocks) always refused, checked before `allow_ips`.
    pub deny_ips: Vec<String>,
    /// Control-plane authorisation, per Majordomo service name (or a prefix ending in `*`, such as
    /// `tickbox.replay.*`): `{ call = [keys], serve = [keys] }`, or a plain list of the keys that may call. Keys are
    /// certificate names in `allow`, certificate paths or Z85. A service no entry names may be called by every
    /// authenticated client. Once this table has any entry, a key may serve (register as a worker of, or answer on
    /// a queue backend for) only a service whose `serve` names it, and clients and workers are kept apart by key.
    pub services: BTreeMap<String, ServiceGrant>,
    /// Keys that may change the Clone server's `/config/` subtree; empty lets any authenticated client.
    pub config_writers: Vec<String>,
    /// Data-plane authorisation: a publisher key to the publisher ids it may publish. When any key is listed, a
    /// message whose publisher id is not bound to the key that sent it is refused and counted.
    pub publishers: BTreeMap<String, Vec<u32>>,
    /// Per-component overrides, by role (`feed`, `lvc`, `lvc.upstream`, `subscriber`, `broker`, ...; the list is in
    /// the security chapter, and a name that is no role is an error): the most specific role (`lvc.upstream`,
    /// then `lvc`) wins over the fields above.
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
    /// Who may connect to this role's bound sockets (a directory, or `"any"`).
    pub allow: Option<Allow>,
}

/// Every socket role tickbox names (the ZAP domain of its bound sockets, the key of `[security.roles]`). A config
/// role may be one of these or a parent of some (`lvc` for `lvc.downstream`).
pub const ROLES: &[&str] = &[
    "feed",
    "replay",
    "lvc.upstream",
    "lvc.downstream",
    "lvc.tap",
    "lvc.snapshot",
    "tap",
    "subscriber",
    "record",
    "recorder.history",
    "broker",
    "bstar",
    "clone",
    "clone.peer",
    "clone.snapshot",
    "clone.publisher",
    "clone.collector",
    "queue.frontend",
    "queue.backend",
    "freelance",
    "lazy",
    "bench.raw",
];

/// True when `role` is a role of [`ROLES`] or a parent of one.
pub fn is_known_role(role: &str) -> bool {
    ROLES.iter().any(|known| {
        *known == role
            || known
                .strip_prefix(role)
                .is_some_and(|rest| rest.starts_with('.'))
    })
}

impl SecurityConfig {
    /// True when the section asks for anything at all: CURVE, or IP fencing.
    pub fn is_active(&self) -> bool {
        self.mechanism() == MechanismName::Curve
            || !self.allow_ips.is_empty()
            || !self.deny_ips.is_empty()
    }

    /// The mechanism (NULL when the section does not say, which [`SecurityConfig::validate`] allows only for a
    /// section that names no key).
    pub fn mechanism(&self) -> MechanismName {
        self.mechanism.unwrap_or_default()
    }

    /// The override for `role` or its closest parent (`lvc` for `lvc.upstream`), if any.
    pub fn role(&self, role: &str) -> Option<&RoleOverride> {
        most_specific(&self.roles, role)
    }

    /// Refuses a section that would run with less than it says: keys without a mechanism, keys under NULL, and
    /// role names that are no role.
    pub fn validate(&self) -> Result<(), AuthError> {
        let named = self.named_key_fields();
        match self.mechanism {
            None if !named.is_empty() => {
                return Err(AuthError::Config(format!(
                    "names {} but no `mechanism`: add mechanism = \"curve\" (without it the section would run \
                     NULL and check no key)",
                    named.join(", ")
                )))
            }
            Some(MechanismName::Null) if !named.is_empty() => {
                return Err(AuthError::Config(format!(
                    "mechanism = \"null\" carries no keys, but the section names {}: set mechanism = \"curve\" \
                     or remove them",
                    named.join(", ")
                )))
            }
            _ => {}
        }
        for role in self.roles.keys() {
            if !is_known_role(role) {
                let hint = closest_role(role)
                    .map(|r| format!("; did you mean \"{r}\"?"))
                    .unwrap_or_default();
                return Err(AuthError::Config(format!(
                    "roles.\"{role}\" is no role{hint} (roles: {})",
                    ROLES.join(", ")
                )));
            }
        }
        Ok(())
    }

    /// Resolves every relative path of the section (certificates, allow directories, key names that are
    /// paths) against `base`, the directory of the config file, so a config means the same from any directory.
    pub fn resolve_paths(&mut self, base: &Path) {
        let rebase = |p: &mut PathBuf| {
            if p.is_relative() {
                *p = base.join(&*p);
            }
        };
        let rebase_allow = |a: &mut Allow| {
            if let Allow::Dir(dir) = a {
                if dir.is_relative() {
                    *dir = base.join(&*dir);
                }
            }
        };
        if let Some(p) = self.certificate.as_mut() {
            rebase(p);
        }
        if let Some(a) = self.allow.as_mut() {
            rebase_allow(a);
        }
        for over in self.roles.values_mut() {
            if let Some(p) = over.certificate.as_mut() {
                rebase(p);
            }
            if let Some(a) = over.allow.as_mut() {
                rebase_allow(a);
            }
        }
        // Key names stay names (they are looked up in `allow` first); only those that point at a file relative
        // to the config become absolute.
        // A relative path that names a file is rebased even when it also reads as Z85 (40 characters can).
        let rebase_key = |spec: &mut String| {
            let path = Path::new(spec.as_str());
            if path.is_relative() && path.components().count() > 1 {
                let joined = base.join(path);
                if joined.is_file() {
                    *spec = joined.to_string_lossy().into_owned();
                }
            }
        };
        if let Some(k) = self.server_key.as_mut() {
            rebase_key(k);
        }
        for over in self.roles.values_mut() {
            if let Some(k) = over.server_key.as_mut() {
                rebase_key(k);
            }
        }
        for grant in self.services.values_mut() {
            grant.call.iter_mut().for_each(rebase_key);
            grant.serve.iter_mut().for_each(rebase_key);
        }
        self.config_writers.iter_mut().for_each(rebase_key);
        let publishers = std::mem::take(&mut self.publishers);
        self.publishers = publishers
            .into_iter()
            .map(|(mut k, ids)| {
                rebase_key(&mut k);
                (k, ids)
            })
            .collect();
    }

    /// The fields set that only mean something under CURVE.
    fn named_key_fields(&self) -> Vec<&'static str> {
        [
            ("certificate", self.certificate.is_some()),
            ("server_key", self.server_key.is_some()),
            ("allow", self.allow.is_some()),
            ("services", !self.services.is_empty()),
            ("config_writers", !self.config_writers.is_empty()),
            ("publishers", !self.publishers.is_empty()),
            ("roles", !self.roles.is_empty()),
        ]
        .into_iter()
        .filter_map(|(name, set)| set.then_some(name))
        .collect()
    }
}

/// The known role nearest to `role` by edit distance, when it is near enough to be a typo.
fn closest_role(role: &str) -> Option<String> {
    let mut candidates: Vec<String> = ROLES.iter().map(|r| r.to_string()).collect();
    // Parents are valid names too (`lvc`, `clone`, `queue`, `recorder`).
    for r in ROLES {
        let mut name = *r;
        while let Some((parent, _)) = name.rsplit_once('.') {
            candidates.push(parent.to_string());
            name = parent;
        }
    }
    candidates
        .into_iter()
        .map(|c| (edit_distance(role, &c), c))
        .filter(|(d, c)| *d <= 2.max(c.len() / 4))
        .min_by_key(|(d, _)| *d)
        .map(|(_, c)| c)
}

fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut prev = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let cur = row[j + 1];
            row[j + 1] = if ca == *cb {
                prev
            } else {
                1 + prev.min(cur).min(row[j])
            };
            prev = cur;
        }
    }
    row[b.len()]
}

impl fmt::Display for MechanismName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            MechanismName::Null => "null",
            MechanismName::Curve => "curve",
        })
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

    fn parse(text: &str) -> SecurityConfig {
        toml::from_str(text).unwrap()
    }

    #[test]
    fn an_absent_section_is_null_and_inactive() {
        let cfg = parse("");
        assert_eq!(cfg.mechanism(), MechanismName::Null);
        assert!(!cfg.is_active());
        cfg.validate().unwrap();
    }

    #[test]
    fn a_full_section_parses_and_roles_fall_back_to_their_parent() {
        let cfg = parse(
            r#"
mechanism = "curve"
certificate = "keys/lvc_secret"
server_key = "keys/feed"
allow = "keys/allowed"
deny_ips = ["10.9.0.0/16"]
config_writers = ["ops"]
[services]
"tickbox.replay.*" = ["ops"]
"tickbox.replay.status" = { call = ["ops", "viewer"], serve = ["replayer"] }
[publishers]
feed = [1, 2]
[roles.lvc]
server_key = "keys/feed"
[roles."lvc.downstream"]
allow = "any"
"#,
        );
        cfg.validate().unwrap();
        assert!(cfg.is_active());
        assert_eq!(
            cfg.role("lvc.upstream").unwrap().server_key.as_deref(),
            Some("keys/feed")
        );
        assert_eq!(cfg.role("lvc.downstream").unwrap().allow, Some(Allow::Any));
        assert_eq!(cfg.allow, Some(Allow::Dir("keys/allowed".into())));
        assert!(cfg.role("subscriber").is_none());
        assert_eq!(
            cfg.services["tickbox.replay.*"],
            ServiceGrant {
                call: vec!["ops".into()],
                serve: vec![]
            }
        );
        assert_eq!(cfg.services["tickbox.replay.status"].serve, ["replayer"]);
        assert!(toml::from_str::<SecurityConfig>("mechanism = \"plain\"").is_err());
        assert!(
            toml::from_str::<SecurityConfig>("allowed = \"x\"").is_err(),
            "unknown keys are errors"
        );
        assert!(
            toml::from_str::<SecurityConfig>("[services]\nx = { callers = [\"a\"] }").is_err(),
            "unknown grant fields are errors"
        );
    }

    #[test]
    fn keys_without_a_mechanism_or_under_null_are_errors_not_a_silent_null() {
        for text in [
            "certificate = \"k_secret\"\nserver_key = \"k\"\nallow = \"keys\"",
            "[roles.lvc]\nallow = \"keys\"",
            "[services]\necho = [\"ops\"]",
        ] {
            let err = parse(text).validate().unwrap_err().to_string();
            assert!(err.contains("no `mechanism`"), "{text}: {err}");
        }
        let err = parse("mechanism = \"null\"\nallow = \"keys\"")
            .validate()
            .unwrap_err()
            .to_string();
        assert!(err.contains("carries no keys"), "{err}");
        parse("mechanism = \"null\"\nallow_ips = [\"127.0.0.1\"]")
            .validate()
            .unwrap();
    }

    #[test]
    fn a_misspelt_role_is_an_error_with_a_suggestion() {
        let err = parse("mechanism = \"curve\"\n[roles.\"lvc.dowstream\"]\nallow = \"any\"")
            .validate()
            .unwrap_err()
            .to_string();
        assert!(err.contains("did you mean \"lvc.downstream\""), "{err}");
        for good in ["lvc", "lvc.downstream", "clone", "queue", "recorder"] {
            assert!(is_known_role(good), "{good}");
        }
        for bad in ["lv", "lvc.down", "nonsense", "clone.snap"] {
            assert!(!is_known_role(bad), "{bad}");
        }
    }

    #[test]
    fn relative_paths_resolve_against_the_config_directory() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("keys")).unwrap();
        std::fs::write(dir.path().join("keys/feed"), "x").unwrap();
        let mut cfg = parse(
            "mechanism = \"curve\"\ncertificate = \"keys/me_secret\"\nallow = \"keys\"\nserver_key = \"keys/feed\"\n\
             [services]\necho = [\"ops\"]",
        );
        cfg.resolve_paths(dir.path());
        assert_eq!(cfg.certificate.unwrap(), dir.path().join("keys/me_secret"));
        assert_eq!(cfg.allow, Some(Allow::Dir(dir.path().join("keys"))));
        assert_eq!(
            cfg.server_key.unwrap(),
            dir.path().join("keys/feed").to_string_lossy()
        );
        assert_eq!(
            cfg.services["echo"].call,
            ["ops"],
            "a bare name stays a name"
        );
    }
}
