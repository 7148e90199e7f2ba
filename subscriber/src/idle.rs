//! When a subscriber's run ends: `--idle-exit` (stop once no frame has arrived for a while: since the last one, or
//! since the start when none ever came), `--duration`, a trip, a failed worker, a signal; and when a run that has
//! received nothing says so ([`SilenceWatch`]). The clocks are plain values fed the received count and
//! the time, so every loop that runs subscribers (one subscriber, a shard group) applies the same rule and the
//! rule is tested without sockets.

use std::time::{Duration, Instant};

/// When frames last arrived, judged against an idle limit.
#[derive(Debug, Clone, Copy)]
pub struct IdleClock {
    limit: Duration,
    /// Frames received so far, as last seen.
    received: u64,
    /// When `received` last changed (or the clock was made).
    since: Instant,
}

impl IdleClock {
    /// A clock that trips `limit` after the last new frame, or `limit` after `now` when no frame comes at all (a
    /// wrong endpoint or `--topics` must not leave an `--idle-exit` run waiting forever).
    pub fn new(limit: Duration, now: Instant) -> Self {
        IdleClock {
            limit,
            received: 0,
            since: now,
        }
    }

    /// The idle limit.
    pub fn limit(&self) -> Duration {
        self.limit
    }

    /// Feeds the total frames received so far; true once none has arrived for `limit` (since the last, or since
    /// the clock was made).
    pub fn is_idle(&mut self, received: u64, now: Instant) -> bool {
        if received != self.received {
            self.received = received;
            self.since = now;
            return false;
        }
        now.saturating_duration_since(self.since) >= self.limit
    }

    /// Frames are arriving that the count does not show yet (live records held while catching up): not idle, and
    /// the limit counts from now.
    pub fn hold(&mut self, now: Instant) {
        self.since = now;
    }
}

/// Why a subscriber's run ends, beside the shards' own verdicts: the one rule every loop that runs a subscriber
/// applies (a single subscriber, a shard group).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunEnd {
    /// A shard tripped (the Suicidal Snail, a fatal gap, a catch-up that failed).
    Tripped,
    /// A worker thread failed.
    WorkersFailed,
    /// Ctrl-C or SIGTERM.
    Stopped,
    /// `--duration` ran out.
    Duration,
    /// `--idle-exit`: no frame for the idle limit.
    Idle,
}

/// After this long without a single frame, a run says so (once), naming what it knows of its connections.
pub const SILENCE_WARNING: Duration = Duration::from_secs(3);

/// Why a run has received nothing, as far as its shards know.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Silence {
    /// These shards (by index) have never completed a handshake: nothing is listening at their endpoints, or the
    /// publisher refused them (their refusals are logged apart).
    NotConnected(Vec<usize>),
    /// Every shard is connected, and nothing came: the publishers send nothing yet, or nothing they send matches
    /// the subscriptions.
    NothingSent,
}

impl Silence {
    /// The warning a run prints: that nothing has arrived, what the shards know of why (naming each unconnected
    /// shard's endpoints from `config`), and whether `idle_exit` will end the run.
    pub fn warning(
        &self,
        config: &crate::SubscriberConfig,
        idle_exit: Option<tickbox_units::HumanDuration>,
    ) -> String {
        let after = tickbox_units::HumanDuration(SILENCE_WARNING);
        let ending = match idle_exit {
            Some(limit) => format!(" (--idle-exit {limit} ends the run if nothing comes)"),
            None => String::new(),
        };
        match self {
            Silence::NotConnected(shards) => {
                let names: Vec<String> = shards
                    .iter()
                    .map(|&i| {
                        let endpoints = config
                            .shards
                            .get(i)
                            .map(|s| s.connect.join(","))
                            .unwrap_or_default();
                        format!("shard {i} ({endpoints})")
                    })
                    .collect();
                format!(
                    "warning: nothing received in {after}: not connected: {}: is the publisher up, and the \
                     endpoint right?{ending}",
                    names.join(", ")
                )
            }
            Silence::NothingSent => format!(
                "warning: connected, but nothing received in {after}: the publisher sends nothing yet, or nothing \
                 it sends matches --topics{ending}"
            ),
        }
    }
}

