//! [`Security`]: a loaded `[security]` section, applied to each socket as it is bound (`server`) or connected
//! (`client`), with the ZAP handler every process starts in its context before it binds.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use crate::cap::{ConnectionCaps, RoleConnectionCounts};
use crate::cert::Certificate;
use crate::config::{most_specific, MechanismName, SecurityConfig};
use crate::grants::Grants;
use crate::policy::{Gatekeeper, IpBlock};
use crate::stats::{AuthStats, AuthSummary};
use crate::zap::{AllowDirs, ZapHandler};
use crate::{z85, AuthError};

/// A process's security settings, cheap to clone into every component. The default is NULL with nothing
/// checked: exactly what tickbox did before `[security]` existed.
#[derive(Debug, Clone, Default)]
pub struct Security {
    inner: Option<Arc<Inner>>,
}

#[derive(Debug)]
struct Inner {
    mechanism: MechanismName,
    /// This process's certificate (with its secret key), or a fresh pair when none was configured.
    own: Certificate,
    own_configured: bool,
    role_certs: BTreeMap<String, Certificate>,
    server_key: Option<[u8; 32]>,
    role_server_keys: BTreeMap<String, [u8; 32]>,
    gate: Gatekeeper,
    dirs: AllowDirs,
    grants: Grants,
    stats: AuthStats,
    /// Monitor endpoints of server sockets, with their roles, for the ZAP loop to watch for failed handshakes.
    monitors: crate::zap::MonitorQueue,
    /// False for a handle made only to cap connections ([`Security::cap_connections`] without `[security]`):
    /// nothing else is checked, and summaries stay as they were without `[security]`.
    checks: bool,
    /// Connection caps per role, counted by the ZAP loop.
    caps: Arc<Mutex<ConnectionCaps>>,
}

/// Two handles are equal when they share one loaded section (component configs derive `PartialEq`).
impl PartialEq for Security {
    fn eq(&self, other: &Self) -> bool {
        match (&self.inner, &other.inner) {
            (None, None) => true,
            (Some(a), Some(b)) => Arc::ptr_eq(a, b),
            _ => false,
        }
    }
}

impl Eq for Security {}

impl Security {
    /// Loads certificates and resolves every key name in `cfg`. An inactive section gives [`Security::default`].
    pub fn from_config(cfg: &SecurityConfig) -> Result<Security, AuthError> {
        let has_rules = !cfg.services.is_empty()
            || !cfg.config_writers.is_empty()
            || !cfg.publishers.is_empty();
        if has_rules && cfg.mechanism != MechanismName::Curve {
            // Under NULL no peer has a key, so rules naming keys could never grant anything; silently ignoring them
            // would leave open what the operator meant to close.
            return Err(AuthError::Config(
                "services, config_writers and publishers name keys: they need mechanism = \"curve\"".into(),
            ));
        }
        if !cfg.is_active() {
            return Ok(Security::default());
        }
        let allow_ips = parse_ips(&cfg.allow_ips, "allow_ips")?;
        let deny_ips = parse_ips(&cfg.deny_ips, "deny_ips")?;
        let curve = cfg.mechanism == MechanismName::Curve;
        let (own, own_configured) = match &cfg.certificate {
            Some(path) => (Certificate::load_secret(path)?, true),
            None if curve => (fresh_pair()?, false),
            None => (placeholder(), false),
        };
        let allow = cfg.allow.as_deref();
        let mut role_certs = BTreeMap::new();
        let mut role_server_keys = BTreeMap::new();
        let mut dirs = AllowDirs {
            default: cfg.allow.clone(),
            by_role: BTreeMap::new(),
        };
        for (role, over) in &cfg.roles {
            if let Some(path) = &over.certificate {
                role_certs.insert(role.clone(), Certificate::load_secret(path)?);
            }
            if let Some(spec) = &over.server_key {
                role_server_keys.insert(role.clone(), resolve_key(spec, allow)?);
            }
            if let Some(dir) = &over.allow {
                dirs.by_role.insert(role.clone(), dir.clone());
            }
        }
        for dir in dirs.default.iter().chain(dirs.by_role.values()) {
            if !dir.is_dir() {
                return Err(AuthError::Config(format!(
                    "allow = {}: not a directory",
                    dir.display()
                )));
            }
        }
        let server_key = cfg
            .server_key
            .as_deref()
            .map(|s| resolve_key(s, allow))
            .transpose()?;
        let grants = Grants {
            services: cfg
                .services
                .iter()
                .map(|(service, keys)| Ok((service.clone(), resolve_all(keys, allow)?)))
                .collect::<Result<_, AuthError>>()?,
            config_writers: if cfg.config_writers.is_empty() {
                None
            } else {
                Some(resolve_all(&cfg.config_writers, allow)?)
            },
            publishers: cfg
                .publishers
                .iter()
                .map(|(key, ids)| {
                    Ok((
                        z85_of(resolve_key(key, allow)?),
                        ids.iter().copied().collect(),
                    ))
                })
                .collect::<Result<_, AuthError>>()?,
        };
        Ok(Security {
            inner: Some(Arc::new(Inner {
                role_certs,
                role_server_keys,
                gate: Gatekeeper::new(allow_ips, deny_ips),
                dirs,
                grants,
                ..Inner::bare(cfg.mechanism, own, own_configured, server_key, true)
            })),
        })
    }

