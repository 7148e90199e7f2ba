//! The replayer: reads a journal and re-publishes its frames onto publisher shards (one XPUB per endpoint, shard
//! chosen by the wire crate's stable symbol hash), paced by [`Pacer`]. Each shard is its own publisher: frames are
//! re-stamped in place with the shard's publisher id, a gap-free sequence and the replay send time, and flagged
//! [`Flags::REPLAY`]; their origin time and payload are untouched.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use tickbox_journal::{JournalError, Reader};
use tickbox_wire::{Clock, Flags, Header, Heartbeat, Kind, MessageRef};

use crate::error::RecorderError;
use crate::pacer::{Pace, Pacer, Speed};

/// Where a replay starts or stops.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Position {
    /// Journal sequence.
    Seq(u64),
    /// Capture time, ns since the Unix epoch.
    Time(u64),
}

/// Replay settings.
#[derive(Debug, Clone)]
pub struct ReplayOptions {
    /// One publisher shard per endpoint, bound here.
    pub bind: Vec<String>,
    pub speed: Speed,
    /// First record replayed (inclusive); `None` = the oldest.
    pub from: Option<Position>,
    /// Stop before the first record at or past this position (exclusive); `None` = the end of the journal.
    pub to: Option<Position>,
    /// Shard `i` publishes as `publisher_id_base + i`.
    pub publisher_id_base: u32,
    pub sndhwm: i32,
    /// Block when a subscriber is slow (XPUB_NODROP) instead of dropping like a live PUB would.
    pub lossless: bool,
    /// Pacing burst window.
    pub window: Duration,
    /// A shard idle this long sends a heartbeat (as a live publisher does).
    pub heartbeat_interval: Duration,
    /// At the end of the journal keep waiting for new records (tail a journal being recorded).
    pub follow: bool,
    pub progress_every: Duration,
}

impl Default for ReplayOptions {
    fn default() -> Self {
        ReplayOptions {
            bind: Vec::new(),
            speed: Speed::Times(1.0),
            from: None,
            to: None,
            publisher_id_base: 9000,
            sndhwm: 100_000,
            lossless: true,
            window: Duration::from_micros(200),
            heartbeat_interval: Duration::from_secs(1),
            follow: false,
            progress_every: Duration::from_secs(1),
        }
    }
}

/// Counters and position of a replay.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReplayStats {
    /// Data messages published.
    pub sent: u64,
    pub bytes: u64,
    /// Per shard, data messages published.
    pub per_shard: Vec<u64>,
    pub heartbeats_sent: u64,
    /// Recorded heartbeats of the original publishers (not replayed: each shard sends its own).
    pub skipped_heartbeats: u64,
    /// Records that are not valid tickbox frames (skipped, first few logged).
    pub skipped_invalid: u64,
    /// Times the journal writer overwrote records before the replay read them (ring being recorded meanwhile).
    pub lapped: u64,
    pub first_seq: Option<u64>,
    pub last_seq: Option<u64>,
    pub first_capture_ns: Option<u64>,
    pub last_capture_ns: Option<u64>,
    /// Sequence the journal writer will assign next (progress denominator), as of the last progress call.
    pub end_seq: u64,
    /// Worst lateness against the paced schedule.
    pub max_late_ns: u64,
    pub elapsed: Duration,
    /// Subscriptions seen on each shard (XPUB).
    pub subscriptions: Vec<u64>,
}

impl ReplayStats {
    pub fn rate(&self) -> f64 {
        let s = self.elapsed.as_secs_f64();
        if s > 0.0 {
            self.sent as f64 / s
        } else {
            0.0
        }
    }
}

/// Publisher shards bound and ready; `run` replays a journal through them. Create, wait and run on one thread.
pub struct Replayer {
    sockets: Vec<zmq::Socket>,
    endpoints: Vec<String>,
    opts: ReplayOptions,
    subscriptions: Vec<u64>,
    shard_seq: Vec<u64>,
    /// When each shard last sent anything, replay clock ns (for idle heartbeats).
    last_send_ns: Vec<u64>,
    scratch: Vec<u8>,
    hb_topics: Vec<String>,
}

impl Replayer {
    /// Binds one XPUB per endpoint (verbose, so every subscription is counted).
    pub fn bind(ctx: &zmq::Context, opts: ReplayOptions) -> Result<Replayer, RecorderError> {
        if opts.bind.is_empty() {
            return Err(RecorderError::InvalidOption("no endpoint to bind".into()));
        }
        let mut sockets = Vec::new();
        let mut endpoints = Vec::new();
        for ep in &opts.bind {
            let mut s = ctx.socket(zmq::XPUB)?;
            s.set_linger(100)?;
            s.set_sndhwm(opts.sndhwm)?;
            s.set_xpub_verbose(true)?;
            // Bounded blocking so a stuck subscriber never stops Ctrl-C from being noticed.
            s.set_sndtimeo(100)?;
            if opts.lossless {
                tickbox_zmqx::set_xpub_nodrop(&mut s, true)?;
            }
            s.bind(ep).map_err(|source| RecorderError::Endpoint {
                endpoint: ep.clone(),
                source,
            })?;
            endpoints.push(tickbox_zmqx::last_endpoint(&s)?);
            sockets.push(s);
        }
        let n = sockets.len();
        let hb_topics = (0..n)
            .map(|i| format!("H.{}", opts.publisher_id_base + i as u32))
            .collect();
        Ok(Replayer {
            sockets,
            endpoints,
            subscriptions: vec![0; n],
            shard_seq: vec![0; n],
            last_send_ns: vec![0; n],
            scratch: Vec::with_capacity(4096),
            hb_topics,
            opts,
        })
    }

