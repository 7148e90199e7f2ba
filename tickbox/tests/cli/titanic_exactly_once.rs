//! Titanic's delivery guarantee with real `tickbox broker` and `tickbox titanic` processes: a Titanic killed
//! with SIGKILL while the service runs a job, and a service slower than the dispatch timeout, never make the
//! job run twice, and the client always learns the outcome (see the `tickbox_majordomo::titanic` docs).
//!
//! The service is an `MdpWorker` in the test process whose job sleeps and counts how often it started.

use crate::common;

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::mpsc::Receiver;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use common::{spawn_with_lines as spawn, KillOnDrop, TempDir};
use tickbox_majordomo::{Client, ClientConfig, MdpWorker, MdpWorkerConfig};

fn first_line(rx: &Receiver<String>) -> String {
    rx.recv_timeout(Duration::from_secs(10))
        .expect("process printed nothing within 10 s")
}

fn start_broker() -> (KillOnDrop, String) {
    let (b, rx) = spawn(&[
        "broker",
        "--bind",
        "tcp://127.0.0.1:*",
        "--heartbeat",
        "100ms",
    ]);
    let line = first_line(&rx);
    let ep = line
        .strip_prefix("broker listening on ")
        .unwrap_or_else(|| panic!("unexpected: {line}"))
        .to_string();
    (b, ep)
}

fn start_titanic(ep: &str, dir: &str, extra: &[&str]) -> (KillOnDrop, String) {
    let mut args = vec![
        "titanic",
        "--broker",
        ep,
        "--dir",
        dir,
        "--heartbeat",
        "100ms",
        "--scan",
        "50ms",
    ];
    args.extend_from_slice(extra);
    let (p, rx) = spawn(&args);
    let ready = first_line(&rx);
    assert!(ready.starts_with("titanic ready"), "{ready}");
    (p, ready)
}

/// The service: each job sleeps `job` and answers `done:<body>`; `started` counts executions.
struct Service {
    started: Arc<AtomicU32>,
    finished: Arc<AtomicU32>,
    stop: Arc<AtomicBool>,
    handle: Option<JoinHandle<u64>>,
}

impl Service {
    fn start(ep: &str, name: &'static str, job: Duration, dedupe: bool) -> Self {
        let started = Arc::new(AtomicU32::new(0));
        let finished = Arc::new(AtomicU32::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let (e, n, s) = (ep.to_string(), Arc::clone(&started), Arc::clone(&stop));
        let f = Arc::clone(&finished);
        let handle = Some(std::thread::spawn(move || {
            let ctx = zmq::Context::new();
            let cfg = MdpWorkerConfig {
                heartbeat_interval: Duration::from_millis(100).into(),
                reconnect: Duration::from_millis(100).into(),
                ..Default::default()
            };
            let mut w = MdpWorker::connect(&ctx, &e, name, cfg).unwrap();
            if dedupe {
                w.dedupe(1000, 1 << 20);
            }
            w.serve(&s, |b| {
                n.fetch_add(1, Ordering::SeqCst);
                std::thread::sleep(job);
                f.fetch_add(1, Ordering::SeqCst);
                vec![[b"done:".as_slice(), &b[0]].concat()]
            })
            .unwrap();
            w.dedupe_cache().map_or(0, |c| c.hits)
        }));
        Self {
            started,
            finished,
            stop,
            handle,
        }
    }

    fn started(&self) -> u32 {
        self.started.load(Ordering::SeqCst)
    }

    /// Jobs done (their reply handed to the worker).
    fn finished(&self) -> u32 {
        self.finished.load(Ordering::SeqCst)
    }

    /// Stops the worker and returns how many re-sent requests its dedupe cache answered.
    fn finish(mut self) -> u64 {
        self.stop.store(true, Ordering::Relaxed);
        self.handle.take().unwrap().join().unwrap()
    }
}

impl Drop for Service {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

struct Tsp {
    client: Client,
}

impl Tsp {
    fn new(ctx: &zmq::Context, ep: &str) -> Self {
        let cfg = ClientConfig {
            timeout: Duration::from_millis(500).into(),
            attempts: 1,
        };
        Self {
            client: Client::new(ctx, ep, cfg),
        }
    }

    fn request(&mut self, service: &str, body: &str) -> String {
        let end = Instant::now() + Duration::from_secs(10);
        loop {
            if let Ok(r) = self
                .client
                .request("titanic.request", &[service.into(), body.into()])
            {
                assert_eq!(r[0], b"200");
                return String::from_utf8(r[1].clone()).unwrap();
            }
            assert!(Instant::now() < end, "titanic.request never answered");
        }
    }

