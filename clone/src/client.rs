//! `CloneClient`: the Guide's multithreaded client. A background agent thread owns the network sockets and a poll
//! loop driving [`ClientEngine`]; the caller's handle talks to it over an `inproc` PAIR pipe.
//!
//! Pipe commands (handle → agent), each a multipart message whose second frame is an 8-byte request id:
//! `SET id key value ttl_ms(u64 BE, 0 = none) confirm(u8) timeout_ms(u64 BE)`, `GET id key`, `LIST id prefix`,
//! `WATCH id`, `LEASE id key value ttl_ms`, `UNLEASE id key`, `STATUS id`, and `STOP`. Replies echo the id.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender};

use crate::engine::client::{Change, ClientAction, ClientConfig, ClientEngine};
use crate::io::send_icanhaz;
use crate::msg::{check_subtree, KvMsg, HUGZ, NOPE};
use crate::server_loop::ServerEndpoints;
use crate::CloneError;
use tickbox_zmqx::socket::poll_ms;

/// Status reported by the agent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientStatus {
    /// Snapshot loaded and following the update stream.
    pub live: bool,
    /// Index (into the endpoints given to `connect`) of the server in use.
    pub server: usize,
    /// Sequence of the last update applied.
    pub last_seq: u64,
    /// Keys in the local copy (only those under the subtree).
    pub keys: u64,
    /// Failovers to another server after silence, since the client started.
    pub failovers: u64,
    /// Snapshots loaded, since the client started (more than one means re-syncs after failover or a gap).
    pub syncs: u64,
    /// Sequence of the last snapshot's KTHXBAI (updates above it came from the stream).
    pub snapshot_seq: u64,
}

type WatchSlot = Arc<Mutex<Vec<(u64, String, bool, Sender<Change>)>>>;

/// Handle to a Clone client agent. `Send` but not `Sync` (it owns the caller's end of the pipe).
pub struct CloneClient {
    pipe: zmq::Socket,
    thread: Option<JoinHandle<()>>,
    next_id: std::cell::Cell<u64>,
    watch_slot: WatchSlot,
    subtree: String,
    timeout: Duration,
}

static AGENT_COUNTER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

impl CloneClient {
    /// Starts an agent connected to one server, or two for a Binary Star pair (updates go to both, snapshots and
    /// the stream come from one at a time). `subtree` is empty for the whole map or `/seg/…/`.
    pub fn connect(
        ctx: &zmq::Context,
        servers: &[ServerEndpoints],
        subtree: &str,
        config: ClientConfig,
    ) -> Result<Self, CloneError> {
        Self::start(ctx, servers, subtree, config, WatchSlot::default())
    }

    /// [`Self::connect`] with a watch of `prefix` in place before the agent starts, so it sees the first
    /// snapshot's entries (`from_snapshot`) and then every change: a [`Self::watch`] made after `connect` sees the
    /// snapshot only if it is registered before the snapshot arrives, which on a busy machine it may not be.
    pub fn connect_watching(
        ctx: &zmq::Context,
        servers: &[ServerEndpoints],
        subtree: &str,
        config: ClientConfig,
        prefix: &str,
    ) -> Result<(Self, Receiver<Change>), CloneError> {
        let (tx, rx) = crossbeam_channel::unbounded();
        let slot: WatchSlot = Arc::new(Mutex::new(vec![(0, prefix.to_owned(), false, tx)]));
        Ok((Self::start(ctx, servers, subtree, config, slot)?, rx))
    }

