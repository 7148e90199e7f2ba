//! The session handle: one ZooKeeper session, a small runtime that drives it, and a blocking facade so that
//! tickbox's synchronous threads can use the recipes directly.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::runtime::Runtime;
use zookeeper_client as zk;

use crate::logic;
use crate::{CoordError, Result};

/// Options for [`Coord::connect_with`].
#[derive(Debug, Clone)]
pub struct CoordOptions {
    /// Session timeout asked of the server (the server clamps it to `[2, 20] × tickTime`). A holder whose
    /// process dies loses its locks and leaderships this long after its last heartbeat.
    pub session_timeout: Duration,
    /// How long to try to establish the first session before giving up.
    pub connect_timeout: Duration,
}

impl Default for CoordOptions {
    fn default() -> Self {
        CoordOptions {
            session_timeout: Duration::from_secs(6),
            connect_timeout: Duration::from_secs(10),
        }
    }
}

/// The session as the recipes see it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SessionStatus {
    /// Connected: what the session holds is held.
    Connected,
    /// Disconnected, reconnecting: the session may or may not survive; holders must act as if they did not
    /// hold until it reconnects (the server may expire the session meanwhile).
    Disconnected,
    /// The session expired: every ephemeral node (lock, leadership, membership) is gone.
    Expired,
    /// The handle was closed (or authentication failed).
    Closed,
}

impl SessionStatus {
    pub(crate) fn from_zk(s: zk::SessionState) -> SessionStatus {
        match s {
            zk::SessionState::SyncConnected | zk::SessionState::ConnectedReadOnly => {
                SessionStatus::Connected
            }
            zk::SessionState::Disconnected => SessionStatus::Disconnected,
            zk::SessionState::Expired => SessionStatus::Expired,
            zk::SessionState::Closed | zk::SessionState::AuthFailed => SessionStatus::Closed,
        }
    }
}

/// Node metadata returned by [`Coord::get`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NodeStat {
    /// Data version (number of changes to the data).
    pub version: i32,
    /// Number of children.
    pub num_children: i32,
    /// Session id owning this node when ephemeral, else 0.
    pub ephemeral_owner: i64,
    /// Creation time (ms since the epoch, server clock).
    pub ctime_ms: i64,
    /// Last modification time (ms since the epoch, server clock).
    pub mtime_ms: i64,
    /// Creation zxid.
    pub czxid: i64,
}

impl NodeStat {
    pub(crate) fn from_zk(s: &zk::Stat) -> NodeStat {
        NodeStat {
            version: s.version,
            num_children: s.num_children,
            ephemeral_owner: s.ephemeral_owner,
            ctime_ms: s.ctime,
            mtime_ms: s.mtime,
            czxid: s.czxid,
        }
    }
}

/// A change seen by [`Coord::watch_tree`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TreeEvent {
    /// What happened (`NodeCreated`, `NodeDeleted`, `NodeDataChanged`, `NodeChildrenChanged`, `Session`).
    pub kind: String,
    /// The node it happened to (empty for session events).
    pub path: String,
    /// The session state for session events.
    pub session: SessionStatus,
}

/// The ensemble connection a [`Coord`] and its recipes' tasks share: one live ZooKeeper session at a time. A
/// session that expired (the server dropped it, or this client gave up on it after an outage longer than the
/// session timeout) is replaced by a new one on demand ([`Session::renew`]), so that every role can take its
/// place again after an outage of any length; the generation number tells one session from the next.
pub(crate) struct Session {
    /// The live session and its generation; `None` once the handle is closed.
    current: std::sync::Mutex<Option<(u64, zk::Client)>>,
    /// Held while a new session is being established, so that concurrent renewers make one, not several.
    renewing: tokio::sync::Mutex<()>,
    hosts: String,
    opts: CoordOptions,
}

impl Session {
    /// The live session and its generation (`Closed` once the handle is dropped).
    pub(crate) fn current(&self) -> Result<(u64, zk::Client)> {
        self.current
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
            .ok_or(CoordError::Closed)
    }

