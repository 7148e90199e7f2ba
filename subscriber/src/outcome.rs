//! How a finished run is judged beyond its counters: a run that received nothing, or nothing usable, is not a
//! success, and the error line says what was probably meant. Shared by every command that runs a subscriber.

use crate::{Report, SubscriberConfig};

impl SubscriberConfig {
    /// Every endpoint of every shard, in config order, as one comma-separated list for messages.
    pub fn endpoint_list(&self) -> String {
        self.shards
            .iter()
            .flat_map(|s| s.connect.iter().map(String::as_str))
            .collect::<Vec<_>>()
            .join(",")
    }
}

impl<W> Report<W> {
    /// Frames arrived but none of them was usable (every one malformed): a foreign publisher, or tickbox frames
    /// read as Guide messages. A run that tripped is judged by its fatal event instead.
    pub fn nothing_usable(&self) -> bool {
        let received = self.received();
        self.fatal.is_none()
            && received > 0
            && self.malformed() + self.batch_malformed() >= received
    }

    /// The error line of a run in which everything received was malformed (see [`Report::nothing_usable`]).
    pub fn all_malformed_line(&self, endpoints: &str) -> String {
        all_malformed_line(
            self.received(),
            self.malformed(),
            self.guide_malformed(),
            self.guide_like(),
            endpoints,
        )
    }
}

/// What was wrong, and what was probably meant. Frames that look like the Guide's framing (parts of multipart
/// messages, plain text) make up at least half of them: suggest `--framing guide`. Guide messages that were all
/// malformed (single frames): the publisher probably sends tickbox frames, read without `--framing guide`.
fn all_malformed_line(
    received: u64,
    malformed: u64,
    guide_malformed: u64,
    guide_like: u64,
    endpoints: &str,
) -> String {
    if guide_malformed > 0 && guide_malformed * 2 >= malformed {
        return format!(
            "all {received} messages received were malformed ({guide_malformed} are not a [topic][body] Guide \
             message: one frame, or more than two): is {endpoints} a publisher of the Guide's two-frame messages? \
             A tickbox publisher is read with --framing tickbox (docs/book/src/wire.md section 2)"
        );
    }
    if guide_like > 0 && guide_like * 2 >= malformed {
        return format!(
            "all {received} frames received were malformed (none is a tickbox frame; {guide_like} look like the \
             ZeroMQ Guide's framing: multipart or plain text): is {endpoints} a plain ZeroMQ publisher? \
             --framing guide reads the Guide's two-frame [topic][body] messages (docs/book/src/wire.md section 2)"
        );
    }
    format!(
        "all {received} frames received were malformed (none is a tickbox frame): is {endpoints} a tickbox \
         publisher? (docs/book/src/wire.md section 2)"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn malformed_guide_messages_point_at_tickbox_framing() {
        let line = all_malformed_line(10, 10, 6, 0, "tcp://a:1");
        assert!(line.starts_with("all 10 messages received were malformed (6 are not"));
        assert!(line.contains("--framing tickbox"));
    }

    #[test]
    fn guide_like_frames_point_at_guide_framing() {
        let line = all_malformed_line(8, 8, 0, 4, "tcp://a:1");
        assert!(line.contains("4 look like the ZeroMQ Guide's framing"));
        assert!(line.contains("is tcp://a:1 a plain ZeroMQ publisher?"));
    }

    #[test]
    fn anything_else_asks_whether_it_is_a_tickbox_publisher() {
        let line = all_malformed_line(8, 8, 0, 3, "tcp://a:1,tcp://b:2");
        assert_eq!(
            line,
            "all 8 frames received were malformed (none is a tickbox frame): is tcp://a:1,tcp://b:2 a tickbox \
             publisher? (docs/book/src/wire.md section 2)"
        );
    }

    #[test]
    fn the_endpoint_list_joins_every_shard() {
        let config = SubscriberConfig {
            shards: vec![
                crate::SubscriberShardConfig {
                    connect: vec!["tcp://a:1".into(), "tcp://a:2".into()],
                    ..Default::default()
                },
                crate::SubscriberShardConfig {
                    connect: vec!["tcp://b:1".into()],
                    ..Default::default()
                },
            ],
            ..SubscriberConfig::default()
        };
        assert_eq!(config.endpoint_list(), "tcp://a:1,tcp://a:2,tcp://b:1");
    }
}
