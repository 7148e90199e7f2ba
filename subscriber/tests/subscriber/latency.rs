//! The receive clock and the inline hand-off, checked against known truths.
//!
//! A shard reads the clock after each frame leaves its socket. Each stall test holds the shard mid-burst (an
//! inline worker that blocks on one record, on the shard's own thread), sends more records while it is held, then
//! lets it go. Those records cannot have been taken off the socket before the release, so their reported receive
//! times must come after it. A clock read once per burst would judge them against a time from before they were
//! sent: negative delays, missed snail fires, and, in skew-tolerant mode, a negative offset that then fires the
//! snail on on-time records.

use std::sync::mpsc;
use std::time::Duration;

use tickbox_subscriber::{
    Fatal, Handoff, HumanDuration, SnailMode, Stage, Subscriber, SubscriberConfig, SubscriberError,
    SubscriberShardConfig,
};
use tickbox_wire::{now_ns, BatchBuilder, Kind, MessageRef};
use tickbox_workers::{Delivery, Worker, WorkerPoolConfig};

/// The sequence at which the stalling worker holds its shard.
const STALL_AT: u64 = 10;
/// How long it holds it.
const STALL: Duration = Duration::from_millis(100);

fn quote(seq: u64, send_ns: u64) -> Vec<u8> {
    tickbox_testkit::quote(&format!("Q.XNAS.S{}", seq % 7), 1, seq)
        .sent_at(send_ns)
        .session(5)
        .frame()
}

/// Records what it saw (sequence, the time it was handed the record); at `STALL_AT` it tells the test and blocks
/// until released, holding its shard.
struct Staller {
    seen: Vec<(u64, u64)>,
    stalled: Option<mpsc::Sender<()>>,
    release: Option<mpsc::Receiver<()>>,
}

impl Worker for Staller {
    fn on_message(&mut self, msg: &MessageRef<'_>, d: &Delivery) {
        let seq = msg.header().sequence;
        if msg.kind() == Kind::Heartbeat {
            return;
        }
        self.seen.push((seq, d.dequeued_ns));
        if seq == STALL_AT {
            if let (Some(stalled), Some(release)) = (self.stalled.take(), self.release.take()) {
                stalled.send(()).unwrap();
                release
                    .recv_timeout(Duration::from_secs(10))
                    .expect("the test releases the stall");
            }
        }
    }
}

struct Rig {
    xpub: zmq::Socket,
    sub: Subscriber<Staller>,
    stalled: mpsc::Receiver<()>,
    release: mpsc::Sender<()>,
}

/// An XPUB (inproc, so transit is a few µs), a one-shard inline subscriber with the stalling worker, connected.
fn rig(ctx: &zmq::Context, name: &str, mode: SnailMode, max_lateness: Duration) -> Rig {
    let xpub = ctx.socket(zmq::XPUB).unwrap();
    xpub.set_linger(1_000).unwrap();
    xpub.set_sndhwm(0).unwrap();
    let endpoint = format!("inproc://latency-{name}-{}", std::process::id());
    xpub.bind(&endpoint).unwrap();
    let config = SubscriberConfig {
        shards: vec![SubscriberShardConfig {
            connect: vec![endpoint],
            ..SubscriberShardConfig::default()
        }],
        handoff: Handoff::Inline,
        snail_mode: mode,
        max_lateness: HumanDuration(max_lateness),
        ..SubscriberConfig::default()
    };
    let pool = WorkerPoolConfig {
        count: Some(1),
        ..WorkerPoolConfig::default()
    };
    let (stalled_tx, stalled) = mpsc::channel();
    let (release, release_rx) = mpsc::channel();
    let mut parts = Some((stalled_tx, release_rx));
    let sub = Subscriber::start(ctx, &config, &pool, move |_| {
        let (s, r) = parts.take().expect("one worker");
        Staller {
            seen: Vec::new(),
            stalled: Some(s),
            release: Some(r),
        }
    })
    .unwrap();
    xpub.set_rcvtimeo(10_000).unwrap();
    loop {
        let event = xpub.recv_bytes(0).expect("no subscription within 10 s");
        if event.first() == Some(&1) && event.len() == 1 {
            break;
        }
    }
    Rig {
        xpub,
        sub,
        stalled,
        release,
    }
}

