//! `batch_records` on arbitrary bytes: never a panic, every record yielded lies inside the frame, the iterator
//! stops after its first error, and what decodes re-encodes to the same bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tickbox_wire::{batch_records, BatchBuilder, MessageRef};

fuzz_target!(|data: &[u8]| {
    let Ok(records) = batch_records(data) else {
        return;
    };
    let declared = usize::from(records.declared_count());
    let mut builder = BatchBuilder::new(data.len().max(16), u16::MAX);
    let mut ok = 0usize;
    let mut failed = false;
    for item in records {
        assert!(!failed, "the iterator must stop after an error");
        match item {
            Ok(record) => {
                assert!(!record.is_empty() && record.len() <= data.len());
                ok += 1;
                // Each record is handed to the frame decoder, as a subscriber does.
                if let Ok(m) = MessageRef::decode(record) {
                    let _ = m.payload();
                }
                assert!(
                    builder.try_push(record),
                    "a record of this batch fits an equal-sized batch"
                );
            }
            Err(_) => failed = true,
        }
    }
    assert!(ok <= declared);
    if !failed {
        // A batch that reads cleanly is exactly what the builder writes from its records (the reserved byte aside).
        assert_eq!(ok, declared);
        let rebuilt = builder.frame();
        assert_eq!(rebuilt.len(), data.len());
        assert_eq!(&rebuilt[..4], &data[..4]);
        assert_eq!(&rebuilt[5..], &data[5..]);
    }
});
