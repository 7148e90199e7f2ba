//! Clone server + CloneClient over real sockets: late joiners, subtrees, TTL, deletes, bounds, persistence.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use tickbox_clone::{
    Change, ClientConfig, CloneClient, CloneServer, ServerBind, ServerConfig, ServerEndpoints,
    ServerOptions,
};

fn server_config() -> ServerConfig {
    ServerConfig {
        hugz: Duration::from_millis(100).into(),
        ttl_sweep: Duration::from_millis(50).into(),
        ..ServerConfig::default()
    }
}

fn client_config() -> ClientConfig {
    ClientConfig {
        server_ttl: Duration::from_millis(2000).into(),
        subscribe_wait: Duration::from_millis(300).into(),
        resend: Duration::from_millis(300).into(),
        ..ClientConfig::default()
    }
}

fn start(ctx: &zmq::Context, config: ServerConfig) -> (CloneServer, ServerEndpoints) {
    let server = CloneServer::start(
        &tickbox_auth::Gate::open(ctx),
        ServerOptions {
            bind: ServerBind::Base {
                interface: "127.0.0.1".into(),
                port: 0,
            },
            ha: None,
            config,
            data_dir: None,
        },
    )
    .expect("server starts");
    let port = server.base_port().expect("base port");
    (server, ServerEndpoints::from_host_port("127.0.0.1", port))
}

fn client(ctx: &zmq::Context, eps: &ServerEndpoints, subtree: &str) -> CloneClient {
    let c = CloneClient::connect(ctx, std::slice::from_ref(eps), subtree, client_config()).unwrap();
    c.wait_synced(Duration::from_secs(5)).expect("client syncs");
    c
}

use tickbox_testkit::wait_for as wait_until;

fn drain(rx: &crossbeam_channel::Receiver<Change>, out: &mut Vec<Change>) {
    while let Ok(c) = rx.try_recv() {
        out.push(c);
    }
}

/// Replays whole-map events (from seq 1) up to and including `upto`.
fn map_at(events: &[Change], upto: u64, prefix: &str) -> BTreeMap<String, Vec<u8>> {
    let mut m = BTreeMap::new();
    for c in events
        .iter()
        .filter(|c| c.seq <= upto && c.key.starts_with(prefix))
    {
        match &c.value {
            Some(v) => m.insert(c.key.clone(), v.clone()),
            None => m.remove(&c.key),
        };
    }
    m
}

