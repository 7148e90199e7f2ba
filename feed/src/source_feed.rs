//! `feed --source`: a recording (any [`RecordSource`]: a DBN file, a journal read record by record) published on
//! the feed's shards through the one shard publisher ([`Publisher`] in [`Shards`]). Each record goes out under
//! its shard's own publisher id (`publisher_id_base + shard`), session and gap-free sequence, stamped with the
//! send time, its event time kept as origin time: to every downstream hop it is the feed speaking, as a
//! synthetic message is. It is encoded once, straight into the shard's batch or single-frame buffer. Pacing
//! follows the recording's spacing at a [`Speed`]; batches (to readers that opt in), heartbeats, back-pressure
//! and the drain at the end are the shard publisher's, the same as `tickbox replay`'s.
//!
//! One thread owns every shard socket and publishes in source order: the order of a recording is the one thing
//! that must survive (per symbol, a book only makes sense in order).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;
use std::time::Duration;

use tickbox_units::{Pace, ReplayPacer, Speed};
use tickbox_wire::{now_ns, Kind};
use tickbox_zmqx::publisher::Subscriptions;

use crate::config::{BatchMode, FeedConfig};
use crate::error::FeedError;
use crate::publisher::{open_feed_shard, shard_recipe, Publisher};
use crate::runner::{FeedReport, PublisherShardReport, ShardInfo};
use crate::shards::Shards;
use crate::source::{RecordSource, SourceItem, SourceStats, SourceTotals};

/// How often the live `published` count is brought up to date.
const PROGRESS_EVERY: Duration = Duration::from_millis(100);
/// How often (in records) the run reads its subscriptions and its progress.
const CHECK_EVERY: u32 = 256;
/// Longest one idle sleep while pacing, so a stop and heartbeats are looked at in between.
const MAX_IDLE: Duration = Duration::from_millis(50);

/// Starts `feed --source` runs.
pub struct SourceFeed;

impl SourceFeed {
    /// Opens every shard socket of `config` (bound or connected, as the synthetic feed's) and starts publishing
    /// `source` at `speed`; returns once every socket is ready. The generator fields of `config` (symbols, rate,
    /// mode, pattern) do not apply; `duration`, `wait_for_subscribers`, `back_pressure`, `drain_timeout`,
    /// `send_hwm`, `batch`, `heartbeat_interval`, `publisher_id_base`, the socket profile and `[security]` do.
    pub fn start(
        gate: &tickbox_auth::Gate,
        config: FeedConfig,
        source: Box<dyn RecordSource>,
        speed: Speed,
    ) -> Result<SourceFeedHandle, FeedError> {
        config.validate()?;
        let connect = config.shards.first().is_some_and(|s| s.connect);
        if config.shards.iter().any(|s| s.connect != connect) {
            return Err(FeedError::InvalidConfig {
                field: "shards",
                reason: "feed --source: every shard binds or every shard connects, not a mix"
                    .into(),
            });
        }
        gate.check_serves(&config.security)?;
        let publisher_id_base = config.publisher_id_base;
        // `halt` ends the run (a stop, or the end of `duration`); `interrupted` says it was a stop, which skips
        // the drain wait as an interrupted feed does.
        let halt = Arc::new(AtomicBool::new(false));
        let interrupted = Arc::new(AtomicBool::new(false));
        let live = Arc::new(Live::default());
        let (ready_tx, ready_rx) = mpsc::channel();
        let thread = {
            let gate = gate.clone();
            let halt = Arc::clone(&halt);
            let interrupted = Arc::clone(&interrupted);
            let live = Arc::clone(&live);
            std::thread::Builder::new()
                .name("feed-source".into())
                .spawn(move || {
                    let shards = match open(&gate, &config) {
                        Ok(shards) => shards,
                        Err(err) => {
                            let _ = ready_tx.send(Err(err));
                            live.finished.store(true, Ordering::Release);
                            return Err(FeedError::ShardPanicked(usize::MAX));
                        }
                    };
                    let _ = ready_tx.send(Ok(shards.endpoints().to_vec()));
                    let run = Run {
                        config: &config,
                        speed,
                        halt: &halt,
                        interrupted: &interrupted,
                        live: &live,
                    };
                    let result = run.run(shards, source);
                    live.finished.store(true, Ordering::Release);
                    result
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
            halt,
            interrupted,
            live,
            thread: Some(thread),
        })
    }
}

/// Opens the shards of `config` for a recording: every one an XPUB that sees every subscription and
/// unsubscription (its batching decision and its drain count subscribers), with a batch pool when batches are
/// on.
fn open(gate: &tickbox_auth::Gate, config: &FeedConfig) -> Result<Shards, FeedError> {
    let recipe = shard_recipe(
        Subscriptions::Verboser,
        config.send_hwm,
        config.back_pressure,
        config.max_subscription_bytes,
        &config.socket_profile,
    );
    let interval_ns = u64::try_from(config.heartbeat_interval.0.as_nanos()).unwrap_or(u64::MAX);
    let batching = config.batch_mode(true) == BatchMode::Auto && config.batch_max_records > 1;
    let mut publishers = Vec::with_capacity(config.shards.len());
    let mut endpoints = Vec::with_capacity(config.shards.len());
    let connect = config.shards.first().is_some_and(|s| s.connect);
    for (shard, shard_config) in config.shards.iter().enumerate() {
        let (socket, endpoint) = open_feed_shard(gate, config, &recipe, shard, shard_config)?;
        let publisher = Publisher::new(
            socket,
            shard,
            config.publisher_id_base.wrapping_add(shard as u32),
            interval_ns,
        );
        publishers.push(if batching {
            publisher.with_flat_out_batch_pool(
                config.batch_max_bytes,
                config.batch_max_records,
                config.back_pressure,
            )
        } else {
            publisher
        });
        endpoints.push(endpoint);
    }
    let revocations = (!connect).then(|| (config.security.revocations(), "feed"));
    Ok(Shards::new(publishers, endpoints, revocations))
}

#[derive(Debug, Default)]
struct Live {
    read: AtomicU64,
    published: AtomicU64,
    skipped: AtomicU64,
    finished: AtomicBool,
}

/// A running `feed --source`. Dropping it stops and joins.
pub struct SourceFeedHandle {
    shards: Vec<ShardInfo>,
    halt: Arc<AtomicBool>,
    interrupted: Arc<AtomicBool>,
    live: Arc<Live>,
    thread: Option<JoinHandle<Result<FeedReport, FeedError>>>,
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

