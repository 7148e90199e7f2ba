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

use tickbox_reliable::ms;
use tickbox_zmqx::socket::poll_ms;

pub use crate::engine::freelance::{
    server_reply, AgentAction, AgentConfig, Frames, FreelanceAgent, RequestRefused, ServerDrop,
};

/// Errors of the Freelance server loop and client.
#[derive(Debug, thiserror::Error)]
pub enum FreelanceError {
    /// A socket call failed.
    #[error("zmq: {0}")]
    Zmq(#[from] zmq::Error),
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
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ServerStats {
    /// PINGs answered with PONG.
    pub pings: u64,
    /// Requests answered.
    pub requests: u64,
    /// Messages dropped as neither a PING nor `[CCF][body…]`.
    pub malformed: u64,
}

/// Bind a ROUTER at `bind` with routing identity `public` (the exact string clients connect to) and serve until
/// `stop`. `handler` maps a request body to a reply body.
pub fn run_freelance_server(
    ctx: &zmq::Context,
    bind: &str,
    public: &str,
    stop: &AtomicBool,
    mut handler: impl FnMut(&[Vec<u8>]) -> Frames,
) -> Result<ServerStats, FreelanceError> {
    if public.is_empty() || public.contains('*') {
        return Err(FreelanceError::Invalid(
            "the public endpoint must be concrete (it is the server identity)",
        ));
    }
    let s = ctx.socket(zmq::ROUTER)?;
    s.set_linger(100)?;
    s.set_identity(public.as_bytes())?;
    s.bind(bind)?;
    tracing::info!(bind, public, "freelance server listening");
    let mut stats = ServerStats::default();
    while !stop.load(Ordering::Relaxed) {
        // A signal interrupting the poll is a wake-up to check `stop`, not a failure.
        match s.poll(zmq::POLLIN, 100) {
            Ok(0) | Err(zmq::Error::EINTR) => continue,
            other => other?,
        };
        while let Ok(mut frames) = s.recv_multipart(zmq::DONTWAIT) {
            if frames.len() < 2 {
                stats.malformed += 1;
                continue;
            }
            let rest = frames.split_off(1);
            let ping = rest.len() == 1;
            match server_reply(rest, &mut handler) {
                Ok(reply) => {
                    if ping {
                        stats.pings += 1;
                    } else {
                        stats.requests += 1;
                    }
                    frames.extend(reply);
                    s.send_multipart(frames, 0)?;
                }
                Err(ServerDrop::Malformed) => stats.malformed += 1,
            }
        }
    }
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
    let mut agent = FreelanceAgent::new(cfg);
    loop {
        let now = Instant::now();
        let timeout = agent
            .next_deadline()
            .saturating_duration_since(now)
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
            while let Ok(frames) = router.recv_multipart(zmq::DONTWAIT) {
                agent.on_message(Instant::now(), frames);
            }
        }
        agent.tick(Instant::now());
        while let Some(a) = agent.poll_action() {
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
