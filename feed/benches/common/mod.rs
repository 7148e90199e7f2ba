//! What the feed's benches share.

use std::thread::JoinHandle;

/// A SUB in its own context (as a separate process would have its own I/O thread), subscribed to everything,
/// counting data frames (not heartbeats) until `expect` arrived or nothing came for `quiet_ms` after the first
/// (5 s before it). `receive_hwm`: the socket's `ZMQ_RCVHWM`, libzmq's default when `None`.
pub(crate) fn counting_sub(
    endpoint: String,
    expect: u64,
    receive_hwm: Option<i32>,
    quiet_ms: i32,
) -> JoinHandle<u64> {
    std::thread::spawn(move || {
        let ctx = zmq::Context::new();
        let sub = ctx.socket(zmq::SUB).unwrap();
        sub.set_linger(0).unwrap();
        if let Some(hwm) = receive_hwm {
            sub.set_rcvhwm(hwm).unwrap();
        }
        sub.set_rcvtimeo(5_000).unwrap();
        sub.connect(&endpoint).unwrap();
        sub.set_subscribe(b"").unwrap();
        let mut msg = zmq::Message::new();
        let mut count = 0u64;
        while count < expect {
            if sub.recv(&mut msg, 0).is_err() {
                break;
            }
            if msg.first() != Some(&b'H') {
                count += 1;
            }
            if count == 1 {
                sub.set_rcvtimeo(quiet_ms).unwrap();
            }
        }
        count
    })
}

/// Binds `xpub` to a loopback port, starts `reader` on that endpoint, and returns the reader once its
/// subscription has reached the XPUB (timing starts only when someone is listening).
pub(crate) fn attach_reader(
    xpub: &zmq::Socket,
    reader: impl FnOnce(String) -> JoinHandle<u64>,
) -> JoinHandle<u64> {
    let endpoint = tickbox_zmqx::bind_resolved(xpub, "tcp://127.0.0.1:*").unwrap();
    let sub = reader(endpoint);
    xpub.set_rcvtimeo(5_000).unwrap();
    xpub.recv_bytes(0).expect("subscription");
    sub
}
