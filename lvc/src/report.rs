//! What `tickbox lvc` shows of a running proxy: the status `tickbox.lvc.status` serves, and the final counter
//! table. Kept beside the proxy so a counter added to [`LvcStats`] is shown where it is defined.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::Serialize;
use tickbox_auth::{RoleConnectionCounts, Security};
use tickbox_units::{format_rate, format_size_approx, RateMeter};

use crate::tap::Framing;
use crate::{BackPressure, LvcConfig, LvcEndpoints, LvcStats, TapDrop};

/// What `tickbox.lvc.status` serves: endpoints, modes and the proxy's counters. Fields in name order, as the
/// status object has always listed them.
#[derive(Debug, Clone, Serialize)]
pub struct LvcStatus {
    /// `"lvc"`.
    pub component: &'static str,
    /// Per-role connection counts, when a connection cap is set.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub connections: Option<BTreeMap<String, RoleConnectionCounts>>,
    /// Every drop, summed ([`LvcStats::drops`]).
    pub drops: u64,
    /// How late joiners get cached values: `broadcast` or `snapshot`.
    pub late_joiners: &'static str,
    /// Endpoints publishers connect to.
    pub publishers: Vec<String>,
    /// How a slow subscriber is treated.
    pub back_pressure: BackPressure,
    /// The snapshot endpoint, if any.
    pub snapshot: Option<String>,
    /// `"running"`.
    pub state: &'static str,
    /// The proxy's counters.
    pub stats: LvcStats,
    /// The endpoint subscribers connect to.
    pub subscribers: String,
    /// The tap endpoint, if any.
    pub tap: Option<String>,
    /// What the tap drops when a consumer is slow.
    pub tap_drop: TapDrop,
    /// Whether the tap's drops are counted: in per_consumer mode libzmq drops per tap consumer without telling
    /// the proxy.
    pub tap_drops_counted: bool,
    /// How the tap frames what it sends.
    pub tap_framing: Framing,
    /// Publisher endpoints the proxy connects to.
    pub upstream_connect: Vec<String>,
}

impl LvcStatus {
    /// The status of a running proxy with `endpoints`, run with `config`, under `security`.
    pub fn new(
        endpoints: &LvcEndpoints,
        config: &LvcConfig,
        stats: &LvcStats,
        security: &Security,
    ) -> Self {
        LvcStatus {
            component: "lvc",
            connections: security.connections(),
            drops: stats.drops(),
            late_joiners: if config.broadcasts_cached() {
                "broadcast"
            } else {
                "snapshot"
            },
            publishers: endpoints.upstream.clone(),
            back_pressure: config.back_pressure,
            snapshot: endpoints.snapshot.clone(),
            state: "running",
            stats: *stats,
            subscribers: endpoints.downstream.clone(),
            tap: endpoints.tap.clone(),
            tap_drop: config.tap_drop,
            tap_drops_counted: config.tap_drop == TapDrop::Counted,
            tap_framing: config.tap_framing,
            upstream_connect: config.upstream.clone(),
        }
    }
}

impl LvcStats {
    /// The end-of-run warning when the cache never received some publisher messages (lost in gaps, or sent
    /// before it first heard their publisher); `None` when it heard every one.
    pub fn never_received_warning(&self) -> Option<String> {
        let q = &self.sequences;
        let never = q.missing + q.missed_before_join;
        (never > 0).then(|| {
            format!(
                "warning: the cache never received {never} publisher messages ({} lost in gaps, {} sent before it \
                 first heard their publisher): snapshots said so to clients that can be told",
                q.missing, q.missed_before_join
            )
        })
    }

