//! SIGBUS guard for mapped journal files.
//!
//! A page of a shared file mapping that lies past the end of the file raises SIGBUS when touched: another process
//! truncating a journal under a live reader (or writer) would otherwise kill it. Every [`Segment`] mapping is
//! registered here; a process-wide SIGBUS handler (installed once, on the first registration) looks the faulting
//! address up among the registered ranges and, if it is inside one, maps a private anonymous zero page over the
//! faulting page (`MAP_FIXED`) and counts the fault for that range. The faulting load or store then re-executes
//! against the zero page and completes; the journal code checks the range's fault count after every record it
//! reads or publishes and turns a non-zero count into [`JournalError::Truncated`](crate::JournalError::Truncated).
//! Once a page has been replaced the mapping no longer shows the file there, so the error is sticky: the segment
//! must be reopened.
//!
//! A SIGBUS at any other address goes to the handler that was installed before ours, or, if there was none, the
//! default action is restored and the fault re-executes and kills the process as it would have without the guard.
//!
//! The handler touches only atomics in a fixed static table and calls `mmap`/`sigaction`, which on Linux are plain
//! system calls (no locks, no allocation). The table has [`SLOTS`] entries; a mapping registered while all are taken
//! is not guarded (logged once), which only restores the behaviour without the guard.
//!
//! [`Segment`]: crate::segment::Segment

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};
use std::sync::OnceLock;

/// Mappings guarded at once (each open ring, archive segment or inspection map takes one while it lives).
const SLOTS: usize = 1024;

struct Slot {
    /// Start address of the mapping, 0 when the slot is free.
    start: AtomicUsize,
    /// Length in bytes; 0 while the slot is being claimed or released, so the handler never sees a half-set slot.
    len: AtomicUsize,
    /// Faults redirected to zero pages in this mapping since it was registered.
    faults: AtomicU32,
}

#[allow(clippy::declare_interior_mutable_const)] // only used to initialise the table below, element by element
const FREE: Slot = Slot {
    start: AtomicUsize::new(0),
    len: AtomicUsize::new(0),
    faults: AtomicU32::new(0),
};
static TABLE: [Slot; SLOTS] = [FREE; SLOTS];
static PAGE: AtomicUsize = AtomicUsize::new(4096);
/// The SIGBUS disposition in place before ours, for faults that are not in a journal mapping.
static PREVIOUS: OnceLock<libc::sigaction> = OnceLock::new();
static FULL_WARNED: AtomicBool = AtomicBool::new(false);

/// A mapping's registration; unregisters on drop (which must happen before the mapping is unmapped).
#[derive(Debug)]
pub(crate) struct Guard {
    slot: Option<usize>,
}

