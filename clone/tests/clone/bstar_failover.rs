//! Binary Star Clone pair over real sockets: the primary's thread (owning its sockets) is stopped while clients
//! update at a steady rate; the backup takes over on the clients' vote, nothing acknowledged is lost, every client
//! converges on the same map, and a restarted primary comes back passive (no failback, no dual actives).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tickbox_bstar::{BstarConfig, BstarEndpoints, Role, State};
use tickbox_clone::{
    ClientConfig, CloneClient, CloneServer, HaOptions, ServerBind, ServerConfig, ServerEndpoints,
    ServerOptions,
};

fn eps(dir: &std::path::Path, name: &str) -> ServerEndpoints {
    let p = |s: &str| format!("ipc://{}/{name}-{s}", dir.display());
    ServerEndpoints {
        snapshot: p("snap"),
        publisher: p("pub"),
        collector: p("col"),
    }
}

struct Pair {
    primary: ServerEndpoints,
    backup: ServerEndpoints,
    primary_state: String,
    backup_state: String,
}

fn options(pair: &Pair, role: Role) -> ServerOptions {
    let (me, peer, my_state, peer_state) = match role {
        Role::Primary => (
            &pair.primary,
            &pair.backup,
            &pair.primary_state,
            &pair.backup_state,
        ),
        Role::Backup => (
            &pair.backup,
            &pair.primary,
            &pair.backup_state,
            &pair.primary_state,
        ),
    };
    ServerOptions {
        bind: ServerBind::Explicit(me.clone()),
        ha: Some(HaOptions {
            role,
            state: BstarEndpoints {
                state_bind: my_state.clone(),
                state_peer: peer_state.clone(),
            },
            peer: peer.clone(),
            bstar: BstarConfig {
                heartbeat: std::time::Duration::from_millis(100).into(),
                expiry_heartbeats: 2,
            },
        }),
        config: ServerConfig {
            hugz: Duration::from_millis(100).into(),
            ttl_sweep: Duration::from_millis(50).into(),
            ..ServerConfig::default()
        },
        data_dir: None,
    }
}

fn client_config() -> ClientConfig {
    ClientConfig {
        // Must exceed the Binary Star peer expiry (200 ms) so the backup accepts the vote.
        server_ttl: Duration::from_millis(600).into(),
        subscribe_wait: Duration::from_millis(200).into(),
        resend: Duration::from_millis(200).into(),
        ..ClientConfig::default()
    }
}

use tickbox_testkit::wait_for as wait_until;

