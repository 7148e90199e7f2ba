//! A set of publisher shards driven from one thread (a replay's, `feed --source`'s, or one synthetic shard's):
//! their subscriber tally, the wait for subscribers, the batching decision and the drain at the end, in one
//! place. Who speaks on them (the
//! shard's own identity, or the recorded publishers a replay speaks for) is the caller's.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use tickbox_wire::SubscriptionTally;

use crate::config::FeedConfig;
use crate::error::FeedError;
use crate::publisher::{Publisher, INTERRUPT_GRACE, LINGER_MS};

/// Publisher shards bound (or connected) and their subscriptions as seen so far.
pub struct Shards {
    publishers: Vec<Publisher>,
    endpoints: Vec<String>,
    /// Per shard: its subscriptions by kind (XPUB verboser, so every subscription and unsubscription is seen).
    /// A shard batches only while every empty-prefix subscriber also took the batch topic and nobody holds
    /// another prefix.
    tallies: Vec<SubscriptionTally>,
    subscriptions: Vec<u64>,
    /// Most subscriptions any shard has had since [`Shards::reset_peak`].
    peak: u64,
    /// The sockets are XPUBs, which hand over subscriptions (a lossy synthetic shard is a plain PUB: nothing to
    /// read, and nobody to wait for).
    xpub: bool,
    /// Bound shards: says when a key has left an allow directory, so their live sessions close (with the role
    /// the shards are bound as).
    revocations: Option<(tickbox_auth::Revocations, &'static str)>,
}

/// How the end of a run went ([`Shards::close_wait`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Closing {
    /// Per shard, records libzmq still held when the wait ended: dropped at the close.
    pub undelivered: Vec<u64>,
    /// Per shard, subscribers still connected then.
    pub subscribers_at_close: Vec<u64>,
    /// The drain wait ran out with subscribers still connected.
    pub subscribers_stayed: bool,
    /// Ctrl-C or SIGTERM came before or during the wait.
    pub interrupted: bool,
}

impl Closing {
    /// Records dropped at the close, all shards.
    pub fn undelivered(&self) -> u64 {
        self.undelivered.iter().sum()
    }
}

/// Why messages a publisher still held when it closed were dropped: the one rule `tickbox feed` and `tickbox
/// replay` both apply after closing (the summary printed before counts those messages as sent).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CloseLoss {
    /// Ctrl-C or SIGTERM: the drain wait was skipped, what was queued had only `grace` to leave.
    Interrupted {
        /// The grace an interrupted close gives queued messages.
        grace: Duration,
    },
    /// No drain wait was asked (`--drain-timeout 0s`, or a feed without back-pressure): the close dropped what
    /// a subscriber had not yet been sent.
    NoDrainWait,
    /// The drain wait ran out with a subscriber still behind.
    DrainExpired {
        /// The wait that ran out.
        drain_timeout: Duration,
    },
}

impl CloseLoss {
    /// The cause, once `undelivered` messages were left at a close: `None` when nothing was.
    pub fn after_close(
        undelivered: u64,
        interrupted: bool,
        drain_timeout: Duration,
        grace: Duration,
    ) -> Option<CloseLoss> {
        if undelivered == 0 {
            None
        } else if interrupted {
            Some(CloseLoss::Interrupted { grace })
        } else if drain_timeout.is_zero() {
            Some(CloseLoss::NoDrainWait)
        } else {
            Some(CloseLoss::DrainExpired { drain_timeout })
        }
    }

    /// The one-line explanation `who` (`feed`, `replay`) prints on stderr for `n` of `unit` (`message`,
    /// `record`) left; `no_wait_hint` says how to get a drain wait (only shown for [`CloseLoss::NoDrainWait`]).
    pub fn message(&self, who: &str, n: u64, unit: &str, no_wait_hint: &str) -> String {
        const COUNTED: &str = "the summary's sent count includes them";
        match self {
            CloseLoss::Interrupted { grace } => format!(
                "{who}: interrupted: {n} {unit}(s) still queued for a subscriber were not delivered (dropped at \
                 close, {grace:?} after the interrupt); {COUNTED}"
            ),
            CloseLoss::NoDrainWait => format!(
                "{who}: {n} {unit}(s) were still queued for a subscriber when the shards closed and were dropped \
                 (a subscriber fell behind; {no_wait_hint}); {COUNTED}"
            ),
            CloseLoss::DrainExpired { drain_timeout } => format!(
                "{who}: {n} {unit}(s) were still queued for a subscriber after --drain-timeout {drain_timeout:?} \
                 and were dropped at the close (a subscriber stopped reading); {COUNTED}"
            ),
        }
    }
}

