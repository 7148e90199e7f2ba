//! The running feed: one thread per shard, each owning its socket, generator and pacer.

use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use tickbox_wire::{now_ns, Kind, SubscriptionTally};

use crate::config::{saturating_nanos, BatchMode, FeedConfig, PacingMode, Pattern, Rate};
use crate::counts::PublisherCounts;
use crate::error::FeedError;
use crate::generator::{GeneratorParams, MarketGenerator, Universe};
use crate::pacer::{SendPacer, Step};
use crate::publisher::{open_publisher_socket, Publisher};
use crate::shards::Shards;

/// How often an idle shard looks at the stop flag, at most.
const STOP_CHECK_NS: u64 = 20_000_000;

/// Messages of one pacer step stamped with one read of the wall clock (see `ShardRun::run`): at full speed about
/// ten microseconds of sending, the most a stamp can precede its message's send. The throughput bench's flat-out
/// publisher stamps the same way, so it measures what `feed --rate max` does.
pub const CLOCK_EVERY: u64 = 32;

/// Starts feeds.
pub struct Feed;

impl Feed {
    /// Validates `config`, starts one thread per shard and returns once every shard's socket is bound (or
    /// connected), so the handle's endpoints are ready to connect to. Bound shards come from `gate` (its context's
    /// ZAP handler applies `[security]`); `inproc://` endpoints are reachable only through the gate's context:
    /// use it for your subscriber too.
    pub fn start(gate: &tickbox_auth::Gate, config: FeedConfig) -> Result<FeedHandle, FeedError> {
        config.validate()?;
        gate.check_serves(&config.security)?;
        let config = Arc::new(config.resolved());
        let universe = Arc::new(Universe::from_config(&config));
        let stop = Arc::new(AtomicBool::new(false));
        let (ready_tx, ready_rx) = mpsc::channel();
        let mut threads = Vec::with_capacity(config.shards.len());
        let mut live = Vec::with_capacity(config.shards.len());
        for shard in 0..config.shards.len() {
            let counters = Arc::new(LiveCounters::default());
            live.push(Arc::clone(&counters));
            let gate = gate.clone();
            let config = Arc::clone(&config);
            let universe = Arc::clone(&universe);
            let shard_stop = Arc::clone(&stop);
            let ready_tx = ready_tx.clone();
            let spawned = std::thread::Builder::new()
                .name(format!("feed-shard-{shard}"))
                .spawn(move || {
                    let shard_config = &config.shards[shard];
                    let pinned = tickbox_zmqx::pin_if_configured(
                        shard_config.core,
                        &format!("feed shard {shard}"),
                    );
                    counters
                        .pinned_core
                        .store(pinned.map_or(0, |c| c as u64 + 1), Ordering::Relaxed);
                    // The pacer sleeps until `spin_us` before each send: with Linux's default 50 µs timer slack
                    // it woke up to 50 µs late at moderate rates, which `bench latency --shape processes`
                    // charged to the pipeline (p50 2 × raw at 5k–20k msg/s on a 16-core machine).
                    tickbox_zmqx::precise_sleep();
                    let (socket, endpoint) =
                        match open_publisher_socket(&gate, shard, shard_config, &config) {
                            Ok(opened) => opened,
                            Err(err) => {
                                let _ = ready_tx.send((shard, Err(err)));
                                return None;
                            }
                        };
                    let _ = ready_tx.send((shard, Ok(endpoint.clone())));
                    drop(ready_tx);
                    let shard_run = ShardRun {
                        shard,
                        endpoint,
                        config: &config,
                        universe: &universe,
                        stop: &shard_stop,
                        live: &counters,
                    };
                    let result = shard_run.run(socket);
                    counters.finished.store(true, Ordering::Release);
                    Some(result)
                });
            match spawned {
                Ok(handle) => threads.push(handle),
                Err(err) => {
                    stop.store(true, Ordering::SeqCst);
                    for handle in threads {
                        let _ = handle.join();
                    }
                    return Err(FeedError::Spawn(err));
                }
            }
        }
        drop(ready_tx);
        let mut endpoints = vec![String::new(); config.shards.len()];
        let mut first_error = None;
        for _ in 0..config.shards.len() {
            match ready_rx.recv() {
                Ok((shard, Ok(endpoint))) => endpoints[shard] = endpoint,
                Ok((_, Err(err))) => {
                    first_error.get_or_insert(err);
                }
                // Every sender is gone: a shard thread died before reporting.
                Err(_) => {
                    first_error.get_or_insert(FeedError::ShardPanicked(usize::MAX));
                    break;
                }
            }
        }
        let shards: Vec<ShardInfo> = endpoints
            .into_iter()
            .enumerate()
            .map(|(shard, endpoint)| ShardInfo {
                shard,
                publisher_id: config.publisher_id_base.wrapping_add(shard as u32),
                endpoint,
                symbols: universe.shard_symbols(shard).len(),
            })
            .collect();
        // A target is only promised by the paced synthetic market; `max` and the pathological pattern have none.
        let target_rate = match (config.pattern, config.rate, config.mode) {
            (Pattern::Synthetic, Rate::PerSecond(rate), PacingMode::Paced | PacingMode::Bursty) => {
                Some(rate)
            }
            _ => None,
        };
        let handle = FeedHandle {
            shards,
            universe,
            stop,
            live,
            threads,
            target_rate,
        };
        match first_error {
            Some(err) => {
                drop(handle);
                Err(err)
            }
            None => {
                for info in &handle.shards {
                    tracing::info!(
                        shard = info.shard,
                        publisher_id = info.publisher_id,
                        symbols = info.symbols,
                        "feed shard on {}",
                        info.endpoint
                    );
                }
                Ok(handle)
            }
        }
    }
}

