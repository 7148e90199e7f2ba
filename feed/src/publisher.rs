//! One publisher: a PUB (or no-drop XPUB) socket with its own publisher id and gap-free sequence.

use std::sync::atomic::AtomicBool;
use std::time::Duration;

use std::sync::Arc;
use tickbox_wire::{
    encode, encoded_len, heartbeat_topic, now_ns, Header, Heartbeat, Kind, Payload,
};

use tickbox_zmqx::publisher::{Linger, PublisherSocket, PublisherSocketError, Subscriptions};
use tickbox_zmqx::zero_copy::{Delivery, OutMessage, ZeroCopySender};

use crate::batch::ShardBatch;
use crate::config::{FeedConfig, PublisherShardConfig};
use crate::counts::PublisherCounts;
use crate::error::FeedError;

/// How long one blocking `send` may wait on a full no-drop pipe before the caller gets control back (to check
/// for stop). PUB sockets never block, so this only matters with `back_pressure = "block"`.
pub const SEND_TIMEOUT_MS: i32 = 100;

/// Longest a lossless shard's batch waits for libzmq to hand back a pooled buffer before it allocates one
/// (counted, see [`tickbox_zmqx::zero_copy::ZeroCopyStats`]): its subscribers are the hold-up, so the wait is the
/// back-pressure a full pipe would apply anyway.
pub(crate) const BATCH_BUFFER_WAIT: Duration = Duration::from_millis(100);

/// Linger of publisher sockets: long enough to flush the tail of a short run, short enough not to hang exit.
pub const LINGER_MS: i32 = 100;

/// How long an interrupted shard still lets queued messages reach the network before it closes (Ctrl-C skips
/// the drain wait, not this), as an interrupted replay does.
pub const INTERRUPT_GRACE: Duration = Duration::from_millis(300);

/// Creates, configures and binds (or connects) the socket of shard `shard`; returns it with the endpoint
/// actually bound (a `tcp://…:*` endpoint resolved to its port). Call it on the thread that will use the socket.
pub fn open_publisher_socket(
    gate: &tickbox_auth::Gate,
    shard: usize,
    shard_config: &PublisherShardConfig,
    config: &FeedConfig,
) -> Result<(zmq::Socket, String), FeedError> {
    let recipe = shard_recipe(
        // Every subscription and every unsubscription must be seen, duplicates included, to count subscribers:
        // whether all of them read batches, how many arrived (`wait_for_subscribers`), whether all have left
        // (the drain at the end of a no-drop run). A lossy feed that needs none of that stays a plain PUB.
        if config.uses_xpub() {
            Subscriptions::Verboser
        } else {
            Subscriptions::Hidden
        },
        config.send_hwm,
        config.back_pressure,
        config.max_subscription_bytes,
        &config.socket_profile,
    );
    open_feed_shard(gate, config, &recipe, shard, shard_config)
}

/// Opens shard `shard` of a feed by `recipe`, in the feed's role with its `[security]`; errors name the shard.
pub(crate) fn open_feed_shard(
    gate: &tickbox_auth::Gate,
    config: &FeedConfig,
    recipe: &PublisherSocket<'_>,
    shard: usize,
    shard_config: &PublisherShardConfig,
) -> Result<(zmq::Socket, String), FeedError> {
    open_shard_socket(
        gate,
        &config.security,
        "feed",
        recipe,
        &shard_config.endpoint,
        shard_config.connect,
    )
    .map_err(|e| match e {
        ShardSocketError::Auth(e) => FeedError::Auth(e),
        ShardSocketError::Socket(PublisherSocketError::Option { source, .. }) => {
            FeedError::SocketOption { shard, source }
        }
        ShardSocketError::Socket(PublisherSocketError::Attach {
            verb,
            endpoint,
            source,
        }) => FeedError::Endpoint {
            shard,
            verb,
            endpoint,
            source,
        },
    })
}

/// The socket recipe of a publisher shard (the feed's, a replay's, `feed --source`'s): `subscriptions` as the
/// shard needs them, [`LINGER_MS`], blocked sends bounded by [`SEND_TIMEOUT_MS`] so a stop is seen,
/// subscriptions bounded to `max_subscription_bytes`, `ZMQ_XPUB_NODROP` when it blocks, the role's profile.
pub fn shard_recipe(
    subscriptions: Subscriptions,
    send_hwm: i32,
    back_pressure: tickbox_zmqx::BackPressure,
    max_subscription_bytes: usize,
    profile: &tickbox_zmqx::profile::SocketProfile,
) -> PublisherSocket<'_> {
    PublisherSocket {
        subscriptions,
        send_hwm,
        linger: Linger::Ms(LINGER_MS),
        send_timeout_ms: Some(SEND_TIMEOUT_MS),
        max_inbound_bytes: tickbox_zmqx::subscription_limit(max_subscription_bytes),
        back_pressure,
        profile,
    }
}

