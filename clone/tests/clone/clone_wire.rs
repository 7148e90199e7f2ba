//! Wire-level CHP interop: a test-only client written straight from the 12/CHP frame tables with raw zmq sockets
//! (no tickbox client code), against the tickbox Clone server.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use tickbox_clone::{CloneServer, ServerBind, ServerConfig, ServerOptions};

fn start(ctx: &zmq::Context) -> (CloneServer, u16) {
    let server = CloneServer::start(
        &tickbox_auth::Gate::open(ctx),
        ServerOptions {
            bind: ServerBind::Base {
                interface: "127.0.0.1".into(),
                port: 0,
            },
            ha: None,
            config: ServerConfig {
                hugz: Duration::from_millis(100).into(),
                ttl_sweep: Duration::from_millis(50).into(),
                max_value_len: 64,
                ..ServerConfig::default()
            },
            data_dir: None,
        },
    )
    .unwrap();
    let port = server.base_port().unwrap();
    (server, port)
}

fn sock(ctx: &zmq::Context, kind: zmq::SocketType, ep: &str) -> zmq::Socket {
    let s = ctx.socket(kind).unwrap();
    s.set_linger(0).unwrap();
    s.set_rcvtimeo(3000).unwrap();
    if kind == zmq::SUB {
        s.set_subscribe(b"").unwrap();
    }
    s.connect(ep).unwrap();
    s
}

fn eventually(f: impl Fn() -> bool) {
    tickbox_testkit::wait_for("the condition", Duration::from_secs(2), f);
}

fn seq(frame: &[u8]) -> u64 {
    assert_eq!(frame.len(), 8, "sequence is 8 bytes");
    u64::from_be_bytes(frame.try_into().unwrap())
}

/// Receives on SUB until a non-HUGZ message arrives (asserting HUGZ layout on the way).
fn next_kvpub(sub: &zmq::Socket) -> Vec<Vec<u8>> {
    loop {
        let m = sub.recv_multipart(0).expect("KVPUB in time");
        assert_eq!(m.len(), 5);
        if m[0] == b"HUGZ" {
            assert!(m[4].is_empty());
            continue;
        }
        return m;
    }
}

/// Publishes a KVSET until the subscription has surely been established: PUB drops messages before connecting.
fn connect_pub(ctx: &zmq::Context, ep: &str, sub: &zmq::Socket) -> zmq::Socket {
    let publ = sock(ctx, zmq::PUB, ep);
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let uuid = *uuid::Uuid::new_v4().as_bytes();
        publ.send_multipart([&b"/probe"[..], &[0; 8], &uuid, b"", b"p"], 0)
            .unwrap();
        let until = Instant::now() + Duration::from_millis(200);
        let mut got = false;
        while !got && Instant::now() < until {
            if sub.poll(zmq::POLLIN, 50).unwrap() > 0 {
                got = sub.recv_multipart(0).unwrap()[0] == b"/probe";
            }
        }
        if got {
            return publ;
        }
        assert!(
            Instant::now() < deadline,
            "collector never received a KVSET"
        );
    }
}

