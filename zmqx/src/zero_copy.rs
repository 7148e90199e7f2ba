//! Zero-copy sends from recycled buffers: a batch is written once into a pooled buffer, and libzmq sends that
//! buffer itself (`zmq_msg_init_data`) instead of allocating a message and copying the batch into it. When
//! libzmq is done with the message (written to every connection, dropped, or closed), its release callback
//! hands the buffer back to the pool, so a steady stream allocates nothing per message on our side (libzmq
//! still allocates its small reference-counted descriptor per message).
//!
//! Ownership: the buffers live in a reference-counted `Shared` block. Every message in flight holds one
//! strong count of it, passed to libzmq through the callback's hint and given back by the callback, so the
//! buffers outlive the [`ZeroCopySender`], the socket and even the context for as long as libzmq can read them.
//! The callback runs on whichever thread releases the message (libzmq's I/O thread, or ours when a send drops
//! or a message is closed) and only pushes an index onto a lock-free stack: it never blocks or allocates.
//!
//! A send refused with `EAGAIN` (high-water mark of a no-drop XPUB, or a send timeout) or `EINTR` keeps the
//! message, not the bytes' copy: [`ZeroCopySender::send_pending`] tries the very same message again, so nothing
//! is lost and nothing is copied twice.

// This module hands raw buffers to libzmq and takes them back in a C callback; every unsafe operation is in
// its own block with the argument for it.
#![allow(unsafe_code)]

use std::cell::UnsafeCell;
use std::ffi::c_void;
use std::ops::{Deref, DerefMut, Range};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::ZmqxError;

/// Counters of a [`ZeroCopySender`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ZeroCopyStats {
    /// Messages libzmq accepted.
    pub sent: u64,
    /// Sends refused with `EAGAIN`/`EINTR` (the message was kept for [`ZeroCopySender::send_pending`]).
    pub would_block: u64,
    /// Buffers taken from the pool.
    pub pooled: u64,
    /// One-off buffers allocated because every pooled buffer was in flight.
    pub allocated: u64,
    /// Times a sender that waits for buffers ([`ZeroCopySender::wait_for_buffers`]) had to wait for one to come
    /// back.
    pub waited: u64,
}

/// What libzmq still holds of what a sender handed it, in the sender's own unit (records, not messages): every
/// message made through a [`ZeroCopySender`] that tracks one (or [`Delivery::message`]) adds its count to
/// `handed` when it is made and to `released` when libzmq lets it go. libzmq lets a message go once it has written
/// it to every connection it was queued for (into the kernel's socket buffer, which libzmq cannot see past), or
/// dropped it (the peer went away, the socket closed); one made but never accepted is released at once. So
/// [`Delivery::outstanding`] is exactly what sits in libzmq's queues (and a refused message not yet retried):
/// what a close now would drop undelivered.
#[derive(Debug, Default)]
pub struct Delivery {
    /// Added to by the sender per message. On lines of its own, apart from `released`, or every message would
    /// move one line between the sender's core and libzmq's I/O thread's twice.
    handed: OwnLine<AtomicU64>,
    /// Added to by libzmq's release, on whichever thread lets a message go (its I/O thread, mostly).
    released: OwnLine<AtomicU64>,
}

/// A value on cache lines of its own (128 bytes: x86 cores fetch lines in adjacent pairs), for what one thread
/// writes per message while another thread reads or writes its neighbours. On a shared line each such write
/// takes the line away from the other core, and its next access waits for it: in `feed --batch off` the release
/// callback and the message's making were 15 % of the feed's samples, most of it on such loads.
#[repr(align(128))]
#[derive(Debug, Default)]
struct OwnLine<T>(T);

impl<T> Deref for OwnLine<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.0
    }
}

impl Delivery {
    /// A fresh count, shared with the release callbacks.
    pub fn new() -> Arc<Delivery> {
        Arc::new(Delivery::default())
    }

    /// Records handed to libzmq so far (accepted or still to be retried).
    pub fn handed(&self) -> u64 {
        self.handed.load(Ordering::Acquire)
    }

    /// Records libzmq has finished with (written to every connection, or dropped).
    pub fn released(&self) -> u64 {
        self.released.load(Ordering::Acquire)
    }

    /// Records handed over that libzmq still holds.
    pub fn outstanding(&self) -> u64 {
        // Released is read first: a release between the two loads can only make the difference larger, never
        // wrap it below zero.
        let released = self.released();
        self.handed().saturating_sub(released)
    }

