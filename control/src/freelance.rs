//! Freelance (10/FLP): brokerless request-reply over ROUTER↔ROUTER.
//!
//! * Server: identity = its public endpoint, `["PING"]` → `["PONG"]`, `[CCF][body…]` → `[CCF][reply…]`
//!   ([`server_reply`] is the pure rule, [`run_freelance_server`] the socket loop).
//! * Client: [`FreelanceAgent`] is the sans-IO agent (pings, server liveness, one request at a time sent to a
//!   live server, fail-over, global timeout); [`FreelanceClient`] runs it in a background thread that talks to
//!   the caller over an `inproc` PAIR pipe, so one `zmq::poll` serves the pipe and the network.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

pub type Frames = Vec<Vec<u8>>;

#[derive(Debug, thiserror::Error)]
pub enum FreelanceError {
    #[error("zmq: {0}")]
    Zmq(#[from] zmq::Error),
    #[error("no live server answered within the request timeout")]
    Failed,
    #[error("invalid argument: {0}")]
    Invalid(&'static str),
    #[error("the client agent thread is gone")]
    AgentGone,
}

fn ms(v: u64) -> Duration {
    Duration::from_millis(v)
}

// ---- server -------------------------------------------------------------------------------------------------

/// Why the server dropped a message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ServerDrop {
    /// Only a routing frame, or a one-frame message that is not PING.
    Malformed,
}

/// The server rule, without the routing frame: PING → PONG; `[CCF][body…]` → `[CCF][handler(body)…]`.
pub fn server_reply(
    mut frames: Frames,
    handler: &mut dyn FnMut(&[Vec<u8>]) -> Frames,
) -> Result<Frames, ServerDrop> {
    match frames.len() {
        1 if frames[0].as_slice() == b"PING" => Ok(vec![b"PONG".to_vec()]),
        0 | 1 => Err(ServerDrop::Malformed),
        _ => {
            let body = frames.split_off(1);
            let mut reply = handler(&body);
            if reply.is_empty() {
                // FLP requires at least one reply body frame.
                reply.push(Vec::new());
            }
            frames.extend(reply);
            Ok(frames)
        }
    }
}

/// Counters of a Freelance server.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ServerStats {
    pub pings: u64,
    pub requests: u64,
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
        if s.poll(zmq::POLLIN, 100)? == 0 {
            continue;
        }
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

// ---- client agent -------------------------------------------------------------------------------------------

/// Client agent timing (reference flcliapi: ping 2000 ms, server TTL 6000 ms, request timeout 3000 ms).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AgentConfig {
    pub ping_interval_ms: u64,
    pub server_ttl_ms: u64,
    /// Global time a request may take across all servers.
    pub request_timeout_ms: u64,
    /// Resend to the next live server when the current one has not answered in this long; a server that died a
    /// moment ago is still "alive" until its TTL runs out, and the request should not wait for that.
    pub resend_ms: u64,
}

impl Default for AgentConfig {
    fn default() -> Self {
        Self {
            ping_interval_ms: 2000,
            server_ttl_ms: 6000,
            request_timeout_ms: 3000,
            resend_ms: 1000,
        }
    }
}

struct Server {
    endpoint: Vec<u8>,
    alive: bool,
    ping_at: Instant,
    expires: Instant,
}

struct Pending {
    seq: u64,
    body: Frames,
    deadline: Instant,
    target: Option<usize>,
    resend_at: Instant,
}

/// What the agent wants done.
#[derive(Debug, PartialEq, Eq)]
pub enum AgentAction {
    /// Connect the ROUTER to this endpoint.
    Connect(String),
    /// Send on the ROUTER; frame 0 is the server endpoint (its identity).
    Send(Frames),
    /// The pending request got this reply body.
    Reply(Frames),
    /// The pending request timed out.
    Failed,
}

/// Sans-IO Freelance client agent.
pub struct FreelanceAgent {
    cfg: AgentConfig,
    servers: Vec<Server>,
    pending: Option<Pending>,
    seq: u64,
    out: VecDeque<AgentAction>,
    /// Replies and PONGs from unknown servers, replies with a stale CCF, malformed frames.
    pub discarded: u64,
}

impl FreelanceAgent {
    pub fn new(cfg: AgentConfig) -> Self {
        Self {
            cfg,
            servers: Vec::new(),
            pending: None,
            seq: 0,
            out: VecDeque::new(),
            discarded: 0,
        }
    }

    /// Add a server. The first PING goes out shortly after, giving the connection time to come up (a
    /// ROUTER-to-ROUTER send before that is silently dropped).
    pub fn connect(&mut self, now: Instant, endpoint: &str) {
        if self
            .servers
            .iter()
            .any(|s| s.endpoint == endpoint.as_bytes())
        {
            return;
        }
        self.servers.push(Server {
            endpoint: endpoint.as_bytes().to_vec(),
            alive: false,
            ping_at: now + ms(self.cfg.ping_interval_ms.min(100)),
            expires: now + ms(self.cfg.server_ttl_ms),
        });
        self.out
            .push_back(AgentAction::Connect(endpoint.to_string()));
    }