impl Guard {
    /// Registers `len` bytes at `start` (a live mapping) with the handler, installing it on first use.
    pub(crate) fn register(start: *const u8, len: usize) -> Guard {
        install();
        if start.is_null() || len == 0 {
            return Guard { slot: None };
        }
        for (i, slot) in TABLE.iter().enumerate() {
            if slot
                .start
                .compare_exchange(0, start as usize, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
            {
                slot.faults.store(0, Ordering::Relaxed);
                slot.len.store(len, Ordering::Release);
                return Guard { slot: Some(i) };
            }
        }
        if !FULL_WARNED.swap(true, Ordering::Relaxed) {
            tracing::warn!(
                "more than {SLOTS} journal mappings open: the new ones are not protected against truncation"
            );
        }
        Guard { slot: None }
    }

    /// Faults redirected to zero pages in this mapping: non-zero means the file shrank under it.
    #[inline]
    pub(crate) fn faults(&self) -> u32 {
        match self.slot {
            Some(i) => TABLE[i].faults.load(Ordering::Acquire),
            None => 0,
        }
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        if let Some(i) = self.slot {
            TABLE[i].len.store(0, Ordering::Release);
            TABLE[i].start.store(0, Ordering::Release);
        }
    }
}

// The handler and its installation call libc; each block says why it is sound.
#[allow(unsafe_code)]
fn install() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        // SAFETY: sysconf has no preconditions.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
        if page > 0 {
            PAGE.store(page as usize, Ordering::Relaxed);
        }
        // SAFETY: an all-zero `sigaction` is a valid value of this plain C struct (SIG_DFL, empty mask, no flags).
        let mut previous: libc::sigaction = unsafe { std::mem::zeroed() };
        // SAFETY: a null new action only reads the current one into `previous`, a live local.
        if unsafe { libc::sigaction(libc::SIGBUS, std::ptr::null(), &mut previous) } != 0 {
            return;
        }
        let _ = PREVIOUS.set(previous);
        // SAFETY: as above, all-zero is a valid `sigaction`; the fields are set below.
        let mut action: libc::sigaction = unsafe { std::mem::zeroed() };
        action.sa_sigaction = on_sigbus as *const () as usize;
        // SA_NODEFER: a second fault inside the handler (never expected) is not blocked into a hang.
        action.sa_flags = libc::SA_SIGINFO | libc::SA_NODEFER | libc::SA_ONSTACK;
        // SAFETY: `sa_mask` is a live field of `action`; sigemptyset only writes it.
        unsafe { libc::sigemptyset(&mut action.sa_mask) };
        // SAFETY: installs a handler with the `SA_SIGINFO` signature; `action` is fully initialised.
        if unsafe { libc::sigaction(libc::SIGBUS, &action, std::ptr::null_mut()) } != 0 {
            tracing::warn!("could not install the journal SIGBUS guard: a truncated journal may kill the process");
        }
    });
}

/// The SIGBUS handler. Async-signal-safe: atomics on a static table, `mmap` and `sigaction` only.
#[allow(unsafe_code)]
extern "C" fn on_sigbus(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
    // SAFETY: the kernel passes a valid `siginfo_t` to an `SA_SIGINFO` handler; for SIGBUS `si_addr` is the
    // faulting address.
    let addr = unsafe { (*info).si_addr() } as usize;
    let page = PAGE.load(Ordering::Relaxed);
    for slot in TABLE.iter() {
        let start = slot.start.load(Ordering::Acquire);
        if start == 0 {
            continue;
        }
        let len = slot.len.load(Ordering::Acquire);
        if addr < start || addr - start >= len {
            continue;
        }
        let at = addr & !(page - 1);
        // SAFETY: `at` is the page holding the faulting address, inside a registered journal mapping that is
        // live (it is unregistered before it is unmapped). Replacing that page with a private zero page changes
        // only what the journal reads there, and the journal treats any fault count as "file truncated" and never
        // trusts those bytes.
        let p = unsafe {
            libc::mmap(
                at as *mut libc::c_void,
                page,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED,
                -1,
                0,
            )
        };
        if p != libc::MAP_FAILED {
            slot.faults.fetch_add(1, Ordering::Release);
            return;
        }
        break;
    }
    // Not ours (or the page could not be replaced): whatever handled SIGBUS before us.
    if let Some(prev) = PREVIOUS.get() {
        let handler = prev.sa_sigaction;
        if handler != libc::SIG_DFL && handler != libc::SIG_IGN {
            if prev.sa_flags & libc::SA_SIGINFO != 0 {
                // SAFETY: the previous disposition was installed with SA_SIGINFO, so it has this signature.
                let f: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void) =
                    unsafe { std::mem::transmute(handler) };
                f(sig, info, ctx);
            } else {
                // SAFETY: without SA_SIGINFO the previous handler takes just the signal number.
                let f: extern "C" fn(libc::c_int) = unsafe { std::mem::transmute(handler) };
                f(sig);
            }
            return;
        }
    }
    // Default action: restore it and return; the access faults again and the process dies of SIGBUS as it would
    // have without the guard.
    // SAFETY: all-zero is SIG_DFL with no flags; sigaction only reads it.
    unsafe {
        let dfl: libc::sigaction = std::mem::zeroed();
        libc::sigaction(libc::SIGBUS, &dfl, std::ptr::null_mut());
    }
}
