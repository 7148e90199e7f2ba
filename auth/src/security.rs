//! [`Security`]: a loaded `[security]` section, applied to each socket as it is bound (`server`) or connected
//! (`client`), with the ZAP handler every process starts in its context before it binds.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

use crate::cap::{ConnectionCaps, RoleConnectionCounts};
use crate::cert::Certificate;
use crate::config::{most_specific, Allow, MechanismName, SecurityConfig};
use crate::grants::Grants;
use crate::policy::{Gatekeeper, IpBlock};
use crate::stats::{AuthStats, AuthSummary};
use crate::zap::{AllowDirs, AllowSets, ZapHandler};
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
    /// The keys of every allow directory as the ZAP loop last read them: what the control plane checks each
    /// request's `User-Id` against, and whose removals end live data-plane sessions.
    allow_sets: AllowSets,
    grants: Grants,
    stats: AuthStats,
    /// Monitors of server sockets, with their roles, handed to the ZAP loop to read (handshake failures,
    /// connection counts).
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
        // Keys under NULL (or with no mechanism said) could never be checked; running on would leave open what
        // the operator meant to close.
        cfg.validate()?;
        if !cfg.is_active() {
            return Ok(Security::default());
        }
        let allow_ips = parse_ips(&cfg.allow_ips, "allow_ips")?;
        let deny_ips = parse_ips(&cfg.deny_ips, "deny_ips")?;
        let curve = cfg.mechanism() == MechanismName::Curve;
        let (own, own_configured) = match &cfg.certificate {
            Some(path) => (Certificate::load_secret(path)?, true),
            None if curve => (fresh_pair()?, false),
            None => (placeholder(), false),
        };
        let allow = cfg.allow.as_ref().and_then(Allow::dir);
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
            if let Some(allow) = &over.allow {
                dirs.by_role.insert(role.clone(), allow.clone());
            }
        }
        for dir in dirs
            .default
            .iter()
            .chain(dirs.by_role.values())
            .filter_map(Allow::dir)
        {
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
                .filter(|(_, grant)| !grant.call.is_empty())
                .map(|(service, grant)| Ok((service.clone(), resolve_all(&grant.call, allow)?)))
                .collect::<Result<_, AuthError>>()?,
            servers: cfg
                .services
                .iter()
                .map(|(service, grant)| Ok((service.clone(), resolve_all(&grant.serve, allow)?)))
                .collect::<Result<_, AuthError>>()?,
            workers_restricted: !cfg.services.is_empty(),
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
                ..Inner::bare(cfg.mechanism(), own, own_configured, server_key, true)
            })),
        })
    }

    /// CURVE with one fresh key pair as both this process's certificate and the server key it expects, and no
    /// allow-list: every socket of the process encrypts and authenticates, for benches that measure CURVE's cost.
    pub fn ephemeral_curve() -> Result<Security, AuthError> {
        let own = fresh_pair()?;
        let server_key = Some(own.public);
        Ok(Security {
            inner: Some(Arc::new(Inner {
                // No allow-list, said explicitly: the benches measure encryption, not admission.
                dirs: AllowDirs {
                    default: Some(Allow::Any),
                    by_role: BTreeMap::new(),
                },
                ..Inner::bare(MechanismName::Curve, own, true, server_key, true)
            })),
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
    /// that checks nothing else; use the returned handle for the sockets and for [`Security::gate`].
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
        caps.any().then(|| caps.summary(std::time::Instant::now()))
    }

    /// Sets `socket` (made in `ctx`, whose ZAP handler this handle started: only [`crate::Gate::socket`] calls
    /// this) up to accept peers for `role`: the ZAP domain (policy and counts are per role), CURVE as a server,
    /// and a monitor whose reader is connected here, before any peer can make an event, and handed to the ZAP
    /// loop. libzmq's I/O thread blocks on a monitor nobody reads, so no monitor is ever attached without its
    /// reader.
    pub(crate) fn server(
        &self,
        ctx: &zmq::Context,
        socket: &zmq::Socket,
        role: &str,
    ) -> Result<(), AuthError> {
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
            // The ZAP loop counts this socket's connections from its monitor, to refuse sessions past the cap; a
            // connection still in its handshake holds no place, and the short handshake timeout bounds how long it
            // may hold its descriptor (see `cap`).
            events |= zmq::SocketEvent::ACCEPTED as i32
                | zmq::SocketEvent::DISCONNECTED as i32
                | zmq::SocketEvent::CLOSED as i32;
            socket
                .set_handshake_ivl(duration_ms(crate::cap::CAPPED_HANDSHAKE_TIMEOUT))
                .map_err(sock)?;
        }
        if inner.mechanism == MechanismName::Curve {
            let cert = inner.cert_for(role);
            if !inner.own_configured && inner.role_cert(role).is_none() {
                return Err(AuthError::Config(format!(
                    "mechanism = \"curve\": {role} binds, so it needs `certificate` (its own secret certificate)"
                )));
            }
            if inner.checks && inner.dirs.for_role(role).is_none() {
                return Err(AuthError::Config(format!(
                    "mechanism = \"curve\": {role} binds, so it needs `allow`: a directory of the public \
                     certificates that may connect, or allow = \"any\" to admit every CURVE key"
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
            let reader = crate::zap::monitor_reader(ctx, &endpoint).map_err(sock)?;
            inner.monitors.push(reader, role);
        }
        Ok(())
    }

    /// Whether a client socket of `role` can be set up (under CURVE it needs the role's server key): for a client
    /// to fail at once, with the config error, before it starts threads that would otherwise wait on nothing.
    pub fn check_client(&self, role: &str) -> Result<(), AuthError> {
        match &self.inner {
            Some(inner)
                if inner.mechanism == MechanismName::Curve
                    && inner.server_key_for(role).is_none() =>
            {
                Err(AuthError::Config(format!(
                    "mechanism = \"curve\": {role} connects, so it needs `server_key` (the server's public key)"
                )))
            }
            _ => Ok(()),
        }
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
        self.check_client(role)?;
        let Some(server_key) = inner.server_key_for(role) else {
            return Ok(());
        };
        let cert = inner.cert_for(role);
        socket.set_curve_serverkey(&server_key).map_err(sock)?;
        socket.set_curve_publickey(&cert.public).map_err(sock)?;
        socket
            .set_curve_secretkey(&cert.secret.expect("a secret certificate or a fresh pair"))
            .map_err(sock)?;
        Ok(())
    }

    /// The gate of `ctx`: this section's ZAP handler started in it (when anything is checked), and the only way
    /// to make the context's server sockets ([`Gate::socket`]). Start it once per context, before any bind, and
    /// keep it (or a clone) until those sockets are closed. Says at start when CURVE admits any key.
    pub fn gate(&self, ctx: &zmq::Context) -> Result<Gate, AuthError> {
        let handler = match &self.inner {
            None => None,
            Some(inner) => {
                if inner.mechanism == MechanismName::Curve {
                    for role in inner.dirs.any_roles() {
                        tracing::warn!(
                            role,
                            "auth: allow = \"any\": {role} admits every CURVE key (encrypted, not authenticated)"
                        );
                    }
                }
                Some(ZapHandler::start(
                    ctx,
                    inner.gate.clone(),
                    inner.dirs.clone(),
                    inner.allow_sets.clone(),
                    inner.stats.clone(),
                    inner.monitors.clone(),
                    Arc::clone(&inner.caps),
                )?)
            }
        };
        Ok(Gate {
            inner: Arc::new(GateInner {
                ctx: ctx.clone(),
                security: self.clone(),
                _handler: handler,
            }),
        })
    }

    /// Whether `user` (a message's `User-Id`) is still listed in the allow directory of `role` as the ZAP loop
    /// last read it (at most [`crate::zap::REFRESH_EVERY`] ago): the control plane's per-request revocation
    /// check. True without CURVE, for a role whose `allow` is `"any"`, and for a peer with no user id (which the
    /// grants then judge).
    pub fn is_listed(&self, role: &str, user: Option<&str>) -> bool {
        let (Some(inner), Some(user)) = (&self.inner, user) else {
            return true;
        };
        if inner.mechanism != MechanismName::Curve {
            return true;
        }
        match inner.dirs.for_role(role).and_then(Allow::dir) {
            None => true,
            Some(dir) => inner.allow_sets.lists(dir, user),
        }
    }

    /// A watch that says when a key has been removed from an allow directory since it was made: data-plane
    /// servers then close their live sessions ([`Revocations::reset_sessions`]) so that every peer handshakes
    /// again and the revoked key is refused.
    pub fn revocations(&self) -> Revocations {
        match &self.inner {
            None => Revocations::default(),
            Some(inner) => {
                let epoch = inner.allow_sets.epoch();
                Revocations {
                    seen: epoch.load(Ordering::Relaxed),
                    epoch: Some(epoch),
                    stats: inner.stats.clone(),
                }
            }
        }
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
            allow_sets: AllowSets::default(),
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
///
/// A file is looked for first: a path of exactly 40 characters is also valid Z85 (`/`, `-`, `.` and letters all
/// are), and read as a key it would bind the grant to a key nobody holds.
fn resolve_key(spec: &str, allow: Option<&Path>) -> Result<[u8; 32], AuthError> {
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
    if let Some(key) = z85::decode_key(spec) {
        return Ok(key);
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

/// How long a reset waits for libzmq to release an endpoint it was told to unbind.
const REBIND_WITHIN: std::time::Duration = std::time::Duration::from_secs(2);

fn duration_ms(d: std::time::Duration) -> i32 {
    i32::try_from(d.as_millis()).unwrap_or(i32::MAX)
}

/// A context whose ZAP handler runs (when `[security]` checks anything): the only way to make a server socket,
/// so that binding one without its gate cannot compile. Cheap to clone; the handler stops when the last clone
/// goes.
#[derive(Clone)]
pub struct Gate {
    inner: Arc<GateInner>,
}

struct GateInner {
    ctx: zmq::Context,
    security: Security,
    _handler: Option<ZapHandler>,
}

impl std::fmt::Debug for Gate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gate")
            .field("security", &self.inner.security)
            .field("zap", &self.inner._handler.is_some())
            .finish()
    }
}

impl Gate {
    /// The gate of a process without `[security]`: nothing is checked and no ZAP handler runs.
    pub fn open(ctx: &zmq::Context) -> Gate {
        Gate {
            inner: Arc::new(GateInner {
                ctx: ctx.clone(),
                security: Security::default(),
                _handler: None,
            }),
        }
    }

    /// The context the gate guards; client sockets come from it too.
    pub fn context(&self) -> &zmq::Context {
        &self.inner.ctx
    }

    /// The section the gate applies.
    pub fn security(&self) -> &Security {
        &self.inner.security
    }

    /// A new socket of `kind` in the gated context, set up to accept peers for `role` before it binds: CURVE as a
    /// server, the role's ZAP domain, the connection cap, and a monitor the ZAP loop reads.
    pub fn socket(&self, kind: zmq::SocketType, role: &str) -> Result<zmq::Socket, AuthError> {
        let socket = self.inner.ctx.socket(kind).map_err(|e| AuthError::Socket {
            role: role.to_string(),
            source: e,
        })?;
        self.inner.security.server(&self.inner.ctx, &socket, role)?;
        Ok(socket)
    }

    /// Refuses to serve a component whose own `[security]` is not the gate's: its server sockets would follow
    /// the gate, and a component configured for CURVE behind an open gate would silently run NULL.
    pub fn check_serves(&self, component: &Security) -> Result<(), AuthError> {
        if component.is_active() && *component != self.inner.security {
            return Err(AuthError::Config(
                "a component's [security] differs from its context's gate (start the gate from the same section)"
                    .into(),
            ));
        }
        Ok(())
    }
}

/// Whether a key has left an allow directory since the last look, for a data-plane server loop; with nothing
/// checked it never says so.
#[derive(Debug, Default)]
pub struct Revocations {
    epoch: Option<Arc<std::sync::atomic::AtomicU64>>,
    seen: u64,
    stats: AuthStats,
}

impl Revocations {
    /// True once for every batch of removals since the last call. Cheap: one atomic load.
    pub fn due(&mut self) -> bool {
        let Some(epoch) = &self.epoch else {
            return false;
        };
        let now = epoch.load(Ordering::Relaxed);
        if now == self.seen {
            return false;
        }
        self.seen = now;
        true
    }

    /// Closes every session accepted on `endpoints` of `socket` (unbind, then bind the same endpoints again):
    /// libzmq lets an application close no single chosen connection, but unbinding ends every session the
    /// endpoint accepted. Peers reconnect by themselves and handshake again, and ZAP refuses the revoked key.
    /// Counted per role; what the cut costs the others (a reconnect, and the messages of that moment, which
    /// their sequence accounting shows as a gap) is the price of revocation on a socket with no per-peer close.
    pub fn reset_sessions(
        &self,
        socket: &zmq::Socket,
        role: &str,
        endpoints: &[String],
    ) -> Result<(), AuthError> {
        let sock = |e: zmq::Error| AuthError::Socket {
            role: role.to_string(),
            source: e,
        };
        for endpoint in endpoints {
            socket.unbind(endpoint).map_err(sock)?;
            // The listener closes on libzmq's I/O thread, after `unbind` returns: its port may still be taken
            // for a moment.
            let deadline = std::time::Instant::now() + REBIND_WITHIN;
            loop {
                match socket.bind(endpoint) {
                    Ok(()) => break,
                    Err(zmq::Error::EADDRINUSE) if std::time::Instant::now() < deadline => {
                        std::thread::sleep(std::time::Duration::from_millis(5));
                    }
                    Err(e) => return Err(sock(e)),
                }
            }
        }
        self.stats.record_sessions_reset(role);
        tracing::warn!(
            role,
            endpoints = ?endpoints,
            "auth: a key left the allow directory; closed the live sessions of {role} so every peer handshakes again"
        );
        Ok(())
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_certificate_path_of_forty_characters_is_read_as_a_certificate_not_as_a_key() {
        let dir = std::env::temp_dir().join(format!("tb-key-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let prefix = format!("{}/", dir.display());
        assert!(
            prefix.len() < 39,
            "the temp dir's path is too long for this test: {prefix}"
        );
        let path = PathBuf::from(format!("{prefix}{}", "k".repeat(40 - prefix.len())));
        let spec = path.to_str().unwrap();
        assert_eq!(spec.len(), 40);
        assert!(
            z85::decode_key(spec).is_some(),
            "the path must also parse as Z85"
        );
        let pair = zmq::CurveKeyPair::new().unwrap();
        let public = z85::encode(&pair.public_key).unwrap();
        std::fs::write(&path, format!("curve\n    public-key = \"{public}\"\n")).unwrap();
        let key = resolve_key(spec, None);
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(key.unwrap(), pair.public_key);
    }
}