/// Says once, [`SILENCE_WARNING`] into a run, that nothing has arrived, and why as far as the shards know.
#[derive(Debug, Clone, Copy)]
pub struct SilenceWatch {
    start: Instant,
    said: bool,
}

impl SilenceWatch {
    /// A run that began at `now`.
    pub fn new(now: Instant) -> Self {
        SilenceWatch {
            start: now,
            said: false,
        }
    }

    /// Given each shard's (frames received, handshakes completed): the silence to report now, once.
    pub fn check(&mut self, shards: &[(u64, u64)], now: Instant) -> Option<Silence> {
        if self.said || now.saturating_duration_since(self.start) < SILENCE_WARNING {
            return None;
        }
        if shards.iter().any(|&(received, _)| received > 0) {
            // Something arrived: there is nothing to say, now or later.
            self.said = true;
            return None;
        }
        self.said = true;
        let unconnected: Vec<usize> = shards
            .iter()
            .enumerate()
            .filter(|(_, &(_, handshakes))| handshakes == 0)
            .map(|(i, _)| i)
            .collect();
        Some(if unconnected.is_empty() {
            Silence::NothingSent
        } else {
            Silence::NotConnected(unconnected)
        })
    }
}

/// What a run loop sees of its subscriber at one look.
#[derive(Debug, Clone, Copy, Default)]
pub struct RunLook {
    /// A shard tripped.
    pub tripped: bool,
    /// A worker failed.
    pub workers_failed: bool,
    /// Ctrl-C or SIGTERM was raised.
    pub stop: bool,
    /// Frames the shards have counted so far.
    pub received: u64,
    /// A catch-up is still merging history: live frames are held, not counted yet, so the run is not idle (the
    /// catch-up has its own limit on a silent history service).
    pub catching_up: bool,
}

/// When a run ends: its duration, its idle limit, and the subscriber's own trips.
#[derive(Debug, Clone, Copy)]
pub struct RunWatch {
    idle: Option<IdleClock>,
    deadline: Option<Instant>,
}

impl RunWatch {
    /// A run that began at `now`, ending after `duration` (if any) or `idle_exit` without a frame (if any).
    pub fn new(idle_exit: Option<Duration>, duration: Option<Duration>, now: Instant) -> Self {
        RunWatch {
            idle: idle_exit.map(|limit| IdleClock::new(limit, now)),
            deadline: duration.map(|d| now + d),
        }
    }

    /// The idle limit, if any.
    pub fn idle_limit(&self) -> Option<Duration> {
        self.idle.map(|i| i.limit())
    }

