//! `feed --source`: a recording (any [`RecordSource`]: a DBN file, a journal read record by record) published by
//! the one journal publisher, [`Replayer`], on the feed's shards. Each record is encoded once into a tickbox
//! frame as it is read and handed to the replayer in restamp mode, so it goes out under its shard's own
//! publisher id (`publisher_id_base + shard`), session and gap-free sequence, stamped with the send time, its
//! event time kept as origin time: to every downstream hop it is the feed speaking, as a synthetic message is.
//! Pacing, batches (to readers that opt in), heartbeats, back-pressure and the drain at the end are the
//! replayer's, the same as `tickbox replay`'s.
//!
//! One thread owns every shard socket and publishes in source order: the order of a recording is the one thing
//! that must survive (per symbol, a book only makes sense in order).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;
use std::time::Duration;

use tickbox_feed::{
    FeedConfig, FeedReport, PublisherShardReport, RecordSource, ShardInfo, SourceItem, SourceStats,
    SourceTotals,
};
use tickbox_journal::{Record, Skipped};
use tickbox_units::Speed;
use tickbox_wire::{Header, SystemClock};

use crate::error::RecorderError;
use crate::replay::{Identity, Input, Position, ReplayInput, ReplayOptions, Replayer};

/// Starts `feed --source` runs.
pub struct SourceReplay;

impl SourceReplay {
    /// Opens every shard socket of `config` (bound or connected, as the synthetic feed's) and starts publishing
    /// `source` at `speed`; returns once every socket is ready. The generator fields of `config` (symbols, rate,
    /// mode, pattern) do not apply; `duration`, `wait_for_subscribers`, `back_pressure`, `drain_timeout`,
    /// `send_hwm`, `batch`, `heartbeat_interval`, `publisher_id_base`, the socket profile and `[security]` do.
    pub fn start(
        gate: &tickbox_auth::Gate,
        config: FeedConfig,
        source: Box<dyn RecordSource>,
        speed: Speed,
    ) -> Result<SourceReplayHandle, RecorderError> {
        config.validate()?;
        let opts = replay_options(&config, speed)?;
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
                    let replayer = match Replayer::bind(&gate, opts) {
                        Ok(r) => r,
                        Err(err) => {
                            let _ = ready_tx.send(Err(err));
                            live.finished.store(true, Ordering::Release);
                            return Err(RecorderError::Thread("the shards did not open".into()));
                        }
                    };
                    let _ = ready_tx.send(Ok(replayer.endpoints().to_vec()));
                    let run = Run {
                        config: &config,
                        speed,
                        halt: &halt,
                        interrupted: &interrupted,
                        live: &live,
                    };
                    let result = run.run(replayer, source);
                    live.finished.store(true, Ordering::Release);
                    result
                })
                .map_err(|e| RecorderError::Thread(format!("cannot spawn: {e}")))?
        };
        let endpoints = match ready_rx.recv() {
            Ok(Ok(endpoints)) => endpoints,
            Ok(Err(err)) => {
                let _ = thread.join();
                return Err(err);
            }
            Err(_) => {
                let _ = thread.join();
                return Err(RecorderError::Thread(
                    "panicked while opening the shards".into(),
                ));
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
        Ok(SourceReplayHandle {
            shards,
            halt,
            interrupted,
            live,
            thread: Some(thread),
        })
    }
}

/// The replayer's settings for publishing on `config`'s shards.
fn replay_options(config: &FeedConfig, speed: Speed) -> Result<ReplayOptions, RecorderError> {
    let connect = config.shards.first().is_some_and(|s| s.connect);
    if config.shards.iter().any(|s| s.connect != connect) {
        return Err(RecorderError::InvalidOption(
            "feed --source: every shard binds or every shard connects, not a mix".into(),
        ));
    }
    let batching = config.batch == tickbox_feed::BatchMode::Auto;
    Ok(ReplayOptions {
        bind: config.shards.iter().map(|s| s.endpoint.clone()).collect(),
        connect,
        role: "feed",
        mark_replayed: false,
        speed,
        identity: Identity::Restamp,
        publisher_id_base: config.publisher_id_base,
        send_hwm: config.send_hwm,
        back_pressure: config.back_pressure,
        // No burst window: a recording's records go out each at its own time, as the source spaced them.
        window: Duration::ZERO,
        heartbeat_interval: config.heartbeat_interval.0,
        progress_every: PROGRESS_EVERY,
        max_subscription_bytes: config.max_subscription_bytes,
        batch_max_records: if batching {
            config.batch_max_records
        } else {
            0
        },
        batch_max_bytes: config.batch_max_bytes,
        socket_profile: config.socket_profile.clone(),
        security: config.security.clone(),
        ..ReplayOptions::default()
    })
}

