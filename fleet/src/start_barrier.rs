//! `--start-barrier PATH --parties N`: where a run's producer (`tickbox replay`) and its consumers (each
//! `tickbox subscribe`) meet in ZooKeeper before the run starts, and leave together after it. One recipe for
//! both sides; each says what it waits for in its own words.

use std::sync::atomic::AtomicBool;
use std::time::Duration;

use tickbox_coord::{Coord, CoordError, StartBarrier};

/// Which side of the run this process is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    /// The replay: it waits for the subscribers.
    Producer,
    /// A subscriber: it waits for the replay and the other subscribers.
    Consumer,
}

impl Side {
    /// Whom this side waits for when it leaves.
    fn awaited(self) -> &'static str {
        match self {
            Side::Producer => "a subscriber",
            Side::Consumer => "another party",
        }
    }
}

/// A start barrier asked for by the flags.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StartMeeting {
    /// The barrier's path.
    pub path: String,
    /// The consumers (subscribers) expected beside the producer.
    pub parties: u32,
    /// This process's side.
    pub side: Side,
}

/// Why the meeting failed.
#[derive(Debug, thiserror::Error)]
pub enum MeetingError {
    /// Entering failed (ZooKeeper, or `[coord] barrier_timeout` passed before every party came).
    #[error("--start-barrier {path}")]
    Enter {
        /// The barrier's path.
        path: String,
        /// Why.
        source: CoordError,
    },
    /// Leaving failed: a party did not leave within `[coord] barrier_timeout`, or ZooKeeper failed.
    #[error("leaving --start-barrier ({who} did not leave in time: [coord] barrier_timeout)")]
    Leave {
        /// Whom this side waited for.
        who: &'static str,
        /// Why.
        source: CoordError,
    },
}

impl StartMeeting {
    /// The meeting `--start-barrier` and `--parties` ask for; `None` unless both are given.
    pub fn asked(path: Option<&str>, parties: Option<u32>, side: Side) -> Option<Self> {
        Some(StartMeeting {
            path: path?.to_owned(),
            parties: parties?,
            side,
        })
    }

    /// What the producer says on stderr while it waits.
    pub fn waiting_line(&self) -> String {
        format!(
            "waiting at start barrier {} for {} subscriber(s)",
            self.path, self.parties
        )
    }

    /// Enters as `id` and waits for every party, at most `timeout`. `Ok(None)` when `stop` was set meanwhile
    /// (Ctrl-C): this party is out and the run should not start.
    pub fn enter(
        &self,
        coord: &Coord,
        id: &str,
        timeout: Duration,
        stop: &AtomicBool,
    ) -> Result<Option<StartBarrier>, MeetingError> {
        match StartBarrier::enter(coord, &self.path, self.parties, id, timeout, stop) {
            Ok(entered) => Ok(Some(entered)),
            Err(CoordError::Interrupted) => Ok(None),
            Err(source) => Err(MeetingError::Enter {
                path: self.path.clone(),
                source,
            }),
        }
    }

    /// Leaves after the run and waits, at most `timeout`, for the others to leave too: `Ok(true)` when all
    /// left, `Ok(false)` when `stop` came first (this party is out without waiting).
    pub fn leave(
        &self,
        entered: StartBarrier,
        timeout: Duration,
        stop: &AtomicBool,
    ) -> Result<bool, MeetingError> {
        let who = self.side.awaited();
        entered
            .leave(timeout, stop)
            .map_err(|source| MeetingError::Leave { who, source })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::Ordering;
    use tickbox_coord::testing::ZkServer;

    #[test]
    fn a_meeting_needs_both_flags_and_says_what_it_waits_for() {
        assert_eq!(StartMeeting::asked(Some("/b"), None, Side::Producer), None);
        assert_eq!(StartMeeting::asked(None, Some(2), Side::Consumer), None);
        let m = StartMeeting::asked(Some("/runs/r1"), Some(2), Side::Producer).unwrap();
        assert_eq!(
            m.waiting_line(),
            "waiting at start barrier /runs/r1 for 2 subscriber(s)"
        );
        let leave = |side: Side| MeetingError::Leave {
            who: side.awaited(),
            source: CoordError::Timeout(Duration::from_secs(1)),
        };
        assert_eq!(
            leave(Side::Consumer).to_string(),
            "leaving --start-barrier (another party did not leave in time: [coord] barrier_timeout)"
        );
        assert!(leave(Side::Producer)
            .to_string()
            .contains("(a subscriber did not leave"));
    }

    #[test]
    fn producer_and_consumer_meet_leave_together_and_a_stop_interrupts_a_wait() {
        let Some(zk) = ZkServer::start_or_skip("start_barrier") else {
            return;
        };
        let coord = Coord::connect(&zk.connect_string()).unwrap();
        let t = Duration::from_secs(10);
        let stop = AtomicBool::new(false);
        let producer = StartMeeting::asked(Some("/runs/a"), Some(1), Side::Producer).unwrap();
        let consumer = StartMeeting {
            side: Side::Consumer,
            ..producer.clone()
        };
        std::thread::scope(|s| {
            let other = s.spawn(|| {
                let entered = consumer.enter(&coord, "sub", t, &stop).unwrap().unwrap();
                consumer.leave(entered, t, &stop).unwrap()
            });
            let entered = producer.enter(&coord, "replay", t, &stop).unwrap();
            assert!(producer.leave(entered.unwrap(), t, &stop).unwrap());
            assert!(other.join().unwrap(), "both saw every party leave");
        });
        // Alone at a barrier for two: Ctrl-C ends the wait, and the run does not start.
        let lonely = StartMeeting::asked(Some("/runs/b"), Some(1), Side::Producer).unwrap();
        stop.store(true, Ordering::SeqCst);
        assert!(lonely.enter(&coord, "replay", t, &stop).unwrap().is_none());
        let err = StartMeeting::asked(Some("bad path"), Some(1), Side::Consumer)
            .unwrap()
            .enter(&coord, "sub", t, &AtomicBool::new(false))
            .unwrap_err();
        assert!(
            err.to_string().starts_with("--start-barrier bad path"),
            "{err}"
        );
    }
}