/// Why a shard's socket could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum ShardSocketError {
    /// `[security]` could not be applied to it.
    #[error(transparent)]
    Auth(#[from] tickbox_auth::AuthError),
    /// An option, the bind or the connect failed.
    #[error(transparent)]
    Socket(#[from] PublisherSocketError),
}

/// Opens a shard's socket by `recipe` for `role` (`feed`, `replay`): a socket that binds is a server and comes
/// from the gate (CURVE, ZAP, monitor) before it binds; one that connects is a client of the role's server key.
pub fn open_shard_socket(
    gate: &tickbox_auth::Gate,
    security: &tickbox_auth::Security,
    role: &'static str,
    recipe: &PublisherSocket<'_>,
    endpoint: &str,
    connect: bool,
) -> Result<(zmq::Socket, String), ShardSocketError> {
    let socket = if connect {
        let socket = gate.context().socket(recipe.kind()).map_err(|source| {
            tickbox_auth::AuthError::Socket {
                role: role.to_string(),
                source,
            }
        })?;
        security.client(&socket, role)?;
        socket
    } else {
        gate.socket(recipe.kind(), role)?
    };
    Ok(recipe.open(socket, endpoint, connect)?)
}

/// Stamps, encodes and sends messages for one publisher id. Messages are encoded into recycled buffers that
/// libzmq sends as they are (libzmq allocates only its small descriptor per message), and every data message is
/// tracked until libzmq lets it go, so the shard knows what its close would drop ([`Publisher::undelivered`]).
pub struct Publisher {
    socket: zmq::Socket,
    shard: usize,
    publisher_id: u32,
    /// This run's identity (its start time, ns): a subscriber tells a restart from a gap by a change of session.
    session: u64,
    sequence: u64,
    heartbeat_topic: String,
    heartbeat_interval_ns: u64,
    counts: PublisherCounts,
    /// Send the topic alone first (the Guide's envelope), see [`Publisher::set_guide_framing`].
    guide_framing: bool,
    /// Messages waiting to go out as one batch frame (see [`Publisher::set_batching`]); encoded in place.
    batch: Option<ShardBatch>,
    batching: bool,
    /// Recycled buffers single frames are encoded into and sent from (no copy), tracked by `delivery`.
    singles: ZeroCopySender,
    /// Data messages handed to libzmq (single frames, and batch frames by their records) until it releases
    /// them: what the shard's close would drop (see [`Publisher::undelivered`]).
    delivery: Arc<Delivery>,
    /// Data messages handed to libzmq so far, and their bytes (see [`Publisher::sent`]).
    sent: Sent,
}

/// What a publisher has handed to libzmq so far (batched messages count once their batch went).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Sent {
    /// Data messages (and gap notices or cached values a replay sends), alone or in batches.
    pub records: u64,
    /// Their frames' bytes (without batch headers and length prefixes).
    pub bytes: u64,
}

/// Recycled buffers for single frames: at least this many, and otherwise one send high-water mark's worth (see
/// [`single_buffers`]); past them a frame gets a one-off buffer, tracked the same way.
const SINGLE_BUFFERS: usize = 1024;
/// The most recycled single-frame buffers a publisher keeps (16 MiB of them).
const MAX_SINGLE_BUFFERS: usize = 65_536;

/// Recycled single-frame buffers for a socket whose send high-water mark is `sndhwm` messages: enough for what
/// libzmq can hold for a subscriber that is behind, so a flat-out feed never falls back to one-off buffers,
/// which cost three allocations a frame (the buffer, its release record, libzmq's descriptor) against one: at
/// the bench's 10,000, frames past the first 1,024 all did. `0` (no limit) keeps the minimum.
fn single_buffers(sndhwm: i32) -> usize {
    match usize::try_from(sndhwm) {
        Ok(hwm) if hwm > 0 => (hwm + hwm / 16).clamp(SINGLE_BUFFERS, MAX_SINGLE_BUFFERS),
        _ => SINGLE_BUFFERS,
    }
}

/// Size of each single-frame buffer: every generated message fits (a larger one gets a one-off buffer).
const SINGLE_BUFFER_LEN: usize = 256;