    fn take(&self) -> Option<zk::Client> {
        self.current
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
            .map(|(_, c)| c)
    }

    /// A live session newer than generation `expired`: the current one when another caller already renewed it
    /// (or it is still alive), otherwise a new one, retried until the ensemble answers (an outage can last any
    /// time; the caller's task is aborted when its owner goes). Errors only when the handle was closed.
    pub(crate) async fn renew(&self, expired: u64) -> Result<(u64, zk::Client)> {
        let _one = self.renewing.lock().await;
        let (generation, client) = self.current()?;
        if generation != expired || !client.state().is_terminated() {
            return Ok((generation, client));
        }
        let lost = std::time::Instant::now();
        tracing::warn!(hosts = %self.hosts, session = %client.session_id(), state = %client.state(), "zookeeper session ended: establishing a new one");
        let mut pause = Duration::from_millis(100);
        let mut attempts = 0u64;
        loop {
            attempts += 1;
            let connector = zk::Client::connector()
                .with_session_timeout(self.opts.session_timeout)
                .with_fail_eagerly();
            match tokio::time::timeout(self.opts.connect_timeout, connector.connect(&self.hosts))
                .await
            {
                Ok(Ok(fresh)) => {
                    let mut cur = self.current.lock().unwrap_or_else(|p| p.into_inner());
                    if cur.is_none() {
                        return Err(CoordError::Closed);
                    }
                    let generation = generation + 1;
                    *cur = Some((generation, fresh.clone()));
                    tracing::info!(
                        hosts = %self.hosts,
                        session = %fresh.session_id(),
                        generation,
                        attempts,
                        without_ms = lost.elapsed().as_millis() as u64,
                        "zookeeper session re-established"
                    );
                    return Ok((generation, fresh));
                }
                Ok(Err(e)) => tracing::debug!(attempts, error = %e, "zookeeper not reachable yet"),
                Err(_) => tracing::debug!(attempts, "zookeeper connect timed out"),
            }
            if self
                .current
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .is_none()
            {
                return Err(CoordError::Closed);
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(Duration::from_secs(1));
        }
    }
}

pub(crate) struct Inner {
    pub(crate) session: Arc<Session>,
    // Dropped after the session is closed (see `Drop for Inner`).
    pub(crate) rt: Runtime,
}

impl Drop for Inner {
    fn drop(&mut self) {
        // Close the session so that its ephemeral nodes go now rather than a session timeout later. The close
        // is sent when the last client clone is dropped; wait (bounded) for the session to report it.
        if let Some(client) = self.session.take() {
            let mut states = client.state_watcher();
            drop(client);
            let _ = self.rt.block_on(async {
                tokio::time::timeout(Duration::from_secs(2), async {
                    loop {
                        if states.changed().await.is_terminated() {
                            break;
                        }
                    }
                })
                .await
            });
        }
    }
}

/// A ZooKeeper session and the runtime that drives it: the entry point of every recipe.
///
/// Cheap to clone (all clones share one session). Every method blocks the calling thread; none may be called
/// from inside an async runtime.
#[derive(Clone)]
pub struct Coord {
    pub(crate) inner: Arc<Inner>,
}

impl std::fmt::Debug for Coord {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Coord")
            .field("hosts", &self.inner.session.hosts)
            .field("session", &self.session_id())
            .finish()
    }
}

impl Coord {
    /// Connects to the ensemble `HOST:PORT[,HOST:PORT…]` with default options (6 s session timeout).
    pub fn connect(hosts: &str) -> Result<Coord> {
        Coord::connect_with(hosts, &CoordOptions::default())
    }

