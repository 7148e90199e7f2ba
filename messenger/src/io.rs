//! The threaded messenger: one I/O thread owns every socket and drives the sans-IO
//! [`MessengerEngine`]; callers only enqueue commands.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rand::{Rng, SeedableRng};
use tickbox_zmqx::socket::{last_endpoint, poll_ms, PassBudget};

use crate::engine::{Frames, MessengerConfig, MessengerEngine, MessengerStats, MsgAction, Route};
use crate::MessengerError;

// ---- the threaded messenger ---------------------------------------------------------------------------------

type ReplyFn = Box<dyn FnOnce(Frames) + Send>;
type HandlerFn = Box<dyn FnMut(&Frames) -> Option<Frames> + Send>;

enum Command {
    Send {
        dest: String,
        body: Frames,
        on_reply: Option<ReplyFn>,
    },
    Listen {
        endpoint: String,
        handler: HandlerFn,
        bound: std::sync::mpsc::Sender<Result<String, MessengerError>>,
    },
    Stop,
}

#[derive(Default)]
struct SharedStats {
    pending: AtomicU64,
    handled: AtomicU64,
    duplicates: AtomicU64,
    retries: AtomicU64,
    /// The engine's counters, copied once per loop turn (not per message).
    snapshot: Mutex<MessengerStats>,
}

struct Inner {
    tx: crossbeam_channel::Sender<Command>,
    wake: Mutex<zmq::Socket>,
    thread: Mutex<Option<JoinHandle<Result<(), MessengerError>>>>,
    stats: Arc<SharedStats>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        let _ = self.tx.send(Command::Stop);
        if let Ok(w) = self.wake.lock() {
            let _ = w.send(&[][..], zmq::DONTWAIT);
        }
        if let Some(t) = self.thread.lock().ok().and_then(|mut t| t.take()) {
            let _ = t.join();
        }
    }
}

/// Handle to a messenger; cheap to clone and share between threads. Dropping the last clone stops the I/O
/// thread (unacknowledged messages are then abandoned).
#[derive(Clone)]
pub struct Messenger {
    inner: Arc<Inner>,
}

impl Messenger {
    /// Starts the I/O thread; the messenger gets a fresh sender UUID.
    pub fn new(ctx: &zmq::Context, cfg: MessengerConfig) -> Result<Self, MessengerError> {
        let me = *uuid::Uuid::new_v4().as_bytes();
        let addr = format!("inproc://messenger-{}", uuid::Uuid::from_bytes(me).simple());
        let pull = ctx.socket(zmq::PULL)?;
        pull.set_linger(0)?;
        pull.bind(&addr)?;
        let wake = ctx.socket(zmq::PUSH)?;
        wake.set_linger(0)?;
        wake.connect(&addr)?;
        let (tx, rx) = crossbeam_channel::unbounded();
        let stats = Arc::new(SharedStats::default());
        let (c, s) = (ctx.clone(), Arc::clone(&stats));
        let thread = std::thread::Builder::new()
            .name("messenger".into())
            .spawn(move || io_thread(c, pull, rx, me, cfg, s))
            .map_err(|_| MessengerError::Gone)?;
        Ok(Self {
            inner: Arc::new(Inner {
                tx,
                wake: Mutex::new(wake),
                thread: Mutex::new(Some(thread)),
                stats,
            }),
        })
    }