impl Publisher {
    /// Wraps a configured socket. `heartbeat_interval_ns` is advertised in heartbeats.
    pub fn new(
        socket: zmq::Socket,
        shard: usize,
        publisher_id: u32,
        heartbeat_interval_ns: u64,
    ) -> Self {
        let delivery = Delivery::new();
        let single_buffers = single_buffers(socket.get_sndhwm().unwrap_or(0));
        Publisher {
            socket,
            shard,
            publisher_id,
            session: now_ns().max(1),
            sequence: 0,
            heartbeat_topic: heartbeat_topic(publisher_id),
            heartbeat_interval_ns,
            counts: PublisherCounts::default(),
            guide_framing: false,
            batch: None,
            batching: false,
            singles: {
                let mut singles = ZeroCopySender::new(single_buffers, SINGLE_BUFFER_LEN);
                singles.track(&delivery);
                singles
            },
            delivery,
            sent: Sent::default(),
        }
    }

    /// Gives the publisher a batch buffer (`max_records` messages, `max_bytes` per frame, allocated once), used
    /// while [`set_batching`](Self::set_batching) says so.
    pub fn with_batch(self, max_bytes: usize, max_records: u16) -> Self {
        // Never wait for a buffer: on a plain PUB a slow subscriber's queue may hold them all, and a live feed
        // must not stall the others on it.
        self.with_batch_pool(max_bytes, max_records, None)
    }

    /// [`with_batch`](Self::with_batch) whose batches wait up to `wait_for_buffers` for a pooled buffer when all
    /// are queued in libzmq, before allocating one (see [`ShardBatch::new`]).
    pub fn with_batch_pool(
        mut self,
        max_bytes: usize,
        max_records: u16,
        wait_for_buffers: Option<Duration>,
    ) -> Self {
        self.batch = Some(ShardBatch::new(
            max_bytes,
            max_records,
            &self.delivery,
            wait_for_buffers,
        ));
        self
    }

    /// [`with_batch_pool`](Self::with_batch_pool) for a shard that publishes as fast as it reads (a replay,
    /// `feed --source`). Lossless (`back_pressure` blocks): a batch waits up to 100 ms (`BATCH_BUFFER_WAIT`) for a
    /// pooled buffer, so the pool bounds the queue like the high-water mark. Lossy: a slow subscriber's queue
    /// holds buffers it may never read, and allocating keeps the others going. Measured on 10 M records into
    /// `tickbox subscribe`: waiting was no slower end to end than allocating, used less CPU, and kept the
    /// replay's memory and the subscriber's lateness far lower (the queue no longer grows to the high-water mark).
    pub fn with_flat_out_batch_pool(
        self,
        max_bytes: usize,
        max_records: u16,
        back_pressure: tickbox_zmqx::BackPressure,
    ) -> Self {
        self.with_batch_pool(
            max_bytes,
            max_records,
            back_pressure.blocks().then_some(BATCH_BUFFER_WAIT),
        )
    }

    /// Turns batching on or off (on only if a batch buffer was given). Turning it off first sends what is
    /// batched, so order is kept; false, with batching still on, if that send found the pipe full.
    pub fn set_batching(&mut self, on: bool) -> Result<bool, FeedError> {
        let on = on && self.batch.is_some();
        if self.batching && !on && !self.flush()? {
            return Ok(false);
        }
        self.batching = on;
        Ok(true)
    }

    /// Whether data messages currently go into batch frames.
    pub fn batching(&self) -> bool {
        self.batching
    }

    /// Data messages batched and not sent yet (they have their sequences; [`flush`](Self::flush) sends them).
    pub fn pending(&self) -> usize {
        self.batch.as_ref().map_or(0, ShardBatch::pending)
    }

    /// Sends the batched messages (one alone as a plain frame). False if the no-drop pipe stayed full for
    /// [`SEND_TIMEOUT_MS`]: the batch is kept, and calling again retries it.
    pub fn flush(&mut self) -> Result<bool, FeedError> {
        self.flush_until(None)
    }

    /// [`flush`](Self::flush), retrying a refused frame until it goes or `stop` is raised; a frame still
    /// refused then is dropped, its messages not counted as sent. False if stopped.
    pub fn flush_or_stop(&mut self, stop: &AtomicBool) -> Result<bool, FeedError> {
        let done = self.flush_until(Some(stop))?;
        if !done {
            if let Some(batch) = self.batch.as_mut() {
                batch.discard_refused();
            }
        }
        Ok(done)
    }

