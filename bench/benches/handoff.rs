//! The Black Box's shard → worker hand-off: inproc PUSH/PULL (what the subscriber uses) against a crossbeam
//! bounded channel carrying the same `zmq::Message`, so a switch can be decided on figures.
//!
//! A persistent producer thread builds each message from a frame-sized buffer (as a SUB shard would receive
//! it) and hands it off; the bench thread is the worker and takes `iters` messages. Both queues are bounded at
//! the same depth. Run: `cargo bench -p tickbox-bench --bench handoff`.

use std::thread;
use std::time::{Duration, Instant};

use criterion::{criterion_main, BenchmarkId, Criterion, Throughput};

const DEPTH: usize = 10_000;
static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// Producer side of one hand-off kind, driven by "send n" orders.
struct Producer {
    orders: crossbeam_channel::Sender<u64>,
    handle: Option<thread::JoinHandle<()>>,
}

impl Drop for Producer {
    fn drop(&mut self) {
        let _ = self.orders.send(0);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

fn spawn_producer(size: usize, mut send: impl FnMut(zmq::Message) + Send + 'static) -> Producer {
    let (orders, rx) = crossbeam_channel::bounded::<u64>(1);
    let handle = thread::spawn(move || {
        let frame = vec![0x42u8; size];
        while let Ok(n) = rx.recv() {
            if n == 0 {
                break;
            }
            for _ in 0..n {
                send(zmq::Message::from(&frame[..]));
            }
        }
    });
    Producer {
        orders,
        handle: Some(handle),
    }
}

fn handoff(c: &mut Criterion) {
    let mut group = c.benchmark_group("handoff");
    group.measurement_time(Duration::from_secs(3));
    for size in [100usize, 1024] {
        group.throughput(Throughput::Elements(1));

        // inproc PUSH → PULL, as the Black Box shards and workers use it.
        let ctx = zmq::Context::new();
        let endpoint = format!(
            "inproc://handoff-{}",
            NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        );
        let pull = ctx.socket(zmq::PULL).unwrap();
        pull.set_linger(0).unwrap();
        pull.set_rcvhwm(DEPTH as i32).unwrap();
        pull.bind(&endpoint).unwrap();
        let push_ctx = ctx.clone();
        let producer = {
            let endpoint = endpoint.clone();
            // The PUSH socket is created on the producer thread and never leaves it.
            let mut push: Option<zmq::Socket> = None;
            spawn_producer(size, move |msg| {
                let socket = push.get_or_insert_with(|| {
                    let s = push_ctx.socket(zmq::PUSH).unwrap();
                    s.set_linger(0).unwrap();
                    s.set_sndhwm(DEPTH as i32).unwrap();
                    s.connect(&endpoint).unwrap();
                    s
                });
                socket.send(msg, 0).unwrap();
            })
        };
        let mut msg = zmq::Message::new();
        group.bench_function(BenchmarkId::new("inproc_push_pull", size), |b| {
            b.iter_custom(|iters| {
                producer.orders.send(iters).unwrap();
                let start = Instant::now();
                for _ in 0..iters {
                    pull.recv(&mut msg, 0).unwrap();
                }
                start.elapsed()
            })
        });
        drop(producer);
        drop(pull);

        // crossbeam bounded channel carrying the same messages.
        let (tx, rx) = crossbeam_channel::bounded::<zmq::Message>(DEPTH);
        let producer = spawn_producer(size, move |msg| tx.send(msg).unwrap());
        group.bench_function(BenchmarkId::new("crossbeam_bounded", size), |b| {
            b.iter_custom(|iters| {
                producer.orders.send(iters).unwrap();
                let start = Instant::now();
                for _ in 0..iters {
                    let m = rx.recv().unwrap();
                    std::hint::black_box(&m);
                }
                start.elapsed()
            })
        });
        drop(producer);
    }
    group.finish();
}

// What `criterion_group!` would generate, written out because the macro's `pub fn` cannot carry a doc comment.
fn benches() {
    // No plots: plotters is built without system fonts here.
    let mut criterion = Criterion::default().without_plots().configure_from_args();
    handoff(&mut criterion);
}
criterion_main!(benches);
