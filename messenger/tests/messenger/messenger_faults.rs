//! The callback messenger over real sockets with injected loss and duplication: every handler and every reply
//! callback runs exactly once per message, and nothing stays unacknowledged.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tickbox_messenger::{Messenger, MessengerConfig};

fn lossy(seed: u64) -> MessengerConfig {
    MessengerConfig {
        retry: Duration::from_millis(20).into(),
        drop_probability: 0.3,
        duplicate_probability: 0.3,
        fault_seed: seed,
        ..Default::default()
    }
}

#[test]
fn every_handler_and_reply_runs_exactly_once_under_drop_and_duplication() {
    let ctx = zmq::Context::new();
    let server = Messenger::new(&ctx, lossy(1)).unwrap();
    let handled: Arc<Mutex<HashMap<u32, u32>>> = Arc::default();
    let h = Arc::clone(&handled);
    let endpoint = server
        .listen("tcp://127.0.0.1:*", move |body| {
            let n = u32::from_be_bytes(body[0].clone().try_into().unwrap());
            *h.lock().unwrap().entry(n).or_default() += 1;
            Some(vec![(n * 2).to_be_bytes().to_vec()])
        })
        .unwrap();
    let client = Messenger::new(&ctx, lossy(2)).unwrap();
    let replies: Arc<Mutex<HashMap<u32, Vec<u32>>>> = Arc::default();
    const N: u32 = 300;
    for n in 0..N {
        let r = Arc::clone(&replies);
        client
            .send(&endpoint, vec![n.to_be_bytes().to_vec()], move |reply| {
                let v = u32::from_be_bytes(reply[0].clone().try_into().unwrap());
                r.lock().unwrap().entry(n).or_default().push(v);
            })
            .unwrap();
    }
    let end = Instant::now() + Duration::from_secs(15);
    while replies.lock().unwrap().len() < N as usize || client.pending() > 0 || server.pending() > 0
    {
        assert!(
            Instant::now() < end,
            "not all replies arrived / acknowledged"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let handled = handled.lock().unwrap();
    assert_eq!(handled.len(), N as usize);
    assert!(handled.values().all(|&c| c == 1), "a handler ran twice");
    let replies = replies.lock().unwrap();
    for n in 0..N {
        assert_eq!(replies[&n], vec![n * 2], "reply callback for {n}");
    }
    let (_, server_dups, _) = server.counters();
    let (_, client_dups, client_retries) = client.counters();
    assert!(
        server_dups > 0 && client_dups > 0 && client_retries > 0,
        "faults were actually injected"
    );
}

#[test]
fn one_way_messages_to_a_listener_that_starts_late_are_delivered_once() {
    let ctx = zmq::Context::new();
    let dir = tempfile::tempdir().unwrap();
    let endpoint = format!("ipc://{}/late.sock", dir.path().display());
    let client = Messenger::new(
        &ctx,
        MessengerConfig {
            retry: Duration::from_millis(30).into(),
            ..Default::default()
        },
    )
    .unwrap();
    for n in 0..20u8 {
        client.send_oneway(&endpoint, vec![vec![n]]).unwrap();
    }
    // Several rounds of retries went out to nobody.
    tickbox_testkit::wait_for("three rounds of retries", Duration::from_secs(10), || {
        client.counters().2 >= 3 * 20
    });
    assert_eq!(
        client.pending(),
        20,
        "nothing is acknowledged while nobody listens"
    );
    let server = Messenger::new(&ctx, MessengerConfig::default()).unwrap();
    let seen: Arc<Mutex<Vec<u8>>> = Arc::default();
    let s = Arc::clone(&seen);
    server
        .listen(&endpoint, move |b| {
            s.lock().unwrap().push(b[0][0]);
            None
        })
        .unwrap();
    tickbox_testkit::wait_for(
        "every pending message to be acknowledged",
        Duration::from_secs(10),
        || client.pending() == 0,
    );
    let mut got = seen.lock().unwrap().clone();
    got.sort_unstable();
    assert_eq!(got, (0..20).collect::<Vec<u8>>());
}

#[test]
fn listen_on_a_bad_endpoint_is_an_error() {
    let ctx = zmq::Context::new();
    let m = Messenger::new(&ctx, MessengerConfig::default()).unwrap();
    assert!(m.listen("nonsense://x", |_| None).is_err());
    // The I/O thread survives the error.
    assert!(m.listen("tcp://127.0.0.1:*", |_| None).is_ok());
}