    fn flush_until(&mut self, retry_until: Option<&AtomicBool>) -> Result<bool, FeedError> {
        let Some(batch) = self.batch.as_mut() else {
            return Ok(true);
        };
        let shard = self.shard;
        let flushed = batch
            .flush(&mut self.socket, &mut self.counts, retry_until)
            .map_err(|source| FeedError::BatchSend { shard, source })?;
        self.sent.records += flushed.records;
        self.sent.bytes += flushed.bytes;
        Ok(flushed.complete)
    }

    /// Sends every message as the Guide's two-frame envelope, `[topic][tickbox frame]`, so plain ZeroMQ proxies
    /// (an LVC keyed on the first frame) see the topic alone. Off by default.
    pub fn set_guide_framing(&mut self, on: bool) {
        self.guide_framing = on;
    }

    /// The publisher's socket, e.g. to read subscriptions from an XPUB.
    pub fn socket(&self) -> &zmq::Socket {
        &self.socket
    }

    /// The shard this publisher serves.
    pub fn shard(&self) -> usize {
        self.shard
    }

    /// The publisher id carried in every header and in the heartbeat topic.
    pub fn publisher_id(&self) -> u32 {
        self.publisher_id
    }

    /// This run's session identity, carried in every header.
    pub fn session(&self) -> u64 {
        self.session
    }

    /// Sequence of the last data message sent (0 before the first; the first is 1).
    pub fn last_sequence(&self) -> u64 {
        self.sequence
    }

    /// One-off batch buffers allocated so far because every pooled one was queued in libzmq.
    pub fn batch_buffers_allocated(&self) -> u64 {
        self.batch.as_ref().map_or(0, ShardBatch::allocated)
    }

    /// Data messages and bytes handed to libzmq so far.
    pub fn sent(&self) -> Sent {
        self.sent
    }

    /// Waits up to `limit` (or until `stop`) for libzmq to hand what it holds to the subscribers' connections;
    /// returns what it still holds then ([`undelivered`](Self::undelivered)).
    pub fn wait_settled(&self, limit: Duration, stop: Option<&AtomicBool>) -> u64 {
        self.delivery.wait_settled(limit, stop)
    }

    /// What has been sent so far, by kind.
    pub fn counts(&self) -> PublisherCounts {
        self.counts
    }

    /// Data messages sent (counted in [`counts`](Self::counts)) that libzmq still holds in this socket's queues:
    /// not yet written to every subscriber's connection, so closing now would drop them. What sits in the
    /// kernel's socket buffers counts as delivered (libzmq cannot see past them), and a message queued for a
    /// subscriber that then disconnected counts as released when libzmq drops that queue. Heartbeats are not
    /// counted.
    pub fn undelivered(&self) -> u64 {
        self.delivery.outstanding()
    }

    /// Sends one data message stamped with the next sequence and the current time. Returns the sequence, or
    /// `None` if a no-drop pipe stayed full for [`SEND_TIMEOUT_MS`]: nothing was sent and the sequence was
    /// not used, so retrying keeps the stream gap-free.
    #[inline]
    pub fn publish(&mut self, topic: &str, payload: &Payload) -> Result<Option<u64>, FeedError> {
        self.publish_at(topic, payload, now_ns())
    }

    /// [`publish`](Self::publish) with a send time the caller already read (one clock read per message
    /// instead of two when the payload carries the same time).
    #[inline]
    pub fn publish_at(
        &mut self,
        topic: &str,
        payload: &Payload,
        send_time_ns: u64,
    ) -> Result<Option<u64>, FeedError> {
        self.publish_origin(topic, payload, send_time_ns, send_time_ns)
    }

    /// [`publish_at`](Self::publish_at) of a message that happened earlier (a recording's event time in
    /// `origin_time_ns`, ns since the epoch): the header carries both times.
    #[inline]
    pub fn publish_origin(
        &mut self,
        topic: &str,
        payload: &Payload,
        send_time_ns: u64,
        origin_time_ns: u64,
    ) -> Result<Option<u64>, FeedError> {
        let sequence = self.sequence + 1;
        let mut header = Header::live(payload.kind(), self.publisher_id, sequence, send_time_ns)
            .with_session(self.session);
        header.origin_time_ns = origin_time_ns;
        let message = Encoded {
            topic,
            header: &header,
            payload,
        };
        if !self.send(&message, &NEVER_STOP)? {
            return Ok(None);
        }
        self.sequence = sequence;
        match payload.kind() {
            Kind::Quote => self.counts.quotes += 1,
            Kind::Trade => self.counts.trades += 1,
            Kind::BookLevel => self.counts.book_levels += 1,
            Kind::Heartbeat | Kind::Gap => {}
        }
        Ok(Some(sequence))
    }

