//! The history service's messages (`tickbox_wire::history`) on arbitrary bytes, as the recorder's service reads an
//! asker's and a late joiner reads the service's: never a panic, every bound held, and what decodes re-encodes to
//! the same bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tickbox_wire::history::{AskerMessage, ServiceMessage, MAX_END_SESSIONS, MAX_PREFIXES, MAX_PREFIX_BYTES};

fuzz_target!(|data: &[u8]| {
    if let Ok(message) = AskerMessage::decode(data) {
        if let AskerMessage::Request(request) = &message {
            assert!(request.prefixes.len() <= MAX_PREFIXES);
            assert!(request.prefixes.iter().all(|p| p.len() <= MAX_PREFIX_BYTES));
        }
        assert_eq!(message.encode(), data, "an asker message re-encodes to its bytes");
    }
    if let Ok(message) = ServiceMessage::decode(data) {
        match &message {
            ServiceMessage::Batch(batch) => {
                // Every record has its capture time, and the records are a batch frame a subscriber can read.
                for i in 0..batch.len() {
                    assert!(batch.capture_ns(i).is_some());
                }
                let _ = tickbox_wire::batch_records(batch.frame()).map(|records| records.count());
            }
            ServiceMessage::End(sessions) => assert!(sessions.len() <= MAX_END_SESSIONS),
            ServiceMessage::Refused(_) => {}
        }
        assert_eq!(message.encode(), data, "a service message re-encodes to its bytes");
    }
});
