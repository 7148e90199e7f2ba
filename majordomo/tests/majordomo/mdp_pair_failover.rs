//! A Majordomo broker pair under Binary Star: the backup serves only after the primary is gone and a client
//! asks; a client with both endpoints fails over with one timeout.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use tickbox_bstar::{BstarConfig, BstarEndpoints, Role, State};
use tickbox_majordomo::{
    run_broker_pair, BrokerConfig, Client, ClientConfig, MdpWorker, MdpWorkerConfig, PairOptions,
};

type Member = (Arc<AtomicBool>, JoinHandle<State>);

fn member(ctx: &zmq::Context, ep: &str, role: Role, state_bind: &str, state_peer: &str) -> Member {
    let stop = Arc::new(AtomicBool::new(false));
    let pair = PairOptions {
        role,
        state: BstarEndpoints {
            state_bind: state_bind.into(),
            state_peer: state_peer.into(),
        },
        bstar: BstarConfig {
            heartbeat: std::time::Duration::from_millis(100).into(),
            expiry_heartbeats: 2,
        },
    };
    let cfg = BrokerConfig {
        heartbeat_interval: Duration::from_millis(100).into(),
        ..Default::default()
    };
    let (c, e, s) = (ctx.clone(), ep.to_string(), Arc::clone(&stop));
    let (tx, rx) = std::sync::mpsc::channel();
    let h = std::thread::spawn(move || {
        run_broker_pair(&tickbox_auth::Gate::open(&c), &e, cfg, &pair, &s, Some(tx))
            .unwrap()
            .1
    });
    rx.recv_timeout(Duration::from_secs(5)).unwrap();
    (stop, h)
}

fn worker(
    ctx: &zmq::Context,
    ep: &str,
    tag: &'static str,
    stop: &Arc<AtomicBool>,
) -> JoinHandle<()> {
    let (c, e, s) = (ctx.clone(), ep.to_string(), Arc::clone(stop));
    let cfg = MdpWorkerConfig {
        heartbeat_interval: Duration::from_millis(100).into(),
        reconnect: Duration::from_millis(100).into(),
        ..Default::default()
    };
    std::thread::spawn(move || {
        let mut w = MdpWorker::connect(&c, &e, "echo", cfg).unwrap();
        w.serve(&s, |b| vec![tag.as_bytes().to_vec(), b[0].clone()])
            .unwrap();
    })
}

#[test]
fn backup_takes_over_after_primary_dies_on_client_vote() {
    let ctx = zmq::Context::new();
    let dir = tempfile::tempdir().unwrap();
    let p = |n: &str| format!("ipc://{}/{n}", dir.path().display());
    let (primary_ep, backup_ep) = (p("primary"), p("backup"));
    let primary = member(
        &ctx,
        &primary_ep,
        Role::Primary,
        &p("p-state"),
        &p("b-state"),
    );
    let backup = member(&ctx, &backup_ep, Role::Backup, &p("b-state"), &p("p-state"));
    let wstop = Arc::new(AtomicBool::new(false));
    let workers = [
        worker(&ctx, &primary_ep, "P", &wstop),
        worker(&ctx, &backup_ep, "B", &wstop),
    ];

    // The passive backup never serves while the primary is alive, even when asked directly.
    std::thread::sleep(Duration::from_millis(300));
    let mut direct = Client::new(
        &ctx,
        &backup_ep,
        ClientConfig {
            timeout: Duration::from_millis(300).into(),
            attempts: 1,
        },
    );
    assert!(
        direct.request("echo", &[b"x".to_vec()]).is_err(),
        "passive backup must drop requests"
    );

    let eps = vec![primary_ep.clone(), backup_ep.clone()];
    let mut client = Client::with_failover(
        &ctx,
        &eps,
        ClientConfig {
            timeout: Duration::from_millis(500).into(),
            attempts: 4,
        },
    );
    assert_eq!(
        client.request("echo", &[b"1".to_vec()]).unwrap(),
        vec![b"P".to_vec(), b"1".to_vec()]
    );

    primary.0.store(true, Ordering::Relaxed);
    assert_eq!(primary.1.join().unwrap(), State::Active);
    let r = client.request("echo", &[b"2".to_vec()]).unwrap();
    assert_eq!(
        r,
        vec![b"B".to_vec(), b"2".to_vec()],
        "served by the backup after failover"
    );
    assert_eq!(client.resends, 1, "exactly one timeout");
    assert_eq!(client.request("echo", &[b"3".to_vec()]).unwrap()[0], b"B");

    wstop.store(true, Ordering::Relaxed);
    for w in workers {
        w.join().unwrap();
    }
    backup.0.store(true, Ordering::Relaxed);
    assert_eq!(backup.1.join().unwrap(), State::Active);
}

