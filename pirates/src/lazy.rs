//! The Lazy Pirate client (Guide ch. 4): a REQ socket that survives a dead or restarted server by polling with
//! a timeout, closing and reopening the socket, resending, and giving up after N tries. It is all socket
//! handling, so it has no separate engine.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use serde::{Deserialize, Serialize};
use tickbox_reliable::ms;
use tickbox_units::HumanDuration;
use tickbox_zmqx::socket::poll_ms;

use crate::{Frames, PirateError};

/// Lazy Pirate settings (reference: 2.5 s, 3 attempts).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LazyPirateConfig {
    /// How long one attempt waits for the reply before the socket is reopened and the request resent.
    pub timeout: HumanDuration,
    /// Total attempts per request (at least 1; 1 = no retry).
    pub attempts: u32,
    /// `[security]`: the REQ connects as a client of role `lazy` (CURVE with the server's key when configured).
    #[serde(skip)]
    pub security: tickbox_auth::Security,
}

impl Default for LazyPirateConfig {
    fn default() -> Self {
        Self {
            timeout: HumanDuration(ms(2500)),
            attempts: 3,
            security: tickbox_auth::Security::default(),
        }
    }
}

/// A REQ client that survives a dead or restarted server: on timeout it closes the socket (linger 0, so the
/// stale request is discarded), opens a new one and resends, up to `attempts` times.
pub struct LazyPirate {
    ctx: zmq::Context,
    endpoint: String,
    cfg: LazyPirateConfig,
    socket: Option<zmq::Socket>,
    /// Number of times the socket was recreated after a timeout.
    pub resends: u64,
}

impl LazyPirate {
    /// A client for `endpoint`; the socket is opened on the first request.
    pub fn new(ctx: &zmq::Context, endpoint: &str, cfg: LazyPirateConfig) -> Self {
        Self {
            ctx: ctx.clone(),
            endpoint: endpoint.to_string(),
            cfg,
            socket: None,
            resends: 0,
        }
    }

    fn socket(&mut self) -> Result<&zmq::Socket, PirateError> {
        if self.socket.is_none() {
            let s = self.ctx.socket(zmq::REQ)?;
            // Linger 0 is the pattern: closing discards the unanswered request. A long linger would block on a
            // dead server for ever (no connection, so ZMQ_TCP_MAXRT never fires); the residual clean_pipes race
            // is in docs/book/src/libzmq-traps.md ("What remains").
            s.set_linger(0)?;
            self.cfg.security.client(&s, "lazy")?;
            s.connect(&self.endpoint)?;
            self.socket = Some(s);
        }
        Ok(self.socket.as_ref().expect("socket just created"))
    }

    /// Send `request` and wait for its reply, retrying as configured.
    pub fn request(&mut self, request: &[Vec<u8>]) -> Result<Frames, PirateError> {
        self.request_until(request, None)
    }

    /// Like [`LazyPirate::request`], abandoning early (with `Interrupted`) when `stop` is set.
    pub fn request_until(
        &mut self,
        request: &[Vec<u8>],
        stop: Option<&AtomicBool>,
    ) -> Result<Frames, PirateError> {
        if request.is_empty() {
            return Err(PirateError::EmptyRequest);
        }
        let attempts = self.cfg.attempts.max(1);
        for attempt in 1..=attempts {
            let timeout = self.cfg.timeout.0;
            let s = self.socket()?;
            s.send_multipart(request.iter(), 0)?;
            let end = Instant::now() + timeout;
            loop {
                let left = end.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    break;
                }
                let s = self.socket.as_ref().expect("socket open");
                if s.poll(zmq::POLLIN, poll_ms(left.min(ms(100))))? > 0 {
                    return Ok(s.recv_multipart(0)?);
                }
                if stop.is_some_and(|f| f.load(Ordering::Relaxed)) {
                    self.socket = None;
                    return Err(PirateError::Interrupted);
                }
            }
            // REQ is now stuck in "expecting reply": the only way out is a new socket.
            self.socket = None;
            if attempt < attempts {
                self.resends += 1;
                tracing::debug!(attempt, endpoint = %self.endpoint, "no reply, reconnecting and resending");
            }
        }
        Err(PirateError::Exhausted(attempts))
    }
}
