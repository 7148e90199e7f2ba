//! Arbitrary text as the deployment config (every component's config type, as the `tickbox` binary reads it),
//! and as the recorder's own section: parse errors, never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tickbox_fuzz::TickboxConfig;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let _ = toml::from_str::<TickboxConfig>(text);
    let _ = toml::from_str::<tickbox_recorder::RecorderConfig>(text);
    let _ = toml::from_str::<tickbox_majordomo::BrokerConfig>(text);
});