fn late_joiner(subtree: &str) {
    let ctx = zmq::Context::new();
    let (server, eps) = start(&ctx, server_config());
    // Reference client: sees every update from sequence 1.
    let reference = client(&ctx, &eps, "");
    let ref_rx = reference.watch("", false).unwrap();
    let writer = client(&ctx, &eps, "");
    writer.set("/s/first", b"x", None).unwrap();

    let total = 20_000u32;
    let mut joiner = None;
    let mut joiner_rx = None;
    for i in 0..total {
        let prefix = if i % 2 == 0 { "/s/" } else { "/t/" };
        let key = format!("{prefix}{}", i % 200);
        // Every 7th update deletes.
        let value = if i % 7 == 3 {
            Vec::new()
        } else {
            format!("v{i}").into_bytes()
        };
        writer.set_nowait(&key, &value, None).unwrap();
        if i == total / 3 {
            // The late joiner connects while updates flow, its watch in place before its snapshot can arrive.
            let (c, rx) = CloneClient::connect_watching(
                &ctx,
                std::slice::from_ref(&eps),
                subtree,
                client_config(),
                "",
            )
            .unwrap();
            joiner_rx = Some(rx);
            joiner = Some(c);
        }
    }
    let last = writer.set(&format!("{subtree}end"), b"end", None).unwrap();
    let joiner = joiner.unwrap();
    let joiner_rx = joiner_rx.unwrap();
    wait_until("clients catch up", Duration::from_secs(10), || {
        joiner.status().unwrap().last_seq >= last && reference.status().unwrap().last_seq >= last
    });
    wait_until("server counters", Duration::from_secs(2), || {
        server
            .stats()
            .sequence
            .load(std::sync::atomic::Ordering::Relaxed)
            == last
    });

    let mut ref_events = Vec::new();
    drain(&ref_rx, &mut ref_events);
    let mut events = Vec::new();
    drain(&joiner_rx, &mut events);
    let status = joiner.status().unwrap();
    assert_eq!(status.syncs, 1, "no re-sync needed");
    let k = status.snapshot_seq;
    assert!(k > 1 && k < last, "joined mid-stream (K={k}, last={last})");

    // The reference client saw every sequence exactly once, in order.
    let ref_seqs: Vec<u64> = ref_events.iter().map(|c| c.seq).collect();
    assert_eq!(ref_seqs, (1..=last).collect::<Vec<_>>());

    // Snapshot = the map at K (restricted to the subtree)...
    let snap: BTreeMap<String, Vec<u8>> = events
        .iter()
        .filter(|c| c.from_snapshot)
        .map(|c| (c.key.clone(), c.value.clone().unwrap()))
        .collect();
    assert_eq!(snap, map_at(&ref_events, k, subtree));
    // ...then every later update under the subtree exactly once, in order.
    let stream: Vec<(u64, String, Option<Vec<u8>>)> = events
        .iter()
        .filter(|c| !c.from_snapshot)
        .map(|c| (c.seq, c.key.clone(), c.value.clone()))
        .collect();
    let expected: Vec<(u64, String, Option<Vec<u8>>)> = ref_events
        .iter()
        .filter(|c| c.seq > k && c.key.starts_with(subtree))
        .map(|c| (c.seq, c.key.clone(), c.value.clone()))
        .collect();
    assert_eq!(stream.len(), expected.len());
    assert!(
        stream == expected,
        "joiner stream differs from the reference"
    );
    // And the final maps agree.
    let final_map: BTreeMap<String, Vec<u8>> = joiner.list("").unwrap().into_iter().collect();
    assert_eq!(final_map, map_at(&ref_events, last, subtree));
}

#[test]
fn late_joiner_gets_consistent_snapshot_and_every_update_once_whole_map() {
    late_joiner("");
}

#[test]
fn late_joiner_gets_consistent_snapshot_and_every_update_once_subtree() {
    late_joiner("/s/");
}

#[test]
fn empty_value_deletes_on_every_client() {
    let ctx = zmq::Context::new();
    let (_server, eps) = start(&ctx, server_config());
    let a = client(&ctx, &eps, "");
    let b = client(&ctx, &eps, "/k/");
    let b_rx = b.watch("/k/", false).unwrap();
    let s1 = a.set("/k/x", b"1", None).unwrap();
    wait_until("b sees set", Duration::from_secs(5), || {
        b.get("/k/x").unwrap().is_some()
    });
    let s2 = a.delete("/k/x").unwrap();
    assert!(s2 > s1);
    assert_eq!(a.get("/k/x").unwrap(), None);
    wait_until("b sees delete", Duration::from_secs(5), || {
        b.get("/k/x").unwrap().is_none()
    });
    let changes: Vec<Change> = b_rx.try_iter().collect();
    assert_eq!(changes.len(), 2);
    assert_eq!(changes[1].value, None);
    assert_eq!(changes[1].seq, s2);
    // A late joiner does not see the deleted key at all.
    let c = client(&ctx, &eps, "");
    assert_eq!(c.get("/k/x").unwrap(), None);
    assert!(c.list("/k/").unwrap().is_empty());
}

