//! Majordomo client APIs: [`Client`] (synchronous, REQ, Lazy Pirate retries) and [`AsyncClient`] (DEALER, many
//! requests in flight, the caller matches replies).

use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::proto::{c02, Frames, Version, MDPC01, MDPC02};
use crate::MdpError;
use tickbox_units::HumanDuration;
use tickbox_zmqx::socket::poll_ms;

/// Client settings (reference mdcliapi: 2500 ms timeout, 3 retries).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ClientConfig {
    /// How long one attempt waits for the reply before the socket is reopened and the request resent.
    pub timeout: HumanDuration,
    /// Total attempts per request (1 = no retry).
    pub attempts: u32,
}

impl Default for ClientConfig {
    fn default() -> Self {
        Self {
            timeout: HumanDuration(Duration::from_millis(2500)),
            attempts: 3,
        }
    }
}

/// Synchronous MDP/0.1 client: one request at a time. On timeout the REQ socket is closed and reopened and the
/// request resent (the RFC's recommended strategy), so a worker or broker crash costs one timeout.
pub struct Client {
    ctx: zmq::Context,
    endpoints: Vec<String>,
    current: usize,
    cfg: ClientConfig,
    socket: Option<zmq::Socket>,
    security: tickbox_auth::Security,
    /// Replies discarded because their header or service did not match.
    pub malformed: u64,
    /// Requests sent again after a timeout (each on a fresh socket, to the next endpoint).
    pub resends: u64,
}

impl Client {
    /// A client of the one broker at `broker`; the socket is opened by the first request.
    pub fn new(ctx: &zmq::Context, broker: &str, cfg: ClientConfig) -> Self {
        Self::with_failover(ctx, &[broker.to_string()], cfg)
    }

    /// A client for a Binary Star broker pair (or any list of brokers): after each timeout it reconnects to the
    /// next endpoint in the list, as the Guide's `bstarcli` alternates primary and backup.
    pub fn with_failover(ctx: &zmq::Context, brokers: &[String], cfg: ClientConfig) -> Self {
        Self {
            ctx: ctx.clone(),
            endpoints: brokers.to_vec(),
            current: 0,
            cfg,
            socket: None,
            security: tickbox_auth::Security::default(),
            malformed: 0,
            resends: 0,
        }
    }

    /// Connects every socket under `security` (role `broker`: CURVE with the broker's server key when
    /// `[security]` says so). A refused call is answered `403 unauthorised: SERVICE` (docs/book/src/protocols.md §2.5).
    pub fn with_security(mut self, security: tickbox_auth::Security) -> Self {
        self.security = security;
        self.socket = None;
        self
    }

    /// The broker endpoint the next request goes to.
    pub fn endpoint(&self) -> &str {
        self.endpoints.get(self.current).map_or("", String::as_str)
    }

    fn socket(&mut self) -> Result<&zmq::Socket, MdpError> {
        if self.socket.is_none() {
            let s = self.ctx.socket(zmq::REQ)?;
            s.set_linger(0)?;
            self.security.client(&s, "broker")?;
            s.connect(self.endpoint())?;
            self.socket = Some(s);
        }
        Ok(self.socket.as_ref().expect("socket just created"))
    }

    /// Send `body` to `service` and return the reply body.
    pub fn request(&mut self, service: &str, body: &[Vec<u8>]) -> Result<Frames, MdpError> {
        if body.is_empty() {
            return Err(MdpError::Invalid("a request needs at least one body frame"));
        }
        if self.endpoints.is_empty() {
            return Err(MdpError::Invalid("no broker endpoint"));
        }
        let attempts = self.cfg.attempts.max(1);
        let timeout = self.cfg.timeout.0;
        for attempt in 1..=attempts {
            let s = self.socket()?;
            let head = [MDPC01, service.as_bytes()];
            s.send_multipart(
                head.iter().copied().chain(body.iter().map(Vec::as_slice)),
                0,
            )?;
            if s.poll(zmq::POLLIN, poll_ms(timeout))? > 0 {
                let mut reply = s.recv_multipart(0)?;
                if reply.len() < 3 || reply[0] != MDPC01 || reply[1] != service.as_bytes() {
                    self.malformed += 1;
                    // The REQ conversation is spent either way; a fresh socket keeps later requests clean.
                    self.socket = None;
                    return Err(MdpError::Malformed(
                        "reply header or service does not match the request",
                    ));
                }
                return Ok(reply.split_off(2));
            }
            self.socket = None;
            self.current = (self.current + 1) % self.endpoints.len();
            if attempt < attempts {
                self.resends += 1;
                tracing::debug!(service, attempt, "no reply, reconnecting and resending");
            }
        }
        Err(MdpError::Timeout {
            service: service.to_string(),
            attempts,
        })
    }
}