/// How often the live `published` count is brought up to date.
const PROGRESS_EVERY: Duration = Duration::from_millis(100);

#[derive(Debug, Default)]
struct Live {
    read: AtomicU64,
    published: AtomicU64,
    skipped: AtomicU64,
    finished: AtomicBool,
}

/// A running `feed --source`. Dropping it stops and joins.
pub struct SourceReplayHandle {
    shards: Vec<ShardInfo>,
    halt: Arc<AtomicBool>,
    interrupted: Arc<AtomicBool>,
    live: Arc<Live>,
    thread: Option<JoinHandle<Result<FeedReport, RecorderError>>>,
}

impl SourceReplayHandle {
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

    /// Asks the run to stop (Ctrl-C): it does within ~20 ms, or one blocked send timeout under back-pressure,
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
    pub fn join(mut self) -> Result<FeedReport, RecorderError> {
        match self.thread.take().map(JoinHandle::join) {
            Some(Ok(result)) => result,
            Some(Err(_)) | None => Err(RecorderError::Thread("panicked".into())),
        }
    }
}

impl Drop for SourceReplayHandle {
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

impl Run<'_> {
    fn run(
        self,
        mut replayer: Replayer,
        source: Box<dyn RecordSource>,
    ) -> Result<FeedReport, RecorderError> {
        let config = self.config;
        let want = config.wait_for_subscribers as u64;
        if want > 0
            && !replayer.wait_subscribers(want, Some(config.subscriber_wait.0), self.halt)?
            && !self.halt.load(Ordering::Relaxed)
        {
            tracing::warn!(
                "only {:?} of {want} subscriptions per shard after {}; starting anyway",
                replayer.poll_subscriptions()?,
                config.subscriber_wait
            );
        }
        let mut input = SourceInput::new(source, self.live);
        // `duration` ends the run wherever it is, a blocked send included: a timer raises `halt`, and the run
        // ending first wakes the timer by dropping its channel.
        let (done_tx, done_rx) = mpsc::channel::<()>();
        let limit = config.duration.map(|d| d.0);
        let published = &self.live.published;
        let result = std::thread::scope(|scope| {
            if let Some(limit) = limit {
                let halt = self.halt;
                scope.spawn(move || {
                    if let Err(mpsc::RecvTimeoutError::Timeout) = done_rx.recv_timeout(limit) {
                        halt.store(true, Ordering::SeqCst);
                    }
                });
            }
            let result = replayer.run(&mut input, &SystemClock, self.halt, |s| {
                published.store(s.sent, Ordering::Relaxed);
            });
            drop(done_tx);
            result
        });
        let stats = result?;
        self.live.published.store(stats.sent, Ordering::Relaxed);
        // As the synthetic feed's shards do: a lossless run waits for its subscribers to leave before closing; a
        // lossy one gives its queue the close's usual linger; an interrupted one only the grace.
        let drain = if config.back_pressure.blocks() {
            config.drain_timeout.0
        } else {
            Duration::ZERO
        };
        let linger = Duration::from_millis(tickbox_feed::LINGER_MS as u64);
        let closing = replayer.close_wait(drain, linger, self.interrupted)?;
        if closing.subscribers_stayed {
            tracing::warn!(
                subscribers_at_close = replayer.subscriptions_now(),
                "subscriber(s) still connected after drain_timeout {}; closing: one that is behind loses its \
                 unread tail",
                config.drain_timeout
            );
        }
        if closing.undelivered() > 0 {
            tracing::warn!(
                undelivered = closing.undelivered(),
                "closing with messages still queued for a subscriber: they are dropped, counted as undelivered"
            );
        }
        let shards = replayer
            .endpoints()
            .iter()
            .enumerate()
            .map(|(shard, endpoint)| PublisherShardReport {
                shard,
                publisher_id: config.publisher_id_base.wrapping_add(shard as u32),
                endpoint: endpoint.clone(),
                symbols: 0,
                counts: stats.per_shard_counts[shard],
                last_sequence: stats.shard_last_seq.get(shard).copied().unwrap_or(0),
                duration: stats.elapsed,
                skipped: Duration::ZERO,
                schedule_start_ns: 0,
                unsent: 0,
                subscribers_at_close: closing.subscribers_at_close[shard],
                undelivered: closing.undelivered[shard],
                subscribed: None,
            })
            .collect();
        Ok(FeedReport {
            shards,
            target_rate: None,
            source: Some(SourceTotals {
                speed: self.speed,
                read: input.read,
                published: stats.sent,
                skipped: input.skipped,
                elapsed: stats.elapsed,
                complete: input.ended,
            }),
        })
    }
}

