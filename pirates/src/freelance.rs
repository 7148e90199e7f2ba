//! Freelance (10/FLP): brokerless request-reply over ROUTER↔ROUTER — the socket layers.
//!
//! * Server: identity = its public endpoint, `["PING"]` → `["PONG"]`, `[CCF][body…]` → `[CCF][reply…]`
//!   ([`server_reply`] is the pure rule, [`run_freelance_server`] the socket loop).
//! * Client: [`FreelanceAgent`] is the sans-IO agent (in [`crate::engine::freelance`]); [`FreelanceClient`] runs
//!   it in a background thread that talks to the caller over an `inproc` PAIR pipe, so one `zmq::poll` serves
//!   the pipe and the network.

use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use tickbox_reliable::ms;
use tickbox_units::{ByteSize, HumanDuration};
use tickbox_zmqx::socket::{poll_ms, send_multipart_now, PassBudget};

pub use crate::engine::freelance::{
    server_reply, AgentAction, AgentConfig, Frames, FreelanceAgent, RequestRefused, ServerDrop,
};

/// Errors of the Freelance server loop and client.
#[derive(Debug, thiserror::Error)]
pub enum FreelanceError {
    /// A socket call failed.
    #[error("zmq: {0}")]
    Zmq(#[from] zmq::Error),
    /// `[security]` could not be applied to a socket.
    #[error(transparent)]
    Auth(#[from] tickbox_auth::AuthError),
    /// No live server answered within [`AgentConfig::request_timeout`].
    #[error("no live server answered within the request timeout")]
    Failed,
    /// A caller error: an empty request body, or a server identity that is not a concrete endpoint.
    #[error("invalid argument: {0}")]
    Invalid(&'static str),
    /// The agent thread could not be started, has exited, or did not answer a second after the request timeout.
    #[error("the client agent thread is gone")]
    AgentGone,
}

impl From<RequestRefused> for FreelanceError {
    fn from(r: RequestRefused) -> Self {
        match r {
            RequestRefused::Busy => FreelanceError::Invalid("a request is already pending"),
            RequestRefused::EmptyBody => {
                FreelanceError::Invalid("a request needs at least one body frame")
            }
        }
    }
}

/// Counters of a Freelance server.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct ServerStats {
    /// PINGs answered with PONG.
    pub pings: u64,
    /// Requests answered (handed to the socket; a reply dropped afterwards is counted below as well).
    pub requests: u64,
    /// Messages dropped as neither a PING nor `[CCF][body…]`.
    pub malformed: u64,
    /// Requests (or replies) above `max_message_size` in total, dropped unanswered. Single frames above it never
    /// get this far: libzmq drops the connection that sends one.
    pub oversize: u64,
    /// Replies dropped because the peer's outgoing queue was full (it does not read its replies).
    pub dropped_full: u64,
    /// Replies dropped because the peer had disconnected.
    pub dropped_unroutable: u64,
}

/// Freelance server limits. Memory held for one peer that sends requests and never reads its replies is at most
/// about `queued_replies() × max_message_size` (plus one reply being written and the kernel's socket buffer);
/// requests are read and answered (or refused) as they come, so the inbound side holds at most a few.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct FreelanceServerConfig {
    /// Largest request or reply, all frames together. Also set as `ZMQ_MAXMSGSIZE` on the peer-facing socket,
    /// where libzmq applies it per frame and disconnects a peer that sends a bigger frame.
    pub max_message_size: ByteSize,
    /// Replies queued for one peer, at most (the socket's send high-water mark).
    pub max_queued_replies: u32,
    /// Bytes of replies queued for one peer, at most: the send high-water mark is lowered to
    /// `max_queued_bytes / max_message_size` (at least 1) when that is below `max_queued_replies`. Replies beyond
    /// it are dropped and counted in [`ServerStats::dropped_full`].
    pub max_queued_bytes: ByteSize,
    /// The peer-facing ROUTER sends multipart messages; it closes with a linger of twice this plus 1 s and
    /// `ZMQ_TCP_MAXRT` set to this (the teardown rule of docs/book/src/libzmq-traps.md), so a stop can never hit the ZeroMQ library's `clean_pipes`
    /// abort (a peer stalled mid-message hanging up as the socket closes). The price: a peer that acknowledges no
    /// TCP data for this long is disconnected, and a stop with a stalled peer waits up to about this long.
    /// At least 1 ms is used.
    pub stalled_peer_timeout: HumanDuration,
    /// `[security]`, shared by the binary: the ROUTER is a CURVE server of role `freelance`.
    #[serde(skip)]
    pub security: tickbox_auth::Security,
    /// Where the server's loop leaves a copy of its counters for `freelance-server --metrics` (default: nowhere).
    #[serde(skip)]
    pub live: tickbox_metrics::Published<ServerStats>,
}

impl Default for FreelanceServerConfig {
    fn default() -> Self {
        Self {
            max_message_size: ByteSize(1 << 20),
            max_queued_replies: 1000,
            max_queued_bytes: ByteSize(16 << 20),
            stalled_peer_timeout: HumanDuration(tickbox_zmqx::DEFAULT_STALLED_PEER_TIMEOUT),
            security: tickbox_auth::Security::default(),
            live: Default::default(),
        }
    }
}

impl FreelanceServerConfig {
    /// The per-peer queue length in replies that keeps both bounds: the send (and receive) high-water mark.
    pub fn queued_replies(&self) -> i32 {
        let by_bytes = self.max_queued_bytes.0 / self.max_message_size.0.max(1);
        by_bytes
            .min(u64::from(self.max_queued_replies))
            .clamp(1, i32::MAX as u64) as i32
    }
}

fn frames_bytes(frames: &[Vec<u8>]) -> u64 {
    frames.iter().map(|f| f.len() as u64).sum()
}

/// Bind a ROUTER at `bind` with routing identity `public` (the exact string clients connect to) and serve until
/// `stop`, with the default [`FreelanceServerConfig`]. `handler` maps a request body to a reply body.
pub fn run_freelance_server(
    gate: &tickbox_auth::Gate,
    bind: &str,
    public: &str,
    stop: &AtomicBool,
    handler: impl FnMut(&[Vec<u8>]) -> Frames,
) -> Result<ServerStats, FreelanceError> {
    run_freelance_server_with(
        gate,
        bind,
        public,
        stop,
        &FreelanceServerConfig::default(),
        handler,
    )
}

/// [`run_freelance_server`] with explicit limits.
pub fn run_freelance_server_with(
    gate: &tickbox_auth::Gate,
    bind: &str,
    public: &str,
    stop: &AtomicBool,
    cfg: &FreelanceServerConfig,
    mut handler: impl FnMut(&[Vec<u8>]) -> Frames,
) -> Result<ServerStats, FreelanceError> {
    if public.is_empty() || public.contains('*') {
        return Err(FreelanceError::Invalid(
            "the public endpoint must be concrete (it is the server identity)",
        ));
    }
    gate.check_serves(&cfg.security)?;
    // CURVE and ZAP when `[security]` asks (role `freelance`).
    let mut s = gate.socket(zmq::ROUTER, "freelance")?;
    // Replies are multipart: ZMQ_TCP_MAXRT and a linger longer than it (docs/book/src/libzmq-traps.md).
    tickbox_zmqx::prepare_multipart_sender(
        &mut s,
        cfg.stalled_peer_timeout.0.max(Duration::from_millis(1)),
    )?;
    s.set_identity(public.as_bytes())?;
    let max_size = cfg.max_message_size.0.clamp(1, i64::MAX as u64);
    s.set_maxmsgsize(max_size as i64)?;
    let hwm = cfg.queued_replies();
    s.set_sndhwm(hwm)?;
    s.set_rcvhwm(hwm)?;
    // Mandatory routing turns a full peer queue into EAGAIN (with DONTWAIT) instead of a silent drop, so drops are
    // counted; DONTWAIT keeps one slow peer from blocking everyone else. The queue is small (a few replies), so a
    // reply is counted as dropped only once the socket has seen the peer's latest reads (`send_multipart_now`).
    s.set_router_mandatory(true)?;
    s.bind(bind)?;
    tracing::info!(
        bind,
        public,
        queued_replies = hwm,
        max_message_size = max_size,
        "freelance server listening"
    );
    let mut stats = ServerStats::default();
    // Drops are peer-triggered: logged at most every 5 s, with the counts so far.
    let mut warned = (Instant::now(), 0u64);
    while !stop.load(Ordering::Relaxed) {
        cfg.live.publish(Instant::now(), &stats);
        let refused = stats.oversize + stats.dropped_full + stats.dropped_unroutable;
        if refused > warned.1 && warned.0.elapsed() >= Duration::from_secs(5) {
            tracing::warn!(
                oversize = stats.oversize,
                dropped_full = stats.dropped_full,
                dropped_unroutable = stats.dropped_unroutable,
                "freelance server refusing requests or dropping replies"
            );
            warned = (Instant::now(), refused);
        }
        // A signal interrupting the poll is a wake-up to check `stop`, not a failure.
        match s.poll(zmq::POLLIN, 100) {
            Ok(0) | Err(zmq::Error::EINTR) => continue,
            other => other?,
        };
        // A pass takes its share only ([`PassBudget`]), so a flood of requests cannot hold off the stop flag.
        let mut budget = PassBudget::per_socket();
        while budget.has_room() {
            let Ok(mut frames) = s.recv_multipart(zmq::DONTWAIT) else {
                break;
            };
            budget.take_frames(&frames);
            if frames.len() < 2 {
                stats.malformed += 1;
                continue;
            }
            let rest = frames.split_off(1);
            if frames_bytes(&rest) > max_size {
                stats.oversize += 1;
                continue;
            }
            let ping = rest.len() == 1;
            match server_reply(rest, &mut handler) {
                Ok(reply) => {
                    if frames_bytes(&reply) > max_size {
                        stats.oversize += 1;
                        continue;
                    }
                    if ping {
                        stats.pings += 1;
                    } else {
                        stats.requests += 1;
                    }
                    frames.extend(reply);
                    match send_multipart_now(&s, &frames) {
                        Ok(()) => {}
                        Err(zmq::Error::EAGAIN) => stats.dropped_full += 1,
                        Err(zmq::Error::EHOSTUNREACH) => stats.dropped_unroutable += 1,
                        Err(e) => return Err(e.into()),
                    }
                }
                Err(ServerDrop::Malformed) => stats.malformed += 1,
            }
        }
    }
    cfg.live.publish_now(&stats);
    Ok(stats)
}

// ---- client agent thread ----------------------------------------------------------------------------------

/// The caller's side of the Freelance client: commands go down an `inproc` PAIR to the agent thread.
pub struct FreelanceClient {
    pipe: zmq::Socket,
    thread: Option<JoinHandle<Result<(), FreelanceError>>>,
    timeout: Duration,
}

impl FreelanceClient {
    /// Starts the agent thread with no server; add servers with [`FreelanceClient::connect`].
    pub fn new(ctx: &zmq::Context, cfg: AgentConfig) -> Result<Self, FreelanceError> {
        let addr = format!("inproc://freelance-{}", uuid::Uuid::new_v4().simple());
        let pipe = ctx.socket(zmq::PAIR)?;
        pipe.set_linger(0)?;
        pipe.bind(&addr)?;
        let timeout = cfg.request_timeout.0 + ms(1000);
        let c = ctx.clone();
        let thread = std::thread::Builder::new()
            .name("freelance-agent".into())
            .spawn(move || agent_thread(&c, &addr, cfg))
            .map_err(|_| FreelanceError::AgentGone)?;
        Ok(Self {
            pipe,
            thread: Some(thread),
            timeout,
        })
    }

