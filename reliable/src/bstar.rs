//! Binary Star: a primary/backup pair where exactly one server is active (docs/book/src/protocols.md §8).
//!
//! # Public API (for servers that embed it: the Clone server, the Majordomo broker)
//!
//! * [`BinaryStar`] — the sans-IO engine. Create it with [`BinaryStar::new`]`(role, config, now)`, then feed it:
//!   - [`BinaryStar::handle_peer_state`]`(now, state)` (or [`BinaryStar::handle_peer_frame`] with the raw
//!     one-frame state message) when the peer's state message arrives;
//!   - [`BinaryStar::handle_client_request`]`(now)` when a request arrives on the *voter* socket (the socket clients
//!     use: the Clone snapshot ROUTER, the broker's front-end). It returns [`Vote::Accept`] (serve the request) or
//!     [`Vote::Reject`] (drop it silently; the client times out and fails over);
//!   - [`BinaryStar::handle_timeout`]`(now)` on every loop turn, then [`BinaryStar::poll_output`]: the state frame
//!     to publish when one is due (every `heartbeat`, and right after a transition so the peer learns it at once).
//!
//!   Every call that can change state returns [`Transition`]: `None`, `BecameActive` (start serving: e.g. apply a
//!   pending list) or `BecamePassive` (stop serving, mirror the active peer). Dual actives / dual passives are
//!   returned as [`BstarError`] and never change state; the embedding server decides (log and exit, as the Guide's
//!   `bstar.c` aborts). [`BinaryStar::poll_timeout`] tells the loop how long it may sleep.
//! * [`BstarEndpoints`] — where the two state sockets of a server live; the socket wrapper that owns them
//!   (`tickbox_bstar::BstarNode`) sits in the `bstar` crate, above this one, because it needs sockets.
//!
//! The engine follows the `bstar.c` transition table of §8.3 exactly, including the client-vote rule: a passive
//! (or a still-PRIMARY) server promotes itself only when a client request arrives *and* the peer has been silent for
//! two heartbeats. It never promotes itself on a timer, which is the split-brain defence.
#![deny(clippy::disallowed_methods, clippy::disallowed_types)]

use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use tickbox_units::HumanDuration;

/// Server state; the discriminant is the wire value (ASCII decimal in the state frame).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum State {
    /// Primary, waiting for its peer.
    Primary = 1,
    /// Backup, waiting for its peer.
    Backup = 2,
    /// Serving clients.
    Active = 3,
    /// Standing by.
    Passive = 4,
}

impl State {
    /// The one-frame state message: ASCII decimal of the state.
    pub fn wire(self) -> &'static [u8] {
        match self {
            State::Primary => b"1",
            State::Backup => b"2",
            State::Active => b"3",
            State::Passive => b"4",
        }
    }

    /// Parse a state message frame. Anything but exactly `"1"`..`"4"` is an error.
    pub fn from_wire(frame: &[u8]) -> Result<State, BstarError> {
        match frame {
            b"1" => Ok(State::Primary),
            b"2" => Ok(State::Backup),
            b"3" => Ok(State::Active),
            b"4" => Ok(State::Passive),
            other => Err(BstarError::BadStateFrame(
                String::from_utf8_lossy(&other[..other.len().min(16)]).into_owned(),
            )),
        }
    }
}

/// Events of §8.2; `PeerX` are the peer's reported states, `ClientRequest` a message on the voter socket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    /// The peer reports PRIMARY.
    PeerPrimary = 1,
    /// The peer reports BACKUP.
    PeerBackup = 2,
    /// The peer reports ACTIVE.
    PeerActive = 3,
    /// The peer reports PASSIVE.
    PeerPassive = 4,
    /// A client request arrived on the voter socket.
    ClientRequest = 5,
}

impl Event {
    fn from_peer(state: State) -> Event {
        match state {
            State::Primary => Event::PeerPrimary,
            State::Backup => Event::PeerBackup,
            State::Active => Event::PeerActive,
            State::Passive => Event::PeerPassive,
        }
    }
}

/// Which side of the pair this server is configured as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// Starts as PRIMARY: becomes active on its own once the peer is silent and a client votes.
    Primary,
    /// Starts as BACKUP: never serves until the peer has been seen and then lost.
    Backup,
}

/// Outcome of a client request on the voter socket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Vote {
    /// Serve the request.
    Accept,
    /// Drop it silently (no reply): the client times out and tries the other server.
    Reject,
}

/// A state change the embedding server must react to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transition {
    /// No state change.
    None,
    /// Start serving (e.g. apply a pending list).
    BecameActive,
    /// Stop serving and mirror the active peer.
    BecamePassive,
}

