//! The Majordomo worker API: [`MdpWorker`], the thin socket layer over the sans-IO
//! [`WorkerEngine`].

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::engine::worker::{WorkerAction, WorkerEngine};
use crate::proto::{Frames, Version};
use crate::MdpError;
use tickbox_zmqx::socket::poll_ms_until;

pub use crate::engine::worker::{DedupeCache, MdpWorkerConfig, Request};

/// A Majordomo worker bound to one service on one broker.
pub struct MdpWorker {
    ctx: zmq::Context,
    endpoint: String,
    socket: Option<zmq::Socket>,
    engine: WorkerEngine,
    reconnect_at: Option<Instant>,
    pending: VecDeque<Request>,
    dedupe: Option<DedupeCache>,
    security: tickbox_auth::Security,
}

impl MdpWorker {
    /// Connect to the broker at `endpoint` and register `service`.
    pub fn connect(
        ctx: &zmq::Context,
        endpoint: &str,
        service: &str,
        cfg: MdpWorkerConfig,
    ) -> Result<Self, MdpError> {
        if service.as_bytes().starts_with(crate::proto::MMI_PREFIX) {
            return Err(MdpError::Invalid(
                "mmi.* services are reserved for the broker",
            ));
        }
        let now = Instant::now();
        let security = cfg.security.clone();
        let mut w = Self {
            ctx: ctx.clone(),
            endpoint: endpoint.to_string(),
            socket: None,
            engine: WorkerEngine::new(&cfg, service.as_bytes(), now),
            reconnect_at: Some(now),
            pending: VecDeque::new(),
            dedupe: None,
            security,
        };
        w.open_if_due(now)?;
        Ok(w)
    }

    /// Opt in to exactly-once execution of requests Titanic re-sends (`redispatch = "after_timeout"`):
    /// [`MdpWorker::serve`] remembers the reply of every request carrying a Titanic request id
    /// ([`Request::titanic_id`]) and answers a later request with the same id from memory instead of running
    /// the handler again. At most `max_entries` replies and `max_bytes` bytes are kept (oldest dropped first),
    /// in this worker's memory only: a duplicate that reaches another worker, or arrives after this worker
    /// restarted or evicted the entry, runs again.
    pub fn dedupe(&mut self, max_entries: usize, max_bytes: usize) {
        self.dedupe = Some(DedupeCache::new(max_entries, max_bytes));
    }

    /// The dedupe cache, if [`MdpWorker::dedupe`] enabled it (for its counters).
    pub fn dedupe_cache(&self) -> Option<&DedupeCache> {
        self.dedupe.as_ref()
    }

    /// Reconnections so far (after broker loss or DISCONNECT).
    pub fn reconnects(&self) -> u64 {
        self.engine.reconnects
    }

    fn open_if_due(&mut self, now: Instant) -> Result<(), MdpError> {
        match self.reconnect_at {
            Some(at) if at <= now => {}
            _ => return Ok(()),
        }
        self.reconnect_at = None;
        let s = self.ctx.socket(zmq::DEALER)?;
        // Linger 0 by design: a reconnect discards the dead conversation, and READY must queue before the
        // connection is up, so the teardown rule (a linger of seconds) would hold a dead broker's worker that long.
        // The residual clean_pipes race (a broker stalled mid-reply hanging up at the close) is in
        // docs/book/src/libzmq-traps.md.
        s.set_linger(0)?;
        self.security.client(&s, "broker")?;
        s.connect(&self.endpoint)?;
        self.socket = Some(s);
        self.engine.connected(now);
        self.flush()
    }

    fn flush(&mut self) -> Result<(), MdpError> {
        while let Some(action) = self.engine.poll_output() {
            match action {
                WorkerAction::Send(frames) => {
                    if let Some(s) = &self.socket {
                        s.send_multipart(frames, 0)?;
                    }
                }
                WorkerAction::Reconnect { after } => {
                    // Dropping the socket (linger 0) discards anything queued for the dead conversation.
                    self.socket = None;
                    self.reconnect_at = Some(Instant::now() + after);
                }
                WorkerAction::Deliver(req) => self.pending.push_back(req),
            }
        }
        Ok(())
    }

