//! The replayer: reads a journal and re-publishes its frames onto publisher shards (one XPUB per endpoint), paced
//! by [`ReplayPacer`].
//!
//! By default ([`Identity::Preserve`]) a replay is the recorded publishers speaking again: every record keeps its
//! publisher id, session and sequence; only `send_time_ns` is re-stamped (the replay's clock) and
//! [`Flags::REPLAY`] set, `origin_time_ns` and the payload stay. Each original publisher is carried whole by one
//! shard (`publisher_id % shards`), so its sequence reaches a subscriber in order on one connection. Gap notices
//! are re-published as they are (that is how a subscriber learns what the journal lacks, apart from its own loss)
//! and LVC cached values keep their sequence and flag (exempt from accounting, they consume nothing). Recorded
//! heartbeats are dropped; the replay sends its own for each original publisher (its id and session, the last
//! sequence accounted for) while it is idle and once at the end of a run, so a lost trailing message is noticed.
//!
//! [`Identity::Restamp`] is the older mode: frames spread over shards by symbol, each shard its own publisher
//! (`publisher_id_base + shard`) with a fresh gap-free sequence; gap notices are dropped there (they name
//! identities the restamped stream does not have) and cached values repeat the shard's last sequence.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

pub use tickbox_feed::Closing;
use tickbox_feed::{Publisher, PublisherCounts, Sent, ShardSocketError, Shards};
use tickbox_wire::{heartbeat_topic, Clock, Flags, Header, Heartbeat, Kind, MessageRef};
use tickbox_zmqx::publisher::{PublisherSocketError, Subscriptions};
use tickbox_zmqx::{BackPressure, ZmqxError};

/// Bound on original publishers the replay keeps heartbeat state for (beyond it, they get no heartbeats).
const MAX_OUT_PUBLISHERS: usize = tickbox_wire::sequence::DEFAULT_MAX_PUBLISHERS;

/// Records per batch frame by default: 64 quotes (~6.3 KB) fill most of [`DEFAULT_BATCH_BYTES`].
pub(crate) const DEFAULT_BATCH_RECORDS: u16 = 64;
/// Largest batch frame by default: 8 KiB, one allocation of libzmq's and still one TCP write at a time.
pub(crate) const DEFAULT_BATCH_BYTES: usize = 8192;

/// Whose identity replayed frames carry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Identity {
    /// The original publisher id, session and sequence (only the send time and the REPLAY flag change).
    #[default]
    Preserve,
    /// Shard `i` publishes as `publisher_id_base + i` with its own gap-free sequence; symbols spread by hash.
    Restamp,
}

use crate::error::RecorderError;
use crate::input::{damage_notice, Input, Position, ReplayInput};
use crate::selection::ReplaySelection;
use tickbox_units::{Pace, ReplayPacer, Speed};

/// Replay settings.
#[derive(Debug, Clone)]
pub struct ReplayOptions {
    /// One publisher shard per endpoint, bound here (connected instead with `connect`).
    pub bind: Vec<String>,
    /// Connect every shard to its endpoint instead of binding (a feed publishing into an LVC's frontend).
    pub connect: bool,
    /// The security role the shards take (`replay`, or `feed` for `feed --source`): the ZAP domain a bound
    /// shard accepts under, the server key a connecting one expects.
    pub role: &'static str,
    /// Set [`Flags::REPLAY`] on what goes out (a replay); off for `feed --source`, whose records go out as the
    /// feed's own messages.
    pub mark_replayed: bool,

    /// How fast to replay: `Max`, or a multiple of the recorded pacing.
    pub speed: Speed,
    /// First record replayed (inclusive); `None` = the oldest.
    pub from: Option<Position>,
    /// Stop before the first record at or past this position (exclusive); `None` = the end of the journal.
    pub to: Option<Position>,
    /// Whether frames keep their original publisher identity (default) or are restamped per shard.
    pub identity: Identity,
    /// With [`Identity::Restamp`], shard `i` publishes as `publisher_id_base + i`.
    pub publisher_id_base: u32,
    /// Send high-water mark of each shard's XPUB, in messages per subscriber.
    pub send_hwm: i32,
    /// `Block` when a subscriber is slow (XPUB_NODROP) instead of dropping like a live PUB would.
    pub back_pressure: BackPressure,
    /// Pacing burst window.
    pub window: Duration,
    /// A publisher (shard, when restamping) idle this long gets a heartbeat, as a live publisher sends; one more
    /// goes out for each at the end of a run. Zero: none.
    pub heartbeat_interval: Duration,
    /// At the end of the journal keep waiting for new records (tail a journal being recorded).
    pub follow: bool,
    /// How often the progress callback runs (checked every 256 records and while idle).
    pub progress_every: Duration,
    /// Longest subscription prefix a shard accepts (see [`tickbox_zmqx::limit_subscriptions`]).
    pub max_subscription_bytes: usize,
    /// Most records per batch frame (`tickbox_wire::BatchBuilder`); 0 or 1 sends every record as its own
    /// message (the old behaviour). A shard batches only while every subscription it has is the empty prefix,
    /// and only records due at the same pacer tick.
    pub batch_max_records: u16,
    /// Largest batch frame, in bytes (header included). Records too large for it go alone.
    pub batch_max_bytes: usize,
    /// Which records go out (topic prefixes, origin-time window); `None` = all. Records it leaves out are
    /// skipped before pacing and counted in [`ReplayStats::not_selected`].
    pub selection: Option<ReplaySelection>,
    /// `[context.sockets.replay]`: applied to every shard's XPUB (see `tickbox_zmqx::profile`).
    pub socket_profile: tickbox_zmqx::profile::SocketProfile,
    /// `[security]`: applied to every shard's XPUB before it binds.
    pub security: tickbox_auth::Security,
    /// End the run with the journal's error at the first corrupt record or damaged segment, replaying nothing
    /// after it (the old behaviour). By default the replay skips to the next record that verifies, counts what
    /// it skipped ([`ReplayStats::corrupt_records`], [`ReplayStats::corrupt_bytes`]) and sends gap notices for
    /// the sequences it skipped.
    pub stop_on_corruption: bool,
}

