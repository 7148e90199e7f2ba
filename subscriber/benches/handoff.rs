//! The shard → worker hand-off for `dispatch = "by_topic"`, three ways side by side: one inproc PUSH per worker
//! (`handoff = "zmq"`), one bounded crossbeam channel per worker moving each received `zmq::Message` (the
//! previous ring), and one bounded channel per worker moving parcels of up to 64 decoded records (`handoff =
//! "ring"`: the shard decodes each frame's header, which the worker then does not redo, so the decode is timed
//! here on the producer side). One producer (a shard), three consumers (workers), messages spread by topic.
//!
//! `cargo bench -p tickbox-subscriber --bench handoff` prints messages per second for each, five rounds, and the
//! ratios to the inproc PUSH of the same round.

use std::time::{Duration, Instant};

use tickbox_workers::{worker_for_topic, Parcel, Record, Recycler, PARCEL_RECORDS};

const WORKERS: usize = 3;
const MESSAGES: u64 = 2_000_000;
const HWM: usize = 1_000;

fn frames() -> Vec<(usize, Vec<u8>)> {
    (0..1_000)
        .map(|i| {
            let topic = format!("Q.XNAS.S{i}");
            let frame = tickbox_wire::encode_to_vec(
                &topic,
                &tickbox_wire::Header::live(tickbox_wire::Kind::Quote, 1, i + 1, 1),
                &tickbox_wire::Quote::default().into(),
            )
            .unwrap();
            (worker_for_topic(topic.as_bytes(), WORKERS), frame)
        })
        .collect()
}

fn parcels(frames: &[(usize, Vec<u8>)]) -> f64 {
    let recycler = Recycler::new(64);
    let mut senders = Vec::new();
    let mut consumers = Vec::new();
    for _ in 0..WORKERS {
        let (tx, rx) = crossbeam_channel::bounded::<Parcel>((HWM / PARCEL_RECORDS).max(4));
        senders.push(tx);
        let recycler = recycler.clone();
        consumers.push(std::thread::spawn(move || {
            let mut n = 0u64;
            while let Ok(parcel) = rx.recv() {
                for rec in parcel.records() {
                    std::hint::black_box(rec.header().sequence);
                    n += 1;
                }
                recycler.give(parcel);
            }
            n
        }));
    }
    let mut pending: Vec<Parcel> = (0..WORKERS).map(|_| recycler.take()).collect();
    let start = Instant::now();
    for i in 0..MESSAGES {
        let (w, frame) = &frames[i as usize % frames.len()];
        let msg = zmq::Message::from(&frame[..]);
        let meta = *Record::decode(&msg).unwrap().meta();
        pending[*w].push_message(msg, meta);
        if pending[*w].is_full() {
            let full = std::mem::replace(&mut pending[*w], recycler.take());
            senders[*w].send(full).unwrap();
        }
    }
    for (w, p) in pending.into_iter().enumerate() {
        senders[w].send(p).unwrap();
    }
    drop(senders);
    let n: u64 = consumers.into_iter().map(|c| c.join().unwrap()).sum();
    assert_eq!(n, MESSAGES);
    MESSAGES as f64 / start.elapsed().as_secs_f64()
}

fn zmq_push(frames: &[(usize, Vec<u8>)], round: usize) -> f64 {
    let ctx = zmq::Context::new();
    let mut pushes = Vec::new();
    let mut consumers = Vec::new();
    for w in 0..WORKERS {
        let ep = format!("inproc://handoff-{round}-{w}");
        let push = ctx.socket(zmq::PUSH).unwrap();
        push.set_linger(0).unwrap();
        push.set_sndhwm(HWM as i32).unwrap();
        push.bind(&ep).unwrap();
        pushes.push(push);
        let ctx = ctx.clone();
        consumers.push(std::thread::spawn(move || {
            let pull = ctx.socket(zmq::PULL).unwrap();
            pull.set_linger(0).unwrap();
            pull.set_rcvhwm(HWM as i32).unwrap();
            pull.connect(&ep).unwrap();
            let mut msg = zmq::Message::new();
            let mut n = 0u64;
            loop {
                pull.recv(&mut msg, 0).unwrap();
                if msg.is_empty() {
                    return n;
                }
                n += 1;
            }
        }));
    }
    let start = Instant::now();
    for i in 0..MESSAGES {
        let (w, frame) = &frames[i as usize % frames.len()];
        // The shard sends the message it received: build one per send, as a SUB receive would.
        pushes[*w].send(zmq::Message::from(&frame[..]), 0).unwrap();
    }
    for push in &pushes {
        push.send(zmq::Message::new(), 0).unwrap();
    }
    let n: u64 = consumers.into_iter().map(|c| c.join().unwrap()).sum();
    assert_eq!(n, MESSAGES);
    MESSAGES as f64 / start.elapsed().as_secs_f64()
}

fn crossbeam(frames: &[(usize, Vec<u8>)]) -> f64 {
    let mut senders = Vec::new();
    let mut consumers = Vec::new();
    for _ in 0..WORKERS {
        let (tx, rx) = crossbeam_channel::bounded::<Option<zmq::Message>>(HWM);
        senders.push(tx);
        consumers.push(std::thread::spawn(move || {
            let mut n = 0u64;
            while let Ok(Some(msg)) = rx.recv() {
                std::hint::black_box(&msg);
                n += 1;
            }
            n
        }));
    }
    let start = Instant::now();
    for i in 0..MESSAGES {
        let (w, frame) = &frames[i as usize % frames.len()];
        senders[*w]
            .send(Some(zmq::Message::from(&frame[..])))
            .unwrap();
    }
    for tx in &senders {
        tx.send(None).unwrap();
    }
    let n: u64 = consumers.into_iter().map(|c| c.join().unwrap()).sum();
    assert_eq!(n, MESSAGES);
    MESSAGES as f64 / start.elapsed().as_secs_f64()
}

fn main() {
    let frames = frames();
    // Warm up the allocator and libzmq once.
    let _ = zmq_push(&frames, 99);
    for round in 0..5 {
        let z = zmq_push(&frames, round);
        let c = crossbeam(&frames);
        let p = parcels(&frames);
        println!(
            "round {round}: inproc PUSH {:>10.0} msg/s   crossbeam per message {:>10.0} msg/s ({:.2}x)   \
             parcels {:>10.0} msg/s ({:.2}x)",
            z,
            c,
            c / z,
            p,
            p / z
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}
