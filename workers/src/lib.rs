//! Worker pools of the Black Box: pinned PULL threads that each connect to every subscriber shard's inproc PUSH
//! socket, and the [`Worker`] trait they drive, with built-in workers (last-value book, statistics).
//!
//! A worker thread owns its PULL socket; it receives into one reused `zmq::Message`, decodes the topic and header
//! without copying ([`tickbox_wire::MessageRef`]) and hands the borrowed view to its [`Worker`]. When the socket
//! runs dry (or after `batch` messages) it calls [`Worker::flush`], so a worker can batch expensive side effects.
//!
//! Shutdown is counted, not guessed: every thread publishes how many messages it has taken off its socket, so the
//! owner can wait until the workers have taken everything the shards forwarded before telling them to stop.

mod builtin;
mod pool;

pub use builtin::{BookEntry, Delay, LastValueBook, Stats, StatsReport, Topics};
pub use pool::{DequeueHook, NoHook, WorkerError, WorkerOutcome, WorkerPool, WorkersConfig};

use tickbox_wire::MessageRef;

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
pub trait Worker: Send + 'static {
    fn on_message(&mut self, msg: &MessageRef<'_>, delivery: &Delivery);

    fn flush(&mut self) {}
}

/// Two workers run one after the other on the same message, so built-ins compose without dynamic dispatch.
impl<A: Worker, B: Worker> Worker for (A, B) {
    #[inline]
    fn on_message(&mut self, msg: &MessageRef<'_>, delivery: &Delivery) {
        self.0.on_message(msg, delivery);
        self.1.on_message(msg, delivery);
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

    fn flush(&mut self) {
        if let Some(w) = self {
            w.flush();
        }
    }
}