    /// Sends a heartbeat on `H.<publisher id>` carrying the last data sequence. Returns false if the pipe was
    /// full (a heartbeat is not worth waiting for: the data in front of it already proves we are alive).
    pub fn heartbeat(&mut self) -> Result<bool, FeedError> {
        // A heartbeat names the last sequence: what is batched must be out first.
        if !self.flush()? {
            return Ok(false);
        }
        let header = Header::live(Kind::Heartbeat, self.publisher_id, self.sequence, now_ns())
            .with_session(self.session);
        let payload = Payload::Heartbeat(Heartbeat {
            interval_ns: self.heartbeat_interval_ns,
            messages_sent: self.counts.data(),
        });
        let topic = std::mem::take(&mut self.heartbeat_topic);
        let sent = self.send_single(
            &Encoded {
                topic: &topic,
                header: &header,
                payload: &payload,
            },
            0,
        );
        self.heartbeat_topic = topic;
        let sent = sent?;
        if sent {
            self.counts.heartbeats += 1;
        }
        Ok(sent)
    }

    /// Sends a ready frame (a journal's record, a gap notice) restamped with `out`'s send fields (flags,
    /// publisher id, sequence, send time) where it lies: copied once, into the open batch or a single frame's
    /// buffer, never decoded again. `header_at` is where its header starts (its topic length + 1). The caller
    /// owns the identity: this publisher's own sequence does not move. False if a send found the no-drop pipe
    /// full: the frame was not taken (call again; a batch waiting for a buffer stops waiting on `stop`).
    #[inline]
    pub fn send_frame(
        &mut self,
        frame: &[u8],
        header_at: usize,
        out: &Header,
        stop: &AtomicBool,
    ) -> Result<bool, FeedError> {
        let message = Restamped {
            frame,
            header_at,
            header: out,
            whole_identity: false,
        };
        if !self.send(&message, stop)? {
            return Ok(false);
        }
        match out.kind {
            Kind::Quote => self.counts.quotes += 1,
            Kind::Trade => self.counts.trades += 1,
            Kind::BookLevel => self.counts.book_levels += 1,
            Kind::Heartbeat | Kind::Gap => {}
        }
        Ok(true)
    }

    /// Sends a ready frame (a recording's record) as this publisher's own next data message: copied once, into
    /// the open batch or a single frame's buffer, with this publisher's id, session and next sequence, `send_time_ns`
    /// and no flags written where they lie; topic, kind, origin time and payload go out as they are. `header_at` is
    /// where its header starts (its topic length + 1) and `kind` its kind. Returns the sequence, or `None` if a
    /// no-drop pipe stayed full (nothing taken, the sequence not used: retrying keeps the stream gap-free).
    #[inline]
    pub fn publish_frame(
        &mut self,
        frame: &[u8],
        header_at: usize,
        kind: Kind,
        send_time_ns: u64,
    ) -> Result<Option<u64>, FeedError> {
        let sequence = self.sequence + 1;
        let header = Header::live(kind, self.publisher_id, sequence, send_time_ns)
            .with_session(self.session);
        let message = Restamped {
            frame,
            header_at,
            header: &header,
            whole_identity: true,
        };
        if !self.send(&message, &NEVER_STOP)? {
            return Ok(None);
        }
        self.sequence = sequence;
        match kind {
            Kind::Quote => self.counts.quotes += 1,
            Kind::Trade => self.counts.trades += 1,
            Kind::BookLevel => self.counts.book_levels += 1,
            Kind::Heartbeat | Kind::Gap => {}
        }
        Ok(Some(sequence))
    }

    /// Sends a heartbeat on behalf of another identity (a replay speaking for the publishers it replays):
    /// `header` as given, after what is batched. False if the pipe was full.
    pub fn heartbeat_as(
        &mut self,
        topic: &str,
        header: &Header,
        heartbeat: Heartbeat,
    ) -> Result<bool, FeedError> {
        if !self.flush()? {
            return Ok(false);
        }
        let payload = Payload::Heartbeat(heartbeat);
        let sent = self.send_single(
            &Encoded {
                topic,
                header,
                payload: &payload,
            },
            0,
        )?;
        if sent {
            self.counts.heartbeats += 1;
        }
        Ok(sent)
    }

