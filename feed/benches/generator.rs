//! Generator + encode loop, messages per second (no sockets).

use criterion::{criterion_main, Criterion, Throughput};
use tickbox_feed::{FeedConfig, GeneratorParams, MarketGenerator, Universe};
use tickbox_wire::{encode, Header};

fn generator(c: &mut Criterion) {
    let config = FeedConfig::default();
    let universe = Universe::from_config(&config);
    let all: Vec<usize> = (0..universe.symbols().len()).collect();
    let mut group = c.benchmark_group("generator");
    group.throughput(Throughput::Elements(1));

    let mut market = MarketGenerator::new(&universe, &all, GeneratorParams::from(&config), 1);
    let mut t = 0u64;
    group.bench_function("next", |b| {
        b.iter(|| {
            t += 1;
            std::hint::black_box(market.next(t))
        })
    });

    let mut market = MarketGenerator::new(&universe, &all, GeneratorParams::from(&config), 1);
    let mut buf = [0u8; 256];
    let mut seq = 0u64;
    group.bench_function("next+encode", |b| {
        b.iter(|| {
            seq += 1;
            let generated = market.next(seq).unwrap();
            let kind = generated.payload.kind();
            let header = Header::live(kind, 1, seq, seq);
            let topic = market.topic(generated.symbol, kind);
            let n = encode(&mut buf, topic, &header, &generated.payload).unwrap();
            std::hint::black_box(&buf[..n]);
        })
    });

    // The two ways to hand a frame to libzmq: copy an encoded buffer into a new message, or encode straight
    // into a new message's (zeroed) storage.
    let mut market = MarketGenerator::new(&universe, &all, GeneratorParams::from(&config), 1);
    group.bench_function("next+encode+Message::from(slice)", |b| {
        b.iter(|| {
            seq += 1;
            let generated = market.next(seq).unwrap();
            let kind = generated.payload.kind();
            let header = Header::live(kind, 1, seq, seq);
            let topic = market.topic(generated.symbol, kind);
            let n = encode(&mut buf, topic, &header, &generated.payload).unwrap();
            std::hint::black_box(zmq::Message::from(&buf[..n]))
        })
    });
    let mut market = MarketGenerator::new(&universe, &all, GeneratorParams::from(&config), 1);
    group.bench_function("next+Message::with_size+encode", |b| {
        b.iter(|| {
            seq += 1;
            let generated = market.next(seq).unwrap();
            let kind = generated.payload.kind();
            let header = Header::live(kind, 1, seq, seq);
            let topic = market.topic(generated.symbol, kind);
            let mut msg = zmq::Message::with_size(tickbox_wire::encoded_len(topic, kind));
            encode(&mut msg, topic, &header, &generated.payload).unwrap();
            std::hint::black_box(msg)
        })
    });
    group.finish();
}

// What `criterion_group!` would generate, written out because the macro's `pub fn` cannot carry a doc comment.
fn benches() {
    let mut criterion = Criterion::default().without_plots().configure_from_args();
    generator(&mut criterion);
}
criterion_main!(benches);
