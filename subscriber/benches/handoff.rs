//! The shard → worker hand-off for `dispatch = "by_topic"`: one inproc PUSH per worker (what the Black Box uses)
//! beside one bounded crossbeam channel per worker (both ends in one process), moving the received
//! `zmq::Message` itself. One producer (a shard), three consumers (workers), messages spread by topic.
//!
//! `cargo bench -p tickbox-subscriber --bench handoff` prints messages per second for each, three rounds.

use std::time::{Duration, Instant};

use tickbox_workers::worker_for_topic;

const WORKERS: usize = 3;
const MESSAGES: u64 = 2_000_000;
const HWM: usize = 1_000;

fn frames() -> Vec<(usize, Vec<u8>)> {
    (0..1_000)
        .map(|i| {
            let topic = format!("Q.XNAS.S{i}");
            let mut frame = topic.clone().into_bytes();
            frame.resize(100, 0);
            (worker_for_topic(topic.as_bytes(), WORKERS), frame)
        })
        .collect()
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
    for round in 0..3 {
        let z = zmq_push(&frames, round);
        let c = crossbeam(&frames);
        println!(
            "round {round}: inproc PUSH per worker {:>10.0} msg/s   crossbeam per worker {:>10.0} msg/s   ratio {:.2}",
            z,
            c,
            c / z
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}
