//! The Paranoid Pirate (6/PPP) socket layers: [`run_ppp_queue`] (front-end and back-end ROUTERs) and
//! [`PppWorker`] (a DEALER, new identity on every reconnect), thin loops around the engines in
//! [`crate::engine::ppp`].

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use tickbox_reliable::ms;
use tickbox_zmqx::socket::{last_endpoint, poll_ms, PassBudget, WarnGate};

use crate::engine::ppp::{
    PppConfig, PppQueue, PppQueueStats, PppWorkerAction, PppWorkerEngine, QueueOut, PPP_READY,
};
use crate::{Frames, PirateError};

/// Run a Paranoid Pirate queue: front-end ROUTER for clients, back-end ROUTER for workers, until `stop`.
/// `bound` receives the resolved `(frontend, backend)` endpoints.
/// Both ROUTERs come from `gate` (CURVE and ZAP when `[security]` asks; roles `queue.frontend` and
/// `queue.backend`).
pub fn run_ppp_queue(
    gate: &tickbox_auth::Gate,
    frontend: &str,
    backend: &str,
    cfg: PppConfig,
    stop: &AtomicBool,
    bound: Option<std::sync::mpsc::Sender<(String, String)>>,
) -> Result<PppQueueStats, PirateError> {
    gate.check_serves(&cfg.security)?;
    let mut fe = gate.socket(zmq::ROUTER, "queue.frontend")?;
    let mut be = gate.socket(zmq::ROUTER, "queue.backend")?;
    let max_message = i64::try_from(cfg.max_message_bytes).unwrap_or(i64::MAX);
    for s in [&mut fe, &mut be] {
        // Requests and replies are multipart: ZMQ_TCP_MAXRT and a linger longer than it (docs/book/src/libzmq-traps.md).
        tickbox_zmqx::prepare_multipart_sender(
            s,
            cfg.stalled_peer_timeout
                .0
                .max(std::time::Duration::from_millis(1)),
        )?;
        s.set_maxmsgsize(max_message)?;
    }
    fe.bind(frontend)?;
    be.bind(backend)?;
    if let Some(tx) = bound {
        let f = last_endpoint(&fe)?;
        let b = last_endpoint(&be)?;
        let _ = tx.send((f, b));
    }
    let security = cfg.security.clone();
    let mut refusals = RefusalLog::default();
    let live = cfg.live.clone();
    let mut q = PppQueue::new(cfg, Instant::now());
    while !stop.load(Ordering::Relaxed) {
        let now = Instant::now();
        let timeout = poll_ms(
            q.poll_timeout()
                .map_or(ms(100), |d| d.saturating_duration_since(now))
                .min(ms(100)),
        );
        let mut items = [fe.as_poll_item(zmq::POLLIN), be.as_poll_item(zmq::POLLIN)];
        zmq::poll(&mut items, timeout)?;
        let (fe_ready, be_ready) = (items[0].is_readable(), items[1].is_readable());
        // Each socket gives a pass its share only, so a flood on one side cannot hold up the other side, the
        // heartbeats and the expiries below, nor pile up what the pass owes in memory ([`PassBudget`]).
        if be_ready {
            let mut budget = PassBudget::per_socket();
            while budget.has_room() {
                let Ok((frames, user)) = tickbox_auth::recv_with_user(&be, zmq::DONTWAIT) else {
                    break;
                };
                budget.take_frames(&frames);
                // Who may be a worker is a grant of its own (`[security.services.queue] serve`): a client's key
                // on the back-end would otherwise be handed other clients' requests. A key that has left the
                // allow directory is refused from its next message on.
                let user = user.as_deref();
                let listed = security.is_listed("queue.backend", user);
                if !listed
                    || !security
                        .grants()
                        .may_serve(user, QUEUE_SERVICE)
                        .is_granted()
                {
                    if frames.get(1).map(Vec::as_slice) == Some(&[PPP_READY][..]) {
                        if listed {
                            security.stats().record_worker_refused();
                        } else {
                            security.stats().record_revoked();
                        }
                        refusals.refused("worker", user);
                    }
                    continue;
                }
                q.handle_backend(Instant::now(), frames);
            }
            // Replies go to their clients, and the workers they freed get their next requests, before the
            // front-end's share is read: under a flood of requests that share takes a millisecond or two.
            send_owed(&mut q, &fe, &be)?;
        }
        if fe_ready {
            let mut budget = PassBudget::per_socket();
            while budget.has_room() {
                let Ok((frames, user)) = tickbox_auth::recv_with_user(&fe, zmq::DONTWAIT) else {
                    break;
                };
                budget.take_frames(&frames);
                let user = user.as_deref();
                if !security.is_listed("queue.frontend", user) {
                    security.stats().record_revoked();
                    refusals.refused("request", user);
                    continue;
                }
                if !security.grants().may_call(user, QUEUE_SERVICE).is_granted() {
                    security.stats().record_unauthorised();
                    refusals.refused("request", user);
                    continue;
                }
                q.handle_frontend(Instant::now(), frames);
            }
        }
        q.handle_timeout(Instant::now());
        send_owed(&mut q, &fe, &be)?;
        live.publish(Instant::now(), q.stats());
    }
    live.publish_now(q.stats());
    Ok(q.stats().clone())
}