/// Sends 1..=STALL_AT on time and waits until the worker holds the shard at `STALL_AT`.
fn stall(rig: &Rig) {
    for seq in 1..=STALL_AT {
        rig.xpub.send(quote(seq, now_ns()), 0).unwrap();
    }
    rig.stalled
        .recv_timeout(Duration::from_secs(10))
        .expect("the worker reached the stall");
    // The stall itself: the shard is held this long mid-burst, as by a slow worker. Long beside the thresholds
    // below, so a loaded machine's scheduling delays cannot be mistaken for the fault being tested.
    std::thread::sleep(STALL);
}

/// Waits (bounded) until the subscriber trips or has forwarded `n` records.
fn wait_for(sub: &Subscriber<Staller>, n: u64) {
    tickbox_testkit::wait_until(Duration::from_secs(10), || {
        sub.is_tripped() || sub.forwarded() >= n
    });
}

#[test]
fn a_record_sent_while_the_shard_is_held_is_judged_after_it_arrived() {
    let ctx = zmq::Context::new();
    let rig = rig(
        &ctx,
        "strict",
        SnailMode::Strict,
        Duration::from_millis(100),
    );
    stall(&rig);
    // On time, then one stamped 150 ms in the past (its true lateness is that plus its wait for the shard).
    let on_time = now_ns();
    rig.xpub.send(quote(STALL_AT + 1, on_time), 0).unwrap();
    let stamped = now_ns() - 150_000_000;
    rig.xpub.send(quote(STALL_AT + 2, stamped), 0).unwrap();
    let released = now_ns();
    rig.release.send(()).unwrap();
    wait_for(&rig.sub, STALL_AT + 2);
    let seen_trip = now_ns();
    let report = rig.sub.shutdown().unwrap();
    let event = match &report.fatal {
        Some(Fatal::Snail(e)) => e.clone(),
        other => panic!("expected the snail at {}, got {other:?}", STALL_AT + 2),
    };
    assert_eq!((event.stage, event.sequence), (Stage::Shard, STALL_AT + 2));
    // The truth lies between the release (it cannot have left the socket earlier) and the moment the test saw
    // the trip; a clock read before the stall reads ~100 ms low and misses the fire altogether.
    let (low, high) = (released - stamped, seen_trip - stamped);
    assert!(
        (low..=high).contains(&event.lateness_ns),
        "lateness {} ns outside the truth's bounds {low}..={high}",
        event.lateness_ns
    );
    assert!(event.received_ns >= released, "{event:?}");
    // The on-time record sent during the stall was received after it was sent, not 100 ms before.
    let worker = &report.workers[0].worker;
    let (_, got) = worker
        .seen
        .iter()
        .copied()
        .find(|(s, _)| *s == STALL_AT + 1)
        .expect("the on-time record reached the worker");
    assert!(got >= released, "received {got} before release {released}");
    for offset in &report.clock_offsets {
        assert!(
            offset.offset_ns >= 0,
            "negative delay in one process: {offset:?}"
        );
    }
}

#[test]
fn skew_tolerant_mode_never_fires_on_time_after_a_held_burst_and_fires_on_a_late_record() {
    let ctx = zmq::Context::new();
    let rig = rig(
        &ctx,
        "skew",
        SnailMode::SkewTolerant,
        Duration::from_millis(50),
    );
    stall(&rig);
    // Sent during the stall, on time: a clock read before the stall would learn a -100 ms offset from it and add
    // 100 ms to every later record's lateness.
    rig.xpub.send(quote(STALL_AT + 1, now_ns()), 0).unwrap();
    rig.release.send(()).unwrap();
    let last_on_time = STALL_AT + 200;
    for seq in STALL_AT + 2..=last_on_time {
        rig.xpub.send(quote(seq, now_ns()), 0).unwrap();
    }
    wait_for(&rig.sub, last_on_time);
    assert!(
        !rig.sub.is_tripped(),
        "fired on an on-time record: {:?}",
        rig.sub.fatal()
    );
    assert_eq!(rig.sub.forwarded(), last_on_time);
    for offset in rig.sub.clock_offsets() {
        assert!(
            offset.offset_ns >= 0,
            "negative delay in one process: {offset:?}"
        );
    }
    // Now one 150 ms late: skew-tolerant lateness is its delay less the publisher's best delay (a few µs here).
    let sent = now_ns();
    let stamped = sent - 150_000_000;
    rig.xpub.send(quote(last_on_time + 1, stamped), 0).unwrap();
    wait_for(&rig.sub, last_on_time + 1);
    let seen_trip = now_ns();
    let report = rig.sub.shutdown().unwrap();
    let event = match &report.fatal {
        Some(Fatal::Snail(e)) => e.clone(),
        other => panic!("expected the snail, got {other:?}"),
    };
    assert_eq!(event.sequence, last_on_time + 1);
    // Skew-tolerant lateness is the delay less the publisher's best delay (what an on-time record took to get
    // off the socket). Its truth lies between the delay this record had when sent and the delay when the test
    // saw the trip, each less that best delay.
    let best = report.clock_offsets[0].offset_ns;
    assert!(best >= 0, "negative delay in one process: {best}");
    let (low, high) = (
        (sent - stamped) as i64 - best,
        (seen_trip - stamped) as i64 - best,
    );
    assert!(
        (low..=high).contains(&(event.lateness_ns as i64)),
        "lateness {} ns outside the truth's bounds {low}..={high} (best delay {best} ns)",
        event.lateness_ns
    );
}

