//! Per-socket caps on concurrent connections, sans-IO: a bound socket's monitor events (a connection accepted, a
//! connection gone) in, the ZAP handler's question "may this handshake proceed?" answered. Every peer connection
//! costs the server a file descriptor and buffers; without a cap, a peer that opens connections and leaves them
//! idle fills the process's descriptors and the next honest subscriber gets nothing.
//!
//! libzmq gives an application no way to close one chosen connection of a socket, so the oldest idle peer cannot
//! be made to go: what a cap can do is refuse the new one. It is refused at its handshake (ZAP answers 400), which
//! makes libzmq close that connection at once; the connections already admitted keep working.
//!
//! The count is of connections accepted and not yet gone, per role (ZAP domain), by file descriptor: the monitor
//! reports both with the descriptor, so a disconnection is counted once even when libzmq reports it twice, and
//! one of a connection made by the socket itself (not accepted) is ignored. A refused connection counts while it
//! exists (it holds a descriptor) and leaves when libzmq closes it.
#![deny(clippy::disallowed_methods, clippy::disallowed_types)]

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;

/// The connections of one role's sockets.
#[derive(Debug, Clone, Default)]
struct RoleConnections {
    /// Most connections admitted at once; `None`: no cap (counted all the same).
    max: Option<u64>,
    /// Descriptors of the connections accepted and not yet gone.
    live: BTreeSet<i32>,
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
    /// Connections open now.
    pub connections: u64,
    /// Most open at once.
    pub peak_connections: u64,
    /// Handshakes let through by the cap.
    pub admitted: u64,
    /// Handshakes refused because the cap was reached.
    pub refused_over_cap: u64,
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

    /// A connection was accepted on one of `role`'s sockets (monitor `ACCEPTED`, its descriptor).
    pub fn accepted(&mut self, role: &str, fd: i32) {
        if let Some(r) = self.roles.get_mut(role) {
            r.live.insert(fd);
            r.peak = r.peak.max(r.live.len() as u64);
        }
    }

    /// A connection of `role`'s sockets is gone (monitor `DISCONNECTED` or `CLOSED`, its descriptor).
    pub fn gone(&mut self, role: &str, fd: i32) {
        if let Some(r) = self.roles.get_mut(role) {
            r.live.remove(&fd);
        }
    }

    /// A handshake on one of `role`'s sockets asks to proceed: false (and counted) when the connections open,
    /// this one included, exceed the cap. Roles without a cap always proceed.
    pub fn admit(&mut self, role: &str) -> bool {
        let Some(r) = self.roles.get_mut(role) else {
            return true;
        };
        let Some(max) = r.max else {
            r.admitted += 1;
            return true;
        };
        // The connection asking is already among `live` (accepted before its handshake), or, when its event is
        // still on the way, about to be: either way it is the (live + 1)th at most.
        if r.live.len() as u64 > max {
            r.refused += 1;
            false
        } else {
            r.admitted += 1;
            true
        }
    }

    /// Connections of `role` open now (0 for a role without a cap).
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
mod tests {
    use super::*;

    #[test]
    fn a_cap_refuses_the_connections_past_it_and_admits_again_once_some_leave() {
        let mut caps = ConnectionCaps::default();
        caps.set_cap("lvc.downstream", 2);
        for fd in [10, 11] {
            caps.accepted("lvc.downstream", fd);
            assert!(caps.admit("lvc.downstream"));
        }
        for fd in [12, 13, 14] {
            caps.accepted("lvc.downstream", fd);
            assert!(!caps.admit("lvc.downstream"), "fd {fd}");
            // Refused: libzmq closes it.
            caps.gone("lvc.downstream", fd);
        }
        let s = &caps.summary()["lvc.downstream"];
        assert_eq!((s.connections, s.admitted, s.refused_over_cap), (2, 2, 3));
        assert_eq!(s.peak_connections, 3);
        // One leaves (reported twice, as libzmq may): exactly one place opens.
        caps.gone("lvc.downstream", 10);
        caps.gone("lvc.downstream", 10);
        caps.accepted("lvc.downstream", 15);
        assert!(caps.admit("lvc.downstream"));
        caps.accepted("lvc.downstream", 16);
        assert!(!caps.admit("lvc.downstream"));
    }

    #[test]
    fn a_handshake_whose_accept_event_is_late_still_counts_as_one_more() {
        let mut caps = ConnectionCaps::default();
        caps.set_cap("clone.snapshot", 1);
        // Its ACCEPTED event not read yet: the connection asking is the first.
        assert!(caps.admit("clone.snapshot"));
        caps.accepted("clone.snapshot", 7);
        caps.accepted("clone.snapshot", 8);
        assert!(!caps.admit("clone.snapshot"));
    }

    #[test]
    fn roles_without_a_cap_are_untouched_and_not_summarised() {
        let mut caps = ConnectionCaps::default();
        caps.accepted("broker", 3);
        assert!(caps.admit("broker"));
        assert!(!caps.any());
        assert!(caps.summary().is_empty());
        caps.set_cap("lvc", 5);
        caps.set_cap("lvc", 0);
        assert!(!caps.any());
        assert_eq!(caps.cap_of("lvc"), None);
    }
}
