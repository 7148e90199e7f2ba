//! `clone-server --metrics`: the server's live counters ([`SharedStats`], atomics its thread stores on every
//! loop turn), read at each scrape.

use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

use tickbox_metrics::{Scrape, Source};

use crate::server_loop::SharedStats;

/// The [`Source`] of a running Clone server.
#[derive(Debug)]
pub struct CloneMetrics(pub Arc<SharedStats>);

impl Source for CloneMetrics {
    fn collect(&self, out: &mut Scrape) {
        let s = &self.0;
        for (name, help, value) in [
            ("tickbox_published", "Updates published.", &s.published),
            (
                "tickbox_dropped",
                "Client updates dropped, all reasons together.",
                &s.dropped,
            ),
            (
                "tickbox_malformed",
                "Undecodable messages dropped.",
                &s.malformed,
            ),
            (
                "tickbox_rejected_votes",
                "Client requests the Binary Star voter rejected (not active).",
                &s.rejected_votes,
            ),
            (
                "tickbox_snapshots_served",
                "Snapshots sent.",
                &s.snapshots_served,
            ),
            (
                "tickbox_snapshots_refused",
                "Snapshot requests refused (too many in flight).",
                &s.snapshots_refused,
            ),
            (
                "tickbox_snapshots_truncated",
                "Snapshots abandoned before their end.",
                &s.snapshots_truncated,
            ),
            (
                "tickbox_refusal_notices",
                "NOPE refusal notices published.",
                &s.refusal_notices,
            ),
            (
                "tickbox_refusal_notices_suppressed",
                "Refusals not answered (rate limit).",
                &s.refusal_notices_suppressed,
            ),
            (
                "tickbox_log_suppressed",
                "Warning lines not logged (rate limit).",
                &s.log_suppressed,
            ),
        ] {
            out.counter(name, help, &[], value.load(Relaxed));
        }
        for (name, help, value) in [
            (
                "tickbox_sequence",
                "The server's sequence number (the Clone sequence).",
                &s.sequence,
            ),
            ("tickbox_keys", "Keys in the map.", &s.keys),
            (
                "tickbox_bytes",
                "Bytes charged to the general budget.",
                &s.bytes,
            ),
            (
                "tickbox_reserved_keys",
                "Keys under the reserved prefixes.",
                &s.reserved_keys,
            ),
            (
                "tickbox_reserved_bytes",
                "Bytes charged to the reserved budget.",
                &s.reserved_bytes,
            ),
            (
                "tickbox_pending",
                "Client updates on the pending list.",
                &s.pending,
            ),
            (
                "tickbox_snapshots_in_flight",
                "Snapshots being streamed.",
                &s.snapshots_in_flight,
            ),
        ] {
            out.gauge(
                name,
                help,
                &[],
                i64::try_from(value.load(Relaxed)).unwrap_or(i64::MAX),
            );
        }
        let state = match s.state.load(Relaxed) {
            1 => "primary",
            2 => "backup",
            4 => "passive",
            _ => "active",
        };
        out.info(
            "tickbox_bstar_state",
            "The server's Binary Star state (active for a stand-alone server).",
            &[(tickbox_metrics::label::STATE, state.to_owned())],
        );
    }
}