/// One broker of the simulated pair: its Binary Star engine (the gate), the broker engine and the one worker
/// registered with it, wired as `run_broker_pair` and `MdpWorker` wire them, with no sockets between them.
struct SimBroker {
    star: tickbox_bstar::BinaryStar,
    broker: tickbox_majordomo::Broker,
    worker: tickbox_majordomo::engine::worker::WorkerEngine,
    tag: &'static [u8],
    alive: bool,
}

/// The client's and the worker's identities on a broker's ROUTER.
const CLIENT: &[u8] = b"C";
const WORKER: &[u8] = b"W";

impl SimBroker {
    fn start(role: Role, tag: &'static [u8], now: Instant) -> SimBroker {
        let bstar = BstarConfig {
            heartbeat: Duration::from_millis(100).into(),
            expiry_heartbeats: 2,
        };
        let cfg = BrokerConfig {
            heartbeat_interval: Duration::from_millis(100).into(),
            ..Default::default()
        };
        let wcfg = MdpWorkerConfig {
            heartbeat_interval: Duration::from_millis(100).into(),
            reconnect: Duration::from_millis(100).into(),
            ..Default::default()
        };
        let mut worker = tickbox_majordomo::engine::worker::WorkerEngine::new(&wcfg, b"echo", now);
        worker.connected(now);
        SimBroker {
            star: tickbox_bstar::BinaryStar::new(role, &bstar, now),
            broker: tickbox_majordomo::Broker::new(cfg, now),
            worker,
            tag,
            alive: true,
        }
    }

    /// A client request arrives on the ROUTER: the Binary Star vote gates it, as `BstarGate::allow` does.
    fn request(&mut self, now: Instant, body: &[u8]) {
        if !self.alive {
            return;
        }
        let (vote, _) = self.star.handle_client_request(now);
        if vote == tickbox_bstar::Vote::Accept {
            let frames = [CLIENT, b"", b"MDPC01", b"echo", body];
            self.broker
                .handle_input(now, frames.iter().map(|f| f.to_vec()).collect());
        }
    }

    /// Timers, then messages between the broker and its worker until both are quiet; returns the replies for
    /// the client.
    fn run(&mut self, now: Instant) -> Vec<Vec<Vec<u8>>> {
        use tickbox_majordomo::engine::worker::WorkerAction;
        let mut replies = Vec::new();
        if !self.alive {
            return replies;
        }
        self.broker.handle_timeout(now);
        self.worker.handle_timeout(now);
        loop {
            let mut quiet = true;
            while let Some(mut frames) = self.broker.poll_output() {
                quiet = false;
                let to = frames.remove(0);
                if to == CLIENT {
                    replies.push(frames);
                } else {
                    assert_eq!(to, WORKER);
                    self.worker.handle_input(now, frames);
                }
            }
            while let Some(action) = self.worker.poll_output() {
                quiet = false;
                let frames = match action {
                    WorkerAction::Send(frames) => frames,
                    WorkerAction::Deliver(req) => {
                        let body = vec![self.tag.to_vec(), req.body[0].clone()];
                        self.worker.reply(now, req.client, body, false)
                    }
                    WorkerAction::Reconnect { .. } => panic!("the worker lost a live broker"),
                };
                let mut routed = vec![WORKER.to_vec()];
                routed.extend(frames);
                self.broker.handle_input(now, routed);
            }
            if quiet {
                return replies;
            }
        }
    }
}

