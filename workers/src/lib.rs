//! Worker pools of the Black Box: pinned threads fed by the subscriber shards (through in-process channels, or PULL
//! sockets for producers elsewhere), the [`Worker`] trait they drive, the [`Dispatch`] rule that decides which
//! worker gets a message, and built-in workers (last-value book, statistics, the NDJSON [`Tape`]).
//!
//! A worker thread takes [`Parcel`]s of records its producers already decoded (in-process) or frames off its
//! PULL socket (producers elsewhere, decoded here), and hands each record to its [`Worker`] as a borrowed
//! [`Record`] without copying or decoding it again. When its inbox runs dry (or after `batch` messages) it calls
//! [`Worker::flush`], so a worker can batch expensive side effects.
//!
//! Shutdown is counted, not guessed: every thread publishes how many messages it has taken off its socket, so the
//! owner can wait until the workers have taken everything the shards forwarded before telling them to stop.

mod builtin;
mod desk;
mod dispatch;
mod idle_spin;
mod parcel;
mod pool;
mod record;
mod tape;

pub use builtin::{
    BookEntry, Delay, GuideTopics, LastValueBook, Stats, StatsReport, Topics, GUIDE_TOPICS_MAX,
    GUIDE_TOPIC_BYTES_MAX,
};
pub use desk::Desk;
pub use dispatch::{worker_for_key, worker_for_topic, Dispatch};
pub use parcel::{Item, Parcel, Recycler, PARCEL_RECORDS};
pub use pool::{
    DequeueHook, Inbox, InlineWorker, NoHook, PoolCounters, WorkerError, WorkerLiveCounts,
    WorkerOutcome, WorkerPool, WorkerPoolConfig,
};
pub use record::{Meta, Record};
pub use tape::{Tape, TapeSink, TAPE_CHUNK};

use tickbox_wire::{DecodeError, MessageRef};

/// Where and when a message reached a worker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Delivery {
    /// Index of the worker thread in its pool.
    pub worker: usize,
    /// When the worker took the message off its socket (ns since the Unix epoch).
    pub dequeued_ns: u64,
}

/// Application logic run on a worker thread, once per message.
///
/// `on_message` sees a view borrowing the received frame; it must copy out whatever it keeps. `flush` is called
/// whenever the worker's queue runs dry or a batch ends, and once more before the thread exits.
///
/// # Which messages a worker sees, and in which order
///
/// With the default [`Dispatch::ByTopic`] (`dispatch = "by_topic"` in `[subscriber]`):
/// - Every message of a symbol goes to one worker, chosen by a stable hash of the topic's symbol key
///   ([`tickbox_wire::shard_key_of_topic`]: `Q.XNAS.AAPL` and `T.XNAS.AAPL` share the key `XNAS.AAPL`), the same
///   worker for every shard and every run with the same worker count ([`worker_for_topic`]). A publisher's
///   heartbeats (`H.<publisher>`) likewise all go to one worker.
/// - A worker sees one publisher's messages of one symbol in the order that publisher sent them, as far as they
///   arrived (a shard forwards what it received, in receive order, into the worker's FIFO queue). A `Worker` can
///   therefore keep per-symbol state (a book) without re-ordering by timestamp.
/// - Messages of different symbols, and of one symbol from publishers on different shards, interleave in no
///   particular order.
/// - Gap notices (`Kind::Gap`, re-published from a journal) are accounted for by the subscriber and are not
///   dispatched to workers; lost and recorded-missing sequences show in the subscriber's report instead.
/// - A message is given to one worker exactly once. After the Suicidal Snail fires, workers stop processing.
///
/// With [`Dispatch::RoundRobin`] all workers take from one shared queue (whichever is free takes the next message)
/// for an even load, and **none of the ordering guarantees above hold**: two updates of one symbol can reach two
/// workers and be processed in either order.
pub trait Worker: Send + 'static {
    /// Handles one message. `msg` borrows the received frame and is gone when this returns. It is called on the
    /// worker's own thread, except for the last records of a burst that reach a sleeping worker with nothing
    /// queued, which the shard runs on the worker itself (one call at a time, in order: see [`Desk`]), and
    /// except under `handoff = "inline"`, where every call is on the shard's thread. It may block, at the cost of
    /// the messages queued behind it (and, when run by the shard, of the shard's receiving).
    fn on_message(&mut self, msg: &MessageRef<'_>, delivery: &Delivery);

    /// Handles one record as the pool delivers it: header decoded, topic not yet checked for UTF-8. The default
    /// builds the [`MessageRef`] (checking the topic) and calls [`on_message`](Worker::on_message); a worker that
    /// does not need the topic as a string overrides this to skip that work. An `Err` means the record was
    /// refused (its topic is not UTF-8): the pool counts it as malformed.
    #[inline]
    fn on_record(&mut self, rec: &Record<'_>, delivery: &Delivery) -> Result<(), DecodeError> {
        self.on_message(&rec.message()?, delivery);
        Ok(())
    }

    /// Handles one Guide message (`subscribe --framing guide`): the `[topic][body]` pair a plain ZeroMQ publisher
    /// sent, both opaque bytes that are gone when this returns. It has no tickbox header, so no sequence, time or
    /// kind; dispatch is by the topic frame as for a record's topic. Ignored by default.
    #[inline]
    fn on_guide(&mut self, _topic: &[u8], _body: &[u8], _delivery: &Delivery) {}

    /// Called when the queue runs dry, after a full batch, and once before the thread exits: the place for
    /// batched side effects. Does nothing by default.
    fn flush(&mut self) {}
}

/// Two workers run one after the other on the same message, so built-ins compose without dynamic dispatch.
impl<A: Worker, B: Worker> Worker for (A, B) {
    #[inline]
    fn on_message(&mut self, msg: &MessageRef<'_>, delivery: &Delivery) {
        self.0.on_message(msg, delivery);
        self.1.on_message(msg, delivery);
    }

    #[inline]
    fn on_record(&mut self, rec: &Record<'_>, delivery: &Delivery) -> Result<(), DecodeError> {
        self.0.on_record(rec, delivery)?;
        self.1.on_record(rec, delivery)
    }

    #[inline]
    fn on_guide(&mut self, topic: &[u8], body: &[u8], delivery: &Delivery) {
        self.0.on_guide(topic, body, delivery);
        self.1.on_guide(topic, body, delivery);
    }

    fn flush(&mut self) {
        self.0.flush();
        self.1.flush();
    }
}

impl<W: Worker> Worker for Option<W> {
    #[inline]
    fn on_message(&mut self, msg: &MessageRef<'_>, delivery: &Delivery) {
        if let Some(w) = self {
            w.on_message(msg, delivery);
        }
    }

    #[inline]
    fn on_record(&mut self, rec: &Record<'_>, delivery: &Delivery) -> Result<(), DecodeError> {
        match self {
            Some(w) => w.on_record(rec, delivery),
            None => Ok(()),
        }
    }

    #[inline]
    fn on_guide(&mut self, topic: &[u8], body: &[u8], delivery: &Delivery) {
        if let Some(w) = self {
            w.on_guide(topic, body, delivery);
        }
    }

    fn flush(&mut self) {
        if let Some(w) = self {
            w.flush();
        }
    }
}