    /// CURVE with one fresh key pair as both this process's certificate and the server key it expects, and no
    /// allow-list: every socket of the process encrypts and authenticates, for benches that measure CURVE's cost.
    pub fn ephemeral_curve() -> Result<Security, AuthError> {
        let own = fresh_pair()?;
        let server_key = Some(own.public);
        Ok(Security {
            inner: Some(Arc::new(Inner::bare(
                MechanismName::Curve,
                own,
                true,
                server_key,
                true,
            ))),
        })
    }

    /// True when CURVE is on.
    pub fn is_curve(&self) -> bool {
        self.inner
            .as_ref()
            .is_some_and(|i| i.mechanism == MechanismName::Curve)
    }

    /// True when anything is checked (CURVE, or IP fences under NULL).
    pub fn is_active(&self) -> bool {
        self.inner.as_ref().is_some_and(|i| i.checks)
    }

    /// Caps each socket of `role` (and of its sub-roles, e.g. `lvc` for `lvc.downstream`) at `max` concurrent
    /// connections: a handshake past the cap is refused through ZAP (libzmq then closes that connection) and
    /// counted ([`Security::connections`]). 0 leaves the role uncapped. Without `[security]` this makes a handle
    /// that checks nothing else; use the returned handle for the sockets and for [`Security::start_zap`].
    pub fn cap_connections(&self, roles: &[&str], max: u64) -> Security {
        if max == 0 {
            return self.clone();
        }
        let handle = match &self.inner {
            Some(_) => self.clone(),
            None => Security {
                inner: Some(Arc::new(Inner::bare(
                    MechanismName::Null,
                    placeholder(),
                    false,
                    None,
                    false,
                ))),
            },
        };
        if let Some(inner) = &handle.inner {
            let mut caps = lock(&inner.caps);
            for role in roles {
                caps.set_cap(role, max);
            }
        }
        handle
    }

    /// Connections per capped role (open, peak, admitted, refused over the cap); `None` when no role is capped.
    pub fn connections(&self) -> Option<BTreeMap<String, RoleConnectionCounts>> {
        let inner = self.inner.as_ref()?;
        let caps = lock(&inner.caps);
        caps.any().then(|| caps.summary())
    }