    /// Whether the run ends now, and why (the first reason in [`RunEnd`]'s order).
    pub fn check(&mut self, look: RunLook, now: Instant) -> Option<RunEnd> {
        let idle = match self.idle.as_mut() {
            Some(idle) if look.catching_up => {
                idle.hold(now);
                false
            }
            Some(idle) => idle.is_idle(look.received, now),
            None => false,
        };
        if look.tripped {
            Some(RunEnd::Tripped)
        } else if look.workers_failed {
            Some(RunEnd::WorkersFailed)
        } else if look.stop {
            Some(RunEnd::Stopped)
        } else if self.deadline.is_some_and(|d| now >= d) {
            Some(RunEnd::Duration)
        } else if idle {
            Some(RunEnd::Idle)
        } else {
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn a_held_stream_is_not_idle() {
        let t0 = Instant::now();
        let mut idle = IdleClock::new(10 * MS, t0);
        assert!(!idle.is_idle(5, t0));
        idle.hold(t0 + 15 * MS);
        assert!(!idle.is_idle(5, t0 + 20 * MS));
        assert!(idle.is_idle(5, t0 + 25 * MS));
    }

    #[test]
    fn idle_when_nothing_ever_arrives() {
        let t0 = Instant::now();
        let mut idle = IdleClock::new(10 * MS, t0);
        assert!(!idle.is_idle(0, t0 + 9 * MS));
        assert!(idle.is_idle(0, t0 + 10 * MS));
    }

    #[test]
    fn silence_is_said_once_with_what_the_shards_know() {
        let t0 = Instant::now();
        let mut w = SilenceWatch::new(t0);
        assert_eq!(
            w.check(&[(0, 0), (0, 1)], t0 + 1000 * MS),
            None,
            "too early"
        );
        assert_eq!(
            w.check(&[(0, 0), (0, 1)], t0 + SILENCE_WARNING),
            Some(Silence::NotConnected(vec![0]))
        );
        assert_eq!(
            w.check(&[(0, 0), (0, 1)], t0 + 2 * SILENCE_WARNING),
            None,
            "once"
        );
        let mut w = SilenceWatch::new(t0);
        assert_eq!(
            w.check(&[(0, 2)], t0 + SILENCE_WARNING),
            Some(Silence::NothingSent)
        );
        let mut w = SilenceWatch::new(t0);
        assert_eq!(
            w.check(&[(5, 0)], t0 + SILENCE_WARNING),
            None,
            "frames came"
        );
    }

    #[test]
    fn idle_once_the_count_stops_moving_for_the_limit() {
        let t0 = Instant::now();
        let mut idle = IdleClock::new(10 * MS, t0);
        assert!(!idle.is_idle(5, t0 + 20 * MS));
        assert!(!idle.is_idle(5, t0 + 29 * MS));
        assert!(idle.is_idle(5, t0 + 30 * MS));
    }

    #[test]
    fn a_new_frame_restarts_the_clock() {
        let t0 = Instant::now();
        let mut idle = IdleClock::new(10 * MS, t0);
        assert!(!idle.is_idle(1, t0));
        assert!(!idle.is_idle(2, t0 + 9 * MS));
        assert!(!idle.is_idle(2, t0 + 18 * MS));
        assert!(idle.is_idle(2, t0 + 19 * MS));
        assert_eq!(idle.limit(), 10 * MS);
    }

    #[test]
    fn a_run_ends_on_its_first_reason_and_never_idles_while_catching_up() {
        let t0 = Instant::now();
        let mut w = RunWatch::new(Some(10 * MS), Some(100 * MS), t0);
        let look = |received, catching_up| RunLook {
            received,
            catching_up,
            ..RunLook::default()
        };
        assert_eq!(w.check(look(0, false), t0 + 5 * MS), None, "no frame yet");
        assert_eq!(w.check(look(3, true), t0 + 51 * MS), None);
        // Held while catching up: 40 ms without a counted frame is not idle.
        assert_eq!(w.check(look(3, true), t0 + 90 * MS), None);
        assert_eq!(
            w.check(look(3, false), t0 + 95 * MS),
            None,
            "the limit counts from the hold"
        );
        assert_eq!(
            w.check(look(3, false), t0 + 99 * MS),
            None,
            "9 ms after the hold"
        );
        assert_eq!(
            w.check(look(3, false), t0 + 100 * MS),
            Some(RunEnd::Duration)
        );
        let mut w = RunWatch::new(Some(10 * MS), None, t0);
        assert_eq!(w.check(look(1, false), t0), None);
        assert_eq!(w.check(look(1, false), t0 + 10 * MS), Some(RunEnd::Idle));
        let tripped = RunLook {
            tripped: true,
            stop: true,
            ..RunLook::default()
        };
        assert_eq!(w.check(tripped, t0), Some(RunEnd::Tripped));
        let stopped = RunLook {
            stop: true,
            ..RunLook::default()
        };
        assert_eq!(w.check(stopped, t0), Some(RunEnd::Stopped));
    }
}
