//! Titanic (TSP): journal records through `Event::decode` (applied to the index when they decode, as start-up
//! replay does) and request bodies through the index's `titanic.request`/`reply`/`close` rules. Never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tickbox_fuzz::split_frames;
use tickbox_majordomo::engine::titanic::{Event, TitanicState};

fuzz_target!(|data: &[u8]| {
    let mut state = TitanicState::default();
    if let Ok(ev) = Event::decode(data) {
        assert_eq!(Event::decode(&ev.encode()).as_ref(), Ok(&ev));
        state.apply(ev);
    }
    let frames = split_frames(data);
    for f in &frames {
        if let Ok(ev) = Event::decode(f) {
            state.apply(ev);
        }
    }
    let _ = state.reply_status(&frames);
    if let Some(ev) = state.close_event(&frames) {
        state.apply(ev);
    }
    if let Ok(ev) = state.request_event(frames.clone(), [0x5a; 16]) {
        state.apply(ev);
    }
    let _ = state.pending();
});