    /// Connects to the ensemble with explicit options.
    pub fn connect_with(hosts: &str, opts: &CoordOptions) -> Result<Coord> {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("tickbox-coord")
            .enable_all()
            .build()
            .map_err(CoordError::Runtime)?;
        let connector = zk::Client::connector().with_session_timeout(opts.session_timeout);
        let client = rt
            .block_on(async {
                tokio::time::timeout(opts.connect_timeout, connector.connect(hosts)).await
            })
            .map_err(|_| CoordError::Timeout(opts.connect_timeout))??;
        tracing::debug!(hosts, session = %client.session_id(), timeout = ?client.session_timeout(), "zookeeper session");
        Ok(Coord {
            inner: Arc::new(Inner {
                session: Arc::new(Session {
                    current: std::sync::Mutex::new(Some((0, client))),
                    renewing: tokio::sync::Mutex::new(()),
                    hosts: hosts.to_owned(),
                    opts: opts.clone(),
                }),
                rt,
            }),
        })
    }

    /// The underlying async client of the current session, for operations the recipes do not wrap. After
    /// [`Coord::renew`] (or a recipe's own recovery) this is a different session.
    pub fn client(&self) -> zk::Client {
        // Only `Drop for Inner` takes it out, and `self` keeps `Inner` alive.
        self.inner
            .session
            .current()
            .map(|(_, c)| c)
            .expect("session present until drop")
    }

    pub(crate) fn session(&self) -> Arc<Session> {
        self.inner.session.clone()
    }

    /// Makes sure the handle has a live session: when the current one expired (an outage longer than the
    /// session timeout), establishes a new one, retrying for at most `within`. What the old session held (locks,
    /// leaderships, memberships) is gone; the recipes that keep a role ([`crate::Candidate`],
    /// [`crate::ShardMember`], the barriers) take their place again on their own.
    pub fn renew(&self, within: Duration) -> Result<()> {
        let session = self.session();
        let (generation, client) = session.current()?;
        if !client.state().is_terminated() {
            return Ok(());
        }
        self.block_on(async move {
            tokio::time::timeout(within, session.renew(generation))
                .await
                .map_err(|_| CoordError::Timeout(within))?
                .map(|_| ())
        })
    }

    /// Runs one whole recipe step (`op`, given the time left) on the current session; when it fails because the
    /// session expired (an outage longer than the session timeout), establishes a new session and runs the step
    /// again from the start, all within `timeout` (`None`: no limit). For steps that hold nothing yet when
    /// they fail (waiting for a lock, for a barrier): a holding already granted is never re-taken behind its
    /// holder's back; its guard reports it lost.
    pub(crate) fn on_live_session<T>(
        &self,
        what: &str,
        timeout: Option<Duration>,
        mut op: impl FnMut(Option<Duration>) -> Result<T>,
    ) -> Result<T> {
        let deadline = timeout.map(|t| std::time::Instant::now() + t);
        let left = || deadline.map(|d| d.saturating_duration_since(std::time::Instant::now()));
        loop {
            match op(left()) {
                Err(e) if self.status() == SessionStatus::Expired => {
                    tracing::warn!(what, error = %e, "zookeeper session expired: starting again on a new session");
                    let session = self.session();
                    let (generation, _) = session.current()?;
                    let renewed = self.block_on(async move {
                        match left() {
                            Some(t) => tokio::time::timeout(t, session.renew(generation))
                                .await
                                .map_err(|_| CoordError::Timeout(timeout.unwrap_or_default()))?,
                            None => session.renew(generation).await,
                        }
                    })?;
                    tracing::info!(
                        what,
                        generation = renewed.0,
                        "back on a new zookeeper session"
                    );
                }
                r => return r,
            }
        }
    }

    /// How many times this handle's session was replaced after expiring (0 for the first session).
    pub fn generation(&self) -> u64 {
        self.inner.session.current().map_or(0, |(g, _)| g)
    }

    /// Runs a future on this handle's runtime, blocking the caller.
    pub fn block_on<F: Future>(&self, fut: F) -> F::Output {
        self.inner.rt.block_on(fut)
    }