    /// Whether the server at `endpoint` is currently believed alive.
    pub fn is_alive(&self, endpoint: &str) -> bool {
        self.servers
            .iter()
            .any(|s| s.endpoint == endpoint.as_bytes() && s.alive)
    }

    /// Start a request. Refused while another is pending (the caller API is synchronous).
    pub fn request(&mut self, now: Instant, body: Frames) -> Result<(), FreelanceError> {
        if self.pending.is_some() {
            return Err(FreelanceError::Invalid("a request is already pending"));
        }
        if body.is_empty() {
            return Err(FreelanceError::Invalid(
                "a request needs at least one body frame",
            ));
        }
        self.seq += 1;
        self.pending = Some(Pending {
            seq: self.seq,
            body,
            deadline: now + ms(self.cfg.request_timeout_ms),
            target: None,
            resend_at: now,
        });
        self.pump(now);
        Ok(())
    }

    /// A message from the ROUTER: `[server-endpoint][PONG]` or `[server-endpoint][CCF][body…]`.
    pub fn on_message(&mut self, now: Instant, mut frames: Frames) {
        let Some(idx) = frames
            .first()
            .and_then(|ep| self.servers.iter().position(|s| s.endpoint == *ep))
        else {
            self.discarded += 1;
            return;
        };
        if frames.len() < 2 {
            self.discarded += 1;
            return;
        }
        let server = &mut self.servers[idx];
        server.alive = true;
        server.expires = now + ms(self.cfg.server_ttl_ms);
        if frames.len() == 2 && frames[1].as_slice() == b"PONG" {
            self.pump(now);
            return;
        }
        let body = frames.split_off(2);
        let ccf = &frames[1];
        match &self.pending {
            Some(p) if ccf.as_slice() == p.seq.to_string().as_bytes() && !body.is_empty() => {
                self.pending = None;
                self.out.push_back(AgentAction::Reply(body));
            }
            _ => self.discarded += 1,
        }
    }

    /// Pings, server expiry, request timeout and fail-over.
    pub fn tick(&mut self, now: Instant) {
        for s in &mut self.servers {
            if s.alive && now >= s.expires {
                tracing::info!(server = %String::from_utf8_lossy(&s.endpoint), "freelance server expired");
                s.alive = false;
            }
            if now >= s.ping_at {
                s.ping_at = now + ms(self.cfg.ping_interval_ms);
                self.out.push_back(AgentAction::Send(vec![
                    s.endpoint.clone(),
                    b"PING".to_vec(),
                ]));
            }
        }
        self.pump(now);
    }

    fn pump(&mut self, now: Instant) {
        let Some(p) = &mut self.pending else { return };
        if now >= p.deadline {
            self.pending = None;
            self.out.push_back(AgentAction::Failed);
            return;
        }
        let target_alive = p.target.is_some_and(|t| self.servers[t].alive);
        if target_alive && now < p.resend_at {
            return;
        }
        // Next live server after the current target, wrapping; the current one only if it is the sole survivor.
        let n = self.servers.len();
        let start = p.target.map_or(0, |t| t + 1);
        let Some(next) = (0..n)
            .map(|i| (start + i) % n)
            .find(|&i| self.servers[i].alive)
        else {
            return;
        };
        p.target = Some(next);
        p.resend_at = now + ms(self.cfg.resend_ms);
        let mut m = Vec::with_capacity(p.body.len() + 2);
        m.push(self.servers[next].endpoint.clone());
        m.push(p.seq.to_string().into_bytes());
        m.extend(p.body.iter().cloned());
        self.out.push_back(AgentAction::Send(m));
    }

    pub fn next_deadline(&self) -> Instant {
        let mut d = self
            .servers
            .iter()
            .map(|s| s.ping_at.min(if s.alive { s.expires } else { s.ping_at }))
            .min();
        if let Some(p) = &self.pending {
            let pd = p.deadline.min(p.resend_at);
            d = Some(d.map_or(pd, |x| x.min(pd)));
        }
        d.unwrap_or_else(|| Instant::now() + Duration::from_secs(1))
    }

    pub fn poll_action(&mut self) -> Option<AgentAction> {
        self.out.pop_front()
    }
}

/// The caller's side of the Freelance client: commands go down an `inproc` PAIR to the agent thread.
pub struct FreelanceClient {
    pipe: zmq::Socket,
    thread: Option<JoinHandle<Result<(), FreelanceError>>>,
    timeout: Duration,
}

