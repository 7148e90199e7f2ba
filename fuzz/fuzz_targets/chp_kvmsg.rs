//! Clone-protocol (CHP) messages from arbitrary multipart input: `KvMsg::decode` and `decode_icanhaz` never panic,
//! and a decoded message re-encodes to frames that decode to the same message.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tickbox_clone::msg::decode_icanhaz;
use tickbox_clone::KvMsg;
use tickbox_fuzz::split_frames;

fuzz_target!(|data: &[u8]| {
    let frames = split_frames(data);
    let _ = decode_icanhaz(&frames);
    if let Ok(msg) = KvMsg::decode(&frames) {
        let _ = (msg.is_delete(), msg.ttl(), msg.prop("ttl"));
        let again = KvMsg::decode(&msg.to_frames()).expect("re-encoded message decodes");
        assert_eq!(again.to_frames(), msg.to_frames());
    }
});