impl Default for ReplayOptions {
    fn default() -> Self {
        ReplayOptions {
            bind: Vec::new(),
            connect: false,
            role: "replay",
            mark_replayed: true,
            speed: Speed::Times(1.0),
            from: None,
            to: None,
            identity: Identity::Preserve,
            publisher_id_base: 9000,
            send_hwm: 100_000,
            back_pressure: BackPressure::Block,
            window: Duration::from_micros(200),
            heartbeat_interval: Duration::from_secs(1),
            follow: false,
            progress_every: Duration::from_secs(1),
            max_subscription_bytes: tickbox_zmqx::DEFAULT_MAX_SUBSCRIPTION_BYTES,
            batch_max_records: DEFAULT_BATCH_RECORDS,
            batch_max_bytes: DEFAULT_BATCH_BYTES,
            selection: None,
            socket_profile: tickbox_zmqx::profile::SocketProfile::default(),
            security: tickbox_auth::Security::default(),
            stop_on_corruption: false,
        }
    }
}

/// Counters and position of a replay.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReplayStats {
    /// Records published (data, gap notices and cached values; not heartbeats), whether alone or in batches.
    pub sent: u64,
    /// ZeroMQ messages that carried records: single frames plus batch frames (heartbeats not included).
    pub frames_sent: u64,
    /// Of `frames_sent`, batch frames (each carrying two or more records).
    pub batches_sent: u64,
    /// Frame bytes published (heartbeats not included).
    pub bytes: u64,
    /// Batch buffers allocated because every recycled one was still queued in libzmq (a lossless shard waits
    /// up to 100 ms for one first). Not a loss: the batch went out all the same, only not from the pool.
    pub batch_buffers_allocated: u64,
    /// Single frames sent from a one-off buffer because every recycled one was still queued in libzmq. Not a
    /// loss either.
    pub single_buffers_allocated: u64,
    /// Gap notices re-published (sequences the journal lacks, for the subscriber to count as recorded gaps).
    pub gap_notices: u64,
    /// LVC cached values re-published (no sequence consumed).
    pub cached: u64,
    /// Original publishers replayed (identity mode).
    pub publishers: u64,
    /// Per shard, records published.
    pub per_shard: Vec<u64>,
    /// Per shard, what was handed to it by kind (quotes, trades, book levels), its heartbeats, sends a full pipe
    /// refused (retried), frames and batch frames: the feed's own per-publisher counts.
    pub per_shard_counts: Vec<PublisherCounts>,
    /// Restamp mode: each shard's last sequence (its publisher's gap-free count so far); empty otherwise.
    pub shard_last_seq: Vec<u64>,
    /// Heartbeats the replay sent itself (while idle and at the end of a run).
    pub heartbeats_sent: u64,
    /// Recorded heartbeats of the original publishers (not replayed: the replay sends its own).
    pub skipped_heartbeats: u64,
    /// Gap notices not re-published because the frames were restamped (their identities are gone).
    pub skipped_gap_notices: u64,
    /// Records that are not valid tickbox frames (skipped, first few logged).
    pub skipped_invalid: u64,
    /// Records read but left out by [`ReplayOptions::selection`] (not drops: never meant to be sent).
    pub not_selected: u64,
    /// Times the journal writer overwrote records before the replay read them (ring being recorded meanwhile).
    pub lapped: u64,
    /// Damaged stretches of the journal skipped (corrupt records, archive segments whose header is damaged).
    pub damaged_ranges: u64,
    /// Journal records skipped in them (their sequences, from the last record read to the next that verifies).
    pub corrupt_records: u64,
    /// Journal bytes skipped in them.
    pub corrupt_bytes: u64,
    /// Gap notices the replay sent for publisher sequences the damage took (so subscribers count them as
    /// recorded gaps). Counted in `sent` and `gap_notices` too.
    pub damage_gap_notices: u64,
    /// Journal sequence of the first record published (`None`: nothing published).
    pub first_seq: Option<u64>,
    /// Journal sequence of the last record published.
    pub last_seq: Option<u64>,
    /// Capture time of the first record published, ns since the Unix epoch.
    pub first_capture_ns: Option<u64>,
    /// Capture time of the last record published, ns since the Unix epoch.
    pub last_capture_ns: Option<u64>,
    /// Sequence the journal writer will assign next (progress denominator), as of the last progress call.
    pub end_seq: u64,
    /// Worst lateness against the paced schedule.
    pub max_late_ns: u64,
    /// Time since the run started.
    pub elapsed: Duration,
    /// Subscriptions seen on each shard (XPUB), at the end.
    pub subscriptions: Vec<u64>,
    /// Most subscriptions any shard had at any point of the run (0: the replay published to nobody). A subscriber
    /// with several topic prefixes counts once per prefix.
    pub subscribers: u64,
}

