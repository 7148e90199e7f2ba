//! Per-socket caps on concurrent sessions, sans-IO: a bound socket's monitor events (a connection accepted, its
//! handshake done, a connection gone) in, the ZAP handler's question "may this handshake proceed?" answered. Every
//! peer session costs the server a file descriptor and buffers; without a cap, a peer that opens sessions and
//! leaves them idle fills the process's descriptors and the next honest subscriber gets nothing.
//!
//! libzmq gives an application no way to close one chosen connection of a socket, so the oldest idle peer cannot
//! be made to go: what a cap can do is refuse the new one. It is refused at its handshake (ZAP answers 400), which
//! makes libzmq close that connection at once; the sessions already admitted keep working.
//!
//! The cap counts sessions, not raw connections: a connection that never completes its handshake (a keyless flood
//! of plain TCP connections) must not hold a place. libzmq's monitor names a connection's descriptor when it is
//! accepted and when it is gone, but not when its handshake succeeds, and a ZAP request names no descriptor, so
//! which connection ZAP admitted cannot be read. Each admission is given to the youngest connection not yet
//! admitted (the one most likely to be asking: a handshake follows its accept within a round trip), and a capped
//! socket closes every connection whose handshake is not done after [`CAPPED_HANDSHAKE_TIMEOUT`], so a connection
//! older than that is a session whatever was guessed. A guess that picked the wrong young connection is corrected
//! by that timeout at the latest. Sixty idle TCP connections hold no place, and libzmq closes them after it.
#![deny(clippy::disallowed_methods, clippy::disallowed_types)]

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use serde::Serialize;

/// `ZMQ_HANDSHAKE_IVL` on a capped socket: how long a connection may take to finish its handshake before libzmq
/// closes it. libzmq's default is 30 s; a CURVE handshake takes a few round trips.
pub const CAPPED_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);

/// One connection of a capped socket.
#[derive(Debug, Clone, Copy)]
struct Connection {
    accepted: Instant,
    /// Given one of ZAP's admissions: a session from then on.
    admitted: bool,
}

/// The connections of one role's sockets.
#[derive(Debug, Clone, Default)]
struct RoleConnections {
    /// Most sessions at once; `None`: no cap (counted all the same).
    max: Option<u64>,
    /// The connections accepted and not yet gone, by descriptor.
    live: BTreeMap<i32, Connection>,
    /// Admissions whose connection's accept has not been read yet (given to the next one accepted).
    unplaced: u64,
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
    /// (sessions, connections still handshaking) at `now`: a connection is a session once admitted or once older
    /// than the handshake timeout.
    fn split(&self, now: Instant) -> (u64, u64) {
        let sessions = self
            .live
            .values()
            .filter(|c| {
                c.admitted || now.saturating_duration_since(c.accepted) >= CAPPED_HANDSHAKE_TIMEOUT
            })
            .count() as u64
            + self.unplaced;
        let open = self.live.len() as u64 + self.unplaced;
        (sessions, open - sessions)
    }

