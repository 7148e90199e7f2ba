//! Encode and decode throughput of one quote frame, the hot path of every publisher and subscriber.

use std::hint::black_box;

use criterion::{criterion_main, Criterion, Throughput};
use tickbox_wire::{
    batch_records, encode, encoded_len, BatchBuilder, Header, Kind, MessageRef, Payload, Quote,
};

fn quote() -> Payload {
    Payload::Quote(Quote {
        instrument_id: 42,
        bid_px: 189_120_000_000,
        ask_px: 189_130_000_000,
        bid_size: 300,
        ask_size: 200,
        bid_orders: 3,
        ask_orders: 2,
        venue_time_ns: 1_700_000_000_000_000_000,
    })
}

fn codec(c: &mut Criterion) {
    let topic = "Q.XNAS.AAPL";
    let payload = quote();
    let mut buf = vec![0u8; encoded_len(topic, Kind::Quote)];
    let mut group = c.benchmark_group("wire");
    group.throughput(Throughput::Elements(1));
    let mut seq = 0u64;
    group.bench_function("encode_quote", |b| {
        b.iter(|| {
            seq += 1;
            let header = Header::live(Kind::Quote, 1, seq, seq);
            encode(black_box(&mut buf), topic, &header, black_box(&payload)).unwrap()
        })
    });
    // Encoded here rather than taken from the encode bench's buffer, which is still zeros when a filter skips it.
    let mut frame = vec![0u8; encoded_len(topic, Kind::Quote)];
    encode(
        &mut frame,
        topic,
        &Header::live(Kind::Quote, 1, 1, 1),
        &payload,
    )
    .unwrap();
    group.bench_function("decode_header", |b| {
        b.iter(|| {
            MessageRef::decode(black_box(&frame))
                .unwrap()
                .header()
                .sequence
        })
    });
    group.bench_function("decode_full", |b| {
        b.iter(|| {
            MessageRef::decode(black_box(&frame))
                .unwrap()
                .payload()
                .unwrap()
        })
    });
    group.finish();
}

/// A batch of 64 quotes: encoding straight into a reused builder, and unpacking plus decoding every header (what a
/// batch-reading subscriber does), per record, against the single-frame numbers above.
fn batch(c: &mut Criterion) {
    const RECORDS: u64 = 64;
    let topic = "Q.XNAS.AAPL";
    let payload = quote();
    let len = encoded_len(topic, Kind::Quote);
    let mut builder = BatchBuilder::new(8192, RECORDS as u16);
    let mut group = c.benchmark_group("wire_batch");
    group.throughput(Throughput::Elements(RECORDS));
    let mut seq = 0u64;
    group.bench_function("encode_64_quotes", |b| {
        b.iter(|| {
            builder.clear();
            for _ in 0..RECORDS {
                seq += 1;
                let header = Header::live(Kind::Quote, 1, seq, seq);
                let slot = builder.push_with(len).unwrap();
                encode(slot, topic, &header, black_box(&payload)).unwrap();
            }
            builder.frame().len()
        })
    });
    let frame = builder.frame().to_vec();
    group.bench_function("unpack_decode_headers_64", |b| {
        b.iter(|| {
            let mut last = 0;
            for r in batch_records(black_box(&frame)).unwrap() {
                last = MessageRef::decode(r.unwrap()).unwrap().header().sequence;
            }
            last
        })
    });
    group.finish();
}

// What `criterion_group!` would generate, written out because the macro's `pub fn` cannot carry a doc comment.
fn benches() {
    let mut criterion = Criterion::default().without_plots().configure_from_args();
    codec(&mut criterion);
    batch(&mut criterion);
}
criterion_main!(benches);
