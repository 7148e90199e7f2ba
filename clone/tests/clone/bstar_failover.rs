//! Binary Star Clone pair over real sockets: the primary's thread (owning its sockets) is stopped while clients
//! update at a steady rate; the backup takes over on the clients' vote, nothing acknowledged is lost, every client
//! converges on the same map, and a restarted primary comes back passive (no failback, no dual actives).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tickbox_bstar::{BstarConfig, BstarEndpoints, Role, State, Transition};
use tickbox_clone::{
    ClientConfig, CloneClient, CloneServer, HaOptions, KvMsg, ServerBind, ServerConfig,
    ServerEndpoints, ServerOptions,
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
    let primary = CloneServer::start(
        &tickbox_auth::Gate::open(&ctx),
        options(&pair, Role::Primary),
    )
    .unwrap();
    let backup = CloneServer::start(
        &tickbox_auth::Gate::open(&ctx),
        options(&pair, Role::Backup),
    )
    .unwrap();
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
    let primary = CloneServer::start(
        &tickbox_auth::Gate::open(&ctx),
        options(&pair, Role::Primary),
    )
    .unwrap();
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
    let primary = CloneServer::start(
        &tickbox_auth::Gate::open(&ctx),
        options(&pair, Role::Primary),
    )
    .unwrap();
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

/// One server of the simulated pair: the Binary Star engine and the Clone engine, wired as `server_loop` wires
/// them, with no sockets between them.
struct SimServer {
    star: tickbox_bstar::BinaryStar,
    engine: tickbox_clone::engine::server::ServerEngine,
    alive: bool,
}

impl SimServer {
    fn start(role: Role, now: Instant) -> SimServer {
        SimServer {
            star: tickbox_bstar::BinaryStar::new(role, &sim_bstar(), now),
            engine: tickbox_clone::engine::server::ServerEngine::new(
                ServerConfig {
                    hugz: Duration::from_millis(100).into(),
                    ttl_sweep: Duration::from_millis(50).into(),
                    ..ServerConfig::default()
                },
                false,
                now,
            ),
            alive: true,
        }
    }

    /// What `server_loop` does on a Binary Star transition.
    fn transition(&mut self, now: Instant, t: Transition, peer: Option<&SimServer>) {
        match t {
            Transition::BecameActive => self.engine.become_active(now),
            Transition::BecamePassive => {
                self.engine.become_passive();
                // The mirror sync: ICANHAZ "" to the active peer, its snapshot back.
                if let Some(peer) = peer.filter(|p| p.alive) {
                    for m in peer.engine.snapshot("") {
                        self.engine.handle_peer_snapshot(now, m.clone());
                    }
                    self.engine
                        .handle_peer_snapshot(now, peer.engine.kthxbai(""));
                }
            }
            Transition::None => {}
        }
    }

    /// An ICANHAZ on the snapshot ROUTER: the client's vote first, then (if served) the snapshot of `subtree`.
    fn icanhaz(&mut self, now: Instant, subtree: &str) -> Option<Vec<KvMsg>> {
        if !self.alive {
            return None;
        }
        let (vote, t) = self.star.handle_client_request(now);
        self.transition(now, t, None);
        (vote == tickbox_bstar::Vote::Accept).then(|| {
            let mut reply: Vec<KvMsg> = self.engine.snapshot(subtree).cloned().collect();
            reply.push(self.engine.kthxbai(subtree));
            reply
        })
    }
}

/// The Binary Star timing of `options`: heartbeat 100 ms, peer expiry 200 ms.
fn sim_bstar() -> BstarConfig {
    BstarConfig {
        heartbeat: Duration::from_millis(100).into(),
        expiry_heartbeats: 2,
    }
}

/// One loop turn of every live engine at `now`, wired as the socket loops wire them; `write` is one update the
/// client's update PUB sends to every collector. Returns the messages published, with the server that published.
fn sim_turn(
    servers: &mut [SimServer; 2],
    client: &mut tickbox_clone::engine::client::ClientEngine,
    changes: &mut Vec<tickbox_clone::Change>,
    now: Instant,
    write: Option<KvMsg>,
) -> Vec<(usize, KvMsg)> {
    use tickbox_clone::engine::client::{ClientAction, VOTE_SUBTREE};
    use tickbox_clone::engine::server::KvsetOutcome;
    let mut published = Vec::new();
    // Binary Star heartbeats, delivered to the peer when both ends are alive.
    for i in 0..2 {
        if !servers[i].alive {
            continue;
        }
        servers[i].star.handle_timeout(now);
        while let Some(frame) = servers[i].star.poll_output() {
            let j = 1 - i;
            if !servers[j].alive {
                continue;
            }
            let t = servers[j]
                .star
                .handle_peer_frame(now, frame)
                .expect("no dual active or dual passive");
            let (a, b) = servers.split_at_mut(1);
            let (me, peer) = if j == 0 {
                (&mut a[0], &b[0])
            } else {
                (&mut b[0], &a[0])
            };
            me.transition(now, t, Some(peer));
        }
    }
    if let Some(msg) = write {
        for (i, s) in servers.iter_mut().enumerate().filter(|(_, s)| s.alive) {
            if let KvsetOutcome::Published(m) = s.engine.handle_kvset(now, msg.clone()) {
                published.push((i, m));
            }
        }
    }
    for (i, s) in servers.iter_mut().enumerate().filter(|(_, s)| s.alive) {
        s.engine.handle_timeout(now);
        while let Some(m) = s.engine.poll_output() {
            published.push((i, m));
        }
    }
    // A server's publisher feeds its peer's mirror and the client's SUB (when the client listens to it).
    for (from, m) in &published {
        if servers[1 - from].alive {
            servers[1 - from].engine.handle_peer_kvpub(now, m.clone());
        }
        if client.current_server() == *from {
            client.handle_update(now, m.clone(), changes);
        }
    }
    client.handle_timeout(now);
    while let Some(action) = client.poll_output() {
        let server = &mut servers[client.current_server()];
        match action {
            ClientAction::Connect(_) => {}
            // The reply to a vote is not a snapshot the client asked for; it ignores it.
            ClientAction::Vote => drop(server.icanhaz(now, VOTE_SUBTREE)),
            ClientAction::SendIcanhaz => {
                for m in server.icanhaz(now, "").unwrap_or_default() {
                    client.handle_snapshot(now, m, changes);
                }
            }
        }
    }
    published
}

/// The scenario of `primary_killed_under_load_backup_takes_over_nothing_acknowledged_lost_no_failback` with the
/// engines alone on simulated time: Binary Star state frames, CHP updates and snapshots pass between the engines
/// in memory while a synthetic clock moves in 10 ms steps, so the heartbeat expiry, the client's silence timeout,
/// its vote and the takeover happen at instants this test can state exactly, and 20 simulated seconds take
/// milliseconds of real time.
#[test]
fn failover_on_simulated_time_engines_alone() {
    const STEP: Duration = Duration::from_millis(10);
    let t0 = Instant::now();
    let mut now = t0;
    let mut servers = [
        SimServer::start(Role::Primary, now),
        SimServer::start(Role::Backup, now),
    ];
    let mut client = tickbox_clone::engine::client::ClientEngine::new(client_config(), 2, "", now);
    let mut changes = Vec::new();
    let mut acked: BTreeMap<String, Vec<u8>> = BTreeMap::new();
    let mut next_key = 0u64;
    let mut killed_at = None;
    let mut backup_active_at = None;
    let mut restarted = false;

    while now < t0 + Duration::from_secs(20) {
        now += STEP;
        let elapsed = now - t0;
        // The writer updates every turn from 1 s on, and stops 2 s before the end so the last updates settle.
        let write =
            (elapsed >= Duration::from_secs(1) && elapsed < Duration::from_secs(18)).then(|| {
                next_key += 1;
                let mut m =
                    KvMsg::new(format!("/w/{next_key}"), 0, next_key.to_le_bytes().to_vec());
                m.uuid = Some(u128::from(next_key).to_be_bytes());
                m
            });
        for (_, m) in sim_turn(&mut servers, &mut client, &mut changes, now, write) {
            if !m.is_delete() && m.key.starts_with("/w/") {
                acked.insert(m.key.clone(), m.value.clone());
            }
        }
        if elapsed == Duration::from_secs(5) {
            assert_eq!(servers[0].star.state(), State::Active);
            assert_eq!(servers[1].star.state(), State::Passive);
            assert!(client.is_live() && client.current_server() == 0);
            servers[0].alive = false;
            killed_at = Some(now);
        }
        if backup_active_at.is_none() && servers[1].star.state() == State::Active {
            backup_active_at = Some(now);
        }
        if elapsed == Duration::from_secs(10) {
            // The primary comes back: it must go passive and mirror the backup, never fail back.
            servers[0] = SimServer::start(Role::Primary, now);
            restarted = true;
        }
        if restarted {
            assert_ne!(servers[0].star.state(), State::Active, "no failback");
        }
    }

    let takeover = backup_active_at.expect("the backup took over") - killed_at.unwrap();
    // The client hears nothing for `server_ttl` (600 ms), fails over and votes 50 ms later; the backup's peer has
    // been silent far longer than its 200 ms expiry by then, so that vote is the takeover.
    let expected = Duration::from_millis(650);
    assert!(
        takeover >= expected - STEP && takeover <= expected + 2 * STEP,
        "takeover after {takeover:?}, expected about {expected:?}"
    );
    assert_eq!(servers[0].star.state(), State::Passive);
    assert_eq!(servers[1].star.state(), State::Active);
    assert!(client.is_live());
    assert_eq!(client.current_server(), 1);
    assert_eq!(client.stats().failovers, 1);
    assert!(acked.len() > 1_500, "updates flowed: {}", acked.len());
    // Nothing acknowledged is lost: the new active, its mirror (the restarted primary) and the client all hold it.
    for (key, value) in &acked {
        assert_eq!(
            servers[1].engine.get(key).map(|m| &m.value),
            Some(value),
            "{key} on the backup"
        );
        assert_eq!(
            servers[0].engine.get(key).map(|m| &m.value),
            Some(value),
            "{key} on the mirror"
        );
        assert_eq!(
            client.get(key).map(|e| &e.value),
            Some(value),
            "{key} at the client"
        );
    }
    assert!(
        changes.iter().any(|c| c.from_snapshot),
        "the client re-synchronised from the backup"
    );
}