#[test]
fn ttl_expiry_deletes_on_every_client() {
    let ctx = zmq::Context::new();
    let (server, eps) = start(&ctx, server_config());
    let a = client(&ctx, &eps, "");
    let b = client(&ctx, &eps, "/ttl/");
    let a_rx = a.watch("/ttl/", false).unwrap();
    let b_rx = b.watch("/ttl/", false).unwrap();
    let t0 = Instant::now();
    a.set("/ttl/short", b"v", Some(Duration::from_millis(300)))
        .unwrap();
    a.set("/ttl/forever", b"v", None).unwrap();
    wait_until("b sees the key", Duration::from_secs(5), || {
        b.get("/ttl/short").unwrap().is_some()
    });
    wait_until("expiry reaches a", Duration::from_secs(5), || {
        a.get("/ttl/short").unwrap().is_none()
    });
    wait_until("expiry reaches b", Duration::from_secs(5), || {
        b.get("/ttl/short").unwrap().is_none()
    });
    assert!(
        t0.elapsed() >= Duration::from_millis(300),
        "not expired early"
    );
    assert_eq!(b.get("/ttl/forever").unwrap().as_deref(), Some(&b"v"[..]));
    for rx in [&a_rx, &b_rx] {
        let deletes: Vec<Change> = rx.try_iter().filter(|c| c.value.is_none()).collect();
        assert_eq!(deletes.len(), 1);
        assert_eq!(deletes[0].key, "/ttl/short");
    }
    wait_until("server key count", Duration::from_secs(2), || {
        server
            .stats()
            .keys
            .load(std::sync::atomic::Ordering::Relaxed)
            == 1
    });
}

#[test]
fn membership_lease_stays_while_refreshed_and_leaves_on_drop() {
    use tickbox_clone::recipes::{members, Membership};
    let ctx = zmq::Context::new();
    let (server, eps) = start(&ctx, server_config());
    let observer = client(&ctx, &eps, "");
    let member_client = client(&ctx, &eps, "");
    let m = Membership::join(
        &member_client,
        "subscribers",
        "nic0",
        b"10.0.0.1",
        Duration::from_millis(300),
    )
    .unwrap();
    assert_eq!(m.key(), "/members/subscribers/nic0");
    wait_until("member visible", Duration::from_secs(5), || {
        members(&observer, "subscribers").unwrap().len() == 1
    });
    // Several TTLs later it is still there: the agent refreshes it (every third of the TTL, each refresh a new
    // sequence), nine times here.
    let sequence = || {
        server
            .stats()
            .sequence
            .load(std::sync::atomic::Ordering::Relaxed)
    };
    let joined = sequence();
    wait_until("nine refreshes", Duration::from_secs(10), || {
        sequence() >= joined + 9
    });
    let list = members(&observer, "subscribers").unwrap();
    assert_eq!(list.len(), 1);
    assert_eq!(
        (list[0].id.as_str(), list[0].info.as_slice()),
        ("nic0", &b"10.0.0.1"[..])
    );
    drop(m);
    wait_until("member gone", Duration::from_secs(5), || {
        members(&observer, "subscribers").unwrap().is_empty()
    });
}

#[test]
fn config_watch_delivers_current_then_parsed_changes() {
    use tickbox_clone::recipes::{ConfigEvent, ConfigWatch};
    let ctx = zmq::Context::new();
    let (_server, eps) = start(&ctx, server_config());
    let admin = client(&ctx, &eps, "");
    admin
        .set("/config/snail/max_lateness_ms", b"1000", None)
        .unwrap();
    let node = client(&ctx, &eps, "");
    wait_until("node has config", Duration::from_secs(5), || {
        node.get("/config/snail/max_lateness_ms").unwrap().is_some()
    });
    let parse = |v: &[u8]| {
        std::str::from_utf8(v)
            .map_err(|e| e.to_string())?
            .parse::<u64>()
            .map_err(|e| e.to_string())
    };
    let watch = ConfigWatch::new(&node, "snail/", parse).unwrap();
    let t = Duration::from_secs(5);
    assert_eq!(
        watch.recv_timeout(t),
        Some(ConfigEvent::Set {
            key: "max_lateness_ms".into(),
            value: 1000
        })
    );
    admin
        .set("/config/snail/max_lateness_ms", b"250", None)
        .unwrap();
    assert_eq!(
        watch.recv_timeout(t),
        Some(ConfigEvent::Set {
            key: "max_lateness_ms".into(),
            value: 250
        })
    );
    admin
        .set("/config/snail/max_lateness_ms", b"soon", None)
        .unwrap();
    assert!(matches!(
        watch.recv_timeout(t),
        Some(ConfigEvent::Invalid { .. })
    ));
    admin.delete("/config/snail/max_lateness_ms").unwrap();
    assert_eq!(
        watch.recv_timeout(t),
        Some(ConfigEvent::Deleted {
            key: "max_lateness_ms".into()
        })
    );
    admin.set("/config/other/x", b"1", None).unwrap();
    assert_eq!(
        watch.recv_timeout(Duration::from_millis(300)),
        None,
        "other prefixes are not delivered"
    );
}

