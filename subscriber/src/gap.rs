//! Per-publisher sequence gap detection as a sans-IO engine.
//!
//! Data messages carry a gap-free sequence per publisher; a heartbeat repeats the last data sequence sent, so a
//! lost trailing message is noticed even when the feed goes quiet. Only meaningful when the subscriber receives
//! everything: with topic-prefix subscriptions, missing sequences are expected and the owner must not run this.

use serde::Serialize;
use tickbox_wire::{Flags, Header, Kind};

/// What one message says about its publisher's sequence.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum GapEvent {
    /// The next expected sequence (or a heartbeat confirming nothing was missed).
    InOrder,
    /// First message from this publisher: nothing to compare with (we may have joined late).
    First { publisher: u32, sequence: u64 },
    /// Sequences `first_missing..=last_missing` never arrived.
    Gap {
        publisher: u32,
        first_missing: u64,
        last_missing: u64,
    },
    /// The sequence went backwards: the publisher restarted. Accepted; counting starts again from `sequence`.
    Restart {
        publisher: u32,
        previous: u64,
        sequence: u64,
    },
    /// An LVC cached value: out of sequence by design, ignored.
    Exempt,
}

impl GapEvent {
    /// Messages lost, for a [`GapEvent::Gap`]; 0 otherwise.
    pub fn missing(&self) -> u64 {
        match *self {
            GapEvent::Gap {
                first_missing,
                last_missing,
                ..
            } => last_missing - first_missing + 1,
            _ => 0,
        }
    }
}

/// Last sequence seen per publisher. A deployment has a handful of publishers, so a small vector with a
/// remembered last hit beats a hash map and never allocates after the first message of each publisher.
#[derive(Debug, Default, Clone)]
pub struct GapDetector {
    publishers: Vec<(u32, u64)>,
    last_hit: usize,
}

impl GapDetector {
    pub fn new() -> Self {
        Self::default()
    }

    /// Publishers seen so far.
    pub fn publishers(&self) -> usize {
        self.publishers.len()
    }

    /// The last data sequence seen from `publisher`.
    pub fn last_sequence(&self, publisher: u32) -> Option<u64> {
        self.publishers
            .iter()
            .find(|(p, _)| *p == publisher)
            .map(|(_, s)| *s)
    }

    #[inline]
    pub fn on_message(&mut self, header: &Header) -> GapEvent {
        if header.flags.contains(Flags::CACHED) {
            return GapEvent::Exempt;
        }
        let publisher = header.publisher_id;
        let seq = header.sequence;
        let slot = match self.publishers.get(self.last_hit) {
            Some((p, _)) if *p == publisher => self.last_hit,
            _ => match self.publishers.iter().position(|(p, _)| *p == publisher) {
                Some(i) => i,
                None => {
                    self.publishers.push((publisher, seq));
                    self.last_hit = self.publishers.len() - 1;
                    return GapEvent::First {
                        publisher,
                        sequence: seq,
                    };
                }
            },
        };
        self.last_hit = slot;
        let last = &mut self.publishers[slot].1;
        let previous = *last;
        // A heartbeat names the last data sequence sent; data names its own.
        let heartbeat = header.kind == Kind::Heartbeat;
        let expected_last = if heartbeat {
            previous
        } else {
            previous.wrapping_add(1)
        };
        if seq == expected_last {
            *last = seq;
            GapEvent::InOrder
        } else if seq > expected_last {
            *last = seq;
            GapEvent::Gap {
                publisher,
                first_missing: previous + 1,
                last_missing: if heartbeat { seq } else { seq - 1 },
            }
        } else {
            *last = seq;
            GapEvent::Restart {
                publisher,
                previous,
                sequence: seq,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data(publisher: u32, seq: u64) -> Header {
        Header::live(Kind::Quote, publisher, seq, 1)
    }
    fn heartbeat(publisher: u32, seq: u64) -> Header {
        Header::live(Kind::Heartbeat, publisher, seq, 1)
    }

    #[test]
    fn in_order_then_gap_then_in_order_again() {
        let mut d = GapDetector::new();
        assert_eq!(
            d.on_message(&data(1, 5)),
            GapEvent::First {
                publisher: 1,
                sequence: 5
            }
        );
        assert_eq!(d.on_message(&data(1, 6)), GapEvent::InOrder);
        let gap = d.on_message(&data(1, 9));
        assert_eq!(
            gap,
            GapEvent::Gap {
                publisher: 1,
                first_missing: 7,
                last_missing: 8
            }
        );
        assert_eq!(gap.missing(), 2);
        assert_eq!(d.on_message(&data(1, 10)), GapEvent::InOrder);
    }

    #[test]
    fn publishers_are_independent() {
        let mut d = GapDetector::new();
        d.on_message(&data(1, 1));
        d.on_message(&data(2, 100));
        assert_eq!(d.on_message(&data(1, 2)), GapEvent::InOrder);
        assert_eq!(d.on_message(&data(2, 101)), GapEvent::InOrder);
        assert_eq!(d.publishers(), 2);
        assert_eq!(d.last_sequence(2), Some(101));
    }

    #[test]
    fn heartbeat_reveals_a_lost_trailing_message() {
        let mut d = GapDetector::new();
        d.on_message(&data(1, 1));
        d.on_message(&data(1, 2));
        assert_eq!(d.on_message(&heartbeat(1, 2)), GapEvent::InOrder);
        assert_eq!(d.on_message(&heartbeat(1, 2)), GapEvent::InOrder);
        // Message 3 was sent and lost; the heartbeat says "last sent was 3".
        let gap = d.on_message(&heartbeat(1, 3));
        assert_eq!(gap.missing(), 1);
        assert_eq!(d.on_message(&data(1, 4)), GapEvent::InOrder);
    }

    #[test]
    fn restart_is_accepted_not_a_gap() {
        let mut d = GapDetector::new();
        d.on_message(&data(1, 41));
        d.on_message(&data(1, 42));
        assert_eq!(
            d.on_message(&data(1, 1)),
            GapEvent::Restart {
                publisher: 1,
                previous: 42,
                sequence: 1
            }
        );
        assert_eq!(d.on_message(&data(1, 2)), GapEvent::InOrder);
        // A restarted publisher that is still idle heartbeats with sequence 0.
        assert!(matches!(
            d.on_message(&heartbeat(1, 0)),
            GapEvent::Restart { .. }
        ));
        assert_eq!(d.on_message(&data(1, 1)), GapEvent::InOrder);
    }

    #[test]
    fn cached_values_never_count_as_gaps_or_move_the_sequence() {
        let mut d = GapDetector::new();
        d.on_message(&data(1, 10));
        let mut cached = data(1, 3);
        cached.flags = Flags::CACHED;
        assert_eq!(d.on_message(&cached), GapEvent::Exempt);
        cached.sequence = 500;
        assert_eq!(d.on_message(&cached), GapEvent::Exempt);
        assert_eq!(d.on_message(&data(1, 11)), GapEvent::InOrder);
    }
}
