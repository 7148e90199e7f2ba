//! Publishing recorded market data (a vendor file, a journal) on the feed's sharded publishers instead of the
//! synthetic market. Reading the recording is the caller's: anything that implements [`RecordSource`] (the
//! `tickbox-dbn` crate reads DBN files and journals) hands records over in order, each with the time it happened
//! (which paces the replay) and its origin time (kept in the header's `origin_time_ns`). Every record goes out
//! under the shard's own publisher id, session and gap-free sequence, stamped with the send time, exactly like a
//! synthetic message, so every downstream hop accounts for it the same way.
//!
//! One thread owns every shard socket and publishes in source order: the order of a recording is the one thing
//! that must survive (per symbol, a book only makes sense in order), and one reader fanning out to shard threads
//! would need a re-ordering stage for nothing on the rates a single decoder reaches.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use tickbox_units::{ReplayPacer, Speed};
use tickbox_wire::{now_ns, shard_for, Payload, SubscriptionTally};

use crate::config::{saturating_nanos, FeedConfig};
use crate::error::FeedError;
use crate::publisher::{open_publisher_socket, Publisher};
use crate::runner::{FeedReport, PublisherShardReport, ShardInfo};

/// One recorded message to publish.
#[derive(Debug, Clone, PartialEq)]
pub struct SourceRecord {
    /// When it happened in the recording (ns since the epoch): paces the replay. Times that go backwards are
    /// sent at once, never waited for.
    pub time_ns: u64,
    /// The original event time, carried in the header's `origin_time_ns`.
    pub origin_time_ns: u64,
    /// Topic as a tickbox publisher spells it (`Q.XNAS.AAPL`); the part after the first `.` picks the shard.
    pub topic: String,
    /// The payload (a quote, trade or book level).
    pub payload: Payload,
}

/// What a source yields: a record to publish, or one it read and cannot publish, with the reason (counted in
/// the report under that reason).
#[derive(Debug, Clone, PartialEq)]
pub enum SourceItem {
    /// Publish this.
    Record(SourceRecord),
    /// Read but not publishable; the reason groups the count (keep it short and free of per-record detail).
    Skipped(String),
}

/// Why a source could not be read on (a damaged or truncated file): the feed stops with this error.
pub type SourceError = Box<dyn std::error::Error + Send + Sync>;

/// A recording read in order.
pub trait RecordSource: Send {
    /// The next item, `Ok(None)` at the end, `Err` when the recording is damaged and cannot be read on.
    fn next_item(&mut self) -> Result<Option<SourceItem>, SourceError>;
}

/// Starts a feed that publishes a recording.
pub struct SourceFeed;

/// How often a waiting replay looks at the stop flag and the heartbeat clocks, at most.
const WAKE_EVERY: Duration = Duration::from_millis(20);
/// Heartbeats sent as the replay ends, so a lost trailing message is still noticed (as the synthetic feed does).
const CLOSING_HEARTBEATS: u32 = 4;
/// Spacing of the closing heartbeats.
const CLOSING_HEARTBEAT_GAP: Duration = Duration::from_millis(50);

