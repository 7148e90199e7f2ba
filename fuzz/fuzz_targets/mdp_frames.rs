//! Majordomo (MDP 0.1 / 0.2) classification of arbitrary multipart input: `proto::classify` never panics.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tickbox_fuzz::split_frames;
use tickbox_majordomo::proto::classify;

fuzz_target!(|data: &[u8]| {
    let _ = classify(split_frames(data));
});