/// What a caller needs to reach one shard.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShardInfo {
    /// Index of the shard in `FeedConfig::shards`.
    pub shard: usize,
    /// Publisher id in every header of this shard (`publisher_id_base + shard`).
    pub publisher_id: u32,
    /// The endpoint actually bound (`tcp://127.0.0.1:*` resolved to its port), or the one connected to.
    pub endpoint: String,
    /// Number of symbols this shard publishes.
    pub symbols: usize,
}

/// A snapshot of one shard's live counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ShardStats {
    /// Messages sent so far, by kind.
    pub counts: PublisherCounts,
    /// Sequence of the last data message sent (0 before the first).
    pub last_sequence: u64,
    /// Net subscriptions seen (XPUB sockets only: `back_pressure = "block"` or `wait_for_subscribers`).
    pub subscriptions: u64,
    /// The shard thread has ended (limit, duration, stop or error).
    pub finished: bool,
}

#[derive(Debug, Default)]
pub(crate) struct LiveCounters {
    quotes: AtomicU64,
    trades: AtomicU64,
    book_levels: AtomicU64,
    heartbeats: AtomicU64,
    would_block: AtomicU64,
    frames: AtomicU64,
    batches: AtomicU64,
    batch_buffers_allocated: AtomicU64,
    single_buffers_allocated: AtomicU64,
    last_sequence: AtomicU64,
    subscriptions: AtomicU64,
    /// The most subscriptions seen at once (0: nobody ever subscribed).
    peak_subscriptions: AtomicU64,
    finished: AtomicBool,
    /// The core the shard thread is pinned to, plus one (0: not pinned).
    pub(crate) pinned_core: AtomicU64,
}

impl LiveCounters {
    #[inline]
    fn publish(&self, publisher: &Publisher) {
        let c = publisher.counts();
        self.quotes.store(c.quotes, Ordering::Relaxed);
        self.trades.store(c.trades, Ordering::Relaxed);
        self.book_levels.store(c.book_levels, Ordering::Relaxed);
        self.heartbeats.store(c.heartbeats, Ordering::Relaxed);
        self.would_block.store(c.would_block, Ordering::Relaxed);
        self.frames.store(c.frames, Ordering::Relaxed);
        self.batches.store(c.batches, Ordering::Relaxed);
        self.batch_buffers_allocated
            .store(c.batch_buffers_allocated, Ordering::Relaxed);
        self.single_buffers_allocated
            .store(c.single_buffers_allocated, Ordering::Relaxed);
        self.last_sequence
            .store(publisher.last_sequence(), Ordering::Release);
    }