impl SourceFeed {
    /// Opens every shard socket of `config` (bound or connected, as for the synthetic feed) and starts
    /// publishing `source` at `speed`; returns once every socket is ready. The generator fields of `config`
    /// (symbols, rate, mode, pattern) do not apply; `duration`, `wait_for_subscribers`, `no_drop`, `sndhwm`,
    /// `heartbeat_interval` and `publisher_id_base` do.
    pub fn start(
        ctx: &zmq::Context,
        config: FeedConfig,
        source: Box<dyn RecordSource>,
        speed: Speed,
    ) -> Result<SourceFeedHandle, FeedError> {
        config.validate()?;
        let publisher_id_base = config.publisher_id_base;
        let stop = Arc::new(AtomicBool::new(false));
        let live = Arc::new(SourceLive::default());
        let (ready_tx, ready_rx) = mpsc::channel();
        let thread = {
            let ctx = ctx.clone();
            let stop = Arc::clone(&stop);
            let live = Arc::clone(&live);
            std::thread::Builder::new()
                .name("feed-source".into())
                .spawn(move || {
                    let mut publishers = Vec::with_capacity(config.shards.len());
                    let mut endpoints = Vec::with_capacity(config.shards.len());
                    for (shard, shard_config) in config.shards.iter().enumerate() {
                        match open_publisher_socket(&ctx, shard, shard_config, &config) {
                            Ok((socket, endpoint)) => {
                                let id = config.publisher_id_base.wrapping_add(shard as u32);
                                let hb = saturating_nanos(config.heartbeat_interval);
                                publishers.push(Publisher::new(socket, shard, id, hb));
                                endpoints.push(endpoint);
                            }
                            Err(err) => {
                                let _ = ready_tx.send(Err(err));
                                live.finished.store(true, Ordering::Release);
                                return None;
                            }
                        }
                    }
                    let _ = ready_tx.send(Ok(endpoints.clone()));
                    let run = SourceRun {
                        config: &config,
                        stop: &stop,
                        live: &live,
                        speed,
                    };
                    let result = run.run(publishers, endpoints, source);
                    live.finished.store(true, Ordering::Release);
                    Some(result)
                })
                .map_err(FeedError::Spawn)?
        };
        let endpoints = match ready_rx.recv() {
            Ok(Ok(endpoints)) => endpoints,
            Ok(Err(err)) => {
                let _ = thread.join();
                return Err(err);
            }
            Err(_) => {
                let _ = thread.join();
                return Err(FeedError::ShardPanicked(0));
            }
        };
        let shards = endpoints
            .into_iter()
            .enumerate()
            .map(|(shard, endpoint)| ShardInfo {
                shard,
                publisher_id: publisher_id_base.wrapping_add(shard as u32),
                endpoint,
                symbols: 0,
            })
            .collect();
        Ok(SourceFeedHandle {
            shards,
            stop,
            live,
            thread: Some(thread),
        })
    }
}

#[derive(Debug, Default)]
struct SourceLive {
    read: AtomicU64,
    published: AtomicU64,
    skipped: AtomicU64,
    finished: AtomicBool,
}

/// A snapshot of a running replay.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SourceStats {
    /// Items read from the source so far.
    pub read: u64,
    /// Records published so far.
    pub published: u64,
    /// Items skipped so far.
    pub skipped: u64,
    /// The replay has ended (end of the source, duration, stop or error).
    pub finished: bool,
}

/// A running replay of a recording. Dropping it stops and joins.
pub struct SourceFeedHandle {
    shards: Vec<ShardInfo>,
    stop: Arc<AtomicBool>,
    live: Arc<SourceLive>,
    thread: Option<JoinHandle<Option<Result<FeedReport, FeedError>>>>,
}

impl SourceFeedHandle {
    /// Shards in order (the symbol count is 0: a recording's symbols are known only as they are read).
    pub fn shards(&self) -> &[ShardInfo] {
        &self.shards
    }

    /// Live counters.
    pub fn stats(&self) -> SourceStats {
        SourceStats {
            read: self.live.read.load(Ordering::Relaxed),
            published: self.live.published.load(Ordering::Relaxed),
            skipped: self.live.skipped.load(Ordering::Relaxed),
            finished: self.live.finished.load(Ordering::Acquire),
        }
    }

    /// Asks the replay to stop; it does within ~20 ms (or one blocked send timeout with `no_drop`).
    pub fn stop(&self) {
        self.stop.store(true, Ordering::SeqCst);
    }

    /// True once the replay has ended by itself.
    pub fn is_finished(&self) -> bool {
        self.live.finished.load(Ordering::Acquire)
    }

    /// Waits for the replay to end (call [`stop`](Self::stop) first to end it early).
    pub fn join(mut self) -> Result<FeedReport, FeedError> {
        match self.thread.take().map(JoinHandle::join) {
            Some(Ok(Some(result))) => result,
            Some(Ok(None)) | None => Err(FeedError::ShardPanicked(0)),
            Some(Err(_)) => Err(FeedError::ShardPanicked(0)),
        }
    }
}