    /// Waits (sleeping in short slices) until libzmq holds nothing more, for at most `limit` or until `stop` is
    /// raised; returns what it still holds then.
    pub fn wait_settled(&self, limit: Duration, stop: Option<&AtomicBool>) -> u64 {
        let deadline = Instant::now() + limit;
        loop {
            let left = self.outstanding();
            if left == 0
                || Instant::now() >= deadline
                || stop.is_some_and(|s| s.load(Ordering::Relaxed))
            {
                return left;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    /// A message holding a copy of `bytes` that counts as `records` (a frame carrying one record: 1) until libzmq
    /// releases it. One allocation, as `zmq::Message::from` makes.
    pub fn message(self: &Arc<Self>, bytes: &[u8], records: u64) -> Result<OutMessage, ZmqxError> {
        let mut buf = self.buffer(bytes.len());
        buf.copy_from_slice(bytes);
        OutMessage::counted(buf, 0..bytes.len(), records)
    }

    /// A one-off buffer of `len` bytes to fill, whose message ([`OutMessage::counted`]) reports to this count.
    pub fn buffer(self: &Arc<Self>, len: usize) -> PoolBuf {
        PoolBuf {
            inner: BufInner::Owned(vec![0u8; len].into_boxed_slice(), Some(Arc::clone(self))),
        }
    }
}

/// A one-off buffer in flight, and whom to tell when libzmq releases it.
struct OwnedInFlight {
    bytes: Box<[u8]>,
    records: u64,
    delivery: Option<Arc<Delivery>>,
}

/// One pooled buffer and its place in the free stack. On lines of its own (see [`OwnLine`]): the sender writes one
/// slot's `records` while libzmq's release writes another's `next`.
#[repr(align(128))]
struct Slot {
    /// The block this slot lives in (a raw pointer because the slot is inside it; valid while the block lives).
    shared: *const Shared,
    index: u32,
    /// Next free slot below this one in the free stack, as index + 1 (0: none). Written only by whoever pushes
    /// this slot, before the push publishes it.
    next: AtomicU32,
    /// Records the message in flight from this slot carries (for [`Delivery`]); written by its owner before the
    /// send, read by the release callback.
    records: AtomicU64,
    bytes: UnsafeCell<Box<[u8]>>,
}

/// The pool's buffers, shared between the sender and the messages in flight.
///
/// Its alignment (that of [`OwnLine`]) also keeps the `Arc`'s counts, which every message changes on both
/// sides, off the lines of these fields.
struct Shared {
    slots: Box<[Slot]>,
    /// Told of the records each message carries, when the sender tracks delivery.
    delivery: std::sync::OnceLock<Arc<Delivery>>,
    /// What releases write, on its own lines: the fields above are read for every message.
    returns: OwnLine<Returns>,
}

/// The released side of a [`Shared`] block.
#[derive(Default)]
struct Returns {
    /// Top of the stack of buffers released by libzmq (or by a dropped [`PoolBuf`]), as index + 1 (0: empty).
    /// Many threads push; only the owning sender takes, and it takes the whole stack at once (`swap`), so there
    /// is no ABA hazard.
    returned: AtomicU32,
    /// Buffers handed back so far (tests and diagnostics).
    releases: AtomicU64,
}

// SAFETY: a slot's bytes are only touched by the one party that owns the slot at a time: the sender (or the
// `PoolBuf` it handed out) while the slot is neither free nor in flight, libzmq (reads only) while in flight. The
// hand-offs go through libzmq's pipes (send) and the `returned` stack (acquire/release atomics). `shared` is a
// pointer to the block itself, only dereferenced while a strong count is held.
unsafe impl Sync for Shared {}
// SAFETY: as above; nothing in the block is tied to the thread that created it.
unsafe impl Send for Shared {}

impl Shared {
    /// Puts slot `index` on the returned stack. Lock-free; called from libzmq's release callback.
    fn push(&self, index: u32) {
        let slot = &self.slots[index as usize];
        let mut head = self.returns.returned.load(Ordering::Relaxed);
        loop {
            slot.next.store(head, Ordering::Relaxed);
            // Release: the next link (and the end of libzmq's reads of the buffer) happen before the taker's
            // acquire swap sees this slot.
            match self.returns.returned.compare_exchange_weak(
                head,
                index + 1,
                Ordering::AcqRel,
                Ordering::Relaxed,
            ) {
                Ok(_) => break,
                Err(now) => head = now,
            }
        }
        self.returns.releases.fetch_add(1, Ordering::Relaxed);
    }
}

/// libzmq's release callback for a pooled buffer: `hint` is the slot, and the message held one strong count of
/// the block, which is given back here after the slot is free again.
unsafe extern "C" fn release_pooled(_data: *mut c_void, hint: *mut c_void) {
    // SAFETY: `hint` is the address of a slot inside a `Shared` that this message keeps alive with the strong
    // count it holds (taken in `OutMessage::new`), so the slot is valid here.
    let slot = unsafe { &*(hint as *const Slot) };
    let (shared, index) = (slot.shared, slot.index);
    let records = slot.records.swap(0, Ordering::Relaxed);
    // SAFETY: same block, alive for the same reason.
    if let Some(d) = unsafe { (*shared).delivery.get() } {
        d.released.fetch_add(records, Ordering::Release);
    }
    // SAFETY: same block, alive for the same reason; after the push the slot may be reused at once, so it is
    // not touched again below.
    unsafe { (*shared).push(index) };
    // SAFETY: gives back the strong count `Arc::into_raw` handed to this message; the block is freed here if the
    // sender is already gone.
    drop(unsafe { Arc::from_raw(shared) });
}

/// libzmq's release callback for a one-off buffer: `hint` is the `Box<OwnedInFlight>` made for it.
unsafe extern "C" fn release_owned(_data: *mut c_void, hint: *mut c_void) {
    // SAFETY: `hint` came from `Box::into_raw` in `OutMessage::counted` and libzmq calls this exactly once.
    let owned = unsafe { Box::from_raw(hint as *mut OwnedInFlight) };
    if let Some(d) = &owned.delivery {
        d.released.fetch_add(owned.records, Ordering::Release);
    }
    drop(owned.bytes);
}

/// A buffer to fill before sending: a pooled one (exclusively ours until sent or dropped) or a one-off
/// allocation. Dropping it unsent returns a pooled buffer to the pool.
pub struct PoolBuf {
    inner: BufInner,
}

enum BufInner {
    Pooled {
        shared: Arc<Shared>,
        index: u32,
    },
    /// A one-off allocation, and the [`Delivery`] its message reports to (if tracked).
    Owned(Box<[u8]>, Option<Arc<Delivery>>),
    /// Moved out into a message (only seen by `Drop`).
    Gone,
}

impl PoolBuf {
    /// Whether this buffer came from the pool (false: a one-off allocation).
    pub fn is_pooled(&self) -> bool {
        matches!(self.inner, BufInner::Pooled { .. })
    }
}

impl std::fmt::Debug for PoolBuf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PoolBuf")
            .field("pooled", &self.is_pooled())
            .field("len", &self.len())
            .finish()
    }
}

impl Deref for PoolBuf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match &self.inner {
            BufInner::Pooled { shared, index } => {
                // SAFETY: while this `PoolBuf` exists the slot is neither free nor in flight: nobody else reads
                // or writes its bytes.
                unsafe { &*shared.slots[*index as usize].bytes.get() }
            }
            BufInner::Owned(b, _) => b,
            BufInner::Gone => &[],
        }
    }
}

