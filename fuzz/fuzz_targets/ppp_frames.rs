//! Paranoid Pirate (PPP): arbitrary multipart input, split into a sequence of messages, fed to the queue's
//! front-end and back-end and to the worker engine. Never a panic.
#![no_main]

use std::time::{Duration, Instant};

use libfuzzer_sys::fuzz_target;
use tickbox_fuzz::split_frames;
use tickbox_pirates::{PppConfig, PppQueue, PppWorkerEngine};

fuzz_target!(|data: &[u8]| {
    let mut now = Instant::now();
    let cfg = PppConfig::default();
    let mut queue = PppQueue::new(cfg.clone(), now);
    let mut worker = PppWorkerEngine::new(&cfg, now);
    worker.connected(now);
    // A 0xFE byte ends one message and starts the next; the first byte of each message picks
    // the side it arrives on.
    for msg in data.split(|&b| b == 0xFE) {
        let Some((&side, rest)) = msg.split_first() else {
            continue;
        };
        let frames = split_frames(rest);
        now += Duration::from_millis(u64::from(side >> 4) * 100);
        match side % 3 {
            0 => queue.handle_frontend(now, frames),
            1 => queue.handle_backend(now, frames),
            _ => worker.handle_input(now, frames),
        }
        queue.handle_timeout(now);
        worker.handle_timeout(now);
        while queue.poll_output().is_some() {}
        while worker.poll_output().is_some() {}
    }
    let _ = queue.stats();
});