    /// Wait up to `timeout` for the next request, keeping the broker conversation alive meanwhile.
    pub fn recv(&mut self, timeout: Duration) -> Result<Option<Request>, MdpError> {
        let end = Instant::now() + timeout;
        loop {
            if let Some(r) = self.pending.pop_front() {
                return Ok(Some(r));
            }
            let now = Instant::now();
            self.open_if_due(now)?;
            if now >= end {
                return Ok(None);
            }
            let mut wake = self.engine.poll_timeout().map_or(end, |d| end.min(d));
            if let Some(at) = self.reconnect_at {
                wake = wake.min(at);
            }
            let wait = poll_ms_until(wake, now);
            // A signal interrupting the poll is a wake-up (the caller checks its stop flag), not a failure.
            let readable = |s: &zmq::Socket| match s.poll(zmq::POLLIN, wait) {
                Err(zmq::Error::EINTR) => Ok(false),
                other => other.map(|n| n > 0),
            };
            match &self.socket {
                Some(s) if readable(s)? => loop {
                    match s.recv_multipart(zmq::DONTWAIT) {
                        Ok(frames) => self.engine.handle_input(Instant::now(), frames),
                        Err(zmq::Error::EAGAIN | zmq::Error::EINTR) => break,
                        Err(e) => return Err(e.into()),
                    }
                },
                Some(_) => {}
                None => std::thread::sleep(Duration::from_millis(wait.max(0) as u64)),
            }
            self.engine.handle_timeout(Instant::now());
            self.flush()?;
        }
    }

    /// Send the reply to `req`. If the conversation was lost meanwhile the reply is dropped (the client retries).
    pub fn reply(&mut self, req: Request, body: Frames) -> Result<(), MdpError> {
        self.send_reply(req.client, body, false)
    }

    /// Send a partial reply (18/MDP 0.2 only; with 0.1 it would end the request, so it is refused).
    pub fn partial(&mut self, req: &Request, body: Frames) -> Result<(), MdpError> {
        if self.engine.version() != Version::V02 {
            return Err(MdpError::Invalid("partial replies need MDP 0.2"));
        }
        self.send_reply(req.client.clone(), body, true)
    }

    fn send_reply(&mut self, client: Vec<u8>, body: Frames, partial: bool) -> Result<(), MdpError> {
        if body.is_empty() {
            return Err(MdpError::Invalid("a reply needs at least one body frame"));
        }
        let frames = self.engine.reply(Instant::now(), client, body, partial);
        if let Some(s) = &self.socket {
            s.send_multipart(frames, 0)?;
        }
        Ok(())
    }

    /// Serve requests with `handler` until `stop` is set.
    pub fn serve(
        &mut self,
        stop: &AtomicBool,
        mut handler: impl FnMut(&Frames) -> Frames,
    ) -> Result<(), MdpError> {
        while !stop.load(Ordering::Relaxed) {
            if let Some(req) = self.recv(Duration::from_millis(100))? {
                let id = self
                    .dedupe
                    .as_ref()
                    .and(req.titanic_id())
                    .map(<[u8]>::to_vec);
                let cached = match (&id, self.dedupe.as_mut()) {
                    (Some(id), Some(cache)) => cache.get(id),
                    _ => None,
                };
                let reply = match cached {
                    Some(r) => {
                        tracing::debug!("re-sent titanic request answered from the dedupe cache");
                        r
                    }
                    None => {
                        let reply = handler(&req.body);
                        let reply = if reply.is_empty() {
                            vec![Vec::new()]
                        } else {
                            reply
                        };
                        if let (Some(id), Some(cache)) = (&id, self.dedupe.as_mut()) {
                            cache.insert(id, &reply);
                        }
                        reply
                    }
                };
                self.reply(req, reply)?;
            }
        }
        Ok(())
    }

    /// Leave without a DISCONNECT, as a crashed worker would (for fault tests and abrupt shutdown).
    pub fn abandon(mut self) {
        self.socket = None;
    }
}

impl Drop for MdpWorker {
    fn drop(&mut self) {
        if let Some(s) = self.socket.take() {
            let frames = self.engine.disconnect();
            let _ = s.send_multipart(frames, zmq::DONTWAIT);
        }
    }
}
