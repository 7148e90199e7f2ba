//! Cost of the per-message checks a shard runs: decode the header, learn the publisher's clock offset, judge
//! lateness, track the sequence, choose the worker; and the receive clock itself, read once per frame.

use std::hint::black_box;
use std::time::Duration;

use criterion::{criterion_main, Criterion, Throughput};
use tickbox_subscriber::{delay_ns, lateness_ns, ClockTable, SequenceTracker, Snail, SnailMode};
use tickbox_wire::{encode_to_vec, now_ns, Header, Kind, MessageRef, Quote};
use tickbox_workers::worker_for_topic;

fn bench(c: &mut Criterion) {
    let snail = Snail::new(Duration::from_secs(1));
    let base = now_ns();
    let mut group = c.benchmark_group("snail");
    group.throughput(Throughput::Elements(1));
    let header = Header::live(Kind::Quote, 1, 1, base);
    // The wall clock (vDSO `clock_gettime`) and the receive clock a shard reads once per frame (the TSC, anchored
    // to the wall clock), to set beside the per-record path.
    group.bench_function("clock", |b| b.iter(now_ns));
    group.bench_function("receive_clock", |b| {
        let mut clock = tickbox_subscriber::ReceiveClock::new();
        b.iter(|| clock.now_ns())
    });
    group.bench_function("check", |b| {
        b.iter(|| snail.check(black_box(&header), black_box(base + 1_000)))
    });
    group.bench_function("check_with_clock", |b| {
        b.iter(|| snail.check(black_box(&header), now_ns()))
    });
    let frames: Vec<Vec<u8>> = (1..=1024u64)
        .map(|seq| {
            encode_to_vec(
                "Q.XNAS.AAPL",
                &Header::live(Kind::Quote, (seq % 2) as u32, seq / 2 + 1, base),
                &Quote::default().into(),
            )
            .unwrap()
        })
        .collect();
    group.bench_function("decode_snail_gap", |b| {
        let mut gaps = SequenceTracker::new();
        let mut i = 0usize;
        b.iter(|| {
            let frame = &frames[i & 1023];
            i += 1;
            let msg = MessageRef::decode(black_box(frame)).unwrap();
            let verdict = snail.check(msg.header(), base + 500);
            black_box((verdict, gaps.on_message(&msg)))
        })
    });
    // What the shard does per message today: the above plus the clock table and the worker choice.
    group.bench_function("decode_clock_snail_gap_dispatch", |b| {
        let mut gaps = SequenceTracker::new();
        let clocks = ClockTable::new(100_000_000);
        let mut i = 0usize;
        b.iter(|| {
            let frame = &frames[i & 1023];
            i += 1;
            let msg = MessageRef::decode(black_box(frame)).unwrap();
            let h = msg.header();
            let now = base + 500;
            let (min, _) = clocks.observe(h.publisher_id, delay_ns(now, h.send_time_ns));
            let lateness = lateness_ns(SnailMode::SkewTolerant, now, h.send_time_ns, min);
            let verdict = snail.judge(lateness);
            let worker = worker_for_topic(msg.topic().as_bytes(), 3);
            black_box((verdict, gaps.on_message(&msg), worker))
        })
    });
    group.finish();
}

fn config() -> Criterion {
    Criterion::default()
        .without_plots()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
}

// What `criterion_group!` would generate, written out because the macro's `pub fn` cannot carry a doc comment.
fn benches() {
    let mut criterion = config().configure_from_args();
    bench(&mut criterion);
}
criterion_main!(benches);
