//! What the ZAP handler decided, per role, for summaries, `--json` and live lines. Handshakes are rare next to
//! messages, so a mutex is fine here; nothing on a data path touches it.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use serde::Serialize;

use crate::policy::Refusal;

/// Shared counters; cloning shares them.
#[derive(Debug, Clone, Default)]
pub struct AuthStats {
    inner: Arc<Mutex<Counters>>,
}

#[derive(Debug, Default)]
struct Counters {
    by_role: BTreeMap<String, RoleCounts>,
    last_refused: Option<RefusedPeer>,
    refused_by_reason: BTreeMap<&'static str, u64>,
    forged: u64,
    unauthorised: u64,
    workers_refused: u64,
    revoked: u64,
    sessions_reset: BTreeMap<String, u64>,
}

/// Decisions for one role (ZAP domain).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct RoleCounts {
    /// Handshakes let in.
    pub accepted: u64,
    /// Handshakes refused.
    pub refused: u64,
}

/// The most recent refusal, with the peer it came from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RefusedPeer {
    /// The role whose socket refused it.
    pub role: String,
    /// The peer's address (empty for ipc).
    pub address: String,
    /// Why.
    pub reason: Refusal,
}

/// A snapshot for a summary: totals, per role, and the last refused peer.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct AuthSummary {
    /// Handshakes let in, all roles.
    pub auth_accepted: u64,
    /// Handshakes refused, all roles.
    pub auth_refused: u64,
    /// Messages refused after the handshake because their publisher id is not bound to the sender's key.
    pub forged_refused: u64,
    /// Control requests refused by authorisation (an error reply was sent), revoked keys' requests included.
    pub unauthorised_refused: u64,
    /// Handshakes refused, by reason (`unknown_key`, `no_curve`, `wrong_server_key`, `connection_cap`, ...).
    pub refused_by_reason: BTreeMap<String, u64>,
    /// Peers refused as servers of a control service (an MDP `READY`, a queue backend's worker) because no `serve`
    /// grant names their key; each was sent a disconnect.
    pub workers_refused: u64,
    /// Control messages refused because their key has left the allow directory since its handshake.
    pub revoked_refused: u64,
    /// Times a data-plane socket closed its live sessions because a key left the allow directory, per role.
    pub sessions_reset: BTreeMap<String, u64>,
    /// Per role.
    pub by_role: BTreeMap<String, RoleCounts>,
    /// The most recent refusal whose peer address is known (or the most recent at all, when none is).
    pub last_refused: Option<RefusedPeer>,
}

impl AuthSummary {
    /// One line for text summaries, e.g. `auth: 3 accepted, 2 refused (last: 10.0.0.9 on lvc.upstream, key
    /// not allowed)`.
    pub fn line(&self) -> String {
        let mut line = format!(
            "auth: {} accepted, {} refused",
            self.auth_accepted, self.auth_refused
        );
        if let Some(last) = &self.last_refused {
            let peer = if last.address.is_empty() {
                "local peer"
            } else {
                &last.address
            };
            line.push_str(&format!(
                " (last: {peer} on {}, {})",
                last.role,
                last.reason.as_str()
            ));
        }
        if self.forged_refused > 0 {
            line.push_str(&format!(
                ", {} forged messages refused",
                self.forged_refused
            ));
        }
        if self.unauthorised_refused > 0 {
            line.push_str(&format!(
                ", {} unauthorised requests refused",
                self.unauthorised_refused
            ));
        }
        if self.revoked_refused > 0 {
            line.push_str(&format!(" ({} from revoked keys)", self.revoked_refused));
        }
        if self.workers_refused > 0 {
            line.push_str(&format!(
                ", {} workers refused (no serve grant)",
                self.workers_refused
            ));
        }
        let resets: u64 = self.sessions_reset.values().sum();
        if resets > 0 {
            line.push_str(&format!(
                ", live sessions closed {resets} time(s) after a revocation"
            ));
        }
        if self.auth_refused > 0 {
            let reasons: Vec<String> = self
                .refused_by_reason
                .iter()
                .map(|(k, v)| format!("{k} {v}"))
                .collect();
            line.push_str(&format!("; refused by reason: {}", reasons.join(", ")));
        }
        line
    }
}

impl AuthStats {
    /// Counts a handshake decision.
    pub fn record(&self, role: &str, address: &str, refusal: Option<Refusal>) {
        let mut c = self.lock();
        let counts = c.by_role.entry(role.to_string()).or_default();
        match refusal {
            None => counts.accepted += 1,
            Some(reason) => {
                counts.refused += 1;
                *c.refused_by_reason.entry(reason.key()).or_default() += 1;
                // A refusal seen only through a socket monitor has no address; it does not hide the last peer
                // whose address is known, which is what an operator needs to act on.
                if address.is_empty()
                    && c.last_refused
                        .as_ref()
                        .is_some_and(|l| !l.address.is_empty())
                {
                    return;
                }
                c.last_refused = Some(RefusedPeer {
                    role: role.to_string(),
                    address: address.to_string(),
                    reason,
                });
            }
        }
    }

    /// Counts `n` messages refused for a publisher id not bound to the sender.
    pub fn record_forged(&self, n: u64) {
        self.lock().forged += n;
    }

    /// Counts one control request refused by authorisation.
    pub fn record_unauthorised(&self) {
        self.lock().unauthorised += 1;
    }

    /// Counts a peer refused as a service's worker (no `serve` grant).
    pub fn record_worker_refused(&self) {
        self.lock().workers_refused += 1;
    }

    /// Counts a control message from a key no longer listed (also an unauthorised request).
    pub fn record_revoked(&self) {
        let mut c = self.lock();
        c.revoked += 1;
        c.unauthorised += 1;
    }

    /// Counts one closing of `role`'s live sessions after a revocation.
    pub fn record_sessions_reset(&self, role: &str) {
        *self
            .lock()
            .sessions_reset
            .entry(role.to_string())
            .or_default() += 1;
    }

    /// The totals now.
    pub fn summary(&self) -> AuthSummary {
        let c = self.lock();
        AuthSummary {
            auth_accepted: c.by_role.values().map(|r| r.accepted).sum(),
            auth_refused: c.by_role.values().map(|r| r.refused).sum(),
            forged_refused: c.forged,
            unauthorised_refused: c.unauthorised,
            refused_by_reason: c
                .refused_by_reason
                .iter()
                .map(|(k, v)| (k.to_string(), *v))
                .collect(),
            workers_refused: c.workers_refused,
            revoked_refused: c.revoked,
            sessions_reset: c.sessions_reset.clone(),
            by_role: c.by_role.clone(),
            last_refused: c.last_refused.clone(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Counters> {
        // A panic while counting cannot leave the counters half-written in a way that matters: keep counting.
        self.inner
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}