/// Counts and orders what it gets.
#[derive(Default)]
struct Tally(Vec<u64>);

impl Worker for Tally {
    fn on_message(&mut self, msg: &MessageRef<'_>, _d: &Delivery) {
        if msg.kind() != Kind::Heartbeat {
            self.0.push(msg.header().sequence);
        }
    }
}

#[test]
fn inline_handoff_gives_every_record_to_the_shards_own_worker_once_in_order() {
    let ctx = zmq::Context::new();
    let xpubs: Vec<zmq::Socket> = (0..2)
        .map(|i| {
            let x = ctx.socket(zmq::XPUB).unwrap();
            x.set_linger(1_000).unwrap();
            x.set_sndhwm(0).unwrap();
            x.bind(&format!("inproc://inline-{i}-{}", std::process::id()))
                .unwrap();
            x.set_rcvtimeo(10_000).unwrap();
            x
        })
        .collect();
    let config = SubscriberConfig {
        shards: (0..2)
            .map(|i| SubscriberShardConfig {
                connect: vec![format!("inproc://inline-{i}-{}", std::process::id())],
                ..SubscriberShardConfig::default()
            })
            .collect(),
        handoff: Handoff::Inline,
        ..SubscriberConfig::default()
    };
    let pool = |count| WorkerPoolConfig {
        count,
        ..WorkerPoolConfig::default()
    };
    // One worker per shard, or a clear error.
    match Subscriber::start(&ctx, &config, &pool(Some(3)), |_| Tally::default()) {
        Err(SubscriberError::Config(msg)) => {
            assert!(msg.contains("as many workers as shards"), "{msg}")
        }
        Err(other) => panic!("expected a config error, got {other}"),
        Ok(_) => panic!("3 workers for 2 inline shards was accepted"),
    }
    let sub = Subscriber::start(&ctx, &config, &pool(Some(2)), |_| Tally::default()).unwrap();
    for x in &xpubs {
        loop {
            let event = x.recv_bytes(0).expect("subscription");
            if event == [1] {
                break;
            }
        }
    }
    // Shard 0 gets single frames, shard 1 batches (records shared out of one received frame).
    const N: u64 = 2_000;
    for seq in 1..=N {
        xpubs[0].send(quote(seq, now_ns()), 0).unwrap();
    }
    let mut batch = BatchBuilder::new(64 * 1024, 50);
    for seq in 1..=N {
        let frame = quote(seq, now_ns());
        if !batch.try_push(&frame) {
            xpubs[1].send(batch.frame(), 0).unwrap();
            batch.clear();
            assert!(batch.try_push(&frame));
        }
    }
    xpubs[1].send(batch.frame(), 0).unwrap();
    tickbox_testkit::wait_until(Duration::from_secs(10), || sub.forwarded() >= 2 * N);
    let report = sub.shutdown().unwrap();
    assert_eq!(report.unprocessed, 0);
    assert_eq!(report.workers.len(), 2);
    for w in &report.workers {
        assert_eq!(
            w.worker.0,
            (1..=N).collect::<Vec<_>>(),
            "worker {}",
            w.index
        );
        assert_eq!(w.processed, N);
    }
    // Worker i is shard i's.
    for shard in &report.shards {
        assert_eq!(shard.forwarded_per_worker[shard.index], N);
        assert_eq!(shard.forwarded_per_worker.iter().sum::<u64>(), N);
    }
    assert!(report.batches() >= N / 50);
    drop(xpubs);
}
