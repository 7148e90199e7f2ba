//! How the ZAP handler's decisions and the connection caps read in each command's live line and summary. Without
//! `[security]` (nothing checked, no cap) every output stays exactly as it was: each function says `None` or "".

use std::collections::BTreeMap;

use crate::{AuthSummary, RoleConnectionCounts, Security};

impl AuthSummary {
    /// `, auth_refused N (last PEER)` for a live line.
    pub fn live_suffix(&self) -> String {
        match &self.last_refused {
            Some(last) if !last.address.is_empty() => {
                format!(
                    ", auth_refused {} (last {})",
                    self.auth_refused, last.address
                )
            }
            _ => format!(", auth_refused {}", self.auth_refused),
        }
    }
}

/// `connections: lvc.downstream 3 open (peak 5, max 4), 2 refused over the cap; ...`: every capped role.
pub fn connections_line(roles: &BTreeMap<String, RoleConnectionCounts>) -> String {
    let parts: Vec<String> = roles
        .iter()
        .map(|(role, c)| {
            let handshaking = if c.handshaking > 0 {
                format!(", {} handshaking", c.handshaking)
            } else {
                String::new()
            };
            format!(
                "{role} {} open (peak {}, max {}){handshaking}, {} refused over the cap",
                c.connections, c.peak_connections, c.max_connections, c.refused_over_cap
            )
        })
        .collect();
    format!("connections: {}", parts.join("; "))
}

impl Security {
    /// The summary line (`auth: 3 accepted, 1 refused (last: …)`), when anything is checked.
    pub fn summary_line(&self) -> Option<String> {
        self.summary().map(|s| s.line())
    }

    /// [`AuthSummary::live_suffix`], or "" when nothing is checked.
    pub fn live_suffix(&self) -> String {
        self.summary().map_or_else(String::new, |s| s.live_suffix())
    }

    /// [`connections_line`], when a connection cap is set (`max_connections`).
    pub fn connections_line(&self) -> Option<String> {
        self.connections().map(|roles| connections_line(&roles))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::Refusal;
    use crate::stats::RefusedPeer;

    #[test]
    fn the_live_suffix_names_the_last_refused_peer_when_known() {
        let mut s = AuthSummary {
            auth_refused: 2,
            ..AuthSummary::default()
        };
        assert_eq!(s.live_suffix(), ", auth_refused 2");
        s.last_refused = Some(RefusedPeer {
            role: "lvc.upstream".into(),
            address: String::new(),
            reason: Refusal::UnknownKey,
        });
        assert_eq!(s.live_suffix(), ", auth_refused 2");
        s.last_refused = Some(RefusedPeer {
            role: "lvc.upstream".into(),
            address: "10.0.0.9".into(),
            reason: Refusal::UnknownKey,
        });
        assert_eq!(s.live_suffix(), ", auth_refused 2 (last 10.0.0.9)");
    }

    #[test]
    fn the_connections_line_lists_every_role() {
        let mut roles = BTreeMap::new();
        roles.insert(
            "lvc.downstream".to_owned(),
            RoleConnectionCounts {
                max_connections: 4,
                connections: 3,
                handshaking: 0,
                peak_connections: 5,
                admitted: 9,
                refused_over_cap: 2,
            },
        );
        roles.insert(
            "lvc.tap".to_owned(),
            RoleConnectionCounts {
                max_connections: 1,
                ..RoleConnectionCounts::default()
            },
        );
        assert_eq!(
            connections_line(&roles),
            "connections: lvc.downstream 3 open (peak 5, max 4), 2 refused over the cap; \
             lvc.tap 0 open (peak 0, max 1), 0 refused over the cap"
        );
    }

    #[test]
    fn nothing_shows_without_security() {
        let security = Security::default();
        assert_eq!(security.summary_line(), None);
        assert_eq!(security.live_suffix(), "");
        assert_eq!(security.connections_line(), None);
    }
}