    /// Sets `socket` up to accept peers for `role` (the ZAP domain, so policy and counts are per role). Call it
    /// before `bind`, after [`Security::start_zap`] on the socket's context.
    pub fn server(&self, socket: &zmq::Socket, role: &str) -> Result<(), AuthError> {
        let Some(inner) = &self.inner else {
            return Ok(());
        };
        let sock = |e: zmq::Error| AuthError::Socket {
            role: role.to_string(),
            source: e,
        };
        let capped = {
            let mut caps = lock(&inner.caps);
            // The cap of the most specific capped role names this socket's own count.
            match most_specific_cap(&caps, role) {
                Some(max) => {
                    caps.set_cap(role, max);
                    true
                }
                None => false,
            }
        };
        if !inner.checks && !capped {
            return Ok(());
        }
        socket.set_zap_domain(role).map_err(sock)?;
        let mut events = 0;
        if capped {
            // The ZAP loop counts this socket's connections from its monitor, to refuse those past the cap.
            events |= zmq::SocketEvent::ACCEPTED as i32
                | zmq::SocketEvent::DISCONNECTED as i32
                | zmq::SocketEvent::CLOSED as i32;
        }
        if inner.mechanism == MechanismName::Curve {
            let cert = inner.cert_for(role);
            if !inner.own_configured && inner.role_cert(role).is_none() {
                return Err(AuthError::Config(format!(
                    "mechanism = \"curve\": {role} binds, so it needs `certificate` (its own secret certificate)"
                )));
            }
            socket.set_curve_server(true).map_err(sock)?;
            socket
                .set_curve_secretkey(&cert.secret.expect("loaded as a secret certificate"))
                .map_err(sock)?;
            // Handshakes that fail before ZAP is asked (no CURVE, the wrong server key) reach only the socket's
            // monitor; the ZAP loop reads it so that they are counted too.
            events |= zmq::SocketEvent::HANDSHAKE_FAILED_NO_DETAIL as i32
                | zmq::SocketEvent::HANDSHAKE_FAILED_PROTOCOL as i32;
        }
        if events != 0 {
            // One monitor per socket (libzmq allows no more), read by the ZAP loop.
            let endpoint = inner.monitors.next_endpoint();
            socket.monitor(&endpoint, events).map_err(sock)?;
            inner.monitors.push(endpoint, role);
        }
        Ok(())
    }

    /// Sets `socket` up to connect as a client for `role`: under CURVE it presents this process's key and expects
    /// the role's server key.
    pub fn client(&self, socket: &zmq::Socket, role: &str) -> Result<(), AuthError> {
        let Some(inner) = &self.inner else {
            return Ok(());
        };
        if inner.mechanism != MechanismName::Curve {
            return Ok(());
        }
        let sock = |e: zmq::Error| AuthError::Socket {
            role: role.to_string(),
            source: e,
        };
        let server_key = inner.server_key_for(role).ok_or_else(|| {
            AuthError::Config(format!(
                "mechanism = \"curve\": {role} connects, so it needs `server_key` (the server's public key)"
            ))
        })?;
        let cert = inner.cert_for(role);
        socket.set_curve_serverkey(&server_key).map_err(sock)?;
        socket.set_curve_publickey(&cert.public).map_err(sock)?;
        socket
            .set_curve_secretkey(&cert.secret.expect("a secret certificate or a fresh pair"))
            .map_err(sock)?;
        Ok(())
    }

    /// Starts the ZAP handler in `ctx`; `None` when nothing is checked. Keep the handler until every socket that
    /// [`Security::server`] set up is closed: without a handler libzmq lets every CURVE client in.
    pub fn start_zap(&self, ctx: &zmq::Context) -> Result<Option<ZapHandler>, AuthError> {
        let Some(inner) = &self.inner else {
            return Ok(None);
        };
        ZapHandler::start(
            ctx,
            inner.gate.clone(),
            inner.dirs.clone(),
            inner.stats.clone(),
            inner.monitors.clone(),
            Arc::clone(&inner.caps),
        )
        .map(Some)
    }

    /// The authorisation rules (everything granted when `[security]` is absent).
    pub fn grants(&self) -> &Grants {
        static OPEN: std::sync::OnceLock<Grants> = std::sync::OnceLock::new();
        match &self.inner {
            Some(inner) => &inner.grants,
            None => OPEN.get_or_init(Grants::default),
        }
    }

    /// The shared counters (handshakes, forged messages, refused requests).
    pub fn stats(&self) -> AuthStats {
        self.inner
            .as_ref()
            .map(|i| i.stats.clone())
            .unwrap_or_default()
    }

    /// The counters for a summary; `None` when nothing is checked (summaries then stay as they were).
    pub fn summary(&self) -> Option<AuthSummary> {
        self.inner
            .as_ref()
            .filter(|i| i.checks)
            .map(|i| i.stats.summary())
    }

    /// The server key (Z85) `role`'s connecting sockets expect under CURVE: the identity of every message that
    /// arrives on a connection this process made (libzmq attaches a `User-Id` only on the accepting side).
    pub fn server_key_z85(&self, role: &str) -> Option<String> {
        self.inner
            .as_ref()
            .filter(|i| i.mechanism == MechanismName::Curve)
            .and_then(|i| i.server_key_for(role))
            .map(z85_of)
    }