    /// Asks the run to stop (Ctrl-C): it does within ~50 ms, or one blocked send timeout under back-pressure,
    /// and gives what is queued only the interrupt grace.
    pub fn stop(&self) {
        self.interrupted.store(true, Ordering::SeqCst);
        self.halt.store(true, Ordering::SeqCst);
    }

    /// True once the run has ended by itself.
    pub fn is_finished(&self) -> bool {
        self.live.finished.load(Ordering::Acquire)
    }

    /// Waits for the run to end (call [`stop`](Self::stop) first to end it early).
    pub fn join(mut self) -> Result<FeedReport, FeedError> {
        match self.thread.take().map(JoinHandle::join) {
            Some(Ok(result)) => result,
            Some(Err(_)) | None => Err(FeedError::ShardPanicked(0)),
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

struct Run<'a> {
    config: &'a FeedConfig,
    speed: Speed,
    halt: &'a AtomicBool,
    interrupted: &'a AtomicBool,
    live: &'a Live,
}

/// What a run has read so far.
#[derive(Default)]
struct Read {
    read: u64,
    skipped: BTreeMap<String, u64>,
    /// The source was read to its end.
    ended: bool,
}

impl Run<'_> {
    fn run(
        self,
        mut shards: Shards,
        source: Box<dyn RecordSource>,
    ) -> Result<FeedReport, FeedError> {
        let config = self.config;
        let want = config.wait_for_subscribers as u64;
        if want > 0
            && !shards.wait_subscribers(want, Some(config.subscriber_wait.0), self.halt)?
            && !self.halt.load(Ordering::Relaxed)
        {
            tracing::warn!(
                "only {:?} of {want} subscriptions per shard after {}; starting anyway",
                shards.poll_subscriptions()?,
                config.subscriber_wait
            );
        }
        // `duration` ends the run wherever it is, a blocked send included: a timer raises `halt`, and the run
        // ending first wakes the timer by dropping its channel.
        let (done_tx, done_rx) = mpsc::channel::<()>();
        let limit = config.duration.map(|d| d.0);
        let mut read = Read::default();
        let result = std::thread::scope(|scope| {
            if let Some(limit) = limit {
                let halt = self.halt;
                scope.spawn(move || {
                    if let Err(mpsc::RecvTimeoutError::Timeout) = done_rx.recv_timeout(limit) {
                        halt.store(true, Ordering::SeqCst);
                    }
                });
            }
            let result = self.publish(&mut shards, source, &mut read);
            drop(done_tx);
            result
        });
        let elapsed = result?;
        let published = published(&shards);
        self.live.published.store(published, Ordering::Relaxed);
        let closing = shards.close_feed(config, false, self.interrupted)?;
        let reports = shards
            .publishers()
            .iter()
            .zip(shards.endpoints())
            .enumerate()
            .map(|(shard, (p, endpoint))| PublisherShardReport {
                shard,
                publisher_id: p.publisher_id(),
                endpoint: endpoint.clone(),
                symbols: 0,
                counts: p.counts(),
                last_sequence: p.last_sequence(),
                duration: elapsed,
                skipped: Duration::ZERO,
                schedule_start_ns: 0,
                unsent: 0,
                subscribers_at_close: closing.subscribers_at_close[shard],
                undelivered: closing.undelivered[shard],
                subscribed: None,
            })
            .collect();
        Ok(FeedReport {
            shards: reports,
            target_rate: None,
            source: Some(SourceTotals {
                speed: self.speed,
                read: read.read,
                published,
                skipped: read.skipped,
                elapsed,
                complete: read.ended,
            }),
        })
    }

    /// Publishes the source until its end or `halt`; returns how long that took.
    fn publish(
        &self,
        shards: &mut Shards,
        mut source: Box<dyn RecordSource>,
        read: &mut Read,
    ) -> Result<Duration, FeedError> {
        let halt = self.halt;
        let n = shards.len();
        shards.poll_subscriptions()?;
        shards.reset_peak();
        let start_ns = now_ns();
        let interval_ns =
            u64::try_from(self.config.heartbeat_interval.0.as_nanos()).unwrap_or(u64::MAX);
        // When each shard last sent anything (for idle heartbeats).
        let mut last_send_ns = vec![start_ns; n];
        // No burst window: a recording's records go out each at its own time, as the source spaced them.
        let mut pacer = ReplayPacer::new(self.speed, 0);
        let mut last_progress_ns = start_ns;
        let mut since_check = 0u32;
        // While batching, one clock read per batch: the send time of the records that share it.
        let mut tick: Option<u64> = None;
        // Stopped while leaving batch mode: `halt` is raised, and the loop ends at once.
        shards.update_batching(halt)?;
        'records: loop {
            if halt.load(Ordering::Relaxed) {
                break;
            }
            since_check += 1;
            if since_check >= CHECK_EVERY {
                since_check = 0;
                // Cheap (one non-blocking recv per shard) and keeps the subscriber count honest.
                shards.poll_subscriptions()?;
                match shards.update_batching(halt)? {
                    None => break,
                    Some(true) => tick = None,
                    Some(false) => {}
                }
                let now = now_ns();
                if now.saturating_sub(last_progress_ns) >= PROGRESS_EVERY.as_nanos() as u64 {
                    last_progress_ns = now;
                    self.live
                        .published
                        .store(published(shards), Ordering::Relaxed);
                }
            }
            let record = match source.next_item().map_err(FeedError::Source)? {
                None => {
                    read.ended = true;
                    break;
                }
                Some(SourceItem::Skipped(reason)) => {
                    read.read += 1;
                    self.live.read.store(read.read, Ordering::Relaxed);
                    *read.skipped.entry(reason).or_insert(0) += 1;
                    self.live.skipped.fetch_add(1, Ordering::Relaxed);
                    continue;
                }
                Some(SourceItem::Record(record)) => {
                    read.read += 1;
                    self.live.read.store(read.read, Ordering::Relaxed);
                    record
                }
            };
            // Borrowed, not decoded: the header is checked, the topic picks the shard, the identity is written
            // where it lies.
            let (header_at, kind, shard_key) = match publishable(record.frame) {
                Ok(found) => found,
                Err(reason) => {
                    *read.skipped.entry(reason).or_insert(0) += 1;
                    self.live.skipped.fetch_add(1, Ordering::Relaxed);
                    continue;
                }
            };
            let mut now = match tick {
                Some(t) => t,
                None => next_tick(shards, &mut tick),
            };
            loop {
                match pacer.on_record(record.time_ns, now) {
                    Pace::Now => break,
                    Pace::WaitUntil(due) => {
                        let wait = Duration::from_nanos(due.saturating_sub(now)).min(MAX_IDLE);
                        self.idle(shards, wait, interval_ns, &mut last_send_ns)?;
                        if halt.load(Ordering::Relaxed) {
                            break 'records;
                        }
                        now = next_tick(shards, &mut tick);
                        since_check = CHECK_EVERY;
                    }
                }
            }
            let shard = if n == 1 {
                0
            } else {
                tickbox_wire::shard_for(shard_key, n)
            };
            let p = shards.publisher(shard);
            let frames = p.counts().frames;
            loop {
                match p.publish_frame(record.frame, header_at, kind, now) {
                    Ok(Some(_)) => break,
                    // A full pipe (lossless mode) or a signal: give Ctrl-C and `duration` their chance, then
                    // retry with the same sequence.
                    Ok(None) if halt.load(Ordering::Relaxed) => break 'records,
                    Ok(None) => {}
                    Err(err) => return Err(err),
                }
            }
            if p.counts().frames != frames {
                // A batch went out: the next record starts a new tick, its send time read afresh.
                tick = None;
            }
            last_send_ns[shard] = now;
        }
        // Batches still filling go out (a stop in the middle of one drops it, not counted as published).
        shards.flush_all(halt)?;
        if !halt.load(Ordering::Relaxed) {
            // One last heartbeat each: a subscriber that lost the final message learns it now.
            heartbeats(shards, halt, interval_ns, &mut last_send_ns, true)?;
        }
        Ok(Duration::from_nanos(now_ns().saturating_sub(start_ns)))
    }

