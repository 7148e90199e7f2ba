//! A ZAP handler whose answers a test scripts: the publisher side of a refused handshake, without `[security]`.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

/// A ZAP handler whose status for each handshake a test chooses. Stopped and joined on drop.
pub struct ScriptedZap {
    stop: Arc<AtomicBool>,
    asked: Arc<AtomicU64>,
    thread: Option<JoinHandle<()>>,
}

impl ScriptedZap {
    /// Starts the handler in `ctx` (which then asks it about every handshake on a socket with a ZAP domain):
    /// the `n`th request (from 0) is answered with `status(n)` (`200` lets the peer in; anything else refuses it).
    pub fn start(ctx: &zmq::Context, status: impl Fn(u64) -> u16 + Send + 'static) -> ScriptedZap {
        let zap = ctx.socket(zmq::REP).expect("ZAP socket");
        zap.set_linger(0).unwrap();
        zap.bind("inproc://zeromq.zap.01")
            .expect("a ZAP handler already runs in this context");
        let stop = Arc::new(AtomicBool::new(false));
        let asked = Arc::new(AtomicU64::new(0));
        let thread = {
            let (stop, asked) = (Arc::clone(&stop), Arc::clone(&asked));
            std::thread::spawn(move || {
                // Bounded waits, so a stop is seen within 20 ms.
                while !stop.load(Ordering::Relaxed) {
                    if zap.poll(zmq::POLLIN, 20).unwrap_or(0) == 0 {
                        continue;
                    }
                    let Ok(request) = zap.recv_multipart(0) else {
                        continue;
                    };
                    let code = status(asked.fetch_add(1, Ordering::Relaxed)).to_string();
                    let request_id = request.get(1).map_or(&[][..], Vec::as_slice);
                    let reply: [&[u8]; 6] = [b"1.0", request_id, code.as_bytes(), b"", b"", b""];
                    let _ = zap.send_multipart(reply, 0);
                }
            })
        };
        ScriptedZap {
            stop,
            asked,
            thread: Some(thread),
        }
    }

    /// Handshakes it has been asked about so far.
    pub fn asked(&self) -> u64 {
        self.asked.load(Ordering::Relaxed)
    }
}

impl Drop for ScriptedZap {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
