//! One publisher: a PUB (or no-drop XPUB) socket with its own publisher id and gap-free sequence.

use tickbox_wire::{encode, encoded_len, now_ns, Header, Heartbeat, Kind, Payload};

use crate::config::{FeedConfig, PublisherShardConfig};
use crate::error::FeedError;

/// How long one blocking `send` may wait on a full no-drop pipe before the caller gets control back (to check
/// for stop). PUB sockets never block, so this only matters with `no_drop`.
pub const SEND_TIMEOUT_MS: i32 = 100;

/// Linger of publisher sockets: long enough to flush the tail of a short run, short enough not to hang exit.
pub const LINGER_MS: i32 = 100;

/// Messages sent by one publisher, by kind.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PublisherCounts {
    /// Quotes sent (`Q.` topics).
    pub quotes: u64,
    /// Trades sent (`T.` topics).
    pub trades: u64,
    /// Book-level updates sent.
    pub book_levels: u64,
    /// Heartbeats sent on `H.<publisher id>` (not data: they repeat the last sequence, never advance it).
    pub heartbeats: u64,
    /// Sends that found the pipe full (no-drop back-pressure) and had to be retried.
    pub would_block: u64,
}

impl PublisherCounts {
    /// Data messages (everything but heartbeats).
    pub fn data(&self) -> u64 {
        self.quotes + self.trades + self.book_levels
    }
}

/// Creates, configures and binds (or connects) the socket of shard `shard`; returns it with the endpoint
/// actually bound (a `tcp://…:*` endpoint resolved to its port). Call it on the thread that will use the socket.
pub fn open_publisher_socket(
    ctx: &zmq::Context,
    shard: usize,
    shard_config: &PublisherShardConfig,
    config: &FeedConfig,
) -> Result<(zmq::Socket, String), FeedError> {
    let xpub = config.no_drop || config.wait_for_subscribers > 0;
    let socket_err = |source| FeedError::Socket { shard, source };
    let mut socket = ctx
        .socket(if xpub { zmq::XPUB } else { zmq::PUB })
        .map_err(socket_err)?;
    socket.set_linger(LINGER_MS).map_err(socket_err)?;
    socket.set_sndhwm(config.sndhwm).map_err(socket_err)?;
    socket.set_sndtimeo(SEND_TIMEOUT_MS).map_err(socket_err)?;
    tickbox_zmqx::limit_subscriptions(&socket, config.max_subscription_bytes)
        .map_err(|source| FeedError::SocketOption { shard, source })?;
    if config.no_drop {
        tickbox_zmqx::set_xpub_nodrop(&mut socket, true)
            .map_err(|source| FeedError::SocketOption { shard, source })?;
    }
    let endpoint = &shard_config.endpoint;
    let resolved = if shard_config.connect {
        socket.connect(endpoint).map_err(|e| FeedError::Endpoint {
            shard,
            verb: "connect to",
            endpoint: endpoint.clone(),
            source: e.into(),
        })?;
        endpoint.clone()
    } else {
        tickbox_zmqx::bind_resolved(&socket, endpoint).map_err(|source| FeedError::Endpoint {
            shard,
            verb: "bind",
            endpoint: endpoint.clone(),
            source,
        })?
    };
    Ok((socket, resolved))
}

/// Stamps, encodes and sends messages for one publisher id. Encoding reuses one buffer, so publishing never
/// allocates on our side (libzmq still allocates its own message for frames over 33 bytes).
pub struct Publisher {
    socket: zmq::Socket,
    shard: usize,
    publisher_id: u32,
    /// This run's identity (its start time, ns): a subscriber tells a restart from a gap by a change of session.
    session: u64,
    sequence: u64,
    heartbeat_topic: String,
    heartbeat_interval_ns: u64,
    buf: Vec<u8>,
    counts: PublisherCounts,
}

impl Publisher {
    /// Wraps a configured socket. `heartbeat_interval_ns` is advertised in heartbeats.
    pub fn new(
        socket: zmq::Socket,
        shard: usize,
        publisher_id: u32,
        heartbeat_interval_ns: u64,
    ) -> Self {
        Publisher {
            socket,
            shard,
            publisher_id,
            session: now_ns().max(1),
            sequence: 0,
            heartbeat_topic: heartbeat_topic(publisher_id),
            heartbeat_interval_ns,
            buf: vec![0u8; 256],
            counts: PublisherCounts::default(),
        }
    }

    /// The publisher's socket, e.g. to read subscriptions from an XPUB.
    pub fn socket(&self) -> &zmq::Socket {
        &self.socket
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

    /// What has been sent so far, by kind.
    pub fn counts(&self) -> PublisherCounts {
        self.counts
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
        if !self.send(topic, &header, payload)? {
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
        let header = Header::live(Kind::Heartbeat, self.publisher_id, self.sequence, now_ns())
            .with_session(self.session);
        let payload = Payload::Heartbeat(Heartbeat {
            interval_ns: self.heartbeat_interval_ns,
            messages_sent: self.counts.data(),
        });
        let topic = std::mem::take(&mut self.heartbeat_topic);
        let sent = self.send(&topic, &header, &payload);
        self.heartbeat_topic = topic;
        let sent = sent?;
        if sent {
            self.counts.heartbeats += 1;
        }
        Ok(sent)
    }

    #[inline]
    fn send(&mut self, topic: &str, header: &Header, payload: &Payload) -> Result<bool, FeedError> {
        let needed = encoded_len(topic, header.kind);
        if self.buf.len() < needed {
            self.buf.resize(needed.next_power_of_two(), 0);
        }
        let n = encode(&mut self.buf, topic, header, payload)?;
        // Sending the borrowed slice (libzmq allocates and copies once) measured no slower than encoding into
        // a fresh `zmq::Message` (which zeroes its storage first), and lets a blocked send retry the same bytes.
        match self.socket.send(&self.buf[..n], 0) {
            Ok(()) => Ok(true),
            // EINTR: a signal (Ctrl-C) cut the blocked send short; like a timeout, the caller retries or stops.
            Err(zmq::Error::EAGAIN | zmq::Error::EINTR) => {
                self.counts.would_block += 1;
                Ok(false)
            }
            Err(source) => Err(FeedError::Send {
                shard: self.shard,
                source,
            }),
        }
    }
}

/// The heartbeat topic of a publisher: `H.<publisher id>`.
pub fn heartbeat_topic(publisher_id: u32) -> String {
    format!("{}.{publisher_id}", Kind::Heartbeat.topic_letter())
}