    /// Adds a server; `endpoint` must be the exact string the server uses as its identity.
    pub fn connect(&self, endpoint: &str) -> Result<(), FreelanceError> {
        self.pipe
            .send_multipart([b"CONNECT".as_slice(), endpoint.as_bytes()], 0)?;
        Ok(())
    }

    /// Send `body` to one live server, failing over as needed; `Failed` after the global timeout.
    pub fn request(&self, body: &[Vec<u8>]) -> Result<Frames, FreelanceError> {
        if body.is_empty() {
            return Err(FreelanceError::Invalid(
                "a request needs at least one body frame",
            ));
        }
        let mut m: Vec<&[u8]> = vec![b"REQUEST"];
        m.extend(body.iter().map(Vec::as_slice));
        self.pipe.send_multipart(m, 0)?;
        if self.pipe.poll(zmq::POLLIN, poll_ms(self.timeout))? == 0 {
            return Err(FreelanceError::AgentGone);
        }
        let mut r = self.pipe.recv_multipart(0)?;
        match r.first().map(Vec::as_slice) {
            Some(b"REPLY") => Ok(r.split_off(1)),
            Some(b"FAILED") => Err(FreelanceError::Failed),
            _ => Err(FreelanceError::AgentGone),
        }
    }
}

impl Drop for FreelanceClient {
    fn drop(&mut self) {
        let _ = self.pipe.send("STOP", 0);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn agent_thread(ctx: &zmq::Context, addr: &str, cfg: AgentConfig) -> Result<(), FreelanceError> {
    let pipe = ctx.socket(zmq::PAIR)?;
    pipe.set_linger(0)?;
    pipe.connect(addr)?;
    let router = ctx.socket(zmq::ROUTER)?;
    router.set_linger(0)?;
    cfg.security.client(&router, "freelance")?;
    let mut agent = FreelanceAgent::new(cfg);
    loop {
        let now = Instant::now();
        let timeout = agent
            .poll_timeout()
            .map_or(ms(100), |d| d.saturating_duration_since(now))
            .min(ms(100));
        let timeout = poll_ms(timeout);
        let mut items = [
            pipe.as_poll_item(zmq::POLLIN),
            router.as_poll_item(zmq::POLLIN),
        ];
        zmq::poll(&mut items, timeout)?;
        let (pipe_ready, net_ready) = (items[0].is_readable(), items[1].is_readable());
        if pipe_ready {
            let mut cmd = pipe.recv_multipart(0)?;
            let now = Instant::now();
            match cmd.first().map(Vec::as_slice) {
                Some(b"STOP") => return Ok(()),
                Some(b"CONNECT") if cmd.len() == 2 => {
                    agent.connect(now, &String::from_utf8_lossy(&cmd[1]))
                }
                Some(b"REQUEST") => {
                    if agent.request(now, cmd.split_off(1)).is_err() {
                        pipe.send("FAILED", 0)?;
                    }
                }
                _ => tracing::warn!("freelance agent: unknown pipe command"),
            }
        }
        if net_ready {
            let mut budget = PassBudget::per_socket();
            while budget.has_room() {
                let Ok(frames) = router.recv_multipart(zmq::DONTWAIT) else {
                    break;
                };
                budget.take_frames(&frames);
                agent.handle_input(Instant::now(), frames);
            }
        }
        agent.handle_timeout(Instant::now());
        while let Some(a) = agent.poll_output() {
            match a {
                AgentAction::Connect(ep) => router.connect(&ep)?,
                AgentAction::Send(frames) => router.send_multipart(frames, 0)?,
                AgentAction::Reply(body) => {
                    let mut m = vec![b"REPLY".to_vec()];
                    m.extend(body);
                    pipe.send_multipart(m, 0)?;
                }
                AgentAction::Failed => pipe.send("FAILED", 0)?,
            }
        }
    }
}
