//! 10/FLP over real sockets: the server checked with a raw ROUTER client, the client agent checked against two
//! servers, one of which dies.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use tickbox_pirates::freelance::{
    run_freelance_server, AgentConfig, FreelanceClient, FreelanceError, ServerStats,
};

type Frames = Vec<Vec<u8>>;

fn f(parts: &[&[u8]]) -> Frames {
    parts.iter().map(|p| p.to_vec()).collect()
}

fn serve(
    ctx: &zmq::Context,
    ep: &str,
    tag: &'static str,
) -> (Arc<AtomicBool>, JoinHandle<ServerStats>) {
    let stop = Arc::new(AtomicBool::new(false));
    let (c, e, s) = (ctx.clone(), ep.to_string(), Arc::clone(&stop));
    let h = std::thread::spawn(move || {
        run_freelance_server(&tickbox_auth::Gate::open(&c), &e, &e, &s, |body| {
            let mut r = vec![tag.as_bytes().to_vec()];
            r.extend(body.iter().cloned());
            r
        })
        .unwrap()
    });
    (stop, h)
}

fn ipc(dir: &tempfile::TempDir, name: &str) -> String {
    format!("ipc://{}/{name}", dir.path().display())
}

#[test]
fn server_identity_ping_pong_and_ccf_echo() {
    let ctx = zmq::Context::new();
    let dir = tempfile::tempdir().unwrap();
    let ep = ipc(&dir, "s1");
    let (stop, h) = serve(&ctx, &ep, "s1");
    let client = ctx.socket(zmq::ROUTER).unwrap();
    client.set_linger(0).unwrap();
    client.set_router_mandatory(true).unwrap();
    client.connect(&ep).unwrap();
    // The server's identity is its endpoint: ROUTER_MANDATORY fails until the handshake completes, then works.
    let mut sent = false;
    for _ in 0..200 {
        if client
            .send_multipart(f(&[ep.as_bytes(), b"PING"]), 0)
            .is_ok()
        {
            sent = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    assert!(sent, "server never became addressable by its endpoint");
    let recv = |s: &zmq::Socket| {
        assert!(s.poll(zmq::POLLIN, 2000).unwrap() > 0);
        s.recv_multipart(0).unwrap()
    };
    assert_eq!(recv(&client), f(&[ep.as_bytes(), b"PONG"]));
    client
        .send_multipart(f(&[ep.as_bytes(), b"\x00\xffccf", b"a", b"b"]), 0)
        .unwrap();
    assert_eq!(
        recv(&client),
        f(&[ep.as_bytes(), b"\x00\xffccf", b"s1", b"a", b"b"]),
        "CCF echoed byte-exact"
    );
    // ref-Py style: an empty frame inside the body is just body.
    client
        .send_multipart(f(&[ep.as_bytes(), b"7", b"", b"x"]), 0)
        .unwrap();
    assert_eq!(recv(&client), f(&[ep.as_bytes(), b"7", b"s1", b"", b"x"]));
    // Malformed: a lone CCF without body is dropped; the server keeps serving.
    client.send_multipart(f(&[ep.as_bytes(), b"9"]), 0).unwrap();
    client
        .send_multipart(f(&[ep.as_bytes(), b"PING"]), 0)
        .unwrap();
    assert_eq!(recv(&client), f(&[ep.as_bytes(), b"PONG"]));
    stop.store(true, Ordering::Relaxed);
    let stats = h.join().unwrap();
    assert_eq!((stats.pings, stats.requests, stats.malformed), (2, 2, 1));
}

#[test]
fn client_agent_fails_over_when_a_server_dies() {
    let ctx = zmq::Context::new();
    let dir = tempfile::tempdir().unwrap();
    let (ea, eb) = (ipc(&dir, "a"), ipc(&dir, "b"));
    let (stop_a, ha) = serve(&ctx, &ea, "A");
    let (stop_b, hb) = serve(&ctx, &eb, "B");
    let cfg = AgentConfig {
        ping_interval: Duration::from_millis(100).into(),
        server_ttl: Duration::from_millis(300).into(),
        request_timeout: Duration::from_millis(2000).into(),
        resend: Duration::from_millis(300).into(),
        ..AgentConfig::default()
    };
    let client = FreelanceClient::new(&ctx, cfg).unwrap();
    client.connect(&ea).unwrap();
    client.connect(&eb).unwrap();
    let first = client.request(&f(&[b"q1"])).unwrap();
    assert_eq!(first[1], b"q1");
    // The agent sends to the first server it knows to be alive; under load B's PONG may beat A's, so fail over
    // from whichever answered.
    let (served, survivor, stop_served, handle_served, stop_other, handle_other) =
        if first[0] == b"A" {
            (b"A", b"B", stop_a, ha, stop_b, hb)
        } else {
            assert_eq!(first[0], b"B", "reply names its server");
            (b"B", b"A", stop_b, hb, stop_a, ha)
        };
    stop_served.store(true, Ordering::Relaxed);
    handle_served.join().unwrap();
    for i in 0..5u8 {
        let r = client.request(&[vec![i]]).unwrap();
        assert_eq!(r, vec![survivor.to_vec(), vec![i]], "after {served:?} died");
    }
    stop_other.store(true, Ordering::Relaxed);
    handle_other.join().unwrap();
    assert!(matches!(
        client.request(&f(&[b"lost"])),
        Err(FreelanceError::Failed)
    ));
}