    fn start(
        ctx: &zmq::Context,
        servers: &[ServerEndpoints],
        subtree: &str,
        config: ClientConfig,
        watch_slot: WatchSlot,
    ) -> Result<Self, CloneError> {
        if servers.is_empty() {
            return Err(CloneError::BadEndpoint("no server given".into()));
        }
        check_subtree(subtree).map_err(|e| CloneError::BadEndpoint(e.to_string()))?;
        // A config the agent could not connect with is this call's error, not a log line from a thread that
        // stopped while the caller waits on it.
        config.security.check_client("clone")?;
        let addr = format!(
            "inproc://clone-agent-{}-{}",
            std::process::id(),
            AGENT_COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        );
        let pipe = ctx.socket(zmq::PAIR)?;
        pipe.set_linger(0)?;
        pipe.bind(&addr)?;
        let thread = {
            let ctx = ctx.clone();
            let servers = servers.to_vec();
            let subtree = subtree.to_owned();
            let slot = watch_slot.clone();
            std::thread::Builder::new()
                .name("clone-agent".into())
                .spawn(move || {
                    if let Err(err) = agent(&ctx, &addr, &servers, &subtree, config, slot) {
                        tracing::error!("clone agent stopped: {err}");
                    }
                })
                .map_err(CloneError::Io)?
        };
        Ok(CloneClient {
            pipe,
            thread: Some(thread),
            next_id: std::cell::Cell::new(1),
            watch_slot,
            subtree: subtree.to_owned(),
            timeout: Duration::from_secs(10),
        })
    }

    /// Default timeout for `set`/`delete` acknowledgements (10 s).
    pub fn set_timeout(&mut self, timeout: Duration) {
        self.timeout = timeout;
    }