#[test]
fn raw_chp_client_interoperates() {
    let ctx = zmq::Context::new();
    let (server, p) = start(&ctx);
    let ep = |n: u16| format!("tcp://127.0.0.1:{}", p + n);
    let sub = sock(&ctx, zmq::SUB, &ep(1));
    // HUGZ: ["HUGZ"][seq][uuid or ""][props][""], arriving about every hugz interval.
    let h = sub.recv_multipart(0).expect("HUGZ");
    assert_eq!(h.len(), 5);
    assert_eq!(h[0], b"HUGZ");
    assert_eq!(seq(&h[1]), 0);
    assert!(h[4].is_empty());
    let publ = connect_pub(&ctx, &ep(2), &sub);

    // KVSET [key][seq=0][uuid][props][value] → KVPUB with a fresh sequence, client's uuid and props kept.
    let uuid = *uuid::Uuid::new_v4().as_bytes();
    publ.send_multipart([&b"/raw/a"[..], &[0; 8], &uuid, b"ttl=30\n", b"hello"], 0)
        .unwrap();
    let m = next_kvpub(&sub);
    assert_eq!(m[0], b"/raw/a");
    let s1 = seq(&m[1]);
    assert_eq!(m[2], uuid);
    assert_eq!(m[3], b"ttl=30\n");
    assert_eq!(m[4], b"hello");
    // A KVSET with empty uuid is accepted by a stand-alone server.
    publ.send_multipart([&b"/raw/b"[..], &[0; 8], b"", b"", b"bee"], 0)
        .unwrap();
    let m = next_kvpub(&sub);
    assert_eq!((m[0].as_slice(), seq(&m[1])), (&b"/raw/b"[..], s1 + 1));
    assert!(m[2].is_empty());
    publ.send_multipart([&b"/other"[..], &[0; 8], b"", b"", b"x"], 0)
        .unwrap();
    let m = next_kvpub(&sub);
    let s3 = seq(&m[1]);
    assert_eq!(s3, s1 + 2);

    // Malformed KVSETs are dropped and counted; the server keeps working.
    publ.send_multipart([&b"/bad"[..], b"x"], 0).unwrap();
    publ.send_multipart([&b"/bad"[..], &[0; 4], b"", b"", b"v"], 0)
        .unwrap();
    publ.send_multipart([&b"/bad"[..], &[0; 8], &[1, 2, 3], b"", b"v"], 0)
        .unwrap();
    publ.send_multipart([&[0xff, 0xfe][..], &[0; 8], b"", b"", b"v"], 0)
        .unwrap();
    // Over the value bound: dropped and counted too.
    publ.send_multipart([&b"/raw/big"[..], &[0; 8], b"", b"", &[b'x'; 65]], 0)
        .unwrap();
    publ.send_multipart([&b"/raw/a"[..], &[0; 8], b"", b"", b""], 0)
        .unwrap();
    let m = next_kvpub(&sub);
    assert_eq!(m[0], b"/raw/a", "next published update is the delete");
    assert_eq!(seq(&m[1]), s3 + 1, "dropped updates consumed no sequence");
    assert!(m[4].is_empty());
    // Counters are published at the end of the server's loop turn, just after the messages.
    eventually(|| server.stats().malformed.load(Ordering::Relaxed) == 4);
    eventually(|| server.stats().dropped.load(Ordering::Relaxed) == 1);

    // ICANHAZ with a subtree: KVSYNC only under it, then KTHXBAI echoing it with the last sequence.
    let dealer = sock(&ctx, zmq::DEALER, &ep(0));
    dealer
        .send_multipart([&b"ICANHAZ?"[..], b"/raw/"], 0)
        .unwrap();
    let m = dealer.recv_multipart(0).unwrap();
    assert_eq!(m.len(), 5);
    assert_eq!(m[0], b"/raw/b");
    assert_eq!(m[4], b"bee");
    let k = dealer.recv_multipart(0).unwrap();
    assert_eq!(k.len(), 5);
    assert_eq!(k[0], b"KTHXBAI");
    assert_eq!(seq(&k[1]), s3 + 1);
    assert_eq!(k[4], b"/raw/");
    // Empty subtree = whole map.
    dealer.send_multipart([&b"ICANHAZ?"[..], b""], 0).unwrap();
    let mut keys = Vec::new();
    loop {
        let m = dealer.recv_multipart(0).unwrap();
        if m[0] == b"KTHXBAI" {
            assert!(m[4].is_empty());
            break;
        }
        keys.push(String::from_utf8(m[0].clone()).unwrap());
    }
    assert_eq!(keys, ["/other", "/probe", "/raw/b"]);
    // Malformed ICANHAZ (missing '?', bad subtree): no answer; a good one still works afterwards.
    dealer.send_multipart([&b"ICANHAZ"[..], b""], 0).unwrap();
    dealer
        .send_multipart([&b"ICANHAZ?"[..], b"raw"], 0)
        .unwrap();
    dealer
        .send_multipart([&b"ICANHAZ?"[..], b"/none/"], 0)
        .unwrap();
    let k = dealer.recv_multipart(0).unwrap();
    assert_eq!(
        (k[0].as_slice(), k[4].as_slice()),
        (&b"KTHXBAI"[..], &b"/none/"[..])
    );
    eventually(|| server.stats().malformed.load(Ordering::Relaxed) == 6);

    // TTL from the raw client: expires, and the server publishes the delete.
    publ.send_multipart([&b"/raw/ttl"[..], &[0; 8], b"", b"ttl=0.2\n", b"v"], 0)
        .unwrap();
    let m = next_kvpub(&sub);
    assert_eq!(m[0], b"/raw/ttl");
    let t = Instant::now();
    let m = next_kvpub(&sub);
    assert_eq!(m[0], b"/raw/ttl");
    assert!(m[4].is_empty(), "expiry publishes an empty value");
    assert!(t.elapsed() >= Duration::from_millis(100));
}

#[test]
fn tickbox_client_reads_state_written_by_a_raw_client() {
    use tickbox_clone::{ClientConfig, CloneClient, ServerEndpoints};
    let ctx = zmq::Context::new();
    let (_server, p) = start(&ctx);
    let sub = sock(&ctx, zmq::SUB, &format!("tcp://127.0.0.1:{}", p + 1));
    let publ = connect_pub(&ctx, &format!("tcp://127.0.0.1:{}", p + 2), &sub);
    publ.send_multipart([&b"/interop/x"[..], &[0; 8], b"", b"", b"42"], 0)
        .unwrap();
    next_kvpub(&sub);
    let config = ClientConfig {
        subscribe_wait: Duration::from_millis(300).into(),
        ..ClientConfig::default()
    };
    let c = CloneClient::connect(
        &ctx,
        &[ServerEndpoints::from_host_port("127.0.0.1", p)],
        "/interop/",
        config,
    )
    .unwrap();
    c.wait_synced(Duration::from_secs(5)).unwrap();
    assert_eq!(c.get("/interop/x").unwrap().as_deref(), Some(&b"42"[..]));
    c.set("/interop/y", b"7", None).unwrap();
    let m = next_kvpub(&sub);
    assert_eq!(
        (m[0].as_slice(), m[4].as_slice()),
        (&b"/interop/y"[..], &b"7"[..])
    );
    assert_eq!(
        m[2].len(),
        16,
        "the tickbox client puts a UUID in every KVSET"
    );
}
