//! Per-socket caps on concurrent sessions, sans-IO: a bound socket's monitor events (a connection accepted, its
//! handshake done, a connection gone) in, the ZAP handler's question "may this handshake proceed?" answered. Every
//! peer session costs the server a file descriptor and buffers; without a cap, a peer that opens sessions and
//! leaves them idle fills the process's descriptors and the next honest subscriber gets nothing.
//!
//! libzmq gives an application no way to close one chosen connection of a socket, so the oldest idle peer cannot
//! be made to go: what a cap can do is refuse the new one. It is refused at its handshake (ZAP answers 400), which
//! makes libzmq close that connection at once; the sessions already admitted keep working.
//!
//! The cap counts authenticated sessions only (handshake done, by file descriptor, until gone) plus the handshakes
//! ZAP has admitted and libzmq has not finished yet. A connection that never completes a handshake (a keyless
//! flood of plain TCP connections) holds no place: it is bounded instead by the short handshake timeout capped
//! sockets get ([`CAPPED_HANDSHAKE_TIMEOUT`]), after which libzmq closes it. Counting raw connections would let
//! sixty idle TCP connections lock every listed reader out until libzmq's default 30 s timeout.
#![deny(clippy::disallowed_methods, clippy::disallowed_types)]

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::time::{Duration, Instant};

use serde::Serialize;

/// `ZMQ_HANDSHAKE_IVL` on a capped socket: how long a connection may take to finish its handshake before libzmq
/// closes it. libzmq's default is 30 s; a CURVE handshake takes a few round trips.
pub const CAPPED_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);

/// How long an admitted handshake holds its place while libzmq finishes it (it reports the session a moment
/// after ZAP answers; one that dies in between frees its place after this).
const ADMITTED_HOLDS_FOR: Duration = Duration::from_secs(2);

/// The sessions of one role's sockets.
#[derive(Debug, Clone, Default)]
struct RoleConnections {
    /// Most sessions at once; `None`: no cap (counted all the same).
    max: Option<u64>,
    /// Descriptors of connections accepted whose handshake is not done.
    handshaking: BTreeSet<i32>,
    /// Descriptors of authenticated sessions not yet gone.
    live: BTreeSet<i32>,
    /// When each handshake ZAP admitted and libzmq has not reported done was admitted.
    admitted_pending: VecDeque<Instant>,
    peak: u64,
    admitted: u64,
    refused: u64,
}

/// Connection counts and caps for every role that has one.
#[derive(Debug, Clone, Default)]
pub struct ConnectionCaps {
    roles: BTreeMap<String, RoleConnections>,
}

/// What one role's connections look like, for summaries and `--json`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct RoleConnectionCounts {
    /// The cap (`max_connections`).
    pub max_connections: u64,
    /// Authenticated sessions open now.
    pub connections: u64,
    /// Connections accepted whose handshake is not done (they hold no place under the cap).
    pub handshaking: u64,
    /// Most sessions open at once.
    pub peak_connections: u64,
    /// Handshakes let through by the cap.
    pub admitted: u64,
    /// Handshakes refused because the cap was reached.
    pub refused_over_cap: u64,
}

impl RoleConnections {
    /// Forgets admitted handshakes older than [`ADMITTED_HOLDS_FOR`]: their connections died before libzmq
    /// reported them done.
    fn expire(&mut self, now: Instant) {
        while self
            .admitted_pending
            .front()
            .is_some_and(|t| now.saturating_duration_since(*t) > ADMITTED_HOLDS_FOR)
        {
            self.admitted_pending.pop_front();
        }
    }
}

impl ConnectionCaps {
    /// Caps `role`'s sockets at `max` concurrent connections (0 removes the cap).
    pub fn set_cap(&mut self, role: &str, max: u64) {
        let r = self.roles.entry(role.to_string()).or_default();
        r.max = (max > 0).then_some(max);
    }

    /// The cap that applies to `role`, if any.
    pub fn cap_of(&self, role: &str) -> Option<u64> {
        self.roles.get(role).and_then(|r| r.max)
    }

    /// A connection was accepted on one of `role`'s sockets (monitor `ACCEPTED`, its descriptor): it handshakes.
    pub fn accepted(&mut self, role: &str, fd: i32) {
        if let Some(r) = self.roles.get_mut(role) {
            r.handshaking.insert(fd);
        }
    }

    /// A connection of `role`'s sockets finished its handshake (monitor `HANDSHAKE_SUCCEEDED`): a session.
    pub fn authenticated(&mut self, role: &str, fd: i32, now: Instant) {
        if let Some(r) = self.roles.get_mut(role) {
            r.handshaking.remove(&fd);
            r.live.insert(fd);
            r.expire(now);
            r.admitted_pending.pop_front();
            r.peak = r.peak.max(r.live.len() as u64);
        }
    }

    /// A connection of `role`'s sockets is gone (monitor `DISCONNECTED` or `CLOSED`, its descriptor).
    pub fn gone(&mut self, role: &str, fd: i32) {
        if let Some(r) = self.roles.get_mut(role) {
            r.handshaking.remove(&fd);
            r.live.remove(&fd);
        }
    }

