//! The thin ZAP loop: one REP socket on `inproc://zeromq.zap.01` in the process's context, answering for every
//! socket of that context (libzmq asks it once per handshake). Decisions come from [`Gatekeeper`]; this loop
//! owns the socket, the clock and the allow directories, which it re-reads when they change so that a removed
//! certificate is refused on its next handshake.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime};

use crate::cap::ConnectionCaps;
use crate::cert::Certificate;
use crate::config::Allow;
use crate::policy::{parse_request, reply_frames, Gatekeeper, KeySet, Refusal, Verdict};
use crate::stats::AuthStats;
use crate::AuthError;
use tickbox_zmqx::socket::WarnGate;

/// Where libzmq looks for the ZAP handler (RFC 27).
pub const ZAP_ENDPOINT: &str = "inproc://zeromq.zap.01";

/// An allow directory holds a few certificates; more than this many files is a mistake, and a bound.
pub const MAX_ALLOW_FILES: usize = 10_000;

/// How often the loop checks its stop flag while idle.
const POLL: Duration = Duration::from_millis(100);

/// How often the loop re-reads the allow directories it has read (a changed modification time reloads one): the
/// bound on how long a removed key stays listed for the control plane's per-request check and before live
/// data-plane sessions are closed.
pub const REFRESH_EVERY: Duration = Duration::from_secs(1);

/// Readers of server sockets' monitors (connected before their sockets bind), with their roles, waiting for the
/// ZAP loop to take them.
#[derive(Clone, Default)]
pub struct MonitorQueue {
    pending: Arc<Mutex<Vec<(zmq::Socket, String)>>>,
}

impl std::fmt::Debug for MonitorQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MonitorQueue")
            .field("pending", &lock(&self.pending).len())
            .finish()
    }
}

/// The reader of a monitor bound at `endpoint`, connected now: libzmq sends monitor events from its I/O thread
/// and blocks it until they are taken, so the reader must exist before the monitored socket can make one.
pub(crate) fn monitor_reader(
    ctx: &zmq::Context,
    endpoint: &str,
) -> Result<zmq::Socket, zmq::Error> {
    let pair = ctx.socket(zmq::PAIR)?;
    pair.set_linger(0)?;
    pair.connect(endpoint)?;
    Ok(pair)
}

