//! What a subscriber says about itself under `/members/subscribers/<id>` while it runs.

use serde::Serialize;
use tickbox_subscriber::SubscriberConfig;

/// A member entry's value. Fields in name order, as the entry has always listed them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct MemberInfo {
    /// The snail threshold it runs with.
    pub max_lateness: String,
    /// Its process id.
    pub pid: u32,
    /// Each shard's endpoints, comma-separated.
    pub shards: Vec<String>,
    /// Its worker threads.
    pub workers: usize,
}

impl MemberInfo {
    /// The entry of this process, running `config` with `workers` worker threads.
    pub fn of(config: &SubscriberConfig, workers: usize) -> Self {
        MemberInfo {
            max_lateness: config.max_lateness.to_string(),
            pid: std::process::id(),
            shards: config.shards.iter().map(|s| s.connect.join(",")).collect(),
            workers,
        }
    }

    /// The entry as stored (one JSON object).
    pub fn to_bytes(&self) -> Vec<u8> {
        serde_json::to_vec(self).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tickbox_subscriber::SubscriberShardConfig;

    #[test]
    fn the_entry_names_shards_workers_and_threshold() {
        let config = SubscriberConfig {
            shards: vec![SubscriberShardConfig {
                connect: vec!["tcp://a:1".into(), "tcp://b:2".into()],
                ..SubscriberShardConfig::default()
            }],
            ..SubscriberConfig::default()
        };
        let info = MemberInfo::of(&config, 4);
        let v: serde_json::Value = serde_json::from_slice(&info.to_bytes()).unwrap();
        assert_eq!(v["shards"], serde_json::json!(["tcp://a:1,tcp://b:2"]));
        assert_eq!(v["workers"], 4);
        assert_eq!(v["pid"], std::process::id());
        assert_eq!(v["max_lateness"], config.max_lateness.to_string());
    }
}