    /// Sends one data message: written straight into the batch while batching (sending the batch first when
    /// it is full), or alone. False if a send found the no-drop pipe full: the message was not taken.
    #[inline]
    fn send(&mut self, message: &impl Outgoing, stop: &AtomicBool) -> Result<bool, FeedError> {
        if self.batching {
            let needed = message.len();
            for attempt in 0..2 {
                let batch = self
                    .batch
                    .as_mut()
                    .expect("batching implies a batch buffer");
                if let Some(slot) = batch.slot(needed, stop) {
                    message.write(slot)?;
                    return Ok(true);
                }
                if attempt == 1 || batch.open_len() == 0 {
                    break;
                }
                if !self.flush()? {
                    return Ok(false);
                }
            }
            // Too large for an empty batch: alone, after what is batched.
            if !self.flush()? {
                return Ok(false);
            }
        }
        let sent = self.send_single(message, 1)?;
        if sent {
            self.counts.frames += 1;
        }
        Ok(sent)
    }

    /// Sends one frame carrying `records` data messages (a heartbeat: 0), written straight into a recycled
    /// buffer that libzmq then sends as it is, tracked until libzmq releases it.
    #[inline]
    fn send_single(&mut self, message: &impl Outgoing, records: u64) -> Result<bool, FeedError> {
        let needed = message.len();
        let mut buf = match self.singles.try_buffer() {
            Some(buf) if buf.len() >= needed => buf,
            // Every recycled buffer queued in libzmq (a subscriber that is behind), or a message too large.
            _ => {
                self.counts.single_buffers_allocated += 1;
                self.delivery.buffer(needed)
            }
        };
        let n = message.write(&mut buf)?;
        if self.guide_framing {
            // libzmq applies the high-water mark to a message's first frame and then takes the rest whole, so a
            // full pipe refuses the envelope here, before any of it is queued.
            match self.socket.send(message.topic(), zmq::SNDMORE) {
                Ok(()) => {}
                Err(zmq::Error::EAGAIN | zmq::Error::EINTR) => {
                    self.counts.would_block += 1;
                    return Ok(false);
                }
                Err(source) => {
                    return Err(FeedError::Send {
                        shard: self.shard,
                        source,
                    })
                }
            }
        }
        let shard = self.shard;
        let send_err = |source| FeedError::BatchSend { shard, source };
        let mut msg = OutMessage::counted(buf, 0..n, records).map_err(send_err)?;
        // A refused message is dropped here, which releases it (handed and released alike): the caller retries
        // with the same sequence.
        if msg.send(&mut self.socket, 0).map_err(send_err)? {
            if records > 0 {
                self.sent.records += records;
                self.sent.bytes += n as u64;
            }
            Ok(true)
        } else {
            // EINTR: a signal (Ctrl-C) cut the blocked send short; like a timeout, the caller retries or stops.
            self.counts.would_block += 1;
            Ok(false)
        }
    }
}

/// A message a [`Publisher`] writes into its buffer: encoded from its parts, or a ready frame restamped.
trait Outgoing {
    /// Its length in bytes.
    fn len(&self) -> usize;
    /// Its topic (the first frame of the Guide's envelope).
    fn topic(&self) -> &[u8];
    /// Writes it at the start of `buf` (at least [`len`](Self::len) long); returns its length.
    fn write(&self, buf: &mut [u8]) -> Result<usize, FeedError>;
}

/// A message encoded from a topic, a header and a payload.
struct Encoded<'a> {
    topic: &'a str,
    header: &'a Header,
    payload: &'a Payload,
}

impl Outgoing for Encoded<'_> {
    #[inline]
    fn len(&self) -> usize {
        encoded_len(self.topic, self.header.kind)
    }

    fn topic(&self) -> &[u8] {
        self.topic.as_bytes()
    }

    #[inline]
    fn write(&self, buf: &mut [u8]) -> Result<usize, FeedError> {
        Ok(encode(buf, self.topic, self.header, self.payload)?)
    }
}

/// A ready frame, copied and given a re-publisher's send fields (see [`Publisher::send_frame`]), or a
/// publisher's whole identity, session included ([`Publisher::publish_frame`]).
struct Restamped<'a> {
    frame: &'a [u8],
    header_at: usize,
    header: &'a Header,
    whole_identity: bool,
}