impl DerefMut for PoolBuf {
    fn deref_mut(&mut self) -> &mut [u8] {
        match &mut self.inner {
            BufInner::Pooled { shared, index } => {
                // SAFETY: as in `deref`, and `&mut self` makes this the only borrow.
                unsafe { &mut *shared.slots[*index as usize].bytes.get() }
            }
            BufInner::Owned(b, _) => b,
            BufInner::Gone => &mut [],
        }
    }
}

impl Drop for PoolBuf {
    fn drop(&mut self) {
        if let BufInner::Pooled { shared, index } = &self.inner {
            shared.push(*index);
        }
    }
}

/// A message ready to send, made from (part of) a [`PoolBuf`]. Dropping it unsent closes it, which runs the
/// release callback and so returns the buffer.
pub struct OutMessage {
    raw: zmq_sys::zmq_msg_t,
}

impl std::fmt::Debug for OutMessage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OutMessage")
            .field("len", &self.len())
            .finish()
    }
}

impl OutMessage {
    /// Wraps `buf[range]` (no copy). A range outside the buffer is clamped to it.
    pub fn new(buf: PoolBuf, range: Range<usize>) -> Result<OutMessage, ZmqxError> {
        OutMessage::counted(buf, range, 1)
    }

    /// As [`OutMessage::new`], for a message carrying `records` records: when its buffer's sender tracks a
    /// [`Delivery`], they count as handed over now and as released when libzmq lets the message go.
    pub fn counted(
        mut buf: PoolBuf,
        range: Range<usize>,
        records: u64,
    ) -> Result<OutMessage, ZmqxError> {
        let len = buf.len();
        let start = range.start.min(len);
        let end = range.end.clamp(start, len);
        // SAFETY: an all-zero `zmq_msg_t` is a valid value to hand to `zmq_msg_init_data`, which overwrites it.
        let mut raw: zmq_sys::zmq_msg_t = unsafe { std::mem::zeroed() };
        let inner = std::mem::replace(&mut buf.inner, BufInner::Gone);
        let (data, ffn, hint): (*mut u8, zmq_sys::zmq_free_fn, *mut c_void) = match inner {
            BufInner::Pooled { shared, index } => {
                let slot = &shared.slots[index as usize];
                // SAFETY: the slot is ours (see `PoolBuf`); the pointer stays valid while the block lives, which
                // the strong count given to the message below guarantees.
                let data = unsafe { (*slot.bytes.get()).as_mut_ptr() };
                let hint = slot as *const Slot as *mut c_void;
                if let Some(d) = shared.delivery.get() {
                    slot.records.store(records, Ordering::Relaxed);
                    d.handed.fetch_add(records, Ordering::Release);
                }
                // The message now holds this strong count; `release_pooled` gives it back.
                let _ = Arc::into_raw(shared);
                (data, Some(release_pooled), hint)
            }
            BufInner::Owned(bytes, delivery) => {
                if let Some(d) = &delivery {
                    d.handed.fetch_add(records, Ordering::Release);
                }
                let mut boxed = Box::new(OwnedInFlight {
                    bytes,
                    records,
                    delivery,
                });
                let data = boxed.bytes.as_mut_ptr();
                (data, Some(release_owned), Box::into_raw(boxed).cast())
            }
            BufInner::Gone => (
                std::ptr::NonNull::dangling().as_ptr(),
                None,
                std::ptr::null_mut(),
            ),
        };
        // SAFETY: `data + start .. data + end` lies inside the buffer (clamped above) and stays valid and
        // unwritten until libzmq calls `ffn` with `hint`, which is what `ffn` expects. An empty range on a gone
        // buffer has no callback and reads nothing.
        let rc = unsafe {
            zmq_sys::zmq_msg_init_data(&mut raw, data.add(start).cast(), end - start, ffn, hint)
        };
        if rc != 0 {
            // libzmq 4.3 only fails here on out-of-memory, before taking the buffer: it was not consumed, and
            // this leaks one buffer (and a count of the block) rather than risk a double release.
            return Err(last_error());
        }
        Ok(OutMessage { raw })
    }