/// One turn of the pair at `now`: Binary Star heartbeats between live members, then each member's broker and
/// worker. Returns the replies for the client.
fn sim_turn(pair: &mut [SimBroker; 2], now: Instant) -> Vec<Vec<Vec<u8>>> {
    for i in 0..2 {
        if !pair[i].alive {
            continue;
        }
        pair[i].star.handle_timeout(now);
        while let Some(frame) = pair[i].star.poll_output() {
            if pair[1 - i].alive {
                pair[1 - i]
                    .star
                    .handle_peer_frame(now, frame)
                    .expect("no dual active or dual passive");
            }
        }
    }
    let mut replies = pair[0].run(now);
    replies.extend(pair[1].run(now));
    replies
}

/// `backup_takes_over_after_primary_dies_on_client_vote` with the engines alone on simulated time: two Binary
/// Star engines gating two broker engines, each with a worker engine, and a client that fails over after one
/// 500 ms timeout, as `Client::with_failover` does. A synthetic clock moves in 10 ms steps, so the passive
/// backup's refusal, the primary's death and the takeover on the first vote after the peer expiry happen at
/// exact instants, and the run takes milliseconds of real time.
#[test]
fn backup_takes_over_on_simulated_time_engines_alone() {
    const STEP: Duration = Duration::from_millis(10);
    const TIMEOUT: Duration = Duration::from_millis(500);
    let t0 = Instant::now();
    let mut now = t0;
    let mut pair = [
        SimBroker::start(Role::Primary, b"P", now),
        SimBroker::start(Role::Backup, b"B", now),
    ];
    // The client: which broker it asks, the request in flight and when it was sent, the replies and timeouts.
    let mut current = 0usize;
    let mut in_flight: Option<(Vec<u8>, Instant)> = None;
    let mut replies: Vec<(Instant, Vec<Vec<u8>>)> = Vec::new();
    let mut resends = 0;
    let mut killed_at = None;

    while now < t0 + Duration::from_secs(5) {
        now += STEP;
        let elapsed = now - t0;
        if elapsed == Duration::from_secs(1) {
            // The passive backup never serves while the primary is alive, even when asked directly.
            assert_eq!(pair[0].star.state(), State::Active);
            assert_eq!(pair[1].star.state(), State::Passive);
            pair[1].request(now, b"x");
        }
        if elapsed == Duration::from_millis(1500) {
            in_flight = Some((b"1".to_vec(), now));
            pair[current].request(now, b"1");
        }
        if elapsed == Duration::from_secs(2) {
            pair[0].alive = false;
            killed_at = Some(now);
            in_flight = Some((b"2".to_vec(), now));
            pair[current].request(now, b"2");
        }
        for reply in sim_turn(&mut pair, now) {
            in_flight = None;
            replies.push((now, reply));
        }
        if let Some((body, sent)) = in_flight.clone() {
            if now - sent >= TIMEOUT {
                resends += 1;
                current = (current + 1) % 2;
                in_flight = Some((body.clone(), now));
                pair[current].request(now, &body);
                for reply in sim_turn(&mut pair, now) {
                    in_flight = None;
                    replies.push((now, reply));
                }
            }
        }
    }

    let killed_at = killed_at.unwrap();
    // A reply is ["", "MDPC01", "echo", tag, body].
    let served: Vec<_> = replies
        .iter()
        .map(|(at, r)| (*at - t0, r[3..].to_vec()))
        .collect();
    assert_eq!(
        served,
        vec![
            (
                Duration::from_millis(1500),
                vec![b"P".to_vec(), b"1".to_vec()]
            ),
            // One timeout after the primary died, the backup's peer expiry (200 ms) long past: the vote is the
            // takeover and the same request is served by the backup's worker.
            (killed_at + TIMEOUT - t0, vec![b"B".to_vec(), b"2".to_vec()]),
        ],
        "the passive backup dropped \"x\"; the primary served \"1\"; the backup served \"2\""
    );
    assert_eq!(resends, 1, "exactly one timeout");
    assert_eq!(pair[1].star.state(), State::Active);
    assert_eq!(pair[1].broker.stats().replies, 1);
}