impl MonitorQueue {
    /// A fresh inproc endpoint for one socket's monitor.
    pub(crate) fn next_endpoint(&self) -> String {
        static N: AtomicU64 = AtomicU64::new(0);
        format!(
            "inproc://tickbox-auth-monitor-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        )
    }

    pub(crate) fn push(&self, reader: zmq::Socket, role: &str) {
        lock(&self.pending).push((reader, role.to_string()));
    }

    fn take(&self) -> Vec<(zmq::Socket, String)> {
        std::mem::take(&mut *lock(&self.pending))
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Which allow setting answers for which role (ZAP domain).
#[derive(Debug, Clone, Default)]
pub struct AllowDirs {
    /// Used by roles without their own.
    pub default: Option<Allow>,
    /// Per-role settings, looked up by the most specific role name (`lvc.upstream`, then `lvc`).
    pub by_role: BTreeMap<String, Allow>,
}

impl AllowDirs {
    /// The setting for `role`: its own, its parent's, or the default.
    pub fn for_role(&self, role: &str) -> Option<&Allow> {
        crate::config::most_specific(&self.by_role, role).or(self.default.as_ref())
    }

    /// The roles (or `*` for the default) whose setting is `"any"`.
    pub(crate) fn any_roles(&self) -> Vec<&str> {
        let mut roles: Vec<&str> = self
            .by_role
            .iter()
            .filter(|(_, a)| **a == Allow::Any)
            .map(|(r, _)| r.as_str())
            .collect();
        if self.default == Some(Allow::Any) {
            roles.push("every role without its own allow");
        }
        roles
    }
}

/// The keys of each allow directory as last read, shared between the ZAP loop (which reads and refreshes them)
/// and whoever checks a `User-Id` per request; `epoch` counts the refreshes that removed a key.
#[derive(Debug, Clone, Default)]
pub struct AllowSets {
    sets: Arc<Mutex<BTreeMap<PathBuf, Cached>>>,
    epoch: Arc<AtomicU64>,
}

impl AllowSets {
    /// Whether `user` (Z85) is listed in `dir`. A directory not read yet is read now, so the answer never
    /// depends on whether a handshake happened first.
    pub(crate) fn lists(&self, dir: &Path, user: &str) -> bool {
        let Some(key) = crate::z85::decode_key(user) else {
            return false;
        };
        let mut sets = lock(&self.sets);
        if !sets.contains_key(dir) {
            let stamp = modified(dir);
            sets.insert(
                dir.to_path_buf(),
                Cached {
                    stamp,
                    keys: load_allow_dir(dir),
                },
            );
        }
        sets[dir].keys.name_of(&key).is_some()
    }

    pub(crate) fn epoch(&self) -> Arc<AtomicU64> {
        Arc::clone(&self.epoch)
    }

    /// The keys of `dir`, re-read when its modification time changed (adding or removing a file changes it).
    fn keys_in(&self, dir: &Path) -> KeySet {
        let stamp = modified(dir);
        let mut sets = lock(&self.sets);
        if let Some(cached) = sets.get(dir) {
            if cached.stamp == stamp && stamp.is_some() {
                return cached.keys.clone();
            }
        }
        let keys = load_allow_dir(dir);
        let removed = sets
            .get(dir)
            .is_some_and(|old| old.keys.iter().any(|(k, _)| keys.name_of(k).is_none()));
        sets.insert(
            dir.to_path_buf(),
            Cached {
                stamp,
                keys: keys.clone(),
            },
        );
        if removed {
            tracing::warn!(
                dir = %dir.display(),
                "auth: a key left the allow directory {}: its requests are refused from now on and its live \
                 sessions are closed",
                dir.display()
            );
            self.epoch.fetch_add(1, Ordering::Relaxed);
        }
        keys
    }

    /// Re-reads every directory read so far whose modification time changed.
    fn refresh(&self) {
        let dirs: Vec<PathBuf> = lock(&self.sets).keys().cloned().collect();
        for dir in dirs {
            self.keys_in(&dir);
        }
    }
}

fn modified(dir: &Path) -> Option<SystemTime> {
    std::fs::metadata(dir).and_then(|m| m.modified()).ok()
}

/// The running handler; dropping it stops the loop (after the sockets it answers for are closed, or their next
/// handshakes go unanswered).
#[derive(Debug)]
pub struct ZapHandler {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl ZapHandler {
    /// Binds the handler in `ctx` and starts its thread. Fails if `ctx` already has one.
    pub fn start(
        ctx: &zmq::Context,
        gate: Gatekeeper,
        dirs: AllowDirs,
        allow_sets: AllowSets,
        stats: AuthStats,
        monitors: MonitorQueue,
        caps: Arc<Mutex<ConnectionCaps>>,
    ) -> Result<ZapHandler, AuthError> {
        let stop = Arc::new(AtomicBool::new(false));
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let ctx = ctx.clone();
        let flag = Arc::clone(&stop);
        let thread = std::thread::Builder::new()
            .name("zap".into())
            .spawn(move || {
                let socket = match bind(&ctx) {
                    Ok(s) => {
                        let _ = ready_tx.send(Ok(()));
                        s
                    }
                    Err(e) => {
                        let _ = ready_tx.send(Err(e));
                        return;
                    }
                };
                Loop {
                    gate,
                    dirs,
                    stats,
                    allow_sets,
                    last_refresh: Instant::now(),
                    log: LogLimit::default(),
                    queue: monitors,
                    watched: Vec::new(),
                    caps,
                }
                .run(&socket, &flag);
            })
            .map_err(|e| AuthError::Zap(format!("spawning the ZAP thread: {e}")))?;
        match ready_rx.recv() {
            Ok(Ok(())) => Ok(ZapHandler {
                stop,
                thread: Some(thread),
            }),
            Ok(Err(e)) => {
                let _ = thread.join();
                Err(e)
            }
            Err(_) => Err(AuthError::Zap("the ZAP thread ended before binding".into())),
        }
    }
}

impl Drop for ZapHandler {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn bind(ctx: &zmq::Context) -> Result<zmq::Socket, AuthError> {
    let zap = |e: zmq::Error| AuthError::Zap(format!("binding {ZAP_ENDPOINT}: {e}"));
    let socket = ctx.socket(zmq::REP).map_err(zap)?;
    socket.set_linger(0).map_err(zap)?;
    socket.bind(ZAP_ENDPOINT).map_err(zap)?;
    Ok(socket)
}

struct Loop {
    gate: Gatekeeper,
    dirs: AllowDirs,
    stats: AuthStats,
    allow_sets: AllowSets,
    last_refresh: Instant,
    log: LogLimit,
    queue: MonitorQueue,
    /// PAIR sockets reading server sockets' monitors, with their roles.
    watched: Vec<(zmq::Socket, String)>,
    /// Connection counts and caps per role, fed by the monitors, asked before each verdict.
    caps: Arc<Mutex<ConnectionCaps>>,
}

#[derive(Debug)]
struct Cached {
    stamp: Option<SystemTime>,
    keys: KeySet,
}

impl Loop {
    fn run(&mut self, socket: &zmq::Socket, stop: &AtomicBool) {
        while !stop.load(Ordering::Relaxed) {
            self.watched.extend(self.queue.take());
            if self.last_refresh.elapsed() >= REFRESH_EVERY {
                self.allow_sets.refresh();
                self.last_refresh = Instant::now();
            }
            let ready = {
                let mut items = Vec::with_capacity(1 + self.watched.len());
                items.push(socket.as_poll_item(zmq::POLLIN));
                items.extend(
                    self.watched
                        .iter()
                        .map(|(pair, _)| pair.as_poll_item(zmq::POLLIN)),
                );
                match zmq::poll(&mut items, i64::try_from(POLL.as_millis()).unwrap_or(100)) {
                    Ok(0) => continue,
                    Ok(_) => {}
                    Err(zmq::Error::EINTR) => continue,
                    Err(zmq::Error::ETERM) => return,
                    Err(e) => {
                        tracing::error!(
                            "ZAP handler: poll failed: {e}; handshakes can no longer be authorised"
                        );
                        return;
                    }
                }
                items.iter().map(|i| i.is_readable()).collect::<Vec<_>>()
            };
            // Highest index first, so a monitor dropped by swap_remove never shifts one still to be read.
            for index in (1..ready.len()).rev().filter(|&i| ready[i]) {
                self.read_monitor(index - 1);
            }
            if !ready[0] {
                continue;
            }
            // A handshake's connection was accepted before it asked: read every monitor first, so the count it
            // is judged against includes it and every connection that has gone since.
            for index in (0..self.watched.len()).rev() {
                self.read_monitor(index);
            }
            let frames = match socket.recv_multipart(zmq::DONTWAIT) {
                Ok(f) => f,
                Err(zmq::Error::EAGAIN | zmq::Error::EINTR) => continue,
                Err(e) => {
                    tracing::error!("ZAP handler: receive failed: {e}");
                    return;
                }
            };
            let reply = self.answer(&frames);
            if let Err(e) = socket.send_multipart(reply, 0) {
                tracing::error!("ZAP handler: reply failed: {e}");
                return;
            }
        }
    }

    /// Reads what a server socket's monitor reported (two frames per event: the event id and value, then the
    /// endpoint): connections accepted and gone (for the connection cap, by descriptor) and failed handshakes
    /// (counted as refusals). A monitor whose socket closed reports MONITOR_STOPPED and is dropped.
    fn read_monitor(&mut self, index: usize) {
        use zmq::SocketEvent as E;
        let mut stopped = false;
        while let Ok(frames) = self.watched[index].0.recv_multipart(zmq::DONTWAIT) {
            let Some((event, value)) = tickbox_zmqx::socket::monitor_event(&frames) else {
                continue;
            };
            let role = self.watched[index].1.clone();
            match event {
                E::MONITOR_STOPPED => {
                    stopped = true;
                    break;
                }
                E::ACCEPTED | E::DISCONNECTED | E::CLOSED => {
                    // These events' values are descriptors, which libzmq reports as the int they are.
                    let fd = value as i32;
                    let mut caps = lock(&self.caps);
                    if event == E::ACCEPTED {
                        caps.accepted(&role, fd, Instant::now());
                    } else {
                        caps.gone(&role, fd);
                    }
                    // What a test (or an operator at -v) waits on before expecting a freed slot to admit.
                    tracing::debug!(role, fd, event = ?event, open = caps.open(&role), "connection count");
                }
                _ => {
                    let reason = crate::policy::handshake_failure(
                        (event == E::HANDSHAKE_FAILED_PROTOCOL).then_some(value),
                    );
                    self.stats.record(&role, "", Some(reason));
                    // Every refusal at debug level (the warning is rate-limited): what a test, or an operator
                    // at -v, waits on to know it is counted.
                    tracing::debug!(role, reason = reason.key(), "handshake refused");
                    self.log.refused(&role, "", None, reason, &self.stats);
                }
            }
        }
        if stopped {
            self.watched.swap_remove(index);
        }
    }

    fn answer(&mut self, frames: &[Vec<u8>]) -> [Vec<u8>; 6] {
        let request = match parse_request(frames) {
            Ok(r) => r,
            Err(e) => {
                // Only libzmq itself talks to this inproc endpoint; a bad request is a bug, but answer it.
                tracing::warn!("ZAP handler: {e}");
                let id = frames.get(1).cloned().unwrap_or_default();
                return reply_frames(&id, &Verdict::Refuse(Refusal::Malformed));
            }
        };
        let allowed = self
            .dirs
            .for_role(&request.domain)
            .and_then(Allow::dir)
            .map(|dir| self.allow_sets.keys_in(dir));
        // The cap is asked only for a peer the policy admits: a refused key must not hold a place.
        let verdict = match self.gate.decide(&request, allowed.as_ref()) {
            Verdict::Accept { .. } if !lock(&self.caps).admit(&request.domain, Instant::now()) => {
                Verdict::Refuse(Refusal::ConnectionCap)
            }
            verdict => verdict,
        };
        let refusal = match &verdict {
            Verdict::Accept { .. } => None,
            Verdict::Refuse(r) => Some(*r),
        };
        self.stats
            .record(&request.domain, &request.address, refusal);
        if let Some(reason) = refusal {
            tracing::debug!(role = %request.domain, reason = reason.key(), "handshake refused");
            let key = request
                .credentials
                .first()
                .filter(|_| request.mechanism == b"CURVE")
                .and_then(|k| <[u8; 32]>::try_from(k.as_slice()).ok())
                .and_then(|k| crate::z85::encode(&k));
            self.log.refused(
                &request.domain,
                &request.address,
                key.as_deref(),
                reason,
                &self.stats,
            );
        }
        reply_frames(request.request_id, &verdict)
    }
}

/// Every public certificate in `dir` (files ending in `_secret` are skipped; unreadable ones are logged). An
/// unreadable directory allows nobody: failing closed is the only safe answer.
pub fn load_allow_dir(dir: &Path) -> KeySet {
    let mut keys = KeySet::default();
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) => {
            tracing::error!(
                "allow directory {}: {e}; refusing every key until it is readable",
                dir.display()
            );
            return keys;
        }
    };
    for entry in entries.flatten().take(MAX_ALLOW_FILES) {
        let path = entry.path();
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.ends_with("_secret") || name.starts_with('.') || !path.is_file() {
            continue;
        }
        match Certificate::load(&path) {
            Ok(cert) => keys.insert(cert.public, name),
            Err(e) => tracing::warn!("allow directory: skipping {}: {e}", path.display()),
        }
    }
    keys
}

/// Refusals are logged at most once a second with the running total, since any stranger can cause them.
#[derive(Default)]
struct LogLimit(WarnGate);

impl LogLimit {
    fn refused(
        &mut self,
        role: &str,
        address: &str,
        key: Option<&str>,
        reason: Refusal,
        stats: &AuthStats,
    ) {
        let Some(suppressed) = self.0.allow(Instant::now()) else {
            return;
        };
        let total = stats.summary().auth_refused;
        let peer = if address.is_empty() {
            "a local peer"
        } else {
            address
        };
        // The public key is safe to log, and it is what an operator compares with the allow directory.
        let key_text = key
            .map(|k| format!(" (public key {k})"))
            .unwrap_or_default();
        tracing::warn!(
            role,
            peer,
            key,
            total_refused = total,
            suppressed,
            "refused a handshake from {peer}{key_text} on {role}: {}",
            reason.as_str()
        );
    }
}