/// A [`RecordSource`] as the replayer reads it: each record encoded once into a reused frame (publisher id,
/// session and sequence left for the restamp), its time as the capture time that paces it; items the source
/// could not publish counted by reason.
struct SourceInput<'a> {
    source: Box<dyn RecordSource>,
    live: &'a Live,
    frame: Vec<u8>,
    read: u64,
    skipped: BTreeMap<String, u64>,
    /// The source was read to its end.
    ended: bool,
}

impl<'a> SourceInput<'a> {
    fn new(source: Box<dyn RecordSource>, live: &'a Live) -> Self {
        SourceInput {
            source,
            live,
            frame: Vec::new(),
            read: 0,
            skipped: BTreeMap::new(),
            ended: false,
        }
    }

    fn skip(&mut self, reason: String) {
        *self.skipped.entry(reason).or_insert(0) += 1;
        self.live.skipped.fetch_add(1, Ordering::Relaxed);
    }
}

impl ReplayInput for SourceInput<'_> {
    fn seek(&mut self, from: Option<Position>) -> Result<(), RecorderError> {
        match from {
            None => Ok(()),
            Some(_) => Err(RecorderError::InvalidOption(
                "a recording given to feed --source is published from its start".into(),
            )),
        }
    }

    fn next_input(&mut self) -> Result<Input<'_>, RecorderError> {
        loop {
            let item = self
                .source
                .next_item()
                .map_err(|source| RecorderError::Source { source })?;
            let record = match item {
                None => {
                    self.ended = true;
                    return Ok(Input::End);
                }
                Some(SourceItem::Skipped(reason)) => {
                    self.read += 1;
                    self.live.read.store(self.read, Ordering::Relaxed);
                    self.skip(reason);
                    continue;
                }
                Some(SourceItem::Record(record)) => {
                    self.read += 1;
                    self.live.read.store(self.read, Ordering::Relaxed);
                    record
                }
            };
            let kind = record.payload.kind();
            let mut header = Header::live(kind, 0, 0, 0);
            header.origin_time_ns = record.origin_time_ns;
            self.frame
                .resize(tickbox_wire::encoded_len(&record.topic, kind), 0);
            if let Err(err) =
                tickbox_wire::encode(&mut self.frame, &record.topic, &header, &record.payload)
            {
                self.skip(format!("not publishable as a tickbox message: {err}"));
                continue;
            }
            return Ok(Input::Record(Record {
                seq: self.read,
                capture_time_ns: record.time_ns,
                payload: &self.frame,
            }));
        }
    }

    fn skip_damage(&mut self) -> Result<Skipped, RecorderError> {
        Err(RecorderError::InvalidOption(
            "a recording source reports its damage as an error, never as a record to skip".into(),
        ))
    }

    fn end_seq(&self) -> u64 {
        self.read + 1
    }
}