impl Drop for SourceFeedHandle {
    fn drop(&mut self) {
        self.stop();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// What a replay of a recording did, beside its shards' reports (the [`FeedReport`] that carries it).
#[derive(Debug, Clone, PartialEq)]
pub struct SourceTotals {
    /// The speed asked for.
    pub speed: Speed,
    /// Items read from the source (published + skipped).
    pub read: u64,
    /// Records published (over all shards).
    pub published: u64,
    /// Items not published, by reason.
    pub skipped: BTreeMap<String, u64>,
    /// From the first record sent to the last.
    pub elapsed: Duration,
    /// The source was read to its end (false: stopped early or by `duration`).
    pub complete: bool,
}

impl SourceTotals {
    /// Items skipped, all reasons together.
    pub fn total_skipped(&self) -> u64 {
        self.skipped.values().sum()
    }

    /// Records published per second of `elapsed`.
    pub fn rate(&self) -> f64 {
        let secs = self.elapsed.as_secs_f64();
        if secs > 0.0 {
            self.published as f64 / secs
        } else {
            0.0
        }
    }
}

/// The summary table of a replayed recording (`FeedReport`'s `Display` when it carries [`SourceTotals`]).
pub(crate) fn fmt_source(
    report: &FeedReport,
    totals: &SourceTotals,
    f: &mut fmt::Formatter<'_>,
) -> fmt::Result {
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
    crate::publisher::write_staying(f, report.total_subscribers_at_close())?;
    crate::publisher::write_undelivered(f, report.total_undelivered())
}

struct SourceRun<'a> {
    config: &'a FeedConfig,
    stop: &'a AtomicBool,
    live: &'a SourceLive,
    speed: Speed,
}

impl SourceRun<'_> {
    fn run(
        self,
        mut publishers: Vec<Publisher>,
        endpoints: Vec<String>,
        mut source: Box<dyn RecordSource>,
    ) -> Result<FeedReport, FeedError> {
        let config = self.config;
        // Per shard, every subscription and unsubscription seen (XPUB shards only): for the start wait and the
        // drain at the end.
        let mut tallies = vec![SubscriptionTally::default(); publishers.len()];
        if config.wait_for_subscribers > 0 {
            self.wait_for_subscribers(&publishers, &mut tallies);
        }
        let heartbeat = config.heartbeat_interval.0;
        let started = Instant::now();
        let end = config.duration.map(|d| started + d.0);
        // No burst window: a recording's records go out each at its own time, as the source spaced them.
        let mut pacer = ReplayPacer::exact(self.speed);
        let mut last_sent = vec![started; publishers.len()];
        let mut first_sent: Option<Instant> = None;
        let mut last_data = started;
        let mut read = 0u64;
        let mut published = 0u64;
        let mut skipped: BTreeMap<String, u64> = BTreeMap::new();
        let mut complete = false;
        // Ended blocked on a full no-drop pipe: a subscriber stopped reading, and no drain can help it.
        let mut blocked = false;
        let over =
            |now: Instant| self.stop.load(Ordering::Relaxed) || end.is_some_and(|e| now >= e);
        let paced = matches!(self.speed, Speed::Times(_));
        'run: loop {
            // Flat out, the clock is read once per record (for the elapsed time), not for the stop check.
            if self.stop.load(Ordering::Relaxed) || end.is_some_and(|e| Instant::now() >= e) {
                break;
            }
            let item = source
                .next_item()
                .map_err(|source| FeedError::Source { source })?;
            let record = match item {
                None => {
                    complete = true;
                    break;
                }
                Some(SourceItem::Skipped(reason)) => {
                    read += 1;
                    *skipped.entry(reason).or_insert(0) += 1;
                    self.live.read.store(read, Ordering::Relaxed);
                    self.live.skipped.fetch_add(1, Ordering::Relaxed);
                    continue;
                }
                Some(SourceItem::Record(record)) => {
                    read += 1;
                    self.live.read.store(read, Ordering::Relaxed);
                    record
                }
            };
            // Wait for the record's time, heartbeating the shards that stay quiet meanwhile.
            loop {
                if !paced {
                    break;
                }
                let now = Instant::now();
                let now_ns =
                    u64::try_from(now.duration_since(started).as_nanos()).unwrap_or(u64::MAX);
                let wait = Duration::from_nanos(pacer.wait_ns(record.time_ns, now_ns));
                if wait.is_zero() {
                    break;
                }
                if over(now) {
                    break 'run;
                }
                if !heartbeat.is_zero() {
                    for (p, last) in publishers.iter_mut().zip(last_sent.iter_mut()) {
                        if now.duration_since(*last) >= heartbeat && p.heartbeat()? {
                            *last = now;
                        }
                    }
                }
                std::thread::sleep(wait.min(WAKE_EVERY));
            }
            let key = record
                .topic
                .split_once('.')
                .map_or(record.topic.as_str(), |(_, rest)| rest);
            let shard = shard_for(key.as_bytes(), publishers.len());
            let publisher = &mut publishers[shard];
            // A full no-drop pipe returns None: retry the same record (its sequence was not used).
            loop {
                let sent = publisher.publish_origin(
                    &record.topic,
                    &record.payload,
                    now_ns(),
                    record.origin_time_ns,
                )?;
                if sent.is_some() {
                    break;
                }
                if over(Instant::now()) {
                    blocked = true;
                    break 'run;
                }
            }
            published += 1;
            self.live.published.store(published, Ordering::Relaxed);
            last_data = Instant::now();
            first_sent.get_or_insert(last_data);
            last_sent[shard] = last_data;
        }
        let elapsed = first_sent.map_or(Duration::ZERO, |first| last_data.duration_since(first));
        if !heartbeat.is_zero() {
            // A lost trailing message is only noticed by a later message naming its sequence: say the last one a
            // few times, spaced so a briefly full pipe drains in between.
            for _ in 0..CLOSING_HEARTBEATS {
                std::thread::sleep(heartbeat.min(CLOSING_HEARTBEAT_GAP));
                for p in publishers.iter_mut().filter(|p| p.last_sequence() > 0) {
                    p.heartbeat()?;
                }
            }
        }
        // As the generator's shards do: a lossless run that ended by itself waits for its subscribers to leave
        // before closing. The shards share one wait.
        let deadline = Instant::now() + config.drain_timeout.0;
        let at_close = publishers
            .iter()
            .zip(&mut tallies)
            .map(|(p, tally)| {
                crate::publisher::drain_at_end(p, tally, config, deadline, blocked, self.stop)
            })
            .collect::<Result<Vec<u64>, FeedError>>()?;
        // Taken before the sockets close with the publishers: what libzmq still holds is dropped there. The
        // shards share one wait for their queues, as they shared the one for their subscribers.
        let drained = crate::publisher::drains(config, blocked, self.stop)
            .then(|| Instant::now() + config.drain_timeout.0);
        let undelivered = publishers
            .iter()
            .map(|p| crate::publisher::settle_at_end(p, drained, self.stop))
            .collect::<Result<Vec<u64>, FeedError>>()?;
        let shards = publishers
            .iter()
            .zip(endpoints)
            .zip(at_close)
            .zip(undelivered)
            .enumerate()
            .map(
                |(shard, (((p, endpoint), subscribers_at_close), undelivered))| {
                    PublisherShardReport {
                        shard,
                        publisher_id: p.publisher_id(),
                        endpoint,
                        symbols: 0,
                        counts: p.counts(),
                        last_sequence: p.last_sequence(),
                        duration: elapsed,
                        skipped: Duration::ZERO,
                        schedule_start_ns: 0,
                        unsent: 0,
                        subscribers_at_close,
                        undelivered,
                    }
                },
            )
            .collect();
        Ok(FeedReport {
            shards,
            target_rate: None,
            source: Some(SourceTotals {
                speed: self.speed,
                read,
                published,
                skipped,
                elapsed,
                complete,
            }),
        })
    }

    /// Waits until every shard's XPUB has seen `wait_for_subscribers` subscriptions, or `subscriber_wait`.
    fn wait_for_subscribers(&self, publishers: &[Publisher], tallies: &mut [SubscriptionTally]) {
        let want = self.config.wait_for_subscribers as u64;
        let deadline = Instant::now() + self.config.subscriber_wait.0;
        while tallies.iter().any(|t| t.subscribers() < want) {
            if self.stop.load(Ordering::Relaxed) {
                return;
            }
            if Instant::now() >= deadline {
                let seen: Vec<u64> = tallies.iter().map(SubscriptionTally::subscribers).collect();
                tracing::warn!(
                    "only {seen:?} of {want} subscriptions per shard after {}; starting anyway",
                    self.config.subscriber_wait
                );
                return;
            }
            for (p, tally) in publishers.iter().zip(tallies.iter_mut()) {
                while let Ok(msg) = p.socket().recv_msg(zmq::DONTWAIT) {
                    tally.on_message(&msg);
                }
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}