impl Outgoing for Restamped<'_> {
    #[inline]
    fn len(&self) -> usize {
        self.frame.len()
    }

    fn topic(&self) -> &[u8] {
        &self.frame[..self.header_at.saturating_sub(1).min(self.frame.len())]
    }

    #[inline]
    fn write(&self, buf: &mut [u8]) -> Result<usize, FeedError> {
        let n = self.frame.len();
        let out = &mut buf[..n];
        out.copy_from_slice(self.frame);
        if self.whole_identity {
            tickbox_wire::write_identity_at(out, self.header_at, self.header);
        } else {
            tickbox_wire::write_send_fields_at(out, self.header_at, self.header);
        }
        Ok(n)
    }
}

/// [`ShardBatch::slot`] never waits here (the feed's senders allocate when their pool is out), so it is
/// never stopped.
static NEVER_STOP: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use tickbox_wire::{batch_records, is_batch, Kind, MessageRef, Quote, BATCH_TOPIC};

    use super::*;

    /// A no-drop XPUB on loopback with a kernel send buffer of a few KiB and `sndhwm` messages of queue, so a
    /// reader that stops makes the publisher wait (or be refused) at once; returns it with its endpoint.
    fn small_no_drop_xpub(ctx: &zmq::Context, sndhwm: i32) -> (zmq::Socket, String) {
        let mut xpub = ctx.socket(zmq::XPUB).unwrap();
        xpub.set_linger(2000).unwrap();
        xpub.set_sndhwm(sndhwm).unwrap();
        xpub.set_sndbuf(4096).unwrap();
        xpub.set_sndtimeo(5).unwrap();
        tickbox_zmqx::set_xpub_nodrop(&mut xpub, true).unwrap();
        let ep = tickbox_zmqx::bind_resolved(&xpub, "tcp://127.0.0.1:*").unwrap();
        (xpub, ep)
    }

    /// A publisher on [`small_no_drop_xpub`] (`sndhwm`) and a subscriber that has subscribed to everything but
    /// holds one message and a few KiB of kernel buffer, so frames pile up in libzmq until it reads.
    fn publisher_to_a_stalled_reader(ctx: &zmq::Context, sndhwm: i32) -> (Publisher, zmq::Socket) {
        let (xpub, ep) = small_no_drop_xpub(ctx, sndhwm);
        let sub = ctx.socket(zmq::SUB).unwrap();
        sub.set_linger(0).unwrap();
        sub.set_rcvhwm(1).unwrap();
        sub.set_rcvbuf(4096).unwrap();
        sub.connect(&ep).unwrap();
        sub.set_subscribe(b"").unwrap();
        xpub.set_rcvtimeo(5000).unwrap();
        xpub.recv_bytes(0).unwrap();
        (Publisher::new(xpub, 0, 7, 0), sub)
    }

    /// A reader that reads nothing while the publisher sends a whole high-water mark's worth of single frames:
    /// every frame libzmq holds for it waits in a recycled buffer, none in a one-off allocation.
    #[test]
    fn single_frames_up_to_the_high_water_mark_need_no_one_off_buffers() {
        const HWM: i32 = 5_000;
        let ctx = zmq::Context::new();
        let (mut publisher, sub) = publisher_to_a_stalled_reader(&ctx, HWM);
        let started = Instant::now();
        for _ in 0..HWM {
            while publisher
                .publish("Q.XNAS.AAPL", &Payload::Quote(Quote::default()))
                .unwrap()
                .is_none()
            {
                assert!(started.elapsed() < Duration::from_secs(15), "stuck");
            }
        }
        let held = publisher.wait_settled(Duration::from_millis(50), None);
        assert!(held > 2 * SINGLE_BUFFERS as u64, "{held}");
        assert_eq!(publisher.counts().single_buffers_allocated, 0);
        sub.set_rcvtimeo(5000).unwrap();
        for _ in 0..HWM {
            sub.recv_bytes(0).unwrap();
        }
        assert_eq!(publisher.wait_settled(Duration::from_secs(5), None), 0);
    }

    /// A socket with no high-water mark (so the pool has its least, 1,024 buffers), and a reader that reads
    /// nothing at first: thousands of single frames wait in libzmq at once, most in one-off buffers. Every one is
    /// counted as undelivered while libzmq holds it, none is overwritten while it waits, and once the reader has
    /// them all the count is back to zero.
    #[test]
    fn single_frames_queued_past_the_first_buffers_stay_intact_and_counted() {
        const N: u64 = 6_000;
        let ctx = zmq::Context::new();
        let (mut publisher, sub) = publisher_to_a_stalled_reader(&ctx, 0);
        let started = Instant::now();
        for k in 0..N {
            let payload = Payload::Quote(Quote {
                instrument_id: k as u32,
                ..Quote::default()
            });
            while publisher
                .publish("Q.XNAS.AAPL", &payload)
                .unwrap()
                .is_none()
            {
                assert!(started.elapsed() < Duration::from_secs(15), "stuck");
            }
        }
        // The kernel's buffers hold a few dozen frames at most: far more than the pool's 1,024 wait in libzmq.
        let held = publisher.wait_settled(Duration::from_millis(50), None);
        assert!(held > 2 * SINGLE_BUFFERS as u64 && held <= N, "{held}");
        assert!(publisher.counts().single_buffers_allocated > 0);
        sub.set_rcvtimeo(5000).unwrap();
        for k in 0..N {
            let frame = sub.recv_bytes(0).unwrap();
            let m = MessageRef::decode(&frame).unwrap();
            assert_eq!(m.header().sequence, k + 1);
            // A buffer reused while its frame still waited would carry a later message here.
            match m.payload().unwrap() {
                Payload::Quote(q) => assert_eq!(q.instrument_id, k as u32),
                other => panic!("not a quote: {other:?}"),
            }
        }
        assert_eq!(publisher.wait_settled(Duration::from_secs(5), None), 0);
        assert_eq!(publisher.sent().records, N);
    }

    /// A no-drop publisher with tiny queues and a reader that keeps stopping: batches are refused at the
    /// high-water mark again and again, and every message still arrives once, in sequence order.
    #[test]
    fn refused_batches_are_retried_not_lost_or_repeated() {
        const N: u64 = 30_000;
        let ctx = zmq::Context::new();
        let (xpub, ep) = small_no_drop_xpub(&ctx, 2);
        let reader_ctx = ctx.clone();
        let reader = std::thread::spawn(move || {
            let sub = reader_ctx.socket(zmq::SUB).unwrap();
            sub.set_linger(0).unwrap();
            sub.set_rcvhwm(2).unwrap();
            sub.set_rcvbuf(4096).unwrap();
            sub.connect(&ep).unwrap();
            sub.set_subscribe(BATCH_TOPIC.as_bytes()).unwrap();
            sub.set_subscribe(b"").unwrap();
            // Read nothing at first: with queues of a few KiB the publisher is refused within microseconds, so
            // the retry path is exercised however fast this reader is afterwards (a loaded CI machine once let
            // the reader keep up and the test saw no refusal at all).
            std::thread::sleep(Duration::from_millis(300));
            let mut seqs = Vec::new();
            let deadline = Instant::now() + Duration::from_secs(15);
            let mut frames = 0u64;
            while (seqs.len() as u64) < N && Instant::now() < deadline {
                if sub.poll(zmq::POLLIN, 100).unwrap() == 0 {
                    continue;
                }
                let f = sub.recv_bytes(0).unwrap();
                let mut take = |frame: &[u8]| {
                    let m = MessageRef::decode(frame).unwrap();
                    if m.kind() != Kind::Heartbeat {
                        seqs.push(m.header().sequence);
                    }
                };
                if is_batch(&f) {
                    for record in batch_records(&f).unwrap() {
                        take(record.unwrap());
                    }
                } else {
                    take(&f);
                }
                frames += 1;
                if frames.is_multiple_of(64) {
                    // A reader that keeps falling behind.
                    std::thread::sleep(Duration::from_millis(1));
                }
            }
            seqs
        });
        // Both subscriptions ("#B" and "") seen before anything is sent.
        xpub.set_rcvtimeo(5000).unwrap();
        for _ in 0..2 {
            xpub.recv_bytes(0).unwrap();
        }
        let mut publisher = Publisher::new(xpub, 0, 7, 0).with_batch(2048, 16);
        assert!(publisher.set_batching(true).unwrap());
        let payload = Payload::Quote(Quote::default());
        let started = Instant::now();
        let mut sent = 0;
        while sent < N {
            assert!(started.elapsed() < Duration::from_secs(15), "stuck");
            if publisher
                .publish("Q.XNAS.AAPL", &payload)
                .unwrap()
                .is_some()
            {
                sent += 1;
            }
        }
        while !publisher.flush().unwrap() {
            assert!(
                started.elapsed() < Duration::from_secs(15),
                "stuck flushing"
            );
        }
        assert_eq!(publisher.pending(), 0);
        let seqs = reader.join().unwrap();
        assert_eq!(seqs, (1..=N).collect::<Vec<_>>());
        let counts = publisher.counts();
        assert!(counts.would_block > 0, "never back-pressured: {counts:?}");
        assert!(counts.batches > 0);
    }
}