    /// Gives an admission to the youngest connection not yet admitted, or keeps it for the next accept.
    fn place_admission(&mut self) {
        let youngest = self
            .live
            .iter_mut()
            .filter(|(_, c)| !c.admitted)
            .max_by_key(|(_, c)| c.accepted);
        match youngest {
            Some((_, c)) => c.admitted = true,
            None => self.unplaced += 1,
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

    /// A connection was accepted on one of `role`'s sockets at `now` (monitor `ACCEPTED`, its descriptor).
    pub fn accepted(&mut self, role: &str, fd: i32, now: Instant) {
        if let Some(r) = self.roles.get_mut(role) {
            let admitted = r.unplaced > 0;
            r.unplaced = r.unplaced.saturating_sub(1);
            r.live.insert(
                fd,
                Connection {
                    accepted: now,
                    admitted,
                },
            );
        }
    }

    /// A connection of `role`'s sockets is gone (monitor `DISCONNECTED` or `CLOSED`, its descriptor).
    pub fn gone(&mut self, role: &str, fd: i32) {
        if let Some(r) = self.roles.get_mut(role) {
            r.live.remove(&fd);
        }
    }

    /// A handshake on one of `role`'s sockets, which the policy admits, asks to proceed: false (and counted)
    /// when the role's sessions have reached the cap. Roles without a cap always proceed.
    pub fn admit(&mut self, role: &str, now: Instant) -> bool {
        let Some(r) = self.roles.get_mut(role) else {
            return true;
        };
        let Some(max) = r.max else {
            r.admitted += 1;
            return true;
        };
        let (sessions, _) = r.split(now);
        if sessions >= max {
            r.refused += 1;
            false
        } else {
            r.place_admission();
            r.admitted += 1;
            r.peak = r.peak.max(sessions + 1);
            true
        }
    }

    /// Connections of `role` open now, sessions and handshaking alike (0 for a role without a cap).
    pub fn open(&self, role: &str) -> u64 {
        self.roles.get(role).map_or(0, |r| r.live.len() as u64)
    }

    /// Counts per capped role at `now`.
    pub fn summary(&self, now: Instant) -> BTreeMap<String, RoleConnectionCounts> {
        self.roles
            .iter()
            .filter_map(|(role, r)| {
                let (sessions, handshaking) = r.split(now);
                Some((
                    role.clone(),
                    RoleConnectionCounts {
                        max_connections: r.max?,
                        connections: sessions,
                        handshaking,
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

    /// Accepted at `now` and asking ZAP at once; refused ones are closed by libzmq.
    fn session(caps: &mut ConnectionCaps, role: &str, fd: i32, now: Instant) -> bool {
        caps.accepted(role, fd, now);
        let admitted = caps.admit(role, now);
        if !admitted {
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
        let later = now + CAPPED_HANDSHAKE_TIMEOUT;
        let s = &caps.summary(later)["lvc.downstream"];
        assert_eq!((s.connections, s.admitted, s.refused_over_cap), (2, 2, 3));
        assert_eq!((s.peak_connections, s.handshaking), (2, 0));
        // One leaves (reported twice, as libzmq may): exactly one place opens.
        caps.gone("lvc.downstream", 10);
        caps.gone("lvc.downstream", 10);
        assert!(session(&mut caps, "lvc.downstream", 15, later));
        assert!(!session(&mut caps, "lvc.downstream", 16, later));
    }

    #[test]
    fn connections_that_never_handshake_hold_no_place() {
        let now = Instant::now();
        let mut caps = ConnectionCaps::default();
        caps.set_cap("lvc.downstream", 2);
        // Sixty plain TCP connections, no handshake: accepted, never admitted.
        for fd in 100..160 {
            caps.accepted("lvc.downstream", fd, now);
        }
        assert!(
            session(&mut caps, "lvc.downstream", 7, now),
            "a listed reader is served"
        );
        assert!(session(&mut caps, "lvc.downstream", 8, now), "and a second");
        assert!(
            !session(&mut caps, "lvc.downstream", 9, now),
            "the cap still holds"
        );
        let s = &caps.summary(now)["lvc.downstream"];
        assert_eq!((s.connections, s.handshaking), (2, 60));
        // libzmq's handshake timeout closes the flood; the sessions stay, counted by age.
        for fd in 100..160 {
            caps.gone("lvc.downstream", fd);
        }
        let s = &caps.summary(now + CAPPED_HANDSHAKE_TIMEOUT)["lvc.downstream"];
        assert_eq!((s.connections, s.handshaking), (2, 0));
    }

    #[test]
    fn an_admitted_handshake_holds_its_place_before_its_accept_event_is_read() {
        let now = Instant::now();
        let mut caps = ConnectionCaps::default();
        caps.set_cap("clone.snapshot", 1);
        caps.accepted("clone.snapshot", 7, now);
        assert!(caps.admit("clone.snapshot", now));
        caps.accepted("clone.snapshot", 8, now);
        assert!(!caps.admit("clone.snapshot", now));
        // The first leaves at once: its place is free at once, not after the handshake timeout.
        caps.gone("clone.snapshot", 7);
        assert!(caps.admit("clone.snapshot", now));
    }

    #[test]
    fn an_admission_read_before_its_accept_goes_to_the_next_connection() {
        let now = Instant::now();
        let mut caps = ConnectionCaps::default();
        caps.set_cap("lvc", 1);
        assert!(caps.admit("lvc", now));
        assert!(
            !caps.admit("lvc", now),
            "the unplaced admission holds the place"
        );
        caps.accepted("lvc", 5, now);
        caps.gone("lvc", 5);
        assert!(
            caps.admit("lvc", now),
            "the place follows the connection it was given to"
        );
    }

    #[test]
    fn roles_without_a_cap_are_untouched_and_not_summarised() {
        let now = Instant::now();
        let mut caps = ConnectionCaps::default();
        caps.accepted("broker", 3, now);
        assert!(caps.admit("broker", now));
        assert!(!caps.any());
        assert!(caps.summary(now).is_empty());
        caps.set_cap("lvc", 5);
        caps.set_cap("lvc", 0);
        assert!(!caps.any());
        assert_eq!(caps.cap_of("lvc"), None);
    }
}
