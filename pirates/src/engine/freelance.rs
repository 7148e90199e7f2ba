//! The 10/FLP engines (sans-IO): the server rule ([`server_reply`]) and the client agent ([`FreelanceAgent`]:
//! pings, server liveness, one request at a time sent to a live server, fail-over, global timeout). The socket
//! layers (server loop, agent thread behind an inproc pipe) are in `crate::freelance`.
#![deny(clippy::disallowed_methods, clippy::disallowed_types)]

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use tickbox_reliable::ms;
use tickbox_units::HumanDuration;

pub use tickbox_reliable::Frames;

/// Why [`FreelanceAgent::request`] refused a request (the agent answers one request at a time).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RequestRefused {
    /// Another request is still waiting for its reply or timeout.
    #[error("a request is already pending")]
    Busy,
    /// The body has no frame; FLP needs at least one.
    #[error("a request needs at least one body frame")]
    EmptyBody,
}

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

/// Client agent timing (reference flcliapi: ping 2 s, server TTL 6 s, request timeout 3 s).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AgentConfig {
    /// How often each server is pinged (its first ping goes out within 100 ms of being added).
    pub ping_interval: HumanDuration,
    /// A server that has sent nothing (PONG or reply) for this long is presumed dead and skipped.
    pub server_ttl: HumanDuration,
    /// Global time a request may take across all servers.
    pub request_timeout: HumanDuration,
    /// Resend to the next live server when the current one has not answered in this long; a server that died a
    /// moment ago is still "alive" until its TTL runs out, and the request should not wait for that.
    pub resend: HumanDuration,
    /// `[security]`, shared by the binary: the agent's ROUTER connects to every server as role `freelance`.
    #[serde(skip)]
    pub security: tickbox_auth::Security,
}