    /// Bytes in the message.
    pub fn len(&self) -> usize {
        // SAFETY: `raw` is an initialised message; zmq_msg_size only reads it (the cast drops a const libzmq
        // does not declare).
        unsafe { zmq_sys::zmq_msg_size(&self.raw as *const _ as *mut _) }
    }

    /// True for an empty message.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The message's bytes (they are the buffer's: no copy was made).
    pub fn bytes(&self) -> &[u8] {
        let len = self.len();
        if len == 0 {
            return &[];
        }
        // SAFETY: `raw` is an initialised, non-empty message whose data stays valid while we own it.
        unsafe {
            let data = zmq_sys::zmq_msg_data(&self.raw as *const _ as *mut _);
            std::slice::from_raw_parts(data as *const u8, len)
        }
    }
}

impl OutMessage {
    /// Sends the message on `socket`. `Ok(true)`: libzmq took it. `Ok(false)`: refused with `EAGAIN` (a full
    /// pipe of a no-drop socket, `DONTWAIT`) or cut short by a signal (`EINTR`); the message is unchanged, to
    /// retry or drop.
    pub fn send(&mut self, socket: &mut zmq::Socket, flags: i32) -> Result<bool, ZmqxError> {
        // SAFETY: `socket` is a live socket we hold `&mut` to and `self.raw` an initialised message we own. On
        // success libzmq takes the content and leaves an empty message; on failure the message is unchanged.
        let rc = unsafe { zmq_sys::zmq_msg_send(&mut self.raw, socket.as_mut_ptr(), flags) };
        if rc >= 0 {
            return Ok(true);
        }
        match last_error() {
            ZmqxError::Zmq(zmq::Error::EAGAIN | zmq::Error::EINTR) => Ok(false),
            err => Err(err),
        }
    }
}

impl Drop for OutMessage {
    fn drop(&mut self) {
        // SAFETY: `raw` is an initialised message we still own (a successful send moved it into libzmq and left
        // an empty one here, whose close is a no-op).
        unsafe { zmq_sys::zmq_msg_close(&mut self.raw) };
    }
}

fn last_error() -> ZmqxError {
    // SAFETY: reads the calling thread's errno as libzmq set it.
    ZmqxError::Zmq(zmq::Error::from_raw(unsafe { zmq_sys::zmq_errno() }))
}

/// Sends batches from a bounded pool of recycled buffers without copying them again (see the module docs). One
/// per socket: it holds at most one message a full pipe refused, which must go before anything else.
pub struct ZeroCopySender {
    shared: Arc<Shared>,
    /// Free slots already taken off the returned stack (only this sender pops them).
    free: Vec<u32>,
    buffer_len: usize,
    /// How long [`ZeroCopySender::buffer`] waits for a pooled buffer to come back before it allocates one;
    /// `None`: it never waits.
    buffer_wait: Option<Duration>,
    pending: Option<OutMessage>,
    stats: ZeroCopyStats,
    /// Strong counts of `shared` taken ahead, each to be handed to one message ([`Self::block_count`]).
    credits: u32,
}

/// Strong counts a sender takes at a time. Every message in flight holds one count of its block, and libzmq's
/// release gives it back on the I/O thread; were the sender to take each message's count as it sends, the
/// count's cache line would cross between the two cores twice per message. Taken 64 at a time, the line stays
/// with the releasing thread for 64 messages.
const CREDIT_BATCH: u32 = 64;

impl Drop for ZeroCopySender {
    fn drop(&mut self) {
        let block = Arc::as_ptr(&self.shared);
        for _ in 0..std::mem::take(&mut self.credits) {
            // SAFETY: each credit is a strong count this sender took with `increment_strong_count` and has not
            // handed out; `self.shared` holds one more, so the block outlives these decrements.
            unsafe { Arc::decrement_strong_count(block) };
        }
    }
}

impl std::fmt::Debug for ZeroCopySender {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ZeroCopySender")
            .field("buffers", &self.shared.slots.len())
            .field("buffer_len", &self.buffer_len)
            .field("free", &self.free.len())
            .field("pending", &self.pending.is_some())
            .field("stats", &self.stats)
            .finish()
    }
}