    /// The end-of-run table: one counter a line. `tap dropped` reads `per-consumer` when the proxy cannot know
    /// it (a 0 there would claim no tap loss).
    pub fn table(&self, tap_drop: TapDrop) -> String {
        let s = self;
        let mut out = format!("{:<22} {:>14}\n", "lvc", "count");
        for (name, value) in [
            ("messages in", s.messages_in),
            ("messages out", s.messages_out),
            ("cached sent", s.cached_sent),
            ("cached dropped", s.cached_dropped),
            ("malformed", s.malformed),
            ("subscribes", s.subscribes),
            ("unsubscribes", s.unsubscribes),
            ("prefixes held", s.downstream_prefixes),
            ("topics cached", s.topics_cached),
            ("cache bytes", s.cache_bytes),
            ("cache evicted", s.cache_evicted),
            ("cache rejected", s.cache_rejected),
            ("cache too large", s.cache_too_large),
            ("tap sent", s.tap_sent),
            ("tap dropped", s.tap_dropped),
            ("downstream dropped", s.downstream_dropped),
            ("subs refused", s.subscriptions_refused),
            ("prefixes refused", s.prefixes_refused),
            ("bursts capped", s.cached_bursts_capped),
            ("snapshot requests", s.snapshot_requests),
            ("snapshot values", s.snapshot_values),
            ("snapshot completed", s.snapshot_completed),
            ("snapshot truncated", s.snapshot_truncated),
            ("snapshot refused", s.snapshot_refused),
            ("snapshot abandoned", s.snapshot_abandoned),
            ("snapshot malformed", s.snapshot_malformed),
            ("snapshot lacking", s.snapshot_lacking),
            ("forged refused", s.forged_refused),
            ("handshakes refused", s.handshakes_refused),
            ("publishers", s.sequences.publishers),
            ("publisher messages", s.sequences.received),
            ("missing (gaps)", s.sequences.missing),
            ("gaps", s.sequences.gap_events),
            ("missed before join", s.sequences.missed_before_join),
            ("duplicates", s.sequences.duplicates),
            ("restarts", s.sequences.restarts),
            ("anomalies", s.sequences.anomalies),
            ("untracked", s.sequences.untracked),
        ] {
            if name == "tap dropped" && tap_drop == TapDrop::PerConsumer {
                let _ = writeln!(out, "{name:<22} {:>14}", "per-consumer");
                continue;
            }
            let _ = writeln!(out, "{name:<22} {value:>14}");
        }
        out
    }
}

/// The per-publisher table of `tickbox lvc`'s summary: what the proxy received of each publisher and what it
/// knows it lacks (empty when no publisher was heard).
pub fn publishers_table(accounts: &[crate::sequences::PublisherAccount]) -> String {
    if accounts.is_empty() {
        return String::new();
    }
    let mut out = format!(
        "{:>10} {:>12} {:>10} {:>6} {:>18} {:>10} {:>8} {:>9}\n",
        "publisher",
        "received",
        "missing",
        "gaps",
        "missed before join",
        "duplicates",
        "restarts",
        "anomalies"
    );
    for a in accounts {
        let _ = writeln!(
            out,
            "{:>10} {:>12} {:>10} {:>6} {:>18} {:>10} {:>8} {:>9}",
            a.publisher,
            a.received,
            a.missing,
            a.gap_events,
            a.missed_before_join,
            a.duplicates,
            a.restarts,
            a.anomalies
        );
    }
    out
}

impl LvcEndpoints {
    /// The resolved endpoints, a line each, for scripts and tests to connect to `tcp://…:*`: `lvc subscribers EP`,
    /// `lvc publishers EP` (each), `lvc tap EP`, `lvc snapshot EP`.
    pub fn lines(&self) -> Vec<String> {
        let mut lines = vec![format!("lvc subscribers {}", self.downstream)];
        lines.extend(
            self.upstream
                .iter()
                .map(|ep| format!("lvc publishers {ep}")),
        );
        lines.extend(self.tap.iter().map(|ep| format!("lvc tap {ep}")));
        lines.extend(self.snapshot.iter().map(|ep| format!("lvc snapshot {ep}")));
        lines
    }
}

/// The live status line of the proxy's counters `s`, the rates in and out measured by `rate_in` and `rate_out`.
pub fn live_line(
    s: &LvcStats,
    rate_in: &mut RateMeter,
    rate_out: &mut RateMeter,
    security: &Security,
) -> String {
    format!(
        "in {} ({}), out {} ({}), cache {} topics / {}, cached values sent {}, drops {}, malformed {}, \
         publishers {}, missing {}, missed before join {}{}",
        s.messages_in,
        format_rate(rate_in.per_sec(s.messages_in)),
        s.messages_out,
        format_rate(rate_out.per_sec(s.messages_out)),
        s.topics_cached,
        format_size_approx(s.cache_bytes),
        s.cached_sent,
        s.drops(),
        s.malformed,
        s.sequences.publishers,
        s.sequences.missing,
        s.sequences.missed_before_join,
        security.live_suffix(),
    )
}

/// The `--json` summary: the counters, the drops, what each publisher sent, the connections, and what the ZAP
/// handler decided (when anything is checked).
pub fn summary_json(
    stats: &LvcStats,
    accounts: &[crate::sequences::PublisherAccount],
    security: &Security,
) -> serde_json::Value {
    let mut summary = serde_json::json!({
        "component": "lvc",
        "stats": stats,
        "drops": stats.drops(),
        "publishers": accounts,
        "connections": security.connections(),
    });
    if let Some(auth) = security.summary() {
        summary["auth"] = serde_json::to_value(auth).unwrap_or(serde_json::Value::Null);
    }
    summary
}