    /// Polls `titanic.reply` until it is no longer 300 (or Titanic is unreachable), within `limit`.
    fn outcome(&mut self, uuid: &str, limit: Duration) -> Vec<String> {
        let end = Instant::now() + limit;
        loop {
            if let Ok(r) = self.client.request("titanic.reply", &[uuid.into()]) {
                if r[0] != b"300" {
                    return r
                        .iter()
                        .map(|f| String::from_utf8_lossy(f).into_owned())
                        .collect();
                }
            }
            assert!(
                Instant::now() < end,
                "titanic.reply still pending after {limit:?}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

fn wait_until(limit: Duration, what: &str, cond: impl Fn() -> bool) {
    tickbox_testkit::wait_for(what, limit, cond);
}

fn kill9(p: &mut KillOnDrop) {
    p.0.kill().unwrap();
    p.0.wait().unwrap();
}

#[test]
fn titanic_killed_mid_job_listens_again_and_the_job_runs_once() {
    let dir = TempDir::new("cli-titanic-eo");
    let jdir = dir.path().join("j");
    let jdir = jdir.to_str().unwrap();
    let (_broker, ep) = start_broker();
    let (mut titanic, _) = start_titanic(&ep, jdir, &[]);
    let svc = Service::start(&ep, "slowjob", Duration::from_millis(2000), false);
    let ctx = zmq::Context::new();
    let mut tsp = Tsp::new(&ctx, &ep);
    let uuid = tsp.request("slowjob", "payload-a");
    wait_until(Duration::from_secs(10), "the job to start", || {
        svc.started() == 1
    });

    // SIGKILL while the job runs: the DISPATCH record is all the next Titanic knows.
    kill9(&mut titanic);
    let (_titanic, ready) = start_titanic(&ep, jdir, &[]);
    assert!(
        ready.contains("1 open requests (1 awaiting a reply)")
            && ready.contains("1 of them were dispatched before the restart"),
        "{ready}"
    );
    let t0 = Instant::now();
    assert_eq!(
        tsp.outcome(&uuid, Duration::from_secs(15)),
        vec!["200", "done:payload-a"]
    );
    println!("reply after restart in {:?}", t0.elapsed());
    // A duplicate would start as soon as the worker is free again: give it the time to show up.
    std::thread::sleep(Duration::from_millis(1000));
    assert_eq!(svc.started(), 1, "the job ran exactly once");
    assert_eq!(svc.finish(), 0);
}

#[test]
fn reply_lost_while_titanic_was_down_is_reported_outcome_unknown_never_rerun() {
    let dir = TempDir::new("cli-titanic-eo");
    let jdir = dir.path().join("j");
    let jdir = jdir.to_str().unwrap();
    let (_broker, ep) = start_broker();
    let (mut titanic, _) = start_titanic(&ep, jdir, &[]);
    let svc = Service::start(&ep, "slowjob", Duration::from_millis(1500), false);
    let ctx = zmq::Context::new();
    let mut tsp = Tsp::new(&ctx, &ep);
    let uuid = tsp.request("slowjob", "payload-b");
    wait_until(Duration::from_secs(10), "the job to start", || {
        svc.started() == 1
    });
    kill9(&mut titanic);
    // The job finishes while no Titanic exists: the broker drops the reply.
    wait_until(Duration::from_secs(10), "the job to finish", || {
        svc.finished() == 1
    });
    // Default policy (redispatch = never): listen until the attempt's job_timeout, then report a final status a
    // client can act on (9/TSP's 500 would mean "try again later", forever): 400, outcome unknown.
    let (_titanic, _) = start_titanic(&ep, jdir, &["--job-timeout", "3000ms"]);
    let outcome = tsp.outcome(&uuid, Duration::from_secs(15));
    assert_eq!(outcome.len(), 2, "{outcome:?}");
    assert_eq!(outcome[0], "400", "{outcome:?}");
    assert!(
        outcome[1].starts_with("outcome unknown") && outcome[1].contains("not sent again"),
        "{outcome:?}"
    );
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(svc.started(), 1, "at most once: never re-sent");
}

#[test]
fn reply_lost_while_titanic_was_down_is_recovered_from_a_deduping_service() {
    let dir = TempDir::new("cli-titanic-eo");
    let jdir = dir.path().join("j");
    let jdir = jdir.to_str().unwrap();
    let (_broker, ep) = start_broker();
    let (mut titanic, _) = start_titanic(&ep, jdir, &[]);
    let svc = Service::start(&ep, "slowjob", Duration::from_millis(1500), true);
    let ctx = zmq::Context::new();
    let mut tsp = Tsp::new(&ctx, &ep);
    let uuid = tsp.request("slowjob", "payload-c");
    wait_until(Duration::from_secs(10), "the job to start", || {
        svc.started() == 1
    });
    kill9(&mut titanic);
    // The job finishes while no Titanic exists.
    wait_until(Duration::from_secs(10), "the job to finish", || {
        svc.finished() == 1
    });
    // redispatch = after_timeout re-sends under the same request id; the service answers from its cache.
    let (_titanic, _) = start_titanic(
        &ep,
        jdir,
        &["--job-timeout", "3000ms", "--redispatch", "after-timeout"],
    );
    assert_eq!(
        tsp.outcome(&uuid, Duration::from_secs(15)),
        vec!["200", "done:payload-c"]
    );
    assert_eq!(svc.started(), 1, "exactly once");
    assert_eq!(
        svc.finish(),
        1,
        "the re-sent request was answered by the dedupe cache"
    );
}

#[test]
fn service_slower_than_the_dispatch_timeout_runs_once_and_the_client_gets_the_reply() {
    let dir = TempDir::new("cli-titanic-eo");
    let jdir = dir.path().join("j");
    let jdir = jdir.to_str().unwrap();
    let (_broker, ep) = start_broker();
    // Default dispatch_timeout (5 s) and policy; the job takes longer than the dispatch timeout.
    let (_titanic, _) = start_titanic(&ep, jdir, &[]);
    let svc = Service::start(&ep, "slowjob", Duration::from_millis(6000), false);
    let ctx = zmq::Context::new();
    let mut tsp = Tsp::new(&ctx, &ep);
    let t0 = Instant::now();
    let uuid = tsp.request("slowjob", "payload-d");
    assert_eq!(
        tsp.outcome(&uuid, Duration::from_secs(15)),
        vec!["200", "done:payload-d"]
    );
    let took = t0.elapsed();
    println!("slow job answered after {took:?}");
    assert!(took >= Duration::from_millis(6000));
    std::thread::sleep(Duration::from_millis(1000));
    assert_eq!(svc.started(), 1, "no duplicate while the first attempt ran");
}