/// Most buffers a pool may hold (the free stack stores index + 1 in a u32).
pub const MAX_POOL_BUFFERS: usize = 1 << 20;

impl ZeroCopySender {
    /// A sender with `buffers` buffers of `buffer_len` bytes each, allocated now (at least one; at most
    /// [`MAX_POOL_BUFFERS`]). When every pooled buffer is in flight it allocates a one-off buffer (counted in
    /// [`ZeroCopyStats::allocated`]), sent the same zero-copy way and freed by libzmq's release: right for a
    /// publisher that must never block on a slow subscriber (a PUB that drops: a slow reader's queue holds its
    /// messages, and waiting for them would stall everyone). A back-pressured sender waits instead
    /// ([`Self::wait_for_buffers`]).
    pub fn new(buffers: usize, buffer_len: usize) -> Self {
        let buffers = buffers.clamp(1, MAX_POOL_BUFFERS);
        let shared = Arc::new_cyclic(|weak| Shared {
            slots: (0..buffers)
                .map(|i| Slot {
                    // The block's address, valid once `new_cyclic` returns; only used by messages, which
                    // exist after that.
                    shared: weak.as_ptr(),
                    index: i as u32,
                    next: AtomicU32::new(0),
                    records: AtomicU64::new(0),
                    bytes: UnsafeCell::new(vec![0u8; buffer_len].into_boxed_slice()),
                })
                .collect(),
            delivery: std::sync::OnceLock::new(),
            returns: OwnLine::default(),
        });
        ZeroCopySender {
            shared,
            // Popped from the back: lowest index first.
            free: (0..buffers as u32).rev().collect(),
            buffer_len,
            buffer_wait: None,
            pending: None,
            stats: ZeroCopyStats::default(),
            credits: 0,
        }
    }

    /// When every pooled buffer is in flight, waits (sleeping in short slices) until libzmq releases one, for at
    /// most `limit`, before it allocates. Right for a back-pressured (`block`) sender: the pool then bounds what is
    /// queued, and the recycled buffers stay warm in cache.
    pub fn wait_for_buffers(mut self, limit: Duration) -> Self {
        self.buffer_wait = Some(limit);
        self
    }

    /// Reports every message this sender makes from now on to `delivery` (see [`Delivery`]). Once per sender;
    /// a second call is ignored.
    pub fn track(&mut self, delivery: &Arc<Delivery>) {
        let _ = self.shared.delivery.set(Arc::clone(delivery));
    }

    /// Size of every buffer (one-off ones included).
    pub fn buffer_len(&self) -> usize {
        self.buffer_len
    }

    /// Buffers in the pool.
    pub fn capacity(&self) -> usize {
        self.shared.slots.len()
    }

    /// Counters so far.
    pub fn stats(&self) -> ZeroCopyStats {
        self.stats
    }

    /// Buffers handed back so far (by libzmq's release, a close, or a dropped [`PoolBuf`]).
    pub fn releases(&self) -> u64 {
        self.shared.returns.releases.load(Ordering::Relaxed)
    }

    /// Pooled buffers free right now (neither handed out nor in flight).
    pub fn available(&mut self) -> usize {
        self.take_returned();
        self.free.len()
    }

    /// Moves everything released since the last look onto the local free list.
    fn take_returned(&mut self) {
        // Acquire: pairs with the pushes' release, so libzmq's last reads of these buffers and their `next`
        // links are visible before we write into them again.
        let mut top = self.shared.returns.returned.swap(0, Ordering::Acquire);
        while top != 0 {
            let index = top - 1;
            self.free.push(index);
            top = self.shared.slots[index as usize]
                .next
                .load(Ordering::Relaxed);
        }
    }

    /// A pooled buffer if one is free right now.
    pub fn try_buffer(&mut self) -> Option<PoolBuf> {
        if self.free.is_empty() {
            self.take_returned();
        }
        let index = self.free.pop()?;
        self.stats.pooled += 1;
        Some(PoolBuf {
            inner: BufInner::Pooled {
                shared: self.block_count(),
                index,
            },
        })
    }

    /// One strong count of the block for a message, from the credits taken ahead ([`CREDIT_BATCH`]).
    fn block_count(&mut self) -> Arc<Shared> {
        let block = Arc::as_ptr(&self.shared);
        if self.credits == 0 {
            for _ in 0..CREDIT_BATCH {
                // SAFETY: `block` comes from the `Arc` this sender holds, which keeps the count above zero.
                unsafe { Arc::increment_strong_count(block) };
            }
            self.credits = CREDIT_BATCH;
        }
        self.credits -= 1;
        // SAFETY: this takes over one of the counts taken above, which nothing else owns.
        unsafe { Arc::from_raw(block) }
    }