    pub(crate) fn snapshot(&self) -> ShardStats {
        ShardStats {
            counts: PublisherCounts {
                quotes: self.quotes.load(Ordering::Relaxed),
                trades: self.trades.load(Ordering::Relaxed),
                book_levels: self.book_levels.load(Ordering::Relaxed),
                heartbeats: self.heartbeats.load(Ordering::Relaxed),
                would_block: self.would_block.load(Ordering::Relaxed),
                frames: self.frames.load(Ordering::Relaxed),
                batches: self.batches.load(Ordering::Relaxed),
                batch_buffers_allocated: self.batch_buffers_allocated.load(Ordering::Relaxed),
                single_buffers_allocated: self.single_buffers_allocated.load(Ordering::Relaxed),
            },
            last_sequence: self.last_sequence.load(Ordering::Acquire),
            subscriptions: self.subscriptions.load(Ordering::Relaxed),
            finished: self.finished.load(Ordering::Acquire),
        }
    }
}

/// A running feed. Dropping it stops and joins every shard.
pub struct FeedHandle {
    shards: Vec<ShardInfo>,
    universe: Arc<Universe>,
    stop: Arc<AtomicBool>,
    live: Vec<Arc<LiveCounters>>,
    threads: Vec<JoinHandle<Option<Result<PublisherShardReport, FeedError>>>>,
    target_rate: Option<u64>,
}

impl FeedHandle {
    /// Shards in order: shard `i` publishes the symbols with `shard_for(key, n) == i`.
    pub fn shards(&self) -> &[ShardInfo] {
        &self.shards
    }

    /// The resolved endpoint of every shard, in shard order.
    pub fn endpoints(&self) -> Vec<String> {
        self.shards.iter().map(|s| s.endpoint.clone()).collect()
    }

    /// The symbol universe being published.
    pub fn universe(&self) -> &Universe {
        &self.universe
    }

    /// The metrics of this feed, read at each scrape (`feed --metrics`).
    pub fn metrics(&self) -> crate::FeedMetrics {
        crate::FeedMetrics {
            shards: self.shards.clone(),
            live: self.live.clone(),
        }
    }

    /// Live counters of every shard (updated after each batch).
    pub fn stats(&self) -> Vec<ShardStats> {
        self.live.iter().map(|c| c.snapshot()).collect()
    }

    /// Asks every shard to stop; they do within ~20 ms (or one blocked send timeout with `block`).
    pub fn stop(&self) {
        self.stop.store(true, Ordering::SeqCst);
    }

    /// The flag `stop` sets, for callers that want to share it (e.g. with a Ctrl-C handler).
    pub fn stop_flag(&self) -> Arc<AtomicBool> {
        Arc::clone(&self.stop)
    }

    /// True once every shard has ended by itself (duration or message limit reached, or an error).
    pub fn is_finished(&self) -> bool {
        self.live.iter().all(|c| c.finished.load(Ordering::Acquire))
    }

    /// Waits for every shard to end (it does not stop them: call [`stop`](Self::stop) first to end early).
    /// Returns the first shard error, if any, after all shards have been joined.
    pub fn join(mut self) -> Result<FeedReport, FeedError> {
        let threads = std::mem::take(&mut self.threads);
        let mut shards = Vec::with_capacity(threads.len());
        let mut first_error = None;
        for (shard, handle) in threads.into_iter().enumerate() {
            match handle.join() {
                Ok(Some(Ok(report))) => shards.push(report),
                Ok(Some(Err(err))) => {
                    self.stop();
                    first_error.get_or_insert(err);
                }
                Ok(None) => {}
                Err(_) => {
                    self.stop();
                    first_error.get_or_insert(FeedError::ShardPanicked(shard));
                }
            }
        }
        match first_error {
            Some(err) => Err(err),
            None => Ok(FeedReport {
                shards,
                target_rate: self.target_rate,
                source: None,
            }),
        }
    }

    /// `stop` then `join`.
    pub fn stop_and_join(self) -> Result<FeedReport, FeedError> {
        self.stop();
        self.join()
    }
}

impl Drop for FeedHandle {
    fn drop(&mut self) {
        self.stop();
        for handle in self.threads.drain(..) {
            let _ = handle.join();
        }
    }
}