impl ReplayStats {
    /// Records published per second of `elapsed` (0 before any time has passed).
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
    /// One shard publisher per endpoint (the feed's: socket, batches, delivery tracking, subscriber tally and
    /// drain); the replay decides whose identity each frame carries.
    shards: Shards,
    opts: ReplayOptions,
    /// Restamp mode: each shard's last sequence.
    shard_seq: Vec<u64>,
    /// Restamp mode: the session every shard's frames and heartbeats carry (this replayer's start, ns). The
    /// shards are new publishers, so a subscriber must see one session per shard whatever the recording held.
    restamp_session: u64,
    /// Restamp mode: when each shard last sent anything, replay clock ns (for idle heartbeats).
    last_send_ns: Vec<u64>,
    /// Identity mode: what each original publisher last said (for its heartbeats).
    out: Vec<OutPublisher>,
    out_last_hit: usize,
    hb_topics: Vec<String>,
    /// Each (publisher, session)'s first recorded sequence, from the journal's ledger
    /// ([`Replayer::expect_from_ledger`]): damage before a publisher's first intact record then gets its gap notice
    /// too (from that first sequence), not only damage between two of its records.
    first_recorded: std::collections::HashMap<(u32, u64), u64>,
    /// Damage was skipped while some publishers had not been seen yet.
    damage_before_seen: bool,
    /// Replay clock of the current pacer tick while batching: one clock read per batch, not per record.
    tick_ns: Option<u64>,
}

/// An original publisher as the replay has re-published it so far.
#[derive(Debug, Clone)]
struct OutPublisher {
    publisher: u32,
    session: u64,
    /// Last sequence accounted for: the last data sequence sent, or a gap notice's last missing one.
    last_seq: u64,
    shard: usize,
    last_send_ns: u64,
    /// Data messages sent for it (heartbeat payload), this replayer's life.
    sent: u64,
    /// Sent anything in the current run (gets a final heartbeat).
    active: bool,
    /// The journal was damaged since its last record: a jump in its sequence is the damage's, and gets a gap
    /// notice before the next record.
    after_damage: bool,
    hb_topic: String,
}

impl Replayer {
    /// Binds one XPUB per endpoint (verbose, so every subscription is counted); a bound one comes from `gate`
    /// (its context's ZAP handler applies `[security]`).
    pub fn bind(gate: &tickbox_auth::Gate, opts: ReplayOptions) -> Result<Replayer, RecorderError> {
        if opts.bind.is_empty() {
            return Err(RecorderError::InvalidOption("no endpoint to bind".into()));
        }
        gate.check_serves(&opts.security)?;
        // Verboser: a subscriber that disconnects must be seen leaving, so the end of a replay can wait for its
        // readers (`wait_subscribers_gone`) and the batching decision never counts a ghost.
        let recipe = tickbox_feed::shard_recipe(
            Subscriptions::Verboser,
            opts.send_hwm,
            opts.back_pressure,
            opts.max_subscription_bytes,
            &opts.socket_profile,
        );
        let mut sockets = Vec::new();
        let mut endpoints = Vec::new();
        for ep in &opts.bind {
            let (socket, endpoint) = tickbox_feed::open_shard_socket(
                gate,
                &opts.security,
                opts.role,
                &recipe,
                ep,
                opts.connect,
            )
            .map_err(|e| match e {
                ShardSocketError::Auth(e) => RecorderError::Auth(e),
                ShardSocketError::Socket(PublisherSocketError::Attach {
                    endpoint,
                    source: ZmqxError::Zmq(source),
                    ..
                }) => RecorderError::Endpoint { endpoint, source },
                ShardSocketError::Socket(
                    PublisherSocketError::Attach { source, .. }
                    | PublisherSocketError::Option { source, .. },
                ) => RecorderError::Zmqx(source),
            })?;
            let shard = sockets.len();
            let publisher = Publisher::new(
                socket,
                shard,
                opts.publisher_id_base.wrapping_add(shard as u32),
                u64::try_from(opts.heartbeat_interval.as_nanos()).unwrap_or(u64::MAX),
            );
            sockets.push(if opts.batch_max_records > 1 {
                publisher.with_flat_out_batch_pool(
                    opts.batch_max_bytes,
                    opts.batch_max_records,
                    opts.back_pressure,
                )
            } else {
                publisher
            });
            endpoints.push(endpoint);
        }
        let n = sockets.len();
        let hb_topics = (0..n)
            .map(|i| heartbeat_topic(opts.publisher_id_base + i as u32))
            .collect();
        let revocations = (!opts.connect).then(|| (opts.security.revocations(), opts.role));
        Ok(Replayer {
            shards: Shards::new(sockets, endpoints, revocations),
            out: Vec::new(),
            out_last_hit: 0,
            shard_seq: vec![0; n],
            restamp_session: tickbox_wire::now_ns().max(1),
            last_send_ns: vec![0; n],
            hb_topics,
            first_recorded: std::collections::HashMap::new(),
            damage_before_seen: false,
            tick_ns: None,
            opts,
        })
    }