impl Shards {
    /// The shards `publishers` (sockets made by the verboser recipe: every subscription and unsubscription is
    /// seen), bound or connected to `endpoints`; `revocations` for bound ones, with their role.
    pub fn new(
        publishers: Vec<Publisher>,
        endpoints: Vec<String>,
        revocations: Option<(tickbox_auth::Revocations, &'static str)>,
    ) -> Self {
        let n = publishers.len();
        Shards {
            publishers,
            endpoints,
            tallies: vec![SubscriptionTally::default(); n],
            subscriptions: vec![0; n],
            peak: 0,
            xpub: true,
            revocations,
        }
    }

    /// One shard whose subscriptions `tally` has read since its socket was bound, if it is an `xpub` (a synthetic
    /// feed's shard, which runs on its own thread and hands its publisher over for the close).
    pub(crate) fn one(
        publisher: Publisher,
        endpoint: String,
        tally: SubscriptionTally,
        xpub: bool,
    ) -> Self {
        let subscriptions = vec![tally.subscribers()];
        Shards {
            publishers: vec![publisher],
            endpoints: vec![endpoint],
            tallies: vec![tally],
            peak: subscriptions[0],
            subscriptions,
            xpub,
            revocations: None,
        }
    }

    /// The shards.
    pub fn publishers(&self) -> &[Publisher] {
        &self.publishers
    }

    /// Shard `i`, to send on.
    pub fn publisher(&mut self, i: usize) -> &mut Publisher {
        &mut self.publishers[i]
    }

    /// How many shards.
    pub fn len(&self) -> usize {
        self.publishers.len()
    }

    /// True without shards.
    pub fn is_empty(&self) -> bool {
        self.publishers.is_empty()
    }

    /// The endpoints actually bound (wildcard ports resolved), one per shard.
    pub fn endpoints(&self) -> &[String] {
        &self.endpoints
    }

    /// Per shard, subscriptions as last read.
    pub fn subscriptions(&self) -> &[u64] {
        &self.subscriptions
    }

    /// Subscribers (subscriptions other than the batch opt-in) still present, summed over the shards.
    pub fn subscriptions_now(&self) -> u64 {
        self.subscriptions.iter().sum()
    }

    /// Most subscriptions any shard has had since [`reset_peak`](Self::reset_peak).
    pub fn peak(&self) -> u64 {
        self.peak
    }

    /// Starts counting the peak again from the subscriptions present now (a new run).
    pub fn reset_peak(&mut self) {
        self.peak = self.subscriptions.iter().copied().max().unwrap_or(0);
    }

    /// How long closing the shards may wait for what is still queued for subscribers (their ZMQ_LINGER).
    pub fn set_linger(&self, linger: Duration) -> Result<(), FeedError> {
        let ms = i32::try_from(linger.as_millis()).unwrap_or(i32::MAX);
        for p in &self.publishers {
            p.socket()
                .set_linger(ms)
                .map_err(|source| FeedError::Socket {
                    shard: p.shard(),
                    source,
                })?;
        }
        Ok(())
    }

    /// Reads pending subscription messages; returns per-shard subscription counts.
    pub fn poll_subscriptions(&mut self) -> Result<&[u64], FeedError> {
        if !self.xpub {
            return Ok(&self.subscriptions);
        }
        // Checked here, every few hundred records and while waiting: a key that left the allow directory loses
        // its live session (every subscriber reconnects and handshakes again).
        if let Some((r, role)) = self.revocations.as_mut() {
            if r.due() {
                for (p, endpoint) in self.publishers.iter().zip(&self.endpoints) {
                    r.reset_sessions(p.socket(), role, std::slice::from_ref(endpoint))?;
                }
            }
        }
        let mut msg = zmq::Message::new();
        for (i, p) in self.publishers.iter().enumerate() {
            loop {
                match p.socket().recv(&mut msg, zmq::DONTWAIT) {
                    // A batch-aware reader's "#B" is an opt-in beside its "", not another subscriber: the
                    // tally leaves it out of the count that --wait-for-subscribers, the start barrier and the
                    // summary's `subscribers` read.
                    Ok(()) => self.tallies[i].on_message(&msg),
                    Err(zmq::Error::EAGAIN | zmq::Error::EINTR) => break,
                    Err(source) => return Err(FeedError::Socket { shard: i, source }),
                }
            }
            self.subscriptions[i] = self.tallies[i].subscribers();
            self.peak = self.peak.max(self.subscriptions[i]);
        }
        Ok(&self.subscriptions)
    }

    /// Waits until every shard has seen at least `n` subscriptions (a subscriber with several topic prefixes
    /// counts once per prefix). Returns false if stopped or timed out first.
    pub fn wait_subscribers(
        &mut self,
        n: u64,
        timeout: Option<Duration>,
        stop: &AtomicBool,
    ) -> Result<bool, FeedError> {
        self.wait_on_subscriptions(timeout, stop, |s| s.subscriptions.iter().all(|&c| c >= n))
    }

    /// Waits until every subscriber has left every shard (their subscriptions withdrawn, which libzmq does when
    /// a SUB disconnects). Returns false if `timeout` passed or `stop` was raised first.
    ///
    /// Why wait at all: libzmq's linger flushes a socket's queue into its connection, but on close it discards
    /// what that connection still buffers while the kernel's socket buffer is full, so a subscriber that is
    /// behind when the shards close loses its unread tail without anyone counting it. A subscriber that has
    /// left has read all it wanted.
    fn wait_subscribers_gone(
        &mut self,
        timeout: Duration,
        stop: &AtomicBool,
    ) -> Result<bool, FeedError> {
        self.wait_on_subscriptions(Some(timeout), stop, |s| {
            !s.tallies.iter().any(SubscriptionTally::any)
        })
    }

    /// Reads subscription messages as they come until `done` holds (true), or until `stop` is raised or
    /// `timeout` passes (false). Polls the shards, so it wakes on a subscription, and at least every 50 ms to
    /// look at `stop`.
    fn wait_on_subscriptions(
        &mut self,
        timeout: Option<Duration>,
        stop: &AtomicBool,
        done: impl Fn(&Self) -> bool,
    ) -> Result<bool, FeedError> {
        let started = Instant::now();
        loop {
            self.poll_subscriptions()?;
            if done(self) {
                return Ok(true);
            }
            if stop.load(Ordering::Relaxed) || timeout.is_some_and(|t| started.elapsed() >= t) {
                return Ok(false);
            }
            let mut items: Vec<zmq::PollItem> = self
                .publishers
                .iter()
                .map(|p| p.socket().as_poll_item(zmq::POLLIN))
                .collect();
            match zmq::poll(&mut items, 50) {
                Ok(_) | Err(zmq::Error::EINTR) => {}
                Err(source) => return Err(FeedError::Socket { shard: 0, source }),
            }
        }
    }

    /// Decides per shard whether records go out in batches: only when the shard has a batch pool, every
    /// subscription it has is the empty prefix (a batch's topic `#B` matches no other prefix, so a prefix
    /// subscriber would receive nothing), and each of those subscribers said it reads batches by also
    /// subscribing to [`tickbox_wire::BATCH_TOPIC`] (a reader that does not know batches would count them as
    /// invalid). A shard leaving batch mode sends what it batched first, so order is kept, retrying a full pipe.
    /// `Ok(None)` if stopped while doing so; otherwise whether any frame went out.
    pub fn update_batching(&mut self, stop: &AtomicBool) -> Result<Option<bool>, FeedError> {
        let mut sent = false;
        for (p, tally) in self.publishers.iter_mut().zip(&self.tallies) {
            let want = tally.all_read_batches();
            let frames = p.counts().frames;
            while !p.set_batching(want)? {
                if stop.load(Ordering::Relaxed) {
                    return Ok(None);
                }
            }
            sent |= p.counts().frames != frames;
        }
        Ok(Some(sent))
    }

    /// Whether any shard batches now.
    pub fn batching(&self) -> bool {
        self.publishers.iter().any(Publisher::batching)
    }

    /// Sends every shard's batch, retrying a full pipe. False if stopped first (a refused batch is then dropped,
    /// its records not counted as sent).
    pub fn flush_all(&mut self, stop: &AtomicBool) -> Result<bool, FeedError> {
        for p in &mut self.publishers {
            if p.pending() > 0 && !p.flush_or_stop(stop)? {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// Records sent that libzmq still holds in the shards' queues: not yet written to every subscriber's
    /// connection, so closing now would drop them. What sits in the kernel's socket buffers counts as delivered
    /// (libzmq cannot see past them), and a record queued for a subscriber that then disconnected counts as
    /// released when libzmq drops that queue.
    pub fn undelivered(&self) -> u64 {
        self.publishers.iter().map(Publisher::undelivered).sum()
    }

    /// Waits up to `limit` (or until `stop`) for libzmq to hand everything queued to the subscribers'
    /// connections; returns what each shard still holds then.
    fn settle_per_shard(&self, limit: Duration, stop: Option<&AtomicBool>) -> Vec<u64> {
        let deadline = Instant::now() + limit;
        self.publishers
            .iter()
            .map(|p| p.wait_settled(deadline.saturating_duration_since(Instant::now()), stop))
            .collect()
    }

    /// The end of a run, before the shards close: the one drain rule. Interrupted (`stop` raised), what is
    /// queued gets only [`INTERRUPT_GRACE`]. Otherwise, with a `drain_timeout`, it waits up to that long for the
    /// subscribers to leave (a subscriber that has left has read all it wanted; libzmq then drops its queue);
    /// without one, what is queued gets `linger`. What libzmq still holds after that is undelivered: the shards
    /// then close without waiting on it again.
    pub fn close_wait(
        &mut self,
        drain_timeout: Duration,
        linger: Duration,
        stop: &AtomicBool,
    ) -> Result<Closing, FeedError> {
        let grace = (INTERRUPT_GRACE, None);
        let mut subscribers_stayed = false;
        // How long what is queued may still take to leave, and whether a stop cuts that wait short.
        let (limit, watch) = if stop.load(Ordering::Relaxed) {
            grace
        } else if drain_timeout.is_zero() {
            (linger, Some(stop))
        } else {
            let gone = self.wait_subscribers_gone(drain_timeout, stop)?;
            if stop.load(Ordering::Relaxed) {
                grace
            } else {
                // Gone: libzmq dropped their queues, nothing is held. Still connected (a long-lived reader such
                // as an LVC, or one that is behind): what it has not been sent by now is dropped at the close,
                // and counted.
                subscribers_stayed = !gone;
                (Duration::ZERO, None)
            }
        };
        let undelivered = self.settle_per_shard(limit, watch);
        if undelivered.iter().any(|&n| n > 0) {
            // Known undelivered: close without waiting on it again.
            self.set_linger(Duration::ZERO)?;
        }
        Ok(Closing {
            subscribers_at_close: self.poll_subscriptions()?.to_vec(),
            subscribers_stayed,
            undelivered,
            interrupted: stop.load(Ordering::Relaxed),
        })
    }

    /// The end of a feed's run ([`Shards::close_wait`] under the feed's settings, which every feed shares): a
    /// lossless run waits up to `drain_timeout` for its subscribers to leave; a lossy one, or one that ended
    /// `blocked` on a full pipe (whose subscriber stopped reading), gives its queue the close's usual linger. Logs
    /// who stayed and what was dropped; `subscribers_at_close` counts only subscribers that stayed through the
    /// wait.
    pub fn close_feed(
        &mut self,
        config: &FeedConfig,
        blocked: bool,
        stop: &AtomicBool,
    ) -> Result<Closing, FeedError> {
        let drain = if blocked {
            Duration::ZERO
        } else {
            crate::close_wait(config)
        };
        let linger = Duration::from_millis(LINGER_MS as u64);
        let mut closing = self.close_wait(drain, linger, stop)?;
        if closing.subscribers_stayed {
            tracing::warn!(
                subscribers_at_close = self.subscriptions_now(),
                "subscriber(s) still connected after drain_timeout {}; closing: one that is behind loses its \
                 unread tail",
                config.drain_timeout
            );
        } else {
            // A feed reports (and warns of) subscribers that stayed through its drain wait; a run that did not
            // wait (lossy, blocked, interrupted) has nobody it waited for.
            closing.subscribers_at_close.fill(0);
        }
        if closing.undelivered() > 0 {
            tracing::warn!(
                undelivered = closing.undelivered(),
                "closing with messages still queued for a subscriber: they are dropped, counted as undelivered"
            );
        }
        Ok(closing)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GRACE: Duration = Duration::from_millis(300);

    #[test]
    fn close_loss_names_the_cause_only_when_something_was_left() {
        let drain = Duration::from_millis(500);
        assert_eq!(CloseLoss::after_close(0, true, drain, GRACE), None);
        assert_eq!(
            CloseLoss::after_close(0, false, Duration::ZERO, GRACE),
            None
        );
        assert_eq!(
            CloseLoss::after_close(3, true, drain, GRACE),
            Some(CloseLoss::Interrupted { grace: GRACE })
        );
        assert_eq!(
            CloseLoss::after_close(3, false, Duration::ZERO, GRACE),
            Some(CloseLoss::NoDrainWait)
        );
        assert_eq!(
            CloseLoss::after_close(3, false, drain, GRACE),
            Some(CloseLoss::DrainExpired {
                drain_timeout: drain
            })
        );
        let m = CloseLoss::DrainExpired {
            drain_timeout: drain,
        }
        .message("replay", 7, "record", "");
        assert!(
            m.starts_with("replay: 7 record(s) were still queued for a subscriber after --drain-timeout 500ms and were dropped"),
            "{m}"
        );
        let m = CloseLoss::Interrupted { grace: GRACE }.message("feed", 2, "message", "");
        assert!(
            m.contains("2 message(s) still queued for a subscriber were not delivered")
                && m.contains("300ms after the interrupt"),
            "{m}"
        );
        let m = CloseLoss::NoDrainWait.message("feed", 1, "message", "HINT");
        assert!(
            m.contains("when the shards closed") && m.contains("(a subscriber fell behind; HINT)"),
            "{m}"
        );
    }
}
