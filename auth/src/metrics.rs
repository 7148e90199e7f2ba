//! `[security]`'s counts as metrics, for every command's `--metrics`: handshakes let in and refused per socket
//! role (the ZAP domain), messages refused as forged, control requests refused as unauthorised, and the
//! connection caps. Read from the ZAP handler's shared counts at scrape time.

use tickbox_metrics::{Scrape, Source};

use crate::Security;

/// The [`Source`] of a process's `[security]` counts; it adds nothing when nothing is checked.
#[derive(Debug, Clone)]
pub struct AuthMetrics(pub Security);

impl Source for AuthMetrics {
    fn collect(&self, out: &mut Scrape) {
        if let Some(s) = self.0.summary() {
            for (socket_role, c) in &s.by_role {
                let labels = [("socket_role", socket_role.clone())];
                out.counter(
                    "tickbox_auth_accepted",
                    "Handshakes ZAP let in, by the accepting socket's role.",
                    &labels,
                    c.accepted,
                );
                out.counter(
                    "tickbox_auth_refused",
                    "Handshakes ZAP refused (key not listed, address denied, connection cap), by socket role.",
                    &labels,
                    c.refused,
                );
            }
            out.counter(
                "tickbox_forged_refused",
                "Messages refused because their publisher id is not bound to the sender's key.",
                &[],
                s.forged_refused,
            );
            out.counter(
                "tickbox_unauthorised_refused",
                "Control requests refused by authorisation (answered with an error).",
                &[],
                s.unauthorised_refused,
            );
            for (reason, n) in &s.refused_by_reason {
                out.counter(
                    "tickbox_auth_refused_by_reason",
                    "Handshakes refused, by reason (unknown_key, no_curve, wrong_server_key, connection_cap, ...).",
                    &[("reason", reason.clone())],
                    *n,
                );
            }
            out.counters(
                &[],
                &[
                    (
                        "tickbox_workers_refused",
                        "Peers refused as a control service's worker: no serve grant names their key.",
                        s.workers_refused,
                    ),
                    (
                        "tickbox_revoked_refused",
                        "Control messages refused because their key has left the allow directory.",
                        s.revoked_refused,
                    ),
                ],
            );
            for (socket_role, n) in &s.sessions_reset {
                out.counter(
                    "tickbox_sessions_reset",
                    "Times a socket closed its live sessions because a key left the allow directory.",
                    &[("socket_role", socket_role.clone())],
                    *n,
                );
            }
        }
        for (socket_role, c) in self.0.connections().unwrap_or_default() {
            let labels = [("socket_role", socket_role.clone())];
            out.gauge(
                "tickbox_connections",
                "Sessions open now on a capped socket role (handshake done).",
                &labels,
                i64::try_from(c.connections).unwrap_or(i64::MAX),
            );
            out.gauge(
                "tickbox_connections_handshaking",
                "Connections on a capped socket role whose handshake is not done (they hold no place under the cap).",
                &labels,
                i64::try_from(c.handshaking).unwrap_or(i64::MAX),
            );
            out.counter(
                "tickbox_connections_refused_over_cap",
                "Handshakes refused because the role's connection cap was reached.",
                &labels,
                c.refused_over_cap,
            );
        }
    }
}
