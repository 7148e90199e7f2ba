//! A sleeping worker's desk: where a worker fed through a ring leaves its state while it sleeps, so that the shard
//! which would otherwise have to wake it can run the last records of a burst itself.
//!
//! Waking a sleeping thread costs its producer a system call and then waits for the OS to run the woken thread:
//! on a machine whose cores are all busy (the other shards, libzmq's I/O threads, anything else on the box) that
//! wait is a scheduler's time slice, hundreds of µs to ms, and no choice of spinning or yielding on the worker's
//! side shortens it, because the worker has no core to spin on. A shard at the end of a burst, though, is running
//! already and has nothing else to do until its socket has more. So when the worker sleeps with nothing queued,
//! the shard takes the worker's state off the desk, runs the records through it exactly as the worker would
//! (hook, worker, counts, flush), and puts it back: no wake-up, no second thread, no free core needed. While
//! records arrive faster than that (a parcel fills mid-burst, or the worker is awake), they go through the ring
//! to the worker's own thread as before, so a loaded subscriber keeps its parallelism.
//!
//! Order is kept: the shard runs records only while the worker sleeps (its state is on the desk, so it is not in
//! the middle of a parcel) and its queue is empty (it has taken, and so finished, everything sent before), both
//! seen under the desk's lock, which the worker needs to take its state back.

use std::any::Any;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{fence, AtomicBool, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::Duration;

use crate::parcel::Parcel;

/// What a worker leaves on its desk: its whole per-record state, able to take a parcel as the worker's own loop
/// would.
pub(crate) trait Desked: Any + Send {
    /// Runs every item of `parcel` through the worker, counts it taken, publishes the counts and flushes (a
    /// burst ended).
    fn take_parcel(&mut self, parcel: &Parcel);
}

/// One worker's desk, shared by the worker (which sleeps there) and every shard that feeds its queue.
pub struct Desk {
    /// Set (under the lock) while the worker's state is on the desk; read without it by a producer deciding whether
    /// to ring after a send.
    asleep: AtomicBool,
    slot: Mutex<Slot>,
    bell: Condvar,
}

/// The worker's state while it sleeps; emptied for good by a panic of a record a shard ran on it, which the
/// worker's thread then finds on waking.
#[derive(Default)]
struct Slot {
    parked: Option<Box<dyn Desked>>,
}

impl std::fmt::Debug for Desk {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Desk")
            .field("asleep", &self.asleep.load(Ordering::Relaxed))
            .finish()
    }
}

impl Default for Desk {
    fn default() -> Self {
        Desk::new()
    }
}

/// How a worker's sleep at its desk ended.
pub(crate) enum Woken<T> {
    /// Its state is back; look at the queue again.
    Back(Box<T>),
    /// A record a shard ran on its state panicked: the state is gone.
    Lost,
}

impl Desk {
    /// An empty desk (the worker is awake).
    pub fn new() -> Desk {
        Desk {
            asleep: AtomicBool::new(false),
            slot: Mutex::new(Slot::default()),
            bell: Condvar::new(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Slot> {
        // A panic while the lock is held happens only inside `catch_unwind` below, which leaves the slot
        // consistent (emptied); the poison flag adds nothing.
        self.slot.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether the worker sleeps here now (a hint: [`try_run`](Self::try_run) decides under the lock).
    #[inline]
    pub fn is_asleep(&self) -> bool {
        self.asleep.load(Ordering::Relaxed)
    }

    /// Producer, at the end of a burst: runs `parcel` through the worker's state if the worker sleeps and `queue`
    /// (its queue) is empty, and returns `true` (the parcel is done; clear it); otherwise `false` (send it). A
    /// panic of the worker is caught here: the parcel's records go with it, and the worker's thread fails on
    /// waking, as it would have on its own.
    pub fn try_run(&self, parcel: &Parcel, queue: &crossbeam_channel::Sender<Parcel>) -> bool {
        if !self.is_asleep() {
            return false;
        }
        let mut slot = self.lock();
        if !queue.is_empty() {
            return false;
        }
        let Some(state) = slot.parked.as_mut() else {
            return false;
        };
        if catch_unwind(AssertUnwindSafe(|| state.take_parcel(parcel))).is_err() {
            slot.parked = None;
            self.bell.notify_one();
        }
        true
    }

    /// Producer, after sending to the worker's queue: wakes the worker if it sleeps, and says whether it did.
    pub fn ring(&self) -> bool {
        // Pairs with the fence in `sleep`: either this load sees the worker asleep, or the worker's look at the
        // queue (after its store of `asleep`) sees what was just sent.
        fence(Ordering::SeqCst);
        if !self.asleep.load(Ordering::Relaxed) {
            return false;
        }
        let _slot = self.lock();
        self.bell.notify_one();
        true
    }

    /// Worker: unless `queue` holds something, leaves `state` on the desk and sleeps until rung or `timeout`,
    /// then takes it back (waiting while a shard runs records on it).
    pub(crate) fn sleep<T: Desked>(
        &self,
        state: Box<T>,
        queue: &crossbeam_channel::Receiver<Parcel>,
        timeout: Duration,
    ) -> Woken<T> {
        let mut slot = self.lock();
        self.asleep.store(true, Ordering::Relaxed);
        fence(Ordering::SeqCst);
        if !queue.is_empty() {
            self.asleep.store(false, Ordering::Relaxed);
            return Woken::Back(state);
        }
        slot.parked = Some(state);
        let (mut slot, _) = self
            .bell
            .wait_timeout(slot, timeout)
            .unwrap_or_else(|e| e.into_inner());
        self.asleep.store(false, Ordering::Relaxed);
        let Some(parked) = slot.parked.take() else {
            return Woken::Lost;
        };
        drop(slot);
        let any: Box<dyn Any> = parked;
        match any.downcast::<T>() {
            Ok(state) => Woken::Back(state),
            // Only this worker's thread parks state on its desk, always of its one type.
            Err(_) => unreachable!("a desk holds only its worker's state"),
        }
    }
}