#[test]
fn primary_killed_under_load_backup_takes_over_nothing_acknowledged_lost_no_failback() {
    let dir = tempfile::tempdir().unwrap();
    let pair = Pair {
        primary: eps(dir.path(), "primary"),
        backup: eps(dir.path(), "backup"),
        primary_state: format!("ipc://{}/primary-state", dir.path().display()),
        backup_state: format!("ipc://{}/backup-state", dir.path().display()),
    };
    let ctx = zmq::Context::new();
    let primary = CloneServer::start(&ctx, options(&pair, Role::Primary)).unwrap();
    let backup = CloneServer::start(&ctx, options(&pair, Role::Backup)).unwrap();
    wait_until("pair settles", Duration::from_secs(5), || {
        primary.state() == State::Active && backup.state() == State::Passive
    });
    let servers = vec![pair.primary.clone(), pair.backup.clone()];

    let watchers: Vec<CloneClient> = (0..2)
        .map(|_| {
            let c = CloneClient::connect(&ctx, &servers, "", client_config()).unwrap();
            c.wait_synced(Duration::from_secs(5)).unwrap();
            c
        })
        .collect();

    // Writers update at a steady rate and record what was acknowledged.
    let stop = Arc::new(AtomicBool::new(false));
    let acked: Arc<Mutex<BTreeMap<String, Vec<u8>>>> = Arc::default();
    let writers: Vec<_> = (0..2)
        .map(|w| {
            let ctx = ctx.clone();
            let servers = servers.clone();
            let stop = stop.clone();
            let acked = acked.clone();
            std::thread::spawn(move || {
                let c = CloneClient::connect(&ctx, &servers, "", client_config()).unwrap();
                c.wait_synced(Duration::from_secs(5)).unwrap();
                let mut i = 0u64;
                let mut failures = 0;
                while !stop.load(Ordering::Relaxed) {
                    let key = format!("/w{w}/{i}");
                    let value = format!("{w}:{i}").into_bytes();
                    match c.set_with_timeout(&key, &value, None, Duration::from_secs(5)) {
                        Ok(_) => {
                            acked.lock().unwrap().insert(key, value);
                        }
                        Err(_) => failures += 1,
                    }
                    i += 1;
                    std::thread::sleep(Duration::from_millis(2));
                }
                (i, failures, c.status().unwrap())
            })
        })
        .collect();

    wait_until("updates flow", Duration::from_secs(5), || {
        acked.lock().unwrap().len() >= 200
    });
    let killed_at = Instant::now();
    let acked_before = acked.lock().unwrap().len();
    primary
        .stop()
        .expect("primary loop ended cleanly (no dual active)");
    wait_until("backup takes over", Duration::from_secs(5), || {
        backup.state() == State::Active
    });
    let takeover = killed_at.elapsed();
    wait_until("updates flow again", Duration::from_secs(10), || {
        acked.lock().unwrap().len() >= acked_before + 200
    });
    let resumed = killed_at.elapsed();
    eprintln!(
        "failover: backup active after {takeover:?}, writers acknowledged again after {resumed:?}"
    );

    // Restart the primary: it must come back PASSIVE and mirror the backup.
    let primary = CloneServer::start(&ctx, options(&pair, Role::Primary)).unwrap();
    wait_until(
        "restarted primary goes passive",
        Duration::from_secs(5),
        || primary.state() == State::Passive,
    );
    wait_until("more updates", Duration::from_secs(10), || {
        acked.lock().unwrap().len() >= acked_before + 400
    });
    stop.store(true, Ordering::Relaxed);
    let mut writer_failovers = 0;
    for w in writers {
        let (sent, failures, status) = w.join().unwrap();
        assert!(sent > 100);
        assert_eq!(failures, 0, "every set was eventually acknowledged");
        assert_eq!(status.server, 1, "writer ended on the backup");
        writer_failovers += status.failovers;
    }
    assert!(writer_failovers >= 2);
    assert_eq!(primary.state(), State::Passive, "no automatic failback");
    assert_eq!(backup.state(), State::Active);
    assert!(
        primary.is_running() && backup.is_running(),
        "neither server hit a dual-active abort"
    );

    // Writers are stopped; let the backup's counters (published at the end of each loop turn) settle.
    std::thread::sleep(Duration::from_millis(200));
    let final_seq = backup.stats().sequence.load(Ordering::Relaxed);
    let fresh = CloneClient::connect(&ctx, &servers, "", client_config()).unwrap();
    fresh.wait_synced(Duration::from_secs(5)).unwrap();
    for c in watchers.iter().chain(std::iter::once(&fresh)) {
        wait_until("client catches up", Duration::from_secs(5), || {
            c.status().unwrap().last_seq >= final_seq
        });
    }
    let maps: Vec<BTreeMap<String, Vec<u8>>> = watchers
        .iter()
        .chain(std::iter::once(&fresh))
        .map(|c| c.list("").unwrap().into_iter().collect())
        .collect();
    assert_eq!(maps[0], maps[2], "watcher 0 == fresh client");
    assert_eq!(maps[1], maps[2], "watcher 1 == fresh client");
    let acked = acked.lock().unwrap();
    let missing: Vec<_> = acked
        .iter()
        .filter(|(k, v)| maps[2].get(*k) != Some(*v))
        .map(|(k, _)| k)
        .collect();
    assert!(
        missing.is_empty(),
        "acknowledged updates missing: {missing:?}"
    );
    for w in &watchers {
        assert_eq!(w.status().unwrap().server, 1);
    }
    // The passive primary mirrors the active backup.
    wait_until("primary mirror complete", Duration::from_secs(5), || {
        primary.stats().keys.load(Ordering::Relaxed) == backup.stats().keys.load(Ordering::Relaxed)
            && primary.stats().sequence.load(Ordering::Relaxed) == final_seq
    });
    drop(fresh);
    drop(watchers);
    primary.stop().unwrap();
    backup.stop().unwrap();
}

#[test]
fn lone_primary_serves_only_after_peer_expiry_and_a_client_vote() {
    let dir = tempfile::tempdir().unwrap();
    let pair = Pair {
        primary: eps(dir.path(), "primary"),
        backup: eps(dir.path(), "backup"),
        primary_state: format!("ipc://{}/primary-state", dir.path().display()),
        backup_state: format!("ipc://{}/backup-state", dir.path().display()),
    };
    let ctx = zmq::Context::new();
    let primary = CloneServer::start(&ctx, options(&pair, Role::Primary)).unwrap();
    // No backup and no client: it stays PRIMARY (never promotes itself on a timer).
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(primary.state(), State::Primary);
    let c = CloneClient::connect(
        &ctx,
        &[pair.primary.clone(), pair.backup.clone()],
        "",
        client_config(),
    )
    .unwrap();
    c.wait_synced(Duration::from_secs(5)).unwrap();
    assert_eq!(primary.state(), State::Active);
    c.set("/x", b"1", None).unwrap();
    drop(c);
    primary.stop().unwrap();
}