    /// The endpoints actually bound (wildcard ports resolved), one per shard.
    pub fn endpoints(&self) -> &[String] {
        self.shards.endpoints()
    }

    /// How long closing the shards may wait for what is still queued for subscribers (their ZMQ_LINGER). A
    /// replay at `--speed max` ends with up to a high-water mark of frames (batches of records) per subscriber
    /// in the pipes; closing with a short linger would drop them while the summary counted them as sent. The
    /// wait ends as soon as everything is handed to the kernel, so a reading subscriber costs nothing extra.
    pub fn set_drain_timeout(&self, drain: Duration) -> Result<(), RecorderError> {
        Ok(self.shards.set_linger(drain)?)
    }

    /// Records sent (counted in [`ReplayStats::sent`]) that libzmq still holds in the shards' queues: not yet
    /// written to every subscriber's connection. Closing now would drop them; this is the replay's `undelivered`.
    pub fn undelivered(&self) -> u64 {
        self.shards.undelivered()
    }

    /// The end of a replay, before the shards close: the one drain rule, [`Shards::close_wait`].
    pub fn close_wait(
        &mut self,
        drain_timeout: Duration,
        linger: Duration,
        stop: &AtomicBool,
    ) -> Result<Closing, RecorderError> {
        Ok(self.shards.close_wait(drain_timeout, linger, stop)?)
    }

    /// Subscribers (subscriptions other than the batch opt-in) still present, summed over the shards.
    pub fn subscriptions_now(&self) -> u64 {
        self.shards.subscriptions_now()
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
        Ok(self.shards.poll_subscriptions()?)
    }

    /// Waits until every shard has seen at least `n` subscriptions (a subscriber with several topic prefixes
    /// counts once per prefix). Returns false if stopped or timed out first.
    pub fn wait_subscribers(
        &mut self,
        n: u64,
        timeout: Option<Duration>,
        stop: &AtomicBool,
    ) -> Result<bool, RecorderError> {
        Ok(self.shards.wait_subscribers(n, timeout, stop)?)
    }

