//! `tickbox_metrics::text::parse` on arbitrary bytes: `tickbox top` reads whatever a scraped endpoint answers, so
//! a hostile or broken one must never make it panic; every sample it keeps has a name and its labels read back.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    for sample in tickbox_metrics::text::parse(&text) {
        assert!(!sample.name.is_empty());
        for (key, value) in &sample.labels {
            assert!(sample.label(key).is_some(), "{key}={value}");
        }
    }
});
