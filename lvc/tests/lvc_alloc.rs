//! Its own test binary: it installs a `#[global_allocator]`, which would count (and slow) every other test.
//!
//! The LVC's per-message work does not allocate once every topic has been seen: counted with an allocator that
//! tallies the calling thread's allocations only (so other tests' threads do not interfere).

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use tickbox_lvc::{Forwarding, LvcConfig, LvcEngine};
use tickbox_wire::{encode_to_vec, BookLevel, Header, Kind, Payload, Quote, Side};

struct Counting;

thread_local! {
    static ALLOCATIONS: Cell<u64> = const { Cell::new(0) };
}

#[allow(unsafe_code)] // A counting allocator is the only way to observe allocations.
                      // SAFETY: forwards to the system allocator; the thread-local counter never allocates.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let _ = ALLOCATIONS.try_with(|c| c.set(c.get() + 1));
        // SAFETY: the caller's contract for `alloc` is passed on unchanged.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from `System` through this allocator with this `layout`.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let _ = ALLOCATIONS.try_with(|c| c.set(c.get() + 1));
        // SAFETY: as in `dealloc`; `new_size` is the caller's, under `realloc`'s contract.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn allocations() -> u64 {
    ALLOCATIONS.with(|c| c.get())
}

#[test]
fn steady_state_updates_do_not_allocate() {
    let mut frames = Vec::new();
    for i in 0..1000u64 {
        let header = Header::live(Kind::Quote, 1, i + 1, i);
        frames.push(
            encode_to_vec(
                &format!("Q.XNAS.S{i:04}"),
                &header,
                &Quote::default().into(),
            )
            .unwrap(),
        );
        let level = BookLevel {
            side: if i % 2 == 0 { Side::Buy } else { Side::Sell },
            level: (i % 5) as u8,
            ..BookLevel::default()
        };
        let header = Header::live(Kind::BookLevel, 1, i + 1, i);
        frames.push(
            encode_to_vec(
                &format!("B.XNAS.S{:04}", i % 100),
                &header,
                &Payload::BookLevel(level),
            )
            .unwrap(),
        );
    }
    let mut engine = LvcEngine::new(&LvcConfig::default());
    for frame in &frames {
        assert_eq!(engine.handle_upstream(frame), Forwarding::Forward);
    }
    let before = allocations();
    for _ in 0..50 {
        for frame in &frames {
            engine.handle_upstream(frame);
        }
    }
    assert_eq!(allocations() - before, 0, "the hot path allocated");
    assert_eq!(engine.stats().messages_in, 51 * frames.len() as u64);
    // Sanity: the counter does see this thread's allocations.
    let before = allocations();
    drop(std::hint::black_box(vec![1u8; 64]));
    assert!(allocations() > before);
}