/// Protocol errors of the engine (no transport errors: the engine does no I/O).
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum BstarError {
    /// We are ACTIVE and the peer says it is ACTIVE too: split brain.
    #[error("dual actives: peer reports ACTIVE while we are ACTIVE (split brain)")]
    DualActive,
    /// We are PASSIVE and the peer says it is PASSIVE too: nobody serves.
    #[error("dual passives: peer reports PASSIVE while we are PASSIVE")]
    DualPassive,
    /// The peer's state message was not one frame of `"1"`..`"4"`.
    #[error("malformed Binary Star state frame {0:?}")]
    BadStateFrame(String),
}

/// Engine timing. The Guide uses a 1000 ms heartbeat and expires the peer after two heartbeats.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct BstarConfig {
    /// Interval between state messages (`1s` in the Guide).
    pub heartbeat: HumanDuration,
    /// The peer is considered gone after this many heartbeat intervals of silence.
    pub expiry_heartbeats: u32,
}

impl Default for BstarConfig {
    fn default() -> Self {
        BstarConfig {
            heartbeat: HumanDuration(Duration::from_secs(1)),
            expiry_heartbeats: 2,
        }
    }
}

impl BstarConfig {
    /// The heartbeat interval (at least 1 ms).
    pub fn heartbeat(&self) -> Duration {
        self.heartbeat.0.max(Duration::from_millis(1))
    }

    /// How long the peer may be silent before it is considered gone.
    pub fn peer_expiry(&self) -> Duration {
        self.heartbeat() * self.expiry_heartbeats.max(1)
    }
}

/// The sans-IO Binary Star finite-state machine.
#[derive(Debug, Clone)]
pub struct BinaryStar {
    state: State,
    heartbeat: Duration,
    expiry: Duration,
    peer_expiry: Instant,
    next_heartbeat: Instant,
    /// A heartbeat fell due in `handle_timeout` and `poll_output` has not yet returned it.
    heartbeat_due: bool,
    peer_state: Option<State>,
}

impl BinaryStar {
    /// Starts in PRIMARY or BACKUP. The peer expiry is armed to `now + expiry` like `bstar.c`, so a lone primary
    /// accepts clients only after two heartbeats of silence. The first heartbeat is due immediately.
    pub fn new(role: Role, config: &BstarConfig, now: Instant) -> Self {
        let expiry = config.peer_expiry();
        BinaryStar {
            state: match role {
                Role::Primary => State::Primary,
                Role::Backup => State::Backup,
            },
            heartbeat: config.heartbeat(),
            expiry,
            peer_expiry: now + expiry,
            next_heartbeat: now,
            heartbeat_due: false,
            peer_state: None,
        }
    }

    /// The current state.
    pub fn state(&self) -> State {
        self.state
    }

    /// Whether this server is serving clients.
    pub fn is_active(&self) -> bool {
        self.state == State::Active
    }

    /// Last state the peer reported, if any.
    pub fn peer_state(&self) -> Option<State> {
        self.peer_state
    }

    /// True once the peer has been silent for the expiry period.
    pub fn peer_expired(&self, now: Instant) -> bool {
        now >= self.peer_expiry
    }

    /// The peer's state message arrived.
    pub fn handle_peer_state(
        &mut self,
        now: Instant,
        peer: State,
    ) -> Result<Transition, BstarError> {
        self.peer_state = Some(peer);
        // bstar.c re-arms the expiry on every state message, even one that leads to a fatal error.
        self.peer_expiry = now + self.expiry;
        self.execute(Event::from_peer(peer), now).map(|(t, _)| t)
    }

    /// Parses the raw state frame and applies it.
    pub fn handle_peer_frame(
        &mut self,
        now: Instant,
        frame: &[u8],
    ) -> Result<Transition, BstarError> {
        let state = State::from_wire(frame)?;
        self.handle_peer_state(now, state)
    }

    /// A client request arrived on the voter socket.
    pub fn handle_client_request(&mut self, now: Instant) -> (Vote, Transition) {
        match self.execute(Event::ClientRequest, now) {
            Ok(result) => (result.1, result.0),
            // ClientRequest can never produce an error; keep the engine total anyway.
            Err(_) => (Vote::Reject, Transition::None),
        }
    }

    /// Timers: queues the state frame for [`BinaryStar::poll_output`] when a heartbeat is due. Call it on every
    /// loop turn; calling it before [`BinaryStar::poll_timeout`] is harmless.
    pub fn handle_timeout(&mut self, now: Instant) {
        if now >= self.next_heartbeat {
            self.next_heartbeat = now + self.heartbeat;
            self.heartbeat_due = true;
        }
    }