/// Waits, at most `within`, until the broker answers `mmi.service` 200 for every one of `services`; false when
/// it has not by then. A worker's `connect` returns before the broker has seen its READY, so a process that
/// announces itself ready before this holds sends its first callers an MMI 404 (seen with Titanic in CI).
pub fn await_served(
    ctx: &zmq::Context,
    broker: &str,
    security: &tickbox_auth::Security,
    services: &[&str],
    within: Duration,
) -> Result<bool, MdpError> {
    let deadline = Instant::now() + within;
    let mut mmi = Client::new(
        ctx,
        broker,
        ClientConfig {
            timeout: HumanDuration(within.min(Duration::from_millis(500))),
            attempts: 1,
        },
    )
    .with_security(security.clone());
    let mut waiting: Vec<&str> = services.to_vec();
    while !waiting.is_empty() {
        let service = waiting[0];
        match mmi.request("mmi.service", &[service.as_bytes().to_vec()]) {
            Ok(reply) if reply.first().map(Vec::as_slice) == Some(b"200".as_slice()) => {
                waiting.remove(0);
                continue;
            }
            Ok(reply) if reply.first().map(Vec::as_slice) == Some(b"404".as_slice()) => {}
            Err(MdpError::Timeout { .. }) => {}
            // A 403 (grants do not let this key ask MMI) will not change by asking again, and each one counts
            // as a refusal at the broker.
            Ok(_) => return Ok(false),
            Err(e) => return Err(e),
        }
        if Instant::now() >= deadline {
            return Ok(false);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(true)
}

/// One reply received by [`AsyncClient`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reply {
    /// The service that answered (the reply does not name the request: match on body content).
    pub service: Vec<u8>,
    /// The reply body, at least one frame.
    pub body: Frames,
    /// An 18/MDP 0.2 PARTIAL: more replies to the same request follow.
    pub partial: bool,
}

/// Asynchronous client over DEALER (mdcliapi2 style): send many requests, collect replies as they come. Retries
/// are the caller's business because only the caller knows which requests are idempotent.
pub struct AsyncClient {
    socket: zmq::Socket,
    version: Version,
    /// Replies skipped because they did not parse as the client's MDP revision.
    pub malformed: u64,
}

impl AsyncClient {
    /// Connect to the broker speaking 7/MDP 0.1.
    pub fn connect(ctx: &zmq::Context, broker: &str) -> Result<Self, MdpError> {
        Self::connect_version(ctx, broker, Version::V01)
    }

    /// Connect to the broker speaking `version` (18/MDP 0.2 brings partial replies).
    pub fn connect_version(
        ctx: &zmq::Context,
        broker: &str,
        version: Version,
    ) -> Result<Self, MdpError> {
        Self::connect_secured(ctx, broker, version, &tickbox_auth::Security::default())
    }

    /// [`AsyncClient::connect_version`] under `security` (role `broker`).
    pub fn connect_secured(
        ctx: &zmq::Context,
        broker: &str,
        version: Version,
        security: &tickbox_auth::Security,
    ) -> Result<Self, MdpError> {
        let socket = ctx.socket(zmq::DEALER)?;
        socket.set_linger(0)?;
        socket.set_sndhwm(0)?;
        socket.set_rcvhwm(0)?;
        security.client(&socket, "broker")?;
        socket.connect(broker)?;
        Ok(Self {
            socket,
            version,
            malformed: 0,
        })
    }

    /// Queue a request; returns immediately.
    pub fn send(&self, service: &str, body: &[Vec<u8>]) -> Result<(), MdpError> {
        if body.is_empty() {
            return Err(MdpError::Invalid("a request needs at least one body frame"));
        }
        let body = body.iter().map(Vec::as_slice);
        match self.version {
            Version::V01 => {
                let head: [&[u8]; 3] = [b"", MDPC01, service.as_bytes()];
                self.socket
                    .send_multipart(head.into_iter().chain(body), 0)?
            }
            Version::V02 => {
                let head: [&[u8]; 3] = [MDPC02, &[c02::REQUEST], service.as_bytes()];
                self.socket
                    .send_multipart(head.into_iter().chain(body), 0)?
            }
        }
        Ok(())
    }

    /// Wait up to `timeout` for the next reply. Malformed replies are counted and skipped.
    pub fn recv(&mut self, timeout: Duration) -> Result<Option<Reply>, MdpError> {
        let end = Instant::now() + timeout;
        loop {
            let left = end.saturating_duration_since(Instant::now());
            if self.socket.poll(zmq::POLLIN, poll_ms(left))? == 0 {
                return Ok(None);
            }
            let frames = self.socket.recv_multipart(0)?;
            match self.parse(frames) {
                Some(r) => return Ok(Some(r)),
                None => self.malformed += 1,
            }
        }
    }

    fn parse(&self, mut f: Frames) -> Option<Reply> {
        match self.version {
            Version::V01 => {
                if f.len() < 4 || !f[0].is_empty() || f[1] != MDPC01 {
                    return None;
                }
                let body = f.split_off(3);
                Some(Reply {
                    service: f.pop()?,
                    body,
                    partial: false,
                })
            }
            Version::V02 => {
                if f.len() < 4 || f[0] != MDPC02 || f[1].len() != 1 {
                    return None;
                }
                let partial = match f[1][0] {
                    c02::PARTIAL => true,
                    c02::FINAL => false,
                    _ => return None,
                };
                let body = f.split_off(3);
                Some(Reply {
                    service: f.pop()?,
                    body,
                    partial,
                })
            }
        }
    }
}
