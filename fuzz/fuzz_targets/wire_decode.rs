//! `MessageRef::decode` and the payload decoder on arbitrary frames: never a panic, and a frame that decodes
//! re-encodes to the same bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tickbox_wire::{encode_to_vec, MessageRef};

fuzz_target!(|data: &[u8]| {
    let Ok(msg) = MessageRef::decode(data) else {
        return;
    };
    let _ = (msg.topic(), msg.kind(), msg.payload_bytes());
    if let Ok(payload) = msg.payload() {
        assert_eq!(payload.kind(), msg.kind());
        // Only the current header version re-encodes byte for byte; older versions decode into it.
        if let Ok(again) = encode_to_vec(msg.topic(), msg.header(), &payload) {
            let back = MessageRef::decode(&again).expect("a re-encoded message decodes");
            assert_eq!(back.topic(), msg.topic());
            assert_eq!(back.header(), msg.header());
            assert_eq!(back.payload().ok(), Some(payload));
        }
    }
});