impl FreelanceClient {
    pub fn new(ctx: &zmq::Context, cfg: AgentConfig) -> Result<Self, FreelanceError> {
        let addr = format!("inproc://freelance-{}", uuid::Uuid::new_v4().simple());
        let pipe = ctx.socket(zmq::PAIR)?;
        pipe.set_linger(0)?;
        pipe.bind(&addr)?;
        let timeout = ms(cfg.request_timeout_ms + 1000);
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
        if self
            .pipe
            .poll(zmq::POLLIN, self.timeout.as_millis() as i64)?
            == 0
        {
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
            .min(ms(100))
            .as_millis() as i64;
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

#[cfg(test)]
mod tests {
    use super::*;

    fn f(parts: &[&[u8]]) -> Frames {
        parts.iter().map(|p| p.to_vec()).collect()
    }

    fn cfg() -> AgentConfig {
        AgentConfig {
            ping_interval_ms: 100,
            server_ttl_ms: 300,
            request_timeout_ms: 1000,
            resend_ms: 200,
        }
    }

    fn drain(a: &mut FreelanceAgent) -> Vec<AgentAction> {
        std::iter::from_fn(|| a.poll_action()).collect()
    }

    #[test]
    fn server_rule() {
        let mut h = |b: &[Vec<u8>]| vec![b"OK".to_vec(), b[0].clone()];
        assert_eq!(server_reply(f(&[b"PING"]), &mut h), Ok(f(&[b"PONG"])));
        assert_eq!(
            server_reply(f(&[b"7", b"x"]), &mut h),
            Ok(f(&[b"7", b"OK", b"x"]))
        );
        assert_eq!(
            server_reply(f(&[b"PING", b"x"]), &mut h),
            Ok(f(&[b"PING", b"OK", b"x"])),
            "PING as CCF"
        );
        assert_eq!(server_reply(f(&[b"7"]), &mut h), Err(ServerDrop::Malformed));
        assert_eq!(server_reply(vec![], &mut h), Err(ServerDrop::Malformed));
        let mut empty = |_: &[Vec<u8>]| Vec::new();
        assert_eq!(
            server_reply(f(&[b"1", b"x"]), &mut empty),
            Ok(f(&[b"1", b""]))
        );
    }

    #[test]
    fn pings_marks_alive_sends_to_first_live_and_matches_ccf() {
        let t = Instant::now();
        let mut a = FreelanceAgent::new(cfg());
        a.connect(t, "tcp://a");
        a.connect(t, "tcp://b");
        assert_eq!(
            drain(&mut a),
            vec![
                AgentAction::Connect("tcp://a".into()),
                AgentAction::Connect("tcp://b".into())
            ]
        );
        a.tick(t + ms(100));
        assert_eq!(
            drain(&mut a),
            vec![
                AgentAction::Send(f(&[b"tcp://a", b"PING"])),
                AgentAction::Send(f(&[b"tcp://b", b"PING"]))
            ]
        );
        a.on_message(t + ms(110), f(&[b"tcp://b", b"PONG"]));
        assert!(a.is_alive("tcp://b") && !a.is_alive("tcp://a"));
        a.request(t + ms(120), f(&[b"hello"])).unwrap();
        assert_eq!(
            drain(&mut a),
            vec![AgentAction::Send(f(&[b"tcp://b", b"1", b"hello"]))]
        );
        a.on_message(t + ms(130), f(&[b"tcp://b", b"0", b"stale"]));
        a.on_message(t + ms(130), f(&[b"tcp://zzz", b"1", b"who"]));
        assert_eq!(a.discarded, 2);
        a.on_message(t + ms(140), f(&[b"tcp://b", b"1", b"world"]));
        assert_eq!(drain(&mut a), vec![AgentAction::Reply(f(&[b"world"]))]);
    }

    #[test]
    fn fails_over_when_server_goes_silent_and_times_out_when_all_dead() {
        let t = Instant::now();
        let mut a = FreelanceAgent::new(cfg());
        a.connect(t, "A");
        a.connect(t, "B");
        a.on_message(t, f(&[b"A", b"PONG"]));
        a.on_message(t, f(&[b"B", b"PONG"]));
        drain(&mut a);
        a.request(t, f(&[b"q"])).unwrap();
        assert_eq!(
            drain(&mut a),
            vec![AgentAction::Send(f(&[b"A", b"1", b"q"]))]
        );
        // B keeps answering pings, A does not: after resend_ms the request goes to B.
        a.on_message(t + ms(150), f(&[b"B", b"PONG"]));
        a.tick(t + ms(199));
        assert!(!drain(&mut a)
            .iter()
            .any(|x| matches!(x, AgentAction::Send(m) if m.len() == 3)));
        a.tick(t + ms(200));
        assert!(drain(&mut a).contains(&AgentAction::Send(f(&[b"B", b"1", b"q"]))));
        a.on_message(t + ms(210), f(&[b"B", b"1", b"r"]));
        assert_eq!(drain(&mut a), vec![AgentAction::Reply(f(&[b"r"]))]);
        // A expires after its TTL.
        a.tick(t + ms(300));
        assert!(!a.is_alive("A"));
        // Nobody alive: the request waits, then fails at the global timeout.
        a.tick(t + ms(510));
        assert!(!a.is_alive("B"));
        drain(&mut a);
        a.request(t + ms(510), f(&[b"q2"])).unwrap();
        assert!(drain(&mut a).is_empty());
        a.tick(t + ms(1509));
        assert!(!drain(&mut a).contains(&AgentAction::Failed));
        a.tick(t + ms(1510));
        assert!(drain(&mut a).contains(&AgentAction::Failed));
        assert!(
            a.request(t + ms(1510), f(&[b"q3"])).is_ok(),
            "a new request after failure is accepted"
        );
    }
}