/// The summary as text: the counters, the publishers, and the security lines (with `[security]`).
pub fn summary_text(
    stats: &LvcStats,
    accounts: &[crate::sequences::PublisherAccount],
    tap_drop: TapDrop,
    security: &Security,
) -> String {
    let mut text = stats.table(tap_drop) + &publishers_table(accounts);
    for line in (security.summary_line().into_iter()).chain(security.connections_line()) {
        let _ = writeln!(text, "{line}");
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_endpoint_lines_name_every_socket_bound() {
        let endpoints = LvcEndpoints {
            upstream: vec!["tcp://127.0.0.1:1".into(), "tcp://127.0.0.1:2".into()],
            downstream: "tcp://127.0.0.1:3".into(),
            tap: None,
            snapshot: Some("tcp://127.0.0.1:4".into()),
        };
        assert_eq!(
            endpoints.lines(),
            [
                "lvc subscribers tcp://127.0.0.1:3",
                "lvc publishers tcp://127.0.0.1:1",
                "lvc publishers tcp://127.0.0.1:2",
                "lvc snapshot tcp://127.0.0.1:4",
            ]
        );
    }

    #[test]
    fn the_summary_counts_drops_and_says_nothing_of_security_without_it() {
        let stats = LvcStats {
            messages_in: 12,
            ..LvcStats::default()
        };
        let open = Security::default();
        let json = summary_json(&stats, &[], &open);
        assert_eq!(json["component"], "lvc");
        assert_eq!(json["stats"]["messages_in"], 12);
        assert_eq!(json["drops"], stats.drops());
        assert!(json.get("auth").is_none(), "{json}");
        let text = summary_text(&stats, &[], TapDrop::PerConsumer, &open);
        assert_eq!(
            text,
            stats.table(TapDrop::PerConsumer),
            "no publishers, no security lines"
        );
        let line = live_line(
            &stats,
            &mut RateMeter::default(),
            &mut RateMeter::default(),
            &open,
        );
        assert!(line.starts_with("in 12 ("), "{line}");
    }

    #[test]
    fn the_table_shows_every_counter_and_no_false_zero_for_the_tap() {
        let stats = LvcStats {
            messages_in: 12,
            tap_dropped: 0,
            forged_refused: 3,
            handshakes_refused: 2,
            ..LvcStats::default()
        };
        let table = stats.table(TapDrop::PerConsumer);
        assert_eq!(table.lines().count(), 39);
        assert!(table.starts_with(&format!("{:<22} {:>14}\n", "lvc", "count")));
        assert!(table.contains(&format!("{:<22} {:>14}\n", "messages in", 12)));
        assert!(table.contains(&format!("{:<22} {:>14}\n", "tap dropped", "per-consumer")));
        assert!(table.contains(&format!("{:<22} {:>14}\n", "forged refused", 3)));
        assert!(table.contains(&format!("{:<22} {:>14}\n", "handshakes refused", 2)));
        assert!(table.ends_with(&format!("{:<22} {:>14}\n", "untracked", 0)));
        let counted = stats.table(TapDrop::Counted);
        assert!(counted.contains(&format!("{:<22} {:>14}\n", "tap dropped", 0)));
    }

    #[test]
    fn the_status_names_endpoints_modes_and_drops() {
        let endpoints = LvcEndpoints {
            upstream: vec!["tcp://127.0.0.1:1".into()],
            downstream: "tcp://127.0.0.1:2".into(),
            tap: None,
            snapshot: Some("tcp://127.0.0.1:3".into()),
        };
        let config = LvcConfig {
            tap_drop: TapDrop::Counted,
            ..LvcConfig::default()
        };
        let stats = LvcStats {
            downstream_dropped: 4,
            ..LvcStats::default()
        };
        let status = LvcStatus::new(&endpoints, &config, &stats, &Security::default());
        assert_eq!(status.drops, stats.drops());
        assert!(status.tap_drops_counted);
        assert!(status.connections.is_none());
        assert_eq!(status.publishers, endpoints.upstream);
        assert_eq!(status.subscribers, endpoints.downstream);
    }

    #[test]
    fn the_warning_counts_what_the_cache_never_received_and_is_absent_when_it_heard_all() {
        let mut stats = LvcStats::default();
        assert_eq!(stats.never_received_warning(), None);
        stats.sequences.missing = 3;
        stats.sequences.missed_before_join = 2;
        assert_eq!(
            stats.never_received_warning().as_deref(),
            Some(
                "warning: the cache never received 5 publisher messages (3 lost in gaps, 2 sent before it first \
                 heard their publisher): snapshots said so to clients that can be told"
            )
        );
    }
}