    fn enqueue(&self, cmd: Command) -> Result<(), MessengerError> {
        self.inner.tx.send(cmd).map_err(|_| MessengerError::Gone)?;
        let w = self.inner.wake.lock().map_err(|_| MessengerError::Gone)?;
        // A full wake-up pipe already guarantees a wake-up, so EAGAIN is fine.
        match w.send(&[][..], zmq::DONTWAIT) {
            Ok(()) | Err(zmq::Error::EAGAIN) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    /// Send `body` to the listener at `dest`; `on_reply` runs (on the I/O thread) with the handler's answer.
    pub fn send(
        &self,
        dest: &str,
        body: Frames,
        on_reply: impl FnOnce(Frames) + Send + 'static,
    ) -> Result<(), MessengerError> {
        self.enqueue(Command::Send {
            dest: dest.to_string(),
            body,
            on_reply: Some(Box::new(on_reply)),
        })
    }

    /// Send without asking for a reply (still acknowledged and retried).
    pub fn send_oneway(&self, dest: &str, body: Frames) -> Result<(), MessengerError> {
        self.enqueue(Command::Send {
            dest: dest.to_string(),
            body,
            on_reply: None,
        })
    }

    /// Listen on `endpoint`; `handler` runs on the I/O thread once per distinct message and may answer.
    /// Returns the bound endpoint (resolved when `endpoint` has a wildcard port).
    pub fn listen(
        &self,
        endpoint: &str,
        handler: impl FnMut(&Frames) -> Option<Frames> + Send + 'static,
    ) -> Result<String, MessengerError> {
        let (bound, rx) = std::sync::mpsc::channel();
        self.enqueue(Command::Listen {
            endpoint: endpoint.to_string(),
            handler: Box::new(handler),
            bound,
        })?;
        rx.recv_timeout(Duration::from_secs(10))
            .map_err(|_| MessengerError::Gone)?
    }

    /// Messages sent but not yet acknowledged.
    pub fn pending(&self) -> u64 {
        self.inner.stats.pending.load(Ordering::Relaxed)
    }

    /// Every engine counter (refusals and evictions included), as of the I/O thread's latest loop turn.
    pub fn stats(&self) -> MessengerStats {
        self.inner
            .stats
            .snapshot
            .lock()
            .map(|s| s.clone())
            .unwrap_or_default()
    }

    /// Handler invocations, duplicates dropped, and retries so far.
    pub fn counters(&self) -> (u64, u64, u64) {
        let s = &self.inner.stats;
        (
            s.handled.load(Ordering::Relaxed),
            s.duplicates.load(Ordering::Relaxed),
            s.retries.load(Ordering::Relaxed),
        )
    }
}

fn io_thread(
    ctx: zmq::Context,
    wake: zmq::Socket,
    rx: crossbeam_channel::Receiver<Command>,
    me: [u8; 16],
    cfg: MessengerConfig,
    shared: Arc<SharedStats>,
) -> Result<(), MessengerError> {
    let mut rng = rand::rngs::SmallRng::seed_from_u64(cfg.fault_seed);
    let (drop_p, dup_p) = (cfg.drop_probability, cfg.duplicate_probability);
    // Reply callbacks outlive their message's ACK (they wait for the reply), so they are bounded apart.
    let max_callbacks = cfg.max_pending.max(1);
    let mut engine = MessengerEngine::new(me, cfg);
    let mut identity = vec![b'M'];
    identity.extend_from_slice(&me);
    let mut listeners: Vec<(zmq::Socket, HandlerFn)> = Vec::new();
    let mut dealers: Vec<(String, zmq::Socket)> = Vec::new();
    let mut callbacks: HashMap<u64, ReplyFn> = HashMap::new();
    let mut next_cb: u64 = 1;
    loop {
        // Commands first, so a send enqueued before a stop still goes out.
        let now = Instant::now();
        while let Ok(cmd) = rx.try_recv() {
            match cmd {
                Command::Stop => return Ok(()),
                Command::Send {
                    dest,
                    body,
                    on_reply,
                } => {
                    if on_reply.is_some() && callbacks.len() >= max_callbacks {
                        // Peers that acknowledge but never answer would otherwise grow this map forever.
                        engine.stats.pending_refused += 1;
                        continue;
                    }
                    let from_cb = match on_reply {
                        Some(f) => {
                            let id = next_cb;
                            next_cb += 1;
                            callbacks.insert(id, f);
                            id
                        }
                        None => 0,
                    };
                    if !dealers.iter().any(|(ep, _)| *ep == dest) {
                        let s = ctx.socket(zmq::DEALER)?;
                        s.set_linger(0)?;
                        s.set_identity(&identity)?;
                        s.connect(&dest)?;
                        dealers.push((dest.clone(), s));
                    }
                    engine.send(now, Route::Dest(dest), 0, from_cb, body);
                }
                Command::Listen {
                    endpoint,
                    handler,
                    bound,
                } => {
                    let r = (|| {
                        let s = ctx.socket(zmq::ROUTER)?;
                        s.set_linger(0)?;
                        s.set_router_handover(true)?;
                        s.bind(&endpoint)?;
                        let ep = last_endpoint(&s)?;
                        Ok::<_, zmq::Error>((s, ep))
                    })();
                    match r {
                        Ok((s, ep)) => {
                            listeners.push((s, handler));
                            let _ = bound.send(Ok(ep));
                        }
                        Err(source) => {
                            let _ = bound.send(Err(MessengerError::Listen { endpoint, source }));
                        }
                    }
                }
            }
        }
        engine.handle_timeout(Instant::now());
        // Run actions until quiet: deliveries can produce replies, which produce transmits.
        while let Some(a) = engine.poll_output() {
            match a {
                MsgAction::Transmit { route, frames } => {
                    if drop_p > 0.0 && rng.gen_bool(drop_p.min(1.0)) {
                        continue;
                    }
                    let copies = if dup_p > 0.0 && rng.gen_bool(dup_p.min(1.0)) {
                        2
                    } else {
                        1
                    };
                    for _ in 0..copies {
                        match &route {
                            Route::Dest(ep) => {
                                if let Some((_, s)) = dealers.iter().find(|(e, _)| e == ep) {
                                    // A full pipe to a dead peer must not block the one I/O thread: retry later.
                                    let _ = s.send_multipart(frames.iter(), zmq::DONTWAIT);
                                }
                            }
                            Route::Peer { listener, identity } => {
                                if let Some((s, _)) = listeners.get(*listener) {
                                    let _ = s.send_multipart(
                                        std::iter::once(identity.as_slice())
                                            .chain(frames.iter().map(Vec::as_slice)),
                                        zmq::DONTWAIT,
                                    );
                                }
                            }
                        }
                    }
                }
                MsgAction::Deliver {
                    route,
                    callback,
                    reply_callback,
                    body,
                } => {
                    shared.handled.fetch_add(1, Ordering::Relaxed);
                    if callback == 0 {
                        let Route::Peer { listener, .. } = &route else {
                            continue;
                        };
                        let Some((_, handler)) = listeners.get_mut(*listener) else {
                            continue;
                        };
                        if let Some(reply) = handler(&body) {
                            if reply_callback != 0 {
                                engine.send(Instant::now(), route, reply_callback, 0, reply);
                            }
                        }
                    } else if let Some(cb) = callbacks.remove(&callback) {
                        cb(body);
                    }
                }
                MsgAction::GaveUp { callback, .. } => {
                    callbacks.remove(&callback);
                }
            }
        }
        shared
            .pending
            .store(engine.pending() as u64, Ordering::Relaxed);
        shared
            .duplicates
            .store(engine.stats.duplicates, Ordering::Relaxed);
        shared
            .retries
            .store(engine.stats.retries, Ordering::Relaxed);
        if let Ok(mut s) = shared.snapshot.lock() {
            s.clone_from(&engine.stats);
        }

        let now = Instant::now();
        let timeout = engine
            .poll_timeout()
            .map_or(Duration::from_millis(100), |d| {
                d.saturating_duration_since(now)
            })
            .min(Duration::from_millis(100));
        let mut items = Vec::with_capacity(1 + listeners.len() + dealers.len());
        items.push(wake.as_poll_item(zmq::POLLIN));
        items.extend(listeners.iter().map(|(s, _)| s.as_poll_item(zmq::POLLIN)));
        items.extend(dealers.iter().map(|(_, s)| s.as_poll_item(zmq::POLLIN)));
        zmq::poll(&mut items, poll_ms(timeout))?;
        let ready: Vec<bool> = items.iter().map(|i| i.is_readable()).collect();
        drop(items);
        if ready[0] {
            while wake.recv_bytes(zmq::DONTWAIT).is_ok() {}
        }
        for (i, (s, _)) in listeners.iter().enumerate() {
            if !ready[1 + i] {
                continue;
            }
            // Each socket gives a pass its share only ([`PassBudget`]): what the engine owes for what it took
            // goes out, and its timers run, before it takes more.
            let mut budget = PassBudget::per_socket();
            while budget.has_room() {
                let Ok(mut frames) = s.recv_multipart(zmq::DONTWAIT) else {
                    break;
                };
                budget.take_frames(&frames);
                if frames.is_empty() {
                    continue;
                }
                let identity = frames.remove(0);
                engine.handle_input(
                    Route::Peer {
                        listener: i,
                        identity,
                    },
                    frames,
                );
            }
        }
        for (i, (ep, s)) in dealers.iter().enumerate() {
            if !ready[1 + listeners.len() + i] {
                continue;
            }
            let mut budget = PassBudget::per_socket();
            while budget.has_room() {
                let Ok(frames) = s.recv_multipart(zmq::DONTWAIT) else {
                    break;
                };
                budget.take_frames(&frames);
                engine.handle_input(Route::Dest(ep.clone()), frames);
            }
        }
    }
}