    /// A buffer to fill: pooled when one is free, otherwise one-off, after a wait for a pooled one if the sender
    /// waits for buffers (a wait ends early when `stop` is raised).
    pub fn buffer(&mut self, stop: &AtomicBool) -> PoolBuf {
        if let Some(buf) = self.try_buffer() {
            return buf;
        }
        if let Some(limit) = self.buffer_wait {
            self.stats.waited += 1;
            let deadline = Instant::now() + limit;
            while Instant::now() < deadline && !stop.load(Ordering::Relaxed) {
                // libzmq's I/O thread frees a buffer once a connection has taken its message; a short sleep
                // leaves it the core (a spin would compete with it on a small machine).
                std::thread::sleep(Duration::from_micros(20));
                if let Some(buf) = self.try_buffer() {
                    return buf;
                }
            }
        }
        self.stats.allocated += 1;
        PoolBuf {
            inner: BufInner::Owned(
                vec![0u8; self.buffer_len].into_boxed_slice(),
                self.shared.delivery.get().cloned(),
            ),
        }
    }

    /// True while a message refused by a full pipe waits for [`Self::send_pending`].
    pub fn has_pending(&self) -> bool {
        self.pending.is_some()
    }

    /// Sends `buf[range]` without copying it. `Ok(true)`: libzmq took it. `Ok(false)`: the pipe was full
    /// (`EAGAIN`, e.g. a no-drop XPUB past its send timeout) or a signal cut the send short; the message is kept
    /// and [`Self::send_pending`] retries it. Any other error closes the message (its buffer comes back).
    /// Refused with [`ZmqxError::SendPending`] (the buffer returned to the pool) while an earlier message is
    /// still pending: it must go first.
    pub fn send(
        &mut self,
        socket: &mut zmq::Socket,
        buf: PoolBuf,
        range: Range<usize>,
        flags: i32,
    ) -> Result<bool, ZmqxError> {
        self.send_records(socket, buf, range, 1, flags)
    }

    /// As [`Self::send`], for a message carrying `records` records (what a tracked [`Delivery`] counts).
    pub fn send_records(
        &mut self,
        socket: &mut zmq::Socket,
        buf: PoolBuf,
        range: Range<usize>,
        records: u64,
        flags: i32,
    ) -> Result<bool, ZmqxError> {
        if self.pending.is_some() {
            return Err(ZmqxError::SendPending);
        }
        self.pending = Some(OutMessage::counted(buf, range, records)?);
        self.send_pending(socket, flags)
    }

    /// Retries the message a full pipe refused; `Ok(true)` also when nothing is pending.
    pub fn send_pending(
        &mut self,
        socket: &mut zmq::Socket,
        flags: i32,
    ) -> Result<bool, ZmqxError> {
        let Some(msg) = self.pending.as_mut() else {
            return Ok(true);
        };
        // SAFETY: `socket` is a live socket we hold `&mut` to and `msg.raw` an initialised message we own. On
        // success libzmq takes the content and leaves an empty message; on failure the message is unchanged.
        let rc = unsafe { zmq_sys::zmq_msg_send(&mut msg.raw, socket.as_mut_ptr(), flags) };
        if rc >= 0 {
            self.pending = None;
            self.stats.sent += 1;
            return Ok(true);
        }
        match last_error() {
            ZmqxError::Zmq(zmq::Error::EAGAIN | zmq::Error::EINTR) => {
                self.stats.would_block += 1;
                Ok(false)
            }
            err => {
                // Closing returns the buffer.
                self.pending = None;
                Err(err)
            }
        }
    }