    /// The endpoints actually bound (wildcard ports resolved), one per shard.
    pub fn endpoints(&self) -> &[String] {
        &self.endpoints
    }

    /// Sets speed and range for the next [`Replayer::run`]: a remote-controlled replay is started again with
    /// other settings on the same bound shards (subscribers stay connected, shard sequences keep counting).
    pub fn set_run(&mut self, speed: Speed, from: Option<Position>, to: Option<Position>) {
        self.opts.speed = speed;
        self.opts.from = from;
        self.opts.to = to;
    }

    /// Reads pending subscription messages; returns per-shard subscription counts.
    pub fn poll_subscriptions(&mut self) -> Result<&[u64], RecorderError> {
        let mut msg = zmq::Message::new();
        for (i, s) in self.sockets.iter().enumerate() {
            loop {
                match s.recv(&mut msg, zmq::DONTWAIT) {
                    Ok(()) => match msg.first() {
                        Some(1) => self.subscriptions[i] += 1,
                        Some(0) => self.subscriptions[i] = self.subscriptions[i].saturating_sub(1),
                        _ => {}
                    },
                    Err(zmq::Error::EAGAIN | zmq::Error::EINTR) => break,
                    Err(e) => return Err(e.into()),
                }
            }
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
    ) -> Result<bool, RecorderError> {
        let started = Instant::now();
        loop {
            if self.poll_subscriptions()?.iter().all(|&c| c >= n) {
                return Ok(true);
            }
            if stop.load(Ordering::Relaxed) || timeout.is_some_and(|t| started.elapsed() >= t) {
                return Ok(false);
            }
            let mut items: Vec<zmq::PollItem> = self
                .sockets
                .iter()
                .map(|s| s.as_poll_item(zmq::POLLIN))
                .collect();
            match zmq::poll(&mut items, 50) {
                Ok(_) | Err(zmq::Error::EINTR) => {}
                Err(e) => return Err(e.into()),
            }
        }
    }

    /// Replays `reader` from `opts.from` to `opts.to` (or the end). `clock` stamps send times and drives pacing.
    pub fn run(
        &mut self,
        reader: &mut Reader,
        clock: &dyn Clock,
        stop: &AtomicBool,
        mut progress: impl FnMut(&ReplayStats),
    ) -> Result<ReplayStats, RecorderError> {
        match self.opts.from {
            Some(Position::Seq(s)) => reader.seek_seq(s)?,
            Some(Position::Time(t)) => reader.seek_time(t)?,
            None => reader.seek_oldest(),
        }
        let shards = self.sockets.len();
        let mut stats = ReplayStats {
            per_shard: vec![0; shards],
            end_seq: reader.end_seq(),
            ..ReplayStats::default()
        };
        let window_ns = self.opts.window.as_nanos() as u64;
        let mut pacer = Pacer::new(self.opts.speed, window_ns);
        let started = Instant::now();
        let mut last_progress = started;
        let start_ns = clock.now_ns();
        for t in &mut self.last_send_ns {
            *t = start_ns;
        }
        let mut invalid_logged = 0;
        let mut since_check = 0u32;
        'records: loop {
            if stop.load(Ordering::Relaxed) {
                break;
            }
            since_check += 1;
            if since_check >= 256 && last_progress.elapsed() >= self.opts.progress_every {
                last_progress = Instant::now();
                stats.elapsed = started.elapsed();
                stats.end_seq = reader.end_seq();
                stats.subscriptions = self.poll_subscriptions()?.to_vec();
                progress(&stats);
            }
            if since_check >= 256 {
                since_check = 0;
            }
            let rec = match reader.next() {
                Ok(Some(rec)) => rec,
                Ok(None) => {
                    if !self.opts.follow {
                        break;
                    }
                    self.idle(Duration::from_millis(5), clock, stop, &mut stats)?;
                    since_check = 256;
                    continue;
                }
                Err(JournalError::Lapped { wanted_seq }) => {
                    stats.lapped += 1;
                    tracing::warn!(
                        wanted_seq,
                        "replay fell a whole ring behind the recorder; skipping ahead"
                    );
                    continue;
                }
                Err(e) => return Err(e.into()),
            };
            let (seq, capture_ns) = (rec.seq, rec.capture_time_ns);
            match self.opts.to {
                Some(Position::Seq(s)) if seq >= s => break,
                Some(Position::Time(t)) if capture_ns >= t => break,
                _ => {}
            }
            self.scratch.clear();
            self.scratch.extend_from_slice(rec.payload);
            let kind = match MessageRef::decode(&self.scratch) {
                Ok(m) => m.kind(),
                Err(err) => {
                    stats.skipped_invalid += 1;
                    if invalid_logged < 5 {
                        invalid_logged += 1;
                        tracing::warn!(seq, "skipping a record that is not a tickbox frame: {err}");
                    }
                    continue;
                }
            };
            if kind == Kind::Heartbeat {
                stats.skipped_heartbeats += 1;
                continue;
            }
            let mut now = clock.now_ns();
            loop {
                match pacer.on_record(capture_ns, now) {
                    Pace::Now => break,
                    Pace::WaitUntil(due) => {
                        let wait = Duration::from_nanos(due.saturating_sub(now));
                        self.idle(wait.min(Duration::from_millis(50)), clock, stop, &mut stats)?;
                        if stop.load(Ordering::Relaxed) {
                            break 'records;
                        }
                        now = clock.now_ns();
                        since_check = 256;
                    }
                }
            }
            let topic_len = self.scratch.iter().position(|&b| b == 0).unwrap_or(0);
            let shard = tickbox_wire::shard_for(
                tickbox_wire::shard_key_of_topic(&self.scratch[..topic_len]),
                shards,
            );
            self.shard_seq[shard] += 1;
            stats.max_late_ns = stats.max_late_ns.max(pacer.lateness_ns(capture_ns, now));
            tickbox_wire::restamp_in_place(
                &mut self.scratch,
                self.opts.publisher_id_base + shard as u32,
                self.shard_seq[shard],
                now,
                Flags::REPLAY,
            )
            .map_err(|e| RecorderError::InvalidOption(format!("restamp: {e}")))?;
            if !send_blocking(&self.sockets[shard], &self.scratch, stop)? {
                self.shard_seq[shard] -= 1;
                break;
            }
            self.last_send_ns[shard] = now;
            stats.sent += 1;
            stats.bytes += self.scratch.len() as u64;
            stats.per_shard[shard] += 1;
            stats.first_seq.get_or_insert(seq);
            stats.first_capture_ns.get_or_insert(capture_ns);
            stats.last_seq = Some(seq);
            stats.last_capture_ns = Some(capture_ns);
        }
        stats.elapsed = started.elapsed();
        stats.end_seq = reader.end_seq();
        stats.subscriptions = self.poll_subscriptions()?.to_vec();
        Ok(stats)
    }