    /// A handshake on one of `role`'s sockets asks to proceed: false (and counted) when the sessions open plus
    /// the handshakes admitted and not yet done reach the cap. Roles without a cap always proceed.
    pub fn admit(&mut self, role: &str, now: Instant) -> bool {
        let Some(r) = self.roles.get_mut(role) else {
            return true;
        };
        let Some(max) = r.max else {
            r.admitted += 1;
            return true;
        };
        r.expire(now);
        if (r.live.len() + r.admitted_pending.len()) as u64 >= max {
            r.refused += 1;
            false
        } else {
            r.admitted_pending.push_back(now);
            r.admitted += 1;
            true
        }
    }

    /// Sessions of `role` open now (0 for a role without a cap).
    pub fn open(&self, role: &str) -> u64 {
        self.roles.get(role).map_or(0, |r| r.live.len() as u64)
    }

    /// Counts per capped role.
    pub fn summary(&self) -> BTreeMap<String, RoleConnectionCounts> {
        self.roles
            .iter()
            .filter_map(|(role, r)| {
                Some((
                    role.clone(),
                    RoleConnectionCounts {
                        max_connections: r.max?,
                        connections: r.live.len() as u64,
                        handshaking: r.handshaking.len() as u64,
                        peak_connections: r.peak,
                        admitted: r.admitted,
                        refused_over_cap: r.refused,
                    },
                ))
            })
            .collect()
    }

    /// True when some role has a cap.
    pub fn any(&self) -> bool {
        self.roles.values().any(|r| r.max.is_some())
    }
}

#[cfg(test)]
#[allow(clippy::disallowed_methods)] // tests take one real instant as their clock's origin
mod tests {
    use super::*;

    /// Accepted, admitted by ZAP, and reported done: one session.
    fn session(caps: &mut ConnectionCaps, role: &str, fd: i32, now: Instant) -> bool {
        caps.accepted(role, fd);
        let admitted = caps.admit(role, now);
        if admitted {
            caps.authenticated(role, fd, now);
        } else {
            caps.gone(role, fd);
        }
        admitted
    }

    #[test]
    fn a_cap_refuses_the_sessions_past_it_and_admits_again_once_some_leave() {
        let now = Instant::now();
        let mut caps = ConnectionCaps::default();
        caps.set_cap("lvc.downstream", 2);
        for fd in [10, 11] {
            assert!(session(&mut caps, "lvc.downstream", fd, now));
        }
        for fd in [12, 13, 14] {
            assert!(!session(&mut caps, "lvc.downstream", fd, now), "fd {fd}");
        }
        let s = &caps.summary()["lvc.downstream"];
        assert_eq!((s.connections, s.admitted, s.refused_over_cap), (2, 2, 3));
        assert_eq!((s.peak_connections, s.handshaking), (2, 0));
        // One leaves (reported twice, as libzmq may): exactly one place opens.
        caps.gone("lvc.downstream", 10);
        caps.gone("lvc.downstream", 10);
        assert!(session(&mut caps, "lvc.downstream", 15, now));
        assert!(!session(&mut caps, "lvc.downstream", 16, now));
    }

    #[test]
    fn connections_that_never_handshake_hold_no_place() {
        let now = Instant::now();
        let mut caps = ConnectionCaps::default();
        caps.set_cap("lvc.downstream", 2);
        // Sixty plain TCP connections, no handshake: accepted, never reported done.
        for fd in 100..160 {
            caps.accepted("lvc.downstream", fd);
        }
        assert!(
            session(&mut caps, "lvc.downstream", 7, now),
            "a listed reader is served"
        );
        let s = &caps.summary()["lvc.downstream"];
        assert_eq!((s.connections, s.handshaking), (1, 60));
        // libzmq's handshake timeout closes them.
        for fd in 100..160 {
            caps.gone("lvc.downstream", fd);
        }
        assert_eq!(caps.summary()["lvc.downstream"].handshaking, 0);
    }

    #[test]
    fn an_admitted_handshake_holds_its_place_until_done_or_stale() {
        let now = Instant::now();
        let mut caps = ConnectionCaps::default();
        caps.set_cap("clone.snapshot", 1);
        assert!(caps.admit("clone.snapshot", now));
        assert!(
            !caps.admit("clone.snapshot", now),
            "the first is not reported done yet but holds the place"
        );
        let later = now + ADMITTED_HOLDS_FOR + Duration::from_millis(1);
        assert!(
            caps.admit("clone.snapshot", later),
            "one that died before it was done frees its place"
        );
        caps.authenticated("clone.snapshot", 8, later);
        assert!(!caps.admit("clone.snapshot", later));
    }

    #[test]
    fn roles_without_a_cap_are_untouched_and_not_summarised() {
        let mut caps = ConnectionCaps::default();
        caps.accepted("broker", 3);
        assert!(caps.admit("broker", Instant::now()));
        assert!(!caps.any());
        assert!(caps.summary().is_empty());
        caps.set_cap("lvc", 5);
        caps.set_cap("lvc", 0);
        assert!(!caps.any());
        assert_eq!(caps.cap_of("lvc"), None);
    }
}