/// What one shard did.
#[derive(Debug, Clone, PartialEq)]
pub struct PublisherShardReport {
    /// Index of the shard in `FeedConfig::shards`.
    pub shard: usize,
    /// Publisher id in every header of this shard.
    pub publisher_id: u32,
    /// The endpoint bound (port resolved) or connected to.
    pub endpoint: String,
    /// Number of symbols this shard published.
    pub symbols: usize,
    /// Messages sent, by kind.
    pub counts: PublisherCounts,
    /// Sequence of the last data message (equals the data message count: sequences start at 1, gap-free).
    pub last_sequence: u64,
    /// From the first scheduled message to the end of the run.
    pub duration: Duration,
    /// Schedule time skipped after falling more than `max_catch_up` behind.
    pub skipped: Duration,
    /// When the pacer's schedule started (ns since the Unix epoch, the [`tickbox_wire::now_ns`] clock): with
    /// [`crate::paced_offset_ns`] and no time skipped, message `k` (sequence `k + 1`) was due at this plus its
    /// offset. 0 when the shard never paced (a source feed).
    pub schedule_start_ns: u64,
    /// Messages of the last batch abandoned because the run ended (duration or stop) while a no-drop pipe was
    /// full: generated, never sent, no sequence used.
    pub unsent: u64,
    /// Subscribers still connected when a no-drop shard closed after waiting `drain_timeout` for them to leave
    /// (0 when all left, or the run was not waited on): each may have lost its unread tail at the close.
    pub subscribers_at_close: u64,
    /// Data messages counted in `counts` that libzmq still held for a subscriber when the shard closed (after
    /// its drain, or the interrupt grace), dropped at the close: see [`Publisher::undelivered`].
    pub undelivered: u64,
    /// Whether any subscriber was subscribed at some point of the run, for a shard that connects (its socket is an
    /// XPUB, which sees subscriptions); `None` for a shard that binds.
    pub subscribed: Option<bool>,
}

impl PublisherShardReport {
    /// Achieved data rate, messages per second.
    pub fn rate(&self) -> f64 {
        let secs = self.duration.as_secs_f64();
        if secs > 0.0 {
            self.counts.data() as f64 / secs
        } else {
            0.0
        }
    }
}

/// Below this share of its target rate a feed reports a shortfall: the run did not deliver what was asked.
pub const RATE_SHORTFALL_RATIO: f64 = 0.95;

/// What the whole feed did; `Display` prints the per-shard summary table.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct FeedReport {
    /// One report per shard, in shard order.
    pub shards: Vec<PublisherShardReport>,
    /// The data rate asked for over all shards (msg/s); `None` when there was none (`max`, pathological, a
    /// recording).
    pub target_rate: Option<u64>,
    /// What was read from a recording, when the feed published one ([`crate::SourceFeed`]); `None` for the
    /// synthetic market.
    pub source: Option<crate::source::SourceTotals>,
}

impl FeedReport {
    /// Data messages over all shards.
    pub fn total_data(&self) -> u64 {
        self.shards.iter().map(|s| s.counts.data()).sum()
    }

    /// Messages abandoned on full no-drop pipes when the run ended, over all shards.
    pub fn total_unsent(&self) -> u64 {
        self.shards.iter().map(|s| s.unsent).sum()
    }

    /// Subscribers still connected when their shard closed after its drain wait, summed over the shards.
    pub fn total_subscribers_at_close(&self) -> u64 {
        self.shards.iter().map(|s| s.subscribers_at_close).sum()
    }

    /// Data messages sent while no subscriber was there on any shard, when every shard connects and none ever had
    /// a subscriber: a feed that connected to nothing, as `replay`'s "delivered to no subscriber". `None` when
    /// something was delivered, nothing was sent, or a shard binds.
    pub fn delivered_to_nobody(&self) -> Option<u64> {
        let sent: u64 = self.shards.iter().map(|s| s.counts.data()).sum();
        let nobody =
            !self.shards.is_empty() && self.shards.iter().all(|s| s.subscribed == Some(false));
        (nobody && sent > 0).then_some(sent)
    }

    /// Data messages sent but still queued in libzmq when their shard closed (dropped), over all shards.
    pub fn total_undelivered(&self) -> u64 {
        self.shards.iter().map(|s| s.undelivered).sum()
    }

    /// Sum of the shards' achieved rates.
    pub fn total_rate(&self) -> f64 {
        self.shards.iter().map(PublisherShardReport::rate).sum()
    }

    /// `Some((target, achieved))` when the feed achieved less than [`RATE_SHORTFALL_RATIO`] of its target.
    pub fn rate_shortfall(&self) -> Option<(u64, f64)> {
        let target = self.target_rate?;
        let achieved = self.total_rate();
        (achieved < target as f64 * RATE_SHORTFALL_RATIO).then_some((target, achieved))
    }
}

