//! A `subscribe` run's place in the fleet, set up before its first message: the Clone store's live values applied
//! to its config, its membership under `/members/subscribers/`, the recorder an election names for its catch-up;
//! and a group member's summary of each shard it owned.

use tickbox_clone::recipes::Membership;
use tickbox_clone::ClientConfig;
use tickbox_coord::Coord;
use tickbox_subscriber::{HumanDuration, SharedThreshold, SubscriberConfig};

use crate::group::GroupShard;
use crate::leadership::{elected_history_endpoint, ElectedHistoryError};
use crate::member::MemberInfo;
use crate::{FleetError, SubscriberLive};

/// The prefix of a catch-up endpoint that names an election of recorders instead of a history service.
const ELECTED: &str = "zk:";

impl SubscriberLive {
    /// The Clone side of a subscriber run with `config` as member `id`: `None` without Clone servers, else
    /// connected, with the live values received so far applied to `config` before its first message.
    pub fn for_run(
        ctx: &zmq::Context,
        config: &mut SubscriberConfig,
        id: &str,
        client: ClientConfig,
    ) -> Result<Option<Self>, FleetError> {
        if config.clone.is_empty() {
            return Ok(None);
        }
        let live = SubscriberLive::connect(ctx, &config.clone, id.to_owned(), client)?;
        let base = config.max_lateness.0;
        let initial = SharedThreshold::new(base);
        live.drain(&initial, base);
        config.max_lateness = HumanDuration(initial.get());
        Ok(Some(live))
    }
}

/// Registers a subscriber running `config` with `workers` workers under `/members/subscribers/` when it has the
/// Clone side (`live`), and logs that it runs.
pub fn join_members<'a>(
    live: Option<&'a SubscriberLive>,
    config: &SubscriberConfig,
    workers: usize,
) -> Result<Option<Membership<'a>>, FleetError> {
    let membership = live
        .map(|live| {
            live.join(
                &MemberInfo::of(config, workers).to_bytes(),
                config.member_ttl.0,
            )
        })
        .transpose()?;
    tracing::info!(
        shards = config.shards.len(),
        workers,
        max_lateness = %config.max_lateness,
        member = membership.as_ref().map(|m| m.key()),
        "subscriber running"
    );
    Ok(membership)
}

/// The election a catch-up endpoint names (`zk:ELECTION`), if it names one.
pub fn catch_up_election(config: &SubscriberConfig) -> Option<&str> {
    config.catch_up.as_deref()?.strip_prefix(ELECTED)
}

/// Replaces a catch-up endpoint that names an election (`zk:ELECTION`) with the history endpoint of the recorder
/// that election elected; any other endpoint is kept.
pub fn resolve_elected_catch_up(
    coord: &Coord,
    config: &mut SubscriberConfig,
) -> Result<(), ElectedHistoryError> {
    let Some(election) = catch_up_election(config).map(str::to_owned) else {
        return Ok(());
    };
    let endpoint = elected_history_endpoint(coord, &election)?;
    tracing::info!(election = %election, endpoint, "catch-up: asking the elected recorder");
    config.catch_up = Some(endpoint);
    Ok(())
}

impl GroupShard {
    /// What a group member prints of this shard without `--json`: a heading and the summary table; `signalled`
    /// when a signal stopped the member. (With `--json` it prints [`GroupShard::summary_json`].)
    pub fn summary_text(&self, signalled: bool) -> String {
        format!(
            "group shard {}:\n{}",
            self.shard,
            self.report
                .summary_table(None, self.report.stopped_by(signalled))
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_zk_catch_up_names_an_election() {
        let mut config = SubscriberConfig::default();
        assert_eq!(catch_up_election(&config), None);
        config.catch_up = Some("tcp://127.0.0.1:7000".into());
        assert_eq!(catch_up_election(&config), None);
        config.catch_up = Some("zk:/recorders/feed-a".into());
        assert_eq!(catch_up_election(&config), Some("/recorders/feed-a"));
    }

    #[test]
    fn without_clone_servers_there_is_no_clone_side_and_the_config_is_kept() {
        let ctx = zmq::Context::new();
        let mut config = SubscriberConfig::default();
        let before = config.max_lateness;
        let live = SubscriberLive::for_run(&ctx, &mut config, "sub-1", ClientConfig::default())
            .expect("no servers is no error");
        assert!(live.is_none());
        assert_eq!(config.max_lateness, before);
        assert!(join_members(None, &config, 2).unwrap().is_none());
    }
}
