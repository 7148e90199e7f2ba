//! Binary Star Clone pair over real sockets: the primary's thread (owning its sockets) is stopped while clients
//! update at a steady rate; the backup takes over on the clients' vote, nothing acknowledged is lost, every client
//! converges on the same map, and a restarted primary comes back passive (no failback, no dual actives).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tickbox_bstar::{BstarConfig, BstarEndpoints, Role, State, Transition};
use tickbox_clone::{
    ClientConfig, CloneClient, CloneServer, HaOptions, KvMsg, ServerBind, ServerConfig,
    ServerEndpoints, ServerOptions,
};
use tickbox_testkit::sim::{Node, Outbox, Sim};

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

    // Writers update at a steady rate and record what was acknowledged (and the last sequence acknowledged).
    let stop = Arc::new(AtomicBool::new(false));
    let acked: Arc<Mutex<BTreeMap<String, Vec<u8>>>> = Arc::default();
    let last_acked = Arc::new(AtomicU64::new(0));
    let writers: Vec<_> = (0..2)
        .map(|w| {
            let ctx = ctx.clone();
            let servers = servers.clone();
            let stop = stop.clone();
            let acked = acked.clone();
            let last_acked = last_acked.clone();
            std::thread::spawn(move || {
                let c = CloneClient::connect(&ctx, &servers, "", client_config()).unwrap();
                c.wait_synced(Duration::from_secs(5)).unwrap();
                let mut i = 0u64;
                let mut failures = 0;
                while !stop.load(Ordering::Relaxed) {
                    let key = format!("/w{w}/{i}");
                    let value = format!("{w}:{i}").into_bytes();
                    match c.set_with_timeout(&key, &value, None, Duration::from_secs(5)) {
                        Ok(sequence) => {
                            acked.lock().unwrap().insert(key, value);
                            last_acked.fetch_max(sequence, Ordering::Relaxed);
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

    // Writers are stopped; the backup's counters are published at the end of each loop turn, so wait until they
    // show the last update acknowledged.
    let last_acked = last_acked.load(Ordering::Relaxed);
    wait_until(
        "the backup's counters to settle",
        Duration::from_secs(5),
        || backup.stats().sequence.load(Ordering::Relaxed) >= last_acked,
    );
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
    // No backup and no client: it stays PRIMARY (never promotes itself on a timer), however many heartbeats (and
    // peer expiries, two heartbeats each) go by: five here.
    let mut beats = 0;
    assert!(tickbox_testkit::await_published(
        &ctx,
        &pair.primary_state,
        Duration::from_secs(5),
        |frame| {
            beats += usize::from(frame == State::Primary.wire());
            beats == 5
        }
    ));
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

/// What passes between the simulated servers and client, as the sockets of `server_loop` and `CloneClient`
/// carry it.
#[derive(Debug)]
enum Wire {
    /// A Binary Star state frame (state PUB to the peer's SUB).
    State(&'static [u8]),
    /// An update from the client's update PUB, which every collector receives.
    Kvset(KvMsg),
    /// An update a server published (to its peer's mirror and to the clients subscribed to it).
    Kvpub(KvMsg),
    /// ICANHAZ for a subtree on a snapshot ROUTER: a client's snapshot request or vote, a passive's mirror sync.
    Icanhaz(String),
    /// The snapshot of a subtree (KTHXBAI last), in answer to an ICANHAZ a server served.
    Snapshot(String, Vec<KvMsg>),
}

const PRIMARY: usize = 0;
const BACKUP: usize = 1;
const CLIENT: usize = 2;

/// One server of the simulated pair: the Binary Star engine and the Clone engine, wired as `server_loop` wires
/// them, with no sockets between them.
struct SimServer {
    me: usize,
    star: tickbox_bstar::BinaryStar,
    engine: tickbox_clone::engine::server::ServerEngine,
    /// The client's updates this server published (acknowledged), not yet taken by the test.
    acked: Vec<KvMsg>,
}

impl SimServer {
    fn start(me: usize, now: Instant) -> Box<dyn Node<Wire>> {
        let role = if me == PRIMARY {
            Role::Primary
        } else {
            Role::Backup
        };
        Box::new(SimServer {
            me,
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
            acked: Vec::new(),
        })
    }

    fn peer(&self) -> usize {
        1 - self.me
    }

    /// What `server_loop` does on a Binary Star transition.
    fn transition(&mut self, now: Instant, t: Transition, out: &mut Outbox<Wire>) {
        match t {
            Transition::BecameActive => self.engine.become_active(now),
            Transition::BecamePassive => {
                self.engine.become_passive();
                // The mirror sync: ICANHAZ "" to the active peer, its snapshot back.
                out.send(self.peer(), Wire::Icanhaz(String::new()));
            }
            Transition::None => {}
        }
    }

    /// Sends what the engines have to say: state frames to the peer, publications to the peer and the client.
    fn flush(&mut self, out: &mut Outbox<Wire>) {
        while let Some(frame) = self.star.poll_output() {
            out.send(self.peer(), Wire::State(frame));
        }
        while let Some(m) = self.engine.poll_output() {
            self.publish(m, out);
        }
    }

    fn publish(&mut self, m: KvMsg, out: &mut Outbox<Wire>) {
        if !m.is_delete() && m.key.starts_with("/w/") {
            self.acked.push(m.clone());
        }
        out.send(self.peer(), Wire::Kvpub(m.clone()));
        out.send(CLIENT, Wire::Kvpub(m));
    }
}

impl Node<Wire> for SimServer {
    fn poll_timeout(&self) -> Option<Instant> {
        self.star.poll_timeout().min(self.engine.poll_timeout())
    }

    fn handle_timeout(&mut self, now: Instant, out: &mut Outbox<Wire>) {
        self.star.handle_timeout(now);
        self.engine.handle_timeout(now);
        self.flush(out);
    }

    fn handle_message(&mut self, now: Instant, from: usize, msg: Wire, out: &mut Outbox<Wire>) {
        use tickbox_clone::engine::server::KvsetOutcome;
        match msg {
            Wire::State(frame) => {
                let t = self
                    .star
                    .handle_peer_frame(now, frame)
                    .expect("no dual active or dual passive");
                self.transition(now, t, out);
            }
            Wire::Kvset(m) => {
                if let KvsetOutcome::Published(m) = self.engine.handle_kvset(now, m) {
                    self.publish(m, out);
                }
            }
            Wire::Kvpub(m) => self.engine.handle_peer_kvpub(now, m),
            // An ICANHAZ on the snapshot ROUTER: the asker's vote first, then (if served) the snapshot.
            Wire::Icanhaz(subtree) => {
                let (vote, t) = self.star.handle_client_request(now);
                self.transition(now, t, out);
                if vote == tickbox_bstar::Vote::Accept {
                    let mut reply: Vec<KvMsg> = self.engine.snapshot(&subtree).cloned().collect();
                    reply.push(self.engine.kthxbai(&subtree));
                    out.send(from, Wire::Snapshot(subtree, reply));
                }
            }
            Wire::Snapshot(_, reply) => {
                for m in reply {
                    self.engine.handle_peer_snapshot(now, m);
                }
            }
        }
        self.flush(out);
    }
}

/// The client of the simulated pair: the Clone client engine, wired as `CloneClient` wires it, and a writer that
/// sends one update through its update PUB every [`WRITE_EVERY`] while it writes.
struct SimClient {
    engine: tickbox_clone::engine::client::ClientEngine,
    changes: Vec<tickbox_clone::Change>,
    next_write: Instant,
    writes_until: Instant,
    written: u64,
}

/// The writer's period.
const WRITE_EVERY: Duration = Duration::from_millis(10);

impl SimClient {
    fn do_actions(&mut self, out: &mut Outbox<Wire>) {
        use tickbox_clone::engine::client::{ClientAction, VOTE_SUBTREE};
        while let Some(action) = self.engine.poll_output() {
            let server = self.engine.current_server();
            match action {
                ClientAction::Connect(_) => {}
                ClientAction::Vote => out.send(server, Wire::Icanhaz(VOTE_SUBTREE.to_owned())),
                ClientAction::SendIcanhaz => out.send(server, Wire::Icanhaz(String::new())),
            }
        }
    }
}

impl Node<Wire> for SimClient {
    fn poll_timeout(&self) -> Option<Instant> {
        let write = (self.next_write <= self.writes_until).then_some(self.next_write);
        self.engine.poll_timeout().into_iter().chain(write).min()
    }

    fn handle_timeout(&mut self, now: Instant, out: &mut Outbox<Wire>) {
        if now >= self.next_write && self.next_write <= self.writes_until {
            self.next_write += WRITE_EVERY;
            self.written += 1;
            let n = self.written;
            let mut m = KvMsg::new(format!("/w/{n}"), 0, n.to_le_bytes().to_vec());
            m.uuid = Some(u128::from(n).to_be_bytes());
            out.send(PRIMARY, Wire::Kvset(m.clone()));
            out.send(BACKUP, Wire::Kvset(m));
        }
        self.engine.handle_timeout(now);
        self.do_actions(out);
    }

    fn handle_message(&mut self, now: Instant, from: usize, msg: Wire, out: &mut Outbox<Wire>) {
        // The SUB and the snapshot DEALER are connected to the current server only; the reply to a vote is not a
        // snapshot the client asked for, and it ignores it.
        if from == self.engine.current_server() {
            match msg {
                Wire::Kvpub(m) => self.engine.handle_update(now, m, &mut self.changes),
                Wire::Snapshot(subtree, reply) if subtree.is_empty() => {
                    for m in reply {
                        self.engine.handle_snapshot(now, m, &mut self.changes);
                    }
                }
                _ => {}
            }
        }
        self.do_actions(out);
    }
}

/// What the simulated scenario watches after every event.
#[derive(Default)]
struct Watch {
    /// Every client update a server published (acknowledged), by key.
    acked: BTreeMap<String, Vec<u8>>,
    /// When the backup first became active.
    backup_active_at: Option<Instant>,
    /// The primary was restarted: it must never be active again.
    restarted: bool,
}

impl Watch {
    /// Runs `sim` up to `until`, looking after every event.
    fn run(&mut self, sim: &mut Sim<Wire>, until: Instant) {
        while let Some(now) = sim.step(until) {
            for i in [PRIMARY, BACKUP] {
                if !sim.is_up(i) {
                    continue;
                }
                for m in std::mem::take(&mut sim.node_mut::<SimServer>(i).acked) {
                    self.acked.insert(m.key, m.value);
                }
            }
            if self.backup_active_at.is_none()
                && sim.node::<SimServer>(BACKUP).star.state() == State::Active
            {
                self.backup_active_at = Some(now);
            }
            if self.restarted {
                assert_ne!(
                    sim.node::<SimServer>(PRIMARY).star.state(),
                    State::Active,
                    "no failback"
                );
            }
        }
    }
}

/// The Binary Star timing of `options`: heartbeat 100 ms, peer expiry 200 ms.
fn sim_bstar() -> BstarConfig {
    BstarConfig {
        heartbeat: Duration::from_millis(100).into(),
        expiry_heartbeats: 2,
    }
}

/// The scenario of `primary_killed_under_load_backup_takes_over_nothing_acknowledged_lost_no_failback` with the
/// engines alone on simulated time (the testkit's `Sim`): Binary Star state frames, CHP updates and snapshots
/// pass between the engines in memory, and the clock jumps from one deadline or arrival to the next, so the
/// heartbeat expiry, the client's silence timeout, its vote and the takeover happen at instants this test can
/// state exactly, and 20 simulated seconds take milliseconds of real time.
#[test]
fn failover_on_simulated_time_engines_alone() {
    // The writer's period: the client last hears the primary within one of these before it dies.
    const STEP: Duration = WRITE_EVERY;
    let t0 = Instant::now();
    let client = SimClient {
        engine: tickbox_clone::engine::client::ClientEngine::new(client_config(), 2, "", t0),
        changes: Vec::new(),
        // The writer updates from 1 s on, and stops 2 s before the end so the last updates settle.
        next_write: t0 + Duration::from_secs(1),
        writes_until: t0 + Duration::from_secs(18) - WRITE_EVERY,
        written: 0,
    };
    let mut sim = Sim::new(
        t0,
        vec![
            SimServer::start(PRIMARY, t0),
            SimServer::start(BACKUP, t0),
            Box::new(client),
        ],
    );
    let mut watch = Watch::default();
    watch.run(&mut sim, t0 + Duration::from_secs(5));
    assert_eq!(sim.node::<SimServer>(PRIMARY).star.state(), State::Active);
    assert_eq!(sim.node::<SimServer>(BACKUP).star.state(), State::Passive);
    let client = &sim.node::<SimClient>(CLIENT).engine;
    assert!(client.is_live() && client.current_server() == 0);
    sim.kill(PRIMARY);
    let killed_at = sim.now();
    watch.run(&mut sim, t0 + Duration::from_secs(10));
    // The primary comes back: it must go passive and mirror the backup, never fail back.
    sim.restart(PRIMARY, SimServer::start(PRIMARY, sim.now()));
    watch.restarted = true;
    watch.run(&mut sim, t0 + Duration::from_secs(20));
    let Watch {
        acked,
        backup_active_at,
        ..
    } = watch;

    let takeover = backup_active_at.expect("the backup took over") - killed_at;
    // The client hears nothing for `server_ttl` (600 ms), fails over and votes 50 ms later; the backup's peer has
    // been silent far longer than its 200 ms expiry by then, so that vote is the takeover.
    let expected = Duration::from_millis(650);
    assert!(
        takeover >= expected - STEP && takeover <= expected + 2 * STEP,
        "takeover after {takeover:?}, expected about {expected:?}"
    );
    let servers = [
        sim.node::<SimServer>(PRIMARY),
        sim.node::<SimServer>(BACKUP),
    ];
    let client = sim.node::<SimClient>(CLIENT);
    let (changes, client) = (&client.changes, &client.engine);
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
