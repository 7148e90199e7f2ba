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
use tickbox_testkit::sim::{Node, Outbox, Sim};

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

    // The passive backup never serves while the primary is alive, even when asked directly: once it says it is
    // passive.
    assert!(
        tickbox_testkit::await_published(&ctx, &p("b-state"), Duration::from_secs(5), |f| {
            f == State::Passive.wire()
        }),
        "the backup never went passive"
    );
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

/// What passes between the simulated brokers and their client.
#[derive(Debug)]
enum Wire {
    /// A Binary Star state frame (state PUB to the peer's SUB).
    State(&'static [u8]),
    /// A client's request body for the `echo` service, on the broker's ROUTER.
    Request(Vec<u8>),
    /// A reply to the client: `["", "MDPC01", "echo", tag, body]`.
    Reply(Vec<Vec<u8>>),
}

const PRIMARY: usize = 0;
const BACKUP: usize = 1;
const CLIENT: usize = 2;

/// One broker of the simulated pair: its Binary Star engine (the gate), the broker engine and the one worker
/// registered with it, wired as `run_broker_pair` and `MdpWorker` wire them, with no sockets between them.
struct SimBroker {
    me: usize,
    star: tickbox_bstar::BinaryStar,
    broker: tickbox_majordomo::Broker,
    worker: tickbox_majordomo::engine::worker::WorkerEngine,
    tag: &'static [u8],
}

/// The client's and the worker's identities on a broker's ROUTER.
const CLIENT_ID: &[u8] = b"C";
const WORKER_ID: &[u8] = b"W";

impl SimBroker {
    fn start(me: usize, tag: &'static [u8], now: Instant) -> Box<dyn Node<Wire>> {
        let role = if me == PRIMARY {
            Role::Primary
        } else {
            Role::Backup
        };
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
        Box::new(SimBroker {
            me,
            star: tickbox_bstar::BinaryStar::new(role, &bstar, now),
            broker: tickbox_majordomo::Broker::new(cfg, now),
            worker,
            tag,
        })
    }

    /// Messages between the broker and its worker until both are quiet; replies go to the client, state frames
    /// to the peer.
    fn run(&mut self, now: Instant, out: &mut Outbox<Wire>) {
        use tickbox_majordomo::engine::worker::WorkerAction;
        while let Some(frame) = self.star.poll_output() {
            out.send(1 - self.me, Wire::State(frame));
        }
        loop {
            let mut quiet = true;
            while let Some(mut frames) = self.broker.poll_output() {
                quiet = false;
                let to = frames.remove(0);
                if to == CLIENT_ID {
                    out.send(CLIENT, Wire::Reply(frames));
                } else {
                    assert_eq!(to, WORKER_ID);
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
                let mut routed = vec![WORKER_ID.to_vec()];
                routed.extend(frames);
                self.broker.handle_input(now, routed);
            }
            if quiet {
                return;
            }
        }
    }
}

impl Node<Wire> for SimBroker {
    fn poll_timeout(&self) -> Option<Instant> {
        [
            self.star.poll_timeout(),
            self.broker.poll_timeout(),
            self.worker.poll_timeout(),
        ]
        .into_iter()
        .flatten()
        .min()
    }

    fn handle_timeout(&mut self, now: Instant, out: &mut Outbox<Wire>) {
        self.star.handle_timeout(now);
        self.broker.handle_timeout(now);
        self.worker.handle_timeout(now);
        self.run(now, out);
    }