    /// Gives up the pending message (closing it returns its buffer). Returns whether there was one.
    pub fn discard_pending(&mut self) -> bool {
        self.pending.take().is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delivery_counts_what_libzmq_still_holds_until_the_reader_takes_it() {
        let ctx = zmq::Context::new();
        let mut push = ctx.socket(zmq::PUSH).unwrap();
        push.set_linger(0).unwrap();
        push.set_sndhwm(100_000).unwrap();
        let pull = ctx.socket(zmq::PULL).unwrap();
        pull.set_linger(0).unwrap();
        pull.set_rcvhwm(1).unwrap();
        pull.set_rcvbuf(4096).unwrap();
        let ep = crate::bind_resolved(&pull, "tcp://127.0.0.1:*").unwrap();
        push.connect(&ep).unwrap();
        let delivery = Delivery::new();
        let frame = vec![7u8; 1000];
        // 20 MB: far more than the kernel's socket buffers, so most stays in libzmq's pipe while nobody reads.
        let n = 20_000u64;
        for _ in 0..n {
            let mut msg = delivery.message(&frame, 3).unwrap();
            assert!(msg.send(&mut push, 0).unwrap());
        }
        assert_eq!(delivery.handed(), 3 * n);
        let held = delivery.wait_settled(Duration::from_millis(200), None);
        assert!(held > 0 && held <= 3 * n, "{held}");
        assert_eq!(held % 3, 0, "counted per message's records");
        // A message made and never sent is released at once: it never counts as held.
        drop(delivery.message(&frame, 5).unwrap());
        assert_eq!(delivery.outstanding(), held);
        pull.set_rcvtimeo(5000).unwrap();
        for _ in 0..n {
            pull.recv_bytes(0).unwrap();
        }
        assert_eq!(delivery.wait_settled(Duration::from_secs(5), None), 0);
        assert_eq!(delivery.released(), 3 * n + 5);
    }

    #[test]
    fn a_tracked_sender_counts_records_per_batch_pooled_or_not() {
        let ctx = zmq::Context::new();
        let (mut push, pull) = pair(&ctx);
        let delivery = Delivery::new();
        let mut sender = ZeroCopySender::new(1, 64);
        sender.track(&delivery);
        let a = sender.buffer(&never());
        let b = sender.buffer(&never()); // the pool's one buffer is out: a one-off
        assert!(a.is_pooled() && !b.is_pooled());
        assert!(sender.send_records(&mut push, a, 0..10, 4, 0).unwrap());
        assert!(sender.send_records(&mut push, b, 0..10, 6, 0).unwrap());
        assert_eq!(delivery.handed(), 10);
        pull.recv_bytes(0).unwrap();
        pull.recv_bytes(0).unwrap();
        assert_eq!(delivery.wait_settled(Duration::from_secs(5), None), 0);
        assert_eq!(delivery.released(), 10);
    }

    fn never() -> AtomicBool {
        AtomicBool::new(false)
    }

    /// Waits (bounded) until `sender` has `n` free buffers.
    fn wait_available(sender: &mut ZeroCopySender, n: usize) -> bool {
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if sender.available() == n {
                return true;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        false
    }

    fn pair(ctx: &zmq::Context) -> (zmq::Socket, zmq::Socket) {
        let push = ctx.socket(zmq::PUSH).unwrap();
        push.set_linger(0).unwrap();
        let pull = ctx.socket(zmq::PULL).unwrap();
        pull.set_linger(0).unwrap();
        pull.set_rcvtimeo(5000).unwrap();
        let ep = crate::bind_resolved(&pull, "tcp://127.0.0.1:*").unwrap();
        push.connect(&ep).unwrap();
        (push, pull)
    }

    #[test]
    fn buffers_come_back_after_send_and_after_close() {
        let ctx = zmq::Context::new();
        let (mut push, pull) = pair(&ctx);
        let mut sender = ZeroCopySender::new(2, 64);
        let stop = never();
        let mut a = sender.buffer(&stop);
        let b = sender.buffer(&stop);
        assert!(a.is_pooled() && b.is_pooled());
        assert_eq!(sender.available(), 0);
        assert!(
            sender.try_buffer().is_none(),
            "pool of two handed out a third"
        );
        // Dropped unsent: straight back.
        drop(b);
        assert_eq!(sender.available(), 1);
        a[..5].copy_from_slice(b"hello");
        assert!(sender.send(&mut push, a, 1..5, 0).unwrap());
        assert_eq!(pull.recv_bytes(0).unwrap(), b"ello");
        assert!(wait_available(&mut sender, 2), "sent buffer never returned");
        // Closed without sending: the callback runs on close.
        let mut c = sender.buffer(&stop);
        c[0] = 7;
        let msg = OutMessage::new(c, 0..1).unwrap();
        assert_eq!(msg.bytes(), &[7]);
        assert_eq!(sender.available(), 1);
        drop(msg);
        assert_eq!(sender.available(), 2);
        assert_eq!(sender.releases(), 3);
        // Exhausted with `Allocate`: a counted one-off buffer, sent the same way.
        let _x = sender.buffer(&stop);
        let _y = sender.buffer(&stop);
        let mut z = sender.buffer(&stop);
        assert!(!z.is_pooled());
        assert_eq!(sender.stats().allocated, 1);
        z[..3].copy_from_slice(b"abc");
        assert!(sender.send(&mut push, z, 0..3, 0).unwrap());
        assert_eq!(pull.recv_bytes(0).unwrap(), b"abc");
    }

    #[test]
    fn eagain_keeps_the_message_and_its_bytes() {
        let ctx = zmq::Context::new();
        let mut push = ctx.socket(zmq::PUSH).unwrap();
        push.set_linger(0).unwrap();
        // Not connected yet: a PUSH with no peer refuses at once.
        let pull = ctx.socket(zmq::PULL).unwrap();
        pull.set_linger(0).unwrap();
        pull.set_rcvtimeo(5000).unwrap();
        let ep = crate::bind_resolved(&pull, "tcp://127.0.0.1:*").unwrap();
        let mut sender = ZeroCopySender::new(1, 32);
        let mut buf = sender.buffer(&never());
        buf[..7].copy_from_slice(b"payload");
        assert!(!sender.send(&mut push, buf, 0..7, zmq::DONTWAIT).unwrap());
        assert!(sender.has_pending());
        assert_eq!(sender.stats().would_block, 1);
        // The refused message still owns the only buffer.
        assert_eq!(sender.available(), 0);
        // Anything else must wait behind it.
        let other = sender.buffer(&never());
        assert!(matches!(
            sender.send(&mut push, other, 0..1, zmq::DONTWAIT),
            Err(ZmqxError::SendPending)
        ));
        push.connect(&ep).unwrap();
        let deadline = Instant::now() + Duration::from_secs(5);
        while !sender.send_pending(&mut push, zmq::DONTWAIT).unwrap() {
            assert!(Instant::now() < deadline, "pending send never went out");
            std::thread::sleep(Duration::from_millis(1));
        }
        assert!(!sender.has_pending());
        assert_eq!(pull.recv_bytes(0).unwrap(), b"payload");
        assert!(wait_available(&mut sender, 1));
        assert_eq!(sender.stats().sent, 1);
    }

    #[test]
    fn messages_in_flight_outlive_the_sender() {
        let ctx = zmq::Context::new();
        let (mut push, pull) = pair(&ctx);
        let mut sender = ZeroCopySender::new(4, 16);
        let stop = never();
        for i in 0..4u8 {
            let mut buf = sender.buffer(&stop);
            buf.fill(i);
            assert!(sender.send(&mut push, buf, 0..16, 0).unwrap());
        }
        // The pool's owner goes away while libzmq may still hold the buffers: they stay valid.
        drop(sender);
        for i in 0..4u8 {
            assert_eq!(pull.recv_bytes(0).unwrap(), vec![i; 16]);
        }
    }

    #[test]
    fn the_block_goes_once_the_sender_and_every_message_are_gone_and_not_before() {
        let ctx = zmq::Context::new();
        let (mut push, pull) = pair(&ctx);
        let mut sender = ZeroCopySender::new(4, 16);
        let block = Arc::downgrade(&sender.shared);
        let stop = never();
        // More messages than one batch of credits, so counts are taken more than once.
        for round in 0..3 * CREDIT_BATCH {
            let mut buf = sender.buffer(&stop);
            buf.fill(round as u8);
            assert!(sender.send(&mut push, buf, 0..16, 0).unwrap());
            assert_eq!(pull.recv_bytes(0).unwrap(), vec![round as u8; 16]);
        }
        // A buffer handed out but not sent yet holds the block as a message in flight does.
        let mut held = sender.buffer(&stop);
        drop(sender);
        held.fill(7);
        assert!(block.upgrade().is_some());
        drop(held);
        // Every count (the messages', the held buffer's and the sender's unused credits) was given back: nothing
        // leaks.
        let deadline = Instant::now() + Duration::from_secs(5);
        while block.strong_count() > 0 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(1));
        }
        assert_eq!(block.strong_count(), 0);
    }