    /// The state frame to publish, once per heartbeat that [`BinaryStar::handle_timeout`] found due. It carries the
    /// state at the time of the call, so a transition in between is reported at once.
    pub fn poll_output(&mut self) -> Option<&'static [u8]> {
        std::mem::take(&mut self.heartbeat_due).then(|| self.state.wire())
    }

    /// The next instant the engine needs [`BinaryStar::handle_timeout`] (the next heartbeat); always `Some`,
    /// because the engine heartbeats for as long as it lives.
    pub fn poll_timeout(&self) -> Option<Instant> {
        Some(self.next_heartbeat)
    }

    fn set_state(&mut self, state: State, now: Instant) {
        self.state = state;
        // Tell the peer at once rather than at the next tick; the extra state message is harmless.
        self.next_heartbeat = Instant::min(self.next_heartbeat, now);
    }

    /// The §8.3 table. Returns the transition and whether a client request is served.
    fn execute(&mut self, event: Event, now: Instant) -> Result<(Transition, Vote), BstarError> {
        use Event::*;
        use State::*;
        let expired = self.peer_expired(now);
        let (next, vote) = match (self.state, event) {
            (Primary, PeerBackup) => (Some(Active), Vote::Reject),
            (Primary, PeerActive) => (Some(Passive), Vote::Reject),
            (Primary, ClientRequest) if expired => (Some(Active), Vote::Accept),
            (Primary, ClientRequest) => (None, Vote::Reject),
            (Primary, PeerPrimary | PeerPassive) => (None, Vote::Reject),

            (Backup, PeerActive) => (Some(Passive), Vote::Reject),
            (Backup, ClientRequest) => (None, Vote::Reject),
            (Backup, PeerPrimary | PeerBackup | PeerPassive) => (None, Vote::Reject),

            (Active, PeerActive) => return Err(BstarError::DualActive),
            (Active, ClientRequest) => (None, Vote::Accept),
            (Active, PeerPrimary | PeerBackup | PeerPassive) => (None, Vote::Reject),

            (Passive, PeerPrimary | PeerBackup) => (Some(Active), Vote::Reject),
            (Passive, PeerPassive) => return Err(BstarError::DualPassive),
            (Passive, PeerActive) => (None, Vote::Reject),
            (Passive, ClientRequest) if expired => (Some(Active), Vote::Accept),
            (Passive, ClientRequest) => (None, Vote::Reject),
        };
        let transition = match next {
            Some(state) if state != self.state => {
                tracing::info!(from = ?self.state, to = ?state, ?event, "binary star transition");
                self.set_state(state, now);
                match state {
                    Active => Transition::BecameActive,
                    Passive => Transition::BecamePassive,
                    Primary | Backup => Transition::None,
                }
            }
            _ => Transition::None,
        };
        Ok((transition, vote))
    }
}

/// Where the two state sockets live.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BstarEndpoints {
    /// Our state PUB binds here (Guide: primary `tcp://*:5003`, backup `tcp://*:5004`).
    pub state_bind: String,
    /// Our state SUB connects here (the peer's state PUB).
    pub state_peer: String,
}

#[cfg(test)]
// A test reads the clock once for an origin and moves simulated time on from there; the engine never reads it.
#[allow(clippy::disallowed_methods)]
mod tests {
    use super::*;