    /// This process's public key (Z85), when CURVE is on.
    pub fn public_key(&self) -> Option<String> {
        self.inner
            .as_ref()
            .filter(|i| i.mechanism == MechanismName::Curve)
            .map(|i| i.own.public_z85())
    }
}

impl Inner {
    /// A section with no per-role keys, fences, allow-list or grants: what every constructor starts from.
    fn bare(
        mechanism: MechanismName,
        own: Certificate,
        own_configured: bool,
        server_key: Option<[u8; 32]>,
        checks: bool,
    ) -> Inner {
        Inner {
            mechanism,
            own,
            own_configured,
            role_certs: BTreeMap::new(),
            server_key,
            role_server_keys: BTreeMap::new(),
            gate: Gatekeeper::default(),
            dirs: AllowDirs::default(),
            grants: Grants::default(),
            stats: AuthStats::default(),
            monitors: crate::zap::MonitorQueue::default(),
            checks,
            caps: Arc::default(),
        }
    }

    fn role_cert(&self, role: &str) -> Option<&Certificate> {
        most_specific(&self.role_certs, role)
    }

    fn cert_for(&self, role: &str) -> &Certificate {
        self.role_cert(role).unwrap_or(&self.own)
    }

    fn server_key_for(&self, role: &str) -> Option<[u8; 32]> {
        most_specific(&self.role_server_keys, role)
            .copied()
            .or(self.server_key)
    }
}

fn parse_ips(list: &[String], field: &str) -> Result<Vec<IpBlock>, AuthError> {
    list.iter()
        .map(|text| {
            IpBlock::parse(text).ok_or_else(|| {
                AuthError::Config(format!(
                    "{field}: {text:?} is not an IP address or CIDR block"
                ))
            })
        })
        .collect()
}

/// A key named in the config: 40 characters of Z85, a certificate file name in the allow directory, or a path to
/// a certificate file.
fn resolve_key(spec: &str, allow: Option<&Path>) -> Result<[u8; 32], AuthError> {
    if let Some(key) = z85::decode_key(spec) {
        return Ok(key);
    }
    let candidates: Vec<PathBuf> = allow
        .map(|d| d.join(spec))
        .into_iter()
        .chain([PathBuf::from(spec)])
        .collect();
    for path in &candidates {
        if path.is_file() {
            return Ok(Certificate::load(path)?.public);
        }
    }
    Err(AuthError::Config(format!(
        "key {spec:?} is neither 40 characters of Z85 nor a certificate (looked for {})",
        candidates
            .iter()
            .map(|p| p.display().to_string())
            .collect::<Vec<_>>()
            .join(", ")
    )))
}

fn resolve_all(specs: &[String], allow: Option<&Path>) -> Result<BTreeSet<String>, AuthError> {
    specs
        .iter()
        .map(|s| resolve_key(s, allow).map(z85_of))
        .collect()
}

fn z85_of(key: [u8; 32]) -> String {
    z85::encode(&key).expect("32 bytes is a multiple of 4")
}

/// A new CURVE key pair from libsodium, as a certificate.
pub fn fresh_pair() -> Result<Certificate, AuthError> {
    let pair = zmq::CurveKeyPair::new()
        .map_err(|e| AuthError::Zap(format!("making a CURVE key pair: {e}")))?;
    Ok(Certificate {
        public: pair.public_key,
        secret: Some(pair.secret_key),
        metadata: Vec::new(),
    })
}

/// NULL with IP fences presents no key; this is never handed to libzmq.
fn placeholder() -> Certificate {
    Certificate {
        public: [0; 32],
        secret: Some([0; 32]),
        metadata: Vec::new(),
    }
}

/// The cap of `role` or of the closest capped role above it (`lvc` for `lvc.downstream`).
fn most_specific_cap(caps: &ConnectionCaps, role: &str) -> Option<u64> {
    let mut r = role;
    loop {
        if let Some(max) = caps.cap_of(r) {
            return Some(max);
        }
        r = &r[..r.rfind('.')?];
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}