    #[test]
    fn slow_subscriber_sees_every_batch_once_in_order() {
        const BATCHES: u32 = 20_000;
        let ctx = zmq::Context::new();
        let mut xpub = ctx.socket(zmq::XPUB).unwrap();
        xpub.set_linger(2000).unwrap();
        xpub.set_sndhwm(16).unwrap();
        xpub.set_sndtimeo(50).unwrap();
        crate::set_xpub_nodrop(&mut xpub, true).unwrap();
        let ep = crate::bind_resolved(&xpub, "tcp://127.0.0.1:*").unwrap();
        let reader_ctx = ctx.clone();
        let reader = std::thread::spawn(move || {
            let ctx = reader_ctx;
            let sub = ctx.socket(zmq::SUB).unwrap();
            sub.set_linger(0).unwrap();
            sub.set_rcvhwm(16).unwrap();
            sub.set_rcvtimeo(5000).unwrap();
            sub.connect(&ep).unwrap();
            sub.set_subscribe(b"").unwrap();
            let mut seen = Vec::with_capacity(BATCHES as usize);
            while seen.len() < BATCHES as usize {
                let Ok(msg) = sub.recv_bytes(0) else { break };
                let n = u32::from_le_bytes(msg[..4].try_into().unwrap());
                // Every byte of the batch is its number's low byte: a reused buffer overwritten while still
                // in flight would show up here.
                assert!(
                    msg[4..].iter().all(|&b| b == n as u8),
                    "batch {n} corrupted"
                );
                seen.push(n);
                if seen.len() % 512 == 0 {
                    // Slow reader: the sender hits the high-water mark again and again.
                    std::thread::sleep(Duration::from_millis(2));
                }
            }
            seen
        });
        xpub.set_rcvtimeo(5000).unwrap();
        assert_eq!(xpub.recv_bytes(0).unwrap(), vec![1u8]);
        let mut sender = ZeroCopySender::new(8, 4096).wait_for_buffers(Duration::from_secs(5));
        let stop = never();
        let started = Instant::now();
        for n in 0..BATCHES {
            let mut buf = sender.buffer(&stop);
            let len = 64 + (n as usize * 37) % 4000;
            buf[..4].copy_from_slice(&n.to_le_bytes());
            buf[4..len].fill(n as u8);
            let mut sent = sender.send(&mut xpub, buf, 0..len, 0).unwrap();
            while !sent {
                assert!(started.elapsed() < Duration::from_secs(15), "stuck");
                sent = sender.send_pending(&mut xpub, 0).unwrap();
            }
        }
        let seen = reader.join().unwrap();
        assert_eq!(seen.len(), BATCHES as usize);
        assert!(seen.iter().enumerate().all(|(i, &n)| n == i as u32));
        let stats = sender.stats();
        assert_eq!(stats.sent, u64::from(BATCHES));
        assert_eq!(stats.allocated, 0, "{stats:?}");
        assert!(wait_available(&mut sender, 8));
    }
}