impl fmt::Display for FeedReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(totals) = &self.source {
            return fmt_source(self, totals, f);
        }
        writeln!(
            f,
            "{:>5} {:>9} {:>7} {:>12} {:>11} {:>6} {:>12} {:>8} {:>12}  endpoint",
            "shard", "publisher", "symbols", "quotes", "trades", "hb", "last_seq", "secs", "msg/s"
        )?;
        for s in &self.shards {
            writeln!(
                f,
                "{:>5} {:>9} {:>7} {:>12} {:>11} {:>6} {:>12} {:>8.2} {:>12.0}  {}",
                s.shard,
                s.publisher_id,
                s.symbols,
                s.counts.quotes,
                s.counts.trades,
                s.counts.heartbeats,
                s.last_sequence,
                s.duration.as_secs_f64(),
                s.rate(),
                s.endpoint
            )?;
        }
        write!(
            f,
            "total: {} data messages, {:.0} msg/s",
            self.total_data(),
            self.total_rate()
        )?;
        let (frames, batches) = self.shards.iter().fold((0, 0), |(f, b), s| {
            (f + s.counts.frames, b + s.counts.batches)
        });
        if batches > 0 {
            write!(
                f,
                ", in {frames} ZeroMQ messages ({batches} of them batches)"
            )?;
        }
        if let Some(target) = self.target_rate {
            write!(
                f,
                " of {target} msg/s asked ({:.0} %)",
                100.0 * self.total_rate() / target.max(1) as f64
            )?;
        }
        let unsent = self.total_unsent();
        if unsent > 0 {
            write!(
                f,
                "\nunsent: {unsent} messages abandoned on a full no-drop pipe when the run ended (a subscriber stopped reading)"
            )?;
        }
        crate::counts::write_staying(f, self.total_subscribers_at_close())?;
        crate::counts::write_undelivered(f, self.total_undelivered())?;
        if let Some((target, achieved)) = self.rate_shortfall() {
            write!(
                f,
                "\nWARNING: the feed achieved {achieved:.0} of the {target} msg/s asked: the host could not keep up \
                 (fewer symbols, a lower --rate, or pinned cores on a larger host)"
            )?;
        }
        Ok(())
    }
}

/// Heartbeats a shard sends as it ends, so downstream accounting sees its last sequence even when the last data
/// messages were dropped.
const CLOSING_HEARTBEATS: u32 = 4;
/// Spacing of the closing heartbeats (or the heartbeat interval, if shorter).
const CLOSING_HEARTBEAT_GAP: Duration = Duration::from_millis(50);

struct ShardRun<'a> {
    shard: usize,
    endpoint: String,
    config: &'a FeedConfig,
    universe: &'a Universe,
    stop: &'a AtomicBool,
    live: &'a LiveCounters,
}

