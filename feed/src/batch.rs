//! A shard's batching, the one for every publisher (the feed's shards, a replay's, `feed --source`'s): records
//! are written straight into a recycled buffer behind a batch header, and that buffer is handed to libzmq as it
//! is (no second copy); a frame a full pipe refused is kept, never rebuilt, and goes before anything else.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tickbox_wire::{BatchCursor, BATCH_HEADER_LEN, BATCH_RECORD_PREFIX};
use tickbox_zmqx::zero_copy::{Delivery, PoolBuf, ZeroCopySender};
use tickbox_zmqx::ZmqxError;

use crate::counts::PublisherCounts;

/// One shard's batch pool and the batch being filled in it.
pub struct ShardBatch {
    sender: ZeroCopySender,
    max_records: u16,
    /// The batch being filled.
    open: Option<(PoolBuf, BatchCursor)>,
    /// Records and record bytes of the frame a full pipe refused (the sender's pending message); (0, 0): none.
    refused: (usize, usize),
}

/// What a [`ShardBatch::flush`] sent.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Flushed {
    /// Records in the frames sent.
    pub records: u64,
    /// Their bytes (the records' own frames, without the batch header and length prefixes).
    pub bytes: u64,
    /// Frames sent.
    pub frames: u64,
    /// Of `frames`, batch frames (two or more records; a lone record goes as a plain frame).
    pub batches: u64,
    /// Nothing batched is left: false when a full pipe refused a frame (kept for the next flush, or dropped by
    /// [`ShardBatch::discard_refused`]).
    pub complete: bool,
}

impl ShardBatch {
    /// A pool of [`tickbox_zmqx::publisher::batch_buffers`] buffers of `max_bytes`, batches of at most
    /// `max_records`; every frame it sends is counted in `delivery` by its records. With `wait_for_buffers`,
    /// a batch waits that long for a pooled buffer when all are queued in libzmq before it allocates one (a
    /// back-pressured shard: the pool bounds its queue); without, it allocates at once (a live feed must not
    /// stall its other subscribers on a slow one, whose queue may hold every buffer).
    pub fn new(
        max_bytes: usize,
        max_records: u16,
        delivery: &Arc<Delivery>,
        wait_for_buffers: Option<Duration>,
    ) -> Self {
        let sender =
            ZeroCopySender::new(tickbox_zmqx::publisher::batch_buffers(max_bytes), max_bytes);
        let mut sender = match wait_for_buffers {
            Some(limit) => sender.wait_for_buffers(limit),
            None => sender,
        };
        sender.track(delivery);
        ShardBatch {
            sender,
            max_records: max_records.max(1),
            open: None,
            refused: (0, 0),
        }
    }

    /// Records in the batch being filled.
    pub fn open_len(&self) -> usize {
        self.open.as_ref().map_or(0, |(_, c)| c.len())
    }

    /// Records batched and not sent yet: the open batch and a refused frame.
    pub fn pending(&self) -> usize {
        self.refused.0 + self.open_len()
    }

    /// One-off buffers allocated so far because every pooled one was queued in libzmq.
    pub fn allocated(&self) -> u64 {
        self.sender.stats().allocated
    }

    /// Room for one record of `len` bytes in the open batch (opening one on a fresh buffer if none is; a wait for
    /// it ends early on `stop`). `None`: it does not fit (flush, then try again; into an empty batch: it goes
    /// alone).
    pub fn slot(&mut self, len: usize, stop: &AtomicBool) -> Option<&mut [u8]> {
        let (buf, cursor) = match &mut self.open {
            Some(open) => open,
            open @ None => {
                let mut buf = self.sender.buffer(stop);
                let cursor = BatchCursor::start(&mut buf, self.max_records);
                open.insert((buf, cursor))
            }
        };
        cursor.push_with(buf, len)
    }

    /// Sends the refused frame, then the open batch (a lone record as a plain frame), counting frames, batch
    /// frames and refusals in `counts`. Without `retry_until` a refusal returns at once (the frame kept for the
    /// next flush); with it the send is retried until it goes or that flag is raised.
    pub fn flush(
        &mut self,
        socket: &mut zmq::Socket,
        counts: &mut PublisherCounts,
        retry_until: Option<&AtomicBool>,
    ) -> Result<Flushed, ZmqxError> {
        let mut flushed = Flushed::default();
        if self.refused.0 > 0 && !self.send_refused(socket, counts, retry_until, &mut flushed)? {
            return Ok(flushed);
        }
        let n = self.open_len();
        if n > 0 {
            let Some((mut buf, cursor)) = self.open.take() else {
                flushed.complete = true;
                return Ok(flushed);
            };
            // A lone record goes as a plain frame: the same buffer, past the batch header and length prefix.
            let range = cursor.finish_message(&mut buf);
            let bytes = range.end - BATCH_HEADER_LEN - n * BATCH_RECORD_PREFIX;
            counts.batch_buffers_allocated = self.allocated();
            // The buffer itself is the message (no copy); a full pipe leaves it pending.
            let sent = self.sender.send_records(socket, buf, range, n as u64, 0)?;
            self.refused = (n, bytes);
            if sent {
                self.count_sent(counts, &mut flushed);
            } else {
                counts.would_block += 1;
                let retry = retry_until.is_some_and(|stop| !stop.load(Ordering::Relaxed));
                if !retry || !self.send_refused(socket, counts, retry_until, &mut flushed)? {
                    return Ok(flushed);
                }
            }
        }
        flushed.complete = true;
        Ok(flushed)
    }

    /// Drops the frame a full pipe refused (a stop while it waited): its records were never sent. Returns them.
    pub fn discard_refused(&mut self) -> usize {
        self.sender.discard_pending();
        std::mem::take(&mut self.refused).0
    }

    /// Retries the refused frame (once, or until `retry_until` is raised). True once it went.
    fn send_refused(
        &mut self,
        socket: &mut zmq::Socket,
        counts: &mut PublisherCounts,
        retry_until: Option<&AtomicBool>,
        flushed: &mut Flushed,
    ) -> Result<bool, ZmqxError> {
        loop {
            if self.sender.send_pending(socket, 0)? {
                self.count_sent(counts, flushed);
                return Ok(true);
            }
            counts.would_block += 1;
            // High-water mark (a no-drop shard) or a signal: give a stop its chance, then retry.
            match retry_until {
                Some(stop) if !stop.load(Ordering::Relaxed) => {}
                _ => return Ok(false),
            }
        }
    }

    fn count_sent(&mut self, counts: &mut PublisherCounts, flushed: &mut Flushed) {
        let (n, bytes) = std::mem::take(&mut self.refused);
        let batch = u64::from(n > 1);
        counts.frames += 1;
        counts.batches += batch;
        flushed.records += n as u64;
        flushed.bytes += bytes as u64;
        flushed.frames += 1;
        flushed.batches += batch;
    }
}