/// Sends what the queue owes its clients and workers.
fn send_owed(q: &mut PppQueue, fe: &zmq::Socket, be: &zmq::Socket) -> Result<(), PirateError> {
    while let Some(out) = q.poll_output() {
        match out {
            QueueOut::Frontend(f) => fe.send_multipart(f, 0)?,
            QueueOut::Backend(f) => be.send_multipart(f, 0)?,
        }
    }
    Ok(())
}

/// The service name a queue's grants use (`[security.services.queue]`): `call` for its clients, `serve` for its
/// workers. A queue serves one anonymous service, so it has one name.
pub const QUEUE_SERVICE: &str = "queue";

/// Refusals are logged at most once a second, with how many since the last line: any listed key can send them.
#[derive(Default)]
struct RefusalLog(WarnGate);

impl RefusalLog {
    fn refused(&mut self, what: &str, user: Option<&str>) {
        if let Some(suppressed) = self.0.allow(Instant::now()) {
            tracing::warn!(
                user = user.unwrap_or("(unauthenticated)"),
                suppressed,
                "queue: refused a {what}: the key is not granted `{QUEUE_SERVICE}` (or has left the allow directory)"
            );
        }
    }
}

/// A Paranoid Pirate worker over a DEALER; a new socket (new identity) on every reconnect.
pub struct PppWorker {
    ctx: zmq::Context,
    endpoint: String,
    socket: Option<zmq::Socket>,
    engine: PppWorkerEngine,
    reconnect_at: Option<Instant>,
    security: tickbox_auth::Security,
}

impl PppWorker {
    /// Connects a DEALER to the queue's back-end at `endpoint` and sends READY.
    pub fn connect(
        ctx: &zmq::Context,
        endpoint: &str,
        cfg: PppConfig,
    ) -> Result<Self, PirateError> {
        let now = Instant::now();
        let mut w = Self {
            ctx: ctx.clone(),
            endpoint: endpoint.to_string(),
            socket: None,
            engine: PppWorkerEngine::new(&cfg, now),
            reconnect_at: Some(now),
            security: cfg.security.clone(),
        };
        w.step(now, None)?;
        Ok(w)
    }

    /// Times the queue was presumed dead and the socket reopened.
    pub fn reconnects(&self) -> u64 {
        self.engine.reconnects
    }

    fn step(
        &mut self,
        now: Instant,
        deliver: Option<&mut VecDeque<(Frames, Frames)>>,
    ) -> Result<(), PirateError> {
        if self.reconnect_at.is_some_and(|at| at <= now) {
            self.reconnect_at = None;
            let s = self.ctx.socket(zmq::DEALER)?;
            // Linger 0 by design, as the MDP worker's (docs/book/src/libzmq-traps.md, "What remains").
            s.set_linger(0)?;
            self.security.client(&s, "queue.backend")?;
            s.connect(&self.endpoint)?;
            self.socket = Some(s);
            self.engine.connected(now);
        }
        let mut sink = deliver;
        while let Some(a) = self.engine.poll_output() {
            match a {
                PppWorkerAction::Send(f) => {
                    if let Some(s) = &self.socket {
                        s.send_multipart(f, 0)?;
                    }
                }
                PppWorkerAction::Reconnect { after } => {
                    self.socket = None;
                    self.reconnect_at = Some(now + after);
                }
                PppWorkerAction::Deliver { envelope, body } => {
                    if let Some(q) = sink.as_deref_mut() {
                        q.push_back((envelope, body));
                    }
                }
            }
        }
        Ok(())
    }

    /// Serve until `stop`: `handler` maps a request body to a reply body.
    pub fn serve(
        &mut self,
        stop: &AtomicBool,
        mut handler: impl FnMut(&Frames) -> Frames,
    ) -> Result<(), PirateError> {
        let mut inbox = VecDeque::new();
        while !stop.load(Ordering::Relaxed) {
            while let Some((envelope, body)) = inbox.pop_front() {
                let reply = handler(&body);
                let frames = self.engine.reply(Instant::now(), envelope, reply);
                if let Some(s) = &self.socket {
                    s.send_multipart(frames, 0)?;
                }
            }
            let now = Instant::now();
            let mut wake = self
                .engine
                .poll_timeout()
                .map_or(now + ms(100), |d| d.min(now + ms(100)));
            if let Some(at) = self.reconnect_at {
                wake = wake.min(at);
            }
            let wait = wake.saturating_duration_since(now);
            match &self.socket {
                Some(s) => {
                    if s.poll(zmq::POLLIN, poll_ms(wait))? > 0 {
                        let mut budget = PassBudget::per_socket();
                        while budget.has_room() {
                            let Ok(f) = s.recv_multipart(zmq::DONTWAIT) else {
                                break;
                            };
                            budget.take_frames(&f);
                            self.engine.handle_input(Instant::now(), f);
                        }
                    }
                }
                None => std::thread::sleep(wait),
            }
            let now = Instant::now();
            self.engine.handle_timeout(now);
            self.step(now, Some(&mut inbox))?;
        }
        Ok(())
    }
}