impl ShardRun<'_> {
    fn run(self, socket: zmq::Socket) -> Result<PublisherShardReport, FeedError> {
        let config = self.config;
        let shard = self.shard;
        let publisher_id = config.publisher_id_base.wrapping_add(shard as u32);
        let indices = self.universe.shard_symbols(shard);
        let seed = config
            .seed
            .wrapping_add((shard as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15));
        let mut generator =
            MarketGenerator::new(self.universe, &indices, GeneratorParams::from(config), seed);
        let pacing =
            config.shard_pacing(self.universe.shard_share(shard), 2 * generator.len() as u64);
        let heartbeat_ns = saturating_nanos(config.heartbeat_interval);
        let xpub = config.uses_xpub();
        let auto_batch = config.batch_mode(false) == BatchMode::Auto;
        let mut publisher = Publisher::new(socket, shard, publisher_id, heartbeat_ns);
        publisher.set_guide_framing(config.framing == tickbox_wire::Framing::Guide);
        if auto_batch {
            publisher = publisher.with_batch(config.batch_max_bytes, config.batch_max_records);
        }
        let mut tally = SubscriptionTally::default();
        // With fewer symbols than shards some shards own none. Such a shard only heartbeats; with a message
        // limit it could never reach the limit, so it ends at once instead of holding up `join` forever.
        let empty_and_bounded = generator.is_empty() && config.max_messages_per_shard.is_some();
        if generator.is_empty() {
            tracing::warn!(
                shard,
                "feed shard owns no symbols (fewer symbols than shards?)"
            );
        }

        if config.wait_for_subscribers > 0 && !empty_and_bounded {
            self.wait_for_subscribers(&publisher, &mut tally);
        }
        if auto_batch {
            self.drain_subscriptions(&publisher, &mut tally);
            publisher.set_batching(tally.all_read_batches())?;
        }

        // The schedule's start on the wall clock the headers are stamped with, so a reader can place the schedule,
        // read before the pacer's monotonic origin: a message is then stamped no earlier than its place in the
        // schedule (start + offset). Read the other way round, a preemption between the two reads made every stamp
        // precede its intended send time by the preemption's length.
        let schedule_start_ns = now_ns();
        let clock = Instant::now();
        let mono = || clock.elapsed().as_nanos() as u64;
        let mut pacer = SendPacer::new(
            pacing,
            0,
            seed ^ 0xBAD5_EED5,
            config.max_batch,
            saturating_nanos(config.max_catch_up),
        );
        let end_ns = config.duration.map(saturating_nanos);
        let limit = config.max_messages_per_shard.unwrap_or(u64::MAX);
        let spin_ns = config.spin_us.saturating_mul(1_000);
        let initial_topics = 2 * generator.len();
        let mut cursor = 0usize;
        let mut last_send_ns = 0u64;
        let mut sent = 0u64;
        let mut unsent = 0u64;
        // A stalled subscriber on a no-drop pipe must not stretch the run past `--duration` or past a stop: each
        // blocked send returns after SEND_TIMEOUT_MS and re-checks both.
        let over =
            |now: u64| self.stop.load(Ordering::Relaxed) || end_ns.is_some_and(|end| now >= end);

        // Bound shards close their live sessions when a key leaves the allow directory, so the revoked
        // subscriber's next handshake is refused (one atomic load per pacer step otherwise).
        let mut revocations =
            (!config.shards[shard].connect).then(|| config.security.revocations());
        'run: loop {
            if self.stop.load(Ordering::Relaxed) {
                break;
            }
            if let Some(r) = revocations.as_mut() {
                if r.due() {
                    r.reset_sessions(
                        publisher.socket(),
                        "feed",
                        std::slice::from_ref(&self.endpoint),
                    )?;
                }
            }
            let now = mono();
            if end_ns.is_some_and(|end| now >= end) || sent >= limit || empty_and_bounded {
                break;
            }
            let step = if generator.is_empty() {
                Step::WaitUntil(now + STOP_CHECK_NS)
            } else {
                pacer.poll(now)
            };
            match step {
                Step::Send(n) => {
                    let n = (n as u64).min(limit - sent);
                    let mut venue_time = 0;
                    for i in 0..n {
                        // The wall clock is read for the first message of the step and again every
                        // CLOCK_EVERY messages, not for each (at full speed that read was a tenth of the sending
                        // thread's time). Each stamp is still honest: read within this step, before the message
                        // it stamps is sent, so a stamp is never later than its send and a latency measured from
                        // it can only come out longer, by at most CLOCK_EVERY messages' sending time.
                        if i % CLOCK_EVERY == 0 {
                            venue_time = now_ns();
                        }
                        let generated =
                            if config.pattern == Pattern::Pathological && cursor < initial_topics {
                                let kind = if cursor & 1 == 0 {
                                    Kind::Quote
                                } else {
                                    Kind::Trade
                                };
                                cursor += 1;
                                generator.next_for((cursor - 1) / 2, kind, venue_time)
                            } else {
                                match generator.next(venue_time) {
                                    Some(generated) => generated,
                                    None => break,
                                }
                            };
                        let topic = generator.topic(generated.symbol, generated.payload.kind());
                        // A full no-drop pipe returns None: retry the same message (its sequence was not used).
                        while publisher
                            .publish_at(topic, &generated.payload, venue_time)?
                            .is_none()
                        {
                            self.live.publish(&publisher);
                            if over(mono()) {
                                // Batched messages not sent yet are abandoned with the rest.
                                unsent = n - i + publisher.pending() as u64;
                                break 'run;
                            }
                        }
                        sent += 1;
                    }
                    // The end of the step sends the batch: no message waits longer than one pacer step.
                    while !publisher.flush()? {
                        self.live.publish(&publisher);
                        if over(mono()) {
                            unsent = publisher.pending() as u64;
                            break 'run;
                        }
                    }
                    if auto_batch {
                        // Between steps, with nothing batched: a new prefix subscriber is seen within one step.
                        self.drain_subscriptions(&publisher, &mut tally);
                        publisher.set_batching(tally.all_read_batches())?;
                    } else if xpub {
                        // A flat-out shard never waits: its subscriber count is kept here, between steps.
                        self.drain_subscriptions(&publisher, &mut tally);
                    }
                    last_send_ns = mono();
                    self.live.publish(&publisher);
                }
                Step::WaitUntil(deadline) => {
                    if heartbeat_ns > 0 && now.saturating_sub(last_send_ns) >= heartbeat_ns {
                        publisher.heartbeat()?;
                        last_send_ns = now;
                        self.live.publish(&publisher);
                    }
                    if xpub {
                        self.drain_subscriptions(&publisher, &mut tally);
                        if auto_batch {
                            publisher.set_batching(tally.all_read_batches())?;
                        }
                    }
                    let mut wake = deadline.min(now + STOP_CHECK_NS);
                    if heartbeat_ns > 0 {
                        wake = wake.min(last_send_ns + heartbeat_ns);
                    }
                    if let Some(end) = end_ns {
                        wake = wake.min(end);
                    }
                    wait_until(&mono, wake, spin_ns);
                }
            }
        }
        let duration = clock.elapsed();
        if unsent > 0 {
            tracing::warn!(
                shard,
                unsent,
                "feed shard ended while blocked on a full no-drop pipe (a subscriber stopped reading)"
            );
        }
        // Blocked at the end, the pipe is still full: the closing heartbeats would only wait out their send
        // timeouts, so they are skipped to keep the run within its bound.
        if heartbeat_ns > 0 && publisher.last_sequence() > 0 && unsent == 0 {
            // A lost trailing message is only noticed by a later message naming its sequence. A publisher that
            // ends says its last sequence a few times, spaced so a briefly full pipe has drained in between.
            let gap = Duration::from_nanos(heartbeat_ns).min(CLOSING_HEARTBEAT_GAP);
            for _ in 0..CLOSING_HEARTBEATS {
                std::thread::sleep(gap);
                publisher.heartbeat()?;
            }
        }
        // A lossless run that ended by itself waits for its subscribers to leave before closing: closing under a
        // subscriber that is behind would drop its unread tail. The rule is every feed's (`Shards::close_feed`).
        let mut closing_shard = Shards::one(publisher, self.endpoint.clone(), tally, xpub);
        let closing = closing_shard.close_feed(config, unsent > 0, self.stop)?;
        let publisher = &closing_shard.publishers()[0];
        let (subscribers_at_close, undelivered) =
            (closing.subscribers_at_close[0], closing.undelivered[0]);
        self.live.publish(publisher);
        Ok(PublisherShardReport {
            shard,
            publisher_id,
            endpoint: self.endpoint,
            symbols: generator.len(),
            counts: publisher.counts(),
            last_sequence: publisher.last_sequence(),
            duration,
            skipped: Duration::from_nanos(pacer.skipped_ns()),
            schedule_start_ns,
            unsent,
            subscribers_at_close,
            undelivered,
            // Said for a shard that connects: one that binds may well run before its subscribers come, as
            // feeds do, and a plain PUB could not tell anyway.
            subscribed: (xpub && config.shards.get(shard).is_some_and(|s| s.connect))
                .then(|| self.live.peak_subscriptions.load(Ordering::Relaxed) > 0),
        })
    }

    /// Counts subscribe/unsubscribe messages queued on an XPUB (first byte 1 or 0) by kind of prefix, and
    /// publishes the subscriber count (the batch opt-in left out) for the live view and the start wait.
    fn drain_subscriptions(&self, publisher: &Publisher, tally: &mut SubscriptionTally) {
        while let Ok(msg) = publisher.socket().recv_msg(zmq::DONTWAIT) {
            tally.on_message(&msg);
        }
        self.live
            .subscriptions
            .store(tally.subscribers(), Ordering::Relaxed);
        self.live
            .peak_subscriptions
            .fetch_max(tally.subscribers(), Ordering::Relaxed);
    }

    fn wait_for_subscribers(&self, publisher: &Publisher, tally: &mut SubscriptionTally) {
        let want = self.config.wait_for_subscribers as u64;
        let deadline = self
            .config
            .subscriber_wait_deadline()
            .map(|wait| Instant::now() + wait);
        if deadline.is_none() {
            tracing::info!(
                shard = self.shard,
                "waiting for {want} subscriber(s) before the first message"
            );
        }
        while self.live.subscriptions.load(Ordering::Relaxed) < want {
            if self.stop.load(Ordering::Relaxed) {
                return;
            }
            if deadline.is_some_and(|d| Instant::now() >= d) {
                tracing::warn!(
                    shard = self.shard,
                    "only {} of {want} subscriptions after {}; starting anyway",
                    self.live.subscriptions.load(Ordering::Relaxed),
                    self.config.subscriber_wait
                );
                return;
            }
            self.drain_subscriptions(publisher, tally);
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}

/// Sleeps until `spin_ns` before `deadline`, then spins: the OS wakes us late by tens of microseconds, the
/// spin absorbs that without burning a core between messages.
fn wait_until(mono: &impl Fn() -> u64, deadline: u64, spin_ns: u64) {
    loop {
        let now = mono();
        if now >= deadline {
            return;
        }
        let left = deadline - now;
        if left > spin_ns {
            std::thread::sleep(Duration::from_nanos(left - spin_ns));
        } else {
            std::hint::spin_loop();
        }
    }
}

/// The summary table of a replayed recording (`FeedReport`'s `Display` when it carries [`SourceTotals`]).
fn fmt_source(
    report: &FeedReport,
    totals: &crate::source::SourceTotals,
    f: &mut std::fmt::Formatter<'_>,
) -> std::fmt::Result {
    writeln!(
        f,
        "{:>5} {:>9} {:>12} {:>11} {:>11} {:>6} {:>12}  endpoint",
        "shard", "publisher", "quotes", "trades", "book", "hb", "last_seq"
    )?;
    for s in &report.shards {
        writeln!(
            f,
            "{:>5} {:>9} {:>12} {:>11} {:>11} {:>6} {:>12}  {}",
            s.shard,
            s.publisher_id,
            s.counts.quotes,
            s.counts.trades,
            s.counts.book_levels,
            s.counts.heartbeats,
            s.last_sequence,
            s.endpoint
        )?;
    }
    write!(
        f,
        "source: {} read, {} published, {} skipped in {:.3} s at speed {}: {:.0} records/s{}",
        totals.read,
        totals.published,
        totals.total_skipped(),
        totals.elapsed.as_secs_f64(),
        totals.speed,
        totals.rate(),
        if totals.complete {
            ""
        } else {
            " (stopped before the end of the source)"
        }
    )?;
    for (reason, n) in &totals.skipped {
        write!(f, "\nskipped {n}: {reason}")?;
    }
    crate::counts::write_staying(f, report.total_subscribers_at_close())?;
    crate::counts::write_undelivered(f, report.total_undelivered())
}

#[cfg(test)]
mod report_tests {
    use super::*;

    fn report(target_rate: Option<u64>, sent: u64, secs: u64) -> FeedReport {
        FeedReport {
            shards: vec![PublisherShardReport {
                shard: 0,
                publisher_id: 1,
                endpoint: "tcp://127.0.0.1:1".into(),
                symbols: 1,
                counts: PublisherCounts {
                    quotes: sent,
                    ..PublisherCounts::default()
                },
                last_sequence: sent,
                duration: Duration::from_secs(secs),
                skipped: Duration::ZERO,
                schedule_start_ns: 0,
                unsent: 0,
                subscribers_at_close: 0,
                undelivered: 0,
                subscribed: None,
            }],
            target_rate,
            source: None,
        }
    }

    #[test]
    fn shortfall_is_reported_below_95_percent_of_the_target_only() {
        assert_eq!(
            report(Some(1_000), 9_400, 10).rate_shortfall(),
            Some((1_000, 940.0))
        );
        assert_eq!(report(Some(1_000), 9_500, 10).rate_shortfall(), None);
        assert_eq!(report(None, 1, 10).rate_shortfall(), None);
        let text = report(Some(200_000), 880_000, 10).to_string();
        assert!(text.contains("of 200000 msg/s asked (44 %)"), "{text}");
        assert!(
            text.contains("WARNING: the feed achieved 88000 of the 200000 msg/s asked"),
            "{text}"
        );
    }
}
