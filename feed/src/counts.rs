//! What a publisher counts, and how a summary says what was left queued or still connected at its close.

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
    /// ZeroMQ messages that carried data: single frames plus batch frames (heartbeats not included).
    pub frames: u64,
    /// Of `frames`, batch frames (each carrying two or more data messages).
    pub batches: u64,
    /// Batch buffers allocated because every recycled one was still queued in libzmq (a slow subscriber's
    /// queue holds them); the batch went out all the same.
    pub batch_buffers_allocated: u64,
    /// Single frames sent from a one-off buffer because every recycled one was still queued in libzmq (as
    /// many as the send high-water mark are recycled); the frame went out all the same.
    pub single_buffers_allocated: u64,
}

impl PublisherCounts {
    /// What was counted since `earlier` (an earlier snapshot of the same publisher); the allocation counts stay
    /// the publisher's life's.
    pub fn since(&self, earlier: &PublisherCounts) -> PublisherCounts {
        PublisherCounts {
            quotes: self.quotes - earlier.quotes,
            trades: self.trades - earlier.trades,
            book_levels: self.book_levels - earlier.book_levels,
            heartbeats: self.heartbeats - earlier.heartbeats,
            would_block: self.would_block - earlier.would_block,
            frames: self.frames - earlier.frames,
            batches: self.batches - earlier.batches,
            batch_buffers_allocated: self.batch_buffers_allocated,
            single_buffers_allocated: self.single_buffers_allocated,
        }
    }

    /// Data messages (everything but heartbeats).
    pub fn data(&self) -> u64 {
        self.quotes + self.trades + self.book_levels
    }
}

/// The summary's line for subscribers still connected when the shards closed after their drain wait.
pub(crate) fn write_staying(f: &mut std::fmt::Formatter<'_>, staying: u64) -> std::fmt::Result {
    if staying == 0 {
        return Ok(());
    }
    write!(
        f,
        "\nWARNING: {staying} subscriber(s) still connected when the shards closed after drain_timeout: one that \
         had not read everything by then may have lost its unread tail (raise --drain-timeout, or let \
         subscribers exit when the stream ends, e.g. subscribe --idle-exit)"
    )
}

/// The summary's line for data messages still queued in libzmq when the shards closed.
pub(crate) fn write_undelivered(
    f: &mut std::fmt::Formatter<'_>,
    undelivered: u64,
) -> std::fmt::Result {
    if undelivered == 0 {
        return Ok(());
    }
    write!(
        f,
        "\nundelivered: {undelivered} messages sent but still queued for a subscriber when the shards closed, \
         dropped at the close (a subscriber stopped reading, or the run was interrupted)"
    )
}