    /// One loop turn's timer step: the state frame if a heartbeat was due at `now`.
    fn heartbeat(e: &mut BinaryStar, now: Instant) -> Option<&'static [u8]> {
        e.handle_timeout(now);
        e.poll_output()
    }

    const HB: Duration = Duration::from_millis(1000);

    fn cfg() -> BstarConfig {
        BstarConfig::default()
    }

    /// An engine forced into `state`, with a fresh (not expired) peer at `t0`.
    fn engine_in(state: State, t0: Instant) -> BinaryStar {
        let role = if state == State::Backup {
            Role::Backup
        } else {
            Role::Primary
        };
        let mut e = BinaryStar::new(role, &cfg(), t0);
        e.state = state;
        e
    }

    const ALL_PEER: [State; 4] = [State::Primary, State::Backup, State::Active, State::Passive];

    #[test]
    fn wire_values_match_the_guide() {
        assert_eq!(State::Primary.wire(), b"1");
        assert_eq!(State::Backup.wire(), b"2");
        assert_eq!(State::Active.wire(), b"3");
        assert_eq!(State::Passive.wire(), b"4");
        assert_eq!(Event::ClientRequest as u8, 5);
        for s in ALL_PEER {
            assert_eq!(State::from_wire(s.wire()), Ok(s));
            assert_eq!(Event::from_peer(s) as u8, s as u8);
        }
        assert!(matches!(
            State::from_wire(b"5"),
            Err(BstarError::BadStateFrame(_))
        ));
        assert!(matches!(
            State::from_wire(b""),
            Err(BstarError::BadStateFrame(_))
        ));
        assert!(matches!(
            State::from_wire(b"33"),
            Err(BstarError::BadStateFrame(_))
        ));
    }

    #[test]
    fn primary_rows() {
        let t0 = Instant::now();
        let mut e = engine_in(State::Primary, t0);
        assert_eq!(
            e.handle_peer_state(t0, State::Backup),
            Ok(Transition::BecameActive)
        );
        assert_eq!(e.state(), State::Active);

        let mut e = engine_in(State::Primary, t0);
        assert_eq!(
            e.handle_peer_state(t0, State::Active),
            Ok(Transition::BecamePassive)
        );
        assert_eq!(e.state(), State::Passive);

        for ignored in [State::Primary, State::Passive] {
            let mut e = engine_in(State::Primary, t0);
            assert_eq!(e.handle_peer_state(t0, ignored), Ok(Transition::None));
            assert_eq!(e.state(), State::Primary);
        }

        // Client request before the peer expired: dropped, stays PRIMARY.
        let mut e = engine_in(State::Primary, t0);
        assert_eq!(
            e.handle_client_request(t0 + HB),
            (Vote::Reject, Transition::None)
        );
        assert_eq!(e.state(), State::Primary);
        // After two silent heartbeats: the client vote makes it ACTIVE and the request is served.
        assert_eq!(
            e.handle_client_request(t0 + 2 * HB),
            (Vote::Accept, Transition::BecameActive)
        );
        assert_eq!(e.state(), State::Active);
    }

    #[test]
    fn backup_rows() {
        let t0 = Instant::now();
        let mut e = engine_in(State::Backup, t0);
        assert_eq!(
            e.handle_peer_state(t0, State::Active),
            Ok(Transition::BecamePassive)
        );
        assert_eq!(e.state(), State::Passive);

        for ignored in [State::Primary, State::Backup, State::Passive] {
            let mut e = engine_in(State::Backup, t0);
            assert_eq!(e.handle_peer_state(t0, ignored), Ok(Transition::None));
            assert_eq!(e.state(), State::Backup);
        }

        // A backup never serves on its own, expired peer or not.
        let mut e = engine_in(State::Backup, t0);
        assert_eq!(
            e.handle_client_request(t0),
            (Vote::Reject, Transition::None)
        );
        assert_eq!(
            e.handle_client_request(t0 + 10 * HB),
            (Vote::Reject, Transition::None)
        );
        assert_eq!(e.state(), State::Backup);
    }

    #[test]
    fn active_rows() {
        let t0 = Instant::now();
        let mut e = engine_in(State::Active, t0);
        assert_eq!(
            e.handle_peer_state(t0, State::Active),
            Err(BstarError::DualActive)
        );
        assert_eq!(e.state(), State::Active);

        for tolerated in [State::Primary, State::Backup, State::Passive] {
            let mut e = engine_in(State::Active, t0);
            assert_eq!(e.handle_peer_state(t0, tolerated), Ok(Transition::None));
            assert_eq!(e.state(), State::Active);
        }

        let mut e = engine_in(State::Active, t0);
        assert_eq!(
            e.handle_client_request(t0),
            (Vote::Accept, Transition::None)
        );
        assert_eq!(
            e.handle_client_request(t0 + 10 * HB),
            (Vote::Accept, Transition::None)
        );
        assert_eq!(e.state(), State::Active);
    }

    #[test]
    fn passive_rows() {
        let t0 = Instant::now();
        for restarted in [State::Primary, State::Backup] {
            let mut e = engine_in(State::Passive, t0);
            assert_eq!(
                e.handle_peer_state(t0, restarted),
                Ok(Transition::BecameActive)
            );
            assert_eq!(e.state(), State::Active);
        }

        let mut e = engine_in(State::Passive, t0);
        assert_eq!(
            e.handle_peer_state(t0, State::Passive),
            Err(BstarError::DualPassive)
        );
        assert_eq!(e.state(), State::Passive);

        let mut e = engine_in(State::Passive, t0);
        assert_eq!(e.handle_peer_state(t0, State::Active), Ok(Transition::None));
        assert_eq!(e.state(), State::Passive);

        // The peer is alive (it just said ACTIVE at t0): requests are rejected until it has been silent 2 beats.
        assert_eq!(
            e.handle_client_request(t0 + HB),
            (Vote::Reject, Transition::None)
        );
        assert_eq!(
            e.handle_client_request(t0 + 2 * HB - Duration::from_millis(1)),
            (Vote::Reject, Transition::None)
        );
        assert_eq!(e.state(), State::Passive);
        // Failover: peer expired and a client votes.
        assert_eq!(
            e.handle_client_request(t0 + 2 * HB),
            (Vote::Accept, Transition::BecameActive)
        );
        assert_eq!(e.state(), State::Active);
    }

    #[test]
    fn passive_never_promotes_itself_without_a_client_vote() {
        let t0 = Instant::now();
        let mut e = engine_in(State::Passive, t0);
        e.handle_peer_state(t0, State::Active).unwrap();
        for step in 0..100u32 {
            let now = t0 + HB * step;
            let _ = heartbeat(&mut e, now);
            assert_eq!(e.state(), State::Passive);
        }
    }

    #[test]
    fn peer_messages_rearm_expiry() {
        let t0 = Instant::now();
        let mut e = engine_in(State::Passive, t0);
        // The active peer keeps talking every heartbeat; client votes keep being rejected.
        for step in 1..10u32 {
            let now = t0 + HB * step;
            e.handle_peer_state(now, State::Active).unwrap();
            assert!(!e.peer_expired(now + HB));
            assert_eq!(
                e.handle_client_request(now + HB),
                (Vote::Reject, Transition::None)
            );
        }
    }

    #[test]
    fn heartbeats_follow_the_interval_and_carry_the_state() {
        let t0 = Instant::now();
        let mut e = BinaryStar::new(Role::Primary, &cfg(), t0);
        assert_eq!(heartbeat(&mut e, t0), Some(&b"1"[..]));
        assert_eq!(heartbeat(&mut e, t0 + HB / 2), None);
        assert_eq!(e.poll_timeout(), Some(t0 + HB));
        assert_eq!(heartbeat(&mut e, t0 + HB), Some(&b"1"[..]));
        // A transition makes the next heartbeat due at once.
        let now = t0 + HB + Duration::from_millis(10);
        assert_eq!(
            e.handle_peer_state(now, State::Backup),
            Ok(Transition::BecameActive)
        );
        assert_eq!(heartbeat(&mut e, now), Some(&b"3"[..]));
    }

    #[test]
    fn pair_scenario_start_failover_and_restart_without_failback() {
        let t0 = Instant::now();
        let c = cfg();
        let mut primary = BinaryStar::new(Role::Primary, &c, t0);
        let mut backup = BinaryStar::new(Role::Backup, &c, t0);
        // Exchange first heartbeats.
        let p = State::from_wire(heartbeat(&mut primary, t0).unwrap()).unwrap();
        let b = State::from_wire(heartbeat(&mut backup, t0).unwrap()).unwrap();
        assert_eq!(
            primary.handle_peer_state(t0, b),
            Ok(Transition::BecameActive)
        );
        assert_eq!(backup.handle_peer_state(t0, p), Ok(Transition::None));
        let t1 = t0 + HB;
        let p = State::from_wire(heartbeat(&mut primary, t1).unwrap()).unwrap();
        assert_eq!(
            backup.handle_peer_state(t1, p),
            Ok(Transition::BecamePassive)
        );
        assert_eq!(
            primary.handle_client_request(t1),
            (Vote::Accept, Transition::None)
        );
        assert_eq!(
            backup.handle_client_request(t1),
            (Vote::Reject, Transition::None)
        );

        // Primary dies at t1. Clients vote at the backup: rejected until 2 beats of silence.
        assert_eq!(
            backup.handle_client_request(t1 + HB),
            (Vote::Reject, Transition::None)
        );
        let t2 = t1 + 2 * HB;
        assert_eq!(
            backup.handle_client_request(t2),
            (Vote::Accept, Transition::BecameActive)
        );

        // Primary restarts: sees ACTIVE backup → PASSIVE; no failback.
        let t3 = t2 + HB;
        let mut primary = BinaryStar::new(Role::Primary, &c, t3);
        let p = State::from_wire(heartbeat(&mut primary, t3).unwrap()).unwrap();
        assert_eq!(backup.handle_peer_state(t3, p), Ok(Transition::None));
        let b = State::from_wire(heartbeat(&mut backup, t3).unwrap()).unwrap();
        assert_eq!(
            primary.handle_peer_state(t3, b),
            Ok(Transition::BecamePassive)
        );
        assert_eq!(
            primary.handle_client_request(t3),
            (Vote::Reject, Transition::None)
        );
        assert_eq!(backup.state(), State::Active);
        assert_eq!(primary.state(), State::Passive);
    }
}
