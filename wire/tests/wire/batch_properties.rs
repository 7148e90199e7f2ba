//! Batch frames as properties: whatever records go in come out, in order, byte for byte; the builder never
//! exceeds its limits; and a batch cut or mangled anywhere is an error item or a typed error, never a panic.

use proptest::prelude::*;
use tickbox_wire::{
    batch_frame_len, batch_records, BatchBuilder, BatchWriter, BATCH_HEADER_LEN, MAX_BATCHED_RECORD,
};

fn records() -> impl Strategy<Value = Vec<Vec<u8>>> {
    proptest::collection::vec(proptest::collection::vec(any::<u8>(), 1..300), 0..40)
}

fn read_all(frame: &[u8]) -> Result<Vec<Vec<u8>>, tickbox_wire::DecodeError> {
    batch_records(frame)?
        .map(|r| r.map(<[u8]>::to_vec))
        .collect()
}

proptest! {
    #[test]
    fn what_goes_in_comes_out_in_order(recs in records(), max_bytes in 7usize..6000, max_records in 1u16..50) {
        // Fill batches as a publisher does: push until refused, send, clear, push again.
        let mut builder = BatchBuilder::new(max_bytes, max_records);
        let mut out: Vec<Vec<u8>> = Vec::new();
        let mut singles = 0usize;
        for r in &recs {
            if !builder.try_push(r) {
                if !builder.is_empty() {
                    out.extend(read_all(builder.frame()).unwrap());
                    builder.clear();
                }
                if !builder.try_push(r) {
                    // Too large for an empty batch: sent alone.
                    prop_assert!(r.len() + 2 + BATCH_HEADER_LEN > max_bytes || r.len() > MAX_BATCHED_RECORD);
                    out.push(r.clone());
                    singles += 1;
                    continue;
                }
            }
            prop_assert!(builder.len() <= usize::from(max_records));
            prop_assert!(builder.frame().len() <= max_bytes.max(BATCH_HEADER_LEN));
        }
        if !builder.is_empty() {
            out.extend(read_all(builder.frame()).unwrap());
        }
        prop_assert_eq!(&out, &recs);
        prop_assert!(singles <= recs.len());
    }

    #[test]
    fn writer_and_builder_agree(recs in records()) {
        let total: usize = recs.iter().map(Vec::len).sum();
        let mut buf = vec![0u8; batch_frame_len(total, recs.len())];
        let mut writer = BatchWriter::new(&mut buf, u16::MAX);
        for r in &recs {
            writer.push_with(r.len()).unwrap().copy_from_slice(r);
        }
        prop_assert_eq!(writer.finish(), buf.len());
        prop_assert_eq!(read_all(&buf).unwrap(), recs);
    }

    #[test]
    fn cut_or_mangled_batches_never_panic(recs in records(), at in any::<usize>(), value in any::<u8>(), cut in any::<usize>()) {
        let mut builder = BatchBuilder::new(1 << 16, u16::MAX);
        for r in &recs {
            builder.try_push(r);
        }
        let mut frame = builder.frame().to_vec();
        let cut = cut % (frame.len() + 1);
        if cut < frame.len() {
            // Any proper cut of a batch is detected.
            prop_assert!(read_all(&frame[..cut]).is_err());
        }
        let at = at % frame.len();
        frame[at] = value;
        if let Ok(it) = batch_records(&frame[..cut]) {
            let mut errors = 0;
            for item in it {
                prop_assert_eq!(errors, 0, "nothing after an error");
                if item.is_err() {
                    errors += 1;
                }
            }
        }
    }

    #[test]
    fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
        let mut framed = b"#B\0\x01\0".to_vec();
        framed.extend_from_slice(&bytes);
        for frame in [&bytes[..], &framed[..]] {
            if let Ok(it) = batch_records(frame) {
                for r in it.flatten() {
                    prop_assert!(!r.is_empty());
                }
            }
        }
    }
}