impl Default for AgentConfig {
    fn default() -> Self {
        Self {
            ping_interval: HumanDuration(Duration::from_millis(2000)),
            server_ttl: HumanDuration(Duration::from_millis(6000)),
            request_timeout: HumanDuration(Duration::from_millis(3000)),
            resend: HumanDuration(Duration::from_millis(1000)),
            security: tickbox_auth::Security::default(),
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
    /// An agent with no server yet; add them with [`FreelanceAgent::connect`].
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
            ping_at: now + self.cfg.ping_interval.0.min(ms(100)),
            expires: now + self.cfg.server_ttl.0,
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
    pub fn request(&mut self, now: Instant, body: Frames) -> Result<(), RequestRefused> {
        if self.pending.is_some() {
            return Err(RequestRefused::Busy);
        }
        if body.is_empty() {
            return Err(RequestRefused::EmptyBody);
        }
        self.seq += 1;
        self.pending = Some(Pending {
            seq: self.seq,
            body,
            deadline: now + self.cfg.request_timeout.0,
            target: None,
            resend_at: now,
        });
        self.pump(now);
        Ok(())
    }

    /// A message from the ROUTER: `[server-endpoint][PONG]` or `[server-endpoint][CCF][body…]`.
    pub fn handle_input(&mut self, now: Instant, mut frames: Frames) {
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
        server.expires = now + self.cfg.server_ttl.0;
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
    pub fn handle_timeout(&mut self, now: Instant) {
        for s in &mut self.servers {
            if s.alive && now >= s.expires {
                tracing::info!(server = %String::from_utf8_lossy(&s.endpoint), "freelance server expired");
                s.alive = false;
            }
            if now >= s.ping_at {
                s.ping_at = now + self.cfg.ping_interval.0;
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
        p.resend_at = now + self.cfg.resend.0;
        let mut m = Vec::with_capacity(p.body.len() + 2);
        m.push(self.servers[next].endpoint.clone());
        m.push(p.seq.to_string().into_bytes());
        m.extend(p.body.iter().cloned());
        self.out.push_back(AgentAction::Send(m));
    }

    /// When [`FreelanceAgent::handle_timeout`] is next due (a ping, an expiry, a resend or the request deadline);
    /// `None` when there is nothing to wait for (no server and no request), and the loop waits for input alone.
    pub fn poll_timeout(&self) -> Option<Instant> {
        let mut d = self
            .servers
            .iter()
            .map(|s| s.ping_at.min(if s.alive { s.expires } else { s.ping_at }))
            .min();
        if let Some(p) = &self.pending {
            let pd = p.deadline.min(p.resend_at);
            d = Some(d.map_or(pd, |x| x.min(pd)));
        }
        d
    }

    /// The next action, in order; call until `None` after every input.
    pub fn poll_output(&mut self) -> Option<AgentAction> {
        self.out.pop_front()
    }
}

#[cfg(test)]
// A test reads the clock once for an origin and moves simulated time on from there; the engine never reads it.
#[allow(clippy::disallowed_methods)]
mod tests {
    use super::*;
    use tickbox_reliable::ms;

    fn f(parts: &[&[u8]]) -> Frames {
        parts.iter().map(|p| p.to_vec()).collect()
    }

    fn cfg() -> AgentConfig {
        AgentConfig {
            ping_interval: ms(100).into(),
            server_ttl: ms(300).into(),
            request_timeout: ms(1000).into(),
            resend: ms(200).into(),
            ..AgentConfig::default()
        }
    }

    fn drain(a: &mut FreelanceAgent) -> Vec<AgentAction> {
        std::iter::from_fn(|| a.poll_output()).collect()
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
        a.handle_timeout(t + ms(100));
        assert_eq!(
            drain(&mut a),
            vec![
                AgentAction::Send(f(&[b"tcp://a", b"PING"])),
                AgentAction::Send(f(&[b"tcp://b", b"PING"]))
            ]
        );
        a.handle_input(t + ms(110), f(&[b"tcp://b", b"PONG"]));
        assert!(a.is_alive("tcp://b") && !a.is_alive("tcp://a"));
        a.request(t + ms(120), f(&[b"hello"])).unwrap();
        assert_eq!(
            drain(&mut a),
            vec![AgentAction::Send(f(&[b"tcp://b", b"1", b"hello"]))]
        );
        a.handle_input(t + ms(130), f(&[b"tcp://b", b"0", b"stale"]));
        a.handle_input(t + ms(130), f(&[b"tcp://zzz", b"1", b"who"]));
        assert_eq!(a.discarded, 2);
        a.handle_input(t + ms(140), f(&[b"tcp://b", b"1", b"world"]));
        assert_eq!(drain(&mut a), vec![AgentAction::Reply(f(&[b"world"]))]);
    }

    #[test]
    fn fails_over_when_server_goes_silent_and_times_out_when_all_dead() {
        let t = Instant::now();
        let mut a = FreelanceAgent::new(cfg());
        a.connect(t, "A");
        a.connect(t, "B");
        a.handle_input(t, f(&[b"A", b"PONG"]));
        a.handle_input(t, f(&[b"B", b"PONG"]));
        drain(&mut a);
        a.request(t, f(&[b"q"])).unwrap();
        assert_eq!(
            drain(&mut a),
            vec![AgentAction::Send(f(&[b"A", b"1", b"q"]))]
        );
        // B keeps answering pings, A does not: after `resend` the request goes to B.
        a.handle_input(t + ms(150), f(&[b"B", b"PONG"]));
        a.handle_timeout(t + ms(199));
        assert!(!drain(&mut a)
            .iter()
            .any(|x| matches!(x, AgentAction::Send(m) if m.len() == 3)));
        a.handle_timeout(t + ms(200));
        assert!(drain(&mut a).contains(&AgentAction::Send(f(&[b"B", b"1", b"q"]))));
        a.handle_input(t + ms(210), f(&[b"B", b"1", b"r"]));
        assert_eq!(drain(&mut a), vec![AgentAction::Reply(f(&[b"r"]))]);
        // A expires after its TTL.
        a.handle_timeout(t + ms(300));
        assert!(!a.is_alive("A"));
        // Nobody alive: the request waits, then fails at the global timeout.
        a.handle_timeout(t + ms(510));
        assert!(!a.is_alive("B"));
        drain(&mut a);
        a.request(t + ms(510), f(&[b"q2"])).unwrap();
        assert!(drain(&mut a).is_empty());
        a.handle_timeout(t + ms(1509));
        assert!(!drain(&mut a).contains(&AgentAction::Failed));
        a.handle_timeout(t + ms(1510));
        assert!(drain(&mut a).contains(&AgentAction::Failed));
        assert!(
            a.request(t + ms(1510), f(&[b"q3"])).is_ok(),
            "a new request after failure is accepted"
        );
    }
}