    /// Sleeps up to `wait` (in slices, watching `stop`) and sends heartbeats on shards idle past the interval.
    fn idle(
        &mut self,
        wait: Duration,
        clock: &dyn Clock,
        stop: &AtomicBool,
        stats: &mut ReplayStats,
    ) -> Result<(), RecorderError> {
        // Sleep short of the deadline; the pacer's window absorbs the remainder and the scheduler's overshoot.
        let slack = self.opts.window / 2;
        if wait > slack {
            std::thread::sleep(wait - slack);
        }
        let interval = self.opts.heartbeat_interval;
        if interval.is_zero() {
            return Ok(());
        }
        for shard in 0..self.sockets.len() {
            let now = clock.now_ns();
            if now.saturating_sub(self.last_send_ns[shard]) < interval.as_nanos() as u64
                || stop.load(Ordering::Relaxed)
            {
                continue;
            }
            let header = Header {
                kind: Kind::Heartbeat,
                flags: Flags::REPLAY,
                publisher_id: self.opts.publisher_id_base + shard as u32,
                // A heartbeat repeats the last data sequence sent.
                sequence: self.shard_seq[shard],
                send_time_ns: now,
                origin_time_ns: now,
                session: 0,
            };
            let hb = Heartbeat {
                interval_ns: interval.as_nanos() as u64,
                messages_sent: stats.per_shard.get(shard).copied().unwrap_or(0),
            };
            let frame = tickbox_wire::encode_to_vec(&self.hb_topics[shard], &header, &hb.into())
                .map_err(|e| RecorderError::InvalidOption(format!("heartbeat: {e}")))?;
            if send_blocking(&self.sockets[shard], &frame, stop)? {
                stats.heartbeats_sent += 1;
            }
            self.last_send_ns[shard] = now;
        }
        Ok(())
    }
}

/// Sends one frame, retrying while the (lossless) socket is at its high-water mark. False if stopped meanwhile.
fn send_blocking(
    socket: &zmq::Socket,
    frame: &[u8],
    stop: &AtomicBool,
) -> Result<bool, RecorderError> {
    loop {
        match socket.send(frame, 0) {
            Ok(()) => return Ok(true),
            // High-water mark (lossless mode) or a signal: give Ctrl-C its chance, then retry.
            Err(zmq::Error::EAGAIN | zmq::Error::EINTR) => {
                if stop.load(Ordering::Relaxed) {
                    return Ok(false);
                }
            }
            Err(e) => return Err(e.into()),
        }
    }
}