    fn request(
        &self,
        cmd: &[u8],
        args: &[&[u8]],
        timeout: Duration,
    ) -> Result<Vec<Vec<u8>>, CloneError> {
        let id = self.next_id.get();
        self.next_id.set(id + 1);
        let id_bytes = id.to_be_bytes();
        let mut frames: Vec<&[u8]> = vec![cmd, &id_bytes];
        frames.extend_from_slice(args);
        self.pipe.send_multipart(frames, 0)?;
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(CloneError::Timeout);
            }
            if self.pipe.poll(zmq::POLLIN, poll_ms(left).max(1))? == 0 {
                if self.thread.as_ref().is_some_and(|t| t.is_finished()) {
                    return Err(CloneError::AgentGone);
                }
                continue;
            }
            let reply = self.pipe.recv_multipart(0)?;
            // Replies to requests we gave up on are skipped by id.
            if reply.len() >= 2 && reply[1] == id_bytes {
                return Ok(reply);
            }
        }
    }

    fn local_timeout(&self) -> Duration {
        Duration::from_secs(5)
    }

    /// Waits until the first snapshot is loaded.
    pub fn wait_synced(&self, timeout: Duration) -> Result<ClientStatus, CloneError> {
        let deadline = Instant::now() + timeout;
        loop {
            let status = self.status()?;
            if status.live {
                return Ok(status);
            }
            if Instant::now() >= deadline {
                return Err(CloneError::Timeout);
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Asks the agent for its state. Fails with [`CloneError::Timeout`] if the agent does not answer in 5 s.
    pub fn status(&self) -> Result<ClientStatus, CloneError> {
        let r = self.request(b"STATUS", &[], self.local_timeout())?;
        let num = |i: usize| {
            r.get(i)
                .and_then(|f| <[u8; 8]>::try_from(f.as_slice()).ok())
                .map(u64::from_be_bytes)
                .unwrap_or(0)
        };
        Ok(ClientStatus {
            live: num(2) == 1,
            server: num(3) as usize,
            last_seq: num(4),
            keys: num(5),
            failovers: num(6),
            syncs: num(7),
            snapshot_seq: num(8),
        })
    }

    /// Local read of the replicated map.
    pub fn get(&self, key: &str) -> Result<Option<Vec<u8>>, CloneError> {
        let r = self.request(b"GET", &[key.as_bytes()], self.local_timeout())?;
        match r.get(2).map(|f| f.as_slice()) {
            Some([1]) => Ok(Some(r.get(3).cloned().unwrap_or_default())),
            _ => Ok(None),
        }
    }

    /// Every key under `prefix`, in key order.
    pub fn list(&self, prefix: &str) -> Result<Vec<(String, Vec<u8>)>, CloneError> {
        let r = self.request(b"LIST", &[prefix.as_bytes()], self.local_timeout())?;
        Ok(r[2..]
            .chunks_exact(2)
            .map(|kv| (String::from_utf8_lossy(&kv[0]).into_owned(), kv[1].clone()))
            .collect())
    }

    /// Sets `key` and waits until the server has published it. Fails with [`CloneError::Refused`] when the
    /// server answers with a `NOPE` notice (key, value or budget limits; see the crate docs) (the update is then acknowledged: it is in the
    /// active server's map and survives a failover). Returns the server sequence. `ttl` makes the server delete
    /// the key when it is not refreshed in time.
    pub fn set(&self, key: &str, value: &[u8], ttl: Option<Duration>) -> Result<u64, CloneError> {
        self.set_with_timeout(key, value, ttl, self.timeout)
    }

    /// [`Self::set`] with its own acknowledgement timeout instead of the one from [`Self::set_timeout`]; fails
    /// with [`CloneError::Timeout`] when no server publishes the update in time (it may still be applied later).
    pub fn set_with_timeout(
        &self,
        key: &str,
        value: &[u8],
        ttl: Option<Duration>,
        timeout: Duration,
    ) -> Result<u64, CloneError> {
        if !key.starts_with(&self.subtree) {
            // The echo would be filtered out by our subscription, so it could never be acknowledged.
            return Err(CloneError::OutsideSubtree(key.to_owned()));
        }
        let ttl_ms = ttl.map(|t| t.as_millis().max(1) as u64).unwrap_or(0);
        let t_ms = timeout.as_millis() as u64;
        let r = self.request(
            b"SET",
            &[
                key.as_bytes(),
                value,
                &ttl_ms.to_be_bytes(),
                &[1],
                &t_ms.to_be_bytes(),
            ],
            timeout + Duration::from_millis(500),
        )?;
        match r.first().map(|f| f.as_slice()) {
            Some(b"ACK") => Ok(r
                .get(2)
                .and_then(|f| <[u8; 8]>::try_from(f.as_slice()).ok())
                .map(u64::from_be_bytes)
                .unwrap_or(0)),
            Some(b"REFUSED") => Err(CloneError::Refused(
                r.get(2)
                    .map(|f| String::from_utf8_lossy(f).into_owned())
                    .unwrap_or_default(),
            )),
            _ => Err(CloneError::Timeout),
        }
    }

    /// Fire-and-forget set (any key, including outside the subtree). Returns the update's UUID.
    pub fn set_nowait(
        &self,
        key: &str,
        value: &[u8],
        ttl: Option<Duration>,
    ) -> Result<[u8; 16], CloneError> {
        let ttl_ms = ttl.map(|t| t.as_millis().max(1) as u64).unwrap_or(0);
        let r = self.request(
            b"SET",
            &[
                key.as_bytes(),
                value,
                &ttl_ms.to_be_bytes(),
                &[0],
                &0u64.to_be_bytes(),
            ],
            self.local_timeout(),
        )?;
        r.get(2)
            .and_then(|f| <[u8; 16]>::try_from(f.as_slice()).ok())
            .ok_or(CloneError::AgentGone)
    }

    /// Deletes `key` (an empty value) and waits for the acknowledgement.
    pub fn delete(&self, key: &str) -> Result<u64, CloneError> {
        self.set(key, b"", None)
    }

    /// Changes under `prefix` from now on, in server order; with `include_existing` the current entries come first.
    /// The channel is unbounded so the agent never blocks on a slow watcher.
    pub fn watch(
        &self,
        prefix: &str,
        include_existing: bool,
    ) -> Result<Receiver<Change>, CloneError> {
        let (tx, rx) = crossbeam_channel::unbounded();
        let id = self.next_id.get();
        self.watch_slot
            .lock()
            .map_err(|_| CloneError::AgentGone)?
            .push((id, prefix.to_owned(), include_existing, tx));
        self.request(b"WATCH", &[], self.local_timeout())?;
        Ok(rx)
    }

    /// Keeps `key` = `value` alive with a server-side TTL, refreshed by the agent every `ttl / 3` until
    /// [`Self::unlease`] or drop. The key disappears `ttl` after this client dies.
    pub fn lease(&self, key: &str, value: &[u8], ttl: Duration) -> Result<(), CloneError> {
        let ttl_ms = ttl.as_millis().max(3) as u64;
        self.request(
            b"LEASE",
            &[key.as_bytes(), value, &ttl_ms.to_be_bytes()],
            self.local_timeout(),
        )?;
        Ok(())
    }

    /// Stops refreshing `key` and deletes it.
    pub fn unlease(&self, key: &str) -> Result<(), CloneError> {
        self.request(b"UNLEASE", &[key.as_bytes()], self.local_timeout())?;
        Ok(())
    }
}

impl Drop for CloneClient {
    fn drop(&mut self) {
        let _ = self.pipe.send("STOP", zmq::DONTWAIT);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Linger of the agent's SUB and snapshot DEALER. Never 0: libzmq 4.3.4 aborts when a pipe is dropped at once
/// while its session is part-way through a multipart message and the connection fails, and linger 0 drops it at
/// the close (see `server_loop`'s module docs). The SUB sends only single-frame subscriptions; the DEALER's
/// ICANHAZ is two small frames queued for a server that may be down, where a long linger would wait for
/// ever, so it keeps this short linger and the residual race of `docs/book/src/libzmq-traps.md`. The update PUB, which
/// sends multipart KVSETs of any size, is set up by `tickbox_zmqx::prepare_multipart_connector` instead.
const CLOSE_LINGER_MS: i32 = 100;

struct Awaiting {
    id: [u8; 8],
    msg: KvMsg,
    deadline: Instant,
    next_resend: Instant,
}

struct Lease {
    value: Vec<u8>,
    ttl_ms: u64,
    next_refresh: Instant,
}

struct Agent<'a> {
    ctx: &'a zmq::Context,
    servers: &'a [ServerEndpoints],
    config: ClientConfig,
    engine: ClientEngine,
    publisher: zmq::Socket,
    sub: Option<zmq::Socket>,
    dealer: Option<zmq::Socket>,
    watchers: Vec<(String, Sender<Change>)>,
    awaiting: HashMap<[u8; 16], Awaiting>,
    leases: HashMap<String, Lease>,
    malformed: u64,
}

fn new_uuid() -> [u8; 16] {
    *uuid::Uuid::new_v4().as_bytes()
}

fn make_kvset(key: &str, value: &[u8], ttl_ms: u64) -> KvMsg {
    let mut m = KvMsg::new(key, 0, value.to_vec());
    m.uuid = Some(new_uuid());
    if ttl_ms > 0 {
        // CHP's ttl is in seconds; fractional seconds keep sub-second leases usable.
        m.set_prop("ttl", &format!("{}", ttl_ms as f64 / 1000.0));
    }
    m
}

impl Agent<'_> {
    fn connect(&mut self, index: usize) -> Result<(), CloneError> {
        self.sub = None;
        self.dealer = None;
        let eps = &self.servers[index];
        let sub = self.ctx.socket(zmq::SUB)?;
        sub.set_linger(CLOSE_LINGER_MS)?;
        sub.set_rcvhwm(self.config.hwm)?;
        let subtree = self.engine.subtree();
        sub.set_subscribe(subtree.as_bytes())?;
        if !subtree.is_empty() {
            sub.set_subscribe(HUGZ.as_bytes())?;
            sub.set_subscribe(NOPE.as_bytes())?;
        }
        self.config.security.client(&sub, "clone")?;
        sub.connect(&eps.publisher)?;
        let dealer = self.ctx.socket(zmq::DEALER)?;
        // ICANHAZ is two frames: see CLOSE_LINGER_MS.
        dealer.set_linger(CLOSE_LINGER_MS)?;
        dealer.set_rcvhwm(0)?;
        self.config.security.client(&dealer, "clone")?;
        dealer.connect(&eps.snapshot)?;
        self.sub = Some(sub);
        self.dealer = Some(dealer);
        tracing::debug!(server = index, snapshot = %eps.snapshot, "clone agent connecting");
        Ok(())
    }

    fn send_update(&self, msg: &KvMsg) {
        match msg.send(&self.publisher, None) {
            Ok(()) | Err(zmq::Error::EAGAIN) => {}
            Err(err) => tracing::warn!("update send failed: {err}"),
        }
    }

    fn dispatch(&mut self, changes: &mut Vec<Change>, pipe: &zmq::Socket) {
        for change in changes.drain(..) {
            if let Some(u) = change.uuid {
                if let Some(a) = self.awaiting.remove(&u) {
                    let _ = pipe.send_multipart(
                        [&b"ACK"[..], &a.id, &change.seq.to_be_bytes()],
                        zmq::DONTWAIT,
                    );
                }
            }
            self.watchers.retain(|(prefix, tx)| {
                if change.key.starts_with(prefix.as_str()) {
                    tx.send(change.clone()).is_ok()
                } else {
                    true
                }
            });
        }
    }

    /// After a re-synchronisation an acknowledged update may be in the snapshot without being a visible change.
    fn ack_from_map(&mut self, pipe: &zmq::Socket) {
        let engine = &self.engine;
        self.awaiting
            .retain(|uuid, a| match engine.get(&a.msg.key) {
                Some(e) if e.uuid == Some(*uuid) => {
                    let _ = pipe
                        .send_multipart([&b"ACK"[..], &a.id, &e.seq.to_be_bytes()], zmq::DONTWAIT);
                    false
                }
                _ => true,
            });
    }

    /// Starts the watches waiting in `slot`, each with the current entries under its prefix first when it asked
    /// for them.
    fn take_watches(&mut self, slot: &WatchSlot) {
        let taken: Vec<_> = slot
            .lock()
            .map(|mut v| v.drain(..).collect())
            .unwrap_or_default();
        for (_, prefix, existing, tx) in taken {
            if existing {
                for (k, e) in self.engine.range(&prefix) {
                    let _ = tx.send(Change {
                        key: k.clone(),
                        value: Some(e.value.clone()),
                        seq: e.seq,
                        uuid: e.uuid,
                        from_snapshot: true,
                    });
                }
            }
            self.watchers.push((prefix, tx));
        }
    }

    fn command(
        &mut self,
        parts: Vec<Vec<u8>>,
        pipe: &zmq::Socket,
        slot: &WatchSlot,
        now: Instant,
    ) -> bool {
        let Some(cmd) = parts.first() else {
            return true;
        };
        if cmd == b"STOP" {
            return false;
        }
        let Some(id) = parts
            .get(1)
            .and_then(|f| <[u8; 8]>::try_from(f.as_slice()).ok())
        else {
            return true;
        };
        let num = |i: usize| {
            parts
                .get(i)
                .and_then(|f| <[u8; 8]>::try_from(f.as_slice()).ok())
                .map(u64::from_be_bytes)
                .unwrap_or(0)
        };
        let text = |i: usize| {
            parts
                .get(i)
                .map(|f| String::from_utf8_lossy(f).into_owned())
                .unwrap_or_default()
        };
        let reply = |frames: Vec<&[u8]>| {
            let _ = pipe.send_multipart(frames, zmq::DONTWAIT);
        };
        match cmd.as_slice() {
            b"SET" => {
                let key = text(2);
                let value = parts.get(3).cloned().unwrap_or_default();
                let msg = make_kvset(&key, &value, num(4));
                self.send_update(&msg);
                let uuid = msg.uuid.unwrap_or_default();
                if parts.get(5).map(|f| f.as_slice()) == Some(&[1]) {
                    let timeout = Duration::from_millis(num(6));
                    self.awaiting.insert(
                        uuid,
                        Awaiting {
                            id,
                            msg,
                            deadline: now + timeout,
                            next_resend: now + self.config.resend(),
                        },
                    );
                } else {
                    reply(vec![b"SENT", &id, &uuid]);
                }
            }
            b"GET" => match self.engine.get(&text(2)) {
                Some(e) => reply(vec![b"VAL", &id, &[1], &e.value]),
                None => reply(vec![b"VAL", &id, &[0]]),
            },
            b"LIST" => {
                let prefix = text(2);
                let mut frames: Vec<&[u8]> = vec![b"LIST", &id];
                for (k, e) in self.engine.range(&prefix) {
                    frames.push(k.as_bytes());
                    frames.push(&e.value);
                }
                reply(frames);
            }
            b"WATCH" => {
                self.take_watches(slot);
                reply(vec![b"OK", &id]);
            }
            b"LEASE" => {
                let key = text(2);
                let value = parts.get(3).cloned().unwrap_or_default();
                let ttl_ms = num(4).max(3);
                self.send_update(&make_kvset(&key, &value, ttl_ms));
                self.leases.insert(
                    key,
                    Lease {
                        value,
                        ttl_ms,
                        next_refresh: now + Duration::from_millis(ttl_ms / 3),
                    },
                );
                reply(vec![b"OK", &id]);
            }
            b"UNLEASE" => {
                let key = text(2);
                if self.leases.remove(&key).is_some() {
                    self.send_update(&make_kvset(&key, b"", 0));
                }
                reply(vec![b"OK", &id]);
            }
            b"STATUS" => {
                let s = self.engine.stats();
                reply(vec![
                    b"STATUS",
                    &id,
                    &(self.engine.is_live() as u64).to_be_bytes(),
                    &(self.engine.current_server() as u64).to_be_bytes(),
                    &self.engine.last_seq().to_be_bytes(),
                    &(self.engine.map().len() as u64).to_be_bytes(),
                    &s.failovers.to_be_bytes(),
                    &s.syncs.to_be_bytes(),
                    &self.engine.snapshot_seq().to_be_bytes(),
                ]);
            }
            other => {
                tracing::warn!(cmd = %String::from_utf8_lossy(other), "clone agent: unknown pipe command")
            }
        }
        true
    }

    fn timers(&mut self, now: Instant, pipe: &zmq::Socket) {
        let resend = self.config.resend();
        let mut expired = Vec::new();
        for (uuid, a) in self.awaiting.iter_mut() {
            if now >= a.deadline {
                expired.push(*uuid);
            } else if now >= a.next_resend {
                a.next_resend = now + resend;
                match a.msg.send(&self.publisher, None) {
                    Ok(()) | Err(zmq::Error::EAGAIN) => {}
                    Err(err) => tracing::warn!("update resend failed: {err}"),
                }
            }
        }
        for uuid in expired {
            if let Some(a) = self.awaiting.remove(&uuid) {
                let _ = pipe.send_multipart([&b"NACK"[..], &a.id], zmq::DONTWAIT);
            }
        }
        let mut refresh = Vec::new();
        for (key, lease) in self.leases.iter_mut() {
            if now >= lease.next_refresh {
                lease.next_refresh = now + Duration::from_millis(lease.ttl_ms / 3);
                refresh.push(make_kvset(key, &lease.value, lease.ttl_ms));
            }
        }
        for m in refresh {
            self.send_update(&m);
        }
    }

    fn poll_timeout(&self) -> Option<Instant> {
        let resends = self
            .awaiting
            .values()
            .flat_map(|a| [a.next_resend, a.deadline]);
        let refreshes = self.leases.values().map(|l| l.next_refresh);
        self.engine
            .poll_timeout()
            .into_iter()
            .chain(resends)
            .chain(refreshes)
            .min()
    }
}

/// A `NOPE` notice: fail the waiting set it names (others' notices match nothing here).
fn refused(awaiting: &mut HashMap<[u8; 16], Awaiting>, notice: &KvMsg, pipe: &zmq::Socket) {
    let Some(uuid) = notice.uuid else { return };
    if let Some(a) = awaiting.remove(&uuid) {
        let reason = notice.prop("reason").unwrap_or("unspecified").to_owned();
        let _ = pipe.send_multipart([&b"REFUSED"[..], &a.id, reason.as_bytes()], zmq::DONTWAIT);
    }
}

fn agent(
    ctx: &zmq::Context,
    pipe_addr: &str,
    servers: &[ServerEndpoints],
    subtree: &str,
    config: ClientConfig,
    slot: WatchSlot,
) -> Result<(), CloneError> {
    let pipe = ctx.socket(zmq::PAIR)?;
    pipe.set_linger(0)?;
    pipe.connect(pipe_addr)?;
    let mut publisher = ctx.socket(zmq::PUB)?;
    // Infinite linger, ZMQ_IMMEDIATE and ZMQ_TCP_MAXRT (see CLOSE_LINGER_MS and `tickbox_zmqx::teardown`). A PUB
    // sends nothing to a collector that has not subscribed yet either way, so IMMEDIATE loses nothing.
    tickbox_zmqx::prepare_multipart_connector(&mut publisher, config.stalled_peer_timeout())?;
    publisher.set_sndhwm(config.hwm)?;
    config.security.client(&publisher, "clone")?;
    // Updates go to every server: the passive keeps them pending so a failover loses nothing acknowledged.
    for s in servers {
        publisher.connect(&s.collector)?;
    }
    let now = Instant::now();
    let mut a = Agent {
        ctx,
        servers,
        engine: ClientEngine::new(config.clone(), servers.len(), subtree, now),
        config,
        publisher,
        sub: None,
        dealer: None,
        watchers: Vec::new(),
        awaiting: HashMap::new(),
        leases: HashMap::new(),
        malformed: 0,
    };
    // Watches made with the client (`connect_watching`): in place before anything arrives.
    a.take_watches(&slot);
    let mut changes = Vec::new();
    loop {
        while let Some(action) = a.engine.poll_output() {
            match action {
                ClientAction::Connect(i) => a.connect(i)?,
                ClientAction::SendIcanhaz => {
                    if let Some(d) = &a.dealer {
                        if !send_icanhaz(d, a.engine.subtree())? {
                            tracing::debug!(
                                "snapshot request not sent: no connection to the server yet"
                            );
                        }
                    }
                }
                ClientAction::Vote => {
                    if let Some(d) = &a.dealer {
                        if !send_icanhaz(d, crate::engine::client::VOTE_SUBTREE)? {
                            tracing::debug!("vote not sent: no connection to the server yet");
                        }
                    }
                }
            }
        }
        let now = Instant::now();
        let timeout = a
            .poll_timeout()
            .map_or(Duration::from_millis(1000), |d| {
                d.saturating_duration_since(now)
            })
            .min(Duration::from_millis(1000));
        let timeout = poll_ms(timeout);
        let (r_pipe, r_sub, r_dealer) = {
            let mut items = vec![pipe.as_poll_item(zmq::POLLIN)];
            if let (Some(s), Some(d)) = (&a.sub, &a.dealer) {
                items.push(s.as_poll_item(zmq::POLLIN));
                items.push(d.as_poll_item(zmq::POLLIN));
            }
            zmq::poll(&mut items, timeout)?;
            let r = |i: usize| items.get(i).is_some_and(|it| it.is_readable());
            (r(0), r(1), r(2))
        };
        let now = Instant::now();
        let syncs_before = a.engine.stats().syncs;
        if r_dealer {
            if let Some(d) = &a.dealer {
                // Bounded batches: a million-key snapshot must not starve the caller's pipe.
                for _ in 0..4096 {
                    match d.recv_multipart(zmq::DONTWAIT) {
                        Ok(parts) => match KvMsg::decode(&parts) {
                            Ok(msg) => a.engine.handle_snapshot(now, msg, &mut changes),
                            Err(err) => {
                                a.malformed += 1;
                                tracing::warn!(
                                    "clone agent: dropped malformed snapshot message: {err}"
                                );
                            }
                        },
                        Err(zmq::Error::EAGAIN) => break,
                        Err(err) => return Err(err.into()),
                    }
                }
            }
        }
        if r_sub {
            if let Some(s) = &a.sub {
                for _ in 0..4096 {
                    match s.recv_multipart(zmq::DONTWAIT) {
                        Ok(parts) => match KvMsg::decode(&parts) {
                            Ok(msg) => {
                                if msg.key == NOPE {
                                    refused(&mut a.awaiting, &msg, &pipe);
                                }
                                a.engine.handle_update(now, msg, &mut changes)
                            }
                            Err(err) => {
                                a.malformed += 1;
                                tracing::warn!("clone agent: dropped malformed update: {err}");
                            }
                        },
                        Err(zmq::Error::EAGAIN) => break,
                        Err(err) => return Err(err.into()),
                    }
                }
            }
        }
        a.dispatch(&mut changes, &pipe);
        if a.engine.stats().syncs != syncs_before {
            a.ack_from_map(&pipe);
        }
        if r_pipe {
            loop {
                match pipe.recv_multipart(zmq::DONTWAIT) {
                    Ok(parts) => {
                        if !a.command(parts, &pipe, &slot, now) {
                            // Deletes of leased keys on a clean stop, so members leave at once.
                            let keys: Vec<String> = a.leases.keys().cloned().collect();
                            for k in keys {
                                a.send_update(&make_kvset(&k, b"", 0));
                            }
                            return Ok(());
                        }
                    }
                    Err(zmq::Error::EAGAIN) => break,
                    Err(err) => return Err(err.into()),
                }
            }
        }
        a.engine.handle_timeout(now);
        a.timers(now, &pipe);
    }
}