    pub(crate) fn spawn<F>(&self, fut: F) -> tokio::task::JoinHandle<F::Output>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        self.inner.rt.spawn(fut)
    }

    /// The ensemble this handle connected to.
    pub fn hosts(&self) -> &str {
        &self.inner.session.hosts
    }

    /// The session id (as the server prints it, e.g. in `ephemeralOwner`).
    pub fn session_id(&self) -> i64 {
        self.client().session_id().0
    }

    /// The negotiated session timeout.
    pub fn session_timeout(&self) -> Duration {
        self.client().session_timeout()
    }

    /// The session's current state.
    pub fn status(&self) -> SessionStatus {
        SessionStatus::from_zk(self.client().state())
    }

    /// Creates `path` and its missing ancestors as persistent nodes (`mkdir -p`).
    pub fn ensure_path(&self, path: &str) -> Result<()> {
        check(path)?;
        let client = self.client();
        self.block_on(async move { ensure_path(&client, path).await })
    }

    /// The children of `path`, sorted by name.
    pub fn children(&self, path: &str) -> Result<Vec<String>> {
        check(path)?;
        let mut c = self.block_on(self.client().list_children(path))?;
        c.sort();
        Ok(c)
    }

    /// The data and metadata of `path`; `None` when it does not exist.
    pub fn get(&self, path: &str) -> Result<Option<(Vec<u8>, NodeStat)>> {
        check(path)?;
        match self.block_on(self.client().get_data(path)) {
            Ok((data, stat)) => Ok(Some((data, NodeStat::from_zk(&stat)))),
            Err(zk::Error::NoNode) => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    /// Sets the data of an existing node.
    pub fn set(&self, path: &str, data: &[u8]) -> Result<()> {
        check(path)?;
        self.block_on(self.client().set_data(path, data, None))?;
        Ok(())
    }

    /// Creates a persistent node (parents must exist); `Ok(false)` when it already existed.
    pub fn create_persistent(&self, path: &str, data: &[u8]) -> Result<bool> {
        check(path)?;
        let opts = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
        match self.block_on(self.client().create(path, data, &opts)) {
            Ok(_) => Ok(true),
            Err(zk::Error::NodeExists) => Ok(false),
            Err(e) => Err(e.into()),
        }
    }

    /// Deletes a node (any version); `Ok(false)` when it did not exist.
    pub fn delete(&self, path: &str) -> Result<bool> {
        check(path)?;
        match self.block_on(self.client().delete(path, None)) {
            Ok(()) => Ok(true),
            Err(zk::Error::NoNode) => Ok(false),
            Err(e) => Err(e.into()),
        }
    }

    /// Watches every change under `path` (a persistent recursive watch, ZooKeeper ≥ 3.6): nothing between two
    /// [`TreeWatch::next`] calls is missed.
    pub fn watch_tree(&self, path: &str) -> Result<TreeWatch> {
        check(path)?;
        let watcher = self.block_on(
            self.client()
                .watch(path, zk::AddWatchMode::PersistentRecursive),
        )?;
        Ok(TreeWatch {
            coord: self.clone(),
            watcher,
        })
    }

    /// A new session to the same ensemble with the same options: what a holder does after
    /// [`SessionStatus::Expired`] to take part again.
    pub fn reconnect(&self) -> Result<Coord> {
        Coord::connect_with(&self.inner.session.hosts, &self.inner.session.opts)
    }
}

/// A persistent recursive watch, from [`Coord::watch_tree`].
#[derive(Debug)]
pub struct TreeWatch {
    coord: Coord,
    watcher: zk::PersistentWatcher,
}

impl TreeWatch {
    /// The next change, waiting at most `timeout`; `None` on timeout. After a terminal session event (expired,
    /// closed) no more events come.
    pub fn next(&mut self, timeout: Duration) -> Option<TreeEvent> {
        let w = &mut self.watcher;
        let ev = self
            .coord
            .block_on(async { tokio::time::timeout(timeout, w.changed()).await })
            .ok()?;
        Some(TreeEvent {
            kind: format!("{:?}", ev.event_type),
            path: ev.path.clone(),
            session: SessionStatus::from_zk(ev.session_state),
        })
    }
}

pub(crate) fn check(path: &str) -> Result<()> {
    logic::validate_path(path).map_err(|reason| CoordError::InvalidPath {
        path: path.to_owned(),
        reason,
    })
}

/// `mkdir -p` tolerant of concurrent creators.
pub(crate) async fn ensure_path(client: &zk::Client, path: &str) -> Result<()> {
    if path == "/" {
        return Ok(());
    }
    let opts = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
    // Idempotent (an existing node is success), so it is simply tried again after a connection loss.
    loop {
        match client.mkdir(path, &opts).await {
            Ok(()) | Err(zk::Error::NodeExists) => return Ok(()),
            Err(e) if transient(&e) => await_connected(client).await?,
            Err(e) => return Err(e.into()),
        }
    }
}

/// Waits until the session is connected again after a connection loss; errors when it ended instead.
pub(crate) async fn await_connected(client: &zk::Client) -> Result<()> {
    let mut states = client.state_watcher();
    loop {
        match SessionStatus::from_zk(states.state()) {
            SessionStatus::Connected => return Ok(()),
            SessionStatus::Expired => return Err(CoordError::SessionExpired),
            SessionStatus::Closed => return Err(CoordError::Closed),
            SessionStatus::Disconnected => {
                states.changed().await;
            }
        }
    }
}

/// Creates an ephemeral (optionally sequential) node named `prefix` (`<dir>/<kind>-<guid>-`) and returns its
/// child name. A connection loss may hide a create that succeeded: on reconnection the directory is listed and
/// the node carrying this GUID, if any, is adopted instead of creating a second one.
pub(crate) async fn create_guid_node(
    client: &zk::Client,
    dir: &str,
    kind: &str,
    guid: &str,
    data: &[u8],
    mode: zk::CreateMode,
) -> Result<String> {
    let path = format!("{}-{guid}-", logic::join(dir, kind));
    let opts = mode.with_acls(zk::Acls::anyone_all());
    let mut retried = false;
    loop {
        if retried {
            // The connection can drop again right after it came back (an ensemble stopping one server after
            // another): a listing lost that way is read again, not taken for the end of the session.
            let children = retry_read(client, || client.list_children(dir)).await?;
            if let Some(own) = logic::find_own(&logic::sorted_nodes(&children, &[kind]), guid) {
                tracing::debug!(node = %own.name, "adopted a node created before a connection loss");
                return Ok(own.name.clone());
            }
        }
        match client.create(&path, data, &opts).await {
            Ok((_, seq)) => return Ok(format!("{kind}-{guid}-{seq}")),
            Err(zk::Error::NoNode) => ensure_path(client, dir).await?,
            Err(e) if transient(&e) => {
                await_connected(client).await?;
                retried = true;
            }
            Err(e) => return Err(e.into()),
        }
    }
}

/// Runs `op` again after each connection loss (once the session reconnected); only for idempotent reads.
pub(crate) async fn retry_read<T, F, Fut>(client: &zk::Client, mut op: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = std::result::Result<T, zk::Error>>,
{
    loop {
        match op().await {
            Ok(v) => return Ok(v),
            Err(e) if transient(&e) => await_connected(client).await?,
            Err(e) => return Err(e.into()),
        }
    }
}

/// Deletes a node, retrying across connection loss; a missing node is fine (already deleted, or its session
/// expired).
pub(crate) async fn delete_quietly(client: &zk::Client, path: &str) -> Result<()> {
    loop {
        match client.delete(path, None).await {
            Ok(()) | Err(zk::Error::NoNode) => return Ok(()),
            Err(e) if transient(&e) => await_connected(client).await?,
            Err(e) => return Err(e.into()),
        }
    }
}

/// True for errors that mean "the connection dropped, the outcome is unknown, the session may live on":
/// a connection loss, or the I/O error that failed a request in flight when the connection broke.
pub(crate) fn transient(e: &zk::Error) -> bool {
    matches!(
        e,
        zk::Error::ConnectionLoss | zk::Error::Custom(_) | zk::Error::Timeout
    )
}

/// A fresh GUID for node names (32 hex digits, no dashes, so it never splits a name's fields).
pub(crate) fn new_guid() -> String {
    uuid::Uuid::new_v4().simple().to_string()
}