    /// Waiting for the next record's time: what is batched goes out first, then the sleep, then the
    /// subscriptions and a heartbeat from each shard idle past its interval.
    fn idle(
        &self,
        shards: &mut Shards,
        wait: Duration,
        interval_ns: u64,
        last_send_ns: &mut [u64],
    ) -> Result<(), FeedError> {
        shards.flush_all(self.halt)?;
        if !wait.is_zero() {
            std::thread::sleep(wait);
        }
        shards.poll_subscriptions()?;
        heartbeats(shards, self.halt, interval_ns, last_send_ns, false)
    }
}

/// Where a record's header starts, its kind and shard key; or why it cannot go out as the feed's own data
/// message, checked before it takes a sequence or a place in a batch: a frame that does not decode, or a kind
/// the feed sends itself (heartbeats) or that names another publisher's sequences (gap notices).
fn publishable(frame: &[u8]) -> Result<(usize, Kind, &[u8]), String> {
    let msg = tickbox_wire::MessageRef::decode(frame)
        .map_err(|err| format!("not publishable as a tickbox message: {err}"))?;
    match msg.kind() {
        kind @ (Kind::Quote | Kind::Trade | Kind::BookLevel) => {
            let topic = msg.topic().as_bytes();
            Ok((
                topic.len() + 1,
                kind,
                tickbox_wire::shard_key_of_topic(topic),
            ))
        }
        kind => Err(format!(
            "not publishable as the feed's data: a recorded {}",
            kind.name()
        )),
    }
}

/// Reads the clock for a new tick; while any shard batches, records reuse it until a batch goes out.
fn next_tick(shards: &Shards, tick: &mut Option<u64>) -> u64 {
    let now = now_ns();
    *tick = shards.batching().then_some(now);
    now
}

/// Data messages the shards have handed to libzmq.
fn published(shards: &Shards) -> u64 {
    shards.publishers().iter().map(|p| p.sent().records).sum()
}

/// A heartbeat from every shard idle past `interval_ns` (or, with `all`, from every shard), each retried on a
/// full pipe until `halt`. None with a zero interval.
fn heartbeats(
    shards: &mut Shards,
    halt: &AtomicBool,
    interval_ns: u64,
    last_send_ns: &mut [u64],
    all: bool,
) -> Result<(), FeedError> {
    if interval_ns == 0 {
        return Ok(());
    }
    for (shard, last) in last_send_ns.iter_mut().enumerate() {
        let now = now_ns();
        if halt.load(Ordering::Relaxed) || !(all || now.saturating_sub(*last) >= interval_ns) {
            continue;
        }
        let p = shards.publisher(shard);
        while !p.heartbeat()? && !halt.load(Ordering::Relaxed) {}
        *last = now;
    }
    Ok(())
}
