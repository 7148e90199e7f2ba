//! `TapFrame::classify` on arbitrary frames: never a panic; events and messages are told apart consistently.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tickbox_wire::tap::TapFrame;

fuzz_target!(|data: &[u8]| {
    match TapFrame::classify(data) {
        Ok(TapFrame::Subscribe(_)) | Ok(TapFrame::Unsubscribe(_)) => {
            assert!(TapFrame::is_event(data))
        }
        Ok(TapFrame::Message(m)) => {
            assert!(!TapFrame::is_event(data));
            let _ = m.payload();
        }
        Err(_) => {}
    }
});