#[test]
fn oversized_updates_are_dropped_and_counted() {
    let ctx = zmq::Context::new();
    let config = ServerConfig {
        max_value_len: 16,
        max_key_len: 16,
        max_keys: 3,
        ..server_config()
    };
    let (server, eps) = start(&ctx, config);
    let a = client(&ctx, &eps, "");
    let quick = Duration::from_millis(500);
    assert!(a
        .set_with_timeout("/big", &[b'x'; 17], None, quick)
        .is_err());
    assert!(a
        .set_with_timeout("/a-very-long-key-indeed", b"v", None, quick)
        .is_err());
    a.set("/1", b"v", None).unwrap();
    a.set("/2", b"v", None).unwrap();
    a.set("/3", b"v", None).unwrap();
    assert!(a.set_with_timeout("/4", b"v", None, quick).is_err());
    a.set("/3", b"w", None).unwrap();
    let dropped = server
        .stats()
        .dropped
        .load(std::sync::atomic::Ordering::Relaxed);
    // Each rejected update was resent once or more by the client; every copy is dropped and counted.
    assert!(dropped >= 3, "dropped = {dropped}");
    assert_eq!(a.list("").unwrap().len(), 3);
}

#[test]
fn persistence_survives_restart_and_sequence_continues() {
    let ctx = zmq::Context::new();
    let dir = tempfile::tempdir().unwrap();
    let options = |port: u16| ServerOptions {
        bind: ServerBind::Base {
            interface: "127.0.0.1".into(),
            port,
        },
        ha: None,
        config: server_config(),
        data_dir: Some(dir.path().to_owned()),
    };
    let server = CloneServer::start(&tickbox_auth::Gate::open(&ctx), options(0)).unwrap();
    let port = server.base_port().unwrap();
    let eps = ServerEndpoints::from_host_port("127.0.0.1", port);
    let last = {
        let a = client(&ctx, &eps, "");
        a.set("/p/a", b"1", None).unwrap();
        a.set("/p/b", b"2", None).unwrap();
        a.delete("/p/a").unwrap()
    };
    server.stop().unwrap();
    // libzmq closes listeners asynchronously (reaper thread): retry the rebind briefly.
    let deadline = Instant::now() + Duration::from_secs(5);
    let server = loop {
        match CloneServer::start(&tickbox_auth::Gate::open(&ctx), options(port)) {
            Ok(s) => break s,
            Err(err) if Instant::now() < deadline => {
                eprintln!("rebind: {err}");
                std::thread::sleep(Duration::from_millis(50));
            }
            Err(err) => panic!("restart failed: {err}"),
        }
    };
    let b = client(&ctx, &eps, "");
    assert_eq!(
        b.list("").unwrap(),
        vec![("/p/b".to_string(), b"2".to_vec())]
    );
    assert_eq!(b.status().unwrap().snapshot_seq, last);
    assert_eq!(b.set("/p/c", b"3", None).unwrap(), last + 1);
    drop(b);
    server.stop().unwrap();
}