    /// Replays `input` (a journal [`tickbox_journal::Reader`], or any [`ReplayInput`]) from `opts.from` to `opts.to` (or its
    /// end). `clock` stamps send times and drives pacing.
    pub fn run(
        &mut self,
        input: &mut dyn ReplayInput,
        clock: &dyn Clock,
        stop: &AtomicBool,
        mut progress: impl FnMut(&ReplayStats),
    ) -> Result<ReplayStats, RecorderError> {
        input.seek(self.opts.from)?;
        let shards = self.shards.len();
        // Each shard's counters when this run began: the run's own are what it adds to them.
        let base: Vec<(PublisherCounts, Sent)> = self
            .shards
            .publishers()
            .iter()
            .map(|p| (p.counts(), p.sent()))
            .collect();
        // Subscribers already connected (a wait before the run, or an earlier run) count for this run.
        self.shards.poll_subscriptions()?;
        self.shards.reset_peak();
        let mut stats = ReplayStats {
            per_shard: vec![0; shards],
            per_shard_counts: vec![PublisherCounts::default(); shards],
            end_seq: input.end_seq(),
            ..ReplayStats::default()
        };
        let window_ns = self.opts.window.as_nanos() as u64;
        let mut pacer = ReplayPacer::new(self.opts.speed, window_ns);
        // Elapsed time and progress come from the clock the run is given, like its pacing: a simulated clock
        // drives the whole run.
        let start_ns = clock.now_ns();
        let progress_every_ns =
            u64::try_from(self.opts.progress_every.as_nanos()).unwrap_or(u64::MAX);
        let mut last_progress_ns = start_ns;
        for t in &mut self.last_send_ns {
            *t = start_ns;
        }
        for p in &mut self.out {
            p.last_send_ns = start_ns;
            p.active = false;
        }
        let mut invalid_logged = 0;
        let mut since_check = 0u32;
        self.tick_ns = None;
        self.update_batching(stop)?;
        let allocated_before = self.buffers_allocated();
        'records: loop {
            if stop.load(Ordering::Relaxed) {
                break;
            }
            since_check += 1;
            if since_check >= 256 {
                since_check = 0;
                // Cheap (one non-blocking recv per shard) and keeps the subscriber count honest.
                self.poll_subscriptions()?;
                if !self.update_batching(stop)? {
                    break;
                }
                let now_ns = clock.now_ns();
                if now_ns.saturating_sub(last_progress_ns) >= progress_every_ns {
                    last_progress_ns = now_ns;
                    stats.elapsed = Duration::from_nanos(now_ns.saturating_sub(start_ns));
                    self.account(&base, &mut stats);
                    stats.end_seq = input.end_seq();
                    stats.subscriptions = self.shards.subscriptions().to_vec();
                    stats.subscribers = self.shards.peak();
                    progress(&stats);
                }
            }
            let rec = match input.next_input()? {
                Input::Record(rec) => rec,
                Input::End => {
                    if !self.opts.follow {
                        break;
                    }
                    self.idle(Duration::from_millis(5), clock, stop, &mut stats)?;
                    since_check = 256;
                    continue;
                }
                Input::Lapped { wanted_seq } => {
                    stats.lapped += 1;
                    tracing::warn!(
                        wanted_seq,
                        "replay fell a whole ring behind the recorder; skipping ahead"
                    );
                    continue;
                }
                Input::Damaged(e) if self.opts.stop_on_corruption => return Err(e.into()),
                Input::Damaged(e) => {
                    let skipped = input.skip_damage()?;
                    stats.damaged_ranges += 1;
                    stats.corrupt_records += skipped.records;
                    stats.corrupt_bytes += skipped.bytes;
                    if stats.damaged_ranges <= 5 {
                        tracing::warn!(
                            records = skipped.records,
                            bytes = skipped.bytes,
                            resumed_at = skipped.resumed_at,
                            "{e}; skipped to the next record that verifies"
                        );
                    }
                    for p in &mut self.out {
                        p.after_damage = true;
                    }
                    self.damage_before_seen = true;
                    continue;
                }
            };
            let (seq, capture_ns) = (rec.seq, rec.capture_time_ns);
            match self.opts.to {
                Some(Position::Seq(s)) if seq >= s => break,
                Some(Position::Time(t)) if capture_ns >= t => break,
                _ => {}
            }
            // Decoded once, from the journal's bytes: the copy that is sent is made (and restamped) just once,
            // at the end, straight into its batch or message.
            let frame = rec.payload;
            let (header, header_at) = match MessageRef::decode(frame) {
                // Selection hook: one check per record, before pacing, so unselected records cost no wait.
                Ok(m)
                    if m.kind() != Kind::Heartbeat
                        && self
                            .opts
                            .selection
                            .as_ref()
                            .is_some_and(|sel| !sel.selects(m.topic(), m.header())) =>
                {
                    stats.not_selected += 1;
                    continue;
                }
                Ok(m) => (*m.header(), m.topic().len() + 1),
                Err(err) => {
                    stats.skipped_invalid += 1;
                    if invalid_logged < 5 {
                        invalid_logged += 1;
                        tracing::warn!(seq, "skipping a record that is not a tickbox frame: {err}");
                    }
                    continue;
                }
            };
            let cached = header.flags.contains(Flags::CACHED);
            match header.kind {
                Kind::Heartbeat => {
                    stats.skipped_heartbeats += 1;
                    continue;
                }
                Kind::Gap if self.opts.identity == Identity::Restamp => {
                    stats.skipped_gap_notices += 1;
                    continue;
                }
                _ => {}
            }
            let mut now = match self.tick_ns {
                Some(t) => t,
                None => self.tick(clock),
            };
            loop {
                match pacer.on_record(capture_ns, now) {
                    Pace::Now => break,
                    Pace::WaitUntil(due) => {
                        // The tick is over: what it batched goes out before the wait (idle flushes).
                        let wait = Duration::from_nanos(due.saturating_sub(now));
                        self.idle(wait.min(Duration::from_millis(50)), clock, stop, &mut stats)?;
                        if stop.load(Ordering::Relaxed) {
                            break 'records;
                        }
                        now = self.tick(clock);
                        since_check = 256;
                    }
                }
            }
            stats.max_late_ns = stats.max_late_ns.max(pacer.lateness_ns(capture_ns, now));
            let mut out = header;
            out.send_time_ns = now;
            if self.opts.mark_replayed {
                out.flags = out.flags.with(Flags::REPLAY);
            }
            let shard = match self.opts.identity {
                Identity::Preserve => header.publisher_id as usize % shards,
                Identity::Restamp => {
                    let shard = tickbox_wire::shard_for(
                        tickbox_wire::shard_key_of_topic(&frame[..header_at - 1]),
                        shards,
                    );
                    out.publisher_id = self.opts.publisher_id_base + shard as u32;
                    out.session = self.restamp_session;
                    // A cached value repeats the shard's last sequence: it must not consume one.
                    out.sequence = self.shard_seq[shard] + u64::from(!cached);
                    shard
                }
            };
            if self.opts.identity == Identity::Preserve
                && !cached
                && !self.damage_gap(&header, shard, now, stop, &mut stats)?
            {
                break;
            }
            if !self.send_record(shard, frame, header_at, &out, stop)? {
                break;
            }
            match self.opts.identity {
                Identity::Restamp => {
                    if !cached {
                        self.shard_seq[shard] += 1;
                    }
                    self.last_send_ns[shard] = now;
                }
                Identity::Preserve if !cached => self.on_sent(&header, shard, now),
                Identity::Preserve => {}
            }
            // `sent`, `bytes`, `per_shard` and the counts by kind are the shard publishers' (see `account`).
            if cached {
                stats.cached += 1;
            } else if header.kind == Kind::Gap {
                stats.gap_notices += 1;
            }
            stats.first_seq.get_or_insert(seq);
            stats.first_capture_ns.get_or_insert(capture_ns);
            stats.last_seq = Some(seq);
            stats.last_capture_ns = Some(capture_ns);
        }
        // Batches still filling go out (a stop in the middle of one is counted by `flush_all` as not sent).
        self.flush_all(stop)?;
        if !stop.load(Ordering::Relaxed) {
            // One last heartbeat each: a subscriber that lost the final message learns it now.
            self.heartbeats(clock, stop, &mut stats, true)?;
        }
        stats.elapsed = Duration::from_nanos(clock.now_ns().saturating_sub(start_ns));
        stats.end_seq = input.end_seq();
        if self.opts.identity == Identity::Restamp {
            stats.shard_last_seq = self.shard_seq.clone();
        }
        self.account(&base, &mut stats);
        let allocated = self.buffers_allocated();
        stats.batch_buffers_allocated = allocated.0 - allocated_before.0;
        stats.single_buffers_allocated = allocated.1 - allocated_before.1;
        if stats.batch_buffers_allocated + stats.single_buffers_allocated > 0 {
            tracing::debug!(
                batches = stats.batch_buffers_allocated,
                single_frames = stats.single_buffers_allocated,
                "buffers allocated while every recycled one was queued"
            );
        }
        stats.subscriptions = self.poll_subscriptions()?.to_vec();
        stats.subscribers = self.shards.peak();
        stats.publishers = self.out.iter().filter(|p| p.active).count() as u64;
        Ok(stats)
    }

    /// The run's sends as its shard publishers counted them since it began (`base`): records, frames, bytes,
    /// per shard and by kind.
    fn account(&self, base: &[(PublisherCounts, Sent)], stats: &mut ReplayStats) {
        stats.sent = 0;
        stats.frames_sent = 0;
        stats.batches_sent = 0;
        stats.bytes = 0;
        for (shard, (p, (counts, sent))) in self.shards.publishers().iter().zip(base).enumerate() {
            let run = p.counts().since(counts);
            let records = p.sent().records - sent.records;
            stats.sent += records;
            stats.frames_sent += run.frames;
            stats.batches_sent += run.batches;
            stats.bytes += p.sent().bytes - sent.bytes;
            stats.per_shard[shard] = records;
            stats.per_shard_counts[shard] = run;
        }
    }

    /// One-off buffers allocated so far, all shards (this replayer's life): for batches, for single frames.
    fn buffers_allocated(&self) -> (u64, u64) {
        self.shards
            .publishers()
            .iter()
            .fold((0, 0), |(batches, singles), p| {
                (
                    batches + p.batch_buffers_allocated(),
                    singles + p.counts().single_buffers_allocated,
                )
            })
    }

    /// The flags of what the replay says itself (heartbeats, gap notices for damage).
    fn own_flags(&self) -> Flags {
        if self.opts.mark_replayed {
            Flags::REPLAY
        } else {
            Flags::NONE
        }
    }

    /// Reads the replay clock for a new tick; while any shard batches, records reuse it until the next flush.
    fn tick(&mut self, clock: &dyn Clock) -> u64 {
        let now = clock.now_ns();
        if self.shards.batching() {
            self.tick_ns = Some(now);
        }
        now
    }

    /// Decides per shard whether records go out in batches ([`Shards::update_batching`]). False if stopped
    /// while a shard leaving batch mode sent what it had batched.
    fn update_batching(&mut self, stop: &AtomicBool) -> Result<bool, RecorderError> {
        match self.shards.update_batching(stop)? {
            None => return Ok(false),
            // A batch went out: the next record starts a new tick.
            Some(true) => self.tick_ns = None,
            Some(false) => {}
        }
        if !self.shards.batching() {
            self.tick_ns = None;
        }
        Ok(true)
    }

    /// Sends one journal record on `shard`, restamped with `out`'s send fields: copied once, from the journal
    /// into the shard's batch buffer (sent as it is when full, or at the end of the pacer tick) or into the
    /// message sent alone.
    /// False if stopped first.
    fn send_record(
        &mut self,
        shard: usize,
        frame: &[u8],
        header_at: usize,
        out: &Header,
        stop: &AtomicBool,
    ) -> Result<bool, RecorderError> {
        let p = self.shards.publisher(shard);
        let frames = p.counts().frames;
        // A full pipe (lossless mode) or a signal: give Ctrl-C its chance, then retry; a refused message is built
        // again from the journal's bytes.
        while !p.send_frame(frame, header_at, out, stop)? {
            if stop.load(Ordering::Relaxed) {
                return Ok(false);
            }
        }
        if p.counts().frames != frames {
            // A batch went out: the next record starts a new tick, its send time read afresh.
            self.tick_ns = None;
        }
        Ok(true)
    }

    /// Sends every shard's batch, retrying a full pipe. False if stopped first.
    fn flush_all(&mut self, stop: &AtomicBool) -> Result<bool, RecorderError> {
        if self.shards.publishers().iter().any(|p| p.pending() > 0) {
            // The next record starts a new tick: its send time is read afresh.
            self.tick_ns = None;
        }
        Ok(self.shards.flush_all(stop)?)
    }

    /// Identity mode: before the first record of a publisher after journal damage, a gap notice for the sequences
    /// the damage took from it (its sequence jumped past the last one replayed, within the same session). Sent
    /// on its shard, in order. False if stopped first.
    fn damage_gap(
        &mut self,
        h: &Header,
        shard: usize,
        now: u64,
        stop: &AtomicBool,
        stats: &mut ReplayStats,
    ) -> Result<bool, RecorderError> {
        let whole = self.damage_before_seen && self.replays_everything();
        let (first, last) = match self.out.iter_mut().find(|p| p.publisher == h.publisher_id) {
            Some(p) if p.after_damage => {
                p.after_damage = false;
                if p.session != h.session || h.sequence <= p.last_seq + 1 {
                    return Ok(true);
                }
                (p.last_seq + 1, h.sequence - 1)
            }
            Some(_) => return Ok(true),
            // First seen after damage: whatever the ledger says was recorded before this record is what the
            // damage took (the journal's first segment, say). Only for a replay of the whole journal: a selection
            // skips records on purpose.
            None if whole => match self.first_recorded.get(&(h.publisher_id, h.session)) {
                Some(&first) if h.sequence > first => (first, h.sequence - 1),
                _ => return Ok(true),
            },
            None => return Ok(true),
        };
        let (header, frame) = damage_notice(
            h.publisher_id,
            h.session,
            first,
            last,
            now,
            self.own_flags(),
        )?;
        let topic_len = frame.iter().position(|&b| b == 0).unwrap_or(0) + 1;
        if !self.send_record(shard, &frame, topic_len, &header, stop)? {
            return Ok(false);
        }
        stats.gap_notices += 1;
        stats.damage_gap_notices += 1;
        self.on_sent(&header, shard, now);
        Ok(true)
    }

    /// True when nothing is selected away: from the start, every topic and kind.
    fn replays_everything(&self) -> bool {
        self.opts.from.is_none() && self.opts.selection.is_none()
    }

    /// Reads each publisher session's first recorded sequence from the ledger of the journal at `path`, so that
    /// damage before a publisher's first intact record is announced too. A journal without a readable ledger
    /// (not written by `record`) leaves such damage to the summary's damaged ranges.
    pub fn expect_from_ledger(&mut self, path: &std::path::Path) {
        let ledger = match tickbox_journal::read_app_meta(path)
            .map_err(|e| e.to_string())
            .and_then(|meta| {
                crate::Ledger::decode(meta.as_deref().unwrap_or_default())
                    .map_err(|e| e.to_string())
            }) {
            Ok(ledger) => ledger,
            Err(e) => {
                tracing::debug!("no ledger for damage gap notices: {e}");
                return;
            }
        };
        for row in ledger.rows() {
            // The ledger accounts every sequence from the first recorded to the last as recorded or missing.
            let accounted = row.recorded.saturating_add(row.missing);
            if accounted > 0 && row.last_sequence >= accounted {
                self.first_recorded.insert(
                    (row.publisher, row.session),
                    row.last_sequence - accounted + 1,
                );
            }
        }
    }

    /// Identity mode: remembers what an original publisher has now said (for its heartbeats).
    fn on_sent(&mut self, h: &Header, shard: usize, now: u64) {
        let i = match self.out.get(self.out_last_hit) {
            Some(p) if p.publisher == h.publisher_id => self.out_last_hit,
            _ => match self.out.iter().position(|p| p.publisher == h.publisher_id) {
                Some(i) => i,
                None if self.out.len() < MAX_OUT_PUBLISHERS => {
                    self.out.push(OutPublisher {
                        publisher: h.publisher_id,
                        session: h.session,
                        last_seq: h.sequence,
                        shard,
                        last_send_ns: now,
                        sent: 0,
                        active: true,
                        after_damage: false,
                        hb_topic: heartbeat_topic(h.publisher_id),
                    });
                    self.out.len() - 1
                }
                None => return,
            },
        };
        self.out_last_hit = i;
        let p = &mut self.out[i];
        if p.session != h.session {
            // The recording holds a restart of this publisher: follow it.
            p.session = h.session;
            p.last_seq = h.sequence;
        } else {
            p.last_seq = p.last_seq.max(h.sequence);
        }
        if h.kind != Kind::Gap {
            p.sent += 1;
        }
        p.shard = shard;
        p.last_send_ns = now;
        p.active = true;
    }

    /// Sleeps up to `wait` (in slices, watching `stop`) and sends heartbeats for publishers idle past the interval.
    fn idle(
        &mut self,
        wait: Duration,
        clock: &dyn Clock,
        stop: &AtomicBool,
        stats: &mut ReplayStats,
    ) -> Result<(), RecorderError> {
        // What the ending tick batched goes out before the sleep (and before any heartbeat naming it).
        self.flush_all(stop)?;
        // Sleep short of the deadline; the pacer's window absorbs the remainder and the scheduler's overshoot.
        let slack = self.opts.window / 2;
        if wait > slack {
            std::thread::sleep(wait - slack);
        }
        self.poll_subscriptions()?;
        self.heartbeats(clock, stop, stats, false)
    }

    /// Sends a heartbeat for every publisher (identity mode) or shard (restamp mode) idle past the interval, or,
    /// with `all`, for every one active in this run.
    fn heartbeats(
        &mut self,
        clock: &dyn Clock,
        stop: &AtomicBool,
        stats: &mut ReplayStats,
        all: bool,
    ) -> Result<(), RecorderError> {
        let interval = self.opts.heartbeat_interval;
        if interval.is_zero() {
            return Ok(());
        }
        let interval_ns = interval.as_nanos() as u64;
        let due = |last: u64, now: u64| all || now.saturating_sub(last) >= interval_ns;
        match self.opts.identity {
            Identity::Preserve => {
                for i in 0..self.out.len() {
                    let now = clock.now_ns();
                    let p = &self.out[i];
                    if !p.active || !due(p.last_send_ns, now) || stop.load(Ordering::Relaxed) {
                        continue;
                    }
                    let header = Header {
                        kind: Kind::Heartbeat,
                        flags: self.own_flags(),
                        publisher_id: p.publisher,
                        // A heartbeat names the last sequence accounted for.
                        sequence: p.last_seq,
                        send_time_ns: now,
                        origin_time_ns: now,
                        session: p.session,
                    };
                    let hb = Heartbeat {
                        interval_ns,
                        messages_sent: p.sent,
                    };
                    if send_heartbeat(
                        self.shards.publisher(p.shard),
                        &p.hb_topic,
                        &header,
                        hb,
                        stop,
                    )? {
                        stats.heartbeats_sent += 1;
                    }
                    self.out[i].last_send_ns = now;
                }
            }
            Identity::Restamp => {
                for shard in 0..self.shards.len() {
                    let now = clock.now_ns();
                    if !due(self.last_send_ns[shard], now) || stop.load(Ordering::Relaxed) {
                        continue;
                    }
                    let header = Header {
                        kind: Kind::Heartbeat,
                        flags: self.own_flags(),
                        publisher_id: self.opts.publisher_id_base + shard as u32,
                        // A heartbeat repeats the last data sequence sent.
                        sequence: self.shard_seq[shard],
                        send_time_ns: now,
                        origin_time_ns: now,
                        session: self.restamp_session,
                    };
                    let hb = Heartbeat {
                        interval_ns,
                        messages_sent: stats.per_shard.get(shard).copied().unwrap_or(0),
                    };
                    let topic = &self.hb_topics[shard];
                    if send_heartbeat(self.shards.publisher(shard), topic, &header, hb, stop)? {
                        stats.heartbeats_sent += 1;
                    }
                    self.last_send_ns[shard] = now;
                }
            }
        }
        Ok(())
    }
}

/// Sends a heartbeat on `shard` for the identity in `header`, retrying while the (lossless) socket is at its
/// high-water mark. False if stopped meanwhile.
fn send_heartbeat(
    shard: &mut Publisher,
    topic: &str,
    header: &Header,
    heartbeat: Heartbeat,
    stop: &AtomicBool,
) -> Result<bool, RecorderError> {
    loop {
        if shard.heartbeat_as(topic, header, heartbeat)? {
            return Ok(true);
        }
        // High-water mark (lossless mode) or a signal: give Ctrl-C its chance, then retry.
        if stop.load(Ordering::Relaxed) {
            return Ok(false);
        }
    }
}