    fn handle_message(&mut self, now: Instant, _from: usize, msg: Wire, out: &mut Outbox<Wire>) {
        match msg {
            Wire::State(frame) => {
                self.star
                    .handle_peer_frame(now, frame)
                    .expect("no dual active or dual passive");
            }
            // A client request arrives on the ROUTER: the Binary Star vote gates it, as `BstarGate::allow` does.
            Wire::Request(body) => {
                let (vote, _) = self.star.handle_client_request(now);
                if vote == tickbox_bstar::Vote::Accept {
                    let frames = [CLIENT_ID, b"", b"MDPC01", b"echo", &body];
                    self.broker
                        .handle_input(now, frames.iter().map(|f| f.to_vec()).collect());
                }
            }
            Wire::Reply(_) => unreachable!("brokers get no replies"),
        }
        self.run(now, out);
    }
}

/// The client of the simulated pair, as `Client::with_failover` behaves: a request waits [`TIMEOUT`] for its
/// reply, then goes to the other broker.
struct SimClient {
    /// Which broker it asks.
    current: usize,
    /// The request in flight and when it was sent.
    in_flight: Option<(Vec<u8>, Instant)>,
    replies: Vec<(Instant, Vec<Vec<u8>>)>,
    resends: u32,
}

const TIMEOUT: Duration = Duration::from_millis(500);

impl SimClient {
    fn request(&mut self, now: Instant, body: &[u8], out: &mut Outbox<Wire>) {
        self.in_flight = Some((body.to_vec(), now));
        out.send(self.current, Wire::Request(body.to_vec()));
    }
}

impl Node<Wire> for SimClient {
    fn poll_timeout(&self) -> Option<Instant> {
        self.in_flight.as_ref().map(|(_, sent)| *sent + TIMEOUT)
    }

    fn handle_timeout(&mut self, now: Instant, out: &mut Outbox<Wire>) {
        if let Some((body, sent)) = self.in_flight.clone() {
            if now - sent >= TIMEOUT {
                self.resends += 1;
                self.current = (self.current + 1) % 2;
                self.request(now, &body, out);
            }
        }
    }

    fn handle_message(&mut self, now: Instant, _from: usize, msg: Wire, _out: &mut Outbox<Wire>) {
        if let Wire::Reply(reply) = msg {
            self.in_flight = None;
            self.replies.push((now, reply));
        }
    }
}

/// `backup_takes_over_after_primary_dies_on_client_vote` with the engines alone on simulated time (the testkit's
/// `Sim`): two Binary Star engines gating two broker engines, each with a worker engine, and a client that fails
/// over after one 500 ms timeout, as `Client::with_failover` does. The clock jumps from one deadline or arrival to
/// the next, so the passive backup's refusal, the primary's death and the takeover on the first vote after the
/// peer expiry happen at exact instants, and the run takes milliseconds of real time.
#[test]
fn backup_takes_over_on_simulated_time_engines_alone() {
    let t0 = Instant::now();
    let client = SimClient {
        current: PRIMARY,
        in_flight: None,
        replies: Vec::new(),
        resends: 0,
    };
    let mut sim = Sim::new(
        t0,
        vec![
            SimBroker::start(PRIMARY, b"P", t0),
            SimBroker::start(BACKUP, b"B", t0),
            Box::new(client),
        ],
    );

    sim.run_until(t0 + Duration::from_secs(1));
    // The passive backup never serves while the primary is alive, even when asked directly.
    assert_eq!(sim.node::<SimBroker>(PRIMARY).star.state(), State::Active);
    assert_eq!(sim.node::<SimBroker>(BACKUP).star.state(), State::Passive);
    sim.send(CLIENT, BACKUP, Wire::Request(b"x".to_vec()));
    sim.run_until(t0 + Duration::from_millis(1500));
    sim.act(CLIENT, |c: &mut SimClient, now, out| {
        c.request(now, b"1", out)
    });
    sim.run_until(t0 + Duration::from_secs(2));
    sim.kill(PRIMARY);
    let killed_at = sim.now();
    sim.act(CLIENT, |c: &mut SimClient, now, out| {
        c.request(now, b"2", out)
    });
    sim.run_until(t0 + Duration::from_secs(5));

    let SimClient {
        replies, resends, ..
    } = sim.node::<SimClient>(CLIENT);
    let resends = *resends;
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
    let backup = sim.node::<SimBroker>(BACKUP);
    assert_eq!(backup.star.state(), State::Active);
    assert_eq!(backup.broker.stats().replies, 1);
}
